//! `list_dead_lettered_conflicts`: the tasks given up on, oldest first, for review — conflict tasks,
//! and the autonomous processes' tasks (a pipeline step, an enrichment request) too, as the
//! reference's storage lists them, so the studio's dead-letter inbox shows every task a run or a
//! request points to. A report, not a work queue: nothing is claimed or removed.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use cks_runtime::store::{TaskFilter, TaskStatus};

use super::{ConflictType, TaskView, store_error, timestamp};
use crate::bounds::{Cut, Paging};
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// Only dead-lettered tasks of this conflict type (default: every dead-lettered task).
    pub(crate) task_type: Option<ConflictType>,
    /// Only dead-lettered tasks of this session (default: every session).
    pub(crate) session_id: Option<String>,
    #[serde(flatten)]
    pub(crate) paging: Paging,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct DeadTask {
    #[serde(flatten)]
    task: TaskView,
    /// Why it was given up on.
    last_error: Option<String>,
    /// When it was queued.
    created_at: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    tasks: Vec<DeadTask>,
    /// All the dead-lettered tasks found, listed or not.
    count: usize,
    supported: bool,
    #[serde(flatten)]
    cut: Cut,
}

pub(crate) struct ListDeadLetteredConflicts;

#[async_trait::async_trait]
impl Tool for ListDeadLetteredConflicts {
    type Input = Input;
    type Output = Output;
    const TITLE: &'static str = "List dead-lettered tasks";
    const META: ToolMeta = ToolMeta {
        name: "list_dead_lettered_conflicts",
        description: "List the tasks given up on (dead_letter_conflict_task, or failed more often than allowed), \
            oldest first, for review: conflict tasks and the autonomous processes' tasks alike (a pipeline step, an \
            enrichment request); optionally only one conflict task_type ('gossip_conflict', 'inference_conflict', \
            'contradiction_detected', 'temporal_conflict', 'provenance_conflict' or 'duplicate_candidate') or one session. Read-only. \
            Returns {tasks: [{task_id, task_type, session_id, payload, retry_count, last_error, created_at}], count, \
            supported: true}, tasks a page of about 48 KB by default (limit, offset; next_offset when cut).",
        mutates_graph: false,
        creates_session: false,
        destructive: false,
        idempotent: true,
        open_world: false,
        session_fields: &["session_id"],
        session_checks: &[],
        llm_exposed: true,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        let filter = TaskFilter {
            status: Some(TaskStatus::Dead),
            task_type: input.task_type.map(|t| t.as_str().to_owned()),
            session_id: input.session_id.filter(|s| !s.is_empty()),
        };
        let tasks = ctx.runtime.tasks().list(&filter).await.map_err(store_error)?;
        let tasks: Vec<DeadTask> = ctx
            .reachable(tasks, |task| &task.session_id)
            .await?
            .into_iter()
            .map(|task| DeadTask {
                last_error: task.last_error.clone(),
                created_at: timestamp(task.created_at_ms),
                task: TaskView::from(task),
            })
            .collect();
        let count = tasks.len();
        let page = input.paging.page(tasks);
        Ok(Output { count, cut: page.cut(), tasks: page.items, supported: true })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use cks_runtime::store::TaskRef;

    use crate::testing::queue;
    use crate::testing::{call, context};

    #[tokio::test]
    async fn lists_dead_conflicts_by_type_and_session_without_touching_them() {
        let ctx = context();
        let queue_dead = |task_type: &'static str, session: &'static str| {
            let ctx = &ctx;
            async move {
                let id = queue(ctx, task_type, session, json!({"of": session})).await;
                assert!(ctx.runtime.tasks().dead_letter(TaskRef::any(id), "no").await.unwrap());
                id
            }
        };
        let a = queue_dead("inference_conflict", "s1").await;
        let b = queue_dead("gossip_conflict", "s2").await;
        let c = queue_dead("enrichment_request", "s1").await;
        queue(&ctx, "inference_conflict", "s1", json!({})).await;
        let ids = |v: &serde_json::Value| {
            v["tasks"].as_array().unwrap().iter().map(|t| t["task_id"].clone()).collect::<Vec<_>>()
        };

        let all = call(&ctx, "list_dead_lettered_conflicts", json!({})).await;
        assert_eq!((ids(&all), all["count"].as_u64()), (vec![json!(a), json!(b), json!(c)], Some(3)));
        assert_eq!(all["tasks"][0]["payload"], json!({"of": "s1"}));
        let of_s2 = call(&ctx, "list_dead_lettered_conflicts", json!({"session_id": "s2"})).await;
        assert_eq!(ids(&of_s2), [json!(b)]);
        let inference = call(&ctx, "list_dead_lettered_conflicts", json!({"task_type": "inference_conflict"})).await;
        assert_eq!(ids(&inference), [json!(a)]);
        assert_eq!(ids(&call(&ctx, "list_dead_lettered_conflicts", json!({})).await), ids(&all), "nothing drained");
    }

    #[tokio::test]
    async fn a_long_inbox_comes_a_page_at_a_time() {
        let ctx = context();
        let mut queued = Vec::new();
        for i in 0..400 {
            let id = queue(&ctx, "inference_conflict", "s1", json!({"note": "x".repeat(200), "i": i})).await;
            assert!(ctx.runtime.tasks().dead_letter(TaskRef::any(id), "gave up").await.unwrap());
            queued.push(json!(id));
        }
        let mut seen = Vec::new();
        let mut offset = json!(0);
        while !offset.is_null() {
            let page = call(&ctx, "list_dead_lettered_conflicts", json!({"offset": offset})).await;
            assert!(serde_json::to_string(&page).unwrap().len() < crate::bounds::ANSWER_BUDGET + 4096);
            assert_eq!(page["count"], 400, "the count is the whole inbox's");
            seen.extend(page["tasks"].as_array().unwrap().iter().map(|t| t["task_id"].clone()));
            offset = page.get("next_offset").cloned().unwrap_or_default();
        }
        assert_eq!(seen, queued);
        let first = call(&ctx, "list_dead_lettered_conflicts", json!({})).await;
        assert_eq!(first["truncated"], true);
        let all = call(&ctx, "list_dead_lettered_conflicts", json!({"limit": 0})).await;
        assert_eq!(all["tasks"].as_array().unwrap().len(), 400);
        assert!(all.get("truncated").is_none());
    }
}
