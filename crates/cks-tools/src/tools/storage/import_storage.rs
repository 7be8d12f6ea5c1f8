//! `import_storage`: restore a backup written by `export_storage`. `merge` (default) adds the
//! sessions and registry names the store does not have and keeps what it has; `clear` empties the
//! store first. Either way the sessions are written in one transaction: all of them or none, and a
//! file that is not a complete backup changes nothing.

use crate::ErrorCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use cks_runtime::backup::{self, BackupError, Mode};

use super::{Moved, backup_error};
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The dump file written by export_storage.
    pub(crate) file_path: String,
    /// 'merge' (default): add only what is not stored yet. 'clear': empty the store first.
    pub(crate) mode: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    imported: Moved,
    /// Sessions and registry names left alone because they were already stored (merge).
    skipped: u64,
    mode: String,
    file_path: String,
}

pub(crate) struct ImportStorage;

#[async_trait::async_trait]
impl Tool for ImportStorage {
    type Input = Input;
    type Output = Output;
    const TITLE: &'static str = "Restore storage";
    const META: ToolMeta = ToolMeta {
        name: "import_storage",
        description: "Restore a backup written by export_storage into the server's storage. mode 'merge' \
            (default) adds the sessions, graph names, chats, tasks and records not stored yet and keeps the \
            rest; mode 'clear' deletes everything stored first (disaster recovery). All sessions are written at once or none. Returns \
            {imported {sessions, versions, graphs, chats, embeddings, outbox_tasks}, skipped, mode, file_path}. \
            Errors: file_not_found, invalid_json, invalid_format.",
        mutates_graph: true,
        creates_session: false,
        destructive: true,
        idempotent: false,
        open_world: false,
        session_fields: &[],
        session_checks: &[],
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        if input.file_path.trim().is_empty() {
            return Err(ToolError::missing_parameter("file_path"));
        }
        let mode = match input.mode.as_deref().unwrap_or("merge") {
            "merge" => Mode::Merge,
            "clear" => Mode::Clear,
            other => {
                return Err(ToolError::invalid_parameter(format!("mode must be 'merge' or 'clear', got '{other}'")));
            }
        };
        let path = input.file_path.clone();
        let text = tokio::task::spawn_blocking(move || std::fs::read(path))
            .await
            .map_err(|e| ToolError::internal(format!("reading the dump failed: {e}")))?
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => {
                    ToolError::new(ErrorCode::FileNotFound, format!("No file found at '{}'", input.file_path))
                }
                _ => ToolError::new(ErrorCode::FileNotFound, format!("Cannot read '{}': {e}", input.file_path)),
            })?;
        let dump = backup::parse(&text).map_err(|e| match e {
            BackupError::Format(detail) if detail.starts_with("not JSON") => {
                ToolError::new(ErrorCode::InvalidJson, format!("Could not parse dump file: {detail}"))
            }
            other => backup_error(other),
        })?;
        let counts = ctx.runtime.restore_storage(&dump, mode).await.map_err(backup_error)?;
        Ok(Output {
            imported: counts.into(),
            skipped: counts.skipped,
            mode: input.mode.unwrap_or_else(|| "merge".into()),
            file_path: input.file_path,
        })
    }
}
