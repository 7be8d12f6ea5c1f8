//! Per-tool call telemetry kept by the registry for `get_metrics`: call and error counts, error codes,
//! and latency (average, min and max over every call; percentiles over a bounded ring of recent calls).
//!
//! Invariant: it records only tool names, durations and error codes — never arguments, results or
//! messages — and its memory is bounded (a fixed ring per tool, a capped set of error codes).

use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;

/// Recent durations kept per tool for the percentiles.
pub const RECENT_PER_TOOL: usize = 256;
/// Distinct error codes counted per tool; later ones are counted under `other`.
const ERROR_CODES_PER_TOOL: usize = 32;
/// Error codes listed in `top_errors`.
const TOP_ERRORS: usize = 5;

#[derive(Debug, Default)]
struct ToolStats {
    calls: u64,
    errors: u64,
    total_ms: f64,
    min_ms: f64,
    max_ms: f64,
    recent: VecDeque<f64>,
    errors_by_code: HashMap<String, u64>,
}

/// The recorder. Cheap: one short lock per call.
#[derive(Debug, Default)]
pub struct ToolTelemetry {
    tools: Mutex<HashMap<&'static str, ToolStats>>,
}

impl ToolTelemetry {
    /// Records one call of `tool` that took `duration_ms` and failed with `error` (a code) or not.
    pub fn record(&self, tool: &'static str, duration_ms: f64, error: Option<&str>) {
        let mut tools = self.tools.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let stats = tools.entry(tool).or_default();
        if stats.calls == 0 || duration_ms < stats.min_ms {
            stats.min_ms = duration_ms;
        }
        stats.max_ms = stats.max_ms.max(duration_ms);
        stats.calls += 1;
        stats.total_ms += duration_ms;
        if stats.recent.len() == RECENT_PER_TOOL {
            stats.recent.pop_front();
        }
        stats.recent.push_back(duration_ms);
        if let Some(code) = error {
            stats.errors += 1;
            let key = if stats.errors_by_code.contains_key(code) || stats.errors_by_code.len() < ERROR_CODES_PER_TOOL {
                code
            } else {
                "other"
            };
            *stats.errors_by_code.entry(key.to_owned()).or_default() += 1;
        }
    }

    /// The dashboard: `{total_calls, tools: {<tool>: {calls, error_count, success_rate, latency_avg_ms,
    /// latency_p50_ms, latency_p95_ms, latency_p99_ms, latency_min_ms, latency_max_ms, top_errors}}}`,
    /// tools sorted by name.
    pub fn snapshot(&self) -> Value {
        let tools = self.tools.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let sorted: BTreeMap<&str, &ToolStats> = tools.iter().map(|(k, v)| (*k, v)).collect();
        let mut out = Map::new();
        let mut total_calls = 0;
        for (name, s) in sorted {
            total_calls += s.calls;
            let mut recent: Vec<f64> = s.recent.iter().copied().collect();
            recent.sort_by(f64::total_cmp);
            let mut top: Vec<(&String, &u64)> = s.errors_by_code.iter().collect();
            top.sort_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
            let top_errors: Vec<Value> =
                top.into_iter().take(TOP_ERRORS).map(|(code, count)| json!({"type": code, "count": count})).collect();
            #[allow(clippy::cast_precision_loss)] // call counts stay far below 2^52
            let (success_rate, avg) = if s.calls == 0 {
                (1.0, 0.0)
            } else {
                ((s.calls - s.errors) as f64 / s.calls as f64, s.total_ms / s.calls as f64)
            };
            out.insert(
                name.to_owned(),
                json!({
                    "calls": s.calls,
                    "error_count": s.errors,
                    "success_rate": round(success_rate, 4),
                    "latency_avg_ms": round(avg, 3),
                    "latency_p50_ms": round(percentile(&recent, 0.50), 3),
                    "latency_p95_ms": round(percentile(&recent, 0.95), 3),
                    "latency_p99_ms": round(percentile(&recent, 0.99), 3),
                    "latency_min_ms": round(s.min_ms, 3),
                    "latency_max_ms": round(s.max_ms, 3),
                    "top_errors": top_errors,
                }),
            );
        }
        json!({"total_calls": total_calls, "recent_window": RECENT_PER_TOOL, "tools": out})
    }
}

/// Nearest-rank percentile of sorted values (0 for none).
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn round(value: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    (value * scale).round() / scale
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_errors_and_bounds_the_ring() {
        let t = ToolTelemetry::default();
        for i in 1..=300 {
            t.record("a", f64::from(i), if i % 100 == 0 { Some("boom") } else { None });
        }
        t.record("b", 5.0, Some("missing_parameter"));
        let s = t.snapshot();
        assert_eq!(s["total_calls"], 301);
        let a = &s["tools"]["a"];
        assert_eq!(a["calls"], 300);
        assert_eq!(a["error_count"], 3);
        assert_eq!(a["success_rate"], 0.99);
        assert_eq!(a["latency_min_ms"], 1.0);
        assert_eq!(a["latency_max_ms"], 300.0);
        assert_eq!(a["latency_avg_ms"], 150.5);
        // The ring holds the last 256 calls: 45..=300.
        assert_eq!(a["latency_p50_ms"], 172.0);
        assert_eq!(a["latency_p95_ms"], 288.0);
        assert_eq!(a["top_errors"], json!([{"type": "boom", "count": 3}]));
        assert_eq!(s["tools"]["b"]["success_rate"], 0.0);
        assert_eq!(t.tools.lock().unwrap()["a"].recent.len(), RECENT_PER_TOOL);
    }

    #[test]
    fn error_codes_are_capped() {
        let t = ToolTelemetry::default();
        for i in 0..40 {
            t.record("a", 1.0, Some(&format!("code_{i}")));
        }
        let map = &t.tools.lock().unwrap()["a"].errors_by_code;
        assert_eq!(map.len(), ERROR_CODES_PER_TOOL + 1);
        assert_eq!(map["other"], 8);
    }
}
