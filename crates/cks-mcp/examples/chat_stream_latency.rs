//! Benchmark: how long after the provider sends the first token of an answer the client of
//! `POST /chat/stream` receives it as a `text_delta` event, over loopback.
//!
//! `cargo run --release -p cks-mcp --example chat_stream_latency -- [turns] [provider]`
//!
//! In one process: `cks-testkit`'s scripted provider server, the real HTTP router and `ai_chat`
//! (the real LLM client, the registry), and a reqwest client reading the event stream. Each turn's
//! answer is paced (its chunks 20 ms apart), so the chunk holding the first token goes out on its
//! own; the provider records when it handed that chunk to its connection, the client when the
//! first `text_delta` event arrived. The difference is the whole path: provider write, loopback,
//! the LLM client's stream decoding and redaction, the turn's observer, the SSE writer, loopback,
//! the client's read. `provider` is `anthropic` (default), `openai_compatible`, `google`,
//! `ollama` or `all`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use cks_chat::{AiChat, AiChatConfig};
use cks_mcp::http::{HttpConfig, serve};
use cks_mcp::server::CksServer;
use cks_runtime::store::memory::MemoryStore;
use cks_runtime::{Runtime, RuntimeConfig};
use cks_testkit::{ProviderServer, Reply};
use cks_tools::{LlmAccess, Registry};

const ANSWER: &str = "Hello from a streamed answer: the graph holds one object.";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let turns: usize = std::env::args().nth(1).map(|n| n.parse()).transpose()?.unwrap_or(200);
    let which = std::env::args().nth(2).unwrap_or_else(|| "anthropic".into());
    let providers: Vec<&str> = match which.as_str() {
        "all" => vec!["anthropic", "openai_compatible", "google", "ollama"],
        one => vec![one],
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    println!("first token sent by the provider -> first text_delta received by the client ({turns} turns each)");
    println!("| provider | median | p90 | p99 | max |");
    println!("|---|---|---|---|---|");
    for provider in providers {
        let mut latencies = measure(provider, turns).await?;
        latencies.sort();
        let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q).round() as usize];
        let ms = |d: Duration| format!("{:.2} ms", d.as_secs_f64() * 1000.0);
        println!(
            "| {provider} | {} | {} | {} | {} |",
            ms(at(0.5)),
            ms(at(0.9)),
            ms(at(0.99)),
            ms(*latencies.last().unwrap())
        );
    }
    Ok(())
}

async fn measure(provider: &str, turns: usize) -> anyhow::Result<Vec<Duration>> {
    let upstream = ProviderServer::start().await;
    let base = upstream.base_url();
    let env: HashMap<String, String> = [
        ("CKS_LLM_PROVIDER", provider.to_owned()),
        ("CKS_LLM_MAX_RETRIES", "0".to_owned()),
        ("ANTHROPIC_API_KEY", "sk-ant-bench".to_owned()),
        ("ANTHROPIC_BASE_URL", base.clone()),
        ("CKS_OPENAI_API_KEY", "sk-openai-bench".to_owned()),
        ("CKS_OPENAI_BASE_URL", format!("{base}/v1")),
        ("CKS_GOOGLE_API_KEY", "google-bench".to_owned()),
        ("CKS_GOOGLE_BASE_URL", format!("{base}/v1beta")),
        ("CKS_OLLAMA_HOST", base.clone()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let client = cks_llm::LlmClient::from_env(|name| env.get(name).cloned())?;
    let runtime = Arc::new(Runtime::new(Arc::new(MemoryStore::new()), RuntimeConfig::default()));
    let mut registry = Registry::standard();
    registry.register(Arc::new(AiChat::new(AiChatConfig::default())));
    let server = CksServer::new(runtime, Arc::new(registry), LlmAccess::Ready(client));
    let graph = json!({"objects": [{"identity": {"id": "a", "type": "T", "name": "A"}}]}).to_string();
    let created = server.registry.call("validate_knowledge", json!({"json_data": graph}), &server.context()).await?;
    let session = created["session_id"].as_str().unwrap_or_default().to_owned();

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let config = HttpConfig {
        token: None,
        allowed_origins: Vec::new(),
        bind: Some(addr),
        max_body_bytes: 1 << 20,
        oauth: None,
        keys: None,
        keys_only: false,
        issuer: None,
    };
    tokio::spawn(serve(listener, server, config));
    let url = format!("http://{addr}/chat/stream");
    let http = reqwest::Client::builder().pool_max_idle_per_host(1).build()?;
    let body = json!({"session_id": session, "prompt": "hello"}).to_string();

    let mut latencies = Vec::with_capacity(turns);
    for turn in 0..turns + 5 {
        upstream.clear_requests();
        upstream.push(Reply::text(ANSWER).paced(Duration::from_millis(20)));
        let mut response = http.post(&url).body(body.clone()).send().await?;
        let mut seen = String::new();
        let mut received = None;
        while let Some(chunk) = response.chunk().await? {
            seen.push_str(&String::from_utf8_lossy(&chunk));
            if received.is_none() && seen.contains("event: text_delta") {
                received = Some(Instant::now());
            }
        }
        anyhow::ensure!(seen.contains("event: done"), "turn {turn} did not finish: {seen}");
        let received = received.ok_or_else(|| anyhow::anyhow!("no text_delta in turn {turn}: {seen}"))?;
        let requests = upstream.requests();
        let sent = requests
            .iter()
            .find(|r| r.method == "POST")
            .and_then(|r| r.sent.iter().find(|(_, chunk)| chunk.contains("Hello")))
            .map(|(at, _)| *at)
            .ok_or_else(|| anyhow::anyhow!("the provider recorded no first token in turn {turn}"))?;
        // The first turns warm connections and caches.
        if turn >= 5 {
            latencies.push(received.saturating_duration_since(sent));
        }
    }
    Ok(latencies)
}
