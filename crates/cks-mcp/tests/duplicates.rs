//! Duplicate detection end to end: the real binary over stdio on SQLite, the duplicates sweeper
//! queuing two near-identical objects once, and resolve_duplicate merging them in one commit
//! whose version says so, the relations rewired and the history still showing both.

use serde_json::{Value, json};
use std::time::Duration;

mod support;
use support::stdio::Mcp;

fn env() -> Vec<(&'static str, String)> {
    vec![("CKS_SWEEPERS", "off".into()), ("CKS_SWEEP_INTERVAL_SECONDS", "3600".into())]
}

fn object(id: &str, ty: &str, name: &str, structure: Value) -> Value {
    json!({"identity": {"id": id, "type": ty, "name": name}, "structure": structure})
}

fn relation(id: &str, a: &str, b: &str, ty: &str) -> Value {
    object(id, "Relation", id, json!({"participants": [a, b], "relation_type": ty}))
}

/// Starts the duplicates sweeper (it sweeps at once) and waits for that sweep; its status then.
async fn sweep(mcp: &mut Mcp) -> Value {
    let agent = json!({"agent_id": "duplicates"});
    let before = mcp.call("agent_status", agent.clone()).await["sweeps_completed"].as_u64().unwrap();
    mcp.call("stop_agent", agent.clone()).await;
    assert_eq!(mcp.call("start_agent", agent.clone()).await["running"], true);
    for _ in 0..500 {
        let status = mcp.call("agent_status", agent.clone()).await;
        if status["sweeps_completed"].as_u64().unwrap() > before {
            return status;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the duplicates sweeper did not sweep");
}

/// A query_subgraph answer's graph (its canonical JSON text).
fn subgraph(read: &Value) -> Vec<Value> {
    let text = read["subgraph"].as_str().unwrap_or_else(|| panic!("{read}"));
    serde_json::from_str::<Value>(text).unwrap()["objects"].as_array().unwrap().clone()
}

/// The session's objects by id, at a version when given.
async fn objects(mcp: &mut Mcp, session: &str, version_id: Option<&str>) -> Vec<String> {
    let mut arguments = json!({"session_id": session, "seed_ids": [], "max_objects": 0});
    if let Some(version_id) = version_id {
        arguments["version_id"] = json!(version_id);
    }
    let read = mcp.call("query_subgraph", arguments).await;
    let mut ids: Vec<String> =
        subgraph(&read).iter().map(|o| o["identity"]["id"].as_str().unwrap().to_owned()).collect();
    ids.sort();
    ids
}

#[tokio::test]
async fn near_identical_objects_are_queued_once_and_merged_on_request() {
    let dir = tempfile::tempdir().unwrap();
    let mut mcp = Mcp::start(dir.path(), &env()).await;
    let graph = json!({"objects": [
        object("kg", "Concept", "Knowledge graph", json!({"summary": "a graph of facts"})),
        object("kg-2", "Concept", "knowledge-graph", json!({"source": "a glossary"})),
        object("rdf", "Standard", "RDF", json!({})),
        object("web", "Concept", "Semantic web", json!({})),
        relation("r1", "kg", "rdf", "uses"),
        relation("r2", "kg-2", "web", "part_of"),
        relation("r3", "kg-2", "rdf", "uses"),
    ]});
    let session = mcp.call("validate_knowledge", json!({"json_data": graph.to_string()})).await["session_id"]
        .as_str()
        .unwrap()
        .to_owned();

    let status = sweep(&mut mcp).await;
    assert_eq!(
        (status["last_result_count"].as_u64(), status["task_type"].as_str()),
        (Some(1), Some("duplicate_candidate"))
    );
    // Swept again with nothing changed: the pair is not queued a second time.
    sweep(&mut mcp).await;
    let claimed = mcp.call("claim_conflict_task", json!({"task_type": "duplicate_candidate"})).await;
    let task = claimed["task"].clone();
    assert_eq!(task["session_id"], session.as_str(), "{claimed}");
    assert_eq!(task["payload"]["object_ids"], json!(["kg", "kg-2"]));
    assert_eq!(task["payload"]["reasons"], json!(["same_name"]));
    assert_eq!(task["payload"]["keep_id"], "kg-2", "the object with more relations");
    let none = mcp.call("claim_conflict_task", json!({"task_type": "duplicate_candidate"})).await;
    assert_eq!(none["task"], Value::Null, "queued once");

    let before =
        mcp.call("list_versions", json!({"session_id": session})).await["versions"].as_array().unwrap().last().unwrap()
            ["version_id"]
            .as_str()
            .unwrap()
            .to_owned();
    let merged = mcp
        .call(
            "resolve_duplicate",
            json!({"session_id": session, "task_id": task["task_id"], "decision": "merge", "keep_id": "kg"}),
        )
        .await;
    assert_eq!(merged["commit_result"]["evolved"], true, "{merged}");
    assert_eq!(merged["task_completed"], true);
    assert_eq!(merged["rewired_relation_ids"], json!(["r2"]));
    assert_eq!(merged["removed_relation_ids"], json!(["r3"]), "a repeat of r1");
    assert_eq!(merged["carried_keys"], json!(["source"]));
    let dead = mcp.call("list_dead_lettered_conflicts", json!({"task_type": "duplicate_candidate"})).await;
    assert_eq!(dead["count"], 0);
    let completed = mcp.call("complete_conflict_task", json!({"task_id": task["task_id"]})).await;
    assert_eq!(completed["error"], "task_not_found", "already completed by the merge");

    // The graph now: one Knowledge graph, its relations intact.
    assert_eq!(objects(&mut mcp, &session, None).await, ["kg", "r1", "r2", "rdf", "web"]);
    let read = mcp.call("query_subgraph", json!({"session_id": session, "seed_ids": ["kg"], "depth": 1})).await;
    let graph = subgraph(&read);
    let find = |id: &str| graph.iter().find(|o| o["identity"]["id"] == id).cloned().unwrap();
    assert_eq!(find("r2")["structure"]["participants"], json!(["kg", "web"]));
    assert_eq!(find("kg")["structure"], json!({"summary": "a graph of facts", "source": "a glossary"}));

    // History: the merge is one version that says what happened; the one before still has both.
    let versions = mcp.call("list_versions", json!({"session_id": session})).await["versions"].clone();
    let last = versions.as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["metadata"]["tool"], "resolve_duplicate");
    assert_eq!(
        (last["metadata"]["merged_ids"].clone(), last["metadata"]["merged_into"].clone()),
        (json!(["kg-2"]), json!("kg"))
    );
    assert_eq!(objects(&mut mcp, &session, Some(&before)).await, ["kg", "kg-2", "r1", "r2", "r3", "rdf", "web"]);

    // The merged pair is gone: a later sweep of the changed session queues nothing.
    assert_eq!(sweep(&mut mcp).await["last_result_count"], 0);
}
