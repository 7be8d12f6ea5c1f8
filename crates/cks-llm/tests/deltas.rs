//! A streamed answer's text handed to a delta sink as it arrives, for every provider, against
//! `cks-testkit`'s scripted provider server: the pieces join to the answer's text, arrive before the
//! answer is complete, are redacted, and a retry never repeats text already handed on.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cks_llm::{ChatOptions, ErrorKind, LlmClient, Message, ProviderKind};
use cks_testkit::{ProviderServer, Reply, ToolCall};
use common::*;
use serde_json::json;

/// Collects the pieces with when each arrived.
#[derive(Default, Clone)]
struct Pieces(Arc<Mutex<Vec<(Instant, String)>>>);

impl Pieces {
    fn sink(&self) -> impl Fn(&str) + Send + Sync + '_ {
        |piece: &str| self.0.lock().unwrap().push((Instant::now(), piece.to_owned()))
    }

    fn texts(&self) -> Vec<String> {
        self.0.lock().unwrap().iter().map(|(_, t)| t.clone()).collect()
    }

    fn first_at(&self) -> Option<Instant> {
        self.0.lock().unwrap().first().map(|(at, _)| *at)
    }
}

async fn streamed(client: &LlmClient, pieces: &Pieces) -> Result<cks_llm::ChatResponse, cks_llm::LlmError> {
    let sink = pieces.sink();
    client
        .chat_with(request(vec![Message::user("Say hello")]), ChatOptions { stream: false, deltas: Some(&sink) })
        .await
}

#[tokio::test]
async fn text_arrives_in_pieces_that_join_to_the_answer() {
    for kind in ProviderKind::ALL {
        let server = ProviderServer::start().await;
        server.push(Reply::text("Hello there, streamed world."));
        server.push(Reply::TextAndToolCalls(
            "Let me check.".into(),
            vec![ToolCall::new("get_weather", json!({"city": "Oslo"}))],
        ));
        server.push(Reply::ToolCalls(vec![ToolCall::new("get_weather", json!({"city": "Bergen"}))]));
        let client = client(kind, &server);

        let pieces = Pieces::default();
        let r = streamed(&client, &pieces).await.unwrap();
        assert_eq!(r.text(), "Hello there, streamed world.", "{kind}");
        assert!(pieces.texts().len() >= 2, "{kind}: more than one piece: {:?}", pieces.texts());
        assert_eq!(pieces.texts().concat(), r.text(), "{kind}");
        assert!(pieces.texts().iter().all(|p| !p.is_empty()), "{kind}");

        // Text before tool calls: only the text is shown, never the arguments.
        let pieces = Pieces::default();
        let r = streamed(&client, &pieces).await.unwrap();
        assert_eq!(pieces.texts().concat(), "Let me check.", "{kind}");
        assert_eq!(r.message.tool_calls()[0].input, &json!({"city": "Oslo"}), "{kind}");

        // Only tool calls: nothing is shown.
        let pieces = Pieces::default();
        let r = streamed(&client, &pieces).await.unwrap();
        assert!(r.has_tool_calls(), "{kind}");
        assert_eq!(pieces.texts(), Vec::<String>::new(), "{kind}");

        // The sink asked for a streamed request on the wire.
        for sent in chat_requests(&server) {
            let streamed_on_wire = sent.body.get("stream") == Some(&json!(true))
                || sent.path.contains("streamGenerateContent")
                || (kind == ProviderKind::Ollama && sent.body.get("stream") != Some(&json!(false)));
            assert!(streamed_on_wire, "{kind}: {} {}", sent.path, sent.body);
        }
        assert_eq!(assert_requests_valid(&server), 3);
    }
}

#[tokio::test]
async fn pieces_arrive_while_the_answer_is_still_streaming() {
    let gap = Duration::from_millis(150);
    for kind in ProviderKind::ALL {
        let server = ProviderServer::start().await;
        server.push(Reply::text("First half, then the second half.").paced(gap));
        let client = client(kind, &server);
        let pieces = Pieces::default();
        let r = streamed(&client, &pieces).await.unwrap();
        let done = Instant::now();
        assert_eq!(pieces.texts().concat(), r.text(), "{kind}");
        let sent = &chat_requests(&server)[0].sent;
        assert!(sent.len() >= 3, "{kind}: a paced stream of several chunks");
        // The first piece was handed on at least one gap before the stream ended.
        let first = pieces.first_at().unwrap();
        assert!(done - first >= gap, "{kind}: the first piece came {:?} before the end", done - first);
        // ... and promptly after the chunk that carried it was written.
        let carried = sent.iter().find(|(_, chunk)| chunk.contains("First")).map(|(at, _)| *at).unwrap();
        assert!(first >= carried && first - carried < gap / 2, "{kind}: {:?} after its chunk", first - carried);
    }
}

#[tokio::test]
async fn a_failure_before_any_text_is_retried_and_after_text_is_not() {
    for kind in ProviderKind::ALL {
        // Before any text: retried as always, and only the successful attempt's text is shown.
        let server = ProviderServer::start().await;
        server.push_all([Reply::ServerError, Reply::text("After a retry.")]);
        let client = client(kind, &server);
        let pieces = Pieces::default();
        let r = streamed(&client, &pieces).await.unwrap();
        assert_eq!(r.requests, 2, "{kind}");
        assert_eq!(pieces.texts().concat(), "After a retry.", "{kind}");

        // After text was shown: the in-stream error is final, and nothing is shown twice.
        let server = ProviderServer::start().await;
        server.push_all([Reply::ErrorMidStream, Reply::text("A second attempt.")]);
        let client = common::client(kind, &server);
        let pieces = Pieces::default();
        let error = streamed(&client, &pieces).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::StreamError, "{kind}: {error}");
        assert_eq!(error.context().attempts, 1, "{kind}");
        assert!(error.to_string().contains("not retried"), "{kind}: {error}");
        assert_eq!(pieces.texts().concat(), "Partial answer", "{kind}");
        assert_eq!(chat_requests(&server).len(), 1, "{kind}");

        // The same fault without a sink is retried (the answer is buffered until it is whole).
        let r = client
            .chat_with(request(vec![Message::user("Say hello")]), ChatOptions { stream: true, deltas: None })
            .await
            .unwrap();
        assert_eq!(r.text(), "A second attempt.", "{kind}");
    }
}

#[tokio::test]
async fn secrets_are_redacted_even_when_split_across_pieces() {
    let key = secret("ANTHROPIC_API_KEY");
    for kind in ProviderKind::ALL {
        let server = ProviderServer::start().await;
        // The testkit splits text at its middle, which falls inside the key.
        let text = format!("k {key}");
        server.push(Reply::text(text.clone()));
        let client = client(kind, &server);
        let pieces = Pieces::default();
        let r = streamed(&client, &pieces).await.unwrap();
        for piece in pieces.texts() {
            assert_no_secret(&format!("{kind} piece"), &piece);
        }
        assert_eq!(pieces.texts().concat(), r.text(), "{kind}");
        assert_eq!(r.text(), format!("k {}", cks_llm::REDACTED), "{kind}");
    }
}
