//! `cks-mcp import-reference PATH`: moves the data of the Python reference server (cks-mcp 1.77)
//! into ours. Every session of its SQLite database is stored with its whole history (version
//! ids, transaction ids, timestamps, metadata, parent session and version, closed or not), our
//! state hashes computed over each rebuilt state. The run writes everything or nothing; sessions
//! already here are skipped, so running it again imports nothing. Progress goes to stderr, a
//! one-line JSON summary to stdout.

use anyhow::{Context, bail};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cks_runtime::reference_db::{ReferenceData, read_reference_db};
use cks_runtime::{ImportReport, Runtime, RuntimeConfig};

use crate::config::{Config, Storage};

/// Arguments of `cks-mcp import-reference`.
#[derive(Debug, clap::Args)]
pub struct ImportReferenceArgs {
    /// The reference server's SQLite database (its CKS_MCP_DB_PATH; by default
    /// ~/.cks-mcp/cks_mcp.db, which is also ours: move it aside first). It is only read.
    #[arg(value_name = "PATH")]
    pub path: PathBuf,
}

/// What one import run did.
#[derive(Debug)]
pub struct ImportSummary {
    pub report: ImportReport,
    pub sessions_found: usize,
    pub orphan_versions: u64,
}

/// Runs the subcommand against the configured database.
pub async fn run(args: &ImportReferenceArgs, config: &Config) -> anyhow::Result<()> {
    match &config.storage {
        Storage::Memory => bail!(
            "CKS_MCP_DB_PATH is ':memory:': an import there would be lost at exit; point it at a database file \
             or a PostgreSQL database"
        ),
        Storage::Sqlite(target) if same_file(&args.path, target) => bail!(
            "{} is this server's own database path; move the reference's database aside (for example to \
             reference.db next to it) and import it from there",
            target.display()
        ),
        Storage::Sqlite(_) | Storage::Postgres(_) => {}
    }
    let target = match &config.storage {
        Storage::Sqlite(path) => path.display().to_string(),
        _ => "PostgreSQL (CKS_MCP_DB_PATH)".to_owned(),
    };
    let runtime = Runtime::new(crate::open_store(config).await?, RuntimeConfig::default());
    let summary = import(&args.path, &runtime).await?;
    let report = &summary.report;
    if report.imported.is_empty() {
        eprintln!(
            "cks-mcp: nothing imported: all {} sessions of {} are already in {}",
            summary.sessions_found,
            args.path.display(),
            target
        );
    } else {
        eprintln!(
            "cks-mcp: imported {} sessions ({} versions) into {}; {} already there",
            report.imported.len(),
            report.versions,
            target,
            report.skipped.len()
        );
    }
    if summary.orphan_versions > 0 {
        eprintln!(
            "cks-mcp: {} versions that belong to no session (live or archived) were not imported",
            summary.orphan_versions
        );
    }
    println!(
        "{}",
        json!({
            "source": args.path.display().to_string(),
            "database": target,
            "sessions_found": summary.sessions_found,
            "imported_sessions": report.imported.len(),
            "imported_versions": report.versions,
            "skipped_sessions": report.skipped.len(),
            "orphan_versions": summary.orphan_versions,
        })
    );
    Ok(())
}

/// Reads the reference database at `path` and imports it into `runtime` (all or nothing).
pub async fn import(path: &Path, runtime: &Runtime) -> anyhow::Result<ImportSummary> {
    let owned = path.to_path_buf();
    let data: ReferenceData = tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        let mut last_report = started;
        read_reference_db(&owned, &mut |done, total| {
            // Long reads say where they are, about every two seconds.
            if done == total && started.elapsed() > Duration::from_secs(2)
                || last_report.elapsed() > Duration::from_secs(2)
            {
                eprintln!("cks-mcp: read {done}/{total} sessions");
                last_report = Instant::now();
            }
        })
    })
    .await
    .context("reading the reference database")??;
    let sessions_found = data.sessions.len();
    let versions: usize = data.sessions.iter().map(|s| s.versions.len()).sum();
    eprintln!("cks-mcp: {} has {sessions_found} sessions with {versions} versions; storing them", path.display());
    let report = runtime.import_sessions(data.sessions).await.context("storing the imported sessions")?;
    Ok(ImportSummary { report, sessions_found, orphan_versions: data.orphan_versions })
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}
