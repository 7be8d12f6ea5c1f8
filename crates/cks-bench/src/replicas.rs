//! The replicas benchmark: 1, 2 and 4 `cks-mcp` processes serving HTTP on one PostgreSQL
//! database, with writers on distinct sessions spread evenly over them, each committing one
//! object at a time as fast as its answers come back (`return_structure: false`: the commit, not
//! a copy of the growing graph with every answer). Measures the commits per second of all
//! writers together; the updates lost (afterwards every session, read through another replica,
//! must hold exactly the commits acknowledged to its writer); and the lag until another replica
//! sees a commit: a probe commits on the first replica and waits for the commit's event on the
//! second replica's `/events` stream.

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::StreamExt as _;
use serde_json::{Value, json};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use crate::client::{HttpClient, ServerCommand, free_port};
use crate::postgres::Postgres;
use crate::report::{Recorder, quantile};

/// What to run.
#[derive(Debug, Clone)]
pub(crate) struct ReplicaPlan {
    pub(crate) replica_counts: Vec<usize>,
    pub(crate) writers: usize,
    pub(crate) duration: Duration,
    /// Pause between two probe commits (the probe measures lag, not throughput).
    pub(crate) probe_interval: Duration,
}

/// One server process serving HTTP only.
struct Replica {
    child: Child,
    http: Arc<HttpClient>,
}

impl Replica {
    async fn start(command: &ServerCommand, database: &str, data_dir: &std::path::Path) -> anyhow::Result<Replica> {
        let port = free_port()?;
        let child = Command::new(&command.program)
            .args(&command.args)
            .args(["--http", &format!("127.0.0.1:{port}"), "--no-stdio"])
            .env("CKS_MCP_DATA_DIR", data_dir)
            .env("CKS_MCP_LOG", "error")
            .envs(&command.env)
            .env("CKS_MCP_DB_PATH", database)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", command.program))?;
        Ok(Replica { child, http: Arc::new(HttpClient::new(port).await?) })
    }
}

/// Runs the plan, one record set per replica count.
pub(crate) async fn run(
    command: &ServerCommand,
    postgres: &Postgres,
    plan: &ReplicaPlan,
    work: &std::path::Path,
    rec: &mut Recorder,
) -> anyhow::Result<()> {
    for &count in &plan.replica_counts {
        let database = postgres.fresh_database(&format!("replicas_{count}"));
        let mut replicas = Vec::new();
        for index in 0..count {
            let data = work.join(format!("replicas-{count}-{index}"));
            std::fs::create_dir_all(&data)?;
            replicas.push(Replica::start(command, &database, &data).await?);
        }
        let servers: Vec<Arc<HttpClient>> = replicas.iter().map(|r| r.http.clone()).collect();
        let outcome = measure(&servers, plan).await;
        for mut replica in replicas {
            let _ = replica.child.kill().await;
        }
        let outcome = outcome?;
        let size = Some(count as u64);
        let setting = format!("{count} replicas × {} writers, {} s", plan.writers, plan.duration.as_secs());
        rec.value("replicas_commits_per_s", size, "commits/s", outcome.commits_per_s, Some(setting.clone()));
        rec.value("replicas_lost_updates", size, "commits", outcome.lost as f64, Some(outcome.failures_note()));
        if outcome.lags_ms.is_empty() {
            rec.status("replicas_lag_p99", size, "ms", "n/a: one replica");
        } else {
            let note = format!("{} probe commits", outcome.lags_ms.len());
            rec.value("replicas_lag_p50", size, "ms", quantile(&outcome.lags_ms, 0.5), Some(note.clone()));
            rec.value("replicas_lag_p99", size, "ms", quantile(&outcome.lags_ms, 0.99), Some(note));
        }
    }
    Ok(())
}

struct Outcome {
    commits_per_s: f64,
    lost: u64,
    /// Commits that failed (their writer does not count them as acknowledged).
    failed: u64,
    first_failure: Option<String>,
    lags_ms: Vec<f64>,
}

impl Outcome {
    fn failures_note(&self) -> String {
        match &self.first_failure {
            None => "no commit failed".into(),
            Some(first) => format!("{} commits failed, the first: {first}", self.failed),
        }
    }
}

/// One writer's result.
struct Written {
    session: String,
    /// The versions the session had before the writer started.
    before: u64,
    acknowledged: u64,
    failed: u64,
    first_failure: Option<String>,
}

async fn measure(servers: &[Arc<HttpClient>], plan: &ReplicaPlan) -> anyhow::Result<Outcome> {
    let mut sessions = Vec::new();
    for writer in 0..plan.writers {
        let server = &servers[writer % servers.len()];
        sessions.push(new_session(server, &format!("w{writer}")).await?);
    }
    let started = Instant::now();
    let deadline = started + plan.duration;
    let mut writers = Vec::new();
    for (writer, session) in sessions.into_iter().enumerate() {
        let server = servers[writer % servers.len()].clone();
        writers.push(tokio::spawn(write_until(server, session, deadline)));
    }
    let probe = match servers {
        [first, second, ..] => {
            Some(tokio::spawn(probe_lag(first.clone(), second.clone(), deadline, plan.probe_interval)))
        }
        _ => None,
    };
    let mut written = Vec::new();
    for writer in writers {
        written.push(writer.await??);
    }
    let elapsed = started.elapsed().as_secs_f64();
    let lags_ms = match probe {
        Some(probe) => probe.await??,
        None => Vec::new(),
    };

    let mut outcome = Outcome { commits_per_s: 0.0, lost: 0, failed: 0, first_failure: None, lags_ms };
    let mut acknowledged = 0;
    for (writer, w) in written.into_iter().enumerate() {
        // Read back through another replica than the one that wrote.
        let reader = &servers[(writer + 1) % servers.len()];
        let stored = version_count(reader, &w.session).await?;
        outcome.lost += (w.before + w.acknowledged).saturating_sub(stored);
        acknowledged += w.acknowledged;
        outcome.failed += w.failed;
        outcome.first_failure = outcome.first_failure.or(w.first_failure);
    }
    outcome.commits_per_s = acknowledged as f64 / elapsed;
    Ok(outcome)
}

async fn new_session(server: &HttpClient, root: &str) -> anyhow::Result<String> {
    let graph = json!({"objects": [{"identity": {"id": root, "type": "Note", "name": root}}], "relations": []});
    let created = server.call("validate_knowledge", json!({"json_data": graph.to_string()})).await?;
    match created["session_id"].as_str() {
        Some(id) => Ok(id.to_owned()),
        None => bail!("validate_knowledge created no session: {created}"),
    }
}

async fn version_count(server: &HttpClient, session: &str) -> anyhow::Result<u64> {
    let listed = server.call("list_versions", json!({"session_id": session})).await?;
    Ok(listed["versions"].as_array().map_or(0, Vec::len) as u64)
}

async fn write_until(server: Arc<HttpClient>, session: String, deadline: Instant) -> anyhow::Result<Written> {
    let before = version_count(&server, &session).await?;
    let mut w = Written { session, before, acknowledged: 0, failed: 0, first_failure: None };
    let mut next = 0u64;
    while Instant::now() < deadline {
        next += 1;
        // The commit alone: not the whole structure back after every commit.
        let ops = json!({"session_id": w.session, "return_structure": false, "operations": [
            {"type": "add_object", "identity": {"id": format!("n{next}"), "type": "Note", "name": format!("N{next}")}}]});
        match server.call("evolve_knowledge", ops).await {
            Ok(_) => w.acknowledged += 1,
            Err(e) => {
                w.failed += 1;
                w.first_failure.get_or_insert_with(|| e.to_string());
            }
        }
    }
    Ok(w)
}

/// Commits on `writer` and times how long after the acknowledgement `reader`'s `/events`
/// stream shows the commit (zero when the event came first).
async fn probe_lag(
    writer: Arc<HttpClient>,
    reader: Arc<HttpClient>,
    deadline: Instant,
    interval: Duration,
) -> anyhow::Result<Vec<f64>> {
    let session = new_session(&writer, "probe").await?;
    let url = format!("{}/events/{session}?event_types=VersionCreated", reader.base());
    let response = reader.client.get(url).send().await.context("opening /events")?;
    anyhow::ensure!(response.status().is_success(), "/events answered {}", response.status());
    let (seen, mut arrivals) = mpsc::unbounded_channel::<(String, Instant)>();
    let listener = tokio::spawn(async move {
        let mut stream = response.bytes_stream();
        let mut buffer = String::new();
        while let Some(Ok(chunk)) = stream.next().await {
            let now = Instant::now();
            buffer.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = buffer.find('\n') {
                let line: String = buffer.drain(..=end).collect();
                if let Some(data) = line.strip_prefix("data:") {
                    let event: Value = serde_json::from_str(data.trim()).unwrap_or(Value::Null);
                    let version = event_version(&event);
                    if seen.send((version, now)).is_err() {
                        return;
                    }
                }
            }
        }
    });
    let mut lags = Vec::new();
    let mut n = 0u64;
    while Instant::now() < deadline {
        n += 1;
        let ops = json!({"session_id": session, "return_structure": false, "operations": [
            {"type": "add_object", "identity": {"id": format!("p{n}"), "type": "Note", "name": "probe"}}]});
        let committed = writer.call("evolve_knowledge", ops).await?;
        let acknowledged = Instant::now();
        let version = committed["version_id"].as_str().unwrap_or_default().to_owned();
        loop {
            let arrival = tokio::time::timeout(Duration::from_secs(10), arrivals.recv()).await;
            match arrival {
                Ok(Some((seen, at))) if seen == version => {
                    lags.push(at.saturating_duration_since(acknowledged).as_secs_f64() * 1000.0);
                    break;
                }
                Ok(Some(_)) => continue,
                Ok(None) => bail!("the /events stream of the second replica ended"),
                Err(_) => bail!("the second replica did not show commit {version} within 10 s"),
            }
        }
        tokio::time::sleep(interval).await;
    }
    listener.abort();
    Ok(lags)
}

/// The version id an event frame names, wherever its detail puts it.
fn event_version(event: &Value) -> String {
    match event {
        Value::Object(fields) => match fields.get("version_id").and_then(Value::as_str) {
            Some(id) => id.to_owned(),
            None => fields.values().map(event_version).find(|id| !id.is_empty()).unwrap_or_default(),
        },
        _ => String::new(),
    }
}
