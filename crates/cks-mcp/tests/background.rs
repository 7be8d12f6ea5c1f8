//! Background reasoning end to end: the real binary over stdio on SQLite, its sweepers finding a
//! contradiction and an expired fact that a commit introduced, and the conflict tools claiming,
//! resolving, failing, dead-lettering, reviewing and approving the tasks they queued.

use serde_json::{Value, json};
use std::time::Duration;

mod support;
use support::stdio::Mcp;

fn env() -> Vec<(&'static str, String)> {
    vec![
        ("CKS_SWEEPERS", "off".into()),
        ("CKS_SWEEP_INTERVAL_SECONDS", "3600".into()),
        ("CKS_TASK_MAX_RETRIES", "2".into()),
    ]
}

fn object(id: &str, ty: &str, structure: Value) -> Value {
    json!({"identity": {"id": id, "type": ty, "name": id}, "structure": structure})
}

fn relation(id: &str, a: &str, b: &str, ty: &str) -> Value {
    json!({"type": "add_relation", "identity": {"id": id, "type": "Relation", "name": id},
           "participants": [a, b], "relation_type": ty})
}

/// Starts a sweeper (it sweeps at once) and waits for that sweep; its status then.
async fn sweep(mcp: &mut Mcp, agent_id: &str) -> Value {
    let before = mcp.call("agent_status", json!({"agent_id": agent_id})).await["sweeps_completed"].as_u64().unwrap();
    mcp.call("stop_agent", json!({"agent_id": agent_id})).await;
    assert_eq!(mcp.call("start_agent", json!({"agent_id": agent_id})).await["running"], true);
    for _ in 0..500 {
        let status = mcp.call("agent_status", json!({"agent_id": agent_id})).await;
        if status["sweeps_completed"].as_u64().unwrap() > before {
            return status;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{agent_id} did not sweep");
}

#[tokio::test]
async fn sweeps_queue_each_finding_once_and_the_tools_resolve_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut mcp = Mcp::start(dir.path(), &env()).await;
    let graph = json!({"objects": [
        object("rule", "MutualExclusionRule", json!({"relation_type_a": "supports", "relation_type_b": "contradicts"})),
        object("earth", "Planet", json!({})),
        object("theory", "Claim", json!({})),
        object("fact", "Fact", json!({"valid_until": "2030-01-01T00:00:00Z"})),
    ]});
    let session = mcp.call("validate_knowledge", json!({"json_data": graph.to_string()})).await["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(sweep(&mut mcp, "contradiction").await["last_result_count"], 0);
    assert_eq!(sweep(&mut mcp, "temporal_staleness").await["last_result_count"], 0);

    // One commit introduces a contradiction and an expired fact.
    let ops = json!([
        relation("s1", "earth", "theory", "supports"),
        relation("c1", "earth", "theory", "contradicts"),
        {"type": "update_object", "object_id": "fact", "structure_patch": {"valid_until": "2001-01-01T00:00:00Z"}},
    ]);
    let committed = mcp.call("evolve_knowledge", json!({"session_id": session, "operations": ops})).await;
    assert_eq!(committed["evolved"], true, "{committed}");
    for agent in ["contradiction", "temporal_staleness"] {
        let status = sweep(&mut mcp, agent).await;
        assert_eq!(
            (status["last_sessions_checked"].as_u64(), status["last_result_count"].as_u64()),
            (Some(1), Some(1))
        );
        // A second sweep looks at nothing: nothing changed.
        assert_eq!(sweep(&mut mcp, agent).await["last_sessions_checked"], 0);
    }

    // Exactly one task each.
    let contradiction =
        mcp.call("claim_conflict_task", json!({"task_type": "contradiction_detected"})).await["task"].clone();
    assert_eq!(contradiction["session_id"], session.as_str());
    assert_eq!(contradiction["payload"]["code"], "CKS-EXT-MUTUAL-EXCLUSION");
    let expired = mcp.call("claim_conflict_task", json!({"task_type": "temporal_conflict"})).await["task"].clone();
    assert_eq!(
        (expired["payload"]["object_id"].as_str(), expired["payload"]["reason"].as_str()),
        (Some("fact"), Some("valid_until_expired"))
    );
    for task_type in ["contradiction_detected", "temporal_conflict"] {
        assert!(
            mcp.call("claim_conflict_task", json!({"task_type": task_type})).await["task"].is_null(),
            "{task_type}"
        );
    }

    // Resolving them commits and clears the tasks.
    let resolved = mcp
        .call(
            "resolve_contradiction",
            json!({"session_id": session, "task_id": contradiction["task_id"], "commit": true,
            "contradiction_ids": [contradiction["payload"]["location"]]}),
        )
        .await;
    assert_eq!(
        (resolved["commit_result"]["evolved"].as_bool(), resolved["task_completed"].as_bool()),
        (Some(true), Some(true)),
        "{resolved}"
    );
    let bumped = mcp
        .call(
            "resolve_temporal_conflict",
            json!({"session_id": session, "object_id": "fact", "action": "bump",
            "extend_by_days": 7, "commit": true, "task_id": expired["task_id"]}),
        )
        .await;
    assert_eq!(
        (bumped["commit_result"]["evolved"].as_bool(), bumped["task_completed"].as_bool()),
        (Some(true), Some(true)),
        "{bumped}"
    );
    let versions = mcp.call("list_versions", json!({"session_id": session})).await;
    let tools: Vec<&str> =
        versions["versions"].as_array().unwrap().iter().filter_map(|v| v["metadata"]["tool"].as_str()).collect();
    assert!(tools.ends_with(&["resolve_contradiction", "resolve_temporal_conflict"]), "{tools:?}");
    // Resolved: the next sweeps find nothing new to queue.
    assert_eq!(sweep(&mut mcp, "contradiction").await["last_result_count"], 0);
    assert_eq!(sweep(&mut mcp, "temporal_staleness").await["last_result_count"], 0);

    // A task failed more often than allowed lands in the dead-letter list.
    let ops = json!([relation("c2", "earth", "theory", "contradicts")]);
    mcp.call("evolve_knowledge", json!({"session_id": session, "operations": ops})).await;
    sweep(&mut mcp, "contradiction").await;
    let task = mcp.call("claim_conflict_task", json!({"task_type": "contradiction_detected"})).await["task"].clone();
    let task_id = task["task_id"].clone();
    for retry_count in 1..=2 {
        let failed = mcp
            .call("fail_conflict_task", json!({"task_id": task_id, "retry_count": retry_count, "error": "unsure"}))
            .await;
        assert!(failed["next_retry_at"].is_string(), "{failed}");
    }
    let last = mcp.call("fail_conflict_task", json!({"task_id": task_id, "retry_count": 3, "error": "unsure"})).await;
    assert_eq!(last["dead_lettered"], true);
    let dead = mcp.call("list_dead_lettered_conflicts", json!({"session_id": session})).await;
    assert_eq!(dead["count"], 1);
    assert_eq!(dead["tasks"][0]["task_id"], task_id);
    assert!(dead["tasks"][0]["last_error"].as_str().unwrap().starts_with("unsure"));

    // And the queue survives a restart.
    drop(mcp);
    let mut mcp = Mcp::start(dir.path(), &env()).await;
    let dead = mcp.call("list_dead_lettered_conflicts", json!({})).await;
    assert_eq!(dead["count"], 1);
    assert_eq!(mcp.call("retry_dead_letter", json!({"task_id": task_id})).await["retried"], true);
    let again = mcp.call("claim_conflict_task", json!({"task_type": "contradiction_detected"})).await["task"].clone();
    assert_eq!((again["task_id"].clone(), again["retry_count"].as_u64()), (task_id.clone(), Some(0)));

    // Given up on again, reviewed, and the proposed resolution approved: applied and completed.
    let dead = mcp.call("dead_letter_conflict_task", json!({"task_id": task_id, "error": "needs a person"})).await;
    assert_eq!(dead["dead_lettered"], true);
    let review = mcp.call("review_dead_letter", json!({"task_id": task_id})).await;
    assert_eq!(review["proposed_resolution"]["tool"], "resolve_contradiction");
    let approved =
        mcp.call("approve_resolution", json!({"task_id": task_id, "resolution": review["proposed_resolution"]})).await;
    assert_eq!(approved["approved"], true, "{approved}");
    assert_eq!(mcp.call("list_dead_lettered_conflicts", json!({})).await["count"], 0);
    let listing = mcp.call("resolve_contradiction", json!({"session_id": session})).await;
    assert_eq!(listing["contradiction_count"], 0);
}

#[tokio::test]
async fn a_killed_server_loses_no_task_and_its_claims_are_taken_over() {
    let dir = tempfile::tempdir().unwrap();
    let mut env = env();
    env.push(("CKS_TASK_LEASE_SECONDS", "2".into()));
    let lease = Duration::from_secs(2);
    let mut mcp = Mcp::start(dir.path(), &env).await;
    let facts: Vec<Value> =
        (0..3).map(|i| object(&format!("f{i}"), "Fact", json!({"valid_until": "2001-01-01T00:00:00Z"}))).collect();
    let graph = json!({"objects": facts}).to_string();
    let session = mcp.call("validate_knowledge", json!({"json_data": graph})).await["session_id"].clone();
    assert_eq!(sweep(&mut mcp, "temporal_staleness").await["last_result_count"], 3);
    let claimed = mcp.call("claim_conflict_task", json!({"task_type": "temporal_conflict"})).await["task"].clone();
    let claimed_at = std::time::Instant::now();
    assert_eq!(claimed["session_id"], session);

    // Killed while holding a claim.
    mcp.child.kill().await.unwrap();
    drop(mcp);
    let mut mcp = Mcp::start(dir.path(), &env).await;
    // A sweep after the restart looks at everything again and queues nothing twice.
    let status = sweep(&mut mcp, "temporal_staleness").await;
    assert_eq!((status["last_sessions_checked"].as_u64(), status["last_result_count"].as_u64()), (Some(1), Some(3)));
    let mut seen = Vec::new();
    while let Some(task) =
        Some(mcp.call("claim_conflict_task", json!({"task_type": "temporal_conflict"})).await["task"].clone())
            .filter(|t| !t.is_null())
    {
        seen.push(task["task_id"].clone());
    }
    // On a slow machine the lease may have ended already; then the task was taken over in the loop.
    if claimed_at.elapsed() < lease {
        assert_eq!(seen.len(), 2, "the two unclaimed tasks");
        assert!(!seen.contains(&claimed["task_id"]), "the killed server's claim holds until its lease ends");
    }
    tokio::time::sleep(lease.saturating_sub(claimed_at.elapsed()) + Duration::from_millis(100)).await;
    let taken_over = mcp.call("claim_conflict_task", json!({"task_type": "temporal_conflict"})).await["task"].clone();
    let mut ids: Vec<Value> = seen.clone();
    if seen.len() == 2 {
        assert_eq!(taken_over["task_id"], claimed["task_id"], "a lease that ended makes the task claimable again");
        ids.push(taken_over["task_id"].clone());
    }
    ids.sort_by_key(|v| v.as_i64());
    ids.dedup();
    assert_eq!(ids.len(), 3, "three findings, three tasks, none lost or doubled");
}
