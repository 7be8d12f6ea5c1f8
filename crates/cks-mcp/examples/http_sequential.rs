//! Benchmark: sequential `tools/call` requests over streamable HTTP (one connection), reporting
//! per-call latency: in a 2025-11-25 session (after `initialize`), or as self-contained requests
//! of the stateless 2026-07-28 revision (`--stateless`). Against the real router served in-process
//! on 127.0.0.1 over an in-memory store, or against a running server (`--url`: one replica, or a
//! load balancer in front of several).
//!
//! `cargo run --release -p cks-mcp --example http_sequential -- [calls] [--stateless] [--url URL]
//! [--versus URL]`
//!
//! With `--versus`, the calls alternate between the two servers, one connection to each, and the
//! second's rate is also given as a share of the first's: both see the same moments of a busy
//! machine, so the share holds still where two runs one after the other would drift apart.
//!
//! Each call is a small request answered by a small response (an SSE stream in a session, JSON
//! for a stateless request), the pattern where a server that leaves Nagle's algorithm on stalls on
//! the client's delayed ACK.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use cks_mcp::http::{HttpConfig, serve};
use cks_mcp::server::CksServer;
use cks_runtime::store::memory::MemoryStore;
use cks_runtime::{Runtime, RuntimeConfig};
use cks_tools::Registry;

const ACCEPT: &str = "application/json, text/event-stream";
const STATELESS: &str = "2026-07-28";
const SESSION: &str = "2025-11-25";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let calls: usize = args.iter().find_map(|a| a.parse().ok()).unwrap_or(200);
    let stateless = args.iter().any(|a| a == "--stateless");
    let given = args.iter().position(|a| a == "--url").and_then(|i| args.get(i + 1)).cloned();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let url = match given {
        Some(url) => url,
        None => {
            let runtime = Arc::new(Runtime::new(Arc::new(MemoryStore::new()), RuntimeConfig::default()));
            let server = CksServer::new(runtime, Arc::new(Registry::standard()), cks_tools::LlmAccess::Absent);
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
            format!("http://{addr}/mcp")
        }
    };

    let versus = args.iter().position(|a| a == "--versus").and_then(|i| args.get(i + 1)).cloned();
    let mut targets = vec![Target::open(url, stateless).await?];
    if let Some(url) = versus {
        targets.push(Target::open(url, stateless).await?);
    }
    let graph = json!({"objects": [{"identity": {"id": "a", "type": "T", "name": "A"}}]}).to_string();
    for id in 1..=calls {
        for target in &mut targets {
            target.call(id, &graph).await?;
        }
    }
    let kind = if stateless { "stateless 2026-07-28" } else { "2025-11-25 session" };
    let rates: Vec<f64> = targets.iter().map(|target| target.report(kind)).collect();
    if let [first, second] = rates[..] {
        println!("second / first: {:.1} %", 100.0 * second / first);
    }
    Ok(())
}

/// One server called: its connection, its session if any, the calls' latencies.
struct Target {
    url: String,
    client: reqwest::Client,
    session: Option<String>,
    latencies: Vec<Duration>,
}

impl Target {
    async fn open(url: String, stateless: bool) -> anyhow::Result<Target> {
        let client = reqwest::Client::builder().pool_max_idle_per_host(1).build()?;
        let session = if stateless { None } else { Some(open_session(&client, &url).await?) };
        let target = Target { url, client, session, latencies: Vec::new() };
        if target.session.is_some() {
            target.post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).send().await?.bytes().await?;
        }
        Ok(target)
    }

    fn post(&self, body: Value) -> reqwest::RequestBuilder {
        let request = self.client.post(&self.url).header("accept", ACCEPT);
        match &self.session {
            Some(session) => {
                request.header("mcp-session-id", session).header("mcp-protocol-version", SESSION).json(&body)
            }
            None => request
                .header("mcp-protocol-version", STATELESS)
                .header("mcp-method", "tools/call")
                .header("mcp-name", "validate_knowledge")
                .json(&body),
        }
    }

    /// One `validate_knowledge` call, timed.
    async fn call(&mut self, id: usize, graph: &str) -> anyhow::Result<()> {
        let mut call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "validate_knowledge", "arguments": {"json_data": graph}}});
        if self.session.is_none() {
            call["params"]["_meta"] = json!({
                "io.modelcontextprotocol/protocolVersion": STATELESS,
                "io.modelcontextprotocol/clientCapabilities": {},
            });
        }
        let started = Instant::now();
        let body = self.post(call).send().await?.text().await?;
        self.latencies.push(started.elapsed());
        anyhow::ensure!(body.contains("\"result\""), "call {id} to {} failed: {body}", self.url);
        Ok(())
    }

    /// Prints the calls' rate and latencies; returns the rate.
    fn report(&self, kind: &str) -> f64 {
        let mut latencies = self.latencies.clone();
        latencies.sort();
        let calls = latencies.len();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let total: Duration = latencies.iter().sum();
        let slow = latencies.iter().filter(|d| **d >= Duration::from_millis(20)).count();
        let rate = calls as f64 / total.as_secs_f64();
        println!(
            "{calls} sequential streamable-HTTP tools/call ({kind}) to {}: {rate:.0} calls/s, mean {:.2} ms, median {:.2} ms, p90 {:.2} ms, max {:.2} ms, {slow} calls ≥ 20 ms",
            self.url,
            ms(total / calls as u32),
            ms(latencies[calls / 2]),
            ms(latencies[calls * 9 / 10]),
            ms(latencies[calls - 1]),
        );
        rate
    }
}

/// Opens a 2025-11-25 session; returns its id.
async fn open_session(client: &reqwest::Client, url: &str) -> anyhow::Result<String> {
    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": SESSION, "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}});
    let response = client.post(url).header("accept", ACCEPT).json(&initialize).send().await?;
    let session = response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| anyhow::anyhow!("no mcp-session-id in the initialize answer"))?
        .to_owned();
    response.bytes().await?;
    Ok(session)
}
