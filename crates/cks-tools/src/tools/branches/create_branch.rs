//! `create_branch`: a new session starting from a session's current state or one of its versions,
//! with the fork point recorded so that merge_branch can find the merge base by itself.

use crate::ErrorCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use cks_runtime::RuntimeError;

use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{ArgumentCode, SessionCheck, Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The parent session.
    pub(crate) session_id: String,
    /// Start from this version of the parent (default: its current state).
    pub(crate) version_id: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    /// The branch (a new session).
    session_id: String,
    parent_session_id: String,
    /// The parent's version the branch starts from (null when the parent had no version).
    parent_version_id: Option<String>,
    message: String,
}

pub(crate) struct CreateBranch;

#[async_trait::async_trait]
impl Tool for CreateBranch {
    type Input = Input;
    type Output = Output;
    const ARGUMENT_CODES: &'static [ArgumentCode] = &[ArgumentCode::malformed("version_id", ErrorCode::BranchFailed)];
    const TITLE: &'static str = "Create a branch";
    const META: ToolMeta = ToolMeta {
        name: "create_branch",
        description: "Create a branch: a new, independent session starting from a session's current state or \
            its version 'version_id'. merge_branch merges it back without being told a base; close_session \
            drops it. An unknown version_id is 'branch_failed'. Returns {session_id (the branch), \
            parent_session_id, parent_version_id}.",
        mutates_graph: false,
        creates_session: true,
        destructive: false,
        idempotent: false,
        open_world: false,
        session_fields: &["session_id"],
        session_checks: &[SessionCheck::open("session_id")],
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        let version_id = input.version_id.filter(|v| !v.is_empty());
        let metadata = ctx.version_metadata(Self::META.name, [("operation", json!("branch"))]);
        let branch = ctx
            .runtime
            .create_branch(&input.session_id, version_id.as_deref(), metadata)
            .await
            .map_err(branch_failed)?;
        Ok(Output {
            message: format!("Branch session {} created from parent {}.", branch.session_id, input.session_id),
            session_id: branch.session_id,
            parent_session_id: input.session_id,
            parent_version_id: branch.parent_version_id,
        })
    }
}

/// An unknown fork version is `branch_failed`, as in the reference.
pub(crate) fn branch_failed(e: RuntimeError) -> ToolError {
    match e {
        RuntimeError::VersionNotFound { ref version_id, .. } => {
            let version_id = version_id.clone();
            ToolError::new(ErrorCode::BranchFailed, e.to_string()).with("version_id", version_id)
        }
        other => other.into(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::tools::versions::testing::{call, context, evolve, ids, keys, node, session};

    #[tokio::test]
    async fn branches_from_the_current_state_or_a_version() {
        let ctx = context();
        let (parent, first) = session(&ctx, json!([node("a", "Claim", "A", json!({}))])).await;
        let second = evolve(
            &ctx,
            &parent,
            json!([{"type": "add_object", "identity": {"id": "b", "type": "Claim", "name": "B"}}]),
        )
        .await;

        let result = call(&ctx, "create_branch", json!({"session_id": parent})).await;
        assert_eq!(keys(&result), ["message", "parent_session_id", "parent_version_id", "session_id"]);
        let branch = result["session_id"].as_str().unwrap();
        assert_ne!(branch, parent);
        assert_eq!(result["parent_session_id"], parent);
        assert_eq!(result["parent_version_id"], second);
        assert_eq!(result["message"], format!("Branch session {branch} created from parent {parent}."));
        assert_eq!(ids(&ctx, branch).await, ["a", "b"]);
        let info = ctx.runtime.info(branch).await.unwrap();
        assert_eq!(info.parent_session_id.as_deref(), Some(parent.as_str()));
        assert_eq!(info.version_count, 0, "a branch starts with no versions");

        let old = call(&ctx, "create_branch", json!({"session_id": parent, "version_id": first})).await;
        assert_eq!(old["parent_version_id"], first);
        assert_eq!(ids(&ctx, old["session_id"].as_str().unwrap()).await, ["a"]);
        assert_eq!(ids(&ctx, &parent).await, ["a", "b"], "the parent is untouched");
    }

    #[tokio::test]
    async fn errors() {
        let ctx = context();
        let (parent, _) = session(&ctx, json!([])).await;
        let unknown = call(&ctx, "create_branch", json!({"session_id": parent, "version_id": "v9"})).await;
        assert_eq!(
            unknown,
            json!({"error": "branch_failed", "message": format!("Version 'v9' not found in session '{parent}'."),
                   "version_id": "v9"})
        );
        assert_eq!(call(&ctx, "create_branch", json!({})).await["error"], "missing_parameter");
        assert_eq!(call(&ctx, "create_branch", json!({"session_id": "nope"})).await["error"], "session_not_found");
        ctx.runtime.close(&parent).await.unwrap();
        assert_eq!(call(&ctx, "create_branch", json!({"session_id": parent})).await["error"], "session_not_found");
        assert_eq!(ctx.runtime.list_sessions().await.unwrap().len(), 1, "no branch was created");
    }
}
