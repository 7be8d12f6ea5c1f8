//! `suggest_evolution`: help a caller write evolution operations, and preview them without
//! committing anything.
//!
//! Without `operations` it lists what the session holds and which operations exist; with
//! `operations` it applies them to a copy of the current structure and validates the result
//! exactly as `evolve_knowledge` would at commit time (only the change for a plain batch, a full
//! pass when `extensions` are named), then reports what committing would do.

use crate::ErrorCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use cks_core::ops::{self, parse_operations};
use cks_core::validate::{Extension, Severity, ValidationOptions, check_changes, validate};
use cks_core::{Diagnostic, KnowledgeStructure};

use super::evolve_knowledge::SERIALIZE_LIMIT;
use crate::context::ToolContext;
use crate::convert::{BriefDiagnostic, brief_diagnostics, client_document, extensions};
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

#[derive(Debug, Serialize, JsonSchema)]
#[serde(untagged)]
#[schemars(extend("type" = "object"))]
pub(crate) enum Output {
    /// Without `operations`: what to write operations from.
    Template(Template),
    /// With `operations`: what committing them would do.
    Preview(Preview),
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Template {
    session_id: String,
    /// The caller's description, echoed.
    description: String,
    /// Non-relation objects, at most 500.
    current_objects: Vec<ObjectEntry>,
    /// Relations, at most 500.
    current_relations: Vec<RelationEntry>,
    /// Non-relation objects in the session.
    object_count: u64,
    relation_count: u64,
    /// A list was cut at 500 entries.
    lists_truncated: bool,
    /// One line per operation: its name, then " — " and its fields.
    available_operation_types: Vec<String>,
    guidance: String,
}

#[derive(Debug, Serialize, JsonSchema)]
struct ObjectEntry {
    id: String,
    r#type: String,
    name: String,
}

#[derive(Debug, Serialize, JsonSchema)]
struct RelationEntry {
    id: String,
    /// The relation type.
    r#type: String,
    participants: Vec<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Preview {
    session_id: String,
    /// Committing these operations would succeed.
    would_apply: bool,
    operations_previewed: u64,
    /// Why an operation could not apply (then there are no diagnostics).
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    /// What validating the result reports; errors mean the commit would be refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    diagnostics: Option<Vec<BriefDiagnostic>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<String>,
    /// Ids whose content would change.
    #[serde(skip_serializing_if = "Option::is_none")]
    changed_ids: Option<Vec<String>>,
    /// Objects after the operations, relations included.
    #[serde(skip_serializing_if = "Option::is_none")]
    preview_object_count: Option<u64>,
    /// The state after the operations as a canonical CKS JSON document (when they would apply,
    /// up to 2,000 objects).
    #[serde(skip_serializing_if = "Option::is_none")]
    preview_serialized: Option<String>,
    /// The requested extensions, as given.
    #[serde(skip_serializing_if = "Option::is_none")]
    extensions_applied: Option<Vec<String>>,
}

pub(crate) struct SuggestEvolution;

#[async_trait::async_trait]
impl Tool for SuggestEvolution {
    type Input = Input;
    type Output = Output;
    const TITLE: &'static str = "Plan a change to a graph";
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
        // A chat commits with evolve_knowledge, which checks the same way and can be reverted; a dry
        // run beside it is a second, easily confused way to change the graph.
        llm_exposed: true,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        if input.description.trim().is_empty() {
            return Err(ToolError::new(ErrorCode::MissingParameter, "Description must not be empty.")
                .with("parameter", "description"));
        }
        let session_id = input.session_id;
        let operations = match input.operations {
            None => None,
            Some(Value::Array(list)) if list.is_empty() => None,
            Some(value @ Value::Array(_)) => Some(parse_operations(&value).map_err(|e| {
                ToolError::new(ErrorCode::InvalidOperations, format!("Could not parse 'operations': {e}"))
            })?),
            Some(_) => return Err(ToolError::new(ErrorCode::InvalidOperations, "Operations must be a JSON array.")),
        };
        let requested = input.extensions;
        let extensions = extensions(&requested)?;
        match operations {
            None => {
                let description = input.description;
                let result = ctx.runtime.read(&session_id, |s, _| template(s, description, &session_id)).await?;
                Ok(Output::Template(result))
            }
            Some(operations) => {
                let mut result = ctx.runtime.read(&session_id, |s, _| preview(s, &operations, &extensions)).await?;
                result.session_id = session_id;
                result.extensions_applied = (!requested.is_empty()).then_some(requested);
                Ok(Output::Preview(result))
            }
        }
    }
}

fn template(structure: &KnowledgeStructure, description: String, session_id: &str) -> Template {
    let current_objects = structure
        .objects()
        .filter(|o| !o.is_relation())
        .take(LIST_LIMIT)
        .map(|o| ObjectEntry {
            id: o.id().to_owned(),
            r#type: o.identity.r#type.to_string(),
            name: o.identity.name.to_string(),
        })
        .collect();
    let current_relations = structure
        .objects()
        .filter_map(|o| o.relation().map(|r| (o.id(), r)))
        .take(LIST_LIMIT)
        .map(|(id, r)| RelationEntry {
            id: id.to_owned(),
            r#type: r.relation_type.to_owned(),
            participants: r.participants.iter().map(|p| (*p).to_owned()).collect(),
        })
        .collect();
    let relation_count = structure.relations().count();
    let object_count = structure.len() - relation_count;
    Template {
        session_id: session_id.to_owned(),
        description,
        current_objects,
        current_relations,
        object_count: object_count as u64,
        relation_count: relation_count as u64,
        lists_truncated: object_count > LIST_LIMIT || relation_count > LIST_LIMIT,
        available_operation_types: OPERATION_TYPES.iter().map(|line| (*line).to_owned()).collect(),
        guidance: "Write a JSON list of operations (each with its 'type') that carries out the description, using \
            the ids listed above. Call suggest_evolution again with it as 'operations' to check it without \
            committing, then pass the same list to evolve_knowledge to commit it."
            .into(),
    }
}

/// One line per operation: the name, then " — " and what it takes (the reference's layout, so a
/// client can split the name off).
const OPERATION_TYPES: [&str; 8] = [
    "add_object — 'identity' {id, type, name}, optional 'structure' {...}",
    "add_relation — 'identity', 'participants' (2 or more existing object ids), 'relation_type', optional 'structure'",
    "remove_object — 'object_id'; relations naming it are removed too",
    "remove_relation — 'relation_id'",
    "update_object — 'object_id', 'structure_patch' {...}, optional 'mode' 'merge' (default; null deletes a key) or 'replace'",
    "rename_object — 'object_id', 'new_name' (only identity.name changes)",
    "record_inference — 'identity' with type 'InferenceStep', 'structure' {premises: [ids], conclusion: id, operator: deductive|inductive|abductive|heuristic, confidence: 0..1, justification, optional superseded_by}",
    "resolve_inference_conflict — 'conclusion_id', 'winner_id' (an active InferenceStep concluding it); the other active steps become superseded by the winner",
];

fn preview(structure: &KnowledgeStructure, operations: &[ops::Operation], extensions: &[Extension]) -> Preview {
    let mut result = Preview {
        session_id: String::new(),
        would_apply: false,
        operations_previewed: operations.len() as u64,
        message: None,
        diagnostics: None,
        note: None,
        changed_ids: None,
        preview_object_count: None,
        preview_serialized: None,
        extensions_applied: None,
    };
    let mut next = structure.clone();
    let changes = match ops::apply(&mut next, operations) {
        Ok(changes) => changes,
        Err(e) => {
            result.message = Some(format!("Evolution failed: {e}"));
            return result;
        }
    };
    // The same validation a commit runs: the change only, or a full pass when extensions ask.
    let diagnostics: Vec<Diagnostic> = if extensions.is_empty() {
        check_changes(&next, &changes)
    } else {
        validate(&next, &ValidationOptions::with_extensions(extensions.iter().copied())).diagnostics
    };
    let would_apply = !diagnostics.iter().any(|d| d.severity == Severity::Error);
    let note = if would_apply {
        "Preview only: nothing was committed. Pass the same 'operations' to evolve_knowledge to apply them."
    } else {
        "Preview only: nothing was committed. Fix the error diagnostics before calling evolve_knowledge."
    };
    result.would_apply = would_apply;
    result.diagnostics = Some(brief_diagnostics(&diagnostics));
    result.note = Some(note.into());
    result.changed_ids = Some(changes.net().into_keys().collect());
    result.preview_object_count = Some(next.len() as u64);
    if would_apply && next.len() <= SERIALIZE_LIMIT {
        result.preview_serialized = Some(client_document(&next));
    }
    result
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::testing::{call, context, obj, rel, session, structure};

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
        let lines = result["available_operation_types"].as_array().unwrap();
        assert_eq!(lines.len(), 8);
        let names: Vec<&str> = lines.iter().map(|l| l.as_str().unwrap().split(" — ").next().unwrap()).collect();
        assert_eq!(
            names,
            [
                "add_object",
                "add_relation",
                "remove_object",
                "remove_relation",
                "update_object",
                "rename_object",
                "record_inference",
                "resolve_inference_conflict"
            ],
            "each line starts with the bare operation name, as in the reference"
        );
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
        assert!(ok["preview_serialized"].as_str().unwrap().contains("\"_cks_format_version\": \"1.0\""));

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
