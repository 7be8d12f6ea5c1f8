//! `POST /chat/stream` end to end: the real binary serving MCP over stdio and HTTP at once, the
//! real LLM client, and a scripted provider server for each provider's wire format. The events
//! (`text_delta`, `tool_call_started`, `tool_call_completed`, `done`), `done` against `ai_chat`
//! over MCP, invalid arguments, a closed connection cancelling the turn, approvals of
//! destructive calls over both transports, and a provider that answers streamed requests with
//! whole JSON bodies.

use serde_json::{Value, json};
use std::time::{Duration, Instant};

use cks_testkit::{ProviderServer, Reply, ToolCall};

mod support;
use support::stdio::Mcp;
use support::{PROVIDERS, provider_env};

/// The binary with MCP on stdio and HTTP on a free loopback port, and its provider.
struct Served {
    provider: ProviderServer,
    mcp: Mcp,
    base: String,
    http: reqwest::Client,
    _dir: tempfile::TempDir,
}

/// One server-sent event.
#[derive(Debug, Clone)]
struct Event {
    name: String,
    data: String,
}

impl Event {
    fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or_else(|e| panic!("{e}: {}", self.data))
    }
}

/// Splits an SSE body into events (comments and keep-alives left out).
fn parse_events(text: &str) -> Vec<Event> {
    text.split("\n\n")
        .filter_map(|block| {
            let mut name = None;
            let mut data = Vec::new();
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event:") {
                    name = Some(v.trim_start().to_owned());
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push(v.strip_prefix(' ').unwrap_or(v).to_owned());
                }
            }
            Some(Event { name: name?, data: data.join("\n") })
        })
        .collect()
}

impl Served {
    async fn start(provider: &str) -> Served {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let server = ProviderServer::start().await;
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let args = vec!["--http".to_owned(), format!("127.0.0.1:{port}")];
        let mcp = Mcp::start_with_args(dir.path(), &provider_env(provider, &server.base_url()), &args).await;
        let served = Served {
            provider: server,
            mcp,
            base: format!("http://127.0.0.1:{port}"),
            http: reqwest::Client::new(),
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while served.http.get(format!("{}/health", served.base)).send().await.is_err() {
            assert!(Instant::now() < deadline, "HTTP did not come up");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        served
    }

    async fn session(&mut self, prefix: &str) -> String {
        let graph = json!({"objects": [
            {"identity": {"id": format!("{prefix}-a"), "type": "Claim", "name": format!("{prefix} alpha")}},
            {"identity": {"id": format!("{prefix}-b"), "type": "Claim", "name": format!("{prefix} beta")}}
        ]});
        let out = self.mcp.call("validate_knowledge", json!({"json_data": graph.to_string()})).await;
        out["session_id"].as_str().unwrap().to_owned()
    }

    fn post(&self, body: impl Into<reqwest::Body>) -> reqwest::RequestBuilder {
        self.http.post(format!("{}/chat/stream", self.base)).header("content-type", "application/json").body(body)
    }

    /// A whole streamed turn: its events, `done` last.
    async fn stream(&self, arguments: &Value) -> Vec<Event> {
        self.stream_raw(arguments.to_string()).await
    }

    async fn stream_raw(&self, body: String) -> Vec<Event> {
        let response = self.post(body).send().await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        let events = parse_events(&response.text().await.unwrap());
        assert_eq!(events.last().map(|e| e.name.as_str()), Some("done"), "{events:?}");
        assert_eq!(events.iter().filter(|e| e.name == "done").count(), 1);
        events
    }

    /// `ai_chat` over MCP: the result's JSON text.
    async fn ai_chat_text(&mut self, arguments: &Value) -> String {
        let reply = self.mcp.request("tools/call", json!({"name": "ai_chat", "arguments": arguments})).await;
        reply["result"]["content"][0]["text"].as_str().expect("a tool result").to_owned()
    }

    async fn versions(&mut self, session: &str) -> Vec<Value> {
        let out = self.mcp.call("list_versions", json!({"session_id": session})).await;
        out["versions"].as_array().unwrap().clone()
    }

    /// The chat requests the provider received, and whether each asked for a streamed answer.
    fn streamed_requests(&self) -> Vec<bool> {
        self.provider
            .requests()
            .iter()
            .filter(|r| r.method == "POST")
            .map(|r| {
                r.body.get("stream") == Some(&json!(true))
                    || r.path.contains("streamGenerateContent")
                    || (r.path == "/api/chat" && r.body.get("stream") != Some(&json!(false)))
            })
            .collect()
    }
}

/// The texts of the `text_delta` events from `from` up to the next other event.
fn deltas_from(events: &[Event], from: usize) -> (Vec<String>, usize) {
    let mut texts = Vec::new();
    let mut i = from;
    while i < events.len() && events[i].name == "text_delta" {
        texts.push(events[i].json()["text"].as_str().unwrap().to_owned());
        i += 1;
    }
    (texts, i)
}

#[tokio::test]
async fn events_then_done_over_each_provider_with_the_result_ai_chat_gives() {
    for provider in PROVIDERS {
        let mut s = Served::start(provider).await;
        let sid = s.session("c").await;
        let script = || {
            [
                Reply::TextAndToolCalls(
                    "Let me look at the graph.".into(),
                    vec![ToolCall::new("query_subgraph", json!({"session_id": "someone-else"}))],
                ),
                Reply::text("There are two objects."),
            ]
        };
        s.provider.push_all(script());
        let args = json!({"session_id": sid, "prompt": "How many objects?"});
        let events = s.stream(&args).await;

        let (first, i) = deltas_from(&events, 0);
        assert!(first.len() >= 2, "{provider}: the text arrived in pieces: {events:?}");
        assert_eq!(first.concat(), "Let me look at the graph.", "{provider}");
        assert_eq!(events[i].name, "tool_call_started", "{provider}: {events:?}");
        let started = events[i].json();
        assert_eq!(started["index"], 0);
        assert_eq!(started["name"], "query_subgraph");
        assert_eq!(started["arguments"]["session_id"], json!(sid), "{provider}: pinned: {started}");
        assert_eq!(started.as_object().unwrap().len(), 3, "{started}");
        let completed = events[i + 1].json();
        assert_eq!(events[i + 1].name, "tool_call_completed");
        assert_eq!((completed["index"].clone(), completed["name"].clone()), (json!(0), json!("query_subgraph")));
        assert_eq!(completed["arguments"], started["arguments"]);
        assert_eq!(completed["is_error"], false);
        let summary = completed["result_summary"].as_str().unwrap();
        assert!(summary.starts_with('{') && summary.chars().count() <= 301, "{summary}");
        assert_eq!(completed.as_object().unwrap().len(), 5, "{completed}");
        let (second, j) = deltas_from(&events, i + 2);
        assert_eq!(second.concat(), "There are two objects.", "{provider}");
        assert_eq!(j, events.len() - 1, "{provider}: nothing between the text and done: {events:?}");

        // `done` is ai_chat's answer: the same turn over MCP answers the same (the provider's call ids
        // aside, which it makes up anew for each answer).
        let done = events.last().unwrap().json();
        s.provider.push_all(script());
        let over_mcp: Value = serde_json::from_str(&s.ai_chat_text(&args).await).unwrap();
        for key in ["reply", "tool_calls", "usage", "provider", "model"] {
            assert_eq!(done[key], over_mcp[key], "{provider}: {key}");
        }
        assert_eq!(done["tool_calls"][0]["arguments"], started["arguments"]);
        let roles = |v: &Value| v["messages"].as_array().unwrap().iter().map(|m| m["role"].clone()).collect::<Vec<_>>();
        assert_eq!(roles(&done), roles(&over_mcp));
        assert_eq!(
            done.as_object().unwrap().keys().collect::<Vec<_>>(),
            over_mcp.as_object().unwrap().keys().collect::<Vec<_>>()
        );
        // Streamed on the wire for the stream, as before for MCP.
        assert_eq!(s.streamed_requests(), [true, true, false, false], "{provider}");
    }
}

#[tokio::test]
async fn invalid_arguments_answer_done_with_ai_chats_own_error() {
    let mut s = Served::start("anthropic").await;
    let sid = s.session("c").await;
    for args in [
        json!({"session_id": sid}),
        json!({"prompt": "hi"}),
        json!({"session_id": "no-such-session", "prompt": "hi"}),
        json!({"session_id": sid, "prompt": "hi", "approval": {"decision": "approve"}}),
        json!({"session_id": sid, "approval": {"decision": "approve"}}),
        json!({"session_id": sid, "chat_id": "nope", "prompt": "hi"}),
        json!({"session_id": sid, "prompt": "hi", "approval": {"decision": "perhaps"}}),
    ] {
        let events = s.stream(&args).await;
        assert_eq!(events.len(), 1, "{args}: {events:?}");
        let over_mcp = s.ai_chat_text(&args).await;
        assert_eq!(events[0].data, over_mcp, "{args}: done is byte for byte ai_chat's answer");
        assert!(events[0].json()["error"].is_string(), "{args}");
    }
    let events = s.stream_raw("this is not JSON".into()).await;
    assert_eq!(events[0].json()["error"], "invalid_parameter");
    assert_eq!(s.provider.requests().iter().filter(|r| r.method == "POST").count(), 0, "no LLM call");
}

#[tokio::test]
async fn the_stream_has_the_same_guards_as_mcp() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let env = vec![
        ("CKS_MCP_HTTP_TOKEN", "chat-stream-token".to_owned()),
        ("CKS_MCP_LOG", "error".into()),
        ("CKS_MCP_MAX_MESSAGE_BYTES", "4096".into()),
    ];
    let args = vec!["--http".to_owned(), format!("127.0.0.1:{port}")];
    let mut mcp = Mcp::start_with_args(dir.path(), &env, &args).await;
    let sid = {
        let out = mcp.call("validate_knowledge", json!({"json_data": "{\"objects\": []}"})).await;
        out["session_id"].as_str().unwrap().to_owned()
    };
    let http = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{port}/chat/stream");
    let body = json!({"session_id": sid}).to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        match http.post(&url).body(body.clone()).send().await {
            Ok(r) => break r.status(),
            Err(_) if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(e) => panic!("{e}"),
        }
    };
    assert_eq!(status, 401, "a token is required");
    let bad_origin = http
        .post(&url)
        .bearer_auth("chat-stream-token")
        .header("origin", "https://evil.example.com")
        .body(body.clone());
    assert_eq!(bad_origin.send().await.unwrap().status(), 403);
    let bad_host =
        http.post(&url).bearer_auth("chat-stream-token").header("host", "evil.example.com").body(body.clone());
    assert_eq!(bad_host.send().await.unwrap().status(), 403);
    let response = http
        .post(&url)
        .bearer_auth("chat-stream-token")
        .header("origin", "http://localhost:5173")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["access-control-allow-origin"], "http://localhost:5173");
    let events = parse_events(&response.text().await.unwrap());
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].json()["error"], "missing_parameter");
    // Bodies over the message limit are refused before anything runs.
    let huge = format!("{{\"prompt\": \"{}\"}}", "x".repeat(8000));
    let response = http.post(&url).bearer_auth("chat-stream-token").body(huge).send().await.unwrap();
    assert_eq!(response.status(), 413);
}

#[tokio::test]
async fn closing_the_connection_cancels_the_turn() {
    let mut s = Served::start("anthropic").await;
    let sid = s.session("c").await;
    let before = s.versions(&sid).await.len();
    // An answer that streams slowly and ends in a call that would change the graph; then another.
    s.provider.push(
        Reply::TextAndToolCalls(
            "Looking at the graph right now, one moment please.".into(),
            vec![ToolCall::new(
                "evolve_knowledge",
                json!({"operations": [{"type": "add_object", "identity": {"id": "too-late", "type": "Note", "name": "n"}}]}),
            )],
        )
        .paced(Duration::from_millis(250)),
    );
    s.provider.push(Reply::text("never asked"));
    let mut response = s.post(json!({"session_id": sid, "prompt": "add a note"}).to_string()).send().await.unwrap();
    let mut seen = String::new();
    while !seen.contains("event: text_delta") {
        let chunk = tokio::time::timeout(Duration::from_secs(10), response.chunk()).await.unwrap().unwrap().unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    // The tab is closed mid-answer.
    drop(response);
    let closed = Instant::now();
    // Longer than the rest of the paced answer (about 20 chunks), and than a keep-alive interval.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let chats: Vec<_> = s.provider.requests().into_iter().filter(|r| r.method == "POST").collect();
    assert_eq!(chats.len(), 1, "no further request after the client left");
    let sent = &chats[0].sent;
    let stopped = sent.last().unwrap().0;
    assert!(
        stopped < closed + Duration::from_secs(2),
        "the provider's stream was abandoned soon after: {} of its chunks went out, the last {:?} after the close",
        sent.len(),
        stopped.saturating_duration_since(closed)
    );
    assert_eq!(s.versions(&sid).await.len(), before, "the call at the end of the answer never ran");
    // The server carries on; the reply the turn would have asked for next is still queued.
    assert_eq!(s.provider.pending(), 1);
    let events = s.stream(&json!({"session_id": sid, "prompt": "hi"})).await;
    assert_eq!(events.last().unwrap().json()["reply"], "never asked");
}

/// Approve and reject a destructive call over `/chat/stream` (a stored chat) and over MCP (the
/// returned messages).
#[tokio::test]
async fn destructive_calls_wait_for_approval_over_both_transports() {
    let mut s = Served::start("anthropic").await;
    let sid = s.session("c").await;
    for id in ["n1", "n2"] {
        let ops = json!([{"type": "add_object", "identity": {"id": id, "type": "Note", "name": id}}]);
        let out = s.mcp.call("evolve_knowledge", json!({"session_id": sid, "operations": ops})).await;
        assert!(out.get("error").is_none(), "{out}");
    }
    let versions = s.versions(&sid).await;
    let (v1, v2) = (versions[0]["version_id"].clone(), versions[1]["version_id"].clone());
    let revert = |target: &Value| {
        Reply::ToolCalls(vec![ToolCall::new("revert_version", json!({"target_version_id": target, "confirm": true}))])
    };

    // 1. Over the stream, in a stored chat: the call waits; nothing ran, no call events.
    s.provider.push(revert(&v1));
    let events =
        s.stream(&json!({"session_id": sid, "prompt": "undo everything", "new_chat": true, "approvals": true})).await;
    assert_eq!(events.len(), 1, "{events:?}");
    let done = events[0].json();
    let pending = done["pending_approval"].clone();
    assert_eq!(pending["name"], "revert_version", "{done}");
    assert_eq!(pending["arguments"], json!({"session_id": sid, "target_version_id": v1, "confirm": true}));
    let chat_id = done["chat_id"].as_str().unwrap().to_owned();
    assert_eq!(s.versions(&sid).await.len(), 3, "confirm: true is not consent");

    // Approved: the call runs (reported live), the model answers.
    s.provider.push(Reply::text("Reverted to the first version."));
    let events = s.stream(&json!({"session_id": sid, "chat_id": chat_id, "approval": {"decision": "approve"}})).await;
    let names: Vec<&str> = events.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names[..2], ["tool_call_started", "tool_call_completed"], "{events:?}");
    assert_eq!(events[0].json()["arguments"], pending["arguments"]);
    assert_eq!(events[1].json()["is_error"], false, "{events:?}");
    let done = events.last().unwrap().json();
    assert_eq!(done["reply"], "Reverted to the first version.", "{done}");
    assert_eq!(done["chat_id"], json!(chat_id));
    let after = s.versions(&sid).await;
    assert_eq!(after.len(), 4);
    assert_eq!(after[3]["metadata"]["tool"], "ai_chat");

    // Rejected, over the stream: an error result with the reason, and the model answers.
    s.provider.push(revert(&v2));
    s.provider.push(Reply::text("I left it as it is."));
    let events =
        s.stream(&json!({"session_id": sid, "chat_id": chat_id, "prompt": "now undo to v2", "approvals": true})).await;
    assert!(events.last().unwrap().json()["pending_approval"].is_object());
    let events = s
        .stream(&json!({"session_id": sid, "chat_id": chat_id, "approval": {"decision": "reject", "reason": "changed my mind"}}))
        .await;
    let completed = events.iter().find(|e| e.name == "tool_call_completed").unwrap().json();
    assert_eq!(completed["is_error"], true);
    let summary = completed["result_summary"].as_str().unwrap();
    assert!(summary.starts_with("not_approved: ") && summary.contains("changed my mind"), "{summary}");
    assert_eq!(events.last().unwrap().json()["reply"], "I left it as it is.");
    assert_eq!(s.versions(&sid).await.len(), 4, "nothing reverted");
    // The provider saw the declined call's result, marked as an error.
    let last = s.provider.requests().into_iter().rfind(|r| r.method == "POST").unwrap();
    let sent = last.body["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(sent["content"][0]["type"], "tool_result", "{sent}");
    assert_eq!(sent["content"][0]["is_error"], true, "{sent}");

    // 2. Over MCP, with the returned messages: approve one, reject another.
    s.provider.push(revert(&v2));
    let out: Value = serde_json::from_str(
        &s.ai_chat_text(&json!({"session_id": sid, "prompt": "undo to v2", "approvals": true})).await,
    )
    .unwrap();
    assert_eq!(out["pending_approval"]["name"], "revert_version", "{out}");
    assert_eq!(s.versions(&sid).await.len(), 4);
    s.provider.push(Reply::text("Done."));
    let approved = json!({"session_id": sid, "messages": out["messages"], "approval": {"decision": "approve"}});
    let out: Value = serde_json::from_str(&s.ai_chat_text(&approved).await).unwrap();
    assert_eq!(out["reply"], "Done.", "{out}");
    assert_eq!(out["tool_calls"][0]["is_error"], false, "{out}");
    assert_eq!(s.versions(&sid).await.len(), 5, "reverted over MCP");

    s.provider.push(revert(&v1));
    let out: Value = serde_json::from_str(
        &s.ai_chat_text(&json!({"session_id": sid, "prompt": "undo to v1", "approvals": true})).await,
    )
    .unwrap();
    assert!(out["pending_approval"].is_object(), "{out}");
    s.provider.push(Reply::text("Kept."));
    let rejected = json!({"session_id": sid, "messages": out["messages"], "approval": {"decision": "reject"}});
    let out: Value = serde_json::from_str(&s.ai_chat_text(&rejected).await).unwrap();
    assert_eq!(out["reply"], "Kept.", "{out}");
    assert_eq!(out["tool_calls"][0]["result"]["error"], "not_approved");
    assert_eq!(s.versions(&sid).await.len(), 5, "nothing reverted");
}

/// A provider (a gateway, a local server) that answers each streamed request with the whole JSON body of
/// a non-streamed answer: the turn goes on as if it had streamed, its text in `text_delta`s and its tool
/// calls run, one provider request per model call; a 200 body that is neither stream nor answer ends the
/// turn at once with an error that names it.
#[tokio::test]
async fn a_provider_answering_streams_with_whole_json_bodies_still_serves_the_turn() {
    for provider in PROVIDERS {
        let mut s = Served::start(provider).await;
        let sid = s.session("w").await;
        s.provider.push_all([
            Reply::TextAndToolCalls(
                "Let me look at the graph.".into(),
                vec![ToolCall::new("query_subgraph", json!({"session_id": sid}))],
            )
            .not_streamed(),
            Reply::text("There are two objects.").not_streamed(),
        ]);
        let events = s.stream(&json!({"session_id": sid, "prompt": "How many objects?"})).await;
        let (first, i) = deltas_from(&events, 0);
        assert_eq!(first.concat(), "Let me look at the graph.", "{provider}: {events:?}");
        assert_eq!(events[i].name, "tool_call_started", "{provider}: {events:?}");
        assert_eq!(events[i].json()["name"], "query_subgraph");
        assert_eq!(events[i + 1].name, "tool_call_completed", "{provider}: {events:?}");
        assert_eq!(events[i + 1].json()["is_error"], false, "{provider}: {events:?}");
        let (second, _) = deltas_from(&events, i + 2);
        assert_eq!(second.concat(), "There are two objects.", "{provider}");
        let done = events.last().unwrap().json();
        assert_eq!(done["reply"], "There are two objects.", "{provider}: {done}");
        // Both model calls asked for a stream, and each took exactly one request.
        assert_eq!(s.streamed_requests(), [true, true], "{provider}");

        // A body that is neither: one request, no retry, and the error says what came back.
        s.provider.push_all([Reply::Garbage.not_streamed(), Reply::text("never asked")]);
        let events = s.stream(&json!({"session_id": sid, "prompt": "And now?"})).await;
        let done = events.last().unwrap().json();
        let text = done.to_string();
        assert_eq!(done["error"], "llm_call_failed", "{provider}: {done}");
        assert!(
            text.contains("answered a streamed request with content-type application/json")
                && text.contains("502 Bad Gateway"),
            "{provider}: {done}"
        );
        assert_eq!(s.streamed_requests(), [true, true, true], "{provider}: not retried");
        assert_eq!(s.provider.pending(), 1, "{provider}");
    }
}
