//! `validate_knowledge`: validate a structure given as `json_data` (and keep it as a new session
//! when it is valid) or a session's current state.
//!
//! Unlike the reference, validating an existing session commits nothing: validation does not
//! change the graph, so it adds no version.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use cks_core::KnowledgeStructure;
use cks_core::validate::{Extension, Severity, ValidationOptions, validate};
use cks_runtime::NewSession;

use crate::context::ToolContext;
use crate::convert::{diagnostics_full, extensions, parse_json_data};
use crate::error::ToolError;
use crate::tool::{ArgumentCode, Coercion, SessionCheck, Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    #[serde(default)]
    #[schemars(schema_with = "crate::schema::json_data")]
    pub(crate) json_data: Option<Value>,
    /// Validate this session's current state instead of `json_data` (nothing is committed).
    pub(crate) session_id: Option<String>,
    /// Opt-in constraints for this call, by name (or code): embedding_projection,
    /// verification_record, type_hierarchy, relation_type, mutual_exclusion, functional_relation,
    /// inference_referential_integrity, confidence_bounds, supersession_chain,
    /// inference_confidence_conflict, temporal_validity, claim_integrity.
    #[serde(default)]
    pub(crate) extensions: Vec<String>,
}

pub(crate) struct ValidateKnowledge;

#[async_trait::async_trait]
impl Tool for ValidateKnowledge {
    type Input = Input;
    type Output = Value;
    const ARGUMENT_CODES: &'static [ArgumentCode] = &[
        ArgumentCode::malformed("json_data", "invalid_json"),
        ArgumentCode::malformed("extensions", "unknown_extension"),
    ];
    const ARGUMENT_COERCIONS: &'static [(&'static str, Coercion)] = &[("json_data", Coercion::JsonText)];
    const META: ToolMeta = ToolMeta {
        name: "validate_knowledge",
        description: "Validate a knowledge structure: the always-on rules (unique ids, no dangling references, \
            'derives' relations binary and acyclic) plus any opt-in 'extensions'. Give 'json_data' to validate a \
            new structure — when valid it is stored as a new session and the result carries its 'session_id' and \
            first 'version_id' — or 'session_id' to check a session's current state (read-only: unlike the \
            reference server, this adds no version). Returns {valid, extensions_applied, diagnostics}.",
        mutates_graph: false,
        creates_session: true,
        destructive: false,
        idempotent: false,
        open_world: false,
        session_fields: &["session_id"],
        session_checks: &[SessionCheck::exists("session_id").if_given()],
        llm_exposed: true,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Value, ToolError> {
        let extensions = extensions(&input.extensions)?;
        let options = ValidationOptions { extensions, ..Default::default() };
        if let Some(session_id) = input.session_id.filter(|s| !s.is_empty()) {
            let (valid, diagnostics) =
                ctx.runtime.read(&session_id, |structure, _| judge(ctx, structure, &options)).await?;
            return Ok(json!({
                "valid": valid,
                "extensions_applied": input.extensions,
                "diagnostics": diagnostics,
                "session_id": session_id,
            }));
        }
        let json_data = input.json_data.ok_or_else(|| ToolError::missing_parameter("json_data"))?;
        let structure = parse_json_data(&json_data)?;
        let (valid, diagnostics) = judge(ctx, &structure, &options);
        let mut result = json!({
            "valid": valid,
            "extensions_applied": input.extensions,
            "diagnostics": diagnostics,
        });
        if valid {
            let first_version = ctx.version_metadata(Self::META.name, [("operation", json!("validate"))]);
            let info = ctx
                .runtime
                .create_session(structure, NewSession { first_version: Some(first_version), ..Default::default() })
                .await?;
            result["session_id"] = json!(info.session_id);
            result["version_id"] = json!(info.latest_version_id);
        }
        Ok(result)
    }
}

/// Validity and diagnostics of a structure: the core validator (with `verification_record` forced
/// on whenever a `VerificationRecord` is present, since an unchecked record reads like a checked
/// one) followed by the provenance findings under the server's key.
fn judge(ctx: &ToolContext, structure: &KnowledgeStructure, options: &ValidationOptions) -> (bool, Value) {
    let mut options = options.clone();
    let has_record = structure.objects().any(|o| o.identity.r#type == "VerificationRecord");
    if has_record && !options.extensions.contains(&Extension::VerificationRecord) {
        options.extensions.push(Extension::VerificationRecord);
    }
    let report = validate(structure, &options);
    let provenance = crate::provenance::findings(ctx, structure);
    let valid = report.is_valid() && !provenance.iter().any(|d| d.severity == Severity::Error);
    let mut diagnostics = diagnostics_full(&report.diagnostics);
    if let (Value::Array(list), Value::Array(more)) = (&mut diagnostics, crate::provenance::details(&provenance)) {
        list.extend(more);
    }
    (valid, diagnostics)
}
