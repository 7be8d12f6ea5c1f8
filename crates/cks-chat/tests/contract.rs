//! The ai_chat contract, statement by statement, with a scripted model (no HTTP).

mod support;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;

use cks_chat::{AiChatConfig, DENIED_TOOLS};
use cks_llm::{ContentBlock, LlmError};
use cks_tools::{SessionCheck, Tool, ToolContext, ToolError, ToolMeta};

use support::{Answer, Harness, Scripted, add_object, graph, llm_error};

fn tools(calls: &[(&str, Value)]) -> Answer {
    Answer::Tools(calls.iter().map(|(n, a)| (n.to_string(), a.clone())).collect())
}

#[tokio::test]
async fn s01_prompt_and_text_answer() {
    let model = Scripted::new(vec![Answer::Text("Hello there".into())]);
    let h = Harness::new(model.clone());
    let sid = h.session(graph("s")).await;
    let out = h.chat(json!({"session_id": sid, "prompt": "hi"})).await;
    assert_eq!(out["reply"], "Hello there");
    assert_eq!(out["tool_calls"], json!([]));
    assert_eq!(out["messages"][0], json!({"role": "user", "content": "hi"}));
    assert_eq!(out["messages"][1]["role"], "assistant");
    assert_eq!(out["messages"].as_array().unwrap().len(), 2);
    assert!(out.get("truncated").is_none());
    assert_eq!(model.calls(), 1);
}

#[tokio::test]
async fn s02_messages_win_and_missing_input_is_an_error() {
    let model = Scripted::new(vec![Answer::Text("ok".into())]);
    let h = Harness::new(model.clone());
    let sid = h.session(graph("s")).await;
    let history = json!([{"role": "user", "content": "from history"}]);
    let out = h.chat(json!({"session_id": sid, "messages": history, "prompt": "ignored"})).await;
    let sent = &model.request(0).messages;
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].text(), "from history");
    assert_eq!(out["messages"][0], history[0]);
    let out = h.chat(json!({"session_id": sid})).await;
    assert_eq!(out["error"], "missing_parameter");
    let out = h.chat(json!({"session_id": sid, "messages": [], "prompt": ""})).await;
    assert_eq!(out["error"], "missing_parameter");
    assert_eq!(model.calls(), 1, "no LLM call without input");
}

#[tokio::test]
async fn s03_unknown_and_closed_sessions() {
    let model = Scripted::new(vec![]);
    let h = Harness::new(model.clone());
    let out = h.chat(json!({"session_id": "no-such-session", "prompt": "hi"})).await;
    assert_eq!(out["error"], "session_not_found");
    let sid = h.session(graph("s")).await;
    h.ctx.runtime.close(&sid).await.unwrap();
    let out = h.chat(json!({"session_id": sid, "prompt": "hi"})).await;
    assert_eq!(out["error"], "session_not_found");
    assert_eq!(model.calls(), 0);
}

#[tokio::test]
async fn s04_calls_are_pinned_to_the_chat_session() {
    let h0 = Harness::new(Scripted::new(vec![]));
    let _ = h0;
    // The other session's id is only known after creation, so script with a closure over it.
    let other_holder = Arc::new(std::sync::Mutex::new(String::new()));
    let holder = other_holder.clone();
    let model = Scripted::with_fallback(vec![], move || {
        let other = holder.lock().unwrap().clone();
        Answer::Tools(vec![
            (
                "evolve_knowledge".into(),
                json!({"session_id": other, "operations": add_object("intruder")["operations"]}),
            ),
            ("query_subgraph".into(), json!({"session_id": other, "seed_ids": ["o-a"]})),
            ("explain_knowledge".into(), json!({"session_id": other})),
        ])
    });
    let config = AiChatConfig { turn: cks_chat::TurnConfig { max_iterations: 2, ..AiChatConfig::default().turn } };
    let h = Harness::with_config(model.clone(), config, |_| {});
    let chat = h.session(graph("c")).await;
    let other = h.session(graph("o")).await;
    *other_holder.lock().unwrap() = other.clone();
    let other_before = h.state(&other).await;

    let out = h.chat(json!({"session_id": chat, "prompt": "change the other graph"})).await;
    for call in out["tool_calls"].as_array().unwrap() {
        assert_eq!(call["arguments"]["session_id"], json!(chat), "{call}");
    }
    assert_eq!(out["tool_calls"][0]["is_error"], false, "{}", out["tool_calls"][0]);
    assert_eq!(h.state(&other).await, other_before, "the other session is untouched");
    let ids: Vec<String> = h.ctx.runtime.read(&chat, |s, _| s.ids().map(str::to_owned).collect()).await.unwrap();
    assert!(ids.contains(&"intruder".to_owned()), "the change landed in the chat session");
    let sent =
        serde_json::to_string(&model.requests.lock().unwrap().iter().map(|r| &r.messages).collect::<Vec<_>>()).unwrap();
    assert!(!sent.contains("o alpha") && !sent.contains("o beta"), "nothing of the other session reaches the LLM");
    assert!(sent.contains("c alpha"), "the chat session's own content does");
}

#[tokio::test]
async fn s05_denied_and_unknown_tools_are_refused_and_the_loop_continues() {
    let mut script = Vec::new();
    for name in DENIED_TOOLS.iter().chain(["no_such_tool", "merge_branch", "create_branch"].iter()) {
        script.push(tools(&[(name, json!({}))]));
    }
    script.push(Answer::Text("I could not do that.".into()));
    let model = Scripted::new(script);
    let config = AiChatConfig { turn: cks_chat::TurnConfig { max_iterations: 30, ..AiChatConfig::default().turn } };
    let h = Harness::with_config(model.clone(), config, |_| {});
    let sid = h.session(graph("s")).await;
    let before = h.state(&sid).await;
    let out = h.chat(json!({"session_id": sid, "prompt": "do admin things"})).await;
    assert_eq!(out["reply"], "I could not do that.");
    let calls = out["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), DENIED_TOOLS.len() + 3);
    for call in calls {
        assert_eq!(call["is_error"], true);
        assert_eq!(call["result"]["error"], "unknown_or_disallowed_tool", "{call}");
    }
    // The refusal went back to the model as a tool result.
    let second = model.request(1);
    let last = second.messages.last().unwrap();
    assert!(
        matches!(&last.content[0], ContentBlock::ToolResult { is_error: true, content, .. } if content.contains("unknown_or_disallowed_tool"))
    );
    assert_eq!(h.ctx.runtime.list_sessions().await.unwrap().len(), 1, "no branch was created");
    assert_eq!(h.state(&sid).await, before);
}

#[tokio::test]
async fn s06_offered_tools_are_the_exposed_ones_and_small() {
    let model = Scripted::new(vec![Answer::Text("ok".into())]);
    let h = Harness::new(model.clone());
    let sid = h.session(graph("s")).await;
    h.chat(json!({"session_id": sid, "prompt": "hi"})).await;
    let offered: Vec<String> = model.request(0).tools.iter().map(|t| t.name.clone()).collect();
    // The first offer, in its order, each one exposed (the offer test checks the converse), then
    // the tool that finds the others.
    let expected: Vec<String> = cks_chat::CHAT_TOOLS
        .iter()
        .filter(|t| h.registry.get(t.name).is_some_and(|r| r.meta().llm_exposed))
        .map(|t| t.name.to_owned())
        .chain([cks_chat::FIND_TOOLS.name.to_owned()])
        .collect();
    assert_eq!(offered, expected);
    for denied in DENIED_TOOLS {
        assert!(!offered.contains(&denied.to_string()));
    }
    for second_session_tool in ["merge_branch", "create_branch", "fork_sandbox", "merge_knowledge", "close_session"] {
        assert!(!offered.contains(&second_session_tool.to_string()), "{second_session_tool}");
    }
    for spec in &model.request(0).tools {
        assert!(
            spec.input_schema["properties"].get("session_id").is_none(),
            "{}: session_id is filled in by pinning",
            spec.name
        );
    }
    let bytes = serde_json::to_vec(
        &model
            .request(0)
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.input_schema}))
            .collect::<Vec<_>>(),
    )
    .unwrap()
    .len();
    println!("tool specs per request: {bytes} bytes for {} tools", offered.len());
    assert!(bytes < 25 * 1024, "tool specs are {bytes} bytes");
}

#[derive(Debug, Deserialize, JsonSchema)]
struct ExplodeInput {
    #[allow(dead_code)]
    session_id: String,
}

struct Explode;

#[async_trait]
impl Tool for Explode {
    type Input = ExplodeInput;
    type Output = Value;
    const META: ToolMeta = ToolMeta {
        name: "detect_contradictions",
        description: "panics",
        mutates_graph: true,
        creates_session: false,
        destructive: false,
        idempotent: false,
        open_world: false,
        session_fields: &["session_id"],
        session_checks: &[SessionCheck::open("session_id")],
        llm_exposed: true,
    };
    async fn run(&self, ctx: &ToolContext, input: ExplodeInput) -> Result<Value, ToolError> {
        // Change the session, then panic: the change must not survive.
        let ops = cks_core::ops::parse_operations(&add_object("half-done")["operations"]).unwrap();
        ctx.runtime.commit(&input.session_id, cks_runtime::CommitRequest::operations(ops)).await.ok();
        panic!("tool exploded");
    }
}

#[tokio::test]
async fn s07_failing_and_panicking_tools_are_fed_back() {
    let bad_ops = json!({"operations": [{"type": "remove_object", "object_id": "ghost"}]});
    let model = Scripted::new(vec![
        tools(&[("evolve_knowledge", bad_ops)]),
        Answer::Text("That object does not exist.".into()),
    ]);
    let h = Harness::new(model.clone());
    let sid = h.session(graph("s")).await;
    let before = h.state(&sid).await;
    let out = h.chat(json!({"session_id": sid, "prompt": "remove ghost"})).await;
    assert_eq!(out["reply"], "That object does not exist.");
    assert_eq!(out["tool_calls"][0]["is_error"], true);
    assert_eq!(out["tool_calls"][0]["result"]["error"], "invalid_operations");
    assert_eq!(h.state(&sid).await, before, "the failed call changed nothing");

    // Registered under an offered name, in a registry of its own.
    let model = Scripted::new(vec![tools(&[("detect_contradictions", json!({}))]), Answer::Text("Sorry.".into())]);
    let mut registry = cks_tools::Registry::default();
    registry.register(Arc::new(Explode));
    let h = Harness::build(model.clone(), AiChatConfig::default(), registry, |_| {});
    let sid = h.session(graph("s")).await;
    let out = h.chat(json!({"session_id": sid, "prompt": "explode"})).await;
    assert_eq!(out["reply"], "Sorry.");
    assert_eq!(out["tool_calls"][0]["is_error"], true);
    assert_eq!(out["tool_calls"][0]["result"]["error"], "internal_error");
    assert!(out["tool_calls"][0]["result"]["message"].as_str().unwrap().contains("tool exploded"));
}

#[tokio::test]
async fn s08_several_calls_run_in_order_and_return_together() {
    let model = Scripted::new(vec![
        tools(&[
            ("evolve_knowledge", add_object("first")),
            ("evolve_knowledge", add_object("second")),
            ("query_subgraph", json!({"seed_ids": ["second"]})),
        ]),
        Answer::Text("Added both.".into()),
    ]);
    let h = Harness::new(model.clone());
    let sid = h.session(graph("s")).await;
    let out = h.chat(json!({"session_id": sid, "prompt": "add two"})).await;
    let calls = out["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 3);
    assert!(calls.iter().all(|c| c["is_error"] == false), "{calls:?}");
    assert_eq!(calls[2]["result"]["returned_nodes"], 1, "the query saw both earlier commits in order");
    let versions = h.ctx.runtime.list_versions(&sid).await.unwrap();
    assert_eq!(versions.len(), 2);
    // One message with one result per call, matched by id, in call order.
    let messages = out["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 4);
    let uses: Vec<&str> =
        messages[1]["content"].as_array().unwrap().iter().map(|b| b["id"].as_str().unwrap()).collect();
    let results: Vec<&str> =
        messages[2]["content"].as_array().unwrap().iter().map(|b| b["tool_use_id"].as_str().unwrap()).collect();
    assert_eq!(uses, results);
    assert_eq!(messages[2]["role"], "user");
}

#[tokio::test]
async fn s09_iteration_cap() {
    // Different arguments each time: a model repeating one call is stopped sooner (see bounds.rs).
    let n = std::sync::atomic::AtomicU64::new(0);
    let model = Scripted::with_fallback(vec![], move || {
        let depth = n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Answer::Tools(vec![("query_subgraph".into(), json!({"depth": depth}))])
    });
    let h = Harness::new(model.clone());
    let sid = h.session(graph("s")).await;
    let out = h.chat(json!({"session_id": sid, "prompt": "loop"})).await;
    assert_eq!(model.calls(), 8);
    assert_eq!(out["reply"], "Reached the tool-call iteration limit without a final answer.");
    assert_eq!(out["truncated"], true);
    assert_eq!(out["truncation_reason"], "max_iterations");
    assert_eq!(out["tool_calls"].as_array().unwrap().len(), 8);
    assert_eq!(out["messages"].as_array().unwrap().len(), 17, "prompt + 8 × (answer + results)");
}

#[tokio::test]
async fn s10_provider_failure_keeps_the_history() {
    let model = Scripted::new(vec![
        tools(&[("evolve_knowledge", add_object("kept"))]),
        Answer::Fail(llm_error("upstream exploded")),
    ]);
    let h = Harness::new(model.clone());
    let sid = h.session(graph("s")).await;
    let out = h.chat(json!({"session_id": sid, "prompt": "go"})).await;
    assert_eq!(out["error"], "llm_call_failed");
    assert!(out["message"].as_str().unwrap().contains("upstream exploded"));
    assert_eq!(out["tool_calls"].as_array().unwrap().len(), 1);
    assert_eq!(out["messages"].as_array().unwrap().len(), 3, "prompt, tool call, tool results: ready for a retry");

    let not_configured = LlmError::NotConfigured(cks_llm::ErrorContext {
        message: "no provider: set CKS_LLM_PROVIDER (auto, ollama, anthropic, google, openai_compatible)".into(),
        ..Default::default()
    });
    let model = Scripted::new(vec![Answer::Fail(not_configured)]);
    let h = Harness::new(model);
    let sid = h.session(graph("s")).await;
    let out = h.chat(json!({"session_id": sid, "prompt": "go"})).await;
    assert_eq!(out["error"], "llm_provider_unavailable");
    assert_eq!(out["messages"], json!([{"role": "user", "content": "go"}]));
}

#[tokio::test]
async fn s11_model_override() {
    let model = Scripted::new(vec![Answer::Text("a".into()), Answer::Text("b".into())]);
    let h = Harness::new(model.clone());
    let sid = h.session(graph("s")).await;
    h.chat(json!({"session_id": sid, "prompt": "hi", "model": "special-model"})).await;
    h.chat(json!({"session_id": sid, "prompt": "hi"})).await;
    assert_eq!(model.request(0).model.as_deref(), Some("special-model"));
    assert_eq!(model.request(1).model, None, "no override: the provider's configured default");
}

#[tokio::test]
async fn s13_results_are_json_text_capped_for_the_llm_only() {
    let mut config = AiChatConfig::default();
    config.turn.tool_result_cap = 300;
    let model = Scripted::new(vec![tools(&[("query_subgraph", json!({}))]), Answer::Text("ok".into())]);
    let h = Harness::with_config(model.clone(), config, |_| {});
    let sid = h.session(graph("s")).await;
    let out = h.chat(json!({"session_id": sid, "prompt": "show"})).await;
    let full = out["tool_calls"][0]["result"].to_string();
    assert!(full.contains("ünïcode ✓") && full.len() > 300, "tool_calls keeps the full result");
    let sent = model.request(1);
    let ContentBlock::ToolResult { content, .. } = &sent.messages.last().unwrap().content[0] else { panic!() };
    assert!(content.contains("[truncated: the result is"), "{content}");
    assert!(content.len() < 400);

    let model = Scripted::new(vec![tools(&[("query_subgraph", json!({}))]), Answer::Text("ok".into())]);
    let h = Harness::new(model.clone());
    let sid = h.session(graph("s")).await;
    h.chat(json!({"session_id": sid, "prompt": "show"})).await;
    let request = model.request(1);
    let ContentBlock::ToolResult { content, .. } = &request.messages.last().unwrap().content[0] else { panic!() };
    let parsed: Value = serde_json::from_str(content).expect("JSON text");
    assert_eq!(parsed["subgraph"]["nodes"][0]["structure"]["note"], "ünïcode ✓", "non-ASCII kept, not escaped");
    assert!(content.contains("ünïcode"));
}

#[tokio::test]
async fn versions_committed_by_a_chat_are_audited() {
    let model = Scripted::new(vec![tools(&[("evolve_knowledge", add_object("audited"))]), Answer::Text("done".into())]);
    let h = Harness::new(model);
    let sid = h.session(graph("s")).await;
    h.chat(json!({"session_id": sid, "prompt": "add"})).await;
    let versions = h.ctx.runtime.list_versions(&sid).await.unwrap();
    let metadata = &versions.last().unwrap().metadata;
    assert_eq!(metadata["tool"], "ai_chat");
    assert_eq!(metadata["via_tool"], "evolve_knowledge");
    assert_eq!(metadata["provider"], "anthropic");
    assert_eq!(metadata["model"], "scripted-model");
}

#[tokio::test]
async fn cancellation_between_two_tool_calls() {
    struct CancelOnFirst(tokio_util::sync::CancellationToken);
    impl cks_tools::ProgressSink for CancelOnFirst {
        fn report(&self, _: f64, _: Option<f64>, message: Option<String>) {
            if message.as_deref() == Some("tool evolve_knowledge") {
                self.0.cancel();
            }
        }
    }
    let model =
        Scripted::new(vec![tools(&[("evolve_knowledge", add_object("one")), ("evolve_knowledge", add_object("two"))])]);
    let mut h = Harness::new(model.clone());
    h.ctx.progress = Some(Arc::new(CancelOnFirst(h.ctx.cancel.clone())));
    let sid = h.session(graph("s")).await;
    let out = h.chat(json!({"session_id": sid, "prompt": "add two"})).await;
    assert_eq!(out["cancelled"], true);
    assert_eq!(model.calls(), 1);
    // The first call was already running when the cancel arrived; the second never ran.
    assert_eq!(out["tool_calls"].as_array().unwrap().len(), 1);
    let ids: Vec<String> = h.ctx.runtime.read(&sid, |s, _| s.ids().map(str::to_owned).collect()).await.unwrap();
    assert!(!ids.contains(&"two".to_owned()));
    // Every tool call in the history has its result, so the history can be sent again.
    let results = out["messages"][2]["content"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    assert_eq!(results[1]["is_error"], true);
}

#[tokio::test]
async fn deadline_and_token_budget_truncate() {
    let mut config = AiChatConfig::default();
    config.turn.token_budget = Some(250);
    // Different arguments each time: repeated calls would stop the loop on their own.
    let n = std::sync::atomic::AtomicU64::new(0);
    let model = Scripted::with_fallback(vec![], move || {
        let depth = n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Answer::Tools(vec![("query_subgraph".into(), json!({"depth": depth}))])
    });
    let h = Harness::with_config(model.clone(), config, |_| {});
    let sid = h.session(graph("s")).await;
    let out = h.chat(json!({"session_id": sid, "prompt": "loop"})).await;
    assert_eq!(out["truncated"], true);
    assert_eq!(out["truncation_reason"], "token_budget");
    assert_eq!(model.calls(), 3, "110 tokens per call: the budget of 250 is spent after 3 calls");

    let mut config = AiChatConfig::default();
    config.turn.deadline = std::time::Duration::from_millis(1);
    let n = std::sync::atomic::AtomicU64::new(0);
    let model = Scripted::with_fallback(vec![], move || {
        let depth = n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Answer::Tools(vec![("query_subgraph".into(), json!({"depth": depth}))])
    });
    let h = Harness::with_config(model.clone(), config, |_| {});
    let sid = h.session(graph("s")).await;
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let out = h.chat(json!({"session_id": sid, "prompt": "loop"})).await;
    assert_eq!(out["truncation_reason"], "deadline", "{out}");
}
