//! Shared conversions between core types and the JSON shapes tools return.

use serde_json::{Value, json};

use cks_core::validate::Diagnostic;
use cks_core::{Extension, KnowledgeStructure, json as cks_json};

use crate::error::ToolError;

/// Diagnostics in the shape `evolve_knowledge` uses: `{code, severity, message, location}`.
pub fn diagnostics_brief(diagnostics: &[Diagnostic]) -> Value {
    diagnostics
        .iter()
        .map(|d| json!({"code": d.code, "severity": d.severity.as_str(), "message": d.message, "location": d.location}))
        .collect()
}

/// Diagnostics in the shape `validate_knowledge` uses: `{code, severity, source, message, metadata}`
/// (`metadata.location` carries the object id).
pub fn diagnostics_full(diagnostics: &[Diagnostic]) -> Value {
    diagnostics
        .iter()
        .map(|d| {
            let mut metadata = d.metadata.clone();
            if let Some(location) = &d.location {
                metadata.insert("location".into(), Value::String(location.clone()));
            }
            json!({"code": d.code, "severity": d.severity.as_str(), "source": "core", "message": d.message, "metadata": metadata})
        })
        .collect()
}

/// Parses `json_data`, given either as a JSON string (the reference's form) or as an object.
pub fn parse_json_data(value: &Value) -> Result<KnowledgeStructure, ToolError> {
    match value {
        Value::String(text) => Ok(cks_json::parse_str(text)?),
        Value::Object(_) => Ok(cks_json::parse_value(value.clone())?),
        _ => Err(ToolError::invalid_json("expected a JSON string or object")),
    }
}

/// Resolves requested extension names (or codes).
pub fn extensions(names: &[String]) -> Result<Vec<Extension>, ToolError> {
    Ok(Extension::parse_list(names)?)
}
