//! `migrate_storage`: copy everything in the live store into a new SQLite file or an empty
//! PostgreSQL database, leaving the live store untouched; the server keeps running on the old one
//! until it is restarted with `CKS_MCP_DB_PATH` naming the new one. It never writes into a file
//! that exists or a database that already holds sessions, nor makes the directory of a new SQLite
//! file, and a failed SQLite copy removes the file it started. A PostgreSQL URL is never echoed
//! (it may hold a password).

use crate::ErrorCode;
use std::path::Path;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use cks_runtime::store::{Store, StoreLocation};

use super::{Moved, backup_error, session_progress};
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// 'sqlite' or 'postgres'.
    pub(crate) target_backend: String,
    /// sqlite: the path of the new database file (must not exist). postgres: the URL of an empty
    /// database, postgres://USER:PASSWORD@HOST:PORT/DATABASE.
    pub(crate) target_path: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    /// The new file's path; for PostgreSQL, the URL without its password.
    target_path: String,
    target_backend: String,
    migrated: Moved,
    note: String,
}

pub(crate) struct MigrateStorage;

#[async_trait::async_trait]
impl Tool for MigrateStorage {
    type Input = Input;
    type Output = Output;
    const TITLE: &'static str = "Migrate storage";
    const CHANGES_SERVER: bool = true;
    const META: ToolMeta = ToolMeta {
        name: "migrate_storage",
        description: "Copy all stored data (every session with its full history, the graph registry, the stored chats, \
            the task queue, the pipeline runs' and processes' records) \
            into a new SQLite file (target_backend 'sqlite', target_path a file that does not exist) or an empty PostgreSQL \
            database (target_backend 'postgres', target_path its URL), without touching the live store. The \
            server keeps using the old store until restarted with CKS_MCP_DB_PATH set to the new one. Returns \
            {target_path, target_backend, migrated {sessions, versions, graphs, chats, embeddings, outbox_tasks}, note}. \
            Errors: unsupported_backend, target_exists, target_unavailable, import_failed.",
        mutates_graph: false,
        creates_session: false,
        destructive: false,
        idempotent: false,
        open_world: true,
        session_fields: &[],
        session_checks: &[],
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        let target = input.target_path.trim();
        if target.is_empty() {
            return Err(ToolError::missing_parameter("target_path"));
        }
        let (store, shown, sqlite_file): (Arc<dyn Store>, String, Option<&Path>) = match input.target_backend.as_str() {
            "sqlite" => {
                let path = Path::new(target);
                if path.exists() {
                    return Err(target_exists(format!(
                        "A file already exists at '{target}'. migrate_storage will not overwrite an existing \
                             database. Remove the file or choose a different target_path."
                    )));
                }
                // A mistyped directory is an error, as for export_storage, not a tree made on the fly.
                if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty() && !dir.is_dir()) {
                    return Err(ToolError::new(
                        ErrorCode::TargetUnavailable,
                        format!("No directory '{}' to create the database in.", dir.display()),
                    ));
                }
                let store = ctx
                    .stores
                    .open(&StoreLocation::Sqlite(path.to_path_buf()))
                    .await
                    .map_err(|e| ToolError::new(ErrorCode::TargetUnavailable, e.to_string()))?;
                (store, target.to_owned(), Some(path))
            }
            "postgres" => {
                let store = ctx
                    .stores
                    .open(&StoreLocation::Postgres(target.to_owned()))
                    .await
                    .map_err(|e| ToolError::new(ErrorCode::TargetUnavailable, e.to_string()))?;
                let stored = store.list_sessions().await.map_err(cks_runtime::RuntimeError::from)?.len();
                if stored > 0 {
                    return Err(target_exists(format!(
                        "The target database already holds {stored} sessions. migrate_storage only writes \
                             into an empty database."
                    )));
                }
                (store, without_password(target), None)
            }
            other => {
                return Err(ToolError::new(
                    ErrorCode::UnsupportedBackend,
                    format!("target_backend '{other}' is not supported: use 'sqlite' or 'postgres'."),
                ));
            }
        };
        let copied = ctx.runtime.copy_storage_to(&*store, &mut session_progress(ctx, "copied")).await;
        drop(store);
        let counts = match copied {
            Ok(counts) => counts,
            Err(e) => {
                if let Some(file) = sqlite_file {
                    remove_database_file(file);
                }
                let e = backup_error(e);
                return Err(ToolError::new(ErrorCode::ImportFailed, e.message));
            }
        };
        let setting = if sqlite_file.is_some() { target.to_owned() } else { "<the URL>".to_owned() };
        Ok(Output {
            note: format!(
                "Migration complete; the live store was not changed. To use the new store, restart the server with \
                 CKS_MCP_DB_PATH={setting}."
            ),
            target_path: shown,
            target_backend: input.target_backend,
            migrated: counts.into(),
        })
    }
}

fn target_exists(message: String) -> ToolError {
    ToolError::new(ErrorCode::TargetExists, message)
}

/// The database file and SQLite's companions beside it.
fn remove_database_file(file: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut name = file.as_os_str().to_owned();
        name.push(suffix);
        let _ = std::fs::remove_file(name);
    }
}

/// `postgres://user:secret@host/db` → `postgres://user@host/db`.
fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
    let (authority, tail) = rest.split_once('/').map_or((rest, None), |(a, t)| (a, Some(t)));
    let authority = match authority.rsplit_once('@') {
        Some((user, host)) => format!("{}@{host}", user.split_once(':').map_or(user, |(u, _)| u)),
        None => authority.to_owned(),
    };
    match tail {
        Some(tail) => format!("{scheme}://{authority}/{tail}"),
        None => format!("{scheme}://{authority}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_leave_the_url() {
        assert_eq!(
            without_password("postgres://u:s3cret@h:5432/db?sslmode=require"),
            "postgres://u@h:5432/db?sslmode=require"
        );
        assert_eq!(without_password("postgresql://u@h/db"), "postgresql://u@h/db");
        assert_eq!(without_password("postgres://h"), "postgres://h");
    }
}
