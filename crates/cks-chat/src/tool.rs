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
//!
//! Beside this file: `tool/settings.rs` (the `CKS_AI_CHAT_*` settings), `tool/wire.rs` (arguments
//! and result), `tool/stored.rs` (stored chats and decisions), `tool/watchers.rs` (progress and
//! live events).

use cks_tools::ErrorCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cks_llm::{ErrorKind, Message, Role};
use cks_runtime::store::ChatRow;
use cks_tools::{Named, ProgressSink, SessionCheck, Tool, ToolContext, ToolError, ToolMeta};

use crate::events::{ChatEvent, ChatEventSink, watching};

mod settings;
mod stored;
mod watchers;
mod wire;

pub use settings::{AI_CHAT_VARIABLES, AiChatConfig, AiChatConfigError};
pub use stored::MAX_TITLE_CHARS;
use stored::*;
use watchers::*;
pub use wire::{Approval, ApprovalDecision, Input, Output, PendingCall, ToolCall, TurnUsage};

use crate::executor::RegistryExecutor;
use crate::turn::{
    ChatModel, Decision, Stop, ToolCallRecord, TurnConfig, TurnObserver, continue_turn, pending_approval,
    result_summary,
};

/// Short on purpose: every token of it is sent with every round trip, and small local models
/// follow a few plain rules better than many.
pub const SYSTEM_PROMPT: &str = "You work on one knowledge graph with the tools provided; they always act on this \
chat's graph, so never pass session ids. To read or list objects use query_subgraph; to find an object by name use \
search_semantic; to add or change objects use evolve_knowledge. Version tools are only for the graph's history. \
For anything else, find_tools finds more tools. When a tool reports an error, fix the call or explain the problem. \
Answer briefly.";

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

/// The calls as a JSON list, for error results (which carry the calls made so far).
fn records(calls: &[ToolCallRecord]) -> Value {
    serde_json::to_value(calls.iter().map(ToolCall::from).collect::<Vec<_>>()).unwrap_or(Value::Null)
}

fn messages_out(raw: Vec<Value>, new: &[Message]) -> Value {
    let mut out = raw;
    out.extend(new.iter().map(|m| serde_json::to_value(m).unwrap_or(Value::Null)));
    Value::Array(out)
}

#[async_trait::async_trait]
impl Tool for AiChat {
    type Input = Input;
    type Output = Output;
    const NAMED: &'static [(&'static str, Named)] = &[("chat_id", Named::Chat)];
    const TITLE: &'static str = "Chat with the graph";
    const META: ToolMeta = ToolMeta {
        name: "ai_chat",
        description: "One chat turn with the configured LLM, which may call the graph tools on 'session_id' \
            (and may revert it). Start with 'prompt'; continue with the returned 'messages' plus a new user \
            message, or with 'chat_id' (from 'new_chat') and the next 'prompt'. Returns {reply, tool_calls, \
            messages, chat_id, usage}. Errors: llm_call_failed, chat_not_found, chat_busy (turn not saved). With \
            'approvals', a destructive call stops the turn with 'pending_approval'; send 'approval' and no prompt.",
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
        if let Some(system) = &mut config.system {
            let grounding = ctx.runtime.read(&input.session_id, |s, _| crate::grounding::describe(s)).await?;
            system.push_str("\n\n");
            system.push_str(&grounding);
        }
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
