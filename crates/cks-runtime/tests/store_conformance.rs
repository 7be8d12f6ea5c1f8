//! Runs the store conformance suite against every store in this crate.

use cks_runtime::store::prelude::*;
use std::sync::Arc;

use cks_runtime::conformance::{Open, run_all};
use cks_runtime::store::Store;
use cks_runtime::store::memory::MemoryStore;
use cks_runtime::store::sqlite::{SqliteOptions, SqliteStore};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_conforms() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let open: Open = Arc::new(move || store.clone());
    run_all(open).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_store_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested").join("cks.db");
    let open: Open = Arc::new(move || Arc::new(SqliteStore::open(&path, &SqliteOptions::default()).unwrap()));
    run_all(open).await;
}

#[tokio::test]
async fn sqlite_schema_is_versioned_and_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cks.db");
    let store = SqliteStore::open(&path, &SqliteOptions::default()).unwrap();
    assert_eq!(store.schema_version().unwrap() as usize, cks_runtime::store::sqlite::MIGRATIONS.len());
    drop(store);
    let store = SqliteStore::open(&path, &SqliteOptions::default()).unwrap();
    assert_eq!(store.integrity_check().unwrap(), "ok");
    // A database from a newer server is refused instead of being misread.
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.pragma_update(None, "user_version", 99).unwrap();
    drop(conn);
    let err = SqliteStore::open(&path, &SqliteOptions::default()).unwrap_err().to_string();
    assert!(err.contains("newer than this server supports"), "{err}");
}

/// States and deltas moved out of WITHOUT ROWID tables keep every row.
#[tokio::test]
async fn sqlite_keeps_every_state_and_delta_when_their_tables_are_rebuilt() {
    use cks_runtime::store::sqlite::MIGRATIONS;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cks.db");
    // The migration that rebuilt the two tables.
    let rebuild = 1;
    let mut conn = rusqlite::Connection::open(&path).unwrap();
    for sql in &MIGRATIONS[..rebuild] {
        conn.execute_batch(sql).unwrap();
    }
    conn.pragma_update(None, "user_version", rebuild as u32).unwrap();
    let tx = conn.transaction().unwrap();
    tx.execute_batch(
        "INSERT INTO sessions VALUES ('s', 't', NULL, NULL, 0, '{}', 10, 1, 'v1', 'h1', 2);
         INSERT INTO versions VALUES ('s', 1, 'v1', 'x1', 't1', 'h1', 2, '{}', '[]', 0);
         INSERT INTO versions VALUES ('s', 0, 'v0', 'x0', 't0', 'h0', 1, '{}', NULL, 1);
         INSERT INTO snapshots VALUES ('s', 0, '{\"objects\": []}');",
    )
    .unwrap();
    tx.commit().unwrap();
    drop(conn);

    let store = SqliteStore::open(&path, &SqliteOptions::default()).unwrap();
    assert_eq!(store.schema_version().unwrap() as usize, MIGRATIONS.len());
    assert_eq!(store.integrity_check().unwrap(), "ok");
    let chain = store.load_chain("s", 1).await.unwrap();
    assert_eq!((chain.snapshot_seq, chain.snapshot.as_str()), (0, "{\"objects\": []}"));
    let versions: Vec<_> = chain.versions.iter().map(|v| (v.row.seq, v.row.version_id.as_str())).collect();
    assert_eq!(versions, [(1, "v1")]);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let without_rowid: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_schema WHERE name IN ('versions', 'snapshots') AND sql LIKE '%WITHOUT ROWID%'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(without_rowid, 0);
    let duplicate = conn.execute("INSERT INTO snapshots VALUES ('s', 0, 'again')", []);
    assert!(duplicate.is_err(), "(session, seq) is still unique");
}

#[tokio::test]
async fn replica_ids_are_kept_for_the_life_of_the_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cks.db");
    let store = SqliteStore::open(&path, &SqliteOptions::default()).unwrap();
    let first = store.replica_id().await.unwrap().expect("SQLite keeps a replica id");
    assert_eq!(store.replica_id().await.unwrap().as_ref(), Some(&first));
    drop(store);
    let reopened = SqliteStore::open(&path, &SqliteOptions::default()).unwrap();
    assert_eq!(reopened.replica_id().await.unwrap(), Some(first.clone()), "stored once, read back after a restart");
    let other = SqliteStore::open(dir.path().join("other.db"), &SqliteOptions::default()).unwrap();
    assert_ne!(other.replica_id().await.unwrap(), Some(first), "another database is another replica");

    let memory = MemoryStore::new();
    let id = memory.replica_id().await.unwrap().expect("a memory store has one too");
    assert_eq!(memory.replica_id().await.unwrap(), Some(id.clone()));
    assert_ne!(MemoryStore::new().replica_id().await.unwrap(), Some(id));
}

/// A state of several megabytes spans thousands of overflow pages and is parsed on two threads;
/// after a restart it is parsed from the reading connection's own buffer, and the session it
/// rebuilds is the one stored, while the writing connection serves another session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_loads_a_large_state_from_its_own_buffer() {
    use cks_runtime::{NewSession, Runtime, RuntimeConfig};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cks.db");
    let open = || -> Arc<dyn Store> { Arc::new(SqliteStore::open(&path, &SqliteOptions::default()).unwrap()) };
    let mut graph = cks_core::sample::random_graph(6_000, 6_000, 7);
    let note = cks_core::KnowledgeObject::new(
        cks_core::Identity::new("ünïcode", "Note", "«quoted» \"text\"\n"),
        cks_core::Structure::from_iter([("body", serde_json::Value::from("é".repeat(5_000)))]),
    );
    graph.put(note, &mut cks_core::ChangeSet::default()).unwrap();
    let expected = graph.root_hash();
    let first = Runtime::new(open(), RuntimeConfig::default());
    let stored = first.create_session(graph, NewSession::default()).await.unwrap().session_id;
    let other = first.create_session(cks_core::KnowledgeStructure::new(), NewSession::default()).await.unwrap();

    let restarted = Runtime::new(open(), RuntimeConfig::default());
    let (loaded, committed) = tokio::join!(
        restarted.read(&stored, |structure, _| (structure.root_hash(), structure.len())),
        restarted.info(&other.session_id),
    );
    assert_eq!(loaded.unwrap(), (expected, 12_001));
    assert!(committed.is_ok());
    let note = restarted.read(&stored, |s, _| s.get("ünïcode").map(|o| o.identity.name.to_string())).await.unwrap();
    assert_eq!(note.as_deref(), Some("«quoted» \"text\"\n"));
}
