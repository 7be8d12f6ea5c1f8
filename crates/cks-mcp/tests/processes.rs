//! The Critic end to end: the real binary over stdio on SQLite, its sweepers queueing a
//! contradiction and an inference conflict, and the Critic settling them — one by rule, one by a
//! model's decision from a scripted provider server — then failing and dead-lettering what a failing
//! provider leaves undecided; a stop request and a kill -9 mid-task losing nothing and settling
//! nothing twice.

use serde_json::{Value, json};
use std::time::Duration;

use cks_testkit::{ProviderServer, Reply};

mod support;
use support::stdio::Mcp;

fn env(provider: &str, max_retries: u32) -> Vec<(&'static str, String)> {
    vec![
        ("CKS_SWEEPERS", "off".into()),
        ("CKS_EMBED_CRITIC_AGENT", "true".into()),
        ("CKS_CRITIC_POLL_INTERVAL", "1".into()),
        ("CKS_CRITIC_LIVENESS_INTERVAL", "1".into()),
        ("CKS_TASK_LEASE_SECONDS", "2".into()),
        ("CKS_TASK_MAX_RETRIES", max_retries.to_string()),
        ("CKS_LLM_PROVIDER", "anthropic".into()),
        ("CKS_LLM_MAX_RETRIES", "0".into()),
        ("ANTHROPIC_API_KEY", "sk-ant-critic-secret".into()),
        ("ANTHROPIC_BASE_URL", provider.to_owned()),
    ]
}

fn object(id: &str, ty: &str, structure: Value) -> Value {
    json!({"identity": {"id": id, "type": ty, "name": id}, "structure": structure})
}

fn step(id: &str, conclusion: &str, confidence: f64) -> Value {
    object(id, "InferenceStep", json!({"premises": ["earth"], "conclusion": conclusion, "confidence": confidence}))
}

/// A graph whose rule forbids its two relations together, and whose steps disagree about `theory`.
fn troubled() -> String {
    json!({"objects": [
        object("rule", "MutualExclusionRule", json!({"relation_type_a": "supports", "relation_type_b": "contradicts"})),
        object("earth", "Planet", json!({})),
        object("theory", "Claim", json!({})),
        object("s1", "Relation", json!({"participants": ["earth", "theory"], "relation_type": "supports"})),
        object("c1", "Relation", json!({"participants": ["earth", "theory"], "relation_type": "contradicts"})),
        step("a", "theory", 0.9),
        step("b", "theory", 0.3),
    ]})
    .to_string()
}

async fn sweep(mcp: &mut Mcp, agent_id: &str) {
    mcp.call("stop_agent", json!({"agent_id": agent_id})).await;
    let before = mcp.call("agent_status", json!({"agent_id": agent_id})).await["sweeps_completed"].as_u64().unwrap();
    mcp.call("start_agent", json!({"agent_id": agent_id})).await;
    wait(mcp, &format!("{agent_id} to sweep"), async |mcp| {
        mcp.call("agent_status", json!({"agent_id": agent_id})).await["sweeps_completed"].as_u64().unwrap() > before
    })
    .await;
}

async fn wait(mcp: &mut Mcp, what: &str, mut done: impl AsyncFnMut(&mut Mcp) -> bool) {
    for _ in 0..300 {
        if done(mcp).await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

async fn versions(mcp: &mut Mcp, session: &str) -> Vec<Value> {
    mcp.call("list_versions", json!({"session_id": session})).await["versions"].as_array().unwrap().clone()
}

async fn superseded_by(mcp: &mut Mcp, session: &str, id: &str) -> Value {
    let explained = mcp.call("explain_knowledge", json!({"session_id": session, "object_id": "theory"})).await;
    let all = explained["explanation"]["superseded_steps"].as_array().cloned().unwrap_or_default();
    all.into_iter().find(|s| s["step_id"] == id).map(|s| s["superseded_by"].clone()).unwrap_or(Value::Null)
}

#[tokio::test]
async fn the_critic_settles_swept_conflicts_and_dead_letters_what_a_failing_provider_leaves() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let provider = ProviderServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut mcp = Mcp::start(dir.path(), &env(&provider.base_url(), 0)).await;
    let session = mcp.call("validate_knowledge", json!({"json_data": troubled()})).await["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    // The Critic arbitrates a task's conclusions as a batch: one decision per conclusion, in an array.
    provider.push(Reply::Text(
        "[{\"conclusion_id\": \"theory\", \"winner_step_id\": \"b\", \"reasoning\": \"better argued\"}]".into(),
    ));
    sweep(&mut mcp, "contradiction").await;
    sweep(&mut mcp, "inference_staleness").await;
    wait(&mut mcp, "the Critic to settle both", async |mcp| {
        let status = mcp.call("process_status", json!({"process_kind": "critic"})).await;
        status["tasks_done"] == 2
    })
    .await;
    let listing = mcp.call("resolve_contradiction", json!({"session_id": session})).await;
    assert_eq!(listing["contradiction_count"], 0);
    assert_eq!(superseded_by(&mut mcp, &session, "a").await, "b", "the model's winner stays");
    let history = versions(&mut mcp, &session).await;
    let by_critic: Vec<&Value> = history.iter().filter(|v| v["metadata"]["process"] == "critic").collect();
    assert_eq!(by_critic.len(), 2, "{history:?}");
    let arbitration = by_critic.iter().find(|v| v["metadata"]["tool"] == "arbitrate_inference_conflict").unwrap();
    assert_eq!(arbitration["metadata"]["provider"], "anthropic");
    assert!(arbitration["metadata"]["task_id"].is_i64());

    // A provider that fails: the attempt fails, and with no retries left the task is dead.
    let ops = json!([{"type": "add_object", "identity": {"id": "c", "type": "InferenceStep", "name": "c"},
                      "structure": {"premises": ["earth"], "conclusion": "theory", "confidence": 0.1}}]);
    mcp.call("evolve_knowledge", json!({"session_id": session, "operations": ops})).await;
    provider.push(Reply::Status { status: 500, headers: Vec::new(), body: "{\"error\": \"overloaded\"}".into() });
    sweep(&mut mcp, "inference_staleness").await;
    wait(&mut mcp, "the task to be dead-lettered", async |mcp| {
        mcp.call("list_dead_lettered_conflicts", json!({"session_id": session})).await["count"] == 1
    })
    .await;
    let dead = mcp.call("list_dead_lettered_conflicts", json!({"session_id": session})).await;
    let error = dead["tasks"][0]["last_error"].as_str().unwrap();
    assert!(error.contains("LLM arbiter call failed"), "{error}");
    assert!(!error.contains("sk-ant-critic-secret"));
    let status = mcp.call("process_status", json!({"process_kind": "critic"})).await;
    assert_eq!((status["status"].as_str(), status["tasks_failed"].as_u64()), (Some("alive"), Some(1)), "{status}");
}

#[tokio::test]
async fn a_stop_request_or_a_kill_mid_task_settles_the_task_once() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let provider = ProviderServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let env = env(&provider.base_url(), 5);
    let mut mcp = Mcp::start(dir.path(), &env).await;
    let session = mcp.call("validate_knowledge", json!({"json_data": troubled()})).await["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let decision = || Reply::Text("[{\"conclusion_id\": \"theory\", \"winner_step_id\": \"a\"}]".into());

    // The model takes long to answer; the server is killed while the Critic waits for it.
    provider.push(Reply::Delay(Duration::from_secs(30), Box::new(decision())));
    let asked_before = provider.requests().len();
    sweep(&mut mcp, "inference_staleness").await;
    wait(&mut mcp, "the Critic to take the task", async |mcp| {
        mcp.call("process_status", json!({"process_kind": "critic"})).await["current_task_type"] == "inference_conflict"
    })
    .await;
    // Killed only once the question has reached the model (the delayed reply is then this
    // server's, not the next one's).
    wait(&mut mcp, "the Critic to ask the model", async |_| provider.requests().len() > asked_before).await;
    let killed = mcp.call("process_status", json!({"process_kind": "critic"})).await["instance_id"].clone();
    mcp.child.kill().await.unwrap();
    drop(mcp);

    // Restarted: the task's lease ends, the new Critic takes it over and settles it once.
    provider.push(decision());
    let mut mcp = Mcp::start(dir.path(), &env).await;
    wait(&mut mcp, "the new Critic to settle the task", async |mcp| {
        mcp.call("process_status", json!({"process_kind": "critic"})).await["tasks_done"] == 1
    })
    .await;
    assert_eq!(superseded_by(&mut mcp, &session, "b").await, "a");
    let history = versions(&mut mcp, &session).await;
    assert_eq!(history.iter().filter(|v| v["metadata"]["tool"] == "arbitrate_inference_conflict").count(), 1);
    // The killed instance stays listed, and counts as stopped once three heartbeats are missing.
    wait(&mut mcp, "the killed instance to count as stopped", async |mcp| {
        let processes = mcp.call("list_processes", json!({})).await["processes"].as_array().unwrap().clone();
        let old = processes.iter().find(|p| p["instance_id"] == killed).unwrap();
        assert_eq!((processes.len(), processes[0]["status"].as_str()), (2, Some("alive")));
        old["status"] == "stopped"
    })
    .await;

    // Asked to stop while it waits for the model: it finishes that task, then stops.
    let ops = json!([{"type": "add_relation", "identity": {"id": "c2", "type": "Relation", "name": "c2"},
                      "participants": ["theory", "earth"], "relation_type": "supports"},
                     {"type": "add_relation", "identity": {"id": "c3", "type": "Relation", "name": "c3"},
                      "participants": ["theory", "earth"], "relation_type": "contradicts"}]);
    mcp.call("evolve_knowledge", json!({"session_id": session, "operations": ops})).await;
    let more = json!([{"type": "add_object", "identity": {"id": "d", "type": "InferenceStep", "name": "d"},
                       "structure": {"premises": ["earth"], "conclusion": "theory", "confidence": 0.2}}]);
    mcp.call("evolve_knowledge", json!({"session_id": session, "operations": more})).await;
    provider.push(Reply::Delay(Duration::from_secs(2), Box::new(decision())));
    sweep(&mut mcp, "inference_staleness").await;
    wait(&mut mcp, "the Critic to take the task", async |mcp| {
        mcp.call("process_status", json!({"process_kind": "critic"})).await["current_task_type"] == "inference_conflict"
    })
    .await;
    let requested = mcp.call("request_process_stop", json!({"process_kind": "critic"})).await;
    assert_eq!(requested["accepted"], true);
    wait(&mut mcp, "the Critic to stop", async |mcp| {
        mcp.call("process_status", json!({"process_kind": "critic"})).await["status"] == "stopped"
    })
    .await;
    let status = mcp.call("process_status", json!({"process_kind": "critic"})).await;
    assert_eq!((status["tasks_done"].as_u64(), status["current_task_id"].clone()), (Some(2), Value::Null), "{status}");
    assert!(status["stopped_at"].is_string());
    assert_eq!(superseded_by(&mut mcp, &session, "d").await, "a", "the task in hand was finished");
    // The contradiction queued next is left for another worker: nothing claims it now.
    sweep(&mut mcp, "contradiction").await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let claimed = mcp.call("claim_conflict_task", json!({"task_type": "contradiction_detected"})).await;
    assert!(claimed["task"].is_object(), "still queued after the Critic stopped: {claimed}");
}
