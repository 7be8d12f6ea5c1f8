//! `evolve_knowledge`: apply evolution operations atomically and commit the result as a new
//! version (of the given session, or of a new session made from `json_data`).
//!
//! The reference returns the whole serialized structure after every commit; for large graphs that
//! would make a one-object commit cost as much as a full export, so `serialized` is included only
//! up to [`SERIALIZE_LIMIT`] objects unless the caller asks (`return_structure`).

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use cks_core::json::to_canonical_string;
use cks_core::ops::parse_operations;
use cks_runtime::{CommitRequest, NewSession};

use crate::context::ToolContext;
use crate::convert::{diagnostics_brief, extensions, parse_json_data};
use crate::error::ToolError;
use crate::tool::{ArgumentCode, SessionCheck, Tool, ToolMeta};

/// Results include the serialized structure by default up to this many objects.
pub(crate) const SERIALIZE_LIMIT: usize = 2_000;

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    #[serde(default)]
    #[schemars(schema_with = "crate::schema::json_data")]
    pub(crate) json_data: Option<Value>,
    #[serde(default)]
    #[schemars(schema_with = "crate::schema::operations")]
    pub(crate) operations: Option<Value>,
    /// The session to evolve. Without it, `json_data` becomes a new session first.
    pub(crate) session_id: Option<String>,
    /// Opt-in constraints the evolved structure must also pass (same names as validate_knowledge).
    #[serde(default)]
    pub(crate) extensions: Vec<String>,
    /// Include the serialized structure in the result (default: only for structures of at most
    /// 2,000 objects).
    pub(crate) return_structure: Option<bool>,
}

pub(crate) struct EvolveKnowledge;

#[async_trait::async_trait]
impl Tool for EvolveKnowledge {
    type Input = Input;
    type Output = Value;
    const ARGUMENT_CODES: &'static [ArgumentCode] = &[
        ArgumentCode::malformed("operations", "invalid_operations"),
        ArgumentCode::malformed("extensions", "unknown_extension"),
    ];
    const META: ToolMeta = ToolMeta {
        name: "evolve_knowledge",
        description: "Apply evolution operations to a session's knowledge structure (or to 'json_data', which \
            becomes a new session) and commit the result as a new version. The batch is atomic: if any operation \
            fails ('Operation #i: ...') or the result breaks a validation rule, nothing is committed. Operations: \
            add_object, add_relation, remove_object (removes the relations naming it), remove_relation, \
            update_object (merge or replace), rename_object, record_inference, resolve_inference_conflict. \
            Returns {evolved, session_id, version_id, operations_applied, serialized (up to 2,000 objects unless \
            'return_structure' is set)}.",
        mutates_graph: true,
        creates_session: true,
        destructive: false,
        idempotent: false,
        open_world: false,
        session_fields: &["session_id"],
        session_checks: &[SessionCheck::open("session_id").if_given()],
        llm_exposed: true,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Value, ToolError> {
        let operations = match &input.operations {
            None => return Err(ToolError::new("no_operations", "No evolution operations were provided.")),
            Some(Value::Array(list)) if list.is_empty() => {
                return Err(ToolError::new("no_operations", "No evolution operations were provided."));
            }
            Some(value @ Value::Array(_)) => parse_operations(value)?,
            Some(_) => return Err(ToolError::new("invalid_operations", "Operations must be a JSON array.")),
        };
        let extensions = extensions(&input.extensions)?;
        let session_id = match input.session_id.filter(|s| !s.is_empty()) {
            Some(id) => id,
            None => {
                let json_data = input.json_data.as_ref().ok_or_else(|| ToolError::missing_parameter("session_id"))?;
                let structure = parse_json_data(json_data)?;
                ctx.runtime.create_session(structure, NewSession::default()).await?.session_id
            }
        };
        let operations_applied = operations.len();
        let metadata = ctx.version_metadata(Self::META.name, [("operation", json!("evolve"))]);
        let request = CommitRequest::operations(operations)
            .with_metadata(metadata)
            .with_extensions(extensions.clone())
            .with_provenance((*ctx.provenance).clone());
        let committed = ctx.runtime.commit(&session_id, request).await?;
        let mut result = json!({
            "evolved": true,
            "session_id": session_id,
            "version_id": committed.version.version_id,
            "operations_applied": operations_applied,
            "object_count": committed.version.object_count,
            "state_hash": committed.version.state_hash,
        });
        let include = input.return_structure.unwrap_or(committed.version.object_count as usize <= SERIALIZE_LIMIT);
        if include {
            result["serialized"] = json!(ctx.runtime.read(&session_id, |s, _| to_canonical_string(s)).await?);
        }
        if !extensions.is_empty() {
            result["extensions_applied"] = json!(extensions.iter().map(|e| e.name()).collect::<Vec<_>>());
        }
        if !committed.warnings.is_empty() {
            result["diagnostics"] = diagnostics_brief(&committed.warnings);
        }
        Ok(result)
    }
}
