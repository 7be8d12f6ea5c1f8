//! `approve_resolution`: applies a resolution to a dead-lettered conflict task (usually the one
//! review_dead_letter proposed) through the resolving tool itself; the task is completed only
//! when the resolution changed the graph (or, for an ignored expiry, acknowledged it).

use crate::ErrorCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use cks_runtime::store::TaskRef;

use super::review::{ResolutionTool, dead_task, settled};
use super::store_error;
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Named, Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Resolution {
    /// The tool that resolves this kind of task.
    pub(crate) tool: ResolutionTool,
    /// Its arguments (for the task's own session).
    pub(crate) arguments: Map<String, Value>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// A dead-lettered task (from list_dead_lettered_conflicts).
    pub(crate) task_id: i64,
    /// The call to make: review_dead_letter's proposed_resolution, or one of your own.
    pub(crate) resolution: Resolution,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    approved: bool,
    task_id: i64,
    /// What the resolving tool answered.
    resolution_result: Value,
    /// Why the task stays dead-lettered (when not approved).
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

pub(crate) struct ApproveResolution;

#[async_trait::async_trait]
impl Tool for ApproveResolution {
    type Input = Input;
    type Output = Output;
    const NAMED: &'static [(&'static str, Named)] = &[("task_id", Named::Task)];
    const TITLE: &'static str = "Approve a resolution";
    const META: ToolMeta = ToolMeta {
        name: "approve_resolution",
        description: "Apply a resolution to a dead-lettered conflict task: 'resolution' is {tool, arguments} (as \
            review_dead_letter proposes it), run as a normal call of that tool, which must be the one for the task's \
            type and name the task's session. When it committed a change (or acknowledged an expiry with action \
            'ignore') the task is completed: {approved: true, task_id, resolution_result}; otherwise the task stays \
            dead-lettered: {approved: false, task_id, resolution_result, message}. Errors: task_not_dead_lettered, \
            unknown_task_type, tool_task_type_mismatch, task_session_mismatch.",
        mutates_graph: true,
        creates_session: false,
        destructive: true,
        idempotent: false,
        open_world: false,
        session_fields: &[],
        session_checks: &[],
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        let refuse = |code: ErrorCode, message: String| {
            ToolError::new(code, message).with("approved", false).with("task_id", input.task_id)
        };
        let task = dead_task(ctx, input.task_id).await.map_err(|e| e.with("approved", false))?;
        let expected = ResolutionTool::for_task_type(&task.task_type).ok_or_else(|| {
            refuse(ErrorCode::UnknownTaskType, format!("No known resolution tool for task_type '{}'.", task.task_type))
        })?;
        let tool = input.resolution.tool;
        if tool != expected {
            return Err(refuse(
                ErrorCode::ToolTaskTypeMismatch,
                format!("A {} task is resolved with {}, not {}.", task.task_type, expected.name(), tool.name()),
            ));
        }
        let arguments = input.resolution.arguments;
        let named = ["session_id", "target_session_id"].iter().find_map(|k| arguments.get(*k)).and_then(Value::as_str);
        if named != Some(task.session_id.as_str()) {
            return Err(refuse(
                ErrorCode::TaskSessionMismatch,
                format!("The resolution must act on the task's session '{}'.", task.session_id),
            ));
        }
        let registry =
            ctx.registry.clone().ok_or_else(|| ToolError::internal("no tool registry to run the resolution"))?;
        let result = registry.call(tool.name(), Value::Object(arguments), ctx).await.map_err(|e| {
            refuse(ErrorCode::ToolUnavailable, format!("{} is not available on this server: {e}", tool.name()))
        })?;
        if !settled(&result) {
            return Ok(Output {
                approved: false,
                task_id: input.task_id,
                resolution_result: result,
                message: Some(
                    "The resolution changed nothing, so the task stays dead-lettered; see 'resolution_result'.".into(),
                ),
            });
        }
        ctx.runtime.tasks().complete(TaskRef::any(input.task_id)).await.map_err(store_error)?;
        Ok(Output { approved: true, task_id: input.task_id, resolution_result: result, message: None })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use std::sync::Arc;

    use cks_runtime::store::TaskRef;

    use crate::registry::Registry;
    use crate::testing::{call, context, obj};
    use crate::testing::{contradicted_session, queue};

    #[tokio::test]
    async fn review_then_approve_or_reject_a_dead_letter() {
        let mut ctx = context();
        ctx.registry = Some(Arc::new(Registry::standard()));
        let fact = obj("f", "Fact", "Fact", json!({"valid_until": "2001-01-01"}));
        let id = contradicted_session(&ctx, vec![fact]).await;
        let dead = |task_type: &'static str, payload: serde_json::Value| {
            let (ctx, id) = (&ctx, id.clone());
            async move {
                let task = queue(ctx, task_type, &id, payload).await;
                assert!(ctx.runtime.tasks().dead_letter(TaskRef::any(task), "unsure").await.unwrap());
                task
            }
        };
        let contradiction = dead("contradiction_detected", json!({"location": "c1"})).await;
        let review = call(&ctx, "review_dead_letter", json!({"task_id": contradiction})).await;
        assert_eq!(review["last_error"], "unsure");
        let proposed = review["proposed_resolution"].clone();
        assert_eq!(proposed["tool"], "resolve_contradiction");
        assert_eq!(proposed["arguments"], json!({"session_id": id, "contradiction_ids": ["c1"], "commit": true}));

        // The tool must match the task's type and act on its session.
        let wrong_tool =
            json!({"tool": "resolve_temporal_conflict", "arguments": {"session_id": id, "object_id": "f"}});
        let refused =
            call(&ctx, "approve_resolution", json!({"task_id": contradiction, "resolution": wrong_tool})).await;
        assert_eq!(
            (refused["error"].as_str(), refused["approved"].as_bool()),
            (Some("tool_task_type_mismatch"), Some(false))
        );
        let elsewhere =
            json!({"tool": "resolve_contradiction", "arguments": {"session_id": "other", "contradiction_ids": ["c1"]}});
        let refused =
            call(&ctx, "approve_resolution", json!({"task_id": contradiction, "resolution": elsewhere})).await;
        assert_eq!(refused["error"], "task_session_mismatch");
        // A resolution that changes nothing leaves the task dead.
        let nothing = json!({"tool": "resolve_contradiction", "arguments": {"session_id": id, "contradiction_ids": ["zz"], "commit": true}});
        let unchanged =
            call(&ctx, "approve_resolution", json!({"task_id": contradiction, "resolution": nothing})).await;
        assert_eq!(unchanged["approved"], false);
        assert!(ctx.runtime.tasks().get(contradiction).await.unwrap().is_some());

        let approved =
            call(&ctx, "approve_resolution", json!({"task_id": contradiction, "resolution": proposed})).await;
        assert_eq!(approved["approved"], true, "{approved}");
        assert_eq!(approved["resolution_result"]["commit_result"]["evolved"], true);
        assert!(ctx.runtime.tasks().get(contradiction).await.unwrap().is_none(), "completed");
        assert_eq!(
            call(&ctx, "review_dead_letter", json!({"task_id": contradiction})).await["error"],
            "task_not_dead_lettered"
        );

        let expired = dead("temporal_conflict", json!({"object_id": "f"})).await;
        let rejected = call(&ctx, "reject_resolution", json!({"task_id": expired, "reason": "still true"})).await;
        assert_eq!(rejected, json!({"rejected": true, "task_id": expired, "reason": "still true"}));
        assert_eq!(
            ctx.runtime.tasks().get(expired).await.unwrap().unwrap().last_error.unwrap(),
            "Rejected by human: still true"
        );
        let review = call(&ctx, "review_dead_letter", json!({"task_id": expired})).await;
        assert_eq!(review["proposed_resolution"]["arguments"]["action"], "bump");

        let gossip = dead("gossip_conflict", json!({"conflicts": ["x"]})).await;
        let review = call(&ctx, "review_dead_letter", json!({"task_id": gossip})).await;
        assert_eq!(review["proposed_resolution"]["error"], "cannot_propose");
        let other = dead("graph_outdated", json!({})).await;
        assert_eq!(
            call(&ctx, "review_dead_letter", json!({"task_id": other})).await["proposed_resolution"]["error"],
            "unknown_task_type"
        );
        let pending = queue(&ctx, "temporal_conflict", &id, json!({})).await;
        let not_dead = call(&ctx, "reject_resolution", json!({"task_id": pending})).await;
        assert_eq!(
            (not_dead["error"].as_str(), not_dead["rejected"].as_bool()),
            (Some("task_not_dead_lettered"), Some(false))
        );
    }
}
