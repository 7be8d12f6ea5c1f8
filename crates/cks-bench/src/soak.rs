//! `cks-bench --soak-minutes N`: one server under mixed load for N minutes, sampling its memory and
//! open file descriptors once a minute.
//!
//! The load, all at once on one server: graph work over stdio (commits, queries, history, version
//! diffs, serialization; a fresh session every few hundred commits), branch → change → merge cycles,
//! a big graph created, read and closed now and then, the same tools over the bare JSON-RPC HTTP
//! form together with malformed requests, and `ai_chat` turns in flight against the scripted
//! provider server, some of them cancelled. An unexpected error is any failed call that the load
//! did not provoke on purpose. The goal: no unexpected error, and RSS and descriptors flat (within
//! 10 %) after the warm-up.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};
use tokio::sync::Mutex;

use cks_testkit::{ProviderServer, Reply, ToolCall};

use crate::client::{CallError, ConcurrentClient, HttpClient, McpClient, ServerCommand, free_port};
use crate::scenarios::sample_json;

/// How long and how hard.
#[derive(Debug, Clone)]
pub(crate) struct SoakPlan {
    pub(crate) duration: Duration,
    pub(crate) sample_every: Duration,
    /// Samples taken before this are not held to the flatness goal.
    pub(crate) warmup: Duration,
    pub(crate) call_timeout: Duration,
}

impl SoakPlan {
    pub(crate) fn minutes(minutes: f64) -> SoakPlan {
        let duration = Duration::from_secs_f64(minutes * 60.0);
        // A fifth of the run (5 minutes of 30 at most) settles caches and allocator pools.
        let warmup = (duration / 5).min(Duration::from_secs(300));
        let sample_every = if minutes >= 5.0 { Duration::from_secs(60) } else { duration / 5 };
        SoakPlan { duration, sample_every, warmup, call_timeout: Duration::from_secs(120) }
    }
}

/// How often RSS is read between two samples. A single reading says which transient (a large
/// answer being built, a large graph being parsed) happened to be in flight at that instant; the
/// median of a minute's readings is what the server holds, and flatness is judged on it.
const RSS_READ_EVERY: Duration = Duration::from_secs(5);

/// One sample of the server process.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Sample {
    pub(crate) seconds: f64,
    /// The median of the RSS readings since the previous sample.
    pub(crate) rss_kib: u64,
    /// The lowest and highest of those readings.
    pub(crate) rss_min_kib: u64,
    pub(crate) rss_max_kib: u64,
    pub(crate) fds: u64,
    pub(crate) calls: u64,
    pub(crate) unexpected_errors: u64,
}

/// What the run saw.
#[derive(Debug, serde::Serialize)]
pub(crate) struct SoakReport {
    pub(crate) samples: Vec<Sample>,
    pub(crate) calls_by_kind: Vec<(String, u64)>,
    pub(crate) unexpected_errors: u64,
    /// The first few unexpected errors, for the log.
    pub(crate) first_errors: Vec<String>,
    /// (max - min) / min after the warm-up, in percent.
    pub(crate) rss_spread_percent: f64,
    pub(crate) fd_spread_percent: f64,
}

impl SoakReport {
    pub(crate) fn passed(&self) -> bool {
        self.unexpected_errors == 0 && self.rss_spread_percent <= 10.0 && self.fd_spread_percent <= 10.0
    }

    pub(crate) fn markdown(&self, minutes: f64) -> String {
        let mut out = format!(
            "Soak: {minutes} min, {} calls, {} unexpected errors; after warm-up the spread of the per-minute \
             RSS medians {:.1} %, descriptors spread {:.1} % (goal: 0 errors, both ≤ 10 %): **{}**\n\n",
            self.samples.last().map_or(0, |s| s.calls),
            self.unexpected_errors,
            self.rss_spread_percent,
            self.fd_spread_percent,
            if self.passed() { "met" } else { "missed" },
        );
        out.push_str(
            "| minute | RSS median (MiB) | RSS lowest – highest (MiB) | open fds | calls so far | unexpected errors |\n\
             |---:|---:|---:|---:|---:|---:|\n",
        );
        for s in &self.samples {
            out.push_str(&format!(
                "| {:.1} | {:.1} | {:.1} – {:.1} | {} | {} | {} |\n",
                s.seconds / 60.0,
                s.rss_kib as f64 / 1024.0,
                s.rss_min_kib as f64 / 1024.0,
                s.rss_max_kib as f64 / 1024.0,
                s.fds,
                s.calls,
                s.unexpected_errors
            ));
        }
        out.push_str("\nCalls by kind: ");
        let kinds: Vec<String> = self.calls_by_kind.iter().map(|(k, n)| format!("{k} {n}")).collect();
        out.push_str(&kinds.join(", "));
        out.push('\n');
        for e in &self.first_errors {
            out.push_str(&format!("\n- unexpected: {e}"));
        }
        out
    }
}

/// Counters shared by the workers.
#[derive(Debug, Default)]
struct Tally {
    calls: AtomicU64,
    unexpected: AtomicU64,
    first_errors: Mutex<Vec<String>>,
    by_kind: std::sync::Mutex<std::collections::BTreeMap<&'static str, u64>>,
}

impl Tally {
    fn count(&self, kind: &'static str) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        *self.by_kind.lock().unwrap_or_else(|e| e.into_inner()).entry(kind).or_default() += 1;
    }

    async fn unexpected(&self, what: String) {
        self.unexpected.fetch_add(1, Ordering::Relaxed);
        let mut first = self.first_errors.lock().await;
        if first.len() < 20 {
            eprintln!("soak: unexpected: {}", crate::client::truncate(&what, 300));
            first.push(what);
        }
    }

    /// Counts a call and reports it when it failed; the result when it succeeded.
    async fn check(&self, kind: &'static str, outcome: Result<Value, CallError>) -> Option<Value> {
        self.count(kind);
        match outcome {
            Ok(value) => Some(value),
            Err(e) => {
                self.unexpected(format!("{kind}: {e}")).await;
                None
            }
        }
    }
}

/// Runs the soak against `command` (which must be our server: it is started with `--http`).
pub(crate) async fn soak(
    command: &ServerCommand,
    plan: &SoakPlan,
    work: &std::path::Path,
) -> anyhow::Result<SoakReport> {
    let provider = ProviderServer::start().await;
    // Every answer asks for one more query: each turn runs to the iteration cap.
    provider.set_default(Some(Reply::Delay(
        Duration::from_millis(5),
        Box::new(Reply::ToolCalls(vec![ToolCall::new("query_subgraph", json!({"seed_ids": ["n0"], "depth": 1}))])),
    )));
    let port = free_port()?;
    let base_url = provider.base_url();
    let mut command = command.clone().with_env(&[
        ("CKS_LLM_PROVIDER", "anthropic"),
        ("ANTHROPIC_API_KEY", "soak"),
        ("ANTHROPIC_BASE_URL", &base_url),
        ("CKS_AI_CHAT_MAX_ITERATIONS", "3"),
    ]);
    command.args.extend(["--http".to_owned(), format!("127.0.0.1:{port}")]);
    let data = work.join("soak-data");
    std::fs::create_dir_all(&data)?;
    let mut client = McpClient::spawn(&command, &data, &work.join("soak-stderr.log"), plan.call_timeout)?;
    client.initialize().await.map_err(|e| anyhow::anyhow!("initialize: {e}"))?;
    let pid = client.pid();
    let client = Arc::new(client.into_concurrent());
    let http = HttpClient::new(port).await?;

    let tally = Arc::new(Tally::default());
    let started = Instant::now();
    let deadline = started + plan.duration;
    // The load goes on a little past the last sample, so that every sample sees the server under
    // load and none the connections closing at the end.
    let load_deadline = deadline + Duration::from_secs(5);
    let mut workers = Vec::new();
    for seed in 0..2 {
        workers.push(tokio::spawn(graph_worker(client.clone(), tally.clone(), load_deadline, plan.call_timeout, seed)));
    }
    workers.push(tokio::spawn(branch_worker(client.clone(), tally.clone(), load_deadline, plan.call_timeout)));
    workers.push(tokio::spawn(big_graph_worker(client.clone(), tally.clone(), load_deadline, plan.call_timeout)));
    workers.push(tokio::spawn(http_worker(http, tally.clone(), load_deadline)));
    workers.push(tokio::spawn(chat_worker(client.clone(), tally.clone(), load_deadline, plan.call_timeout)));

    let mut samples = Vec::new();
    let mut next = started;
    while Instant::now() < deadline {
        next += plan.sample_every;
        let sample_at = next.min(deadline);
        let mut readings = Vec::new();
        loop {
            let read_at = (Instant::now() + RSS_READ_EVERY).min(sample_at);
            tokio::time::sleep_until(read_at.into()).await;
            readings.push(vm_rss_kib(pid).context("the server is gone")?);
            if read_at >= sample_at {
                break;
            }
        }
        readings.sort_unstable();
        // The provider server keeps every request it saw; the soak needs none of them.
        provider.clear_requests();
        let sample = Sample {
            seconds: started.elapsed().as_secs_f64(),
            rss_kib: readings[readings.len() / 2],
            rss_min_kib: readings[0],
            rss_max_kib: readings[readings.len() - 1],
            fds: open_fds(pid).context("the server is gone")?,
            calls: tally.calls.load(Ordering::Relaxed),
            unexpected_errors: tally.unexpected.load(Ordering::Relaxed),
        };
        eprintln!(
            "soak: {:>5.1} min  RSS {:>7.1} MiB ({:.1}–{:.1})  fds {:>4}  calls {:>8}  unexpected {}",
            sample.seconds / 60.0,
            sample.rss_kib as f64 / 1024.0,
            sample.rss_min_kib as f64 / 1024.0,
            sample.rss_max_kib as f64 / 1024.0,
            sample.fds,
            sample.calls,
            sample.unexpected_errors
        );
        samples.push(sample);
    }
    for worker in workers {
        worker.await?;
    }
    if let Ok(client) = Arc::try_unwrap(client) {
        client.shutdown(Duration::from_secs(10)).await;
    }

    let settled: Vec<&Sample> = samples.iter().filter(|s| s.seconds >= plan.warmup.as_secs_f64()).collect();
    let spread = |values: Vec<u64>| -> f64 {
        let (Some(min), Some(max)) = (values.iter().min(), values.iter().max()) else { return 0.0 };
        if *min == 0 { 0.0 } else { (*max - *min) as f64 * 100.0 / *min as f64 }
    };
    let calls_by_kind =
        tally.by_kind.lock().unwrap_or_else(|e| e.into_inner()).iter().map(|(k, n)| ((*k).to_owned(), *n)).collect();
    Ok(SoakReport {
        rss_spread_percent: spread(settled.iter().map(|s| s.rss_kib).collect()),
        fd_spread_percent: spread(settled.iter().map(|s| s.fds).collect()),
        unexpected_errors: tally.unexpected.load(Ordering::Relaxed),
        first_errors: tally.first_errors.lock().await.clone(),
        calls_by_kind,
        samples,
    })
}

/// Commits, queries, history and diffs on one session at a time; a new session every 300 commits
/// (the old one is closed), so no session's history grows without end.
async fn graph_worker(
    client: Arc<ConcurrentClient>,
    tally: Arc<Tally>,
    deadline: Instant,
    timeout: Duration,
    seed: u64,
) {
    while Instant::now() < deadline {
        let created = client.call_tool("validate_knowledge", json!({"json_data": sample_json(200)}), timeout).await;
        let Some(created) = tally.check("create", created).await else { continue };
        let session = created["session_id"].as_str().unwrap_or_default().to_owned();
        let first_version = created["version_id"].as_str().unwrap_or_default().to_owned();
        for i in 0..300u64 {
            if Instant::now() >= deadline {
                break;
            }
            let id = format!("soak-{seed}-{i}");
            let add = json!({"session_id": session, "operations": [
                {"type": "add_object", "identity": {"id": id, "type": "Note", "name": format!("Note {i} é")},
                 "structure": {"i": i}},
                {"type": "add_relation", "identity": {"id": format!("{id}-r"), "type": "Relation", "name": "about"},
                 "participants": [id, format!("n{}", i % 100)], "relation_type": "about"}]});
            tally.check("commit", client.call_tool("evolve_knowledge", add, timeout).await).await;
            let query = json!({"session_id": session, "seed_ids": [id], "depth": 2, "max_objects": 50});
            tally.check("query", client.call_tool("query_subgraph", query, timeout).await).await;
            if i.is_multiple_of(3) {
                let update = json!({"session_id": session, "operations": [
                    {"type": "update_object", "object_id": id, "structure_patch": {"seen": true}}]});
                tally.check("commit", client.call_tool("evolve_knowledge", update, timeout).await).await;
            }
            if i.is_multiple_of(25) {
                let args = json!({"session_id": session});
                tally.check("history", client.call_tool("list_versions", args, timeout).await).await;
                let args = json!({"session_id": session, "target_version_id": first_version});
                tally.check("diff", client.call_tool("compare_versions", args, timeout).await).await;
                let args = json!({"session_id": session});
                tally.check("serialize", client.call_tool("serialize_knowledge", args, timeout).await).await;
            }
        }
        let args = json!({"session_id": session});
        tally.check("close", client.call_tool("close_session", args, timeout).await).await;
    }
}

/// Branch, change both sides, merge back, close the branch.
async fn branch_worker(client: Arc<ConcurrentClient>, tally: Arc<Tally>, deadline: Instant, timeout: Duration) {
    let created = client.call_tool("validate_knowledge", json!({"json_data": sample_json(100)}), timeout).await;
    let Some(created) = tally.check("create", created).await else { return };
    let mut main = created["session_id"].as_str().unwrap_or_default().to_owned();
    let mut round = 0u64;
    while Instant::now() < deadline {
        round += 1;
        let branched = client.call_tool("create_branch", json!({"session_id": main}), timeout).await;
        let Some(branched) = tally.check("branch", branched).await else { continue };
        let branch = branched["session_id"].as_str().unwrap_or_default().to_owned();
        for (session, side) in [(&main, "main"), (&branch, "branch")] {
            let ops = json!({"session_id": session, "operations": [
                {"type": "add_object", "identity": {"id": format!("{side}-{round}"), "type": "Note", "name": side}}]});
            tally.check("commit", client.call_tool("evolve_knowledge", ops, timeout).await).await;
        }
        let merge = json!({"source_session_id": branch, "target_session_id": main});
        tally.check("merge", client.call_tool("merge_branch", merge, timeout).await).await;
        tally.check("close", client.call_tool("close_session", json!({"session_id": branch}), timeout).await).await;
        if round.is_multiple_of(100) {
            // Start over on a fresh session so the main line's history stays bounded.
            let created = client.call_tool("validate_knowledge", json!({"json_data": sample_json(100)}), timeout).await;
            if let Some(created) = tally.check("create", created).await {
                let old = std::mem::replace(&mut main, created["session_id"].as_str().unwrap_or_default().into());
                tally
                    .check("close", client.call_tool("close_session", json!({"session_id": old}), timeout).await)
                    .await;
            }
        }
    }
}

/// Now and then: a 5,000-object graph created, read whole, queried and closed.
async fn big_graph_worker(client: Arc<ConcurrentClient>, tally: Arc<Tally>, deadline: Instant, timeout: Duration) {
    let text = sample_json(5_000);
    while Instant::now() < deadline {
        let created = client.call_tool("validate_knowledge", json!({"json_data": text}), timeout).await;
        if let Some(created) = tally.check("big_create", created).await {
            let session = created["session_id"].as_str().unwrap_or_default().to_owned();
            let args = json!({"session_id": session});
            tally.check("big_serialize", client.call_tool("serialize_knowledge", args.clone(), timeout).await).await;
            let query = json!({"session_id": session, "seed_ids": ["n0", "n1"], "depth": 3, "max_objects": 500});
            tally.check("big_query", client.call_tool("query_subgraph", query, timeout).await).await;
            tally.check("close", client.call_tool("close_session", args, timeout).await).await;
        }
        tokio::time::sleep(Duration::from_secs(20).min(deadline.saturating_duration_since(Instant::now()))).await;
    }
}

/// `ai_chat` turns, four in flight; every fifth one is cancelled shortly after it was sent.
async fn chat_worker(client: Arc<ConcurrentClient>, tally: Arc<Tally>, deadline: Instant, timeout: Duration) {
    let created = client.call_tool("validate_knowledge", json!({"json_data": sample_json(50)}), timeout).await;
    let Some(created) = tally.check("create", created).await else { return };
    let session = created["session_id"].as_str().unwrap_or_default().to_owned();
    let args = json!({"session_id": session, "prompt": "Walk the graph around n0."});
    let mut turn = 0u64;
    while Instant::now() < deadline {
        let mut in_flight = Vec::new();
        for _ in 0..4 {
            turn += 1;
            match client.send_tool_call("ai_chat", args.clone()).await {
                Ok(call) if turn.is_multiple_of(5) => {
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    tally.count("chat_cancelled");
                    if let Err(e) = client.cancel(call).await {
                        tally.unexpected(format!("cancel: {e}")).await;
                    }
                }
                Ok(call) => in_flight.push(call),
                Err(e) => tally.unexpected(format!("ai_chat: {e}")).await,
            }
        }
        for call in in_flight {
            // A turn that hits the iteration cap is a normal result (`truncated`).
            tally.check("chat", call.wait(timeout).await).await;
        }
    }
}

async fn http_worker(http: HttpClient, tally: Arc<Tally>, deadline: Instant) {
    let created = http.call("validate_knowledge", json!({"json_data": sample_json(100)})).await;
    let Some(created) = tally.check("http_create", created).await else { return };
    let session = created["session_id"].as_str().unwrap_or_default().to_owned();
    let mut i = 0u64;
    while Instant::now() < deadline {
        i += 1;
        let query = json!({"session_id": session, "seed_ids": ["n1"], "depth": 2, "max_objects": 50});
        tally.check("http_query", http.call("query_subgraph", query).await).await;
        if i.is_multiple_of(5) {
            let ops = json!({"session_id": session, "operations": [
                {"type": "update_object", "object_id": "n1", "structure_patch": {"i": i}}]});
            tally.check("http_commit", http.call("evolve_knowledge", ops).await).await;
        }
        if i.is_multiple_of(10) {
            // Malformed on purpose: each must be answered with a JSON-RPC error.
            for (kind, body) in [
                ("http_bad_json", "{\"jsonrpc\": \"2.0\", \"id\": 7, \"method\": ".to_owned()),
                ("http_bad_envelope", json!({"jsonrpc": "2.0", "id": 8, "params": 3}).to_string()),
                (
                    "http_unknown_tool",
                    json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                    "params": {"name": "no_such_tool", "arguments": {}}})
                    .to_string(),
                ),
            ] {
                tally.count(kind);
                match http.post(body).await {
                    Ok((_, answer)) if answer.get("error").is_some() => {}
                    Ok((status, answer)) => {
                        tally.unexpected(format!("{kind}: not an error answer: {status} {answer}")).await
                    }
                    Err(e) => tally.unexpected(format!("{kind}: {e}")).await,
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// `VmRSS` of `/proc/<pid>/status`, in KiB.
fn vm_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The number of open file descriptors of a process.
fn open_fds(pid: u32) -> Option<u64> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64)
}
