//! Measurement records (one JSON line each), the Markdown tables, and the side-by-side
//! comparison against the performance goals (BENCHMARKS.md).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

/// One measurement: a number (`value`) or why there is none (`status`: "timeout after N s ...",
/// "not available", "error: ...", "not reached: ..." when an earlier step of its scenario failed,
/// "skipped: ...").
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct Record {
    pub(crate) server: String,
    pub(crate) measurement: String,
    /// Graph size in objects, where the measurement depends on it.
    pub(crate) size: Option<u64>,
    pub(crate) unit: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub(crate) value: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub(crate) status: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub(crate) note: Option<String>,
}

impl Record {
    pub(crate) fn display_value(&self) -> String {
        match (self.value, &self.status) {
            (Some(v), _) => format!("{} {}", fmt_number(v), self.unit),
            (None, Some(s)) => s.clone(),
            (None, None) => "—".into(),
        }
    }
}

/// Collects records and streams them as JSON lines.
pub(crate) struct Recorder {
    pub(crate) server: String,
    pub(crate) records: Vec<Record>,
    out: Box<dyn Write + Send>,
    /// Echo a human-readable line per record on stderr.
    pub(crate) verbose: bool,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder").field("server", &self.server).field("records", &self.records.len()).finish()
    }
}

impl Recorder {
    pub(crate) fn new(server: String, out: Box<dyn Write + Send>) -> Recorder {
        Recorder { server, records: Vec::new(), out, verbose: true }
    }

    fn push(&mut self, record: Record) {
        if let Ok(line) = serde_json::to_string(&record) {
            let _ = writeln!(self.out, "{line}");
            let _ = self.out.flush();
        }
        if self.verbose {
            let size = record.size.map(|s| format!(" @{s}")).unwrap_or_default();
            let note = record.note.as_ref().map(|n| format!("  ({n})")).unwrap_or_default();
            eprintln!("[{}] {}{}: {}{}", record.server, record.measurement, size, record.display_value(), note);
        }
        self.records.push(record);
    }

    pub(crate) fn value(&mut self, measurement: &str, size: Option<u64>, unit: &str, value: f64, note: Option<String>) {
        self.push(Record {
            server: self.server.clone(),
            measurement: measurement.into(),
            size,
            unit: unit.into(),
            value: Some(value),
            status: None,
            note,
        });
    }

    pub(crate) fn status(&mut self, measurement: &str, size: Option<u64>, unit: &str, status: impl Into<String>) {
        self.status_note(measurement, size, unit, status, None);
    }

    pub(crate) fn status_note(
        &mut self,
        measurement: &str,
        size: Option<u64>,
        unit: &str,
        status: impl Into<String>,
        note: Option<String>,
    ) {
        self.push(Record {
            server: self.server.clone(),
            measurement: measurement.into(),
            size,
            unit: unit.into(),
            value: None,
            status: Some(status.into()),
            note,
        });
    }
}

/// The `q`-quantile (0..=1) of samples, nearest-rank.
pub(crate) fn quantile(samples: &[f64], q: f64) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub(crate) fn fmt_number(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if a >= 1000.0 {
        format!("{v:.0}")
    } else if a >= 100.0 {
        format!("{v:.1}")
    } else if a >= 10.0 {
        format!("{v:.2}")
    } else if a >= 1.0 {
        format!("{v:.3}")
    } else {
        format!("{v:.4}")
    }
}

pub(crate) fn read_jsonl(path: &Path) -> anyhow::Result<Vec<Record>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, l)| serde_json::from_str(l).with_context(|| format!("{}:{}", path.display(), i + 1)))
        .collect()
}

/// Measurement order and labels for the tables.
const LABELS: &[(&str, &str)] = &[
    ("cold_start_p50", "cold start → first `tools/list`, p50"),
    ("cold_start_max", "cold start → first `tools/list`, max"),
    ("query_small_p50", "`query_subgraph`, small session, p50"),
    ("query_small_p99", "`query_subgraph`, small session, p99"),
    ("query_small_throughput", "`query_subgraph`, small session, sequential throughput"),
    ("peak_rss_small", "peak RSS after the query run (small session)"),
    ("ai_chat_turn_p50", "`ai_chat` 3-iteration turn, p50"),
    ("ai_chat_turn_p99", "`ai_chat` 3-iteration turn, p99"),
    ("ai_chat_turn_server_p50", "`ai_chat` 3-iteration turn without the provider's time, p50"),
    ("ai_chat_turn_server_p99", "`ai_chat` 3-iteration turn without the provider's time, p99"),
    ("ai_chat_50_concurrent_wall", "50 concurrent `ai_chat` turns (3 × 200 ms LLM calls each), wall time"),
    ("query_during_chats_p50", "`query_subgraph` during those turns, p50"),
    ("query_during_chats_p99", "`query_subgraph` during those turns, p99"),
    ("create_validate", "session creation (`validate_knowledge` of `json_data`)"),
    ("peak_rss_create", "peak RSS once the session is created"),
    ("evolve_one_p50", "one-object `evolve_knowledge`, p50"),
    ("evolve_one_p95", "one-object `evolve_knowledge`, p95"),
    ("query_depth2_p50", "`query_subgraph` depth 2, `max_objects` 50, p50"),
    ("serialize", "`serialize_knowledge`, to the answer's last byte"),
    ("serialize_decoded", "`serialize_knowledge`, until the client has decoded the answer's line"),
    ("list_versions", "`list_versions` after the commits"),
    ("compare_versions", "`compare_versions` first → head"),
    ("peak_rss_serialize", "peak RSS during the `serialize_knowledge` calls"),
    ("peak_rss", "peak RSS (VmHWM) of the server"),
    ("disk_size", "data directory on disk"),
    ("restart_first_query", "restart → first successful `query_subgraph`"),
    ("peak_rss_restart", "peak RSS after restart + one query"),
    ("restart_first_search", "restart → first hybrid `search_semantic` (every object embedded before)"),
    ("reload_first_query", "restart with this many stored sessions → first `query_subgraph`, median of 3"),
    ("reload_touch_all_rss", "peak RSS after a restart that reads every stored session once"),
];

/// What a status says happened, for "not reached: <step> <outcome>": "timed out after 300 s",
/// "failed (the server closed its stdout)", or the status itself.
pub(crate) fn outcome(status: &str) -> String {
    // The details in parentheses stay with the failing measurement's own record.
    let head = status.split(" (").next().unwrap_or(status).trim();
    if let Some(rest) = head.strip_prefix("timeout") {
        return format!("timed out{rest}");
    }
    match status.strip_prefix("error: ") {
        Some(message) => format!("failed ({})", crate::client::truncate(message, 80)),
        None => status.to_owned(),
    }
}

/// The status of a measurement that was not taken because `measurement`, earlier in the same
/// scenario, ended with `status`: "not reached: session creation timed out after 300 s".
pub(crate) fn not_reached(measurement: &str, status: &str) -> String {
    format!("not reached: {} {}", step(measurement), outcome(status))
}

/// A measurement's step in words, for "not reached" statuses.
fn step(measurement: &str) -> String {
    let words = match measurement {
        "cold_start_p50" => "a cold start",
        "query_small_p50" => "the query run",
        "ai_chat_turn_p50" => "an `ai_chat` turn",
        "ai_chat_50_concurrent_wall" => "the concurrent `ai_chat` turns",
        "query_during_chats_p50" => "a query during the turns",
        "create_validate" => "session creation",
        "evolve_one_p50" => "a one-object commit",
        "query_depth2_p50" => "a depth-2 query",
        "serialize" => "`serialize_knowledge`",
        "list_versions" => "`list_versions`",
        "compare_versions" => "`compare_versions`",
        "restart_first_query" => "the restart",
        "reload_first_query" => "a restart",
        other => return label(other),
    };
    words.to_owned()
}

/// Text for a Markdown table cell: no `|` or line break of its own.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace(['\r', '\n'], " ")
}

fn order(measurement: &str) -> usize {
    LABELS.iter().position(|(m, _)| *m == measurement).unwrap_or(LABELS.len())
}

fn label(measurement: &str) -> String {
    LABELS.iter().find(|(m, _)| *m == measurement).map_or_else(|| measurement.to_owned(), |(_, l)| (*l).to_owned())
}

/// Table order: by size then label order, the reload group (sized by sessions, not objects) last.
fn key(r: &Record) -> (bool, u64, usize, String) {
    (r.measurement.starts_with("reload_"), r.size.unwrap_or(0), order(&r.measurement), r.measurement.clone())
}

/// The size column: objects, or stored sessions for the reload group.
pub(crate) fn size_label(measurement: &str, size: Option<u64>) -> String {
    let number = match size {
        None => return "—".into(),
        Some(s) if s >= 1_000_000 && s % 1_000_000 == 0 => format!("{}M", s / 1_000_000),
        Some(s) if s >= 1000 && s % 1000 == 0 => format!("{}k", s / 1000),
        Some(s) => s.to_string(),
    };
    match size {
        Some(1) if measurement.starts_with("reload_") => "1 session".into(),
        _ if measurement.starts_with("reload_") => format!("{number} sessions"),
        _ => number,
    }
}

/// A one-server table.
pub(crate) fn markdown_table(records: &[Record]) -> String {
    let mut sorted: Vec<&Record> = records.iter().collect();
    sorted.sort_by_key(|r| key(r));
    let mut out = String::from("| measurement | size | value | note |\n|---|---|---|---|\n");
    for r in sorted {
        out.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            label(&r.measurement),
            size_label(&r.measurement, r.size),
            cell(&r.display_value()),
            cell(r.note.as_deref().unwrap_or(""))
        ));
    }
    out
}

/// Higher is better for these units.
fn higher_is_better(unit: &str) -> bool {
    unit.ends_with("/s")
}

/// The performance goal for a measurement, as the least "times better" factor.
fn goal(measurement: &str, size: Option<u64>) -> Option<(f64, &'static str)> {
    match (measurement, size) {
        ("cold_start_p50", _) => Some((18.0, "≥ 18× faster")),
        ("query_small_throughput", _) => Some((20.0, "≥ 20×")),
        ("ai_chat_turn_p50", _) => Some((8.0, "≥ 8× faster")),
        ("peak_rss" | "peak_rss_small", _) => Some((4.0, "≤ 1/4 of the reference")),
        ("evolve_one_p50", Some(s)) if s >= 50_000 => Some((100.0, "≥ 100× faster")),
        _ => None,
    }
}

/// How many times better `ours` is than `reference` (> 1: ours is better).
fn factor(ours: &Record, reference: &Record) -> Option<f64> {
    let (o, r) = (ours.value?, reference.value?);
    if o <= 0.0 || r <= 0.0 {
        return None;
    }
    Some(if higher_is_better(&ours.unit) { o / r } else { r / o })
}

/// The side-by-side table: ours, the reference, "times better", and the goal where there is one;
/// then our own flatness checks (1k → 50k).
pub(crate) fn compare_table(ours: &[Record], reference: &[Record]) -> String {
    let index = |records: &[Record]| -> BTreeMap<(bool, u64, usize, String), Record> {
        records.iter().map(|r| (key(r), r.clone())).collect()
    };
    let (ours_by, reference_by) = (index(ours), index(reference));
    let mut keys: Vec<_> = ours_by.keys().chain(reference_by.keys()).cloned().collect();
    keys.sort();
    keys.dedup();
    let mut out = String::from(
        "| measurement | size | ours | reference | ours vs reference | goal |\n|---|---|---|---|---|---|\n",
    );
    for k in keys {
        let (o, r) = (ours_by.get(&k), reference_by.get(&k));
        let any = o.or(r).expect("a key comes from one side");
        let ratio = match (o, r) {
            (Some(o), Some(r)) => match factor(o, r) {
                Some(f) => format!("{}×", fmt_number(f)),
                None if o.value.is_some()
                    && r.status.as_deref().is_some_and(|s| s.starts_with("timeout") || s.starts_with("error")) =>
                {
                    "reference did not finish".into()
                }
                None if o.value.is_some() && r.status.as_deref().is_some_and(|s| s.starts_with("not reached")) => {
                    "reference did not get this far".into()
                }
                None => "—".into(),
            },
            _ => "—".into(),
        };
        let goal_text = match goal(&any.measurement, any.size) {
            Some((least, text)) => match (o, r).0.zip(r).and_then(|(o, r)| factor(o, r)) {
                Some(f) if f >= least => format!("{text}: met"),
                Some(_) => format!("{text}: **missed**"),
                None => text.to_owned(),
            },
            None => String::new(),
        };
        let side = |x: Option<&Record>| x.map_or_else(|| "—".into(), |r| cell(&r.display_value()));
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            label(&any.measurement),
            size_label(&any.measurement, any.size),
            side(o),
            side(r),
            ratio,
            goal_text
        ));
    }
    let flat = flatness(ours);
    if !flat.is_empty() {
        out.push_str("\nFlatness of our server from the smallest to the largest size:\n\n");
        out.push_str("| measurement | smallest | largest | largest / smallest | goal |\n|---|---|---|---|---|\n");
        out.push_str(&flat);
    }
    out
}

fn flatness(records: &[Record]) -> String {
    let mut out = String::new();
    for measurement in ["evolve_one_p50", "reload_first_query"] {
        let mut points: Vec<&Record> =
            records.iter().filter(|r| r.measurement == measurement && r.value.is_some() && r.size.is_some()).collect();
        points.sort_by_key(|r| r.size);
        let (Some(first), Some(last)) = (points.first(), points.last()) else { continue };
        if first.size == last.size {
            continue;
        }
        let ratio = last.value.unwrap_or(f64::NAN) / first.value.unwrap_or(f64::NAN);
        let verdict = if ratio <= 2.0 { "met" } else { "**missed**" };
        out.push_str(&format!(
            "| {} | {} @{} | {} @{} | {}× | within 2× (flat): {} |\n",
            label(measurement),
            first.display_value(),
            size_label(measurement, first.size),
            last.display_value(),
            size_label(measurement, last.size),
            fmt_number(ratio),
            verdict
        ));
    }
    out
}

/// The default markers' name: `<!-- cks-bench:results:start -->` … `<!-- cks-bench:results:end -->`.
pub(crate) const RESULTS: &str = "results";

/// The start and end markers of a generated section: `<!-- cks-bench:NAME:start -->`, `…:end -->`.
pub(crate) fn markers(name: &str) -> (String, String) {
    (format!("<!-- cks-bench:{name}:start -->"), format!("<!-- cks-bench:{name}:end -->"))
}

/// Replaces the text between the markers named `name` of a Markdown file.
pub(crate) fn replace_between_markers(document: &str, name: &str, body: &str) -> anyhow::Result<String> {
    let (start_marker, end_marker) = markers(name);
    let start = document.find(&start_marker).with_context(|| format!("no {start_marker} marker"))?;
    let end = document.find(&end_marker).with_context(|| format!("no {end_marker} marker"))?;
    anyhow::ensure!(start < end, "the {name} markers are out of order");
    let head = &document[..start + start_marker.len()];
    let tail = &document[end..];
    Ok(format!("{head}\n{}\n{tail}", body.trim_end()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(server: &str, m: &str, size: Option<u64>, unit: &str, value: Option<f64>, status: Option<&str>) -> Record {
        Record {
            server: server.into(),
            measurement: m.into(),
            size,
            unit: unit.into(),
            value,
            status: status.map(Into::into),
            note: None,
        }
    }

    #[test]
    fn quantiles_are_nearest_rank() {
        let s: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&s, 0.5), 50.0);
        assert_eq!(quantile(&s, 0.99), 99.0);
        assert_eq!(quantile(&s, 0.95), 95.0);
        assert_eq!(quantile(&[3.0], 0.99), 3.0);
    }

    #[test]
    fn records_round_trip_as_json_lines() {
        let r = rec("ours", "serialize", Some(1000), "ms", Some(1.5), None);
        let line = serde_json::to_string(&r).unwrap();
        assert_eq!(line, r#"{"server":"ours","measurement":"serialize","size":1000,"unit":"ms","value":1.5}"#);
        assert_eq!(serde_json::from_str::<Record>(&line).unwrap(), r);
        let t = rec("ref", "serialize", Some(50000), "ms", None, Some("timeout"));
        assert!(serde_json::to_string(&t).unwrap().contains(r#""status":"timeout""#));
    }

    #[test]
    fn comparison_computes_factors_and_goals() {
        let ours = vec![
            rec("ours", "cold_start_p50", None, "ms", Some(5.0), None),
            rec("ours", "query_small_throughput", None, "calls/s", Some(10000.0), None),
            rec("ours", "evolve_one_p50", Some(1000), "ms", Some(0.2), None),
            rec("ours", "evolve_one_p50", Some(50000), "ms", Some(0.3), None),
            rec("ours", "reload_first_query", Some(1), "ms", Some(10.0), None),
            rec("ours", "reload_first_query", Some(1000), "ms", Some(25.0), None),
        ];
        let reference = vec![
            rec("ref", "cold_start_p50", None, "ms", Some(500.0), None),
            rec("ref", "query_small_throughput", None, "calls/s", Some(1000.0), None),
            rec("ref", "evolve_one_p50", Some(50000), "ms", None, Some("timeout")),
        ];
        let table = compare_table(&ours, &reference);
        assert!(table.contains("| 100.0× | ≥ 18× faster: met |"), "{table}");
        assert!(table.contains("| 10.00× | ≥ 20×: **missed** |"), "{table}");
        assert!(table.contains("reference did not finish"), "{table}");
        assert!(table.contains("| 1.500× | within 2× (flat): met |"), "{table}");
        assert!(
            table.contains("| 10.00 ms @1 session | 25.00 ms @1k sessions | 2.500× | within 2× (flat): **missed** |"),
            "{table}"
        );
    }

    #[test]
    fn markers_are_replaced() {
        let (start, end) = markers(RESULTS);
        assert_eq!(start, "<!-- cks-bench:results:start -->");
        let doc = format!("a\n{start}\nold\n{end}\nb\n");
        let new = replace_between_markers(&doc, RESULTS, "new\n").unwrap();
        assert_eq!(new, format!("a\n{start}\nnew\n{end}\nb\n"));
        assert!(replace_between_markers("x", RESULTS, "y").is_err());
    }

    #[test]
    fn named_markers_leave_the_other_sections_alone() {
        let (results_start, results_end) = markers(RESULTS);
        let (scale_start, scale_end) = markers("scale");
        assert_eq!(scale_end, "<!-- cks-bench:scale:end -->");
        let doc = format!("{results_start}\nr\n{results_end}\ntext\n{scale_start}\nold\n{scale_end}\n");
        let new = replace_between_markers(&doc, "scale", "new").unwrap();
        assert_eq!(new, format!("{results_start}\nr\n{results_end}\ntext\n{scale_start}\nnew\n{scale_end}\n"));
        let err = replace_between_markers(&format!("{results_start}\n{results_end}"), "scale", "x").unwrap_err();
        assert!(err.to_string().contains("cks-bench:scale:start"), "{err}");
        let reversed = format!("{scale_end}\n{scale_start}");
        assert!(replace_between_markers(&reversed, "scale", "x").is_err());
    }

    #[test]
    fn not_reached_statuses_name_the_step_and_its_outcome() {
        let timeout = "timeout after 300 s (the 152 MiB request read in 2.1 s, peak RSS 9120 MiB when killed)";
        assert_eq!(outcome(timeout), "timed out after 300 s");
        assert_eq!(outcome("timeout"), "timed out");
        assert_eq!(not_reached("create_validate", timeout), "not reached: session creation timed out after 300 s");
        assert_eq!(
            not_reached("evolve_one_p50", "error: the server closed its stdout"),
            "not reached: a one-object commit failed (the server closed its stdout)"
        );
        let long = format!("error: {}", "x".repeat(200));
        assert!(outcome(&long).len() < 100, "{}", outcome(&long));
        assert_eq!(not_reached("serialize", "not available"), "not reached: `serialize_knowledge` not available");
    }

    #[test]
    fn comparison_shows_how_far_the_reference_got() {
        let created = "timeout after 300 s (the 152 MiB request read in 2.1 s, peak RSS 9120 MiB when killed)";
        let ours = vec![
            rec("ours", "create_validate", Some(100_000), "ms", Some(950.0), None),
            rec("ours", "evolve_one_p50", Some(100_000), "ms", Some(0.3), None),
            rec("ours", "create_validate", Some(1_000_000), "ms", Some(9500.0), None),
            rec("ours", "evolve_one_p50", Some(1_000_000), "ms", Some(0.3), None),
        ];
        let reference = vec![
            rec("ref", "create_validate", Some(100_000), "ms", None, Some(created)),
            rec("ref", "evolve_one_p50", Some(100_000), "ms", None, Some(&not_reached("create_validate", created))),
            rec(
                "ref",
                "create_validate",
                Some(1_000_000),
                "ms",
                None,
                Some("not reached: session creation at 100k timed out after 300 s"),
            ),
            rec("ref", "evolve_one_p50", Some(1_000_000), "ms", None, Some("not reached: a | b")),
        ];
        let table = compare_table(&ours, &reference);
        let rows: Vec<&str> = table.lines().collect();
        let row = |m: &str, size: &str| {
            let prefix = format!("| {} | {size} |", label(m));
            *rows.iter().find(|r| r.starts_with(&prefix)).unwrap_or_else(|| panic!("no {prefix} in {table}"))
        };
        assert_eq!(
            row("create_validate", "100k"),
            format!("| {} | 100k | 950.0 ms | {created} | reference did not finish |  |", label("create_validate"))
        );
        assert!(
            row("evolve_one_p50", "100k").contains(
                "| 0.3000 ms | not reached: session creation timed out after 300 s | reference did not get this far | \
                 ≥ 100× faster |"
            ),
            "{table}"
        );
        assert!(
            row("create_validate", "1M").contains(
                "| 9500 ms | not reached: session creation at 100k timed out after 300 s | reference did not get this far |"
            ),
            "{table}"
        );
        // A status's own `|` does not break the row.
        assert!(row("evolve_one_p50", "1M").contains("| not reached: a \\| b |"), "{table}");
        // Every row of the comparison keeps its seven cell borders.
        for r in rows.iter().take_while(|r| !r.is_empty()).filter(|r| r.starts_with("| ")) {
            assert_eq!(r.matches(" | ").count() + 2, 7, "{r}");
        }
    }
}
