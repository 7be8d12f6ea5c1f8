//! `GET /metrics`: what an operator's Prometheus scrapes, in the OpenMetrics text format. Tool
//! calls by tool and outcome with a latency histogram, error codes, LLM calls and tokens by
//! provider, loaded sessions and objects, the store's pooled connections (PostgreSQL), the
//! embedding queue, and requests refused by a caller's limit.
//!
//! Invariant: labels hold only tool names, error codes, provider names, outcomes and limits, each
//! from a bounded set (a tool's error codes are capped by the registry's telemetry); never a
//! session, a principal, an argument, a model's text or a secret.

use std::fmt::Write as _;

use cks_tools::LlmAccess;
use cks_tools::telemetry::LATENCY_BUCKETS;

use crate::server::CksServer;

/// The scrape's media type.
pub(crate) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The scrape's text.
pub(crate) fn render(server: &CksServer) -> String {
    let mut out = String::new();
    family(&mut out, "cks_build_info", "gauge", "The running server's version.");
    sample(&mut out, "cks_build_info", &[("version", env!("CARGO_PKG_VERSION"))], 1);
    tools(&mut out, server);
    llm(&mut out, &server.llm);
    let commits = server.runtime.commit_times();
    let name = "cks_commit_duration_seconds";
    family(&mut out, name, "histogram", "Time a commit took, retries included, failed ones too.");
    histogram(&mut out, name, None, &commits.at_most, commits.count, commits.seconds);
    family(&mut out, "cks_limit_refusals", "counter", "Requests and calls refused by a caller's limit, by limit.");
    for (limit, refused) in server.limits.refusals() {
        sample(&mut out, "cks_limit_refusals_total", &[("limit", limit)], refused);
    }
    family(&mut out, "cks_sessions_loaded", "gauge", "Sessions held in memory now.");
    sample(&mut out, "cks_sessions_loaded", &[], server.runtime.loaded_sessions());
    family(&mut out, "cks_objects_loaded", "gauge", "Objects the sessions in memory hold now.");
    sample(&mut out, "cks_objects_loaded", &[], server.runtime.loaded_objects());
    if let Some(connections) = server.runtime.connections() {
        let name = "cks_store_connections";
        family(&mut out, name, "gauge", "The store's pooled connections now: in use, idle, and callers waiting.");
        sample(&mut out, name, &[("state", "in_use")], connections.open.saturating_sub(connections.idle));
        sample(&mut out, name, &[("state", "idle")], connections.idle);
        sample(&mut out, name, &[("state", "waiting")], connections.waiting);
        family(&mut out, "cks_store_connections_max", "gauge", "The most connections the store's pool opens.");
        sample(&mut out, "cks_store_connections_max", &[], connections.max);
    }
    if let Some(embeddings) = server.runtime.embeddings() {
        let status = embeddings.status();
        family(&mut out, "cks_embedding_queue", "gauge", "Texts waiting for their vector.");
        sample(&mut out, "cks_embedding_queue", &[], status.queued);
        let lag = "cks_embedding_lag_seconds";
        family(&mut out, lag, "gauge", "How long the oldest text waiting for its vector has waited.");
        sample(&mut out, lag, &[], status.lag.as_secs_f64());
        family(&mut out, "cks_embedding_texts", "counter", "Texts embedded since the server started.");
        sample(&mut out, "cks_embedding_texts_total", &[], status.embedded);
        family(&mut out, "cks_embedding_failures", "counter", "Embedding batches that failed.");
        sample(&mut out, "cks_embedding_failures_total", &[], status.failures);
    }
    out.push_str("# EOF\n");
    out
}

/// Tool calls: counts by outcome, errors by code, and the latency histogram.
fn tools(out: &mut String, server: &CksServer) {
    let counts = server.registry.telemetry().counts();
    family(out, "cks_tool_calls", "counter", "Tool calls, by tool and outcome.");
    for c in &counts {
        sample(out, "cks_tool_calls_total", &[("tool", c.tool), ("outcome", "ok")], c.calls - c.errors);
        sample(out, "cks_tool_calls_total", &[("tool", c.tool), ("outcome", "error")], c.errors);
    }
    family(out, "cks_tool_errors", "counter", "Tool calls that answered a business error, by code.");
    for c in &counts {
        for (code, count) in &c.errors_by_code {
            sample(out, "cks_tool_errors_total", &[("tool", c.tool), ("code", code)], count);
        }
    }
    let name = "cks_tool_call_duration_seconds";
    family(out, name, "histogram", "Time from a tool call's arguments to its answer.");
    for c in &counts {
        histogram(out, name, Some(("tool", c.tool)), &c.at_most, c.calls, c.seconds);
    }
}

/// One histogram's samples (`label` on each): its cumulative buckets, `+Inf`, sum and count.
fn histogram(
    out: &mut String,
    name: &str,
    label: Option<(&str, &str)>,
    at_most: &[u64; LATENCY_BUCKETS.len()],
    count: u64,
    seconds: f64,
) {
    let base: Vec<(&str, &str)> = label.into_iter().collect();
    let bucket = format!("{name}_bucket");
    for (bound, at_most) in LATENCY_BUCKETS.iter().map(f64::to_string).zip(at_most) {
        let mut labels = base.clone();
        labels.push(("le", &bound));
        sample(out, &bucket, &labels, at_most);
    }
    let mut labels = base.clone();
    labels.push(("le", "+Inf"));
    sample(out, &bucket, &labels, count);
    sample(out, &format!("{name}_sum"), &base, seconds);
    sample(out, &format!("{name}_count"), &base, count);
}

/// LLM calls, by provider: counts by outcome, tokens, and time (as a summary's sum and count).
fn llm(out: &mut String, llm: &LlmAccess) {
    let LlmAccess::Ready(client) = llm else { return };
    let telemetry = client.telemetry();
    family(out, "cks_llm_calls", "counter", "Calls to the LLM provider, by provider and outcome.");
    for (provider, totals) in &telemetry.by_provider {
        sample(out, "cks_llm_calls_total", &[("provider", provider), ("outcome", "ok")], totals.ok);
        sample(out, "cks_llm_calls_total", &[("provider", provider), ("outcome", "error")], totals.errors);
    }
    family(out, "cks_llm_tokens", "counter", "Tokens the LLM provider counted, by provider and direction.");
    for (provider, totals) in &telemetry.by_provider {
        sample(out, "cks_llm_tokens_total", &[("provider", provider), ("direction", "input")], totals.input_tokens);
        sample(out, "cks_llm_tokens_total", &[("provider", provider), ("direction", "output")], totals.output_tokens);
    }
    let name = "cks_llm_call_duration_seconds";
    family(out, name, "summary", "Time of LLM calls, retries included, by provider.");
    for (provider, totals) in &telemetry.by_provider {
        #[allow(clippy::cast_precision_loss)] // milliseconds stay far below 2^52
        let seconds = totals.latency_ms as f64 / 1000.0;
        sample(out, &format!("{name}_sum"), &[("provider", provider)], seconds);
        sample(out, &format!("{name}_count"), &[("provider", provider)], totals.calls);
    }
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# TYPE {name} {kind}\n# HELP {name} {help}");
}

fn sample(out: &mut String, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
    out.push_str(name);
    if !labels.is_empty() {
        out.push('{');
        for (i, (label, text)) in labels.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(out, "{label}=\"{}\"", escaped(text));
        }
        out.push('}');
    }
    let _ = writeln!(out, " {value}");
}

/// A label value as OpenMetrics writes it: backslash, quote and line feed escaped.
fn escaped(text: &str) -> String {
    text.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::{escaped, render};
    use std::sync::Arc;

    use cks_runtime::store::memory::MemoryStore;
    use cks_runtime::{Runtime, RuntimeConfig};
    use cks_tools::{LlmAccess, Registry};

    #[test]
    fn a_scrape_counts_calls_and_errors_by_tool() {
        let registry = Registry::standard();
        registry.telemetry().record("list_versions", 0.7, None);
        registry.telemetry().record("list_versions", 3.0, Some("session_not_found"));
        let runtime = Arc::new(Runtime::new(Arc::new(MemoryStore::default()), RuntimeConfig::default()));
        let server = crate::server::CksServer::new(runtime, Arc::new(registry), LlmAccess::Absent);
        let text = render(&server);
        for line in [
            "cks_tool_calls_total{tool=\"list_versions\",outcome=\"ok\"} 1",
            "cks_tool_calls_total{tool=\"list_versions\",outcome=\"error\"} 1",
            "cks_tool_errors_total{tool=\"list_versions\",code=\"session_not_found\"} 1",
            "cks_tool_call_duration_seconds_bucket{tool=\"list_versions\",le=\"0.001\"} 1",
            "cks_tool_call_duration_seconds_bucket{tool=\"list_versions\",le=\"0.005\"} 2",
            "cks_tool_call_duration_seconds_bucket{tool=\"list_versions\",le=\"+Inf\"} 2",
            "cks_tool_call_duration_seconds_count{tool=\"list_versions\"} 2",
            "cks_commit_duration_seconds_bucket{le=\"+Inf\"} 0",
            "cks_commit_duration_seconds_count 0",
            "cks_sessions_loaded 0",
            "cks_limit_refusals_total{limit=\"concurrent_calls\"} 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
        }
        assert!(text.ends_with("# EOF\n"));
        // Each family is declared once, before its samples.
        let declared: Vec<&str> = text.lines().filter(|l| l.starts_with("# TYPE ")).collect();
        let mut unique = declared.clone();
        unique.dedup();
        assert_eq!(declared, unique);
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escaped("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
