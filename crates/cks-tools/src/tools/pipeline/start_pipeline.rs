//! `start_pipeline`: queues a pipeline run over a session's objects — one
//! `pipeline_research_request` task per object — and records the run in the store. It only
//! queues: the pipeline process (`CKS_EMBED_PIPELINE_AGENT`) on any server of the store does the
//! work, and `list_pipeline_runs` shows how far it got.
//!
//! Better than the reference, deliberately: unknown object ids are refused instead of queued to
//! fail later; by default the run covers the session's objects but not its relations nor the
//! nodes earlier runs wrote; and starting a run that is still under way queues nothing twice.

use crate::ErrorCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::HashSet;

use cks_core::KnowledgeStructure;
use cks_runtime::RuntimeError;
use cks_runtime::pipeline_runs::PipelineRun;

use super::{Payload, RunView, Step, enqueue, has_open_tasks, run_id};
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Coercion, SessionCheck, Tool, ToolMeta};
use crate::tools::branches::branch_failed;

#[derive(Clone, Copy, Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Mode {
    #[default]
    Sequential,
    Concurrent,
}

impl Mode {
    fn as_str(self) -> &'static str {
        match self {
            Mode::Sequential => "sequential",
            Mode::Concurrent => "concurrent",
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The session to run on.
    pub(crate) session_id: String,
    /// The objects to run on (default: every object, not relations nor earlier runs' nodes; an
    /// unknown id is object_not_found).
    pub(crate) object_ids: Option<Vec<String>>,
    /// 'sequential' (default) or 'concurrent' (only recorded: tasks run one at a time).
    pub(crate) mode: Option<Mode>,
    /// Run in a sandbox: fork this session and run on the fork, over its objects (merge back with
    /// merge_branch).
    pub(crate) parent_session_id: Option<String>,
    /// Folded into the run id (default 'v1').
    pub(crate) schema_version: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    /// The run's id (null when there was nothing to run on).
    run_id: Option<String>,
    mode: &'static str,
    /// The objects this call queued research for.
    enqueued_objects: Vec<String>,
    /// started, already_running (the same run is still under way: nothing queued) or no_objects.
    status: &'static str,
    /// Always true: every store of this server keeps the task queue.
    supported: bool,
    /// The session the run works on.
    #[serde(skip_serializing_if = "Option::is_none")]
    session_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sandbox_session_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parent_session_id: Option<String>,
    /// 1 for a run's first start, one more for each restart.
    #[serde(skip_serializing_if = "Option::is_none")]
    attempt: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

pub(crate) struct StartPipeline;

#[async_trait::async_trait]
impl Tool for StartPipeline {
    type Input = Input;
    type Output = Output;
    const ARGUMENT_COERCIONS: &'static [(&'static str, Coercion)] =
        &[("object_ids", Coercion::ListOfOne), ("schema_version", Coercion::Text)];
    const TITLE: &'static str = "Start a pipeline run";
    const META: ToolMeta = ToolMeta {
        name: "start_pipeline",
        description: "Queue a pipeline run over a session's objects: per object the Researcher writes a finding and \
            the Reviewer judges it, then the Synthesizer merges approved findings into new objects and the Arbiter \
            settles contradictions, each step one LLM call committed to the session. It only queues and answers at \
            once; a pipeline process does the work, and list_pipeline_runs shows progress. Returns {run_id, status: \
            'started', enqueued_objects, session_id, sandbox_session_id}; status 'already_running' queues nothing, \
            'no_objects' when there are none.",
        mutates_graph: false,
        creates_session: true,
        destructive: false,
        idempotent: false,
        open_world: false,
        session_fields: &["session_id", "parent_session_id"],
        session_checks: &[SessionCheck::open("session_id"), SessionCheck::exists("parent_session_id").if_given()],
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        let mode = input.mode.unwrap_or_default().as_str();
        let parent = input.parent_session_id.filter(|p| !p.is_empty());
        let source = parent.clone().unwrap_or_else(|| input.session_id.clone());
        let asked = input.object_ids.filter(|ids| !ids.is_empty());
        let object_ids = ctx.runtime.read(&source, |s, _| objects(s, asked.as_deref())).await??;
        if object_ids.is_empty() {
            return Ok(Output {
                run_id: None,
                mode,
                enqueued_objects: Vec::new(),
                status: "no_objects",
                supported: true,
                session_id: None,
                sandbox_session_id: None,
                parent_session_id: None,
                attempt: None,
                message: Some(format!("Session '{source}' has no objects to run the pipeline on.")),
            });
        }
        let schema_version = input.schema_version.filter(|v| !v.is_empty()).unwrap_or_else(|| "v1".into());
        let run_id = run_id(&source, &object_ids, &schema_version);
        let target = match &parent {
            None => input.session_id,
            Some(parent) => {
                let metadata = ctx.version_metadata(Self::META.name, [("run_id", json!(run_id))]);
                ctx.runtime.create_branch(parent, None, metadata).await.map_err(branch_failed)?.session_id
            }
        };
        let earlier = ctx.runtime.pipeline_run(&target, &run_id).await?;
        let mut output = Output {
            run_id: Some(run_id.clone()),
            mode,
            enqueued_objects: Vec::new(),
            status: "started",
            supported: true,
            session_id: Some(target.clone()),
            sandbox_session_id: parent.is_some().then(|| target.clone()),
            parent_session_id: parent.clone(),
            attempt: None,
            message: None,
        };
        if let Some(earlier) = earlier {
            let work = ctx.runtime.pipeline_work(&target, &run_id).await?;
            let open = has_open_tasks(ctx, &earlier).await.map_err(RuntimeError::from)?;
            if RunView::new(earlier.clone(), &work).unfinished() && open {
                output.status = "already_running";
                output.attempt = Some(earlier.attempt);
                output.message = Some("This run is still under way; nothing was queued again.".into());
                return Ok(output);
            }
            output.attempt = Some(earlier.attempt + 1);
        }
        let run = PipelineRun {
            run_id: run_id.clone(),
            session_id: target,
            parent_session_id: parent,
            mode: mode.to_owned(),
            schema_version,
            object_ids,
            started_at: cks_runtime::runtime::now(),
            attempt: output.attempt.unwrap_or(1),
        };
        output.attempt = Some(run.attempt);
        ctx.runtime.start_pipeline_run(&run).await?;
        for object_id in &run.object_ids {
            let payload = Payload {
                object_id: Some(object_id.clone()),
                run_id: Some(run_id.clone()),
                attempt: run.attempt,
                ..Payload::default()
            };
            enqueue(ctx, &run, Step::Researcher, object_id, &payload).await.map_err(RuntimeError::from)?;
        }
        output.enqueued_objects = run.object_ids;
        Ok(output)
    }
}

/// The objects a run covers: the ones asked for (each once, each an object of the session), or
/// every object that is neither a relation nor written by an earlier run.
fn objects(structure: &KnowledgeStructure, asked: Option<&[String]>) -> Result<Vec<String>, ToolError> {
    let Some(asked) = asked else {
        let agents = Step::ALL.map(Step::agent);
        return Ok(structure
            .objects()
            .filter(|o| !o.is_relation())
            .filter(|o| !o.structure.get("agent").and_then(|a| a.as_str()).is_some_and(|a| agents.contains(&a)))
            .map(|o| o.id().to_owned())
            .collect());
    };
    let mut ids: Vec<String> = Vec::with_capacity(asked.len());
    let mut seen = HashSet::new();
    for id in asked {
        if !seen.insert(id) {
            continue;
        }
        match structure.get(id) {
            None => {
                return Err(ToolError::new(ErrorCode::ObjectNotFound, format!("Object '{id}' is not in the session."))
                    .with("object_id", id.clone()));
            }
            Some(o) if o.is_relation() => {
                return Err(ToolError::invalid_parameter(format!(
                    "'{id}' is a relation; the pipeline researches objects."
                ))
                .with("parameter", "object_ids"));
            }
            Some(_) => ids.push(id.clone()),
        }
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use cks_runtime::store::{TaskFilter, TaskStatus};

    use crate::testing::{call, context, obj, rel, session, structure};

    fn solar() -> Value {
        structure(vec![
            obj("sun", "Star", "Sun", json!({})),
            obj("earth", "Planet", "Earth", json!({})),
            rel("orbits", &["earth", "sun"], "orbits"),
            obj("old-finding", "ReasoningNode", "An earlier run's", json!({"agent": "ResearcherAgent"})),
        ])
    }

    #[tokio::test]
    async fn a_run_queues_one_research_task_per_object_once() {
        let ctx = context();
        let id = session(&ctx, solar()).await;
        let started = call(&ctx, "start_pipeline", json!({"session_id": id})).await;
        let run_id = super::run_id(&id, &["sun".into(), "earth".into()], "v1");
        assert_eq!(
            started,
            json!({"run_id": run_id, "mode": "sequential", "enqueued_objects": ["sun", "earth"], "status": "started",
                   "supported": true, "session_id": id, "attempt": 1}),
            "neither the relation nor an earlier run's node"
        );
        let tasks = ctx.runtime.tasks().list(&TaskFilter::default()).await.unwrap();
        let payloads: Vec<Value> = tasks.iter().map(|t| serde_json::from_str(&t.payload).unwrap()).collect();
        assert_eq!(
            payloads,
            [
                json!({"object_id": "sun", "run_id": run_id, "attempt": 1}),
                json!({"object_id": "earth", "run_id": run_id, "attempt": 1})
            ]
        );
        assert!(tasks.iter().all(|t| t.task_type == "pipeline_research_request" && t.status == TaskStatus::Pending));

        // The same run again while it is queued: nothing more is queued.
        let again = call(&ctx, "start_pipeline", json!({"session_id": id, "mode": "concurrent"})).await;
        assert_eq!((again["status"].as_str(), again["enqueued_objects"].clone()), (Some("already_running"), json!([])));
        assert_eq!(ctx.runtime.tasks().list(&TaskFilter::default()).await.unwrap().len(), 2);

        // Another object set is another run; the mode is recorded, the schema version is in the id.
        let one = call(
            &ctx,
            "start_pipeline",
            json!({"session_id": id, "object_ids": "earth", "mode": "concurrent",
                                                      "schema_version": 2}),
        )
        .await;
        assert_eq!(one["run_id"], super::run_id(&id, &["earth".into()], "2"), "{one}");
        assert_eq!((one["mode"].as_str(), one["enqueued_objects"].clone()), (Some("concurrent"), json!(["earth"])));
    }

    #[tokio::test]
    async fn objects_must_be_the_sessions_and_a_session_needs_some() {
        let ctx = context();
        let id = session(&ctx, solar()).await;
        let start = |args: Value| {
            let ctx = ctx.clone();
            async move { call(&ctx, "start_pipeline", args).await }
        };
        let unknown = start(json!({"session_id": id, "object_ids": ["earth", "pluto"]})).await;
        assert_eq!(
            (unknown["error"].as_str(), unknown["object_id"].as_str()),
            (Some("object_not_found"), Some("pluto"))
        );
        let relation = start(json!({"session_id": id, "object_ids": ["orbits"]})).await;
        assert_eq!(relation["error"], "invalid_parameter");
        assert_eq!(start(json!({"session_id": id, "mode": "parallel"})).await["error"], "invalid_parameter");
        assert_eq!(start(json!({})).await["error"], "missing_parameter");
        let nobody = "00000000-0000-4000-8000-000000000000";
        assert_eq!(start(json!({"session_id": nobody})).await["error"], "session_not_found");
        assert_eq!(start(json!({"session_id": id, "parent_session_id": nobody})).await["error"], "session_not_found");
        assert!(ctx.runtime.tasks().list(&TaskFilter::default()).await.unwrap().is_empty(), "nothing queued");

        let empty = session(&ctx, structure(vec![])).await;
        let nothing = start(json!({"session_id": empty, "object_ids": []})).await;
        assert_eq!(
            (nothing["status"].as_str(), nothing["run_id"].clone(), nothing["supported"].as_bool()),
            (Some("no_objects"), Value::Null, Some(true))
        );
        assert!(nothing["message"].is_string());
    }

    #[tokio::test]
    async fn a_sandboxed_run_works_on_a_fork_and_leaves_the_parent_alone() {
        let ctx = context();
        let id = session(&ctx, solar()).await;
        let started = call(
            &ctx,
            "start_pipeline",
            json!({"session_id": id, "parent_session_id": id,
                                                           "object_ids": ["sun"]}),
        )
        .await;
        let sandbox = started["sandbox_session_id"].as_str().unwrap().to_owned();
        assert_ne!(sandbox, id);
        assert_eq!(
            (started["session_id"].as_str(), started["parent_session_id"].as_str()),
            (Some(sandbox.as_str()), Some(id.as_str()))
        );
        assert_eq!(started["run_id"], super::run_id(&id, &["sun".into()], "v1"), "named after the parent");
        let info = ctx.runtime.info(&sandbox).await.unwrap();
        assert_eq!(info.parent_session_id.as_deref(), Some(id.as_str()));
        let task = &ctx.runtime.tasks().list(&TaskFilter::default()).await.unwrap()[0];
        assert_eq!(task.session_id, sandbox);
        let listed = call(&ctx, "list_pipeline_runs", json!({"session_id": sandbox})).await;
        assert_eq!(listed["runs"][0]["parent_session_id"], id.as_str());
        assert_eq!(call(&ctx, "list_pipeline_runs", json!({"session_id": id})).await["count"], 0);
        assert_eq!(ctx.runtime.list_versions(&id).await.unwrap().len(), 1, "the parent has its first version only");
    }
}
