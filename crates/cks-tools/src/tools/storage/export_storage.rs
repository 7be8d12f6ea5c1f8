//! `export_storage`: a backup of the whole store (every session with its full history, the
//! gallery's registry, the stored chats, the task queue, the pipeline-run and process records)
//! written to a JSON file; the answer is a summary and the
//! file's path, never the dump itself. The file appears complete or not at all (written beside it, then renamed).

use crate::ErrorCode;
use std::io::Write as _;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Moved, backup_error, session_progress};
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Coercion, Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// Include the stored embeddings (default true); without them a restored server embeds its
    /// objects' texts again.
    #[serde(default)]
    pub(crate) include_embeddings: Option<bool>,
    /// Where to write the dump. Default: cks_backup_<UTC timestamp>.json in the system's
    /// temporary directory.
    pub(crate) output_path: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Summary {
    #[serde(flatten)]
    moved: Moved,
    exported_at: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    file_path: String,
    summary: Summary,
}

pub(crate) struct ExportStorage;

#[async_trait::async_trait]
impl Tool for ExportStorage {
    type Input = Input;
    type Output = Output;
    const ARGUMENT_COERCIONS: &'static [(&'static str, Coercion)] = &[("include_embeddings", Coercion::Truthy)];
    const TITLE: &'static str = "Back up storage";
    const CHANGES_SERVER: bool = true;
    const META: ToolMeta = ToolMeta {
        name: "export_storage",
        description: "Export a complete backup of the server's storage (every session with its full version \
            history, the graph registry, the stored chats, the task queue, the pipeline runs' and processes' \
            records and, unless include_embeddings is false, the stored embeddings) to a JSON file on the server's disk. Returns \
            {file_path, summary {sessions, versions, graphs, chats, embeddings, outbox_tasks, exported_at}}, never \
            the dump itself. import_storage restores it; migrate_storage copies the storage to another database directly.",
        mutates_graph: false,
        creates_session: false,
        destructive: false,
        idempotent: false,
        open_world: false,
        session_fields: &[],
        session_checks: &[],
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        let path = match input.output_path.as_deref().map(str::trim) {
            Some("") => return Err(ToolError::invalid_parameter("output_path must not be empty")),
            Some(path) => PathBuf::from(path),
            None => std::env::temp_dir().join(format!("cks_backup_{}.json", file_stamp())),
        };
        let partial = path.with_extension("json.partial");
        let file = std::fs::File::create(&partial).map_err(|e| {
            ToolError::new(ErrorCode::WriteFailed, format!("Could not create {}: {e}", partial.display()))
        })?;
        let mut out = std::io::BufWriter::new(file);
        let exported_at = cks_runtime::runtime::now();
        let written = ctx
            .runtime
            .export_storage(&mut out, input.include_embeddings.unwrap_or(true), &mut session_progress(ctx, "exported"))
            .await;
        let finished = written.map_err(backup_error).and_then(|counts| {
            out.flush()
                .and_then(|()| out.get_ref().sync_all())
                .and_then(|()| std::fs::rename(&partial, &path))
                .map_err(|e| {
                    ToolError::new(ErrorCode::WriteFailed, format!("Could not write {}: {e}", path.display()))
                })?;
            Ok(counts)
        });
        let counts = match finished {
            Ok(counts) => counts,
            Err(e) => {
                let _ = std::fs::remove_file(&partial);
                return Err(e);
            }
        };
        Ok(Output { file_path: path.display().to_string(), summary: Summary { moved: counts.into(), exported_at } })
    }
}

/// `20261201T114739Z`: a timestamp that sorts and is safe in a file name.
fn file_stamp() -> String {
    let now = time::OffsetDateTime::now_utc();
    format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
        now.year(),
        u8::from(now.month()),
        now.day(),
        now.hour(),
        now.minute(),
        now.second()
    )
}
