//! `ai_chat` end to end: the real binary over MCP stdio, the real LLM client, and a scripted
//! provider server speaking each provider's wire format (Anthropic, OpenAI-compatible, Gemini,
//! Ollama). Also progress notifications and cancellation over the real MCP connection.

use serde_json::{Value, json};
use std::process::Stdio;
use std::time::Duration;
use tokio::process::Command;

use cks_testkit::{ProviderServer, Reply, ToolCall};

mod support;
use support::stdio::Mcp;
use support::{PROVIDERS, provider_env};

fn graph(prefix: &str) -> String {
    json!({"objects": [
        {"identity": {"id": format!("{prefix}-a"), "type": "Claim", "name": format!("{prefix} alpha")}},
        {"identity": {"id": format!("{prefix}-b"), "type": "Claim", "name": format!("{prefix} beta")}}
    ]})
    .to_string()
}

async fn session(mcp: &mut Mcp, prefix: &str) -> String {
    let out = mcp.call("validate_knowledge", json!({"json_data": graph(prefix)})).await;
    out["session_id"].as_str().unwrap().to_owned()
}

fn add(id: &str) -> Value {
    json!({"operations": [{"type": "add_object", "identity": {"id": id, "type": "Note", "name": id}}]})
}

async fn setup(provider: &str) -> (ProviderServer, tempfile::TempDir, Mcp) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let server = ProviderServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mcp = Mcp::start(dir.path(), &provider_env(provider, &server.base_url())).await;
    (server, dir, mcp)
}

#[tokio::test]
async fn contract_over_each_provider() {
    for provider in PROVIDERS {
        let (server, _dir, mut mcp) = setup(provider).await;
        let chat = session(&mut mcp, "c").await;
        let other = session(&mut mcp, "o").await;

        // 1. A plain answer.
        server.push(Reply::Text("Hello from the model".into()));
        let out = mcp.call("ai_chat", json!({"session_id": chat, "prompt": "hi"})).await;
        assert_eq!(out["reply"], "Hello from the model", "{provider}: {out}");
        assert_eq!(out["tool_calls"], json!([]), "{provider}");
        assert_eq!(out["messages"][0], json!({"role": "user", "content": "hi"}), "{provider}");
        assert_eq!(out["messages"][1]["role"], "assistant", "{provider}");

        // 4 and 5. A call aimed at another session is pinned; a denied tool is refused; the loop goes on.
        server.push(Reply::ToolCalls(vec![
            ToolCall::new("evolve_knowledge", json!({"session_id": other, "operations": add("pinned")["operations"]})),
            ToolCall::new("export_storage", json!({})),
        ]));
        server.push(Reply::Text("Done.".into()));
        let out = mcp.call("ai_chat", json!({"session_id": chat, "prompt": "edit the other session"})).await;
        assert_eq!(out["reply"], "Done.", "{provider}: {out}");
        assert_eq!(out["tool_calls"][0]["arguments"]["session_id"], json!(chat), "{provider}");
        assert_eq!(out["tool_calls"][0]["is_error"], false, "{provider}: {}", out["tool_calls"][0]);
        assert_eq!(out["tool_calls"][1]["result"]["error"], "unknown_or_disallowed_tool", "{provider}");
        let other_versions = mcp.call("list_versions", json!({"session_id": other})).await;
        assert_eq!(
            other_versions["versions"].as_array().unwrap().len(),
            1,
            "{provider}: the other session is untouched"
        );
        let chat_versions = mcp.call("list_versions", json!({"session_id": chat})).await;
        let last = chat_versions["versions"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(last["metadata"]["tool"], "ai_chat", "{provider}: audited");
        assert_eq!(last["metadata"]["provider"], provider, "{provider}");

        // 12. The returned history, plus a new user turn, is accepted again.
        let mut messages = out["messages"].as_array().unwrap().clone();
        messages.push(json!({"role": "user", "content": "and now?"}));
        server.push(Reply::Text("Still here.".into()));
        let again = mcp.call("ai_chat", json!({"session_id": chat, "messages": messages})).await;
        assert_eq!(again["reply"], "Still here.", "{provider}: {again}");

        // 9. A model that keeps calling tools (different calls each time, so that it is not
        // stopped as repeating itself) is called exactly 8 times.
        let before = server.requests().len();
        for depth in 0..8 {
            server.push(Reply::ToolCalls(vec![ToolCall::new("query_subgraph", json!({"depth": depth}))]));
        }
        let out = mcp.call("ai_chat", json!({"session_id": chat, "prompt": "loop forever"})).await;
        assert_eq!(server.requests().len() - before, 8, "{provider}");
        assert_eq!(out["truncated"], true, "{provider}");
        assert_eq!(out["reply"], "Reached the tool-call iteration limit without a final answer.");

        // 10. Provider failure: an error result with the history, never a failed MCP call.
        server.push(Reply::ServerError);
        let out = mcp.call("ai_chat", json!({"session_id": chat, "prompt": "fail"})).await;
        assert_eq!(out["error"], "llm_call_failed", "{provider}: {out}");
        assert_eq!(out["messages"], json!([{"role": "user", "content": "fail"}]));
        assert!(!out.to_string().contains("e2e-secret"), "{provider}: no key in the result");
    }
}

#[tokio::test]
async fn no_provider_configured() {
    let dir = tempfile::tempdir().unwrap();
    // Bound but never listening: it refuses connections, and no other test's server can take it.
    let held = tokio::net::TcpSocket::new_v4().unwrap();
    held.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let closed = held.local_addr().unwrap();
    let env = vec![
        ("CKS_LLM_PROVIDER", "auto".to_owned()),
        ("CKS_OLLAMA_HOST", format!("http://{closed}")),
        ("ANTHROPIC_API_KEY", String::new()),
    ];
    let mut mcp = Mcp::start(dir.path(), &env).await;
    let chat = session(&mut mcp, "c").await;
    let out = mcp.call("ai_chat", json!({"session_id": chat, "prompt": "hi"})).await;
    assert_eq!(out["error"], "llm_provider_unavailable", "{out}");
    let message = out["message"].as_str().unwrap();
    for option in ["ollama", "anthropic", "google", "openai_compatible"] {
        assert!(message.contains(option), "the message names {option}: {message}");
    }
}

#[tokio::test]
async fn history_survives_switching_providers() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let server = ProviderServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut first = Mcp::start(dir.path(), &provider_env("google", &server.base_url())).await;
    let chat = session(&mut first, "c").await;
    let mut messages = vec![json!({"role": "user", "content": "start"})];
    // Each provider adds a tool call and an answer to the same history, handing it to the next.
    let order = ["google", "anthropic", "openai_compatible", "ollama", "google"];
    drop(first);
    for (turn, provider) in order.iter().enumerate() {
        let mut mcp = Mcp::start(dir.path(), &provider_env(provider, &server.base_url())).await;
        server.push(Reply::ToolCalls(vec![ToolCall::new("evolve_knowledge", add(&format!("turn{turn}")))]));
        server.push(Reply::Text(format!("turn {turn} by {provider}")));
        let out = mcp.call("ai_chat", json!({"session_id": chat, "messages": messages})).await;
        assert_eq!(out["reply"], json!(format!("turn {turn} by {provider}")), "turn {turn} ({provider}): {out}");
        messages = out["messages"].as_array().unwrap().clone();
        messages.push(json!({"role": "user", "content": format!("next after {provider}")}));
    }
}

#[tokio::test]
async fn progress_notifications_and_cancellation() {
    let (server, _dir, mut mcp) = setup("anthropic").await;
    let chat = session(&mut mcp, "c").await;

    server.push(Reply::ToolCalls(vec![ToolCall::new("list_versions", json!({}))]));
    server.push(Reply::Text("ok".into()));
    mcp.notifications.clear();
    let id = mcp
        .send_request("tools/call", json!({"name": "ai_chat", "arguments": {"session_id": chat, "prompt": "go"}, "_meta": {"progressToken": "chat-1"}}))
        .await;
    let reply = mcp.response(id).await;
    assert!(reply["result"].is_object(), "{reply}");
    // Progress notifications may trail the response on the wire; give them a moment.
    while let Some(message) = mcp.read(Duration::from_millis(300)).await {
        mcp.notifications.push(message);
    }
    let progress: Vec<String> = mcp
        .notifications
        .iter()
        .filter(|n| n["method"] == "notifications/progress" && n["params"]["progressToken"] == "chat-1")
        .map(|n| n["params"]["message"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert!(progress.contains(&"LLM round trip 1".to_owned()), "{progress:?}");
    assert!(progress.contains(&"tool list_versions".to_owned()), "{progress:?}");
    assert!(progress.contains(&"LLM round trip 2".to_owned()), "{progress:?}");

    // Cancel while the model is thinking: nothing more is asked of it and no tool runs.
    let before = server.requests().len();
    server.push(Reply::Delay(
        Duration::from_millis(1500),
        Box::new(Reply::ToolCalls(vec![ToolCall::new("evolve_knowledge", add("too-late"))])),
    ));
    let id = mcp
        .send_request("tools/call", json!({"name": "ai_chat", "arguments": {"session_id": chat, "prompt": "slow"}}))
        .await;
    // Cancelled once the question has reached the model, however slowly the loop starts.
    for _ in 0..200 {
        if server.requests().len() > before {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    mcp.send(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": id, "reason": "user"}}),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(2000)).await;
    assert_eq!(server.requests().len() - before, 1, "the loop stopped after the cancelled call");
    let versions = mcp.call("list_versions", json!({"session_id": chat})).await;
    assert_eq!(versions["versions"].as_array().unwrap().len(), 1, "the cancelled turn ran no tool");
    // The server keeps serving (and, per MCP, sends no response to the cancelled request).
    let ping = mcp.request("ping", json!({})).await;
    assert!(ping["result"].is_object());
    assert!(!mcp.notifications.iter().any(|m| m.get("id") == Some(&json!(id)) && m.get("result").is_some()));
}

#[tokio::test]
async fn a_bad_chat_limit_stops_the_server_at_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let output = tokio::time::timeout(
        Duration::from_secs(60),
        Command::new(env!("CARGO_BIN_EXE_cks-mcp"))
            .env("CKS_MCP_DATA_DIR", dir.path())
            .env("CKS_AI_CHAT_MAX_TOOL_CALLS", "lots")
            .stdin(Stdio::null())
            .output(),
    )
    .await
    .expect("the server exits")
    .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("CKS_AI_CHAT_MAX_TOOL_CALLS") && stderr.contains("whole number"), "{stderr}");
}
