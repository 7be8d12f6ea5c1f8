//! `cks-mcp export-storage`, `import-storage` and `migrate-storage`: the storage tools for
//! operators, run against the configured store without serving. Each runs the registry's tool of
//! the same name, so the command and the tool cannot drift apart (`key_commands.rs` does the same
//! for API keys); progress goes to stderr, the tool's result (JSON) to stdout, and a tool error
//! becomes a failed exit with its message.

use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::bail;
use serde_json::{Value, json};

use cks_runtime::{Runtime, RuntimeConfig};
use cks_tools::{ProgressSink, Registry, ToolContext};

use crate::config::{Config, Storage};

/// Arguments of `cks-mcp export-storage`.
#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// The backup file to write (by default cks_backup_<time>.json in the system's temporary
    /// directory). It appears complete or not at all.
    #[arg(value_name = "PATH")]
    pub path: Option<String>,
}

/// Arguments of `cks-mcp import-storage`.
#[derive(Debug, clap::Args)]
pub struct ImportArgs {
    /// A backup written by export-storage (or the export_storage tool).
    #[arg(value_name = "PATH")]
    pub path: String,
    /// merge: add the sessions, versions, graphs and chats not already here. clear: replace everything
    /// stored with the backup's contents.
    #[arg(long, default_value = "merge", value_parser = ["merge", "clear"])]
    pub mode: String,
}

/// Arguments of `cks-mcp migrate-storage`.
#[derive(Debug, clap::Args)]
pub struct MigrateArgs {
    /// A new SQLite file (it must not exist) or the URL of an empty PostgreSQL database
    /// (postgres://USER:PASSWORD@HOST:PORT/DATABASE).
    #[arg(value_name = "TARGET")]
    pub target: String,
}

/// An operator command: the tool it runs and that tool's arguments.
pub trait OperatorCommand {
    fn tool_call(&self, config: &Config) -> anyhow::Result<(&'static str, Value)>;
}

impl OperatorCommand for ExportArgs {
    fn tool_call(&self, _: &Config) -> anyhow::Result<(&'static str, Value)> {
        Ok(("export_storage", json!({"output_path": self.path})))
    }
}

impl OperatorCommand for ImportArgs {
    fn tool_call(&self, config: &Config) -> anyhow::Result<(&'static str, Value)> {
        if matches!(config.storage, Storage::Memory) {
            bail!("CKS_MCP_DB_PATH is ':memory:': an import there would be lost at exit");
        }
        Ok(("import_storage", json!({"file_path": self.path, "mode": self.mode})))
    }
}

impl OperatorCommand for MigrateArgs {
    fn tool_call(&self, _: &Config) -> anyhow::Result<(&'static str, Value)> {
        let backend = if cks_postgres::is_postgres_url(&self.target) { "postgres" } else { "sqlite" };
        Ok(("migrate_storage", json!({"target_backend": backend, "target_path": self.target})))
    }
}

/// Runs an operator command against the configured store.
pub async fn run(command: &impl OperatorCommand, config: &Config) -> anyhow::Result<()> {
    let (tool, args) = command.tool_call(config)?;
    let runtime = Arc::new(Runtime::new(crate::open_store(config).await?, RuntimeConfig::default()));
    let mut ctx = ToolContext::new(runtime);
    ctx.stores = Arc::new(crate::stores::Stores::default());
    ctx.progress = Some(Arc::new(StderrProgress::default()));
    let result = Registry::standard().call(tool, args, &ctx).await?;
    if let Some(code) = result.get("error").and_then(Value::as_str) {
        let message = result.get("message").and_then(Value::as_str).unwrap_or_default();
        bail!("{tool} failed ({code}): {message}");
    }
    println!("{result}");
    Ok(())
}

/// Progress lines on stderr, at most one every two seconds, and the last one always.
#[derive(Default)]
struct StderrProgress {
    last: Mutex<Option<Instant>>,
}

impl ProgressSink for StderrProgress {
    fn report(&self, progress: f64, total: Option<f64>, message: Option<String>) {
        let mut last = self.last.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let finished = total.is_some_and(|total| progress >= total);
        if finished || last.is_none_or(|at| at.elapsed() >= Duration::from_secs(2)) {
            eprintln!("cks-mcp: {}", message.unwrap_or_else(|| format!("{progress}")));
            *last = Some(Instant::now());
        }
    }
}
