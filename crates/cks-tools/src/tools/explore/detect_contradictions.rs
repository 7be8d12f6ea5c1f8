//! `detect_contradictions`: the contradiction checks of the core (mutually exclusive relation
//! types, single-valued relation types, active inference steps disagreeing on confidence) run on
//! a session or on `json_data`. Read-only: nothing is stored either way.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use cks_core::KnowledgeStructure;
use cks_core::validate::{Extension, ValidationOptions, validate};

use crate::bounds::{Cut, Paging};
use crate::context::ToolContext;
use crate::convert::{diagnostics_full, parse_json_data};
use crate::error::ToolError;
use crate::tool::{SessionCheck, Tool, ToolMeta};

const CHECKS: [Extension; 3] =
    [Extension::MutualExclusion, Extension::FunctionalRelation, Extension::InferenceConfidenceConflict];

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The session to check (then `json_data` is ignored).
    pub(crate) session_id: Option<String>,
    #[serde(default)]
    #[schemars(schema_with = "crate::schema::json_data")]
    pub(crate) json_data: Option<Value>,
    #[serde(flatten)]
    pub(crate) paging: Paging,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    /// All the contradictions found, listed or not.
    contradiction_count: usize,
    /// Diagnostics as validate_knowledge reports them: `{code, severity, source, message, metadata}`.
    contradictions: Vec<Map<String, Value>>,
    /// The session checked, when one was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    session_id: Option<String>,
    #[serde(flatten)]
    cut: Cut,
}

pub(crate) struct DetectContradictions;

#[async_trait::async_trait]
impl Tool for DetectContradictions {
    type Input = Input;
    type Output = Output;
    const TITLE: &'static str = "Find contradictions";
    const META: ToolMeta = ToolMeta {
        name: "detect_contradictions",
        description: "Find contradictions in a knowledge structure ('session_id', else 'json_data'; stores \
            nothing): relation pairs a MutualExclusionRule forbids and extra targets of a relation a \
            FunctionalRelationRule makes single-valued (errors), and one conclusion given different confidences \
            (warnings). Returns {contradiction_count, contradictions: [{code, severity, message}]}, a page of \
            about 48 KB by default (limit, offset; next_offset when cut).",
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
        if let Some(session_id) = input.session_id.filter(|s| !s.is_empty()) {
            let mut result = ctx.runtime.read(&session_id, |s, _| contradictions(s, &input.paging)).await?;
            result.session_id = Some(session_id);
            return Ok(result);
        }
        let json_data = input.json_data.ok_or_else(|| ToolError::missing_parameter("json_data"))?;
        Ok(contradictions(&parse_json_data(json_data)?, &input.paging))
    }
}

fn contradictions(structure: &KnowledgeStructure, paging: &Paging) -> Output {
    let report = validate(structure, &ValidationOptions::with_extensions(CHECKS));
    let found: Vec<_> = report.diagnostics.into_iter().filter(|d| CHECKS.iter().any(|c| c.code() == d.code)).collect();
    let contradictions: Vec<Map<String, Value>> = match diagnostics_full(&found) {
        Value::Array(items) => items.into_iter().filter_map(|d| d.as_object().cloned()).collect(),
        _ => Vec::new(),
    };
    let contradiction_count = contradictions.len();
    let page = paging.page(contradictions);
    Output { contradiction_count, cut: page.cut(), contradictions: page.items, session_id: None }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::testing::{call, context, obj, rel, session, structure};

    fn data() -> Value {
        structure(vec![
            obj("a", "Claim", "A", json!({})),
            obj("b", "Claim", "B", json!({})),
            obj("c", "Claim", "C", json!({})),
            obj(
                "mx",
                "MutualExclusionRule",
                "mx",
                json!({"relation_type_a": "supports", "relation_type_b": "refutes"}),
            ),
            obj("fr", "FunctionalRelationRule", "fr", json!({"relation_type": "born_in"})),
            rel("r1", &["a", "b"], "supports"),
            rel("r2", &["a", "b"], "refutes"),
            rel("r3", &["a", "b"], "born_in"),
            rel("r4", &["a", "c"], "born_in"),
            obj("s1", "InferenceStep", "s1", json!({"premises": ["a"], "conclusion": "c", "confidence": 0.9})),
            obj("s2", "InferenceStep", "s2", json!({"premises": ["b"], "conclusion": "c", "confidence": 0.2})),
        ])
    }

    #[tokio::test]
    async fn reports_the_three_kinds() {
        let ctx = context();
        let id = session(&ctx, data()).await;
        let result = call(&ctx, "detect_contradictions", json!({"session_id": id})).await;
        assert_eq!(result["session_id"], json!(id));
        assert_eq!(result["contradiction_count"], 3);
        let entries = result["contradictions"].as_array().unwrap();
        let brief: Vec<(&str, &str, &str)> = entries
            .iter()
            .map(|d| {
                (
                    d["code"].as_str().unwrap(),
                    d["severity"].as_str().unwrap(),
                    d["metadata"]["location"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            brief,
            vec![
                ("CKS-EXT-INFERENCE-CONFIDENCE-CONFLICT", "warning", "s1"),
                ("CKS-EXT-FUNCTIONAL-RELATION", "error", "r3"),
                ("CKS-EXT-MUTUAL-EXCLUSION", "error", "r2"),
            ]
        );
        assert_eq!(entries[2]["source"], "core");
        assert_eq!(
            entries[2]["message"],
            "Relation 'r2' (type 'refutes') and relation 'r1' (type 'supports') both connect 'a' to 'b', but a MutualExclusionRule declares these relation_types mutually exclusive."
        );

        let versions = ctx.runtime.list_versions(&id).await.unwrap().len();
        let sessions = ctx.runtime.list_sessions().await.unwrap().len();
        let from_json = call(&ctx, "detect_contradictions", json!({"json_data": data().to_string()})).await;
        assert_eq!(from_json["contradiction_count"], 3);
        assert!(from_json.get("session_id").is_none());
        assert_eq!(ctx.runtime.list_versions(&id).await.unwrap().len(), versions);
        assert_eq!(ctx.runtime.list_sessions().await.unwrap().len(), sessions);
    }

    #[tokio::test]
    async fn clean_structures_and_errors() {
        let ctx = context();
        let clean = structure(vec![obj("a", "Claim", "A", json!({}))]).to_string();
        assert_eq!(
            call(&ctx, "detect_contradictions", json!({"json_data": clean})).await,
            json!({"contradiction_count": 0, "contradictions": []})
        );
        assert_eq!(call(&ctx, "detect_contradictions", json!({})).await["error"], "missing_parameter");
        assert_eq!(call(&ctx, "detect_contradictions", json!({"json_data": "[1"})).await["error"], "invalid_json");
        assert_eq!(call(&ctx, "detect_contradictions", json!({"session_id": "x"})).await["error"], "session_not_found");
    }

    #[tokio::test]
    async fn many_contradictions_come_a_page_at_a_time() {
        let ctx = context();
        // One single-valued relation type and 1,500 people born in two places: 1,500 contradictions.
        let mut objects = vec![obj("fr", "FunctionalRelationRule", "fr", json!({"relation_type": "born_in"}))];
        for i in 0..1_500 {
            let (person, here, there) = (format!("p{i}"), format!("h{i}"), format!("t{i}"));
            objects.push(obj(&person, "Person", &format!("Person {i}"), json!({})));
            objects.push(obj(&here, "Place", &format!("Place {i}"), json!({})));
            objects.push(obj(&there, "Place", &format!("Place {i}b"), json!({})));
            objects.push(rel(&format!("rh{i}"), &[&person, &here], "born_in"));
            objects.push(rel(&format!("rt{i}"), &[&person, &there], "born_in"));
        }
        let id = session(&ctx, structure(objects)).await;
        let first = call(&ctx, "detect_contradictions", json!({"session_id": id})).await;
        let total = first["contradiction_count"].as_u64().unwrap();
        assert_eq!(total, 1_500);
        assert!(serde_json::to_string(&first).unwrap().len() < crate::bounds::ANSWER_BUDGET + 4096);
        assert_eq!(first["truncated"], true);
        let mut seen: Vec<String> = Vec::new();
        let mut page = first;
        loop {
            seen.extend(page["contradictions"].as_array().unwrap().iter().map(|d| d["message"].to_string()));
            let Some(next) = page.get("next_offset").cloned() else { break };
            page = call(&ctx, "detect_contradictions", json!({"session_id": id, "offset": next})).await;
            assert_eq!(page["contradiction_count"].as_u64(), Some(total));
        }
        let all = call(&ctx, "detect_contradictions", json!({"session_id": id, "limit": 0})).await;
        assert!(all.get("truncated").is_none() && all.get("next_offset").is_none());
        let whole: Vec<String> =
            all["contradictions"].as_array().unwrap().iter().map(|d| d["message"].to_string()).collect();
        assert_eq!(seen, whole, "the pages, in order, are the whole list");
        assert_eq!(whole.len() as u64, total);
        let two = call(&ctx, "detect_contradictions", json!({"session_id": id, "limit": 2, "offset": 1})).await;
        assert_eq!(two["contradictions"].as_array().unwrap().len(), 2);
        assert_eq!(two["next_offset"], 3);
    }
}
