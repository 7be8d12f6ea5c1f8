//! `list_llm_models`: the models the current provider offers, from its own model-list endpoint
//! (Ollama `/api/tags`, OpenAI-compatible `/models`, Anthropic and Gemini model lists), cached by
//! the client for `CKS_LLM_MODELS_TTL_SECONDS`.
//!
//! The reference's shape `{provider, models: [{name}]}` is kept for cks-studio (`display_name` is
//! added where the provider gives one). With no usable provider the result is
//! `{provider: "none", models: []}` as in the reference; a provider that fails to answer gives
//! `llm_call_failed`, still carrying `provider` and an empty `models`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use cks_llm::ErrorKind;

use crate::context::{LlmAccess, ToolContext};
use crate::error::ToolError;
use crate::tool::{Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    /// The provider asked, or `none`.
    provider: String,
    models: Vec<Model>,
    /// Why no provider is usable, when none is.
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Model {
    /// The id to pass as 'model'.
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    display_name: Option<String>,
}

pub(crate) struct ListLlmModels;

#[async_trait::async_trait]
impl Tool for ListLlmModels {
    type Input = Input;
    type Output = Output;
    const TITLE: &'static str = "List LLM models";
    const META: ToolMeta = ToolMeta {
        name: "list_llm_models",
        description: "List the models of the LLM provider that construct_knowledge and ai_chat would use now \
            (same selection as get_llm_status), e.g. for a model picker before passing 'model' to those tools. \
            Asks the provider's own model-list endpoint (Ollama: the installed models); results are cached for \
            CKS_LLM_MODELS_TTL_SECONDS (default 300). Returns {provider, models: [{name, display_name?}]}; \
            provider 'none' with an empty list when no provider is usable.",
        mutates_graph: false,
        creates_session: false,
        destructive: false,
        idempotent: true,
        open_world: true,
        session_fields: &[],
        session_checks: &[],
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, _input: Input) -> Result<Output, ToolError> {
        let client = match &ctx.llm {
            LlmAccess::Ready(client) => client,
            LlmAccess::Misconfigured(message) => return Ok(none(message)),
            LlmAccess::Absent => return Ok(none("No LLM client is configured.")),
        };
        let provider = match client.provider().await {
            Ok(kind) => kind,
            Err(e) if e.kind() == ErrorKind::NotConfigured => return Ok(none(&e.to_string())),
            Err(e) => return Err(super::llm_error(&e)),
        };
        match client.list_models().await {
            Ok(models) => {
                let models = models.into_iter().map(|m| Model { name: m.id, display_name: m.display_name }).collect();
                Ok(Output { provider: provider.as_str().to_owned(), models, message: None })
            }
            Err(e) => Err(super::llm_error(&e).with("provider", provider.as_str()).with("models", json!([]))),
        }
    }
}

fn none(message: &str) -> Output {
    Output { provider: "none".into(), models: Vec::new(), message: Some(message.to_owned()) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{TEST_KEY, call, context, llm_context, llm_env};
    use cks_testkit::ProviderServer;

    #[tokio::test]
    async fn anthropic_models() {
        let server = ProviderServer::start().await;
        let ctx = llm_context(&llm_env("anthropic", &server.base_url()));
        let result = call(&ctx, "list_llm_models", json!({})).await;
        assert_eq!(
            result,
            json!({"provider": "anthropic", "models": [
                {"name": "claude-sonnet-4-5", "display_name": "Claude Sonnet 4.5"},
                {"name": "claude-haiku-4-5", "display_name": "Claude Haiku 4.5"},
            ]})
        );
    }

    #[tokio::test]
    async fn gemini_and_ollama_models() {
        let server = ProviderServer::start().await;
        let result = call(&llm_context(&llm_env("google", &server.base_url())), "list_llm_models", json!({})).await;
        assert_eq!(result["provider"], "google");
        let names: Vec<&str> =
            result["models"].as_array().unwrap().iter().map(|m| m["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["gemini-2.5-flash", "gemini-2.5-pro"]);
        let result = call(&llm_context(&llm_env("ollama", &server.base_url())), "list_llm_models", json!({})).await;
        assert_eq!(result["provider"], "ollama");
        assert!(!result["models"].as_array().unwrap().is_empty(), "{result}");
        assert!(result["models"].as_array().unwrap().iter().all(|m| m["name"].is_string()));
    }

    #[tokio::test]
    async fn no_provider_and_a_failing_provider() {
        let result = call(&context(), "list_llm_models", json!({})).await;
        assert_eq!(result, json!({"provider": "none", "models": [], "message": "No LLM client is configured."}));

        // Nothing listens on the port of a dropped server: the provider cannot be reached.
        let base = {
            let server = ProviderServer::start().await;
            server.base_url()
        };
        let ctx = llm_context(&llm_env("anthropic", &base));
        let result = call(&ctx, "list_llm_models", json!({})).await;
        assert_eq!(result["error"], "llm_call_failed", "{result}");
        assert_eq!(result["provider"], "anthropic");
        assert_eq!(result["models"], json!([]));
        assert!(!result.to_string().contains(TEST_KEY));
    }
}
