//! One real HTTP server per test: the router on 127.0.0.1:0 over an in-memory store, and the bare
//! JSON-RPC form of a tool call that cks-studio sends.
#![allow(dead_code)] // each test binary uses its own part

pub(crate) mod stdio;

/// The four providers, as `CKS_LLM_PROVIDER` names them.
pub(crate) const PROVIDERS: [&str; 4] = ["anthropic", "openai_compatible", "google", "ollama"];

/// The server's environment for `provider` answering at `base` (a cks-testkit provider server),
/// with a fake key and no retries.
pub(crate) fn provider_env(provider: &str, base: &str) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("CKS_LLM_PROVIDER", provider.to_owned()),
        ("CKS_LLM_MAX_RETRIES", "0".into()),
        ("CKS_MCP_LOG", "error".into()),
    ];
    match provider {
        "anthropic" => {
            env.push(("ANTHROPIC_API_KEY", "sk-ant-e2e-secret".into()));
            env.push(("ANTHROPIC_BASE_URL", base.to_owned()));
        }
        "openai_compatible" => {
            env.push(("CKS_OPENAI_API_KEY", "sk-openai-e2e-secret".into()));
            env.push(("CKS_OPENAI_BASE_URL", format!("{base}/v1")));
        }
        "google" => {
            env.push(("CKS_GOOGLE_API_KEY", "google-e2e-secret".into()));
            env.push(("CKS_GOOGLE_BASE_URL", format!("{base}/v1beta")));
        }
        _ => env.push(("CKS_OLLAMA_HOST", base.to_owned())),
    }
    env
}

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
        oauth: None,
        keys: None,
        keys_only: false,
        issuer: None,
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
