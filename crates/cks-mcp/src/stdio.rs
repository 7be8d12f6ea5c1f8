//! MCP over stdio: an rmcp transport that reads both framings the reference accepts (see
//! [`framing`]), answers each message in the framing it came in, answers JSON-RPC batch arrays
//! with one array, and answers what it cannot use (unparseable text, a bad envelope, an over-size
//! message, unusable headers) with a JSON-RPC error instead of leaving the client waiting.
//!
//! Writes go through one writer task, so an answer is never interleaved with another and a
//! reader that is cancelled half way (rmcp polls `receive` inside a `select!`) never leaves half
//! an error answer on stdout.

pub(crate) mod framing;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::{Bytes, BytesMut};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use rmcp::RoleServer;
use rmcp::model::{ClientNotification, JsonRpcMessage, RequestId};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;

use framing::{Decoded, FrameDecoder, Framing, IdScanner};

/// JSON-RPC: the text is not JSON.
const PARSE_ERROR: i64 = -32700;
/// JSON-RPC: JSON, but not a usable request (also: over the size limit).
const INVALID_REQUEST: i64 = -32600;

/// The smallest read: big enough that a large message takes few reads.
const READ_CHUNK: usize = 64 * 1024;

/// One framed answer, as parts written back to back (a large body is never copied to frame it).
type Frame = Vec<Bytes>;

/// Which framing each answer gets, and the batches still collecting answers.
#[derive(Debug)]
struct Routing {
    framing_by_id: HashMap<RequestId, Framing>,
    batches: Vec<Batch>,
    /// Server-initiated messages (progress, requests) go out the way the client last wrote.
    last: Framing,
}

#[derive(Debug)]
struct Batch {
    framing: Framing,
    waiting: HashSet<RequestId>,
    replies: Vec<Value>,
}

/// The stdio transport; `R` and `W` are stdin and stdout (or any pipe pair, in tests).
#[derive(Debug)]
pub(crate) struct StdioTransport<R> {
    read: R,
    buf: BytesMut,
    decoder: FrameDecoder,
    eof: bool,
    /// Messages already decoded (the members of a batch) waiting to be handed to rmcp.
    ready: VecDeque<RxJsonRpcMessage<RoleServer>>,
    /// Error answers decided by the reader, waiting for room in the writer's queue.
    answers: VecDeque<Frame>,
    /// Shared with `send`'s futures. A std mutex is enough: it guards map updates only, never an
    /// await or any IO.
    routing: Arc<Mutex<Routing>>,
    writer: Option<mpsc::Sender<Frame>>,
    writer_task: Option<tokio::task::JoinHandle<()>>,
}

impl<R: AsyncRead + Unpin + Send> StdioTransport<R> {
    pub(crate) fn new<W: AsyncWrite + Unpin + Send + 'static>(read: R, write: W, max_message_bytes: usize) -> Self {
        let (writer, queue) = mpsc::channel(64);
        StdioTransport {
            read,
            buf: BytesMut::new(),
            decoder: FrameDecoder::new(max_message_bytes),
            eof: false,
            ready: VecDeque::new(),
            answers: VecDeque::new(),
            routing: Arc::new(Mutex::new(Routing {
                framing_by_id: HashMap::new(),
                batches: Vec::new(),
                last: Framing::Line,
            })),
            writer: Some(writer),
            writer_task: Some(tokio::spawn(write_frames(write, queue))),
        }
    }

    fn routing(&self) -> std::sync::MutexGuard<'_, Routing> {
        self.routing.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Turns one decoded item into messages for rmcp and answers for the client.
    fn accept(&mut self, decoded: Decoded) {
        match decoded {
            Decoded::Message { framing, body } => {
                self.routing().last = framing;
                self.accept_body(framing, &body);
            }
            Decoded::TooLarge { framing, limit, id } => {
                tracing::warn!(limit, "an incoming stdio message exceeded the size limit and was skipped");
                let message = format!("Message too large: the limit is {limit} bytes (CKS_MCP_MAX_MESSAGE_BYTES)");
                let error = error_value(id.unwrap_or(Value::Null), INVALID_REQUEST, &message);
                self.answers.push_back(frame(framing, &error));
            }
            Decoded::BadHeader { detail } => {
                let error = error_value(Value::Null, PARSE_ERROR, &format!("Parse error: {detail}"));
                self.answers.push_back(frame(Framing::ContentLength, &error));
            }
            Decoded::Truncated { expected, got } => {
                let message = format!("Parse error: the input ended after {got} of {expected} body bytes");
                self.answers.push_back(frame(Framing::ContentLength, &error_value(Value::Null, PARSE_ERROR, &message)));
            }
        }
    }

    fn accept_body(&mut self, framing: Framing, body: &[u8]) {
        let body = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
        let error = match serde_json::from_slice::<RxJsonRpcMessage<RoleServer>>(body) {
            Ok(message) => {
                if let JsonRpcMessage::Request(request) = &message {
                    self.routing().framing_by_id.insert(request.id.clone(), framing);
                }
                self.forget_if_cancelled(&message);
                self.ready.push_back(message);
                return;
            }
            Err(e) => e,
        };
        // The slow path: find out what was wrong, and which request to name in the answer.
        let value = match serde_json::from_slice::<Value>(body) {
            Ok(value) => value,
            Err(_) => {
                let mut scanner = IdScanner::default();
                scanner.feed(body);
                let id = scanner.id().unwrap_or(Value::Null);
                self.answers.push_back(frame(framing, &error_value(id, PARSE_ERROR, &format!("Parse error: {error}"))));
                return;
            }
        };
        match value {
            Value::Array(items) => self.accept_batch(framing, items),
            other => {
                if let Some(answer) = invalid_request_answer(&other, &error) {
                    self.answers.push_back(frame(framing, &answer));
                }
            }
        }
    }

    fn accept_batch(&mut self, framing: Framing, items: Vec<Value>) {
        if items.is_empty() {
            let error = error_value(Value::Null, INVALID_REQUEST, "Invalid Request: empty batch");
            self.answers.push_back(frame(framing, &error));
            return;
        }
        let mut batch = Batch { framing, waiting: HashSet::new(), replies: Vec::new() };
        for item in items {
            match serde_json::from_value::<RxJsonRpcMessage<RoleServer>>(item.clone()) {
                Ok(message) => {
                    if let JsonRpcMessage::Request(request) = &message {
                        batch.waiting.insert(request.id.clone());
                    }
                    self.forget_if_cancelled(&message);
                    self.ready.push_back(message);
                }
                Err(error) => batch.replies.extend(invalid_request_answer(&item, &error)),
            }
        }
        if batch.waiting.is_empty() {
            if !batch.replies.is_empty() {
                self.answers.push_back(frame(framing, &Value::Array(batch.replies)));
            }
        } else {
            self.routing().batches.push(batch);
        }
    }

    /// A cancelled request gets no answer from rmcp, so nothing would ever take its routing
    /// entry: drop it now (and let a batch that waited only for it go out), or the map grows with
    /// every cancellation and the batch never answers.
    fn forget_if_cancelled(&mut self, message: &RxJsonRpcMessage<RoleServer>) {
        let JsonRpcMessage::Notification(notification) = message else { return };
        let ClientNotification::CancelledNotification(cancelled) = &notification.notification else { return };
        let Some(id) = &cancelled.params.request_id else { return };
        let answer = self.routing().forget(id);
        self.answers.extend(answer);
    }

    /// Hands queued error answers to the writer; cancel-safe (an answer leaves the queue only
    /// once the writer has room for it).
    async fn flush_answers(&mut self) -> bool {
        while !self.answers.is_empty() {
            let Some(writer) = &self.writer else { return false };
            let Ok(permit) = writer.reserve().await else { return false };
            if let Some(answer) = self.answers.pop_front() {
                permit.send(answer);
            }
        }
        true
    }
}

/// The answer to well-formed JSON that is not a usable message; `None` for a notification,
/// which gets no answer even when it is wrong.
fn invalid_request_answer(value: &Value, error: &serde_json::Error) -> Option<Value> {
    let object = value.as_object();
    let id = object.and_then(|o| o.get("id")).cloned();
    if id.is_none() && object.is_some_and(|o| o.get("method").is_some_and(Value::is_string)) {
        tracing::debug!("ignoring an unusable notification: {error}");
        return None;
    }
    let id = id.filter(|id| id.is_string() || id.is_number()).unwrap_or(Value::Null);
    Some(error_value(id, INVALID_REQUEST, &format!("Invalid Request: {error}")))
}

fn error_value(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// Answers up to this size are framed in one buffer (one write); larger ones are written in
/// parts, so framing never copies them.
const ONE_WRITE_BYTES: usize = 64 * 1024;

/// Frames an answer given as JSON text.
fn frame_bytes(framing: Framing, mut body: Vec<u8>) -> Frame {
    let small = body.len() <= ONE_WRITE_BYTES;
    match framing {
        Framing::Line if small => {
            body.push(b'\n');
            vec![Bytes::from(body)]
        }
        Framing::Line => vec![Bytes::from(body), Bytes::from_static(b"\n")],
        Framing::ContentLength => {
            let header = format!("Content-Length: {}\r\n\r\n", body.len());
            if small {
                let mut whole = Vec::with_capacity(header.len() + body.len());
                whole.extend_from_slice(header.as_bytes());
                whole.extend_from_slice(&body);
                vec![Bytes::from(whole)]
            } else {
                vec![Bytes::from(header), Bytes::from(body)]
            }
        }
    }
}

fn frame(framing: Framing, value: &Value) -> Frame {
    frame_bytes(framing, value.to_string().into_bytes())
}

async fn write_frames<W: AsyncWrite + Unpin>(mut write: W, mut queue: mpsc::Receiver<Frame>) {
    while let Some(parts) = queue.recv().await {
        for part in parts {
            if let Err(e) = write.write_all(&part).await {
                tracing::warn!("writing to stdout failed: {e}");
                return;
            }
        }
        // Several answers ready at once share one flush.
        if queue.is_empty()
            && let Err(e) = write.flush().await
        {
            tracing::warn!("writing to stdout failed: {e}");
            return;
        }
    }
    let _ = write.flush().await;
}

fn closed() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the stdio transport is closed")
}

impl Routing {
    /// Where an outgoing message goes: its own frame, or into a batch (whose answer, once
    /// complete, is returned instead).
    fn route(&mut self, message: &TxJsonRpcMessage<RoleServer>) -> Result<Option<Frame>, serde_json::Error> {
        let id = match message {
            JsonRpcMessage::Response(response) => Some(&response.id),
            JsonRpcMessage::Error(error) => error.id.as_ref(),
            JsonRpcMessage::Request(_) | JsonRpcMessage::Notification(_) => None,
        };
        if let Some(id) = id
            && let Some(index) = self.batches.iter().position(|b| b.waiting.contains(id))
        {
            let batch = &mut self.batches[index];
            batch.waiting.remove(id);
            batch.replies.push(serde_json::to_value(message)?);
            if !batch.waiting.is_empty() {
                return Ok(None);
            }
            let batch = self.batches.swap_remove(index);
            return Ok(Some(frame(batch.framing, &Value::Array(batch.replies))));
        }
        let framing = id.and_then(|id| self.framing_by_id.remove(id)).unwrap_or(self.last);
        Ok(Some(frame_bytes(framing, serde_json::to_vec(message)?)))
    }

    /// Forgets a request that will not be answered; the answer of its batch when that batch now
    /// has every other reply (nothing when none of its members is answered).
    fn forget(&mut self, id: &RequestId) -> Option<Frame> {
        self.framing_by_id.remove(id);
        let index = self.batches.iter().position(|b| b.waiting.contains(id))?;
        let batch = &mut self.batches[index];
        batch.waiting.remove(id);
        if !batch.waiting.is_empty() {
            return None;
        }
        let batch = self.batches.swap_remove(index);
        (!batch.replies.is_empty()).then(|| frame(batch.framing, &Value::Array(batch.replies)))
    }
}

impl<R: AsyncRead + Unpin + Send + 'static> Transport<RoleServer> for StdioTransport<R> {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let routed = self.routing().route(&item);
        let writer = self.writer.clone();
        async move {
            let Some(frame) = routed.map_err(std::io::Error::other)? else { return Ok(()) };
            let writer = writer.ok_or_else(closed)?;
            writer.send(frame).await.map_err(|_| closed())
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            if !self.flush_answers().await {
                return None;
            }
            if let Some(message) = self.ready.pop_front() {
                return Some(message);
            }
            if let Some(decoded) = self.decoder.decode(&mut self.buf, self.eof) {
                self.accept(decoded);
                continue;
            }
            if self.eof {
                return None;
            }
            if self.buf.capacity() - self.buf.len() < READ_CHUNK {
                // Doubling: a message of n bytes costs O(n) in copies, however it is split.
                self.buf.reserve(READ_CHUNK.max(self.buf.len()));
            }
            match self.read.read_buf(&mut self.buf).await {
                Ok(0) => self.eof = true,
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!("reading stdin failed: {e}");
                    self.eof = true;
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.writer = None;
        if let Some(task) = self.writer_task.take() {
            let _ = task.await;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn joined(frame: Frame) -> Vec<u8> {
        frame.concat()
    }

    #[test]
    fn answers_are_framed_like_their_requests_at_any_size() {
        for size in [2, ONE_WRITE_BYTES + 10] {
            let body = vec![b'7'; size];
            assert_eq!(joined(frame_bytes(Framing::Line, body.clone())), [body.as_slice(), b"\n"].concat());
            let header = format!("Content-Length: {size}\r\n\r\n");
            assert_eq!(
                joined(frame_bytes(Framing::ContentLength, body.clone())),
                [header.as_bytes(), body.as_slice()].concat()
            );
        }
        // A large answer is not copied to be framed: its buffer is one of the parts.
        let body = vec![b'7'; ONE_WRITE_BYTES + 10];
        let address = body.as_ptr();
        assert!(frame_bytes(Framing::Line, body).iter().any(|part| part.as_ptr() == address));
    }

    /// A transport fed `input` on stdin, with stdout readable.
    fn transport_over(input: String) -> (StdioTransport<std::io::Cursor<Vec<u8>>>, tokio::io::DuplexStream) {
        let (stdout, read_back) = tokio::io::duplex(1 << 16);
        (StdioTransport::new(std::io::Cursor::new(input.into_bytes()), stdout, 1 << 20), read_back)
    }

    fn cancel(id: u64) -> String {
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": id}}).to_string()
    }

    fn ping(id: u64) -> Value {
        json!({"jsonrpc": "2.0", "id": id, "method": "ping"})
    }

    #[tokio::test]
    async fn a_cancelled_request_leaves_no_routing_behind() {
        let input = format!("{}\n{}\n", ping(1), cancel(1));
        let (mut transport, _stdout) = transport_over(input);
        assert!(transport.receive().await.is_some());
        assert_eq!(transport.routing().framing_by_id.len(), 1);
        assert!(transport.receive().await.is_some());
        assert!(transport.routing().framing_by_id.is_empty(), "the cancelled request is still routed");
    }

    #[tokio::test]
    async fn a_batch_with_a_cancelled_member_is_answered_with_the_others() {
        let input = format!("{}\n{}\n", Value::Array(vec![ping(1), ping(2)]), cancel(2));
        let (mut transport, mut stdout) = transport_over(input);
        for _ in 0..3 {
            assert!(transport.receive().await.is_some());
        }
        let answer = JsonRpcMessage::response(rmcp::model::ServerResult::empty(()), RequestId::Number(1));
        transport.send(answer).await.unwrap();
        transport.close().await.unwrap();
        let mut written = String::new();
        stdout.read_to_string(&mut written).await.unwrap();
        let replies: Value = serde_json::from_str(written.trim_end()).unwrap();
        assert_eq!(replies.as_array().map(Vec::len), Some(1), "{written}");
        assert_eq!(replies[0]["id"], 1);
    }
}
