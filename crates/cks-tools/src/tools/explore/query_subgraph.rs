//! `query_subgraph`: the k-hop neighbourhood of seed objects (or the whole graph without seeds),
//! with type filters, budgets and truncation metadata; `compact_mode` returns `{nodes, edges}`.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::collections::HashMap;

use cks_core::KnowledgeStructure;
use cks_core::json::{CanonicalObject, to_canonical_string};
use cks_core::subgraph::{SubgraphQuery, query_subgraph};

use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Coercion, SessionCheck, Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The session to query.
    pub(crate) session_id: String,
    /// Objects to start from; omitted or empty returns the whole graph.
    #[serde(default)]
    pub(crate) seed_ids: Vec<String>,
    /// Hops to follow from the seeds (default 1).
    #[schemars(range(min = 0))]
    pub(crate) depth: Option<u32>,
    /// Follow only relations of these types.
    pub(crate) include_relation_types: Option<Vec<String>>,
    /// Return only objects of these types (seeds are always kept).
    pub(crate) include_object_types: Option<Vec<String>>,
    /// Approximate token budget (about 4 characters per token).
    #[schemars(range(min = 0))]
    pub(crate) max_tokens: Option<u64>,
    /// Most objects to return besides the seeds.
    #[schemars(range(min = 0))]
    pub(crate) max_objects: Option<u64>,
    /// Ranking weight per object type when a budget forces a choice (default 1.0).
    #[serde(default)]
    #[schemars(schema_with = "crate::schema::number_map")]
    pub(crate) type_weights: HashMap<String, f64>,
    /// Return `{nodes, edges}` instead of canonical JSON.
    #[serde(default)]
    pub(crate) compact_mode: bool,
    /// Keep only non-relation objects whose structure has all these key/value pairs (seeds are kept).
    #[serde(default)]
    #[schemars(schema_with = "crate::schema::object")]
    pub(crate) structure_filters: Option<Map<String, Value>>,
}

pub(crate) struct QuerySubgraph;

#[async_trait::async_trait]
impl Tool for QuerySubgraph {
    type Input = Input;
    type Output = Value;
    const ARGUMENT_COERCIONS: &'static [(&'static str, Coercion)] = &[("seed_ids", Coercion::ListOfOne)];
    const META: ToolMeta = ToolMeta {
        name: "query_subgraph",
        description: "Return the neighbourhood of one or more seed objects in a session's graph (relations are \
            hyperedges: every participant reaches every other in one hop), or the whole graph when 'seed_ids' is \
            empty. Narrow it with include_relation_types / include_object_types / structure_filters, cap it with \
            max_objects / max_tokens (type_weights rank what to keep). Returns {subgraph (canonical JSON, or \
            {nodes, edges} with compact_mode), subgraph_root_hash, total_found_nodes, returned_nodes, is_truncated, \
            truncation_reason, suggested_next_seed}.",
        mutates_graph: false,
        creates_session: false,
        destructive: false,
        idempotent: true,
        open_world: false,
        session_fields: &["session_id"],
        session_checks: &[SessionCheck::exists("session_id")],
        llm_exposed: true,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Value, ToolError> {
        let session_id = input.session_id.clone();
        ctx.runtime.read(&session_id, move |structure, _| answer(structure, input)).await?
    }
}

fn answer(structure: &KnowledgeStructure, input: Input) -> Result<Value, ToolError> {
    let (mut sub, total, truncation, next_seed) = if input.seed_ids.is_empty() {
        (structure.clone(), node_count(structure), None, None)
    } else {
        let query = SubgraphQuery {
            seed_ids: input.seed_ids.clone(),
            depth: input.depth.unwrap_or(1) as usize,
            include_relation_types: input.include_relation_types,
            include_object_types: input.include_object_types,
            max_objects: input.max_objects.map(|n| n as usize),
            max_tokens: input.max_tokens.map(|n| n as usize),
            type_weights: input.type_weights,
        };
        let result = query_subgraph(structure, &query);
        let reason = result.truncation_reason.map(|r| format!("{r}_exceeded"));
        (result.structure, result.total_found_nodes, reason, result.suggested_next_seed)
    };
    let mut filtered = false;
    if let Some(filters) = input.structure_filters.filter(|f| !f.is_empty()) {
        sub = filter_structure(&sub, &filters, &input.seed_ids);
        filtered = true;
    }
    let returned = node_count(&sub);
    let is_truncated = truncation.is_some() || (filtered && returned < total);
    let subgraph = if input.compact_mode { compact(&sub) } else { Value::String(to_canonical_string(&sub)) };
    Ok(json!({
        "session_id": input.session_id,
        "subgraph": subgraph,
        "subgraph_root_hash": sub.root_hash().to_hex(),
        "total_found_nodes": total,
        "returned_nodes": returned,
        "is_truncated": is_truncated,
        "truncation_reason": truncation,
        "suggested_next_seed": next_seed,
    }))
}

fn node_count(structure: &KnowledgeStructure) -> usize {
    structure.objects().filter(|o| !o.is_relation()).count()
}

/// Keeps seeds and the non-relation objects matching every filter, then the relations whose
/// participants all survived.
fn filter_structure(
    structure: &KnowledgeStructure,
    filters: &Map<String, Value>,
    seeds: &[String],
) -> KnowledgeStructure {
    let keep_node = |o: &cks_core::KnowledgeObject| {
        seeds.iter().any(|s| s == o.id())
            || filters.iter().all(|(k, v)| o.structure.get(k).is_some_and(|x| matches(x, v)))
    };
    let nodes: std::collections::HashSet<&str> =
        structure.objects().filter(|o| !o.is_relation() && keep_node(o)).map(|o| o.id()).collect();
    let kept = structure.objects().filter(|o| match o.relation() {
        Some(relation) => relation.participants.iter().all(|p| nodes.contains(p)),
        None => nodes.contains(o.id()),
    });
    KnowledgeStructure::from_objects(kept.map(|o| cks_core::KnowledgeObject::clone(o))).unwrap_or_default()
}

/// Filter equality as in the reference: numbers numerically, everything else by value.
fn matches(actual: &Value, expected: &Value) -> bool {
    match (actual.as_f64(), expected.as_f64()) {
        (Some(a), Some(b)) => a == b,
        _ => actual == expected,
    }
}

fn compact(structure: &KnowledgeStructure) -> Value {
    let nodes: Vec<Value> = structure
        .objects()
        .filter(|o| !o.is_relation())
        .map(|o| serde_json::to_value(CanonicalObject(o)).unwrap_or(Value::Null))
        .collect();
    let edges: Vec<Value> = structure
        .objects()
        .filter_map(|o| o.relation().map(|r| (o.id().to_owned(), r)))
        .map(|(id, r)| {
            json!({"id": id, "source": r.participants.first(), "target": r.participants.get(1), "type": r.relation_type,
                   "participants": r.participants})
        })
        .collect();
    json!({"nodes": nodes, "edges": edges})
}
