//! `evolve_knowledge`: apply evolution operations atomically and commit the result as a new
//! version (of the given session, or of a new session made from `json_data`).
//!
//! The reference returns the whole serialized structure after every commit; for large graphs that
//! would make a one-object commit cost as much as a full export, so `serialized` is included only
//! up to [`SERIALIZE_LIMIT`] objects and 40 KB of text unless the caller asks (`return_structure`).

use crate::ErrorCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use cks_core::ops::{Operation, parse_operations};
use cks_runtime::{CommitRequest, NewSession};

use crate::context::ToolContext;
use crate::convert::{BriefDiagnostic, brief_diagnostics, extensions, parse_json_data};
use crate::error::ToolError;
use crate::tool::{ArgumentCode, SessionCheck, Tool, ToolMeta};

/// Previews include the serialized structure by default up to this many objects.
pub(crate) use crate::bounds::SERIALIZE_LIMIT;

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    #[serde(default)]
    #[schemars(schema_with = "crate::schema::json_data")]
    pub(crate) json_data: Option<Value>,
    #[serde(default)]
    #[schemars(schema_with = "crate::schema::operations")]
    pub(crate) operations: Option<Value>,
    /// The session to evolve.
    pub(crate) session_id: Option<String>,
    /// Opt-in rules the result must also pass (names as in validate_knowledge).
    #[serde(default)]
    pub(crate) extensions: Vec<String>,
    /// Include `serialized` in the result (default: only up to 2,000 objects and 40 KB).
    pub(crate) return_structure: Option<bool>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct Output {
    /// Always true (a failure is an error result).
    evolved: bool,
    session_id: String,
    /// The version this commit created.
    pub version_id: String,
    operations_applied: u64,
    /// Objects in the new state, relations included.
    object_count: u64,
    state_hash: String,
    /// The new state as a canonical CKS JSON document; left out above 2,000 objects unless
    /// `return_structure` asks for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    serialized: Option<String>,
    /// Relations removed because a `remove_object` removed one of their participants.
    #[serde(skip_serializing_if = "Option::is_none")]
    cascade_removed_relations: Option<Vec<String>>,
    /// The requested extensions, as given.
    #[serde(skip_serializing_if = "Option::is_none")]
    extensions_applied: Option<Vec<String>>,
    /// Warnings and information about the new state (never errors: those refuse the commit).
    #[serde(skip_serializing_if = "Option::is_none")]
    diagnostics: Option<Vec<BriefDiagnostic>>,
}

pub(crate) struct EvolveKnowledge;

#[async_trait::async_trait]
impl Tool for EvolveKnowledge {
    type Input = Input;
    type Output = Output;
    const ARGUMENT_CODES: &'static [ArgumentCode] = &[
        ArgumentCode::malformed("operations", ErrorCode::InvalidOperations),
        ArgumentCode::malformed("extensions", ErrorCode::UnknownExtension),
    ];
    const TITLE: &'static str = "Evolve a graph";
    const META: ToolMeta = ToolMeta {
        name: "evolve_knowledge",
        description: "Apply 'operations' to a session (or to 'json_data', which becomes a new session) and \
            commit the result as a new version. Atomic: if an operation fails ('Operation #i: ...') or the result \
            breaks a rule, nothing is committed. remove_object also removes the relations naming it. Returns \
            {evolved, session_id, version_id, object_count, serialized, cascade_removed_relations, diagnostics}.",
        mutates_graph: true,
        creates_session: true,
        // It may remove or replace objects; `destructive_call` says which calls do.
        destructive: true,
        idempotent: false,
        open_world: false,
        session_fields: &["session_id"],
        session_checks: &[SessionCheck::open("session_id").if_given()],
        llm_exposed: true,
    };

    /// Removing an object or relation, or replacing an object's structure, discards what the
    /// graph held; adding and merging do not.
    fn destructive_call(arguments: &Value) -> bool {
        let operations = match arguments.get("operations") {
            Some(Value::String(text)) => serde_json::from_str::<Value>(text).unwrap_or(Value::Null),
            Some(list) => list.clone(),
            None => Value::Null,
        };
        operations.as_array().is_some_and(|ops| {
            ops.iter().any(|op| match op.get("type").and_then(Value::as_str) {
                Some("remove_object" | "remove_relation") => true,
                Some("update_object") => op.get("mode").and_then(Value::as_str) == Some("replace"),
                _ => false,
            })
        })
    }

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        // As in the reference: the structure to evolve first, then the operations.
        let session_id = input.session_id.filter(|s| !s.is_empty());
        let new_structure = match &session_id {
            Some(_) => None,
            None => {
                let json_data = input.json_data.ok_or_else(|| ToolError::missing_parameter("session_id"))?;
                Some(parse_json_data(json_data)?)
            }
        };
        let operations = match &input.operations {
            None => return Err(ToolError::new(ErrorCode::NoOperations, "No evolution operations were provided.")),
            Some(Value::Array(list)) if list.is_empty() => {
                return Err(ToolError::new(ErrorCode::NoOperations, "No evolution operations were provided."));
            }
            Some(value @ Value::Array(_)) => parse_operations(value)?,
            Some(_) => return Err(ToolError::new(ErrorCode::InvalidOperations, "Operations must be a JSON array.")),
        };
        // Checked before a json_data session is made, so a bad name leaves nothing behind.
        extensions(&input.extensions)?;
        let session_id = match (session_id, new_structure) {
            (Some(id), _) => id,
            (None, Some(structure)) => ctx.runtime.create_session(structure, NewSession::default()).await?.session_id,
            (None, None) => unreachable!("json_data was parsed when no session was named"),
        };
        let change = Change { operations, extensions: input.extensions, return_structure: input.return_structure };
        commit_operations(ctx, session_id, change, Self::META.name, [("operation", json!("evolve"))]).await
    }
}

/// What [`commit_operations`] commits.
#[derive(Debug)]
pub struct Change {
    pub operations: Vec<Operation>,
    /// Opt-in extensions the new state must pass, by name.
    pub extensions: Vec<String>,
    pub return_structure: Option<bool>,
}

/// Commits operations to a session as `evolve_knowledge` does, the version's metadata naming
/// `tool` (and holding `metadata`); answers what `evolve_knowledge` answers.
pub async fn commit_operations(
    ctx: &ToolContext,
    session_id: String,
    change: Change,
    tool: &str,
    metadata: impl IntoIterator<Item = (&'static str, Value)>,
) -> Result<Output, ToolError> {
    let Change { operations, extensions: names, return_structure } = change;
    let extensions = extensions(&names)?;
    let removed: Vec<&str> = operations
        .iter()
        .filter_map(|op| match op {
            Operation::RemoveObject { object_id } => Some(object_id.as_str()),
            _ => None,
        })
        .collect();
    let linked = ctx.runtime.read(&session_id, |s, _| relations_naming(s, &removed)).await?;
    let operations_applied = operations.len() as u64;
    let request = CommitRequest::operations(operations)
        .with_metadata(ctx.version_metadata(tool, metadata))
        .with_extensions(extensions)
        .with_provenance((*ctx.provenance).clone());
    let committed = ctx.runtime.commit(&session_id, request).await?;
    let (serialized, cascade_removed_relations) = ctx
        .runtime
        .read(&session_id, |s, _| {
            let gone = linked.into_iter().filter(|id| !s.contains(id)).collect::<Vec<_>>();
            (crate::bounds::serialized(s, return_structure), gone)
        })
        .await?;
    Ok(Output {
        evolved: true,
        session_id,
        version_id: committed.version.version_id,
        operations_applied,
        object_count: committed.version.object_count,
        state_hash: committed.version.state_hash,
        serialized,
        cascade_removed_relations: (!cascade_removed_relations.is_empty()).then_some(cascade_removed_relations),
        extensions_applied: (!names.is_empty()).then_some(names),
        diagnostics: (!committed.warnings.is_empty()).then(|| brief_diagnostics(&committed.warnings)),
    })
}

/// The relations that name any of `ids`, in structure order.
fn relations_naming(structure: &cks_core::KnowledgeStructure, ids: &[&str]) -> Vec<String> {
    if ids.is_empty() {
        return Vec::new();
    }
    structure
        .relations()
        .filter(|r| r.relation().is_some_and(|rel| rel.participants.iter().any(|p| ids.contains(p))))
        .map(|r| r.id().to_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::testing::{call, context, obj, rel, session, structure};

    #[test]
    fn removing_or_replacing_is_a_destructive_call_adding_and_merging_are_not() {
        use crate::tool::Tool;
        let destructive = |ops: Value| super::EvolveKnowledge::destructive_call(&json!({"operations": ops}));
        assert!(destructive(json!([{"type": "add_object"}, {"type": "remove_object", "object_id": "a"}])));
        assert!(destructive(json!([{"type": "remove_relation", "relation_id": "r"}])));
        assert!(destructive(json!([{"type": "update_object", "object_id": "a", "mode": "replace"}])));
        assert!(destructive(json!(r#"[{"type": "remove_object", "object_id": "a"}]"#)), "operations as text");
        assert!(!destructive(json!([{"type": "add_object"}, {"type": "update_object", "object_id": "a"}])));
        assert!(!destructive(json!([{"type": "update_object", "object_id": "a", "mode": "merge"}])));
        assert!(!super::EvolveKnowledge::destructive_call(&json!({})));
    }

    fn data() -> Value {
        structure(vec![
            obj("a", "Concept", "A", json!({})),
            obj("b", "Concept", "B", json!({})),
            obj("c", "Concept", "C", json!({})),
            rel("r1", &["a", "b"], "supports"),
            rel("r2", &["b", "c"], "supports"),
        ])
    }

    fn keys(value: &Value) -> Vec<&str> {
        value.as_object().unwrap().keys().map(String::as_str).collect()
    }

    #[tokio::test]
    async fn commits_and_reports_the_reference_keys() {
        let ctx = context();
        let id = session(&ctx, data()).await;
        let result = call(
            &ctx,
            "evolve_knowledge",
            json!({"session_id": id, "extensions": ["confidence_bounds"], "operations": [
                {"type": "remove_object", "object_id": "a"},
                {"type": "add_object", "identity": {"id": "d", "type": "Concept", "name": "D"}}]}),
        )
        .await;
        assert_eq!(
            keys(&result),
            [
                "cascade_removed_relations",
                "evolved",
                "extensions_applied",
                "object_count",
                "operations_applied",
                "serialized",
                "session_id",
                "state_hash",
                "version_id"
            ]
        );
        assert_eq!(result["evolved"], true);
        assert_eq!(result["session_id"], json!(id));
        assert_eq!(result["operations_applied"], 2);
        assert_eq!(result["object_count"], 4);
        assert_eq!(result["cascade_removed_relations"], json!(["r1"]));
        assert_eq!(result["extensions_applied"], json!(["confidence_bounds"]));
        let versions = ctx.runtime.list_versions(&id).await.unwrap();
        assert_eq!(result["version_id"], json!(versions.last().unwrap().version_id));
        let document: Value = serde_json::from_str(result["serialized"].as_str().unwrap()).unwrap();
        assert_eq!(document["_cks_format_version"], "1.0");
        let ids: Vec<&str> =
            document["objects"].as_array().unwrap().iter().map(|o| o["identity"]["id"].as_str().unwrap()).collect();
        assert_eq!(ids, ["b", "c", "r2", "d"]);

        // Without removals, or without requested extensions, those keys are absent.
        let quiet = call(
            &ctx,
            "evolve_knowledge",
            json!({"session_id": id, "return_structure": false, "operations": [
                {"type": "rename_object", "object_id": "b", "new_name": "B2"}]}),
        )
        .await;
        assert_eq!(
            keys(&quiet),
            ["evolved", "object_count", "operations_applied", "session_id", "state_hash", "version_id"]
        );
    }

    #[tokio::test]
    async fn json_data_becomes_a_new_session() {
        let ctx = context();
        let result = call(
            &ctx,
            "evolve_knowledge",
            json!({"json_data": data().to_string(), "operations": [{"type": "remove_object", "object_id": "b"}]}),
        )
        .await;
        assert_eq!(result["cascade_removed_relations"], json!(["r1", "r2"]));
        let id = result["session_id"].as_str().unwrap();
        assert_eq!(ctx.runtime.read(id, |s, _| s.len()).await.unwrap(), 2);
    }

    #[tokio::test]
    async fn errors_use_the_reference_codes() {
        let ctx = context();
        let id = session(&ctx, data()).await;
        for operations in [json!("add everything"), json!({"type": "add_object"}), json!(3)] {
            let result = call(&ctx, "evolve_knowledge", json!({"session_id": id, "operations": operations})).await;
            assert_eq!(
                result,
                json!({"error": "invalid_operations", "message": "Operations must be a JSON array."}),
                "{operations}"
            );
        }
        let items = call(&ctx, "evolve_knowledge", json!({"session_id": id, "operations": ["x"]})).await;
        assert_eq!(items["error"], "invalid_operations");
        assert!(items["message"].as_str().unwrap().starts_with("Could not parse 'operations': "));
        let unknown = call(&ctx, "evolve_knowledge", json!({"session_id": id, "operations": [{"type": "fly"}]})).await;
        assert_eq!(unknown["error"], "invalid_operations");
        assert_eq!(
            call(&ctx, "evolve_knowledge", json!({"session_id": id, "operations": []})).await["error"],
            "no_operations"
        );
        assert_eq!(call(&ctx, "evolve_knowledge", json!({"session_id": id})).await["error"], "no_operations");
        assert_eq!(ctx.runtime.list_versions(&id).await.unwrap().len(), 1, "nothing committed");
        // json_data is read before the operations, as in the reference.
        let bad_data =
            call(&ctx, "evolve_knowledge", json!({"json_data": "{oops", "operations": [{"type": "fly"}]})).await;
        assert_eq!(bad_data["error"], "invalid_json");
    }

    #[tokio::test]
    async fn a_document_over_40_kb_is_left_out_unless_asked_for() {
        let ctx = context();
        let objects = (0..300).map(|i| obj(&format!("n{i}"), "Claim", "N", json!({"text": "x".repeat(150)}))).collect();
        let id = session(&ctx, structure(objects)).await;
        let change = |extra: Value| {
            let mut args = json!({"session_id": id, "operations": [
                {"type": "update_object", "object_id": "n1", "structure_patch": {"k": 1}}]});
            args.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            args
        };
        let cut = call(&ctx, "evolve_knowledge", change(json!({}))).await;
        assert!(cut.get("serialized").is_none() && cut["object_count"] == 300, "{}", keys(&cut).join(","));
        assert!(serde_json::to_string(&cut).unwrap().len() < 1024);
        let asked = call(&ctx, "evolve_knowledge", change(json!({"return_structure": true}))).await;
        assert!(asked["serialized"].as_str().unwrap().len() > crate::bounds::DOCUMENT_BUDGET);
    }
}
