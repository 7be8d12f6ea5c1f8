//! Reading the reference server's database (the committed fixture made by
//! `tests/reference-data/make-fixtures.py`) and importing it: histories kept, a second import is
//! a no-op, and damaged files are refused with an error naming what and where, importing nothing.

use cks_runtime::store::prelude::*;
use rusqlite::Connection;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cks_runtime::reference_db::{ReferenceError, read_reference_db};
use cks_runtime::store::Store;
use cks_runtime::store::sqlite::{SqliteOptions, SqliteStore};
use cks_runtime::{Runtime, RuntimeConfig};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/reference-data/small/reference.db")
}

fn read(path: &Path) -> Result<cks_runtime::reference_db::ReferenceData, ReferenceError> {
    read_reference_db(path, &mut |_, _| {})
}

/// The fixture's raw rows, read here with plain SQL to check the reader against.
fn raw_rows(path: &Path) -> (Vec<(String, Value)>, Vec<Value>) {
    let conn = Connection::open(path).unwrap();
    let sessions = conn
        .prepare("SELECT session_id, data FROM sessions")
        .unwrap()
        .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
        .unwrap()
        .map(|r| r.unwrap())
        .map(|(id, data)| (id, serde_json::from_str(&data).unwrap()))
        .collect();
    let versions = conn
        .prepare("SELECT data FROM versions")
        .unwrap()
        .query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .map(|r| serde_json::from_str(&r.unwrap()).unwrap())
        .collect();
    (sessions, versions)
}

fn runtime_on(dir: &Path) -> (Runtime, Arc<SqliteStore>) {
    let store = Arc::new(SqliteStore::open(dir.join("ours.db"), &SqliteOptions::default()).unwrap());
    (Runtime::new(store.clone(), RuntimeConfig::default()), store)
}

#[test]
fn every_session_and_version_is_read_in_the_reference_order() {
    let data = read(&fixture()).unwrap();
    let (sessions, versions) = raw_rows(&fixture());
    assert_eq!(data.sessions.len(), sessions.len());
    assert_eq!(data.orphan_versions, 0);
    for (id, row) in &sessions {
        let session = data.sessions.iter().find(|s| &s.session_id == id).expect("every session is read");
        // The reference's own record of the history order.
        let history: Vec<&str> =
            row["version_history_ids"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
        let ours: Vec<&str> = session.versions.iter().map(|v| v.version_id.as_str()).collect();
        assert_eq!(ours, history, "session {id}");
        assert_eq!(session.closed, row["closed"].as_bool().unwrap());
        assert_eq!(session.parent_session_id.as_deref(), row["parent_session_id"].as_str());
        assert_eq!(session.parent_version_id.as_deref(), row["parent_version_id"].as_str());
        assert_eq!(Value::Object(session.metadata.clone()), row["metadata"]);
        for version in &session.versions {
            let raw = versions.iter().find(|v| v["version_id"] == version.version_id.as_str()).unwrap();
            assert_eq!(version.created_at, raw["created_at"].as_str().unwrap());
            assert_eq!(version.transaction_id, raw["transaction_id"].as_str().unwrap());
            assert_eq!(Value::Object(version.metadata.clone()), raw["metadata"]);
            // Snapshot versions are taken as written; patched ones were rebuilt.
            if let Some(text) = raw["knowledge_structure"].as_str() {
                let written = cks_core::json::parse_str(text).unwrap();
                assert!(version.state.same_content(&written), "version {}", version.version_id);
            }
        }
        let current = cks_core::json::parse_str(row["knowledge_structure"].as_str().unwrap()).unwrap();
        let head = session.versions.last().map_or(&session.initial_state, |v| &v.state);
        assert!(head.ids().eq(current.ids()) && head.same_content(&current), "session {id}: head is the current state");
    }
    let kinds: Vec<bool> = versions.iter().map(|v| v["knowledge_structure"].is_string()).collect();
    assert!(kinds.contains(&true) && kinds.contains(&false), "the fixture has snapshots and patches");
}

#[tokio::test]
async fn import_keeps_histories_and_a_second_run_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (runtime, store) = runtime_on(dir.path());
    let data = read(&fixture()).unwrap();
    let expected: Vec<(String, Vec<String>, bool)> = data
        .sessions
        .iter()
        .map(|s| (s.session_id.clone(), s.versions.iter().map(|v| v.version_id.clone()).collect(), s.closed))
        .collect();
    let states: Vec<_> = data.sessions.iter().flat_map(|s| s.versions.iter().map(|v| v.state.clone())).collect();
    let report = runtime.import_sessions(data.sessions).await.unwrap();
    assert_eq!(report.imported.len(), expected.len());
    assert_eq!(report.versions as usize, states.len());

    // A fresh runtime on the same file sees everything, each version rebuilt from our encoding.
    let reopened = Runtime::new(store.clone() as Arc<dyn Store>, RuntimeConfig::default());
    let mut states = states.into_iter();
    for (id, version_ids, closed) in &expected {
        let info = reopened.info(id).await.unwrap();
        assert_eq!(info.closed, *closed, "{id}");
        let listed: Vec<String> = reopened.list_versions(id).await.unwrap().into_iter().map(|v| v.version_id).collect();
        assert_eq!(&listed, version_ids);
        for version_id in version_ids {
            let state = reopened.version_state(id, version_id).await.unwrap();
            let expected = states.next().unwrap();
            assert!(state.ids().eq(expected.ids()) && state.same_content(&expected), "{id} {version_id}");
        }
    }
    let closed = expected.iter().find(|(_, _, closed)| *closed).expect("the fixture has a closed session");
    assert_eq!(
        reopened.commit(&closed.0, Default::default()).await.unwrap_err().code(),
        "session_closed",
        "closed sessions stay closed"
    );

    let again = runtime.import_sessions(read(&fixture()).unwrap().sessions).await.unwrap();
    assert!(again.imported.is_empty());
    assert_eq!(again.skipped.len(), expected.len());
    assert_eq!(again.versions, 0);
}

/// A copy of the fixture with one SQL statement applied.
fn damaged_copy(dir: &Path, sql: &str) -> PathBuf {
    let path = dir.join("damaged.db");
    std::fs::copy(fixture(), &path).unwrap();
    Connection::open(&path).unwrap().execute_batch(sql).unwrap();
    path
}

#[tokio::test]
async fn damaged_files_are_refused_with_what_and_where() {
    let dir = tempfile::tempdir().unwrap();

    let text = dir.path().join("notes.db");
    std::fs::write(&text, "this is not a database, just some text that is long enough to be read").unwrap();
    assert!(matches!(read(&text), Err(ReferenceError::NotSqlite { .. })), "{:?}", read(&text).err());

    assert!(matches!(read(&dir.path().join("missing.db")), Err(ReferenceError::Open { .. })));

    let ours = dir.path().join("other.db");
    Connection::open(&ours).unwrap().execute_batch("CREATE TABLE sessions (session_id TEXT, state TEXT)").unwrap();
    let err = read(&ours).unwrap_err().to_string();
    assert!(err.contains("not a database of the reference server") && err.contains("'data'"), "{err}");

    // A patch that removes an object the previous version does not have.
    let broken = damaged_copy(
        dir.path(),
        "UPDATE versions SET data = json_set(data, '$.patch', json('[{\"type\": \"remove_object\", \"object_id\": \"nowhere\"}]'))
         WHERE version_id = (SELECT version_id FROM versions WHERE json_extract(data, '$.patch') IS NOT NULL LIMIT 1)",
    );
    let (session_id, version_id): (String, String) = Connection::open(&broken)
        .unwrap()
        .query_row("SELECT session_id, version_id FROM versions WHERE data LIKE '%nowhere%'", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    match read(&broken).unwrap_err() {
        ReferenceError::Damaged { session_id: s, version_id: Some(v), detail, .. } => {
            assert_eq!((s, v), (session_id, version_id));
            assert!(detail.contains("patch entry #0") && detail.contains("'nowhere' does not exist"), "{detail}");
        }
        other => panic!("expected damage, got {other}"),
    }

    let unparsable = damaged_copy(dir.path(), "UPDATE sessions SET data = '{\"knowledge_structure\": 1}'");
    assert!(matches!(read(&unparsable), Err(ReferenceError::Damaged { version_id: None, .. })));
}

#[tokio::test]
async fn an_import_that_fails_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (runtime, store) = runtime_on(dir.path());
    let data = read(&fixture()).unwrap();
    // Another session already holds a version id of the last session to import: the store
    // refuses the whole import, including the sessions before that one.
    let mut holder = data.sessions.last().unwrap().clone();
    holder.session_id = "holder".into();
    holder.versions.truncate(1);
    runtime.import_sessions(vec![holder]).await.unwrap();
    let err = runtime.import_sessions(data.sessions).await.unwrap_err();
    assert!(err.to_string().contains("already exists"), "{err}");
    let stored: Vec<String> = store.list_sessions().await.unwrap().into_iter().map(|s| s.session_id).collect();
    assert_eq!(stored, ["holder"], "no session of the failed import was written");
}

#[test]
fn our_store_refuses_to_open_a_reference_database() {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("cks_mcp.db");
    std::fs::copy(fixture(), &copy).unwrap();
    let err = SqliteStore::open(&copy, &SqliteOptions::default()).unwrap_err().to_string();
    assert!(err.contains("import-reference"), "{err}");
    let (sessions, _) = raw_rows(&copy);
    assert_eq!(sessions.len(), 5, "the file is left as it was");
}

#[test]
fn archived_sessions_come_over_closed_and_versions_without_a_session_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let open_id = read(&fixture()).unwrap().sessions.into_iter().find(|s| !s.closed && !s.versions.is_empty()).unwrap();
    let copy = damaged_copy(
        dir.path(),
        &format!(
            "INSERT INTO archive_sessions (session_id, data, latest_version_id, modified_at)
               SELECT session_id, data, latest_version_id, modified_at FROM sessions WHERE session_id = '{id}';
             DELETE FROM sessions WHERE session_id = '{id}';
             INSERT INTO versions (version_id, session_id, data)
               SELECT 'lost-' || version_id, 'gone', json_set(data, '$.session_id', 'gone', '$.version_id', 'lost-' || version_id)
               FROM versions WHERE session_id = '{id}' LIMIT 2;",
            id = open_id.session_id
        ),
    );
    let data = read(&copy).unwrap();
    let archived = data.sessions.iter().find(|s| s.session_id == open_id.session_id).expect("archived session read");
    assert!(archived.closed, "archived sessions come over closed");
    let ids = |s: &cks_runtime::SessionImport| s.versions.iter().map(|v| v.version_id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(archived), ids(&open_id), "with their whole history");
    assert_eq!(data.orphan_versions, 2);
}
