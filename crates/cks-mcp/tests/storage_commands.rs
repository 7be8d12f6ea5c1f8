//! The storage commands for operators: `cks-mcp migrate-storage` from SQLite into PostgreSQL and
//! back keeps every session, version id, timestamp, metadata and hash; `export-storage` and
//! `import-storage` restore a backup into a new database; a refused target changes nothing.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;

use serde_json::{Value, json};

use cks_runtime::store::sqlite::{SqliteOptions, SqliteStore};
use cks_runtime::{NewSession, Runtime, RuntimeConfig};
use cks_testkit::postgres::TestDatabase;
use cks_tools::{Registry, ToolContext};

/// Runs `cks-mcp ARGS` on the store `db` (a file or a URL).
fn cks_mcp(db: &str, home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cks-mcp"))
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("CKS_MCP_DATA_DIR", home)
        .env("CKS_MCP_DB_PATH", db)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// The command's one-line JSON result; fails the test when the command failed.
fn succeeded(output: Output) -> Value {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the command failed: {stderr}");
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {stderr}"))
}

/// A SQLite database with a history worth keeping: two sessions with several versions each
/// (metadata on every one), a branch, a closed session and a registered graph.
async fn populate(path: &Path) -> usize {
    let store = Arc::new(SqliteStore::open(path, &SqliteOptions::default()).unwrap());
    let ctx = ToolContext::new(Arc::new(Runtime::new(store, RuntimeConfig::default())));
    let registry = Registry::standard();
    let call = |name: &'static str, args: Value| {
        let (registry, ctx) = (&registry, &ctx);
        async move {
            let result = registry.call(name, args, ctx).await.unwrap();
            assert!(result.get("error").is_none(), "{name}: {result}");
            result
        }
    };
    let mut sessions = Vec::new();
    for n in 0..2 {
        let structure = cks_core::json::parse_value(json!({"version": "1.0", "objects": [
            {"identity": {"id": format!("root{n}"), "type": "Note", "name": "Root"}, "structure": {"text": "é ✓"}}]}))
        .unwrap();
        let mut metadata = serde_json::Map::new();
        metadata.insert("owner".into(), json!(format!("team {n}")));
        let options = NewSession { metadata, first_version: Some(Default::default()) };
        sessions.push(ctx.runtime.create_session(structure, options).await.unwrap().session_id);
    }
    for step in 0..3 {
        for id in &sessions {
            call("evolve_knowledge", json!({"session_id": id, "operations": [
                {"type": "add_object", "identity": {"id": format!("o{step}"), "type": "Note", "name": format!("Step {step}")},
                 "structure": {"n": step}}]}))
            .await;
        }
    }
    let branch = call("create_branch", json!({"session_id": sessions[0]})).await;
    let branch = branch["session_id"].as_str().unwrap().to_owned();
    call(
        "evolve_knowledge",
        json!({"session_id": branch, "operations": [
        {"type": "remove_object", "object_id": "o1"}]}),
    )
    .await;
    call("register_graph", json!({"name": "kept", "session_id": sessions[1], "description": "d", "tags": "a,b"})).await;
    call("close_session", json!({"session_id": sessions[1]})).await;
    sessions.len() + 1
}

/// Everything a backup holds except when it was made.
fn contents(backup: &Path) -> Value {
    let mut dump: Value = serde_json::from_slice(&std::fs::read(backup).unwrap()).unwrap();
    dump.as_object_mut().unwrap().remove("exported_at");
    for list in ["sessions", "graphs"] {
        let key = if list == "sessions" { "session_id" } else { "name" };
        dump[list].as_array_mut().unwrap().sort_by(|a, b| a[key].as_str().cmp(&b[key].as_str()));
    }
    dump
}

fn export(db: &str, home: &Path, file: &Path) -> Value {
    let result = succeeded(cks_mcp(db, home, &["export-storage", file.to_str().unwrap()]));
    assert_eq!(result["file_path"], json!(file.to_str().unwrap()), "{result}");
    contents(file)
}

#[tokio::test(flavor = "multi_thread")]
async fn sqlite_to_postgres_to_sqlite_keeps_everything() {
    let work = tempfile::tempdir().unwrap();
    let home = work.path();
    let first = home.join("first.db");
    let sessions = populate(&first).await;
    let database = TestDatabase::create();
    let url = database.url();

    let into_pg = cks_mcp(first.to_str().unwrap(), home, &["migrate-storage", url]);
    let stderr = String::from_utf8_lossy(&into_pg.stderr).into_owned();
    let into_pg = succeeded(into_pg);
    assert_eq!(into_pg["migrated"]["sessions"], json!(sessions), "{into_pg}");
    assert_eq!(into_pg["migrated"]["versions"], json!(2 * 4 + 1), "{into_pg}");
    assert_eq!(into_pg["migrated"]["graphs"], json!(1), "{into_pg}");
    assert!(stderr.contains(&format!("copied {sessions}/{sessions} sessions")), "no progress on stderr: {stderr}");
    let password =
        url.split_once("://").and_then(|(_, rest)| rest.split_once('@')).and_then(|(user, _)| user.split_once(':'));
    let password = password.expect("the test database's URL has a password").1;
    assert!(!into_pg.to_string().contains(password), "the password was echoed: {into_pg}");

    let second = home.join("second.db");
    succeeded(cks_mcp(url, home, &["migrate-storage", second.to_str().unwrap()]));

    let original = export(first.to_str().unwrap(), home, &home.join("first.json"));
    assert_eq!(original["sessions"].as_array().unwrap().len(), sessions);
    assert_eq!(export(url, home, &home.join("pg.json")), original, "PostgreSQL differs from the source");
    assert_eq!(export(second.to_str().unwrap(), home, &home.join("second.json")), original, "the round trip lost data");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_backup_restores_into_a_new_database_and_refused_targets_change_nothing() {
    let work = tempfile::tempdir().unwrap();
    let home = work.path();
    let source = home.join("source.db");
    let sessions = populate(&source).await;
    let backup = home.join("backup.json");
    let original = export(source.to_str().unwrap(), home, &backup);

    let restored = home.join("restored.db");
    let result = succeeded(cks_mcp(restored.to_str().unwrap(), home, &["import-storage", backup.to_str().unwrap()]));
    assert_eq!(result["imported"]["sessions"], json!(sessions), "{result}");
    assert_eq!(export(restored.to_str().unwrap(), home, &home.join("restored.json")), original);
    let again = succeeded(cks_mcp(restored.to_str().unwrap(), home, &["import-storage", backup.to_str().unwrap()]));
    assert_eq!(again["imported"]["sessions"], json!(0), "a second merge imported again: {again}");

    // A target that exists is refused with the tool's code, and left as it was.
    let before = std::fs::read(&restored).unwrap();
    let refused = cks_mcp(source.to_str().unwrap(), home, &["migrate-storage", restored.to_str().unwrap()]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("target_exists"), "{stderr}");
    assert_eq!(std::fs::read(&restored).unwrap(), before);

    // A file that is not a backup: refused, nothing imported.
    std::fs::write(home.join("junk.json"), "{}").unwrap();
    let refused = cks_mcp(
        restored.to_str().unwrap(),
        home,
        &["import-storage", "--mode", "clear", home.join("junk.json").to_str().unwrap()],
    );
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("invalid_format"));
    assert_eq!(export(restored.to_str().unwrap(), home, &home.join("after.json")), original);
}
