//! `get_metrics`: session counts, per-tool call telemetry (kept by the registry) and LLM call
//! telemetry (kept by the LLM client). Only counts, durations, provider and model names and error
//! classes: never arguments, messages or keys.
//!
//! `critic_agent_metrics` holds the reference's counters of the Critic running in this process
//! (empty when none runs; there is no LLM circuit breaker, so it is never open);
//! `runtime_metrics` holds session counts rather than the reference's per-operation timings.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use time::format_description::well_known::Rfc3339;

use cks_llm::TelemetrySnapshot;

use crate::context::{LlmAccess, ToolContext};
use crate::error::ToolError;
use crate::tool::{Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    /// Session counts: sessions, open_sessions, closed_sessions, loaded_sessions, versions, objects.
    runtime_metrics: Map<String, Value>,
    /// `{timestamp, tools: {name: {calls, error_count, success_rate, latency_*_ms, top_errors}}}`.
    tool_telemetry: Map<String, Value>,
    /// LLM calls: total_calls, calls_by_provider, calls_by_model, total_tokens, avg_duration_ms,
    /// success_rate, top_errors, timestamp, and the client's own totals and recent calls.
    llm_telemetry: Map<String, Value>,
    /// The reference's critic agent counters, by task type, of the Critic running in this process.
    critic_agent_metrics: CriticAgentMetrics,
}

#[derive(Debug, Default, Serialize, JsonSchema)]
pub(crate) struct CriticAgentMetrics {
    processed: Map<String, Value>,
    completed: Map<String, Value>,
    retried: Map<String, Value>,
    dead_lettered: Map<String, Value>,
    lease_lost: Map<String, Value>,
    llm_breaker_open: bool,
    llm_breaker_trips: u64,
}

pub(crate) struct GetMetrics;

#[async_trait::async_trait]
impl Tool for GetMetrics {
    type Input = Input;
    type Output = Output;
    const TITLE: &'static str = "Server metrics";
    const META: ToolMeta = ToolMeta {
        name: "get_metrics",
        description: "Server metrics since start, in this process only: runtime_metrics (session, version and object \
            counts), tool_telemetry (per tool: calls, errors, latency), llm_telemetry (LLM calls, tokens and errors \
            by provider and model) and critic_agent_metrics (the Critic's task counters). Returns {runtime_metrics, \
            tool_telemetry, llm_telemetry, critic_agent_metrics}.",
        mutates_graph: false,
        creates_session: false,
        destructive: false,
        idempotent: true,
        open_world: false,
        session_fields: &[],
        session_checks: &[],
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, _input: Input) -> Result<Output, ToolError> {
        let timestamp = time::OffsetDateTime::now_utc().format(&Rfc3339).unwrap_or_default();
        let sessions = ctx.runtime.list_sessions().await?;
        let open = sessions.iter().filter(|s| !s.closed).count();
        let runtime_metrics = json!({
            "sessions": sessions.len(),
            "open_sessions": open,
            "closed_sessions": sessions.len() - open,
            "loaded_sessions": ctx.runtime.loaded_sessions(),
            "versions": sessions.iter().map(|s| s.version_count).sum::<u64>(),
            "objects": sessions.iter().map(|s| s.object_count).sum::<u64>(),
        });
        let mut tool_telemetry = match &ctx.registry {
            Some(registry) => registry.telemetry().snapshot(),
            None => json!({"total_calls": 0, "tools": {}}),
        };
        tool_telemetry["timestamp"] = json!(timestamp);
        let llm_telemetry = match &ctx.llm {
            LlmAccess::Ready(client) => llm_summary(&client.telemetry(), &timestamp),
            LlmAccess::Misconfigured(_) | LlmAccess::Absent => json!({
                "total_calls": 0, "timestamp": timestamp, "calls_by_provider": {}, "calls_by_model": {},
                "total_tokens": 0, "avg_duration_ms": 0.0, "success_rate": 1.0, "top_errors": [],
            }),
        };
        let object = |value: Value| match value {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        Ok(Output {
            runtime_metrics: object(runtime_metrics),
            tool_telemetry: object(tool_telemetry),
            llm_telemetry: object(llm_telemetry),
            critic_agent_metrics: CriticAgentMetrics::from(ctx.critic_metrics.snapshot()),
        })
    }
}

impl From<crate::critic_metrics::CriticCounts> for CriticAgentMetrics {
    fn from(counts: crate::critic_metrics::CriticCounts) -> Self {
        let map = |by_type: BTreeMap<String, u64>| by_type.into_iter().map(|(t, n)| (t, json!(n))).collect();
        CriticAgentMetrics {
            processed: map(counts.processed),
            completed: map(counts.completed),
            retried: map(counts.retried),
            dead_lettered: map(counts.dead_lettered),
            lease_lost: map(counts.lease_lost),
            llm_breaker_open: false,
            llm_breaker_trips: 0,
        }
    }
}

/// The reference's summary keys, then the client's own snapshot (`totals`, `by_provider`,
/// `errors_by_kind`, `recent`, `capacity`). `calls_by_model` covers the recent calls only.
fn llm_summary(snapshot: &TelemetrySnapshot, timestamp: &str) -> Value {
    let totals = &snapshot.totals;
    let mut by_model: BTreeMap<&str, u64> = BTreeMap::new();
    for record in &snapshot.recent {
        *by_model.entry(record.model.as_str()).or_default() += 1;
    }
    let mut top: Vec<(Value, u64)> = snapshot
        .errors_by_kind
        .iter()
        .map(|(kind, count)| (serde_json::to_value(kind).unwrap_or(Value::Null), *count))
        .collect();
    top.sort_by_key(|entry| std::cmp::Reverse(entry.1));
    #[allow(clippy::cast_precision_loss)] // call counts stay far below 2^52
    let (avg, success_rate) = if totals.calls == 0 {
        (0.0, 1.0)
    } else {
        (totals.latency_ms as f64 / totals.calls as f64, totals.ok as f64 / totals.calls as f64)
    };
    let mut summary = json!({
        "total_calls": totals.calls,
        "timestamp": timestamp,
        "calls_by_provider": snapshot.by_provider.iter().map(|(p, t)| (p.clone(), json!(t.calls))).collect::<Map<_, _>>(),
        "calls_by_model": by_model,
        "total_tokens": totals.input_tokens + totals.output_tokens,
        "avg_duration_ms": (avg * 1000.0).round() / 1000.0,
        "success_rate": (success_rate * 10_000.0).round() / 10_000.0,
        "top_errors": top.into_iter().take(5).map(|(kind, count)| json!({"type": kind, "count": count})).collect::<Vec<_>>(),
    });
    if let (Value::Object(out), Ok(Value::Object(raw))) = (&mut summary, serde_json::to_value(snapshot)) {
        out.extend(raw);
    }
    summary
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Registry;
    use crate::testing::{TEST_KEY, context, llm_context, llm_env, obj, structure};
    use cks_testkit::{ProviderServer, Reply};
    use std::sync::Arc;

    #[tokio::test]
    async fn counts_tools_sessions_and_llm_calls() {
        let server = ProviderServer::start().await;
        let mut ctx = llm_context(&llm_env("anthropic", &server.base_url()));
        let registry = Arc::new(Registry::standard());
        ctx.registry = Some(registry.clone());
        let call = |name: &'static str, args: Value| {
            let (registry, ctx) = (registry.clone(), ctx.clone());
            async move { registry.call(name, args, &ctx).await.unwrap() }
        };
        let g = structure(vec![obj("a", "T", "A", json!({})), obj("b", "T", "B", json!({}))]);
        server.push(Reply::text(g.to_string()).with_usage(100, 20));
        let secret_text = "a sentence that must not appear in the metrics";
        assert_eq!(call("construct_knowledge", json!({"text": secret_text})).await["constructed"], true);
        assert_eq!(call("validate_knowledge", json!({"json_data": g.to_string()})).await["valid"], true);
        assert_eq!(call("validate_knowledge", json!({})).await["error"], "missing_parameter");

        let metrics = call("get_metrics", json!({})).await;
        let runtime = &metrics["runtime_metrics"];
        assert_eq!(
            (runtime["sessions"].as_u64(), runtime["open_sessions"].as_u64(), runtime["closed_sessions"].as_u64()),
            (Some(2), Some(2), Some(0))
        );
        assert_eq!((runtime["versions"].as_u64(), runtime["objects"].as_u64()), (Some(2), Some(4)));

        let tools = &metrics["tool_telemetry"];
        assert_eq!(tools["total_calls"], 3, "get_metrics records itself after it returns");
        let validate = &tools["tools"]["validate_knowledge"];
        assert_eq!(validate["calls"], 2);
        assert_eq!(validate["error_count"], 1);
        assert_eq!(validate["success_rate"], 0.5);
        assert_eq!(validate["top_errors"], json!([{"type": "missing_parameter", "count": 1}]));
        assert!(validate["latency_max_ms"].as_f64().unwrap() >= validate["latency_p50_ms"].as_f64().unwrap());
        assert_eq!(tools["tools"]["construct_knowledge"]["calls"], 1);
        assert!(tools["timestamp"].as_str().unwrap().ends_with('Z'));

        let llm = &metrics["llm_telemetry"];
        assert_eq!(llm["total_calls"], 1);
        assert_eq!(llm["calls_by_provider"], json!({"anthropic": 1}));
        assert_eq!(llm["total_tokens"], 120);
        assert_eq!(llm["success_rate"], 1.0);
        assert_eq!(llm["recent"][0]["outcome"], "ok");
        let text = metrics.to_string();
        assert!(!text.contains(TEST_KEY) && !text.contains(secret_text));

        let again = call("get_metrics", json!({})).await;
        assert_eq!(again["tool_telemetry"]["tools"]["get_metrics"]["calls"], 1);
    }

    #[tokio::test]
    async fn without_registry_or_llm() {
        let metrics = crate::testing::call(&context(), "get_metrics", json!({})).await;
        assert_eq!(metrics["runtime_metrics"]["sessions"], 0);
        assert_eq!(metrics["tool_telemetry"]["total_calls"], 0);
        assert_eq!(metrics["llm_telemetry"]["total_calls"], 0);
    }
}
