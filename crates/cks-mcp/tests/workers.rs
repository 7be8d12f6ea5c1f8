//! `cks-mcp worker`: the workers in processes of their own, serving no client. On SQLite a worker
//! beside a server settles what the server's sweeps queue, and SIGTERM stops it after the task in
//! hand, or abandons that task at the shutdown timeout for another worker to take over. On
//! PostgreSQL two worker processes and one server share the queue, and every task is settled once.

use serde_json::{Value, json};
use std::process::Stdio;
use std::time::Duration;
use tokio::process::{Child, Command};

use cks_testkit::postgres::TestDatabase;
use cks_testkit::{ProviderServer, Reply};

mod support;
use support::stdio::Mcp;
use support::{text_result, tool_call};

/// The model and the queue's pace, for servers and workers alike; the server runs no worker.
fn env(provider: &str) -> Vec<(&'static str, String)> {
    vec![
        ("CKS_SWEEPERS", "off".into()),
        ("CKS_CRITIC_POLL_INTERVAL", "1".into()),
        ("CKS_CRITIC_LIVENESS_INTERVAL", "1".into()),
        ("CKS_PIPELINE_POLL_INTERVAL", "1".into()),
        ("CKS_ENRICHMENT_POLL_INTERVAL", "1".into()),
        ("CKS_TASK_LEASE_SECONDS", "2".into()),
        ("CKS_TASK_MAX_RETRIES", "5".into()),
        ("CKS_LLM_PROVIDER", "anthropic".into()),
        ("CKS_LLM_MAX_RETRIES", "0".into()),
        ("ANTHROPIC_API_KEY", "sk-ant-worker-secret".into()),
        ("ANTHROPIC_BASE_URL", provider.to_owned()),
        ("CKS_MCP_LOG", "error".into()),
    ]
}

/// `cks-mcp worker ARGS` on the store of `data_dir` (or `CKS_MCP_DB_PATH` in `env`).
fn worker(data_dir: &std::path::Path, env: &[(&'static str, String)], args: &[&str]) -> Child {
    let mut command = Command::new(env!("CARGO_BIN_EXE_cks-mcp"));
    command.arg("worker").args(args).env("CKS_MCP_DATA_DIR", data_dir).envs(env.iter().map(|(k, v)| (*k, v)));
    command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    command.kill_on_drop(true).spawn().unwrap()
}

/// Sends SIGTERM and waits for the process to end; whether it ended well.
async fn terminate(child: &mut Child) -> bool {
    let pid = child.id().unwrap().to_string();
    let sent = Command::new("kill").args(["-TERM", &pid]).status().await.unwrap();
    assert!(sent.success());
    // A bound for a hung process only: the shutdown timeouts below are far shorter.
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait()).await.expect("the worker ended");
    status.unwrap().success()
}

fn object(id: &str, ty: &str, structure: Value) -> Value {
    json!({"identity": {"id": id, "type": ty, "name": id}, "structure": structure})
}

fn step(id: &str, confidence: f64) -> Value {
    object(id, "InferenceStep", json!({"premises": ["earth"], "conclusion": "theory", "confidence": confidence}))
}

/// A graph whose rule forbids its two relations together, and whose steps disagree about `theory`.
fn troubled() -> String {
    json!({"objects": [
        object("rule", "MutualExclusionRule", json!({"relation_type_a": "supports", "relation_type_b": "contradicts"})),
        object("earth", "Planet", json!({})),
        object("theory", "Claim", json!({})),
        object("s1", "Relation", json!({"participants": ["earth", "theory"], "relation_type": "supports"})),
        object("c1", "Relation", json!({"participants": ["earth", "theory"], "relation_type": "contradicts"})),
        step("a", 0.9),
        step("b", 0.3),
    ]})
    .to_string()
}

/// The model's decision on `theory`.
fn decision(winner: &str) -> Reply {
    Reply::Text(format!("[{{\"conclusion_id\": \"theory\", \"winner_step_id\": \"{winner}\"}}]"))
}

/// Something that answers tool calls: a server over stdio or over HTTP.
trait Caller {
    async fn call(&mut self, tool: &str, arguments: Value) -> Value;
}

impl Caller for Mcp {
    async fn call(&mut self, tool: &str, arguments: Value) -> Value {
        Mcp::call(self, tool, arguments).await
    }
}

async fn wait<C: Caller>(server: &mut C, what: &str, mut done: impl AsyncFnMut(&mut C) -> bool) {
    for _ in 0..600 {
        if done(server).await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

/// Runs one sweep of the server's sweeper `agent_id` (they are off: started, it sweeps at once).
async fn sweep(server: &mut impl Caller, agent_id: &str) {
    server.call("stop_agent", json!({"agent_id": agent_id})).await;
    let before = sweeps(server, agent_id).await;
    server.call("start_agent", json!({"agent_id": agent_id})).await;
    wait(server, &format!("{agent_id} to sweep"), async |server| sweeps(server, agent_id).await > before).await;
}

async fn sweeps(server: &mut impl Caller, agent_id: &str) -> u64 {
    server.call("agent_status", json!({"agent_id": agent_id})).await["sweeps_completed"].as_u64().unwrap()
}

async fn versions(server: &mut impl Caller, session: &str) -> Vec<Value> {
    server.call("list_versions", json!({"session_id": session})).await["versions"].as_array().unwrap().clone()
}

/// The commits of `tool` in a session's history.
async fn commits_of(server: &mut impl Caller, session: &str, tool: &str) -> Vec<Value> {
    versions(server, session).await.into_iter().filter(|v| v["metadata"]["tool"] == tool).collect()
}

async fn critic(server: &mut impl Caller, instance: &Value) -> Value {
    let listed = server.call("list_processes", json!({})).await["processes"].as_array().unwrap().clone();
    listed.into_iter().find(|p| p["instance_id"] == *instance).unwrap_or(Value::Null)
}

#[tokio::test]
async fn a_worker_beside_a_server_settles_its_tasks_and_stops_on_sigterm() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let provider = ProviderServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut env = env(&provider.base_url());
    env.push(("CKS_EMBEDDED_AGENTS_SHUTDOWN_TIMEOUT", "30".into()));
    let mut server = Mcp::start(dir.path(), &env).await;
    let session = server.call("validate_knowledge", json!({"json_data": troubled()})).await["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut first = worker(dir.path(), &env, &["--critic"]);
    wait(&mut server, "the worker's Critic to report", async |server| {
        server.call("process_status", json!({"process_kind": "critic"})).await["status"] == "alive"
    })
    .await;
    let instance = server.call("process_status", json!({"process_kind": "critic"})).await["instance_id"].clone();
    let processes = server.call("list_processes", json!({})).await["processes"].as_array().unwrap().clone();
    assert_eq!(processes.len(), 1, "--critic runs the Critic only: {processes:?}");

    // The server's sweep queues the contradiction; the worker settles it.
    sweep(&mut server, "contradiction").await;
    wait(&mut server, "the contradiction to be settled", async |server| {
        !commits_of(server, &session, "resolve_contradiction").await.is_empty()
    })
    .await;

    // SIGTERM while the model is still deciding: the worker finishes that task, then stops.
    provider.push(Reply::Delay(Duration::from_secs(2), Box::new(decision("b"))));
    sweep(&mut server, "inference_staleness").await;
    wait(&mut server, "the worker to ask the model", async |_| !provider.requests().is_empty()).await;
    assert!(terminate(&mut first).await, "a clean exit");
    let arbitrations = commits_of(&mut server, &session, "arbitrate_inference_conflict").await;
    assert_eq!(arbitrations.len(), 1, "the task in hand was finished");
    let record = critic(&mut server, &instance).await;
    assert_eq!((record["status"].as_str(), record["tasks_done"].as_u64()), (Some("stopped"), Some(2)), "{record}");

    // Past the shutdown timeout the task in hand is abandoned: another worker takes it over once
    // its lease ends and settles it once.
    env.retain(|(name, _)| *name != "CKS_EMBEDDED_AGENTS_SHUTDOWN_TIMEOUT");
    env.push(("CKS_EMBEDDED_AGENTS_SHUTDOWN_TIMEOUT", "1".into()));
    let more = json!([{"type": "add_object", "identity": {"id": "c", "type": "InferenceStep", "name": "c"},
                       "structure": {"premises": ["earth"], "conclusion": "theory", "confidence": 0.1}}]);
    server.call("evolve_knowledge", json!({"session_id": session, "operations": more})).await;
    provider.push(Reply::Delay(Duration::from_secs(600), Box::new(decision("b"))));
    let mut second = worker(dir.path(), &env, &[]);
    let asked = provider.requests().len();
    sweep(&mut server, "inference_staleness").await;
    wait(&mut server, "the second worker to ask the model", async |_| provider.requests().len() > asked).await;
    assert!(terminate(&mut second).await, "a clean exit");
    assert_eq!(commits_of(&mut server, &session, "arbitrate_inference_conflict").await.len(), 1, "not settled");
    provider.push(decision("b"));
    let _third = worker(dir.path(), &env, &["--critic"]);
    wait(&mut server, "the third worker to settle the abandoned task", async |server| {
        commits_of(server, &session, "arbitrate_inference_conflict").await.len() == 2
    })
    .await;
    let processes = server.call("list_processes", json!({})).await["processes"].as_array().unwrap().clone();
    let kinds: Vec<&str> = processes.iter().filter_map(|p| p["process_kind"].as_str()).collect();
    assert!(
        ["critic", "pipeline", "enrichment"].iter().all(|k| kinds.contains(k)),
        "a bare worker runs all: {kinds:?}"
    );
}

/// A server serving HTTP only, on a free loopback port.
struct HttpServer {
    _child: Child,
    base: String,
    client: reqwest::Client,
}

impl HttpServer {
    async fn start(data_dir: &std::path::Path, env: &[(&'static str, String)]) -> HttpServer {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut command = Command::new(env!("CARGO_BIN_EXE_cks-mcp"));
        command.args(["--http", &format!("127.0.0.1:{port}"), "--no-stdio"]);
        command.env("CKS_MCP_DATA_DIR", data_dir).envs(env.iter().map(|(k, v)| (*k, v)));
        command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::inherit());
        let child = command.kill_on_drop(true).spawn().unwrap();
        let server =
            HttpServer { _child: child, base: format!("http://127.0.0.1:{port}"), client: reqwest::Client::new() };
        for _ in 0..600 {
            if server.client.get(format!("{}/health", server.base)).send().await.is_ok() {
                return server;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the server did not come up");
    }
}

impl Caller for HttpServer {
    async fn call(&mut self, tool: &str, arguments: Value) -> Value {
        let reply = self.client.post(format!("{}/mcp", self.base)).json(&tool_call(tool, arguments)).send().await;
        text_result(&reply.unwrap().json().await.unwrap())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_and_a_server_on_postgresql_settle_every_task_once() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let provider = ProviderServer::start().await;
    // Every arbitration gets the same decision: the sessions are alike.
    provider.set_default(Some(decision("a")));
    let db = TestDatabase::create();
    let mut env = env(&provider.base_url());
    env.push(("CKS_MCP_DB_PATH", db.url().to_owned()));
    env.push(("CKS_MCP_PG_POOL_SIZE", "4".into()));
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut server = HttpServer::start(dirs[0].path(), &env).await;
    let mut sessions = Vec::new();
    for _ in 0..6 {
        let created = server.call("validate_knowledge", json!({"json_data": troubled()})).await;
        sessions.push(created["session_id"].as_str().expect("a session").to_owned());
    }
    let mut workers = [worker(dirs[1].path(), &env, &[]), worker(dirs[2].path(), &env, &["--critic"])];
    wait(&mut server, "both workers' Critics to report", async |server| {
        let listed = server.call("list_processes", json!({})).await["processes"].as_array().unwrap().clone();
        listed.iter().filter(|p| p["process_kind"] == "critic" && p["status"] == "alive").count() == 2
    })
    .await;

    // One contradiction and one inference conflict queued per session: twelve tasks.
    sweep(&mut server, "contradiction").await;
    sweep(&mut server, "inference_staleness").await;
    let tools = ["resolve_contradiction", "arbitrate_inference_conflict"];
    for session in &sessions {
        wait(&mut server, "the session's two tasks to be settled", async |server| {
            let history = versions(server, session).await;
            tools.iter().all(|tool| history.iter().any(|v| v["metadata"]["tool"] == *tool))
        })
        .await;
    }
    // Time for a second worker to (wrongly) redo a task.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut task_ids = Vec::new();
    for session in &sessions {
        for tool in tools {
            let commits = commits_of(&mut server, session, tool).await;
            assert_eq!(commits.len(), 1, "{tool} once in {session}: {commits:?}");
            assert_eq!(commits[0]["metadata"]["process"], "critic");
            task_ids.push(commits[0]["metadata"]["task_id"].as_i64().expect("the task committed for"));
        }
    }
    task_ids.sort_unstable();
    task_ids.dedup();
    assert_eq!(task_ids.len(), 12, "one commit per task");
    assert_eq!(provider.requests().len(), 6, "each arbitration asked once");
    for task_type in ["contradiction_detected", "inference_conflict"] {
        let claimed = server.call("claim_conflict_task", json!({"task_type": task_type})).await;
        assert!(claimed["task"].is_null(), "nothing left in the queue: {claimed}");
    }

    // Both stop on SIGTERM; their records add up to the twelve tasks.
    let listed = server.call("list_processes", json!({})).await["processes"].as_array().unwrap().clone();
    let critics: Vec<Value> = listed.into_iter().filter(|p| p["process_kind"] == "critic").collect();
    for worker in &mut workers {
        assert!(terminate(worker).await, "a clean exit");
    }
    let mut done = 0;
    for record in &critics {
        let record = critic(&mut server, &record["instance_id"]).await;
        assert_eq!(record["status"], "stopped", "{record}");
        done += record["tasks_done"].as_u64().unwrap();
    }
    assert_eq!(done, 12);
}
