//! The conflict queue: tasks that background checks (and, in the reference, its gossip between
//! peers) put in the durable task queue for a worker — a person or a Critic process — to claim,
//! resolve, and complete, fail (retried with backoff) or dead-letter; and the dead-letter list
//! people review and retry. None is offered to `ai_chat`: the queue spans every session.

mod claim_conflict_task;
mod complete_conflict_task;
mod dead_letter_conflict_task;
mod fail_conflict_task;
mod list_dead_lettered_conflicts;
mod retry_dead_letter;

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;
use std::sync::Arc;

use cks_runtime::RuntimeError;
use cks_runtime::store::{StoreError, TaskRow};

use crate::error::ToolError;
use crate::tool::DynTool;

pub(crate) fn tools() -> Vec<Arc<dyn DynTool>> {
    vec![
        Arc::new(claim_conflict_task::ClaimConflictTask),
        Arc::new(complete_conflict_task::CompleteConflictTask),
        Arc::new(fail_conflict_task::FailConflictTask),
        Arc::new(dead_letter_conflict_task::DeadLetterConflictTask),
        Arc::new(list_dead_lettered_conflicts::ListDeadLetteredConflicts),
        Arc::new(retry_dead_letter::RetryDeadLetter),
    ]
}

/// The kinds of conflict task the tools claim and list: `gossip_conflict` (two peers' divergent
/// states, from the reference's gossip; no part of this server queues these) and
/// `inference_conflict` (an inference whose confidence or premises no longer hold).
#[derive(Clone, Copy, Debug, serde::Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ConflictType {
    GossipConflict,
    InferenceConflict,
}

impl ConflictType {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ConflictType::GossipConflict => "gossip_conflict",
            ConflictType::InferenceConflict => "inference_conflict",
        }
    }
}

/// A queued task as the tools report it.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct TaskView {
    task_id: i64,
    task_type: String,
    session_id: String,
    /// The task's payload (its JSON, or the text as stored when it is not JSON).
    payload: Value,
    /// Failed attempts so far.
    retry_count: u32,
}

impl From<TaskRow> for TaskView {
    fn from(task: TaskRow) -> Self {
        let payload = serde_json::from_str(&task.payload).unwrap_or(Value::String(task.payload));
        TaskView {
            task_id: task.task_id,
            task_type: task.task_type,
            session_id: task.session_id,
            payload,
            retry_count: task.retry_count,
        }
    }
}

/// The answer for a task id that names no task (or none in the state the tool needs).
pub(crate) fn task_not_found(task_id: i64, detail: &str) -> ToolError {
    ToolError::new("task_not_found", format!("Task {task_id} was not found{detail}.")).with("task_id", task_id)
}

pub(crate) fn store_error(e: StoreError) -> ToolError {
    RuntimeError::from(e).into()
}

/// A time in ms since the epoch as the reference writes time stamps.
pub(crate) fn timestamp(ms: i64) -> String {
    let at = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    crate::convert::serialized_at(at)
}

#[cfg(test)]
pub(crate) mod testing {
    use serde_json::{Value, json};

    use crate::context::ToolContext;

    /// Queues a task of `task_type` on `session_id` and returns its id.
    pub(crate) async fn queue(ctx: &ToolContext, task_type: &str, session_id: &str, payload: Value) -> i64 {
        ctx.runtime.tasks().enqueue(task_type, session_id, &payload, None).await.unwrap().unwrap()
    }

    /// Claims the next inference conflict through the tool and returns the task.
    pub(crate) async fn claim(ctx: &ToolContext) -> Value {
        crate::tools::test_support::call(ctx, "claim_conflict_task", json!({"task_type": "inference_conflict"}))
            .await["task"]
            .clone()
    }
}
