//! A streamed chat answer read off the wire: frames decoded as they arrive, their text handed to the
//! caller's delta sink, and what becomes of a body that turns out not to be a stream.
//!
//! Some servers (gateways, local servers) answer a streamed request with one whole JSON body, the
//! ordinary non-streamed answer. Such a body is recognised by its JSON content type, or, whatever its
//! label, by its not reading as a stream: no SSE event or NDJSON line at all, or a first frame that is
//! not the provider's JSON. It is then read by the adapter's ordinary translator, so the answer is
//! exactly what a non-streamed request would have given; its text reaches the sink as one piece, and the
//! call is marked as answered whole ([`Read::whole`]). The body is kept for that only until the first
//! frame decodes, and only up to [`MAX_WHOLE_BODY`].
//!
//! A body that is neither a stream nor an answer is a malformed answer that names the content type and
//! shows the body's first bytes (redacted): it is not retried, since the same server would answer the
//! same way. A stream that ends before any event (an empty body, keep-alive comments only) is a cut
//! stream, retried within the policy like any other.

use crate::client::DeltaSink;
use crate::conversation::{ChatResponse, ProviderKind};
use crate::error::ErrorKind;
use crate::providers::{self, DecodeCtx, Fault, StreamDecoder};
use crate::redact::{Redactor, StreamRedactor};
use crate::stream::Framer;

/// A body kept for the whole-answer fallback is given up beyond this size: no chat answer is that large,
/// and a stream has shown itself long before.
pub(super) const MAX_WHOLE_BODY: usize = 16 * 1024 * 1024;

/// How many bytes of an unreadable body an error shows.
const SHOWN_BYTES: usize = 160;

/// Whether a content type names JSON (`application/json`, `text/json`, `application/…+json`; parameters
/// ignored). The NDJSON types (`application/x-ndjson`, `application/jsonl`) name streams, not JSON.
pub(super) fn is_json(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    essence == "application/json"
        || essence == "text/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// A decoded answer and whether it came whole rather than streamed.
#[derive(Debug)]
pub(super) struct Read {
    pub(super) response: ChatResponse,
    /// A streamed request answered with one whole body, read by the ordinary translator.
    pub(super) whole: bool,
}

/// What the reader needs to know about where its answer goes.
pub(super) struct Sink<'a> {
    pub(super) deltas: Option<&'a dyn DeltaSink>,
    pub(super) redactor: &'a Redactor,
}

/// Whether to read on after a chunk.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// Read on.
    More,
    /// The provider's end marker arrived: whatever follows is not part of the answer.
    End,
    /// The body may be no stream: read on all the same ([`Reader::push`] keeps the rest), then
    /// [`Reader::finish`] tries it whole.
    NotAStream,
}

/// One streamed answer being read.
pub(super) struct Reader<'a> {
    provider: ProviderKind,
    /// The context before any frame, for reading the body whole.
    ctx: DecodeCtx,
    content_type: Option<String>,
    framer: Framer,
    decoder: Box<dyn StreamDecoder>,
    sink: Sink<'a>,
    redacting: StreamRedactor<'a>,
    /// Text the frames added, not yet handed on.
    text: String,
    /// The body so far, kept until a frame decodes (then it is a stream); `None` once given up.
    raw: Option<Vec<u8>>,
    /// Frames the decoder accepted.
    accepted: usize,
    /// The first frame did not decode: why (the body is then read whole, or this is the error).
    not_a_stream: Option<Fault>,
}

impl<'a> Reader<'a> {
    pub(super) fn new(provider: ProviderKind, ctx: &DecodeCtx, content_type: Option<&str>, sink: Sink<'a>) -> Self {
        let (framing, decoder) = providers::stream_decoder(provider, ctx.clone());
        Reader {
            provider,
            ctx: ctx.clone(),
            content_type: content_type.map(str::to_owned),
            framer: Framer::new(framing),
            decoder,
            redacting: StreamRedactor::new(sink.redactor),
            sink,
            text: String::new(),
            raw: Some(Vec::new()),
            accepted: 0,
            not_a_stream: None,
        }
    }

    /// A body read in full before decoding (the server labelled it JSON): the ordinary translator first,
    /// as the label says; a stream mislabelled as JSON next (some NDJSON servers do that).
    pub(super) fn read_json(mut self, body: &[u8], shown: &mut bool) -> Result<Read, Fault> {
        let why = match self.whole(body, shown) {
            Ok(read) => return Ok(read),
            Err(f) => f,
        };
        // Neither: the ordinary translator's reason is the one to give, the server having said JSON.
        let error = self.not_an_answer(why, "no events", body);
        match self.push(body, shown).and_then(|_| self.flush(shown)) {
            Ok(()) if self.accepted > 0 && self.not_a_stream.is_none() => self.finish_stream(shown).map_err(|_| error),
            _ => Err(error),
        }
    }

    /// Feeds a chunk of the body.
    pub(super) fn push(&mut self, chunk: &[u8], shown: &mut bool) -> Result<Step, Fault> {
        if self.not_a_stream.is_some() {
            self.keep(chunk);
            return Ok(Step::NotAStream);
        }
        self.keep(chunk);
        let frames = match self.framer.push(chunk) {
            Ok(frames) => frames,
            Err(why) => return self.first_frame_failed(Fault::malformed(why)),
        };
        for frame in frames {
            match self.decoder.on_frame(frame, &mut self.text) {
                Ok(end) => {
                    self.accepted += 1;
                    // A frame decoded: this is a stream, and the body need not be kept.
                    self.raw = None;
                    self.deliver(shown);
                    if end {
                        return Ok(Step::End);
                    }
                }
                Err(f) => return self.first_frame_failed(f),
            }
        }
        Ok(Step::More)
    }

    /// Keeps a chunk for the whole-answer fallback while it may still be needed.
    fn keep(&mut self, chunk: &[u8]) {
        if let Some(raw) = &mut self.raw {
            if raw.len() + chunk.len() > MAX_WHOLE_BODY {
                self.raw = None;
            } else {
                raw.extend_from_slice(chunk);
            }
        }
    }

    /// The body has ended: the answer, from the stream or, when it was none, from the whole body.
    pub(super) fn finish(mut self, shown: &mut bool) -> Result<Read, Fault> {
        self.flush(shown)?;
        let first_frame = self.not_a_stream.take();
        if self.accepted > 0 && first_frame.is_none() {
            return self.finish_stream(shown);
        }
        let Some(body) = self.raw.take() else {
            return Err(Fault::malformed(format!(
                "the provider answered a streamed request with {} and no events in its first {} MiB",
                self.described_type(),
                MAX_WHOLE_BODY >> 20
            )));
        };
        let first_frame_failed = first_frame.is_some();
        let why = match self.whole(&body, shown) {
            Ok(read) => return Ok(read),
            Err(f) => first_frame.unwrap_or(f),
        };
        if only_comments(&body) {
            // Nothing but keep-alives, or nothing at all: a stream cut before its first event.
            return Err(Fault {
                message: format!(
                    "the stream ended before the answer was complete: the provider answered a streamed \
                     request with {} and no events",
                    self.described_type()
                ),
                ..Fault::truncated_stream()
            });
        }
        let events = if first_frame_failed { "no readable events" } else { "no events" };
        Err(self.not_an_answer(why, events, &body))
    }

    /// The frames the end of the body completes (an SSE event without its closing blank line).
    fn flush(&mut self, shown: &mut bool) -> Result<(), Fault> {
        if self.not_a_stream.is_some() {
            return Ok(());
        }
        let frames = match self.framer.finish() {
            Ok(frames) => frames,
            Err(why) => {
                self.first_frame_failed(Fault::malformed(why))?;
                return Ok(());
            }
        };
        for frame in frames {
            match self.decoder.on_frame(frame, &mut self.text) {
                Ok(_) => {
                    self.accepted += 1;
                    self.raw = None;
                    self.deliver(shown);
                }
                Err(f) => {
                    self.first_frame_failed(f)?;
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// A frame did not decode. The first one, when it is not the provider's JSON and the body is still
    /// kept, says the body may be no stream at all: the caller reads the rest, and [`Reader::finish`]
    /// tries it whole. Any other failure (an error event, a later bad frame) is the stream's.
    fn first_frame_failed(&mut self, f: Fault) -> Result<Step, Fault> {
        if self.accepted == 0 && f.kind == ErrorKind::MalformedResponse && self.raw.is_some() {
            self.not_a_stream = Some(f);
            return Ok(Step::NotAStream);
        }
        Err(f)
    }

    /// The stream's answer, once its frames are in.
    fn finish_stream(self, shown: &mut bool) -> Result<Read, Fault> {
        let Reader { decoder, mut redacting, sink, .. } = self;
        let mut response = decoder.finish()?;
        providers::normalise(&mut response);
        // The answer is complete: what was held back in case it began a secret is not one.
        let rest = redacting.finish();
        if let Some(sink) = sink.deltas
            && !rest.is_empty()
        {
            *shown = true;
            sink.text(&rest);
        }
        Ok(Read { response, whole: false })
    }

    /// The body as one ordinary (non-streamed) answer; its text handed on in one piece.
    fn whole(&self, body: &[u8], shown: &mut bool) -> Result<Read, Fault> {
        let mut ctx = self.ctx.clone();
        let response = providers::decode_chat(self.provider, body, &mut ctx)?;
        tracing::info!(
            provider = %self.provider,
            content_type = %self.described_type(),
            "the provider answered a streamed request with one whole body; it was read as the answer"
        );
        if let Some(sink) = self.sink.deltas {
            let text = self.sink.redactor.redact(&response.text());
            if !text.is_empty() {
                *shown = true;
                sink.text(&text);
            }
        }
        Ok(Read { response, whole: true })
    }

    /// Hands what the frames added to the sink, redacted, as soon as it arrives.
    fn deliver(&mut self, shown: &mut bool) {
        let Some(sink) = self.sink.deltas else { return self.text.clear() };
        if self.text.is_empty() {
            return;
        }
        let ready = self.redacting.push(&self.text);
        self.text.clear();
        if !ready.is_empty() {
            *shown = true;
            sink.text(&ready);
        }
    }

    /// The error for a body that is neither a stream nor an answer: the content type, the translator's
    /// reason and the first bytes. A fault that is not about the shape (an error object in the body,
    /// classified by the adapter) keeps its class and retry decision.
    fn not_an_answer(&self, why: Fault, events: &str, body: &[u8]) -> Fault {
        let what = format!("the provider answered a streamed request with {} and {events}", self.described_type());
        if why.kind != ErrorKind::MalformedResponse {
            return Fault { message: format!("{what}: {}", why.message), ..why };
        }
        Fault {
            message: format!(
                "{what}, and the body is not an answer either ({}); it begins {}",
                why.message.trim_end_matches('.'),
                first_bytes(body, self.sink.redactor)
            ),
            retryable: Some(false),
            ..why
        }
    }

    fn described_type(&self) -> String {
        match &self.content_type {
            Some(t) if !t.trim().is_empty() => format!("content-type {}", providers::excerpt(t)),
            _ => "no content-type".to_owned(),
        }
    }
}

/// Whether a body holds nothing but blank lines and SSE comments (`: keep-alive`).
fn only_comments(body: &[u8]) -> bool {
    String::from_utf8_lossy(body).lines().all(|l| l.trim().is_empty() || l.starts_with(':'))
}

/// The first bytes of a body, quoted (control characters escaped), redacted before the cut so that no
/// part of a secret survives it.
fn first_bytes(body: &[u8], redactor: &Redactor) -> String {
    // Secrets are short; 4 KiB around the shown part is plenty to recognise one that the cut would split.
    let text = redactor.redact(&String::from_utf8_lossy(&body[..body.len().min(4096)]));
    let shown: String = text.chars().take(SHOWN_BYTES).collect();
    let more = if text.chars().nth(SHOWN_BYTES).is_some() || body.len() > 4096 { "…" } else { "" };
    format!("{shown:?}{more}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::test_support::{ctx_for, fixture, weather_turn1};

    /// Reads `body` as it would arrive in two chunks split at `split`, without a delta sink.
    fn read(kind: ProviderKind, content_type: Option<&str>, body: &[u8], split: usize) -> Result<Read, Fault> {
        let redactor = Redactor::default();
        let ctx = ctx_for(&weather_turn1(), "m");
        let mut reader = Reader::new(kind, &ctx, content_type, Sink { deltas: None, redactor: &redactor });
        let mut shown = false;
        for chunk in [&body[..split], &body[split..]] {
            if reader.push(chunk, &mut shown)? == Step::End {
                break;
            }
        }
        reader.finish(&mut shown)
    }

    fn summary(r: &ChatResponse) -> (String, Vec<(String, serde_json::Value)>, crate::StopReason) {
        let calls = r.message.tool_calls().iter().map(|c| (c.name.to_owned(), c.input.clone())).collect();
        (r.text(), calls, r.stop_reason.clone())
    }

    /// Each provider's whole answer, pretty-printed as the fixtures are (so that it is no NDJSON either), split anywhere,
    /// reads as the ordinary translator reads it; each provider's stream still reads as a stream.
    #[test]
    fn a_whole_answer_split_anywhere_reads_as_the_ordinary_translator_reads_it() {
        for (kind, whole, stream) in [
            (ProviderKind::Anthropic, "anthropic_tool_use.json", "anthropic_stream_tool_use.sse"),
            (ProviderKind::OpenaiCompatible, "openai_tool_calls.json", "openai_stream_tool_calls.sse"),
            (ProviderKind::Google, "gemini_function_call.json", "gemini_stream_function_call.sse"),
            (ProviderKind::Ollama, "ollama_tool_calls.json", "ollama_stream_tool_calls.ndjson"),
        ] {
            let body = fixture(whole);
            assert!(body.trim_start().starts_with("{\n"), "{whole} is pretty-printed");
            let expected = providers::decode_chat(kind, body.as_bytes(), &mut ctx_for(&weather_turn1(), "m")).unwrap();
            for split in 0..=body.len() {
                for content_type in [None, Some("text/plain")] {
                    let read = read(kind, content_type, body.as_bytes(), split)
                        .unwrap_or_else(|f| panic!("{kind} at {split}: {}", f.message));
                    assert!(read.whole, "{kind}");
                    assert_eq!(summary(&read.response), summary(&expected), "{kind} at {split}");
                }
            }
            let stream = fixture(stream);
            let read = read(kind, Some("text/event-stream"), stream.as_bytes(), stream.len() / 2).unwrap();
            assert!(!read.whole && read.response.has_tool_calls(), "{kind}");
        }
    }

    #[test]
    fn json_types() {
        for t in ["application/json", "Application/JSON; charset=utf-8", "application/problem+json", "text/json"] {
            assert!(is_json(t), "{t}");
        }
        for t in ["text/event-stream", "application/x-ndjson", "application/jsonl", "text/plain", ""] {
            assert!(!is_json(t), "{t}");
        }
    }

    #[test]
    fn first_bytes_are_redacted_before_the_cut_and_quoted() {
        let r = Redactor::new(["sk-secret-value"]);
        let body = format!("{}sk-secret-value\n<html>", "x".repeat(SHOWN_BYTES - 4));
        let shown = first_bytes(body.as_bytes(), &r);
        assert!(!shown.contains("sk-s"), "{shown}");
        assert!(shown.starts_with('"') && shown.ends_with('…'), "{shown}");
        assert_eq!(first_bytes(b"<html>\n", &r), "\"<html>\\n\"");
    }

    #[test]
    fn comments_only() {
        assert!(only_comments(b""));
        assert!(only_comments(b": keep-alive\n\n: ping\r\n"));
        assert!(!only_comments(b"{\"a\":1}"));
    }
}
