//! `reject_resolution`: a person declines to resolve a dead-lettered conflict task; it stays
//! dead-lettered with the reason as its last error.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use cks_runtime::store::TaskRef;

use super::review::dead_task;
use super::store_error;
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Named, Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// A dead-lettered task (from list_dead_lettered_conflicts).
    pub(crate) task_id: i64,
    /// Why, kept as the task's last error.
    pub(crate) reason: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    rejected: bool,
    task_id: i64,
    reason: Option<String>,
}

pub(crate) struct RejectResolution;

#[async_trait::async_trait]
impl Tool for RejectResolution {
    type Input = Input;
    type Output = Output;
    const NAMED: &'static [(&'static str, Named)] = &[("task_id", Named::Task)];
    const TITLE: &'static str = "Reject a resolution";
    const CHANGES_SERVER: bool = true;
    const META: ToolMeta = ToolMeta {
        name: "reject_resolution",
        description: "Decline to resolve a dead-lettered conflict task: it stays dead-lettered, its last error \
            becoming 'Rejected by human: <reason>'. Returns {rejected: true, task_id, reason}; a task that is not \
            dead-lettered is the error task_not_dead_lettered (rejected: false).",
        mutates_graph: false,
        creates_session: false,
        destructive: false,
        idempotent: true,
        open_world: false,
        session_fields: &[],
        session_checks: &[],
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        dead_task(ctx, input.task_id).await.map_err(|e| e.with("rejected", false))?;
        let reason = input.reason.filter(|r| !r.is_empty());
        let error =
            reason.as_ref().map_or_else(|| "Rejected by human.".to_owned(), |r| format!("Rejected by human: {r}"));
        ctx.runtime.tasks().dead_letter(TaskRef::any(input.task_id), &error).await.map_err(store_error)?;
        Ok(Output { rejected: true, task_id: input.task_id, reason })
    }
}
