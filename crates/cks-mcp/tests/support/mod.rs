//! One real HTTP server per test: the router on 127.0.0.1:0 over an in-memory store, and the bare
//! JSON-RPC form of a tool call that cks-studio sends.
#![allow(dead_code)] // each test binary uses its own part

pub(crate) mod stdio;

use serde_json::{Value, json};
use std::sync::Arc;

use cks_mcp::http::{HttpConfig, router};
use cks_mcp::server::CksServer;
use cks_runtime::store::memory::MemoryStore;
use cks_runtime::{Runtime, RuntimeConfig};
use cks_tools::Registry;

pub(crate) struct TestServer {
    pub(crate) base: String,
    pub(crate) client: reqwest::Client,
}

pub(crate) async fn start(token: Option<&str>, max_body_bytes: usize) -> TestServer {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = Arc::new(Runtime::new(Arc::new(MemoryStore::new()), RuntimeConfig::default()));
    let server = CksServer::new(runtime, Arc::new(Registry::standard()), cks_tools::LlmAccess::Absent);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = HttpConfig {
        token: token.map(str::to_owned),
        allowed_origins: vec!["https://studio.example.com".into()],
        bind: Some(addr),
        max_body_bytes,
    };
    tokio::spawn(async move { axum::serve(listener, router(server, config)).await });
    TestServer { base: format!("http://{addr}"), client: reqwest::Client::new() }
}

impl TestServer {
    pub(crate) fn post(&self, body: &Value) -> reqwest::RequestBuilder {
        self.client.post(format!("{}/mcp", self.base)).json(body)
    }

    /// A tool call as cks-studio makes it; returns the tool's result (the JSON in its first content block).
    pub(crate) async fn call(&self, name: &str, arguments: Value) -> Value {
        let response = self.post(&tool_call(name, arguments)).send().await.unwrap();
        assert_eq!(response.status(), 200, "{name}");
        let reply: Value = response.json().await.unwrap();
        assert!(reply.get("error").is_none(), "{name}: {reply}");
        text_result(&reply)
    }
}

pub(crate) fn tool_call(name: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": arguments}})
}

pub(crate) fn text_result(reply: &Value) -> Value {
    serde_json::from_str(reply["result"]["content"][0]["text"].as_str().unwrap()).unwrap()
}
