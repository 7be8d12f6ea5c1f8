//! The bounded tool-calling loop of one chat turn.
//!
//! Each iteration is one LLM round trip. When the answer asks for tools, the calls run in order
//! and all results go back in one message, one result per call, matched by id; otherwise the
//! answer's text is the reply. Every part of a turn is bounded:
//!
//! - LLM round trips (the iteration cap), output tokens per round trip, and an optional token
//!   budget;
//! - the deadline, checked before every LLM call and every tool call; a tool call gets only the
//!   time the turn has left;
//! - tool calls per answer: the calls over the cap do not run and are answered with an error
//!   result saying why;
//! - repetition: a call identical to an earlier one of the same turn (same tool, same
//!   arguments, nothing changed the session in between) is answered from the first result with a
//!   note, and a model that answers only with repeats twice in a row stops the turn;
//! - the size of the turn's result: past a byte bound, recorded results are replaced by a marker.
//!
//! A model that writes its call as text (a JSON object with `name` and `arguments`, possibly in
//! `<tool_call>` tags) instead of a structured call gets it run as a structured call when the text
//! is exactly such a call to an offered tool; the record says so. Arguments the tool refuses are
//! taken once a turn, so that the tool's own error tells the model what to fix.
//!
//! A model server that fails (500) because it could not parse the model's answer is told to the
//! model once a turn, in the next request's system text, as a failed tool call would be.
//!
//! Whatever stops the loop, the history it leaves can be sent back as is: every tool call in it
//! has its result (calls that did not run get an error result saying why) — except where the turn
//! stops for approval, which leaves the answer's calls open for the next request to decide.
//!
//! Approvals ([`TurnConfig::approvals`]): an answer holding a call that the executor says needs the
//! user's approval ([`ToolExecutor::needs_approval`]; the destructive tools) runs none of its calls.
//! The turn stops with the history ending in that answer and [`TurnOutput::pending_approval`]
//! naming the first such call. [`continue_turn`] with the user's [`Decision`] then runs that
//! answer's calls in order, as any calls: on approval the pending call runs (after the same checks
//! as every call); on rejection it gets an error result saying the user declined (with the reason),
//! and the others of the answer run; any further call needing approval in the same answer is not
//! run (one decision covers one call) and the model may ask again. Nothing the model writes — an
//! argument like `confirm: true` — counts as approval.
//!
//! Live events: an observer that [`TurnObserver::wants_text`] gets the model's answer text as the
//! provider streams it (the LLM calls are streamed then, and only then), and every recorded tool
//! call as it starts and completes, numbered by its index in the turn's `tool_calls`.

use async_trait::async_trait;
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use cks_tools::{ErrorCode, ToolError};

use cks_llm::{
    ChatOptions, ChatRequest, ChatResponse, ContentBlock, DeltaSink, LlmError, Message, Role, ToolResult, ToolSpec,
    Usage,
};

/// The reply when the iteration cap is reached.
pub const ITERATION_LIMIT_REPLY: &str = "Reached the tool-call iteration limit without a final answer.";

/// Something that answers chat requests (the LLM client, or a scripted model in tests).
#[async_trait]
pub trait ChatModel: Send + Sync {
    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, LlmError>;

    /// The same answer, its text handed to `deltas` as it arrives. By default the whole text at
    /// once, when the answer is complete (a model that cannot stream).
    async fn chat_streamed(&self, request: ChatRequest, deltas: &dyn DeltaSink) -> Result<ChatResponse, LlmError> {
        let response = self.chat(request).await?;
        let text = response.text();
        if !text.is_empty() {
            deltas.text(&text);
        }
        Ok(response)
    }
}

#[async_trait]
impl ChatModel for cks_llm::LlmClient {
    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, LlmError> {
        cks_llm::LlmClient::chat(self, request).await
    }

    async fn chat_streamed(&self, request: ChatRequest, deltas: &dyn DeltaSink) -> Result<ChatResponse, LlmError> {
        self.chat_with(request, ChatOptions { stream: true, deltas: Some(deltas) }).await
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
    /// The call may have changed the session, so earlier results of this turn may be stale.
    pub changed_state: bool,
}

/// Runs the tools the LLM asks for.
#[async_trait]
pub trait ToolExecutor: Send + Sync {
    /// The tools offered to the LLM for its next answer in a conversation holding `history`
    /// (tools found earlier in it stay offered).
    fn specs(&self, history: &[Message]) -> Vec<ToolSpec>;
    /// Whether a call to `name` with `arguments` would run: the tool is offered, and the arguments
    /// pass its argument checks. Used to decide whether text is a tool call.
    fn accepts(&self, name: &str, arguments: &Value) -> bool;
    /// Runs one call, returning within `time_left`; refusals, failures and running out of time
    /// are results, never panics or errors.
    async fn execute(&self, name: &str, arguments: &Value, origin: Origin<'_>, time_left: Duration) -> Execution;
    /// Whether a call to `name` with `arguments` waits for the user's approval when the turn asks
    /// for approvals: it may discard or overwrite state (a destructive tool, or a call that removes
    /// or replaces what the graph holds). No argument can make a destructive tool's call safe.
    fn needs_approval(&self, _name: &str, _arguments: &Value) -> bool {
        false
    }
    /// The arguments a call would run with (session arguments pinned), as shown before it runs.
    fn pinned(&self, _name: &str, arguments: &Value) -> Value {
        arguments.clone()
    }
}

/// Receives live progress of a turn.
pub trait TurnObserver: Send + Sync {
    fn llm_call(&self, _iteration: usize) {}
    fn tool_call(&self, _name: &str) {}
    /// Whether to stream the LLM calls and report their text ([`TurnObserver::text_delta`]).
    fn wants_text(&self) -> bool {
        false
    }
    /// The next piece of the model's answer text (only when [`TurnObserver::wants_text`]).
    fn text_delta(&self, _text: &str) {}
    /// A recorded tool call is about to run (or is answered without running: a repeat, a refusal);
    /// `index` is its place in the turn's tool calls, `arguments` as pinned.
    fn tool_call_started(&self, _index: usize, _name: &str, _arguments: &Value) {}
    /// That call's result.
    fn tool_call_completed(&self, _index: usize, _name: &str, _arguments: &Value, _result: &Value, _is_error: bool) {}
}

/// Hands streamed text to the observer.
struct TextToObserver<'a>(&'a dyn TurnObserver);

impl DeltaSink for TextToObserver<'_> {
    fn text(&self, delta: &str) {
        self.0.text_delta(delta);
    }
}

/// Characters of a result's JSON in [`result_summary`].
pub const RESULT_SUMMARY_CHARS: usize = 300;

/// A short text of a tool result: an error's `code: message`, or the first
/// [`RESULT_SUMMARY_CHARS`] characters of the result's JSON (with `…` when cut).
pub fn result_summary(result: &Value, is_error: bool) -> String {
    if is_error && let Some(code) = result.get("error").and_then(Value::as_str) {
        return match result.get("message").and_then(Value::as_str) {
            Some(message) => format!("{code}: {message}"),
            None => code.to_owned(),
        };
    }
    let text = serde_json::to_string(result).unwrap_or_default();
    match text.char_indices().nth(RESULT_SUMMARY_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

/// The user's answer to a pending approval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub approve: bool,
    /// Why, when the user says (passed on to the model with a rejection).
    pub reason: Option<String>,
}

/// A call that waits for the user's approval before it runs.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingApproval {
    pub tool_use_id: String,
    pub name: String,
    /// As the call would run (session arguments pinned).
    pub arguments: Value,
}

/// The call of `history`'s last message that waits for approval: the first call to a tool that
/// needs approval in a final assistant message whose calls have no results yet.
pub fn pending_approval(history: &[Message], tools: &dyn ToolExecutor) -> Option<PendingApproval> {
    let last = history.last().filter(|m| m.role == Role::Assistant)?;
    last.tool_calls().into_iter().find(|c| tools.needs_approval(c.name, c.input)).map(|c| PendingApproval {
        tool_use_id: c.id.to_owned(),
        name: c.name.to_owned(),
        arguments: tools.pinned(c.name, c.input),
    })
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
    /// Tool calls run per LLM answer; the rest are answered with an error result.
    pub max_tool_calls_per_answer: usize,
    /// Bytes of the recorded tool calls (arguments and results as JSON text) in one turn's result;
    /// past it, results are replaced by a marker.
    pub max_result_bytes: usize,
    pub model: Option<String>,
    pub system: Option<String>,
    /// Output tokens per LLM call (the provider's configured default when `None`).
    pub max_tokens: Option<u32>,
    /// Stop before running an answer that holds a call needing approval (see the module docs).
    pub approvals: bool,
}

/// Default of [`TurnConfig::max_tool_calls_per_answer`].
pub const DEFAULT_MAX_TOOL_CALLS_PER_ANSWER: usize = 16;
/// Default of [`TurnConfig::max_result_bytes`] (1 MiB).
pub const DEFAULT_MAX_RESULT_BYTES: usize = 1024 * 1024;
/// Default of [`TurnConfig::max_tokens`]: enough for any chat answer or tool call, small enough
/// that a model stuck generating cannot spend the deadline in one call.
pub const DEFAULT_MAX_OUTPUT_TOKENS: u32 = 2048;

impl Default for TurnConfig {
    fn default() -> Self {
        TurnConfig {
            max_iterations: 8,
            deadline: Duration::from_secs(300),
            token_budget: None,
            tool_result_cap: 16 * 1024,
            max_tool_calls_per_answer: DEFAULT_MAX_TOOL_CALLS_PER_ANSWER,
            max_result_bytes: DEFAULT_MAX_RESULT_BYTES,
            model: None,
            system: None,
            max_tokens: Some(DEFAULT_MAX_OUTPUT_TOKENS),
            approvals: false,
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
    /// The model wrote this call as text; it was recognised and run as a call.
    pub recovered_from_text: bool,
    /// The same call (tool and arguments) as `tool_calls[i]` of this turn; it did not run again.
    pub repeat_of: Option<usize>,
}

/// Why a turn ended without error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    Answered,
    IterationLimit,
    Deadline,
    TokenBudget,
    /// The model answered only with calls it had already made, twice in a row.
    Repetition,
    Cancelled,
    /// An answer's calls wait for the user's approval ([`TurnOutput::pending_approval`]).
    AwaitingApproval,
}

impl Stop {
    /// The `truncation_reason` reported for this stop, if it truncated the turn.
    pub fn truncation_reason(self) -> Option<&'static str> {
        match self {
            Stop::IterationLimit => Some("max_iterations"),
            Stop::Deadline => Some("deadline"),
            Stop::TokenBudget => Some("token_budget"),
            Stop::Repetition => Some("repeated_tool_calls"),
            Stop::Answered | Stop::Cancelled | Stop::AwaitingApproval => None,
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
    /// LLM requests sent, retries and failed ones included.
    pub llm_calls: usize,
    /// The provider and model that answered last (for audit), if any call succeeded.
    pub answered_by: Option<(String, String)>,
    /// Recorded results replaced by a marker because the turn's result reached its byte bound.
    pub results_cut: usize,
    /// The call waiting for approval, when the turn stopped for one.
    pub pending_approval: Option<PendingApproval>,
}

/// A turn that failed on an LLM call; what happened before the failure is kept for a retry.
#[derive(Debug)]
pub struct TurnFailure {
    pub error: LlmError,
    pub new_messages: Vec<Message>,
    pub tool_calls: Vec<ToolCallRecord>,
    pub usage: Usage,
    /// LLM requests sent, retries and failed ones included.
    pub llm_calls: usize,
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
    /// Bytes of the recorded calls so far, and how many results were cut.
    recorded_bytes: usize,
    results_cut: usize,
    max_result_bytes: usize,
    /// First record of each distinct call (tool name, arguments as the model wrote them).
    seen: HashMap<(String, String), usize>,
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
            results_cut: self.results_cut,
            pending_approval: None,
        }
    }

    fn fail(self, error: LlmError) -> TurnFailure {
        TurnFailure {
            error,
            new_messages: self.messages[self.first_new..].to_vec(),
            tool_calls: self.tool_calls,
            usage: self.usage,
            llm_calls: self.llm_calls,
        }
    }

    /// Records a call, cutting its result (and large arguments) once the turn's result is full.
    fn record(&mut self, mut record: ToolCallRecord) {
        let size = |v: &Value| serde_json::to_string(v).map_or(0, |t| t.len());
        let (arguments, result) = (size(&record.arguments), size(&record.result));
        if self.recorded_bytes + arguments + result > self.max_result_bytes {
            record.result = json!({
                "omitted": format!(
                    "This result ({result} bytes) is not included: the results of this turn reached the limit of \
                     {} bytes.", self.max_result_bytes
                ),
            });
            if arguments > CUT_ARGUMENTS_ABOVE {
                record.arguments = json!({"omitted": format!("{arguments} bytes of arguments are not included.")});
            }
            self.results_cut += 1;
        }
        self.recorded_bytes += size(&record.arguments) + size(&record.result);
        self.tool_calls.push(record);
    }
}

/// Arguments of a cut record larger than this are cut too.
const CUT_ARGUMENTS_ABOVE: usize = 1024;

/// One call of an answer, as the loop handles it.
struct Call {
    id: String,
    name: String,
    input: Value,
    recovered_from_text: bool,
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
    continue_turn(model, tools, history, config, observer, cancel, None).await
}

/// Runs one turn over `history`; with `decision`, first the calls of `history`'s last message,
/// which waits for that decision (the caller checked with [`pending_approval`] that it does).
pub async fn continue_turn(
    model: &dyn ChatModel,
    tools: &dyn ToolExecutor,
    history: &[Message],
    config: &TurnConfig,
    observer: &dyn TurnObserver,
    cancel: &CancellationToken,
    decision: Option<&Decision>,
) -> Result<TurnOutput, TurnFailure> {
    let started = Instant::now();
    let time_left = || config.deadline.checked_sub(started.elapsed()).filter(|d| !d.is_zero());
    let mut t = Transcript {
        messages: history.to_vec(),
        first_new: history.len(),
        tool_calls: Vec::new(),
        usage: Usage::default(),
        llm_calls: 0,
        answered_by: None,
        recorded_bytes: 0,
        results_cut: 0,
        max_result_bytes: config.max_result_bytes,
        seen: HashMap::new(),
    };
    let mut answers_of_repeats = 0;
    // Said to the model in the next request only, after the model server failed to read its
    // answer (once per turn; see `unreadable_answer_note`).
    let mut note: Option<String> = None;
    let mut noted_once = false;
    // Whether a call written as text with arguments its tool refuses has been run for its error.
    let mut refused_text_call = false;
    // The decided answer's calls run first, without an LLM call.
    let mut decided = decision.map(|d| {
        let calls = history.last().map(Message::tool_calls).unwrap_or_default();
        let calls = calls
            .into_iter()
            .map(|c| Call {
                id: c.id.to_owned(),
                name: c.name.to_owned(),
                input: c.input.clone(),
                recovered_from_text: false,
            })
            .collect::<Vec<_>>();
        (calls, d)
    });
    let mut iteration = 0;

    loop {
        let (calls, provider, model_name, decision) = match decided.take() {
            // Who asked for these calls is not in the history: the audit names no model.
            Some((calls, decision)) => (calls, String::new(), String::new(), Some(decision)),
            None => {
                if iteration >= config.max_iterations {
                    return Ok(t.finish(ITERATION_LIMIT_REPLY.into(), Stop::IterationLimit));
                }
                if cancel.is_cancelled() {
                    return Ok(t.finish(CANCELLED_REPLY.into(), Stop::Cancelled));
                }
                let Some(remaining) = time_left() else {
                    return Ok(t.finish(deadline_reply(config), Stop::Deadline));
                };
                if config.token_budget.is_some_and(|budget| t.usage.input_tokens + t.usage.output_tokens >= budget) {
                    return Ok(t.finish("Stopped: the token budget of this turn is spent.".into(), Stop::TokenBudget));
                }
                observer.llm_call(iteration);
                iteration += 1;
                // The offer grows as the model finds tools (`find_tools` results in the history).
                let specs = tools.specs(&t.messages);
                let system = match (note.take(), &config.system) {
                    (Some(note), Some(system)) => Some(format!("{system}\n\n{note}")),
                    (Some(note), None) => Some(note),
                    (None, system) => system.clone(),
                };
                let request = ChatRequest {
                    model: config.model.clone(),
                    system,
                    messages: t.messages.clone(),
                    tools: specs.clone(),
                    max_tokens: config.max_tokens,
                    temperature: None,
                    // A turn offers tools; a structured answer would shut them out.
                    output: None,
                };
                let text_sink = TextToObserver(observer);
                let answer = async {
                    if observer.wants_text() {
                        model.chat_streamed(request, &text_sink).await
                    } else {
                        model.chat(request).await
                    }
                };
                let response = tokio::select! {
                    response = answer => response,
                    () = cancel.cancelled() => {
                        // The request was sent; its retries are unknown.
                        t.llm_calls += 1;
                        return Ok(t.finish(CANCELLED_REPLY.into(), Stop::Cancelled));
                    }
                    () = tokio::time::sleep(remaining) => {
                        t.llm_calls += 1;
                        return Ok(t.finish(deadline_reply(config), Stop::Deadline));
                    }
                };
                let response = match response {
                    Ok(response) => response,
                    Err(error) => {
                        t.llm_calls += error.context().attempts as usize;
                        if !noted_once
                            && iteration < config.max_iterations
                            && let Some(text) = unreadable_answer_note(&error)
                        {
                            noted_once = true;
                            note = Some(text);
                            continue;
                        }
                        return Err(t.fail(error));
                    }
                };
                t.llm_calls += response.requests as usize;
                t.usage.input_tokens += response.usage.input_tokens;
                t.usage.output_tokens += response.usage.output_tokens;
                let (provider, model_name) = (response.provider.as_str().to_owned(), response.model.clone());
                t.answered_by = Some((provider.clone(), model_name.clone()));
                let mut answer = response.message;
                answer.role = Role::Assistant;
                let mut calls: Vec<Call> = answer
                    .tool_calls()
                    .iter()
                    .map(|c| Call {
                        id: c.id.to_owned(),
                        name: c.name.to_owned(),
                        input: c.input.clone(),
                        recovered_from_text: false,
                    })
                    .collect();
                if calls.is_empty()
                    && let Some(call) = recover_text_call(&mut answer, &t.messages, &specs, tools, !refused_text_call)
                {
                    refused_text_call |= !tools.accepts(&call.name, &call.input);
                    calls.push(call);
                }
                t.messages.push(answer);
                if calls.is_empty() {
                    let reply = t.messages.last().map(Message::text).unwrap_or_default();
                    return Ok(t.finish(reply, Stop::Answered));
                }
                if config.approvals
                    && let Some(pending) = pending_approval(&t.messages, tools)
                    && calls.iter().take(config.max_tool_calls_per_answer).any(|c| c.id == pending.tool_use_id)
                {
                    let text = t.messages.last().map(Message::text).unwrap_or_default();
                    let reply = if text.trim().is_empty() {
                        format!("Waiting for the user's approval to run {}.", pending.name)
                    } else {
                        text
                    };
                    let mut output = t.finish(reply, Stop::AwaitingApproval);
                    output.pending_approval = Some(pending);
                    return Ok(output);
                }
                (calls, provider, model_name, None)
            }
        };

        let mut results = Vec::with_capacity(calls.len());
        let mut stop = None;
        let mut all_repeats = true;
        // The first call needing approval is the one the decision is about.
        let mut decision = decision;
        for (index, call) in calls.into_iter().enumerate() {
            let Call { id, name, input, recovered_from_text } = call;
            // Once the turn must stop, the remaining calls do not run, but each still gets a
            // result so the history stays valid for every provider.
            if stop.is_none() && cancel.is_cancelled() {
                stop = Some(Stop::Cancelled);
            }
            let remaining = time_left();
            if stop.is_none() && remaining.is_none() {
                stop = Some(Stop::Deadline);
            }
            let decided =
                if stop.is_none() && tools.needs_approval(&name, &input) { Some(decision.take()) } else { None };
            let refused = match stop {
                Some(Stop::Cancelled) => {
                    Some((ErrorCode::Cancelled, "The turn was cancelled before this call ran.".to_owned()))
                }
                Some(_) => Some((
                    ErrorCode::DeadlineExceeded,
                    "The turn reached its deadline before this call ran.".to_owned(),
                )),
                None if index >= config.max_tool_calls_per_answer => Some((
                    ErrorCode::TooManyToolCalls,
                    format!(
                        "Not run: one answer may make at most {} tool calls and this was call {}. Make the calls that \
                         are still needed in the next answer.",
                        config.max_tool_calls_per_answer,
                        index + 1
                    ),
                )),
                None => match decided {
                    Some(Some(Decision { approve: false, reason })) => Some((
                        ErrorCode::NotApproved,
                        match reason.as_deref().map(str::trim).filter(|r| !r.is_empty()) {
                            Some(reason) => {
                                format!("The user declined this call, so it did not run. Their reason: {reason}")
                            }
                            None => "The user declined this call, so it did not run.".to_owned(),
                        },
                    )),
                    Some(None) if config.approvals => Some((
                        ErrorCode::ApprovalRequired,
                        "Not run: this call needs the user's approval, and the user decided only on an earlier call \
                         of this answer. Make it again in a later answer if it is still needed."
                            .to_owned(),
                    )),
                    _ => None,
                },
            };
            if let Some((code, message)) = refused {
                let note = ToolError::new(code, message).to_value();
                results.push(ToolResult { tool_use_id: id, content: note.to_string(), is_error: true });
                if matches!(code, ErrorCode::TooManyToolCalls | ErrorCode::NotApproved | ErrorCode::ApprovalRequired) {
                    all_repeats = false;
                    let arguments = tools.pinned(&name, &input);
                    let index = t.tool_calls.len();
                    observer.tool_call_started(index, &name, &arguments);
                    observer.tool_call_completed(index, &name, &arguments, &note, true);
                    t.record(ToolCallRecord {
                        name,
                        // A call over the cap is recorded as the model wrote it (as always); a call
                        // the user decided on, as it was shown for approval.
                        arguments: if code == ErrorCode::TooManyToolCalls { input } else { arguments },
                        result: note,
                        is_error: true,
                        recovered_from_text,
                        repeat_of: None,
                    });
                }
                continue;
            }
            let key = (name.clone(), serde_json::to_string(&input).unwrap_or_default());
            if let Some(&first) = t.seen.get(&key) {
                let earlier = &t.tool_calls[first];
                let (result, is_error, arguments) =
                    (earlier.result.clone(), earlier.is_error, earlier.arguments.clone());
                let note = json!({
                    "note": "You already made this exact call in this turn; this is its result again. Do not repeat \
                             it: answer the user, or make a different call.",
                    "result": result,
                });
                let text = serde_json::to_string(&note).unwrap_or_else(|_| "{}".into());
                results.push(ToolResult { tool_use_id: id, content: cap(text, config.tool_result_cap), is_error });
                let index = t.tool_calls.len();
                observer.tool_call_started(index, &name, &arguments);
                observer.tool_call_completed(index, &name, &arguments, &result, is_error);
                t.record(ToolCallRecord {
                    name,
                    arguments,
                    result,
                    is_error,
                    recovered_from_text,
                    repeat_of: Some(first),
                });
                continue;
            }
            all_repeats = false;
            observer.tool_call(&name);
            let index = t.tool_calls.len();
            observer.tool_call_started(index, &name, &tools.pinned(&name, &input));
            let origin = Origin { provider: &provider, model: &model_name };
            let execution = tools.execute(&name, &input, origin, remaining.unwrap_or_default()).await;
            observer.tool_call_completed(index, &name, &execution.arguments, &execution.result, execution.is_error);
            let text = serde_json::to_string(&execution.result).unwrap_or_else(|_| "{}".into());
            results.push(ToolResult {
                tool_use_id: id,
                content: cap(text, config.tool_result_cap),
                is_error: execution.is_error,
            });
            if execution.changed_state {
                // Earlier reads may be stale now: asking again is not a repeat.
                t.seen.clear();
            }
            t.seen.insert(key, t.tool_calls.len());
            t.record(ToolCallRecord {
                name,
                arguments: execution.arguments,
                result: execution.result,
                is_error: execution.is_error,
                recovered_from_text,
                repeat_of: None,
            });
        }
        t.messages.push(Message::tool_results(results));
        match stop {
            Some(Stop::Cancelled) => return Ok(t.finish(CANCELLED_REPLY.into(), Stop::Cancelled)),
            Some(_) => return Ok(t.finish(deadline_reply(config), Stop::Deadline)),
            None => {}
        }
        answers_of_repeats = if all_repeats { answers_of_repeats + 1 } else { 0 };
        if answers_of_repeats >= 2 {
            return Ok(t.finish(REPETITION_REPLY.into(), Stop::Repetition));
        }
    }
}

/// The reply when the model keeps repeating calls it has made.
pub const REPETITION_REPLY: &str =
    "Stopped: the model kept repeating tool calls it had already made in this turn without answering.";

fn deadline_reply(config: &TurnConfig) -> String {
    format!("Stopped: the turn reached its deadline of {} s before a final answer.", config.deadline.as_secs())
}

/// What the model is told when the model server answered 500 because it could not parse the
/// model's answer: some servers (llama.cpp's, Ollama's) read the model's text into tool calls and
/// fail the request when that text is a malformed call. The same request would get the same
/// answer, so the model is asked again, once a turn, with the cause, as it would be told of a
/// failed tool call. Any other failure ends the turn.
fn unreadable_answer_note(error: &LlmError) -> Option<String> {
    let context = error.context();
    let message = context.message.to_lowercase();
    let about_parsing = message.contains("parse") || message.contains("parsing");
    (error.kind() == cks_llm::ErrorKind::Server && context.status == Some(500) && about_parsing).then(|| {
        let cause: String = context.message.chars().take(300).collect();
        format!(
            "Your previous answer could not be read by the model server ({cause}). Answer again: either one \
             tool call with JSON arguments, or a reply in words."
        )
    })
}

/// When `answer` has no structured call and its text is exactly one call to an offered tool —
/// `{"name": ..., "arguments": {...}}` (or `"parameters"`), alone or inside `<tool_call>` tags —
/// turns the text into a structured call (so the history holds a call and its result, as for any
/// other call) and returns it. Arguments the tool refuses are taken only when `refused_allowed`
/// (once a turn): the call then runs for its error, which tells the model what to fix. Anything
/// else stays text.
fn recover_text_call(
    answer: &mut Message,
    history: &[Message],
    specs: &[ToolSpec],
    tools: &dyn ToolExecutor,
    refused_allowed: bool,
) -> Option<Call> {
    let (name, input) = parse_text_call(&answer.text())?;
    if !specs.iter().any(|s| s.name == name) || !(refused_allowed || tools.accepts(&name, &input)) {
        return None;
    }
    let id = unused_call_id(history);
    answer.content.retain(|b| !matches!(b, ContentBlock::Text { .. }));
    answer.content.push(ContentBlock::ToolUse {
        id: id.clone(),
        name: name.clone(),
        input: input.clone(),
        provider_state: None,
    });
    Some(Call { id, name, input, recovered_from_text: true })
}

/// The tool name and argument object of a call written as text, if the text is exactly one.
fn parse_text_call(text: &str) -> Option<(String, Value)> {
    let mut body = text.trim();
    if let Some(inner) = body.strip_prefix("<tool_call>").and_then(|b| b.strip_suffix("</tool_call>")) {
        body = inner.trim();
    }
    let Ok(Value::Object(mut call)) = serde_json::from_str::<Value>(body) else { return None };
    let Some(Value::String(name)) = call.remove("name") else { return None };
    let arguments = match (call.remove("arguments"), call.remove("parameters")) {
        (Some(a), None) | (None, Some(a)) => a,
        (None, None) => Value::Object(Map::new()),
        (Some(_), Some(_)) => return None,
    };
    if !call.is_empty() {
        return None;
    }
    // Some models write the arguments as a JSON string, as the OpenAI wire format carries them.
    let arguments = match arguments {
        Value::String(text) => serde_json::from_str(&text).ok()?,
        other => other,
    };
    arguments.is_object().then_some((name, arguments))
}

/// A tool-call id no message of `history` uses (portable to every provider).
fn unused_call_id(history: &[Message]) -> String {
    let used: std::collections::HashSet<&str> = history
        .iter()
        .flat_map(|m| &m.content)
        .filter_map(|b| match b {
            ContentBlock::ToolUse { id, .. } => Some(id.as_str()),
            _ => None,
        })
        .collect();
    (1..).map(|n| format!("call_text_{n}")).find(|id| !used.contains(id.as_str())).unwrap_or_default()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_calls_are_recognised_only_when_the_text_is_exactly_a_call() {
        let call = |t: &str| parse_text_call(t);
        assert_eq!(call(r#"{"name": "f", "arguments": {"a": 1}}"#), Some(("f".into(), json!({"a": 1}))));
        assert_eq!(
            call(" <tool_call>\n{\"name\": \"f\", \"parameters\": {}}\n</tool_call> "),
            Some(("f".into(), json!({})))
        );
        assert_eq!(call(r#"{"name": "f", "arguments": "{\"a\": 2}"}"#), Some(("f".into(), json!({"a": 2}))));
        assert_eq!(call(r#"{"name": "f"}"#), Some(("f".into(), json!({}))));
        for text in [
            "Sure: {\"name\": \"f\", \"arguments\": {}}",
            r#"{"name": "f", "arguments": {}} and more"#,
            r#"{"name": "f", "arguments": {}, "extra": 1}"#,
            r#"{"name": "f", "arguments": [1]}"#,
            r#"{"name": 3, "arguments": {}}"#,
            r#"{"tool": "f"}"#,
            "the answer is 42",
            "",
        ] {
            assert_eq!(call(text), None, "{text}");
        }
    }

    #[test]
    fn generated_ids_are_unused() {
        let mut history = vec![Message::user("hi")];
        assert_eq!(unused_call_id(&history), "call_text_1");
        history.push(Message {
            role: Role::Assistant,
            content: vec![ContentBlock::ToolUse {
                id: "call_text_1".into(),
                name: "f".into(),
                input: json!({}),
                provider_state: None,
            }],
        });
        assert_eq!(unused_call_id(&history), "call_text_2");
    }
}
