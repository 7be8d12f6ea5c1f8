//! The end-to-end measurements, each on its own server process and fresh data directory.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};

use cks_core::json::to_canonical_string;
use cks_core::sample::random_graph;
use cks_testkit::{ProviderServer, Reply, ToolCall};

use crate::client::{CallError, InFlight, McpClient, ServerCommand, dir_size, vm_hwm_kib};
use crate::postgres::Postgres;
use crate::report::{Recorder, not_reached, outcome, quantile, size_label};

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
const SCALE_MEASUREMENTS: [(&str, &str); 14] = [
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

    /// An `ai_chat` turn of three iterations (tool call, tool call, text) against a local
    /// provider server that answers at once.
    async fn ai_chat(&mut self, tools: Option<Vec<String>>) -> anyhow::Result<()> {
        let size = Some(self.plan.small_objects);
        let names = [
            ("ai_chat_turn_p50", "ms"),
            ("ai_chat_turn_p99", "ms"),
            ("ai_chat_turn_server_p50", "ms"),
            ("ai_chat_turn_server_p99", "ms"),
        ];
        let mut done = HashSet::new();
        let provider = ProviderServer::start().await;
        let base_url = provider.base_url();
        let openai_url = format!("{base_url}/v1");
        let provider_name = self.plan.ai_provider.clone();
        let command = self.command.clone().with_env(&[
            ("CKS_LLM_PROVIDER", &provider_name),
            ("ANTHROPIC_API_KEY", "bench"),
            ("ANTHROPIC_BASE_URL", &base_url),
            ("CKS_OPENAI_API_KEY", "bench"),
            ("CKS_OPENAI_BASE_URL", &openai_url),
        ]);
        if let Some(tools) = &tools
            && !tools.iter().any(|t| t == "ai_chat")
        {
            for (name, unit) in names {
                self.rec.status(name, size, unit, "not available");
            }
            return Ok(());
        }
        let result: Result<(), Stop> = async {
            let (mut client, _dir, session, _, _) =
                self.session_server(&command, "ai_chat", self.plan.small_objects, "ai_chat_turn_p50").await?;
            let listed = client.list_tools().await.or_stop("ai_chat_turn_p50", "ms")?;
            if !listed.iter().any(|t| t == "ai_chat") {
                client.shutdown(GRACE).await;
                for (name, unit) in names {
                    self.rec.status(name, size, unit, "not available");
                    done.insert(name);
                }
                return Ok(());
            }
            let mut samples = Vec::new();
            let mut server_samples = Vec::new();
            for turn in 0..=self.plan.ai_turns {
                provider.clear_requests();
                provider.push_all([
                    Reply::ToolCalls(vec![ToolCall::new(
                        "query_subgraph",
                        json!({"session_id": session, "seed_ids": ["n0"], "depth": 1}),
                    )]),
                    Reply::ToolCalls(vec![ToolCall::new("list_versions", json!({"session_id": session}))]),
                    Reply::text("The graph holds sample concepts linked by five relation types."),
                ]);
                let started = Instant::now();
                let answer = client
                    .call_tool("ai_chat", json!({"session_id": session, "prompt": "Summarise the graph around n0."}))
                    .await;
                let elapsed = started.elapsed();
                let answer = match answer {
                    Ok(answer) => answer,
                    Err(e) => {
                        client.kill().await;
                        return Err(Stop::new("ai_chat_turn_p50", "ms", e));
                    }
                };
                let tool_calls = answer["tool_calls"].as_array().map_or(0, Vec::len);
                if answer["reply"].as_str().is_none() || provider.pending() != 0 || tool_calls != 2 {
                    client.kill().await;
                    let message = format!(
                        "ai_chat turn did not take 3 iterations ({} replies unused, {tool_calls} tool calls): {}",
                        provider.pending(),
                        crate::client::truncate(&answer.to_string(), 300)
                    );
                    return Err(Stop::new("ai_chat_turn_p50", "ms", CallError::Failed(message)));
                }
                if turn > 0 {
                    // The provider's own time (body read, checks, rendering) for the three LLM calls.
                    let provider_time: Duration =
                        provider.requests().iter().filter_map(|r| Some(r.answered_at? - r.received_at)).sum();
                    samples.push(ms(elapsed));
                    server_samples.push(ms(elapsed.saturating_sub(provider_time)));
                }
            }
            let note = Some(format!(
                "{} turns after one warm-up; provider: cks-testkit {provider_name}, answering at once; client-observed, so \
                 it includes the three loopback HTTP round trips to the provider and its own handling",
                samples.len()
            ));
            self.rec.value("ai_chat_turn_p50", size, "ms", quantile(&samples, 0.5), note);
            self.rec.value("ai_chat_turn_p99", size, "ms", quantile(&samples, 0.99), None);
            let note = Some(
                "each turn's client-observed time minus the provider server's own time for its three requests (from \
                 a request's head arriving to its answer being rendered); what remains is the MCP server's work, the \
                 stdio round trip and the loopback HTTP transfers"
                    .to_owned(),
            );
            self.rec.value("ai_chat_turn_server_p50", size, "ms", quantile(&server_samples, 0.5), note);
            self.rec.value("ai_chat_turn_server_p99", size, "ms", quantile(&server_samples, 0.99), None);
            done.extend(["ai_chat_turn_p50", "ai_chat_turn_p99", "ai_chat_turn_server_p50", "ai_chat_turn_server_p99"]);
            client.shutdown(GRACE).await;
            Ok(())
        }
        .await;
        self.finish(result, &names, &mut done, size);
        Ok(())
    }

    /// `concurrent_chats` `ai_chat` turns sent at once over the one stdio connection, against a
    /// provider whose every answer takes 200 ms and asks for one more `query_subgraph`, with the
    /// iteration cap at 3: each turn makes exactly three 200 ms LLM calls, so the whole batch takes
    /// about 600 ms when waiting on the provider never blocks the server. Meanwhile (once all are
    /// sent) `queries_during_chats` sequential `query_subgraph` calls on another session.
    async fn ai_chat_concurrent(&mut self, tools: Option<Vec<String>>) -> anyhow::Result<()> {
        const LLM_DELAY: Duration = Duration::from_millis(200);
        const ITERATIONS: usize = 3;
        let size = Some(self.plan.small_objects);
        let names =
            [("ai_chat_50_concurrent_wall", "ms"), ("query_during_chats_p50", "ms"), ("query_during_chats_p99", "ms")];
        let mut done = HashSet::new();
        if let Some(tools) = &tools
            && !tools.iter().any(|t| t == "ai_chat")
        {
            for (name, unit) in names {
                self.rec.status(name, size, unit, "not available");
            }
            return Ok(());
        }
        let provider = ProviderServer::start().await;
        provider.set_default(Some(Reply::Delay(
            LLM_DELAY,
            Box::new(Reply::ToolCalls(vec![ToolCall::new("query_subgraph", json!({"seed_ids": ["n0"], "depth": 1}))])),
        )));
        let base_url = provider.base_url();
        let openai_url = format!("{base_url}/v1");
        let provider_name = self.plan.ai_provider.clone();
        let iterations = ITERATIONS.to_string();
        let command = self.command.clone().with_env(&[
            ("CKS_LLM_PROVIDER", &provider_name),
            ("ANTHROPIC_API_KEY", "bench"),
            ("ANTHROPIC_BASE_URL", &base_url),
            ("CKS_OPENAI_API_KEY", "bench"),
            ("CKS_OPENAI_BASE_URL", &openai_url),
            ("CKS_AI_CHAT_MAX_ITERATIONS", &iterations),
        ]);
        let plan = self.plan.clone();
        let first = "ai_chat_50_concurrent_wall";
        let result: Result<(), Stop> = async {
            let (mut client, _dir, chat_session, _, _) =
                self.session_server(&command, "ai_chat_concurrent", plan.small_objects, first).await?;
            let prepared = async {
                let listed = client.list_tools().await?;
                if !listed.iter().any(|t| t == "ai_chat") {
                    return Ok(None);
                }
                // A second session for the queries.
                let created = client.call_tool("validate_knowledge", json!({"json_data": sample_json(plan.small_objects)})).await?;
                Ok(Some(created_session(&created)?.0))
            }
            .await;
            let query_session = match prepared {
                Ok(Some(session)) => session,
                Ok(None) => {
                    client.shutdown(GRACE).await;
                    for (name, unit) in names {
                        self.rec.status(name, size, unit, "not available");
                        done.insert(name);
                    }
                    return Ok(());
                }
                Err(e) => {
                    client.kill().await;
                    return Err(Stop::new(first, "ms", e));
                }
            };
            let client = client.into_concurrent();
            let timeout = plan.call_timeout;
            let chat_args =
                json!({"session_id": chat_session, "prompt": "Walk the graph around n0 as far as you can."});
            let query_args = json!({"session_id": query_session, "seed_ids": ["n0"], "depth": 2, "max_objects": 50});
            // Warm-up: one turn (the provider connection) and a few queries, untimed.
            let warmed = async {
                client.call_tool("ai_chat", chat_args.clone(), timeout).await?;
                for _ in 0..10 {
                    client.call_tool("query_subgraph", query_args.clone(), timeout).await?;
                }
                Ok::<(), CallError>(())
            }
            .await;
            if let Err(e) = warmed {
                client.kill().await;
                return Err(Stop::new(first, "ms", e));
            }
            provider.clear_requests();

            let started = Instant::now();
            let mut in_flight: Vec<InFlight> = Vec::with_capacity(plan.concurrent_chats);
            for _ in 0..plan.concurrent_chats {
                match client.send_tool_call("ai_chat", chat_args.clone()).await {
                    Ok(call) => in_flight.push(call),
                    Err(e) => {
                        client.kill().await;
                        return Err(Stop::new(first, "ms", e));
                    }
                }
            }
            let sent = started.elapsed();
            // The turns' completion, awaited on their own task so the queries below do not delay it.
            let chats = tokio::spawn(async move {
                let mut answers = Vec::with_capacity(in_flight.len());
                for call in in_flight {
                    answers.push(call.wait(timeout).await);
                }
                (started.elapsed(), answers)
            });
            let mut samples = Vec::with_capacity(plan.queries_during_chats);
            let mut query_failure = None;
            for _ in 0..plan.queries_during_chats {
                let t = Instant::now();
                match client.call_tool("query_subgraph", query_args.clone(), timeout).await {
                    Ok(_) => samples.push(ms(t.elapsed())),
                    Err(e) => {
                        query_failure = Some(e);
                        break;
                    }
                }
            }
            let queries_done = started.elapsed();
            let (wall, answers) = match chats.await {
                Ok(joined) => joined,
                Err(e) => {
                    client.kill().await;
                    return Err(Stop::new(first, "ms", CallError::Failed(format!("the waiting task failed: {e}"))));
                }
            };
            let llm_calls = provider.requests().len();
            let mut capped = 0;
            for answer in answers {
                match answer {
                    Ok(answer) => {
                        if answer["truncation_reason"] == "max_iterations" {
                            capped += 1;
                        }
                    }
                    Err(e) => {
                        client.kill().await;
                        return Err(Stop::new(first, "ms", e));
                    }
                }
            }
            let expected = plan.concurrent_chats * ITERATIONS;
            if llm_calls != expected {
                // A server that ignores the iteration cap makes more LLM calls per turn: its wall
                // time measures other work, so it is kept as a status, not compared.
                let status = format!(
                    "not comparable: {:.0} ms for {llm_calls} LLM calls, not {expected} (the server does not cap turns \
                     at CKS_AI_CHAT_MAX_ITERATIONS={ITERATIONS})",
                    ms(wall)
                );
                self.rec.status(first, size, "ms", status);
            } else {
                let note = Some(format!(
                "{} turns sent at once on one connection (all written in {:.1} ms), each {ITERATIONS} LLM calls of {} ms \
                 (cks-testkit {provider_name}, CKS_AI_CHAT_MAX_ITERATIONS={ITERATIONS}; {capped} turns ended at the cap); \
                 ideal {} ms",
                plan.concurrent_chats,
                ms(sent),
                LLM_DELAY.as_millis(),
                ITERATIONS as u128 * LLM_DELAY.as_millis()
            ));
                self.rec.value("ai_chat_50_concurrent_wall", size, "ms", ms(wall), note);
            }
            done.insert("ai_chat_50_concurrent_wall");
            if let Some(e) = query_failure {
                client.kill().await;
                return Err(Stop::new("query_during_chats_p50", "ms", e));
            }
            let note = Some(format!(
                "{} sequential calls (depth 2, max_objects 50) on another session of the same connection, started once \
                 the turns were sent; the last answered {:.0} ms after the first turn was sent",
                samples.len(),
                ms(queries_done)
            ));
            self.rec.value("query_during_chats_p50", size, "ms", quantile(&samples, 0.5), note);
            self.rec.value("query_during_chats_p99", size, "ms", quantile(&samples, 0.99), None);
            done.extend(["query_during_chats_p50", "query_during_chats_p99"]);
            client.shutdown(GRACE).await;
            Ok(())
        }
        .await;
        self.finish(result, &names, &mut done, size);
        Ok(())
    }

    /// The graph-scale measurements at one size, each size on a server of its own (a timed-out
    /// server is killed, so the next size starts afresh). Returns why the session could not be
    /// created, when it could not ("session creation at 1000k timed out after 300 s").
    async fn scale(&mut self, size: u64) -> anyhow::Result<Option<String>> {
        let names = SCALE_MEASUREMENTS;
        let mut done = HashSet::new();
        let command = self.command.clone();
        let plan = self.plan.clone();
        let nodes = (size / 2).max(1);
        let result: Result<(), Stop> = async {
            let (mut client, dir, session, first_version, created) =
                self.session_server(&command, &format!("scale-{size}"), size, "create_validate").await?;
            self.rec.value("create_validate", Some(size), "ms", ms(created), None);
            done.insert("create_validate");
            if let Some(kib) = client.sample_rss() {
                self.rec.value("peak_rss_create", Some(size), "MiB", kib as f64 / 1024.0, None);
                done.insert("peak_rss_create");
            }

            // One-object commits.
            let mut samples = Vec::new();
            let mut with_structure = 0;
            let loop_started = Instant::now();
            for i in 0..plan.commits {
                if !plan.another(loop_started, samples.len(), plan.commits) {
                    break;
                }
                let op = json!([{
                    "type": "update_object",
                    "object_id": format!("n{}", (i as u64 * 7_919) % nodes),
                    "structure_patch": {"bench_counter": i},
                    "mode": "merge",
                }]);
                let started = Instant::now();
                let result =
                    client.call_tool("evolve_knowledge", json!({"session_id": session, "operations": op})).await;
                let elapsed = started.elapsed();
                match result {
                    Ok(result) => {
                        samples.push(ms(elapsed));
                        if result.get("serialized").is_some() {
                            with_structure += 1;
                        }
                    }
                    Err(e) => {
                        client.kill().await;
                        return Err(Stop::new("evolve_one_p50", "ms", e));
                    }
                }
            }
            let note = Some(format!(
                "{} commits; {} of them returned the serialized structure{}",
                sampled(samples.len(), plan.commits),
                with_structure,
                if with_structure == 0 { " (cks-mcp includes it only up to 2,000 objects)" } else { "" }
            ));
            self.rec.value("evolve_one_p50", Some(size), "ms", quantile(&samples, 0.5), note);
            self.rec.value("evolve_one_p95", Some(size), "ms", quantile(&samples, 0.95), None);
            done.extend(["evolve_one_p50", "evolve_one_p95"]);

            // Bounded subgraph queries from varying seeds.
            let mut samples = Vec::new();
            let loop_started = Instant::now();
            for i in 0..plan.scale_queries {
                if !plan.another(loop_started, samples.len(), plan.scale_queries) {
                    break;
                }
                let args = json!({"session_id": session, "seed_ids": [format!("n{}", (i as u64 * 104_729) % nodes)],
                    "depth": 2, "max_objects": 50});
                let started = Instant::now();
                if let Err(e) = client.call_tool("query_subgraph", args).await {
                    client.kill().await;
                    return Err(Stop::new("query_depth2_p50", "ms", e));
                }
                samples.push(ms(started.elapsed()));
            }
            let note = Some(format!("{} calls from varying seeds", sampled(samples.len(), plan.scale_queries)));
            self.rec.value("query_depth2_p50", Some(size), "ms", quantile(&samples, 0.5), note);
            done.insert("query_depth2_p50");

            let repeated: [(&'static str, &str, Value); 3] = [
                ("serialize", "serialize_knowledge", json!({"session_id": session})),
                ("list_versions", "list_versions", json!({"session_id": session})),
                (
                    "compare_versions",
                    "compare_versions",
                    json!({"session_id": session, "target_version_id": first_version}),
                ),
            ];
            for (measurement, tool, args) in repeated {
                let peak_of_serialize = measurement == "serialize" && client.start_new_peak();
                let repeats = if measurement == "list_versions" { plan.scale_queries } else { plan.repeats };
                let mut samples = Vec::new();
                let mut decoded = Vec::new();
                let mut note = None;
                let loop_started = Instant::now();
                for _ in 0..repeats.max(1) {
                    if !samples.is_empty() && !plan.another(loop_started, samples.len(), repeats) {
                        break;
                    }
                    let started = Instant::now();
                    // The server's time is until the answer's last byte arrives; it counts only
                    // once the answer is known to be no failure. This client's decoding of the
                    // line (and of the document, which it does not do) is not the server's
                    // time, but for `serialize_knowledge` is recorded as well.
                    match client.call_tool_text(tool, args.clone()).await {
                        Ok(text) => {
                            decoded.push(ms(started.elapsed()));
                            samples.push(ms(client.received_in().unwrap_or_else(|| started.elapsed())));
                            if measurement == "list_versions" {
                                let result: Value = serde_json::from_str(&text).unwrap_or_default();
                                let n = result["versions"].as_array().map_or(0, Vec::len);
                                note = Some(format!("{n} versions listed"));
                            }
                        }
                        Err(e) => {
                            client.kill().await;
                            return Err(Stop::new(measurement, "ms", e));
                        }
                    }
                }
                if repeats > 1 {
                    let runs = format!("median of {}", sampled(samples.len(), repeats));
                    note = Some(note.map_or(runs.clone(), |n| format!("{n}; {runs}")));
                }
                if measurement == "serialize" {
                    let note = Some(format!("{} calls, each until its line is decoded", decoded.len()));
                    self.rec.value("serialize_decoded", Some(size), "ms", quantile(&decoded, 0.5), note);
                    done.insert("serialize_decoded");
                }
                self.rec.value(measurement, Some(size), "ms", quantile(&samples, 0.5), note);
                done.insert(measurement);
                if peak_of_serialize && let Some(kib) = vm_hwm_kib(client.pid()) {
                    let note = Some("peak RSS while serializing (from the RSS before the first call)".into());
                    self.rec.value("peak_rss_serialize", Some(size), "MiB", kib as f64 / 1024.0, note);
                    done.insert("peak_rss_serialize");
                }
            }

            let peak = client.shutdown(GRACE).await;
            if let Some(kib) = peak {
                self.rec.value("peak_rss", Some(size), "MiB", kib as f64 / 1024.0, None);
                done.insert("peak_rss");
            }
            let on_disk = match &self.postgres {
                Some(postgres) => {
                    let url = std::fs::read_to_string(dir.join(DATABASE_URL_FILE)).unwrap_or_default();
                    postgres.database_size(&url)
                }
                None => dir_size(&dir),
            };
            self.rec.value("disk_size", Some(size), "MiB", on_disk as f64 / MIB, None);
            done.insert("disk_size");

            // Restart on the same data: time to the first successful query, the median of
            // several restarts (one start is at the mercy of whatever else the machine does).
            const RESTARTS: usize = 5;
            let started = Instant::now();
            let mut times = Vec::new();
            let mut peak_kib: Option<u64> = None;
            while self.plan.another(started, times.len(), RESTARTS) {
                let (client, elapsed) = self.restart_and_query(&command, &dir, &session, "restart_first_query").await?;
                times.push(ms(elapsed));
                peak_kib = peak_kib.max(client.shutdown(GRACE).await);
            }
            let note =
                format!("spawn → initialize → query_subgraph, median of {} restarts", sampled(times.len(), RESTARTS));
            self.rec.value("restart_first_query", Some(size), "ms", quantile(&times, 0.5), Some(note));
            done.insert("restart_first_query");
            if let Some(kib) = peak_kib {
                self.rec.value("peak_rss_restart", Some(size), "MiB", kib as f64 / 1024.0, None);
                done.insert("peak_rss_restart");
            }
            Ok(())
        }
        .await;
        let creation_failed = match &result {
            Err(stop) if stop.measurement == "create_validate" => Some(format!(
                "session creation at {} {}",
                size_label("create_validate", Some(size)),
                outcome(&stop.status)
            )),
            _ => None,
        };
        self.finish(result, &names, &mut done, Some(size));
        Ok(creation_failed)
    }
}

impl Bench<'_> {
    /// Starts a server on existing data and times spawn → `initialize` → first successful
    /// `query_subgraph` (seed `n0`, depth 2, `max_objects` 50) on `session`. Returns the running
    /// client and the time.
    async fn restart_and_query(
        &self,
        command: &ServerCommand,
        dir: &Path,
        session: &str,
        measurement: &'static str,
    ) -> Result<(McpClient, Duration), Stop> {
        let started = Instant::now();
        let mut client = self.spawn(command, dir).or_stop(measurement, "ms")?;
        let queried = async {
            client.initialize().await?;
            let args = json!({"session_id": session, "seed_ids": ["n0"], "depth": 2, "max_objects": 50});
            client.call_tool("query_subgraph", args).await
        }
        .await;
        let elapsed = started.elapsed();
        match queried {
            Ok(_) => Ok((client, elapsed)),
            Err(e) => {
                client.kill().await;
                Err(Stop::new(measurement, "ms", e))
            }
        }
    }

    /// Restart cost against the number of stored sessions: one data directory gains small
    /// sessions up to each count of `session_counts`; after each count the server is restarted
    /// three times, and spawn → `initialize` → first successful `query_subgraph` on the first
    /// session is timed (the median is recorded, with the count as the size). Then one more
    /// restart reads every stored session once, in order, and its peak RSS is recorded: memory
    /// that follows the session cache, not the number of sessions, stays flat.
    async fn reload(&mut self) -> anyhow::Result<()> {
        const RESTARTS: usize = 3;
        let plan = self.plan.clone();
        let command = self.command.clone();
        let objects = plan.reload_objects.unwrap_or(plan.small_objects);
        let graph = sample_json(objects);
        let mut sessions: Vec<String> = Vec::new();
        let mut counts = plan.session_counts.clone();
        counts.sort_unstable();
        counts.dedup();
        let dir = self.fresh_dir("reload")?;
        let mut stored = 0;
        let mut first_session: Option<String> = None;
        let mut reason: Option<String> = None;
        for &count in &counts {
            if let Some(reason) = &reason {
                self.rec.status("reload_first_query", Some(count), "ms", reason.clone());
                continue;
            }
            let outcome: Result<(f64, Option<u64>), Stop> = async {
                // Add sessions up to `count` on a server of its own.
                let mut client = self.spawn(&command, &dir).or_stop("reload_first_query", "ms")?;
                let added = async {
                    client.initialize().await?;
                    while stored < count {
                        let result = client.call_tool("validate_knowledge", json!({"json_data": graph})).await?;
                        let (session, _) = created_session(&result)?;
                        first_session.get_or_insert(session.clone());
                        sessions.push(session);
                        stored += 1;
                    }
                    Ok(())
                }
                .await;
                if let Err(e) = added {
                    client.kill().await;
                    return Err(Stop::new("reload_first_query", "ms", e));
                }
                client.shutdown(GRACE).await;
                let session = first_session.clone().unwrap_or_default();
                let mut samples = Vec::with_capacity(RESTARTS);
                for _ in 0..RESTARTS {
                    let (client, elapsed) =
                        self.restart_and_query(&command, &dir, &session, "reload_first_query").await?;
                    samples.push(ms(elapsed));
                    client.shutdown(GRACE).await;
                }
                let (mut client, _) = self.restart_and_query(&command, &dir, &session, "reload_first_query").await?;
                for session in &sessions {
                    let args = json!({"session_id": session, "seed_ids": ["n0"], "depth": 1, "max_objects": 10});
                    if let Err(e) = client.call_tool("query_subgraph", args).await {
                        client.kill().await;
                        return Err(Stop::new("reload_first_query", "ms", e));
                    }
                    client.sample_rss();
                }
                let touched_kib = client.shutdown(GRACE).await;
                Ok((quantile(&samples, 0.5), touched_kib))
            }
            .await;
            match outcome {
                Ok((median, touched_kib)) => {
                    let note = format!(
                        "stored sessions: {count}, of {objects} objects each; spawn → initialize → query_subgraph on \
                         the first one, median of {RESTARTS} restarts"
                    );
                    self.rec.value("reload_first_query", Some(count), "ms", median, Some(note));
                    if let Some(kib) = touched_kib {
                        let note = format!("after a restart, every one of the {count} sessions read once, in order");
                        self.rec.value("reload_touch_all_rss", Some(count), "MiB", kib as f64 / 1024.0, Some(note));
                    }
                }
                Err(stop) => {
                    self.rec.status("reload_first_query", Some(count), "ms", stop.status.clone());
                    reason = Some(format!(
                        "not reached: the run with {count} sessions {}",
                        crate::report::outcome(&stop.status)
                    ));
                }
            }
        }
        Ok(())
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
