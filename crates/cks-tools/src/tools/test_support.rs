//! Helpers shared by the tool unit tests: a runtime on the in-memory store, sessions made from
//! JSON, and calls through the standard registry (so argument and session checks run too).

use serde_json::Value;
use std::sync::Arc;

use cks_runtime::store::memory::MemoryStore;
use cks_runtime::{NewSession, Runtime, RuntimeConfig};

use crate::{Registry, ToolContext};

pub(crate) fn context() -> ToolContext {
    ToolContext::new(Arc::new(Runtime::new(Arc::new(MemoryStore::new()), RuntimeConfig::default())))
}

/// A new session holding `structure` (canonical CKS JSON) with one first version.
pub(crate) async fn session(ctx: &ToolContext, structure: Value) -> String {
    let structure = cks_core::json::parse_value(structure).expect("test structure parses");
    let options = NewSession { first_version: Some(Default::default()), ..Default::default() };
    ctx.runtime.create_session(structure, options).await.expect("session is created").session_id
}

/// Calls a tool of the standard registry.
pub(crate) async fn call(ctx: &ToolContext, name: &str, args: Value) -> Value {
    Registry::standard().call(name, args, ctx).await.expect("the tool is registered")
}

/// An object in canonical JSON.
pub(crate) fn obj(id: &str, ty: &str, name: &str, structure: Value) -> Value {
    serde_json::json!({"identity": {"id": id, "type": ty, "name": name}, "structure": structure})
}

/// A relation in canonical JSON.
pub(crate) fn rel(id: &str, participants: &[&str], relation_type: &str) -> Value {
    obj(id, "Relation", id, serde_json::json!({"participants": participants, "relation_type": relation_type}))
}

/// A structure in canonical JSON.
pub(crate) fn structure(objects: Vec<Value>) -> Value {
    serde_json::json!({"version": "1.0", "objects": objects})
}

/// The API key configured in LLM test contexts; it must never appear in a result.
pub(crate) const TEST_KEY: &str = "sk-test-SECRET-7f3a9c";

/// Installs the rustls crypto provider reqwest needs (once per test binary).
pub(crate) fn install_crypto() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// The environment of an LLM client for `provider` whose every base URL points at `base` (a testkit
/// server), with keys for every provider, one quick retry and no model-list cache.
pub(crate) fn llm_env(provider: &str, base: &str) -> Vec<(String, String)> {
    [
        ("CKS_LLM_PROVIDER", provider.to_owned()),
        ("ANTHROPIC_API_KEY", TEST_KEY.to_owned()),
        ("ANTHROPIC_BASE_URL", base.to_owned()),
        ("CKS_OPENAI_API_KEY", TEST_KEY.to_owned()),
        ("CKS_OPENAI_BASE_URL", format!("{base}/v1")),
        ("CKS_GOOGLE_API_KEY", TEST_KEY.to_owned()),
        ("CKS_GOOGLE_BASE_URL", format!("{base}/v1beta")),
        ("CKS_OLLAMA_HOST", base.to_owned()),
        ("CKS_LLM_MAX_RETRIES", "1".to_owned()),
        ("CKS_LLM_MODELS_TTL_SECONDS", "0".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// A context whose LLM client is configured from `env` (see [`llm_env`]).
pub(crate) fn llm_context(env: &[(String, String)]) -> ToolContext {
    install_crypto();
    let client = cks_llm::LlmClient::from_env(|name| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
        .expect("the test LLM configuration is valid");
    let mut ctx = context();
    ctx.llm = crate::LlmAccess::Ready(client);
    ctx
}

/// A serialized document (a JSON string value) parsed, without the per-call `_cks_metadata`
/// stamp, so two serializations of the same structure compare equal.
pub(crate) fn document(text: &Value) -> Value {
    let mut document: Value = serde_json::from_str(text.as_str().expect("a serialized document")).unwrap();
    if let Value::Object(map) = &mut document {
        map.remove("_cks_metadata");
    }
    document
}

/// A request an [`HttpServer`] received.
#[derive(Clone, Debug)]
pub(crate) struct Recorded {
    pub(crate) method: String,
    pub(crate) path: String,
    /// Header names lower-cased.
    pub(crate) headers: Vec<(String, String)>,
}

impl Recorded {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// What an [`HttpServer`] answers.
#[derive(Clone, Debug)]
pub(crate) struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    length: bool,
    delay: Option<std::time::Duration>,
}

impl Reply {
    pub(crate) fn status(status: u16) -> Self {
        Reply { status, headers: Vec::new(), body: Vec::new(), length: true, delay: None }
    }

    /// A redirect; `{port}` in the location is the server's own port.
    pub(crate) fn redirect(status: u16, location: &str) -> Self {
        Reply::status(status).header("Location", location)
    }

    pub(crate) fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    pub(crate) fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// No Content-Length: the body ends when the connection closes.
    pub(crate) fn without_length(mut self) -> Self {
        self.length = false;
        self
    }

    /// Answers only after `delay`.
    pub(crate) fn after(mut self, delay: std::time::Duration) -> Self {
        self.delay = Some(delay);
        self
    }
}

type Route = dyn Fn(&str, &str) -> Reply + Send + Sync;

/// A small HTTP/1.1 server on 127.0.0.1: `route(method, path)` answers every request (one per
/// connection), and every request is recorded.
pub(crate) struct HttpServer {
    pub(crate) addr: std::net::SocketAddr,
    requests: Arc<std::sync::Mutex<Vec<Recorded>>>,
    task: tokio::task::JoinHandle<()>,
}

impl HttpServer {
    pub(crate) async fn start(route: impl Fn(&str, &str) -> Reply + Send + Sync + 'static) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a free port");
        let addr = listener.local_addr().expect("an address");
        let requests = Arc::new(std::sync::Mutex::new(Vec::new()));
        let route: Arc<Route> = Arc::new(route);
        let recorded = requests.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(answer(stream, route.clone(), recorded.clone(), addr.port()));
            }
        });
        HttpServer { addr, requests, task }
    }

    pub(crate) fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn answer(
    mut stream: tokio::net::TcpStream,
    route: Arc<Route>,
    recorded: Arc<std::sync::Mutex<Vec<Recorded>>>,
    port: u16,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte).await {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next().unwrap_or_default().split(' ');
    let (method, path) = (request_line.next().unwrap_or_default(), request_line.next().unwrap_or_default());
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    recorded.lock().unwrap().push(Recorded { method: method.to_owned(), path: path.to_owned(), headers });
    let reply = route(method, path);
    if let Some(delay) = reply.delay {
        tokio::time::sleep(delay).await;
    }
    let mut out = format!("HTTP/1.1 {} Test\r\nConnection: close\r\n", reply.status);
    for (name, value) in &reply.headers {
        out.push_str(&format!("{name}: {}\r\n", value.replace("{port}", &port.to_string())));
    }
    if reply.length {
        out.push_str(&format!("Content-Length: {}\r\n", reply.body.len()));
    }
    out.push_str("\r\n");
    let mut bytes = out.into_bytes();
    if method != "HEAD" {
        bytes.extend_from_slice(&reply.body);
    }
    let _ = stream.write_all(&bytes).await;
    let _ = stream.shutdown().await;
}
