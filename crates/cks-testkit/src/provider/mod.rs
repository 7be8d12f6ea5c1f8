//! Wire formats: one module per provider, plus what they share.
//!
//! Each provider module offers the same three functions, called by the server:
//! - `validate(&Ctx) -> Result<(), Rendered>`: the strict request checks the real API makes; an `Err` is the
//!   provider's own 4xx error and the scripted queue is left untouched;
//! - `answer(&Ctx, &Answer) -> Rendered`: a text / tool-call answer, streaming or not;
//! - `fault(&Ctx, &Fault) -> Rendered`: the provider-shaped faults (rate limit, overload, server error, garbage,
//!   truncation, mid-stream error). `Reply::Status` and `Reply::DropConnection` are handled by the server itself.
//!
//! The providers with an embeddings endpoint (all but Anthropic) also offer `validate_embed(&Ctx)` (that
//! endpoint's checks) and `embed_answer(&Ctx)` (the vectors of the request's texts, from [`embedding`]); an
//! embeddings fault is the same `fault`, a truncated answer aside.

pub(crate) mod anthropic;
pub(crate) mod gemini;
pub(crate) mod ollama;
pub(crate) mod openai;

use std::convert::Infallible;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};
use serde_json::Value;

use crate::script::{Answer, Fault};
use crate::server::Shared;

/// The wire format an endpoint speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Provider {
    /// Anthropic Messages API (`POST /v1/messages`).
    Anthropic,
    /// OpenAI-compatible chat completions (`POST /v1/chat/completions`, `POST /chat/completions`).
    OpenAi,
    /// Google Gemini `generateContent` / `streamGenerateContent`.
    Gemini,
    /// Ollama native API (`POST /api/chat`).
    Ollama,
}

/// How the answer is delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// One JSON body.
    Json,
    /// A streamed body (SSE or NDJSON, depending on the provider).
    Stream,
    /// Gemini `streamGenerateContent` without `alt=sse`: one JSON array of chunks.
    JsonArray,
}

/// What a provider module sees of a chat request.
#[derive(Debug)]
pub(crate) struct Ctx<'a> {
    pub(crate) shared: &'a Shared,
    pub(crate) headers: &'a HeaderMap,
    pub(crate) body: &'a Value,
    pub(crate) query: Option<&'a str>,
    /// The model: from the body, or from the path for Gemini.
    pub(crate) model: String,
    pub(crate) mode: Mode,
}

impl Ctx<'_> {
    pub(crate) fn streaming(&self) -> bool {
        self.mode != Mode::Json
    }

    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// A response before it is turned into an HTTP response. `chunks` are written one after the other (separate
/// frames for streams).
#[derive(Debug, Clone)]
pub(crate) struct Rendered {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) chunks: Vec<String>,
}

impl Rendered {
    pub(crate) fn json(status: u16, body: &Value) -> Rendered {
        Rendered::raw(status, "application/json", vec![body.to_string()])
    }

    pub(crate) fn raw(status: u16, content_type: &str, chunks: Vec<String>) -> Rendered {
        Rendered { status, headers: vec![("content-type".into(), content_type.into())], chunks }
    }

    /// A scripted status fault exactly as the script wrote it (header names in lower case).
    pub(crate) fn scripted(status: u16, headers: Vec<(String, String)>, body: String) -> Rendered {
        let headers = headers.into_iter().map(|(n, v)| (n.to_ascii_lowercase(), v)).collect();
        Rendered { status, headers, chunks: vec![body] }
    }

    pub(crate) fn sse(chunks: Vec<String>) -> Rendered {
        let mut r = Rendered::raw(200, "text/event-stream", chunks);
        r.headers.push(("cache-control".into(), "no-cache".into()));
        r
    }

    pub(crate) fn header(mut self, name: &str, value: impl Into<String>) -> Rendered {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// The whole body as one string.
    pub(crate) fn body(&self) -> String {
        self.chunks.concat()
    }

    /// The same response with its body cut in half (at a char boundary), as one chunk.
    pub(crate) fn truncated(self) -> Rendered {
        let body = self.body();
        let mut cut = body.len() / 2;
        while !body.is_char_boundary(cut) {
            cut -= 1;
        }
        Rendered { chunks: vec![body[..cut].to_owned()], ..self }
    }

    pub(crate) fn into_response(self) -> Response<Body> {
        let body = if self.chunks.len() == 1 {
            Body::from(self.chunks.into_iter().next().unwrap_or_default())
        } else {
            Body::from_stream(futures::stream::iter(self.chunks.into_iter().map(Ok::<_, Infallible>)))
        };
        let mut resp = Response::new(body);
        *resp.status_mut() = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        for (name, value) in self.headers {
            if let (Ok(n), Ok(v)) = (HeaderName::try_from(name), HeaderValue::try_from(value)) {
                resp.headers_mut().append(n, v);
            }
        }
        resp
    }
}

/// One SSE event: optional `event:` name, one `data:` line, blank line. `crlf` selects CRLF line endings.
pub(crate) fn sse_event(event: Option<&str>, data: &str, crlf: bool) -> String {
    let nl = if crlf { "\r\n" } else { "\n" };
    match event {
        Some(e) => format!("event: {e}{nl}data: {data}{nl}{nl}"),
        None => format!("data: {data}{nl}{nl}"),
    }
}

/// Splits `s` into at most `n` non-empty pieces at char boundaries (one empty piece for an empty string).
pub(crate) fn split_str(s: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    if chars.is_empty() {
        return vec![String::new()];
    }
    let n = n.clamp(1, chars.len());
    let size = chars.len().div_ceil(n);
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

/// The arguments of a tool call as a JSON object (non-objects are wrapped in `{"value": …}`).
pub(crate) fn args_object(args: &Value) -> Value {
    match args {
        Value::Object(_) => args.clone(),
        Value::Null => Value::Object(Default::default()),
        other => serde_json::json!({ "value": other }),
    }
}

/// A message for the "queue empty" 500, with the request path for context.
pub(crate) const NO_SCRIPT: &str = "cks-testkit: no scripted reply (the reply queue is empty and no default reply is set; use push() or set_default())";

/// Seconds since the Unix epoch, for `created` fields.
pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// The `retry-after` header for a rate-limit reply, when set.
pub(crate) fn retry_after(r: Rendered, secs: Option<u64>) -> Rendered {
    match secs {
        Some(s) => r.header("retry-after", s.to_string()),
        None => r,
    }
}

/// A fault that every provider renders the same way apart from the body flavour.
pub(crate) fn unreachable_fault(f: &Fault) -> Rendered {
    // Status and DropConnection never reach the providers; render something visible just in case.
    Rendered::json(500, &serde_json::json!({ "error": format!("cks-testkit: unhandled fault {f:?}") }))
}

/// Dimensions of the vectors the embeddings endpoints answer with, unless a request asks for others.
pub const EMBEDDING_DIMS: usize = 64;

/// The vector the embeddings endpoints give `text` in `dims` dimensions, the same every time: each
/// character trigram of each word (lowercased, with its boundaries marked) adds +1 or -1, by its FNV-1a
/// hash, to one dimension chosen by that hash; the sum is scaled to unit length (a text without words
/// gets the first unit vector). Like a real model's, the vectors of texts sharing words or parts of words
/// are close, which a test of ranking by meaning can rely on.
pub fn embedding(text: &str, dims: usize) -> Vec<f32> {
    let dims = dims.max(1);
    let mut vector = vec![0f32; dims];
    for word in text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
        let marked: Vec<char> = format!("<{}>", word.to_lowercase()).chars().collect();
        for gram in marked.windows(3) {
            let hash = fnv1a(gram.iter().collect::<String>().as_bytes());
            let sign = if hash >> 63 == 0 { 1.0 } else { -1.0 };
            vector[usize::try_from(hash % dims as u64).unwrap_or(0)] += sign;
        }
    }
    let norm = vector.iter().map(|v| v * v).sum::<f32>().sqrt();
    if norm == 0.0 {
        vector[0] = 1.0;
    } else {
        vector.iter_mut().for_each(|v| *v /= norm);
    }
    vector
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| (hash ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3))
}

/// A positive whole number of dimensions a request asks for in `field`, if it names one; `Err` when the
/// field holds something else.
pub(crate) fn requested_dims(body: &Value, field: &str) -> Result<Option<usize>, String> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64().and_then(|n| usize::try_from(n).ok()) {
            Some(n) if (1..=65_536).contains(&n) => Ok(Some(n)),
            _ => Err(format!("{field} must be a positive integer, got {v}")),
        },
    }
}

/// Helper for answers: text is present and non-empty.
pub(crate) fn has_text(a: &Answer) -> bool {
    a.text.as_deref().is_some_and(|t| !t.is_empty())
}
