//! The pipeline process: works through the runs `start_pipeline` queues, one task at a time.
//!
//! A run goes Researcher → Reviewer (each object: a finding, then a verdict on it) → Synthesizer
//! (the approved findings merged into new objects) → Arbiter (the contradictions among the run's
//! objects settled). Each step is a task of its own type, claimed under a lease the process renews
//! while it works, and at most one LLM call, with the step's own output-token limit and the run's
//! token budget; its output is one normal commit whose version metadata names the process, the
//! task, the step, the run, and the provider and model that answered, and its work record (see
//! [`cks_runtime::pipeline_runs`]) is written before the next step's task is queued and the task is
//! completed. A failed attempt (the provider, an unusable answer, a commit) fails the task: retried
//! after its backoff, then dead-lettered, and recorded in the run either way.
//!
//! Every step is idempotent: its nodes have ids made from the run and the content they cover, so a
//! retry, or a task claimed again after a crash, finds the output already committed, records it
//! and moves on without asking the model again.

mod arbiter;
mod researcher;
mod reviewer;
mod synthesizer;

use cks_tools::ErrorCode;
use serde_json::{Map, Value, json};
use std::collections::{BTreeSet, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::watch;

use cks_core::hash::object_hash;
use cks_core::ops::{Operation, PatchMode};
use cks_core::{Identity, KnowledgeObject, KnowledgeStructure};
use cks_llm::ChatRequest;
use cks_runtime::RuntimeError;
use cks_runtime::events::EventKind;
use cks_runtime::pipeline_runs::{PipelineRun, PipelineWork, WorkStatus};
use cks_runtime::store::TaskRow;

use super::{Held, Outcome, Pace, Recorded, Worker};
use cks_tools::services::pipeline::{Payload, Step, enqueue};
use cks_tools::services::{Change, commit_operations};
use cks_tools::services::{TextAnswer, ask_text};

/// The pipeline process's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct PipelineConfig {
    /// Run it (`CKS_EMBED_PIPELINE_AGENT`, or `CKS_EMBEDDED_AGENTS`).
    pub enabled: bool,
    /// How long it waits, idle, before looking for work again (`CKS_PIPELINE_POLL_INTERVAL`).
    pub poll_interval: Duration,
    /// How often it refreshes its liveness record (`CKS_PIPELINE_LIVENESS_INTERVAL`).
    pub liveness_interval: Duration,
    /// LLM tokens it may spend in any hour; over it, it pauses
    /// (`CKS_PIPELINE_TOKEN_BUDGET_PER_HOUR`; 0: no limit).
    pub token_budget_per_hour: u64,
    /// Output tokens of one Researcher call (`CKS_PIPELINE_RESEARCHER_MAX_TOKENS`).
    pub researcher_max_tokens: u32,
    /// Output tokens of one Reviewer call (`CKS_PIPELINE_REVIEWER_MAX_TOKENS`).
    pub reviewer_max_tokens: u32,
    /// Output tokens of one Synthesizer call (`CKS_PIPELINE_SYNTHESIZER_MAX_TOKENS`).
    pub synthesizer_max_tokens: u32,
    /// Output tokens of one Arbiter call (`CKS_PIPELINE_ARBITER_MAX_TOKENS`).
    pub arbiter_max_tokens: u32,
    /// Relation hops around the synthesized objects shown to the Synthesizer
    /// (`CKS_PIPELINE_SYNTHESIZER_QUERY_DEPTH`).
    pub synthesizer_query_depth: u32,
    /// Relation hops around the contended relations shown to the Arbiter
    /// (`CKS_PIPELINE_ARBITER_QUERY_DEPTH`).
    pub arbiter_query_depth: u32,
    /// LLM tokens one run may spend; its steps stop once it has (`CKS_PIPELINE_MAX_TOKENS`).
    pub run_max_tokens: u64,
    /// The same cap in US dollars, at a blended estimate per token (`CKS_PIPELINE_MAX_COST_USD`).
    pub run_max_cost_usd: f64,
}

impl Default for PipelineConfig {
    fn default() -> Self {
        PipelineConfig {
            enabled: false,
            poll_interval: Duration::from_secs(5),
            liveness_interval: Duration::from_secs(30),
            token_budget_per_hour: 100_000,
            researcher_max_tokens: 512,
            reviewer_max_tokens: 256,
            synthesizer_max_tokens: 1024,
            arbiter_max_tokens: 512,
            synthesizer_query_depth: 1,
            arbiter_query_depth: 1,
            run_max_tokens: 100_000,
            run_max_cost_usd: 0.50,
        }
    }
}

impl PipelineConfig {
    pub(crate) fn pace(&self) -> Pace {
        Pace {
            poll_interval: self.poll_interval,
            liveness_interval: self.liveness_interval,
            token_budget_per_hour: self.token_budget_per_hour,
        }
    }
}

/// What a token costs, for `run_max_cost_usd`: the reference's deliberately rough blended price.
const COST_PER_TOKEN_USD: f64 = 0.000_003;
/// The most entries an object's `transition_log` keeps (the oldest go first).
const TRANSITION_LOG_LIMIT: usize = 100;
/// The most neighbouring objects and relations shown to the model around what it works on.
const CONTEXT_LIMIT: usize = 40;
/// Pipeline bookkeeping fields of an object, left out of its content hash and of what the model sees.
const BOOKKEEPING: [&str; 2] = ["current_status", "transition_log"];

pub(super) async fn run(mut worker: Worker, config: PipelineConfig, mut stopped: watch::Receiver<bool>) {
    worker.report().await;
    // Later steps first, so the runs under way finish before new ones start.
    let task_types: Vec<String> = Step::ALL.iter().rev().map(|s| s.task_type().to_owned()).collect();
    while let Some(task) = worker.next_task(&task_types, &mut stopped).await {
        let started_at = cks_runtime::runtime::now();
        match worker.hold(&task, attempt(&worker, &config, &task, &started_at)).await {
            Held::Done(Ok(()), held) => {
                worker.finish(&task, held, &Outcome::Settled).await;
            }
            Held::Done(Err(failure), held) => {
                let recorded = worker.finish(&task, held, &failure.outcome).await;
                failure.record(&worker, &task, recorded).await;
            }
            Held::Lost(why) => worker.abandon(why).await,
        }
    }
    worker.stopped().await;
}

/// A unit of work that did not succeed: what to tell the queue, and the run's record of it.
pub(super) struct Failure {
    outcome: Outcome,
    /// The unit's record, written once the queue has the outcome; none for a task that belongs to
    /// no current run.
    record: Option<(String, String, PipelineWork)>,
}

impl Failure {
    fn without_run(outcome: Outcome) -> Self {
        Failure { outcome, record: None }
    }

    async fn record(self, worker: &Worker, task: &TaskRow, recorded: Recorded) {
        let Some((session_id, run_id, mut work)) = self.record else { return };
        let (status, dead) = match recorded {
            Recorded::Retrying => (WorkStatus::Retrying, None),
            Recorded::DeadLettered => (WorkStatus::Failed, Some(task.task_id)),
            Recorded::Completed => (WorkStatus::Failed, None),
            // Someone else holds the task now: the record is theirs to write.
            Recorded::Unchanged => return,
        };
        if let (Outcome::Failed(_), Recorded::DeadLettered, Some(error)) = (&self.outcome, recorded, &mut work.error) {
            error.push_str(&cks_runtime::tasks::gave_up(task.retry_count + 1));
        }
        work.status = status;
        work.dead_letter_task_id = dead;
        work.finished_at = cks_runtime::runtime::now();
        if let Err(e) = worker.ctx.runtime.record_pipeline_work(&session_id, &run_id, &work).await {
            tracing::warn!(task = task.task_id, error = %e, "could not record a pipeline step's failure");
        }
    }
}

/// Works on one task: finds its run and step, then runs the step.
async fn attempt(worker: &Worker, config: &PipelineConfig, task: &TaskRow, started_at: &str) -> Result<(), Failure> {
    let give_up = |why: String| Failure::without_run(Outcome::Unsettleable(why));
    let step = Step::of_task_type(&task.task_type).ok_or_else(|| give_up("not a pipeline task".into()))?;
    let payload: Payload = serde_json::from_str(&task.payload)
        .map_err(|e| give_up(format!("the task's payload is not a pipeline payload: {e}")))?;
    let run_id = payload.run_id.clone().ok_or_else(|| give_up("the task names no run ('run_id')".into()))?;
    let retry = |e: RuntimeError| Failure::without_run(Outcome::Failed(format!("reading run {run_id}: {e}")));
    let Some(run) = worker.ctx.runtime.pipeline_run(&task.session_id, &run_id).await.map_err(retry)? else {
        return Err(give_up(format!("no pipeline run '{run_id}' in session '{}'", task.session_id)));
    };
    if payload.attempt != run.attempt {
        // Left over from before the run was restarted: the restart queued its own.
        return Ok(());
    }
    let unit = if step.per_object() {
        payload.object_id.clone().ok_or_else(|| give_up("the task names no object ('object_id')".into()))?
    } else {
        String::new()
    };
    let earlier = worker.ctx.runtime.pipeline_work_of(&run.session_id, &run.run_id, step.name(), &unit).await;
    let job = Job {
        worker,
        config,
        task,
        run,
        payload,
        step,
        unit,
        started_at: started_at.to_owned(),
        earlier_tokens: earlier.ok().flatten().map_or(0, |w| w.tokens),
        spent: AtomicU64::new(0),
    };
    // The reference's stages: the one each step takes its object from, and the one it leaves it in.
    let (claims_status, transitioned_to) = match step {
        Step::Researcher => ("awaiting_research", "awaiting_review"),
        Step::Reviewer => ("awaiting_review", "awaiting_synthesis"),
        Step::Synthesizer => ("awaiting_synthesis", "awaiting_arbitration"),
        Step::Arbiter => ("awaiting_arbitration", "resolved"),
    };
    let runtime = &worker.ctx.runtime;
    let (step_name, session_id, object_id) = (step.name().to_owned(), job.run.session_id.clone(), job.unit.clone());
    runtime.emit(EventKind::AgentStepStarted {
        step_name: step_name.clone(),
        session_id: session_id.clone(),
        object_id: object_id.clone(),
        claims_status: claims_status.into(),
    });
    let done = match step {
        Step::Researcher => researcher::research(&job).await,
        Step::Reviewer => reviewer::review(&job).await,
        Step::Synthesizer => synthesizer::synthesize(&job).await,
        Step::Arbiter => arbiter::arbitrate(&job).await,
    };
    let error = match &done {
        Ok(()) => String::new(),
        Err(failure) => match &failure.outcome {
            Outcome::Settled => String::new(),
            Outcome::Failed(why) | Outcome::Unsettleable(why) | Outcome::Dropped(why) => why.clone(),
        },
    };
    runtime.emit(EventKind::AgentStepCompleted {
        step_name,
        session_id,
        object_id,
        succeeded: done.is_ok(),
        transitioned_to: if done.is_ok() { transitioned_to.into() } else { String::new() },
        error,
    });
    done
}

/// One task of a run, as a step works on it.
pub(super) struct Job<'a> {
    worker: &'a Worker,
    config: &'a PipelineConfig,
    task: &'a TaskRow,
    run: PipelineRun,
    payload: Payload,
    step: Step,
    /// The object it works on; empty for the run-wide steps.
    unit: String,
    started_at: String,
    /// Tokens earlier attempts at this unit spent.
    earlier_tokens: u64,
    /// Tokens this attempt spent.
    spent: AtomicU64,
}

/// What a unit of work produced.
#[derive(Default)]
pub(super) struct Produced {
    pub(super) outputs: Vec<String>,
    pub(super) approved: Option<bool>,
    pub(super) note: Option<String>,
    pub(super) version_id: Option<String>,
    pub(super) provider: Option<String>,
    pub(super) model: Option<String>,
}

impl Job<'_> {
    fn tokens(&self) -> u64 {
        self.earlier_tokens + self.spent.load(Ordering::Relaxed)
    }

    fn work(&self, status: WorkStatus, error: Option<String>) -> PipelineWork {
        PipelineWork {
            step: self.step.name().to_owned(),
            unit: self.unit.clone(),
            status,
            started_at: self.started_at.clone(),
            finished_at: cks_runtime::runtime::now(),
            task_id: self.task.task_id,
            error,
            tokens: self.tokens(),
            ..PipelineWork::default()
        }
    }

    fn failure(&self, outcome: Outcome) -> Failure {
        let why = match &outcome {
            Outcome::Settled => None,
            Outcome::Failed(why) | Outcome::Unsettleable(why) | Outcome::Dropped(why) => Some(why.clone()),
        };
        let work = self.work(WorkStatus::Failed, why);
        Failure { outcome, record: Some((self.run.session_id.clone(), self.run.run_id.clone(), work)) }
    }

    /// Worth another attempt.
    pub(super) fn retry(&self, why: String) -> Failure {
        self.failure(Outcome::Failed(why))
    }

    /// No attempt can succeed.
    pub(super) fn give_up(&self, why: String) -> Failure {
        self.failure(Outcome::Unsettleable(why))
    }

    fn session(&self) -> &str {
        &self.run.session_id
    }

    /// Reads the run's session.
    pub(super) async fn read<T: Send + 'static>(
        &self,
        read: impl FnOnce(&KnowledgeStructure) -> T + Send + 'static,
    ) -> Result<T, Failure> {
        match self.worker.ctx.runtime.read(self.session(), move |s, _| read(s)).await {
            Ok(value) => Ok(value),
            Err(e @ (RuntimeError::SessionNotFound(_) | RuntimeError::SessionClosed(_))) => {
                Err(self.give_up(format!("session '{}': {e}", self.session())))
            }
            Err(e) => Err(self.retry(format!("reading session '{}': {e}", self.session()))),
        }
    }

    /// The run's work records.
    pub(super) async fn run_work(&self) -> Result<Vec<PipelineWork>, Failure> {
        self.worker
            .ctx
            .runtime
            .pipeline_work(&self.run.session_id, &self.run.run_id)
            .await
            .map_err(|e| self.retry(format!("reading the run's records: {e}")))
    }

    /// One LLM call for this step, if the run's token budget allows it.
    pub(super) async fn ask(&self, system: &str, prompt: String, max_tokens: u32) -> Result<TextAnswer, Failure> {
        let spent: u64 = self.run_work().await?.iter().map(|w| w.tokens).sum();
        let cost = spent as f64 * COST_PER_TOKEN_USD;
        if spent >= self.config.run_max_tokens || cost >= self.config.run_max_cost_usd {
            return Err(self.failure(Outcome::Dropped(format!(
                "budget_exhausted: the run has spent {spent} LLM tokens (about ${cost:.2}) of its budget of {} tokens \
                 and ${:.2}",
                self.config.run_max_tokens, self.config.run_max_cost_usd
            ))));
        }
        let request = ChatRequest {
            system: Some(system.to_owned()),
            max_tokens: Some(max_tokens),
            ..ChatRequest::from_prompt(prompt)
        };
        let answer = ask_text(&self.worker.ctx, request, self.step.tool())
            .await
            // The provider's failure as it is ("provider server error: anthropic (model ..., HTTP
            // 500): ..."): an outage is no internal error of ours.
            .map_err(|e| self.retry(format!("LLM {} call failed: {}", self.step.name(), e.message)))?;
        self.spent.fetch_add(answer.tokens, Ordering::Relaxed);
        Ok(answer)
    }

    /// Commits the step's output as one version naming the process, the task, the step, the run,
    /// and the provider and model that answered.
    pub(super) async fn commit(
        &self,
        operations: Vec<Operation>,
        answer: Option<&TextAnswer>,
    ) -> Result<String, Failure> {
        let mut ctx = self.worker.task_context(self.task);
        ctx.audit.insert("step".into(), json!(self.step.name()));
        ctx.audit.insert("run_id".into(), json!(self.run.run_id));
        if let Some(answer) = answer {
            ctx.audit.insert("provider".into(), json!(answer.provider));
            ctx.audit.insert("model".into(), json!(answer.model));
        }
        let change = Change { operations, extensions: Vec::new(), return_structure: Some(false) };
        match commit_operations(&ctx, self.session().to_owned(), change, self.step.tool(), []).await {
            Ok(committed) => Ok(committed.version_id),
            Err(e) if matches!(e.code, ErrorCode::SessionNotFound | ErrorCode::SessionClosed) => {
                Err(self.give_up(format!("committing: {}", e.message)))
            }
            Err(e) => Err(self.retry(format!("committing: {} ({})", e.code, e.message))),
        }
    }

    /// Records the unit as done.
    pub(super) async fn done(&self, produced: Produced) -> Result<(), Failure> {
        let work = PipelineWork {
            outputs: produced.outputs,
            approved: produced.approved,
            note: produced.note,
            version_id: produced.version_id,
            provider: produced.provider,
            model: produced.model,
            ..self.work(WorkStatus::Completed, None)
        };
        self.worker
            .ctx
            .runtime
            .record_pipeline_work(&self.run.session_id, &self.run.run_id, &work)
            .await
            .map_err(|e| self.retry(format!("recording the step: {e}")))
    }

    /// Queues the next step's task.
    pub(super) async fn next(&self, step: Step, unit: &str, payload: Payload) -> Result<(), Failure> {
        let payload = Payload { run_id: Some(self.run.run_id.clone()), attempt: self.run.attempt, ..payload };
        enqueue(&self.worker.ctx, &self.run, step, unit, &payload)
            .await
            .map(drop)
            .map_err(|e| self.retry(format!("queueing the {} step: {e}", step.name())))
    }

    /// An update appending this step's entry to an object's `transition_log` and setting its
    /// `current_status`, as the reference's pipeline records what it did to an object; `node` is
    /// the reasoning node that records why, when there is one (`null` in the entry otherwise).
    pub(super) fn transition(
        &self,
        object: &KnowledgeObject,
        action: &str,
        to: &str,
        node: Option<&str>,
        hash: &str,
    ) -> Operation {
        let mut log: Vec<Value> =
            object.structure.get("transition_log").and_then(Value::as_array).cloned().unwrap_or_default();
        log.push(json!({
            "timestamp": cks_runtime::runtime::now(),
            "agent": self.step.agent(),
            "action": action,
            "transitioned_to": to,
            "reasoning_node_id": node,
            "run_id": self.run.run_id,
            "content_hash": hash,
        }));
        let excess = log.len().saturating_sub(TRANSITION_LOG_LIMIT);
        log.drain(..excess);
        let mut patch = Map::new();
        patch.insert("current_status".into(), json!(to));
        patch.insert("transition_log".into(), Value::Array(log));
        Operation::UpdateObject {
            object_id: object.id().to_owned(),
            structure_patch: patch.into(),
            mode: PatchMode::Merge,
        }
    }

    /// The fields every node a step writes carries.
    pub(super) fn stamp(&self, kind: &str, answer: Option<&TextAnswer>) -> Map<String, Value> {
        let mut structure = Map::new();
        structure.insert("kind".into(), json!(kind));
        structure.insert("agent".into(), json!(self.step.agent()));
        structure.insert("run_id".into(), json!(self.run.run_id));
        if let Some(answer) = answer {
            structure.insert("model".into(), json!(answer.model));
        }
        structure
    }

    /// The `run_id`'s first twelve characters, for node ids.
    pub(super) fn short_run(&self) -> &str {
        self.run.run_id.get(..12).unwrap_or(&self.run.run_id)
    }
}

impl Produced {
    /// What a step produced with a model's answer.
    pub(super) fn answered(outputs: Vec<String>, version_id: String, answer: &TextAnswer) -> Self {
        Produced {
            outputs,
            version_id: Some(version_id),
            provider: Some(answer.provider.to_owned()),
            model: Some(answer.model.clone()),
            ..Produced::default()
        }
    }
}

/// An object's content hash: its identity and fields, without the pipeline's bookkeeping.
pub(super) fn content_hash(object: &KnowledgeObject) -> String {
    let mut plain = object.clone();
    for field in BOOKKEEPING {
        plain.structure.remove(field);
    }
    object_hash(&plain).to_hex()
}

/// A hash of several texts, for the ids of nodes that cover several objects.
pub(super) fn combined_hash<'a>(parts: impl IntoIterator<Item = &'a str>) -> String {
    let mut all = KnowledgeObject::new(Identity::new("", "", ""), Map::new());
    let parts: Vec<Value> = parts.into_iter().map(|p| json!(p)).collect();
    all.structure.insert("parts", Value::Array(parts));
    object_hash(&all).to_hex()
}

/// An object as the model sees it: identity and fields, without the pipeline's bookkeeping.
pub(super) fn shown(object: &KnowledgeObject) -> Value {
    let mut structure = object.structure.clone();
    for field in BOOKKEEPING {
        structure.remove(field);
    }
    json!({"id": object.id(), "type": object.identity.r#type, "name": object.identity.name, "structure": structure})
}

/// A new node.
pub(super) fn node(id: &str, ty: &str, name: &str, structure: Map<String, Value>) -> Operation {
    Operation::AddObject { identity: Identity::new(id, ty, name), structure: structure.into() }
}

/// A link from one node to another, named by what it means (`supports`, `refutes`, ...): a
/// `depends_on` relation, as the reference links its pipeline nodes, so no rule of the graph about
/// `supports` or `refutes` relations applies to it.
pub(super) fn link(from: &str, to: &str, meaning: &str) -> Operation {
    let mut structure = Map::new();
    structure.insert("base_type".into(), json!("depends_on"));
    structure.insert("semantic_type".into(), json!(meaning));
    Operation::AddRelation {
        identity: Identity::new(format!("rel-{meaning}-{from}-{to}"), "Relation", meaning),
        participants: vec![from.to_owned(), to.to_owned()],
        relation_type: "depends_on".into(),
        structure: structure.into(),
    }
}

/// What surrounds `seeds` up to `depth` relation hops: the relations met and the objects they
/// lead to (at most [`CONTEXT_LIMIT`] entries, the pipeline's own nodes left out).
pub(super) fn neighbourhood(structure: &KnowledgeStructure, seeds: &[String], depth: u32) -> Vec<Value> {
    let agents = Step::ALL.map(Step::agent);
    let ours =
        |o: &KnowledgeObject| o.structure.get("agent").and_then(Value::as_str).is_some_and(|a| agents.contains(&a));
    let mut seen: HashSet<String> = seeds.iter().cloned().collect();
    let mut frontier: VecDeque<(String, u32)> = seeds.iter().map(|s| (s.clone(), 0)).collect();
    let mut shown_ids = BTreeSet::new();
    let mut context = Vec::new();
    while let Some((id, hops)) = frontier.pop_front() {
        if hops >= depth {
            continue;
        }
        for relation in structure.relations_of(&id) {
            if ours(relation) || !shown_ids.insert(relation.identity.id.clone()) {
                continue;
            }
            if context.len() >= CONTEXT_LIMIT {
                return context;
            }
            context.push(shown(relation));
            let Some(view) = relation.relation() else { continue };
            for participant in view.participants {
                if seen.insert(participant.to_owned()) {
                    let Some(other) = structure.get(participant) else { continue };
                    if ours(other) || context.len() >= CONTEXT_LIMIT {
                        continue;
                    }
                    context.push(shown(other));
                    frontier.push_back((participant.to_owned(), hops + 1));
                }
            }
        }
    }
    context
}

/// JSON text for a prompt.
pub(super) fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).expect("JSON values encode")
}

#[cfg(test)]
mod tests;
