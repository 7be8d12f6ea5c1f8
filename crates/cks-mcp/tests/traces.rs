//! Traces over OTLP/HTTP from the real binary, received by a server that decodes each export with
//! the official protobuf definitions (`opentelemetry-proto`): an `ai_chat` turn is one trace under
//! the parent its `_meta` names, with the model's call, the tool it ran and that tool's commit
//! inside; a search's query embedding is inside its call; over HTTP the headers name the parent
//! (and `_meta` wins over them); nothing exported holds a key, a prompt, an answer or a graph's
//! content. Without an endpoint nothing is sent and no log line names a trace. The JSON log
//! lines of a traced call carry its trace's ids.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, Uri, header};
use prost::Message as _;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use cks_testkit::{ProviderServer, Reply, ToolCall};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::any_value;

/// The fake key the model's provider is given: it must appear nowhere in what is exported.
const KEY: &str = "sk-trace-KEY-7f3a9c";
/// The caller's trace: the parent `_meta` names.
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";

fn traceparent(trace: &str, parent: &str) -> String {
    format!("00-{trace}-{parent}-01")
}

// ----- the receiver -----

/// One export as it arrived.
#[derive(Debug, Clone)]
struct Export {
    path: String,
    content_type: String,
    body: Vec<u8>,
}

/// An OTLP/HTTP receiver on 127.0.0.1 keeping every request; it answers as a collector does.
#[derive(Clone, Default)]
struct Receiver {
    exports: Arc<Mutex<Vec<Export>>>,
}

impl Receiver {
    async fn start() -> (Receiver, String) {
        let receiver = Receiver::default();
        let kept = receiver.clone();
        let app = axum::Router::new().fallback(move |uri: Uri, headers: HeaderMap, body: Bytes| {
            let kept = kept.clone();
            async move {
                let content_type =
                    headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
                kept.exports.lock().unwrap().push(Export {
                    path: uri.path().to_owned(),
                    content_type,
                    body: body.to_vec(),
                });
                (
                    [(header::CONTENT_TYPE, "application/x-protobuf")],
                    ExportTraceServiceResponse::default().encode_to_vec(),
                )
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (receiver, base)
    }

    fn exports(&self) -> Vec<Export> {
        self.exports.lock().unwrap().clone()
    }

    /// Every span received, decoded.
    fn spans(&self) -> Vec<Exported> {
        let mut spans = Vec::new();
        for export in self.exports() {
            assert_eq!(export.path, "/v1/traces");
            assert_eq!(export.content_type, "application/x-protobuf");
            let request = ExportTraceServiceRequest::decode(export.body.as_slice()).expect("an OTLP trace export");
            for resource in request.resource_spans {
                let service = resource
                    .resource
                    .as_ref()
                    .map(|r| attributes(&r.attributes))
                    .and_then(|a| a.get("service.name").cloned())
                    .unwrap_or_default();
                for scope in resource.scope_spans {
                    for span in scope.spans {
                        spans.push(Exported {
                            name: span.name.clone(),
                            trace_id: hex(&span.trace_id),
                            span_id: hex(&span.span_id),
                            parent: hex(&span.parent_span_id),
                            trace_state: span.trace_state.clone(),
                            attributes: attributes(&span.attributes),
                            failed: span.status.as_ref().is_some_and(|s| s.code == 2),
                            service: service.clone(),
                        });
                    }
                }
            }
        }
        spans
    }
}

/// A span as exported: names, ids in hex (a root's parent is empty), attributes as text.
#[derive(Debug, Clone)]
struct Exported {
    name: String,
    trace_id: String,
    span_id: String,
    parent: String,
    trace_state: String,
    attributes: BTreeMap<String, String>,
    failed: bool,
    service: String,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn attributes(list: &[opentelemetry_proto::tonic::common::v1::KeyValue]) -> BTreeMap<String, String> {
    list.iter()
        .map(|kv| {
            let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(any_value::Value::StringValue(text)) => text.clone(),
                Some(any_value::Value::IntValue(n)) => n.to_string(),
                Some(any_value::Value::BoolValue(b)) => b.to_string(),
                Some(any_value::Value::DoubleValue(x)) => x.to_string(),
                other => format!("{other:?}"),
            };
            (kv.key.clone(), value)
        })
        .collect()
}

/// The one span named `name`.
fn one<'a>(spans: &'a [Exported], name: &str) -> &'a Exported {
    let found: Vec<&Exported> = spans.iter().filter(|s| s.name == name).collect();
    assert_eq!(found.len(), 1, "spans named {name}: {:#?}", spans.iter().map(|s| &s.name).collect::<Vec<_>>());
    found[0]
}

// ----- the server -----

/// The real binary over stdio, its stderr in a file; [`Server::finish`] closes its input and waits
/// for it to exit (sending its last spans on the way).
struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Lines<BufReader<ChildStdout>>,
    next_id: u64,
    stderr: PathBuf,
}

impl Server {
    async fn start(dir: &Path, env: &[(&str, String)], args: &[String]) -> Server {
        let stderr = dir.join("stderr.log");
        let mut command = Command::new(env!("CARGO_BIN_EXE_cks-mcp"));
        command
            .args(args)
            .env("CKS_MCP_DATA_DIR", dir)
            .env("CKS_MCP_DB_PATH", ":memory:")
            .env("CKS_SWEEPERS", "off")
            .env_remove("CKS_MCP_LOG")
            .env_remove("CKS_MCP_LOG_FORMAT")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_HEADERS")
            .env_remove("OTEL_SERVICE_NAME")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .kill_on_drop(true);
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command.spawn().unwrap();
        let stdin = child.stdin.take();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut server = Server { child, stdin, lines, next_id: 0, stderr };
        let init = server
            .request(
                "initialize",
                json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "traces", "version": "1"}}),
            )
            .await;
        assert_eq!(init["result"]["serverInfo"]["name"], "cks-mcp", "{init}");
        server.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
        server
    }

    async fn send(&mut self, message: Value) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(format!("{message}\n").as_bytes()).await.unwrap();
        stdin.flush().await.unwrap();
    }

    async fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).await;
        loop {
            let line = tokio::time::timeout(Duration::from_secs(60), self.lines.next_line())
                .await
                .expect("the server did not answer")
                .unwrap()
                .expect("the server closed its output");
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["id"] == id {
                return message;
            }
        }
    }

    /// A tool call with `meta` as its `_meta`; its result's JSON.
    async fn call(&mut self, tool: &str, arguments: Value, meta: Option<Value>) -> Value {
        let mut params = json!({"name": tool, "arguments": arguments});
        if let Some(meta) = meta {
            params["_meta"] = meta;
        }
        let reply = self.request("tools/call", params).await;
        let text = reply["result"]["content"][0]["text"].as_str().unwrap_or_else(|| panic!("{reply}"));
        serde_json::from_str(text).unwrap()
    }

    /// Closes stdin, waits for the exit, and answers stderr.
    async fn finish(mut self) -> String {
        drop(self.stdin.take());
        let status = tokio::time::timeout(Duration::from_secs(60), self.child.wait())
            .await
            .expect("the server did not exit when its input closed")
            .unwrap();
        assert!(status.success(), "{status}");
        std::fs::read_to_string(&self.stderr).unwrap()
    }
}

/// The JSON log lines of tool calls (target `cks_tool_call`); every line must parse.
fn call_lines(stderr: &str) -> Vec<Value> {
    stderr
        .lines()
        .filter(|line| line.starts_with('{'))
        .map(|line| serde_json::from_str::<Value>(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .filter(|line| line["target"] == "cks_tool_call")
        .collect()
}

fn graph() -> String {
    json!({"objects": [
        {"identity": {"id": "auto", "type": "Thing", "name": "Automobile"}, "structure": {"content": "vehicle"}},
        {"identity": {"id": "fruit", "type": "Thing", "name": "Banana"}, "structure": {"content": "yellow fruit"}}
    ]})
    .to_string()
}

// ----- the tests -----

#[tokio::test]
async fn an_ai_chat_turn_is_one_trace_under_the_parent_its_meta_names() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (receiver, collector) = Receiver::start().await;
    let provider = ProviderServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let model = tempfile::tempdir().unwrap();
    cks_embed::static_model::write_sample(model.path(), "tiny-trace").unwrap();
    let env = [
        ("CKS_LLM_PROVIDER", "openai_compatible".to_owned()),
        ("CKS_OPENAI_API_KEY", KEY.to_owned()),
        ("CKS_OPENAI_BASE_URL", format!("{}/v1", provider.base_url())),
        ("CKS_LLM_MAX_RETRIES", "0".to_owned()),
        ("CKS_EMBEDDING_PROVIDER", "local".to_owned()),
        ("CKS_EMBEDDING_MODEL", model.path().display().to_string()),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", collector),
        ("OTEL_SERVICE_NAME", "cks-mcp-under-test".to_owned()),
    ];
    let mut server = Server::start(dir.path(), &env, &[]).await;
    let created = server.call("validate_knowledge", json!({"json_data": graph()}), None).await;
    let session = created["session_id"].as_str().unwrap_or_else(|| panic!("{created}")).to_owned();

    // The model asks for one tool call, which commits, then answers.
    let add = json!([{"type": "add_object", "identity": {"id": "note-CONTENT-33", "type": "Note", "name": "n"}}]);
    provider.push(Reply::ToolCalls(vec![ToolCall::new("evolve_knowledge", json!({"operations": add}))]));
    provider.push(Reply::Text("ANSWER-TEXT-55".into()));
    let meta = json!({"traceparent": traceparent(TRACE, PARENT), "tracestate": "caller=1"});
    let chat =
        server.call("ai_chat", json!({"session_id": session, "prompt": "add a note PROMPT-TEXT-91"}), Some(meta)).await;
    assert_eq!(chat["reply"], "ANSWER-TEXT-55", "{chat}");
    assert_eq!(chat["tool_calls"][0]["is_error"], false, "{chat}");

    // A search embeds its query inside its own call, in the trace its `_meta` names.
    let search_trace = "0af7651916cd43dd8448eb211c80319c";
    let meta = json!({"traceparent": traceparent(search_trace, "b7ad6b7169203331")});
    let found = server.call("search_semantic", json!({"session_id": session, "query": "car"}), Some(meta)).await;
    assert!(found.get("error").is_none(), "{found}");
    let stderr = server.finish().await;

    let spans = receiver.spans();
    assert!(spans.iter().all(|s| s.service == "cks-mcp-under-test"), "{spans:#?}");

    // The call's span: a child of the caller's, in the caller's trace.
    let turn = one(&spans, "tools/call ai_chat");
    assert_eq!((turn.trace_id.as_str(), turn.parent.as_str()), (TRACE, PARENT), "{turn:#?}");
    assert_eq!(turn.trace_state, "caller=1");
    assert_eq!(turn.attributes["gen_ai.tool.name"], "ai_chat");
    assert!(!turn.failed);
    let in_turn: Vec<&Exported> = spans.iter().filter(|s| s.trace_id == TRACE).collect();
    // The model's calls (one asked for the tool, one answered), under the call.
    let llm: Vec<&&Exported> = in_turn.iter().filter(|s| s.name.starts_with("chat ")).collect();
    assert_eq!(llm.len(), 2, "{in_turn:#?}");
    for call in &llm {
        assert_eq!(call.parent, turn.span_id, "{call:#?}");
        assert_eq!(call.attributes["gen_ai.provider.name"], "openai_compatible");
        assert!(call.attributes.contains_key("gen_ai.request.model"), "{call:#?}");
        assert!(call.attributes["gen_ai.usage.output_tokens"].parse::<u64>().unwrap() > 0, "{call:#?}");
    }
    // The tool the model asked for, under the call, and its commit under it.
    let tool = one(&spans, "execute_tool evolve_knowledge");
    assert_eq!((tool.trace_id.as_str(), tool.parent.as_str()), (TRACE, turn.span_id.as_str()), "{tool:#?}");
    let commits: Vec<&&Exported> = in_turn.iter().filter(|s| s.name == "commit").collect();
    assert_eq!(commits.len(), 1, "{in_turn:#?}");
    assert_eq!(commits[0].parent, tool.span_id);
    assert_eq!(commits[0].attributes["cks.session.id"], session);
    assert_eq!(commits[0].attributes["cks.operations"], "1");
    assert_eq!(commits[0].attributes["cks.version"], "2");

    // The search, and its query's embedding under it.
    let search = one(&spans, "tools/call search_semantic");
    assert_eq!((search.trace_id.as_str(), search.parent.as_str()), (search_trace, "b7ad6b7169203331"));
    let embedded = spans.iter().find(|s| s.parent == search.span_id).unwrap_or_else(|| panic!("{spans:#?}"));
    assert_eq!(embedded.name, "embeddings tiny-trace");
    assert_eq!(embedded.attributes["cks.texts"], "1");

    // A call without a parent starts a trace of its own.
    let validate = one(&spans, "tools/call validate_knowledge");
    assert!(validate.parent.is_empty() && validate.trace_id != TRACE, "{validate:#?}");

    // No key, prompt, answer or content anywhere in what was sent, attributes or otherwise.
    for export in receiver.exports() {
        let body = String::from_utf8_lossy(&export.body);
        for secret in [KEY, "PROMPT-TEXT-91", "ANSWER-TEXT-55", "CONTENT-33"] {
            assert!(!body.contains(secret), "{secret} was exported");
        }
    }
    for span in &spans {
        assert!(span.attributes.values().all(|v| !v.contains(KEY)), "{span:#?}");
    }

    // The log: each call's line names its request and its trace; the key is nowhere.
    assert!(!stderr.contains(KEY), "{stderr}");
    let lines = call_lines(&stderr);
    let line = |tool: &str| lines.iter().find(|l| l["fields"]["tool"] == tool).unwrap_or_else(|| panic!("{stderr}"));
    let chat_line = line("ai_chat");
    assert_eq!(chat_line["trace_id"], TRACE, "{chat_line}");
    assert_eq!(chat_line["span_id"], turn.span_id.as_str(), "{chat_line}");
    let inner = line("evolve_knowledge");
    assert_eq!(inner["trace_id"], TRACE, "{inner}");
    assert_eq!(inner["span"]["request_id"], chat_line["span"]["request_id"], "the chat's request: {inner}");
    assert_eq!(line("validate_knowledge")["trace_id"], validate.trace_id.as_str());
}

#[tokio::test]
async fn over_http_the_headers_name_the_parent_and_meta_wins() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (receiver, collector) = Receiver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let base = format!("http://127.0.0.1:{port}");
    let env = [("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", format!("{collector}/v1/traces"))];
    let server = Server::start(dir.path(), &env, &["--http".to_owned(), format!("127.0.0.1:{port}")]).await;
    let http = reqwest::Client::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while http.get(format!("{base}/health")).send().await.is_err() {
        assert!(std::time::Instant::now() < deadline, "HTTP did not come up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let call = |id: u64, tool: &str, meta: Option<Value>| {
        let mut params = json!({"name": tool, "arguments": {"session_id": format!("missing-{id}")}});
        if let Some(meta) = meta {
            params["_meta"] = meta;
        }
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
    };
    let header_trace = "11111111111111111111111111111111";
    let meta_trace = "22222222222222222222222222222222";
    let stateless_trace = "33333333333333333333333333333333";
    let fallback_trace = "44444444444444444444444444444444";
    // The bare JSON-RPC form: the header's parent; then a `_meta` that wins over a header.
    for (body, parent) in [
        (call(1, "list_versions", None), traceparent(header_trace, "aaaaaaaaaaaaaaaa")),
        (
            call(2, "list_versions", Some(json!({"traceparent": traceparent(meta_trace, "bbbbbbbbbbbbbbbb")}))),
            traceparent(header_trace, "cccccccccccccccc"),
        ),
        // Not a traceparent: ignored, the call is served and starts its own trace.
        (call(3, "list_versions", None), "00-not-a-trace-parent".to_owned()),
        // A `_meta` value that does not parse leaves the header's.
        (
            call(5, "list_versions", Some(json!({"traceparent": "garbage", "tracestate": 7}))),
            traceparent(fallback_trace, "eeeeeeeeeeeeeeee"),
        ),
    ] {
        let reply: Value = http
            .post(format!("{base}/mcp"))
            .header("traceparent", parent)
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(reply["result"]["isError"], true, "session_not_found: {reply}");
    }
    // The stateless revision, through the MCP handler: the header's parent.
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "traces", "version": "1"},
    });
    let response = http
        .post(format!("{base}/mcp"))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "list_sessions")
        .header("traceparent", traceparent(stateless_trace, "dddddddddddddddd"))
        .json(&json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
            "params": {"name": "list_sessions", "arguments": {}, "_meta": meta}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let stderr = server.finish().await;

    let spans = receiver.spans();
    let by_trace = |trace: &str| spans.iter().find(|s| s.trace_id == trace).unwrap_or_else(|| panic!("{spans:#?}"));
    let from_header = by_trace(header_trace);
    assert_eq!(
        (from_header.name.as_str(), from_header.parent.as_str()),
        ("tools/call list_versions", "aaaaaaaaaaaaaaaa")
    );
    assert!(from_header.failed, "a business error marks the span: {from_header:#?}");
    assert_eq!(from_header.attributes["error.type"], "session_not_found");
    assert_eq!(spans.iter().filter(|s| s.trace_id == header_trace).count(), 1, "the second call's header lost");
    assert_eq!(by_trace(meta_trace).parent, "bbbbbbbbbbbbbbbb");
    assert_eq!(by_trace(fallback_trace).parent, "eeeeeeeeeeeeeeee");
    let stateless = by_trace(stateless_trace);
    assert_eq!((stateless.name.as_str(), stateless.parent.as_str()), ("tools/call list_sessions", "dddddddddddddddd"));
    let listed = spans.iter().filter(|s| s.name == "tools/call list_versions").count();
    let own = spans.iter().filter(|s| s.name == "tools/call list_versions" && s.parent.is_empty()).count();
    assert_eq!((listed, own), (4, 1), "{spans:#?}");
    for line in call_lines(&stderr) {
        assert!(line["trace_id"].as_str().is_some_and(|id| id.len() == 32), "{line}");
    }
}

#[tokio::test]
async fn without_an_endpoint_nothing_is_sent_and_no_line_names_a_trace() {
    let (receiver, _collector) = Receiver::start().await;
    let dir = tempfile::tempdir().unwrap();
    // The headers alone configure nothing.
    let env =
        [("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=abc".to_owned()), ("OTEL_EXPORTER_OTLP_ENDPOINT", String::new())];
    let mut server = Server::start(dir.path(), &env, &[]).await;
    let meta = json!({"traceparent": traceparent(TRACE, PARENT)});
    let created = server.call("validate_knowledge", json!({"json_data": graph()}), Some(meta)).await;
    assert!(created["session_id"].is_string(), "{created}");
    let stderr = server.finish().await;
    assert!(receiver.exports().is_empty());
    let lines = call_lines(&stderr);
    assert!(!lines.is_empty(), "{stderr}");
    for line in lines {
        assert!(line.get("trace_id").is_none() && line.get("span_id").is_none(), "{line}");
        assert!(line["span"]["request_id"].is_string(), "{line}");
    }
}
