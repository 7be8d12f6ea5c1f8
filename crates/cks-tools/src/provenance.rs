//! Provenance gates for tools: the server's signing key meets the structures tools read or write.
//!
//! A structure holding a `VerificationRecord` without the server's signature must not be
//! committed, serialized, explained or merged as if it were trusted; validation reports it.

use crate::ErrorCode;
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
    Err(ToolError::new(ErrorCode::UnverifiedProvenance, message).with("details", details(&blocking)))
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

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};
    use std::sync::Arc;

    use cks_core::validate::ProvenanceKey;
    use cks_core::validate::provenance::{SIGNATURE_KEY, sign};

    use crate::ToolContext;
    use crate::testing::{call, context, obj, rel, session, structure};

    const CHECK: &str =
        r#"{"checked_at": "2024-05-01T10:00:00Z", "checked_via": "automated_http_check", "http_status": 200}"#;

    fn keyed_context() -> ToolContext {
        let mut ctx = context();
        ctx.provenance = Arc::new(ProvenanceKey::new(*b"server secret"));
        ctx
    }

    /// A document with a claim verified by `record`, signed with `key` (or not at all).
    fn document(key: Option<&ProvenanceKey>) -> Value {
        let mut record: cks_core::Structure = serde_json::from_str(CHECK).unwrap();
        if let Some(key) = key {
            let signature = sign(key, "record", "claim", &record);
            record.insert(SIGNATURE_KEY, json!(signature));
        }
        structure(vec![
            obj("claim", "Claim", "Water boils at 100 °C", json!({})),
            obj("record", "VerificationRecord", "check", Value::from(record)),
            rel("claim-verified", &["claim", "record"], "verified_by"),
        ])
    }

    #[tokio::test]
    async fn records_signed_with_the_server_key_are_trusted() {
        let ctx = keyed_context();
        let signed = document(Some(&ctx.provenance)).to_string();
        let validated = call(&ctx, "validate_knowledge", json!({"json_data": signed})).await;
        assert_eq!(validated["valid"], true, "{validated}");
        assert!(validated["session_id"].is_string(), "a valid structure is kept");
        assert!(call(&ctx, "serialize_knowledge", json!({"json_data": signed})).await.is_string(), "the bare document");
        assert!(call(&ctx, "explain_knowledge", json!({"json_data": signed})).await.get("error").is_none());
        let evolved = call(
            &ctx,
            "evolve_knowledge",
            json!({"session_id": validated["session_id"], "operations": [
                {"type": "rename_object", "object_id": "claim", "new_name": "boiling point"}]}),
        )
        .await;
        assert_eq!(evolved["evolved"], true, "{evolved}");
    }

    #[tokio::test]
    async fn unsigned_or_foreign_records_are_refused_everywhere() {
        let ctx = keyed_context();
        let foreign = ProvenanceKey::new(*b"some other server");
        for (label, data) in [("unsigned", document(None)), ("foreign", document(Some(&foreign)))] {
            let data = data.to_string();
            let validated = call(&ctx, "validate_knowledge", json!({"json_data": data})).await;
            assert_eq!(validated["valid"], false, "{label}");
            assert!(validated.get("session_id").is_none(), "{label}: nothing is kept");
            let codes: Vec<&str> =
                validated["diagnostics"].as_array().unwrap().iter().filter_map(|d| d["code"].as_str()).collect();
            assert!(codes.contains(&"CKS-MCP-UNVERIFIED-PROVENANCE"), "{label}: {codes:?}");
            let serialized = call(&ctx, "serialize_knowledge", json!({"json_data": data})).await;
            assert_eq!(serialized["error"], "unverified_provenance", "{label}");
            assert_eq!(serialized["details"][0]["source"], "mcp");
            let explained = call(&ctx, "explain_knowledge", json!({"json_data": data})).await;
            assert_eq!(explained["error"], "unverified_provenance", "{label}");
            let base = structure(vec![obj("claim", "Claim", "Water boils at 100 °C", json!({}))]).to_string();
            let merged = call(
                &ctx,
                "merge_knowledge",
                json!({"json_data_base": base, "json_data_branch_a": base, "json_data_branch_b": data}),
            )
            .await;
            assert_eq!(merged["merged"], false, "{label}: {merged}");
            assert_eq!(merged["details"][0]["code"], "CKS-MCP-UNVERIFIED-PROVENANCE");
        }
    }

    #[tokio::test]
    async fn commits_of_untrusted_records_fail_and_leave_the_session_unchanged() {
        let ctx = keyed_context();
        let id = session(&ctx, structure(vec![obj("claim", "Claim", "c", json!({}))])).await;
        let record: Value = serde_json::from_str(CHECK).unwrap();
        let forge = json!([
            {"type": "add_object", "identity": {"id": "record", "type": "VerificationRecord", "name": "r"},
             "structure": record},
            {"type": "add_relation", "identity": {"id": "v", "type": "Relation", "name": "v"},
             "participants": ["claim", "record"], "relation_type": "verified_by"}]);
        let evolved = call(&ctx, "evolve_knowledge", json!({"session_id": id, "operations": forge})).await;
        assert_eq!(evolved["error"], "validation_failed", "{evolved}");
        assert_eq!(evolved["details"][0]["code"], "CKS-MCP-UNVERIFIED-PROVENANCE");
        let forked = call(&ctx, "fork_sandbox", json!({"session_id": id, "operations": forge})).await;
        assert_eq!(forked["error"], "validation_failed", "{forked}");
        assert_eq!(ctx.runtime.list_versions(&id).await.unwrap().len(), 1, "nothing was committed");
        assert_eq!(ctx.runtime.read(&id, |s, _| s.len()).await.unwrap(), 1);
    }
}
