//! `explain_knowledge`: a summary of a knowledge structure (counts, types, ids), or with
//! `object_id` the inference chains that make one object believed.
//!
//! As in the reference, the `json_data` path returns the bare explanation object; unlike the
//! reference, it stores nothing (the reference leaves an orphan session and version behind).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeSet;

use cks_core::KnowledgeStructure;

use crate::context::ToolContext;
use crate::convert::parse_json_data;
use crate::error::ToolError;
use crate::tool::{SessionCheck, Tool, ToolMeta};
use cks_core::inference;

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    #[serde(default)]
    #[schemars(schema_with = "crate::schema::json_data")]
    pub(crate) json_data: Option<Value>,
    /// The session to explain (then `json_data` is ignored).
    pub(crate) session_id: Option<String>,
    /// Explain why this object is believed: its inference chains, down to base facts.
    pub(crate) object_id: Option<String>,
    /// Most `identities` to list (0: all; default: as many as fit 48 KB).
    pub(crate) limit: Option<u64>,
    /// Identities to skip (a `next_offset`).
    #[serde(default)]
    pub(crate) offset: u64,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(untagged)]
#[schemars(extend("type" = "object"))]
pub(crate) enum Output {
    /// A session's structure.
    Session { session_id: String, explanation: Explanation },
    /// The structure given as `json_data`: the explanation itself.
    Bare(Explanation),
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(untagged)]
pub(crate) enum Explanation {
    Structure(StructureExplanation),
    /// Why one object is believed: a tree of inference steps down to base facts (see the tool's
    /// description for its shape).
    Belief(Map<String, Value>),
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct StructureExplanation {
    /// Objects, relations included.
    object_count: u64,
    relation_count: u64,
    summary: StructureSummary,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct StructureSummary {
    /// The CKS core format level (in the reference core's release numbering).
    version: String,
    /// Objects, relations included.
    object_count: u64,
    relation_count: u64,
    /// Distinct object types, sorted.
    object_types: Vec<String>,
    /// Distinct relation types, sorted.
    relation_types: Vec<String>,
    /// Every object id, in structure order (a page of them when `truncated`).
    identities: Vec<String>,
    /// Always true: explaining never changes the structure.
    immutable: bool,
    /// True when identities were left out.
    #[serde(skip_serializing_if = "Option::is_none")]
    truncated: Option<bool>,
    /// The `offset` that continues `identities`.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_offset: Option<u64>,
}

pub(crate) struct ExplainKnowledge;

#[async_trait::async_trait]
impl Tool for ExplainKnowledge {
    type Input = Input;
    type Output = Output;
    const TITLE: &'static str = "Explain a knowledge structure";
    const META: ToolMeta = ToolMeta {
        name: "explain_knowledge",
        description: "Explain a knowledge structure ('session_id', else 'json_data'; stores nothing). Without \
            'object_id': counts and a summary of types. With 'object_id': why that object is \
            believed, a tree {object_id, exists, active_steps: [{step_id, operator, confidence, \
            justification, premises: [same shape]}], superseded_steps, base_facts}; an unknown id gives exists: \
            false. Returns {session_id, explanation} (the bare explanation for json_data).",
        mutates_graph: false,
        creates_session: false,
        destructive: false,
        idempotent: true,
        open_world: false,
        session_fields: &["session_id"],
        session_checks: &[SessionCheck::exists("session_id").if_given()],
        llm_exposed: true,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        let object_id = input.object_id.filter(|s| !s.is_empty());
        let page = (input.offset, input.limit);
        if let Some(session_id) = input.session_id.filter(|s| !s.is_empty()) {
            let explanation = ctx.runtime.read(&session_id, |s, _| explain(s, object_id.as_deref(), page)).await?;
            return Ok(Output::Session { session_id, explanation });
        }
        let json_data = input.json_data.ok_or_else(|| ToolError::missing_parameter("json_data"))?;
        let structure = parse_json_data(json_data)?;
        crate::provenance::require_verified(ctx, &structure, "explain")?;
        Ok(Output::Bare(explain(&structure, object_id.as_deref(), page)))
    }
}

fn explain(structure: &KnowledgeStructure, object_id: Option<&str>, page: (u64, Option<u64>)) -> Explanation {
    match object_id {
        Some(id) => match inference::explain(structure, id) {
            Value::Object(tree) => Explanation::Belief(tree),
            _ => unreachable!("an explanation is an object"),
        },
        None => Explanation::Structure(summary(structure, page)),
    }
}

/// The reference's structure-wide explanation.
fn summary(structure: &KnowledgeStructure, (offset, limit): (u64, Option<u64>)) -> StructureExplanation {
    let object_count = structure.len() as u64;
    let relation_count = structure.relations().count() as u64;
    let object_types: BTreeSet<&str> = structure.objects().map(|o| o.identity.r#type.as_str()).collect();
    let relation_types: BTreeSet<&str> =
        structure.relations().filter_map(|r| r.relation()).map(|r| r.relation_type).collect();
    let identities = crate::bounds::page_by(structure.ids().collect(), offset, limit, |id| id.len() + 3);
    StructureExplanation {
        object_count,
        relation_count,
        summary: StructureSummary {
            version: cks_core::json::READER_VERSION.to_owned(),
            object_count,
            relation_count,
            object_types: object_types.into_iter().map(str::to_owned).collect(),
            relation_types: relation_types.into_iter().map(str::to_owned).collect(),
            truncated: identities.truncated(),
            identities: identities.items.into_iter().map(str::to_owned).collect(),
            immutable: true,
            next_offset: identities.next_offset,
        },
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::testing::{call, context, obj, rel, session, structure};

    fn data() -> Value {
        structure(vec![
            obj("earth", "Planet", "Earth", json!({})),
            obj("sun", "Star", "Sun", json!({})),
            rel("r1", &["earth", "sun"], "orbits"),
            obj("warm", "Claim", "Earth is warm", json!({})),
            obj(
                "s1",
                "InferenceStep",
                "s1",
                json!({"premises": ["earth", "sun"], "conclusion": "warm", "operator": "abductive", "confidence": 0.7}),
            ),
        ])
    }

    #[tokio::test]
    async fn summarises_a_structure() {
        let ctx = context();
        let id = session(&ctx, data()).await;
        let result = call(&ctx, "explain_knowledge", json!({"session_id": id})).await;
        assert_eq!(
            result,
            json!({"session_id": id, "explanation": {
                "object_count": 5, "relation_count": 1,
                "summary": {"version": cks_core::json::READER_VERSION, "object_count": 5, "relation_count": 1,
                    "object_types": ["Claim", "InferenceStep", "Planet", "Relation", "Star"],
                    "relation_types": ["orbits"], "identities": ["earth", "sun", "r1", "warm", "s1"], "immutable": true}}})
        );
        let sessions = ctx.runtime.list_sessions().await.unwrap().len();
        let session_explanation = result["explanation"].clone();
        let result = call(&ctx, "explain_knowledge", json!({"json_data": data().to_string()})).await;
        assert_eq!(result, session_explanation, "the bare explanation, as the reference returns it");
        assert_eq!(ctx.runtime.list_sessions().await.unwrap().len(), sessions, "no orphan session");
    }

    #[tokio::test]
    async fn explains_why_an_object_is_believed() {
        let ctx = context();
        let id = session(&ctx, data()).await;
        let result = call(&ctx, "explain_knowledge", json!({"session_id": id, "object_id": "warm"})).await;
        let e = &result["explanation"];
        assert_eq!(e["object_id"], "warm");
        assert_eq!(e["name"], "Earth is warm");
        assert_eq!(e["base_facts"], json!(["earth", "sun"]));
        assert_eq!(e["is_truncated"], false);
        let step = &e["active_steps"][0];
        assert_eq!((step["step_id"].as_str(), step["operator"].as_str()), (Some("s1"), Some("abductive")));
        assert_eq!(step["confidence"], 0.7);
        assert_eq!(step["premises"][1]["object_id"], "sun");
        assert_eq!(step["premises"][1]["active_steps"], json!([]));

        assert_eq!(e["exists"], true);
        assert_eq!(e["has_inference"], true);
        assert_eq!(step["alternatives_considered"], json!([]));
        let bare = call(&ctx, "explain_knowledge", json!({"json_data": data().to_string(), "object_id": "warm"})).await;
        assert_eq!(&bare, e, "json_data gives the bare tree");

        let missing = call(&ctx, "explain_knowledge", json!({"session_id": id, "object_id": "nope"})).await;
        let missing = &missing["explanation"];
        assert_eq!(missing["object_id"], "nope");
        assert_eq!((missing["exists"].as_bool(), missing["has_inference"].as_bool()), (Some(false), Some(false)));
        assert_eq!(missing["active_steps"], json!([]));
        assert_eq!(call(&ctx, "explain_knowledge", json!({})).await["error"], "missing_parameter");
        assert_eq!(call(&ctx, "explain_knowledge", json!({"session_id": "x"})).await["error"], "session_not_found");
    }

    #[tokio::test]
    async fn a_long_list_of_identities_is_cut_by_default_and_continues_from_next_offset() {
        let ctx = context();
        let objects = (0..3000).map(|i| obj(&format!("object-number-{i:05}"), "Thing", "T", json!({}))).collect();
        let id = session(&ctx, structure(objects)).await;
        let all = call(&ctx, "explain_knowledge", json!({"session_id": id, "limit": 0})).await;
        assert_eq!(all["explanation"]["summary"]["identities"].as_array().unwrap().len(), 3000);
        assert!(all["explanation"]["summary"].get("truncated").is_none());
        let mut seen = Vec::new();
        let mut offset = json!(0);
        while !offset.is_null() {
            let page = call(&ctx, "explain_knowledge", json!({"session_id": id, "offset": offset})).await;
            assert!(serde_json::to_string(&page).unwrap().len() < crate::bounds::ANSWER_BUDGET + 4096);
            let summary = &page["explanation"]["summary"];
            assert_eq!(summary["object_count"], 3000);
            assert_eq!(summary.get("truncated").is_some(), summary.get("next_offset").is_some());
            seen.extend(summary["identities"].as_array().unwrap().clone());
            offset = summary.get("next_offset").cloned().unwrap_or_default();
        }
        assert_eq!(seen, *all["explanation"]["summary"]["identities"].as_array().unwrap());
        let first = call(&ctx, "explain_knowledge", json!({"session_id": id})).await;
        assert_eq!(first["explanation"]["summary"]["truncated"], true);
    }
}
