//! The liveness of autonomous processes (the workers that settle queued tasks): each running
//! process keeps a record in the store, refreshed at its liveness interval, so every server on the
//! store can list them (`list_processes`) and ask one to stop (`request_process_stop`), whichever
//! server runs it. A record is a setting under `process.`; a stop request is a setting under
//! `process_stop.`. Records of processes gone for a week are pruned when the list is read.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::error::RuntimeError;
use crate::runtime::Runtime;

pub(crate) const RECORD: &str = "process.";
pub(crate) const STOP: &str = "process_stop.";
/// A process is alive while its last heartbeat is at most this many liveness intervals old.
const LIVENESS_TTL_INTERVALS: f64 = 3.0;
/// Records whose last heartbeat is older than this are pruned.
const PRUNE_AFTER: time::Duration = time::Duration::days(7);

/// What a process reports about itself.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessRecord {
    /// One per start: a restarted process is a new instance.
    pub instance_id: String,
    /// `critic`, `enrichment`, `pipeline`.
    pub process_kind: String,
    pub hostname: String,
    pub pid: u32,
    /// How often the record is refreshed, in seconds.
    pub liveness_interval_s: f64,
    pub started_at: String,
    pub last_heartbeat_at: String,
    pub current_task_id: Option<i64>,
    pub current_task_type: Option<String>,
    /// The session of the current task: only callers who reach it are shown the task.
    pub current_session_id: Option<String>,
    pub tasks_done: u64,
    pub tasks_failed: u64,
    pub last_error: Option<String>,
    /// The session of the task `last_error` is about; `None` when it is about no task (a failed
    /// claim). Only callers who reach that session are shown the error.
    pub last_error_session_id: Option<String>,
    /// LLM tokens (input and output) spent since it started.
    pub tokens_spent: u64,
    /// Why it is not taking tasks for now (over its token budget), when it is not.
    pub paused: Option<String>,
    /// When it stopped, if it stopped cleanly.
    pub stopped_at: Option<String>,
}

impl ProcessRecord {
    /// A record for a process starting now on this host.
    pub fn starting(process_kind: &str, liveness_interval_s: f64) -> Self {
        let now = crate::runtime::now();
        ProcessRecord {
            instance_id: uuid::Uuid::new_v4().to_string(),
            process_kind: process_kind.to_owned(),
            hostname: hostname(),
            pid: std::process::id(),
            liveness_interval_s,
            started_at: now.clone(),
            last_heartbeat_at: now,
            ..ProcessRecord::default()
        }
    }

    /// `alive` while it beats (and has not stopped), else `stopped`.
    pub fn status(&self, now: OffsetDateTime) -> &'static str {
        let beat = OffsetDateTime::parse(&self.last_heartbeat_at, &Rfc3339).ok();
        let fresh =
            beat.is_some_and(|at| (now - at).as_seconds_f64() <= LIVENESS_TTL_INTERVALS * self.liveness_interval_s);
        if self.stopped_at.is_none() && fresh { "alive" } else { "stopped" }
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".to_owned())
}

impl Runtime {
    /// Writes a process's record (its heartbeat).
    pub async fn report_process(&self, record: &ProcessRecord) -> Result<(), RuntimeError> {
        let value = serde_json::to_string(record).expect("records encode");
        Ok(self.store().save_setting(&format!("{RECORD}{}", record.instance_id), &value).await?)
    }

    /// Every process's record, the most recently started first; records gone quiet for a week
    /// are pruned on the way.
    pub async fn processes(&self) -> Result<Vec<ProcessRecord>, RuntimeError> {
        let now = OffsetDateTime::now_utc();
        let mut records = Vec::new();
        for (key, value) in self.store().list_settings(RECORD).await? {
            let Ok(record) = serde_json::from_str::<ProcessRecord>(&value) else { continue };
            let beat = OffsetDateTime::parse(&record.last_heartbeat_at, &Rfc3339).ok();
            if beat.is_some_and(|at| now - at > PRUNE_AFTER) {
                self.store().delete_setting(&key).await?;
                self.store().delete_setting(&format!("{STOP}{}", record.instance_id)).await?;
                continue;
            }
            records.push(record);
        }
        records.sort_by(|a, b| b.started_at.cmp(&a.started_at).then_with(|| a.instance_id.cmp(&b.instance_id)));
        Ok(records)
    }

    /// Asks a process to stop after its current task; false when no such process is recorded.
    pub async fn request_process_stop(&self, instance_id: &str) -> Result<bool, RuntimeError> {
        if self.store().load_setting(&format!("{RECORD}{instance_id}")).await?.is_none() {
            return Ok(false);
        }
        self.store().save_setting(&format!("{STOP}{instance_id}"), "requested").await?;
        Ok(true)
    }

    /// Whether a stop of the process was requested.
    pub async fn process_stop_requested(&self, instance_id: &str) -> Result<bool, RuntimeError> {
        Ok(self.store().load_setting(&format!("{STOP}{instance_id}")).await?.is_some())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::RuntimeConfig;
    use crate::store::memory::MemoryStore;

    #[tokio::test]
    async fn records_are_listed_newest_first_stopped_on_request_and_pruned_when_long_gone() {
        let runtime = Runtime::new(Arc::new(MemoryStore::new()), RuntimeConfig::default());
        let mut older = ProcessRecord::starting("critic", 30.0);
        older.started_at = "2026-01-01T00:00:00Z".into();
        let newer = ProcessRecord::starting("critic", 30.0);
        let mut gone = ProcessRecord::starting("pipeline", 30.0);
        gone.last_heartbeat_at = "2001-01-01T00:00:00Z".into();
        for record in [&older, &newer, &gone] {
            runtime.report_process(record).await.unwrap();
        }
        let listed = runtime.processes().await.unwrap();
        assert_eq!(
            listed.iter().map(|r| r.instance_id.as_str()).collect::<Vec<_>>(),
            [newer.instance_id.as_str(), older.instance_id.as_str()],
            "newest first, the long-gone one pruned"
        );
        let now = OffsetDateTime::now_utc();
        assert_eq!(listed[0].status(now), "alive");
        assert_eq!(ProcessRecord { stopped_at: Some(crate::runtime::now()), ..newer.clone() }.status(now), "stopped");
        assert_eq!(gone.status(now), "stopped");

        assert!(!runtime.process_stop_requested(&newer.instance_id).await.unwrap());
        assert!(runtime.request_process_stop(&newer.instance_id).await.unwrap());
        assert!(runtime.process_stop_requested(&newer.instance_id).await.unwrap());
        assert!(!runtime.request_process_stop("no-such-instance").await.unwrap());
    }
}
