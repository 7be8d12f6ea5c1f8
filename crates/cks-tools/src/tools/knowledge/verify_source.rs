//! `verify_source`: a real HTTP check of a source (a HEAD request through the guarded fetcher,
//! `cks_web::fetch`) and the signed `VerificationRecord` stating what it found, with the
//! `verified_by` relation linking it to its subject, for the caller to add with evolve_knowledge.
//! The record states a technical fact (when, how, which status), never a judgment of the source.

use crate::ErrorCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use time::OffsetDateTime;

use cks_core::object::{Identity, KnowledgeObject, Structure};
use cks_core::ops::Operation;
use cks_core::validate::provenance::{SIGNATURE_KEY, sign};

use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Tool, ToolMeta};

const VERIFIED_BY: &str = "verified_by";

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The URL of the source to verify (http or https, on a public address).
    pub(crate) url: String,
    /// The ID of the Knowledge Object that this verification is about.
    pub(crate) subject_id: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    #[serde(flatten)]
    pub(crate) verification: VerificationView,
}

/// A check's objects as tools report them.
#[derive(Debug, Serialize, JsonSchema)]
pub struct VerificationView {
    /// The new VerificationRecord {identity: {id: 'vr-…', type, name}, structure: {checked_at,
    /// checked_via, _cks_mcp_signature, http_status (when the source answered)}}, then its
    /// verified_by relation [subject_id, record id].
    pub(crate) objects: Vec<Value>,
    /// Why the check got no HTTP status, when it got none: {error, message}.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) check_error: Option<Value>,
}

/// A source checked: the signed record and its link to the subject.
#[derive(Debug)]
pub struct Verification {
    pub record: KnowledgeObject,
    pub link: KnowledgeObject,
    pub subject_id: String,
    /// Why no status was recorded (the fetch error), when none was.
    pub check_error: Option<Value>,
}

impl Verification {
    pub fn view(&self) -> VerificationView {
        VerificationView {
            objects: vec![self.record.to_value(), self.link.to_value()],
            check_error: self.check_error.clone(),
        }
    }

    /// The operations that add the record and its link.
    pub fn operations(self) -> Vec<Operation> {
        let Verification { record, link, subject_id, .. } = self;
        let participants = vec![subject_id, record.id().to_owned()];
        vec![
            Operation::AddObject { identity: record.identity, structure: record.structure },
            Operation::AddRelation {
                identity: link.identity,
                participants,
                relation_type: VERIFIED_BY.to_owned(),
                structure: Structure::new(),
            },
        ]
    }
}

/// Checks `url` with a HEAD request and signs the outcome for `subject_id` with the server's key.
/// A URL refused as it stands is the error `unsafe_url` and no record; any later failure (a
/// redirect to a refused address, no answer, too many redirects, the deadline) is a record without
/// `http_status`, as the reference records a source it could not reach.
pub async fn verify(ctx: &ToolContext, url: &str, subject_id: &str) -> Result<Verification, ToolError> {
    let (status, check_error) = match ctx.fetcher.head(url).await {
        Ok(fetched) => (Some(fetched.status), None),
        Err(e) if e.refused_at_once() => {
            return Err(ToolError::new(
                ErrorCode::UnsafeUrl,
                format!("Refusing to verify '{url}': {e} No VerificationRecord was created."),
            ));
        }
        Err(e) => (None, Some(json!({"error": e.code(), "message": e.to_string()}))),
    };
    let record_id = format!("vr-{}", uuid::Uuid::new_v4().simple());
    let mut structure = Structure::new();
    structure.insert("checked_at", json!(checked_at(OffsetDateTime::now_utc())));
    structure.insert("checked_via", json!("automated_http_check"));
    if let Some(status) = status {
        structure.insert("http_status", json!(status));
    }
    let signature = sign(&ctx.provenance, &record_id, subject_id, &structure);
    structure.insert(SIGNATURE_KEY, json!(signature));
    let record =
        KnowledgeObject::new(Identity::new(record_id.clone(), "VerificationRecord", "verification"), structure);
    let link_structure = json!({"participants": [subject_id, record_id], "relation_type": VERIFIED_BY});
    let link = KnowledgeObject::new(
        Identity::new(format!("rel-{}", uuid::Uuid::new_v4().simple()), "Relation", "r"),
        link_structure.as_object().cloned().unwrap_or_default(),
    );
    Ok(Verification { record, link, subject_id: subject_id.to_owned(), check_error })
}

/// `checked_at` as the reference writes it: UTC, to the second, `Z`.
fn checked_at(at: OffsetDateTime) -> String {
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute(),
        at.second()
    )
}

/// A required text argument: the reference treats "" as missing.
pub(crate) fn required(value: &str, parameter: &str) -> Result<(), ToolError> {
    if value.is_empty() { Err(ToolError::missing_parameter(parameter)) } else { Ok(()) }
}

pub(crate) struct VerifySource;

#[async_trait::async_trait]
impl Tool for VerifySource {
    type Input = Input;
    type Output = Output;
    const TITLE: &'static str = "Verify a source";
    const META: ToolMeta = ToolMeta {
        name: "verify_source",
        description: "Verify an external source by performing a real HTTP request (HEAD, redirects followed up to 3, \
            5 s) and build a signed VerificationRecord stating its outcome. Returns {objects: [record, relation]}: the \
            record {checked_at, checked_via: 'automated_http_check', http_status when the source answered, \
            _cks_mcp_signature} and its verified_by relation from 'subject_id'; add both with evolve_knowledge (they \
            pass validation's provenance check only unchanged). When the source did not answer, the record has no \
            http_status and 'check_error' says why. Only http/https URLs whose host resolves to public addresses \
            only are fetched; any other is the error unsafe_url and no record.",
        mutates_graph: false,
        creates_session: false,
        destructive: false,
        idempotent: false,
        open_world: true,
        session_fields: &[],
        session_checks: &[],
        // The model would choose the URL: an instruction planted in a graph could have it send
        // the graph's content to any public server, in the URL's path or query.
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        required(&input.url, "url")?;
        required(&input.subject_id, "subject_id")?;
        let verification = verify(ctx, &input.url, &input.subject_id).await?;
        Ok(Output { verification: verification.view() })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use serde_json::{Value, json};
    use std::sync::Arc;

    use cks_core::validate::provenance::verify;

    use crate::context::ToolContext;
    use crate::testing::{HttpServer, Reply, call, context};
    use cks_web::fetch::{FetchPolicy, Fetcher};

    /// A context whose fetcher may reach 127.0.0.1 (the test servers).
    pub(crate) fn local_context() -> ToolContext {
        let mut ctx = context();
        let policy = FetchPolicy { allowed: vec!["127.0.0.1".parse().unwrap()], ..FetchPolicy::default() };
        ctx.fetcher = Arc::new(Fetcher::new(policy));
        ctx
    }

    /// Whether `record` (an object as returned) is signed for `subject` under the context's key.
    pub(crate) fn signed(ctx: &ToolContext, record: &Value, subject: &str) -> bool {
        let structure: cks_core::Structure = serde_json::from_value(record["structure"].clone()).unwrap();
        verify(&ctx.provenance, record["identity"]["id"].as_str().unwrap(), subject, &structure)
    }

    #[tokio::test]
    async fn a_checked_source_gives_a_signed_record_and_its_link() {
        let server = HttpServer::start(|_, path| match path {
            "/paper" => Reply::status(200),
            "/moved" => Reply::redirect(301, "/gone"),
            _ => Reply::status(404),
        })
        .await;
        let ctx = local_context();
        let base = format!("http://127.0.0.1:{}", server.addr.port());
        let result = call(&ctx, "verify_source", json!({"url": format!("{base}/paper"), "subject_id": "doc"})).await;
        let [record, link] = result["objects"].as_array().unwrap().as_slice() else { panic!("{result}") };
        let id = record["identity"]["id"].as_str().unwrap();
        assert!(id.starts_with("vr-") && id.len() == 35, "{id}");
        assert_eq!(record["identity"]["type"], "VerificationRecord");
        assert_eq!(record["structure"]["http_status"], 200);
        assert_eq!(record["structure"]["checked_via"], "automated_http_check");
        let checked_at = record["structure"]["checked_at"].as_str().unwrap();
        assert!(
            checked_at.len() == 20 && checked_at.ends_with('Z') && checked_at.as_bytes()[10] == b'T',
            "{checked_at}"
        );
        assert!(signed(&ctx, record, "doc"));
        assert!(!signed(&ctx, record, "other"), "bound to its subject");
        assert_eq!(link["structure"], json!({"participants": ["doc", id], "relation_type": "verified_by"}));
        assert!(link["identity"]["id"].as_str().unwrap().starts_with("rel-"));
        assert!(result.get("check_error").is_none());
        assert_eq!(server.requests()[0].method, "HEAD");

        let moved = call(&ctx, "verify_source", json!({"url": format!("{base}/moved"), "subject_id": "doc"})).await;
        assert_eq!(moved["objects"][0]["structure"]["http_status"], 404, "the status after the redirect");
    }

    #[tokio::test]
    async fn unsafe_urls_missing_arguments_and_silent_sources() {
        let ctx = local_context();
        for url in ["http://10.0.0.1/", "ftp://example.org/", "http://169.254.169.254/latest/meta-data"] {
            let refused = call(&ctx, "verify_source", json!({"url": url, "subject_id": "doc"})).await;
            assert_eq!(refused["error"], "unsafe_url", "{url}");
            assert!(refused["message"].as_str().unwrap().starts_with(&format!("Refusing to verify '{url}': ")));
            assert!(refused.get("objects").is_none());
        }
        // The server's default fetcher refuses loopback too.
        let refused = call(&context(), "verify_source", json!({"url": "http://127.0.0.1/", "subject_id": "d"})).await;
        assert_eq!(refused["error"], "unsafe_url");
        for (args, missing) in [
            (json!({"subject_id": "doc"}), "url"),
            (json!({"url": "https://example.org/"}), "subject_id"),
            (json!({"url": "", "subject_id": "doc"}), "url"),
            (json!({"url": "https://example.org/", "subject_id": ""}), "subject_id"),
        ] {
            let answer = call(&ctx, "verify_source", args).await;
            assert_eq!(answer["error"], "missing_parameter");
            assert!(answer["message"].as_str().unwrap().contains(&format!("'{missing}'")));
        }

        // A source that does not answer: a record without http_status, still signed.
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let silent =
            call(&ctx, "verify_source", json!({"url": format!("http://{closed}/"), "subject_id": "doc"})).await;
        let record = &silent["objects"][0];
        assert!(record["structure"].get("http_status").is_none(), "{silent}");
        assert!(signed(&ctx, record, "doc"));
        assert_eq!(silent["check_error"]["error"], "unreachable");
    }
}
