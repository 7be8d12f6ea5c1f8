use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

use cks_core::json::parse_value;
use cks_core::ops::parse_operations;

use super::{Sweepers, SweepersConfig};
use crate::store::memory::MemoryStore;
use crate::store::{TaskFilter, TaskStatus};
use crate::{CommitRequest, NewSession, Runtime, RuntimeConfig};

fn runtime() -> Arc<Runtime> {
    Arc::new(Runtime::new(Arc::new(MemoryStore::new()), RuntimeConfig::default()))
}

fn idle() -> SweepersConfig {
    SweepersConfig { interval: Duration::from_secs(3_600), start: false, ..SweepersConfig::default() }
}

fn obj(id: &str, ty: &str, structure: Value) -> Value {
    json!({"identity": {"id": id, "type": ty, "name": id}, "structure": structure})
}

fn rel(id: &str, a: &str, b: &str, ty: &str) -> Value {
    obj(id, "Relation", json!({"participants": [a, b], "relation_type": ty}))
}

async fn session(runtime: &Runtime, objects: Vec<Value>) -> String {
    let structure = parse_value(json!({"objects": objects})).unwrap();
    runtime.create_session(structure, NewSession::default()).await.unwrap().session_id
}

async fn tasks(runtime: &Runtime, task_type: &str) -> Vec<(String, Value)> {
    let filter = TaskFilter { task_type: Some(task_type.into()), ..Default::default() };
    let rows = runtime.tasks().list(&filter).await.unwrap();
    rows.into_iter().map(|t| (t.session_id, serde_json::from_str(&t.payload).unwrap())).collect()
}

async fn sweep(sweepers: &Sweepers, agent_id: &str) -> (u64, u64) {
    let status = sweepers.run_once(agent_id).await.expect("a sweeper").expect("a sweep");
    (status.last_sessions_checked.unwrap(), status.last_result_count.unwrap())
}

fn contradiction() -> Vec<Value> {
    vec![
        obj("rule", "MutualExclusionRule", json!({"relation_type_a": "supports", "relation_type_b": "contradicts"})),
        obj("earth", "Planet", json!({})),
        obj("theory", "Claim", json!({})),
        rel("s1", "earth", "theory", "supports"),
    ]
}

#[tokio::test]
async fn a_sweep_queues_each_finding_once_and_looks_only_at_what_changed() {
    let runtime = runtime();
    let clean = session(&runtime, contradiction()).await;
    let expired = obj("fact", "Fact", json!({"valid_until": "2001-01-01T00:00:00Z"}));
    let stale = session(&runtime, vec![expired]).await;
    let kinds: Vec<Box<dyn super::Sweep>> =
        vec![Box::new(super::contradiction::Contradictions), Box::new(super::temporal::Expired)];
    let sweepers = Sweepers::with(runtime.clone(), &idle(), kinds, None).await.unwrap();

    // The first pass looks at every session.
    assert_eq!(sweep(&sweepers, "contradiction").await, (2, 0));
    assert_eq!(sweep(&sweepers, "temporal_staleness").await, (2, 1));
    let expired_tasks = tasks(&runtime, "temporal_conflict").await;
    assert_eq!(expired_tasks.len(), 1);
    assert_eq!(expired_tasks[0].0, stale);
    assert_eq!(expired_tasks[0].1["object_id"], "fact");
    assert_eq!(expired_tasks[0].1["reason"], "valid_until_expired");

    // A commit that introduces a contradiction: only that session is looked at, one task queued.
    let ops = json!([{"type": "add_relation", "identity": {"id": "c1", "type": "Relation", "name": "c1"},
                      "participants": ["earth", "theory"], "relation_type": "contradicts"}]);
    runtime.commit(&clean, CommitRequest::operations(parse_operations(&ops).unwrap())).await.unwrap();
    tokio::task::yield_now().await;
    assert_eq!(sweep(&sweepers, "contradiction").await, (1, 1));
    let found = tasks(&runtime, "contradiction_detected").await;
    assert_eq!(found.len(), 1);
    assert_eq!((found[0].0.as_str(), &found[0].1["code"]), (clean.as_str(), &json!("CKS-EXT-MUTUAL-EXCLUSION")));

    // Nothing changed: nothing looked at, nothing queued again — not even after a new commit
    // elsewhere in the same session that leaves the finding as it was.
    assert_eq!(sweep(&sweepers, "contradiction").await, (0, 0));
    let ops = json!([{"type": "update_object", "object_id": "earth", "structure_patch": {"k": 1}}]);
    runtime.commit(&clean, CommitRequest::operations(parse_operations(&ops).unwrap())).await.unwrap();
    tokio::task::yield_now().await;
    assert_eq!(sweep(&sweepers, "contradiction").await, (1, 1));
    assert_eq!(tasks(&runtime, "contradiction_detected").await.len(), 1, "the same finding is queued once");
    assert_eq!(tasks(&runtime, "temporal_conflict").await.len(), 1);
    let pending = TaskFilter { status: Some(TaskStatus::Pending), ..Default::default() };
    assert_eq!(runtime.tasks().list(&pending).await.unwrap().len(), 2);
}

#[tokio::test]
async fn an_unchanged_session_is_looked_at_again_when_its_next_fact_expires() {
    let runtime = runtime();
    let soon = (time::OffsetDateTime::now_utc() + time::Duration::milliseconds(1_500))
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    let id = session(&runtime, vec![obj("fact", "Fact", json!({"valid_until": soon}))]).await;
    let sweepers =
        Sweepers::with(runtime.clone(), &idle(), vec![Box::new(super::temporal::Expired)], None).await.unwrap();
    assert_eq!(sweep(&sweepers, "temporal_staleness").await, (1, 0));
    assert_eq!(sweep(&sweepers, "temporal_staleness").await, (0, 0), "not due yet");
    tokio::time::sleep(Duration::from_millis(1_700)).await;
    assert_eq!(sweep(&sweepers, "temporal_staleness").await, (1, 1), "due when the fact expired");
    assert_eq!(tasks(&runtime, "temporal_conflict").await[0].0, id);
}

#[tokio::test]
async fn stale_provenance_is_queued_and_a_newer_check_makes_the_subject_fresh() {
    let runtime = runtime();
    let rfc3339 = |at: time::OffsetDateTime| at.format(&time::format_description::well_known::Rfc3339).unwrap();
    let record = |id: &str, checked_at: &str| {
        obj(id, "VerificationRecord", json!({"checked_at": checked_at, "checked_via": "automated_http_check"}))
    };
    let old = session(
        &runtime,
        vec![
            obj("doc", "Document", json!({"url": "https://example.org/paper"})),
            record("vr-old", "2001-01-01T00:00:00Z"),
            rel("link-old", "doc", "vr-old", "verified_by"),
        ],
    )
    .await;
    let just_checked = rfc3339(time::OffsetDateTime::now_utc() - time::Duration::milliseconds(2_500));
    let recent = session(
        &runtime,
        vec![
            obj("page", "Page", json!({})),
            record("vr-recent", &just_checked),
            rel("l", "page", "vr-recent", "verified_by"),
        ],
    )
    .await;
    let config = SweepersConfig { provenance_ttl: Duration::from_secs(4), ..idle() };
    let sweepers = Sweepers::start(runtime.clone(), &config).await.unwrap();

    assert_eq!(sweep(&sweepers, "provenance_staleness").await, (2, 1));
    let queued = tasks(&runtime, "provenance_conflict").await;
    assert_eq!(queued.len(), 1);
    assert_eq!(queued[0].0, old);
    assert_eq!(
        queued[0].1,
        json!({"record_id": "vr-old", "subject_id": "doc", "source_url": "https://example.org/paper",
               "checked_at": "2001-01-01T00:00:00Z", "reason": "ttl_expired"})
    );
    assert_eq!(sweep(&sweepers, "provenance_staleness").await, (0, 0), "nothing changed, nothing due yet");

    // A newer record of the same subject: the subject is fresh, nothing new is queued for it.
    let now = rfc3339(time::OffsetDateTime::now_utc());
    let ops = json!([
        {"type": "add_object", "identity": {"id": "vr-new", "type": "VerificationRecord", "name": "verification"},
         "structure": {"checked_at": now, "checked_via": "automated_http_check", "http_status": 200}},
        {"type": "add_relation", "identity": {"id": "link-new", "type": "Relation", "name": "r"},
         "participants": ["doc", "vr-new"], "relation_type": "verified_by"}]);
    runtime.commit(&old, CommitRequest::operations(parse_operations(&ops).unwrap())).await.unwrap();
    tokio::task::yield_now().await;
    assert_eq!(sweep(&sweepers, "provenance_staleness").await, (1, 0));

    // The recent record goes stale 4 s after its check (1.5 s from the start): its session is looked at again then.
    tokio::time::sleep(Duration::from_millis(1_700)).await;
    assert_eq!(sweep(&sweepers, "provenance_staleness").await, (1, 1), "due when the record went stale");
    let queued = tasks(&runtime, "provenance_conflict").await;
    assert_eq!(queued.len(), 2);
    assert_eq!((queued[1].0.as_str(), &queued[1].1["record_id"]), (recent.as_str(), &json!("vr-recent")));
    assert_eq!(queued[1].1["source_url"], Value::Null, "the subject has no url");
    sweepers.shutdown().await;
}

#[tokio::test]
async fn sweepers_start_sweep_and_stop() {
    let runtime = runtime();
    session(&runtime, contradiction()).await;
    let config = SweepersConfig { interval: Duration::from_millis(20), start: false, ..SweepersConfig::default() };
    let sweepers = Sweepers::start(runtime.clone(), &config).await.unwrap();
    let ids: Vec<&str> = sweepers.statuses().iter().map(|s| s.agent_id).collect();
    assert_eq!(
        ids,
        [
            "inference_staleness",
            "provenance_staleness",
            "temporal_staleness",
            "graph_freshness",
            "graph_auto_update",
            "graph_health",
            "contradiction",
            "duplicates"
        ]
    );
    assert!(!sweepers.status("contradiction").unwrap().running);
    assert!(sweepers.status("nope").is_none() && sweepers.start_agent("nope").await.unwrap().is_none());

    assert!(sweepers.start_agent("contradiction").await.unwrap().unwrap().running);
    let mut swept = None;
    for _ in 0..200 {
        swept = sweepers.status("contradiction").unwrap().last_sessions_checked;
        if swept.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(swept, Some(1), "a started sweeper sweeps at once");
    let stopped = sweepers.stop_agent("contradiction").await.unwrap().unwrap();
    assert!(!stopped.running);
    assert!(!sweepers.status("temporal_staleness").unwrap().running, "the other was never started");
    sweepers.shutdown().await;

    // What start_agent and stop_agent decided outlives the process; the others follow the config.
    sweepers.start_agent("temporal_staleness").await.unwrap();
    sweepers.shutdown().await;
    let config = SweepersConfig { interval: Duration::from_secs(3_600), start: true, ..SweepersConfig::default() };
    let restarted = Sweepers::start(runtime.clone(), &config).await.unwrap();
    let running: Vec<bool> = restarted.statuses().iter().map(|s| s.running).collect();
    assert_eq!(
        running,
        [true, true, true, true, true, true, false, true],
        "the config starts all but the stopped contradiction"
    );
    restarted.shutdown().await;
}

#[tokio::test]
async fn inference_conflicts_are_queued_per_set_and_kept_in_the_inbox() {
    let runtime = runtime();
    let step = |id: &str, confidence: f64| {
        obj(id, "InferenceStep", json!({"premises": ["p"], "conclusion": "c", "confidence": confidence}))
    };
    let objects = vec![obj("p", "Evidence", json!({})), obj("c", "Claim", json!({})), step("s1", 0.9), step("s2", 0.4)];
    let id = session(&runtime, objects).await;
    let calm = session(&runtime, vec![obj("x", "Claim", json!({}))]).await;
    let sweepers = Sweepers::start(runtime.clone(), &idle()).await.unwrap();
    let mut events = runtime.subscribe();
    assert_eq!(sweep(&sweepers, "inference_staleness").await, (2, 1));
    let queued = tasks(&runtime, "inference_conflict").await;
    assert_eq!(queued.len(), 1);
    // Announced as the reference does, with the diagnostics found.
    let detected = std::iter::from_fn(|| events.try_recv().ok())
        .find(|e| e.kind.event_type() == "InferenceConflictDetected")
        .expect("an InferenceConflictDetected event");
    let crate::events::EventKind::InferenceConflictDetected { session_id, diagnostics, .. } = detected.kind else {
        unreachable!()
    };
    assert_eq!(
        (session_id.as_str(), &diagnostics[..]),
        (id.as_str(), queued[0].1["diagnostics"].as_array().unwrap().as_slice())
    );
    assert_eq!(queued[0].0, id);
    assert_eq!(queued[0].1["diagnostics"][0]["code"], "CKS-EXT-INFERENCE-CONFIDENCE-CONFLICT");
    assert_eq!(queued[0].1["diagnostics"][0]["location"], "s1");
    assert_eq!(queued[0].1["diagnostics"][0]["conclusion_id"], "c", "the conclusion arbitration takes");

    // The inbox: peeked, filtered by session, drained once.
    assert_eq!(sweepers.inbox(Some(&calm), true), []);
    let peeked = sweepers.inbox(None, false);
    assert_eq!((peeked.len(), peeked[0].session_id.as_str()), (1, id.as_str()));
    assert_eq!(peeked[0].payload, queued[0].1);
    assert_eq!(sweepers.inbox(Some(&id), true), peeked);
    assert_eq!(sweepers.inbox(None, true), []);

    // The same conflicts are not queued again; a new one is.
    let ops = json!([{"type": "update_object", "object_id": "p", "structure_patch": {"k": 1}}]);
    runtime.commit(&id, CommitRequest::operations(parse_operations(&ops).unwrap())).await.unwrap();
    tokio::task::yield_now().await;
    assert_eq!(sweep(&sweepers, "inference_staleness").await, (1, 1));
    assert_eq!(tasks(&runtime, "inference_conflict").await.len(), 1);
    assert!(sweepers.inbox(None, false).is_empty());

    // s2 superseded by s1 settles the conflict, but a step citing s2 now rests on a stale premise.
    let ops = json!([
        {"type": "update_object", "object_id": "s2", "structure_patch": {"superseded_by": "s1"}},
        {"type": "add_object", "identity": {"id": "s3", "type": "InferenceStep", "name": "s3"},
         "structure": {"premises": ["s2"], "conclusion": "p"}}
    ]);
    runtime.commit(&id, CommitRequest::operations(parse_operations(&ops).unwrap())).await.unwrap();
    tokio::task::yield_now().await;
    assert_eq!(sweep(&sweepers, "inference_staleness").await, (1, 1));
    let queued = tasks(&runtime, "inference_conflict").await;
    assert_eq!(queued.len(), 2, "a new set of findings is a new task");
    let diagnostics = &queued[1].1["diagnostics"];
    assert_eq!(diagnostics.as_array().unwrap().len(), 1);
    assert_eq!(diagnostics[0]["code"], "CKS-EXT-STALE-PREMISE");
    assert_eq!(diagnostics[0]["location"], "s3");
    assert!(diagnostics[0].get("conclusion_id").is_none());
    assert_eq!(sweepers.inbox(Some(&id), true).len(), 1);
}

#[tokio::test]
async fn a_session_that_cannot_be_read_does_not_stop_the_sweep() {
    let runtime = runtime();
    let damaged = crate::store::SessionRow { session_id: "damaged".into(), ..Default::default() };
    runtime.store().create_session(&damaged, "not a structure".into()).await.unwrap();
    let good = session(&runtime, contradiction()).await;
    let ops = json!([{"type": "add_relation", "identity": {"id": "c1", "type": "Relation", "name": "c1"},
                      "participants": ["earth", "theory"], "relation_type": "contradicts"}]);
    runtime.commit(&good, CommitRequest::operations(parse_operations(&ops).unwrap())).await.unwrap();
    let sweepers = Sweepers::start(runtime.clone(), &idle()).await.unwrap();
    let status = sweepers.run_once("contradiction").await.unwrap().unwrap();
    assert_eq!((status.last_sessions_checked, status.last_result_count), (Some(1), Some(1)));
    assert!(status.last_error.unwrap().contains("'damaged'"));
    assert_eq!(status.last_error_session_id.as_deref(), Some("damaged"), "the error names the session");
    assert_eq!(tasks(&runtime, "contradiction_detected").await.len(), 1);
}

#[tokio::test]
async fn graph_sweeps_report_outdated_and_unhealthy_graphs_and_look_again_only_when_due() {
    use crate::store::GraphRow;
    let runtime = runtime();
    let healthy = session(&runtime, vec![obj("x", "Claim", json!({}))]).await;
    let mut contradicted = contradiction();
    contradicted.push(rel("c1", "earth", "theory", "contradicts"));
    let sick = session(&runtime, contradicted).await;
    let graph = |name: &str, session_id: &str, updated_at: &str| GraphRow {
        name: name.into(),
        session_id: session_id.into(),
        updated_at: updated_at.into(),
        created_at: updated_at.into(),
        visibility: "public".into(),
        ..GraphRow::default()
    };
    let now = time::OffsetDateTime::now_utc();
    let recent = (now - time::Duration::days(1)).format(&time::format_description::well_known::Rfc3339).unwrap();
    runtime.store().put_graph(graph("old", &healthy, "2001-01-01T00:00:00Z")).await.unwrap();
    runtime.store().put_graph(graph("fresh", &healthy, &recent)).await.unwrap();
    runtime.store().put_graph(graph("contradicted", &sick, "2001-01-01T00:00:00Z")).await.unwrap();
    let sweepers = Sweepers::start(runtime.clone(), &idle()).await.unwrap();

    assert_eq!(sweep(&sweepers, "graph_freshness").await, (3, 2));
    let outdated = tasks(&runtime, "graph_outdated").await;
    let mut names: Vec<(&str, &str)> =
        outdated.iter().map(|(session, p)| (p["name"].as_str().unwrap(), session.as_str())).collect();
    names.sort();
    assert_eq!(names, [("contradicted", sick.as_str()), ("old", healthy.as_str())]);
    assert_eq!(
        (outdated[0].1["reason"].as_str(), outdated[0].1["ttl_seconds"].as_i64()),
        (Some("ttl_expired"), Some(604_800))
    );

    // Health: outdated and contradicted, 0.6; only outdated, 0.9.
    assert_eq!(sweep(&sweepers, "graph_health").await, (3, 1));
    let unhealthy = tasks(&runtime, "health_check").await;
    assert_eq!(unhealthy.len(), 1);
    assert_eq!((unhealthy[0].0.as_str(), unhealthy[0].1["name"].as_str()), (sick.as_str(), Some("contradicted")));
    assert_eq!(unhealthy[0].1["metrics"]["contradictions"], 0.0);
    assert!((unhealthy[0].1["health_score"].as_f64().unwrap() - 0.6).abs() < 1e-9);
    assert_eq!(unhealthy[0].1["min_score"], 0.7);

    // Nothing changed: nothing is looked at again.
    assert_eq!(sweep(&sweepers, "graph_health").await, (0, 0));
    assert_eq!(sweep(&sweepers, "graph_freshness").await, (0, 0));
    // A commit to a graph's session, or a changed entry, brings that graph back.
    let ops = json!([{"type": "remove_relation", "relation_id": "s1"}]);
    runtime.commit(&sick, CommitRequest::operations(parse_operations(&ops).unwrap())).await.unwrap();
    tokio::task::yield_now().await;
    assert_eq!(sweep(&sweepers, "graph_health").await, (1, 0), "healthy again");
    runtime.store().put_graph(graph("old", &healthy, &recent)).await.unwrap();
    assert_eq!(sweep(&sweepers, "graph_freshness").await, (1, 0));
    // Health looks at the two entries that changed since its last sweep: 0.9 (outdated) and 1.0.
    runtime.store().put_graph(graph("fresh", &healthy, "2002-01-01T00:00:00Z")).await.unwrap();
    assert_eq!(sweep(&sweepers, "graph_health").await, (2, 0));
}

#[tokio::test]
async fn duplicates_are_queued_once_per_pair_and_a_distinct_decision_stops_them() {
    let runtime = runtime();
    let named =
        |id: &str, ty: &str, name: &str| json!({"identity": {"id": id, "type": ty, "name": name}, "structure": {}});
    let id = session(
        &runtime,
        vec![
            named("kg", "Concept", "Knowledge graph"),
            named("kg2", "Concept", "knowledge-graph"),
            named("db", "Concept", "Graph database"),
            named("kg-person", "Person", "Knowledge Graph"),
            rel("r1", "kg2", "db", "related_to"),
        ],
    )
    .await;
    session(&runtime, vec![named("a", "Concept", "Apple"), named("b", "Concept", "Banana")]).await;
    let sweepers = Sweepers::start(runtime.clone(), &idle()).await.unwrap();
    assert_eq!(sweep(&sweepers, "duplicates").await, (2, 1));
    let queued = tasks(&runtime, "duplicate_candidate").await;
    assert_eq!(queued.len(), 1);
    assert_eq!(queued[0].0, id);
    let payload = &queued[0].1;
    assert_eq!(payload["object_ids"], json!(["kg", "kg2"]));
    assert_eq!(payload["reasons"], json!(["same_name"]));
    assert_eq!(
        (payload["keep_id"].as_str(), payload["merge_id"].as_str()),
        (Some("kg2"), Some("kg")),
        "more relations"
    );
    assert_eq!(
        payload["objects"][1],
        json!({"id": "kg2", "name": "knowledge-graph", "type": "Concept", "relation_count": 1})
    );

    // Nothing changed: nothing looked at. A change elsewhere in the session: the pair is not queued again.
    assert_eq!(sweep(&sweepers, "duplicates").await, (0, 0));
    let ops = json!([{"type": "update_object", "object_id": "db", "structure_patch": {"k": 1}}]);
    runtime.commit(&id, CommitRequest::operations(parse_operations(&ops).unwrap())).await.unwrap();
    tokio::task::yield_now().await;
    assert_eq!(sweep(&sweepers, "duplicates").await, (1, 1));
    assert_eq!(tasks(&runtime, "duplicate_candidate").await.len(), 1, "the same pair is queued once");

    // The task settled as `distinct` (a distinct_from relation, the task completed): never queued again.
    let task_id = runtime.tasks().list(&TaskFilter::default()).await.unwrap()[0].task_id;
    assert!(runtime.tasks().complete(crate::store::TaskRef::any(task_id)).await.unwrap());
    let ops = json!([{"type": "add_relation", "identity": {"id": "d1", "type": "Relation", "name": "distinct"},
                      "participants": ["kg2", "kg"], "relation_type": super::DISTINCT_FROM}]);
    runtime.commit(&id, CommitRequest::operations(parse_operations(&ops).unwrap())).await.unwrap();
    tokio::task::yield_now().await;
    assert_eq!(sweep(&sweepers, "duplicates").await, (1, 0));
    assert!(tasks(&runtime, "duplicate_candidate").await.is_empty());
    sweepers.shutdown().await;
}

/// Publishes the versions of a table, by component name.
struct Published(Vec<(&'static str, &'static str)>);

#[async_trait::async_trait]
impl crate::versions::VersionSource for Published {
    async fn released(&self, component: &crate::versions::Component) -> crate::versions::Released {
        use crate::versions::Released;
        match self.0.iter().find(|(name, _)| *name == component.name) {
            Some((_, version)) => {
                Released::Found { version: (*version).into(), url: format!("test:{}", component.name) }
            }
            None => Released::Failed("not published".into()),
        }
    }
}

#[tokio::test]
async fn auto_update_reports_outdated_components_and_health_scores_from_its_check() {
    use crate::gallery::{Registration, Visibility};
    let runtime = runtime();
    let components = vec![
        obj("core", "Component", json!({"version": "1.0.0"})),
        obj("cli", "Component", json!({"version": "2.0.0"})),
        obj("lost", "Component", json!({"version": "0.1"})),
    ];
    let sid = session(&runtime, components).await;
    let registration = |name: &str| Registration {
        name: name.into(),
        session_id: sid.clone(),
        description: String::new(),
        tags: String::new(),
        visibility: Visibility::Public,
        team: None,
        source_graph_name: None,
        lifecycle: None,
    };
    runtime.register_graph(registration("eco")).await.unwrap();

    // Without a version source, nothing is checked and the status says why.
    let plain = Sweepers::start(runtime.clone(), &idle()).await.unwrap();
    let status = plain.run_once("graph_auto_update").await.unwrap().unwrap();
    assert_eq!((status.last_sessions_checked, status.last_result_count), (Some(0), Some(0)));
    assert!(status.last_error.unwrap().contains("no version source"));
    drop(plain);

    let source = Arc::new(Published(vec![("core", "1.2.0"), ("cli", "2.0.0")]));
    let sweepers = Sweepers::start_reading_versions(runtime.clone(), &idle(), Some(source)).await.unwrap();
    // Before any check, no component counts as current: 0.3 of the score is lost.
    assert_eq!(sweep(&sweepers, "graph_health").await, (1, 0));

    assert_eq!(sweep(&sweepers, "graph_auto_update").await, (1, 1));
    let outdated = tasks(&runtime, "graph_outdated").await;
    assert_eq!(outdated.len(), 1);
    assert_eq!(outdated[0].0, sid);
    assert_eq!(
        outdated[0].1,
        json!({"name": "eco", "session_id": sid, "reason": "version_outdated", "auto_apply_requested": false,
               "outdated_components": [{"component": "core", "graph_version": "1.0.0", "actual_version": "1.2.0"}]})
    );
    let record = runtime.recorded_versions("eco").await.unwrap().unwrap();
    let statuses: Vec<_> = record.components.iter().map(|c| c.status).collect();
    use crate::versions::VersionStatus::*;
    assert_eq!(statuses, [Outdated, UpToDate, FetchFailed]);
    // Checked again every sweep; the open task is not queued twice.
    assert_eq!(sweep(&sweepers, "graph_auto_update").await, (1, 1));
    assert_eq!(tasks(&runtime, "graph_outdated").await.len(), 1);

    // The new record brings the graph back to the health sweep, which scores 1 of 3 current.
    let content = runtime
        .read(&sid, |s, _| crate::health::GraphContent::measure(s, time::OffsetDateTime::now_utc(), Some(&record)))
        .await
        .unwrap();
    assert_eq!((content.components, content.components_current), (3, 1));
    assert_eq!(sweep(&sweepers, "graph_health").await, (1, 0));
    assert_eq!(sweep(&sweepers, "graph_health").await, (0, 0), "nothing changed since");
}
