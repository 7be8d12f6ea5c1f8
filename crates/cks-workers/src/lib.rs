//! Autonomous processes: supervised background workers, in a server's process or in a
//! `cks-mcp worker` of their own, that take tasks from the queue and settle them through the
//! server's own tools — the reference's standalone agents (`CKS_EMBEDDED_AGENTS`). A process never
//! holds a task past its lease: a crash or a stop mid-task leaves the task to be claimed again once
//! the lease ends.
//!
//! Each process keeps a liveness record in the store ([`cks_runtime::processes`]), so
//! `list_processes` on any server of the store shows it, and `request_process_stop` from any of
//! them stops it after its current task.

mod critic;
mod enrichment;
mod pipeline;

pub use enrichment::{EnrichmentConfig, Source, SourcePolicy};
pub use pipeline::PipelineConfig;

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use cks_runtime::processes::ProcessRecord;
use cks_runtime::store::{StoreError, TaskRef, TaskRow};
use cks_runtime::tasks::Failed;

use cks_tools::{LlmAccess, ToolContext};

/// Which processes run, and how.
#[derive(Clone, Debug, PartialEq)]
pub struct ProcessesConfig {
    /// Run the Critic (`CKS_EMBED_CRITIC_AGENT`, or `CKS_EMBEDDED_AGENTS`).
    pub critic: bool,
    /// The task types the Critic claims (`CKS_CRITIC_TASK_TYPES`).
    pub critic_task_types: Vec<String>,
    /// How long the idle Critic waits before looking for work again (`CKS_CRITIC_POLL_INTERVAL`).
    pub poll_interval: Duration,
    /// How often the Critic refreshes its liveness record (`CKS_CRITIC_LIVENESS_INTERVAL`).
    pub liveness_interval: Duration,
    /// How long shutdown waits for a process to finish its task before abandoning it
    /// (`CKS_EMBEDDED_AGENTS_SHUTDOWN_TIMEOUT`).
    pub shutdown_timeout: Duration,
    /// LLM tokens the Critic may spend in any hour; over it, it pauses
    /// (`CKS_CRITIC_TOKEN_BUDGET_PER_HOUR`; 0: no limit).
    pub token_budget_per_hour: u64,
    /// The pipeline process (`CKS_EMBED_PIPELINE_AGENT`, `CKS_PIPELINE_*`).
    pub pipeline: PipelineConfig,
    /// The Enrichment process (`CKS_EMBED_ENRICHMENT_AGENT`, `CKS_ENRICHMENT_*`).
    pub enrichment: EnrichmentConfig,
}

/// The task types the Critic settles by default: every kind review_dead_letter can propose a
/// resolution for, but `duplicate_candidate`: a merge waits for a person's call.
pub const CRITIC_TASK_TYPES: [&str; 5] =
    ["gossip_conflict", "inference_conflict", "provenance_conflict", "temporal_conflict", "contradiction_detected"];

impl Default for ProcessesConfig {
    fn default() -> Self {
        ProcessesConfig {
            critic: false,
            critic_task_types: CRITIC_TASK_TYPES.iter().map(|t| (*t).to_owned()).collect(),
            poll_interval: Duration::from_secs(5),
            liveness_interval: Duration::from_secs(30),
            shutdown_timeout: Duration::from_secs(10),
            token_budget_per_hour: 100_000,
            pipeline: PipelineConfig::default(),
            enrichment: EnrichmentConfig::default(),
        }
    }
}

/// How one process paces itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Pace {
    pub(crate) poll_interval: Duration,
    pub(crate) liveness_interval: Duration,
    pub(crate) token_budget_per_hour: u64,
}

/// The running processes of one server.
pub struct Processes {
    running: Mutex<Vec<(watch::Sender<bool>, JoinHandle<()>)>>,
    shutdown_timeout: Duration,
}

impl std::fmt::Debug for Processes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Processes").finish_non_exhaustive()
    }
}

impl Processes {
    /// Starts the configured processes; `base` is the context their tool calls run in.
    pub fn start(base: ToolContext, config: &ProcessesConfig) -> Arc<Self> {
        let mut running = Vec::new();
        if config.critic {
            let (stop, stopped) = watch::channel(false);
            let pace = Pace {
                poll_interval: config.poll_interval,
                liveness_interval: config.liveness_interval,
                token_budget_per_hour: config.token_budget_per_hour,
            };
            let worker = Worker::new(base.clone(), "critic", pace);
            running.push((stop, tokio::spawn(critic::run(worker, config.critic_task_types.clone(), stopped))));
        }
        if config.pipeline.enabled {
            let (stop, stopped) = watch::channel(false);
            let worker = Worker::new(base.clone(), "pipeline", config.pipeline.pace());
            running.push((stop, tokio::spawn(pipeline::run(worker, config.pipeline.clone(), stopped))));
        }
        if config.enrichment.enabled {
            let (stop, stopped) = watch::channel(false);
            let worker = Worker::new(base.clone(), "enrichment", config.enrichment.pace());
            running.push((stop, tokio::spawn(enrichment::run(worker, config.enrichment.clone(), stopped))));
        }
        Arc::new(Processes { running: Mutex::new(running), shutdown_timeout: config.shutdown_timeout })
    }

    /// Stops every process after its current task, waiting at most the shutdown timeout; a
    /// process still busy then is abandoned (its task is claimed again after its lease).
    pub async fn shutdown(&self) {
        let running = std::mem::take(&mut *self.running.lock().unwrap_or_else(|p| p.into_inner()));
        for (stop, _) in &running {
            let _ = stop.send(true);
        }
        let deadline = tokio::time::Instant::now() + self.shutdown_timeout;
        for (_, mut handle) in running {
            if tokio::time::timeout_at(deadline, &mut handle).await.is_err() {
                handle.abort();
            }
        }
    }
}

/// What became of a task a process worked on.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Done: the task is completed.
    Settled,
    /// Worth another try (a provider failed, a commit raced): retried after its backoff,
    /// dead-lettered past the retry limit.
    Failed(String),
    /// Nothing can settle it: dead-lettered at once.
    Unsettleable(String),
    /// Given up without a trace in the queue (a run out of budget): completed, counted as failed.
    Dropped(String),
}

/// Where the queue put a task after its outcome was recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Recorded {
    Completed,
    Retrying,
    DeadLettered,
    /// The claim no longer held (another worker took the task over), or the store failed.
    Unchanged,
}

/// The end of holding a task: the work's result with the claim as last renewed, or the claim lost.
pub(crate) enum Held<T> {
    Done(T, TaskRef),
    Lost(String),
}

/// What a process needs to work and report: the tool context, its liveness record, timings and
/// token budget.
pub(crate) struct Worker {
    ctx: ToolContext,
    record: ProcessRecord,
    poll_interval: Duration,
    liveness_interval: Duration,
    last_report: Option<tokio::time::Instant>,
    token_budget_per_hour: u64,
}

const HOUR_MS: u64 = 3_600_000;

impl Worker {
    fn new(mut ctx: ToolContext, kind: &str, pace: Pace) -> Self {
        // Its own client (same settings, its own telemetry), so what it spends is counted apart
        // from every other caller's.
        if let LlmAccess::Ready(client) = &ctx.llm {
            ctx.llm = match cks_llm::LlmClient::new(client.config().clone()) {
                Ok(own) => LlmAccess::Ready(own),
                Err(e) => LlmAccess::Misconfigured(e.to_string()),
            };
        }
        Worker {
            ctx,
            record: ProcessRecord::starting(kind, pace.liveness_interval.as_secs_f64()),
            poll_interval: pace.poll_interval,
            liveness_interval: pace.liveness_interval,
            last_report: None,
            token_budget_per_hour: pace.token_budget_per_hour,
        }
    }

    /// The context a task's tool calls and commits run in: the process's, its commits naming the
    /// process and the task.
    fn task_context(&self, task: &TaskRow) -> ToolContext {
        let mut ctx = self.ctx.clone();
        ctx.audit.insert("process".into(), serde_json::json!(self.record.process_kind));
        ctx.audit.insert("process_instance".into(), serde_json::json!(self.record.instance_id));
        ctx.audit.insert("task_id".into(), serde_json::json!(task.task_id));
        ctx
    }

    /// Counts the tokens spent so far and pauses the process while the last hour's exceed its
    /// budget; whether it may take a task now.
    fn within_budget(&mut self) -> bool {
        let LlmAccess::Ready(client) = &self.ctx.llm else { return true };
        let telemetry = client.telemetry();
        self.record.tokens_spent = telemetry.totals.input_tokens + telemetry.totals.output_tokens;
        if self.token_budget_per_hour == 0 {
            return true;
        }
        let now_ms = cks_runtime::tasks::now_ms() as u64;
        let last_hour: u64 = telemetry
            .recent
            .iter()
            .filter(|call| now_ms.saturating_sub(call.started_unix_ms) < HOUR_MS)
            .map(|call| call.input_tokens + call.output_tokens)
            .sum();
        let over = last_hour >= self.token_budget_per_hour;
        self.record.paused = over.then(|| {
            format!(
                "paused: {last_hour} LLM tokens spent in the last hour, over the budget of {}",
                self.token_budget_per_hour
            )
        });
        !over
    }

    /// Refreshes the liveness record now.
    async fn report(&mut self) {
        self.record.last_heartbeat_at = cks_runtime::runtime::now();
        if let Err(e) = self.ctx.runtime.report_process(&self.record).await {
            tracing::warn!(process = %self.record.process_kind, error = %e, "could not record a process heartbeat");
        }
        self.last_report = Some(tokio::time::Instant::now());
    }

    /// Refreshes the liveness record when its interval has passed.
    async fn beat(&mut self) {
        if self.last_report.is_none_or(|at| at.elapsed() >= self.liveness_interval) {
            self.report().await;
        }
    }

    /// Whether this process should stop: told so here, or asked through the store.
    async fn should_stop(&self, stopped: &watch::Receiver<bool>) -> bool {
        *stopped.borrow() || self.ctx.runtime.process_stop_requested(&self.record.instance_id).await.unwrap_or(false)
    }

    /// Waits one poll interval, or less if told to stop.
    async fn idle(&self, stopped: &mut watch::Receiver<bool>) {
        tokio::select! {
            _ = tokio::time::sleep(self.poll_interval) => {}
            _ = stopped.changed() => {}
        }
    }

    /// Waits for the next task of `task_types` (the first type that has one wins), beating and
    /// pausing over budget meanwhile; `None` once the process should stop.
    async fn next_task(&mut self, task_types: &[String], stopped: &mut watch::Receiver<bool>) -> Option<TaskRow> {
        loop {
            if self.should_stop(stopped).await {
                return None;
            }
            self.beat().await;
            if !self.within_budget() {
                self.idle(stopped).await;
                continue;
            }
            match self.claim(task_types).await {
                Ok(Some(task)) => {
                    self.record.current_task_id = Some(task.task_id);
                    self.record.current_task_type = Some(task.task_type.clone());
                    self.record.current_session_id = Some(task.session_id.clone());
                    self.report().await;
                    return Some(task);
                }
                Ok(None) => self.idle(stopped).await,
                Err(e) => {
                    self.record.last_error = Some(format!("claiming a task: {e}"));
                    self.record.last_error_session_id = None;
                    self.idle(stopped).await;
                }
            }
        }
    }

    async fn claim(&self, task_types: &[String]) -> Result<Option<TaskRow>, StoreError> {
        for task_type in task_types {
            if let Some(task) = self.ctx.runtime.tasks().claim(Some(task_type)).await? {
                return Ok(Some(task));
            }
        }
        Ok(None)
    }

    /// Runs `work` on a claimed task, renewing the claim every third of the lease (and the
    /// liveness record at its interval) while it runs. The claim is never held past its lease: when
    /// another worker has taken the task over, or a renewal cannot be made before the lease ends,
    /// the work is dropped and the task left alone.
    async fn hold<T>(&self, task: &TaskRow, work: impl Future<Output = T>) -> Held<T> {
        let queue = self.ctx.runtime.tasks();
        let lease_ms = queue.config().lease.as_millis() as i64;
        let every = (queue.config().lease / 3).min(self.liveness_interval).max(Duration::from_millis(20));
        let mut held = TaskRef::claimed(task);
        let mut record = self.record.clone();
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        tokio::pin!(work);
        loop {
            tokio::select! {
                done = &mut work => return Held::Done(done, held),
                _ = ticks.tick() => {}
            }
            match queue.renew(held).await {
                Ok(Some(at)) => held.claimed_at_ms = Some(at),
                Ok(None) => return Held::Lost(format!("task {}: another worker took it over", task.task_id)),
                Err(e) => {
                    let claimed_at = held.claimed_at_ms.unwrap_or_default();
                    let next_tick_ms = cks_runtime::tasks::now_ms() + every.as_millis() as i64;
                    if next_tick_ms >= claimed_at.saturating_add(lease_ms) {
                        return Held::Lost(format!("task {}: its claim could not be renewed ({e})", task.task_id));
                    }
                }
            }
            record.last_heartbeat_at = cks_runtime::runtime::now();
            let _ = self.ctx.runtime.report_process(&record).await;
        }
    }

    /// Records a task's outcome in the queue and in the liveness record.
    async fn finish(&mut self, task: &TaskRow, held: TaskRef, outcome: &Outcome) -> Recorded {
        let queue = self.ctx.runtime.tasks();
        // A store error here leaves the task claimed; its lease ends and it is claimed again.
        let recorded = match outcome {
            Outcome::Settled | Outcome::Dropped(_) => {
                queue.complete(held).await.map(|done| if done { Recorded::Completed } else { Recorded::Unchanged })
            }
            Outcome::Failed(why) => queue.fail(held, task.retry_count + 1, why).await.map(|failed| match failed {
                Failed::Retrying { .. } => Recorded::Retrying,
                Failed::DeadLettered => Recorded::DeadLettered,
                Failed::NotFound => Recorded::Unchanged,
            }),
            Outcome::Unsettleable(why) => queue
                .dead_letter(held, why)
                .await
                .map(|dead| if dead { Recorded::DeadLettered } else { Recorded::Unchanged }),
        };
        let recorded = match recorded {
            Err(e) => {
                self.record.last_error = Some(format!("recording task {}: {e}", task.task_id));
                self.record.last_error_session_id = Some(task.session_id.clone());
                Recorded::Unchanged
            }
            Ok(recorded) => {
                match outcome {
                    Outcome::Settled => self.record.tasks_done += 1,
                    Outcome::Failed(why) | Outcome::Unsettleable(why) | Outcome::Dropped(why) => {
                        self.record.tasks_failed += 1;
                        self.record.last_error = Some(format!("task {}: {why}", task.task_id));
                        self.record.last_error_session_id = Some(task.session_id.clone());
                    }
                }
                recorded
            }
        };
        self.done_with_task().await;
        recorded
    }

    /// Leaves the current task, whose claim was lost to whoever holds it now.
    async fn abandon(&mut self, why: String) {
        self.record.last_error = Some(why);
        self.record.last_error_session_id = self.record.current_session_id.clone();
        self.done_with_task().await;
    }

    async fn done_with_task(&mut self) {
        self.record.current_task_id = None;
        self.record.current_task_type = None;
        self.record.current_session_id = None;
        self.within_budget();
        self.report().await;
    }

    /// Records a clean stop.
    async fn stopped(&mut self) {
        self.record.current_task_id = None;
        self.record.current_task_type = None;
        self.record.current_session_id = None;
        self.record.stopped_at = Some(cks_runtime::runtime::now());
        self.report().await;
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};
    use std::sync::Arc;
    use std::time::Duration;

    use cks_runtime::store::memory::MemoryStore;
    use cks_runtime::store::{TaskFilter, TaskStatus};
    use cks_runtime::{QueueConfig, Runtime, RuntimeConfig};

    use super::{Processes, ProcessesConfig};
    use cks_tools::Registry;
    use cks_tools::ToolContext;
    use cks_tools::testing::{call, obj};
    use cks_tools::testing::{contradicted_session, queue};

    async fn wait_for(what: &str, mut done: impl AsyncFnMut() -> bool) {
        for _ in 0..500 {
            if done().await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("timed out waiting for {what}");
    }

    #[tokio::test]
    async fn the_critic_settles_what_it_can_retries_what_failed_and_stops_on_request() {
        // No retries: a failure dead-letters at once.
        let config = RuntimeConfig {
            queue: QueueConfig { max_retries: 0, ..QueueConfig::default() },
            ..RuntimeConfig::default()
        };
        let mut ctx = ToolContext::new(Arc::new(Runtime::new(Arc::new(MemoryStore::new()), config)));
        ctx.registry = Some(Arc::new(Registry::standard()));
        let expired = obj("f", "Fact", "Fact", json!({"valid_until": "2001-01-01T00:00:00Z"}));
        let step = |id: &str, confidence: f64| {
            obj(id, "InferenceStep", id, json!({"premises": ["e"], "conclusion": "t", "confidence": confidence}))
        };
        let id = contradicted_session(&ctx, vec![expired, step("i1", 0.9), step("i2", 0.2)]).await;
        let contradiction = queue(&ctx, "contradiction_detected", &id, json!({"location": "c1"})).await;
        let temporal = queue(&ctx, "temporal_conflict", &id, json!({"object_id": "f"})).await;
        let nothing_to_go_on = queue(&ctx, "gossip_conflict", &id, json!({"conflicts": []})).await;
        // Arbitration needs a model, and this context has none.
        let payload = json!({"diagnostics": [{"code": "CKS-EXT-INFERENCE-CONFIDENCE-CONFLICT", "conclusion_id": "t"}]});
        let needs_a_model = queue(&ctx, "inference_conflict", &id, payload).await;

        let fast = ProcessesConfig {
            critic: true,
            poll_interval: Duration::from_millis(20),
            liveness_interval: Duration::from_secs(1),
            ..ProcessesConfig::default()
        };
        let processes = Processes::start(ctx.clone(), &fast);
        let open = TaskFilter { status: None, ..TaskFilter::default() };
        wait_for("the queue to be worked through", async || {
            let tasks = ctx.runtime.tasks().list(&open).await.unwrap();
            tasks.iter().all(|t| t.status == TaskStatus::Dead)
        })
        .await;
        assert!(ctx.runtime.tasks().get(contradiction).await.unwrap().is_none(), "settled and completed");
        assert!(ctx.runtime.tasks().get(temporal).await.unwrap().is_none());
        let dead = |id: i64| {
            let ctx = ctx.clone();
            async move { ctx.runtime.tasks().get(id).await.unwrap().unwrap() }
        };
        assert!(dead(nothing_to_go_on).await.last_error.unwrap().contains("cannot_propose"));
        let failed = dead(needs_a_model).await;
        let why = failed.last_error.unwrap();
        assert!(why.contains("LLM arbiter call failed"), "a provider failure is a failed attempt: {why}");
        assert_eq!(failed.retry_count, 1);

        // The commits name the process and the task.
        let versions = ctx.runtime.list_versions(&id).await.unwrap();
        let by_task = |task: i64| versions.iter().find(|v| v.metadata.get("task_id") == Some(&json!(task))).cloned();
        let removal = by_task(contradiction).expect("the contradiction's commit");
        assert_eq!(
            (removal.metadata["tool"].as_str(), removal.metadata["process"].as_str()),
            (Some("resolve_contradiction"), Some("critic"))
        );
        assert_eq!(by_task(temporal).expect("the expiry's commit").metadata["tool"], "resolve_temporal_conflict");
        let valid_until =
            ctx.runtime.read(&id, |s, _| s.get("f").unwrap().structure["valid_until"].clone()).await.unwrap();
        assert!(valid_until.as_str().unwrap() > "2026", "bumped by 30 days from now: {valid_until}");

        // Its record: alive, two done, two failed; then stopped on request.
        wait_for("the record to count the tasks", async || {
            let listed = call(&ctx, "list_processes", json!({})).await;
            listed["processes"][0]["tasks_failed"] == 2
        })
        .await;
        let status = call(&ctx, "process_status", json!({"process_kind": "critic"})).await;
        assert_eq!((status["status"].as_str(), status["tasks_done"].as_u64()), (Some("alive"), Some(2)), "{status}");
        assert_eq!(status["current_task_id"], Value::Null);
        // Its record names the session of the task its last error is about, for the tools to
        // show the error only to those who reach that session.
        let record = ctx.runtime.processes().await.unwrap().remove(0);
        assert!(record.last_error.as_deref().is_some_and(|e| e.starts_with("task ")), "{record:?}");
        assert_eq!((record.last_error_session_id.as_deref(), record.current_session_id), (Some(id.as_str()), None));
        let requested = call(&ctx, "request_process_stop", json!({"process_kind": "critic"})).await;
        assert_eq!(
            requested,
            json!({"process_kind": "critic", "instance_id": status["instance_id"], "accepted": true})
        );
        wait_for("the Critic to stop", async || {
            call(&ctx, "process_status", json!({"process_kind": "critic"})).await["status"] == "stopped"
        })
        .await;
        // get_metrics counts what became of each task, by type.
        let metrics = call(&ctx, "get_metrics", json!({})).await["critic_agent_metrics"].clone();
        assert_eq!(metrics["completed"], json!({"contradiction_detected": 1, "temporal_conflict": 1}), "{metrics}");
        assert_eq!(metrics["dead_lettered"], json!({"gossip_conflict": 1, "inference_conflict": 1}), "{metrics}");
        let processed: u64 = metrics["processed"].as_object().unwrap().values().filter_map(Value::as_u64).sum();
        assert_eq!((processed, metrics["retried"].clone()), (4, json!({})), "{metrics}");
        assert_eq!(
            call(&ctx, "process_status", json!({"process_kind": "pipeline"})).await,
            json!({"process_kind": "pipeline", "found": false})
        );
        assert_eq!(call(&ctx, "request_process_stop", json!({"process_kind": "pipeline"})).await["found"], false);
        processes.shutdown().await;
    }
}

#[cfg(test)]
mod budget_tests {
    use serde_json::json;
    use std::sync::Arc;
    use std::time::Duration;

    use cks_testkit::{ProviderServer, Reply};

    use super::{Processes, ProcessesConfig};
    use cks_tools::Registry;
    use cks_tools::testing::queue;
    use cks_tools::testing::{call, llm_context, llm_env, obj, session, structure};

    #[tokio::test]
    async fn over_its_hourly_token_budget_the_critic_pauses_and_says_so() {
        let provider = ProviderServer::start().await;
        let mut ctx = llm_context(&llm_env("anthropic", &provider.base_url()));
        ctx.registry = Some(Arc::new(Registry::standard()));
        let step = |id: &str, confidence: f64| {
            obj(id, "InferenceStep", id, json!({"premises": ["p"], "conclusion": "c", "confidence": confidence}))
        };
        let graph = |extra: &str| {
            structure(vec![
                obj("p", "Fact", "p", json!({})),
                obj("c", "Claim", extra, json!({})),
                step("a", 0.9),
                step("b", 0.1),
            ])
        };
        let first = session(&ctx, graph("first")).await;
        let second = session(&ctx, graph("second")).await;
        let diagnostics =
            json!({"diagnostics": [{"code": "CKS-EXT-INFERENCE-CONFIDENCE-CONFLICT", "conclusion_id": "c"}]});
        queue(&ctx, "inference_conflict", &first, diagnostics.clone()).await;
        let waiting = queue(&ctx, "inference_conflict", &second, diagnostics).await;
        // One decision costs more than the whole budget.
        provider.set_default(Some(Reply::Usage(
            Box::new(Reply::Text("[{\"conclusion_id\": \"c\", \"winner_step_id\": \"a\"}]".into())),
            400,
            100,
        )));
        let config = ProcessesConfig {
            critic: true,
            poll_interval: Duration::from_millis(20),
            liveness_interval: Duration::from_millis(100),
            token_budget_per_hour: 300,
            ..ProcessesConfig::default()
        };
        let processes = Processes::start(ctx.clone(), &config);
        let mut status = json!(null);
        for _ in 0..300 {
            status = call(&ctx, "process_status", json!({"process_kind": "critic"})).await;
            if status["paused"].is_string() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!((status["tasks_done"].as_u64(), status["tokens_spent"].as_u64()), (Some(1), Some(500)), "{status}");
        assert!(status["paused"].as_str().unwrap().contains("over the budget of 300"), "{status}");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(provider.requests().len(), 1, "no more calls while paused");
        let task = ctx.runtime.tasks().get(waiting).await.unwrap().unwrap();
        assert_eq!(task.status, cks_runtime::store::TaskStatus::Pending, "the second task waits, unclaimed");
        processes.shutdown().await;
    }
}
