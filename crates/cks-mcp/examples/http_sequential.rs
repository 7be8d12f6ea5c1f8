//! Benchmark: sequential `tools/call` requests over streamable HTTP (one session, one connection),
//! against the real router served in-process on 127.0.0.1, reporting per-call latency.
//!
//! `cargo run --release -p cks-mcp --example http_sequential -- [calls]`
//!
//! Each call is a small request answered by a small SSE response, the pattern where a server
//! that leaves Nagle's algorithm on stalls on the client's delayed ACK.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use cks_mcp::http::{HttpConfig, serve};
use cks_mcp::server::CksServer;
use cks_runtime::store::memory::MemoryStore;
use cks_runtime::{Runtime, RuntimeConfig};
use cks_tools::Registry;

const ACCEPT: &str = "application/json, text/event-stream";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let calls: usize = std::env::args().nth(1).map(|n| n.parse()).transpose()?.unwrap_or(200);
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = Arc::new(Runtime::new(Arc::new(MemoryStore::new()), RuntimeConfig::default()));
    let server = CksServer::new(runtime, Arc::new(Registry::standard()), cks_tools::LlmAccess::Absent);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let config = HttpConfig { token: None, allowed_origins: Vec::new(), bind: Some(addr), max_body_bytes: 1 << 20 };
    tokio::spawn(serve(listener, server, config));

    let url = format!("http://{addr}/mcp");
    let client = reqwest::Client::builder().pool_max_idle_per_host(1).build()?;
    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}});
    let response = client.post(&url).header("accept", ACCEPT).json(&initialize).send().await?;
    let session = response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| anyhow::anyhow!("no mcp-session-id in the initialize answer"))?
        .to_owned();
    response.bytes().await?;
    let post = |body: Value| {
        client
            .post(&url)
            .header("accept", ACCEPT)
            .header("mcp-session-id", &session)
            .header("mcp-protocol-version", "2025-06-18")
            .json(&body)
    };
    post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).send().await?.bytes().await?;

    let graph = json!({"objects": [{"identity": {"id": "a", "type": "T", "name": "A"}}]}).to_string();
    let mut latencies = Vec::with_capacity(calls);
    for id in 1..=calls {
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "validate_knowledge", "arguments": {"json_data": graph}}});
        let started = Instant::now();
        let body = post(call).send().await?.text().await?;
        latencies.push(started.elapsed());
        anyhow::ensure!(body.contains("\"result\""), "call {id} failed: {body}");
    }
    latencies.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let total: Duration = latencies.iter().sum();
    let slow = latencies.iter().filter(|d| **d >= Duration::from_millis(20)).count();
    println!(
        "{calls} sequential streamable-HTTP tools/call: mean {:.2} ms, median {:.2} ms, p90 {:.2} ms, max {:.2} ms, {slow} calls ≥ 20 ms",
        ms(total / calls as u32),
        ms(latencies[calls / 2]),
        ms(latencies[calls * 9 / 10]),
        ms(latencies[calls - 1]),
    );
    Ok(())
}
