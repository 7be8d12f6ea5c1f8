//! `compare_versions`: the structural diff from a historical version to the session's current
//! state, as evolution operations plus counts by kind.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{ChangeCounts, diff_report};
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{SessionCheck, Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The session to compare.
    pub(crate) session_id: String,
    /// The base version (from list_versions).
    pub(crate) target_version_id: String,
    /// Most operations to return (0: all; default: as many as fit 48 KB).
    pub(crate) limit: Option<u64>,
    /// Operations to skip (a `next_offset`).
    #[serde(default)]
    pub(crate) offset: u64,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    session_id: String,
    /// The historical version compared from (`target_version_id`).
    base_version_id: String,
    /// The session's head version.
    current_version_id: Option<String>,
    /// Always `base_to_current`: the operations turn the base into the current state.
    direction: String,
    summary: ChangeCounts,
    /// Evolution operations in wire form (as evolve_knowledge takes them).
    operations: Vec<Value>,
    /// True when operations were left out (`summary` counts them all).
    #[serde(skip_serializing_if = "Option::is_none")]
    truncated: Option<bool>,
    /// The `offset` that continues the list.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_offset: Option<u64>,
}

pub(crate) struct CompareVersions;

#[async_trait::async_trait]
impl Tool for CompareVersions {
    type Input = Input;
    type Output = Output;
    const TITLE: &'static str = "Compare a version with now";
    const META: ToolMeta = ToolMeta {
        name: "compare_versions",
        description: "Diff an earlier version of a session (the base) against its current state. Returns \
            {session_id, base_version_id, current_version_id, summary (added, removed and renamed counts), \
            operations (the evolution operations that turn the base into the current state; a changed object is \
            a removal plus an addition; at most 48 KB unless 'limit': then truncated, next_offset)}.",
        mutates_graph: false,
        creates_session: false,
        destructive: false,
        idempotent: true,
        open_world: false,
        session_fields: &["session_id"],
        session_checks: &[SessionCheck::exists("session_id")],
        llm_exposed: true,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        let (summary, operations, current_version_id) = ctx
            .runtime
            .read_against(&input.session_id, &input.target_version_id, |base, current, info| {
                let (summary, operations) = diff_report(base, current);
                (summary, operations, info.latest_version_id.clone())
            })
            .await?;
        let operations = match operations {
            Value::Array(operations) => crate::bounds::page(operations, input.offset, input.limit),
            _ => unreachable!("wire operations are a list"),
        };
        Ok(Output {
            session_id: input.session_id,
            base_version_id: input.target_version_id,
            current_version_id,
            direction: "base_to_current".into(),
            summary,
            truncated: operations.truncated(),
            next_offset: operations.next_offset,
            operations: operations.items,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::tools::versions::testing::{call, context, evolve, keys, node, relation, session};

    #[tokio::test]
    async fn diffs_a_version_against_the_current_state() {
        let ctx = context();
        let (sid, first) = session(
            &ctx,
            json!([
                node("a", "Claim", "A", json!({"v": 1})),
                node("b", "Claim", "B", json!({})),
                node("gone", "Claim", "Gone", json!({})),
                relation("r", &["a", "b"], "supports"),
            ]),
        )
        .await;
        let current = evolve(
            &ctx,
            &sid,
            json!([
                {"type": "rename_object", "object_id": "a", "new_name": "A2"},
                {"type": "remove_object", "object_id": "gone"},
                {"type": "add_object", "identity": {"id": "c", "type": "Claim", "name": "C"}, "structure": {"k": 1}},
                {"type": "add_relation", "identity": {"id": "r2", "type": "Relation", "name": "r2"},
                 "participants": ["b", "c"], "relation_type": "supports"},
            ]),
        )
        .await;

        let result = call(&ctx, "compare_versions", json!({"session_id": sid, "target_version_id": first})).await;
        assert_eq!(
            keys(&result),
            ["base_version_id", "current_version_id", "direction", "operations", "session_id", "summary"]
        );
        assert_eq!(result["session_id"], sid);
        assert_eq!(result["base_version_id"], first);
        assert_eq!(result["current_version_id"], current);
        assert_eq!(result["direction"], "base_to_current");
        assert_eq!(
            result["summary"],
            json!({"added_objects": 2, "removed_objects": 2, "added_relations": 2, "removed_relations": 1,
                   "renamed_objects": 1}),
            "a changed object counts as a removal plus an addition, as in the reference"
        );
        assert_eq!(
            result["operations"],
            json!([
                {"type": "remove_relation", "relation_id": "r"},
                {"type": "remove_object", "object_id": "a"},
                {"type": "remove_object", "object_id": "gone"},
                {"type": "add_object", "identity": {"id": "a", "type": "Claim", "name": "A2"}, "structure": {"v": 1}},
                {"type": "add_object", "identity": {"id": "c", "type": "Claim", "name": "C"}, "structure": {"k": 1}},
                {"type": "add_relation", "identity": {"id": "r", "type": "Relation", "name": "r"},
                 "participants": ["a", "b"], "relation_type": "supports", "structure": {}},
                {"type": "add_relation", "identity": {"id": "r2", "type": "Relation", "name": "r2"},
                 "participants": ["b", "c"], "relation_type": "supports", "structure": {}},
            ])
        );

        let same = call(&ctx, "compare_versions", json!({"session_id": sid, "target_version_id": current})).await;
        assert_eq!(same["operations"], json!([]));
        assert!(same["summary"].as_object().unwrap().values().all(|n| n == 0));
    }

    #[tokio::test]
    async fn errors_and_closed_sessions() {
        let ctx = context();
        let (sid, first) = session(&ctx, json!([node("a", "Claim", "A", json!({}))])).await;
        let missing = call(&ctx, "compare_versions", json!({"session_id": sid})).await;
        assert_eq!(missing["error"], "missing_parameter");
        assert_eq!(missing["message"], "Missing required parameter: 'target_version_id'.");
        let unknown = call(&ctx, "compare_versions", json!({"session_id": sid, "target_version_id": "v9"})).await;
        assert_eq!(
            unknown,
            json!({"error": "version_not_found", "message": format!("Version 'v9' not found in session '{sid}'.")})
        );
        let no_session =
            call(&ctx, "compare_versions", json!({"session_id": "nope", "target_version_id": first})).await;
        assert_eq!(no_session["error"], "session_not_found");
        ctx.runtime.close(&sid).await.unwrap();
        let closed = call(&ctx, "compare_versions", json!({"session_id": sid, "target_version_id": first})).await;
        assert_eq!(closed["error"], "session_not_found", "a closed session is gone");
    }

    #[tokio::test]
    async fn a_large_diff_is_cut_by_default_and_continues_from_next_offset() {
        let ctx = context();
        let (sid, first) = session(&ctx, json!([node("a", "Claim", "A", json!({}))])).await;
        let added: Vec<_> = (0..600)
            .map(|i| {
                json!({"type": "add_object", "identity": {"id": format!("n{i:03}"), "type": "Claim", "name": "N"},
                            "structure": {"text": "x".repeat(100)}})
            })
            .collect();
        evolve(&ctx, &sid, json!(added)).await;
        let args = |extra: serde_json::Value| {
            let mut args = json!({"session_id": sid, "target_version_id": first});
            args.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            args
        };
        let all = call(&ctx, "compare_versions", args(json!({"limit": 0}))).await;
        assert_eq!(all["operations"].as_array().unwrap().len(), 600);
        assert!(all.get("truncated").is_none() && all.get("next_offset").is_none());
        let mut collected = Vec::new();
        let mut offset = json!(0);
        while !offset.is_null() {
            let page = call(&ctx, "compare_versions", args(json!({"offset": offset}))).await;
            assert!(serde_json::to_string(&page).unwrap().len() < crate::bounds::ANSWER_BUDGET + 4096);
            assert_eq!(page["summary"]["added_objects"], 600, "the counts are whole");
            assert_eq!(page.get("truncated").is_some(), page.get("next_offset").is_some());
            collected.extend(page["operations"].as_array().unwrap().clone());
            offset = page.get("next_offset").cloned().unwrap_or_default();
        }
        assert!(collected.len() == 600 && collected == *all["operations"].as_array().unwrap());
        let first_page = call(&ctx, "compare_versions", args(json!({}))).await;
        assert_eq!(first_page["truncated"], true);
        let limited = call(&ctx, "compare_versions", args(json!({"limit": 10, "offset": 595}))).await;
        assert_eq!(limited["operations"].as_array().unwrap().len(), 5);
        assert!(limited.get("next_offset").is_none());
    }
}
