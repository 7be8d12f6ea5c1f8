//! The `ai_chat` tool: one chat turn. The caller sends the whole history (Anthropic Messages
//! shape) and gets it back with the turn appended, ready to send again.
//!
//! The caller's messages are returned exactly as sent (so `{"role":"user","content":"hi"}` stays
//! a string-content message); only the messages this turn adds are in our normalised block form.
//!
//! Stored chats: with `new_chat: true` the turn's answer is also saved in the store as a chat
//! (`cks_runtime::chats`) and answered with its `chat_id`; a turn with `chat_id` takes the stored
//! messages as the history and only `prompt` from the caller. A turn is saved once it ended
//! without an LLM error — the messages exactly as answered and the turn's recorded tool calls, in
//! one store write guarded by the revision read before the turn — or not at all: a failed turn,
//! or one that another turn of the same chat beat to the save (`chat_busy`), stores nothing.
//! Without `new_chat` and `chat_id` nothing is stored and the answer is as it always was.
//!
//! Approvals: with `approvals: true`, an answer that calls a destructive tool stops the turn before
//! any of its calls run, with `pending_approval` naming the call (see [`crate::turn`]); the next
//! request sends `approval` (approve or reject, with an optional reason) on the same `chat_id` or
//! the returned `messages`, and no prompt. A stored chat that waits for a decision and gets a new
//! prompt instead takes it as declining the open calls. Without `approvals` and `approval` nothing
//! changes.
//!
//! Live events: a context with a chat event sink (`POST /chat/stream`) gets the model's text as it
//! streams and each tool call as it starts and completes; the result is the same.

use cks_tools::ErrorCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cks_llm::{ErrorKind, Message, Role};
use cks_runtime::store::ChatRow;
use cks_tools::{ProgressSink, SessionCheck, Tool, ToolContext, ToolError, ToolMeta};

use crate::events::{ChatEvent, ChatEventSink, watching};

use crate::executor::RegistryExecutor;
use crate::turn::{
    ChatModel, Decision, Stop, ToolCallRecord, TurnConfig, TurnObserver, continue_turn, pending_approval,
    result_summary,
};

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
    /// non-empty, `prompt` is ignored. Not with `chat_id`: a stored chat's history is the store's.
    #[serde(default)]
    #[schemars(schema_with = "messages_schema")]
    pub messages: Vec<Value>,
    /// Starts a new conversation with this user message (used only when `messages` is empty); with
    /// `chat_id`, the next user message of that stored chat.
    pub prompt: Option<String>,
    /// Continues a stored chat (from an earlier answer's `chat_id`, or list_chats): its stored
    /// messages are the history, `prompt` the new user message, and the turn is saved with it.
    pub chat_id: Option<String>,
    /// Stores this conversation server-side as a new chat once the turn has answered; the answer
    /// carries its `chat_id`, to continue it with `chat_id` and `prompt` alone.
    #[serde(default)]
    pub new_chat: bool,
    /// The title of a new stored chat (with `new_chat`; by default the first user message, cut to
    /// 80 characters).
    pub title: Option<String>,
    /// Model to use for this turn, overriding the provider's configured default (the provider
    /// itself is chosen by CKS_LLM_PROVIDER).
    pub model: Option<String>,
    /// Ask the user before destructive calls (revert_version; evolve_knowledge removing or replacing):
    /// when the model makes one, the turn
    /// stops before running that answer's calls and answers 'pending_approval'; send the decision
    /// as 'approval' in the next request. Default false (true when 'approval' is given).
    pub approvals: Option<bool>,
    /// The user's decision on the pending call ('pending_approval' of the previous answer), sent on
    /// the same 'chat_id' or with the returned 'messages' unchanged, without 'prompt'.
    pub approval: Option<Approval>,
}

/// The user's decision on a pending call.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct Approval {
    /// 'approve' runs the call; 'reject' tells the model the user declined it.
    pub decision: ApprovalDecision,
    /// Why (passed on to the model with a rejection).
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalDecision {
    Approve,
    Reject,
}

fn messages_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::Schema::try_from(json!({
        "type": "array",
        "items": {"type": "object"},
        "description": "The conversation so far: [{\"role\": \"user\"|\"assistant\", \"content\": string or content blocks}]. Pass back the 'messages' of the previous turn unchanged, plus the new user message."
    }))
    .expect("a schema object")
}

/// The title of a new stored chat whose first user message has no text.
const UNTITLED: &str = "Untitled chat";

/// The longest title a caller may give a stored chat, in characters.
pub const MAX_TITLE_CHARS: usize = 200;

/// The `ai_chat` tool.
#[derive(Clone, Default)]
pub struct AiChat {
    config: AiChatConfig,
    /// Answers instead of the context's LLM client when set (scripted models in tests).
    model: Option<Arc<dyn ChatModel>>,
    /// Stored chats with a turn running in this process. A second turn of one of them is refused
    /// at once: it could only end in `chat_busy`, after spending its LLM calls and tool calls.
    /// (Turns on other processes sharing the store are caught by the revision check instead.)
    running: Arc<Mutex<HashSet<String>>>,
}

impl std::fmt::Debug for AiChat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AiChat").field("config", &self.config).field("scripted_model", &self.model.is_some()).finish()
    }
}

impl AiChat {
    pub fn new(config: AiChatConfig) -> Self {
        AiChat { config, ..AiChat::default() }
    }

    /// A tool that asks `model` instead of the configured LLM client.
    pub fn with_model(config: AiChatConfig, model: Arc<dyn ChatModel>) -> Self {
        AiChat { config, model: Some(model), ..AiChat::default() }
    }

    /// Marks `chat_id` as having a turn running here until the mark is dropped; `None` when it has
    /// one already.
    fn start_turn(&self, chat_id: &str) -> Option<RunningTurn> {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        running
            .insert(chat_id.to_owned())
            .then(|| RunningTurn { running: self.running.clone(), chat_id: chat_id.to_owned() })
    }
}

/// A stored chat's running turn; dropping it (the turn answered, failed or was dropped) frees the
/// chat for the next one.
struct RunningTurn {
    running: Arc<Mutex<HashSet<String>>>,
    chat_id: String,
}

impl Drop for RunningTurn {
    fn drop(&mut self) {
        self.running.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.chat_id);
    }
}

/// Where a turn's messages are kept.
enum Keeping {
    /// Nowhere: the caller keeps the history (the stateless contract).
    Caller,
    /// In a new stored chat of the session, once the turn has answered.
    NewChat { chat_id: String, session_id: String, title: Option<String> },
    /// In this stored chat, saved from the revision read before the turn.
    Chat(ChatRow),
}

impl Keeping {
    /// The id of the stored chat the turn continues (a new chat has none until it is saved).
    fn stored_id(&self) -> Option<&str> {
        match self {
            Keeping::Caller | Keeping::NewChat { .. } => None,
            Keeping::Chat(chat) => Some(&chat.chat_id),
        }
    }
}

/// One turn as a stored chat records it: its tool calls, and where its messages start.
#[derive(Serialize)]
struct StoredTurn<'a> {
    /// 1 for the chat's first turn.
    turn: usize,
    /// The index in the chat's messages of the turn's first answer.
    message_index: usize,
    at: String,
    calls: &'a [ToolCall],
}

fn chat_not_found(chat_id: &str) -> ToolError {
    ToolError::new(ErrorCode::ChatNotFound, format!("Chat '{chat_id}' not found.")).with("chat_id", chat_id)
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

/// What the caller watches of a turn: progress notifications (MCP) and live events (streamed
/// chats), each when asked for.
struct Watchers {
    progress: Option<Progress>,
    events: Option<Arc<dyn ChatEventSink>>,
}

impl TurnObserver for Watchers {
    fn llm_call(&self, iteration: usize) {
        if let Some(progress) = &self.progress {
            progress.report(format!("LLM round trip {}", iteration + 1));
        }
    }

    fn tool_call(&self, name: &str) {
        if let Some(progress) = &self.progress {
            progress.report(format!("tool {name}"));
        }
    }

    fn wants_text(&self) -> bool {
        self.events.is_some()
    }

    fn text_delta(&self, text: &str) {
        if let Some(events) = &self.events {
            events.event(ChatEvent::TextDelta { text: text.to_owned() });
        }
    }

    fn tool_call_started(&self, index: usize, name: &str, arguments: &Value) {
        if let Some(events) = &self.events {
            events.event(ChatEvent::ToolCallStarted { index, name: name.to_owned(), arguments: arguments.clone() });
        }
    }

    fn tool_call_completed(&self, index: usize, name: &str, arguments: &Value, result: &Value, is_error: bool) {
        if let Some(events) = &self.events {
            events.event(ChatEvent::ToolCallCompleted {
                index,
                name: name.to_owned(),
                arguments: arguments.clone(),
                result_summary: result_summary(result, is_error),
                is_error,
            });
        }
    }
}

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
    /// The stored chat this turn was saved to (with `new_chat` or `chat_id`); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    chat_id: Option<String>,
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
    /// The call that waits for the user's approval (with 'approvals'): the turn stopped before
    /// running the answer that made it; 'messages' ends with that answer. Decide with 'approval'.
    #[serde(skip_serializing_if = "Option::is_none")]
    pending_approval: Option<PendingCall>,
    /// The provider that answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    provider: Option<String>,
    /// The model that answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<String>,
    usage: TurnUsage,
}

/// A call waiting for the user's approval.
#[derive(Debug, Serialize, JsonSchema)]
pub struct PendingCall {
    /// The id of the call in the last message of 'messages'.
    tool_use_id: String,
    name: String,
    /// The arguments it would run with (session arguments pinned).
    arguments: Value,
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
            'messages' plus a new user message to continue (nothing is stored). Or keep the chat in the server: \
            'new_chat': true (optional 'title') saves it once the turn has answered and returns its 'chat_id'; then \
            send 'chat_id' and the next 'prompt' alone, and each answered turn is saved with the chat (list_chats, \
            get_chat, delete_chat). Returns {reply, tool_calls: [{name, arguments, result, is_error}], messages, \
            chat_id (stored chats only), usage}; 'truncated': true (with 'truncation_reason') when the turn hit its \
            iteration cap (8 by default), deadline, token budget, a model repeating itself, or the size bound of its \
            result. The model may revert the session to an earlier version. Errors: llm_call_failed / \
            llm_provider_unavailable, still with 'messages' and 'tool_calls' (a failed turn of a stored chat is not \
            saved); chat_not_found (no such chat in this session); chat_busy (another turn of the chat is running or \
            was saved first: this one is not saved). With 'approvals': true, a destructive call (revert_version; evolve_knowledge removing or replacing) \
            waits for the user: the turn stops before running that answer's calls and answers 'pending_approval' \
            {tool_use_id, name, arguments}, 'messages' ending with that answer; the next request sends 'approval': \
            {decision: 'approve' or 'reject', reason} with the same 'chat_id' or those 'messages', and no prompt.",
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
        if input.approval.is_some() && input.prompt.as_deref().is_some_and(|p| !p.trim().is_empty()) {
            return Err(ToolError::invalid_parameter(
                "'approval' decides the pending call and continues the turn: send it without 'prompt' (the next \
                 message goes in a later request).",
            )
            .with("parameter", "prompt"));
        }
        // The chat is marked running before it is read, so this turn reads what the turn before it
        // saved; the arguments and the chat are checked before a running turn is reported.
        let running = input.chat_id.as_deref().map(|chat_id| self.start_turn(chat_id));
        let keeping = keeping(ctx, &input).await?;
        // Errors from here on name the stored chat the turn belongs to.
        let stored_id = keeping.stored_id().map(str::to_owned);
        let in_chat = |e: ToolError| match &stored_id {
            Some(chat_id) => e.with("chat_id", chat_id.as_str()),
            None => e,
        };
        if let (Some(None), Some(chat_id)) = (&running, &stored_id) {
            return Err(ToolError::new(
                ErrorCode::ChatBusy,
                format!("Chat '{chat_id}' has a turn running; send this prompt once that turn has answered."),
            )
            .with("chat_id", chat_id.as_str()));
        }
        let raw: Vec<Value> = if let Keeping::Chat(chat) = &keeping {
            let mut raw: Vec<Value> = serde_json::from_str(&chat.messages).map_err(|e| {
                in_chat(ToolError::internal(format!(
                    "the stored messages of chat '{}' are unreadable: {e}",
                    chat.chat_id
                )))
            })?;
            if input.approval.is_none() {
                // `keeping` checked that there is one.
                raw.push(new_message(&raw, input.prompt.unwrap_or_default()));
            }
            raw
        } else if !input.messages.is_empty() {
            input.messages
        } else if input.approval.is_some() {
            return Err(no_pending_call());
        } else {
            match input.prompt.filter(|p| !p.trim().is_empty()) {
                Some(prompt) => vec![json!({"role": "user", "content": prompt})],
                None => {
                    return Err(ToolError::new(
                        ErrorCode::MissingParameter,
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
                    in_chat(
                        ToolError::invalid_parameter(format!("messages[{i}] is not a valid message: {e}"))
                            .with("parameter", "messages"),
                    )
                })
            })
            .collect::<Result<_, _>>()?;
        let chat_model: &dyn ChatModel = match &self.model {
            Some(model) => model.as_ref(),
            None => ctx
                .llm
                .client()
                .map_err(|e| in_chat(e.with("tool_calls", json!([])).with("messages", Value::Array(raw.clone()))))?,
        };
        let registry = ctx
            .registry
            .clone()
            .ok_or_else(|| ToolError::internal("ai_chat needs the tool registry in its context"))?;
        let executor = RegistryExecutor::new(registry, ctx.clone(), input.session_id.clone());
        let decision =
            input.approval.map(|a| Decision { approve: a.decision == ApprovalDecision::Approve, reason: a.reason });
        if decision.is_some() && pending_approval(&history, &executor).is_none() {
            return Err(in_chat(no_pending_call()));
        }
        let mut config = self.config.turn.clone();
        config.approvals = input.approvals.unwrap_or(decision.is_some());
        if let Some(model) = input.model.map(|m| m.trim().to_owned()).filter(|m| !m.is_empty()) {
            cks_llm::check_model_name(&model).map_err(|why| {
                in_chat(
                    ToolError::invalid_parameter(format!("'model': {why}"))
                        .with("parameter", "model")
                        .with("tool_calls", json!([]))
                        .with("messages", Value::Array(raw.clone())),
                )
            })?;
            config.model = Some(model);
        }
        let observer = Watchers {
            progress: ctx.progress.clone().map(|sink| Progress { sink, step: Default::default() }),
            events: watching(ctx),
        };
        match continue_turn(chat_model, &executor, &history, &config, &observer, &ctx.cancel, decision.as_ref()).await {
            Ok(output) => {
                let cut = (output.results_cut > 0).then_some("result_max_bytes");
                let truncation_reason = output.stop.truncation_reason().or(cut).map(str::to_owned);
                let (provider, model) = output.answered_by.unzip();
                let answered_from = raw.len();
                let messages = match messages_out(raw, &output.new_messages) {
                    Value::Array(items) => items,
                    _ => Vec::new(),
                };
                let tool_calls: Vec<ToolCall> = output.tool_calls.iter().map(ToolCall::from).collect();
                let usage = TurnUsage::new(output.usage, output.llm_calls);
                let turn = Turn { history: &history, answered_from, messages: &messages, tool_calls: &tool_calls };
                let chat_id = match save_turn(ctx, &keeping, turn).await {
                    Ok(chat_id) => chat_id,
                    // The turn ran (its tool calls changed what they changed) but is not kept: the
                    // caller gets all of it, to send again or to carry on without the store.
                    Err(error) => {
                        return Err(in_chat(error)
                            .with("reply", output.reply)
                            .with("tool_calls", json!(tool_calls))
                            .with("messages", Value::Array(messages))
                            .with("usage", json!(usage)));
                    }
                };
                Ok(Output {
                    reply: output.reply,
                    tool_calls,
                    messages,
                    chat_id,
                    truncated: truncation_reason.is_some().then_some(true),
                    truncation_reason,
                    results_omitted: (output.results_cut > 0).then_some(output.results_cut),
                    cancelled: (output.stop == Stop::Cancelled).then_some(true),
                    pending_approval: output.pending_approval.map(|p| PendingCall {
                        tool_use_id: p.tool_use_id,
                        name: p.name,
                        arguments: p.arguments,
                    }),
                    provider,
                    model,
                    usage,
                })
            }
            Err(failure) => {
                let code = if failure.error.kind() == ErrorKind::NotConfigured {
                    ErrorCode::LlmProviderUnavailable
                } else {
                    ErrorCode::LlmCallFailed
                };
                Err(in_chat(
                    ToolError::new(code, failure.error.to_string())
                        .with("tool_calls", records(&failure.tool_calls))
                        .with("messages", messages_out(raw, &failure.new_messages))
                        .with("usage", json!(TurnUsage::new(failure.usage, failure.llm_calls))),
                ))
            }
        }
    }
}

/// Decides from the arguments where the turn's messages are kept, reading the stored chat when
/// one is named (a chat of another session is not found: it is never revealed).
async fn keeping(ctx: &ToolContext, input: &Input) -> Result<Keeping, ToolError> {
    if input.new_chat && input.chat_id.is_some() {
        return Err(ToolError::invalid_parameter(
            "'new_chat' starts a stored chat and 'chat_id' continues one: give one of them.",
        )
        .with("parameter", "new_chat"));
    }
    if input.title.is_some() && !input.new_chat {
        return Err(ToolError::invalid_parameter("'title' names a new stored chat: give it with 'new_chat': true.")
            .with("parameter", "title"));
    }
    if let Some(chat_id) = &input.chat_id {
        if !input.messages.is_empty() {
            return Err(ToolError::invalid_parameter(
                "With 'chat_id' the stored chat is the history: send only the new user message, as 'prompt'.",
            )
            .with("parameter", "messages")
            .with("chat_id", chat_id.as_str()));
        }
        let chat = ctx
            .runtime
            .chats()
            .get(chat_id)
            .await?
            .filter(|chat| chat.session_id == input.session_id)
            .ok_or_else(|| chat_not_found(chat_id))?;
        if input.approval.is_none() && input.prompt.as_deref().is_none_or(|p| p.trim().is_empty()) {
            return Err(ToolError::new(
                ErrorCode::MissingParameter,
                "Missing required parameter: 'prompt' (the next user message of the chat).",
            )
            .with("parameter", "prompt")
            .with("chat_id", chat_id.as_str()));
        }
        return Ok(Keeping::Chat(chat));
    }
    if !input.new_chat {
        return Ok(Keeping::Caller);
    }
    let title = input.title.as_deref().map(|t| t.split_whitespace().collect::<Vec<_>>().join(" "));
    if let Some(title) = &title
        && title.chars().count() > MAX_TITLE_CHARS
    {
        return Err(ToolError::invalid_parameter(format!(
            "'title' is {} characters long; at most {MAX_TITLE_CHARS} are kept.",
            title.chars().count()
        ))
        .with("parameter", "title"));
    }
    Ok(Keeping::NewChat {
        chat_id: cks_runtime::chats::new_chat_id(),
        session_id: input.session_id.clone(),
        title: title.filter(|t| !t.is_empty()),
    })
}

/// An `approval` for a conversation that waits for none.
fn no_pending_call() -> ToolError {
    ToolError::invalid_parameter(
        "'approval' decides a pending call, and this conversation has none: its last message is not a model's \
         answer with a call waiting for approval. Send a 'prompt' instead.",
    )
    .with("parameter", "approval")
}

/// The user message that continues a stored chat. When the chat waits for a decision on its last
/// answer's calls, the new message declines them first: every call gets its result, as every
/// provider requires, and the model learns that the user moved on.
fn new_message(stored: &[Value], prompt: String) -> Value {
    let open: Vec<String> = stored
        .last()
        .and_then(|m| serde_json::from_value::<Message>(m.clone()).ok())
        .filter(|m| m.role == Role::Assistant)
        .map(|m| m.tool_calls().iter().map(|c| c.id.to_owned()).collect())
        .unwrap_or_default();
    if open.is_empty() {
        return json!({"role": "user", "content": prompt});
    }
    let declined = ToolError::new(
        ErrorCode::NotApproved,
        "The user did not approve this call and sent a new message instead, so it did not run.",
    )
    .to_value()
    .to_string();
    let mut content: Vec<Value> = open
        .into_iter()
        .map(|id| json!({"type": "tool_result", "tool_use_id": id, "content": declined, "is_error": true}))
        .collect();
    content.push(json!({"type": "text", "text": prompt}));
    json!({"role": "user", "content": content})
}

/// What a finished turn leaves to keep.
struct Turn<'a> {
    /// The history the turn was run on (the caller's or the stored chat's, with the new message).
    history: &'a [Message],
    /// How many of `messages` came before the turn's first answer.
    answered_from: usize,
    messages: &'a [Value],
    tool_calls: &'a [ToolCall],
}

/// Saves a finished turn where `keeping` says, in one store write; the stored chat's id, or
/// `None` when the caller keeps the history. A chat saved by another turn since this one read it
/// is `chat_busy`, and nothing is written.
async fn save_turn(ctx: &ToolContext, keeping: &Keeping, turn: Turn<'_>) -> Result<Option<String>, ToolError> {
    let now = cks_runtime::chats::timestamp();
    let (row, expected_revision, turns) = match keeping {
        Keeping::Caller => return Ok(None),
        Keeping::NewChat { chat_id, session_id, title } => {
            let first = turn.history.iter().find(|m| m.role == Role::User).map(Message::text).unwrap_or_default();
            let made = cks_runtime::chats::title_from(&first);
            let title = match title {
                Some(given) => given.clone(),
                None if made.is_empty() => UNTITLED.to_owned(),
                None => made,
            };
            let row = ChatRow {
                chat_id: chat_id.clone(),
                session_id: session_id.clone(),
                title,
                created_at: now.clone(),
                ..ChatRow::default()
            };
            (row, None, Vec::new())
        }
        Keeping::Chat(chat) => {
            let turns: Vec<Value> = serde_json::from_str(&chat.tool_calls).map_err(|e| {
                ToolError::internal(format!("the stored tool calls of chat '{}' are unreadable: {e}", chat.chat_id))
            })?;
            (chat.clone(), Some(chat.revision), turns)
        }
    };
    let mut turns = turns;
    let record = StoredTurn {
        turn: turns.len() + 1,
        message_index: turn.answered_from,
        at: now.clone(),
        calls: turn.tool_calls,
    };
    turns.push(json!(record));
    let row = ChatRow {
        messages: Value::Array(turn.messages.to_vec()).to_string(),
        message_count: turn.messages.len() as u64,
        tool_calls: Value::Array(turns).to_string(),
        updated_at: now,
        ..row
    };
    if !ctx.runtime.chats().save(&row, expected_revision).await? {
        return Err(ToolError::new(
            ErrorCode::ChatBusy,
            format!(
                "Another turn of chat '{}' was saved while this one ran, so this turn is not stored (its tool \
                 calls did run). Read the chat again (get_chat) and send the prompt again if it is still needed.",
                row.chat_id
            ),
        ));
    }
    Ok(Some(row.chat_id))
}
