//! HTTP transport: security (Origin, Host, token, body limit), the bare JSON-RPC form, and the
//! events stream, against the real router on 127.0.0.1:0.

use serde_json::{Value, json};
use std::time::Duration;

mod support;
use support::{TestServer, start, text_result, tool_call};

#[tokio::test]
async fn bare_tools_call_without_initialize() {
    let s = start(None, 1 << 20).await;
    let graph = json!({"objects": [{"identity": {"id": "a", "type": "T", "name": "A"}}]}).to_string();
    let reply: Value = s
        .post(&tool_call("validate_knowledge", json!({"json_data": graph})))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let result = text_result(&reply);
    assert_eq!(result["valid"], true);
    assert_eq!(reply["result"]["structuredContent"], result);
    let reply: Value = s.post(&tool_call("nope", json!({}))).send().await.unwrap().json().await.unwrap();
    assert_eq!(reply["error"]["code"], -32602, "an unknown tool is a bad parameter (COMPATIBILITY.md)");
    let reply = s
        .client
        .post(format!("{}/mcp", s.base))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 400, "the reference's status for a body that is not JSON");
    let reply: Value = reply.json().await.unwrap();
    assert_eq!(reply["error"]["code"], -32700);
}

#[tokio::test]
async fn origins_hosts_and_cors() {
    let s = start(None, 1 << 20).await;
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    let evil = s.post(&ping).header("origin", "https://evil.example.com").send().await.unwrap();
    assert_eq!(evil.status(), 403);
    let studio = s.post(&ping).header("origin", "https://studio.example.com").send().await.unwrap();
    assert_eq!(studio.status(), 200);
    assert_eq!(studio.headers()["access-control-allow-origin"], "https://studio.example.com");
    let local = s.post(&ping).header("origin", "http://localhost:5173").send().await.unwrap();
    assert_eq!(local.status(), 200);
    let rebound = s.post(&ping).header("host", "attacker.example.com").send().await.unwrap();
    assert_eq!(rebound.status(), 403, "DNS rebinding: foreign Host names are refused");
}

#[tokio::test]
async fn tokens_are_required_when_configured() {
    let s = start(Some("s3cret"), 1 << 20).await;
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    assert_eq!(s.post(&ping).send().await.unwrap().status(), 401);
    assert_eq!(s.post(&ping).bearer_auth("wrong").send().await.unwrap().status(), 401);
    assert_eq!(s.post(&ping).bearer_auth("s3cret").send().await.unwrap().status(), 200);
    let events = s.client.get(format!("{}/events?token=s3cret", s.base)).send().await.unwrap();
    assert_eq!(events.status(), 200, "EventSource can pass the token in the query");
    let preflight = s
        .client
        .request(reqwest::Method::OPTIONS, format!("{}/mcp", s.base))
        .header("origin", "http://localhost:3000")
        .header("access-control-request-method", "POST")
        .send()
        .await
        .unwrap();
    assert_eq!(preflight.status(), 204, "preflights need no token");
    assert_eq!(preflight.headers()["access-control-allow-origin"], "http://localhost:3000");
}

#[tokio::test]
async fn oversized_bodies_are_refused() {
    let s = start(None, 4096).await;
    let graph = "x".repeat(10_000);
    let response = s.post(&tool_call("validate_knowledge", json!({"json_data": graph}))).send().await.unwrap();
    assert_eq!(response.status(), 413);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["id"], 1, "{answer}");
    assert_eq!(answer["error"]["code"], -32600);
    assert!(answer["error"]["message"].as_str().unwrap().contains("4096"), "{answer}");
}

/// Opens a streamable-HTTP session; returns its id.
async fn open_session(s: &TestServer) -> String {
    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}});
    let response = s.post(&initialize).header("accept", "application/json, text/event-stream").send().await.unwrap();
    let session = response.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    response.bytes().await.unwrap();
    session
}

#[tokio::test]
async fn streamable_http_answers_unusable_messages_with_json_rpc_errors() {
    let s = start(None, 4096).await;
    let session = open_session(&s).await;
    let post = |body: String| {
        s.client
            .post(format!("{}/mcp", s.base))
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-session-id", &session)
            .body(body)
    };
    let response = post("{\"jsonrpc\": \"2.0\", \"id\": 3,".into()).send().await.unwrap();
    assert_eq!(response.status(), 400);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["error"]["code"], -32700, "{answer}");
    let answer: Value =
        post(json!({"jsonrpc": "2.0", "id": "x"}).to_string()).send().await.unwrap().json().await.unwrap();
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    assert_eq!(answer["id"], "x");
    let batch = json!(["2.0", 4, "ping"]).to_string();
    let answer: Value = post(batch).send().await.unwrap().json().await.unwrap();
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    let big = json!({"jsonrpc": "2.0", "id": 12, "method": "ping", "params": {"pad": "x".repeat(10_000)}});
    let response = post(big.to_string()).send().await.unwrap();
    assert_eq!(response.status(), 413);
    let answer: Value = response.json().await.unwrap();
    assert_eq!((answer["id"].clone(), answer["error"]["code"].clone()), (json!(12), json!(-32600)), "{answer}");
    // A good message still goes through to the session.
    let ping = post(json!({"jsonrpc": "2.0", "id": 13, "method": "ping"}).to_string()).send().await.unwrap();
    assert_eq!(ping.status(), 200);
    assert!(ping.text().await.unwrap().contains("\"id\":13"));
}

#[tokio::test]
async fn events_stream_filtered_runtime_events() {
    let s = start(None, 1 << 20).await;
    let graph = json!({"objects": [{"identity": {"id": "a", "type": "T", "name": "A"}}]}).to_string();
    let reply: Value = s
        .post(&tool_call("validate_knowledge", json!({"json_data": graph})))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let session = text_result(&reply)["session_id"].as_str().unwrap().to_owned();
    let mut stream =
        s.client.get(format!("{}/events/{session}?event_types=VersionCreated", s.base)).send().await.unwrap();
    assert_eq!(stream.headers()["content-type"], "text/event-stream");
    let ops = json!([{"type": "add_object", "identity": {"id": "b", "type": "T", "name": "B"}}]);
    let reply: Value = s
        .post(&tool_call("evolve_knowledge", json!({"session_id": session, "operations": ops})))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let version = text_result(&reply)["version_id"].as_str().unwrap().to_owned();
    let mut received = String::new();
    while !received.contains("\n\n") {
        let chunk =
            tokio::time::timeout(Duration::from_secs(5), stream.chunk()).await.expect("an event").unwrap().unwrap();
        received.push_str(&String::from_utf8_lossy(&chunk));
        if received.starts_with(':') && received.contains("\n\n") {
            received.clear(); // a keep-alive comment
        }
    }
    let data = received.lines().find_map(|l| l.strip_prefix("data: ")).expect("a data line");
    let frame: Value = serde_json::from_str(data).unwrap();
    assert_eq!(frame["event"], "VersionCreated");
    assert_eq!(frame["session_id"], session);
    assert_eq!(frame["detail"]["version_id"], version);
    assert!(received.lines().any(|l| l.starts_with("id: ")));
}

#[test]
fn non_loopback_bind_without_token_refuses_to_start() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_cks-mcp"))
        .args(["--http", "0.0.0.0:0", "--no-stdio"])
        .env("CKS_MCP_DB_PATH", ":memory:")
        .env_remove("CKS_MCP_HTTP_TOKEN")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("CKS_MCP_HTTP_TOKEN"), "{stderr}");
}

#[tokio::test]
async fn health_answers_with_a_small_status_behind_the_token() {
    let s = start(Some("tok"), 1 << 20).await;
    let url = format!("{}/health", s.base);
    let response = s.client.get(&url).bearer_auth("tok").send().await.unwrap();
    assert_eq!(response.status(), 200);
    let status: Value = response.json().await.unwrap();
    assert_eq!(status["status"], "ok");
    assert_eq!(status["server"], "cks-mcp");
    assert_eq!(s.client.get(&url).send().await.unwrap().status(), 401);
}
