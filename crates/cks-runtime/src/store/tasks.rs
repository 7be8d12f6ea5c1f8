//! The durable task queue's rows: background work found or requested on a session (a
//! contradiction a sweeper found, a conflict to arbitrate, an enrichment request) waiting for a
//! worker — a person through the conflict tools, or a background process.
//!
//! A task is in exactly one state at any time, and every change of state is one atomic store
//! operation, so a crash anywhere leaves each task pending, claimed or dead, never lost or doubled:
//!
//! - **pending**: waiting, claimable once `next_retry_at_ms` has passed;
//! - **in progress**: claimed by a worker at `claimed_at_ms`; the claim is a lease — once it is
//!   older than the lease the caller of [`TaskStore::claim_task`](super::TaskStore::claim_task) gives,
//!   the worker is presumed dead and the task can be claimed again;
//! - **dead**: given up on (dead-lettered), kept for review until retried or completed.
//!
//! Completing a task deletes it. Time is given by the caller (milliseconds since the Unix epoch),
//! so stores never read a clock and tests can move time at will.
//!
//! Invariant: at most one task exists per `dedup_key`: the same finding on the same object is
//! queued once while it is unresolved (pending, in progress or dead).
//! Invariant: [`TaskStore::claim_task`](super::TaskStore::claim_task) hands a task to one caller only:
//! two claims never both return it while its lease holds.

/// A task to queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewTask {
    pub task_type: String,
    pub session_id: String,
    /// JSON text.
    pub payload: String,
    /// Identifies the finding: a second task with the same key is not queued while the first
    /// exists.
    pub dedup_key: Option<String>,
    pub created_at_ms: i64,
}

/// Where a task stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TaskStatus {
    Pending,
    InProgress,
    Dead,
}

impl TaskStatus {
    /// The stored (and reported) name, as the reference spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Pending => "PENDING",
            TaskStatus::InProgress => "IN_PROGRESS",
            TaskStatus::Dead => "DEAD",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "PENDING" => Some(TaskStatus::Pending),
            "IN_PROGRESS" => Some(TaskStatus::InProgress),
            "DEAD" => Some(TaskStatus::Dead),
            _ => None,
        }
    }
}

/// A queued task as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskRow {
    /// Assigned by the store, increasing.
    pub task_id: i64,
    pub task_type: String,
    pub session_id: String,
    pub payload: String,
    pub status: TaskStatus,
    /// Failed attempts so far.
    pub retry_count: u32,
    pub last_error: Option<String>,
    /// A pending task is not claimable before this.
    pub next_retry_at_ms: i64,
    /// When the current claim was made (in progress only).
    pub claimed_at_ms: Option<i64>,
    pub created_at_ms: i64,
    pub dedup_key: Option<String>,
}

impl TaskRow {
    /// Whether a claim at `now_ms` may take this task.
    pub fn claimable(&self, now_ms: i64, lease_ms: i64) -> bool {
        match self.status {
            TaskStatus::Pending => self.next_retry_at_ms <= now_ms,
            TaskStatus::InProgress => self.claimed_at_ms.is_some_and(|at| at.saturating_add(lease_ms) <= now_ms),
            TaskStatus::Dead => false,
        }
    }

    /// Whether the task matches a filter.
    pub fn matches(&self, filter: &TaskFilter) -> bool {
        filter.status.is_none_or(|s| s == self.status)
            && filter.task_type.as_ref().is_none_or(|t| *t == self.task_type)
            && filter.session_id.as_ref().is_none_or(|s| *s == self.session_id)
    }
}

/// Which tasks to list; every unset field matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskFilter {
    pub status: Option<TaskStatus>,
    pub task_type: Option<String>,
    pub session_id: Option<String>,
}

/// How a change of state names the task: by id alone (any holder), or by id and the claim it
/// must still hold (`claimed_at_ms` as [`TaskStore::claim_task`](super::TaskStore::claim_task) returned
/// it), so a worker whose lease expired and was taken over cannot finish the new holder's task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskRef {
    pub task_id: i64,
    pub claimed_at_ms: Option<i64>,
}

impl TaskRef {
    pub fn any(task_id: i64) -> Self {
        TaskRef { task_id, claimed_at_ms: None }
    }

    pub fn claimed(task: &TaskRow) -> Self {
        TaskRef { task_id: task.task_id, claimed_at_ms: task.claimed_at_ms }
    }

    /// Whether `row` is the task this names, in the claim it names.
    pub fn holds(&self, row: &TaskRow) -> bool {
        row.task_id == self.task_id
            && self.claimed_at_ms.is_none_or(|at| row.status == TaskStatus::InProgress && row.claimed_at_ms == Some(at))
    }
}
