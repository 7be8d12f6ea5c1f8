//! `cks-mcp import-reference`: after importing a database written by the reference server, our
//! `list_versions`, `serialize_knowledge` and `compare_versions` agree with what the reference
//! answered on the same file (recorded next to it in `expected.json` by
//! `tests/reference-data/make-fixtures.py`), and a second import writes nothing.
//!
//! The committed small fixture is always checked. `CKS_REFERENCE_FIXTURES` may name more fixture
//! directories (comma-separated), such as the large one `tests/reference-data/check-large`
//! builds with the reference installed.

use serde_json::{Map, Value, json};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cks_mcp::import_reference::import;
use cks_mcp::server::{CallOptions, CksServer};
use cks_runtime::store::sqlite::{SqliteOptions, SqliteStore};
use cks_runtime::{Runtime, RuntimeConfig};
use cks_tools::{LlmAccess, Registry};

fn small_fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/reference-data/small")
}

async fn call(server: &CksServer, tool: &str, arguments: Value) -> Value {
    let Value::Object(arguments) = arguments else { unreachable!() };
    let result = server.call_tool(tool, Some(arguments), CallOptions::default()).await.unwrap();
    let text = result.content[0].as_text().expect("a text block").text.as_str();
    let value: Value = serde_json::from_str(text).expect("the text is JSON");
    if let Some(structured) = result.structured_content {
        assert_eq!(structured, value, "structuredContent and the text agree");
    }
    value
}

/// Ids named by a list of wire operations, by what happened to them: (added, removed, changed).
/// The reference writes a change as a removal plus an addition; we write an update.
fn effects(operations: &Value) -> (BTreeSet<String>, BTreeSet<String>, BTreeSet<String>) {
    let (mut added, mut removed, mut changed) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    for op in operations.as_array().unwrap() {
        let id = |field: &str| op[field].as_str().unwrap().to_owned();
        match op["type"].as_str().unwrap() {
            "add_object" | "add_relation" | "record_inference" => {
                added.insert(op["identity"]["id"].as_str().unwrap().into())
            }
            "remove_object" => removed.insert(id("object_id")),
            "remove_relation" => removed.insert(id("relation_id")),
            "update_object" | "rename_object" => changed.insert(id("object_id")),
            other => panic!("unexpected operation {other}"),
        };
    }
    let both: BTreeSet<String> = added.intersection(&removed).cloned().collect();
    changed.extend(both.iter().cloned());
    added.retain(|id| !both.contains(id));
    removed.retain(|id| !both.contains(id));
    (added, removed, changed)
}

async fn check_agreement(dir: &Path) {
    let expected: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();
    let expected: &Map<String, Value> = expected["sessions"].as_object().unwrap();
    let work = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(work.path().join("cks_mcp.db"), &SqliteOptions::default()).unwrap());
    let runtime = Arc::new(Runtime::new(store, RuntimeConfig::default()));

    let summary = import(&dir.join("reference.db"), &runtime).await.unwrap();
    assert_eq!(summary.report.imported.len(), expected.len(), "every session is imported");
    assert!(summary.report.skipped.is_empty());

    let server = CksServer::new(runtime.clone(), Arc::new(Registry::standard()), LlmAccess::Absent);
    let mut compared = 0;
    for (session_id, answers) in expected {
        let ours = call(&server, "list_versions", json!({"session_id": session_id})).await;
        let theirs = &answers["list_versions"];
        if theirs["error"] == "session_not_found" {
            // Closed sessions are gone for the tools, as in the reference; the store keeps them.
            assert_eq!(ours["error"], "session_not_found", "{session_id}");
            assert!(runtime.info(session_id).await.unwrap().closed, "{session_id} is closed");
            assert!(!runtime.list_versions(session_id).await.unwrap().is_empty(), "{session_id} keeps its history");
            continue;
        }
        assert_eq!(ours["session_id"], theirs["session_id"]);
        let (ours_v, theirs_v) = (ours["versions"].as_array().unwrap(), theirs["versions"].as_array().unwrap());
        assert_eq!(ours_v.len(), theirs_v.len(), "{session_id}: same number of versions");
        for (o, t) in ours_v.iter().zip(theirs_v) {
            for key in ["version_id", "created_at", "transaction_id", "metadata"] {
                assert_eq!(o[key], t[key], "{session_id}: {key} of version {}", t["version_id"]);
            }
        }

        let serialized = call(&server, "serialize_knowledge", json!({"session_id": session_id})).await;
        let parsed: Value = serde_json::from_str(serialized["serialized"].as_str().unwrap()).unwrap();
        assert_eq!(
            json!({"version": parsed["version"], "objects": parsed["objects"]}),
            answers["serialize_knowledge"],
            "{session_id}: serialize_knowledge (objects in the same order)"
        );

        let current = runtime.read(session_id, |s, _| s.clone()).await.unwrap();
        for (version_id, theirs) in answers["compare_versions"].as_object().unwrap() {
            let ours =
                call(&server, "compare_versions", json!({"session_id": session_id, "target_version_id": version_id}))
                    .await;
            for key in ["session_id", "base_version_id", "current_version_id", "direction"] {
                assert_eq!(ours[key], theirs[key], "{session_id} {version_id}: {key}");
            }
            let (our_added, our_removed, our_changed) = effects(&ours["operations"]);
            let (their_added, their_removed, their_changed) = effects(&theirs["operations"]);
            assert_eq!(our_added, their_added, "{session_id} {version_id}: added");
            assert_eq!(our_removed, their_removed, "{session_id} {version_id}: removed");
            // The reference also rewrites unchanged relations that name a changed object.
            assert!(
                our_changed.is_subset(&their_changed),
                "{session_id} {version_id}: {our_changed:?} {their_changed:?}"
            );
            for id in their_changed.difference(&our_changed) {
                assert!(current.get(id).is_some_and(|o| o.is_relation()), "{session_id} {version_id}: {id} changed");
            }
            compared += 1;
        }
    }
    assert!(compared > 0, "some versions were compared");

    let again = import(&dir.join("reference.db"), &runtime).await.unwrap();
    assert!(again.report.imported.is_empty(), "a second import writes nothing");
    assert_eq!(again.report.skipped.len(), expected.len());
}

#[tokio::test]
async fn imported_reference_data_answers_like_the_reference() {
    check_agreement(&small_fixture()).await;
    for dir in std::env::var("CKS_REFERENCE_FIXTURES").unwrap_or_default().split(',').filter(|d| !d.is_empty()) {
        check_agreement(Path::new(dir)).await;
    }
}

#[test]
fn the_subcommand_refuses_a_damaged_file_and_its_own_database() {
    let dir = tempfile::tempdir().unwrap();
    let run = |source: &Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_cks-mcp"))
            .arg("import-reference")
            .arg(source)
            .env("CKS_MCP_DATA_DIR", dir.path())
            .env_remove("CKS_MCP_DB_PATH")
            .output()
            .unwrap()
    };
    let junk = dir.path().join("junk.db");
    std::fs::write(&junk, "not a database at all, but long enough to have a header of sorts").unwrap();
    let output = run(&junk);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("is not an SQLite database"), "{stderr}");

    let output = run(&small_fixture().join("reference.db"));
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let summary: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!((summary["imported_sessions"].as_u64(), summary["skipped_sessions"].as_u64()), (Some(5), Some(0)));
    let output = run(&small_fixture().join("reference.db"));
    let summary: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!((summary["imported_sessions"].as_u64(), summary["skipped_sessions"].as_u64()), (Some(0), Some(5)));
    assert!(String::from_utf8_lossy(&output.stderr).contains("nothing imported"));

    let output = run(&dir.path().join("cks_mcp.db"));
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("own database"));
}
