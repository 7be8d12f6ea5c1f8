//! The one HTTP layer: sends what an adapter built, classifies failures, retries what is retryable,
//! parses streams, and redacts. No other module talks to the network.
//!
//! Retried: 408, 429, 529, other 5xx, connection failures, timeouts, and transient errors inside a 200
//! stream (the answer is buffered, so nothing was handed to the caller yet). Not retried: other 4xx,
//! malformed answers, anything the provider marks as not worth it (`x-should-retry: false`, OpenAI
//! `insufficient_quota`, Gemini daily quota), and a streamed attempt that had already handed text to the
//! caller's delta sink (text shown cannot be taken back; see [`crate::ChatOptions::deltas`]). Waits honour
//! `retry-after-ms`, `retry-after` and Gemini's `RetryInfo`, otherwise full-jitter exponential backoff;
//! attempts (`CKS_LLM_MAX_RETRIES`) and total time are bounded ([`RetryPolicy`]). Every message that
//! leaves — error, log field, decoded answer — is redacted here.
//!
//! A streamed request answered with one whole JSON body (some gateways and local servers do that) is
//! read as the answer, by the adapter's ordinary translator, and the call is marked so
//! ([`Outcome::whole_answer`]); a body that is neither a stream nor an answer fails once, naming its
//! content type and first bytes (`streamed.rs`).

use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use cks_core::error_chain;
use futures::StreamExt;
use reqwest::header::{CONTENT_TYPE, HeaderMap};
use tokio::time::Instant;

use crate::client::DeltaSink;
use crate::config::HttpConfig;
use crate::conversation::{ChatResponse, ProviderKind};
use crate::error::{ErrorContext, ErrorKind, LlmError};
use crate::providers::{self, DecodeCtx, Fault, HttpCall, Method, ModelInfo};
use crate::redact::Redactor;
use crate::retry;

mod streamed;

/// Error bodies are read up to this size; the message shows an excerpt.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// What the caller wants from a successful answer.
pub(crate) enum Decoder<'a> {
    /// A chat answer, whole or streamed (with its text handed to `deltas` as it arrives).
    Chat { ctx: &'a DecodeCtx, stream: bool, deltas: Option<&'a dyn DeltaSink> },
    /// A model list.
    Models,
    /// Vectors from an embeddings endpoint.
    Embeddings,
}

/// A decoded answer.
#[derive(Debug)]
pub(crate) enum Payload {
    Chat(ChatResponse),
    Models(Vec<ModelInfo>),
    Embeddings(Vec<Vec<f32>>),
}

/// The result of a call and how many retries it took.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) result: Result<Payload, LlmError>,
    pub(crate) retries: u32,
    /// A streamed request was answered with one whole body, read by the ordinary translator.
    pub(crate) whole_answer: bool,
}

/// What the attempts of one call have done so far.
#[derive(Debug, Default)]
struct Progress {
    /// Text has reached the caller's delta sink: from then on nothing is retried.
    shown: bool,
    /// The successful attempt's answer came whole although a stream was asked for.
    whole: bool,
}

/// One failed attempt, before it becomes an [`LlmError`].
#[derive(Debug)]
struct Failure {
    kind: ErrorKind,
    status: Option<u16>,
    message: String,
    retry_after: Option<Duration>,
    retryable: Option<bool>,
}

impl Failure {
    fn new(kind: ErrorKind, message: String) -> Self {
        Failure { kind, status: None, message, retry_after: None, retryable: None }
    }

    fn from_fault(f: Fault, status: u16) -> Self {
        Failure {
            kind: f.kind,
            status: Some(status),
            message: f.message,
            retry_after: f.retry_after,
            retryable: f.retryable,
        }
    }
}

/// Classes retried by default.
fn transient(kind: ErrorKind) -> bool {
    matches!(
        kind,
        ErrorKind::RateLimited
            | ErrorKind::Overloaded
            | ErrorKind::Server
            | ErrorKind::Timeout
            | ErrorKind::Unavailable
    )
}

/// The class an HTTP status means when the body says nothing more specific.
fn class_of_status(status: u16) -> ErrorKind {
    match status {
        401 | 403 => ErrorKind::Auth,
        408 | 504 => ErrorKind::Timeout,
        429 => ErrorKind::RateLimited,
        503 | 529 => ErrorKind::Overloaded,
        500..=599 => ErrorKind::Server,
        _ => ErrorKind::BadRequest,
    }
}

/// The reqwest client plus retry policy and redactor.
#[derive(Debug, Clone)]
pub(crate) struct Transport {
    /// Built on the first request: reading the system's root certificates is most of what a
    /// client costs, and a server whose tools never call a model should not pay it as it starts.
    client: OnceLock<reqwest::Client>,
    config: HttpConfig,
    redactor: Redactor,
}

impl Transport {
    pub(crate) fn new(config: HttpConfig, redactor: Redactor) -> Self {
        Transport { client: OnceLock::new(), config, redactor }
    }

    fn client(&self) -> Result<&reqwest::Client, String> {
        if let Some(client) = self.client.get() {
            return Ok(client);
        }
        // reqwest is built without a default crypto provider; install ring once per process. A second
        // install fails harmlessly (another component, or another client, got there first).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .connect_timeout(self.config.connect_timeout)
            .user_agent(concat!("cks-llm/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| self.redactor.redact(&format!("cannot build the HTTP client: {e}")))?;
        // Two first requests at once may both build one; either serves.
        Ok(self.client.get_or_init(|| client))
    }

    pub(crate) fn redactor(&self) -> &Redactor {
        &self.redactor
    }

    /// Whether `url` answers a GET with 2xx within the probe timeout. No retries: this is a quick check.
    pub(crate) async fn probe(&self, call: &HttpCall) -> Result<(), String> {
        let mut rb = self.client()?.get(&call.url).timeout(self.config.probe_timeout);
        for (k, v) in &call.headers {
            rb = rb.header(*k, v);
        }
        match rb.send().await {
            Ok(r) if r.status().is_success() => Ok(()),
            Ok(r) => Err(format!("HTTP {}", r.status().as_u16())),
            Err(e) => Err(self.redactor.redact(&error_chain(&e))),
        }
    }

    /// Send `call`, retrying within the policy, and decode the answer.
    pub(crate) async fn execute(
        &self,
        provider: ProviderKind,
        model: &str,
        call: &HttpCall,
        decoder: Decoder<'_>,
    ) -> Outcome {
        let body = match &call.body {
            Some(v) => match serde_json::to_vec(v) {
                Ok(b) => Some(Bytes::from(b)),
                Err(e) => {
                    let ctx = ErrorContext::new(provider, model, format!("cannot encode the request: {e}"));
                    return Outcome { result: Err(LlmError::BadRequest(ctx)), retries: 0, whole_answer: false };
                }
            },
            None => None,
        };
        let policy = &self.config.retry;
        let start = Instant::now();
        let mut retries = 0u32;
        let mut progress = Progress::default();
        loop {
            // Never let one attempt run past the total budget.
            let remaining = policy.max_elapsed.saturating_sub(start.elapsed()).max(Duration::from_secs(1));
            let timeout = self.config.request_timeout.min(remaining);
            let failure = match self.attempt(provider, call, body.as_ref(), &decoder, timeout, &mut progress).await {
                Ok(mut payload) => {
                    self.redact_payload(&mut payload);
                    tracing::debug!(
                        provider = %provider,
                        model = %self.redactor.redact(model),
                        retries,
                        whole_answer = progress.whole,
                        "LLM call succeeded"
                    );
                    return Outcome { result: Ok(payload), retries, whole_answer: progress.whole };
                }
                Err(f) => f,
            };
            let by_class = transient(failure.kind);
            let mut failure = failure;
            if progress.shown && failure.retryable.unwrap_or(by_class) {
                failure.message = format!(
                    "{} Part of the answer had already been streamed, so the call was not retried.",
                    failure.message.trim_end()
                );
                failure.retryable = Some(false);
            }
            let retryable = failure.retryable.unwrap_or(by_class);
            // A stream failure flagged transient gets the full budget; a class not normally retried but
            // flagged worth a retry (Groq `tool_use_failed`, a 400) gets one.
            let full_budget = by_class || failure.kind == ErrorKind::StreamError;
            let allowed = retryable && (full_budget || retries == 0);
            let wait = if allowed {
                retry::plan(policy, retries, failure.retry_after, start.elapsed(), &mut rand::rng())
            } else {
                None
            };
            let message = self.redactor.redact(&failure.message);
            match wait {
                Some(wait) => {
                    tracing::warn!(
                        provider = %provider,
                        model = %self.redactor.redact(model),
                        status = failure.status,
                        class = ?failure.kind,
                        attempt = retries + 1,
                        retry_in_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                        error = %message,
                        "LLM call failed; retrying"
                    );
                    tokio::time::sleep(wait).await;
                    retries += 1;
                }
                None => {
                    let err = self.to_error(provider, model, failure, retries + 1, retryable);
                    tracing::warn!(
                        provider = %provider,
                        model = %self.redactor.redact(model),
                        class = ?err.kind(),
                        attempts = retries + 1,
                        error = %err,
                        "LLM call failed"
                    );
                    return Outcome { result: Err(err), retries, whole_answer: false };
                }
            }
        }
    }

    fn redact_payload(&self, payload: &mut Payload) {
        match payload {
            Payload::Chat(r) => {
                self.redactor.redact_message(&mut r.message);
                r.model = self.redactor.redact(&r.model);
            }
            Payload::Models(list) => {
                for m in list {
                    m.id = self.redactor.redact(&m.id);
                }
            }
            // Numbers only: nothing a secret could hide in.
            Payload::Embeddings(_) => {}
        }
    }

    fn to_error(&self, provider: ProviderKind, model: &str, f: Failure, attempts: u32, retryable: bool) -> LlmError {
        let info = crate::providers::adapter(provider);
        let hint = match f.kind {
            ErrorKind::Auth => format!("Check {}.", info.credentials),
            ErrorKind::RateLimited | ErrorKind::Overloaded => match f.retry_after {
                Some(w) if !retryable || attempts == 1 => {
                    format!("The provider asks to wait {}s; try again then.", w.as_secs_f64().ceil())
                }
                _ if retryable => "Still failing after retries; try again later.".to_owned(),
                _ => "Waiting will not help; check the account's quota and billing.".to_owned(),
            },
            ErrorKind::BadRequest if f.status == Some(404) => {
                format!("Check the model name {model:?} and the provider's base URL.")
            }
            ErrorKind::Server | ErrorKind::Timeout | ErrorKind::StreamError if retryable => {
                "Still failing after retries; try again later.".to_owned()
            }
            ErrorKind::Unavailable => {
                info.unreachable_hint.unwrap_or("Check the network and the provider's base URL.").to_owned()
            }
            ErrorKind::MalformedResponse => "The server at the base URL may not speak this provider's API.".to_owned(),
            _ => String::new(),
        };
        let message = match f.message.trim_end() {
            m if hint.is_empty() => m.to_owned(),
            m if m.ends_with(['.', '!', '?', ')']) => format!("{m} {hint}"),
            m => format!("{m}. {hint}"),
        };
        let ctx = ErrorContext {
            provider: Some(provider),
            model: Some(self.redactor.redact(model)),
            status: f.status,
            message: self.redactor.redact(&message),
            retry_after: f.retry_after,
            attempts,
        };
        LlmError::from_kind(f.kind, ctx)
    }

    async fn attempt(
        &self,
        provider: ProviderKind,
        call: &HttpCall,
        body: Option<&Bytes>,
        decoder: &Decoder<'_>,
        timeout: Duration,
        progress: &mut Progress,
    ) -> Result<Payload, Failure> {
        let client = self
            .client()
            .map_err(|message| Failure { retryable: Some(false), ..Failure::new(ErrorKind::NotConfigured, message) })?;
        let mut rb = match call.method {
            Method::Get => client.get(&call.url),
            Method::Post => client.post(&call.url),
        };
        for (k, v) in &call.headers {
            rb = rb.header(*k, v);
        }
        if let Some(b) = body {
            rb = rb.header(CONTENT_TYPE, "application/json").body(b.clone());
        }
        let resp = rb.timeout(timeout).send().await.map_err(|e| transport_failure(&e, timeout))?;
        let status = resp.status().as_u16();
        if !resp.status().is_success() {
            return Err(self.status_failure(provider, status, resp).await);
        }
        match decoder {
            Decoder::Models => {
                let bytes = resp.bytes().await.map_err(|e| body_failure(&e, timeout))?;
                providers::decode_list_models(provider, &bytes)
                    .map(Payload::Models)
                    .map_err(|f| Failure::from_fault(f, status))
            }
            Decoder::Embeddings => {
                let bytes = resp.bytes().await.map_err(|e| body_failure(&e, timeout))?;
                providers::decode_embeddings(provider, &bytes)
                    .map(Payload::Embeddings)
                    .map_err(|f| Failure::from_fault(f, status))
            }
            Decoder::Chat { ctx, stream: false, .. } => {
                let bytes = resp.bytes().await.map_err(|e| body_failure(&e, timeout))?;
                let mut ctx = (*ctx).clone();
                providers::decode_chat(provider, &bytes, &mut ctx)
                    .map(Payload::Chat)
                    .map_err(|f| Failure::from_fault(f, status))
            }
            Decoder::Chat { ctx, stream: true, deltas } => {
                let content_type =
                    resp.headers().get(CONTENT_TYPE).map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
                let sink = streamed::Sink { deltas: *deltas, redactor: &self.redactor };
                let reader = streamed::Reader::new(provider, ctx, content_type.as_deref(), sink);
                let fault = |f: Fault| Failure::from_fault(f, status);
                let read = if content_type.as_deref().is_some_and(streamed::is_json) {
                    // Labelled JSON: one whole body, whatever was asked for; read it as such.
                    let bytes = resp.bytes().await.map_err(|e| body_failure(&e, timeout))?;
                    reader.read_json(&bytes, &mut progress.shown)
                } else {
                    self.read_stream(reader, resp, timeout, &mut progress.shown).await?
                };
                let read = read.map_err(fault)?;
                progress.whole = read.whole;
                Ok(Payload::Chat(read.response))
            }
        }
    }

    /// Reads a streamed body chunk by chunk. The outer `Err` is the connection's failure; the inner
    /// result is what the body said.
    async fn read_stream(
        &self,
        mut reader: streamed::Reader<'_>,
        resp: reqwest::Response,
        timeout: Duration,
        shown: &mut bool,
    ) -> Result<Result<streamed::Read, Fault>, Failure> {
        let mut chunks = resp.bytes_stream();
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(|e| stream_failure(&e, timeout))?;
            match reader.push(&chunk, shown) {
                // Not a stream: the rest of the body is read (the reader keeps it), to be tried whole.
                Ok(streamed::Step::More | streamed::Step::NotAStream) => {}
                Ok(streamed::Step::End) => break,
                Err(f) => return Ok(Err(f)),
            }
        }
        Ok(reader.finish(shown))
    }

    async fn status_failure(&self, provider: ProviderKind, status: u16, resp: reqwest::Response) -> Failure {
        let headers: HeaderMap = resp.headers().clone();
        let body = read_limited(resp).await;
        let info = providers::parse_error(provider, status, &body);
        let mut retryable = info.retryable;
        if let Some(h) = retry::should_retry_header(&headers) {
            retryable = Some(h);
        }
        Failure {
            kind: info.kind.unwrap_or_else(|| class_of_status(status)),
            status: Some(status),
            message: providers::excerpt(&info.message),
            retry_after: retry::retry_after_from_headers(&headers, SystemTime::now()).or(info.retry_after),
            retryable,
        }
    }
}

/// Read at most [`MAX_ERROR_BODY`] bytes of an error body; a broken body reads as what arrived.
async fn read_limited(resp: reqwest::Response) -> Vec<u8> {
    let mut out = Vec::new();
    let mut chunks = resp.bytes_stream();
    while let Some(Ok(chunk)) = chunks.next().await {
        let room = MAX_ERROR_BODY.saturating_sub(out.len());
        out.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if out.len() >= MAX_ERROR_BODY {
            break;
        }
    }
    out
}

fn transport_failure(e: &reqwest::Error, timeout: Duration) -> Failure {
    if e.is_timeout() {
        Failure::new(ErrorKind::Timeout, format!("no answer within {}s.", timeout.as_secs_f64()))
    } else if e.is_connect() {
        Failure::new(ErrorKind::Unavailable, format!("cannot connect: {}.", error_chain(e)))
    } else {
        Failure::new(ErrorKind::Unavailable, format!("the request failed: {}.", error_chain(e)))
    }
}

/// The connection failed while a whole (non-streamed) answer was being read: as transient as a refused one.
fn body_failure(e: &reqwest::Error, timeout: Duration) -> Failure {
    if e.is_timeout() {
        Failure::new(ErrorKind::Timeout, format!("the answer did not complete within {}s.", timeout.as_secs_f64()))
    } else {
        Failure::new(
            ErrorKind::Unavailable,
            format!("the connection broke while reading the answer: {}.", error_chain(e)),
        )
    }
}

fn stream_failure(e: &reqwest::Error, timeout: Duration) -> Failure {
    if e.is_timeout() {
        Failure::new(ErrorKind::Timeout, format!("the stream did not complete within {}s.", timeout.as_secs_f64()))
    } else {
        Failure {
            retryable: Some(true),
            ..Failure::new(ErrorKind::StreamError, format!("the stream was interrupted: {}.", error_chain(e)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_classes() {
        assert_eq!(class_of_status(401), ErrorKind::Auth);
        assert_eq!(class_of_status(403), ErrorKind::Auth);
        assert_eq!(class_of_status(400), ErrorKind::BadRequest);
        assert_eq!(class_of_status(404), ErrorKind::BadRequest);
        assert_eq!(class_of_status(409), ErrorKind::BadRequest);
        assert_eq!(class_of_status(408), ErrorKind::Timeout);
        assert_eq!(class_of_status(429), ErrorKind::RateLimited);
        assert_eq!(class_of_status(529), ErrorKind::Overloaded);
        assert_eq!(class_of_status(503), ErrorKind::Overloaded);
        assert_eq!(class_of_status(500), ErrorKind::Server);
        assert_eq!(class_of_status(502), ErrorKind::Server);
        assert!(!transient(ErrorKind::BadRequest) && transient(ErrorKind::Server));
    }
}
