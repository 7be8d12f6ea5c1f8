//! `validate_knowledge`: validate a structure given as `json_data` (and keep it as a new session
//! when it is valid) or a session's current state.
//!
//! As in the reference, validating a session whose state passes records the check as a version
//! (same content, the extensions checked in its metadata). Unlike the reference, only a valid
//! `json_data` becomes a session: the reference also stores an invalid one (with no version), a
//! state no commit could have produced.

use crate::ErrorCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use cks_core::KnowledgeStructure;
use cks_core::validate::{Extension, Severity, Validated, ValidationOptions, ValidationReport, validate};
use cks_runtime::{CommitRequest, NewSession};

use crate::bounds::{Cut, Paging};
use crate::context::ToolContext;
use crate::convert::{FullDiagnostic, extensions, full_diagnostics, parse_json_data};
use crate::error::ToolError;
use crate::tool::{ArgumentCode, Coercion, SessionCheck, Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    #[serde(default)]
    #[schemars(schema_with = "crate::schema::json_data")]
    pub(crate) json_data: Option<Value>,
    /// Check this session's current state instead of `json_data`.
    pub(crate) session_id: Option<String>,
    /// Opt-in rules: embedding_projection, verification_record, type_hierarchy, relation_type,
    /// mutual_exclusion, functional_relation, inference_referential_integrity, confidence_bounds,
    /// supersession_chain, inference_confidence_conflict, temporal_validity, claim_integrity.
    #[serde(default)]
    pub(crate) extensions: Vec<String>,
    #[serde(flatten)]
    pub(crate) paging: Paging,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    /// No error-severity diagnostic.
    valid: bool,
    /// The requested extensions, as given.
    extensions_applied: Vec<String>,
    diagnostics: Vec<FullDiagnostic>,
    /// The session validated, or the new session a valid `json_data` became (absent for an invalid
    /// `json_data`, which is not stored).
    #[serde(skip_serializing_if = "Option::is_none")]
    session_id: Option<String>,
    /// The first version of the new session a valid `json_data` became, or the version recording
    /// that a session passed.
    #[serde(skip_serializing_if = "Option::is_none")]
    version_id: Option<String>,
    #[serde(flatten)]
    cut: Cut,
}

pub(crate) struct ValidateKnowledge;

#[async_trait::async_trait]
impl Tool for ValidateKnowledge {
    type Input = Input;
    type Output = Output;
    const ARGUMENT_CODES: &'static [ArgumentCode] = &[
        ArgumentCode::malformed("json_data", ErrorCode::InvalidJson),
        ArgumentCode::malformed("extensions", ErrorCode::UnknownExtension),
    ];
    const ARGUMENT_COERCIONS: &'static [(&'static str, Coercion)] = &[("json_data", Coercion::JsonText)];
    const TITLE: &'static str = "Validate a knowledge structure";
    const META: ToolMeta = ToolMeta {
        name: "validate_knowledge",
        description: "Check a knowledge structure against the always-on rules (unique ids, no dangling \
            references, binary acyclic 'derives') and any opt-in 'extensions'. Give 'json_data' (a valid one is \
            stored as a new session) or 'session_id' (a pass is recorded as a version). Returns {valid, \
            diagnostics, session_id, version_id}; diagnostics a page of about 48 KB by default (limit, offset; \
            next_offset when cut).",
        mutates_graph: true,
        creates_session: true,
        destructive: false,
        idempotent: false,
        open_world: false,
        session_fields: &["session_id"],
        session_checks: &[SessionCheck::exists("session_id").if_given()],
        llm_exposed: true,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        let requested = extensions(&input.extensions)?;
        if let Some(session_id) = input.session_id.filter(|s| !s.is_empty()) {
            let (valid, diagnostics) = ctx
                .runtime
                .read(&session_id, |structure, _| {
                    judge(ctx, structure, validate(structure, &options(structure, &requested)))
                })
                .await?;
            let version_id = if valid {
                let metadata = ctx.version_metadata(Self::META.name, [("operation", json!("validate"))]);
                let check = CommitRequest::default().with_metadata(metadata).with_extensions(requested);
                Some(ctx.runtime.commit(&session_id, check).await?.version.version_id)
            } else {
                None
            };
            let page = input.paging.page(diagnostics);
            return Ok(Output {
                valid,
                extensions_applied: input.extensions,
                cut: page.cut(),
                diagnostics: page.items,
                session_id: Some(session_id),
                version_id,
            });
        }
        let json_data = input.json_data.ok_or_else(|| ToolError::missing_parameter("json_data"))?;
        let structure = parse_json_data(json_data)?;
        let options = options(&structure, &requested);
        // Checked once: the session is made of the structure this report found valid.
        let (report, checked) = Validated::check(structure, &options);
        let structure = match &checked {
            Ok(valid) => valid.structure(),
            Err(invalid) => invalid,
        };
        let (valid, diagnostics) = judge(ctx, structure, report);
        let page = input.paging.page(diagnostics);
        let mut result = Output {
            valid,
            extensions_applied: input.extensions,
            cut: page.cut(),
            diagnostics: page.items,
            session_id: None,
            version_id: None,
        };
        if valid && let Ok(structure) = checked {
            let first_version = ctx.version_metadata(Self::META.name, [("operation", json!("validate"))]);
            let info = ctx
                .runtime
                .create_validated_session(
                    structure,
                    NewSession { first_version: Some(first_version), ..Default::default() },
                )
                .await?;
            result.session_id = Some(info.session_id);
            result.version_id = info.latest_version_id;
        }
        Ok(result)
    }
}

/// Validity and diagnostics of a structure: its core validation report, then the provenance
/// findings under the server's key (marked with the server as their source, as the reference does).
fn judge(ctx: &ToolContext, structure: &KnowledgeStructure, report: ValidationReport) -> (bool, Vec<FullDiagnostic>) {
    let provenance = crate::provenance::findings(ctx, structure);
    let valid = report.is_valid() && !provenance.iter().any(|d| d.severity == Severity::Error);
    let mut diagnostics = full_diagnostics(&report.diagnostics);
    diagnostics.extend(provenance.iter().map(|d| {
        let mut metadata = Map::new();
        metadata.insert("location".into(), d.location.clone().map_or(Value::Null, Value::String));
        FullDiagnostic {
            code: d.code.to_string(),
            severity: d.severity.as_str().to_owned(),
            source: "mcp".into(),
            message: d.message.clone(),
            metadata,
        }
    }));
    (valid, diagnostics)
}

/// The requested extensions, plus `verification_record` whenever the structure holds a
/// `VerificationRecord`: an unchecked record would read exactly like a checked one, so its shape
/// is checked whether or not the caller asked (as the reference does).
fn options(structure: &KnowledgeStructure, requested: &[Extension]) -> ValidationOptions {
    let mut extensions = requested.to_vec();
    let has_record = structure.objects().any(|o| o.identity.r#type == "VerificationRecord");
    if has_record && !extensions.contains(&Extension::VerificationRecord) {
        extensions.push(Extension::VerificationRecord);
    }
    ValidationOptions { extensions, ..Default::default() }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::testing::{call, context, obj, rel, session, structure};

    fn keys(value: &Value) -> Vec<&str> {
        value.as_object().unwrap().keys().map(String::as_str).collect()
    }

    #[tokio::test]
    async fn valid_json_data_becomes_a_session_a_client_can_evolve() {
        let ctx = context();
        let data = structure(vec![obj("a", "T", "A", json!({})), obj("b", "T", "B", json!({}))]);
        let result = call(&ctx, "validate_knowledge", json!({"json_data": data.to_string()})).await;
        assert_eq!(keys(&result), ["diagnostics", "extensions_applied", "session_id", "valid", "version_id"]);
        assert_eq!(result["valid"], true);
        let id = result["session_id"].as_str().unwrap();
        let versions = ctx.runtime.list_versions(id).await.unwrap();
        assert_eq!(result["version_id"], json!(versions[0].version_id));

        // The reference workflow: validate, then evolve the session it returned.
        let evolved = call(
            &ctx,
            "evolve_knowledge",
            json!({"session_id": id, "operations": [{"type": "remove_object", "object_id": "a"}]}),
        )
        .await;
        assert_eq!(evolved["evolved"], true, "{evolved}");
    }

    #[tokio::test]
    async fn invalid_json_data_is_reported_and_not_stored() {
        let ctx = context();
        let data = structure(vec![rel("r", &["a", "zz"], "supports")]);
        let result = call(&ctx, "validate_knowledge", json!({"json_data": data.to_string()})).await;
        assert_eq!(keys(&result), ["diagnostics", "extensions_applied", "valid"]);
        assert_eq!(result["valid"], false);
        assert_eq!(
            result["diagnostics"][0],
            json!({"code": "CKS-STRUCT-DANGLING-REF", "severity": "error", "source": "core",
                   "message": "Relation 'r' references unknown object 'a'.", "metadata": {"location": "r"}})
        );
        assert!(ctx.runtime.list_sessions().await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn json_data_may_be_a_decoded_object() {
        let ctx = context();
        let data = structure(vec![obj("a", "T", "A", json!({}))]);
        let result = call(&ctx, "validate_knowledge", json!({"json_data": data})).await;
        assert_eq!(result["valid"], true, "{result}");
        assert!(result["session_id"].is_string());
        let number = call(&ctx, "validate_knowledge", json!({"json_data": 5})).await;
        assert_eq!(number["error"], "invalid_json", "as the reference");
    }

    #[tokio::test]
    async fn a_session_that_passes_records_the_check_as_a_version() {
        let ctx = context();
        let id = session(&ctx, structure(vec![obj("a", "T", "A", json!({}))])).await;
        let before = ctx.runtime.list_versions(&id).await.unwrap();
        let result =
            call(&ctx, "validate_knowledge", json!({"session_id": id, "extensions": ["confidence_bounds"]})).await;
        assert_eq!(keys(&result), ["diagnostics", "extensions_applied", "session_id", "valid", "version_id"]);
        assert_eq!(result["extensions_applied"], json!(["confidence_bounds"]));
        let after = ctx.runtime.list_versions(&id).await.unwrap();
        assert_eq!(after.len(), before.len() + 1);
        let recorded = after.last().unwrap();
        assert_eq!(result["version_id"], json!(recorded.version_id));
        assert_eq!(recorded.state_hash, before.last().unwrap().state_hash, "the content is unchanged");
        assert_eq!(recorded.metadata["operation"], "validate");

        let unknown = call(&ctx, "validate_knowledge", json!({"session_id": id, "extensions": ["nope"]})).await;
        assert_eq!(unknown["error"], "unknown_extension");
        let not_a_list = call(&ctx, "validate_knowledge", json!({"session_id": id, "extensions": "nope"})).await;
        assert_eq!(not_a_list["error"], "unknown_extension", "as the reference, which reads a string as names");
        assert_eq!(ctx.runtime.list_versions(&id).await.unwrap().len(), after.len(), "errors record nothing");
    }

    #[tokio::test]
    async fn a_session_that_fails_an_extension_records_nothing() {
        let ctx = context();
        let id = session(&ctx, structure(vec![obj("s", "InferenceStep", "s", json!({"confidence": 1.5}))])).await;
        let result =
            call(&ctx, "validate_knowledge", json!({"session_id": id, "extensions": ["confidence_bounds"]})).await;
        assert_eq!(result["valid"], false);
        assert_eq!(result["diagnostics"][0]["code"], "CKS-EXT-CONFIDENCE-BOUNDS");
        assert!(result.get("version_id").is_none());
        assert_eq!(ctx.runtime.list_versions(&id).await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn verification_records_are_always_checked() {
        let ctx = context();
        // A record with no verified_by link and no checked_at: malformed.
        let data = structure(vec![obj("record", "VerificationRecord", "R", json!({"checked_via": "http"}))]);
        let result = call(&ctx, "validate_knowledge", json!({"json_data": data.to_string()})).await;
        assert_eq!(result["valid"], false);
        assert_eq!(result["extensions_applied"], json!([]), "only the requested ones are listed");
        let diagnostics = result["diagnostics"].as_array().unwrap();
        let core: Vec<&Value> = diagnostics.iter().filter(|d| d["source"] == "core").collect();
        assert!(!core.is_empty() && core.iter().all(|d| d["code"] == "CKS-EXT-VERIFICATION-RECORD"), "{result}");
        // Unsigned, so the server's provenance check reports it too.
        assert!(diagnostics.iter().any(|d| d["source"] == "mcp"), "{result}");
        assert!(result.get("session_id").is_none());
    }

    #[tokio::test]
    async fn many_diagnostics_come_a_page_at_a_time() {
        let ctx = context();
        // 3,000 relations to objects that do not exist: one error each, and nothing stored.
        let mut objects = vec![obj("a", "Claim", "A", json!({}))];
        objects.extend((0..3_000).map(|i| rel(&format!("r{i}"), &["a", &format!("missing{i}")], "supports")));
        let data = structure(objects).to_string();
        let sessions = ctx.runtime.list_sessions().await.unwrap().len();
        let first = call(&ctx, "validate_knowledge", json!({"json_data": data})).await;
        assert_eq!(first["valid"], false);
        assert_eq!(first["truncated"], true);
        assert!(serde_json::to_string(&first).unwrap().len() < crate::bounds::ANSWER_BUDGET + 4096);
        let all = call(&ctx, "validate_knowledge", json!({"json_data": data, "limit": 0})).await;
        let whole = all["diagnostics"].as_array().unwrap();
        assert!(whole.len() >= 3_000, "{}", whole.len());
        assert!(all.get("next_offset").is_none());
        let next = first["next_offset"].as_u64().unwrap();
        assert_eq!(next as usize, first["diagnostics"].as_array().unwrap().len());
        let second = call(&ctx, "validate_knowledge", json!({"json_data": data, "offset": next, "limit": 5})).await;
        assert_eq!(second["diagnostics"].as_array().unwrap()[..], whole[next as usize..next as usize + 5]);
        assert_eq!(ctx.runtime.list_sessions().await.unwrap().len(), sessions, "an invalid structure is not stored");
    }
}
