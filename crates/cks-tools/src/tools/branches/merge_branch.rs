//! `merge_branch`: three-way merge of a source session into a target session, committed as a new
//! version of the target. Conflicts are a normal result (`merged: false`), not an error.

use crate::ErrorCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use cks_runtime::{MergeReport, RuntimeError};

use super::{ConflictEntry, conflicts, merge_error, resolutions};
use crate::bounds::SERIALIZE_LIMIT;
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{ArgumentCode, SessionCheck, Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The session to merge into (must be open).
    pub(crate) target_session_id: String,
    /// The branch to merge in.
    pub(crate) source_session_id: String,
    /// The base version, only when the source is not a branch of the target
    /// ("00000000-0000-0000-0000-000000000000": empty).
    pub(crate) base_version_id: Option<String>,
    /// Per conflicting object id: "branch_a" (the target's), "branch_b" (the source's), null (leave
    /// it out) or a whole object {identity, structure}.
    #[serde(default)]
    #[schemars(schema_with = "crate::schema::object")]
    pub(crate) resolutions: Option<Value>,
    /// Include `serialized` in the result (default: only up to 2,000 objects and 40 KB).
    pub(crate) return_structure: Option<bool>,
}

/// A merge (`merged: true`) or the conflicts that stopped it (`merged: false`, `message`,
/// `conflicts`).
#[derive(Debug, Default, Serialize, JsonSchema)]
pub(crate) struct Output {
    pub(crate) merged: bool,
    /// On conflict: what to do next.
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) conflicts: Option<Vec<ConflictEntry>>,
    /// The target session.
    #[serde(skip_serializing_if = "Option::is_none")]
    session_id: Option<String>,
    /// The target's new version (a merge that brings nothing new is recorded too).
    #[serde(skip_serializing_if = "Option::is_none")]
    version_id: Option<String>,
    /// The merged structure as canonical JSON (up to 2,000 objects unless `return_structure`).
    #[serde(skip_serializing_if = "Option::is_none")]
    serialized: Option<String>,
    /// Relations left out because a participant did not survive the merge.
    #[serde(skip_serializing_if = "Option::is_none")]
    dropped_relations: Option<Vec<String>>,
    /// Conflicting ids settled by `resolutions`.
    #[serde(skip_serializing_if = "Option::is_none")]
    conflicts_resolved: Option<Vec<String>>,
    /// True when the merge brought nothing new (its version has the same content as the one before).
    #[serde(skip_serializing_if = "Option::is_none")]
    no_op: Option<bool>,
}

pub(crate) struct MergeBranch;

const CONFLICT_GUIDANCE: &str = "The merge was not applied: both sessions changed the objects listed in \
    'conflicts' differently since the merge base. Compare each entry's 'target_diff' and 'source_diff', then call \
    merge_branch again with 'resolutions' mapping each object_id to \"branch_a\" (keep the target's version), \
    \"branch_b\" (take the source's), null (drop the object) or a complete object. Everything that does not \
    conflict merges in that same call; conflicts left without a resolution are reported again. Alternatively, \
    change the target with evolve_knowledge and retry without resolutions.";

#[async_trait::async_trait]
impl Tool for MergeBranch {
    type Input = Input;
    type Output = Output;
    const ARGUMENT_CODES: &'static [ArgumentCode] =
        &[ArgumentCode::missing("source_session_id", ErrorCode::SessionNotFound)];
    const TITLE: &'static str = "Merge a branch";
    const META: ToolMeta = ToolMeta {
        name: "merge_branch",
        description: "Three-way merge of a branch ('source_session_id') into 'target_session_id', committed as a \
            new version of the target; the base is the branch's fork point. If both sides changed an object \
            differently, nothing is committed and the result is {merged: false, conflicts: [{object_id, \
            target_diff, source_diff}]}: retry with 'resolutions'. Returns {merged: true, session_id, version_id, \
            dropped_relations (relations left naming a deleted object), serialized}.",
        mutates_graph: true,
        creates_session: false,
        // The merge brings the source's removals and replacements into the target.
        destructive: true,
        idempotent: false,
        open_world: false,
        session_fields: &["target_session_id", "source_session_id"],
        session_checks: &[SessionCheck::open("target_session_id"), SessionCheck::exists("source_session_id")],
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        let resolutions = resolutions(input.resolutions.as_ref())?;
        let base_version_id = input.base_version_id.as_deref().filter(|v| !v.is_empty());
        let metadata = ctx.version_metadata(Self::META.name, [("operation", json!("merge"))]);
        let target = &input.target_session_id;
        let report = ctx
            .runtime
            .merge_branch(target, &input.source_session_id, base_version_id, &resolutions, metadata)
            .await
            .map_err(|e| match e {
                RuntimeError::Merge(e) => merge_error(e),
                other => other.into(),
            })?;
        let (committed, changed, dropped_relations, resolved) = match report {
            MergeReport::Conflicts(list) => {
                return Ok(Output {
                    message: Some(CONFLICT_GUIDANCE.to_owned()),
                    conflicts: Some(conflicts(&list)),
                    ..Output::default()
                });
            }
            MergeReport::Merged { committed, changed, dropped_relations, resolved } => {
                (committed, changed, dropped_relations, resolved)
            }
        };
        let object_count = committed.version.object_count;
        let asked = input.return_structure;
        // The document is read only when it may be answered.
        let serialized = if asked.unwrap_or(object_count as usize <= SERIALIZE_LIMIT) {
            ctx.runtime.read(target, move |s, _| crate::bounds::serialized(s, asked)).await?
        } else {
            None
        };
        Ok(Output {
            merged: true,
            session_id: Some(target.clone()),
            version_id: Some(committed.version.version_id.clone()),
            serialized,
            no_op: (!changed).then_some(true),
            dropped_relations: Some(dropped_relations).filter(|d| !d.is_empty()),
            conflicts_resolved: Some(resolved).filter(|r| !r.is_empty()),
            ..Output::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::ToolContext;
    use crate::tools::versions::testing::{call, context, evolve, ids, keys, node, relation, session};

    async fn branch(ctx: &ToolContext, parent: &str) -> String {
        let result = call(ctx, "create_branch", json!({"session_id": parent})).await;
        result["session_id"].as_str().unwrap().to_owned()
    }

    fn add(id: &str) -> Value {
        json!({"type": "add_object", "identity": {"id": id, "type": "Claim", "name": id}})
    }

    #[tokio::test]
    async fn merges_a_branch_and_commits_on_the_target() {
        let ctx = context();
        let (target, _) =
            session(&ctx, json!([node("a", "Claim", "A", json!({})), node("b", "Claim", "B", json!({}))])).await;
        let source = branch(&ctx, &target).await;
        evolve(&ctx, &target, json!([add("t")])).await;
        evolve(
            &ctx,
            &source,
            json!([add("s"), {"type": "add_relation", "identity": {"id": "r", "type": "Relation", "name": "r"},
                              "participants": ["a", "s"], "relation_type": "supports"}]),
        )
        .await;

        let args = json!({"target_session_id": target, "source_session_id": source});
        let result = call(&ctx, "merge_branch", args.clone()).await;
        assert_eq!(keys(&result), ["merged", "serialized", "session_id", "version_id"]);
        assert_eq!(result["merged"], true);
        assert_eq!(result["session_id"], target);
        assert_eq!(ids(&ctx, &target).await, ["a", "b", "t", "s", "r"]);
        let versions = ctx.runtime.list_versions(&target).await.unwrap();
        let last = versions.last().unwrap();
        assert_eq!(result["version_id"], last.version_id);
        let mut metadata = last.metadata.clone();
        assert_eq!(metadata.remove("version_vector").unwrap().as_object().unwrap().len(), 2);
        assert!(metadata.remove("node_id").is_some());
        assert_eq!(
            Value::Object(metadata),
            json!({"tool": "merge_branch", "operation": "merge", "source_session_id": source})
        );
        let serialized: Value = serde_json::from_str(result["serialized"].as_str().unwrap()).unwrap();
        assert_eq!(serialized["objects"].as_array().unwrap().len(), 5);

        // Merging again changes nothing, but is recorded as a version (as by the reference).
        let state_hash = last.state_hash.clone();
        let again = call(&ctx, "merge_branch", args).await;
        assert_eq!(again["no_op"], true);
        let versions = ctx.runtime.list_versions(&target).await.unwrap();
        let recorded = versions.last().unwrap();
        assert_eq!(again["version_id"], recorded.version_id);
        assert_ne!(recorded.version_id, last.version_id);
        assert_eq!(recorded.state_hash, state_hash, "same content");
    }

    #[tokio::test]
    async fn a_session_merged_into_itself_records_a_version_and_changes_nothing() {
        let ctx = context();
        let (target, _) = session(&ctx, json!([node("a", "Claim", "A", json!({}))])).await;
        let before = ctx.runtime.list_versions(&target).await.unwrap();
        let result =
            call(&ctx, "merge_branch", json!({"target_session_id": target, "source_session_id": target})).await;
        assert_eq!(result["merged"], true);
        assert_eq!(result["no_op"], true);
        let after = ctx.runtime.list_versions(&target).await.unwrap();
        assert_eq!(after.len(), before.len() + 1);
        assert_eq!(after.last().unwrap().state_hash, before.last().unwrap().state_hash);
        assert_eq!(ids(&ctx, &target).await, ["a"]);
    }

    #[tokio::test]
    async fn conflicts_are_reported_then_resolved() {
        let ctx = context();
        let (target, _) = session(
            &ctx,
            json!([
                node("a", "Claim", "A", json!({"v": 1})),
                node("b", "Claim", "B", json!({})),
                relation("r", &["a", "b"], "supports")
            ]),
        )
        .await;
        let source = branch(&ctx, &target).await;
        evolve(&ctx, &target, json!([{"type": "update_object", "object_id": "a", "structure_patch": {"v": 2}}])).await;
        evolve(
            &ctx,
            &source,
            json!([{"type": "update_object", "object_id": "a", "structure_patch": {"v": 3}},
                   {"type": "remove_object", "object_id": "b"}]),
        )
        .await;
        let before = ctx.runtime.list_versions(&target).await.unwrap().len();

        let args = json!({"target_session_id": target, "source_session_id": source});
        let conflict = call(&ctx, "merge_branch", args.clone()).await;
        assert_eq!(keys(&conflict), ["conflicts", "merged", "message"]);
        assert_eq!(conflict["merged"], false);
        assert_eq!(
            conflict["conflicts"],
            json!([{"object_id": "a",
                    "target_diff": {"action": "modified", "type": "Claim", "name": "A", "changes": {"v": {"from": 1, "to": 2}}},
                    "source_diff": {"action": "modified", "type": "Claim", "name": "A", "changes": {"v": {"from": 1, "to": 3}}}}])
        );
        assert_eq!(ctx.runtime.list_versions(&target).await.unwrap().len(), before, "nothing committed");

        let mut resolved_args = args;
        resolved_args["resolutions"] = json!({"a": "branch_b"});
        let merged = call(&ctx, "merge_branch", resolved_args).await;
        assert_eq!(merged["merged"], true);
        assert_eq!(merged["conflicts_resolved"], json!(["a"]));
        assert!(merged.get("dropped_relations").is_none(), "b and r were deleted by the source, not dropped");
        assert_eq!(ids(&ctx, &target).await, ["a"]);
        let v = ctx.runtime.read(&target, |s, _| s.get("a").unwrap().structure["v"].clone()).await.unwrap();
        assert_eq!(v, 3);
    }

    #[tokio::test]
    async fn dangling_relations_are_dropped_and_reported() {
        let ctx = context();
        let (target, _) =
            session(&ctx, json!([node("a", "Claim", "A", json!({})), node("b", "Claim", "B", json!({}))])).await;
        let source = branch(&ctx, &target).await;
        // The target deletes b while the source relates a to b.
        evolve(&ctx, &target, json!([{"type": "remove_object", "object_id": "b"}])).await;
        evolve(
            &ctx,
            &source,
            json!([{"type": "add_relation", "identity": {"id": "r", "type": "Relation", "name": "r"},
                    "participants": ["a", "b"], "relation_type": "supports"}]),
        )
        .await;
        let result =
            call(&ctx, "merge_branch", json!({"target_session_id": target, "source_session_id": source})).await;
        assert_eq!(result["merged"], true);
        assert_eq!(result["dropped_relations"], json!(["r"]));
        assert_eq!(ids(&ctx, &target).await, ["a"]);
    }

    #[tokio::test]
    async fn errors() {
        let ctx = context();
        let (target, first) = session(&ctx, json!([node("a", "Claim", "A", json!({}))])).await;
        let (unrelated, _) = session(&ctx, json!([node("x", "Claim", "X", json!({}))])).await;
        let source = branch(&ctx, &target).await;

        let missing = call(&ctx, "merge_branch", json!({"target_session_id": target})).await;
        assert_eq!(missing["error"], "session_not_found", "as the reference answers a missing source");
        assert_eq!(missing["parameter"], "source_session_id");
        let no_source =
            call(&ctx, "merge_branch", json!({"target_session_id": target, "source_session_id": "nope"})).await;
        assert_eq!(no_source["error"], "session_not_found");
        assert_eq!(no_source["session_id"], "nope");
        let no_target =
            call(&ctx, "merge_branch", json!({"target_session_id": "nope", "source_session_id": source})).await;
        assert_eq!(no_target["error"], "session_not_found");

        let no_base =
            call(&ctx, "merge_branch", json!({"target_session_id": target, "source_session_id": unrelated})).await;
        assert_eq!(no_base["error"], "merge_failed");
        let unknown_base = call(
            &ctx,
            "merge_branch",
            json!({"target_session_id": target, "source_session_id": unrelated, "base_version_id": "v9"}),
        )
        .await;
        assert_eq!(unknown_base["error"], "version_not_found");
        let with_base = call(
            &ctx,
            "merge_branch",
            json!({"target_session_id": target, "source_session_id": unrelated, "base_version_id": first}),
        )
        .await;
        assert_eq!(with_base["merged"], true, "an explicit base merges unrelated sessions: {with_base}");
        assert_eq!(ids(&ctx, &target).await, ["x"]);

        let bad = call(
            &ctx,
            "merge_branch",
            json!({"target_session_id": target, "source_session_id": source, "resolutions": {"a": "both"}}),
        )
        .await;
        assert_eq!(bad["error"], "invalid_parameter");
        assert_eq!(bad["parameter"], "resolutions");
        assert!(bad["message"].as_str().unwrap().starts_with("Invalid 'resolutions' entry: "));
        let not_needed = call(
            &ctx,
            "merge_branch",
            json!({"target_session_id": target, "source_session_id": source, "resolutions": {"zzz": "branch_a"}}),
        )
        .await;
        assert_eq!(not_needed["error"], "merge_failed");

        ctx.runtime.close(&source).await.unwrap();
        let closed_source =
            call(&ctx, "merge_branch", json!({"target_session_id": target, "source_session_id": source})).await;
        assert_eq!(closed_source["error"], "session_not_found", "a closed session is gone");
        assert_eq!(closed_source["message"], format!("Session '{source}' not found."));
        ctx.runtime.close(&target).await.unwrap();
        let closed_target =
            call(&ctx, "merge_branch", json!({"target_session_id": target, "source_session_id": source})).await;
        assert_eq!(closed_target["error"], "session_not_found");
    }
}
