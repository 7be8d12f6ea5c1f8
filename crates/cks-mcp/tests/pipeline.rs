//! The pipeline end to end: the real binary over stdio on SQLite, `start_pipeline` queueing a run
//! and the pipeline process taking it through Researcher, Reviewer, Synthesizer and Arbiter against
//! a scripted provider server, `list_pipeline_runs` showing it before and after a restart; a server
//! killed in the middle of a step, the run finished by the next one with nothing done twice; and a
//! failing provider's step retried, then dead-lettered.

use serde_json::{Value, json};
use std::time::Duration;

use cks_testkit::{ProviderServer, Reply};

mod support;
use support::stdio::Mcp;

fn env(provider: &str) -> Vec<(&'static str, String)> {
    vec![
        ("CKS_SWEEPERS", "off".into()),
        ("CKS_EMBED_PIPELINE_AGENT", "true".into()),
        ("CKS_PIPELINE_POLL_INTERVAL", "1".into()),
        ("CKS_PIPELINE_LIVENESS_INTERVAL", "1".into()),
        ("CKS_PIPELINE_RESEARCHER_MAX_TOKENS", "300".into()),
        ("CKS_TASK_LEASE_SECONDS", "2".into()),
        ("CKS_TASK_MAX_RETRIES", "1".into()),
        ("CKS_LLM_PROVIDER", "anthropic".into()),
        ("CKS_LLM_MAX_RETRIES", "0".into()),
        ("ANTHROPIC_API_KEY", "sk-ant-pipeline-secret".into()),
        ("ANTHROPIC_BASE_URL", provider.to_owned()),
    ]
}

fn object(id: &str, ty: &str, structure: Value) -> Value {
    json!({"identity": {"id": id, "type": ty, "name": id}, "structure": structure})
}

/// Earth, the Moon and a theory that Earth both supports and contradicts, which a rule forbids.
fn troubled() -> String {
    json!({"objects": [
        object("rule", "MutualExclusionRule", json!({"relation_type_a": "supports", "relation_type_b": "contradicts"})),
        object("earth", "Planet", json!({"note": "third planet"})),
        object("moon", "Moon", json!({})),
        object("theory", "Claim", json!({})),
        object("s1", "Relation", json!({"participants": ["earth", "theory"], "relation_type": "supports"})),
        object("c1", "Relation", json!({"participants": ["earth", "theory"], "relation_type": "contradicts"})),
    ]})
    .to_string()
}

async fn wait(mcp: &mut Mcp, what: &str, mut done: impl AsyncFnMut(&mut Mcp) -> bool) {
    for _ in 0..400 {
        if done(mcp).await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

async fn runs(mcp: &mut Mcp, session: &str) -> Vec<Value> {
    mcp.call("list_pipeline_runs", json!({"session_id": session})).await["runs"].as_array().unwrap().clone()
}

async fn run(mcp: &mut Mcp, session: &str, run_id: &Value) -> Value {
    runs(mcp, session).await.into_iter().find(|r| r["run_id"] == *run_id).unwrap()
}

async fn wait_for_run(mcp: &mut Mcp, session: &str, run_id: &Value, status: &str) -> Value {
    wait(mcp, &format!("run {run_id} to be {status}"), async |mcp| run(mcp, session, run_id).await["status"] == status)
        .await;
    run(mcp, session, run_id).await
}

fn step<'a>(run: &'a Value, name: &str) -> &'a Value {
    run["steps"].as_array().unwrap().iter().find(|s| s["name"] == name).unwrap()
}

async fn session(mcp: &mut Mcp) -> String {
    mcp.call("validate_knowledge", json!({"json_data": troubled()})).await["session_id"].as_str().unwrap().to_owned()
}

async fn versions(mcp: &mut Mcp, session: &str) -> Vec<Value> {
    mcp.call("list_versions", json!({"session_id": session})).await["versions"].as_array().unwrap().clone()
}

#[tokio::test]
async fn a_run_goes_through_its_four_steps_survives_restarts_and_a_kill_mid_step() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let provider = ProviderServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let env = env(&provider.base_url());
    let mut mcp = Mcp::start(dir.path(), &env).await;
    let session = session(&mut mcp).await;
    let contradiction =
        mcp.call("resolve_contradiction", json!({"session_id": session})).await["contradictions"][0]["id"].clone();
    provider.push_all([
        Reply::Text("Earth is the third planet from the Sun.".into()),
        Reply::Text("APPROVE: accurate.".into()),
        Reply::Text("The theory is contested.".into()),
        Reply::Text("REJECT: too vague.".into()),
        Reply::Text(
            "{\"objects\": [{\"id\": \"orbit\", \"type\": \"Fact\", \"name\": \"Earth orbits the Sun\"}]}".into(),
        ),
        Reply::Text(
            json!([{"contradiction_id": contradiction, "winner_relation_id": "s1", "reason": "better sourced"}])
                .to_string(),
        ),
    ]);
    let started = mcp.call("start_pipeline", json!({"session_id": session, "object_ids": ["earth", "theory"]})).await;
    assert_eq!(
        (started["status"].as_str(), started["enqueued_objects"].clone()),
        (Some("started"), json!(["earth", "theory"]))
    );
    let run_id = started["run_id"].clone();
    let done = wait_for_run(&mut mcp, &session, &run_id, "completed").await;
    let statuses: Vec<&str> = done["steps"].as_array().unwrap().iter().map(|s| s["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["completed"; 4], "{done}");
    assert_eq!(
        (step(&done, "Reviewer")["approved"].clone(), step(&done, "Reviewer")["rejected"].clone()),
        (json!(["earth"]), json!(["theory"]))
    );
    let limits: Vec<u64> = provider.requests().iter().map(|r| r.body["max_tokens"].as_u64().unwrap()).collect();
    assert_eq!(limits, [300, 256, 300, 256, 1024, 512], "each step with its own limit");
    assert_eq!(mcp.call("resolve_contradiction", json!({"session_id": session})).await["contradiction_count"], 0);
    let history = versions(&mut mcp, &session).await;
    let by_pipeline: Vec<&Value> = history.iter().filter(|v| v["metadata"]["process"] == "pipeline").collect();
    let steps: Vec<&str> = by_pipeline.iter().map(|v| v["metadata"]["step"].as_str().unwrap()).collect();
    assert_eq!(steps, ["Researcher", "Reviewer", "Researcher", "Reviewer", "Synthesizer", "Arbiter"]);
    for version in &by_pipeline {
        let metadata = &version["metadata"];
        assert_eq!((metadata["run_id"].clone(), metadata["provider"].as_str()), (run_id.clone(), Some("anthropic")));
        assert!(metadata["task_id"].is_i64() && metadata["model"].is_string(), "{metadata}");
    }
    let orbit = step(&done, "Synthesizer")["outputs"][1].as_str().unwrap().to_owned();
    let explained = mcp.call("explain_knowledge", json!({"session_id": session, "object_id": orbit})).await;
    assert!(explained.get("error").is_none(), "the synthesized object is in the graph: {explained}");

    // Killed and started again: the run is still there, as it was.
    mcp.child.kill().await.unwrap();
    drop(mcp);
    let mut mcp = Mcp::start(dir.path(), &env).await;
    assert_eq!(run(&mut mcp, &session, &run_id).await, done);

    // Killed while the Researcher waits for the model: the next server's pipeline takes the task
    // over once its lease ends, and the run completes with the object researched once.
    provider.push(Reply::Delay(Duration::from_secs(30), Box::new(Reply::Text("Too late.".into()))));
    let asked_before = provider.requests().len();
    let moon = mcp.call("start_pipeline", json!({"session_id": session, "object_ids": ["moon"]})).await;
    wait(&mut mcp, "the pipeline to take the task", async |mcp| {
        mcp.call("process_status", json!({"process_kind": "pipeline"})).await["current_task_type"]
            == "pipeline_research_request"
    })
    .await;
    // Killed only once the question has reached the model (the delayed reply is then this
    // server's, not the next one's).
    wait(&mut mcp, "the Researcher to ask the model", async |_| provider.requests().len() > asked_before).await;
    mcp.child.kill().await.unwrap();
    drop(mcp);
    provider.push_all([
        Reply::Text("The Moon orbits Earth.".into()),
        Reply::Text("APPROVE: true.".into()),
        Reply::Text("{\"objects\": [{\"id\": \"moon-orbit\", \"name\": \"The Moon orbits Earth\"}]}".into()),
    ]);
    let mut mcp = Mcp::start(dir.path(), &env).await;
    let finished = wait_for_run(&mut mcp, &session, &moon["run_id"], "completed").await;
    assert!(step(&finished, "Arbiter")["note"].as_str().unwrap().contains("no contradiction"), "{finished}");
    let history = versions(&mut mcp, &session).await;
    let researched_moon = history
        .iter()
        .filter(|v| v["metadata"]["run_id"] == moon["run_id"] && v["metadata"]["step"] == "Researcher")
        .count();
    assert_eq!(researched_moon, 1);
    let processes = mcp.call("list_processes", json!({})).await["processes"].as_array().unwrap().clone();
    assert!(processes.iter().all(|p| p["process_kind"] == "pipeline"));
    assert_eq!(processes[0]["status"], "alive");
}

#[tokio::test]
async fn a_failing_provider_fails_the_step_retries_it_then_dead_letters_it() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let provider = ProviderServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut mcp = Mcp::start(dir.path(), &env(&provider.base_url())).await;
    let session = session(&mut mcp).await;
    provider.set_default(Some(Reply::Status {
        status: 500,
        headers: Vec::new(),
        body: "{\"error\": \"down\"}".into(),
    }));
    let started = mcp.call("start_pipeline", json!({"session_id": session, "object_ids": ["earth"]})).await;
    let run_id = started["run_id"].clone();

    wait(&mut mcp, "the first failure", async |mcp| {
        step(&run(mcp, &session, &run_id).await, "Researcher")["error"].is_string()
    })
    .await;
    let retrying = run(&mut mcp, &session, &run_id).await;
    assert_eq!(
        (retrying["status"].as_str(), step(&retrying, "Researcher")["status"].as_str()),
        (Some("running"), Some("active"))
    );

    let failed = wait_for_run(&mut mcp, &session, &run_id, "failed").await;
    let researcher = step(&failed, "Researcher");
    let error = researcher["error"].as_str().unwrap();
    assert!(error.contains("LLM Researcher call failed") && error.contains("gave up after 2"), "{error}");
    assert!(!error.contains("sk-ant-pipeline-secret"));
    assert!(researcher["dead_letter_task_id"].is_i64());
    assert_eq!(provider.requests().len(), 2, "one try and one retry");
    let status = mcp.call("process_status", json!({"process_kind": "pipeline"})).await;
    assert_eq!((status["status"].as_str(), status["tasks_failed"].as_u64()), (Some("alive"), Some(2)), "{status}");
    assert_eq!(versions(&mut mcp, &session).await.len(), 1, "nothing committed");
}
