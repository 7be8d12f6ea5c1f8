//! Provenance gates for tools: the server's signing key meets the structures tools read or write.
//!
//! A structure holding a `VerificationRecord` without the server's signature must not be
//! committed, serialized, explained or merged as if it were trusted; validation reports it.

use serde_json::{Value, json};

use cks_core::KnowledgeStructure;
use cks_core::validate::{Diagnostic, Severity, check_provenance};

use crate::context::ToolContext;
use crate::error::ToolError;

/// All provenance findings (errors and warnings) of `structure` under the context's key.
pub fn findings(ctx: &ToolContext, structure: &KnowledgeStructure) -> Vec<Diagnostic> {
    check_provenance(structure, &ctx.provenance)
}

/// Only the findings that block (error severity).
pub fn blocking(ctx: &ToolContext, structure: &KnowledgeStructure) -> Vec<Diagnostic> {
    let mut found = findings(ctx, structure);
    found.retain(|d| d.severity == Severity::Error);
    found
}

/// `unverified_provenance` when the structure holds an untrusted record; `action` names what was
/// refused ("serialize", "explain").
pub fn require_verified(ctx: &ToolContext, structure: &KnowledgeStructure, action: &str) -> Result<(), ToolError> {
    let blocking = blocking(ctx, structure);
    if blocking.is_empty() {
        return Ok(());
    }
    let message = format!(
        "Cannot {action}: structure contains a VerificationRecord with an invalid or missing provenance signature. \
         It must be produced by calling verify_source, not authored directly."
    );
    Err(ToolError::new("unverified_provenance", message).with("details", details(&blocking)))
}

/// Provenance findings in the `validate_knowledge` diagnostic shape, marked as the server's own.
pub fn details(diagnostics: &[Diagnostic]) -> Value {
    diagnostics
        .iter()
        .map(|d| {
            json!({"code": d.code, "severity": d.severity.as_str(), "source": "mcp", "message": d.message,
                   "metadata": {"location": d.location}})
        })
        .collect()
}
