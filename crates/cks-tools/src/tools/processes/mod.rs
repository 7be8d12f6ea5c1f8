//! The autonomous processes' control: their liveness records, status and graceful stop, read from
//! the store so every server of the store sees every process (see `cks-workers`).
//!
//! A process belongs to no session: it works through the task queue of every session on the
//! store, so every caller sees it, and its counters (tasks done and failed, tokens spent) are
//! totals that name no one's data. What does name one session's data is kept to the callers who
//! reach that session ([`ToolContext::reaches`]): the task a process works on (its id and type)
//! and its last error (which quotes that task). A principal without `cks:admin` who does not reach
//! the session sees both as null, exactly as for an idle process without errors.

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

/// Every process's view, most recently started first, with what names a session the caller does
/// not reach left out.
async fn processes(ctx: &ToolContext) -> Result<Vec<ProcessView>, ToolError> {
    let now = OffsetDateTime::now_utc();
    let mut views = Vec::new();
    for mut record in ctx.runtime.processes().await? {
        if ctx.restricted() {
            if !shown(ctx, record.current_session_id.as_deref(), record.current_task_id).await? {
                record.current_task_id = None;
                record.current_task_type = None;
            }
            if !shown(ctx, record.last_error_session_id.as_deref(), None).await? {
                record.last_error = None;
            }
        }
        views.push(ProcessView::new(record, now));
    }
    Ok(views)
}

/// Whether a restricted caller is shown what concerns `session` (or, when the record names none,
/// the session of `task`): only when it reaches that session. A record that names no session and
/// no task (a failed claim's error) concerns no one's data.
async fn shown(ctx: &ToolContext, session: Option<&str>, task: Option<i64>) -> Result<bool, ToolError> {
    let session = match (session, task) {
        (Some(session), _) => session.to_owned(),
        // A record from a worker that did not name the session: the task's, if it is still queued.
        (None, Some(task)) => {
            match ctx.runtime.tasks().get(task).await.map_err(crate::tools::conflicts::store_error)? {
                Some(task) => task.session_id,
                None => return Ok(false),
            }
        }
        (None, None) => return Ok(true),
    };
    ctx.reaches(&session).await
}

/// The most recently started process of `kind`.
async fn latest(ctx: &ToolContext, kind: &str) -> Result<Option<ProcessView>, ToolError> {
    Ok(processes(ctx).await?.into_iter().find(|p| p.process_kind == kind))
}
