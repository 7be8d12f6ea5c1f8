//! `fail_conflict_task`: an attempt at a claimed conflict task failed for a passing reason; it is
//! retried after `2^retry_count` seconds (at most an hour) — or, once the retries allowed are used
//! up, dead-lettered for review.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use cks_runtime::store::TaskRef;
use cks_runtime::tasks::Failed;

use super::{store_error, task_not_found, timestamp};
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Named, Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The task_id returned by claim_conflict_task.
    pub(crate) task_id: i64,
    /// The new retry count: the claimed task's retry_count plus one.
    pub(crate) retry_count: u32,
    /// Why this attempt failed, kept as the task's last error.
    pub(crate) error: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    failed: bool,
    supported: bool,
    task_id: i64,
    retry_count: u32,
    /// When the task can be claimed again (absent when it was dead-lettered).
    #[serde(skip_serializing_if = "Option::is_none")]
    next_retry_at: Option<String>,
    /// True when the retries allowed were used up and the task went to the dead-letter list.
    #[serde(skip_serializing_if = "Option::is_none")]
    dead_lettered: Option<bool>,
}

pub(crate) struct FailConflictTask;

#[async_trait::async_trait]
impl Tool for FailConflictTask {
    type Input = Input;
    type Output = Output;
    const NAMED: &'static [(&'static str, Named)] = &[("task_id", Named::Task)];
    const TITLE: &'static str = "Fail a conflict task";
    const CHANGES_SERVER: bool = true;
    const META: ToolMeta = ToolMeta {
        name: "fail_conflict_task",
        description: "Mark a conflict task (claimed via claim_conflict_task) as failed for a passing reason: it \
            returns to the queue and can be claimed again after 2^retry_count seconds (at most 1 hour). Pass \
            retry_count as the claimed task's retry_count plus one. Once retry_count exceeds the retries allowed \
            (CKS_TASK_MAX_RETRIES, 5 by default) the task is dead-lettered instead. Returns {failed: true, \
            supported: true, task_id, retry_count, next_retry_at}, or {failed: true, ..., dead_lettered: true}; an \
            unknown task_id is the error task_not_found. Use dead_letter_conflict_task to give up at once.",
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
        let task = TaskRef::any(input.task_id);
        let outcome = ctx.runtime.tasks().fail(task, input.retry_count, &input.error).await.map_err(store_error)?;
        let (next_retry_at, dead_lettered) = match outcome {
            Failed::Retrying { next_retry_at_ms } => (Some(timestamp(next_retry_at_ms)), None),
            Failed::DeadLettered => (None, Some(true)),
            Failed::NotFound => return Err(task_not_found(input.task_id, "")),
        };
        Ok(Output {
            failed: true,
            supported: true,
            task_id: input.task_id,
            retry_count: input.retry_count,
            next_retry_at,
            dead_lettered,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use cks_runtime::store::TaskStatus;

    use crate::testing::{call, context};
    use crate::testing::{claim, queue};

    #[tokio::test]
    async fn a_failed_task_waits_its_backoff_then_dead_letters_past_the_limit() {
        let ctx = context();
        let id = queue(&ctx, "inference_conflict", "s1", json!({})).await;
        claim(&ctx).await;
        let failed =
            call(&ctx, "fail_conflict_task", json!({"task_id": id, "retry_count": 1, "error": "timeout"})).await;
        assert_eq!((failed["failed"].as_bool(), failed["retry_count"].as_u64()), (Some(true), Some(1)));
        let next = failed["next_retry_at"].as_str().unwrap();
        assert!(next.ends_with("+00:00") && next.len() == "2026-03-04T05:06:07.123456+00:00".len(), "{next}");
        assert!(claim(&ctx).await.is_null(), "not claimable before its backoff");
        let row = ctx.runtime.tasks().get(id).await.unwrap().unwrap();
        assert_eq!((row.status, row.retry_count, row.last_error.as_deref()), (TaskStatus::Pending, 1, Some("timeout")));

        let over = call(&ctx, "fail_conflict_task", json!({"task_id": id, "retry_count": 6, "error": "timeout"})).await;
        assert_eq!(over["dead_lettered"], true);
        assert!(over.get("next_retry_at").is_none());
        assert_eq!(ctx.runtime.tasks().get(id).await.unwrap().unwrap().status, TaskStatus::Dead);

        let unknown = call(&ctx, "fail_conflict_task", json!({"task_id": 999, "retry_count": 1, "error": "x"})).await;
        assert_eq!(unknown["error"], "task_not_found");
        let negative = call(&ctx, "fail_conflict_task", json!({"task_id": id, "retry_count": -1, "error": "x"})).await;
        assert_eq!(negative["error"], "invalid_parameter");
    }
}
