//! `explain_knowledge`: a summary of a knowledge structure (counts, types, ids), or with
//! `object_id` the inference chains that make one object believed.
//!
//! Unlike the reference, the `json_data` path stores nothing (the reference leaves an orphan
//! session and version behind) and wraps its answer as `{explanation}` instead of returning the
//! bare explanation object.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeSet;

use cks_core::KnowledgeStructure;

use crate::context::ToolContext;
use crate::convert::parse_json_data;
use crate::error::ToolError;
use crate::inference;
use crate::tool::{SessionCheck, Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    #[serde(default)]
    #[schemars(schema_with = "crate::schema::json_data")]
    pub(crate) json_data: Option<Value>,
    /// Explain this session's current structure (then `json_data` is ignored).
    pub(crate) session_id: Option<String>,
    #[schemars(description = "Explain why this object is believed: the active InferenceStep chains that conclude \
        it, followed through their premises down to base facts, plus the steps it superseded.")]
    pub(crate) object_id: Option<String>,
}

pub(crate) struct ExplainKnowledge;

#[async_trait::async_trait]
impl Tool for ExplainKnowledge {
    type Input = Input;
    type Output = Value;
    const META: ToolMeta = ToolMeta {
        name: "explain_knowledge",
        description: "Explain a knowledge structure (a session's with 'session_id', else 'json_data'). Without \
            'object_id': {object_count (relations included), relation_count, summary: {version, object_count, \
            relation_count, object_types, relation_types, identities, immutable}}. With 'object_id': why that object \
            is believed — a tree {object_id, name, type, truncated, active_steps: [{step_id, operator, confidence, \
            justification, premises: [same shape, or {object_id, cites_step: true}]}], superseded_steps, \
            is_truncated, base_facts, step_count}; cycles, repeats and over-long chains become stubs named by \
            'truncated'. Returns {session_id, explanation}, or {explanation} for json_data (read-only: unlike the \
            reference server, no session is stored).",
        mutates_graph: false,
        creates_session: false,
        destructive: false,
        idempotent: true,
        open_world: false,
        session_fields: &["session_id"],
        session_checks: &[SessionCheck::exists("session_id").if_given()],
        llm_exposed: true,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Value, ToolError> {
        let object_id = input.object_id.filter(|s| !s.is_empty());
        if let Some(session_id) = input.session_id.filter(|s| !s.is_empty()) {
            let explanation = ctx.runtime.read(&session_id, |s, _| explain(s, object_id.as_deref())).await??;
            return Ok(json!({"session_id": session_id, "explanation": explanation}));
        }
        let json_data = input.json_data.ok_or_else(|| ToolError::missing_parameter("json_data"))?;
        let structure = parse_json_data(&json_data)?;
        crate::provenance::require_verified(ctx, &structure, "explain")?;
        Ok(json!({"explanation": explain(&structure, object_id.as_deref())?}))
    }
}

fn explain(structure: &KnowledgeStructure, object_id: Option<&str>) -> Result<Value, ToolError> {
    match object_id {
        Some(id) => inference::explain(structure, id).ok_or_else(|| {
            ToolError::new("not_found", format!("Object '{id}' is not in the knowledge structure."))
                .with("object_id", id)
        }),
        None => Ok(summary(structure)),
    }
}

/// The reference's structure-wide explanation.
fn summary(structure: &KnowledgeStructure) -> Value {
    let object_count = structure.len();
    let relation_count = structure.relations().count();
    let object_types: BTreeSet<&str> = structure.objects().map(|o| o.identity.r#type.as_str()).collect();
    let relation_types: BTreeSet<&str> =
        structure.relations().filter_map(|r| r.relation()).map(|r| r.relation_type).collect();
    let identities: Vec<&str> = structure.ids().collect();
    json!({
        "object_count": object_count,
        "relation_count": relation_count,
        "summary": {
            "version": env!("CARGO_PKG_VERSION"),
            "object_count": object_count,
            "relation_count": relation_count,
            "object_types": object_types,
            "relation_types": relation_types,
            "identities": identities,
            "immutable": true,
        },
    })
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::tools::test_support::{call, context, obj, rel, session, structure};

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
                "summary": {"version": env!("CARGO_PKG_VERSION"), "object_count": 5, "relation_count": 1,
                    "object_types": ["Claim", "InferenceStep", "Planet", "Relation", "Star"],
                    "relation_types": ["orbits"], "identities": ["earth", "sun", "r1", "warm", "s1"], "immutable": true}}})
        );
        let sessions = ctx.runtime.list_sessions().await.unwrap().len();
        let result = call(&ctx, "explain_knowledge", json!({"json_data": data().to_string()})).await;
        assert_eq!(result["explanation"]["object_count"], 5);
        assert_eq!(result.as_object().unwrap().len(), 1, "only 'explanation'");
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

        let missing = call(&ctx, "explain_knowledge", json!({"session_id": id, "object_id": "nope"})).await;
        assert_eq!(missing["error"], "not_found");
        assert_eq!(missing["object_id"], "nope");
        assert_eq!(call(&ctx, "explain_knowledge", json!({})).await["error"], "missing_parameter");
        assert_eq!(call(&ctx, "explain_knowledge", json!({"session_id": "x"})).await["error"], "session_not_found");
    }
}
