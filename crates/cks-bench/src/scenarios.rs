//! The end-to-end measurements, each on its own server process and fresh data directory: start-up
//! and queries here, `ai_chat` in `scenarios/chat.rs`, graph scale and restarts in
//! `scenarios/scale.rs`, and the retrieval groups, LoCoMo (`--locomo`) in `scenarios/locomo.rs` and
//! BEIR (`--beir`) in `scenarios/beir.rs`, with what they share in `scenarios/retrieval.rs`; entity
//! matching (`--er`) in `scenarios/matching.rs`.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};

use cks_core::json::to_canonical_string;
use cks_core::sample::random_graph;
use cks_testkit::{ProviderServer, Reply, ToolCall};

use crate::client::{CallError, InFlight, McpClient, ServerCommand};
use crate::host::{dir_size, vm_hwm_kib};
use crate::postgres::Postgres;
use crate::report::{Recorder, not_reached, outcome, quantile, size_label};

mod beir;
mod chat;
mod locomo;
mod matching;
mod retrieval;
mod scale;

pub(crate) use beir::BeirPlan;
pub(crate) use locomo::LocomoPlan;
pub(crate) use matching::MatchingPlan;
pub(crate) use retrieval::MODES;

/// What to measure, and how much.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// Cold starts timed (after one untimed warm-up start).
    pub(crate) starts: usize,
    /// Sequential `query_subgraph` calls on the small session.
    pub(crate) queries: usize,
    /// Objects in the small session (half nodes, half relations).
    pub(crate) small_objects: u64,
    /// Timed `ai_chat` turns (after one untimed warm-up turn).
    pub(crate) ai_turns: usize,
    /// `ai_chat` turns sent at once on one connection (group `ai_chat_concurrent`).
    pub(crate) concurrent_chats: usize,
    /// Sequential `query_subgraph` calls on another session while those turns run.
    pub(crate) queries_during_chats: usize,
    /// Graph sizes in objects.
    pub(crate) sizes: Vec<u64>,
    /// One-object commits per size (their latencies give the evolve percentiles; list_versions and
    /// compare_versions run after them).
    pub(crate) commits: usize,
    /// `query_subgraph` depth-2 calls per size, and `list_versions` calls (cheap calls: a median of
    /// a few would be at the mercy of whatever else the machine does).
    pub(crate) scale_queries: usize,
    /// Repeats of serialize / compare_versions per size (the median is kept).
    pub(crate) repeats: usize,
    pub(crate) call_timeout: Duration,
    /// The timeout of the `validate_knowledge` call that creates a scale group's session [the
    /// per-call timeout].
    pub(crate) create_timeout: Option<Duration>,
    /// Once a repeated measurement has run this long it stops (after at least [`MIN_SAMPLES`]).
    pub(crate) measurement_budget: Duration,
    /// Numbers of stored sessions before the restarts of the reload group.
    pub(crate) session_counts: Vec<u64>,
    /// Objects in each of the reload group's sessions (default: `small_objects`).
    pub(crate) reload_objects: Option<u64>,
    /// Which groups run: cold, query, ai_chat, ai_chat_concurrent, scale, reload.
    pub(crate) groups: Vec<String>,
    /// `CKS_LLM_PROVIDER` for the ai_chat server: `anthropic` (the documented contract) or
    /// `openai_compatible` (for a server that cannot point Anthropic at a local URL, like the
    /// reference, whose Anthropic endpoint is hard-coded).
    pub(crate) ai_provider: String,
}

impl Plan {
    pub(crate) fn full() -> Plan {
        Plan {
            starts: 10,
            queries: 2_000,
            small_objects: 100,
            ai_turns: 100,
            concurrent_chats: 50,
            queries_during_chats: 200,
            sizes: vec![1_000, 10_000, 50_000],
            commits: 30,
            scale_queries: 50,
            repeats: 3,
            call_timeout: Duration::from_secs(120),
            create_timeout: None,
            measurement_budget: Duration::from_secs(120),
            session_counts: vec![1, 100, 1_000],
            reload_objects: None,
            groups: ["cold", "query", "ai_chat", "ai_chat_concurrent", "scale", "reload"].map(String::from).to_vec(),
            ai_provider: "anthropic".into(),
        }
    }

    /// Tiny sizes that finish in seconds, for the test suite.
    pub(crate) fn smoke() -> Plan {
        Plan {
            starts: 3,
            queries: 20,
            small_objects: 20,
            ai_turns: 3,
            sizes: vec![50],
            commits: 5,
            scale_queries: 5,
            repeats: 1,
            call_timeout: Duration::from_secs(60),
            session_counts: vec![1, 5],
            reload_objects: None,
            groups: ["cold", "query", "ai_chat", "scale", "reload"].map(String::from).to_vec(),
            ..Plan::full()
        }
    }

    fn runs(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }

    /// Whether a repeated measurement that started at `started` and has `samples` of its `planned`
    /// samples takes another: always up to [`MIN_SAMPLES`], then while the budget lasts.
    fn another(&self, started: Instant, samples: usize, planned: usize) -> bool {
        samples < planned && (samples < MIN_SAMPLES || started.elapsed() < self.measurement_budget)
    }
}

/// Samples every repeated measurement takes, whatever its time budget.
const MIN_SAMPLES: usize = 3;

/// "n of m" for a note, when the budget cut a measurement short.
fn sampled(samples: usize, planned: usize) -> String {
    if samples < planned {
        format!("{samples} of the planned {planned} (time budget spent)")
    } else {
        samples.to_string()
    }
}

/// Everything a scenario needs: the server command, a scratch directory and the recorder.
pub(crate) struct Bench<'a> {
    pub(crate) command: ServerCommand,
    pub(crate) plan: Plan,
    pub(crate) work: PathBuf,
    pub(crate) rec: &'a mut Recorder,
    /// When set, each data directory's server stores into a fresh PostgreSQL database instead of
    /// the SQLite file in it.
    pub(crate) postgres: Option<Postgres>,
    counter: usize,
}

impl std::fmt::Debug for Bench<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bench").field("command", &self.command).field("work", &self.work).finish()
    }
}

const GRACE: Duration = Duration::from_secs(10);
const MIB: f64 = 1024.0 * 1024.0;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Why a scenario stopped early: recorded for the failing measurement, and as "skipped" for the
/// ones after it.
struct Stop {
    measurement: &'static str,
    unit: &'static str,
    status: String,
}

impl Stop {
    fn new(measurement: &'static str, unit: &'static str, error: CallError) -> Stop {
        let status = match error {
            CallError::Timeout(_) => error.to_string(),
            CallError::Failed(message) => format!("error: {message}"),
        };
        Stop { measurement, unit, status }
    }
}

trait OrStop<T> {
    fn or_stop(self, measurement: &'static str, unit: &'static str) -> Result<T, Stop>;
}

impl<T> OrStop<T> for Result<T, CallError> {
    fn or_stop(self, measurement: &'static str, unit: &'static str) -> Result<T, Stop> {
        self.map_err(|e| Stop::new(measurement, unit, e))
    }
}

/// In a data directory of a PostgreSQL run: the URL of its database.
const DATABASE_URL_FILE: &str = "database-url";

fn dir_name(dir: &Path) -> String {
    dir.file_name().map_or_else(String::new, |name| name.to_string_lossy().into_owned())
}

/// The measurements of the scale group, at each size.
const SCALE_MEASUREMENTS: [(&str, &str); 15] = [
    ("create_validate", "ms"),
    ("peak_rss_create", "MiB"),
    ("evolve_one_p50", "ms"),
    ("evolve_one_p95", "ms"),
    ("query_depth2_p50", "ms"),
    ("serialize", "ms"),
    ("serialize_decoded", "ms"),
    ("list_versions", "ms"),
    ("compare_versions", "ms"),
    ("peak_rss_serialize", "MiB"),
    ("peak_rss", "MiB"),
    ("disk_size", "MiB"),
    ("restart_first_query", "ms"),
    ("peak_rss_restart", "MiB"),
    ("restart_first_search", "ms"),
];

/// Our server's default limit on one incoming message (`CKS_MCP_MAX_MESSAGE_BYTES`).
const DEFAULT_MESSAGE_LIMIT: usize = 64 * 1024 * 1024;

/// `command`, with `CKS_MCP_MAX_MESSAGE_BYTES` raised to fit a `validate_knowledge` request
/// carrying `json_bytes` of graph text (escaped inside the request, at most twice as long) when
/// our default limit would refuse it and neither the command nor this process's environment sets
/// the variable. A server that does not know the variable (the reference) ignores it.
pub(crate) fn with_message_limit(command: &ServerCommand, json_bytes: usize, inherited: Option<&str>) -> ServerCommand {
    const VAR: &str = "CKS_MCP_MAX_MESSAGE_BYTES";
    let needed = json_bytes.saturating_mul(2).saturating_add(1 << 20);
    if needed <= DEFAULT_MESSAGE_LIMIT || command.env.contains_key(VAR) || inherited.is_some() {
        return command.clone();
    }
    command.clone().with_env(&[(VAR, &needed.to_string())])
}

/// A size in bytes for a status: "740 KiB", "295 MiB".
fn bytes_text(bytes: usize) -> String {
    if bytes < 1 << 20 { format!("{} KiB", bytes.div_ceil(1024)) } else { format!("{:.0} MiB", bytes as f64 / MIB) }
}

/// The canonical JSON text of the deterministic sample graph of `objects` objects.
pub(crate) fn sample_json(objects: u64) -> String {
    let half = (objects / 2) as usize;
    to_canonical_string(&random_graph(half, objects as usize - half, 42))
}

impl<'a> Bench<'a> {
    pub(crate) fn new(command: ServerCommand, plan: Plan, work: PathBuf, rec: &'a mut Recorder) -> Bench<'a> {
        Bench { command, plan, work, rec, postgres: None, counter: 0 }
    }

    fn fresh_dir(&mut self, label: &str) -> anyhow::Result<PathBuf> {
        self.counter += 1;
        let dir = self.work.join(format!("{:03}-{label}", self.counter));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        if let Some(postgres) = &self.postgres {
            std::fs::write(dir.join(DATABASE_URL_FILE), postgres.fresh_database(&dir_name(&dir)))?;
        }
        Ok(dir)
    }

    fn spawn(&self, command: &ServerCommand, data: &Path) -> Result<McpClient, CallError> {
        let log = self.work.join("server-stderr.log");
        let on_postgres = std::fs::read_to_string(data.join(DATABASE_URL_FILE))
            .map(|url| command.clone().with_env(&[("CKS_MCP_DB_PATH", &url)]));
        let command = on_postgres.as_ref().unwrap_or(command);
        McpClient::spawn(command, data, &log, self.plan.call_timeout).map_err(CallError::from)
    }

    pub(crate) async fn run_all(&mut self) -> anyhow::Result<()> {
        let mut tools = None;
        if self.plan.runs("cold") {
            tools = self.cold_start().await?;
        }
        if self.plan.runs("query") {
            self.query_small().await?;
        }
        if self.plan.runs("ai_chat") {
            self.ai_chat(tools.clone()).await?;
        }
        if self.plan.runs("ai_chat_concurrent") {
            self.ai_chat_concurrent(tools).await?;
        }
        if self.plan.runs("scale") {
            // Once a size's session could not be created, the sizes from it up are not tried
            // (their measurements are recorded as not reached); smaller ones still run.
            let mut failed: Option<(u64, String)> = None;
            for size in self.plan.sizes.clone() {
                if let Some((_, why)) = failed.as_ref().filter(|(at, _)| *at <= size) {
                    for (name, unit) in SCALE_MEASUREMENTS {
                        self.rec.status(name, Some(size), unit, format!("not reached: {why}"));
                    }
                    continue;
                }
                if let Some(why) = self.scale(size).await? {
                    failed = Some((size, why));
                }
            }
        }
        if self.plan.runs("reload") {
            self.reload().await?;
        }
        Ok(())
    }

    /// Spawn → initialize → tools/list, on a fresh data directory each time. Returns the tool names.
    async fn cold_start(&mut self) -> anyhow::Result<Option<Vec<String>>> {
        let mut samples = Vec::new();
        let mut tools = None;
        for i in 0..=self.plan.starts {
            let dir = self.fresh_dir("cold")?;
            let started = Instant::now();
            let outcome = async {
                let mut client = self.spawn(&self.command, &dir)?;
                let listed = async {
                    client.initialize().await?;
                    client.list_tools().await
                }
                .await;
                let elapsed = started.elapsed();
                match listed {
                    Ok(names) => {
                        client.shutdown(GRACE).await;
                        Ok((elapsed, names))
                    }
                    Err(e) => {
                        client.kill().await;
                        Err(e)
                    }
                }
            }
            .await;
            match outcome {
                Ok((elapsed, names)) => {
                    if i > 0 {
                        samples.push(ms(elapsed));
                    }
                    tools = Some(names);
                }
                Err(e) => {
                    let stop = Stop::new("cold_start_p50", "ms", e);
                    self.rec.status("cold_start_p50", None, "ms", stop.status.clone());
                    self.rec.status("cold_start_max", None, "ms", stop.status);
                    return Ok(None);
                }
            }
        }
        let note = Some(format!("{} starts after one warm-up, each on a fresh data directory", samples.len()));
        self.rec.value("cold_start_p50", None, "ms", quantile(&samples, 0.5), note);
        self.rec.value("cold_start_max", None, "ms", quantile(&samples, 1.0), None);
        Ok(tools)
    }

    /// Starts a server on a fresh directory, initializes it and creates a session from the
    /// sample graph of `objects` objects with one `validate_knowledge` call. Returns (client, data
    /// directory, session id, first version id, creation time).
    async fn session_server(
        &mut self,
        command: &ServerCommand,
        label: &str,
        objects: u64,
        measurement: &'static str,
    ) -> Result<(McpClient, PathBuf, String, String, Duration), Stop> {
        let dir = self.fresh_dir(label).map_err(|e| Stop::new(measurement, "ms", e.into()))?;
        let json_data = sample_json(objects);
        let inherited = std::env::var("CKS_MCP_MAX_MESSAGE_BYTES").ok();
        let command = with_message_limit(command, json_data.len(), inherited.as_deref());
        let mut client = self.spawn(&command, &dir).or_stop(measurement, "ms")?;
        if let Err(e) = client.initialize().await {
            client.kill().await;
            return Err(Stop::new(measurement, "ms", e));
        }
        if let Some(timeout) = self.plan.create_timeout {
            client.set_timeout(timeout);
        }
        let started = Instant::now();
        let result = client.call_tool("validate_knowledge", json!({"json_data": json_data})).await;
        // From the request's first byte to its answer: copying and encoding the graph's text
        // into the request is this client's work, not the server's.
        let elapsed = client.exchanged_in().unwrap_or_else(|| started.elapsed());
        client.set_timeout(self.plan.call_timeout);
        let graph = bytes_text(json_data.len());
        match result.and_then(|result| created_session(&result)) {
            Ok((session, version)) => Ok((client, dir, session, version, elapsed)),
            Err(CallError::Failed(message)) if message.contains("closed its stdout") => {
                let peak = client.kill().await;
                let status = format!(
                    "error: the server died on the request with the {graph} graph after {:.0} ms{} ({message})",
                    ms(elapsed),
                    peak.map(|kib| format!(", peak RSS {:.0} MiB", kib as f64 / 1024.0)).unwrap_or_default()
                );
                Err(Stop { measurement, unit: "ms", status })
            }
            Err(e @ CallError::Timeout(_)) => {
                // How far it got: whether it read the whole request, and its memory by then.
                let sent_in = client.sent_in();
                let peak = client.kill().await;
                let mut how_far = vec![match sent_in {
                    Some(d) => format!("the request with the {graph} graph read whole in {:.1} s", d.as_secs_f64()),
                    None => format!("the request with the {graph} graph not read whole"),
                }];
                if let Some(kib) = peak {
                    how_far.push(format!("peak RSS {:.0} MiB when killed", kib as f64 / 1024.0));
                }
                let status = format!("{e} ({})", how_far.join(", "));
                Err(Stop { measurement, unit: "ms", status })
            }
            Err(e) => {
                client.kill().await;
                Err(Stop::new(measurement, "ms", e))
            }
        }
    }

    /// `query_subgraph` on a small session: per-call latency and sequential throughput.
    async fn query_small(&mut self) -> anyhow::Result<()> {
        let size = Some(self.plan.small_objects);
        let names = [
            ("query_small_p50", "ms"),
            ("query_small_p99", "ms"),
            ("query_small_throughput", "calls/s"),
            ("peak_rss_small", "MiB"),
        ];
        let command = self.command.clone();
        let mut done = HashSet::new();
        let result: Result<(), Stop> = async {
            let (mut client, _dir, session, _, _) =
                self.session_server(&command, "query", self.plan.small_objects, "query_small_p50").await?;
            let args = json!({"session_id": session, "seed_ids": ["n0"], "depth": 2, "max_objects": 50});
            let warmup = (self.plan.queries / 20).clamp(1, 100);
            let mut samples = Vec::with_capacity(self.plan.queries);
            let mut failure = None;
            for _ in 0..warmup {
                if let Err(e) = client.call_tool("query_subgraph", args.clone()).await {
                    failure = Some(e);
                    break;
                }
            }
            let all = Instant::now();
            if failure.is_none() {
                for _ in 0..self.plan.queries {
                    let started = Instant::now();
                    match client.call_tool("query_subgraph", args.clone()).await {
                        Ok(_) => samples.push(ms(started.elapsed())),
                        Err(e) => {
                            failure = Some(e);
                            break;
                        }
                    }
                }
            }
            let total = all.elapsed();
            if let Some(e) = failure {
                client.kill().await;
                return Err(Stop::new("query_small_p50", "ms", e));
            }
            let note = Some(format!("{} sequential calls, depth 2, max_objects 50", samples.len()));
            self.rec.value("query_small_p50", size, "ms", quantile(&samples, 0.5), note);
            self.rec.value("query_small_p99", size, "ms", quantile(&samples, 0.99), None);
            self.rec.value("query_small_throughput", size, "calls/s", samples.len() as f64 / total.as_secs_f64(), None);
            done.extend(["query_small_p50", "query_small_p99", "query_small_throughput"]);
            let peak = client.shutdown(GRACE).await;
            if let Some(kib) = peak {
                self.rec.value("peak_rss_small", size, "MiB", kib as f64 * 1024.0 / MIB, None);
                done.insert("peak_rss_small");
            }
            Ok(())
        }
        .await;
        self.finish(result, &names, &mut done, size);
        Ok(())
    }

    /// Records the stop (if any) and "skipped" for every measurement of the scenario not recorded.
    fn finish(
        &mut self,
        result: Result<(), Stop>,
        names: &[(&'static str, &'static str)],
        done: &mut HashSet<&'static str>,
        size: Option<u64>,
    ) {
        let mut reason = "skipped: not measured".to_owned();
        if let Err(stop) = result {
            if !done.contains(stop.measurement) {
                self.rec.status(stop.measurement, size, stop.unit, stop.status.clone());
                done.insert(stop.measurement);
            }
            reason = not_reached(stop.measurement, &stop.status);
        }
        for (name, unit) in names {
            if !done.contains(name) {
                self.rec.status(name, size, unit, reason.clone());
            }
        }
    }
}

/// The session and version ids of a successful `validate_knowledge` of `json_data`.
fn created_session(result: &Value) -> Result<(String, String), CallError> {
    let session = result["session_id"].as_str().unwrap_or_default().to_owned();
    let version = result["version_id"].as_str().unwrap_or_default().to_owned();
    if session.is_empty() || result["valid"] != json!(true) {
        let message = format!(
            "validate_knowledge did not create a session: {}",
            crate::client::truncate(&result.to_string(), 300)
        );
        return Err(CallError::Failed(message));
    }
    Ok((session, version))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_limit_is_raised_only_where_our_default_refuses_the_request() {
        const VAR: &str = "CKS_MCP_MAX_MESSAGE_BYTES";
        let command = ServerCommand::parse("cks-mcp").unwrap();
        // 50k objects (about 7 MiB of graph text): the default is enough.
        assert!(!with_message_limit(&command, 7 << 20, None).env.contains_key(VAR));
        // 1M objects (about 135 MiB): raised to fit the request, escaped.
        let raised = with_message_limit(&command, 135 << 20, None);
        let limit: usize = raised.env[VAR].parse().unwrap();
        assert!(limit >= 2 * (135 << 20), "{limit}");
        // Set by whoever runs the benchmark: left alone.
        assert!(!with_message_limit(&command, 135 << 20, Some("1000")).env.contains_key(VAR));
        let set = command.clone().with_env(&[(VAR, "5")]);
        assert_eq!(with_message_limit(&set, 135 << 20, None).env[VAR], "5");
    }

    #[test]
    fn sizes_read_in_kib_or_mib() {
        assert_eq!(bytes_text(70_000), "69 KiB");
        assert_eq!(bytes_text(309_329_920), "295 MiB");
    }

    #[test]
    fn the_scale_measurements_all_have_labels() {
        let records = SCALE_MEASUREMENTS.map(|(m, unit)| crate::report::Record {
            server: "ours".into(),
            measurement: m.into(),
            size: Some(1_000_000),
            unit: unit.into(),
            value: None,
            status: Some("not reached: session creation at 100k timed out after 300 s".into()),
            note: None,
        });
        let table = crate::report::markdown_table(&records);
        for (m, _) in SCALE_MEASUREMENTS {
            assert!(!table.contains(&format!("| {m} |")), "{m} has no label: {table}");
        }
        assert_eq!(
            table.matches("| 1M | not reached: session creation at 100k timed out after 300 s |").count(),
            SCALE_MEASUREMENTS.len()
        );
    }
}
