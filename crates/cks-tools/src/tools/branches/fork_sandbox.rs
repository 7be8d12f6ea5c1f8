//! `fork_sandbox`: a what-if branch. Creates a branch, optionally applies a hypothesis (evolution
//! operations, atomically, as the branch's first version) and shows the diff from the fork point.
//! The parent is never touched.
//!
//! Unlike the reference, operations are parsed before anything is created, and a hypothesis that
//! fails to apply leaves the sandbox open at its fork point (the error names it) instead of closing
//! it.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use cks_core::KnowledgeStructure;
use cks_core::ops::parse_operations;
use cks_runtime::{CommitRequest, RuntimeError};

use super::create_branch::branch_failed;
use crate::context::ToolContext;
use crate::convert::diagnostics_brief;
use crate::error::ToolError;
use crate::tool::{Coercion, SessionCheck, Tool, ToolMeta};
use crate::tools::versions::{change_counts, diff_report};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The session to fork (the parent).
    pub(crate) session_id: String,
    /// Fork from this version of the parent instead of its current state.
    pub(crate) version_id: Option<String>,
    /// A short label for the experiment; echoed back and recorded on the sandbox's first version.
    pub(crate) hypothesis: Option<String>,
    #[serde(default)]
    #[schemars(schema_with = "crate::schema::operations")]
    pub(crate) operations: Option<Value>,
}

pub(crate) struct ForkSandbox;

#[async_trait::async_trait]
impl Tool for ForkSandbox {
    type Input = Input;
    type Output = Value;
    const ARGUMENT_COERCIONS: &'static [(&'static str, Coercion)] = &[("hypothesis", Coercion::Text)];
    const META: ToolMeta = ToolMeta {
        name: "fork_sandbox",
        description: "Fork a sandbox from a session (its current state, or version 'version_id'), optionally apply \
            a hypothesis ('operations', applied atomically as the sandbox's first version) and show how the \
            sandbox differs from its fork point. The parent is never changed. Keep working in the sandbox with \
            evolve_knowledge, merge it back with merge_branch, or discard it with close_session. If the \
            operations cannot be applied ('evolution_failed', 'validation_failed') the error names the sandbox, \
            which stays open at its fork point (the reference server closed it). Returns {sandbox_session_id, \
            parent_session_id, fork_version_id, operations_applied, version_id, diff_from_fork_point: {summary, \
            operations}, message, hypothesis?, diagnostics? (warnings of the new state)}.",
        mutates_graph: false,
        creates_session: true,
        destructive: false,
        idempotent: false,
        open_world: false,
        session_fields: &["session_id"],
        session_checks: &[SessionCheck::open("session_id")],
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Value, ToolError> {
        let operations = match &input.operations {
            None => Vec::new(),
            Some(value) => parse_operations(value)
                .map_err(|e| ToolError::new("invalid_operations", format!("Could not parse 'operations': {e}")))?,
        };
        let hypothesis = input.hypothesis.filter(|h| !h.is_empty());
        let parent = input.session_id;
        let labelled = |operation: &str| {
            let mut extra = vec![("operation", json!(operation))];
            if let Some(h) = &hypothesis {
                extra.push(("hypothesis", json!(h)));
            }
            ctx.version_metadata(Self::META.name, extra)
        };
        let metadata = labelled("fork");
        let version_id = input.version_id.filter(|v| !v.is_empty());
        let branch =
            ctx.runtime.create_branch(&parent, version_id.as_deref(), metadata).await.map_err(branch_failed)?;
        let sandbox = branch.session_id;
        let fork_version_id = branch.parent_version_id;
        let sandbox_details = |error: ToolError| {
            error
                .with("sandbox_session_id", sandbox.clone())
                .with("parent_session_id", parent.clone())
                .with("fork_version_id", fork_version_id.clone())
        };

        let mut result = json!({
            "sandbox_session_id": sandbox,
            "parent_session_id": parent,
            "fork_version_id": fork_version_id,
            "operations_applied": operations.len(),
            "version_id": null,
            "message": format!(
                "Sandbox session '{sandbox}' is a separate fork of '{parent}': nothing done in it changes the \
                 parent. Continue in it with evolve_knowledge, merge it back with merge_branch, or discard it \
                 with close_session."
            ),
        });
        if operations.is_empty() {
            let empty = KnowledgeStructure::new();
            result["diff_from_fork_point"] = json!({"summary": change_counts(&empty, &empty), "operations": []});
        } else {
            let fork_state =
                ctx.runtime.read(&sandbox, |s, _| s.clone()).await.map_err(|e| sandbox_details(e.into()))?;
            let request = CommitRequest::operations(operations)
                .with_metadata(labelled("evolve"))
                .with_provenance((*ctx.provenance).clone());
            let committed = ctx.runtime.commit(&sandbox, request).await.map_err(|e| {
                sandbox_details(match e {
                    RuntimeError::Operation(e) => {
                        ToolError::new("evolution_failed", format!("Hypothesis could not be applied: {e}"))
                    }
                    RuntimeError::ValidationFailed { diagnostics } => ToolError::new(
                        "validation_failed",
                        "Applying this hypothesis would produce an invalid structure.",
                    )
                    .with("diagnostics", diagnostics_brief(&diagnostics)),
                    RuntimeError::UnverifiedProvenance { diagnostics } => ToolError::new(
                        "validation_failed",
                        "Cannot commit hypothesis: VerificationRecord has invalid or missing provenance signature.",
                    )
                    .with("details", crate::provenance::details(&diagnostics)),
                    other => other.into(),
                })
            })?;
            let (summary, operations) =
                ctx.runtime.read(&sandbox, |current, _| diff_report(&fork_state, current)).await?;
            result["version_id"] = json!(committed.version.version_id);
            result["diff_from_fork_point"] = json!({"summary": summary, "operations": operations});
            if !committed.warnings.is_empty() {
                result["diagnostics"] = diagnostics_brief(&committed.warnings);
            }
        }
        if let Some(h) = hypothesis {
            result["hypothesis"] = json!(h);
        }
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::tools::versions::testing::{call, context, ids, keys, node, session};

    #[tokio::test]
    async fn forks_applies_the_hypothesis_and_diffs() {
        let ctx = context();
        let (parent, first) = session(&ctx, json!([node("a", "Claim", "A", json!({"v": 1}))])).await;
        let result = call(
            &ctx,
            "fork_sandbox",
            json!({"session_id": parent, "hypothesis": "b matters",
                   "operations": [{"type": "add_object", "identity": {"id": "b", "type": "Claim", "name": "B"}},
                                  {"type": "rename_object", "object_id": "a", "new_name": "A2"}]}),
        )
        .await;
        assert_eq!(
            keys(&result),
            [
                "diff_from_fork_point",
                "fork_version_id",
                "hypothesis",
                "message",
                "operations_applied",
                "parent_session_id",
                "sandbox_session_id",
                "version_id"
            ]
        );
        let sandbox = result["sandbox_session_id"].as_str().unwrap();
        assert_eq!(result["parent_session_id"], parent);
        assert_eq!(result["fork_version_id"], first);
        assert_eq!(result["operations_applied"], 2);
        assert_eq!(result["hypothesis"], "b matters");
        assert_eq!(
            result["diff_from_fork_point"]["summary"],
            json!({"added_objects": 1, "removed_objects": 0, "modified_objects": 1, "added_relations": 0,
                   "removed_relations": 0, "modified_relations": 0, "renamed_objects": 1})
        );
        let ops: Vec<&str> = result["diff_from_fork_point"]["operations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["type"].as_str().unwrap())
            .collect();
        assert_eq!(ops, ["remove_object", "add_object", "add_object"]);
        assert_eq!(ids(&ctx, sandbox).await, ["a", "b"]);
        assert_eq!(ids(&ctx, &parent).await, ["a"], "the parent is untouched");
        let info = ctx.runtime.info(sandbox).await.unwrap();
        assert_eq!(info.parent_session_id.as_deref(), Some(parent.as_str()));
        let mut metadata = info.metadata;
        let node = metadata.remove("node_id").unwrap();
        assert_eq!(metadata.remove("version_vector").unwrap()[node.as_str().unwrap()], 1, "as of its head");
        assert_eq!(
            Value::Object(metadata),
            json!({"tool": "fork_sandbox", "operation": "fork", "hypothesis": "b matters"})
        );
        assert_eq!(ctx.runtime.list_versions(&parent).await.unwrap().len(), 1);
        let versions = ctx.runtime.list_versions(sandbox).await.unwrap();
        assert_eq!(versions.len(), 1);
        assert_eq!(result["version_id"], versions[0].version_id);
        let mut metadata = versions[0].metadata.clone();
        let node = metadata.remove("node_id").unwrap();
        assert_eq!(metadata.remove("version_vector").unwrap()[node.as_str().unwrap()], 1, "the sandbox's first commit");
        assert_eq!(
            Value::Object(metadata),
            json!({"tool": "fork_sandbox", "operation": "evolve", "hypothesis": "b matters"})
        );
    }

    #[tokio::test]
    async fn without_operations_it_is_a_plain_fork() {
        let ctx = context();
        let (parent, first) = session(&ctx, json!([node("a", "Claim", "A", json!({}))])).await;
        let result = call(&ctx, "fork_sandbox", json!({"session_id": parent, "version_id": first})).await;
        assert_eq!(result["operations_applied"], 0);
        assert_eq!(result["version_id"], Value::Null);
        assert!(result.get("hypothesis").is_none());
        assert_eq!(result["diff_from_fork_point"]["operations"], json!([]));
        assert!(result["diff_from_fork_point"]["summary"].as_object().unwrap().values().all(|n| n == 0));
        assert_eq!(ids(&ctx, result["sandbox_session_id"].as_str().unwrap()).await, ["a"]);
    }

    #[tokio::test]
    async fn a_failed_hypothesis_leaves_the_sandbox_at_its_fork_point() {
        let ctx = context();
        let (parent, first) = session(&ctx, json!([node("a", "Claim", "A", json!({}))])).await;
        let result = call(
            &ctx,
            "fork_sandbox",
            json!({"session_id": parent,
                   "operations": [{"type": "add_object", "identity": {"id": "b", "type": "Claim", "name": "B"}},
                                  {"type": "remove_object", "object_id": "zzz"}]}),
        )
        .await;
        assert_eq!(keys(&result), ["error", "fork_version_id", "message", "parent_session_id", "sandbox_session_id"]);
        assert_eq!(result["error"], "evolution_failed");
        assert_eq!(result["message"], "Hypothesis could not be applied: Operation #1: Object 'zzz' does not exist.");
        assert_eq!(result["fork_version_id"], first);
        let sandbox = result["sandbox_session_id"].as_str().unwrap();
        assert_eq!(ids(&ctx, sandbox).await, ["a"], "nothing applied");
        assert_eq!(ctx.runtime.list_versions(sandbox).await.unwrap().len(), 0);
        assert!(!ctx.runtime.info(sandbox).await.unwrap().closed, "the sandbox stays usable");

        // A hypothesis that breaks a validation rule ('derives' must be acyclic).
        let (cyclic, _) = session(
            &ctx,
            json!([node("x", "Claim", "X", json!({})), node("y", "Claim", "Y", json!({})),
                   {"identity": {"id": "d1", "type": "Relation", "name": "d1"},
                    "structure": {"participants": ["x", "y"], "relation_type": "derives"}}]),
        )
        .await;
        let invalid = call(
            &ctx,
            "fork_sandbox",
            json!({"session_id": cyclic,
                   "operations": [{"type": "add_relation", "identity": {"id": "d2", "type": "Relation", "name": "d2"},
                                   "participants": ["y", "x"], "relation_type": "derives"}]}),
        )
        .await;
        assert_eq!(invalid["error"], "validation_failed");
        assert_eq!(invalid["message"], "Applying this hypothesis would produce an invalid structure.");
        assert!(!invalid["diagnostics"].as_array().unwrap().is_empty());
        assert_eq!(ids(&ctx, invalid["sandbox_session_id"].as_str().unwrap()).await, ["x", "y", "d1"]);
    }

    #[tokio::test]
    async fn errors() {
        let ctx = context();
        let (parent, _) = session(&ctx, json!([])).await;
        let bad_ops =
            call(&ctx, "fork_sandbox", json!({"session_id": parent, "operations": [{"type": "explode"}]})).await;
        assert_eq!(bad_ops["error"], "invalid_operations");
        assert!(bad_ops["message"].as_str().unwrap().starts_with("Could not parse 'operations': Operation #0: "));
        assert_eq!(ctx.runtime.list_sessions().await.unwrap().len(), 1, "no sandbox for unparseable operations");
        let unknown = call(&ctx, "fork_sandbox", json!({"session_id": parent, "version_id": "v9"})).await;
        assert_eq!(unknown["error"], "branch_failed");
        assert_eq!(call(&ctx, "fork_sandbox", json!({})).await["error"], "missing_parameter");
        assert_eq!(call(&ctx, "fork_sandbox", json!({"session_id": "nope"})).await["error"], "session_not_found");
        ctx.runtime.close(&parent).await.unwrap();
        assert_eq!(call(&ctx, "fork_sandbox", json!({"session_id": parent})).await["error"], "session_closed");
    }
}
