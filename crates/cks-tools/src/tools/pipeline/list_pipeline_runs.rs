//! `list_pipeline_runs`: a session's pipeline runs, most recently updated first, each with its four
//! steps, read from the runs' records in the store (so every server on the store answers alike,
//! and a run survives a restart).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::RunView;
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{SessionCheck, Tool, ToolMeta};

/// Runs listed when 'limit' is absent or 0.
const DEFAULT_LIMIT: usize = 50;

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The session (a sandbox run is listed under its sandbox).
    pub(crate) session_id: String,
    /// Most runs to return (default 50; 0: the default).
    pub(crate) limit: Option<u32>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    runs: Vec<RunView>,
    /// How many runs are returned.
    count: usize,
}

pub(crate) struct ListPipelineRuns;

#[async_trait::async_trait]
impl Tool for ListPipelineRuns {
    type Input = Input;
    type Output = Output;
    const TITLE: &'static str = "List pipeline runs";
    const META: ToolMeta = ToolMeta {
        name: "list_pipeline_runs",
        description: "A session's pipeline runs (from start_pipeline), most recently updated first. Each {run_id, \
            status (queued, running, completed or failed), object_ids, steps: [{name, status, error, outputs (object \
            ids)}], attempt, tokens_spent}; the steps are Researcher, Reviewer, Synthesizer and Arbiter. Returns \
            {runs, count}.",
        mutates_graph: false,
        creates_session: false,
        destructive: false,
        idempotent: true,
        open_world: false,
        session_fields: &["session_id"],
        session_checks: &[SessionCheck::exists("session_id")],
        llm_exposed: true,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        let limit = match input.limit {
            None | Some(0) => DEFAULT_LIMIT,
            Some(n) => n as usize,
        };
        let mut runs = Vec::new();
        for mut run in ctx.runtime.pipeline_runs(&input.session_id).await? {
            let work = ctx.runtime.pipeline_work(&run.session_id, &run.run_id).await?;
            // The sandbox's parent, which a caller the sandbox was shared with may not reach.
            run.parent_session_id = ctx.reachable_id(run.parent_session_id).await?;
            runs.push(RunView::new(run, &work));
        }
        runs.sort_by(|a, b| b.updated_at().cmp(a.updated_at()).then_with(|| a.run_id().cmp(b.run_id())));
        runs.truncate(limit);
        Ok(Output { count: runs.len(), runs })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use std::sync::Arc;

    use cks_runtime::pipeline_runs::{PipelineWork, WorkStatus};
    use cks_runtime::store::sqlite::SqliteStore;
    use cks_runtime::{Runtime, RuntimeConfig};

    use crate::ToolContext;
    use crate::testing::{call, context, obj, session, structure};

    #[tokio::test]
    async fn runs_are_listed_most_recently_updated_first_and_limited() {
        let ctx = context();
        let id =
            session(&ctx, structure(vec![obj("a", "Thing", "A", json!({})), obj("b", "Thing", "B", json!({}))])).await;
        assert_eq!(call(&ctx, "list_pipeline_runs", json!({"session_id": id})).await, json!({"runs": [], "count": 0}));
        let first = call(&ctx, "start_pipeline", json!({"session_id": id, "object_ids": ["a"]})).await;
        let second = call(&ctx, "start_pipeline", json!({"session_id": id, "object_ids": ["b"]})).await;
        // The first run moves on: it is the most recently updated.
        let run_id = first["run_id"].as_str().unwrap();
        let work = PipelineWork {
            step: "Researcher".into(),
            unit: "a".into(),
            status: WorkStatus::Completed,
            started_at: "2999-01-01T00:00:00Z".into(),
            finished_at: "2999-01-01T00:00:01Z".into(),
            outputs: vec!["research-a".into()],
            ..PipelineWork::default()
        };
        ctx.runtime.record_pipeline_work(&id, run_id, &work).await.unwrap();

        let listed = call(&ctx, "list_pipeline_runs", json!({"session_id": id})).await;
        assert_eq!(listed["count"], 2);
        let runs = listed["runs"].as_array().unwrap();
        assert_eq!(
            (runs[0]["run_id"].clone(), runs[1]["run_id"].clone()),
            (first["run_id"].clone(), second["run_id"].clone())
        );
        assert_eq!((runs[0]["status"].as_str(), runs[1]["status"].as_str()), (Some("running"), Some("queued")));
        assert_eq!(runs[0]["updated_at"], "2999-01-01T00:00:01Z");
        assert_eq!(runs[0]["steps"][0]["outputs"], json!(["research-a"]));
        assert_eq!(
            runs[1]["steps"][0],
            json!({"name": "Researcher", "status": "pending", "started_at": null,
            "completed_at": null, "error": null, "dead_letter_task_id": null, "outputs": [], "tokens_spent": 0})
        );
        assert_eq!((runs[1]["object_ids"].clone(), runs[1]["session_id"].as_str()), (json!(["b"]), Some(id.as_str())));

        let limited = call(&ctx, "list_pipeline_runs", json!({"session_id": id, "limit": 1})).await;
        assert_eq!(
            (limited["count"].as_u64(), limited["runs"][0]["run_id"].clone()),
            (Some(1), first["run_id"].clone())
        );
        assert_eq!(call(&ctx, "list_pipeline_runs", json!({"session_id": id, "limit": 0})).await["count"], 2);
        assert_eq!(
            call(&ctx, "list_pipeline_runs", json!({"session_id": id, "limit": -1})).await["error"],
            "invalid_parameter"
        );
        assert_eq!(call(&ctx, "list_pipeline_runs", json!({})).await["error"], "missing_parameter");
        let nobody = json!({"session_id": "00000000-0000-4000-8000-000000000000"});
        assert_eq!(call(&ctx, "list_pipeline_runs", nobody).await["error"], "session_not_found");
    }

    #[tokio::test]
    async fn runs_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cks.db");
        let open = || {
            let store = SqliteStore::open(&path, &Default::default()).unwrap();
            ToolContext::new(Arc::new(Runtime::new(Arc::new(store), RuntimeConfig::default())))
        };
        let ctx = open();
        let id = session(&ctx, structure(vec![obj("a", "Thing", "A", json!({}))])).await;
        let started = call(&ctx, "start_pipeline", json!({"session_id": id})).await;
        let before = call(&ctx, "list_pipeline_runs", json!({"session_id": id})).await;
        drop(ctx);
        let ctx = open();
        let after = call(&ctx, "list_pipeline_runs", json!({"session_id": id})).await;
        assert_eq!(after, before);
        assert_eq!(after["runs"][0]["run_id"], started["run_id"]);
    }
}
