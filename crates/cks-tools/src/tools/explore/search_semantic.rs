//! `search_semantic`: find the objects that best match a text query and return their
//! neighbourhood.
//!
//! Two rankings, fused by default (`cks_core::fusion`): Okapi BM25 over the session's text index
//! (`cks_core::text`: built on the first search, then kept up to date by every commit), and,
//! when embeddings are on, cosine similarity over the session's vector index
//! (`cks_core::vectors`, settled against the runtime's embeddings). Objects not embedded yet are
//! still found lexically, and the answer says how many were pending. Each candidate's BM25 is
//! lent a share of its neighbours' (`cks_core::nearby`: related objects, and adjacent ones where
//! the session's order shows it means something) before the two are fused. The reference
//! ranks by embeddings alone and fails (`not_found`) without them; this server falls back to
//! BM25.

use crate::ErrorCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use cks_core::fusion::{self, Fused};
use cks_core::nearby::{Nearby, OrderEvidence, ended};
use cks_core::subgraph::{SubgraphQuery, query_subgraph};
use cks_core::vectors::Vector;
use cks_core::{KnowledgeStructure, vectors::VectorIndex};
use cks_runtime::embeddings::Embeddings;

use crate::context::ToolContext;
use crate::error::ToolError;
use crate::past;
use crate::tool::{ArgumentCode, SessionCheck, Tool, ToolMeta};

/// How long a search waits for the texts it found unembedded (a fresh session's, say) before it
/// answers with what has vectors.
const EMBEDDING_WAIT: Duration = Duration::from_secs(2);

/// How many candidates each side contributes to the fusion, at least.
const CANDIDATES: usize = 100;

/// The cosine's weight in the first round of fusion (the second round's is in [`expanded`]);
/// chosen on a development set of conversations (BENCHMARKS.md).
const FIRST_ROUND_VECTOR_WEIGHT: f64 = 0.65;

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The session to search.
    pub(crate) session_id: String,
    /// What to look for, in words (required, even with seed_ids).
    pub(crate) query: Option<String>,
    /// Start from these objects instead of searching.
    pub(crate) seed_ids: Option<Vec<String>>,
    /// Matches to expand (default 3).
    #[schemars(range(min = 1))]
    pub(crate) top_k: Option<u32>,
    /// Hops around each match (default 1).
    #[schemars(range(min = 0))]
    pub(crate) depth: Option<u32>,
    /// Drop matches scoring below this (default 0).
    pub(crate) min_score: Option<f64>,
    /// `hybrid` (default: words and meaning), `lexical` (words only) or `vector` (meaning only;
    /// needs embeddings).
    pub(crate) mode: Option<Mode>,
    /// Search the graph as of this version.
    pub(crate) version_id: Option<String>,
    /// Search the graph as of this time (RFC 3339).
    pub(crate) as_of: Option<String>,
    /// Also return `context`: the best evidence that fits this many tokens (4 characters each).
    #[schemars(range(min = 1))]
    pub(crate) max_tokens: Option<u32>,
    /// `current`: leave out facts a later one ended (`ended_by`); `all`: everything ever stated.
    /// Default: `current` with `max_tokens`, else `all`.
    pub(crate) validity: Option<Validity>,
}

#[derive(Clone, Copy, Debug, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Validity {
    Current,
    All,
}

#[derive(Clone, Copy, Debug, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Mode {
    Hybrid,
    Lexical,
    Vector,
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
    /// The ranking score per matched seed (absent when `seed_ids` were given).
    #[serde(skip_serializing_if = "Option::is_none")]
    scores: Option<BTreeMap<String, f64>>,
    /// How the seeds were ranked: `hybrid`, `bm25` or `vector`.
    #[serde(skip_serializing_if = "Option::is_none")]
    ranking: Option<String>,
    /// Each matched seed's scores on each side: `bm25` (absent when it holds no query word),
    /// `cosine` (absent when it has no vector yet) and `context` (what its neighbours lent its BM25).
    #[serde(skip_serializing_if = "Option::is_none")]
    match_scores: Option<BTreeMap<String, MatchScores>>,
    /// With embeddings on: the model whose vectors ranked, and how many objects had no vector yet.
    #[serde(skip_serializing_if = "Option::is_none")]
    embeddings: Option<EmbeddingsUsed>,
    /// The version searched, when the past was asked for (`version_id` or `as_of`).
    #[serde(skip_serializing_if = "Option::is_none")]
    version_id: Option<String>,
    /// With `max_tokens`: the evidence that fits, in the order given.
    #[serde(skip_serializing_if = "Option::is_none")]
    context: Option<Vec<Evidence>>,
    /// With `max_tokens`: the tokens `context` holds (never more than asked).
    #[serde(skip_serializing_if = "Option::is_none")]
    context_tokens: Option<usize>,
}

/// One piece of a budgeted answer's `context`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Evidence {
    id: String,
    /// The score that ranked it; for a neighbour that was not ranked, the score of the match it
    /// came through.
    score: f64,
    /// For a neighbour: the match it came through.
    #[serde(skip_serializing_if = "Option::is_none")]
    via: Option<String>,
    /// Its name, type and structure's values, as they are searched.
    text: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct MatchScores {
    #[serde(skip_serializing_if = "Option::is_none")]
    bm25: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cosine: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    context: Option<f64>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct EmbeddingsUsed {
    model: String,
    /// Searchable objects without a vector yet (found by words only).
    pending: usize,
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
    const TITLE: &'static str = "Search a session";
    const META: ToolMeta = ToolMeta {
        name: "search_semantic",
        description: "Find a session's objects that best match a text 'query' (by words and, when the server \
            has embeddings, meaning) and return them with their neighbourhood: the top_k matches expanded \
            'depth' hops, at most top_k+5 objects. 'not_found' when nothing matches. Returns {status, \
            matched_seeds, subgraph, scores: {id: score}, context (with max_tokens)}.",
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
        let Some(query) = input.query.clone().filter(|q| !q.trim().is_empty()) else {
            return Err(ToolError::new(ErrorCode::EmptyQuery, "Query must not be empty."));
        };
        let mode = input.mode.unwrap_or(Mode::Hybrid);
        let embeddings = match mode {
            Mode::Lexical => None,
            _ => ctx.runtime.embeddings().cloned(),
        };
        if mode == Mode::Vector && embeddings.is_none() {
            return Err(ToolError::invalid_parameter(
                "mode 'vector' needs embeddings, and this server has none (CKS_EMBEDDING_PROVIDER); use 'hybrid' \
                 or 'lexical'.",
            ));
        }
        let session_id = input.session_id.clone();
        let semantic = match (&embeddings, &seeds) {
            (Some(embeddings), None) => {
                // A session not loaded yet (the first search after a restart) loads while the
                // query is embedded. Every known vector is read only when its index wants them
                // all: a session loaded with its kept index wants those of what changed since.
                let loading = async {
                    let present = input.version_id.is_none() && input.as_of.is_none();
                    if present && !ctx.runtime.is_loaded(&session_id) {
                        let _ = ctx.runtime.read(&session_id, |_, _| ()).await;
                    }
                    let read = match present {
                        true => embeddings.ready_for(&ctx.runtime, &session_id).await,
                        false => embeddings.load().await,
                    };
                    if let Err(e) = read {
                        tracing::warn!(error = %e, "stored embeddings not read");
                    }
                };
                Some(tokio::join!(query_vector(embeddings, &query, mode), loading).0?)
            }
            _ => None,
        };
        let version = past::version(ctx, &session_id, input.version_id.as_deref(), input.as_of.as_deref()).await?;
        let search = Arc::new(Search { input, query, seeds, mode, semantic, version: version.clone() });
        let (first, pending) = {
            let search = search.clone();
            past::read(ctx, &session_id, version.as_deref(), move |structure| search.answer(structure)).await?
        };
        let Some(Semantic { embeddings, .. }) = &search.semantic else { return first };
        // Objects without vectors yet (a session created a moment ago): the worker is on them,
        // so a short wait gives the answer a client expects; a slow or failing embedder only
        // delays it by the wait.
        if pending == 0 || !embeddings.idle_within(EMBEDDING_WAIT).await {
            return first;
        }
        past::read(ctx, &session_id, version.as_deref(), move |structure| search.answer(structure).0).await?
    }
}

/// The query's vector and the embeddings it came from.
struct Semantic {
    embeddings: Arc<Embeddings>,
    vector: Option<Vector>,
}

/// Embeds the query. The embedder failing is no reason to fail a hybrid search (it ranks by
/// words alone then); a vector search has nothing else to rank by.
async fn query_vector(embeddings: &Arc<Embeddings>, query: &str, mode: Mode) -> Result<Semantic, ToolError> {
    let vector = match embeddings.embed_query(query).await {
        Ok(vector) => vector,
        Err(e) if mode == Mode::Vector => {
            return Err(ToolError::new(
                ErrorCode::LlmProviderUnavailable,
                format!("The query could not be embedded: {e}"),
            ));
        }
        Err(e) => {
            tracing::warn!(error = %e, "query not embedded; ranking by words alone");
            None
        }
    };
    Ok(Semantic { embeddings: embeddings.clone(), vector })
}

struct Search {
    input: Input,
    query: String,
    seeds: Option<Vec<String>>,
    mode: Mode,
    semantic: Option<Semantic>,
    /// The version searched, when not the present.
    version: Option<String>,
}

/// A ranking's seeds and their scores.
struct Ranked {
    fused: Vec<(String, f64, MatchScores)>,
    ranking: &'static str,
}

impl Search {
    /// The answer, and how many objects were still waiting for their vectors.
    fn answer(&self, structure: &KnowledgeStructure) -> (Result<Output, ToolError>, usize) {
        let mut pending = 0;
        let output = self.output(structure, &mut pending);
        (output, pending)
    }

    fn output(&self, structure: &KnowledgeStructure, pending: &mut usize) -> Result<Output, ToolError> {
        let top_k = self.input.top_k.unwrap_or(3).max(1) as usize;
        let min_score = self.input.min_score.unwrap_or(0.0);
        // A budgeted answer may hold more matches than `top_k`: the ranking goes on.
        let limit = if self.input.max_tokens.is_some() { top_k.max(CANDIDATES) } else { top_k };
        let (seeds, ranked, used, ordered) = match (&self.seeds, &self.semantic) {
            (Some(seeds), _) => (seeds.clone(), None, None, false),
            (None, None) => (Vec::new(), Some(self.lexical(structure, limit, min_score)), None, false),
            (None, Some(semantic)) => semantic.embeddings.settle(structure, |index, synced| {
                *pending = synced.pending;
                let used = EmbeddingsUsed { model: semantic.embeddings.model().to_owned(), pending: synced.pending };
                let ordered = OrderEvidence::measure(structure, |a, b| index.similarity(a, b)).holds();
                let ranked = match &semantic.vector {
                    Some(vector) => self.fused(structure, index, vector, top_k, limit, min_score, ordered),
                    None if self.mode == Mode::Vector => Ranked { fused: Vec::new(), ranking: "vector" },
                    None => self.lexical(structure, limit, min_score),
                };
                (Vec::new(), Some(ranked), Some(used), ordered)
            }),
        };
        let current = self.input.validity.unwrap_or(match self.input.max_tokens {
            Some(_) => Validity::Current,
            None => Validity::All,
        }) == Validity::Current;
        let ranked = ranked.map(|mut ranked| {
            if current {
                ranked.fused.retain(|(id, _, _)| structure.get(id).is_none_or(|o| !ended(o)));
            }
            ranked
        });
        let mut ranked_all = Vec::new();
        let (seeds, scores, match_scores, ranking) = match ranked {
            None => (seeds, None, None, None),
            Some(Ranked { fused, .. }) if fused.is_empty() => {
                return Err(ToolError::new(
                    ErrorCode::NotFound,
                    "No object matches the query. Try other words, a lower 'min_score', or explicit 'seed_ids'.",
                ));
            }
            Some(Ranked { mut fused, ranking }) => {
                ranked_all = fused.iter().map(|(id, score, _)| (id.clone(), *score)).collect();
                fused.truncate(top_k);
                let seeds: Vec<String> = fused.iter().map(|(id, _, _)| id.clone()).collect();
                let scores = fused.iter().map(|(id, score, _)| (id.clone(), round(*score))).collect();
                let parts = fused.into_iter().map(|(id, _, parts)| (id, parts)).collect();
                (seeds, Some(scores), Some(parts), Some(ranking.to_owned()))
            }
        };
        if ranked_all.is_empty() {
            // Seeds given: they are the matches, in their order.
            ranked_all = seeds.iter().map(|id| (id.clone(), 0.0)).collect();
        }
        let (context, context_tokens) = match self.input.max_tokens {
            Some(budget) => {
                let nearby = Nearby::new(structure, ordered);
                let nearby = if current { nearby.current_only() } else { nearby };
                let (pieces, used) = budgeted(structure, &ranked_all, top_k, &nearby, budget as usize, current);
                (Some(pieces), Some(used))
            }
            None => (None, None),
        };
        let query = SubgraphQuery {
            seed_ids: seeds.clone(),
            depth: self.input.depth.unwrap_or(1) as usize,
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
            scores,
            ranking,
            match_scores,
            embeddings: used,
            version_id: self.version.clone(),
            context,
            context_tokens,
        })
    }

    fn lexical(&self, structure: &KnowledgeStructure, top_k: usize, min_score: f64) -> Ranked {
        let ranked = structure.text_index().rank(&self.query, top_k, min_score);
        let fused = ranked
            .into_iter()
            .map(|(id, score)| {
                (id.to_owned(), score, MatchScores { bm25: Some(round(score)), cosine: None, context: None })
            })
            .collect();
        Ranked { fused, ranking: "bm25" }
    }

    /// Each side's best candidates, each scored on both sides, fused (or, in `vector` mode,
    /// ranked by cosine alone).
    /// `top_k` sizes the candidates; `limit` is how many matches to rank.
    #[allow(clippy::too_many_arguments)]
    fn fused<'a>(
        &self,
        structure: &'a KnowledgeStructure,
        index: &'a VectorIndex,
        vector: &Vector,
        top_k: usize,
        limit: usize,
        min_score: f64,
        ordered: bool,
    ) -> Ranked {
        let wanted = (top_k * 10).max(CANDIDATES);
        let by_meaning = index.rank(vector, wanted);
        if self.mode == Mode::Vector {
            let fused = by_meaning
                .into_iter()
                .filter(|(_, cosine)| f64::from(*cosine) >= min_score && *cosine > 0.0)
                .take(limit)
                .map(|(id, cosine)| {
                    let cosine = f64::from(cosine);
                    (id.to_owned(), cosine, MatchScores { bm25: None, cosine: Some(round(cosine)), context: None })
                })
                .collect();
            return Ranked { fused, ranking: "vector" };
        }
        let text = structure.text_index();
        let by_words = text.rank(&self.query, wanted, 0.0);
        let nearby = Nearby::new(structure, ordered);
        // The lexical matches' neighbours are candidates too: the object next to a match can be
        // the answer though it shares nothing with the query.
        let mut candidates: BTreeMap<&str, Option<f64>> = BTreeMap::new();
        for (id, _) in &by_words {
            candidates.insert(id, None);
            for near in nearby.of(id) {
                candidates.entry(near).or_insert(None);
            }
        }
        for (id, cosine) in &by_meaning {
            candidates.insert(id, Some(f64::from(*cosine)));
        }
        // Each object's own BM25, as far as asked for: the ranking's, then looked up.
        let terms = cks_core::text::query_terms(&self.query);
        let mut scores: HashMap<&str, f64> = by_words.iter().copied().collect();
        let own = |id: &'a str| *scores.entry(id).or_insert_with(|| text.weighted_score(&terms, id));
        let lexical = fusion::lexical_context(candidates.keys().copied(), own, |id| nearby.of(id));
        let scored = lexical.iter().map(|&(id, own, lent)| {
            let cosine = candidates[id].or_else(|| index.cosine(vector, id).map(f64::from));
            (id, Some(own + lent).filter(|s| *s > 0.0), cosine)
        });
        let fused = fusion::fuse(scored, FIRST_ROUND_VECTOR_WEIGHT, usize::MAX);
        let parts: HashMap<&str, (f64, f64)> = lexical.into_iter().map(|(id, own, lent)| (id, (own, lent))).collect();
        let fused = expanded(structure, &self.query, &fused, limit);
        let fused = fused
            .into_iter()
            .filter(|f| f.score > 0.0 && f.score >= min_score)
            .map(|f| {
                // The client sees the query's own BM25 and what the neighbours lent apart.
                let (own, lent) = parts.get(f.id).copied().unwrap_or_default();
                let positive = |score: f64| Some(round(score)).filter(|s| *s > 0.0);
                let parts = MatchScores { bm25: positive(own), cosine: f.vector.map(round), context: positive(lent) };
                (f.id.to_owned(), f.score, parts)
            })
            .collect();
        Ranked { fused, ranking: "hybrid" }
    }
}

/// The second round: the best first-round matches' words added to the query (pseudo-relevance
/// feedback), each candidate's BM25 mixed with its score for those words, and both sides fused
/// again. Found on a development set of conversations (BENCHMARKS.md), where it lifted recall@10
/// by about 0.03 over the first round alone; the weights are those chosen there.
fn expanded<'a>(structure: &KnowledgeStructure, query: &str, first: &[Fused<'a>], top_k: usize) -> Vec<Fused<'a>> {
    const FEEDBACK: usize = 5;
    const TERMS: usize = 20;
    const EXPANSION_WEIGHT: f64 = 0.15;
    const VECTOR_WEIGHT: f64 = 0.5;
    let feedback: Vec<(&cks_core::KnowledgeObject, f64)> =
        first.iter().take(FEEDBACK).filter_map(|f| Some((&**structure.get(f.id)?, f.score))).collect();
    let terms = cks_core::text::expansion(query, &feedback, TERMS);
    let text = structure.text_index();
    let second = first.iter().map(|f| {
        let expanded = text.weighted_score(&terms, f.id);
        let lexical = (1.0 - EXPANSION_WEIGHT) * f.lexical.unwrap_or(0.0) + EXPANSION_WEIGHT * expanded;
        (f.id, Some(lexical).filter(|l| *l > 0.0), f.vector)
    });
    fusion::fuse(second, VECTOR_WEIGHT, top_k)
}

/// The tokens a text is counted as: one per four characters, rounded up.
fn tokens(text: &str) -> usize {
    text.chars().count().div_ceil(4)
}

/// The evidence that fits `budget` tokens: the first `top_k` matches, then their neighbours
/// (their relations' other ends, and the objects beside them where the order counts), then the
/// rest of the ranking. Each object once; a piece too large for what is left is passed over for
/// smaller ones after it. With `current`, facts a later one ended are left out.
fn budgeted(
    structure: &KnowledgeStructure,
    ranked: &[(String, f64)],
    top_k: usize,
    nearby: &Nearby<'_>,
    budget: usize,
    current: bool,
) -> (Vec<Evidence>, usize) {
    let scores: HashMap<&str, f64> = ranked.iter().map(|(id, score)| (id.as_str(), *score)).collect();
    let (matches, rest) = ranked.split_at(top_k.min(ranked.len()));
    let mut order: Vec<(&str, f64, Option<&str>)> = matches.iter().map(|(id, s)| (id.as_str(), *s, None)).collect();
    for (id, score) in matches {
        for near in nearby.of(id) {
            order.push((near, scores.get(near).copied().unwrap_or(*score), Some(id.as_str())));
        }
    }
    order.extend(rest.iter().map(|(id, s)| (id.as_str(), *s, None)));
    let mut seen = std::collections::HashSet::new();
    let mut pieces = Vec::new();
    let mut used = 0;
    for (id, score, via) in order {
        let Some(object) = structure.get(id) else { continue };
        if !seen.insert(id) || (current && ended(object)) {
            continue;
        }
        let text = cks_core::vectors::embedding_text(object)
            .unwrap_or_else(|| format!("{} {}", object.identity.name, object.identity.r#type));
        let cost = tokens(&text);
        if used + cost > budget {
            continue;
        }
        used += cost;
        pieces.push(Evidence { id: id.to_owned(), score: round(score), via: via.map(str::to_owned), text });
    }
    (pieces, used)
}

fn round(score: f64) -> f64 {
    (score * 10_000.0).round() / 10_000.0
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

    /// A counting embedder over a tiny static model in which "car" and "automobile" mean the
    /// same and "banana" means something else; a switch makes it fail like a provider that is
    /// down.
    #[derive(Debug)]
    struct Tiny {
        model: cks_embed::StaticModel,
        calls: std::sync::Mutex<Vec<String>>,
        down: std::sync::atomic::AtomicBool,
        _dir: tempfile::TempDir,
    }

    impl Tiny {
        fn new() -> std::sync::Arc<Tiny> {
            let dir = tempfile::tempdir().unwrap();
            cks_embed::static_model::write_sample(dir.path(), "tiny").unwrap();
            let model = cks_embed::StaticModel::load(dir.path()).unwrap();
            std::sync::Arc::new(Tiny { model, calls: Default::default(), down: Default::default(), _dir: dir })
        }
    }

    #[async_trait::async_trait]
    impl cks_embed::Embedder for Tiny {
        fn model(&self) -> &str {
            "tiny"
        }

        async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, cks_embed::EmbedError> {
            if self.down.load(std::sync::atomic::Ordering::Relaxed) {
                return Err(cks_embed::EmbedError::Provider("down".into()));
            }
            self.calls.lock().unwrap().extend(texts.iter().cloned());
            self.model.embed(texts).await
        }
    }

    fn vehicles() -> Value {
        structure(vec![
            obj("auto", "Thing", "Automobile", json!({"content": "vehicle"})),
            obj("fruit", "Thing", "Banana", json!({"content": "yellow fruit"})),
            obj("other", "Thing", "Thing", json!({})),
        ])
    }

    #[tokio::test]
    async fn meaning_finds_what_words_miss_and_each_text_is_embedded_once() {
        let ctx = context();
        let tiny = Tiny::new();
        ctx.runtime.enable_embeddings(tiny.clone());
        let id = session(&ctx, vehicles()).await;
        let search = |args: Value| {
            let ctx = ctx.clone();
            async move { call(&ctx, "search_semantic", args).await }
        };
        // "car" is in no object's text: words alone find nothing.
        let lexical = search(json!({"session_id": id, "query": "car", "mode": "lexical"})).await;
        assert_eq!(lexical["error"], "not_found");
        let hybrid = search(json!({"session_id": id, "query": "car", "top_k": 1, "depth": 0})).await;
        assert_eq!(hybrid["ranking"], "hybrid", "{hybrid}");
        assert_eq!(hybrid["matched_seeds"], json!(["auto"]));
        assert_eq!(hybrid["embeddings"], json!({"model": "tiny", "pending": 0}));
        let parts = &hybrid["match_scores"]["auto"];
        assert!(parts.get("bm25").is_none() && parts["cosine"].as_f64().unwrap() > 0.5, "{parts}");
        // Both sides count: "yellow" is a word of the banana and close to it in meaning.
        let both = search(json!({"session_id": id, "query": "yellow", "top_k": 1, "depth": 0})).await;
        assert_eq!(both["matched_seeds"], json!(["fruit"]));
        assert!(both["match_scores"]["fruit"]["bm25"].as_f64().unwrap() > 0.0);
        let vector = search(json!({"session_id": id, "query": "automobile", "top_k": 2, "mode": "vector"})).await;
        assert_eq!(vector["ranking"], "vector");
        assert_eq!(vector["matched_seeds"][0], "auto");
        assert_eq!(vector["scores"]["auto"], vector["match_scores"]["auto"]["cosine"]);
        // The same fused ranking every time.
        let again = search(json!({"session_id": id, "query": "car", "top_k": 1, "depth": 0})).await;
        assert_eq!(again["scores"], hybrid["scores"]);

        // Each text once (the queries aside), whatever happens to the session afterwards: a branch,
        // a change and its revert bring no text twice.
        let texts = |tiny: &Tiny| -> Vec<String> {
            let calls = tiny.calls.lock().unwrap();
            calls.iter().filter(|t| !["car", "yellow", "automobile"].contains(&t.as_str())).cloned().collect()
        };
        assert_eq!(texts(&tiny).len(), 3, "{:?}", texts(&tiny));
        let branch = call(&ctx, "create_branch", json!({"session_id": id})).await;
        let branch_id = branch["session_id"].as_str().unwrap_or_else(|| panic!("{branch}")).to_owned();
        let first = search(json!({"session_id": branch_id, "query": "car", "top_k": 1})).await;
        assert_eq!(first["matched_seeds"], json!(["auto"]));
        let ops = json!({"session_id": id, "operations": [
            {"type": "update_object", "object_id": "other", "structure_patch": {"content": "a car"}}]});
        let changed = call(&ctx, "evolve_knowledge", ops).await;
        let versions = call(&ctx, "list_versions", json!({"session_id": id})).await;
        let first_version = versions["versions"][0]["version_id"].as_str().unwrap().to_owned();
        search(json!({"session_id": id, "query": "car"})).await;
        let reverted =
            call(&ctx, "revert_version", json!({"session_id": id, "target_version_id": first_version})).await;
        assert!(changed.get("error").is_none() && reverted.get("error").is_none(), "{changed} {reverted}");
        search(json!({"session_id": id, "query": "car"})).await;
        let mut embedded = texts(&tiny);
        embedded.sort();
        let before = embedded.len();
        embedded.dedup();
        assert_eq!(embedded.len(), before, "a text embedded twice: {embedded:?}");
        assert_eq!(before, 4, "the changed object's new text is the only one added: {embedded:?}");
    }

    #[tokio::test]
    async fn an_object_related_to_a_match_is_found_through_it() {
        let ctx = context();
        ctx.runtime.enable_embeddings(Tiny::new());
        // Too few objects for their order to be evidence: only the relation counts.
        let id = session(
            &ctx,
            structure(vec![
                obj("ask", "Turn", "Turn 1", json!({"text": "where did I leave the banana"})),
                obj("aside", "Note", "Note", json!({"text": "a reminder"})),
                obj("answer", "Turn", "Turn 2", json!({"text": "on the table by the window"})),
                obj("later", "Turn", "Turn 3", json!({"text": "much later, about the weather"})),
                rel("replied", &["ask", "answer"], "answered_by"),
            ]),
        )
        .await;
        let found =
            call(&ctx, "search_semantic", json!({"session_id": id, "query": "banana", "top_k": 5, "depth": 0})).await;
        assert_eq!(found["ranking"], "hybrid", "{found}");
        // The answer shares no word and no meaning with the question; it is found through the
        // relation, and says so. The turn after it, with no relation, is not.
        assert_eq!(found["matched_seeds"], json!(["ask", "answer"]), "{found}");
        let lent = &found["match_scores"]["answer"];
        assert!(lent.get("bm25").is_none(), "{lent}");
        // It is lent half the mean BM25 of its neighbours: the question, its one neighbour.
        let asked = found["match_scores"]["ask"]["bm25"].as_f64().unwrap();
        assert!((lent["context"].as_f64().unwrap() - 0.5 * asked).abs() < 1e-3, "{found}");
        assert!(found["match_scores"]["ask"].get("context").is_none(), "{found}");
        // Words alone rank words alone.
        let lexical =
            call(&ctx, "search_semantic", json!({"session_id": id, "query": "banana", "top_k": 5, "mode": "lexical"}))
                .await;
        assert_eq!(lexical["matched_seeds"], json!(["ask"]), "{lexical}");
    }

    /// Sixty turns in three runs of one topic each, a question about a banana and its answer (no
    /// word the model knows) in the banana run, in that order or shuffled.
    fn conversation(shuffle: bool) -> Value {
        let topics = ["a car, a vehicle", "a banana, a yellow fruit", "a thing"];
        let mut turns: Vec<Value> = (0..60)
            .map(|i| obj(&format!("t{i:02}"), "Turn", &format!("Turn {i}"), json!({"text": topics[i / 20]})))
            .collect();
        turns.insert(25, obj("ask", "Turn", "Question", json!({"text": "where is my banana"})));
        turns.insert(26, obj("answer", "Turn", "Answer", json!({"text": "on the table by the window"})));
        if shuffle {
            // A fixed shuffle: every turn moved by a stride prime to the count.
            let count = turns.len();
            turns = (0..count).map(|i| turns[i * 23 % count].clone()).collect();
        }
        structure(turns)
    }

    #[tokio::test]
    async fn neighbours_in_the_order_lend_only_where_the_order_means_something() {
        let ctx = context();
        ctx.runtime.enable_embeddings(Tiny::new());
        let search = |id: String| {
            let ctx = &ctx;
            async move {
                let query = json!({"session_id": id, "query": "where is my banana", "top_k": 40, "depth": 0});
                call(ctx, "search_semantic", query).await
            }
        };
        // In order, adjacent turns share their topic: the answer, next to the question, is found.
        let ordered = search(session(&ctx, conversation(false)).await).await;
        assert_eq!(ordered["embeddings"]["pending"], 0, "{}", ordered["embeddings"]);
        let lent = &ordered["match_scores"]["answer"];
        assert!(lent["context"].as_f64().unwrap() > 0.0 && lent.get("bm25").is_none(), "{lent}");
        // Shuffled, a turn's neighbours are no evidence: nothing is lent, and the answer, with
        // neither a query word nor a meaning, is not found.
        let shuffled = search(session(&ctx, conversation(true)).await).await;
        assert_eq!(shuffled["matched_seeds"][0], "ask", "{}", shuffled["matched_seeds"]);
        let scores = shuffled["match_scores"].as_object().unwrap();
        assert!(scores.values().all(|s| s.get("context").is_none()), "{scores:?}");
        assert!(!scores.contains_key("answer"), "{scores:?}");
    }

    #[tokio::test]
    async fn a_budgeted_answer_never_exceeds_its_budget() {
        let ctx = context();
        ctx.runtime.enable_embeddings(Tiny::new());
        let id = session(
            &ctx,
            structure(vec![
                obj("ask", "Turn", "Turn 1", json!({"text": "where did I leave the banana"})),
                obj("answer", "Turn", "Turn 2", json!({"text": "on the table by the window, next to the car keys"})),
                obj("fruit", "Thing", "Banana", json!({"content": "a yellow fruit, a banana"})),
                obj("car", "Thing", "Automobile", json!({"content": "a vehicle"})),
                rel("replied", &["ask", "answer"], "answered_by"),
            ]),
        )
        .await;
        let ask = |budget: u32| {
            let ctx = &ctx;
            let id = id.clone();
            async move {
                let query = json!({"session_id": id, "query": "banana", "top_k": 1, "depth": 0, "max_tokens": budget});
                call(ctx, "search_semantic", query).await
            }
        };
        let mut largest = 0;
        for budget in 1..=80 {
            let found = ask(budget).await;
            let pieces = found["context"].as_array().unwrap();
            let counted: usize = pieces.iter().map(|p| p["text"].as_str().unwrap().chars().count().div_ceil(4)).sum();
            assert_eq!(found["context_tokens"], counted, "{found}");
            assert!(counted <= budget as usize, "{budget}: {found}");
            let ids: std::collections::BTreeSet<&str> = pieces.iter().map(|p| p["id"].as_str().unwrap()).collect();
            assert_eq!(ids.len(), pieces.len(), "each object once: {found}");
            largest = largest.max(pieces.len());
            // Today's keys are as without a budget: one match.
            assert_eq!(found["matched_seeds"].as_array().unwrap().len(), 1);
        }
        let whole = ask(80).await;
        let pieces = whole["context"].as_array().unwrap();
        assert_eq!(largest, pieces.len());
        // The match first, then what is related to it (through it), then the rest of the ranking.
        let first = pieces[0]["id"].as_str().unwrap();
        assert_eq!(first, whole["matched_seeds"][0], "{whole}");
        let related: Vec<&Value> = pieces.iter().filter(|p| p.get("via").is_some()).collect();
        if first == "ask" {
            assert_eq!(related.len(), 1, "{whole}");
            assert_eq!((related[0]["id"].as_str(), related[0]["via"].as_str()), (Some("answer"), Some("ask")));
        }
        assert!(pieces.iter().any(|p| p["id"] == "fruit") && pieces.iter().any(|p| p["id"] == "ask"), "{whole}");
        // Without a budget, no context.
        let plain =
            call(&ctx, "search_semantic", json!({"session_id": id, "query": "banana", "top_k": 1, "depth": 0})).await;
        assert!(plain.get("context").is_none() && plain.get("context_tokens").is_none(), "{plain}");
    }

    #[tokio::test]
    async fn the_past_is_searched_as_it_was_by_words_and_by_meaning() {
        let ctx = context();
        let tiny = Tiny::new();
        ctx.runtime.enable_embeddings(tiny.clone());
        let id = session(&ctx, vehicles()).await;
        let search = |args: Value| {
            let ctx = ctx.clone();
            async move { call(&ctx, "search_semantic", args).await }
        };
        let present = search(json!({"session_id": id, "query": "car", "top_k": 1, "depth": 0})).await;
        assert_eq!(present["matched_seeds"], json!(["auto"]));
        let versions = call(&ctx, "list_versions", json!({"session_id": id})).await;
        let then = versions["versions"][0]["version_id"].as_str().unwrap().to_owned();
        let time = versions["versions"][0]["created_at"].as_str().unwrap().to_owned();
        let ops = json!({"session_id": id, "operations": [{"type": "remove_object", "object_id": "auto"},
            {"type": "update_object", "object_id": "fruit", "structure_patch": {"content": "a kiwi"}}]});
        assert!(call(&ctx, "evolve_knowledge", ops).await.get("error").is_none());

        let now = search(json!({"session_id": id, "query": "car", "top_k": 1, "depth": 0, "mode": "vector"})).await;
        assert_ne!(now["matched_seeds"], json!(["auto"]), "{now}");
        assert!(now.get("version_id").is_none());
        for past in [json!({"version_id": then}), json!({"as_of": time})] {
            let mut args = json!({"session_id": id, "query": "car", "top_k": 1, "depth": 0, "mode": "vector"});
            args.as_object_mut().unwrap().extend(past.as_object().unwrap().clone());
            let by_meaning = search(args).await;
            assert_eq!(by_meaning["matched_seeds"], json!(["auto"]), "{past}: {by_meaning}");
            assert_eq!(by_meaning["version_id"], then.as_str());
            let words =
                search(json!({"session_id": id, "query": "yellow", "top_k": 1, "mode": "lexical", "version_id": then}))
                    .await;
            assert_eq!(words["matched_seeds"], json!(["fruit"]), "{words}");
        }
        assert_eq!(search(json!({"session_id": id, "query": "yellow", "mode": "lexical"})).await["error"], "not_found");
        let both = search(json!({"session_id": id, "query": "car", "version_id": then, "as_of": time})).await;
        assert_eq!(both["error"], "invalid_parameter");
        let early = search(json!({"session_id": id, "query": "car", "as_of": "2001-01-01T00:00:00Z"})).await;
        assert_eq!(early["error"], "version_not_found", "{early}");
        let garbled = search(json!({"session_id": id, "query": "car", "as_of": "yesterday"})).await;
        assert_eq!(garbled["error"], "invalid_parameter");
        let unknown = search(json!({"session_id": id, "query": "car", "version_id": "no-such-version"})).await;
        assert_eq!(unknown["error"], "version_not_found");
    }

    #[tokio::test]
    async fn a_failing_embedder_leaves_search_to_words_and_says_what_is_pending() {
        let ctx = context();
        let tiny = Tiny::new();
        tiny.down.store(true, std::sync::atomic::Ordering::Relaxed);
        ctx.runtime.enable_embeddings(tiny.clone());
        let id = session(&ctx, vehicles()).await;
        let result =
            call(&ctx, "search_semantic", json!({"session_id": id, "query": "yellow banana", "top_k": 1})).await;
        assert_eq!(result["matched_seeds"], json!(["fruit"]), "{result}");
        assert_eq!(result["ranking"], "bm25");
        let vector =
            call(&ctx, "search_semantic", json!({"session_id": id, "query": "banana", "mode": "vector"})).await;
        assert_eq!(vector["error"], "llm_provider_unavailable", "{vector}");
        // Back up: the queued texts are embedded on a later try, and the search ranks by meaning.
        tiny.down.store(false, std::sync::atomic::Ordering::Relaxed);
        let embeddings = ctx.runtime.embeddings().unwrap().clone();
        assert!(embeddings.idle_within(std::time::Duration::from_secs(10)).await);
        let result = call(&ctx, "search_semantic", json!({"session_id": id, "query": "car", "top_k": 1})).await;
        assert_eq!(result["matched_seeds"], json!(["auto"]), "{result}");
        assert_eq!(result["embeddings"]["pending"], 0);
    }

    #[tokio::test]
    async fn without_embeddings_hybrid_is_bm25_and_vector_is_refused() {
        let ctx = context();
        let id = session(&ctx, data()).await;
        let result = call(&ctx, "search_semantic", json!({"session_id": id, "query": "green", "depth": 0})).await;
        assert_eq!(result["ranking"], "bm25");
        assert!(result.get("embeddings").is_none());
        let vector = call(&ctx, "search_semantic", json!({"session_id": id, "query": "green", "mode": "vector"})).await;
        assert_eq!(vector["error"], "invalid_parameter");
        let unknown = call(&ctx, "search_semantic", json!({"session_id": id, "query": "green", "mode": "fuzzy"})).await;
        assert!(unknown.get("error").is_some(), "{unknown}");
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

    #[tokio::test]
    async fn what_is_current_leaves_out_facts_a_later_one_ended() {
        let ctx = context();
        let id = session(
            &ctx,
            structure(vec![
                obj("ann", "Person", "Ann", json!({"note": "moves a lot"})),
                obj("oslo", "City", "Oslo", json!({})),
                obj("bergen", "City", "Bergen", json!({})),
                obj(
                    "old",
                    "Fact",
                    "Ann lives in Oslo",
                    json!({"participants": ["ann", "oslo"], "relation_type": "lives_in",
                    "valid_until": "2026-05-01T00:00:00Z", "ended_by": "new"}),
                ),
                obj(
                    "new",
                    "Fact",
                    "Ann lives in Bergen",
                    json!({"participants": ["ann", "bergen"], "relation_type": "lives_in"}),
                ),
            ]),
        )
        .await;
        let ask = |extra: Value| {
            let ctx = &ctx;
            let mut query =
                json!({"session_id": id, "query": "Ann lives in", "top_k": 3, "depth": 0, "mode": "lexical"});
            query.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            async move { call(ctx, "search_semantic", query).await }
        };
        let ids = |list: &Value| -> Vec<String> {
            list.as_array()
                .unwrap()
                .iter()
                .filter_map(|p| p.as_str().or_else(|| p["id"].as_str()).map(str::to_owned))
                .collect()
        };
        // Relations are not searched: Ann matches, and her neighbours come through her facts.
        let plain = ask(json!({})).await;
        assert_eq!(ids(&plain["matched_seeds"]), ["ann"], "{plain}");
        // The budgeted context: what holds now, unless asked for all.
        let now = ask(json!({"max_tokens": 500})).await;
        let context = ids(&now["context"]);
        assert!(context.contains(&"bergen".to_owned()) && !context.contains(&"oslo".to_owned()), "{now}");
        let ever = ask(json!({"max_tokens": 500, "validity": "all"})).await;
        let context = ids(&ever["context"]);
        assert!(context.contains(&"bergen".to_owned()) && context.contains(&"oslo".to_owned()), "{ever}");
    }
}
