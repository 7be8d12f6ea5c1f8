//! `search_semantic`: find the objects that best match a text query and return their
//! neighbourhood.
//!
//! The reference ranks by embedding similarity and fails (`not_found`) when no embedding model or
//! stored embeddings are available. This server ranks with a built-in lexical model, so search
//! always works: Okapi BM25 over the session's text index (`cks_core::text`: built on the first
//! search, then kept up to date by every commit).

use crate::ErrorCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use std::collections::BTreeMap;

use cks_core::KnowledgeStructure;
use cks_core::subgraph::{SubgraphQuery, query_subgraph};

use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{ArgumentCode, SessionCheck, Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The session to search.
    pub(crate) session_id: String,
    /// What to look for, in words (required, even with `seed_ids`).
    pub(crate) query: Option<String>,
    /// Start from these objects instead of searching.
    pub(crate) seed_ids: Option<Vec<String>>,
    /// How many best matches to expand (default 3).
    #[schemars(range(min = 1))]
    pub(crate) top_k: Option<u32>,
    /// Hops to expand around each match (default 1).
    #[schemars(range(min = 0))]
    pub(crate) depth: Option<u32>,
    /// Drop matches whose BM25 score is below this (default 0: keep every match).
    pub(crate) min_score: Option<f64>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    /// Always `success`.
    status: String,
    /// The objects the neighbourhood was expanded from, best match first.
    matched_seeds: Vec<String>,
    /// The neighbourhood as canonical JSON.
    subgraph: String,
    meta: Meta,
    min_score: f64,
    /// BM25 score per matched seed (absent when `seed_ids` were given).
    #[serde(skip_serializing_if = "Option::is_none")]
    scores: Option<BTreeMap<String, f64>>,
    /// `bm25` when the seeds were found by ranking.
    #[serde(skip_serializing_if = "Option::is_none")]
    ranking: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Meta {
    total_found_nodes: usize,
    returned_nodes: usize,
    is_truncated: bool,
    suggested_next_seed: Option<String>,
}

pub(crate) struct SearchSemantic;

#[async_trait::async_trait]
impl Tool for SearchSemantic {
    type Input = Input;
    type Output = Output;
    const ARGUMENT_CODES: &'static [ArgumentCode] = &[ArgumentCode::missing("query", ErrorCode::EmptyQuery)];
    const META: ToolMeta = ToolMeta {
        name: "search_semantic",
        description: "Find the objects of a session that best match a text query and return their neighbourhood. \
            Ranking is built in and needs no embedding model: BM25 over each object's name, type and structure \
            text (lowercase word match, so use the graph's own words), scores unbounded rather than cosine. The \
            top_k matches (default 3; 'min_score' drops weaker ones) are expanded 'depth' hops (default 1) with at \
            most top_k+5 objects. Give 'seed_ids' to skip the search (a non-empty query is still required: \
            'empty_query'). Returns {status, matched_seeds, subgraph \
            (canonical JSON), meta: {total_found_nodes, returned_nodes, is_truncated, suggested_next_seed}, \
            min_score, scores: {id: score}}; 'not_found' when nothing matches.",
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
        let seeds = input.seed_ids.clone().filter(|s| !s.is_empty());
        if input.query.as_deref().is_none_or(|q| q.trim().is_empty()) {
            return Err(ToolError::new(ErrorCode::EmptyQuery, "Query must not be empty."));
        }
        let session_id = input.session_id.clone();
        ctx.runtime.read(&session_id, move |structure, _| answer(structure, input, seeds)).await?
    }
}

fn answer(structure: &KnowledgeStructure, input: Input, seeds: Option<Vec<String>>) -> Result<Output, ToolError> {
    let top_k = input.top_k.unwrap_or(3).max(1) as usize;
    let min_score = input.min_score.unwrap_or(0.0);
    let (seeds, scores) = match seeds {
        Some(seeds) => (seeds, None),
        None => {
            let query = input.query.as_deref().unwrap_or_default();
            let ranked = structure.text_index().rank(query, top_k, min_score);
            if ranked.is_empty() {
                return Err(ToolError::new(
                    ErrorCode::NotFound,
                    "No object matches the query. Try other words (matching is lexical), a lower 'min_score', or \
                     explicit 'seed_ids'.",
                ));
            }
            let scores: BTreeMap<String, f64> =
                ranked.iter().map(|(id, s)| ((*id).to_owned(), (s * 10_000.0).round() / 10_000.0)).collect();
            (ranked.into_iter().map(|(id, _)| id.to_owned()).collect(), Some(scores))
        }
    };
    let query = SubgraphQuery {
        seed_ids: seeds.clone(),
        depth: input.depth.unwrap_or(1) as usize,
        max_objects: Some(top_k + 5),
        ..Default::default()
    };
    let sub = query_subgraph(structure, &query);
    Ok(Output {
        status: "success".into(),
        matched_seeds: seeds,
        subgraph: crate::convert::client_document(&sub.structure),
        meta: Meta {
            total_found_nodes: sub.total_found_nodes,
            returned_nodes: sub.returned_nodes,
            is_truncated: sub.is_truncated,
            suggested_next_seed: sub.suggested_next_seed,
        },
        min_score,
        ranking: scores.as_ref().map(|_| "bm25".to_owned()),
        scores,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::testing::{call, context, obj, rel, session, structure};

    fn data() -> Value {
        structure(vec![
            obj("photo", "Process", "Photosynthesis", json!({"content": "Plants turn light into chemical energy"})),
            obj("chloro", "Molecule", "Chlorophyll", json!({"content": "Green pigment that absorbs light"})),
            obj(
                "mito",
                "Organelle",
                "Mitochondrion",
                json!({"content": "Releases energy from food", "tags": ["cell"]}),
            ),
            obj("sun", "Star", "Sun", json!({"facts": {"emits": "light and heat"}})),
            rel("r1", &["chloro", "photo"], "enables"),
            rel("r2", &["sun", "photo"], "powers"),
        ])
    }

    #[tokio::test]
    async fn ranks_with_bm25_and_expands_matches() {
        let ctx = context();
        let id = session(&ctx, data()).await;
        let result = call(
            &ctx,
            "search_semantic",
            json!({"session_id": id, "query": "the photosynthesis of plants", "top_k": 1}),
        )
        .await;
        assert_eq!(result["status"], "success");
        assert_eq!(result["matched_seeds"], json!(["photo"]));
        assert_eq!(result["ranking"], "bm25");
        assert_eq!(result["scores"].as_object().unwrap().keys().collect::<Vec<_>>(), vec!["photo"]);
        assert!(result["scores"]["photo"].as_f64().unwrap() > 0.0);
        assert_eq!(result["min_score"], 0.0);
        assert_eq!(
            result["meta"],
            json!({"total_found_nodes": 3, "returned_nodes": 3, "is_truncated": false, "suggested_next_seed": null})
        );
        let sub = cks_core::json::parse_str(result["subgraph"].as_str().unwrap()).unwrap();
        assert_eq!(sub.ids().collect::<Vec<_>>(), vec!["photo", "chloro", "sun", "r1", "r2"]);

        // "light" is in three objects, "green" only in one: the rarer term decides.
        let result =
            call(&ctx, "search_semantic", json!({"session_id": id, "query": "green light", "top_k": 3, "depth": 0}))
                .await;
        assert_eq!(result["matched_seeds"][0], "chloro");
        assert_eq!(result["matched_seeds"].as_array().unwrap().len(), 3);
        // Nested structure values and case are searched.
        let result = call(&ctx, "search_semantic", json!({"session_id": id, "query": "HEAT", "depth": 0})).await;
        assert_eq!(result["matched_seeds"], json!(["sun"]));
        let high = call(&ctx, "search_semantic", json!({"session_id": id, "query": "light", "min_score": 100.0})).await;
        assert_eq!(high["error"], "not_found");
    }

    #[tokio::test]
    async fn commits_after_a_search_are_searched_too() {
        let ctx = context();
        let id = session(&ctx, data()).await;
        let search = |query: &'static str| {
            let (ctx, id) = (ctx.clone(), id.clone());
            async move {
                call(&ctx, "search_semantic", json!({"session_id": id, "query": query, "top_k": 5, "depth": 0})).await
            }
        };
        assert_eq!(search("green").await["matched_seeds"], json!(["chloro"]));
        // The index now exists; these commits must reach it: an object added, one changed, one removed.
        let ops = json!({"session_id": id, "operations": [
            {"type": "add_object", "identity": {"id": "kelp", "type": "Alga", "name": "Kelp"},
             "structure": {"content": "a green alga"}},
            {"type": "update_object", "object_id": "chloro", "structure_patch": {"content": "a pigment"}},
            {"type": "remove_object", "object_id": "sun"}]});
        let committed = call(&ctx, "evolve_knowledge", ops).await;
        assert!(committed.get("error").is_none(), "{committed}");
        assert_eq!(search("green").await["matched_seeds"], json!(["kelp"]));
        assert_eq!(search("heat").await["error"], "not_found");
        assert_eq!(search("pigment").await["matched_seeds"], json!(["chloro"]));
        // The scores are those of an index built from scratch over the new state.
        let fresh = context();
        let state = call(&ctx, "serialize_knowledge", json!({"session_id": id})).await;
        let copy = session(&fresh, serde_json::from_str(state["serialized"].as_str().unwrap()).unwrap()).await;
        let again =
            call(&fresh, "search_semantic", json!({"session_id": copy, "query": "light energy", "top_k": 5})).await;
        assert_eq!(search("light energy").await["scores"], again["scores"]);
    }

    #[tokio::test]
    async fn seeds_bypass_the_search() {
        let ctx = context();
        let id = session(&ctx, data()).await;
        let result =
            call(&ctx, "search_semantic", json!({"session_id": id, "query": "cells", "seed_ids": ["mito"]})).await;
        assert_eq!(result["matched_seeds"], json!(["mito"]));
        assert!(result.get("scores").is_none());
        assert_eq!(result["meta"]["returned_nodes"], 1);
    }

    #[tokio::test]
    async fn errors() {
        let ctx = context();
        let id = session(&ctx, data()).await;
        assert_eq!(
            call(&ctx, "search_semantic", json!({"session_id": id, "query": "  "})).await,
            json!({"error": "empty_query", "message": "Query must not be empty."})
        );
        assert_eq!(
            call(&ctx, "search_semantic", json!({"session_id": id, "query": "zebra"})).await["error"],
            "not_found"
        );
        assert_eq!(
            call(&ctx, "search_semantic", json!({"session_id": id, "query": "the of"})).await["error"],
            "not_found"
        );
        // As in the reference, a query is needed even with seeds, and a missing one is empty.
        assert_eq!(call(&ctx, "search_semantic", json!({"session_id": id})).await["error"], "empty_query");
        assert_eq!(
            call(&ctx, "search_semantic", json!({"session_id": id, "query": "", "seed_ids": ["mito"]})).await["error"],
            "empty_query"
        );
        assert_eq!(
            call(&ctx, "search_semantic", json!({"session_id": "x", "query": "a"})).await["error"],
            "session_not_found"
        );
    }
}
