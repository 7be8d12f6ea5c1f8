//! Approvals through the protocol. When a chat's destructive call waits for its user
//! (`pending_approval` in `ai_chat`'s result) and the client can ask its user (form elicitation),
//! the server asks, and the same `tools/call` continues the turn with the answer:
//!
//! - before 2026-07-28: an `elicitation/create` request to the client while the call runs;
//! - on 2026-07-28, which has no server-to-client requests: an `input_required` result asking the
//!   same question, the waiting result sealed in `requestState` (HMAC-SHA256, bound to the tool
//!   and its arguments, valid for an hour, the key derived from the secret every replica on a
//!   store shares); the client's retry carries the answer to whichever replica gets it.
//!
//! The turn then goes on exactly as with `ai_chat`'s own `approval` argument: one decision covers
//! one call, and consent comes only from the client's answer, never from what the model wrote.
//! A client that cannot ask, or whose user dismisses the question, gets the waiting result as
//! before, and may still decide with `approval`. The answer of a continued turn counts every call
//! and token of the turn, before and after the question.

use std::time::Duration;

use rmcp::RoleServer;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction,
    ErrorData, InputRequest, InputRequests, InputRequiredResult, RequestStateCodec, SealOptions,
};
use rmcp::service::RequestContext;
use serde_json::{Map, Value, json};

/// The key of the question in `inputRequests` / `inputResponses`.
const QUESTION: &str = "approval";
/// How long a sealed waiting turn can be continued.
const STATE_TTL: Duration = Duration::from_secs(3600);
/// How long the server waits for a client's answer before the turn ends waiting, as without one.
const ANSWER_WAIT: Duration = Duration::from_secs(900);

/// The call `result` waits on, when it waits.
pub(crate) fn waiting(result: &CallToolResult) -> Option<&Value> {
    result.structured_content.as_ref()?.get("pending_approval").filter(|p| p.is_object())
}

/// Whether the request's client can put a form to its user.
pub(crate) fn client_asks(context: &RequestContext<RoleServer>) -> bool {
    context
        .client_capabilities()
        .and_then(|c| c.elicitation)
        // An empty capability is the form, as before URL elicitation existed.
        .is_some_and(|e| e.form.is_some() || e.url.is_none())
}

/// The question put to the user about `pending` (`{"tool_use_id", "name", "arguments"}`).
pub(crate) fn question(pending: &Value) -> Result<ElicitRequestParams, ErrorData> {
    let name = pending["name"].as_str().unwrap_or("a tool");
    let arguments = serde_json::to_string(&pending["arguments"]).unwrap_or_default();
    let message = format!(
        "The chat's model wants to run {name} with {arguments}. It may discard or overwrite knowledge. Run it?"
    );
    serde_json::from_value(json!({
        "mode": "form",
        "message": message,
        "requestedSchema": {
            "type": "object",
            "properties": {
                "approve": {"type": "boolean", "title": "Run it", "description": format!("Run {name} as shown")},
                "reason": {"type": "string", "title": "Reason", "description": "Why (told to the model when you decline)"},
            },
            "required": ["approve"],
        },
    }))
    .map_err(|e| ErrorData::internal_error(format!("building the approval question: {e}"), None))
}

/// The decision in the user's answer, as `ai_chat`'s `approval` argument; `None` when the user
/// dismissed the question without deciding.
pub(crate) fn decision(answer: &ElicitResult) -> Option<Value> {
    let content = answer.content.as_ref();
    let reason = content.and_then(|c| c.get("reason")).and_then(Value::as_str).filter(|r| !r.trim().is_empty());
    let approve = match answer.action {
        ElicitationAction::Accept => content.and_then(|c| c.get("approve")).and_then(Value::as_bool) == Some(true),
        ElicitationAction::Decline => false,
        _ => return None,
    };
    let mut decision = json!({"decision": if approve { "approve" } else { "reject" }});
    if let (false, Some(reason)) = (approve, reason) {
        decision["reason"] = reason.into();
    }
    Some(decision)
}

/// The arguments that continue the turn `waiting` stopped, with `decision`: the original
/// arguments less the new message, and the history as `waiting` left it (its stored chat, or its
/// messages).
pub(crate) fn continuation(arguments: &Map<String, Value>, waiting: &Value, decision: Value) -> Map<String, Value> {
    let mut next = arguments.clone();
    for key in ["prompt", "new_chat", "title"] {
        next.remove(key);
    }
    match waiting.get("chat_id").filter(|c| c.is_string()) {
        Some(chat) => {
            next.insert("chat_id".into(), chat.clone());
            next.remove("messages");
        }
        None => {
            next.insert("messages".into(), waiting.get("messages").cloned().unwrap_or_else(|| json!([])));
        }
    }
    next.insert("approval".into(), decision);
    next
}

/// One answer for the whole turn: `later`'s, with `earlier`'s tool calls before its own (their
/// `repeat_of` indexes moved along) and the usage of both.
pub(crate) fn joined(earlier: &Value, mut later: Value) -> Value {
    let before = earlier["tool_calls"].as_array().cloned().unwrap_or_default();
    let offset = before.len() as u64;
    if let Some(calls) = later.get_mut("tool_calls").and_then(Value::as_array_mut) {
        for call in calls.iter_mut() {
            if let Some(index) = call.get("repeat_of").and_then(Value::as_u64) {
                call["repeat_of"] = (index + offset).into();
            }
        }
        calls.splice(0..0, before);
    }
    if let Some(usage) = later.get_mut("usage").and_then(Value::as_object_mut) {
        for (key, value) in usage.iter_mut() {
            if let (Some(a), Some(b)) = (value.as_u64(), earlier["usage"][key.as_str()].as_u64()) {
                *value = (a + b).into();
            }
        }
    }
    later
}

/// Seals and opens the waiting turns of the stateless revision.
#[derive(Clone)]
pub(crate) struct States {
    codec: std::sync::Arc<RequestStateCodec>,
}

impl std::fmt::Debug for States {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("States(<key redacted>)")
    }
}

impl States {
    /// States sealed with `key`.
    pub(crate) fn new(key: [u8; RequestStateCodec::MIN_KEY_LENGTH]) -> States {
        // `new_unchecked` checks only the length, which the type fixes.
        States { codec: std::sync::Arc::new(RequestStateCodec::new_unchecked(key.to_vec())) }
    }

    /// What a sealed state is bound to: the tool and its arguments as the client sends them again.
    fn binding(request: &CallToolRequestParams) -> Vec<u8> {
        let arguments = request.arguments.as_ref().map(|a| Value::Object(a.clone())).unwrap_or(Value::Null);
        format!("tools/call\n{}\n{}", request.name, arguments).into_bytes()
    }

    /// The `input_required` result that asks about the call `waiting` waits on, the turn sealed.
    pub(crate) fn ask(
        &self,
        request: &CallToolRequestParams,
        waiting: &Value,
    ) -> Result<InputRequiredResult, ErrorData> {
        let question = question(&waiting["pending_approval"])?;
        let binding = Self::binding(request);
        let state = self
            .codec
            .seal_json_with(waiting, &SealOptions::new().associated_data(&binding).ttl(STATE_TTL))
            .map_err(|e| ErrorData::internal_error(format!("sealing the waiting turn: {e}"), None))?;
        let mut requests = InputRequests::new();
        requests.insert(QUESTION.into(), InputRequest::Elicitation(ElicitRequest::new(question)));
        Ok(InputRequiredResult::new(Some(requests), Some(state)))
    }

    /// The waiting turn a retry continues and the user's answer, or the error the retry gets
    /// (any state that does not open as sealed for this very call is one error, whatever the cause).
    pub(crate) fn resume(&self, request: &CallToolRequestParams) -> Result<Option<(Value, ElicitResult)>, ErrorData> {
        let Some(state) = &request.request_state else { return Ok(None) };
        let waiting: Value = self.codec.open_json_with(state, &Self::binding(request)).map_err(|_| {
            ErrorData::invalid_params("requestState is not one this server gave for this call, or it has expired", None)
        })?;
        let answer =
            request.input_responses.as_ref().and_then(|r| r.get(QUESTION)).ok_or_else(|| {
                ErrorData::invalid_params(format!("inputResponses has no answer to '{QUESTION}'"), None)
            })?;
        let answer: ElicitResult = serde_json::from_value(answer.clone()).map_err(|e| {
            ErrorData::invalid_params(format!("the answer to '{QUESTION}' is not an elicitation result: {e}"), None)
        })?;
        Ok(Some((waiting, answer)))
    }
}

/// Asks the client of a handshake revision, waiting at most [`ANSWER_WAIT`] and no longer than
/// the call; `None` when there is no answer (the client failed, went away or was too slow).
pub(crate) async fn ask_client(context: &RequestContext<RoleServer>, pending: &Value) -> Option<ElicitResult> {
    let question = question(pending).ok()?;
    tokio::select! {
        answer = context.peer.create_elicitation_with_timeout(question, Some(ANSWER_WAIT)) => answer.ok(),
        () = context.ct.cancelled() => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(value: Value) -> ElicitResult {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn only_an_accepted_approve_is_consent() {
        let approve = answer(json!({"action": "accept", "content": {"approve": true, "reason": "ignored"}}));
        assert_eq!(decision(&approve), Some(json!({"decision": "approve"})));
        let no = answer(json!({"action": "accept", "content": {"approve": false, "reason": "keep it"}}));
        assert_eq!(decision(&no), Some(json!({"decision": "reject", "reason": "keep it"})));
        let unanswered = answer(json!({"action": "accept", "content": {}}));
        assert_eq!(decision(&unanswered), Some(json!({"decision": "reject"})));
        let declined = answer(json!({"action": "decline"}));
        assert_eq!(decision(&declined), Some(json!({"decision": "reject"})));
        assert_eq!(decision(&answer(json!({"action": "cancel"}))), None);
    }

    #[test]
    fn a_continuation_carries_the_history_not_the_new_message() {
        let args = json!({"session_id": "s", "prompt": "undo", "approvals": true, "new_chat": true, "title": "t"});
        let args = args.as_object().unwrap();
        let stored = continuation(args, &json!({"chat_id": "c1", "messages": [1]}), json!({"decision": "approve"}));
        assert_eq!(
            Value::Object(stored),
            json!({"session_id": "s", "approvals": true, "chat_id": "c1", "approval": {"decision": "approve"}})
        );
        let sent = continuation(args, &json!({"messages": [1, 2]}), json!({"decision": "reject"}));
        assert_eq!(sent["messages"], json!([1, 2]));
        assert!(sent.get("prompt").is_none() && sent.get("chat_id").is_none());
    }

    #[test]
    fn a_joined_answer_counts_the_whole_turn() {
        let earlier =
            json!({"tool_calls": [{"name": "a"}], "usage": {"input_tokens": 10, "output_tokens": 2, "llm_calls": 1}});
        let later = json!({
            "reply": "done",
            "tool_calls": [{"name": "b"}, {"name": "b", "repeat_of": 0}],
            "usage": {"input_tokens": 5, "output_tokens": 1, "llm_calls": 2},
        });
        let whole = joined(&earlier, later);
        assert_eq!(whole["reply"], "done");
        assert_eq!(whole["tool_calls"], json!([{"name": "a"}, {"name": "b"}, {"name": "b", "repeat_of": 1}]));
        assert_eq!(whole["usage"], json!({"input_tokens": 15, "output_tokens": 3, "llm_calls": 3}));
    }

    fn call(arguments: Value) -> CallToolRequestParams {
        CallToolRequestParams::new("ai_chat").with_arguments(arguments.as_object().unwrap().clone())
    }

    #[test]
    fn a_sealed_turn_opens_only_for_its_own_call_and_answer() {
        let states = States::new([7; 32]);
        let request = call(json!({"session_id": "s", "prompt": "undo"}));
        let waiting = json!({"messages": [], "pending_approval": {"name": "revert_version", "arguments": {}}});
        let asked = states.ask(&request, &waiting).unwrap();
        let wire = serde_json::to_value(&asked).unwrap();
        assert_eq!(wire["resultType"], "input_required");
        assert_eq!(wire["inputRequests"][QUESTION]["method"], "elicitation/create");
        assert_eq!(wire["inputRequests"][QUESTION]["params"]["mode"], "form");
        let state = asked.request_state.clone().unwrap();
        let responses = |value: Value| [(QUESTION.to_owned(), value)].into_iter().collect();

        let mut retry = request.clone();
        retry.request_state = Some(state.clone());
        retry.input_responses = Some(responses(json!({"action": "accept", "content": {"approve": true}})));
        let (opened, answer) = states.resume(&retry).unwrap().unwrap();
        assert_eq!(opened, waiting);
        assert_eq!(decision(&answer), Some(json!({"decision": "approve"})));

        // Another call's arguments, a changed state, another server's key, or no answer: refused.
        let mut other = call(json!({"session_id": "other", "prompt": "undo"}));
        other.request_state = Some(state.clone());
        other.input_responses = retry.input_responses.clone();
        assert!(states.resume(&other).is_err());
        let mut forged = retry.clone();
        forged.request_state = Some(format!("{state}x"));
        assert!(states.resume(&forged).is_err());
        assert!(States::new([8; 32]).resume(&retry).is_err());
        let mut unanswered = retry.clone();
        unanswered.input_responses = None;
        assert!(states.resume(&unanswered).is_err());
        assert_eq!(states.resume(&request).unwrap(), None);
    }
}
