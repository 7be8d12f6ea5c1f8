//! Logs and traces: the one subscriber every command installs.
//!
//! - Logs go to stderr, as JSON objects or as lines for a person (`CKS_MCP_LOG_FORMAT`),
//!   filtered by `CKS_MCP_LOG`. A line written in a request names it (`server::request_span`)
//!   and, when the request is traced, its `trace_id` and `span_id`.
//! - Traces go over OTLP/HTTP (protobuf) when an endpoint is set (`OTEL_EXPORTER_OTLP_ENDPOINT`
//!   or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`); otherwise no OpenTelemetry layer is installed at
//!   all. Spans leave in batches from the SDK's own thread, sent by the workspace's HTTP client on
//!   the server's runtime ([`Sender`]), so a tool call never waits on the network.
//! - A tool call's span takes its parent from the W3C `traceparent` (and `tracestate`) of the
//!   request's `_meta` (SEP-414), else of its HTTP headers ([`trace_call`]).
//!
//! Library crates know nothing of OpenTelemetry: they open `tracing` spans with the target
//! [`TRACE_TARGET`] (an LLM call, a store commit, an embedding batch, a chat's tool call), which
//! only the trace layer records; the log keeps naming the request, not those spans.
//!
//! Invariant: spans carry names, counts, model names and error codes: never a key, a token, a
//! prompt, a model's answer or a graph's content. Only this module knows OpenTelemetry.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::propagation::{Extractor, TextMapPropagator as _};
use opentelemetry::trace::{Status, TraceContextExt as _, TracerProvider as _};
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use serde_json::{Map, Value};
use tracing::{Event, Subscriber};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::{EnvFilter, FilterExt as _, filter_fn};
use tracing_subscriber::fmt::format::{FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::writer::BoxMakeWriter;
use tracing_subscriber::fmt::{FmtContext, format};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt as _;

use crate::config::Config;

/// The target of the spans library crates open for traces only.
pub const TRACE_TARGET: &str = "cks_trace";

/// The target of the tool-call lines and of the request span (`server::request_span`).
const TOOL_CALL_TARGET: &str = "cks_tool_call";

/// The log filter when `CKS_MCP_LOG` is unset: each tool call's line, and warnings.
const DEFAULT_FILTER: &str = "warn,cks_tool_call=info";

/// How long a stopping process waits for its last spans to leave.
const FLUSH_WAIT: Duration = Duration::from_secs(5);

/// How long one export may take, connection and answer.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// Marks a subscriber that exports spans: [`tracing_on`] asks the current one for it.
#[derive(Debug)]
struct TracesOn;

impl<S: Subscriber> tracing_subscriber::Layer<S> for TracesOn {}

/// Whether the current subscriber exports spans (a look at its layers, a few calls).
pub fn tracing_on() -> bool {
    tracing::dispatcher::get_default(|dispatch| dispatch.is::<TracesOn>())
}

/// One layer of the subscriber with traces on.
type BoxedLayer = Box<dyn tracing_subscriber::Layer<tracing_subscriber::Registry> + Send + Sync>;

/// The installed telemetry; [`Telemetry::finish`] sends the spans still waiting.
#[derive(Debug)]
#[must_use = "finish() sends the last spans"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Sends the spans still waiting (for at most a few seconds), then stops the exporter. Call it
    /// while `runtime` (given to [`init`]) still runs: the sends run on it.
    pub fn finish(self) {
        if let Some(provider) = self.provider
            && let Err(e) = provider.shutdown_with_timeout(FLUSH_WAIT)
        {
            eprintln!("cks-mcp: warning: the last spans were not all sent: {e}");
        }
    }
}

/// The log's format (`CKS_MCP_LOG_FORMAT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LogFormat {
    Json,
    Text,
}

/// Installs the subscriber: the log on stderr, and the trace exporter when an endpoint is
/// configured. `runtime` runs the exporter's sends.
pub fn init(config: &Config, runtime: &tokio::runtime::Handle) -> anyhow::Result<Telemetry> {
    let (dispatch, telemetry) = subscriber(&config.env, runtime, BoxMakeWriter::new(std::io::stderr))?;
    dispatch.try_init().map_err(|e| anyhow::anyhow!("installing the log: {e}"))?;
    Ok(telemetry)
}

/// The subscriber for the environment `env` (the variables of [`init`]), its log written to `log`.
pub fn subscriber(
    env: &HashMap<String, String>,
    runtime: &tokio::runtime::Handle,
    log: BoxMakeWriter,
) -> anyhow::Result<(tracing::Dispatch, Telemetry)> {
    let get = |name: &str| env.get(name).map(|v| v.trim()).filter(|v| !v.is_empty());
    let format = match get("CKS_MCP_LOG_FORMAT") {
        Some(v) if v.eq_ignore_ascii_case("text") => LogFormat::Text,
        _ => LogFormat::Json,
    };
    let filter = EnvFilter::try_new(get("CKS_MCP_LOG").unwrap_or(DEFAULT_FILTER))
        .unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let Some(endpoint) = endpoint(&get) else {
        // Without traces, the log alone, as plain as it can be: one filter for every layer, and
        // the trace-only spans off.
        let mut filter = filter;
        if let Ok(off) = format!("{TRACE_TARGET}=off").parse() {
            filter = filter.add_directive(off);
        }
        let logged = tracing_subscriber::registry().with(filter);
        let dispatch = match format {
            LogFormat::Json => tracing::Dispatch::new(logged.with(
                tracing_subscriber::fmt::layer().json().with_current_span(true).with_span_list(false).with_writer(log),
            )),
            LogFormat::Text => {
                tracing::Dispatch::new(logged.with(tracing_subscriber::fmt::layer().with_ansi(false).with_writer(log)))
            }
        };
        return Ok((dispatch, Telemetry { provider: None }));
    };
    // The trace-only spans stay out of the log: a line names its request, whatever runs inside.
    let filter = filter.and(filter_fn(|meta| !(meta.is_span() && meta.target() == TRACE_TARGET)));
    let log: BoxedLayer = match format {
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .fmt_fields(format::JsonFields::new())
            .event_format(WithTraceIds {
                inner: format::format().json().with_current_span(true).with_span_list(false),
                json: true,
            })
            .with_writer(log)
            .with_filter(filter)
            .boxed(),
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .event_format(WithTraceIds { inner: format::format().with_ansi(false), json: false })
            .with_writer(log)
            .with_filter(filter)
            .boxed(),
    };
    let provider = provider(&endpoint, &get, runtime)?;
    let traced = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("cks-mcp"))
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_tracked_inactivity(false)
        // Nothing here reads OpenTelemetry's current context (a span's parent is its `tracing`
        // parent), so entering a span need not set it.
        .with_context_activation(false)
        .with_filter(filter_fn(|meta| {
            meta.is_span() && (meta.target() == TRACE_TARGET || meta.target() == TOOL_CALL_TARGET)
        }))
        .boxed();
    let layers: Vec<BoxedLayer> = vec![log, traced, Box::new(TracesOn)];
    Ok((tracing::Dispatch::new(tracing_subscriber::registry().with(layers)), Telemetry { provider: Some(provider) }))
}

/// The traces URL: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as it is, else
/// `OTEL_EXPORTER_OTLP_ENDPOINT` with `/v1/traces` (as the OTLP specification says); none: off.
fn endpoint<'a>(get: &impl Fn(&str) -> Option<&'a str>) -> Option<String> {
    if let Some(url) = get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
        return Some(url.to_owned());
    }
    get("OTEL_EXPORTER_OTLP_ENDPOINT").map(|base| format!("{}/v1/traces", base.trim_end_matches('/')))
}

/// The tracer provider: spans batched and exported to `endpoint` as protobuf over HTTP.
fn provider<'a>(
    endpoint: &str,
    get: &impl Fn(&str) -> Option<&'a str>,
    runtime: &tokio::runtime::Handle,
) -> anyhow::Result<SdkTracerProvider> {
    let headers = get("OTEL_EXPORTER_OTLP_HEADERS").map(parse_headers).unwrap_or_default();
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(endpoint)
        .with_timeout(EXPORT_TIMEOUT)
        .with_headers(headers)
        .with_http_client(Sender::new(runtime.clone()))
        .build()
        .map_err(|e| anyhow::anyhow!("the trace exporter (OTEL_EXPORTER_OTLP_ENDPOINT): {e}"))?;
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name(get("OTEL_SERVICE_NAME").unwrap_or("cks-mcp").to_owned())
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .build();
    Ok(SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource).build())
}

/// `OTEL_EXPORTER_OTLP_HEADERS`: `key=value` pairs separated by commas, values percent-encoded.
/// A pair without `=` is skipped.
fn parse_headers(text: &str) -> HashMap<String, String> {
    text.split(',')
        .filter_map(|pair| pair.split_once('='))
        .map(|(key, value)| (key.trim().to_owned(), percent_decoded(value.trim())))
        .filter(|(key, _)| !key.is_empty())
        .collect()
}

fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |at: usize| bytes.get(at).and_then(|b| char::from(*b).to_digit(16));
        match (bytes[i], hex(i + 1), hex(i + 2)) {
            (b'%', Some(high), Some(low)) => {
                // Two hex digits make at most 255.
                out.push(u8::try_from(high * 16 + low).unwrap_or(b'?'));
                i += 3;
            }
            (byte, _, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The exporter's HTTP client: the workspace's reqwest, its requests run on the server's runtime.
/// The SDK exports from a thread of its own, outside any runtime, and awaits the send there.
#[derive(Debug)]
struct Sender {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
    /// Whether the last export failed: a receiver that is down is said once, not every batch.
    failing: std::sync::Arc<AtomicBool>,
}

impl Sender {
    fn new(runtime: tokio::runtime::Handle) -> Self {
        // reqwest is built without a default crypto provider; a second install fails harmlessly.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .timeout(EXPORT_TIMEOUT)
            .user_agent(concat!("cks-mcp/", env!("CARGO_PKG_VERSION")))
            .build()
            .unwrap_or_default();
        Sender { client, runtime, failing: Default::default() }
    }

    fn note(&self, failure: Option<String>) {
        match failure {
            Some(why) if !self.failing.swap(true, Ordering::Relaxed) => {
                tracing::warn!("traces are not reaching their receiver ({why}); they are dropped until it answers");
            }
            None if self.failing.swap(false, Ordering::Relaxed) => {
                tracing::warn!("traces reach their receiver again");
            }
            _ => {}
        }
    }
}

/// The most of a receiver's answer read (an OTLP answer is a few bytes, or a short error).
const MAX_ANSWER_BYTES: usize = 64 * 1024;

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for Sender {
    async fn send_bytes(
        &self,
        request: opentelemetry_http::Request<opentelemetry_http::Bytes>,
    ) -> Result<opentelemetry_http::Response<opentelemetry_http::Bytes>, opentelemetry_http::HttpError> {
        let request = reqwest::Request::try_from(request)?;
        let client = self.client.clone();
        let sent = self.runtime.spawn(async move {
            let mut response = client.execute(request).await?;
            let (status, headers) = (response.status(), std::mem::take(response.headers_mut()));
            let mut body = Vec::new();
            while let Some(chunk) = response.chunk().await? {
                let room = MAX_ANSWER_BYTES.saturating_sub(body.len());
                body.extend_from_slice(&chunk[..chunk.len().min(room)]);
                if room <= chunk.len() {
                    break;
                }
            }
            Ok::<_, reqwest::Error>((status, headers, body))
        });
        let (status, headers, body) = match sent.await? {
            Ok(answer) => answer,
            Err(e) => {
                // Without the URL: an endpoint may carry credentials.
                let e = e.without_url();
                self.note(Some(cks_core::error_chain(&e)));
                return Err(Box::new(e));
            }
        };
        self.note((!status.is_success()).then(|| format!("HTTP {}", status.as_u16())));
        let mut response = opentelemetry_http::Response::new(opentelemetry_http::Bytes::from(body));
        *response.status_mut() = status;
        *response.headers_mut() = headers;
        Ok(response)
    }
}

/// Where a request's trace context may be: its `_meta` and, over HTTP, its headers.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Carrier<'a> {
    pub(crate) meta: Option<&'a Map<String, Value>>,
    pub(crate) headers: Option<&'a axum::http::HeaderMap>,
}

/// `_meta` read as a carrier of W3C trace context (its `traceparent` and `tracestate` keys).
struct MetaExtractor<'a>(&'a Map<String, Value>);

impl Extractor for MetaExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(Value::as_str)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

/// Makes `span` (a tool call's, just opened) a span of the trace `carrier` names, `_meta` first,
/// then the headers; a value that does not parse is ignored (the call starts a trace of its own).
/// Names the span for trace viewers: `tools/call <tool>`. Nothing when tracing is off.
pub(crate) fn trace_call(span: &tracing::Span, tool: &str, carrier: Carrier<'_>) {
    if !tracing_on() || span.is_disabled() {
        return;
    }
    let propagator = TraceContextPropagator::new();
    let from_meta = carrier.meta.map(|meta| propagator.extract(&MetaExtractor(meta)));
    let from_headers = carrier.headers.map(|headers| propagator.extract(&opentelemetry_http::HeaderExtractor(headers)));
    if let Some(parent) = from_meta.into_iter().chain(from_headers).find(|cx| cx.span().span_context().is_valid()) {
        let _ = span.set_parent(parent);
    }
    // Started here, with its parent; named and described on the started span in one visit.
    let cx = span.context();
    let started = cx.span();
    started.update_name(format!("tools/call {tool}"));
    started.set_attributes([
        KeyValue::new("mcp.method.name", "tools/call"),
        KeyValue::new("gen_ai.operation.name", "execute_tool"),
        KeyValue::new("gen_ai.tool.name", tool.to_owned()),
    ]);
}

/// Marks a tool call's span as failed with the business error `code`.
pub(crate) fn call_failed(span: &tracing::Span, code: &str) {
    if tracing_on() {
        span.set_attribute("error.type", code.to_owned());
        span.set_status(Status::error(code.to_owned()));
    }
}

/// The trace and span ids of `span` as W3C writes them (32 and 16 hex digits); none when it is
/// not traced.
fn ids_of(span: &tracing::span::Id) -> Option<(String, String)> {
    let cx = tracing::dispatcher::get_default(|dispatch| tracing_opentelemetry::get_otel_context(span, dispatch))?;
    let span = cx.span();
    let ids = span.span_context();
    ids.is_valid().then(|| (ids.trace_id().to_string(), ids.span_id().to_string()))
}

/// A log format that adds the trace's ids to each line written in a traced request.
struct WithTraceIds<F> {
    inner: F,
    /// The line is a JSON object (else text).
    json: bool,
}

impl<S, N, F> FormatEvent<S, N> for WithTraceIds<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'w> FormatFields<'w> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> std::fmt::Result {
        let ids = if tracing_on() { ctx.parent_span().and_then(|span| ids_of(&span.id())) } else { None };
        let Some((trace_id, span_id)) = ids else { return self.inner.format_event(ctx, writer, event) };
        let mut line = String::new();
        self.inner.format_event(ctx, Writer::new(&mut line), event)?;
        let body = line.trim_end_matches('\n');
        if self.json {
            let object = body.strip_suffix('}').unwrap_or(body);
            writeln!(writer, "{object},\"trace_id\":\"{trace_id}\",\"span_id\":\"{span_id}\"}}")
        } else {
            writeln!(writer, "{body} trace_id={trace_id} span_id={span_id}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{endpoint, parse_headers};
    use std::collections::HashMap;

    #[test]
    fn the_traces_url_is_the_signals_or_the_base_with_its_path() {
        let env = |pairs: &[(&'static str, &'static str)]| -> HashMap<&'static str, &'static str> {
            pairs.iter().copied().collect()
        };
        let url = |env: &HashMap<&str, &'static str>| endpoint(&|name: &str| env.get(name).copied());
        assert_eq!(url(&env(&[])), None);
        let base = env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")]);
        assert_eq!(url(&base).as_deref(), Some("http://collector:4318/v1/traces"));
        let both = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://traces.example.com/in"),
        ]);
        assert_eq!(url(&both).as_deref(), Some("https://traces.example.com/in"));
    }

    #[test]
    fn headers_are_pairs_with_percent_encoded_values() {
        let headers = parse_headers("x-api-key=abc%3D%3D, authorization=Bearer%20t0k ,broken,=v");
        assert_eq!(headers.len(), 2, "{headers:?}");
        assert_eq!(headers["x-api-key"], "abc==");
        assert_eq!(headers["authorization"], "Bearer t0k");
        assert_eq!(parse_headers("a=%zz%4"), HashMap::from([("a".to_owned(), "%zz%4".to_owned())]));
    }
}
