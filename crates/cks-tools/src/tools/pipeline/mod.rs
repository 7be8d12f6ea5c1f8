//! Pipeline runs: `start_pipeline` queues a run over a session's objects for the pipeline process
//! (`cks-workers`) — Researcher, then Reviewer for each object, then Synthesizer and Arbiter
//! for the run — and `list_pipeline_runs` shows each run and its steps, from the run's records in
//! the store ([`cks_runtime::pipeline_runs`]).
//!
//! What both sides share lives here: the steps and their task types, a task's payload, the run id,
//! and how a run's status is read from its work records.

mod list_pipeline_runs;
mod start_pipeline;

use cks_runtime::pipeline_runs::{PipelineRun, PipelineWork, WorkStatus};
use cks_runtime::store::{StoreError, TaskFilter, TaskStatus};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::context::ToolContext;
use crate::tool::{Listed, listed};

pub(crate) fn tools() -> Vec<Listed> {
    vec![listed(start_pipeline::StartPipeline), listed(list_pipeline_runs::ListPipelineRuns)]
}

/// A run's steps, in the order a run goes through them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Researcher,
    Reviewer,
    Synthesizer,
    Arbiter,
}

impl Step {
    pub const ALL: [Step; 4] = [Step::Researcher, Step::Reviewer, Step::Synthesizer, Step::Arbiter];

    /// The step's name in run listings (and in work records).
    pub fn name(self) -> &'static str {
        match self {
            Step::Researcher => "Researcher",
            Step::Reviewer => "Reviewer",
            Step::Synthesizer => "Synthesizer",
            Step::Arbiter => "Arbiter",
        }
    }

    /// The name its transitions and nodes carry, as the reference writes them.
    pub fn agent(self) -> &'static str {
        match self {
            Step::Researcher => "ResearcherAgent",
            Step::Reviewer => "ReviewerAgent",
            Step::Synthesizer => "SynthesizerAgent",
            Step::Arbiter => "ArbiterAgent",
        }
    }

    /// The queue the step's tasks wait in.
    pub fn task_type(self) -> &'static str {
        match self {
            Step::Researcher => "pipeline_research_request",
            Step::Reviewer => "pipeline_review_request",
            Step::Synthesizer => "pipeline_synthesis_request",
            Step::Arbiter => "pipeline_arbitration_request",
        }
    }

    /// The `tool` its commits name.
    pub fn tool(self) -> &'static str {
        match self {
            Step::Researcher => "pipeline_researcher_step",
            Step::Reviewer => "pipeline_reviewer_step",
            Step::Synthesizer => "pipeline_synthesizer_step",
            Step::Arbiter => "pipeline_arbiter_step",
        }
    }

    pub fn of_task_type(task_type: &str) -> Option<Step> {
        Step::ALL.into_iter().find(|s| s.task_type() == task_type)
    }

    /// Whether the step works on each object (rather than on the whole run).
    pub fn per_object(self) -> bool {
        matches!(self, Step::Researcher | Step::Reviewer)
    }
}

/// A pipeline task's payload: the reference's keys (`object_id`, `reasoning_node_id`,
/// `object_ids`, `run_id`) and the run's attempt.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Payload {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_id: Option<String>,
    /// The finding a review is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_node_id: Option<String>,
    /// The objects a synthesis or an arbitration covers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub object_ids: Vec<String>,
    #[serde(default)]
    pub run_id: Option<String>,
    #[serde(default)]
    pub attempt: u32,
}

/// Queues `step`'s task for `unit` of `run` (once per attempt: a second call while the first task
/// exists queues nothing); whether a task was queued.
pub async fn enqueue(
    ctx: &ToolContext,
    run: &PipelineRun,
    step: Step,
    unit: &str,
    payload: &Payload,
) -> Result<bool, StoreError> {
    let key = format!("pipeline:{}:{}:{}:{}:{unit}", run.session_id, run.run_id, run.attempt, step.name());
    let payload = serde_json::to_value(payload).expect("payloads encode");
    Ok(ctx.runtime.tasks().enqueue(step.task_type(), &run.session_id, &payload, Some(key)).await?.is_some())
}

/// Whether a run has a task waiting or in progress in its current attempt.
pub(crate) async fn has_open_tasks(ctx: &ToolContext, run: &PipelineRun) -> Result<bool, StoreError> {
    let filter = TaskFilter { status: None, task_type: None, session_id: Some(run.session_id.clone()) };
    let tasks = ctx.runtime.tasks().list(&filter).await?;
    Ok(tasks.iter().any(|task| {
        task.status != TaskStatus::Dead
            && Step::of_task_type(&task.task_type).is_some()
            && serde_json::from_str::<Payload>(&task.payload)
                .is_ok_and(|p| p.run_id.as_deref() == Some(&run.run_id) && p.attempt == run.attempt)
    }))
}

/// A run's id: the reference's `pipeline_run_hash`, SHA-256 of the JSON text Python's
/// `json.dumps(..., sort_keys=True)` writes for the session, the sorted object ids and the schema
/// version, so the same run gets the same id on both servers.
pub(crate) fn run_id(session_id: &str, object_ids: &[String], schema_version: &str) -> String {
    let mut sorted: Vec<&String> = object_ids.iter().collect();
    sorted.sort();
    let mut text = String::from("{\"object_ids\": [");
    for (i, id) in sorted.iter().enumerate() {
        if i > 0 {
            text.push_str(", ");
        }
        python_json_string(&mut text, id);
    }
    text.push_str("], \"parent_session_id\": ");
    python_json_string(&mut text, session_id);
    text.push_str(", \"schema_version\": ");
    python_json_string(&mut text, schema_version);
    text.push('}');
    let digest = Sha256::digest(text.as_bytes());
    digest.iter().fold(String::with_capacity(64), |mut hex, byte| {
        let _ = write!(hex, "{byte:02x}");
        hex
    })
}

/// A string as Python's `json.dumps` writes it by default: ASCII only, everything else escaped.
fn python_json_string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='\u{7f}' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
        }
    }
    out.push('"');
}

/// One step of a run, as `list_pipeline_runs` shows it.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct StepView {
    /// Researcher, Reviewer, Synthesizer or Arbiter.
    name: &'static str,
    /// pending, active, completed or failed.
    status: &'static str,
    started_at: Option<String>,
    completed_at: Option<String>,
    /// Why the step failed (or, while it is active, why its last attempt failed).
    error: Option<String>,
    /// The dead-lettered task of a failed step, for review_dead_letter / retry_dead_letter.
    dead_letter_task_id: Option<i64>,
    /// Ids of the objects the step committed.
    outputs: Vec<String>,
    /// LLM tokens the step spent.
    tokens_spent: u64,
    /// Reviewer only: the objects whose finding was approved.
    #[serde(skip_serializing_if = "Option::is_none")]
    approved: Option<Vec<String>>,
    /// Reviewer only: the objects whose finding was rejected (left out of the synthesis).
    #[serde(skip_serializing_if = "Option::is_none")]
    rejected: Option<Vec<String>>,
    /// Why the step asked the model nothing, when it did not (nothing approved, no contradiction).
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<String>,
}

/// A run, as `list_pipeline_runs` shows it.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct RunView {
    run_id: String,
    /// The session the run works on (its sandbox, when it was started in one).
    session_id: String,
    /// queued, running, completed or failed.
    status: &'static str,
    started_at: String,
    /// When a step last did something (started_at before any did).
    updated_at: String,
    /// The objects the run was started on, sorted.
    object_ids: Vec<String>,
    /// Researcher, Reviewer, Synthesizer, Arbiter, in the order a run goes through them.
    steps: Vec<StepView>,
    /// sequential or concurrent, as asked.
    mode: String,
    schema_version: String,
    /// The session the run's sandbox was forked from.
    #[serde(skip_serializing_if = "Option::is_none")]
    parent_session_id: Option<String>,
    /// 1, plus one per restart of the same run.
    attempt: u32,
    /// LLM tokens the run spent.
    tokens_spent: u64,
}

impl RunView {
    /// The run as its header and work records say it stands.
    pub(crate) fn new(run: PipelineRun, work: &[PipelineWork]) -> Self {
        let steps: Vec<StepView> = Step::ALL.into_iter().map(|step| step_view(step, &run, work)).collect();
        let status = if steps.iter().any(|s| s.status == "failed") {
            "failed"
        } else if steps.last().is_some_and(|s| s.status == "completed") {
            "completed"
        } else if work.is_empty() {
            "queued"
        } else {
            "running"
        };
        let updated_at = work
            .iter()
            .flat_map(|w| [&w.started_at, &w.finished_at])
            .filter(|at| !at.is_empty())
            .max()
            .filter(|at| **at > run.started_at)
            .cloned()
            .unwrap_or_else(|| run.started_at.clone());
        let mut object_ids = run.object_ids;
        object_ids.sort();
        RunView {
            run_id: run.run_id,
            session_id: run.session_id,
            status,
            started_at: run.started_at,
            updated_at,
            object_ids,
            steps,
            mode: run.mode,
            schema_version: run.schema_version,
            parent_session_id: run.parent_session_id,
            attempt: run.attempt,
            tokens_spent: work.iter().map(|w| w.tokens).sum(),
        }
    }

    /// Whether the run is still queued or running.
    pub(crate) fn unfinished(&self) -> bool {
        matches!(self.status, "queued" | "running")
    }

    pub(crate) fn updated_at(&self) -> &str {
        &self.updated_at
    }

    pub(crate) fn run_id(&self) -> &str {
        &self.run_id
    }
}

/// The units a step works on: each object, or the run as a whole ("").
pub(crate) fn units(step: Step, run: &PipelineRun) -> Vec<String> {
    if step.per_object() { run.object_ids.clone() } else { vec![String::new()] }
}

fn step_view(step: Step, run: &PipelineRun, work: &[PipelineWork]) -> StepView {
    let by_unit: BTreeMap<&str, &PipelineWork> =
        work.iter().filter(|w| w.step == step.name()).map(|w| (w.unit.as_str(), w)).collect();
    let units = units(step, run);
    let records: Vec<&PipelineWork> = units.iter().filter_map(|u| by_unit.get(u.as_str()).copied()).collect();
    let failed = records.iter().find(|w| w.status == WorkStatus::Failed);
    let done = |w: &&&PipelineWork| w.status == WorkStatus::Completed;
    let status = if failed.is_some() {
        "failed"
    } else if records.len() == units.len() && records.iter().all(|w| done(&w)) {
        "completed"
    } else if records.is_empty() {
        "pending"
    } else {
        "active"
    };
    let error =
        failed.or_else(|| records.iter().find(|w| w.status == WorkStatus::Retrying)).and_then(|w| w.error.clone());
    let verdicts = |approved: bool| {
        (step == Step::Reviewer).then(|| {
            records.iter().filter(|w| done(w) && w.approved == Some(approved)).map(|w| w.unit.clone()).collect()
        })
    };
    StepView {
        name: step.name(),
        status,
        started_at: records.iter().map(|w| &w.started_at).filter(|at| !at.is_empty()).min().cloned(),
        completed_at: (status == "completed").then(|| records.iter().map(|w| &w.finished_at).max().cloned()).flatten(),
        error,
        dead_letter_task_id: failed.and_then(|w| w.dead_letter_task_id),
        outputs: records.iter().flat_map(|w| w.outputs.iter().cloned()).collect(),
        tokens_spent: records.iter().map(|w| w.tokens).sum(),
        approved: verdicts(true),
        rejected: verdicts(false),
        note: records.iter().find_map(|w| w.note.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_are_the_references() {
        let ids = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            run_id("8bfb2fb4-cfdb-427c-bbdd-15c81ad337a3", &ids(&["sun", "earth", "r"]), "v1"),
            "c8ea98d72fcb87011d00854ba5fbb4398f5ef19085b63d25c0abd8a37e8bd0d6"
        );
        assert_eq!(
            run_id("s", &ids(&["größe", "東京", "emoji-🚀", "q\"\\\n\u{1}"]), "v1"),
            "e30e8e1f452f4aee0c484f6b0cebad5301d4a492308fb3e3d095073dc697b33a",
            "escaped as Python escapes"
        );
    }

    fn work(step: Step, unit: &str, status: WorkStatus, at: &str) -> PipelineWork {
        PipelineWork {
            step: step.name().into(),
            unit: unit.into(),
            status,
            started_at: at.into(),
            finished_at: at.into(),
            tokens: 10,
            ..PipelineWork::default()
        }
    }

    #[test]
    fn a_runs_status_follows_its_work() {
        let run = PipelineRun {
            run_id: "r".into(),
            object_ids: vec!["b".into(), "a".into()],
            started_at: "2026-01-01T00:00:00Z".into(),
            attempt: 1,
            ..PipelineRun::default()
        };
        let view = |work: &[PipelineWork]| serde_json::to_value(RunView::new(run.clone(), work)).unwrap();
        let queued = view(&[]);
        assert_eq!(
            (queued["status"].as_str(), queued["object_ids"].clone()),
            (Some("queued"), serde_json::json!(["a", "b"]))
        );
        let names: Vec<&str> =
            queued["steps"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["Researcher", "Reviewer", "Synthesizer", "Arbiter"]);

        let mut records = vec![work(Step::Researcher, "a", WorkStatus::Completed, "2026-01-01T00:00:01Z")];
        let running = view(&records);
        assert_eq!(
            (running["status"].as_str(), running["steps"][0]["status"].as_str()),
            (Some("running"), Some("active"))
        );
        assert_eq!(running["updated_at"], "2026-01-01T00:00:01Z");

        let mut retrying = work(Step::Researcher, "b", WorkStatus::Retrying, "2026-01-01T00:00:02Z");
        retrying.error = Some("provider down".into());
        records.push(retrying);
        assert_eq!(view(&records)["steps"][0]["error"], "provider down", "the last attempt's error shows while active");

        let mut reviewed = work(Step::Reviewer, "a", WorkStatus::Completed, "2026-01-01T00:00:03Z");
        reviewed.approved = Some(false);
        records[1].status = WorkStatus::Completed;
        records.push(reviewed);
        let review = &view(&records)["steps"][1];
        assert_eq!((review["status"].as_str(), review["rejected"].clone()), (Some("active"), serde_json::json!(["a"])));

        let mut dead = work(Step::Reviewer, "b", WorkStatus::Failed, "2026-01-01T00:00:04Z");
        dead.dead_letter_task_id = Some(7);
        dead.error = Some("gave up".into());
        records.push(dead);
        let failed = view(&records);
        assert_eq!(failed["status"], "failed");
        assert_eq!(
            (failed["steps"][1]["dead_letter_task_id"].as_i64(), failed["tokens_spent"].as_u64()),
            (Some(7), Some(40))
        );

        records.pop();
        records.push(work(Step::Reviewer, "b", WorkStatus::Completed, "2026-01-01T00:00:05Z"));
        records.push(work(Step::Synthesizer, "", WorkStatus::Completed, "2026-01-01T00:00:06Z"));
        records.push(work(Step::Arbiter, "", WorkStatus::Completed, "2026-01-01T00:00:07Z"));
        let completed = view(&records);
        assert_eq!(completed["status"], "completed");
        assert_eq!(completed["steps"][3]["completed_at"], "2026-01-01T00:00:07Z");
        assert!(completed["steps"][2].get("approved").is_none(), "verdicts are the Reviewer's");
    }
}
