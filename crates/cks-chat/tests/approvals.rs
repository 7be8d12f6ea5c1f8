//! Approval of destructive calls (`approvals`, `approval`, `pending_approval`) and the live events
//! of a turn (`text_delta`, `tool_call_started`, `tool_call_completed`), with a scripted model
//! through the registry.

mod support;

use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

use cks_chat::{ChatEvent, ChatEventSink, watch_with};
use cks_llm::{ContentBlock, Role};

use support::{Answer, Harness, Scripted, add_object, graph};

fn tools(calls: &[(&str, Value)]) -> Answer {
    Answer::Tools(calls.iter().map(|(n, a)| (n.to_string(), a.clone())).collect())
}

impl Harness {
    async fn tool(&self, name: &str, args: Value) -> Value {
        self.registry.call(name, args, &self.ctx).await.unwrap()
    }

    /// A session with two versions: the first one's id and state hash.
    async fn two_versions(&self) -> (String, String, String) {
        let sid = self.session(graph("s")).await;
        let mut hashes = Vec::new();
        for id in ["n1", "n2"] {
            let out = self
                .tool("evolve_knowledge", json!({"session_id": sid, "operations": add_object(id)["operations"]}))
                .await;
            assert!(out.get("error").is_none(), "{out}");
            hashes.push(self.state(&sid).await.0);
        }
        let versions = self.tool("list_versions", json!({"session_id": sid})).await;
        let versions = versions["versions"].as_array().unwrap();
        let v1 = versions[versions.len() - 2]["version_id"].as_str().unwrap().to_owned();
        (sid, v1, hashes.remove(0))
    }
}

/// The model's answers of a request, as the provider saw them.
fn tool_results(model: &Scripted, request: usize) -> Vec<(String, String, bool)> {
    let sent = model.request(request).messages;
    sent.last()
        .unwrap()
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolResult { tool_use_id, content, is_error } => {
                Some((tool_use_id.clone(), content.clone(), *is_error))
            }
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_destructive_call_waits_for_approval_even_with_confirm_true_and_runs_once_approved() {
    let model = Scripted::new(vec![
        Answer::Tools(vec![
            ("query_subgraph".into(), json!({})),
            // The model saying it has consent is not consent.
            ("revert_version".into(), json!({"target_version_id": "V1", "confirm": true})),
        ]),
        Answer::Text("Reverted.".into()),
    ]);
    let h = Harness::new(model.clone());
    let (sid, v1, first_hash) = h.two_versions().await;
    // The script cannot know the version id in advance: the model names it V1, and the test puts
    // the real id in the history it sends back.
    let (before_hash, before_versions) = h.state(&sid).await;

    let out = h.chat(json!({"session_id": sid, "prompt": "Undo the last change", "approvals": true})).await;
    assert_eq!(out["pending_approval"]["name"], "revert_version", "{out}");
    let pending_id = out["pending_approval"]["tool_use_id"].as_str().unwrap().to_owned();
    assert_eq!(
        out["pending_approval"]["arguments"],
        json!({"session_id": sid, "target_version_id": "V1", "confirm": true}),
        "as it would run: pinned"
    );
    assert_eq!(out["tool_calls"], json!([]), "none of the answer's calls ran");
    assert_eq!(out["reply"], "Waiting for the user's approval to run revert_version.");
    assert!(out.get("truncated").is_none() && out.get("error").is_none(), "{out}");
    let messages = out["messages"].as_array().unwrap().clone();
    assert_eq!(messages.len(), 2);
    let last = &messages[1];
    assert_eq!(last["role"], "assistant");
    assert_eq!(last["content"][1]["type"], "tool_use");
    assert_eq!(last["content"][1]["id"], json!(pending_id));
    assert_eq!(h.state(&sid).await, (before_hash.clone(), before_versions), "nothing changed");
    assert_eq!(model.calls(), 1);

    // Approve, on the returned messages (with the real version id swapped in for the script's).
    let mut messages = messages;
    messages[1]["content"][1]["input"]["target_version_id"] = json!(v1);
    let out = h.chat(json!({"session_id": sid, "messages": messages, "approval": {"decision": "approve"}})).await;
    assert_eq!(out["reply"], "Reverted.", "{out}");
    assert!(out.get("pending_approval").is_none());
    let calls = out["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2, "the answer's calls ran in order: {out}");
    assert_eq!(calls[0]["name"], "query_subgraph");
    assert_eq!(calls[1]["name"], "revert_version");
    assert_eq!(calls[1]["is_error"], false, "{}", calls[1]);
    assert_eq!(calls[1]["arguments"]["session_id"], json!(sid), "still pinned");
    let (hash, versions) = h.state(&sid).await;
    assert_eq!((hash, versions), (first_hash, before_versions + 1), "reverted once, as a new version");
    // The model saw both results, matched to the answer's calls, and answered.
    assert_eq!(model.calls(), 2);
    let results = tool_results(&model, 1);
    assert_eq!(results.len(), 2);
    assert_eq!(results[1].0, pending_id);
    assert!(!results[1].2);
    // The history is whole: the caller's messages, the results, the answer.
    let all = out["messages"].as_array().unwrap();
    assert_eq!(all.len(), 4);
    assert_eq!(all[2]["role"], "user");
    assert_eq!(all[3]["content"][0]["text"], "Reverted.");
    // The revert is audited as a chat call, without a model (it was asked for in the earlier request).
    let listed = h.tool("list_versions", json!({"session_id": sid})).await;
    let metadata = &listed["versions"].as_array().unwrap().last().unwrap()["metadata"];
    assert_eq!(metadata["tool"], "ai_chat");
    assert_eq!(metadata["via_tool"], "revert_version");
}

#[tokio::test]
async fn a_rejected_call_is_answered_with_the_reason_and_the_safe_calls_still_run() {
    let model = Scripted::new(vec![
        Answer::Tools(vec![
            ("revert_version".into(), json!({"target_version_id": "V1"})),
            ("evolve_knowledge".into(), add_object("n3")),
        ]),
        Answer::Text("Understood, I did not revert.".into()),
    ]);
    let h = Harness::new(model.clone());
    let (sid, _, _) = h.two_versions().await;
    let (_, versions) = h.state(&sid).await;

    let out = h.chat(json!({"session_id": sid, "prompt": "Undo and add n3", "approvals": true})).await;
    assert_eq!(out["pending_approval"]["name"], "revert_version", "{out}");
    assert_eq!(h.state(&sid).await.1, versions, "not even the safe call ran");

    let out = h
        .chat(json!({
            "session_id": sid,
            "messages": out["messages"],
            "approval": {"decision": "reject", "reason": "keep the history as it is"},
        }))
        .await;
    assert_eq!(out["reply"], "Understood, I did not revert.", "{out}");
    let calls = out["tool_calls"].as_array().unwrap();
    assert_eq!(calls[0]["name"], "revert_version");
    assert_eq!(calls[0]["is_error"], true);
    assert_eq!(calls[0]["result"]["error"], "not_approved");
    let message = calls[0]["result"]["message"].as_str().unwrap();
    assert!(message.contains("declined") && message.contains("keep the history as it is"), "{message}");
    assert_eq!(calls[1]["name"], "evolve_knowledge");
    assert_eq!(calls[1]["is_error"], false, "{}", calls[1]);
    assert_eq!(h.state(&sid).await.1, versions + 1, "only the addition committed");
    let results = tool_results(&model, 1);
    assert!(results[0].2 && results[0].1.contains("declined"), "{results:?}");
    assert!(!results[1].2);
}

#[tokio::test]
async fn one_decision_covers_one_call_and_the_model_may_ask_again() {
    let model = Scripted::new(vec![
        Answer::Tools(vec![
            ("revert_version".into(), json!({"target_version_id": "V1"})),
            ("revert_version".into(), json!({"target_version_id": "V2"})),
        ]),
        tools(&[("revert_version", json!({"target_version_id": "V2"}))]),
        Answer::Text("done".into()),
    ]);
    let h = Harness::new(model.clone());
    let (sid, v1, _) = h.two_versions().await;
    let out = h.chat(json!({"session_id": sid, "prompt": "revert twice", "approvals": true})).await;
    let mut messages = out["messages"].as_array().unwrap().clone();
    messages[1]["content"][0]["input"]["target_version_id"] = json!(v1);
    let out = h.chat(json!({"session_id": sid, "messages": messages, "approval": {"decision": "approve"}})).await;
    // The first ran; the second was not run; the model asked for it again, which waits again.
    let calls = out["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2, "{out}");
    assert_eq!(calls[0]["is_error"], false, "{}", calls[0]);
    assert_eq!(calls[1]["result"]["error"], "approval_required");
    assert_eq!(out["pending_approval"]["arguments"]["target_version_id"], "V2", "{out}");
    assert_eq!(model.calls(), 2);
}

#[tokio::test]
async fn an_approval_needs_a_pending_call_and_no_prompt() {
    let model = Scripted::new(vec![tools(&[("query_subgraph", json!({}))]), Answer::Text("ok".into())]);
    let h = Harness::new(model.clone());
    let sid = h.session(graph("s")).await;
    let approve = json!({"decision": "approve"});
    let invalid = |out: &Value, parameter: &str| {
        assert_eq!(out["error"], "invalid_parameter", "{out}");
        assert_eq!(out["parameter"], parameter, "{out}");
    };
    // Nothing to decide: no history, a history ending with the user, or with a safe call.
    invalid(&h.chat(json!({"session_id": sid, "approval": approve})).await, "approval");
    let user_last = json!([{"role": "user", "content": "hi"}]);
    invalid(&h.chat(json!({"session_id": sid, "messages": user_last, "approval": approve})).await, "approval");
    let safe = json!([
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "query_subgraph", "input": {}}]},
    ]);
    invalid(&h.chat(json!({"session_id": sid, "messages": safe, "approval": approve})).await, "approval");
    // A decision is not a new message.
    let pending = json!([
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "revert_version", "input": {"target_version_id": "x"}}]},
    ]);
    invalid(
        &h.chat(json!({"session_id": sid, "messages": pending, "prompt": "and more", "approval": approve})).await,
        "prompt",
    );
    // An unknown decision is refused by the schema.
    let out = h.chat(json!({"session_id": sid, "messages": pending, "approval": {"decision": "maybe"}})).await;
    assert_eq!(out["error"], "invalid_parameter", "{out}");
    assert_eq!(model.calls(), 0, "no LLM call for any of these");
}

#[tokio::test]
async fn without_approvals_a_destructive_call_runs_as_before() {
    let model = Scripted::new(vec![tools(&[("revert_version", json!({"target_version_id": "V1"}))])]);
    let h = Harness::new(model.clone());
    let sid = h.session(graph("s")).await;
    let out = h.chat(json!({"session_id": sid, "prompt": "revert"})).await;
    assert!(out.get("pending_approval").is_none(), "{out}");
    assert_eq!(out["tool_calls"][0]["name"], "revert_version");
    assert_eq!(out["tool_calls"][0]["result"]["error"], "version_not_found", "it ran: {out}");
    assert_eq!(out["reply"], "done");
}

#[tokio::test]
async fn a_stored_chat_waits_for_approval_and_a_new_prompt_declines_the_open_call() {
    let model = Scripted::new(vec![
        tools(&[("revert_version", json!({"target_version_id": "V1"}))]),
        Answer::Text("Reverted.".into()),
        tools(&[("revert_version", json!({"target_version_id": "V1"}))]),
        Answer::Text("OK, listing instead.".into()),
    ]);
    let h = Harness::new(model.clone());
    let (sid, _, first_hash) = h.two_versions().await;
    let (_, versions) = h.state(&sid).await;

    let out = h.chat(json!({"session_id": sid, "prompt": "undo", "new_chat": true, "approvals": true})).await;
    let chat_id = out["chat_id"].as_str().expect("saved while waiting").to_owned();
    assert_eq!(out["pending_approval"]["name"], "revert_version", "{out}");
    let chat = h.tool("get_chat", json!({"chat_id": chat_id})).await;
    assert_eq!(chat["messages"], out["messages"], "stored ending with the waiting answer");

    // A stored chat's decision needs only the chat and the decision. The scripted id is unknown, so
    // the call fails as the tool would fail it — after approval, through the registry.
    let out = h.chat(json!({"session_id": sid, "chat_id": chat_id, "approval": {"decision": "approve"}})).await;
    assert_eq!(out["reply"], "Reverted.", "{out}");
    assert_eq!(out["tool_calls"][0]["result"]["error"], "version_not_found", "{out}");
    let chat = h.tool("get_chat", json!({"chat_id": chat_id})).await;
    assert_eq!(chat["messages"], out["messages"]);
    assert_eq!(chat["revision"], 2);

    // Waiting again, the user writes something else: the open call is declined, then the prompt.
    let out = h.chat(json!({"session_id": sid, "chat_id": chat_id, "prompt": "undo", "approvals": true})).await;
    assert!(out.get("pending_approval").is_some(), "{out}");
    let out = h.chat(json!({"session_id": sid, "chat_id": chat_id, "prompt": "just list the objects"})).await;
    assert_eq!(out["reply"], "OK, listing instead.", "{out}");
    let sent = model.request(3).messages;
    let last = sent.last().unwrap();
    assert_eq!(last.role, Role::User);
    assert!(
        matches!(&last.content[0], ContentBlock::ToolResult { is_error: true, content, .. } if content.contains("did not approve")),
        "{last:?}"
    );
    assert_eq!(last.text(), "just list the objects");
    let (hash, now) = h.state(&sid).await;
    assert_eq!(now, versions, "nothing was reverted");
    assert_ne!(hash, first_hash);
}

/// Records a turn's live events.
#[derive(Default)]
struct Recorder(Mutex<Vec<ChatEvent>>);

impl ChatEventSink for Recorder {
    fn event(&self, event: ChatEvent) {
        self.0.lock().unwrap().push(event);
    }
}

#[tokio::test]
async fn live_events_report_text_and_each_call_and_leave_the_result_unchanged() {
    let script = || {
        vec![
            Answer::Tools(vec![
                ("query_subgraph".into(), json!({"session_id": "someone-else"})),
                ("export_storage".into(), json!({})),
            ]),
            tools(&[("query_subgraph", json!({"session_id": "someone-else"}))]),
            Answer::Text("Three objects.".into()),
        ]
    };
    let quiet = Scripted::new(script());
    let h = Harness::new(quiet);
    let sid = h.session(graph("s")).await;
    let plain = h.chat(json!({"session_id": sid, "prompt": "count"})).await;

    let watched = Scripted::new(script());
    let mut h2 = Harness::new(watched);
    h2.ctx.runtime = h.ctx.runtime.clone();
    let recorder = Arc::new(Recorder::default());
    watch_with(&mut h2.ctx, recorder.clone());
    let live = h2.chat(json!({"session_id": sid, "prompt": "count"})).await;
    assert_eq!(serde_json::to_string(&live).unwrap(), serde_json::to_string(&plain).unwrap(), "the same result");

    let events = recorder.0.lock().unwrap().clone();
    let calls = live["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 3, "{live}");
    let mut expected = Vec::new();
    for (index, call) in calls.iter().enumerate() {
        let name = call["name"].as_str().unwrap().to_owned();
        let arguments = call["arguments"].clone();
        expected.push(ChatEvent::ToolCallStarted { index, name: name.clone(), arguments: arguments.clone() });
        expected.push(ChatEvent::ToolCallCompleted {
            index,
            name,
            arguments,
            result_summary: cks_chat::result_summary(&call["result"], call["is_error"] == true),
            is_error: call["is_error"] == true,
        });
    }
    expected.push(ChatEvent::TextDelta { text: "Three objects.".into() });
    assert_eq!(events, expected);
    // Pinned arguments; a refusal's summary is its code and message; a repeat is reported too.
    assert_eq!(calls[0]["arguments"]["session_id"], json!(sid));
    let ChatEvent::ToolCallCompleted { result_summary, is_error, .. } = &events[3] else { panic!() };
    assert!(*is_error && result_summary.starts_with("unknown_or_disallowed_tool: "), "{result_summary}");
    let ChatEvent::ToolCallCompleted { result_summary, .. } = &events[1] else { panic!() };
    assert!(result_summary.chars().count() <= 301, "{result_summary}");
    assert_eq!(calls[2]["repeat_of"], 0);
}

#[tokio::test]
async fn an_approved_call_is_reported_live_when_it_runs() {
    let model = Scripted::new(vec![
        tools(&[("revert_version", json!({"target_version_id": "V1"}))]),
        Answer::Text("Reverted.".into()),
    ]);
    let mut h = Harness::new(model);
    let recorder = Arc::new(Recorder::default());
    watch_with(&mut h.ctx, recorder.clone());
    let (sid, v1, _) = h.two_versions().await;
    let out = h.chat(json!({"session_id": sid, "prompt": "undo", "approvals": true})).await;
    assert!(recorder.0.lock().unwrap().is_empty(), "nothing ran, no text: {:?}", recorder.0.lock().unwrap());
    let mut messages = out["messages"].as_array().unwrap().clone();
    messages[1]["content"][0]["input"]["target_version_id"] = json!(v1);
    h.chat(json!({"session_id": sid, "messages": messages, "approval": {"decision": "approve"}})).await;
    let events = recorder.0.lock().unwrap().clone();
    let pinned = json!({"session_id": sid, "target_version_id": v1});
    assert_eq!(
        events[0],
        ChatEvent::ToolCallStarted { index: 0, name: "revert_version".into(), arguments: pinned.clone() }
    );
    assert!(
        matches!(&events[1], ChatEvent::ToolCallCompleted { index: 0, is_error: false, arguments, .. } if *arguments == pinned),
        "{:?}",
        events[1]
    );
    assert_eq!(events[2], ChatEvent::TextDelta { text: "Reverted.".into() });
}

#[test]
fn the_published_schema_describes_approvals_inline() {
    let h = Harness::new(Scripted::new(vec![]));
    let schema = Value::Object(serde_json::Map::clone(h.registry.get("ai_chat").unwrap().schema()));
    let properties = &schema["properties"];
    assert_eq!(properties["approvals"]["type"], "boolean", "{schema:#}");
    assert_eq!(properties["approval"]["type"], "object", "{schema:#}");
    assert_eq!(properties["approval"]["properties"]["decision"]["enum"], json!(["approve", "reject"]), "{schema:#}");
    assert_eq!(properties["approval"]["required"], json!(["decision"]), "{schema:#}");
    assert!(!schema.to_string().contains("$ref"), "{schema:#}");
    let output = Value::Object(serde_json::Map::clone(h.registry.get("ai_chat").unwrap().output_schema().unwrap()));
    assert!(output.to_string().contains("pending_approval"), "{output:#}");
}
