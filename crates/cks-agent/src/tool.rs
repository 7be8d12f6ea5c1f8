//! The `ai_chat` tool: one stateless chat turn. The caller sends the whole history (Anthropic
//! Messages shape) and gets it back with the turn appended, ready to send again.
//!
//! The caller's messages are returned exactly as sent (so `{"role":"user","content":"hi"}` stays
//! a string-content message); only the messages this turn adds are in our normalised block form.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use cks_llm::{ErrorKind, Message};
use cks_tools::{ProgressSink, SessionCheck, Tool, ToolContext, ToolError, ToolMeta};

use crate::executor::RegistryExecutor;
use crate::turn::{ChatModel, Stop, ToolCallRecord, TurnConfig, TurnObserver, run_turn};

/// Settings of `ai_chat`, from the environment.
#[derive(Debug, Clone)]
pub struct AiChatConfig {
    pub turn: TurnConfig,
}

impl Default for AiChatConfig {
    fn default() -> Self {
        AiChatConfig { turn: TurnConfig { system: Some(SYSTEM_PROMPT.to_owned()), ..TurnConfig::default() } }
    }
}

impl AiChatConfig {
    /// Reads `CKS_AI_CHAT_MAX_ITERATIONS`, `CKS_AI_CHAT_TIMEOUT_SECONDS`, `CKS_AI_CHAT_MAX_TOKENS` and
    /// `CKS_AI_CHAT_TOOL_RESULT_MAX_BYTES`; unset or unparsable values keep the defaults.
    pub fn from_env(env: &HashMap<String, String>) -> Self {
        let mut config = AiChatConfig::default();
        let number = |name: &str| env.get(name).and_then(|v| v.trim().parse::<u64>().ok());
        if let Some(n) = number("CKS_AI_CHAT_MAX_ITERATIONS").filter(|n| *n > 0) {
            config.turn.max_iterations = n as usize;
        }
        if let Some(s) = number("CKS_AI_CHAT_TIMEOUT_SECONDS").filter(|n| *n > 0) {
            config.turn.deadline = Duration::from_secs(s);
        }
        config.turn.token_budget = number("CKS_AI_CHAT_MAX_TOKENS").filter(|n| *n > 0);
        if let Some(n) = number("CKS_AI_CHAT_TOOL_RESULT_MAX_BYTES").filter(|n| *n > 0) {
            config.turn.tool_result_cap = n as usize;
        }
        config
    }
}

const SYSTEM_PROMPT: &str = "You help a person work with one knowledge graph (a CKS session) using the tools \
provided. Every tool already acts on this chat's session; never ask for or invent session ids. Objects have an \
identity {id, type, name} and a free-form structure; relations are objects whose structure lists 'participants' \
(object ids) and a 'relation_type'. Look before you change: use query_subgraph or search_semantic to find objects, \
suggest_evolution to dry-run changes, then evolve_knowledge to commit them. When a tool reports an error, read it \
and either fix the call or explain the problem. Answer concisely.";

#[derive(Debug, Deserialize, JsonSchema)]
pub struct Input {
    /// The session this turn works on; every tool call the model makes is pinned to it.
    pub session_id: String,
    /// The conversation so far (Anthropic Messages shape), as returned by the previous turn. When
    /// non-empty, `prompt` is ignored.
    #[serde(default)]
    #[schemars(schema_with = "messages_schema")]
    pub messages: Vec<Value>,
    /// Starts a new conversation with this user message (used only when `messages` is empty).
    pub prompt: Option<String>,
    /// Model to use for this turn, overriding the provider's configured default (the provider
    /// itself is chosen by CKS_LLM_PROVIDER).
    pub model: Option<String>,
}

fn messages_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::Schema::try_from(json!({
        "type": "array",
        "items": {"type": "object"},
        "description": "The conversation so far: [{\"role\": \"user\"|\"assistant\", \"content\": string or content blocks}]. Pass back the 'messages' of the previous turn unchanged, plus the new user message."
    }))
    .expect("a schema object")
}

/// The `ai_chat` tool.
#[derive(Clone, Default)]
pub struct AiChat {
    config: AiChatConfig,
    /// Answers instead of the context's LLM client when set (scripted models in tests).
    model: Option<Arc<dyn ChatModel>>,
}

impl std::fmt::Debug for AiChat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AiChat").field("config", &self.config).field("scripted_model", &self.model.is_some()).finish()
    }
}

impl AiChat {
    pub fn new(config: AiChatConfig) -> Self {
        AiChat { config, model: None }
    }

    /// A tool that asks `model` instead of the configured LLM client.
    pub fn with_model(config: AiChatConfig, model: Arc<dyn ChatModel>) -> Self {
        AiChat { config, model: Some(model) }
    }
}

struct Progress {
    sink: Arc<dyn ProgressSink>,
    step: std::sync::atomic::AtomicU64,
}

impl Progress {
    fn report(&self, message: String) {
        let step = self.step.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        self.sink.report(step as f64, None, Some(message));
    }
}

impl TurnObserver for Progress {
    fn llm_call(&self, iteration: usize) {
        self.report(format!("LLM round trip {}", iteration + 1));
    }

    fn tool_call(&self, name: &str) {
        self.report(format!("tool {name}"));
    }
}

struct Quiet;
impl TurnObserver for Quiet {}

fn records(calls: &[ToolCallRecord]) -> Value {
    calls
        .iter()
        .map(|c| json!({"name": c.name, "arguments": c.arguments, "result": c.result, "is_error": c.is_error}))
        .collect()
}

fn messages_out(raw: Vec<Value>, new: &[Message]) -> Value {
    let mut out = raw;
    out.extend(new.iter().map(|m| serde_json::to_value(m).unwrap_or(Value::Null)));
    Value::Array(out)
}

/// The result of a turn that ended without an LLM error.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Output {
    /// The model's final text.
    reply: String,
    /// Every tool call of the turn, in order.
    tool_calls: Vec<ToolCall>,
    /// The caller's messages as sent, then this turn's, ready to send back with the next message.
    messages: Vec<Value>,
    /// The turn stopped early (iteration cap, deadline or token budget).
    #[serde(skip_serializing_if = "Option::is_none")]
    truncated: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    truncation_reason: Option<String>,
    /// The turn was cancelled.
    #[serde(skip_serializing_if = "Option::is_none")]
    cancelled: Option<bool>,
    /// The provider that answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    provider: Option<String>,
    /// The model that answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<String>,
    usage: TurnUsage,
}

/// One tool call the model made.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ToolCall {
    name: String,
    /// The arguments as run (session arguments pinned).
    arguments: Value,
    /// The tool's result (a business error is a result too).
    result: Value,
    is_error: bool,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct TurnUsage {
    input_tokens: u64,
    output_tokens: u64,
    /// LLM round trips.
    llm_calls: usize,
}

#[async_trait::async_trait]
impl Tool for AiChat {
    type Input = Input;
    type Output = Output;
    const META: ToolMeta = ToolMeta {
        name: "ai_chat",
        description: "One chat turn with an LLM (Ollama, Anthropic, Google Gemini or an OpenAI-compatible endpoint, \
            chosen by CKS_LLM_PROVIDER) that may call this server's graph tools, server-side, on this session only: \
            every session argument of every call is pinned to 'session_id'. Send 'prompt' to start, or the previous \
            'messages' plus a new user message to continue (the server keeps no chat state). Returns {reply, \
            tool_calls: [{name, arguments, result, is_error}], messages}; 'truncated': true (with \
            'truncation_reason') when the turn hit its iteration cap (8 by default), deadline or token budget. \
            Errors: llm_call_failed / llm_provider_unavailable, still with 'messages' and 'tool_calls'.",
        mutates_graph: true,
        creates_session: false,
        destructive: false,
        idempotent: false,
        open_world: true,
        session_fields: &["session_id"],
        session_checks: &[SessionCheck::open("session_id")],
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        let raw: Vec<Value> = if !input.messages.is_empty() {
            input.messages
        } else {
            match input.prompt.filter(|p| !p.trim().is_empty()) {
                Some(prompt) => vec![json!({"role": "user", "content": prompt})],
                None => {
                    return Err(ToolError::new(
                        "missing_parameter",
                        "Missing required parameter: 'prompt' (or a non-empty 'messages').",
                    )
                    .with("parameter", "prompt"));
                }
            }
        };
        let history: Vec<Message> = raw
            .iter()
            .enumerate()
            .map(|(i, m)| {
                serde_json::from_value::<Message>(m.clone()).map_err(|e| {
                    ToolError::invalid_parameter(format!("messages[{i}] is not a valid message: {e}"))
                        .with("parameter", "messages")
                })
            })
            .collect::<Result<_, _>>()?;
        let chat_model: &dyn ChatModel = match &self.model {
            Some(model) => model.as_ref(),
            None => ctx
                .llm
                .client()
                .map_err(|e| e.with("tool_calls", json!([])).with("messages", Value::Array(raw.clone())))?,
        };
        let registry = ctx
            .registry
            .clone()
            .ok_or_else(|| ToolError::internal("ai_chat needs the tool registry in its context"))?;
        let executor = RegistryExecutor::new(registry, ctx.clone(), input.session_id.clone());
        let mut config = self.config.turn.clone();
        if let Some(model) = input.model.filter(|m| !m.trim().is_empty()) {
            config.model = Some(model);
        }
        let progress = ctx.progress.clone().map(|sink| Progress { sink, step: Default::default() });
        let observer: &dyn TurnObserver = match &progress {
            Some(p) => p,
            None => &Quiet,
        };
        match run_turn(chat_model, &executor, &history, &config, observer, &ctx.cancel).await {
            Ok(output) => {
                let truncation_reason = output.stop.truncation_reason().map(str::to_owned);
                let (provider, model) = output.answered_by.unzip();
                let messages = match messages_out(raw, &output.new_messages) {
                    Value::Array(items) => items,
                    _ => Vec::new(),
                };
                Ok(Output {
                    reply: output.reply,
                    tool_calls: output
                        .tool_calls
                        .into_iter()
                        .map(|c| ToolCall {
                            name: c.name,
                            arguments: c.arguments,
                            result: c.result,
                            is_error: c.is_error,
                        })
                        .collect(),
                    messages,
                    truncated: truncation_reason.is_some().then_some(true),
                    truncation_reason,
                    cancelled: (output.stop == Stop::Cancelled).then_some(true),
                    provider,
                    model,
                    usage: TurnUsage {
                        input_tokens: output.usage.input_tokens,
                        output_tokens: output.usage.output_tokens,
                        llm_calls: output.llm_calls,
                    },
                })
            }
            Err(failure) => {
                let code = if failure.error.kind() == ErrorKind::NotConfigured {
                    "llm_provider_unavailable"
                } else {
                    "llm_call_failed"
                };
                Err(ToolError::new(code, failure.error.to_string())
                    .with("tool_calls", records(&failure.tool_calls))
                    .with("messages", messages_out(raw, &failure.new_messages)))
            }
        }
    }
}
