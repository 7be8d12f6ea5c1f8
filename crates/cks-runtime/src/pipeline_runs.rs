//! Pipeline runs, kept in the store so they outlive the server that started them and every server
//! on the store lists the same runs: a run's header (what `start_pipeline` was asked for) and one
//! work record per unit of work a step did (an object researched or reviewed, a run synthesized or
//! arbitrated).
//!
//! A header is a setting under `pipeline_run.<session>.<run>`; a work record a setting under
//! `pipeline_work.<session>.<run>.<step>.<unit>`. Each work record is written only by the worker
//! holding the task for that unit, so no two writers ever race on one key; what a run looks like as
//! a whole is derived from its records when it is read.

use serde::{Deserialize, Serialize};

use crate::error::RuntimeError;
use crate::runtime::Runtime;

pub(crate) const RUN: &str = "pipeline_run.";
pub(crate) const WORK: &str = "pipeline_work.";

/// What a run was started with.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PipelineRun {
    pub run_id: String,
    /// The session the run works on (the sandbox, when it was started in one).
    pub session_id: String,
    /// The session the sandbox was forked from, when the run works in a sandbox.
    pub parent_session_id: Option<String>,
    /// `sequential` or `concurrent`, as asked (recorded; the pipeline process works one task at a time).
    pub mode: String,
    pub schema_version: String,
    /// The objects the run researches, in the order given.
    pub object_ids: Vec<String>,
    pub started_at: String,
    /// 1 for a run's first start, one more for each restart of the same run; tasks of an earlier
    /// attempt are dropped when they come up.
    pub attempt: u32,
}

/// Where one unit of work stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkStatus {
    /// Done; its output is committed (or there was nothing to commit).
    #[default]
    Completed,
    /// The last attempt failed; the task waits for its retry.
    Retrying,
    /// Given up: dead-lettered, or stopped by the run's token budget.
    Failed,
}

/// One unit of work of a step.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PipelineWork {
    /// `Researcher`, `Reviewer`, `Synthesizer` or `Arbiter`.
    pub step: String,
    /// The object researched or reviewed; empty for the steps that work on the whole run.
    pub unit: String,
    pub status: WorkStatus,
    /// When the task that did it was claimed.
    pub started_at: String,
    pub finished_at: String,
    pub task_id: i64,
    pub error: Option<String>,
    /// The dead-lettered task, when the work was given up that way.
    pub dead_letter_task_id: Option<i64>,
    /// Ids of the objects the work committed (or found committed by an earlier attempt).
    pub outputs: Vec<String>,
    /// The Reviewer's verdict.
    pub approved: Option<bool>,
    /// Why nothing was asked of the model, when nothing was (nothing to synthesize, no contradiction).
    pub note: Option<String>,
    pub version_id: Option<String>,
    pub provider: Option<String>,
    pub model: Option<String>,
    /// LLM tokens (input and output) spent on this unit, every attempt counted.
    pub tokens: u64,
}

fn run_key(session_id: &str, run_id: &str) -> String {
    format!("{RUN}{session_id}.{run_id}")
}

fn work_prefix(session_id: &str, run_id: &str) -> String {
    format!("{WORK}{session_id}.{run_id}.")
}

fn work_key(session_id: &str, run_id: &str, step: &str, unit: &str) -> String {
    format!("{}{step}.{unit}", work_prefix(session_id, run_id))
}

fn decode<T: for<'de> Deserialize<'de>>(value: &str) -> Option<T> {
    serde_json::from_str(value).ok()
}

impl Runtime {
    /// Writes a run's header and forgets its earlier work records (a restart starts clean).
    pub async fn start_pipeline_run(&self, run: &PipelineRun) -> Result<(), RuntimeError> {
        for (key, _) in self.store().list_settings(&work_prefix(&run.session_id, &run.run_id)).await? {
            self.store().delete_setting(&key).await?;
        }
        let value = serde_json::to_string(run).expect("runs encode");
        Ok(self.store().save_setting(&run_key(&run.session_id, &run.run_id), &value).await?)
    }

    /// A run's header.
    pub async fn pipeline_run(&self, session_id: &str, run_id: &str) -> Result<Option<PipelineRun>, RuntimeError> {
        Ok(self.store().load_setting(&run_key(session_id, run_id)).await?.as_deref().and_then(decode))
    }

    /// Every run of a session, in no particular order.
    pub async fn pipeline_runs(&self, session_id: &str) -> Result<Vec<PipelineRun>, RuntimeError> {
        let rows = self.store().list_settings(&format!("{RUN}{session_id}.")).await?;
        Ok(rows.iter().filter_map(|(_, value)| decode(value)).collect())
    }

    /// Writes one unit's work record, replacing the earlier one for the same unit.
    pub async fn record_pipeline_work(
        &self,
        session_id: &str,
        run_id: &str,
        work: &PipelineWork,
    ) -> Result<(), RuntimeError> {
        let value = serde_json::to_string(work).expect("work records encode");
        Ok(self.store().save_setting(&work_key(session_id, run_id, &work.step, &work.unit), &value).await?)
    }

    /// One unit's work record.
    pub async fn pipeline_work_of(
        &self,
        session_id: &str,
        run_id: &str,
        step: &str,
        unit: &str,
    ) -> Result<Option<PipelineWork>, RuntimeError> {
        let key = work_key(session_id, run_id, step, unit);
        Ok(self.store().load_setting(&key).await?.as_deref().and_then(decode))
    }

    /// Every work record of a run.
    pub async fn pipeline_work(&self, session_id: &str, run_id: &str) -> Result<Vec<PipelineWork>, RuntimeError> {
        let rows = self.store().list_settings(&work_prefix(session_id, run_id)).await?;
        Ok(rows.iter().filter_map(|(_, value)| decode(value)).collect())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::RuntimeConfig;
    use crate::store::memory::MemoryStore;

    #[tokio::test]
    async fn runs_and_their_work_are_kept_per_session_and_a_restart_forgets_the_work() {
        let runtime = Runtime::new(Arc::new(MemoryStore::new()), RuntimeConfig::default());
        let run = PipelineRun {
            run_id: "r1".into(),
            session_id: "s1".into(),
            object_ids: vec!["a.b".into(), "c".into()],
            attempt: 1,
            ..PipelineRun::default()
        };
        runtime.start_pipeline_run(&run).await.unwrap();
        let other = PipelineRun { run_id: "r2".into(), session_id: "s2".into(), ..run.clone() };
        runtime.start_pipeline_run(&other).await.unwrap();
        assert_eq!(runtime.pipeline_runs("s1").await.unwrap(), std::slice::from_ref(&run));
        assert_eq!(runtime.pipeline_run("s1", "r1").await.unwrap().as_ref(), Some(&run));
        assert_eq!(runtime.pipeline_run("s1", "r2").await.unwrap(), None);

        // A unit id may hold dots: it is the rest of the key.
        let researched =
            PipelineWork { step: "Researcher".into(), unit: "a.b".into(), tokens: 7, ..Default::default() };
        let retrying = PipelineWork {
            step: "Researcher".into(),
            unit: "c".into(),
            status: WorkStatus::Retrying,
            ..Default::default()
        };
        runtime.record_pipeline_work("s1", "r1", &researched).await.unwrap();
        runtime.record_pipeline_work("s1", "r1", &retrying).await.unwrap();
        let done = PipelineWork { status: WorkStatus::Completed, ..retrying.clone() };
        runtime.record_pipeline_work("s1", "r1", &done).await.unwrap();
        let mut work = runtime.pipeline_work("s1", "r1").await.unwrap();
        work.sort_by(|a, b| a.unit.cmp(&b.unit));
        assert_eq!(work, [researched.clone(), done]);
        assert_eq!(runtime.pipeline_work_of("s1", "r1", "Researcher", "a.b").await.unwrap(), Some(researched));
        assert!(runtime.pipeline_work("s2", "r2").await.unwrap().is_empty());

        let restarted = PipelineRun { attempt: 2, ..run };
        runtime.start_pipeline_run(&restarted).await.unwrap();
        assert!(runtime.pipeline_work("s1", "r1").await.unwrap().is_empty());
        assert_eq!(runtime.pipeline_run("s1", "r1").await.unwrap().unwrap().attempt, 2);
    }
}
