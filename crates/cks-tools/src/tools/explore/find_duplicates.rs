//! `find_duplicates`: the matcher's decisions (`cks_core::matching`) made readable. For one
//! object, the objects that may be the same thing, each with its score and decision; for a whole
//! session, the likely duplicate pairs the duplicates sweeper would queue. Read-only.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use cks_core::matching::{self, Decision, Evidence, Profile};
use cks_core::vectors::{Vector, VectorIndex};
use cks_core::{KnowledgeObject, KnowledgeStructure};

use crate::ErrorCode;
use crate::bounds::{Cut, Paging};
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{SessionCheck, Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The session to look in.
    pub(crate) session_id: String,
    /// One object: its likely duplicates. Absent: the whole session's likely duplicate pairs.
    pub(crate) object_id: Option<String>,
    /// Leave out pairs scoring below this (0 to 1; default 0.3).
    pub(crate) min_score: Option<f64>,
    #[serde(flatten)]
    pub(crate) paging: Paging,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    session_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    object_id: Option<String>,
    /// All pairs found at or above `min_score`, listed or not.
    pair_count: usize,
    /// `{object_ids, objects: [{id, type, name}], score, decision, reasons, scores}`, best first.
    /// `decision`: `same`, `review` (a person should look) or `different`.
    pairs: Vec<Map<String, Value>>,
    /// The objects still waiting for a vector: pairs by meaning may come when they have one.
    #[serde(skip_serializing_if = "Option::is_none")]
    vectors_pending: Option<usize>,
    #[serde(flatten)]
    cut: Cut,
}

/// The default least score: below it names share too little to be worth a look.
const MIN_SCORE: f64 = 0.3;

pub(crate) struct FindDuplicates;

#[async_trait::async_trait]
impl Tool for FindDuplicates {
    type Input = Input;
    type Output = Output;
    const TITLE: &'static str = "Find duplicate objects";
    const META: ToolMeta = ToolMeta {
        name: "find_duplicates",
        description: "Find objects that are likely the same thing, with the matcher's decision: for one \
            'object_id', the objects of its type that may be it; without, the session's likely duplicate pairs. \
            Names and aliases are compared (same, similar, contained), with meaning when embeddings are on; a \
            whole-number field that differs (a year) tells two things apart. Returns {pair_count, pairs: \
            [{object_ids, objects, score, decision: same|review|different, reasons}]}, best first, paged \
            (limit, offset). Read-only; resolve_duplicate merges.",
        mutates_graph: false,
        creates_session: false,
        destructive: false,
        idempotent: true,
        open_world: false,
        session_fields: &["session_id"],
        session_checks: &[SessionCheck::exists("session_id")],
        llm_exposed: true,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        let min_score = input.min_score.unwrap_or(MIN_SCORE);
        if !(0.0..=1.0).contains(&min_score) {
            return Err(ToolError::invalid_parameter("min_score must be between 0 and 1."));
        }
        let embeddings = ctx.runtime.embeddings().cloned();
        if let Some(embeddings) = &embeddings
            && let Err(e) = embeddings.ready_for(&ctx.runtime, &input.session_id).await
        {
            tracing::warn!(error = %e, "stored embeddings not read");
        }
        let object_id = input.object_id.clone().filter(|id| !id.is_empty());
        let (mut pairs, vectors_pending) = ctx
            .runtime
            .read(&input.session_id, |structure, _| {
                let find = |index: Option<&VectorIndex>| match &object_id {
                    Some(id) => of_object(structure, id, index),
                    None => Ok(of_session(structure)),
                };
                match &embeddings {
                    Some(embeddings) => embeddings.settle(structure, |index, synced| {
                        find(Some(index)).map(|(pairs, pending)| (pairs, pending.max(synced.pending)))
                    }),
                    None => find(None),
                }
            })
            .await??;
        pairs.retain(|p| p.score >= min_score);
        let pair_count = pairs.len();
        let page = input.paging.page(pairs.into_iter().map(|p| p.value).collect());
        Ok(Output {
            session_id: input.session_id,
            object_id,
            pair_count,
            cut: page.cut(),
            pairs: page.items,
            vectors_pending: (vectors_pending > 0).then_some(vectors_pending),
        })
    }
}

/// A pair as answered, with its score for the `min_score` filter.
struct Found {
    score: f64,
    value: Map<String, Value>,
}

/// The objects that may be `id`, judged, best first.
fn of_object(
    structure: &KnowledgeStructure,
    id: &str,
    index: Option<&VectorIndex>,
) -> Result<(Vec<Found>, usize), ToolError> {
    let object = match structure.get(id) {
        Some(object) if !object.is_relation() => object,
        Some(_) => {
            return Err(ToolError::invalid_parameter(format!(
                "'{id}' is a relation; find_duplicates compares objects."
            )));
        }
        None => {
            return Err(ToolError::new(ErrorCode::ObjectNotFound, format!("Object '{id}' not found in the session."))
                .with("object_id", id));
        }
    };
    let vector: Option<Vector> = index.and_then(|i| i.vector(id).cloned());
    let meaning = index.zip(vector.as_ref());
    let pending = usize::from(index.is_some() && vector.is_none());
    let found = matching::candidates(structure, &Profile::of(object), meaning, Some(id))
        .into_iter()
        .map(|c| Found { score: c.score, value: pair(object, c.object, c.decision, &c.evidence, c.score) })
        .collect();
    Ok((found, pending))
}

/// The session's likely duplicate pairs, best first.
fn of_session(structure: &KnowledgeStructure) -> (Vec<Found>, usize) {
    let (mut pairs, pending) = matching::pairs(structure);
    pairs.sort_by(|a, b| a.decision.cmp(&b.decision).then(b.score.total_cmp(&a.score)).then(a.ids.cmp(&b.ids)));
    let found = pairs
        .iter()
        .filter_map(|p| {
            let (a, b) = (structure.get(&p.ids[0])?, structure.get(&p.ids[1])?);
            Some(Found { score: p.score, value: pair(a, b, p.decision, &p.evidence, p.score) })
        })
        .collect();
    (found, usize::from(pending))
}

fn pair(
    a: &KnowledgeObject,
    b: &KnowledgeObject,
    decision: Decision,
    evidence: &Evidence,
    score: f64,
) -> Map<String, Value> {
    let brief = |o: &KnowledgeObject| json!({"id": o.id(), "type": o.identity.r#type.as_str(), "name": o.identity.name.as_str()});
    let mut value = Map::new();
    value.insert("object_ids".into(), json!([a.id(), b.id()]));
    value.insert("objects".into(), json!([brief(a), brief(b)]));
    value.insert("score".into(), json!(matching::round(score)));
    value.insert("decision".into(), json!(decision.as_str()));
    value.insert("reasons".into(), json!(evidence.reasons()));
    value.insert("scores".into(), Value::Object(evidence.scores()));
    value
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::testing::{call, context, obj, session, structure};

    #[tokio::test]
    async fn one_objects_candidates_and_the_sessions_pairs_with_decisions() {
        let ctx = context();
        let id = session(
            &ctx,
            structure(vec![
                obj("p1", "Paper", "Query optimization in databases", json!({"year": 1999})),
                obj("p2", "Paper", "Query Optimization in Databases.", json!({"year": "1999"})),
                obj("p3", "Paper", "Query optimization in databases", json!({"year": 2004})),
                obj("p4", "Paper", "Stream processing", json!({"year": 1999})),
                obj("alice", "Person", "Alice Smith", json!({"aliases": ["Ali"]})),
                obj("ali", "Person", "Ali", json!({})),
                obj("a2", "Person", "Alice", json!({})),
            ]),
        )
        .await;
        let found = call(&ctx, "find_duplicates", json!({"session_id": id, "object_id": "p1", "min_score": 0})).await;
        let decided: Vec<(&str, &str)> = found["pairs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p["object_ids"][1].as_str().unwrap(), p["decision"].as_str().unwrap()))
            .collect();
        assert_eq!(decided[..2], [("p2", "same"), ("p3", "different")], "{found}");
        assert_eq!(found["pairs"][1]["scores"]["conflict"], json!({"field": "year", "values": [1999, 2004]}));
        assert_eq!(found["pair_count"].as_u64(), Some(decided.len() as u64));

        let whole = call(&ctx, "find_duplicates", json!({"session_id": id})).await;
        let pairs: Vec<(Vec<&str>, &str)> = whole["pairs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                let ids = p["object_ids"].as_array().unwrap().iter().map(|i| i.as_str().unwrap()).collect();
                (ids, p["decision"].as_str().unwrap())
            })
            .collect();
        // p3's year sets it apart; an alias is a name: "Ali" is Alice Smith.
        assert_eq!(pairs, [(vec!["ali", "alice"], "same"), (vec!["p1", "p2"], "same")], "{whole}");
        let of_ali = call(&ctx, "find_duplicates", json!({"session_id": id, "object_id": "ali"})).await;
        assert_eq!(of_ali["pairs"][0]["object_ids"], json!(["ali", "alice"]));
        assert_eq!(of_ali["pairs"][0]["decision"], "same");
        let of_a2 = call(&ctx, "find_duplicates", json!({"session_id": id, "object_id": "a2"})).await;
        assert_eq!(
            (of_a2["pairs"][0]["decision"].as_str(), of_a2["pairs"][0]["reasons"][0].as_str()),
            (Some("review"), Some("contained_name"))
        );
    }

    #[tokio::test]
    async fn unknown_objects_relations_and_bad_scores_are_clear_errors() {
        let ctx = context();
        let id = session(
            &ctx,
            structure(vec![
                obj("a", "Concept", "A", json!({})),
                obj("b", "Concept", "B", json!({})),
                crate::testing::rel("r", &["a", "b"], "x"),
            ]),
        )
        .await;
        let missing = call(&ctx, "find_duplicates", json!({"session_id": id, "object_id": "nope"})).await;
        assert_eq!(missing["error"], "object_not_found");
        let relation = call(&ctx, "find_duplicates", json!({"session_id": id, "object_id": "r"})).await;
        assert_eq!(relation["error"], "invalid_parameter");
        let score = call(&ctx, "find_duplicates", json!({"session_id": id, "min_score": 2})).await;
        assert_eq!(score["error"], "invalid_parameter");
    }
}
