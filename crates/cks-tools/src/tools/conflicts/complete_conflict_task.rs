//! `complete_conflict_task`: a claimed conflict task was resolved; it leaves the queue for good.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use cks_runtime::store::TaskRef;

use super::{store_error, task_not_found};
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Named, Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The task_id returned by claim_conflict_task.
    pub(crate) task_id: i64,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    completed: bool,
    supported: bool,
    task_id: i64,
}

pub(crate) struct CompleteConflictTask;

#[async_trait::async_trait]
impl Tool for CompleteConflictTask {
    type Input = Input;
    type Output = Output;
    const NAMED: &'static [(&'static str, Named)] = &[("task_id", Named::Task)];
    const TITLE: &'static str = "Complete a conflict task";
    const META: ToolMeta = ToolMeta {
        name: "complete_conflict_task",
        description: "Mark a conflict task (claimed via claim_conflict_task) as resolved: it is removed from the \
            queue for good. Call it after resolving the conflict itself. Returns {completed: true, supported: true, \
            task_id}; an unknown task_id is the error task_not_found (nothing is changed).",
        mutates_graph: false,
        creates_session: false,
        destructive: true,
        idempotent: false,
        open_world: false,
        session_fields: &[],
        session_checks: &[],
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        if !ctx.runtime.tasks().complete(TaskRef::any(input.task_id)).await.map_err(store_error)? {
            return Err(task_not_found(input.task_id, ""));
        }
        Ok(Output { completed: true, supported: true, task_id: input.task_id })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::testing::{call, context};
    use crate::testing::{claim, queue};

    #[tokio::test]
    async fn a_completed_task_is_gone_and_an_unknown_one_is_an_error() {
        let ctx = context();
        let id = queue(&ctx, "inference_conflict", "s1", json!({})).await;
        claim(&ctx).await;
        let done = call(&ctx, "complete_conflict_task", json!({"task_id": id})).await;
        assert_eq!(done, json!({"completed": true, "supported": true, "task_id": id}));
        assert!(ctx.runtime.tasks().get(id).await.unwrap().is_none());
        let again = call(&ctx, "complete_conflict_task", json!({"task_id": id})).await;
        assert_eq!((again["error"].as_str(), again["task_id"].as_i64()), (Some("task_not_found"), Some(id)));
    }
}
