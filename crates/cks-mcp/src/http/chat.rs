//! `POST /chat/stream`: one `ai_chat` turn that the caller watches as it runs, as Server-Sent
//! Events. The body is `ai_chat`'s arguments; the turn runs through the registry exactly as a
//! `tools/call` of `ai_chat` does (stored chats, approvals, every check), with a chat event sink in
//! its context. The answer is `text/event-stream`, always HTTP 200 once the request passed the
//! route's security checks and size limit:
//!
//! - `event: text_delta`, `data: {"text"}`: the next piece of the model's text as the provider
//!   streams it;
//! - `event: tool_call_started`, `data: {"index", "name", "arguments"}`: a tool call about to run
//!   (`index` in the turn's `tool_calls`, arguments as pinned);
//! - `event: tool_call_completed`, `data: {"index", "name", "arguments", "result_summary",
//!   "is_error"}`: its result, in short;
//! - `event: done`, `data`: exactly the JSON text `ai_chat` answers for these arguments (its
//!   result, or its error object, e.g. for invalid arguments), then the stream ends.
//!
//! Closing the connection cancels the turn (the `ai_chat` cancellation token): the LLM call in
//! flight is dropped and nothing more runs.
//!
//! The turn counts against its caller's tool calls and chat turns in flight (`limits.rs`) until it
//! ends: over a limit, the answer is 429 and no stream.

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::stream::Stream;
use serde_json::{Value, json};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use cks_chat::{ChatEvent, ChatEventSink, watch_with};
use cks_tools::{ErrorCode, ToolError};

use super::{AppState, error_response};

/// How often an idle stream (a long tool call, a slow model) sends a comment line: it keeps
/// proxies from timing the stream out, and a write to a closed connection is how a closed tab is
/// noticed when nothing else is being sent.
const KEEP_ALIVE: Duration = Duration::from_secs(5);

/// What the turn sends the stream.
enum Frame {
    Event(ChatEvent),
    /// The tool's answer as JSON text; the last frame.
    Done(String),
}

/// The chat event sink in the turn's context: events go to the stream, in order.
struct Events(mpsc::UnboundedSender<Frame>);

impl ChatEventSink for Events {
    fn event(&self, event: ChatEvent) {
        // A closed stream has cancelled the turn already; what it still reports goes nowhere.
        let _ = self.0.send(Frame::Event(event));
    }
}

/// Cancels the turn when the response stream is dropped: the client went away (or the stream
/// ended, when the turn is over anyway).
struct CancelOnDrop(CancellationToken);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

pub(super) async fn chat_stream(State(state): State<AppState>, request: Request) -> Response {
    let limit = state.config.max_body_bytes;
    // The turn, and each of its tool calls, runs as the caller.
    let principal = request.extensions().get::<Arc<cks_tools::Principal>>().cloned();
    let bytes = match axum::body::to_bytes(request.into_body(), limit).await {
        Ok(bytes) => bytes,
        Err(_) => {
            return error_response(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                &format!("The body is over the limit of {limit} bytes (CKS_MCP_MAX_MESSAGE_BYTES) or was cut off."),
            );
        }
    };
    let (sender, receiver) = mpsc::unbounded_channel();
    let cancel = CancellationToken::new();
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(arguments) => {
            let admission = match super::admit(&state, principal.as_deref(), true) {
                Ok(admission) => admission,
                Err(refusal) => return super::too_many(&refusal),
            };
            let mut ctx = state.server.context();
            ctx.cancel = cancel.clone();
            ctx.principal = principal;
            watch_with(&mut ctx, Arc::new(Events(sender.clone())));
            let registry = state.server.registry.clone();
            tokio::spawn(async move {
                // Held until the turn has ended (or, cancelled, stopped).
                let _admission = admission;
                let answer = match registry.call("ai_chat", arguments, &ctx).await {
                    Ok(value) => value,
                    Err(unknown) => ToolError::new(ErrorCode::ToolNotFound, unknown.to_string()).to_value(),
                };
                let text = serde_json::to_string(&answer).unwrap_or_else(|_| "{}".into());
                let _ = sender.send(Frame::Done(text));
            });
        }
        Err(e) => {
            let answer = ToolError::new(
                ErrorCode::InvalidParameter,
                format!("The body is not JSON ({e}): send ai_chat's arguments as one JSON object."),
            )
            .to_value();
            let _ = sender.send(Frame::Done(answer.to_string()));
        }
    }
    let mut response = Sse::new(frames(receiver, CancelOnDrop(cancel)))
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE).text("keep-alive"))
        .into_response();
    response.headers_mut().insert("x-accel-buffering", HeaderValue::from_static("no"));
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// The SSE frames of a turn, ending after `done`. Dropping the stream cancels the turn.
fn frames(
    receiver: mpsc::UnboundedReceiver<Frame>,
    guard: CancelOnDrop,
) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    futures::stream::unfold(Some((receiver, guard)), |state| async move {
        let (mut receiver, guard) = state?;
        let frame = receiver.recv().await?;
        let (event, next) = match frame {
            Frame::Event(event) => (sse(event), Some((receiver, guard))),
            Frame::Done(text) => (SseEvent::default().event("done").data(text), None),
        };
        Some((Ok(event), next))
    })
}

fn sse(event: ChatEvent) -> SseEvent {
    let (name, data) = match event {
        ChatEvent::TextDelta { text } => ("text_delta", json!({"text": text})),
        ChatEvent::ToolCallStarted { index, name, arguments } => {
            ("tool_call_started", json!({"index": index, "name": name, "arguments": arguments}))
        }
        ChatEvent::ToolCallCompleted { index, name, arguments, result_summary, is_error } => (
            "tool_call_completed",
            json!({
                "index": index,
                "name": name,
                "arguments": arguments,
                "result_summary": result_summary,
                "is_error": is_error,
            }),
        ),
    };
    SseEvent::default().event(name).data(data.to_string())
}
