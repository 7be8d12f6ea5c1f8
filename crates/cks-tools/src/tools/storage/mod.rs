//! Storage administration: a whole-store backup to a file, its restore, and a copy of everything
//! into a new SQLite file or PostgreSQL database. Server management: never offered to `ai_chat`.

mod export_storage;
mod import_storage;
mod migrate_storage;

use crate::ErrorCode;

use schemars::JsonSchema;
use serde::Serialize;

use cks_runtime::backup::{BackupError, Counts};

use crate::error::ToolError;
use crate::tool::{Listed, listed};

pub(crate) fn tools() -> Vec<Listed> {
    vec![
        listed(export_storage::ExportStorage),
        listed(import_storage::ImportStorage),
        listed(migrate_storage::MigrateStorage),
    ]
}

/// What was moved, in the reference's shape (`outbox_tasks`: the queued tasks), plus the stored
/// chats, which the reference does not have.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Moved {
    sessions: u64,
    versions: u64,
    graphs: u64,
    chats: u64,
    embeddings: u64,
    outbox_tasks: u64,
}

impl From<Counts> for Moved {
    fn from(c: Counts) -> Self {
        Moved {
            sessions: c.sessions,
            versions: c.versions,
            graphs: c.graphs,
            chats: c.chats,
            embeddings: c.embeddings,
            outbox_tasks: c.tasks,
        }
    }
}

/// Reports each session copied to the caller's progress sink, when there is one.
pub(crate) fn session_progress(
    ctx: &crate::ToolContext,
    verb: &'static str,
) -> impl FnMut(usize, usize) + Send + use<> {
    let sink = ctx.progress.clone();
    move |done, total| {
        if let Some(sink) = &sink {
            sink.report(done as f64, Some(total as f64), Some(format!("{verb} {done}/{total} sessions")));
        }
    }
}

pub(crate) fn backup_error(e: BackupError) -> ToolError {
    match e {
        BackupError::Store(e) => cks_runtime::RuntimeError::from(e).into(),
        BackupError::Write(e) => ToolError::new(ErrorCode::WriteFailed, format!("Could not write the backup: {e}")),
        BackupError::Format(detail) => {
            ToolError::new(ErrorCode::InvalidFormat, format!("Not a backup of this server: {detail}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::testing::{call, context, obj, session, structure};

    async fn populated() -> (crate::ToolContext, String) {
        let ctx = context();
        let id = session(&ctx, structure(vec![obj("a", "Note", "A", json!({}))])).await;
        let ops = json!({"session_id": id, "operations": [
            {"type": "add_object", "identity": {"id": "b", "type": "Note", "name": "B"}}]});
        assert!(call(&ctx, "evolve_knowledge", ops).await.get("error").is_none());
        let registered = call(&ctx, "register_graph", json!({"name": "g", "session_id": id, "description": "d"})).await;
        assert!(registered.get("error").is_none(), "{registered}");
        (ctx, id)
    }

    fn summary(value: &Value) -> (u64, u64, u64) {
        (value["sessions"].as_u64().unwrap(), value["versions"].as_u64().unwrap(), value["graphs"].as_u64().unwrap())
    }

    #[tokio::test]
    async fn a_backup_restores_into_an_empty_server_and_merges_as_nothing_new() {
        let (ctx, id) = populated().await;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("backup.json");
        let exported = call(&ctx, "export_storage", json!({"output_path": file.to_str()})).await;
        assert_eq!(exported["file_path"], json!(file.to_str()), "{exported}");
        assert_eq!(summary(&exported["summary"]), (1, 2, 1), "{exported}");
        assert!(!dir.path().join("backup.json.partial").exists(), "the partial file is left behind");

        // Into the same server: everything is already there.
        let merged = call(&ctx, "import_storage", json!({"file_path": file.to_str()})).await;
        assert_eq!(summary(&merged["imported"]), (0, 0, 0), "{merged}");
        assert_eq!(merged["skipped"], 2);
        assert_eq!(merged["mode"], "merge");

        // Into another server: the same session, versions and registry entry.
        let other = context();
        let restored = call(&other, "import_storage", json!({"file_path": file.to_str(), "mode": "clear"})).await;
        assert_eq!(summary(&restored["imported"]), (1, 2, 1), "{restored}");
        let versions = |ctx: crate::ToolContext| {
            let id = id.clone();
            async move { call(&ctx, "list_versions", json!({"session_id": id})).await["versions"].clone() }
        };
        assert_eq!(versions(other.clone()).await, versions(ctx.clone()).await);
        let graph = call(&other, "get_graph", json!({"name": "g"})).await;
        assert_eq!(graph["session_id"], json!(id), "{graph}");
    }

    #[tokio::test]
    async fn bad_files_and_targets_are_refused_and_change_nothing() {
        let (ctx, id) = populated().await;
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.json");
        let result = call(&ctx, "import_storage", json!({"file_path": missing.to_str()})).await;
        assert_eq!(result["error"], "file_not_found", "{result}");
        let garbage = dir.path().join("garbage.json");
        std::fs::write(&garbage, "{not json").unwrap();
        assert_eq!(call(&ctx, "import_storage", json!({"file_path": garbage.to_str()})).await["error"], "invalid_json");
        let foreign = dir.path().join("reference.json");
        std::fs::write(&foreign, r#"{"version": 1, "sessions": [], "versions": []}"#).unwrap();
        let result = call(&ctx, "import_storage", json!({"file_path": foreign.to_str(), "mode": "clear"})).await;
        assert_eq!(result["error"], "invalid_format", "{result}");
        let result = call(&ctx, "import_storage", json!({"file_path": garbage.to_str(), "mode": "wipe"})).await;
        assert_eq!(result["error"], "invalid_parameter", "{result}");
        // Nothing of that reached the store.
        let graph = call(&ctx, "get_graph", json!({"name": "g"})).await;
        assert!(graph.get("error").is_none(), "{graph}");
        let versions = call(&ctx, "list_versions", json!({"session_id": id})).await;
        assert_eq!(versions["versions"].as_array().map(Vec::len), Some(2), "{versions}");

        let result =
            call(&ctx, "migrate_storage", json!({"target_backend": "sqlite", "target_path": garbage.to_str()})).await;
        assert_eq!(result["error"], "target_exists", "{result}");
        assert_eq!(std::fs::read_to_string(&garbage).unwrap(), "{not json", "the existing file was touched");
        let nested = dir.path().join("no-such-dir").join("new.db");
        let result =
            call(&ctx, "migrate_storage", json!({"target_backend": "sqlite", "target_path": nested.to_str()})).await;
        assert_eq!(result["error"], "target_unavailable", "{result}");
        assert!(!dir.path().join("no-such-dir").exists(), "the missing directory was made");
        let result = call(&ctx, "migrate_storage", json!({"target_backend": "mysql", "target_path": "x"})).await;
        assert_eq!(result["error"], "unsupported_backend", "{result}");
        let result = call(
            &ctx,
            "migrate_storage",
            json!({"target_backend": "postgres", "target_path": "postgres://u:s3cret@127.0.0.1:1/db"}),
        )
        .await;
        assert_eq!(result["error"], "target_unavailable", "{result}");
        assert!(!result.to_string().contains("s3cret"), "{result}");
    }

    #[tokio::test]
    async fn a_migration_to_sqlite_holds_everything_and_leaves_the_live_store_alone() {
        let (ctx, id) = populated().await;
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("new.db");
        let result =
            call(&ctx, "migrate_storage", json!({"target_backend": "sqlite", "target_path": target.to_str()})).await;
        assert_eq!(summary(&result["migrated"]), (1, 2, 1), "{result}");
        assert!(result["note"].as_str().unwrap().contains("CKS_MCP_DB_PATH="), "{result}");
        let store = cks_runtime::store::sqlite::SqliteStore::open(&target, &Default::default()).unwrap();
        let copied = crate::ToolContext::new(std::sync::Arc::new(cks_runtime::Runtime::new(
            std::sync::Arc::new(store),
            Default::default(),
        )));
        let read = |ctx: crate::ToolContext| {
            let id = id.clone();
            async move {
                // The serialization stamps the time it was made; everything else must match.
                let result = call(&ctx, "serialize_knowledge", json!({"session_id": id})).await;
                let mut parsed: Value = serde_json::from_str(result["serialized"].as_str().unwrap()).unwrap();
                parsed.as_object_mut().unwrap().remove("_cks_metadata");
                parsed
            }
        };
        assert_eq!(read(copied).await, read(ctx.clone()).await);
        let again =
            call(&ctx, "migrate_storage", json!({"target_backend": "sqlite", "target_path": target.to_str()})).await;
        assert_eq!(again["error"], "target_exists", "{again}");
    }
}
