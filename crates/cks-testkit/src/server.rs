//! The HTTP server: accept loop, routing, request recording and the reply queue.
//!
//! The server runs its own accept loop on hyper (HTTP/1.1) rather than `axum::serve`, so that
//! [`Reply::DropConnection`] can close a TCP connection without writing a response: each connection task waits on
//! its hyper connection and on a per-connection kill switch, and dropping the connection closes the socket.
//!
//! Routes (anything else is a 404 with a JSON body naming the method and path):
//!
//! | Method and path | Provider | What |
//! | --- | --- | --- |
//! | `POST /v1/messages` | Anthropic | scripted answer |
//! | `POST /chat/completions`, `POST /v1/chat/completions` | OpenAI | scripted answer |
//! | `POST /v1beta/models/{m}:generateContent`, `POST /models/{m}:generateContent` | Gemini | scripted answer |
//! | `POST …/models/{m}:streamGenerateContent` | Gemini | scripted answer, streamed (SSE with `?alt=sse`, else a JSON array) |
//! | `POST /api/chat` | Ollama | scripted answer |
//! | `POST /api/embed` | Ollama | embeddings |
//! | `POST /embeddings`, `POST /v1/embeddings` | OpenAI | embeddings |
//! | `POST /v1beta/models/{m}:batchEmbedContents`, `POST /models/{m}:batchEmbedContents` | Gemini | embeddings |
//! | `GET /v1/models`, `GET /models` | Anthropic when `x-api-key` is sent, else OpenAI | model list |
//! | `GET /v1beta/models` | Gemini | model list |
//! | `GET /api/tags`, `GET /api/version` | Ollama | model list, version |
//!
//! Every request is recorded (before any check) and can be read back with [`ProviderServer::requests`]. Requests
//! that fail a provider's strict checks get that provider's 4xx error and do not consume a scripted reply; model
//! lists never consume one either.
//!
//! The embeddings endpoints have a queue of their own ([`ProviderServer::push_embedding`]), so a test of chat
//! calls is never disturbed by a background embedder: each embeddings request pops its next reply, rendered as
//! that endpoint's faults (an answer reply, or an empty queue, gets the vectors of the request's texts).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::task::{JoinHandle, JoinSet};

use crate::provider::{self, Ctx, Mode, Provider, Rendered};
use crate::script::{Fault, Outcome, Reply, Resolved};

/// One request the server received.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    /// `GET`, `POST`, ...
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// The query string, without `?`.
    pub query: Option<String>,
    /// All headers in arrival order, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON; `Null` when empty or not JSON.
    pub body: Value,
    /// The body as text (lossy UTF-8).
    pub raw_body: String,
    /// The wire format of the endpoint that was hit; `None` for unknown routes.
    pub provider: Option<Provider>,
    /// When the request's head reached the handler.
    pub received_at: Instant,
    /// For a paced stream ([`Reply::Paced`]): each chunk of the answer, with when it was handed to the
    /// connection (a benchmark's "the provider sent its first token" is the first chunk holding text).
    /// Empty for every other answer.
    pub sent: Vec<(Instant, String)>,
    /// When the answer was rendered (before its bytes are written); `None` while it is being
    /// prepared, and for a dropped connection. `answered_at - received_at` is this server's own
    /// time for the request (reading the body, checks, scripted delays, rendering), which a
    /// benchmark subtracts from a client-observed time.
    pub answered_at: Option<Instant>,
    /// Unique within the server: finds the record again once the answer is rendered.
    seq: u64,
}

impl RecordedRequest {
    /// The first value of a header (name matched case-insensitively).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str())
    }
}

/// A thought signature the Gemini endpoint attached to a `functionCall` part.
#[derive(Debug, Clone)]
pub(crate) struct IssuedSignature {
    pub(crate) signature: String,
    /// Every call of the answer, as (name, args); the signature sits on the first.
    pub(crate) calls: Vec<(String, Value)>,
}

#[derive(Debug, Default)]
struct State {
    queue: VecDeque<Reply>,
    default: Option<Reply>,
    embedding_queue: VecDeque<Reply>,
    requests: Vec<RecordedRequest>,
    openai_quirks: bool,
    signatures: Vec<IssuedSignature>,
}

/// State shared by the handle and the connection tasks.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    state: Mutex<State>,
    counter: AtomicU64,
    /// Numbers the recorded requests (apart from `counter`, so made-up ids do not depend on it).
    request_seq: AtomicU64,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panicking test thread must not take the server down with it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A number unique within this server, for made-up ids.
    pub(crate) fn next_id(&self) -> u64 {
        self.counter.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub(crate) fn openai_quirks(&self) -> bool {
        self.lock().openai_quirks
    }

    /// Makes up a thought signature for the first function call of a Gemini answer and remembers it, with all the
    /// calls of that answer.
    pub(crate) fn issue_signature(&self, calls: Vec<(String, Value)>) -> String {
        let n = self.next_id();
        let signature = format!("Q0tTdGVzdGtpdFNpZ25hdHVyZQ{n:06}==");
        self.lock().signatures.push(IssuedSignature { signature: signature.clone(), calls });
        signature
    }

    pub(crate) fn issued_signatures(&self) -> Vec<IssuedSignature> {
        self.lock().signatures.clone()
    }

    fn next_reply(&self) -> Option<Reply> {
        let mut st = self.lock();
        st.queue.pop_front().or_else(|| st.default.clone())
    }

    fn next_embedding_reply(&self) -> Option<Reply> {
        self.lock().embedding_queue.pop_front()
    }
}

/// A scripted LLM provider server on `127.0.0.1`. Dropping it shuts the server down and closes its connections.
#[derive(Debug)]
pub struct ProviderServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl ProviderServer {
    /// Binds `127.0.0.1:0` and starts serving. Must be called inside a Tokio runtime.
    pub async fn start() -> ProviderServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("cks-testkit: bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("cks-testkit: local address");
        let shared = Arc::new(Shared::default());
        let task = tokio::spawn(accept_loop(listener, shared.clone()));
        ProviderServer { addr, shared, task }
    }

    /// `http://127.0.0.1:PORT`, without a trailing slash.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Appends a reply to the FIFO queue shared by all endpoints.
    pub fn push(&self, reply: Reply) {
        self.shared.lock().queue.push_back(reply);
    }

    /// Appends several replies, in order.
    pub fn push_all(&self, replies: impl IntoIterator<Item = Reply>) {
        self.shared.lock().queue.extend(replies);
    }

    /// The reply served when the queue is empty. `None` (the initial setting): such requests get a 500 whose
    /// body says that no reply was scripted.
    pub fn set_default(&self, reply: Option<Reply>) {
        self.shared.lock().default = reply;
    }

    /// How many scripted replies are still queued.
    pub fn pending(&self) -> usize {
        self.shared.lock().queue.len()
    }

    /// Appends a reply to the embeddings endpoints' own FIFO queue. A fault is rendered in the shape of the
    /// endpoint hit; an answer reply (any text or tool calls) stands for the vectors of the request's texts,
    /// which is also what a request gets when the queue is empty.
    pub fn push_embedding(&self, reply: Reply) {
        self.shared.lock().embedding_queue.push_back(reply);
    }

    /// How many scripted embeddings replies are still queued.
    pub fn pending_embeddings(&self) -> usize {
        self.shared.lock().embedding_queue.len()
    }

    /// Every request received so far, in order of arrival.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().requests.clone()
    }

    /// Forgets the recorded requests.
    pub fn clear_requests(&self) {
        self.shared.lock().requests.clear();
    }

    /// OpenAI-compatible quirk mode (off by default): tool-call `arguments` become JSON objects instead of strings,
    /// tool-call ids are empty, and streams start with an SSE comment line (`: OPENROUTER PROCESSING`), as some
    /// OpenAI-compatible servers do.
    pub fn openai_quirks(&self, on: bool) {
        self.shared.lock().openai_quirks = on;
    }
}

impl Drop for ProviderServer {
    fn drop(&mut self) {
        // Aborting the accept loop drops its JoinSet, which aborts every connection task.
        self.task.abort();
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    conns.spawn(serve_connection(stream, shared.clone()));
                }
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(10)).await,
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

async fn serve_connection(stream: TcpStream, shared: Arc<Shared>) {
    // Each chunk of a stream goes out when it is written, as a provider's streams do: with Nagle's
    // algorithm on, a chunk written while the previous one is unacknowledged would wait for the
    // client's delayed ACK.
    let _ = stream.set_nodelay(true);
    let kill = Arc::new(Notify::new());
    let kill2 = kill.clone();
    let svc = hyper::service::service_fn(move |req| handle(shared.clone(), kill2.clone(), req));
    let conn = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc);
    tokio::select! {
        _ = conn => {}
        // Dropping `conn` closes the socket without a response.
        _ = kill.notified() => {}
    }
}

/// What a request is asking for.
#[derive(Debug)]
enum Route {
    Chat { provider: Provider, model: Option<String>, gemini_stream: bool },
    Embed { provider: Provider, model: Option<String> },
    ModelsOpenAi,
    ModelsAnthropic,
    ModelsGemini,
    OllamaTags,
    OllamaVersion,
    NotFound,
}

impl Route {
    fn provider(&self) -> Option<Provider> {
        match self {
            Route::Chat { provider, .. } | Route::Embed { provider, .. } => Some(*provider),
            Route::ModelsOpenAi => Some(Provider::OpenAi),
            Route::ModelsAnthropic => Some(Provider::Anthropic),
            Route::ModelsGemini => Some(Provider::Gemini),
            Route::OllamaTags | Route::OllamaVersion => Some(Provider::Ollama),
            Route::NotFound => None,
        }
    }
}

fn route(method: &Method, path: &str, headers: &HeaderMap) -> Route {
    let post = method == Method::POST;
    let get = method == Method::GET;
    match path {
        "/v1/messages" if post => {
            return Route::Chat { provider: Provider::Anthropic, model: None, gemini_stream: false };
        }
        "/chat/completions" | "/v1/chat/completions" if post => {
            return Route::Chat { provider: Provider::OpenAi, model: None, gemini_stream: false };
        }
        "/api/chat" if post => return Route::Chat { provider: Provider::Ollama, model: None, gemini_stream: false },
        "/api/embed" if post => return Route::Embed { provider: Provider::Ollama, model: None },
        "/embeddings" | "/v1/embeddings" if post => return Route::Embed { provider: Provider::OpenAi, model: None },
        "/v1/models" | "/models" if get => {
            return if headers.contains_key("x-api-key") { Route::ModelsAnthropic } else { Route::ModelsOpenAi };
        }
        "/v1beta/models" if get => return Route::ModelsGemini,
        "/api/tags" if get => return Route::OllamaTags,
        "/api/version" if get => return Route::OllamaVersion,
        _ => {}
    }
    if post {
        let rest = path.strip_prefix("/v1beta/models/").or_else(|| path.strip_prefix("/models/"));
        if let Some((model, action)) = rest.and_then(|r| r.rsplit_once(':'))
            && !model.is_empty()
            && !model.contains('/')
        {
            match action {
                "generateContent" => {
                    return Route::Chat { provider: Provider::Gemini, model: Some(model.into()), gemini_stream: false };
                }
                "streamGenerateContent" => {
                    return Route::Chat { provider: Provider::Gemini, model: Some(model.into()), gemini_stream: true };
                }
                "batchEmbedContents" => return Route::Embed { provider: Provider::Gemini, model: Some(model.into()) },
                _ => {}
            }
        }
    }
    Route::NotFound
}

async fn handle(shared: Arc<Shared>, kill: Arc<Notify>, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let received_at = Instant::now();
    let seq = shared.request_seq.fetch_add(1, Ordering::Relaxed);
    let (parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(Body::new(body), usize::MAX).await.unwrap_or_default();
    let json: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let path = parts.uri.path().to_owned();
    let query = parts.uri.query().map(str::to_owned);
    let route = route(&parts.method, &path, &parts.headers);

    shared.lock().requests.push(RecordedRequest {
        method: parts.method.to_string(),
        path: path.clone(),
        query: query.clone(),
        headers: parts
            .headers
            .iter()
            .map(|(n, v)| (n.as_str().to_ascii_lowercase(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
            .collect(),
        body: json.clone(),
        raw_body: String::from_utf8_lossy(&bytes).into_owned(),
        provider: route.provider(),
        received_at,
        answered_at: None,
        sent: Vec::new(),
        seq,
    });

    let mut pace = None;
    let rendered = match route {
        Route::ModelsOpenAi => provider::openai::models(),
        Route::ModelsAnthropic => provider::anthropic::models(),
        Route::ModelsGemini => provider::gemini::models(),
        Route::OllamaTags => provider::ollama::tags(),
        Route::OllamaVersion => Rendered::json(200, &json!({ "version": "0.12.0" })),
        Route::NotFound => {
            Rendered::json(404, &json!({ "error": format!("cks-testkit: no endpoint for {} {}", parts.method, path) }))
        }
        Route::Embed { provider, model } => {
            let ctx = Ctx {
                shared: &shared,
                headers: &parts.headers,
                body: &json,
                query: query.as_deref(),
                model: model
                    .or_else(|| json.get("model").and_then(Value::as_str).map(str::to_owned))
                    .unwrap_or_else(|| "unknown-model".into()),
                mode: Mode::Json,
            };
            match embed(&ctx, provider, &kill).await {
                Some(r) => r,
                None => return Ok(std::future::pending::<Response<Body>>().await),
            }
        }
        Route::Chat { provider, model, gemini_stream } => {
            let body_str = |k: &str| json.get(k).and_then(Value::as_str).map(str::to_owned);
            let mode = match provider {
                Provider::Anthropic | Provider::OpenAi => {
                    if json.get("stream") == Some(&Value::Bool(true)) {
                        Mode::Stream
                    } else {
                        Mode::Json
                    }
                }
                Provider::Ollama => {
                    if json.get("stream") == Some(&Value::Bool(false)) {
                        Mode::Json
                    } else {
                        Mode::Stream
                    }
                }
                Provider::Gemini if !gemini_stream => Mode::Json,
                Provider::Gemini => {
                    let sse = query.as_deref().is_some_and(|q| q.split('&').any(|kv| kv == "alt=sse"));
                    if sse { Mode::Stream } else { Mode::JsonArray }
                }
            };
            let ctx = Ctx {
                shared: &shared,
                headers: &parts.headers,
                body: &json,
                query: query.as_deref(),
                model: model.or_else(|| body_str("model")).unwrap_or_else(|| "unknown-model".into()),
                mode,
            };
            match chat(&ctx, provider, &kill).await {
                Some((r, gap)) => {
                    pace = gap.filter(|_| mode != Mode::Json && r.chunks.len() > 1);
                    r
                }
                None => return Ok(std::future::pending::<Response<Body>>().await),
            }
        }
    };
    if let Some(record) = shared.lock().requests.iter_mut().rev().find(|r| r.seq == seq) {
        record.answered_at = Some(Instant::now());
    }
    match pace {
        Some(gap) => Ok(paced(rendered, gap, shared, seq)),
        None => Ok(rendered.into_response()),
    }
}

/// `rendered` with its chunks written `gap` apart, each recorded in the request's `sent` as it goes out.
fn paced(rendered: Rendered, gap: std::time::Duration, shared: Arc<Shared>, seq: u64) -> Response<Body> {
    let Rendered { status, headers, chunks } = rendered;
    // The status and headers as any answer gets them; the body is the paced stream.
    let (parts, _) = Rendered { status, headers, chunks: vec![String::new()] }.into_response().into_parts();
    let stream = futures::stream::unfold((chunks.into_iter(), true), move |(mut rest, first)| {
        let shared = shared.clone();
        async move {
            let chunk = rest.next()?;
            if !first {
                tokio::time::sleep(gap).await;
            }
            if let Some(record) = shared.lock().requests.iter_mut().rev().find(|r| r.seq == seq) {
                record.sent.push((Instant::now(), chunk.clone()));
            }
            Some((Ok::<_, Infallible>(chunk), (rest, false)))
        }
    });
    Response::from_parts(parts, Body::from_stream(stream))
}

/// Checks, pops and renders, with the gap a paced reply asks for between streamed chunks. `None`: the
/// connection is to be dropped.
async fn chat(ctx: &Ctx<'_>, provider: Provider, kill: &Notify) -> Option<(Rendered, Option<std::time::Duration>)> {
    use provider::{anthropic, gemini, ollama, openai};
    let checked = match provider {
        Provider::Anthropic => anthropic::validate(ctx),
        Provider::OpenAi => openai::validate(ctx),
        Provider::Gemini => gemini::validate(ctx),
        Provider::Ollama => ollama::validate(ctx),
    };
    if let Err(rejected) = checked {
        return Some((rejected, None));
    }
    let Some(reply) = ctx.shared.next_reply() else {
        return Some((
            match provider {
                Provider::Anthropic => anthropic::error(500, "api_error", provider::NO_SCRIPT),
                Provider::OpenAi => openai::error(500, "server_error", None, provider::NO_SCRIPT),
                Provider::Gemini => gemini::error(500, "INTERNAL", provider::NO_SCRIPT),
                Provider::Ollama => ollama::error(500, provider::NO_SCRIPT),
            },
            None,
        ));
    };
    let Resolved { delay, pace, not_streamed, outcome } = reply.resolve();
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    // Answered as the same request without streaming would be: the endpoint's whole JSON body.
    let whole = Ctx { mode: Mode::Json, model: ctx.model.clone(), ..*ctx };
    let ctx = if not_streamed { &whole } else { ctx };
    Some((
        match outcome {
            Outcome::Fault(Fault::DropConnection) => {
                kill.notify_one();
                return None;
            }
            Outcome::Fault(Fault::Status { status, headers, body }) => Rendered::scripted(status, headers, body),
            Outcome::Answer(a) => match provider {
                Provider::Anthropic => anthropic::answer(ctx, &a),
                Provider::OpenAi => openai::answer(ctx, &a),
                Provider::Gemini => gemini::answer(ctx, &a),
                Provider::Ollama => ollama::answer(ctx, &a),
            },
            Outcome::Fault(f) => match provider {
                Provider::Anthropic => anthropic::fault(ctx, &f),
                Provider::OpenAi => openai::fault(ctx, &f),
                Provider::Gemini => gemini::fault(ctx, &f),
                Provider::Ollama => ollama::fault(ctx, &f),
            },
        },
        pace,
    ))
}

/// An embeddings request: checks, pops the embeddings queue and renders. `None`: the connection is to be
/// dropped.
async fn embed(ctx: &Ctx<'_>, provider: Provider, kill: &Notify) -> Option<Rendered> {
    use provider::{anthropic, gemini, ollama, openai};
    type Validate = fn(&Ctx<'_>) -> Result<(), Rendered>;
    type Answer = fn(&Ctx<'_>) -> Rendered;
    type RenderFault = fn(&Ctx<'_>, &Fault) -> Rendered;
    let (validate, answer, fault): (Validate, Answer, RenderFault) = match provider {
        Provider::Ollama => (ollama::validate_embed, ollama::embed_answer, ollama::fault),
        Provider::OpenAi => (openai::validate_embed, openai::embed_answer, openai::fault),
        Provider::Gemini => (gemini::validate_embed, gemini::embed_answer, gemini::fault),
        // No route leads here: the Messages API has no embeddings endpoint.
        Provider::Anthropic => return Some(anthropic::error(404, "not_found_error", "no embeddings endpoint")),
    };
    if let Err(rejected) = validate(ctx) {
        return Some(rejected);
    }
    let Some(reply) = ctx.shared.next_embedding_reply() else { return Some(answer(ctx)) };
    let Resolved { delay, outcome, .. } = reply.resolve();
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    Some(match outcome {
        Outcome::Answer(_) => answer(ctx),
        Outcome::Fault(Fault::DropConnection) => {
            kill.notify_one();
            return None;
        }
        Outcome::Fault(Fault::Status { status, headers, body }) => Rendered::scripted(status, headers, body),
        Outcome::Fault(Fault::Truncated) => answer(ctx).truncated(),
        Outcome::Fault(f) => fault(ctx, &f),
    })
}
