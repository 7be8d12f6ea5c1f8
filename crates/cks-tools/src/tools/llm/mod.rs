//! Tools backed by the LLM client: building a structure from text, provider status, model lists,
//! and the metrics dashboard (which includes LLM call telemetry).
//!
//! None is offered to the LLM inside `ai_chat`: a chat model has no business spawning sessions,
//! listing models or reading server metrics.

pub(crate) mod construct_knowledge;
mod get_llm_status;
mod get_metrics;
pub(crate) mod json_answer;
mod list_llm_models;

use crate::ErrorCode;
use cks_llm::LlmError;

use crate::error::ToolError;
use crate::tool::{Listed, listed};

pub(crate) fn tools() -> Vec<Listed> {
    vec![
        listed(construct_knowledge::ConstructKnowledge),
        listed(get_llm_status::GetLlmStatus),
        listed(list_llm_models::ListLlmModels),
        listed(get_metrics::GetMetrics),
    ]
}

/// An LLM failure as a tool error: `llm_provider_unavailable` when no provider is usable, else
/// `llm_call_failed`. The client has already redacted every configured secret from the message.
pub(crate) fn llm_error(error: &LlmError) -> ToolError {
    let code = match error.kind() {
        cks_llm::ErrorKind::NotConfigured => ErrorCode::LlmProviderUnavailable,
        _ => ErrorCode::LlmCallFailed,
    };
    let mut tool_error = ToolError::new(code, error.to_string()).with("error_kind", json_kind(error));
    if let Some(provider) = error.context().provider {
        tool_error = tool_error.with("provider", provider.as_str());
    }
    tool_error
}

fn json_kind(error: &LlmError) -> serde_json::Value {
    serde_json::to_value(error.kind()).unwrap_or(serde_json::Value::Null)
}
