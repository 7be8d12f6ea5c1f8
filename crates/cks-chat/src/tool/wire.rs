//! What `ai_chat` takes and answers: its arguments and its result, with their JSON Schemas.

use super::*;

#[derive(Debug, Deserialize, JsonSchema)]
pub struct Input {
    /// The session to work on.
    pub session_id: String,
    /// The previous `messages` plus the new user message (not with `chat_id`).
    #[serde(default)]
    #[schemars(schema_with = "messages_schema")]
    pub messages: Vec<Value>,
    /// The user message (starts a chat, or continues `chat_id`).
    pub prompt: Option<String>,
    /// A stored chat to continue.
    pub chat_id: Option<String>,
    /// Store the chat; the answer carries its `chat_id`.
    #[serde(default)]
    pub new_chat: bool,
    /// Title of a new stored chat.
    pub title: Option<String>,
    /// Model for this turn.
    pub model: Option<String>,
    /// Ask the user before destructive calls: revert_version, evolve_knowledge removals (default
    /// false).
    pub approvals: Option<bool>,
    /// The decision on `pending_approval` (same `chat_id` or returned `messages`).
    pub approval: Option<Approval>,
}

/// The user's decision on a pending call.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct Approval {
    /// 'approve' runs the call; 'reject' declines it.
    pub decision: ApprovalDecision,
    /// Why (told to the model on reject).
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalDecision {
    Approve,
    Reject,
}

pub(crate) fn messages_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::Schema::try_from(json!({
        "type": "array",
        "items": {"type": "object"},
        "description": "The conversation so far: [{\"role\": \"user\"|\"assistant\", \"content\": string or content blocks}]. Pass back the 'messages' of the previous turn unchanged, plus the new user message."
    }))
    .expect("a schema object")
}

/// The result of a turn that ended without an LLM error.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Output {
    /// The model's final text.
    pub(crate) reply: String,
    /// Every tool call of the turn, in order.
    pub(crate) tool_calls: Vec<ToolCall>,
    /// The caller's messages as sent, then this turn's, ready to send back with the next message.
    pub(crate) messages: Vec<Value>,
    /// The stored chat this turn was saved to (with `new_chat` or `chat_id`); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) chat_id: Option<String>,
    /// The turn stopped early (iteration cap, deadline, token budget, repeated calls) or its
    /// results were cut to the size bound.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) truncated: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) truncation_reason: Option<String>,
    /// How many tool results were replaced by a marker to keep the turn's result bounded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) results_omitted: Option<usize>,
    /// The turn was cancelled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) cancelled: Option<bool>,
    /// The call that waits for the user's approval (with 'approvals'): the turn stopped before
    /// running the answer that made it; 'messages' ends with that answer. Decide with 'approval'.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) pending_approval: Option<PendingCall>,
    /// The provider that answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) provider: Option<String>,
    /// The model that answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) model: Option<String>,
    pub(crate) usage: TurnUsage,
}

/// A call waiting for the user's approval.
#[derive(Debug, Serialize, JsonSchema)]
pub struct PendingCall {
    /// The id of the call in the last message of 'messages'.
    pub(crate) tool_use_id: String,
    pub(crate) name: String,
    /// The arguments it would run with (session arguments pinned).
    pub(crate) arguments: Value,
}

/// One tool call the model made.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ToolCall {
    pub(crate) name: String,
    /// The arguments as run (session arguments pinned).
    pub(crate) arguments: Value,
    /// The tool's result (a business error is a result too).
    pub(crate) result: Value,
    pub(crate) is_error: bool,
    /// The model wrote this call as text; it was recognised and run as a call.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) recovered_from_text: bool,
    /// A repeat of the call at this index, answered from its result.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) repeat_of: Option<usize>,
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
    pub(crate) input_tokens: u64,
    pub(crate) output_tokens: u64,
    /// LLM requests sent, retries included.
    pub(crate) llm_calls: usize,
}

impl TurnUsage {
    pub(crate) fn new(usage: cks_llm::Usage, llm_calls: usize) -> Self {
        TurnUsage { input_tokens: usage.input_tokens, output_tokens: usage.output_tokens, llm_calls }
    }
}
