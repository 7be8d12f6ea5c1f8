//! `resolve_temporal_conflict`: deals with a fact whose `valid_until` passed: extends it
//! (`bump`), archives it (`archive`: marked archived, no longer expiring), or acknowledges it
//! (`ignore`).

use crate::ErrorCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use time::OffsetDateTime;

use cks_core::ops::{Operation, PatchMode};
use cks_core::validate::valid_until_instant;

use super::{Resolution, resolution_task};
use crate::context::ToolContext;
use crate::convert::serialized_at;
use crate::error::ToolError;
use crate::tool::{Named, SessionCheck, Tool, ToolMeta};

/// What to do about the fact.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Action {
    Bump,
    Archive,
    #[default]
    Ignore,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    pub(crate) session_id: String,
    /// The expired fact (the task's payload.object_id).
    pub(crate) object_id: String,
    /// bump: extend valid_until by extend_by_days (from now, or from valid_until if later);
    /// archive: mark archived, drop valid_until; ignore (default): change nothing.
    #[serde(default)]
    pub(crate) action: Action,
    /// Days to extend by, over 0 (bump only).
    pub(crate) extend_by_days: Option<f64>,
    /// Commit the change (default false: only propose it).
    #[serde(default)]
    pub(crate) commit: bool,
    /// The temporal_conflict task this resolves (completed once committed, or at once for ignore).
    pub(crate) task_id: Option<i64>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    session_id: String,
    object_id: String,
    action: Action,
    /// ignore only: true.
    #[serde(skip_serializing_if = "Option::is_none")]
    acknowledged: Option<bool>,
    /// bump only: valid_until before, as stored.
    #[serde(skip_serializing_if = "Option::is_none")]
    previous_valid_until: Option<Value>,
    /// bump only.
    #[serde(skip_serializing_if = "Option::is_none")]
    new_valid_until: Option<String>,
    /// archive only: when it was archived.
    #[serde(skip_serializing_if = "Option::is_none")]
    archived_at: Option<String>,
    /// The update_object operation (bump and archive).
    #[serde(skip_serializing_if = "Option::is_none")]
    operations: Option<Vec<Value>>,
    #[serde(flatten)]
    resolution: Resolution,
}

pub(crate) struct ResolveTemporalConflict;

#[async_trait::async_trait]
impl Tool for ResolveTemporalConflict {
    type Input = Input;
    type Output = Output;
    const NAMED: &'static [(&'static str, Named)] = &[("task_id", Named::Task)];
    const TITLE: &'static str = "Resolve an expired object";
    const META: ToolMeta = ToolMeta {
        name: "resolve_temporal_conflict",
        description: "Deal with an object whose valid_until has passed (a temporal_conflict task) by 'action'. \
            Returns {action, previous_valid_until, new_valid_until, archived_at, operations}; 'commit' commits the \
            change ('commit_result'). An unknown object is object_not_found.",
        mutates_graph: true,
        creates_session: false,
        destructive: false,
        idempotent: false,
        open_world: false,
        session_fields: &["session_id"],
        session_checks: &[SessionCheck::open("session_id")],
        llm_exposed: true,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        let (session_id, object_id) = (input.session_id, input.object_id);
        let valid_until = ctx
            .runtime
            .read(&session_id, |s, _| s.get(&object_id).map(|o| o.structure.get("valid_until").cloned()))
            .await?
            .ok_or_else(|| {
                ToolError::new(
                    ErrorCode::ObjectNotFound,
                    format!("Object '{object_id}' not found in session '{session_id}'."),
                )
            })?;
        let days = match (input.action, input.extend_by_days) {
            (Action::Bump, None) => return Err(ToolError::missing_parameter("extend_by_days")),
            (Action::Bump, Some(days)) if !(days > 0.0 && days.is_finite()) => {
                return Err(ToolError::invalid_parameter(format!("'extend_by_days' must be more than 0, got {days}."))
                    .with("parameter", "extend_by_days"));
            }
            (_, days) => days.unwrap_or(0.0),
        };
        let task = resolution_task(ctx, input.task_id, &session_id).await?;
        let now = OffsetDateTime::now_utc();
        let mut output = Output {
            session_id: session_id.clone(),
            object_id: object_id.clone(),
            action: input.action,
            acknowledged: None,
            previous_valid_until: None,
            new_valid_until: None,
            archived_at: None,
            operations: None,
            resolution: Resolution::default(),
        };
        let patch: Map<String, Value> = match input.action {
            Action::Ignore => {
                output.acknowledged = Some(true);
                output.resolution = Resolution::acknowledged(ctx, task).await;
                return Ok(output);
            }
            Action::Bump => {
                let anchor = valid_until.as_ref().and_then(valid_until_instant).map_or(now, |at| at.max(now));
                let extended = anchor + time::Duration::seconds_f64(days * 86_400.0);
                let new_valid_until = serialized_at(extended);
                output.previous_valid_until = Some(valid_until.unwrap_or(Value::Null));
                output.new_valid_until = Some(new_valid_until.clone());
                [("valid_until".to_owned(), json!(new_valid_until))].into_iter().collect()
            }
            Action::Archive => {
                let archived_at = serialized_at(now);
                output.archived_at = Some(archived_at.clone());
                [
                    ("archived".to_owned(), json!(true)),
                    ("archived_at".to_owned(), json!(archived_at)),
                    ("valid_until".to_owned(), Value::Null),
                ]
                .into_iter()
                .collect()
            }
        };
        let operation = Operation::UpdateObject { object_id, structure_patch: patch.into(), mode: PatchMode::Merge };
        output.operations = Some(vec![operation.to_value()]);
        output.resolution = Resolution::commit_if(
            ctx,
            input.commit,
            &session_id,
            vec![operation],
            &["temporal_validity"],
            Self::META.name,
            task,
        )
        .await;
        Ok(output)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::testing::queue;
    use crate::testing::{call, context, obj, session, structure};

    #[tokio::test]
    async fn bump_archive_and_ignore() {
        let ctx = context();
        let id = session(
            &ctx,
            structure(vec![
                obj("old", "Fact", "Old", json!({"valid_until": "2001-01-01T00:00:00Z"})),
                obj("gone", "Fact", "Gone", json!({"valid_until": "2001-01-01"})),
            ]),
        )
        .await;
        let task = queue(&ctx, "temporal_conflict", &id, json!({"object_id": "old"})).await;
        let bumped = call(
            &ctx,
            "resolve_temporal_conflict",
            json!({"session_id": id, "object_id": "old",
            "action": "bump", "extend_by_days": 30, "commit": true, "task_id": task}),
        )
        .await;
        assert_eq!(bumped["previous_valid_until"], "2001-01-01T00:00:00Z");
        let new = bumped["new_valid_until"].as_str().unwrap();
        let in_30_days = time::OffsetDateTime::now_utc() + time::Duration::days(30);
        assert!(new.starts_with(&in_30_days.year().to_string()) && new.ends_with("+00:00"), "{new}");
        assert_eq!(
            (bumped["commit_result"]["evolved"].as_bool(), bumped["task_completed"].as_bool()),
            (Some(true), Some(true))
        );
        let stored =
            ctx.runtime.read(&id, |s, _| s.get("old").unwrap().structure["valid_until"].clone()).await.unwrap();
        assert_eq!(stored, json!(new));

        let archived = call(
            &ctx,
            "resolve_temporal_conflict",
            json!({"session_id": id, "object_id": "gone", "action": "archive", "commit": true}),
        )
        .await;
        assert_eq!(archived["commit_result"]["evolved"], true, "{archived}");
        let gone = ctx.runtime.read(&id, |s, _| s.get("gone").unwrap().structure.clone()).await.unwrap();
        assert!(gone.get("valid_until").is_none() && gone["archived"] == json!(true));

        let ignored = call(&ctx, "resolve_temporal_conflict", json!({"session_id": id, "object_id": "gone"})).await;
        assert_eq!(ignored, json!({"session_id": id, "object_id": "gone", "action": "ignore", "acknowledged": true}));
        for (args, code) in [
            (json!({"session_id": id, "object_id": "nope"}), "object_not_found"),
            (json!({"session_id": id, "object_id": "old", "action": "bump"}), "missing_parameter"),
            (json!({"session_id": id, "object_id": "old", "action": "bump", "extend_by_days": 0}), "invalid_parameter"),
            (json!({"session_id": id, "object_id": "old", "action": "delete"}), "invalid_parameter"),
        ] {
            assert_eq!(call(&ctx, "resolve_temporal_conflict", args.clone()).await["error"], code, "{args}");
        }
    }
}
