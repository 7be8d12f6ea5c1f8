//! Per-tool call telemetry kept by the registry for `get_metrics` and the server's metrics
//! endpoint: call and error counts, error codes, and latency (average, min and max over every call;
//! percentiles over a bounded ring of recent calls; a histogram of fixed buckets, [`ToolCounts`]).
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
/// The latency histogram's buckets, the same for tool calls and commits.
pub use cks_runtime::histogram::LATENCY_BUCKETS;

#[derive(Debug, Default)]
struct ToolStats {
    calls: u64,
    errors: u64,
    total_ms: f64,
    min_ms: f64,
    max_ms: f64,
    recent: VecDeque<f64>,
    errors_by_code: HashMap<String, u64>,
    /// Calls per bucket of [`LATENCY_BUCKETS`] (each in the first bucket it fits).
    buckets: [u64; LATENCY_BUCKETS.len()],
}

/// One tool's totals since the server started, for a metrics scrape.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCounts {
    pub tool: &'static str,
    pub calls: u64,
    pub errors: u64,
    /// Time spent in its calls, in seconds.
    pub seconds: f64,
    /// Calls that took at most each bound of [`LATENCY_BUCKETS`] (cumulative, as histograms count).
    pub at_most: [u64; LATENCY_BUCKETS.len()],
    /// Errors by code, at most 33 codes (later ones as `other`), sorted.
    pub errors_by_code: Vec<(String, u64)>,
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
        if let Some(bucket) = LATENCY_BUCKETS.iter().position(|bound| duration_ms / 1000.0 <= *bound) {
            stats.buckets[bucket] += 1;
        }
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

impl ToolTelemetry {
    /// Every called tool's totals, sorted by tool.
    pub fn counts(&self) -> Vec<ToolCounts> {
        let tools = self.tools.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut counts: Vec<ToolCounts> = tools
            .iter()
            .map(|(tool, s)| {
                let mut at_most = s.buckets;
                for i in 1..at_most.len() {
                    at_most[i] += at_most[i - 1];
                }
                let mut errors_by_code: Vec<(String, u64)> =
                    s.errors_by_code.iter().map(|(code, count)| (code.clone(), *count)).collect();
                errors_by_code.sort();
                ToolCounts {
                    tool,
                    calls: s.calls,
                    errors: s.errors,
                    seconds: s.total_ms / 1000.0,
                    at_most,
                    errors_by_code,
                }
            })
            .collect();
        counts.sort_by_key(|c| c.tool);
        counts
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
    fn counts_fill_the_histogram_cumulatively() {
        let t = ToolTelemetry::default();
        for ms in [0.2, 0.7, 3.0, 3.0, 90_000.0] {
            t.record("a", ms, None);
        }
        t.record("a", 40.0, Some("session_not_found"));
        let counts = t.counts();
        assert_eq!(counts.len(), 1);
        let a = &counts[0];
        assert_eq!((a.tool, a.calls, a.errors), ("a", 6, 1));
        assert!((a.seconds - 90.0469).abs() < 1e-9, "{}", a.seconds);
        // ≤0.5 ms, ≤1 ms, ≤2.5 ms, ≤5 ms, …, ≤50 ms, …; the 90 s call is in none.
        assert_eq!(&a.at_most[..7], &[1, 2, 2, 4, 4, 4, 5]);
        assert_eq!(a.at_most[LATENCY_BUCKETS.len() - 1], 5);
        assert_eq!(a.errors_by_code, vec![("session_not_found".to_owned(), 1)]);
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
