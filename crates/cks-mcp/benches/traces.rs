//! What traces add to a tool call: one cheap call (`list_versions` of a missing session, a
//! business error) through the HTTP router's bare JSON-RPC form, in process, under the server's
//! own subscriber (its log line written to nowhere), with traces off and on; on, the exporter
//! sends its batches to a local sink, as it would to a collector. `_with_parent`: the request
//! names its caller's trace (`traceparent`). `no_subscriber`: no log and no traces at all;
//! `log_before_traces`: the log's subscriber as it was before traces existed.
//! The goals: on adds ≤ 5 µs a call (p50); off adds nothing measurable.
//!
//! Run: `cargo bench -p cks-mcp --bench traces`.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, header};
use divan::Bencher;
use tower::ServiceExt as _;

use cks_mcp::http::{HttpConfig, router};
use cks_mcp::server::CksServer;
use cks_runtime::store::memory::MemoryStore;
use cks_runtime::{Runtime, RuntimeConfig};
use cks_tools::Registry;

fn main() {
    divan::main();
}

const CALL: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"list_versions","arguments":{"session_id":"missing"}}}"#;
const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// A server's router over an in-memory store, and the runtimes around it: the calls run on the
/// bench's thread; the sink and the exporter's sends on a worker of their own, as in a server.
struct Bed {
    calls: tokio::runtime::Runtime,
    app: axum::Router,
    background: tokio::runtime::Runtime,
}

impl Bed {
    fn new() -> Bed {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let calls = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let background = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let app = calls.block_on(async {
            let runtime = Arc::new(Runtime::new(Arc::new(MemoryStore::new()), RuntimeConfig::default()));
            let server = CksServer::new(runtime, Arc::new(Registry::standard()), cks_tools::LlmAccess::Absent);
            let config = HttpConfig {
                token: None,
                allowed_origins: Vec::new(),
                bind: Some("127.0.0.1:8080".parse().unwrap()),
                max_body_bytes: 1 << 20,
                oauth: None,
                keys: None,
                keys_only: false,
                issuer: None,
            };
            router(server, config)
        });
        Bed { calls, app, background }
    }

    /// A collector that takes every export and answers as one does.
    fn sink(&self) -> String {
        let listener = self.background.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let app = axum::Router::new().fallback(|_body: axum::body::Bytes| async { "" });
        self.background.spawn(async move { axum::serve(listener, app).await });
        url
    }

    /// The server's subscriber for `env` (the log discarded).
    fn subscriber(&self, env: &[(&str, String)]) -> (tracing::Dispatch, cks_mcp::telemetry::Telemetry) {
        let env: HashMap<String, String> = env.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect();
        let writer = tracing_subscriber::fmt::writer::BoxMakeWriter::new(std::io::sink);
        cks_mcp::telemetry::subscriber(&env, self.background.handle(), writer).unwrap()
    }

    fn call(&self, parent: bool) {
        let mut request = Request::post("/mcp")
            .header(header::HOST, "127.0.0.1:8080")
            .header(header::CONTENT_TYPE, "application/json");
        if parent {
            request = request.header("traceparent", PARENT);
        }
        let request = request.body(Body::from(CALL)).unwrap();
        let response = self.calls.block_on(self.app.clone().oneshot(request)).unwrap();
        assert!(response.status().is_success());
    }

    fn run(&self, bencher: Bencher, dispatch: Option<&tracing::Dispatch>, parent: bool) {
        match dispatch {
            Some(dispatch) => tracing::dispatcher::with_default(dispatch, || bencher.bench_local(|| self.call(parent))),
            None => bencher.bench_local(|| self.call(parent)),
        }
    }
}

#[divan::bench(sample_count = 200, sample_size = 50)]
fn no_subscriber(bencher: Bencher) {
    Bed::new().run(bencher, None, false);
}

/// The log as it was before traces: the same JSON lines under one global filter.
#[divan::bench(sample_count = 200, sample_size = 50)]
fn log_before_traces(bencher: Bencher) {
    let bed = Bed::new();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .with_writer(std::io::sink)
        .with_env_filter(tracing_subscriber::EnvFilter::new("warn,cks_tool_call=info"))
        .with_current_span(true)
        .with_span_list(false)
        .finish();
    bed.run(bencher, Some(&tracing::Dispatch::new(subscriber)), false);
}

#[divan::bench(sample_count = 200, sample_size = 50)]
fn traces_off(bencher: Bencher) {
    let bed = Bed::new();
    let (dispatch, _telemetry) = bed.subscriber(&[]);
    bed.run(bencher, Some(&dispatch), false);
}

#[divan::bench(sample_count = 200, sample_size = 50)]
fn traces_off_with_parent(bencher: Bencher) {
    let bed = Bed::new();
    let (dispatch, _telemetry) = bed.subscriber(&[]);
    bed.run(bencher, Some(&dispatch), true);
}

#[divan::bench(sample_count = 200, sample_size = 50)]
fn traces_on(bencher: Bencher) {
    let bed = Bed::new();
    let (dispatch, telemetry) = bed.subscriber(&[("OTEL_EXPORTER_OTLP_ENDPOINT", bed.sink())]);
    bed.run(bencher, Some(&dispatch), false);
    telemetry.finish();
}

#[divan::bench(sample_count = 200, sample_size = 50)]
fn traces_on_with_parent(bencher: Bencher) {
    let bed = Bed::new();
    let (dispatch, telemetry) = bed.subscriber(&[("OTEL_EXPORTER_OTLP_ENDPOINT", bed.sink())]);
    bed.run(bencher, Some(&dispatch), true);
    telemetry.finish();
}
