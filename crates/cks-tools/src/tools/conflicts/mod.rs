//! The conflict queue: tasks that background checks (and, in the reference, its gossip between
//! peers) put in the durable task queue for a worker — a person or a Critic process — to claim,
//! resolve, and complete, fail (retried with backoff) or dead-letter; the dead-letter list people
//! review and retry; and the tools that resolve a kind of conflict, each a normal commit whose
//! version names the tool and the task. None is offered to `ai_chat` yet: the queue spans every
//! session, and the resolutions change graphs on a person's or a worker's decision.

mod approve_resolution;
mod arbitrate_inference_conflict;
mod claim_conflict_task;
mod complete_conflict_task;
mod dead_letter_conflict_task;
mod fail_conflict_task;
mod list_dead_lettered_conflicts;
mod list_gossip_conflicts;
mod list_inference_conflicts;
mod refresh_verification;
mod reject_resolution;
mod resolve_contradiction;
mod resolve_duplicate;
mod resolve_gossip_conflict;
mod resolve_temporal_conflict;
mod retry_dead_letter;
pub(crate) mod review;
mod review_dead_letter;

use crate::ErrorCode;
use cks_core::ops::Operation;
use cks_runtime::RuntimeError;
use cks_runtime::store::{StoreError, TaskRef, TaskRow};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Value, json};

use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Listed, listed};
use crate::tools::knowledge::evolve_knowledge::{Change, commit_operations};

pub(crate) fn tools() -> Vec<Listed> {
    vec![
        listed(list_inference_conflicts::ListInferenceConflicts),
        listed(arbitrate_inference_conflict::ArbitrateInferenceConflict),
        listed(list_gossip_conflicts::ListGossipConflicts),
        listed(resolve_gossip_conflict::ResolveGossipConflict),
        listed(claim_conflict_task::ClaimConflictTask),
        listed(complete_conflict_task::CompleteConflictTask),
        listed(fail_conflict_task::FailConflictTask),
        listed(dead_letter_conflict_task::DeadLetterConflictTask),
        listed(list_dead_lettered_conflicts::ListDeadLetteredConflicts),
        listed(retry_dead_letter::RetryDeadLetter),
        listed(review_dead_letter::ReviewDeadLetter),
        listed(approve_resolution::ApproveResolution),
        listed(reject_resolution::RejectResolution),
        listed(resolve_contradiction::ResolveContradiction),
        listed(resolve_temporal_conflict::ResolveTemporalConflict),
        listed(resolve_duplicate::ResolveDuplicate),
        listed(refresh_verification::RefreshVerification),
    ]
}

/// The kinds of conflict task the tools claim and list: `gossip_conflict` (two peers' divergent
/// states, from the reference's gossip; no part of this server queues these),
/// `inference_conflict` (an inference whose confidence or premises no longer hold),
/// `contradiction_detected` (relations a rule forbids together: the contradiction sweeper),
/// `temporal_conflict` (a fact whose valid_until passed: the temporal_staleness sweeper),
/// `provenance_conflict` (a subject whose newest verification is older than the TTL: the
/// provenance_staleness sweeper), and, over registered graphs, `graph_outdated` (not updated within
/// its TTL: graph_freshness) and `health_check` (a health score below the bar: graph_health), which
/// no tool resolves: a person looks, then completes them; and `duplicate_candidate` (two objects
/// likely the same thing: the duplicates sweeper), which `resolve_duplicate` settles.
#[derive(Clone, Copy, Debug, serde::Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ConflictType {
    GossipConflict,
    InferenceConflict,
    ContradictionDetected,
    TemporalConflict,
    ProvenanceConflict,
    GraphOutdated,
    HealthCheck,
    DuplicateCandidate,
}

impl ConflictType {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ConflictType::GossipConflict => "gossip_conflict",
            ConflictType::InferenceConflict => "inference_conflict",
            ConflictType::ContradictionDetected => "contradiction_detected",
            ConflictType::TemporalConflict => "temporal_conflict",
            ConflictType::ProvenanceConflict => "provenance_conflict",
            ConflictType::GraphOutdated => "graph_outdated",
            ConflictType::HealthCheck => "health_check",
            ConflictType::DuplicateCandidate => "duplicate_candidate",
        }
    }
}

/// A queued task as the tools report it.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct TaskView {
    task_id: i64,
    task_type: String,
    session_id: String,
    /// The task's payload (its JSON, or the text as stored when it is not JSON).
    pub(crate) payload: Value,
    /// Failed attempts so far.
    retry_count: u32,
}

impl From<TaskRow> for TaskView {
    fn from(task: TaskRow) -> Self {
        let payload = serde_json::from_str(&task.payload).unwrap_or(Value::String(task.payload));
        TaskView {
            task_id: task.task_id,
            task_type: task.task_type,
            session_id: task.session_id,
            payload,
            retry_count: task.retry_count,
        }
    }
}

/// The answer for a task id that names no task (or none in the state the tool needs).
pub(crate) fn task_not_found(task_id: i64, detail: &str) -> ToolError {
    ToolError::new(ErrorCode::TaskNotFound, format!("Task {task_id} was not found{detail}.")).with("task_id", task_id)
}

pub(crate) fn store_error(e: StoreError) -> ToolError {
    RuntimeError::from(e).into()
}

/// What a resolution tool did beyond proposing a change.
#[derive(Debug, Default, Serialize, JsonSchema)]
pub(crate) struct Resolution {
    /// What evolve_knowledge answers for the commit, or its error (only with 'commit').
    #[serde(skip_serializing_if = "Option::is_none")]
    commit_result: Option<Value>,
    /// Whether the task named by 'task_id' was completed (only with 'task_id').
    #[serde(skip_serializing_if = "Option::is_none")]
    task_completed: Option<bool>,
}

impl Resolution {
    /// Commits `operations` when asked and there are any (the version's metadata names `tool` and
    /// the task), then completes the task if the commit succeeded. A failed commit is data in
    /// `commit_result`, as the reference returns it, and leaves the task as it was.
    pub(crate) async fn commit_if(
        ctx: &ToolContext,
        commit: bool,
        session_id: &str,
        operations: Vec<Operation>,
        extensions: &[&str],
        tool: &str,
        task: Option<i64>,
    ) -> Self {
        if !commit || operations.is_empty() {
            return Resolution::default();
        }
        let extensions = extensions.iter().map(|e| (*e).to_owned()).collect();
        let change = Change { operations, extensions, return_structure: None };
        let metadata = task.map(|id| ("task_id", json!(id)));
        match commit_operations(ctx, session_id.to_owned(), change, tool, metadata).await {
            Ok(committed) => Resolution {
                commit_result: Some(serde_json::to_value(committed).expect("results encode")),
                task_completed: complete(ctx, task).await,
            },
            Err(e) => Resolution { commit_result: Some(e.to_value()), task_completed: task.map(|_| false) },
        }
    }

    /// A resolution that changes nothing: the task is done as it stands.
    pub(crate) async fn acknowledged(ctx: &ToolContext, task: Option<i64>) -> Self {
        Resolution { commit_result: None, task_completed: complete(ctx, task).await }
    }
}

async fn complete(ctx: &ToolContext, task: Option<i64>) -> Option<bool> {
    let task_id = task?;
    // A task completed by someone else meanwhile is done all the same.
    Some(ctx.runtime.tasks().complete(TaskRef::any(task_id)).await.unwrap_or(false))
}

/// Checks that `task_id`, when given, names a queued task of `session_id`.
pub(crate) async fn resolution_task(
    ctx: &ToolContext,
    task_id: Option<i64>,
    session_id: &str,
) -> Result<Option<i64>, ToolError> {
    let Some(task_id) = task_id else { return Ok(None) };
    match ctx.runtime.tasks().get(task_id).await.map_err(store_error)? {
        None => Err(task_not_found(task_id, "")),
        Some(task) if task.session_id != session_id => Err(ToolError::invalid_parameter(format!(
            "Task {task_id} belongs to session '{}', not to '{session_id}'.",
            task.session_id
        ))
        .with("parameter", "task_id")),
        Some(_) => Ok(Some(task_id)),
    }
}

/// A time in ms since the epoch as the reference writes time stamps.
pub(crate) fn timestamp(ms: i64) -> String {
    let at = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    crate::convert::serialized_at(at)
}
