//! `review_dead_letter`: one dead-lettered conflict task with a ready-to-apply resolution for
//! approve_resolution. Reads only.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::TaskView;
use super::review::{dead_task, propose};
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Named, Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// A dead-lettered task (from list_dead_lettered_conflicts).
    pub(crate) task_id: i64,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    #[serde(flatten)]
    task: TaskView,
    last_error: Option<String>,
    /// {tool, arguments} to pass to approve_resolution as 'resolution', or {error, message} when no
    /// resolution can be proposed.
    proposed_resolution: Value,
}

pub(crate) struct ReviewDeadLetter;

#[async_trait::async_trait]
impl Tool for ReviewDeadLetter {
    type Input = Input;
    type Output = Output;
    const NAMED: &'static [(&'static str, Named)] = &[("task_id", Named::Task)];
    const TITLE: &'static str = "Review a dead-lettered task";
    const META: ToolMeta = ToolMeta {
        name: "review_dead_letter",
        description: "Review one dead-lettered conflict task: returns {task_id, task_type, session_id, payload, \
            retry_count, last_error, proposed_resolution}, where proposed_resolution is {tool, arguments} ready for \
            approve_resolution (contradiction_detected: resolve_contradiction removing one relation; \
            temporal_conflict: resolve_temporal_conflict extending valid_until by 30 days; provenance_conflict: \
            refresh_verification checking the source again; duplicate_candidate: resolve_duplicate merging into \
            the task's keep_id; all with commit), or \
            {error: 'cannot_propose' | 'unknown_task_type', message}. Read-only. A task that is not dead-lettered is \
            the error task_not_dead_lettered.",
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
        let task = dead_task(ctx, input.task_id).await?;
        let last_error = task.last_error.clone();
        let view = TaskView::from(task.clone());
        let proposed_resolution = propose(&task, &view.payload);
        Ok(Output { task: view, last_error, proposed_resolution })
    }
}
