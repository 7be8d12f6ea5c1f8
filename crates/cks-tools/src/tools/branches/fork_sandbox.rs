//! `fork_sandbox`: a what-if branch. Creates a branch, optionally applies a hypothesis (evolution
//! operations, atomically, as the branch's first version) and shows the diff from the fork point.
//! The parent is never touched.
//!
//! Operations are parsed before anything is created; a hypothesis that fails to apply closes the
//! sandbox again, as in the reference, so a failed call leaves nothing behind.

use crate::ErrorCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use cks_core::ops::parse_operations;
use cks_runtime::{CommitRequest, RuntimeError};

use super::create_branch::branch_failed;
use crate::context::ToolContext;
use crate::convert::diagnostics_brief;
use crate::error::ToolError;
use crate::tool::{Coercion, SessionCheck, Tool, ToolMeta};
use crate::tools::versions::wire_operations;

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The parent session.
    pub(crate) session_id: String,
    /// Fork from this version (default: the current state).
    pub(crate) version_id: Option<String>,
    /// A short label, recorded on the first version.
    pub(crate) hypothesis: Option<String>,
    #[serde(default)]
    #[schemars(schema_with = "crate::schema::operations")]
    pub(crate) operations: Option<Value>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    /// The new session; work in it with evolve_knowledge.
    sandbox_session_id: String,
    parent_session_id: String,
    /// The parent's version the sandbox starts from (null when the parent had no version).
    fork_version_id: Option<String>,
    /// How many of the given operations were applied (all of them, or the call fails).
    operations_applied: usize,
    /// The sandbox's first version, holding the hypothesis (null without operations).
    version_id: Option<String>,
    diff_from_fork_point: Diff,
    message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    hypothesis: Option<String>,
    /// Warnings of the sandbox's new state, when there are any.
    #[serde(skip_serializing_if = "Option::is_none")]
    diagnostics: Option<Vec<Value>>,
}

/// The diff from the fork point to the sandbox's state.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Diff {
    summary: DiffSummary,
    /// Operations that turn the fork point into the sandbox's state: a changed object is removed
    /// and added again (`remove_object` + `add_object`), and so are the relations that name it.
    operations: Vec<Map<String, Value>>,
}

/// The diff's operations counted by type.
#[derive(Debug, Default, Serialize, JsonSchema)]
pub(crate) struct DiffSummary {
    added_objects: usize,
    removed_objects: usize,
    added_relations: usize,
    removed_relations: usize,
    renamed_objects: usize,
}

impl DiffSummary {
    fn count(operations: &[Map<String, Value>]) -> Self {
        let mut summary = DiffSummary::default();
        for operation in operations {
            match operation.get("type").and_then(Value::as_str) {
                Some("add_object") => summary.added_objects += 1,
                Some("remove_object") => summary.removed_objects += 1,
                Some("add_relation") => summary.added_relations += 1,
                Some("remove_relation") => summary.removed_relations += 1,
                Some("rename_object") => summary.renamed_objects += 1,
                _ => {}
            }
        }
        summary
    }
}

pub(crate) struct ForkSandbox;

#[async_trait::async_trait]
impl Tool for ForkSandbox {
    type Input = Input;
    type Output = Output;
    const ARGUMENT_COERCIONS: &'static [(&'static str, Coercion)] = &[("hypothesis", Coercion::Text)];
    const TITLE: &'static str = "Fork a sandbox";
    const META: ToolMeta = ToolMeta {
        name: "fork_sandbox",
        description: "Fork a sandbox from a session (its current state, or 'version_id'), apply optional \
            'operations' as its first version, and show how it differs from the fork point. The parent never \
            changes; continue with evolve_knowledge, merge back with merge_branch, or drop it with close_session. \
            Operations that fail (evolution_failed, validation_failed) close the sandbox. Returns \
            {sandbox_session_id, version_id, diff_from_fork_point: {summary, operations}}.",
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
        let operations = match &input.operations {
            None => Vec::new(),
            Some(value) => parse_operations(value).map_err(|e| {
                ToolError::new(ErrorCode::InvalidOperations, format!("Could not parse 'operations': {e}"))
            })?,
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
        let evolve_metadata = labelled("evolve");
        let version_id = input.version_id.filter(|v| !v.is_empty());
        let branch =
            ctx.runtime.create_branch(&parent, version_id.as_deref(), metadata).await.map_err(branch_failed)?;
        let sandbox = branch.session_id;

        let mut output = Output {
            message: format!(
                "Sandbox session '{sandbox}' is a separate fork of '{parent}': nothing done in it changes the \
                 parent. Continue in it with evolve_knowledge, merge it back with merge_branch, or discard it \
                 with close_session."
            ),
            sandbox_session_id: sandbox.clone(),
            parent_session_id: parent,
            fork_version_id: branch.parent_version_id,
            operations_applied: operations.len(),
            version_id: None,
            diff_from_fork_point: Diff { summary: DiffSummary::default(), operations: Vec::new() },
            hypothesis,
            diagnostics: None,
        };
        if operations.is_empty() {
            return Ok(output);
        }
        let fork_state = ctx.runtime.read(&sandbox, |s, _| s.clone()).await?;
        let request = CommitRequest::operations(operations)
            .with_metadata(evolve_metadata)
            .with_provenance((*ctx.provenance).clone());
        let committed = match ctx.runtime.commit(&sandbox, request).await {
            Ok(committed) => committed,
            Err(e) => {
                // A failed hypothesis leaves nothing behind.
                let _ = ctx.runtime.close(&sandbox).await;
                return Err(match e {
                    RuntimeError::Operation(e) => {
                        ToolError::new(ErrorCode::EvolutionFailed, format!("Hypothesis could not be applied: {e}"))
                    }
                    RuntimeError::ValidationFailed { diagnostics } => ToolError::new(
                        ErrorCode::ValidationFailed,
                        "Applying this hypothesis would produce an invalid structure.",
                    )
                    .with("diagnostics", diagnostics_brief(&diagnostics)),
                    RuntimeError::UnverifiedProvenance { diagnostics } => ToolError::new(
                        ErrorCode::ValidationFailed,
                        "Cannot commit hypothesis: VerificationRecord has invalid or missing provenance signature.",
                    )
                    .with("details", crate::provenance::details(&diagnostics)),
                    other => other.into(),
                });
            }
        };
        let diff = ctx.runtime.read(&sandbox, |current, _| cks_core::diff(&fork_state, current)).await?;
        let operations: Vec<Map<String, Value>> = match wire_operations(&diff) {
            Value::Array(items) => items.into_iter().filter_map(|v| v.as_object().cloned()).collect(),
            _ => Vec::new(),
        };
        output.diff_from_fork_point = Diff { summary: DiffSummary::count(&operations), operations };
        output.version_id = Some(committed.version.version_id);
        if !committed.warnings.is_empty() {
            output.diagnostics = match diagnostics_brief(&committed.warnings) {
                Value::Array(items) => Some(items),
                _ => None,
            };
        }
        Ok(output)
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
        // A changed object counts as one removal plus one addition, as in the reference.
        assert_eq!(
            result["diff_from_fork_point"]["summary"],
            json!({"added_objects": 2, "removed_objects": 1, "added_relations": 0, "removed_relations": 0,
                   "renamed_objects": 0})
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
    async fn a_failed_hypothesis_closes_the_sandbox() {
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
        assert_eq!(
            result,
            json!({"error": "evolution_failed",
                   "message": "Hypothesis could not be applied: Operation #1: Object 'zzz' does not exist."})
        );
        let sessions = ctx.runtime.list_sessions().await.unwrap();
        assert_eq!(sessions.len(), 2);
        let sandbox = sessions.iter().find(|s| s.session_id != parent).unwrap();
        assert!(sandbox.closed, "the sandbox is closed again");
        assert_eq!(sandbox.parent_version_id.as_deref(), Some(first.as_str()));
        assert_eq!(ctx.runtime.list_versions(&sandbox.session_id).await.unwrap().len(), 0, "nothing applied");

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
        assert!(invalid.get("sandbox_session_id").is_none());
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
        assert_eq!(call(&ctx, "fork_sandbox", json!({"session_id": parent})).await["error"], "session_not_found");
    }
}
