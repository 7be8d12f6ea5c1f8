//! `suggest_evolution`: help a caller write evolution operations, and preview them without
//! committing anything.
//!
//! Without `operations` it lists what the session holds and which operations exist; with
//! `operations` it applies them to a copy of the current structure and validates the result
//! exactly as `evolve_knowledge` would at commit time (only the change for a plain batch, a full
//! pass when `extensions` are named), then reports what committing would do.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use cks_core::json::to_canonical_string;
use cks_core::ops::{self, parse_operations};
use cks_core::validate::{Extension, Severity, ValidationOptions, check_changes, validate};
use cks_core::{Diagnostic, KnowledgeStructure};

use super::evolve_knowledge::SERIALIZE_LIMIT;
use crate::context::ToolContext;
use crate::convert::{diagnostics_brief, extensions};
use crate::error::ToolError;
use crate::tool::{SessionCheck, Tool, ToolMeta};

/// Most objects (and, separately, relations) the template lists.
const LIST_LIMIT: usize = 500;

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The session to change (it must be open).
    pub(crate) session_id: String,
    /// What you want to change, in words (echoed back; must not be blank).
    pub(crate) description: String,
    /// Candidate operations to preview (same format as evolve_knowledge). Nothing is committed.
    #[serde(default)]
    #[schemars(schema_with = "crate::schema::operations")]
    pub(crate) operations: Option<Value>,
    /// Opt-in constraints the preview must also pass (same names as validate_knowledge).
    #[serde(default)]
    pub(crate) extensions: Vec<String>,
}

pub(crate) struct SuggestEvolution;

#[async_trait::async_trait]
impl Tool for SuggestEvolution {
    type Input = Input;
    type Output = Value;
    const META: ToolMeta = ToolMeta {
        name: "suggest_evolution",
        description: "Plan a change to an open session without committing it. Without 'operations': returns \
            {description, current_objects [{id, type, name}], current_relations [{id, type, participants}] (each \
            capped at 500, with object_count / relation_count), available_operation_types, guidance} to write \
            operations from. With 'operations': a dry run of evolve_knowledge on a copy — {session_id, would_apply, \
            operations_previewed, diagnostics [{code, severity, message, location}], note, changed_ids, \
            preview_object_count, preview_serialized (when valid, up to 2,000 objects)}; a failing operation gives \
            would_apply false and 'message'. Optional 'extensions' are checked as evolve_knowledge would. Never \
            adds a version.",
        mutates_graph: false,
        creates_session: false,
        destructive: false,
        idempotent: true,
        open_world: false,
        session_fields: &["session_id"],
        session_checks: &[SessionCheck::open("session_id")],
        llm_exposed: true,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Value, ToolError> {
        if input.description.trim().is_empty() {
            return Err(
                ToolError::new("missing_parameter", "Description must not be empty.").with("parameter", "description")
            );
        }
        let session_id = input.session_id;
        let operations = match input.operations {
            None => None,
            Some(Value::Array(list)) if list.is_empty() => None,
            Some(value @ Value::Array(_)) => Some(
                parse_operations(&value)
                    .map_err(|e| ToolError::new("invalid_operations", format!("Could not parse 'operations': {e}")))?,
            ),
            Some(_) => return Err(ToolError::new("invalid_operations", "Operations must be a JSON array.")),
        };
        let extensions = extensions(&input.extensions)?;
        match operations {
            None => {
                let description = input.description;
                Ok(ctx.runtime.read(&session_id, |s, _| template(s, description, &session_id)).await?)
            }
            Some(operations) => {
                let mut result = ctx.runtime.read(&session_id, |s, _| preview(s, &operations, &extensions)).await?;
                result["session_id"] = json!(session_id);
                if !extensions.is_empty() {
                    result["extensions_applied"] = json!(extensions.iter().map(|e| e.name()).collect::<Vec<_>>());
                }
                Ok(result)
            }
        }
    }
}

fn template(structure: &KnowledgeStructure, description: String, session_id: &str) -> Value {
    let current_objects: Vec<Value> = structure
        .objects()
        .filter(|o| !o.is_relation())
        .take(LIST_LIMIT)
        .map(|o| json!({"id": o.id(), "type": o.identity.r#type, "name": o.identity.name}))
        .collect();
    let current_relations: Vec<Value> = structure
        .objects()
        .filter_map(|o| o.relation().map(|r| (o.id(), r)))
        .take(LIST_LIMIT)
        .map(|(id, r)| json!({"id": id, "type": r.relation_type, "participants": r.participants}))
        .collect();
    let relation_count = structure.relations().count();
    let object_count = structure.len() - relation_count;
    json!({
        "session_id": session_id,
        "description": description,
        "current_objects": current_objects,
        "current_relations": current_relations,
        "object_count": object_count,
        "relation_count": relation_count,
        "lists_truncated": object_count > LIST_LIMIT || relation_count > LIST_LIMIT,
        "available_operation_types": [
            "add_object: 'identity' {id, type, name}, optional 'structure' {...}",
            "add_relation: 'identity', 'participants' (2 or more existing object ids), 'relation_type', optional 'structure'",
            "remove_object: 'object_id'; relations naming it are removed too",
            "remove_relation: 'relation_id'",
            "update_object: 'object_id', 'structure_patch' {...}, optional 'mode' 'merge' (default; null deletes a key) or 'replace'",
            "rename_object: 'object_id', 'new_name' (only identity.name changes)",
            "record_inference: 'identity' with type 'InferenceStep', 'structure' {premises: [ids], conclusion: id, operator: deductive|inductive|abductive|heuristic, confidence: 0..1, justification, optional superseded_by}",
            "resolve_inference_conflict: 'conclusion_id', 'winner_id' (an active InferenceStep concluding it); the other active steps become superseded by the winner",
        ],
        "guidance": "Write a JSON list of operations (each with its 'type') that carries out the description, using \
            the ids listed above. Call suggest_evolution again with it as 'operations' to check it without \
            committing, then pass the same list to evolve_knowledge to commit it.",
    })
}

fn preview(structure: &KnowledgeStructure, operations: &[ops::Operation], extensions: &[Extension]) -> Value {
    let mut next = structure.clone();
    let changes = match ops::apply(&mut next, operations) {
        Ok(changes) => changes,
        Err(e) => {
            return json!({
                "would_apply": false,
                "operations_previewed": operations.len(),
                "message": format!("Evolution failed: {e}"),
            });
        }
    };
    // The same validation a commit runs: the change only, or a full pass when extensions ask.
    let diagnostics: Vec<Diagnostic> = if extensions.is_empty() {
        check_changes(&next, &changes)
    } else {
        validate(&next, &ValidationOptions::with_extensions(extensions.iter().copied())).diagnostics
    };
    let would_apply = !diagnostics.iter().any(|d| d.severity == Severity::Error);
    let changed_ids: Vec<String> = changes.net().into_keys().collect();
    let note = if would_apply {
        "Preview only: nothing was committed. Pass the same 'operations' to evolve_knowledge to apply them."
    } else {
        "Preview only: nothing was committed. Fix the error diagnostics before calling evolve_knowledge."
    };
    let mut result = json!({
        "would_apply": would_apply,
        "operations_previewed": operations.len(),
        "diagnostics": diagnostics_brief(&diagnostics),
        "note": note,
        "changed_ids": changed_ids,
        "preview_object_count": next.len(),
    });
    if would_apply && next.len() <= SERIALIZE_LIMIT {
        result["preview_serialized"] = json!(to_canonical_string(&next));
    }
    result
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::tools::test_support::{call, context, obj, rel, session, structure};

    fn data() -> Value {
        structure(vec![
            obj("a", "Concept", "A", json!({})),
            obj("b", "Concept", "B", json!({})),
            rel("r1", &["a", "b"], "supports"),
        ])
    }

    #[tokio::test]
    async fn lists_the_session_and_the_operations() {
        let ctx = context();
        let id = session(&ctx, data()).await;
        let result = call(&ctx, "suggest_evolution", json!({"session_id": id, "description": "add C"})).await;
        assert_eq!(result["description"], "add C");
        assert_eq!(
            result["current_objects"],
            json!([{"id": "a", "type": "Concept", "name": "A"}, {"id": "b", "type": "Concept", "name": "B"}])
        );
        assert_eq!(result["current_relations"], json!([{"id": "r1", "type": "supports", "participants": ["a", "b"]}]));
        assert_eq!(result["available_operation_types"].as_array().unwrap().len(), 8);
        assert!(result["guidance"].is_string());
    }

    #[tokio::test]
    async fn previews_without_committing() {
        let ctx = context();
        let id = session(&ctx, data()).await;
        let versions = ctx.runtime.list_versions(&id).await.unwrap().len();
        let ok = call(
            &ctx,
            "suggest_evolution",
            json!({"session_id": id, "description": "add c", "operations": [
                {"type": "add_object", "identity": {"id": "c", "type": "Concept", "name": "C"}},
                {"type": "add_relation", "identity": {"id": "r2", "type": "Relation", "name": "r2"},
                 "participants": ["a", "c"], "relation_type": "derives"}]}),
        )
        .await;
        assert_eq!(ok["session_id"], json!(id));
        assert_eq!(ok["would_apply"], true);
        assert_eq!(ok["operations_previewed"], 2);
        assert_eq!(ok["diagnostics"], json!([]));
        assert_eq!(ok["changed_ids"], json!(["c", "r2"]));
        assert_eq!(ok["preview_object_count"], 5);
        assert!(ok["preview_serialized"].as_str().unwrap().contains("\"id\": \"c\""));

        // A derives cycle: applies, but validation rejects it.
        let cycle = call(
            &ctx,
            "suggest_evolution",
            json!({"session_id": id, "description": "cycle", "operations": [
                {"type": "add_relation", "identity": {"id": "d1", "type": "Relation", "name": "d1"},
                 "participants": ["a", "b"], "relation_type": "derives"},
                {"type": "add_relation", "identity": {"id": "d2", "type": "Relation", "name": "d2"},
                 "participants": ["b", "a"], "relation_type": "derives"}]}),
        )
        .await;
        assert_eq!(cycle["would_apply"], false);
        assert_eq!(cycle["diagnostics"][0]["code"], "CKS-SEM-CYCLE");
        assert_eq!(cycle["diagnostics"][0]["severity"], "error");
        assert!(cycle.get("preview_serialized").is_none());

        // An operation that cannot apply.
        let failed = call(
            &ctx,
            "suggest_evolution",
            json!({"session_id": id, "description": "x", "operations": [{"type": "remove_object", "object_id": "zz"}]}),
        )
        .await;
        assert_eq!(failed["would_apply"], false);
        assert!(failed["message"].as_str().unwrap().starts_with("Evolution failed: Operation #0: "));

        assert_eq!(ctx.runtime.list_versions(&id).await.unwrap().len(), versions, "no version added");
        assert_eq!(ctx.runtime.read(&id, |s, _| s.len()).await.unwrap(), 3, "session unchanged");
    }

    #[tokio::test]
    async fn errors() {
        let ctx = context();
        let id = session(&ctx, data()).await;
        let blank = call(&ctx, "suggest_evolution", json!({"session_id": id, "description": "  "})).await;
        assert_eq!(blank["error"], "missing_parameter");
        assert_eq!(blank["message"], "Description must not be empty.");
        let bad = call(
            &ctx,
            "suggest_evolution",
            json!({"session_id": id, "description": "x", "operations": [{"type": "fly"}]}),
        )
        .await;
        assert_eq!(bad["error"], "invalid_operations");
        assert!(bad["message"].as_str().unwrap().starts_with("Could not parse 'operations': Operation #0"));
        let ext =
            call(&ctx, "suggest_evolution", json!({"session_id": id, "description": "x", "extensions": ["nope"]}))
                .await;
        assert_eq!(ext["error"], "unknown_extension");
        assert_eq!(call(&ctx, "suggest_evolution", json!({"description": "x"})).await["error"], "missing_parameter");
        ctx.runtime.close(&id).await.unwrap();
        let closed = call(&ctx, "suggest_evolution", json!({"session_id": id, "description": "x"})).await;
        assert_eq!(closed["error"], "session_not_found");
    }
}
