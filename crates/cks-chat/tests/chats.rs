//! Stored chats through `ai_chat` (`new_chat`, `chat_id`) with a scripted model: what is saved,
//! when nothing is, and the tools a chat's model never gets.

mod support;

use async_trait::async_trait;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

use cks_chat::{AiChatConfig, ChatModel};
use cks_llm::{ChatRequest, ChatResponse, LlmError};
use cks_tools::Registry;

use support::{Answer, Harness, Scripted, add_object, graph, llm_error};

fn tools(calls: &[(&str, Value)]) -> Answer {
    Answer::Tools(calls.iter().map(|(n, a)| (n.to_string(), a.clone())).collect())
}

impl Harness {
    async fn tool(&self, name: &str, args: Value) -> Value {
        self.registry.call(name, args, &self.ctx).await.unwrap()
    }
}

#[tokio::test]
async fn a_stored_chat_keeps_every_turn_and_the_next_turn_sends_only_the_prompt() {
    let model = Scripted::new(vec![
        tools(&[("evolve_knowledge", add_object("n1"))]),
        Answer::Text("Added n1.".into()),
        Answer::Text("There are four objects.".into()),
    ]);
    let h = Harness::new(model.clone());
    let sid = h.session(graph("s")).await;

    let first = h.chat(json!({"session_id": sid, "prompt": "Add a note called n1", "new_chat": true})).await;
    assert_eq!(first["reply"], "Added n1.", "{first}");
    let chat_id = first["chat_id"].as_str().expect("a stored chat's answer names it").to_owned();
    assert_eq!(first["messages"].as_array().map(Vec::len), Some(4));
    let chat = h.tool("get_chat", json!({"chat_id": chat_id})).await;
    assert_eq!(chat["messages"], first["messages"], "stored exactly as answered");
    assert_eq!(chat["tool_calls"][0]["calls"], first["tool_calls"], "with the turn's calls and results");
    assert_eq!(
        (chat["tool_calls"][0]["turn"].as_u64(), chat["tool_calls"][0]["message_index"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!((chat["title"].as_str(), chat["session_id"].as_str()), (Some("Add a note called n1"), Some(&*sid)));
    assert_eq!((chat["revision"].as_u64(), chat["message_count"].as_u64()), (Some(1), Some(4)));

    let second = h.chat(json!({"session_id": sid, "chat_id": chat_id, "prompt": "How many objects now?"})).await;
    assert_eq!(second["reply"], "There are four objects.", "{second}");
    assert_eq!(second["chat_id"], json!(chat_id));
    // The model saw the stored history and the new message.
    let sent = &model.request(2).messages;
    assert_eq!(sent.len(), 5);
    assert_eq!(
        (sent[0].text(), sent[3].text(), sent[4].text()),
        ("Add a note called n1".into(), "Added n1.".into(), "How many objects now?".into())
    );
    let messages = second["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 6);
    assert_eq!(messages[..4], first["messages"].as_array().unwrap()[..]);
    assert_eq!(messages[4], json!({"role": "user", "content": "How many objects now?"}));

    let chat = h.tool("get_chat", json!({"chat_id": chat_id})).await;
    assert_eq!(chat["messages"], second["messages"]);
    assert_eq!(chat["revision"], 2);
    assert_eq!(chat["tool_calls"].as_array().map(Vec::len), Some(2));
    assert_eq!(chat["tool_calls"][1], json!({"turn": 2, "message_index": 5, "at": chat["updated_at"], "calls": []}));
    let listed = h.tool("list_chats", json!({"session_id": sid})).await;
    assert_eq!(listed["count"], 1);
    assert_eq!(listed["chats"][0]["message_count"], 6);
}

#[tokio::test]
async fn without_a_chat_nothing_is_stored_and_the_answer_is_as_before() {
    let model = Scripted::new(vec![Answer::Text("Hello".into())]);
    let h = Harness::new(model.clone());
    let sid = h.session(graph("s")).await;
    let out = h.chat(json!({"session_id": sid, "prompt": "hi"})).await;
    let mut keys: Vec<&str> = out.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["messages", "model", "provider", "reply", "tool_calls", "usage"]);
    assert_eq!(h.tool("list_chats", json!({"session_id": sid})).await["count"], 0);
    assert!(h.ctx.runtime.store().list_chats(None, usize::MAX).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_new_chat_can_start_from_a_history_and_be_given_a_title() {
    let model = Scripted::new(vec![Answer::Text("a".into()), Answer::Text("b".into())]);
    let h = Harness::new(model.clone());
    let sid = h.session(graph("s")).await;
    let history = json!([{"role": "user", "content": "earlier"}, {"role": "assistant", "content": "noted"},
                         {"role": "user", "content": "and now"}]);
    let out = h.chat(json!({"session_id": sid, "messages": history, "new_chat": true, "title": "  My \n chat "})).await;
    let chat = h.tool("get_chat", json!({"chat_id": out["chat_id"]})).await;
    assert_eq!(chat["title"], "My chat");
    assert_eq!(
        chat["messages"].as_array().unwrap()[..3],
        history.as_array().unwrap()[..],
        "the caller's messages as sent"
    );
    assert_eq!(chat["tool_calls"][0]["message_index"], 3);

    let long = "why ".repeat(60);
    let out = h.chat(json!({"session_id": sid, "prompt": long, "new_chat": true})).await;
    let title = h.tool("get_chat", json!({"chat_id": out["chat_id"]})).await["title"].as_str().unwrap().to_owned();
    assert!(title.chars().count() <= 80 && title.starts_with("why why") && title.ends_with('…'), "{title}");
}

#[tokio::test]
async fn arguments_that_do_not_fit_a_chat_are_refused_before_any_llm_call() {
    let model = Scripted::new(vec![Answer::Text("stored".into())]);
    let h = Harness::new(model.clone());
    let sid = h.session(graph("s")).await;
    let other = h.session(graph("o")).await;
    let chat_id = h.chat(json!({"session_id": sid, "prompt": "hi", "new_chat": true})).await["chat_id"].clone();
    assert_eq!(model.calls(), 1);

    let refused = [
        (
            json!({"session_id": sid, "chat_id": chat_id, "messages": [{"role": "user", "content": "x"}], "prompt": "y"}),
            "invalid_parameter",
            "messages",
        ),
        (
            json!({"session_id": sid, "chat_id": chat_id, "new_chat": true, "prompt": "y"}),
            "invalid_parameter",
            "new_chat",
        ),
        (json!({"session_id": sid, "prompt": "y", "title": "t"}), "invalid_parameter", "title"),
        (
            json!({"session_id": sid, "prompt": "y", "new_chat": true, "title": "t".repeat(201)}),
            "invalid_parameter",
            "title",
        ),
        (json!({"session_id": sid, "chat_id": chat_id}), "missing_parameter", "prompt"),
        (json!({"session_id": sid, "chat_id": chat_id, "prompt": "  "}), "missing_parameter", "prompt"),
    ];
    for (args, code, parameter) in refused {
        let out = h.chat(args.clone()).await;
        assert_eq!((out["error"].as_str(), out["parameter"].as_str()), (Some(code), Some(parameter)), "{args}: {out}");
    }
    // A chat of another session is not found there, exactly as one that does not exist.
    let elsewhere = h.chat(json!({"session_id": other, "chat_id": chat_id, "prompt": "y"})).await;
    assert_eq!(
        elsewhere,
        json!({"error": "chat_not_found", "message": format!("Chat '{}' not found.", chat_id.as_str().unwrap()), "chat_id": chat_id})
    );
    let unknown = h.chat(json!({"session_id": sid, "chat_id": "no-such-chat", "prompt": "y"})).await;
    assert_eq!(unknown["error"], "chat_not_found");
    // A closed session's chats go with it.
    h.ctx.runtime.close(&sid).await.unwrap();
    assert_eq!(
        h.chat(json!({"session_id": sid, "chat_id": chat_id, "prompt": "y"})).await["error"],
        "session_not_found"
    );
    assert_eq!(model.calls(), 1, "no LLM call for any of them");
}

#[tokio::test]
async fn a_failed_turn_stores_nothing() {
    let model = Scripted::new(vec![
        Answer::Text("first".into()),
        tools(&[("evolve_knowledge", add_object("ran"))]),
        Answer::Fail(llm_error("upstream exploded")),
        Answer::Fail(llm_error("down again")),
    ]);
    let h = Harness::new(model.clone());
    let sid = h.session(graph("s")).await;
    let chat_id = h.chat(json!({"session_id": sid, "prompt": "hi", "new_chat": true})).await["chat_id"].clone();
    let before = h.tool("get_chat", json!({"chat_id": chat_id})).await;

    let out = h.chat(json!({"session_id": sid, "chat_id": chat_id, "prompt": "add one"})).await;
    assert_eq!((out["error"].as_str(), out["chat_id"].as_str()), (Some("llm_call_failed"), chat_id.as_str()), "{out}");
    assert_eq!(out["tool_calls"].as_array().map(Vec::len), Some(1), "the history of the failure is answered");
    assert_eq!(out["messages"].as_array().map(Vec::len), Some(5));
    assert_eq!(h.tool("get_chat", json!({"chat_id": chat_id})).await, before, "and not stored");

    // A new chat whose first turn fails is not made.
    let out = h.chat(json!({"session_id": sid, "prompt": "again", "new_chat": true})).await;
    assert_eq!(out["error"], "llm_call_failed");
    assert!(out.get("chat_id").is_none(), "{out}");
    assert_eq!(h.tool("list_chats", json!({"session_id": sid})).await["count"], 1);
}

/// An answer being worked out.
type Pending = std::pin::Pin<Box<dyn std::future::Future<Output = Result<ChatResponse, LlmError>> + Send>>;

/// A model whose every answer is given by a function of its request.
struct Answering<F>(F);

#[async_trait]
impl<F> ChatModel for Answering<F>
where
    F: Fn(ChatRequest) -> Pending + Send + Sync,
{
    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, LlmError> {
        (self.0)(request).await
    }
}

fn text_answer(text: &str) -> ChatResponse {
    ChatResponse {
        message: cks_llm::Message::assistant(text),
        stop_reason: cks_llm::StopReason::EndTurn,
        usage: cks_llm::Usage { input_tokens: 10, output_tokens: 1 },
        model: "scripted-model".into(),
        provider: cks_llm::ProviderKind::Anthropic,
        requests: 1,
    }
}

#[tokio::test]
async fn a_turn_another_turn_saved_before_is_chat_busy_and_stores_nothing() {
    // Another server on the same store saves a turn of the chat while this one waits for its model.
    let runtime: Arc<Mutex<Option<Arc<cks_runtime::Runtime>>>> = Arc::default();
    let rival = runtime.clone();
    let model = Answering(move |request: ChatRequest| -> Pending {
        let rival = rival.lock().unwrap().clone();
        Box::pin(async move {
            if request.messages.last().is_some_and(|m| m.text() == "race") {
                let rt = rival.unwrap();
                let chats = rt.store().list_chats(None, 1).await.unwrap();
                let chat = rt.chats().get(&chats[0].chat_id).await.unwrap().unwrap();
                let theirs = cks_runtime::store::ChatRow { title: "saved elsewhere".into(), ..chat.clone() };
                assert!(rt.chats().save(&theirs, Some(chat.revision)).await.unwrap());
            }
            Ok(text_answer("ok"))
        })
    });
    let h = Harness::build(Arc::new(model), AiChatConfig::default(), Registry::standard(), |_| {});
    *runtime.lock().unwrap() = Some(h.ctx.runtime.clone());
    let sid = h.session(graph("s")).await;
    let chat_id = h.chat(json!({"session_id": sid, "prompt": "hi", "new_chat": true})).await["chat_id"].clone();

    let out = h.chat(json!({"session_id": sid, "chat_id": chat_id, "prompt": "race"})).await;
    assert_eq!((out["error"].as_str(), out["chat_id"].as_str()), (Some("chat_busy"), chat_id.as_str()), "{out}");
    assert_eq!((out["reply"].as_str(), out["messages"].as_array().map(Vec::len)), (Some("ok"), Some(4)), "{out}");
    let stored = h.tool("get_chat", json!({"chat_id": chat_id})).await;
    assert_eq!((stored["title"].as_str(), stored["revision"].as_u64()), (Some("saved elsewhere"), Some(2)));
    assert_eq!(stored["message_count"], 2, "this turn is not in it");

    // The chat goes on from what was stored.
    let out = h.chat(json!({"session_id": sid, "chat_id": chat_id, "prompt": "again"})).await;
    assert_eq!(out["messages"].as_array().map(Vec::len), Some(4), "{out}");
    assert_eq!(h.tool("get_chat", json!({"chat_id": chat_id})).await["revision"], 3);
}

#[tokio::test]
async fn a_second_turn_while_one_runs_is_chat_busy_at_once() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (waiting, counted) = (gate.clone(), calls.clone());
    let model = Answering(move |request: ChatRequest| -> Pending {
        let waiting = waiting.clone();
        counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Box::pin(async move {
            if request.messages.last().is_some_and(|m| m.text() == "slow") {
                waiting.acquire().await.unwrap().forget();
            }
            Ok(text_answer("done"))
        })
    });
    let h = Arc::new(Harness::build(Arc::new(model), AiChatConfig::default(), Registry::standard(), |_| {}));
    let sid = h.session(graph("s")).await;
    let chat_id = h.chat(json!({"session_id": sid, "prompt": "hi", "new_chat": true})).await["chat_id"].clone();

    let slow = {
        let (h, args) = (h.clone(), json!({"session_id": sid, "chat_id": chat_id, "prompt": "slow"}));
        tokio::spawn(async move { h.chat(args).await })
    };
    while calls.load(std::sync::atomic::Ordering::SeqCst) < 2 {
        tokio::task::yield_now().await;
    }
    let busy = h.chat(json!({"session_id": sid, "chat_id": chat_id, "prompt": "meanwhile"})).await;
    assert_eq!((busy["error"].as_str(), busy["chat_id"].as_str()), (Some("chat_busy"), chat_id.as_str()), "{busy}");
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 2, "no LLM call for the refused turn");
    // Other chats and stateless turns are not held up.
    assert_eq!(h.chat(json!({"session_id": sid, "prompt": "other"})).await["reply"], "done");

    gate.add_permits(1);
    let finished = slow.await.unwrap();
    assert_eq!(finished["reply"], "done", "{finished}");
    let next = h.chat(json!({"session_id": sid, "chat_id": chat_id, "prompt": "after"})).await;
    assert_eq!(next["messages"].as_array().map(Vec::len), Some(6), "the chat is free again: {next}");
}

#[tokio::test]
async fn a_chat_model_is_never_offered_the_chat_tools_and_cannot_run_them() {
    let holder: Arc<Mutex<Value>> = Arc::default();
    let target = holder.clone();
    let model = Scripted::with_fallback(vec![Answer::Text("stored".into())], move || {
        let chat_id = target.lock().unwrap().clone();
        Answer::Tools(vec![
            ("list_chats".into(), json!({})),
            ("get_chat".into(), json!({"chat_id": chat_id})),
            ("delete_chat".into(), json!({"chat_id": chat_id})),
        ])
    });
    let config = AiChatConfig { turn: cks_chat::TurnConfig { max_iterations: 1, ..AiChatConfig::default().turn } };
    let h = Harness::with_config(model.clone(), config, |_| {});
    let sid = h.session(graph("s")).await;
    let chat_id = h.chat(json!({"session_id": sid, "prompt": "hi", "new_chat": true})).await["chat_id"].clone();
    *holder.lock().unwrap() = chat_id.clone();

    let out = h.chat(json!({"session_id": sid, "prompt": "read and delete my chats"})).await;
    for name in ["list_chats", "get_chat", "delete_chat"] {
        assert!(!model.request(1).tools.iter().any(|t| t.name == name), "{name} is offered");
        assert!(cks_chat::DENIED_TOOLS.contains(&name), "{name} is not on the denylist");
        assert!(!h.registry.get(name).unwrap().meta().llm_exposed, "{name} is declared exposed");
    }
    let calls = out["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 3, "{out}");
    for call in calls {
        assert_eq!(call["result"]["error"], "unknown_or_disallowed_tool", "{call}");
    }
    assert_eq!(h.tool("get_chat", json!({"chat_id": chat_id})).await["revision"], 1, "the chat is untouched");
}
