//! Shared conversions between core types and the JSON shapes tools return.

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Map, Value};

use cks_core::validate::Diagnostic;
use cks_core::{Extension, KnowledgeStructure, json as cks_json};

use crate::error::ToolError;

/// A diagnostic in the shape `evolve_knowledge` uses.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct BriefDiagnostic {
    /// The rule's code, e.g. `CKS-SEM-CYCLE`.
    pub code: String,
    /// `error`, `warning` or `information`.
    pub severity: String,
    pub message: String,
    /// The id of the object concerned, when there is one.
    pub location: Option<String>,
}

/// A diagnostic in the shape `validate_knowledge` uses.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct FullDiagnostic {
    /// The rule's code, e.g. `CKS-STRUCT-DANGLING-REF`.
    pub code: String,
    /// `error`, `warning` or `information`.
    pub severity: String,
    /// Which layer raised it: `core` here.
    pub source: String,
    pub message: String,
    /// Rule-specific details; `location` carries the id of the object concerned.
    pub metadata: Map<String, Value>,
}

/// Diagnostics as [`BriefDiagnostic`]s.
pub fn brief_diagnostics(diagnostics: &[Diagnostic]) -> Vec<BriefDiagnostic> {
    diagnostics
        .iter()
        .map(|d| BriefDiagnostic {
            code: d.code.to_string(),
            severity: d.severity.as_str().to_owned(),
            message: d.message.clone(),
            location: d.location.clone(),
        })
        .collect()
}

/// Diagnostics as [`FullDiagnostic`]s.
pub fn full_diagnostics(diagnostics: &[Diagnostic]) -> Vec<FullDiagnostic> {
    diagnostics
        .iter()
        .map(|d| {
            let mut metadata = d.metadata.clone();
            if let Some(location) = &d.location {
                metadata.insert("location".into(), Value::String(location.clone()));
            }
            FullDiagnostic {
                code: d.code.to_string(),
                severity: d.severity.as_str().to_owned(),
                source: "core".into(),
                message: d.message.clone(),
                metadata,
            }
        })
        .collect()
}

/// Diagnostics in the shape `evolve_knowledge` uses: `{code, severity, message, location}`.
pub fn diagnostics_brief(diagnostics: &[Diagnostic]) -> Value {
    serde_json::to_value(brief_diagnostics(diagnostics)).expect("diagnostics encode")
}

/// Diagnostics in the shape `validate_knowledge` uses: `{code, severity, source, message, metadata}`
/// (`metadata.location` carries the object id).
pub fn diagnostics_full(diagnostics: &[Diagnostic]) -> Value {
    serde_json::to_value(full_diagnostics(diagnostics)).expect("diagnostics encode")
}

/// A structure as the canonical document tools hand to clients: the canonical JSON plus the
/// format-versioning keys, stamped with the current time. Storage and hashing use the plain
/// canonical forms instead, which stay pure functions of the structure.
pub fn client_document(structure: &KnowledgeStructure) -> String {
    cks_json::to_document_string(structure, &serialized_at(time::OffsetDateTime::now_utc()))
}

/// [`client_document`] without indentation or line breaks.
pub fn compact_client_document(structure: &KnowledgeStructure) -> String {
    cks_json::to_compact_document_string(structure, &serialized_at(time::OffsetDateTime::now_utc()))
}

/// A time as the reference writes `serialized_at` and its other time stamps: ISO 8601 with
/// microseconds and a `+00:00` offset.
pub(crate) fn serialized_at(at: time::OffsetDateTime) -> String {
    let at = at.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}+00:00",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute(),
        at.second(),
        at.microsecond()
    )
}

/// Parses `json_data`, given either as a JSON string (the reference's form) or as an object.
///
/// Takes the value, so that its text (a whole graph's, possibly hundreds of megabytes) is freed
/// as soon as the structure is built rather than held beside it for the rest of the call.
pub fn parse_json_data(value: Value) -> Result<KnowledgeStructure, ToolError> {
    match value {
        Value::String(text) => Ok(cks_json::parse_str(&text)?),
        value @ Value::Object(_) => Ok(cks_json::parse_value(value)?),
        _ => Err(ToolError::invalid_json("expected a JSON string or object")),
    }
}

/// Resolves requested extension names (or codes).
pub fn extensions(names: &[String]) -> Result<Vec<Extension>, ToolError> {
    Ok(Extension::parse_list(names)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn client_documents_are_stamped_like_the_reference() {
        // 2026-03-04T05:06:07.123456789Z
        let at = time::OffsetDateTime::from_unix_timestamp_nanos(1_772_600_767_123_456_789).unwrap();
        assert_eq!(serialized_at(at), "2026-03-04T05:06:07.123456+00:00");
        let document: Value = serde_json::from_str(&client_document(&KnowledgeStructure::new())).unwrap();
        let stamp = document["_cks_metadata"]["serialized_at"].as_str().unwrap();
        assert!(time::OffsetDateTime::parse(stamp, &time::format_description::well_known::Rfc3339).is_ok(), "{stamp}");
        assert_eq!(document["objects"], json!([]));
    }
}
