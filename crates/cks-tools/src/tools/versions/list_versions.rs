//! `list_versions`: a session's version history, oldest first.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{SessionCheck, Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The session whose history to list.
    pub(crate) session_id: String,
    /// Most versions to return (0: all; default: as many as fit 48 KB).
    pub(crate) limit: Option<u64>,
    /// Versions to skip, oldest first (a `next_offset`).
    #[serde(default)]
    pub(crate) offset: u64,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    session_id: String,
    /// Oldest first.
    versions: Vec<VersionEntry>,
    /// True when newer versions were left out.
    #[serde(skip_serializing_if = "Option::is_none")]
    truncated: Option<bool>,
    /// The `offset` that continues the list.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_offset: Option<u64>,
}

#[derive(Debug, Serialize, JsonSchema)]
struct VersionEntry {
    version_id: String,
    created_at: String,
    transaction_id: String,
    /// Which tool committed the version, and why.
    metadata: Map<String, Value>,
    /// 1-based position in the history.
    seq: u64,
    state_hash: String,
    object_count: u64,
}

pub(crate) struct ListVersions;

#[async_trait::async_trait]
impl Tool for ListVersions {
    type Input = Input;
    type Output = Output;
    const TITLE: &'static str = "List versions";
    const META: ToolMeta = ToolMeta {
        name: "list_versions",
        description: "List a session's versions, oldest first, each {version_id, seq, created_at, metadata \
            (which tool committed it, and why), state_hash, object_count}. Use a version_id with \
            compare_versions, revert_version or create_branch. Returns {session_id, versions}.",
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
        let listed = ctx.runtime.list_versions(&input.session_id).await?;
        let page = crate::bounds::page_by(listed, input.offset, input.limit, |v| {
            // The entry's bytes, near enough: its metadata and about 300 for the rest.
            300 + crate::bounds::json_size(&v.metadata)
        });
        let mut versions = Vec::new();
        for mut v in page.items {
            // A merge's source, say, may be a session the caller does not reach.
            ctx.hide_unreachable_sessions(&mut v.metadata).await?;
            versions.push(VersionEntry {
                version_id: v.version_id,
                created_at: v.created_at,
                transaction_id: v.transaction_id,
                metadata: v.metadata,
                seq: v.seq,
                state_hash: v.state_hash,
                object_count: v.object_count,
            });
        }
        let (truncated, next_offset) = (page.next_offset.map(|_| true), page.next_offset);
        Ok(Output { session_id: input.session_id, versions, truncated, next_offset })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::tools::versions::testing::{call, context, evolve, keys, node, session};

    #[tokio::test]
    async fn lists_versions_oldest_first_with_their_metadata() {
        let ctx = context();
        let (sid, first) = session(&ctx, json!([node("a", "Claim", "A", json!({}))])).await;
        let second =
            evolve(&ctx, &sid, json!([{"type": "add_object", "identity": {"id": "b", "type": "Claim", "name": "B"}}]))
                .await;

        let result = call(&ctx, "list_versions", json!({"session_id": sid})).await;
        assert_eq!(keys(&result), ["session_id", "versions"]);
        assert_eq!(result["session_id"], sid);
        let versions = result["versions"].as_array().unwrap();
        assert_eq!(versions.len(), 2);
        assert_eq!(versions[0]["version_id"], first);
        assert_eq!(versions[1]["version_id"], second);
        assert_eq!(versions[0]["seq"], 1);
        assert_eq!(versions[1]["seq"], 2);
        assert_eq!(versions[0]["object_count"], 1);
        assert_eq!(versions[1]["object_count"], 2);
        let metadata = &versions[1]["metadata"];
        assert_eq!(metadata["tool"], "evolve_knowledge");
        assert_eq!(metadata["operation"], "evolve");
        let node = metadata["node_id"].as_str().unwrap();
        assert_eq!(versions[0]["metadata"]["node_id"], node, "one node id per session");
        let vector = metadata["version_vector"].as_object().unwrap();
        assert_eq!(vector.len(), 2, "the session's node and the store's replica: {vector:?}");
        assert_eq!(vector[node], 2);
        assert!(vector.values().all(|count| count == 2));
        assert!(versions[0]["metadata"]["version_vector"].as_object().unwrap().values().all(|count| count == 1));
        assert_eq!(
            keys(&versions[1]),
            ["created_at", "metadata", "object_count", "seq", "state_hash", "transaction_id", "version_id"]
        );
        assert!(versions[1]["created_at"].as_str().unwrap().starts_with("20"));
    }

    #[tokio::test]
    async fn closed_sessions_are_gone_and_errors_are_reported() {
        let ctx = context();
        let (sid, _) = session(&ctx, json!([])).await;
        ctx.runtime.close(&sid).await.unwrap();
        assert_eq!(call(&ctx, "list_versions", json!({"session_id": sid})).await["error"], "session_not_found");

        let missing = call(&ctx, "list_versions", json!({})).await;
        assert_eq!(
            missing,
            json!({"error": "missing_parameter", "message": "Missing required parameter: 'session_id'."})
        );
        let unknown = call(&ctx, "list_versions", json!({"session_id": "nope"})).await;
        assert_eq!(
            unknown,
            json!({"error": "session_not_found", "message": "Session 'nope' not found.", "session_id": "nope"})
        );
    }

    #[tokio::test]
    async fn a_long_history_is_cut_by_default_and_continues_from_next_offset() {
        let ctx = context();
        let (sid, _) = session(&ctx, json!([node("a", "Claim", "A", json!({}))])).await;
        for i in 0..250 {
            evolve(&ctx, &sid, json!([{"type": "update_object", "object_id": "a", "structure_patch": {"n": i}}])).await;
        }
        let all = call(&ctx, "list_versions", json!({"session_id": sid, "limit": 0})).await;
        assert_eq!(all["versions"].as_array().unwrap().len(), 251);
        assert_eq!(keys(&all), ["session_id", "versions"]);
        let mut seen = Vec::new();
        let mut offset = json!(0);
        while !offset.is_null() {
            let page = call(&ctx, "list_versions", json!({"session_id": sid, "offset": offset})).await;
            assert!(serde_json::to_string(&page).unwrap().len() < crate::bounds::ANSWER_BUDGET + 4096);
            assert_eq!(page.get("truncated").is_some(), page.get("next_offset").is_some());
            seen.extend(page["versions"].as_array().unwrap().iter().map(|v| v["seq"].as_u64().unwrap()));
            offset = page.get("next_offset").cloned().unwrap_or_default();
        }
        assert_eq!(seen, (1..=251).collect::<Vec<u64>>());
        let first = call(&ctx, "list_versions", json!({"session_id": sid})).await;
        assert_eq!(first["truncated"], true);
        let two = call(&ctx, "list_versions", json!({"session_id": sid, "limit": 2, "offset": 249})).await;
        assert_eq!(two["versions"].as_array().unwrap().len(), 2);
        assert!(two.get("next_offset").is_none());
    }
}
