//! MCP over stdio: an rmcp transport that reads both framings the reference accepts (see
//! [`framing`]), answers each message in the framing it came in, answers JSON-RPC batch arrays
//! with one array, and answers what it cannot use (unparseable text, a bad envelope, an over-size
//! message, unusable headers) with a JSON-RPC error instead of leaving the client waiting.
//!
//! Writes go through one writer task, so an answer is never interleaved with another and a
//! reader that is cancelled half way (rmcp polls `receive` inside a `select!`) never leaves half
//! an error answer on stdout.

pub(crate) mod framing;
mod large_call;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::{Bytes, BytesMut};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use rmcp::RoleServer;
use rmcp::model::{ClientNotification, ContentBlock, JsonRpcMessage, RequestId, ServerResult, TextContent};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;

use framing::{Decoded, FrameDecoder, Framing, IdScanner};
use large_call::large_message;

use crate::json_text::{self, Escaping, LargeText};

/// JSON-RPC: the text is not JSON.
const PARSE_ERROR: i64 = -32700;
/// JSON-RPC: JSON, but not a usable request (also: over the size limit).
const INVALID_REQUEST: i64 = -32600;

/// The smallest read: big enough that a large message takes few reads.
const READ_CHUNK: usize = 64 * 1024;

/// A message past this size gets a read buffer of its own (see `let_go_of_the_buffer`).
const LARGE_BUFFER_BYTES: usize = 1 << 20;

/// One framed answer, as parts written back to back (a large body is never copied to frame it).
type Frame = Vec<Part>;

/// A piece of a framed answer.
#[derive(Debug)]
enum Part {
    Bytes(Bytes),
    /// A large text, written JSON-escaped (without quotes) a slice at a time: the answer's line
    /// is never built whole beside it.
    Escaped(String, Escaping),
}

impl Part {
    fn len(&self) -> usize {
        match self {
            Part::Bytes(bytes) => bytes.len(),
            Part::Escaped(text, escaping) => escaping.len(text.as_bytes()),
        }
    }
}

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
    max_message_bytes: usize,
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
            max_message_bytes,
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

    /// Moves what is left to read into a buffer of its own, after a large message was taken out.
    ///
    /// The message shares the buffer's allocation, and reads go on into the rest of it (or, once
    /// the message is gone, into all of it again), so without this the pages of a 300 MB request
    /// would stay resident while the session it describes is built, and long after.
    fn let_go_of_the_buffer(&mut self) {
        self.buf = BytesMut::from(&self.buf[..]);
    }

    /// Makes room for the next read.
    ///
    /// Doubling costs a message of n bytes O(n) in copies, however it is split, but each larger
    /// buffer is written afresh: a 295 MiB request went through buffers holding about 800 MiB of
    /// newly touched pages, and a new page costs more to map than to copy. Once the buffer holds a
    /// large message in part, it gets room for the largest message allowed in one allocation
    /// instead: address space, whose pages become resident only as the message fills them, so
    /// the rest is read in place. Where that much cannot be had, it doubles.
    fn make_room(&mut self) {
        let largest = self.max_message_bytes.saturating_add(READ_CHUNK);
        if self.buf.len() >= LARGE_BUFFER_BYTES && self.buf.capacity() < largest {
            // `BytesMut` cannot fail to allocate, only abort: the room is a `Vec`'s, handed
            // over (through `Bytes`, which keeps a unique buffer and its capacity) uncopied.
            let mut room = Vec::new();
            if room.try_reserve_exact(largest).is_ok() {
                room.extend_from_slice(&self.buf);
                self.buf = BytesMut::from(Bytes::from(room));
                return;
            }
        }
        self.buf.reserve(READ_CHUNK.max(self.buf.len()));
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
        let parsed = match large_message(body) {
            Some(message) => Ok(message),
            None => serde_json::from_slice::<RxJsonRpcMessage<RoleServer>>(body),
        };
        let error = match parsed {
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
    if body.len() > ONE_WRITE_BYTES {
        return frame_parts(framing, vec![Part::Bytes(Bytes::from(body))]);
    }
    match framing {
        Framing::Line => body.push(b'\n'),
        Framing::ContentLength => {
            let header = format!("Content-Length: {}\r\n\r\n", body.len());
            body.splice(0..0, header.into_bytes());
        }
    }
    vec![Part::Bytes(Bytes::from(body))]
}

/// Frames an answer given as parts.
fn frame_parts(framing: Framing, mut parts: Vec<Part>) -> Frame {
    match framing {
        Framing::Line => parts.push(Part::Bytes(Bytes::from_static(b"\n"))),
        Framing::ContentLength => {
            let length: usize = parts.iter().map(Part::len).sum();
            parts.insert(0, Part::Bytes(Bytes::from(format!("Content-Length: {length}\r\n\r\n"))));
        }
    }
    parts
}

/// The text blocks of a tool result's content, in order.
fn result_texts(message: &mut TxJsonRpcMessage<RoleServer>) -> impl Iterator<Item = &mut TextContent> {
    let content = match message {
        JsonRpcMessage::Response(response) => match &mut response.result {
            ServerResult::CallToolResult(result) => Some(&mut result.content),
            _ => None,
        },
        _ => None,
    };
    content.into_iter().flatten().filter_map(|block| match block {
        ContentBlock::Text(block) => Some(block),
        _ => None,
    })
}

/// Gives a text the server left unescaped (see `LargeText::into_block`) its JSON text, for a
/// block that is serialized the ordinary way.
fn escape_left_text(block: &mut TextContent) {
    if let Some(large) = LargeText::take_from(block) {
        block.text = large.into_text();
    }
}

/// The body of an answer whose tool result carries a large text: the envelope serialized around
/// a marker, and the text escaped where the marker was as it is written. A text the server left
/// unescaped is escaped twice in that one pass (once as the result's text, once for the line).
fn streamed_body(message: &mut TxJsonRpcMessage<RoleServer>) -> Result<Option<Vec<Part>>, serde_json::Error> {
    let mut large = None;
    for (index, block) in result_texts(message).enumerate() {
        if large.is_some() {
            // Only one text streams; any other is written the ordinary way.
            escape_left_text(block);
        } else if let Some(unescaped) = LargeText::take_from(block) {
            large = Some((index, unescaped, Escaping::Twice));
        } else if block.text.len() >= json_text::LARGE_TEXT_BYTES {
            let text = std::mem::take(&mut block.text);
            large = Some((index, LargeText { before: String::new(), text, after: String::new() }, Escaping::Once));
        }
    }
    let Some((index, large, escaping)) = large else { return Ok(None) };
    // Random, so that no text the answer carries elsewhere can contain it.
    let marker = format!("cks-large-text-{:016x}{:016x}", random_u64(), random_u64());
    if let Some(block) = result_texts(message).nth(index) {
        block.text.clone_from(&marker);
    }
    let envelope = Bytes::from(serde_json::to_vec(message)?);
    let Some(at) = envelope.windows(marker.len()).position(|w| w == marker.as_bytes()) else {
        // Not expected; if it ever happens, the answer goes out the ordinary way.
        if let Some(block) = result_texts(message).nth(index) {
            block.text = match escaping {
                Escaping::Twice => large.into_text(),
                Escaping::Once => large.text,
            };
        }
        return Ok(None);
    };
    // What surrounds the text in the result's text (quotes included), escaped once for the line.
    let (mut before, mut after) = (Vec::new(), Vec::new());
    if escaping == Escaping::Twice {
        Escaping::Once.escape_into(large.before.as_bytes(), &mut before);
        before.extend_from_slice(b"\\\"");
        after.extend_from_slice(b"\\\"");
        Escaping::Once.escape_into(large.after.as_bytes(), &mut after);
    }
    let parts = vec![
        Part::Bytes(envelope.slice(..at)),
        Part::Bytes(Bytes::from(before)),
        Part::Escaped(large.text, escaping),
        Part::Bytes(Bytes::from(after)),
        Part::Bytes(envelope.slice(at + marker.len()..)),
    ];
    Ok(Some(parts.into_iter().filter(|part| !matches!(part, Part::Bytes(bytes) if bytes.is_empty())).collect()))
}

/// 64 random bits from the standard library's per-process hash keys.
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new().build_hasher().finish()
}

fn frame(framing: Framing, value: &Value) -> Frame {
    frame_bytes(framing, value.to_string().into_bytes())
}

async fn write_frames<W: AsyncWrite + Unpin>(mut write: W, mut queue: mpsc::Receiver<Frame>) {
    let mut escaped = Vec::new();
    while let Some(parts) = queue.recv().await {
        for part in parts {
            if let Err(e) = write_part(&mut write, part, &mut escaped).await {
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

async fn write_part<W: AsyncWrite + Unpin>(write: &mut W, part: Part, escaped: &mut Vec<u8>) -> std::io::Result<()> {
    match part {
        Part::Bytes(bytes) => write.write_all(&bytes).await,
        Part::Escaped(text, escaping) => {
            // Sized once and kept: escaping writes over what the last piece left (no clearing).
            escaped.resize(json_text::room_to_escape(ONE_WRITE_BYTES), 0);
            for piece in text.as_bytes().chunks(ONE_WRITE_BYTES) {
                let written = escaping.escape_to(piece, escaped);
                write.write_all(&escaped[..written]).await?;
            }
            Ok(())
        }
    }
}

fn closed() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the stdio transport is closed")
}

impl Routing {
    /// Where an outgoing message goes: its own frame, or into a batch (whose answer, once
    /// complete, is returned instead).
    fn route(&mut self, mut message: TxJsonRpcMessage<RoleServer>) -> Result<Option<Frame>, serde_json::Error> {
        let id = match &message {
            JsonRpcMessage::Response(response) => Some(response.id.clone()),
            JsonRpcMessage::Error(error) => error.id.clone(),
            JsonRpcMessage::Request(_) | JsonRpcMessage::Notification(_) => None,
        };
        if let Some(id) = &id
            && let Some(index) = self.batches.iter().position(|b| b.waiting.contains(id))
        {
            let batch = &mut self.batches[index];
            batch.waiting.remove(id);
            result_texts(&mut message).for_each(escape_left_text);
            batch.replies.push(serde_json::to_value(&message)?);
            if !batch.waiting.is_empty() {
                return Ok(None);
            }
            let batch = self.batches.swap_remove(index);
            return Ok(Some(frame(batch.framing, &Value::Array(batch.replies))));
        }
        let framing = id.and_then(|id| self.framing_by_id.remove(&id)).unwrap_or(self.last);
        match streamed_body(&mut message)? {
            Some(parts) => Ok(Some(frame_parts(framing, parts))),
            None => Ok(Some(frame_bytes(framing, serde_json::to_vec(&message)?))),
        }
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
        let routed = self.routing().route(item);
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
                if let Decoded::Message { body, .. } = &decoded
                    && body.len() > LARGE_BUFFER_BYTES
                {
                    self.let_go_of_the_buffer();
                }
                self.accept(decoded);
                continue;
            }
            if self.eof {
                return None;
            }
            if self.buf.capacity() - self.buf.len() < READ_CHUNK {
                self.make_room();
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
        let mut out = Vec::new();
        for part in frame {
            match part {
                Part::Bytes(bytes) => out.extend_from_slice(&bytes),
                Part::Escaped(text, escaping) => escaping.escape_into(text.as_bytes(), &mut out),
            }
        }
        out
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
        assert!(
            frame_bytes(Framing::Line, body).iter().any(|part| matches!(part, Part::Bytes(b) if b.as_ptr() == address))
        );
    }

    #[tokio::test]
    async fn a_large_tool_result_is_written_as_serde_json_writes_it_without_building_the_line() {
        let text = "{\"serialized\":\"{\\n  \\\"a\\\": \\\"é\\\"\\n}\"}\u{1}".repeat(json_text::LARGE_TEXT_BYTES / 20);
        let answer = || {
            let result = rmcp::model::CallToolResult::success(vec![ContentBlock::text(text.clone())]);
            JsonRpcMessage::response(ServerResult::CallToolResult(result), RequestId::Number(7))
        };
        let expected = serde_json::to_vec(&answer()).unwrap();

        let mut routing = Routing { framing_by_id: HashMap::new(), batches: Vec::new(), last: Framing::Line };
        let message = answer();
        let JsonRpcMessage::Response(response) = &message else { unreachable!() };
        let ServerResult::CallToolResult(result) = &response.result else { unreachable!() };
        let address = result.content[0].as_text().unwrap().text.as_ptr();
        let frame = routing.route(message).unwrap().unwrap();
        assert!(
            frame.iter().any(|part| matches!(part, Part::Escaped(t, _) if t.as_ptr() == address)),
            "the text was copied"
        );
        assert!(frame.iter().all(|part| matches!(part, Part::Escaped(..)) || part.len() < 200), "the line was built");
        assert_eq!(joined(frame), [expected.as_slice(), b"\n"].concat());

        routing.framing_by_id.insert(RequestId::Number(7), Framing::ContentLength);
        let framed = joined(routing.route(answer()).unwrap().unwrap());
        let header = format!("Content-Length: {}\r\n\r\n", expected.len());
        assert_eq!(framed, [header.as_bytes(), expected.as_slice()].concat());

        // Through the writer task, as a client reads it.
        let (mut transport, mut stdout) = transport_over(String::new());
        let reader = tokio::spawn(async move {
            let mut written = Vec::new();
            stdout.read_to_end(&mut written).await.unwrap();
            written
        });
        transport.send(answer()).await.unwrap();
        transport.close().await.unwrap();
        drop(transport);
        let written = reader.await.unwrap();
        let parsed: Value = serde_json::from_slice(&written).unwrap();
        assert_eq!(parsed["result"]["content"][0]["text"].as_str(), Some(text.as_str()));
    }

    #[test]
    fn a_large_text_left_unescaped_is_written_as_the_escaped_result_would_be() {
        use crate::server::tool_result;
        let document = "{\n  \"a\": \"é \\ \u{1}\"\n}".repeat(json_text::LARGE_TEXT_BYTES / 10);
        let value = json!({"serialized": document, "session_id": "s-1"});
        // One large text left unescaped beside a large text and a small one escaped already.
        let answer = |unescaped: bool| {
            let mut result = tool_result(value.clone(), false, unescaped);
            result.content.push(ContentBlock::text("\"x\"".repeat(json_text::LARGE_TEXT_BYTES)));
            result.content.push(ContentBlock::text("small"));
            JsonRpcMessage::response(ServerResult::CallToolResult(result), RequestId::Number(3))
        };
        let expected = serde_json::to_vec(&answer(false)).unwrap();
        let message = answer(true);
        let JsonRpcMessage::Response(response) = &message else { unreachable!() };
        let ServerResult::CallToolResult(result) = &response.result else { unreachable!() };
        let first = result.content[0].as_text().unwrap();
        assert_eq!(first.text, document, "the document itself, unescaped");
        let address = first.text.as_ptr();

        let mut routing = Routing { framing_by_id: HashMap::new(), batches: Vec::new(), last: Framing::Line };
        let frame = routing.route(message).unwrap().unwrap();
        assert!(
            frame.iter().any(|part| matches!(part, Part::Escaped(t, Escaping::Twice) if t.as_ptr() == address)),
            "the document is escaped twice as it is written, not copied"
        );
        assert_eq!(joined(frame), [expected.as_slice(), b"\n"].concat());

        // In a batch, the answer is built the ordinary way, with the same text.
        routing.batches.push(Batch {
            framing: Framing::Line,
            waiting: HashSet::from([RequestId::Number(3)]),
            replies: Vec::new(),
        });
        let batch = joined(routing.route(answer(true)).unwrap().unwrap());
        let batch: Value = serde_json::from_slice(&batch).unwrap();
        assert_eq!(batch, json!([serde_json::from_slice::<Value>(&expected).unwrap()]));
    }

    /// A transport fed `input` on stdin, with stdout readable.
    fn transport_over(input: String) -> (StdioTransport<std::io::Cursor<Vec<u8>>>, tokio::io::DuplexStream) {
        let (stdout, read_back) = tokio::io::duplex(1 << 16);
        (StdioTransport::new(std::io::Cursor::new(input.into_bytes()), stdout, 1 << 24), read_back)
    }

    fn cancel(id: u64) -> String {
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": id}}).to_string()
    }

    fn ping(id: u64) -> Value {
        json!({"jsonrpc": "2.0", "id": id, "method": "ping"})
    }

    #[tokio::test]
    async fn the_buffer_of_a_large_request_is_let_go_once_it_is_decoded() {
        let call = |id: u64, padding: usize| {
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                "params": {"name": "x", "arguments": {"padding": "p".repeat(padding)}}})
        };
        let input = format!("{}\n{}\n", call(1, 3 * LARGE_BUFFER_BYTES), call(2, 10));
        let (mut transport, _stdout) = transport_over(input);
        assert!(transport.receive().await.is_some());
        // Reading on would reuse the large request's allocation if the buffer still held it.
        assert!(!transport.buf.try_reclaim(LARGE_BUFFER_BYTES), "the large request's allocation is kept");
        assert!(transport.receive().await.is_some(), "the message after it was lost");
    }

    #[test]
    fn a_large_message_gets_room_for_the_largest_allowed_at_once() {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let _entered = runtime.enter();
        let part: Vec<u8> = (0..LARGE_BUFFER_BYTES).map(|i| (i % 251) as u8).collect();
        for (limit, at_once) in [(1 << 26, true), (usize::MAX / 2, false)] {
            let (stdout, _read_back) = tokio::io::duplex(1 << 16);
            let mut transport = StdioTransport::new(std::io::Cursor::new(Vec::new()), stdout, limit);
            transport.buf.extend_from_slice(&part[..1000]);
            transport.make_room();
            assert!(transport.buf.capacity() < 1 << 20, "a small buffer doubles");
            transport.buf.clear();
            transport.buf.extend_from_slice(&part);
            transport.make_room();
            assert_eq!(&transport.buf[..], &part[..], "what was read is kept");
            if at_once {
                assert!(transport.buf.capacity() >= limit + READ_CHUNK);
            } else {
                // Address space that cannot be had: the buffer doubles instead.
                assert!(transport.buf.capacity() >= 2 * part.len() && transport.buf.capacity() < 1 << 30);
            }
        }
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
