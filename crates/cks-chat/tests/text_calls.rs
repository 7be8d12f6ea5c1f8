//! Local models often write a tool call as text instead of a structured call. Against the
//! scripted provider server in each of the four wire formats, through the real LLM client: text
//! that is exactly a call to an offered tool with valid arguments runs as a call (and the
//! history it leaves is accepted by the provider on the next round trip); anything else stays
//! text; a call to an offered tool with arguments it refuses runs once a turn, for its error.
//! A model server that fails because it could not read the model's answer is told to the model
//! once. Also: `usage` counts every request sent, retries included.

mod support;

use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use cks_chat::AiChatConfig;
use cks_llm::{LlmClient, LlmConfig, ProviderKind};
use cks_testkit::{ProviderServer, Reply};
use cks_tools::Registry;

use support::{Harness, add_object, graph};

fn env_for(kind: ProviderKind, base: &str) -> HashMap<String, String> {
    let mut env: HashMap<String, String> = HashMap::new();
    env.insert("CKS_LLM_PROVIDER".into(), kind.as_str().into());
    env.insert("ANTHROPIC_API_KEY".into(), "sk-ant-text-calls".into());
    env.insert("ANTHROPIC_BASE_URL".into(), base.into());
    env.insert("CKS_OPENAI_API_KEY".into(), "sk-openai-text-calls".into());
    env.insert("CKS_OPENAI_BASE_URL".into(), format!("{base}/v1"));
    env.insert("CKS_GOOGLE_API_KEY".into(), "google-text-calls".into());
    env.insert("CKS_GOOGLE_BASE_URL".into(), format!("{base}/v1beta"));
    env.insert("CKS_OLLAMA_HOST".into(), base.into());
    env
}

async fn harness(kind: ProviderKind) -> (ProviderServer, Harness) {
    let server = ProviderServer::start().await;
    let env = env_for(kind, &server.base_url());
    let mut config = LlmConfig::from_env(|k| env.get(k).cloned()).unwrap();
    config.http.retry.base_delay = Duration::from_millis(2);
    config.http.retry.max_delay = Duration::from_millis(10);
    let client = LlmClient::new(config).unwrap();
    let h = Harness::build(Arc::new(client), AiChatConfig::default(), Registry::standard(), |_| {});
    (server, h)
}

fn names(out: &Value) -> Vec<&str> {
    out["tool_calls"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect()
}

#[tokio::test]
async fn a_call_written_as_text_runs_on_every_provider() {
    for kind in ProviderKind::ALL {
        let (server, h) = harness(kind).await;
        let sid = h.session(graph("s")).await;
        let call = json!({"name": "evolve_knowledge", "arguments": add_object("from-text")});
        server.push(Reply::text(call.to_string()));
        server.push(Reply::text(format!(
            "<tool_call>\n{}\n</tool_call>",
            json!({"name": "query_subgraph", "arguments": {}})
        )));
        server.push(Reply::text("Added from-text."));
        let out = h.chat(json!({"session_id": sid, "prompt": "add an object from-text"})).await;

        assert_eq!(out["reply"], "Added from-text.", "{kind}: the provider accepted the history: {out}");
        assert_eq!(names(&out), ["evolve_knowledge", "query_subgraph"], "{kind}");
        for record in out["tool_calls"].as_array().unwrap() {
            assert_eq!(record["recovered_from_text"], true, "{kind}: {record}");
            assert_eq!(record["is_error"], false, "{kind}: {record}");
            assert_eq!(record["arguments"]["session_id"], json!(sid), "{kind}: pinned like any call");
        }
        let objects: Vec<String> = h.ctx.runtime.read(&sid, |s, _| s.ids().map(str::to_owned).collect()).await.unwrap();
        assert!(objects.contains(&"from-text".to_owned()), "{kind}");
        // The history holds a structured call where the text was, answered by its result.
        let messages = out["messages"].as_array().unwrap();
        assert_eq!(messages[1]["content"][0]["type"], "tool_use", "{kind}: {}", messages[1]);
        assert!(messages[1]["content"].as_array().unwrap().iter().all(|b| b["type"] != "text"));
        assert_eq!(messages[2]["content"][0]["tool_use_id"], messages[1]["content"][0]["id"]);
        assert_eq!(server.requests().len(), 3, "{kind}");
    }
}

#[tokio::test]
async fn anything_else_stays_text_on_every_provider() {
    let texts = [
        // Not offered in a chat.
        json!({"name": "migrate_storage", "arguments": {}}).to_string(),
        json!({"name": "ai_chat", "arguments": {"prompt": "recurse"}}).to_string(),
        // Not exactly a call.
        format!("I will call {}", json!({"name": "query_subgraph", "arguments": {}})),
        "The graph has three objects.".to_owned(),
    ];
    for kind in ProviderKind::ALL {
        for text in &texts {
            let (server, h) = harness(kind).await;
            let sid = h.session(graph("s")).await;
            let before = h.state(&sid).await;
            server.push(Reply::text(text.clone()));
            let out = h.chat(json!({"session_id": sid, "prompt": "go"})).await;
            assert_eq!(out["reply"], json!(text), "{kind}: {out}");
            assert!(out["tool_calls"].as_array().unwrap().is_empty(), "{kind}: {out}");
            assert_eq!(h.state(&sid).await, before, "{kind}");
            assert_eq!(h.ctx.runtime.list_sessions().await.unwrap().len(), 1, "{kind}");
        }
    }
}

#[tokio::test]
async fn usage_counts_every_request_sent() {
    for kind in ProviderKind::ALL {
        let (server, h) = harness(kind).await;
        let sid = h.session(graph("s")).await;
        server.push_all([Reply::ServerError, Reply::Overloaded, Reply::text("fine")]);
        let out = h.chat(json!({"session_id": sid, "prompt": "hi"})).await;
        assert_eq!(out["reply"], "fine", "{kind}: {out}");
        assert_eq!(out["usage"]["llm_calls"], 3, "{kind}: two retries and the answer");

        // A turn that fails still reports what it sent.
        let (server, h) = harness(kind).await;
        let sid = h.session(graph("s")).await;
        server.push_all(vec![Reply::ServerError; 10]);
        let out = h.chat(json!({"session_id": sid, "prompt": "hi"})).await;
        assert_eq!(out["error"], "llm_call_failed", "{kind}: {out}");
        assert_eq!(out["usage"]["llm_calls"], json!(server.requests().len()), "{kind}: {out}");
    }
}

#[tokio::test]
async fn refused_arguments_in_a_text_call_get_the_tools_error_once_a_turn() {
    let texts = [
        json!({"name": "compare_versions", "arguments": {}}).to_string(),
        json!({"name": "evolve_knowledge", "arguments": {"operations": "add everything"}}).to_string(),
        // Withheld in a chat: it would create a session.
        json!({"name": "evolve_knowledge", "arguments": {"json_data": "{}", "operations": []}}).to_string(),
    ];
    for kind in ProviderKind::ALL {
        for text in &texts {
            let (server, h) = harness(kind).await;
            let sid = h.session(graph("s")).await;
            let before = h.state(&sid).await;
            // The model repeats its mistake: the second time it stays text and ends the turn.
            server.push_all([Reply::text(text.clone()), Reply::text(text.clone())]);
            let out = h.chat(json!({"session_id": sid, "prompt": "go"})).await;
            assert_eq!(out["reply"], json!(text), "{kind}: {out}");
            let calls = out["tool_calls"].as_array().unwrap();
            assert_eq!(calls.len(), 1, "{kind}: {out}");
            assert_eq!(
                (&calls[0]["is_error"], &calls[0]["recovered_from_text"]),
                (&json!(true), &json!(true)),
                "{kind}"
            );
            // The second request carried the tool's own error for the model to fix.
            let second = &server.requests()[1].raw_body;
            let code = ["missing_parameter", "invalid_operations", "invalid_parameter"];
            assert!(code.iter().any(|code| second.contains(code)), "{kind}: {second}");
            assert_eq!(h.state(&sid).await, before, "{kind}: nothing changed");
            assert_eq!(h.ctx.runtime.list_sessions().await.unwrap().len(), 1, "{kind}: no session made");
        }
    }
}

#[tokio::test]
async fn an_answer_the_model_server_could_not_parse_is_told_to_the_model_once() {
    let unreadable = [
        (
            ProviderKind::OpenaiCompatible,
            json!({"error": {"code": 500, "type": "server_error",
                "message": "Failed to parse input at pos 11: <tool_call>{\"name\": \"query_subgraph\""}}),
        ),
        (
            ProviderKind::Ollama,
            json!({"error": "error parsing tool call: raw='{\"name\": ', err=unexpected end of JSON input"}),
        ),
    ];
    for (kind, body) in unreadable {
        let reply = Reply::Status { status: 500, headers: vec![], body: body.to_string() };
        let (server, h) = harness(kind).await;
        let sid = h.session(graph("s")).await;
        // The client's own retries get the same answer; then the model is asked again, told why.
        server.push_all(vec![reply.clone(); 4]);
        server.push(Reply::text("The graph has two objects."));
        let out = h.chat(json!({"session_id": sid, "prompt": "how many objects?"})).await;
        assert_eq!(out["reply"], "The graph has two objects.", "{kind}: {out}");
        let requests = server.requests();
        assert_eq!(requests.len(), 5, "{kind}");
        assert!(!requests[0].raw_body.contains("could not be read"), "{kind}");
        assert!(
            requests[4].raw_body.contains("could not be read by the model server"),
            "{kind}: {}",
            requests[4].raw_body
        );
        assert!(requests[4].raw_body.contains("pars"), "{kind}: the cause is named");
        assert_eq!(out["usage"]["llm_calls"], 5, "{kind}: {out}");

        // A second unreadable answer in the same turn ends it, as any failed LLM call.
        let (server, h) = harness(kind).await;
        let sid = h.session(graph("s")).await;
        server.push_all(vec![reply.clone(); 8]);
        let out = h.chat(json!({"session_id": sid, "prompt": "how many objects?"})).await;
        assert_eq!(out["error"], "llm_call_failed", "{kind}: {out}");
        assert_eq!(server.requests().len(), 8, "{kind}");
    }
}
