//! Stdio message framing, as a pure decoder: bytes in, whole messages or framing errors out.
//!
//! Two framings share one stream, chosen per message as the reference does: a line that starts
//! with `Content-Length:` opens a header block (ended by an empty line) followed by a body of
//! exactly that many bytes; any other non-empty line is one newline-delimited JSON message.
//! Blank lines between messages are skipped.
//!
//! The decoder never does IO (the transport feeds it what it reads), so it can be driven by a
//! fuzzer or a test byte by byte. Bodies are split off the input buffer without copying, a
//! declared `Content-Length` is reserved in one allocation, and the search for a line's end
//! never rescans bytes it has already looked at. A message over the size limit is skipped as it
//! streams past (never buffered); its JSON-RPC id is picked out on the way when it can be, so the
//! error answer can name the request.

use bytes::{Buf, Bytes, BytesMut};
use serde_json::Value;

/// How a message arrived; its answer is framed the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// One JSON text per line.
    Line,
    /// `Content-Length:` headers, an empty line, then the body.
    ContentLength,
}

/// What the decoder found.
#[derive(Debug, PartialEq)]
pub(crate) enum Decoded {
    /// One whole message body (without its line end or headers).
    Message { framing: Framing, body: Bytes },
    /// A message longer than the limit was skipped; `id` is its JSON-RPC id when it could be read.
    TooLarge { framing: Framing, limit: usize, id: Option<Value> },
    /// The header block was unusable (a `Content-Length` that is not a number, or none at all).
    BadHeader { detail: String },
    /// The input ended inside a `Content-Length` body.
    Truncated { expected: usize, got: usize },
}

/// The longest header line accepted; headers are short, anything longer is not a header block.
const MAX_HEADER_LINE: usize = 8 * 1024;

#[derive(Debug)]
enum State {
    /// Between messages, or inside a newline-delimited message.
    Line,
    /// Inside a `Content-Length` header block; `length` is the last value seen.
    Headers { length: Option<usize> },
    /// Waiting for a body of `length` bytes.
    Body { length: usize },
    /// Skipping the rest of an over-size line, up to its newline.
    SkipLine(IdScanner),
    /// Skipping `remaining` bytes of an over-size body.
    SkipBody { remaining: usize, scanner: IdScanner },
    /// Skipping the rest of an over-long header line (already reported), up to its newline.
    SkipHeaderLine,
}

/// The framing decoder. Feed it with [`FrameDecoder::decode`] after each read.
#[derive(Debug)]
pub(crate) struct FrameDecoder {
    max_message_bytes: usize,
    state: State,
    /// How many bytes at the front of the buffer are known to hold no newline.
    scanned: usize,
}

impl FrameDecoder {
    pub(crate) fn new(max_message_bytes: usize) -> Self {
        FrameDecoder { max_message_bytes, state: State::Line, scanned: 0 }
    }

    /// Takes what it can from the front of `buf`: one decoded item, or `None` when more input
    /// is needed. `eof` says no more input will come, so an unfinished message is reported.
    pub(crate) fn decode(&mut self, buf: &mut BytesMut, eof: bool) -> Option<Decoded> {
        loop {
            match &mut self.state {
                State::Line => {
                    let Some(end) = self.find_newline(buf) else {
                        // A trailing `\r` may be the start of the line's `\r\n`, which is not
                        // counted: the same measure as for a whole line below.
                        let pending = buf.len() - usize::from(buf.last() == Some(&b'\r'));
                        if pending > self.max_message_bytes && !may_be_header(buf) {
                            let mut scanner = IdScanner::default();
                            scanner.feed(buf);
                            buf.clear();
                            self.scanned = 0;
                            self.state = State::SkipLine(scanner);
                            continue;
                        }
                        if eof && !buf.is_empty() {
                            // A last message without its newline is still a message.
                            let line = buf.split().freeze();
                            self.scanned = 0;
                            match classify_line(&line) {
                                LineKind::Blank | LineKind::Header(_) => return None,
                                LineKind::Json => {
                                    return Some(Decoded::Message { framing: Framing::Line, body: trim_line(line) });
                                }
                            }
                        }
                        return None;
                    };
                    let length = if end > 0 && buf[end - 1] == b'\r' { end - 1 } else { end };
                    if length > self.max_message_bytes && !may_be_header(&buf[..end]) {
                        let mut scanner = IdScanner::default();
                        scanner.feed(&buf[..end]);
                        buf.advance(end + 1);
                        self.scanned = 0;
                        return Some(Decoded::TooLarge {
                            framing: Framing::Line,
                            limit: self.max_message_bytes,
                            id: scanner.id(),
                        });
                    }
                    let line = buf.split_to(end + 1).freeze();
                    self.scanned = 0;
                    match classify_line(&line) {
                        LineKind::Blank => continue,
                        LineKind::Header(Ok(length)) => self.state = State::Headers { length: Some(length) },
                        LineKind::Header(Err(detail)) => return Some(Decoded::BadHeader { detail }),
                        LineKind::Json => {
                            return Some(Decoded::Message { framing: Framing::Line, body: trim_line(line) });
                        }
                    }
                }
                State::Headers { length } => {
                    let mut length = *length;
                    let Some(end) = self.find_newline(buf) else {
                        if buf.len() > MAX_HEADER_LINE {
                            // Everything buffered belongs to this line: drop it and the rest of
                            // the line, whatever the read sizes were.
                            buf.clear();
                            self.scanned = 0;
                            self.state = State::SkipHeaderLine;
                            return Some(bad_header("a header line is too long"));
                        }
                        if eof {
                            self.reset(buf);
                            return Some(bad_header("the input ended inside the headers"));
                        }
                        return None;
                    };
                    if end > MAX_HEADER_LINE {
                        buf.advance(end + 1);
                        self.scanned = 0;
                        self.state = State::Line;
                        return Some(bad_header("a header line is too long"));
                    }
                    let line = buf.split_to(end + 1);
                    self.scanned = 0;
                    let text = trim(&line);
                    if text.is_empty() {
                        let Some(length) = length else {
                            self.state = State::Line;
                            return Some(bad_header("the headers had no Content-Length"));
                        };
                        if length > self.max_message_bytes {
                            self.state = State::SkipBody { remaining: length, scanner: IdScanner::default() };
                        } else {
                            buf.reserve(length.saturating_sub(buf.len()));
                            self.state = State::Body { length };
                        }
                        continue;
                    }
                    if let Some(value) = header_value(text, b"content-length:") {
                        match parse_length(value) {
                            Ok(n) => length = Some(n),
                            Err(detail) => {
                                self.state = State::Line;
                                return Some(bad_header(&detail));
                            }
                        }
                    }
                    // Other headers (Content-Type) carry nothing we use.
                    self.state = State::Headers { length };
                }
                State::Body { length } => {
                    let length = *length;
                    if buf.len() >= length {
                        self.state = State::Line;
                        let body = buf.split_to(length).freeze();
                        return Some(Decoded::Message { framing: Framing::ContentLength, body });
                    }
                    if eof {
                        let got = buf.len();
                        self.reset(buf);
                        return Some(Decoded::Truncated { expected: length, got });
                    }
                    return None;
                }
                State::SkipLine(scanner) => match memchr(b'\n', buf) {
                    Some(end) => {
                        scanner.feed(&buf[..end]);
                        buf.advance(end + 1);
                        let id = scanner.id();
                        self.state = State::Line;
                        return Some(Decoded::TooLarge { framing: Framing::Line, limit: self.max_message_bytes, id });
                    }
                    None => {
                        scanner.feed(buf);
                        buf.clear();
                        if eof {
                            let id = scanner.id();
                            self.state = State::Line;
                            return Some(Decoded::TooLarge {
                                framing: Framing::Line,
                                limit: self.max_message_bytes,
                                id,
                            });
                        }
                        return None;
                    }
                },
                State::SkipHeaderLine => match memchr(b'\n', buf) {
                    Some(end) => {
                        buf.advance(end + 1);
                        self.state = State::Line;
                    }
                    None => {
                        buf.clear();
                        if eof {
                            self.state = State::Line;
                        }
                        return None;
                    }
                },
                State::SkipBody { remaining, scanner } => {
                    let take = (*remaining).min(buf.len());
                    scanner.feed(&buf[..take]);
                    buf.advance(take);
                    *remaining -= take;
                    if *remaining == 0 || eof {
                        let id = scanner.id();
                        self.state = State::Line;
                        return Some(Decoded::TooLarge {
                            framing: Framing::ContentLength,
                            limit: self.max_message_bytes,
                            id,
                        });
                    }
                    return None;
                }
            }
        }
    }

    /// The position of the first newline in `buf`, looking only at bytes not searched before.
    fn find_newline(&mut self, buf: &BytesMut) -> Option<usize> {
        match memchr(b'\n', &buf[self.scanned..]) {
            Some(i) => Some(self.scanned + i),
            None => {
                self.scanned = buf.len();
                None
            }
        }
    }

    fn reset(&mut self, buf: &mut BytesMut) {
        buf.clear();
        self.scanned = 0;
        self.state = State::Line;
    }
}

fn bad_header(detail: &str) -> Decoded {
    Decoded::BadHeader { detail: detail.to_owned() }
}

enum LineKind {
    Blank,
    /// A `Content-Length:` line, with its value or what is wrong with it.
    Header(Result<usize, String>),
    Json,
}

fn classify_line(line: &[u8]) -> LineKind {
    let text = trim(line);
    if text.is_empty() {
        return LineKind::Blank;
    }
    match header_value(text, b"content-length:") {
        Some(value) => LineKind::Header(parse_length(value)),
        None => LineKind::Json,
    }
}

/// Whether `start` (a whole line, or the start of one) is or may become a `Content-Length:`
/// line, which is never held to the message size limit.
fn may_be_header(start: &[u8]) -> bool {
    const NAME: &[u8] = b"content-length:";
    let text = start.trim_ascii_start();
    let n = text.len().min(NAME.len());
    start.len() <= MAX_HEADER_LINE && text[..n].eq_ignore_ascii_case(&NAME[..n])
}

fn header_value<'a>(line: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    (line.len() >= name.len() && line[..name.len()].eq_ignore_ascii_case(name)).then(|| trim(&line[name.len()..]))
}

fn parse_length(value: &[u8]) -> Result<usize, String> {
    std::str::from_utf8(value)
        .ok()
        .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("Content-Length must be a number of bytes, got '{}'", String::from_utf8_lossy(value)))
}

fn trim(bytes: &[u8]) -> &[u8] {
    bytes.trim_ascii()
}

/// A line without its surrounding whitespace (`\r\n` included), still without a copy.
fn trim_line(line: Bytes) -> Bytes {
    let start = line.iter().position(|b| !b.is_ascii_whitespace()).unwrap_or(line.len());
    let end = line.iter().rposition(|b| !b.is_ascii_whitespace()).map_or(start, |i| i + 1);
    line.slice(start..end)
}

fn memchr(needle: u8, haystack: &[u8]) -> Option<usize> {
    memchr::memchr(needle, haystack)
}

/// Finds the top-level `"id"` of a JSON object streamed through it in pieces, without keeping the
/// text: how an over-size request still gets an answer that names it.
#[derive(Debug, Default)]
pub(crate) struct IdScanner {
    depth: u32,
    in_string: bool,
    escaped: bool,
    /// Not an object at the top, or the id turned out not to be a scalar: nothing to find.
    gave_up: bool,
    /// At depth 1, whether the next string is a key.
    expecting_key: bool,
    /// The key being read (only short keys are kept: the one we want is two bytes long).
    key: Vec<u8>,
    key_is_string: bool,
    /// Set between the `"id"` key's colon and the end of its value.
    reading_id: bool,
    id_text: Vec<u8>,
    found: Option<Value>,
}

/// The longest id text kept; ids are short, longer ones are not worth naming in an error.
const MAX_ID_TEXT: usize = 256;

impl IdScanner {
    pub(crate) fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if self.gave_up || self.found.is_some() {
                return;
            }
            self.step(b);
        }
    }

    fn step(&mut self, b: u8) {
        if self.reading_id && self.depth == 1 && !self.in_string && (b == b',' || b == b'}') {
            self.finish_id();
            return;
        }
        if self.reading_id {
            if self.id_text.len() >= MAX_ID_TEXT {
                self.gave_up = true;
                return;
            }
            self.id_text.push(b);
        }
        if self.in_string {
            if self.escaped {
                self.escaped = false;
            } else if b == b'\\' {
                self.escaped = true;
            } else if b == b'"' {
                self.in_string = false;
            }
            if self.depth == 1 && self.key_is_string {
                if b == b'"' && !self.in_string {
                    self.key_is_string = false;
                } else if self.key.len() <= 8 {
                    self.key.push(b);
                }
            }
            return;
        }
        match b {
            b'"' => {
                self.in_string = true;
                if self.depth == 1 && self.expecting_key {
                    self.expecting_key = false;
                    self.key_is_string = true;
                    self.key.clear();
                }
            }
            b'{' | b'[' => {
                if self.depth == 0 && b == b'[' {
                    self.gave_up = true;
                }
                if self.reading_id {
                    self.gave_up = true;
                }
                self.depth += 1;
                if self.depth == 1 {
                    self.expecting_key = true;
                }
            }
            b'}' | b']' => self.depth = self.depth.saturating_sub(1),
            b',' if self.depth == 1 => self.expecting_key = true,
            b':' if self.depth == 1 && self.key == b"id" => {
                self.reading_id = true;
                self.id_text.clear();
            }
            b if self.depth == 0 && !b.is_ascii_whitespace() && b != 0xEF && b != 0xBB && b != 0xBF => {
                self.gave_up = true;
            }
            _ => {}
        }
    }

    fn finish_id(&mut self) {
        self.reading_id = false;
        match serde_json::from_slice::<Value>(self.id_text.trim_ascii()) {
            Ok(value @ (Value::String(_) | Value::Number(_))) => self.found = Some(value),
            _ => self.gave_up = true,
        }
    }

    /// The id, if one was seen.
    pub(crate) fn id(&self) -> Option<Value> {
        self.found.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Feeds `input` in pieces of `chunk` bytes, then signals the end; returns everything decoded.
    fn decode_all(input: &[u8], chunk: usize, max: usize) -> Vec<Decoded> {
        let mut decoder = FrameDecoder::new(max);
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for piece in input.chunks(chunk.max(1)) {
            buf.extend_from_slice(piece);
            while let Some(d) = decoder.decode(&mut buf, false) {
                out.push(d);
            }
        }
        while let Some(d) = decoder.decode(&mut buf, true) {
            out.push(d);
        }
        out
    }

    /// Found by the `stdio_framing` fuzz target: an over-size line must be over-size whatever
    /// the read size, also when the reads split it before its first byte that rules out a header.
    #[test]
    fn header_faults_do_not_depend_on_the_read_size() {
        // Found by the fuzz target: a header block cut off at the end of the input, and a header
        // line over the header limit, must be reported the same way whether or not the reads split
        // them.
        let long = format!("Content-Length: 9\r\nX-Long: {}\n{{\"a\": 1}}\n", "y".repeat(MAX_HEADER_LINE + 10));
        let cut = "Content-Length: 9\r\nContent-Type: x\r\n";
        for input in [long.as_bytes(), cut.as_bytes()] {
            let whole = decode_all(input, input.len(), 1 << 20);
            assert!(matches!(whole.first(), Some(Decoded::BadHeader { .. })), "{whole:?}");
            for chunk in [1, 7, 45, 4096] {
                assert_eq!(decode_all(input, chunk, 1 << 20), whole, "read size {chunk}");
            }
        }
    }

    #[test]
    fn an_over_size_line_is_over_size_whatever_the_read_size() {
        let crash = include_bytes!("../../../../fuzz/corpus/stdio_framing/regression-oversize-line");
        let (limit, input) = (16 + usize::from(crash[0]) * 8, &crash[2..]);
        let whole = decode_all(input, input.len(), limit);
        for chunk in [1, 2, 3, 17, 64] {
            assert_eq!(decode_all(input, chunk, limit), whole, "read size {chunk}");
        }
    }

    fn message(framing: Framing, body: &str) -> Decoded {
        Decoded::Message { framing, body: Bytes::copy_from_slice(body.as_bytes()) }
    }

    #[test]
    fn both_framings_in_one_stream_whatever_the_read_sizes() {
        let a = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
        let b = r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#;
        let input = format!("{a}\r\n\ncontent-length: {}\r\nContent-Type: application/json\r\n\r\n{b}\n{a}\n", b.len());
        let expected = vec![message(Framing::Line, a), message(Framing::ContentLength, b), message(Framing::Line, a)];
        for chunk in [1, 2, 3, 7, 64, input.len()] {
            assert_eq!(decode_all(input.as_bytes(), chunk, 1 << 20), expected, "chunk {chunk}");
        }
    }

    #[test]
    fn a_later_content_length_header_wins_and_bodies_may_hold_newlines() {
        let body = "{\"id\":\n3}";
        let input = format!("Content-Length: 999\r\nContent-Length: {}\r\n\r\n{body}", body.len());
        assert_eq!(decode_all(input.as_bytes(), 5, 1 << 20), vec![message(Framing::ContentLength, body)]);
    }

    #[test]
    fn a_last_line_without_newline_is_still_a_message() {
        assert_eq!(decode_all(b"  {\"id\":1}  ", 4, 100), vec![message(Framing::Line, "{\"id\":1}")]);
    }

    #[test]
    fn bodies_are_split_off_the_input_without_a_copy() {
        let body = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
        let header = format!("Content-Length: {}\r\n\r\n", body.len());
        let mut buf = BytesMut::from(format!("{header}{body}{body}\n").as_bytes());
        let base = buf.as_ptr() as usize;
        let mut decoder = FrameDecoder::new(1 << 20);
        let Some(Decoded::Message { body: first, .. }) = decoder.decode(&mut buf, false) else { panic!() };
        assert_eq!(first.as_ptr() as usize, base + header.len());
        let Some(Decoded::Message { body: second, .. }) = decoder.decode(&mut buf, false) else { panic!() };
        assert_eq!(second.as_ptr() as usize, base + header.len() + body.len());
    }

    #[test]
    fn over_size_messages_are_skipped_and_named_by_their_id() {
        let big = "x".repeat(500);
        let line = json!({"jsonrpc": "2.0", "method": "tools/call", "params": {"id": 0, "pad": big}, "id": "late"});
        let input = format!("{line}\n{{\"id\":1}}\n");
        for chunk in [1, 13, 100, input.len()] {
            let out = decode_all(input.as_bytes(), chunk, 100);
            assert_eq!(
                out,
                vec![
                    Decoded::TooLarge { framing: Framing::Line, limit: 100, id: Some(json!("late")) },
                    message(Framing::Line, "{\"id\":1}"),
                ],
                "chunk {chunk}"
            );
        }
        let body = json!({"id": 42, "pad": big}).to_string();
        let input = format!("Content-Length: {}\r\n\r\n{body}{{\"id\":2}}\n", body.len());
        for chunk in [1, 64, input.len()] {
            assert_eq!(
                decode_all(input.as_bytes(), chunk, 100),
                vec![
                    Decoded::TooLarge { framing: Framing::ContentLength, limit: 100, id: Some(json!(42)) },
                    message(Framing::Line, "{\"id\":2}"),
                ]
            );
        }
    }

    #[test]
    fn the_limit_is_inclusive_for_both_framings() {
        let body = "{\"id\":10}";
        assert_eq!(decode_all(format!("{body}\n").as_bytes(), 3, body.len()), vec![message(Framing::Line, body)]);
        let framed = format!("Content-Length: {}\r\n\r\n{body}", body.len());
        assert_eq!(decode_all(framed.as_bytes(), 3, body.len()), vec![message(Framing::ContentLength, body)]);
        assert!(matches!(
            decode_all(framed.as_bytes(), 3, body.len() - 1)[..],
            [Decoded::TooLarge { id: Some(_), .. }]
        ));
    }

    #[test]
    fn unusable_headers_and_short_bodies_are_reported() {
        assert!(
            matches!(&decode_all(b"Content-Length: ten\r\n", 4, 100)[..], [Decoded::BadHeader { detail }] if detail.contains("ten"))
        );
        assert!(matches!(
            &decode_all(b"Content-Length: 5\r\nContent-Length: -1\r\n\r\n", 4, 100)[..],
            [Decoded::BadHeader { .. }, ..]
        ));
        assert_eq!(
            decode_all(b"Content-Length: 10\r\n\r\n{\"a\"", 2, 100),
            vec![Decoded::Truncated { expected: 10, got: 4 }]
        );
    }

    fn scan(text: &str) -> Option<Value> {
        let mut scanner = IdScanner::default();
        for b in text.as_bytes().chunks(3) {
            scanner.feed(b);
        }
        scanner.id()
    }

    #[test]
    fn the_id_scanner_reads_only_the_top_level_id() {
        assert_eq!(scan(r#"{"id": 7}"#), Some(json!(7)));
        assert_eq!(scan(r#"{"a": {"id": 1}, "b": "\"id\": 2", "id" : "x\"y" , "c": 1}"#), Some(json!("x\"y")));
        assert_eq!(scan(r#"{"a": [1, {"id": 1}]}"#), None);
        assert_eq!(scan(r#"[{"id": 1}]"#), None);
        assert_eq!(scan(r#"{"id": {"nested": 1}}"#), None);
        assert_eq!(scan(r#"{"id": null}"#), None);
        assert_eq!(scan(r#"{"idx": 1, "xid": 2}"#), None);
        // Cut off before the value ends: nothing is guessed.
        assert_eq!(scan(r#"{"id": 12"#), None);
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn body() -> impl Strategy<Value = String> {
            // JSON-ish text without line ends (a line message cannot hold one), sometimes empty-ish.
            "[ -~]{0,40}".prop_map(|s| format!("{{\"p\":{:?}}}", s))
        }

        proptest! {
            #[test]
            fn any_split_of_any_stream_decodes_the_same(
                messages in proptest::collection::vec((any::<bool>(), body()), 0..8),
                chunk in 1usize..50,
            ) {
                let mut input = Vec::new();
                let mut expected = Vec::new();
                for (framed, body) in &messages {
                    if *framed {
                        input.extend_from_slice(format!("Content-Length: {}\r\n\r\n{body}", body.len()).as_bytes());
                        expected.push(message(Framing::ContentLength, body));
                    } else {
                        input.extend_from_slice(format!("{body}\n").as_bytes());
                        expected.push(message(Framing::Line, body));
                    }
                }
                prop_assert_eq!(decode_all(&input, chunk, 1 << 20), expected);
            }

            #[test]
            fn arbitrary_bytes_never_panic_and_never_exceed_the_limit(
                input in proptest::collection::vec(any::<u8>(), 0..400),
                chunk in 1usize..64,
                max in 1usize..64,
            ) {
                for decoded in decode_all(&input, chunk, max) {
                    if let Decoded::Message { body, .. } = decoded {
                        prop_assert!(body.len() <= max);
                    }
                }
            }
        }
    }
}
