//! `merge_knowledge`: three-way merge of three structures given as JSON. Pure: no session is read
//! or written.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use cks_core::merge::{MergeError, merge};

use super::{ConflictEntry, conflicts, merge_error, resolutions};
use crate::context::ToolContext;
use crate::convert::parse_json_data;
use crate::error::ToolError;
use crate::tool::{Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The common ancestor, as a canonical CKS JSON string.
    #[schemars(schema_with = "crate::schema::json_data")]
    pub(crate) json_data_base: Value,
    /// Branch A (reported as the target side of conflicts), as a canonical CKS JSON string.
    #[schemars(schema_with = "crate::schema::json_data")]
    pub(crate) json_data_branch_a: Value,
    /// Branch B (reported as the source side of conflicts), as a canonical CKS JSON string.
    #[schemars(schema_with = "crate::schema::json_data")]
    pub(crate) json_data_branch_b: Value,
    /// How to settle conflicts, by object id: "branch_a", "branch_b", null (leave the object out),
    /// or a complete object {identity, structure}.
    #[serde(default)]
    #[schemars(schema_with = "crate::schema::object")]
    pub(crate) resolutions: Option<Value>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    /// False when there are conflicts (then nothing else but `conflicts`).
    merged: bool,
    /// The merged structure as canonical JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    serialized: Option<String>,
    /// Relations left out because a participant did not survive the merge.
    #[serde(skip_serializing_if = "Option::is_none")]
    dropped_relations: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    conflicts: Option<Vec<ConflictEntry>>,
    /// Why the merged result was refused (a VerificationRecord without a valid signature), as
    /// the reference words it; with `details`.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<Value>,
}

pub(crate) struct MergeKnowledge;

#[async_trait::async_trait]
impl Tool for MergeKnowledge {
    type Input = Input;
    type Output = Output;
    const TITLE: &'static str = "Merge structures three ways";
    const META: ToolMeta = ToolMeta {
        name: "merge_knowledge",
        description: "Three-way merge of knowledge structures given as JSON: a common ancestor and two branches \
            derived from it. Changes made on one side only are combined; an object both branches changed \
            differently is a conflict, settled per id with 'resolutions'. Nothing is stored. Returns {merged: \
            true, serialized, dropped_relations? (relations whose participants did not survive)} or {merged: \
            false, conflicts: [{object_id, target_diff (branch A), source_diff (branch B)}]}.",
        mutates_graph: false,
        creates_session: false,
        destructive: false,
        idempotent: true,
        open_world: false,
        session_fields: &[],
        session_checks: &[],
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        let resolutions = resolutions(input.resolutions.as_ref())?;
        let parse = |name: &'static str, value: Value| {
            // As in the reference, an empty value is a missing one.
            if value.as_str().is_some_and(str::is_empty) {
                return Err(ToolError::missing_parameter(name));
            }
            parse_json_data(value).map_err(|e| e.with("parameter", name))
        };
        let base = parse("json_data_base", input.json_data_base)?;
        let branch_a = parse("json_data_branch_a", input.json_data_branch_a)?;
        let branch_b = parse("json_data_branch_b", input.json_data_branch_b)?;
        match merge(&base, &branch_a, &branch_b, &resolutions) {
            Ok(outcome) => {
                let unverified = crate::provenance::blocking(ctx, &outcome.structure);
                if !unverified.is_empty() {
                    return Ok(Output {
                        merged: false,
                        serialized: None,
                        dropped_relations: None,
                        conflicts: None,
                        error: Some("Provenance verification failed in merged result.".into()),
                        details: Some(crate::provenance::details(&unverified)),
                    });
                }
                Ok(Output {
                    merged: true,
                    serialized: Some(crate::convert::client_document(&outcome.structure)),
                    dropped_relations: Some(outcome.dropped_relations).filter(|d| !d.is_empty()),
                    conflicts: None,
                    error: None,
                    details: None,
                })
            }
            Err(MergeError::Conflicts(list)) => Ok(Output {
                merged: false,
                serialized: None,
                dropped_relations: None,
                conflicts: Some(conflicts(&list)),
                error: None,
                details: None,
            }),
            Err(e) => Err(merge_error(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::tools::versions::testing::{call, context, keys, node, relation};

    fn doc(objects: Value) -> String {
        json!({"version": "1.0", "objects": objects}).to_string()
    }

    fn ids(serialized: &Value) -> Vec<String> {
        let parsed: Value = serde_json::from_str(serialized.as_str().unwrap()).unwrap();
        parsed["objects"].as_array().unwrap().iter().map(|o| o["identity"]["id"].as_str().unwrap().to_owned()).collect()
    }

    #[tokio::test]
    async fn merges_and_reports_dropped_relations() {
        let ctx = context();
        let base = doc(json!([node("a", "Claim", "A", json!({})), node("b", "Claim", "B", json!({}))]));
        let branch_a = doc(json!([node("a", "Claim", "A", json!({}))]));
        let branch_b = doc(json!([
            node("a", "Claim", "A", json!({})),
            node("b", "Claim", "B", json!({})),
            node("c", "Claim", "C", json!({})),
            relation("r", &["b", "c"], "supports"),
        ]));
        let args = json!({"json_data_base": base, "json_data_branch_a": branch_a, "json_data_branch_b": branch_b});
        let result = call(&ctx, "merge_knowledge", args).await;
        assert_eq!(keys(&result), ["dropped_relations", "merged", "serialized"]);
        assert_eq!(result["merged"], true);
        assert_eq!(ids(&result["serialized"]), ["a", "c"]);
        assert_eq!(result["dropped_relations"], json!(["r"]));
        assert!(ctx.runtime.list_sessions().await.unwrap().is_empty(), "nothing stored");

        let clean = call(
            &ctx,
            "merge_knowledge",
            json!({"json_data_base": base, "json_data_branch_a": base, "json_data_branch_b": branch_a}),
        )
        .await;
        assert_eq!(keys(&clean), ["merged", "serialized"]);
        assert_eq!(ids(&clean["serialized"]), ["a"]);
    }

    #[tokio::test]
    async fn conflicts_and_resolutions() {
        let ctx = context();
        let base = doc(json!([node("a", "Claim", "A", json!({"v": 1}))]));
        let branch_a = doc(json!([node("a", "Claim", "A", json!({"v": 2}))]));
        let branch_b = doc(json!([node("a", "Claim", "Renamed", json!({"v": 1}))]));
        let args = json!({"json_data_base": base, "json_data_branch_a": branch_a, "json_data_branch_b": branch_b});
        let conflict = call(&ctx, "merge_knowledge", args.clone()).await;
        assert_eq!(
            conflict,
            json!({"merged": false, "conflicts": [{"object_id": "a",
                "target_diff": {"action": "modified", "type": "Claim", "name": "A", "changes": {"v": {"from": 1, "to": 2}}},
                "source_diff": {"action": "modified", "type": "Claim", "name": "Renamed",
                                "changes": {"identity.name": {"from": "A", "to": "Renamed"}}}}]})
        );

        let mut resolved = args.clone();
        resolved["resolutions"] =
            json!({"a": {"identity": {"id": "a", "type": "Claim", "name": "Both"}, "structure": {"v": 2}}});
        let result = call(&ctx, "merge_knowledge", resolved).await;
        let merged: Value = serde_json::from_str(result["serialized"].as_str().unwrap()).unwrap();
        assert_eq!(merged["objects"][0]["identity"]["name"], "Both");
        assert_eq!(merged["objects"][0]["structure"]["v"], 2);

        let mut dropped = args;
        dropped["resolutions"] = json!({"a": null});
        let result = call(&ctx, "merge_knowledge", dropped).await;
        assert_eq!(ids(&result["serialized"]), Vec::<String>::new());
    }

    #[tokio::test]
    async fn errors() {
        let ctx = context();
        let good = doc(json!([]));
        let missing = call(&ctx, "merge_knowledge", json!({"json_data_base": good, "json_data_branch_a": good})).await;
        assert_eq!(
            missing,
            json!({"error": "missing_parameter", "message": "Missing required parameter: 'json_data_branch_b'."})
        );
        let empty = call(
            &ctx,
            "merge_knowledge",
            json!({"json_data_base": good, "json_data_branch_a": good, "json_data_branch_b": ""}),
        )
        .await;
        assert_eq!(
            empty,
            json!({"error": "missing_parameter", "message": "Missing required parameter: 'json_data_branch_b'."})
        );
        let broken = call(
            &ctx,
            "merge_knowledge",
            json!({"json_data_base": good, "json_data_branch_a": "{", "json_data_branch_b": good}),
        )
        .await;
        assert_eq!(broken["error"], "invalid_json");
        assert_eq!(broken["parameter"], "json_data_branch_a");
        let wrong_id = call(
            &ctx,
            "merge_knowledge",
            json!({"json_data_base": good, "json_data_branch_a": good, "json_data_branch_b": good,
                   "resolutions": {"a": {"identity": {"id": "b", "type": "T", "name": "n"}}}}),
        )
        .await;
        assert_eq!(wrong_id["error"], "invalid_parameter");
        assert_eq!(wrong_id["parameter"], "resolutions");
        let not_needed = call(
            &ctx,
            "merge_knowledge",
            json!({"json_data_base": good, "json_data_branch_a": good, "json_data_branch_b": good,
                   "resolutions": {"a": "branch_a"}}),
        )
        .await;
        assert_eq!(not_needed["error"], "merge_failed");
        assert_eq!(not_needed["message"], "resolution given for 'a', which is not in conflict");
    }
}
