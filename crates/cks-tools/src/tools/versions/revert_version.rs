//! `revert_version`: commit the state of an earlier version as the session's new head. History only
//! grows: the versions after the target stay listed and can be reverted to in turn.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::bounds::SERIALIZE_LIMIT;
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{SessionCheck, Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The session to revert.
    pub(crate) session_id: String,
    /// The version to restore (from list_versions).
    pub(crate) target_version_id: String,
    /// Include `serialized` in the result (default: only up to 2,000 objects and 40 KB).
    pub(crate) return_structure: Option<bool>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    /// The version whose state is current again.
    reverted_to: String,
    /// The version the revert committed.
    new_version_id: String,
    session_id: String,
    /// Objects in the new state, relations included.
    object_count: u64,
    state_hash: String,
    /// The new state as a canonical CKS JSON document; left out above 2,000 objects unless
    /// `return_structure` asks for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    serialized: Option<String>,
}

pub(crate) struct RevertVersion;

#[async_trait::async_trait]
impl Tool for RevertVersion {
    type Input = Input;
    type Output = Output;
    const TITLE: &'static str = "Revert to a version";
    const META: ToolMeta = ToolMeta {
        name: "revert_version",
        description: "Make an earlier version's state current again, committed as a new version (the history \
            keeps everything, so a revert can be undone). An unknown version is 'version_not_found'. Returns \
            {reverted_to, new_version_id, session_id, object_count, serialized}.",
        mutates_graph: true,
        creates_session: false,
        destructive: true,
        idempotent: false,
        open_world: false,
        session_fields: &["session_id"],
        session_checks: &[SessionCheck::open("session_id")],
        llm_exposed: true,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        // An empty id names no version: the argument is missing, as the reference says.
        if input.target_version_id.is_empty() {
            return Err(ToolError::missing_parameter("target_version_id"));
        }
        let metadata = ctx.version_metadata(Self::META.name, [("operation", json!("revert"))]);
        let committed = ctx.runtime.revert(&input.session_id, &input.target_version_id, metadata).await?;
        let asked = input.return_structure;
        // The document is read only when it may be answered.
        let serialized = if asked.unwrap_or(committed.version.object_count as usize <= SERIALIZE_LIMIT) {
            ctx.runtime.read(&input.session_id, move |s, _| crate::bounds::serialized(s, asked)).await?
        } else {
            None
        };
        Ok(Output {
            reverted_to: input.target_version_id,
            new_version_id: committed.version.version_id,
            session_id: input.session_id,
            object_count: committed.version.object_count,
            state_hash: committed.version.state_hash,
            serialized,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::tools::versions::testing::{call, context, evolve, ids, keys, node, session};

    #[tokio::test]
    async fn reverts_by_committing_the_old_state() {
        let ctx = context();
        let (sid, first) = session(&ctx, json!([node("a", "Claim", "A", json!({"v": 1}))])).await;
        evolve(&ctx, &sid, json!([{"type": "add_object", "identity": {"id": "b", "type": "Claim", "name": "B"}}]))
            .await;
        assert_eq!(ids(&ctx, &sid).await, ["a", "b"]);

        let empty = call(&ctx, "revert_version", json!({"session_id": sid, "target_version_id": ""})).await;
        assert_eq!(empty["error"], "missing_parameter");
        let result = call(&ctx, "revert_version", json!({"session_id": sid, "target_version_id": first})).await;
        assert_eq!(
            keys(&result),
            ["new_version_id", "object_count", "reverted_to", "serialized", "session_id", "state_hash"]
        );
        assert_eq!(result["reverted_to"], first);
        assert_eq!(result["session_id"], sid);
        assert_eq!(result["object_count"], 1);
        let serialized: serde_json::Value = serde_json::from_str(result["serialized"].as_str().unwrap()).unwrap();
        assert_eq!(serialized["objects"][0]["identity"]["id"], "a");
        assert_eq!(serialized["_cks_min_reader_version"], "1.13.0", "a client document");
        assert_eq!(ids(&ctx, &sid).await, ["a"]);

        let versions = ctx.runtime.list_versions(&sid).await.unwrap();
        assert_eq!(versions.len(), 3, "history only grows");
        let last = versions.last().unwrap();
        assert_eq!(result["new_version_id"], last.version_id);
        assert_eq!(last.state_hash, versions[0].state_hash);
        let mut metadata = last.metadata.clone();
        assert_eq!(metadata.remove("version_vector").unwrap()[versions[0].metadata["node_id"].as_str().unwrap()], 3);
        assert!(metadata.remove("node_id").is_some());
        assert_eq!(
            serde_json::Value::Object(metadata),
            json!({"tool": "revert_version", "operation": "revert", "reverted_to": first})
        );

        let quiet = call(
            &ctx,
            "revert_version",
            json!({"session_id": sid, "target_version_id": versions[1].version_id, "return_structure": false}),
        )
        .await;
        assert!(quiet.get("serialized").is_none());
        assert_eq!(quiet["object_count"], 2);
    }

    #[tokio::test]
    async fn errors() {
        let ctx = context();
        let (sid, first) = session(&ctx, json!([])).await;
        let missing = call(&ctx, "revert_version", json!({"session_id": sid})).await;
        assert_eq!(
            missing,
            json!({"error": "missing_parameter", "message": "Missing required parameter: 'target_version_id'."})
        );
        let unknown = call(&ctx, "revert_version", json!({"session_id": sid, "target_version_id": "v-nope"})).await;
        assert_eq!(unknown["error"], "version_not_found");
        assert_eq!(unknown["message"], format!("Version 'v-nope' not found in session '{sid}'."));
        let (other, other_version) = session(&ctx, json!([])).await;
        let foreign =
            call(&ctx, "revert_version", json!({"session_id": sid, "target_version_id": other_version})).await;
        assert_eq!(foreign["error"], "version_not_found", "a version of another session");
        let no_session = call(&ctx, "revert_version", json!({"session_id": "nope", "target_version_id": first})).await;
        assert_eq!(no_session["error"], "session_not_found");
        ctx.runtime.close(&other).await.unwrap();
        let closed =
            call(&ctx, "revert_version", json!({"session_id": other, "target_version_id": other_version})).await;
        assert_eq!(closed["error"], "session_not_found");
        assert_eq!(ctx.runtime.list_versions(&sid).await.unwrap().len(), 1, "nothing committed");
    }
}
