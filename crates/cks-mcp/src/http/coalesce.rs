//! A session's answer stream leaves in one write when its answer is quick.
//!
//! In a 2025-11-25 session, rmcp answers each request with an SSE stream whose first event is a
//! priming event (an event id and a retry interval, no message), then the answer. The priming
//! event is ready at once and the answer a moment later, so each answer went out in two writes,
//! and a proxy in front passes on each one by one. Here the response's head and first event wait
//! a little for the next event, and all leave together; an answer slower than that gets its head
//! and priming event when the wait ends.

use std::time::Duration;

use axum::body::Body;
use axum::http::header;
use axum::response::Response;
use bytes::BytesMut;
use futures::StreamExt;

/// How long a stream's first event waits for the next.
const HOLD: Duration = Duration::from_millis(20);

/// `response` once its first SSE event is ready, joined with the next if that came within
/// [`HOLD`]; any other response as it is. The head waits too (a server writes a head that is ready
/// at once, before its first event is), but no longer than [`HOLD`] for each of the two events.
pub(super) async fn first_event_held(response: Response) -> Response {
    let is_stream = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if !is_stream {
        return response;
    }
    let (parts, body) = response.into_parts();
    let mut chunks = body.into_data_stream();
    // (A wait that ends drops only the `next` future: the stream keeps its place.)
    let mut ready = Vec::with_capacity(2);
    if let Ok(Some(first)) = tokio::time::timeout(HOLD, chunks.next()).await {
        ready.push(first);
        if let [Ok(first)] = &mut ready[..]
            && let Ok(Some(next)) = tokio::time::timeout(HOLD, chunks.next()).await
        {
            match next {
                Ok(next) => {
                    let mut joined = BytesMut::with_capacity(first.len() + next.len());
                    joined.extend_from_slice(first);
                    joined.extend_from_slice(&next);
                    *first = joined.freeze();
                }
                Err(e) => ready.push(Err(e)),
            }
        }
    }
    Response::from_parts(parts, Body::from_stream(futures::stream::iter(ready).chain(chunks)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Bytes;
    use futures::channel::mpsc;

    type Chunk = Result<Bytes, axum::Error>;

    /// A response of `content_type` whose body is fed chunk by chunk.
    fn fed_response(content_type: &str) -> (mpsc::UnboundedSender<Chunk>, Response) {
        let (feed, chunks) = mpsc::unbounded();
        let response =
            Response::builder().header(header::CONTENT_TYPE, content_type).body(Body::from_stream(chunks)).unwrap();
        (feed, response)
    }

    fn text(chunk: Option<Chunk>) -> String {
        String::from_utf8(chunk.expect("a chunk").expect("no error").to_vec()).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_quick_answer_leaves_with_the_first_event() {
        let (feed, response) = fed_response("text/event-stream");
        feed.unbounded_send(Ok(Bytes::from("id: 0\nretry: 3000\ndata:\n\n"))).unwrap();
        let answer = tokio::spawn(async move {
            tokio::time::sleep(HOLD / 4).await;
            feed.unbounded_send(Ok(Bytes::from("id: 1\ndata: {}\n\n"))).unwrap();
            feed.unbounded_send(Ok(Bytes::from("id: 2\ndata: {}\n\n"))).unwrap();
        });
        let mut held = first_event_held(response).await.into_body().into_data_stream();
        assert_eq!(text(held.next().await), "id: 0\nretry: 3000\ndata:\n\nid: 1\ndata: {}\n\n");
        answer.await.unwrap();
        // Only the first two are joined; the rest pass as they come, and the stream ends.
        assert_eq!(text(held.next().await), "id: 2\ndata: {}\n\n");
        assert!(held.next().await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_answer_gets_the_first_event_when_the_wait_ends() {
        let (feed, response) = fed_response("text/event-stream");
        feed.unbounded_send(Ok(Bytes::from("id: 0\ndata:\n\n"))).unwrap();
        let started = tokio::time::Instant::now();
        let mut held = first_event_held(response).await.into_body().into_data_stream();
        assert_eq!(started.elapsed(), HOLD);
        assert_eq!(text(held.next().await), "id: 0\ndata:\n\n");
        feed.unbounded_send(Ok(Bytes::from("id: 1\ndata: {}\n\n"))).unwrap();
        assert_eq!(text(held.next().await), "id: 1\ndata: {}\n\n");
        drop(feed);
        assert!(held.next().await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_that_ends_after_one_event_sends_it_at_once() {
        let (feed, response) = fed_response("text/event-stream");
        feed.unbounded_send(Ok(Bytes::from("id: 0\ndata:\n\n"))).unwrap();
        drop(feed);
        let started = tokio::time::Instant::now();
        let mut held = first_event_held(response).await.into_body().into_data_stream();
        assert!(started.elapsed() < HOLD);
        assert_eq!(text(held.next().await), "id: 0\ndata:\n\n");
        assert!(held.next().await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn only_event_streams_are_held() {
        for (content_type, first) in [("text/event-stream", "ab"), ("application/json", "a")] {
            let (feed, response) = fed_response(content_type);
            feed.unbounded_send(Ok(Bytes::from("a"))).unwrap();
            feed.unbounded_send(Ok(Bytes::from("b"))).unwrap();
            let mut body = first_event_held(response).await.into_body().into_data_stream();
            assert_eq!(text(body.next().await), first, "{content_type}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_head_waits_no_longer_for_a_first_event() {
        let (feed, response) = fed_response("text/event-stream");
        let started = tokio::time::Instant::now();
        let response = first_event_held(response).await;
        assert_eq!(started.elapsed(), HOLD);
        feed.unbounded_send(Ok(Bytes::from("a"))).unwrap();
        drop(feed);
        let body = axum::body::to_bytes(response.into_body(), 16).await.unwrap();
        assert_eq!(&body[..], b"a", "nothing is lost");
    }

    #[tokio::test(start_paused = true)]
    async fn the_head_waits_for_the_answer() {
        let (feed, response) = fed_response("text/event-stream");
        feed.unbounded_send(Ok(Bytes::from("a"))).unwrap();
        let answer = tokio::spawn(async move {
            tokio::time::sleep(HOLD / 4).await;
            feed.unbounded_send(Ok(Bytes::from("b"))).unwrap();
        });
        let started = tokio::time::Instant::now();
        let response = first_event_held(response).await;
        assert_eq!(started.elapsed(), HOLD / 4, "returned when the answer came");
        answer.await.unwrap();
        let body = axum::body::to_bytes(response.into_body(), 16).await.unwrap();
        assert_eq!(&body[..], b"ab");
    }
}
