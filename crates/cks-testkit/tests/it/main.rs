//! Integration tests of the provider server, driven over HTTP with a plain `reqwest` client.
//!
//! One test binary (to keep linking cheap); one module per wire format plus `server` for what they share.

mod anthropic;
mod embeddings;
mod gemini;
mod ollama;
mod openai;
mod server;

use cks_testkit::ProviderServer;
use serde_json::Value;

/// Provider fixtures (see `tests/data/README.md`).
pub(crate) fn fixture(name: &str) -> Value {
    let text = match name {
        "anthropic_request_turn1" => include_str!("../data/anthropic_request_turn1.json"),
        "anthropic_request_turn2" => include_str!("../data/anthropic_request_turn2.json"),
        "openai_request_turn1" => include_str!("../data/openai_request_turn1.json"),
        "openai_request_turn2" => include_str!("../data/openai_request_turn2.json"),
        "gemini_request_turn1" => include_str!("../data/gemini_request_turn1.json"),
        "gemini_request_turn2" => include_str!("../data/gemini_request_turn2.json"),
        "ollama_request_turn1" => include_str!("../data/ollama_request_turn1.json"),
        "ollama_request_turn2" => include_str!("../data/ollama_request_turn2.json"),
        "ollama_tags" => include_str!("../data/ollama_tags.json"),
        other => panic!("no fixture {other}"),
    };
    serde_json::from_str(text).expect("fixture is JSON")
}

/// A plain-http client, one per test thread (each `#[tokio::test]` runs on its own thread and runtime; building
/// a Client is slow, so requests within a test share one, and its pooled connections).
pub(crate) fn client() -> reqwest::Client {
    thread_local! {
        static CLIENT: reqwest::Client = fresh_client();
    }
    CLIENT.with(Clone::clone)
}

/// A new client. reqwest is built with `rustls-no-provider`, and building any Client (even for plain http)
/// panics unless a rustls crypto provider is installed, so install ring's first (a second install is a no-op).
pub(crate) fn fresh_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().no_proxy().build().expect("plain-http client")
}

/// A response read to the end.
#[derive(Debug)]
pub(crate) struct Got {
    pub(crate) status: u16,
    pub(crate) headers: reqwest::header::HeaderMap,
    pub(crate) text: String,
}

impl Got {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text))
    }

    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// POSTs a JSON body with the given headers.
pub(crate) async fn post(server: &ProviderServer, path: &str, headers: &[(&str, &str)], body: &Value) -> Got {
    try_post(server, path, headers, body).await.expect("request succeeds at the HTTP level")
}

pub(crate) async fn try_post(
    server: &ProviderServer,
    path: &str,
    headers: &[(&str, &str)],
    body: &Value,
) -> Result<Got, reqwest::Error> {
    let mut req = client().post(format!("{}{path}", server.base_url())).json(body);
    for (n, v) in headers {
        req = req.header(*n, *v);
    }
    let resp = req.send().await?;
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let text = resp.text().await?;
    Ok(Got { status, headers, text })
}

pub(crate) async fn get(server: &ProviderServer, path: &str, headers: &[(&str, &str)]) -> Got {
    let mut req = client().get(format!("{}{path}", server.base_url()));
    for (n, v) in headers {
        req = req.header(*n, *v);
    }
    let resp = req.send().await.expect("GET succeeds");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let text = resp.text().await.expect("body");
    Got { status, headers, text }
}

/// One SSE event: its `event:` name (if any) and its data (lines joined with `\n`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sse {
    pub(crate) event: Option<String>,
    pub(crate) data: String,
}

impl Sse {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or_else(|e| panic!("SSE data not JSON ({e}): {}", self.data))
    }
}

/// Parses an SSE body line by line (LF or CRLF), skipping `:` comment lines.
pub(crate) fn parse_sse(body: &str) -> Vec<Sse> {
    let mut out = Vec::new();
    let mut event = None;
    let mut data: Vec<String> = Vec::new();
    for line in body.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.is_empty() {
            if !data.is_empty() || event.is_some() {
                out.push(Sse { event: event.take(), data: data.join("\n") });
                data.clear();
            }
        } else if line.starts_with(':') {
            continue;
        } else if let Some(v) = line.strip_prefix("event:") {
            event = Some(v.trim_start().to_owned());
        } else if let Some(v) = line.strip_prefix("data:") {
            data.push(v.strip_prefix(' ').unwrap_or(v).to_owned());
        } else {
            panic!("unexpected SSE line {line:?}");
        }
    }
    assert!(data.is_empty() && event.is_none(), "SSE body must end with a blank line: {body:?}");
    out
}

/// Parses an NDJSON body: every line is one JSON value.
pub(crate) fn parse_ndjson(body: &str) -> Vec<Value> {
    assert!(body.ends_with('\n'), "NDJSON ends with a newline");
    body.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("line not JSON ({e}): {l}"))).collect()
}
