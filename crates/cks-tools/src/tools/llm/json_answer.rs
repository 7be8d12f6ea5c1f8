//! One call to the configured LLM whose answer is a small JSON decision (an object, or an array
//! for a batch): what the conflict tools that let a model decide share.

use crate::ErrorCode;
use serde_json::Value;

use cks_llm::ChatRequest;

use super::construct_knowledge::{Extraction, first_json, prefix};
use super::llm_error;
use crate::context::ToolContext;
use crate::error::ToolError;

/// Most characters of a model's answer quoted back in a parse error.
const RAW_OUTPUT_CHARS: usize = 1000;

/// A model's answer, read as JSON.
pub(crate) struct JsonAnswer {
    pub(crate) value: Value,
    /// The model that answered (redacted).
    pub(crate) model: String,
    pub(crate) provider: &'static str,
}

/// A model's answer as text.
#[derive(Debug)]
pub struct TextAnswer {
    /// The answer, with anything the client knows to be secret redacted.
    pub text: String,
    /// The model that answered (redacted).
    pub model: String,
    pub provider: &'static str,
    /// Input and output tokens the call cost.
    pub tokens: u64,
}

/// Sends `request` and takes the first JSON object (with `array`, array) from the answer.
///
/// Errors, as the reference reports them: a provider that is not configured or failed is
/// `internal_error` ("Internal error: `{what}` failed: ...", `error_kind` tells which), an answer
/// without such JSON is `llm_output_parse_error` with the start of the answer in `raw_output`, and
/// a call the caller gave up on is `cancelled`.
pub(crate) async fn ask_json(
    ctx: &ToolContext,
    request: ChatRequest,
    array: bool,
    tool: &str,
    what: &str,
) -> Result<JsonAnswer, ToolError> {
    let answer = ask_text(ctx, request, tool).await.map_err(|mut error| {
        if matches!(error.code, ErrorCode::LlmProviderUnavailable | ErrorCode::LlmCallFailed) {
            error.code = ErrorCode::InternalError;
            error.message = format!("Internal error: {what} failed: {}", error.message);
        }
        error
    })?;
    let value = parse_json(&answer.text, array)?;
    Ok(JsonAnswer { value, model: answer.model, provider: answer.provider })
}

/// Sends `request` and returns the answer's text.
///
/// Errors: a provider that is not configured is `llm_provider_unavailable`, one that failed
/// `llm_call_failed`, each with the failure as it is (its class, the provider, the model and the
/// HTTP status where there was one; `error_kind` tells which); a call the caller gave up on is
/// `cancelled`.
pub async fn ask_text(ctx: &ToolContext, request: ChatRequest, tool: &str) -> Result<TextAnswer, ToolError> {
    let client = ctx.llm.client()?;
    let response = tokio::select! {
        response = client.chat(request) => response.map_err(|e| llm_error(&e))?,
        () = ctx.cancel.cancelled() => {
            return Err(ToolError::new(ErrorCode::Cancelled, format!("{tool} was cancelled before the model answered.")));
        }
    };
    let redactor = &client.config().redactor;
    Ok(TextAnswer {
        text: redactor.redact(&response.text()),
        model: redactor.redact(&response.model),
        provider: response.provider.as_str(),
        tokens: response.usage.input_tokens + response.usage.output_tokens,
    })
}

/// The first JSON object (with `array`, array) in a model's answer; `llm_output_parse_error`, with
/// the start of the answer in `raw_output`, when there is none.
pub fn parse_json(raw: &str, array: bool) -> Result<Value, ToolError> {
    first_json(raw, array).map_err(|why| {
        let message = match why {
            Extraction::NoJson if array => "No JSON array found in the model's answer.".to_owned(),
            Extraction::NoJson => "No JSON object found in the model's answer.".to_owned(),
            Extraction::Truncated => "The model's answer ends inside an unfinished JSON value.".to_owned(),
            Extraction::NotJson(detail) => format!("The model's answer holds no well-formed JSON: {detail}"),
        };
        ToolError::new(ErrorCode::LlmOutputParseError, message).with("raw_output", prefix(raw, RAW_OUTPUT_CHARS))
    })
}
