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

/// A limit variable whose value is not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{variable}={value:?} is not valid: {problem}; expected {expected}")]
pub struct AiChatConfigError {
    pub variable: &'static str,
    pub value: String,
    pub problem: String,
    pub expected: &'static str,
}

/// The limit variables of `ai_chat` and what each bounds. Each is a whole number of at least 1.
pub const AI_CHAT_VARIABLES: [(&str, &str); 7] = [
    ("CKS_AI_CHAT_MAX_ITERATIONS", "LLM round trips per turn"),
    ("CKS_AI_CHAT_TIMEOUT_SECONDS", "deadline of one turn, in seconds"),
    ("CKS_AI_CHAT_MAX_TOKENS", "token budget of one turn (input + output tokens)"),
    ("CKS_AI_CHAT_MAX_OUTPUT_TOKENS", "output tokens per LLM call"),
    ("CKS_AI_CHAT_MAX_TOOL_CALLS", "tool calls run per LLM answer"),
    ("CKS_AI_CHAT_TOOL_RESULT_MAX_BYTES", "bytes of one tool result sent to the LLM"),
    ("CKS_AI_CHAT_RESULT_MAX_BYTES", "bytes of the recorded tool calls in one turn's result"),
];

impl AiChatConfig {
    /// Reads the limit variables ([`AI_CHAT_VARIABLES`]); unset (or empty) ones keep their
    /// defaults, and a value that is not a whole number from 1 up is an error naming the variable.
    pub fn from_env(env: &HashMap<String, String>) -> Result<Self, AiChatConfigError> {
        let mut config = AiChatConfig::default();
        let number = |name: &'static str| -> Result<Option<u64>, AiChatConfigError> {
            let Some(raw) = env.get(name).filter(|v| !v.trim().is_empty()) else { return Ok(None) };
            let error = |problem: String| AiChatConfigError {
                variable: name,
                value: raw.clone(),
                problem,
                expected: "a whole number of at least 1 (e.g. 8), or unset for the default",
            };
            match raw.trim().parse::<u64>() {
                Ok(0) => Err(error("0 is not a usable limit".into())),
                Ok(n) => Ok(Some(n)),
                Err(e) => Err(error(format!("not a whole number ({e})"))),
            }
        };
        let size = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        if let Some(n) = number("CKS_AI_CHAT_MAX_ITERATIONS")? {
            config.turn.max_iterations = size(n);
        }
        if let Some(s) = number("CKS_AI_CHAT_TIMEOUT_SECONDS")? {
            config.turn.deadline = Duration::from_secs(s);
        }
        config.turn.token_budget = number("CKS_AI_CHAT_MAX_TOKENS")?;
        if let Some(n) = number("CKS_AI_CHAT_MAX_OUTPUT_TOKENS")? {
            config.turn.max_tokens = Some(u32::try_from(n).unwrap_or(u32::MAX));
        }
        if let Some(n) = number("CKS_AI_CHAT_MAX_TOOL_CALLS")? {
            config.turn.max_tool_calls_per_answer = size(n);
        }
        if let Some(n) = number("CKS_AI_CHAT_TOOL_RESULT_MAX_BYTES")? {
            config.turn.tool_result_cap = size(n);
        }
        if let Some(n) = number("CKS_AI_CHAT_RESULT_MAX_BYTES")? {
            config.turn.max_result_bytes = size(n);
        }
        Ok(config)
    }
}

/// Short on purpose: every token of it is sent with every round trip, and small local models
/// follow a few plain rules better than many.
pub const SYSTEM_PROMPT: &str = "You work on one knowledge graph with the tools provided; they always act on this \
chat's graph, so never pass session ids. To read or list objects use query_subgraph; to find an object by name use \
search_semantic; to add or change objects use evolve_knowledge. Version tools are only for the graph's history. \
When a tool reports an error, fix the call or explain the problem. Answer briefly.";

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

/// The calls as a JSON list, for error results (which carry the calls made so far).
fn records(calls: &[ToolCallRecord]) -> Value {
    serde_json::to_value(calls.iter().map(ToolCall::from).collect::<Vec<_>>()).unwrap_or(Value::Null)
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
    /// The turn stopped early (iteration cap, deadline, token budget, repeated calls) or its
    /// results were cut to the size bound.
    #[serde(skip_serializing_if = "Option::is_none")]
    truncated: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    truncation_reason: Option<String>,
    /// How many tool results were replaced by a marker to keep the turn's result bounded.
    #[serde(skip_serializing_if = "Option::is_none")]
    results_omitted: Option<usize>,
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
    /// The model wrote this call as text; it was recognised and run as a call.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    recovered_from_text: bool,
    /// A repeat of the call at this index, answered from its result.
    #[serde(skip_serializing_if = "Option::is_none")]
    repeat_of: Option<usize>,
}

impl From<&ToolCallRecord> for ToolCall {
    fn from(c: &ToolCallRecord) -> Self {
        ToolCall {
            name: c.name.clone(),
            arguments: c.arguments.clone(),
            result: c.result.clone(),
            is_error: c.is_error,
            recovered_from_text: c.recovered_from_text,
            repeat_of: c.repeat_of,
        }
    }
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct TurnUsage {
    input_tokens: u64,
    output_tokens: u64,
    /// LLM requests sent, retries included.
    llm_calls: usize,
}

impl TurnUsage {
    fn new(usage: cks_llm::Usage, llm_calls: usize) -> Self {
        TurnUsage { input_tokens: usage.input_tokens, output_tokens: usage.output_tokens, llm_calls }
    }
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
            tool_calls: [{name, arguments, result, is_error}], messages, usage}; 'truncated': true (with \
            'truncation_reason') when the turn hit its iteration cap (8 by default), deadline, token budget, a \
            model repeating itself, or the size bound of its result. The model may revert the session to an \
            earlier version. Errors: llm_call_failed / llm_provider_unavailable, still with 'messages' and \
            'tool_calls'.",
        mutates_graph: true,
        creates_session: false,
        // The model may call revert_version, which replaces the current state.
        destructive: true,
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
        if let Some(model) = input.model.map(|m| m.trim().to_owned()).filter(|m| !m.is_empty()) {
            cks_llm::check_model_name(&model).map_err(|why| {
                ToolError::invalid_parameter(format!("'model': {why}"))
                    .with("parameter", "model")
                    .with("tool_calls", json!([]))
                    .with("messages", Value::Array(raw.clone()))
            })?;
            config.model = Some(model);
        }
        let progress = ctx.progress.clone().map(|sink| Progress { sink, step: Default::default() });
        let observer: &dyn TurnObserver = match &progress {
            Some(p) => p,
            None => &Quiet,
        };
        match run_turn(chat_model, &executor, &history, &config, observer, &ctx.cancel).await {
            Ok(output) => {
                let cut = (output.results_cut > 0).then_some("result_max_bytes");
                let truncation_reason = output.stop.truncation_reason().or(cut).map(str::to_owned);
                let (provider, model) = output.answered_by.unzip();
                let messages = match messages_out(raw, &output.new_messages) {
                    Value::Array(items) => items,
                    _ => Vec::new(),
                };
                Ok(Output {
                    reply: output.reply,
                    tool_calls: output.tool_calls.iter().map(ToolCall::from).collect(),
                    messages,
                    truncated: truncation_reason.is_some().then_some(true),
                    truncation_reason,
                    results_omitted: (output.results_cut > 0).then_some(output.results_cut),
                    cancelled: (output.stop == Stop::Cancelled).then_some(true),
                    provider,
                    model,
                    usage: TurnUsage::new(output.usage, output.llm_calls),
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
                    .with("messages", messages_out(raw, &failure.new_messages))
                    .with("usage", json!(TurnUsage::new(failure.usage, failure.llm_calls))))
            }
        }
    }
}
