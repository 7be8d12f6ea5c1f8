//! Shared helpers for the integration suites: clients pointed at a `cks-testkit` server, fast retry
//! settings, request-schema validation of every recorded request, and a log capture for redaction checks.
#![allow(dead_code, unreachable_pub)] // each test binary uses a different subset

use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use cks_llm::{ChatRequest, LlmClient, LlmConfig, Message, ProviderKind, ToolSpec};
use cks_testkit::{Provider, ProviderServer, RecordedRequest};
use serde_json::{Value, json};

/// Secrets configured in every test client; none may ever show up in an error, a log line or a result.
pub const SECRETS: [(&str, &str); 5] = [
    ("ANTHROPIC_API_KEY", "sk-ant-test-SECRET-0001"),
    ("CKS_OPENAI_API_KEY", "sk-openai-test-SECRET-0002"),
    ("CKS_GOOGLE_API_KEY", "AIza-google-test-SECRET-0003"),
    ("GOOGLE_API_KEY", "AIza-google-fallback-SECRET-0004"),
    ("CKS_MCP_HTTP_TOKEN", "mcp-http-token-SECRET-0005"),
];

pub fn secret(var: &str) -> &'static str {
    SECRETS.iter().find(|(k, _)| *k == var).map(|(_, v)| *v).unwrap()
}

/// The environment a client for `kind` would see, pointed at `base` (a testkit server or a dead port).
pub fn env_for(kind: ProviderKind, base: &str) -> HashMap<String, String> {
    let mut env: HashMap<String, String> = SECRETS.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    env.insert("CKS_LLM_PROVIDER".into(), kind.as_str().into());
    env.insert("ANTHROPIC_BASE_URL".into(), base.into());
    env.insert("CKS_OPENAI_BASE_URL".into(), format!("{base}/v1"));
    env.insert("CKS_GOOGLE_BASE_URL".into(), format!("{base}/v1beta"));
    env.insert("CKS_OLLAMA_HOST".into(), base.into());
    env
}

/// A config with fast retries (tiny backoff, waits above 3 s not honoured) and a short request timeout.
pub fn config_for(kind: ProviderKind, base: &str) -> LlmConfig {
    let env = env_for(kind, base);
    let mut c = LlmConfig::from_env(|k| env.get(k).cloned()).unwrap();
    c.http.retry.base_delay = Duration::from_millis(2);
    c.http.retry.max_delay = Duration::from_millis(10);
    c.http.retry.max_retry_after = Duration::from_secs(3);
    c.http.request_timeout = Duration::from_secs(5);
    c.http.connect_timeout = Duration::from_secs(2);
    c.models_ttl = Duration::from_secs(60);
    c
}

pub fn client(kind: ProviderKind, server: &ProviderServer) -> LlmClient {
    LlmClient::new(config_for(kind, &server.base_url())).unwrap()
}

pub fn testkit_provider(kind: ProviderKind) -> Provider {
    match kind {
        ProviderKind::Anthropic => Provider::Anthropic,
        ProviderKind::OpenaiCompatible => Provider::OpenAi,
        ProviderKind::Google => Provider::Gemini,
        ProviderKind::Ollama => Provider::Ollama,
    }
}

pub fn weather_tool() -> ToolSpec {
    ToolSpec {
        name: "get_weather".into(),
        description: "Look up current weather for a city.".into(),
        input_schema: json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {"city": {"type": "string"}, "units": {"enum": ["C", "F"], "default": "C"}},
            "required": ["city"],
            "additionalProperties": false
        }),
    }
}

pub fn request(messages: Vec<Message>) -> ChatRequest {
    ChatRequest {
        system: Some("You are terse.".into()),
        messages,
        tools: vec![weather_tool()],
        max_tokens: Some(256),
        ..ChatRequest::default()
    }
}

/// The published request schema of a chat call to `kind`, or of an embeddings call.
fn schema_file(kind: ProviderKind, embeddings: bool) -> &'static str {
    match (kind, embeddings) {
        (ProviderKind::Anthropic, _) => "anthropic_create_message.json",
        (ProviderKind::OpenaiCompatible, false) => "openai_create_chat_completion.json",
        (ProviderKind::OpenaiCompatible, true) => "openai_create_embedding.json",
        (ProviderKind::Google, false) => "gemini_generate_content.json",
        (ProviderKind::Google, true) => "gemini_batch_embed_contents.json",
        (ProviderKind::Ollama, false) => "ollama_chat_request.json",
        (ProviderKind::Ollama, true) => "ollama_embed_request.json",
    }
}

fn validator(file: &'static str) -> &'static jsonschema::Validator {
    static V: OnceLock<Mutex<HashMap<&'static str, &'static jsonschema::Validator>>> = OnceLock::new();
    let mut map = V.get_or_init(Default::default).lock().unwrap();
    map.entry(file).or_insert_with(|| {
        let path = format!("{}/tests/data/schemas/{file}", env!("CARGO_MANIFEST_DIR"));
        let schema: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        Box::leak(Box::new(jsonschema::validator_for(&schema).unwrap()))
    })
}

/// Whether a recorded request went to an embeddings endpoint.
pub fn is_embedding_request(r: &RecordedRequest) -> bool {
    r.path.ends_with("/api/embed") || r.path.ends_with("/embeddings") || r.path.ends_with(":batchEmbedContents")
}

/// Every chat and embeddings request the server recorded validates against its provider's published request
/// schema.
pub fn assert_requests_valid(server: &ProviderServer) -> usize {
    let mut n = 0;
    for r in server.requests() {
        if r.method != "POST" {
            continue;
        }
        let kind = match r.provider {
            Some(Provider::Anthropic) => ProviderKind::Anthropic,
            Some(Provider::OpenAi) => ProviderKind::OpenaiCompatible,
            Some(Provider::Gemini) => ProviderKind::Google,
            Some(Provider::Ollama) => ProviderKind::Ollama,
            None => panic!("request to an unknown route: {} {}", r.method, r.path),
        };
        let errors: Vec<String> = validator(schema_file(kind, is_embedding_request(&r)))
            .iter_errors(&r.body)
            .map(|e| format!("{e} at {}", e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{kind} request {} invalid:\n{}\n{:#}", r.path, errors.join("\n"), r.body);
        n += 1;
    }
    n
}

/// The chat requests the server recorded (model lists and probes left out).
pub fn chat_requests(server: &ProviderServer) -> Vec<RecordedRequest> {
    server.requests().into_iter().filter(|r| r.method == "POST").collect()
}

/// Captured log output of this test binary (every level, every test).
#[derive(Clone, Default)]
pub struct LogBuffer(Arc<Mutex<Vec<u8>>>);

impl Write for LogBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Install (once) a global subscriber that records every log line of this binary; returns the buffer.
pub fn capture_logs() -> LogBuffer {
    static BUF: OnceLock<LogBuffer> = OnceLock::new();
    BUF.get_or_init(|| {
        let buf = LogBuffer::default();
        let writer = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::set_global_default(subscriber).unwrap();
        buf
    })
    .clone()
}

impl LogBuffer {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// Panics if any configured secret occurs in `text`.
pub fn assert_no_secret(what: &str, text: &str) {
    for (var, value) in SECRETS {
        assert!(!text.contains(value), "{what} leaks {var}: {text}");
    }
}
