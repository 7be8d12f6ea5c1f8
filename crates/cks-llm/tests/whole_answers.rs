//! A streamed request that a server answers with one whole JSON body, as some gateways and local
//! servers do: the body is the answer, read exactly as a non-streamed request's would be, in one request,
//! its text handed to the delta sink and the call's record marked; a body that is neither a stream nor
//! an answer fails once, naming its content type and first bytes (redacted); a stream without events is
//! retried only as configured.

mod common;

use std::sync::{Arc, Mutex};

use cks_llm::{ChatOptions, ChatResponse, ErrorKind, LlmClient, LlmError, Message, ProviderKind, StopReason};
use cks_testkit::{ProviderServer, Reply, ToolCall};
use common::*;
use serde_json::{Value, json};

/// Collects the pieces a delta sink is handed.
#[derive(Default, Clone)]
struct Pieces(Arc<Mutex<Vec<String>>>);

impl Pieces {
    fn texts(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

/// One call asking for a stream, its text handed to `pieces`.
async fn streamed(client: &LlmClient, pieces: &Pieces) -> Result<ChatResponse, LlmError> {
    let sink = |piece: &str| pieces.0.lock().unwrap().push(piece.to_owned());
    client
        .chat_with(request(vec![Message::user("Weather in Oslo?")]), ChatOptions { stream: true, deltas: Some(&sink) })
        .await
}

fn status(status: u16, content_type: Option<&str>, body: impl Into<String>) -> Reply {
    Reply::Status {
        status,
        headers: content_type.map(|t| ("content-type".to_owned(), t.to_owned())).into_iter().collect(),
        body: body.into(),
    }
}

/// The tool calls of an answer as (name, arguments): ids a provider leaves out are made up on each read.
fn calls(r: &ChatResponse) -> Vec<(String, Value)> {
    r.message.tool_calls().iter().map(|c| (c.name.to_owned(), c.input.clone())).collect()
}

#[tokio::test]
async fn a_whole_json_answer_to_a_streamed_request_is_the_answer() {
    let logs = capture_logs();
    for kind in ProviderKind::ALL {
        let server = ProviderServer::start().await;
        let reply = || {
            Reply::TextAndToolCalls(
                "Let me check.".into(),
                vec![ToolCall::with_id("call_1", "get_weather", json!({"city": "Oslo"}))],
            )
            .with_usage(21, 9)
        };
        server.push(reply().not_streamed());
        server.push(reply());
        server.push(Reply::text("Streamed as asked."));
        let client = client(kind, &server);

        let pieces = Pieces::default();
        let whole = streamed(&client, &pieces).await.unwrap_or_else(|e| panic!("{kind}: {e}"));
        let plain = client.chat(request(vec![Message::user("Weather in Oslo?")])).await.unwrap();
        // Exactly what the same body gives a request that did not ask to stream.
        assert_eq!(whole.text(), "Let me check.", "{kind}");
        assert_eq!(whole.text(), plain.text(), "{kind}");
        assert_eq!(calls(&whole), [("get_weather".to_owned(), json!({"city": "Oslo"}))], "{kind}");
        assert_eq!(calls(&whole), calls(&plain), "{kind}");
        assert_eq!(whole.stop_reason, StopReason::ToolUse, "{kind}");
        assert_eq!((whole.stop_reason, whole.usage, &whole.model), (plain.stop_reason, plain.usage, &plain.model));
        assert_eq!((whole.usage.input_tokens, whole.usage.output_tokens), (21, 9), "{kind}");
        // One request, and the text reached the sink, in one piece.
        assert_eq!(whole.requests, 1, "{kind}");
        assert_eq!(pieces.texts(), ["Let me check."], "{kind}");

        // A server that does stream is still read as a stream.
        let pieces = Pieces::default();
        let r = streamed(&client, &pieces).await.unwrap();
        assert_eq!(pieces.texts().concat(), r.text(), "{kind}");

        let sent = chat_requests(&server);
        assert_eq!(sent.len(), 3, "{kind}: one request per call");
        assert_eq!(assert_requests_valid(&server), 3, "{kind}");
        let recent = client.telemetry().recent;
        let marks: Vec<(bool, bool)> = recent.iter().map(|c| (c.streamed, c.whole_answer)).collect();
        assert_eq!(marks, [(true, true), (false, false), (true, false)], "{kind}");
        assert_eq!(recent[0].retries, 0, "{kind}");
    }
    assert!(logs.text().contains("answered a streamed request with one whole body"), "the call was logged");
}

/// The label is not needed: a body that holds no event but a whole answer is read as one, whether it
/// comes without a content type, as plain text or (mislabelled) as an event stream; an NDJSON provider's
/// pretty-printed answer too.
#[tokio::test]
async fn a_whole_answer_without_a_json_label_is_read_whole() {
    let openai = json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-test",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": "Checking.",
            "tool_calls": [{"id": "call_9", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\":\"Bergen\"}"}}]}}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
    });
    let anthropic = json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
        "content": [{"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_9", "name": "get_weather", "input": {"city": "Bergen"}}],
        "stop_reason": "tool_use", "stop_sequence": null, "usage": {"input_tokens": 5, "output_tokens": 3}
    });
    let ollama = json!({
        "model": "llama-test", "created_at": "2025-01-01T00:00:00Z", "done": true, "done_reason": "stop",
        "message": {"role": "assistant", "content": "Checking.",
            "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Bergen"}}}]},
        "prompt_eval_count": 5, "eval_count": 3
    });
    let cases = [
        (ProviderKind::OpenaiCompatible, None, openai.to_string()),
        (ProviderKind::OpenaiCompatible, Some("text/plain"), serde_json::to_string_pretty(&openai).unwrap()),
        (ProviderKind::Anthropic, Some("text/event-stream"), anthropic.to_string()),
        // Pretty-printed, its first line (`{`) is no NDJSON frame: the body is read whole.
        (ProviderKind::Ollama, Some("text/plain"), serde_json::to_string_pretty(&ollama).unwrap()),
    ];
    for (kind, content_type, body) in cases {
        let server = ProviderServer::start().await;
        server.push(status(200, content_type, body));
        let client = client(kind, &server);
        let pieces = Pieces::default();
        let r = streamed(&client, &pieces).await.unwrap_or_else(|e| panic!("{kind} {content_type:?}: {e}"));
        assert_eq!(r.text(), "Checking.", "{kind} {content_type:?}");
        assert_eq!(calls(&r), [("get_weather".to_owned(), json!({"city": "Bergen"}))], "{kind} {content_type:?}");
        assert_eq!(pieces.texts(), ["Checking."], "{kind} {content_type:?}");
        assert_eq!(chat_requests(&server).len(), 1, "{kind} {content_type:?}");
        assert!(client.telemetry().recent[0].whole_answer, "{kind} {content_type:?}");
    }
}

/// An NDJSON stream labelled JSON is still read as the stream it is.
#[tokio::test]
async fn a_stream_labelled_json_is_still_a_stream() {
    let lines = [
        json!({"model": "llama-test", "done": false, "message": {"role": "assistant", "content": "Hel"}}),
        json!({"model": "llama-test", "done": true, "done_reason": "stop",
            "message": {"role": "assistant", "content": "lo"}, "prompt_eval_count": 2, "eval_count": 1}),
    ];
    let body: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let server = ProviderServer::start().await;
    server.push(status(200, Some("application/json"), body));
    let client = client(ProviderKind::Ollama, &server);
    let pieces = Pieces::default();
    let r = streamed(&client, &pieces).await.unwrap();
    assert_eq!(r.text(), "Hello");
    assert_eq!(pieces.texts().concat(), "Hello");
    assert_eq!(chat_requests(&server).len(), 1);
    assert!(!client.telemetry().recent[0].whole_answer, "read as a stream");
}

/// A 200 body that is neither a stream nor an answer: one request, a malformed answer whose message names
/// the content type and shows the first bytes, redacted.
#[tokio::test]
async fn a_body_that_is_neither_fails_once_naming_its_cause() {
    let key = secret("CKS_OPENAI_API_KEY");
    for kind in ProviderKind::ALL {
        let cases = [
            (Reply::Garbage.not_streamed(), "content-type application/json", "502 Bad Gateway"),
            (
                status(200, Some("text/html"), format!("<html>Sign in to the proxy ({key})</html>")),
                "content-type text/html",
                "Sign in to the proxy",
            ),
            (status(200, None, "upstream busy"), "no content-type", "upstream busy"),
        ];
        for (reply, named, shown) in cases {
            let server = ProviderServer::start().await;
            // Were the failure retried, these would answer the retries.
            server.push_all([reply, Reply::text("never asked"), Reply::text("never asked")]);
            let client = client(kind, &server);
            let pieces = Pieces::default();
            let e = streamed(&client, &pieces).await.unwrap_err();
            let message = e.to_string();
            assert_eq!(e.kind(), ErrorKind::MalformedResponse, "{kind}: {message}");
            assert_eq!(e.context().attempts, 1, "{kind}: {message}");
            assert_eq!(chat_requests(&server).len(), 1, "{kind}: no retry");
            assert_eq!(e.context().status, Some(200), "{kind}");
            assert!(message.contains("answered a streamed request with"), "{kind}: {message}");
            assert!(message.contains(named), "{kind}: {message}");
            assert!(message.contains(shown), "{kind}: {message}");
            assert_no_secret(&format!("{kind} error"), &format!("{e} {e:?}"));
            assert!(pieces.texts().is_empty(), "{kind}");
            assert_eq!(client.telemetry().recent[0].outcome, cks_llm::CallOutcome::Error(ErrorKind::MalformedResponse));
        }
    }
}

/// A stream that ends before its first event (an empty body, keep-alives only) is a cut stream: retried,
/// but only as often as `CKS_LLM_MAX_RETRIES` allows, and the error says no event came.
#[tokio::test]
async fn a_stream_without_events_is_retried_only_as_configured() {
    for (max_retries, body) in [(0, ""), (1, ": keep-alive\n\n"), (2, "")] {
        for kind in ProviderKind::ALL {
            let server = ProviderServer::start().await;
            let env = env_for(kind, &server.base_url());
            let mut env_with_retries = env.clone();
            env_with_retries.insert("CKS_LLM_MAX_RETRIES".into(), max_retries.to_string());
            let mut config = cks_llm::LlmConfig::from_env(|k| env_with_retries.get(k).cloned()).unwrap();
            config.http.retry.base_delay = std::time::Duration::from_millis(2);
            config.http.retry.max_delay = std::time::Duration::from_millis(10);
            let client = LlmClient::new(config).unwrap();
            server.push_all((0..5).map(|_| status(200, Some("text/event-stream"), body)));
            let pieces = Pieces::default();
            let e = streamed(&client, &pieces).await.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::StreamError, "{kind}: {e}");
            assert_eq!(e.context().attempts, max_retries + 1, "{kind}: {e}");
            assert_eq!(chat_requests(&server).len(), max_retries as usize + 1, "{kind}");
            assert!(e.to_string().contains("content-type text/event-stream and no events"), "{kind}: {e}");
        }
    }
}
