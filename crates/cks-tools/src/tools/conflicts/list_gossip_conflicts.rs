//! `list_gossip_conflicts`: the queue's open `gossip_conflict` tasks, in the reference's record
//! shape.
//!
//! The reference finds these when its gossip protocol brings a peer's divergent edits; replicas of
//! this server share one database instead and never diverge, so no part of it queues a gossip
//! conflict. The tool lists what another worker (or an import) put in the queue, and is otherwise
//! empty: it invents nothing.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use cks_runtime::store::{TaskFilter, TaskStatus};

use super::{ConflictType, store_error};
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// Only the conflicts whose target is this session (default: all).
    pub(crate) session_id: Option<String>,
    /// Accepted for compatibility; listing never removes a task (they are settled through the queue
    /// tools).
    #[serde(default)]
    #[allow(dead_code)]
    pub(crate) peek: bool,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Conflict {
    /// The task's id, as text.
    record_id: String,
    /// When the task was queued, in seconds since the epoch.
    detected_at: f64,
    source_replica_id: Value,
    /// The target session.
    session_id: String,
    source_session_id: Value,
    /// The conflicting object ids.
    conflicts: Value,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    conflicts: Vec<Conflict>,
    count: usize,
}

pub(crate) struct ListGossipConflicts;

#[async_trait::async_trait]
impl Tool for ListGossipConflicts {
    type Input = Input;
    type Output = Output;
    const TITLE: &'static str = "List gossip conflicts";
    const META: ToolMeta = ToolMeta {
        name: "list_gossip_conflicts",
        description: "Open gossip_conflict tasks of the conflict queue, oldest first: {conflicts: [{record_id, \
            detected_at (seconds since the epoch), source_replica_id, session_id (the target), source_session_id \
            (null when it is a session here you cannot reach), \
            conflicts (object ids)}], count}; 'session_id' keeps one target session's. This server's replicas share \
            one database and never diverge, so nothing here queues gossip conflicts: the list shows only tasks \
            another worker queued, and is usually empty. Listing removes nothing ('peek' is accepted and changes \
            nothing); settle a conflict with resolve_gossip_conflict and complete_conflict_task.",
        mutates_graph: false,
        creates_session: false,
        destructive: false,
        idempotent: true,
        open_world: false,
        session_fields: &["session_id"],
        session_checks: &[],
        llm_exposed: true,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        let filter = TaskFilter {
            task_type: Some(ConflictType::GossipConflict.as_str().to_owned()),
            session_id: input.session_id.filter(|s| !s.is_empty()),
            status: None,
        };
        let tasks = ctx.runtime.tasks().list(&filter).await.map_err(store_error)?;
        let mut conflicts = Vec::new();
        for task in ctx.reachable(tasks, |task| &task.session_id).await? {
            if task.status == TaskStatus::Dead {
                continue;
            }
            let payload: Value = serde_json::from_str(&task.payload).unwrap_or(Value::Null);
            let field = |name: &str| payload.get(name).cloned().unwrap_or(Value::Null);
            // The source is named by the replica that found the conflict: here, it may be a
            // session the caller does not reach.
            let source_session_id = match field("source_session_id") {
                Value::String(id) => ctx.reachable_id(Some(id)).await?.map_or(Value::Null, Value::String),
                other => other,
            };
            conflicts.push(Conflict {
                record_id: task.task_id.to_string(),
                detected_at: task.created_at_ms as f64 / 1_000.0,
                source_replica_id: field("source_replica_id"),
                session_id: task.session_id,
                source_session_id,
                conflicts: field("conflicts"),
            });
        }
        Ok(Output { count: conflicts.len(), conflicts })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::testing::queue;
    use crate::testing::{call, context};

    #[tokio::test]
    async fn lists_queued_gossip_conflicts_and_removes_nothing() {
        let ctx = context();
        assert_eq!(call(&ctx, "list_gossip_conflicts", json!({})).await, json!({"conflicts": [], "count": 0}));
        let payload = json!({"source_replica_id": "r2", "source_session_id": "src", "conflicts": ["a", "b"]});
        let task = queue(&ctx, "gossip_conflict", "target", payload).await;
        queue(&ctx, "gossip_conflict", "other", json!({})).await;
        queue(&ctx, "temporal_conflict", "target", json!({"object_id": "x"})).await;

        let listed = call(&ctx, "list_gossip_conflicts", json!({"session_id": "target"})).await;
        assert_eq!(listed["count"], 1);
        let record = &listed["conflicts"][0];
        assert_eq!(record["record_id"], task.to_string());
        assert_eq!(
            (record["session_id"].as_str(), record["source_session_id"].as_str()),
            (Some("target"), Some("src"))
        );
        assert_eq!(
            (record["source_replica_id"].clone(), record["conflicts"].clone()),
            (json!("r2"), json!(["a", "b"]))
        );
        assert!(record["detected_at"].as_f64().unwrap() > 1.7e9);
        let everything = call(&ctx, "list_gossip_conflicts", json!({})).await;
        assert_eq!(everything["count"], 2, "listing drained nothing");
    }
}
