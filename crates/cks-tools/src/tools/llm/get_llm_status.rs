//! `get_llm_status`: which provider `construct_knowledge` and `ai_chat` would use, whether it is
//! configured and whether it answers — without revealing any key.
//!
//! The reference's keys are kept (`provider`, `ollama_available`, `<provider>_configured`, `model`)
//! for cks-studio; `selection`, `configured`, `reachable` and `message` are added.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use cks_llm::{LlmConfig, ProviderKind};

use crate::context::{LlmAccess, ToolContext};
use crate::error::ToolError;
use crate::tool::{Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    /// `ollama`, `anthropic`, `openai_compatible`, `google`, or `none`.
    provider: String,
    /// The model the provider would use (null without a provider).
    model: Option<String>,
    /// What `CKS_LLM_PROVIDER` asks for (`auto` or a provider name; null without a client).
    selection: Option<String>,
    /// The provider has what it needs (a key, a base URL).
    configured: bool,
    /// The provider answered a model-list request.
    reachable: bool,
    /// Ollama is the provider and answers.
    ollama_available: bool,
    anthropic_configured: bool,
    openai_compatible_configured: bool,
    google_configured: bool,
    /// Why the provider is not usable, when it is not.
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

pub(crate) struct GetLlmStatus;

#[async_trait::async_trait]
impl Tool for GetLlmStatus {
    type Input = Input;
    type Output = Output;
    const TITLE: &'static str = "LLM provider status";
    const META: ToolMeta = ToolMeta {
        name: "get_llm_status",
        description: "Report which LLM provider construct_knowledge and ai_chat would use now and whether it \
            can answer, without exposing any API key. The provider follows CKS_LLM_PROVIDER (an explicit \
            choice wins; 'auto' prefers a reachable local Ollama, then Anthropic when ANTHROPIC_API_KEY is set). \
            Makes at most one cheap model-list request to check reachability, never a chat call. Returns \
            {provider: ollama|anthropic|openai_compatible|google|none, model, selection, configured, reachable, \
            ollama_available, anthropic_configured, openai_compatible_configured, google_configured, message?}.",
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
            LlmAccess::Misconfigured(message) => return Ok(unavailable(Some(message))),
            LlmAccess::Absent => return Ok(unavailable(None)),
        };
        let status = client.status().await;
        let config = client.config();
        let redact = |text: &str| config.redactor.redact(text);
        // Ollama's reachability is known only when it is the provider asked (or chosen by `auto`,
        // which probes it first).
        let ollama_available = status.provider == Some(ProviderKind::Ollama) && status.reachable;
        Ok(Output {
            provider: status.provider.map_or("none", ProviderKind::as_str).to_owned(),
            model: status.model.as_deref().map(redact),
            selection: Some(status.selection.to_string()),
            configured: status.configured,
            reachable: status.reachable,
            ollama_available,
            anthropic_configured: configured(config, ProviderKind::Anthropic),
            openai_compatible_configured: configured(config, ProviderKind::OpenaiCompatible),
            google_configured: configured(config, ProviderKind::Google),
            message: status.message.as_deref().map(redact),
        })
    }
}

/// Whether a provider that needs a key has one.
fn configured(config: &LlmConfig, kind: ProviderKind) -> bool {
    config.provider_config(kind).check_ready().is_ok()
}

/// The status when there is no usable client at all.
fn unavailable(message: Option<&str>) -> Output {
    Output {
        provider: "none".into(),
        model: None,
        selection: None,
        configured: false,
        reachable: false,
        ollama_available: false,
        anthropic_configured: false,
        openai_compatible_configured: false,
        google_configured: false,
        message: Some(message.unwrap_or("No LLM client is configured.").to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::testing::{TEST_KEY, call, context, llm_context, llm_env};
    use cks_testkit::ProviderServer;

    #[tokio::test]
    async fn a_configured_provider_that_answers() {
        let server = ProviderServer::start().await;
        let ctx = llm_context(&llm_env("anthropic", &server.base_url()));
        let result = call(&ctx, "get_llm_status", json!({})).await;
        assert_eq!(
            result,
            json!({
                "provider": "anthropic",
                "model": ctx.llm.client().unwrap().config().provider_config(cks_llm::ProviderKind::Anthropic).model,
                "selection": "anthropic",
                "configured": true,
                "reachable": true,
                "ollama_available": false,
                "anthropic_configured": true,
                "openai_compatible_configured": true,
                "google_configured": true,
            })
        );
        assert!(server.requests().iter().all(|r| r.method == "GET"), "no chat call");
    }

    /// The reference reports CKS_LLM_MODEL as Anthropic's model when CKS_ANTHROPIC_MODEL is unset.
    #[tokio::test]
    async fn cks_llm_model_is_the_anthropic_model_reported() {
        let server = ProviderServer::start().await;
        let mut env = llm_env("anthropic", &server.base_url());
        env.push(("CKS_LLM_MODEL".into(), "claude-from-llm-model".into()));
        let result = call(&llm_context(&env), "get_llm_status", json!({})).await;
        assert_eq!(result["model"], "claude-from-llm-model");
    }

    #[tokio::test]
    async fn auto_finds_ollama() {
        let server = ProviderServer::start().await;
        let mut env = llm_env("auto", &server.base_url());
        env.retain(|(k, _)| k != "CKS_LLM_PROVIDER");
        env.push(("CKS_OLLAMA_MODEL".into(), "llama-test".into()));
        let result = call(&llm_context(&env), "get_llm_status", json!({})).await;
        assert_eq!(result["provider"], "ollama");
        assert_eq!(result["selection"], "auto");
        assert_eq!(result["model"], "llama-test");
        assert_eq!(result["ollama_available"], true);
        assert_eq!(result["reachable"], true);
    }

    #[tokio::test]
    async fn a_chosen_provider_without_its_key() {
        let server = ProviderServer::start().await;
        let env: Vec<_> =
            llm_env("google", &server.base_url()).into_iter().filter(|(k, _)| !k.contains("GOOGLE_API_KEY")).collect();
        let result = call(&llm_context(&env), "get_llm_status", json!({})).await;
        assert_eq!(result["provider"], "google");
        assert_eq!(result["configured"], false);
        assert_eq!(result["reachable"], false);
        assert_eq!(result["google_configured"], false);
        assert_eq!(result["anthropic_configured"], true);
        assert!(result["message"].as_str().unwrap().contains("GOOGLE_API_KEY"));
        assert!(!result.to_string().contains(TEST_KEY));
        assert!(server.requests().is_empty());
    }

    #[tokio::test]
    async fn no_client() {
        let result = call(&context(), "get_llm_status", json!({})).await;
        assert_eq!(result["provider"], "none");
        assert_eq!(result["model"], Value::Null);
        assert_eq!(result["configured"], false);
        let result = call(&context(), "get_llm_status", json!({"extra": 1})).await;
        assert_eq!(result["provider"], "none", "unknown arguments are ignored, as in the reference");
    }
}
