//! A seeded read of a session not loaded yet is answered from its stored snapshot's locator and
//! the deltas after it, as the loaded session would answer it; without a locator it loads.

use serde_json::{Value, json};
use std::sync::Arc;

use cks_core::neighbourhood::Neighbourhoods;
use cks_core::ops::parse_operations;
use cks_core::sample::random_graph;
use cks_core::{SubgraphQuery, SubgraphResult, query_subgraph};
use cks_runtime::import::{SessionImport, VersionImport};
use cks_runtime::store::sqlite::{SqliteOptions, SqliteStore};
use cks_runtime::{CommitRequest, NewSession, Runtime, RuntimeConfig, RuntimeError};

fn runtime(path: &std::path::Path) -> Arc<Runtime> {
    let store = SqliteStore::open(path, &SqliteOptions::default()).expect("open database");
    Arc::new(Runtime::new(Arc::new(store), RuntimeConfig { snapshot_interval: 2, ..Default::default() }))
}

async fn commit(rt: &Runtime, id: &str, operations: Value) {
    let request = CommitRequest::operations(parse_operations(&operations).unwrap());
    rt.commit(id, request).await.unwrap();
}

fn query(seed: &str) -> SubgraphQuery {
    SubgraphQuery { seed_ids: vec![seed.into()], depth: 2, max_objects: Some(8), ..Default::default() }
}

/// The query's answer, and whether the graph it read holds `far` (a loaded session holds every
/// object; a neighbourhood read from the store only what the query reads).
async fn ask(rt: &Arc<Runtime>, id: &str, seed: &str, far: &str) -> (SubgraphResult, bool) {
    let (query, far) = (query(seed), far.to_owned());
    rt.read_neighbourhood(id, query.seed_ids.clone(), 2, move |graph: &dyn Neighbourhoods| {
        (query_subgraph(graph, &query), graph.get(&far).is_some())
    })
    .await
    .unwrap()
}

async fn loaded_answer(rt: &Runtime, id: &str, seed: &str) -> SubgraphResult {
    let query = query(seed);
    rt.read(id, move |structure, _| query_subgraph(structure, &query)).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_neighbourhood_is_read_from_the_store_before_the_session_loads() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cks.db");
    let id = runtime(&path).create_session(random_graph(300, 400, 5), NewSession::default()).await.unwrap().session_id;
    // Deltas after the snapshot: a new node linked in, a node changed, one removed with its
    // relations, one removed and added again (now last in the order).
    let rt = runtime(&path);
    commit(
        &rt,
        &id,
        json!([
            {"type": "add_object", "identity": {"id": "new", "type": "Claim", "name": "new"}, "structure": {}},
            {"type": "add_relation", "identity": {"id": "r-new", "type": "Relation", "name": "r"},
             "participants": ["n0", "new"], "relation_type": "supports", "structure": {}},
            {"type": "update_object", "object_id": "n1", "structure_patch": {"note": "changed"}},
        ]),
    )
    .await;
    let n2 = rt.read(&id, |s, _| (**s.get("n2").unwrap()).clone()).await.unwrap();
    commit(
        &rt,
        &id,
        json!([{"type": "remove_object", "object_id": "n3"}, {"type": "remove_object", "object_id": "n2"}]),
    )
    .await;
    let identity = json!({"id": "n2", "type": n2.identity.r#type.as_str(), "name": n2.identity.name.as_str()});
    let structure: serde_json::Map<String, Value> =
        n2.structure.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
    commit(&rt, &id, json!([{"type": "add_object", "identity": identity, "structure": structure}])).await;
    drop(rt);

    for seed in ["n0", "n1", "n2", "new", "n3", "n17"] {
        let rt = runtime(&path);
        let (answer, holds_far) = ask(&rt, &id, seed, "n299").await;
        assert!(!holds_far, "{seed}: read from the store, not from a loaded session");
        assert_eq!(answer, loaded_answer(&runtime(&path), &id, seed).await, "{seed}");
    }
    // Once loaded, the loaded structure answers.
    let rt = runtime(&path);
    loaded_answer(&rt, &id, "n0").await;
    assert!(ask(&rt, &id, "n0", "n299").await.1);
    // An unknown session is not found.
    let missing = rt.read_neighbourhood("nope", vec!["n0".into()], 1, |_| ()).await;
    assert!(matches!(missing, Err(RuntimeError::SessionNotFound(_))), "{missing:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_a_commit_writes_is_located_too_and_one_without_a_locator_is_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cks.db");
    let rt = runtime(&path);
    let id = rt.create_session(random_graph(40, 40, 9), NewSession::default()).await.unwrap().session_id;
    // Enough changes for snapshots (every second version, once an eighth of the objects changed).
    for round in 0..4 {
        let operations: Vec<Value> = (0..12)
            .map(
                |i| json!({"type": "update_object", "object_id": format!("n{i}"), "structure_patch": {"round": round}}),
            )
            .collect();
        commit(&rt, &id, Value::Array(operations)).await;
    }
    drop(rt);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let latest: u64 =
        conn.query_row("SELECT max(seq) FROM snapshots WHERE session_id = ?1", [&id], |r| r.get(0)).unwrap();
    let located: bool = conn
        .query_row("SELECT count(*) FROM snapshot_locators WHERE session_id = ?1 AND seq = ?2", (&id, latest), |r| {
            r.get::<_, i64>(0).map(|n| n == 1)
        })
        .unwrap();
    assert!(latest > 0 && located, "latest snapshot #{latest} located: {located}");
    let rt = runtime(&path);
    let (answer, holds_far) = ask(&rt, &id, "n5", "n39").await;
    assert!(!holds_far);
    assert_eq!(answer, loaded_answer(&runtime(&path), &id, "n5").await);

    // Snapshots written without locators (by an older server, an import) are read by loading.
    conn.execute("DELETE FROM snapshot_locators", []).unwrap();
    let rt = runtime(&path);
    let (fallback, holds_far) = ask(&rt, &id, "n5", "n39").await;
    assert!(holds_far);
    assert_eq!(fallback, answer);
    // So is one whose locator is damaged.
    conn.execute("INSERT INTO snapshot_locators SELECT session_id, seq, x'00' FROM snapshots", []).unwrap();
    let rt = runtime(&path);
    assert_eq!(ask(&rt, &id, "n5", "n39").await, (answer, true));
}

#[tokio::test]
async fn whether_a_session_is_open_is_answered_without_loading_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cks.db");
    let rt = runtime(&path);
    let open = rt.create_session(random_graph(10, 5, 1), NewSession::default()).await.unwrap().session_id;
    let closed = rt.create_session(random_graph(10, 5, 2), NewSession::default()).await.unwrap().session_id;
    rt.close(&closed).await.unwrap();
    let rt = runtime(&path);
    rt.check_open(&open).await.unwrap();
    assert!(matches!(rt.check_open(&closed).await, Err(RuntimeError::SessionClosed(_))));
    assert!(matches!(rt.check_open("nope").await, Err(RuntimeError::SessionNotFound(_))));
    assert_eq!(rt.loaded_sessions(), 0);
    // A loaded session answers from memory, as it is now.
    rt.read(&closed, |_, _| ()).await.unwrap();
    assert!(matches!(rt.check_open(&closed).await, Err(RuntimeError::SessionClosed(_))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_imported_or_copied_are_located_like_those_created_here() {
    let dir = tempfile::tempdir().unwrap();
    // Large enough to be located (`LOCATED_IMPORTS_FROM_OBJECTS`).
    let (first, head) = (random_graph(3_000, 2_000, 3), random_graph(3_000, 2_100, 3));
    let version = |n: usize, state: &cks_core::KnowledgeStructure| VersionImport {
        version_id: format!("v{n}"),
        transaction_id: format!("t{n}"),
        created_at: "2026-01-01T00:00:00+00:00".into(),
        metadata: serde_json::Map::new(),
        state: state.clone(),
    };
    let import = SessionImport {
        session_id: "imported".into(),
        created_at: "2026-01-01T00:00:00+00:00".into(),
        parent_session_id: None,
        parent_version_id: None,
        closed: false,
        metadata: serde_json::Map::new(),
        initial_state: first.clone(),
        versions: vec![version(1, &first), version(2, &head)],
    };
    let imported_path = dir.path().join("imported.db");
    let report = runtime(&imported_path).import_sessions(vec![import]).await.unwrap();
    assert_eq!(report.imported, ["imported"]);

    // Copied into another database (what a backup's restore and a storage migration write).
    let copied_path = dir.path().join("copied.db");
    let from = SqliteStore::open(&imported_path, &SqliteOptions::default()).unwrap();
    let to = SqliteStore::open(&copied_path, &SqliteOptions::default()).unwrap();
    let counts = cks_runtime::backup::copy(&from, &to, &mut |_, _| {}).await.unwrap();
    assert_eq!(counts.sessions, 1);
    drop((from, to));

    for path in [&imported_path, &copied_path] {
        for seed in ["n0", "n7", "n2999"] {
            let (answer, holds_far) = ask(&runtime(path), "imported", seed, "r2099").await;
            assert!(!holds_far, "{}, {seed}: read from the store", path.display());
            assert_eq!(answer, loaded_answer(&runtime(path), "imported", seed).await, "{seed}");
        }
    }
}
