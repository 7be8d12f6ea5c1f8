//! The autonomous processes' control: their liveness records, status and graceful stop, read from
//! the store so every server of the store sees every process (see `cks-workers`).

mod list_processes;
mod process_status;
mod request_process_stop;

use schemars::JsonSchema;
use serde::Serialize;
use time::OffsetDateTime;

use cks_runtime::processes::ProcessRecord;

use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Listed, listed};

pub(crate) fn tools() -> Vec<Listed> {
    vec![
        listed(list_processes::ListProcesses),
        listed(process_status::ProcessStatus),
        listed(request_process_stop::RequestProcessStop),
    ]
}

/// A process as the tools report it: its record and its computed status.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ProcessView {
    instance_id: String,
    /// critic, enrichment or pipeline.
    process_kind: String,
    hostname: String,
    pid: u32,
    /// How often the process refreshes its record, in seconds.
    liveness_interval_s: f64,
    started_at: String,
    last_heartbeat_at: String,
    /// The task it is working on.
    current_task_id: Option<i64>,
    current_task_type: Option<String>,
    /// 'alive' (a heartbeat within 3 liveness intervals, not stopped) or 'stopped'.
    status: &'static str,
    /// Tasks settled since it started.
    tasks_done: u64,
    /// Tasks it failed or dead-lettered since it started.
    tasks_failed: u64,
    last_error: Option<String>,
    /// LLM tokens spent since it started.
    tokens_spent: u64,
    /// Why it takes no tasks for now (over its hourly token budget); null while it works.
    paused: Option<String>,
    /// When it stopped cleanly.
    stopped_at: Option<String>,
}

impl ProcessView {
    fn new(record: ProcessRecord, now: OffsetDateTime) -> Self {
        let status = record.status(now);
        ProcessView {
            instance_id: record.instance_id,
            process_kind: record.process_kind,
            hostname: record.hostname,
            pid: record.pid,
            liveness_interval_s: record.liveness_interval_s,
            started_at: record.started_at,
            last_heartbeat_at: record.last_heartbeat_at,
            current_task_id: record.current_task_id,
            current_task_type: record.current_task_type,
            status,
            tasks_done: record.tasks_done,
            tasks_failed: record.tasks_failed,
            last_error: record.last_error,
            tokens_spent: record.tokens_spent,
            paused: record.paused,
            stopped_at: record.stopped_at,
        }
    }
}

/// Every process's view, most recently started first.
async fn processes(ctx: &ToolContext) -> Result<Vec<ProcessView>, ToolError> {
    let now = OffsetDateTime::now_utc();
    Ok(ctx.runtime.processes().await?.into_iter().map(|r| ProcessView::new(r, now)).collect())
}

/// The most recently started process of `kind`.
async fn latest(ctx: &ToolContext, kind: &str) -> Result<Option<ProcessView>, ToolError> {
    Ok(processes(ctx).await?.into_iter().find(|p| p.process_kind == kind))
}
