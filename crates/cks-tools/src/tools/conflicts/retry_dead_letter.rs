//! `retry_dead_letter`: returns a dead-lettered conflict task to the queue, its retry count and
//! error cleared, once what stopped it has been dealt with.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{store_error, task_not_found};
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Named, Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The task_id of a dead-lettered task (from list_dead_lettered_conflicts).
    pub(crate) task_id: i64,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    retried: bool,
    task_id: i64,
}

pub(crate) struct RetryDeadLetter;

#[async_trait::async_trait]
impl Tool for RetryDeadLetter {
    type Input = Input;
    type Output = Output;
    const NAMED: &'static [(&'static str, Named)] = &[("task_id", Named::Task)];
    const TITLE: &'static str = "Retry a dead-lettered task";
    const CHANGES_SERVER: bool = true;
    const META: ToolMeta = ToolMeta {
        name: "retry_dead_letter",
        description: "Return a dead-lettered conflict task (see list_dead_lettered_conflicts) to the queue, \
            claimable again at once with its retry_count and last error cleared; it applies or discards no \
            resolution (see approve_resolution / reject_resolution for that). Returns {retried: true, task_id}; a \
            task_id that names no dead-lettered task is the error task_not_found (with retried: false).",
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
        if !ctx.runtime.tasks().retry_dead(input.task_id).await.map_err(store_error)? {
            return Err(task_not_found(input.task_id, " among the dead-lettered tasks").with("retried", false));
        }
        Ok(Output { retried: true, task_id: input.task_id })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use cks_runtime::store::TaskRef;

    use crate::testing::{call, context};
    use crate::testing::{claim, queue};

    #[tokio::test]
    async fn a_retried_dead_letter_can_be_claimed_again() {
        let ctx = context();
        let id = queue(&ctx, "inference_conflict", "s1", json!({})).await;
        let pending = call(&ctx, "retry_dead_letter", json!({"task_id": id})).await;
        assert_eq!((pending["error"].as_str(), pending["retried"].as_bool()), (Some("task_not_found"), Some(false)));
        assert!(ctx.runtime.tasks().dead_letter(TaskRef::any(id), "stuck").await.unwrap());
        assert_eq!(
            call(&ctx, "retry_dead_letter", json!({"task_id": id})).await,
            json!({"retried": true, "task_id": id})
        );
        let task = claim(&ctx).await;
        assert_eq!((task["task_id"].as_i64(), task["retry_count"].as_u64()), (Some(id), Some(0)));
    }
}
