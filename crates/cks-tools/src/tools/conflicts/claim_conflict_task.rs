//! `claim_conflict_task`: atomically claims the oldest pending conflict task of a type, so that
//! two workers polling at once never take the same one.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{ConflictType, TaskView, store_error};
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// Which kind of conflict task to claim.
    pub(crate) task_type: ConflictType,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    /// The claimed task; null when none is waiting.
    task: Option<TaskView>,
    /// Always true: every store of this server keeps the queue.
    supported: bool,
}

pub(crate) struct ClaimConflictTask;

#[async_trait::async_trait]
impl Tool for ClaimConflictTask {
    type Input = Input;
    type Output = Output;
    const TITLE: &'static str = "Claim a conflict task";
    const CHANGES_SERVER: bool = true;
    const META: ToolMeta = ToolMeta {
        name: "claim_conflict_task",
        description: "Claim the oldest pending conflict task of a type ('gossip_conflict', 'inference_conflict', \
            'contradiction_detected', 'temporal_conflict', 'provenance_conflict' or 'duplicate_candidate') from the durable task queue. The claim is atomic (two workers, or two server replicas, never get the same \
            task) and is a lease: a task not completed, failed or dead-lettered within the lease (5 minutes by \
            default) can be claimed again. Returns {task: {task_id, task_type, session_id, payload, retry_count} or \
            null, supported: true}. Follow up with complete_conflict_task, fail_conflict_task or \
            dead_letter_conflict_task.",
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
        let task = ctx.runtime.tasks().claim(Some(input.task_type.as_str())).await.map_err(store_error)?;
        Ok(Output { task: task.map(TaskView::from), supported: true })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::testing::{call, context};
    use crate::testing::{claim, queue};

    #[tokio::test]
    async fn claims_the_oldest_task_of_the_type_once() {
        let ctx = context();
        queue(&ctx, "gossip_conflict", "s0", json!({})).await;
        let first = queue(&ctx, "inference_conflict", "s1", json!({"inference_id": "i1"})).await;
        let second = queue(&ctx, "inference_conflict", "s2", json!("not an object")).await;
        let task = claim(&ctx).await;
        assert_eq!(
            task,
            json!({"task_id": first, "task_type": "inference_conflict", "session_id": "s1",
                   "payload": {"inference_id": "i1"}, "retry_count": 0})
        );
        assert_eq!(claim(&ctx).await["task_id"], second);
        let none = call(&ctx, "claim_conflict_task", json!({"task_type": "inference_conflict"})).await;
        assert_eq!(none, json!({"task": null, "supported": true}));
        let bad = call(&ctx, "claim_conflict_task", json!({"task_type": "projection"})).await;
        assert_eq!(bad["error"], "invalid_parameter");
    }
}
