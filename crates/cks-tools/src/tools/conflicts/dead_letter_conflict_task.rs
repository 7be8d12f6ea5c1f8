//! `dead_letter_conflict_task`: gives up on a claimed conflict task: it stays in the queue as dead
//! for a person to review (list_dead_lettered_conflicts) instead of being retried or dropped.

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
    /// Why the conflict could not be resolved, kept as the task's last error.
    pub(crate) error: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    dead_lettered: bool,
    supported: bool,
    task_id: i64,
}

pub(crate) struct DeadLetterConflictTask;

#[async_trait::async_trait]
impl Tool for DeadLetterConflictTask {
    type Input = Input;
    type Output = Output;
    const NAMED: &'static [(&'static str, Named)] = &[("task_id", Named::Task)];
    const TITLE: &'static str = "Give up on a conflict task";
    const CHANGES_SERVER: bool = true;
    const META: ToolMeta = ToolMeta {
        name: "dead_letter_conflict_task",
        description: "Give up on a conflict task (claimed via claim_conflict_task) that could not be resolved with \
            confidence: it is kept, dead, for review via list_dead_lettered_conflicts (and review_dead_letter, \
            retry_dead_letter) rather than retried or dropped. Returns {dead_lettered: true, supported: true, \
            task_id}; an unknown task_id is the error task_not_found.",
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
        if !ctx.runtime.tasks().dead_letter(task, &input.error).await.map_err(store_error)? {
            return Err(task_not_found(input.task_id, ""));
        }
        Ok(Output { dead_lettered: true, supported: true, task_id: input.task_id })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::testing::{call, context};
    use crate::testing::{claim, queue};

    #[tokio::test]
    async fn a_dead_lettered_task_is_listed_and_never_claimed() {
        let ctx = context();
        let id = queue(&ctx, "inference_conflict", "s1", json!({"k": 1})).await;
        claim(&ctx).await;
        let dead = call(&ctx, "dead_letter_conflict_task", json!({"task_id": id, "error": "ambiguous"})).await;
        assert_eq!(dead, json!({"dead_lettered": true, "supported": true, "task_id": id}));
        assert!(claim(&ctx).await.is_null());
        let listed = call(&ctx, "list_dead_lettered_conflicts", json!({})).await;
        assert_eq!(listed["tasks"][0]["last_error"], "ambiguous");
        let unknown = call(&ctx, "dead_letter_conflict_task", json!({"task_id": 999, "error": "x"})).await;
        assert_eq!(unknown["error"], "task_not_found");
    }
}
