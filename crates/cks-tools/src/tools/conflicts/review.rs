//! What the dead-letter review tools share: which tool resolves each kind of conflict task, and
//! the resolution proposed for a dead-lettered task.

use crate::ErrorCode;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use cks_runtime::store::{TaskRow, TaskStatus};

use super::store_error;
use crate::context::ToolContext;
use crate::error::ToolError;

/// The tools that resolve a conflict task, as approve_resolution names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ResolutionTool {
    ResolveGossipConflict,
    ArbitrateInferenceConflict,
    RefreshVerification,
    ResolveTemporalConflict,
    ResolveContradiction,
    ResolveDuplicate,
}

impl ResolutionTool {
    pub(crate) fn name(self) -> &'static str {
        match self {
            ResolutionTool::ResolveGossipConflict => "resolve_gossip_conflict",
            ResolutionTool::ArbitrateInferenceConflict => "arbitrate_inference_conflict",
            ResolutionTool::RefreshVerification => "refresh_verification",
            ResolutionTool::ResolveTemporalConflict => "resolve_temporal_conflict",
            ResolutionTool::ResolveContradiction => "resolve_contradiction",
            ResolutionTool::ResolveDuplicate => "resolve_duplicate",
        }
    }

    /// The tool that resolves tasks of `task_type`.
    pub(crate) fn for_task_type(task_type: &str) -> Option<Self> {
        Some(match task_type {
            "gossip_conflict" => ResolutionTool::ResolveGossipConflict,
            "inference_conflict" => ResolutionTool::ArbitrateInferenceConflict,
            "provenance_conflict" => ResolutionTool::RefreshVerification,
            "temporal_conflict" => ResolutionTool::ResolveTemporalConflict,
            "contradiction_detected" => ResolutionTool::ResolveContradiction,
            "duplicate_candidate" => ResolutionTool::ResolveDuplicate,
            _ => return None,
        })
    }
}

/// Whether a resolving tool's result settled its task: a change committed (or merged), or an
/// acknowledgement that nothing needs to change; never an error.
pub fn settled(result: &Value) -> bool {
    let committed = result.get("commit_result").is_some_and(|c| c.get("error").is_none());
    let acknowledged = result.get("acknowledged") == Some(&Value::Bool(true));
    let merged = result.get("merged") == Some(&Value::Bool(true));
    result.get("error").is_none() && (committed || acknowledged || merged)
}

/// The dead-lettered task `task_id`, or the error `task_not_dead_lettered`.
pub(crate) async fn dead_task(ctx: &ToolContext, task_id: i64) -> Result<TaskRow, ToolError> {
    let task = ctx.runtime.tasks().get(task_id).await.map_err(store_error)?;
    task.filter(|t| t.status == TaskStatus::Dead).ok_or_else(|| {
        ToolError::new(
            ErrorCode::TaskNotDeadLettered,
            format!("Task {task_id} is not dead-lettered (see list_dead_lettered_conflicts for those that are)."),
        )
        .with("task_id", task_id)
    })
}

/// The call that would resolve `task`: `{tool, arguments}`, or `{error, message}` when there is none.
pub fn propose(task: &TaskRow, payload: &Value) -> Value {
    let cannot = |message: String| json!({"error": "cannot_propose", "message": message});
    let Some(tool) = ResolutionTool::for_task_type(&task.task_type) else {
        return json!({"error": "unknown_task_type",
                      "message": format!("No known resolution tool for task_type '{}'.", task.task_type)});
    };
    let Value::Object(payload) = payload else {
        return cannot("The task's payload is not a JSON object.".into());
    };
    let field = |name: &str| payload.get(name).and_then(Value::as_str).filter(|s| !s.is_empty());
    let session_id = task.session_id.as_str();
    let arguments = match tool {
        ResolutionTool::ResolveContradiction => match field("location") {
            Some(location) => json!({"session_id": session_id, "contradiction_ids": [location], "commit": true}),
            None => return cannot("The task's payload names no contradiction ('location').".into()),
        },
        ResolutionTool::RefreshVerification => match (field("record_id"), field("subject_id"), field("source_url")) {
            (Some(record_id), Some(subject_id), Some(source_url)) => json!({"session_id": session_id,
                "record_id": record_id, "subject_id": subject_id, "source_url": source_url,
                "auto_resolve": true, "commit": true}),
            (None, _, _) | (_, None, _) => {
                return cannot(
                    "The task's payload does not name the record and its subject ('record_id', \
                               'subject_id')."
                        .into(),
                );
            }
            (_, Some(subject_id), None) => {
                return cannot(format!(
                    "The task's payload has no 'source_url' for subject '{subject_id}': the subject has no 'url' to \
                     check again."
                ));
            }
        },
        ResolutionTool::ResolveTemporalConflict => match field("object_id") {
            Some(object_id) => json!({"session_id": session_id, "object_id": object_id, "action": "bump",
                                      "extend_by_days": 30, "commit": true}),
            None => return cannot("The task's payload names no object ('object_id').".into()),
        },
        // A merge only on the approval of the person reviewing it (the Critic never claims these).
        ResolutionTool::ResolveDuplicate => match (field("keep_id"), payload.get("object_ids")) {
            (Some(keep), Some(_)) => json!({"session_id": session_id, "task_id": task.task_id, "decision": "merge",
                                            "keep_id": keep}),
            _ => return cannot("The task's payload names no pair ('object_ids', 'keep_id').".into()),
        },
        ResolutionTool::ResolveGossipConflict => match field("source_session_id") {
            Some(source) => json!({"target_session_id": session_id, "source_session_id": source}),
            None => return cannot("The task's payload names no source session ('source_session_id').".into()),
        },
        ResolutionTool::ArbitrateInferenceConflict => {
            let (conclusions, stale) = inference_findings(payload);
            if !conclusions.is_empty() {
                json!({"session_id": session_id, "conclusion_ids": conclusions, "auto_resolve": true, "commit": true})
            } else if !stale.is_empty() {
                json!({"session_id": session_id, "stale_premise_ids": stale, "commit": true})
            } else {
                return cannot("The task's payload names no confidence conflict or stale premise.".into());
            }
        }
    };
    json!({"tool": tool.name(), "arguments": arguments})
}

/// The conclusions in confidence conflict and the steps citing stale premises that an
/// `inference_conflict` payload names, each sorted and without repeats. A confidence conflict's
/// `location` is one of its steps; the conclusion is its `conclusion_id` (the reference's payloads
/// lack it, and name the step: such a conflict cannot be arbitrated from the task alone).
fn inference_findings(payload: &serde_json::Map<String, Value>) -> (Vec<&str>, Vec<&str>) {
    let mut conclusions = std::collections::BTreeSet::new();
    let mut stale = std::collections::BTreeSet::new();
    let diagnostics = payload.get("diagnostics").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
    for diagnostic in diagnostics {
        let text = |key: &str| diagnostic.get(key).and_then(Value::as_str).filter(|s| !s.is_empty());
        match text("code") {
            Some("CKS-EXT-INFERENCE-CONFIDENCE-CONFLICT") => conclusions.extend(text("conclusion_id")),
            Some("CKS-EXT-STALE-PREMISE") => stale.extend(text("location")),
            _ => {}
        }
    }
    (conclusions.into_iter().collect(), stale.into_iter().collect())
}
