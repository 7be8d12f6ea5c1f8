//! The bounded tool-calling loop of one chat turn.
//!
//! Each iteration is one LLM round trip. When the answer asks for tools, every call runs in order
//! and all results go back in one message, one result per call, matched by id; otherwise the
//! answer's text is the reply. The loop stops at the iteration cap, the deadline, the token
//! budget or cancellation, always leaving a history that can be sent back as is: every tool call
//! in it has its result (calls skipped by a cancellation get an error result saying so).

use async_trait::async_trait;
use serde_json::Value;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

use cks_llm::{ChatRequest, ChatResponse, LlmError, Message, Role, ToolResult, ToolSpec, Usage};

/// The reply when the iteration cap is reached.
pub const ITERATION_LIMIT_REPLY: &str = "Reached the tool-call iteration limit without a final answer.";

/// Something that answers chat requests (the LLM client, or a scripted model in tests).
#[async_trait]
pub trait ChatModel: Send + Sync {
    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, LlmError>;
}

#[async_trait]
impl ChatModel for cks_llm::LlmClient {
    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, LlmError> {
        cks_llm::LlmClient::chat(self, request).await
    }
}

/// What the loop knows about the model that asked for a tool call (recorded for audit).
#[derive(Debug, Clone, Copy)]
pub struct Origin<'a> {
    pub provider: &'a str,
    pub model: &'a str,
}

/// One executed (or refused) tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct Execution {
    /// The arguments as executed (after session pinning).
    pub arguments: Value,
    /// The tool's result object (errors included).
    pub result: Value,
    pub is_error: bool,
}

/// Runs the tools the LLM asks for.
#[async_trait]
pub trait ToolExecutor: Send + Sync {
    /// The tools offered to the LLM.
    fn specs(&self) -> Vec<ToolSpec>;
    /// Runs one call; refusals and failures are results, never panics or errors.
    async fn execute(&self, name: &str, arguments: &Value, origin: Origin<'_>) -> Execution;
}

/// Receives live progress of a turn.
pub trait TurnObserver: Send + Sync {
    fn llm_call(&self, _iteration: usize) {}
    fn tool_call(&self, _name: &str) {}
}

/// An observer that ignores everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoObserver;

impl TurnObserver for NoObserver {}

/// Limits and model settings of one turn.
#[derive(Debug, Clone)]
pub struct TurnConfig {
    pub max_iterations: usize,
    pub deadline: Duration,
    /// Stop before the next LLM call once input + output tokens reach this.
    pub token_budget: Option<u64>,
    /// Tool results longer than this (bytes of JSON text) are truncated for the LLM.
    pub tool_result_cap: usize,
    pub model: Option<String>,
    pub system: Option<String>,
    pub max_tokens: Option<u32>,
}

impl Default for TurnConfig {
    fn default() -> Self {
        TurnConfig {
            max_iterations: 8,
            deadline: Duration::from_secs(300),
            token_budget: None,
            tool_result_cap: 16 * 1024,
            model: None,
            system: None,
            max_tokens: None,
        }
    }
}

/// One tool call as reported to the caller.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCallRecord {
    pub name: String,
    pub arguments: Value,
    pub result: Value,
    pub is_error: bool,
}

/// Why a turn ended without error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    Answered,
    IterationLimit,
    Deadline,
    TokenBudget,
    Cancelled,
}

impl Stop {
    /// The `truncation_reason` reported for this stop, if it truncated the turn.
    pub fn truncation_reason(self) -> Option<&'static str> {
        match self {
            Stop::IterationLimit => Some("max_iterations"),
            Stop::Deadline => Some("deadline"),
            Stop::TokenBudget => Some("token_budget"),
            Stop::Answered | Stop::Cancelled => None,
        }
    }
}

/// A finished turn.
#[derive(Debug, Clone)]
pub struct TurnOutput {
    pub reply: String,
    /// Messages appended to the history during the turn.
    pub new_messages: Vec<Message>,
    pub tool_calls: Vec<ToolCallRecord>,
    pub stop: Stop,
    pub usage: Usage,
    pub llm_calls: usize,
    /// The provider and model that answered last (for audit), if any call succeeded.
    pub answered_by: Option<(String, String)>,
}

/// A turn that failed on an LLM call; what happened before the failure is kept for a retry.
#[derive(Debug)]
pub struct TurnFailure {
    pub error: LlmError,
    pub new_messages: Vec<Message>,
    pub tool_calls: Vec<ToolCallRecord>,
}

/// The reply when the turn is cancelled.
pub const CANCELLED_REPLY: &str = "The turn was cancelled.";

/// What a turn has produced so far.
struct Transcript {
    messages: Vec<Message>,
    first_new: usize,
    tool_calls: Vec<ToolCallRecord>,
    usage: Usage,
    llm_calls: usize,
    answered_by: Option<(String, String)>,
}

impl Transcript {
    fn finish(self, reply: String, stop: Stop) -> TurnOutput {
        TurnOutput {
            reply,
            new_messages: self.messages[self.first_new..].to_vec(),
            tool_calls: self.tool_calls,
            stop,
            usage: self.usage,
            llm_calls: self.llm_calls,
            answered_by: self.answered_by,
        }
    }

    fn fail(self, error: LlmError) -> TurnFailure {
        TurnFailure { error, new_messages: self.messages[self.first_new..].to_vec(), tool_calls: self.tool_calls }
    }
}

/// Runs one turn over `history` (which must not be empty).
pub async fn run_turn(
    model: &dyn ChatModel,
    tools: &dyn ToolExecutor,
    history: &[Message],
    config: &TurnConfig,
    observer: &dyn TurnObserver,
    cancel: &CancellationToken,
) -> Result<TurnOutput, TurnFailure> {
    let started = Instant::now();
    let specs = tools.specs();
    let mut t = Transcript {
        messages: history.to_vec(),
        first_new: history.len(),
        tool_calls: Vec::new(),
        usage: Usage::default(),
        llm_calls: 0,
        answered_by: None,
    };

    for iteration in 0..config.max_iterations {
        if cancel.is_cancelled() {
            return Ok(t.finish(CANCELLED_REPLY.into(), Stop::Cancelled));
        }
        let Some(remaining) = config.deadline.checked_sub(started.elapsed()) else {
            return Ok(t.finish(deadline_reply(config), Stop::Deadline));
        };
        if config.token_budget.is_some_and(|budget| t.usage.input_tokens + t.usage.output_tokens >= budget) {
            return Ok(t.finish("Stopped: the token budget of this turn is spent.".into(), Stop::TokenBudget));
        }
        observer.llm_call(iteration);
        let request = ChatRequest {
            model: config.model.clone(),
            system: config.system.clone(),
            messages: t.messages.clone(),
            tools: specs.clone(),
            max_tokens: config.max_tokens,
            temperature: None,
        };
        t.llm_calls += 1;
        let response = tokio::select! {
            response = model.chat(request) => response,
            () = cancel.cancelled() => return Ok(t.finish(CANCELLED_REPLY.into(), Stop::Cancelled)),
            () = tokio::time::sleep(remaining) => return Ok(t.finish(deadline_reply(config), Stop::Deadline)),
        };
        let response = match response {
            Ok(response) => response,
            Err(error) => return Err(t.fail(error)),
        };
        t.usage.input_tokens += response.usage.input_tokens;
        t.usage.output_tokens += response.usage.output_tokens;
        let (provider, model_name) = (response.provider.as_str().to_owned(), response.model.clone());
        t.answered_by = Some((provider.clone(), model_name.clone()));
        let mut answer = response.message;
        answer.role = Role::Assistant;
        let calls: Vec<(String, String, Value)> =
            answer.tool_calls().iter().map(|c| (c.id.to_owned(), c.name.to_owned(), c.input.clone())).collect();
        t.messages.push(answer);
        if calls.is_empty() {
            let reply = t.messages.last().map(Message::text).unwrap_or_default();
            return Ok(t.finish(reply, Stop::Answered));
        }
        let mut results = Vec::with_capacity(calls.len());
        let mut cancelled = false;
        for (id, name, input) in calls {
            // Once cancelled, the remaining calls do not run, but each still gets a result so
            // the history stays valid for every provider.
            cancelled = cancelled || cancel.is_cancelled();
            if cancelled {
                let note = serde_json::json!({"error": "cancelled", "message": "The turn was cancelled before this call ran."});
                results.push(ToolResult { tool_use_id: id, content: note.to_string(), is_error: true });
                continue;
            }
            observer.tool_call(&name);
            let execution = tools.execute(&name, &input, Origin { provider: &provider, model: &model_name }).await;
            let text = serde_json::to_string(&execution.result).unwrap_or_else(|_| "{}".into());
            results.push(ToolResult {
                tool_use_id: id,
                content: cap(text, config.tool_result_cap),
                is_error: execution.is_error,
            });
            t.tool_calls.push(ToolCallRecord {
                name,
                arguments: execution.arguments,
                result: execution.result,
                is_error: execution.is_error,
            });
        }
        t.messages.push(Message::tool_results(results));
        if cancelled {
            return Ok(t.finish(CANCELLED_REPLY.into(), Stop::Cancelled));
        }
    }
    Ok(t.finish(ITERATION_LIMIT_REPLY.into(), Stop::IterationLimit))
}

fn deadline_reply(config: &TurnConfig) -> String {
    format!("Stopped: the turn reached its deadline of {} s before a final answer.", config.deadline.as_secs())
}

/// Truncates `text` to at most `cap` bytes (at a character boundary) with a marker saying so.
pub fn cap(text: String, cap: usize) -> String {
    if text.len() <= cap {
        return text;
    }
    let mut end = cap;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… [truncated: the result is {} bytes; only the first {} are shown]", &text[..end], text.len(), end)
}
