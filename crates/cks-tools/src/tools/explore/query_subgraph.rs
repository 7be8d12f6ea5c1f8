//! `query_subgraph`: the k-hop neighbourhood of seed objects (or the whole graph without seeds),
//! with type filters, budgets and truncation metadata; `compact_mode` returns `{nodes, edges}`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::{HashMap, HashSet};

use cks_core::KnowledgeStructure;
use cks_core::neighbourhood::Neighbourhoods;
use cks_core::subgraph::{SubgraphQuery, query_subgraph};

use crate::bounds::DOCUMENT_BUDGET;
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::past;
use crate::tool::{Coercion, SessionCheck, Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The session to query.
    pub(crate) session_id: String,
    /// Objects to start from (default: the whole graph).
    #[serde(default)]
    pub(crate) seed_ids: Vec<String>,
    /// Hops from the seeds (default 1; 0: the seeds alone).
    pub(crate) depth: Option<i64>,
    /// Follow only these relation types.
    pub(crate) include_relation_types: Option<Vec<String>>,
    /// Return only these object types (seeds kept).
    pub(crate) include_object_types: Option<Vec<String>>,
    /// Token budget, about 4 characters each (0: none; default: about 40 KB of answer).
    #[schemars(range(min = 0))]
    pub(crate) max_tokens: Option<u64>,
    /// Most objects, seeds included (0: no cap; without seeds, default: as many as fit 40 KB).
    #[schemars(range(min = 0))]
    pub(crate) max_objects: Option<u64>,
    /// Without seeds: objects to skip, in graph order (a `next_offset`).
    #[serde(default)]
    pub(crate) offset: u64,
    /// Weight per object type when a cap forces a choice (default 1.0).
    #[serde(default)]
    #[schemars(schema_with = "crate::schema::number_map")]
    pub(crate) type_weights: HashMap<String, f64>,
    /// Return `subgraph` as {nodes, edges} instead of canonical JSON.
    #[serde(default)]
    pub(crate) compact_mode: bool,
    /// Keep only objects whose structure has these key/value pairs (seeds kept).
    #[serde(default)]
    #[schemars(schema_with = "crate::schema::object")]
    pub(crate) structure_filters: Option<Map<String, Value>>,
    /// Read the graph as of this version.
    pub(crate) version_id: Option<String>,
    /// Read the graph as of this time (RFC 3339).
    pub(crate) as_of: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    session_id: String,
    subgraph: Subgraph,
    /// Content hash of the returned subgraph.
    subgraph_root_hash: String,
    /// Non-relation objects reached (seeds included) before budgets and filters.
    total_found_nodes: usize,
    /// Non-relation objects returned.
    returned_nodes: usize,
    /// Fewer objects were returned than found.
    is_truncated: bool,
    /// `max_objects_exceeded`, `max_tokens_exceeded` or `max_objects_and_max_tokens_exceeded` when
    /// a budget cut the result; `answer_size_exceeded` when the default size did (without
    /// `max_objects` and `max_tokens`, about 40 KB).
    truncation_reason: Option<String>,
    /// The best-ranked object the budget left out: a seed for a follow-up query.
    suggested_next_seed: Option<String>,
    /// The version read, when the past was asked for (`version_id` or `as_of`).
    #[serde(skip_serializing_if = "Option::is_none")]
    version_id: Option<String>,
    /// Without seeds, when a cap left objects out: the `offset` that continues the graph.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_offset: Option<u64>,
}

/// Canonical JSON text, or `{nodes, edges}` with `compact_mode`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(untagged)]
pub(crate) enum Subgraph {
    Serialized(String),
    Compact(Compact),
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Compact {
    /// The non-relation objects.
    nodes: Vec<Node>,
    /// One per relation.
    edges: Vec<Edge>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Node {
    identity: NodeIdentity,
    structure: Map<String, Value>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct NodeIdentity {
    id: String,
    #[serde(rename = "type")]
    r#type: String,
    name: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Edge {
    /// The first participant.
    source: Option<String>,
    /// The second participant.
    target: Option<String>,
    /// The relation type.
    #[serde(rename = "type")]
    r#type: String,
    /// The relation's id.
    id: String,
    /// Every participant, in order (relations may have more than two).
    participants: Vec<String>,
}

pub(crate) struct QuerySubgraph;

#[async_trait::async_trait]
impl Tool for QuerySubgraph {
    type Input = Input;
    type Output = Output;
    const ARGUMENT_COERCIONS: &'static [(&'static str, Coercion)] = &[("seed_ids", Coercion::ListOfOne)];
    const TITLE: &'static str = "Query a subgraph";
    const META: ToolMeta = ToolMeta {
        name: "query_subgraph",
        description: "Return the neighbourhood of 'seed_ids' in a session's graph (a relation's participants \
            are one hop apart), or the whole graph without seeds. To find objects by text, use \
            search_semantic. Returns {subgraph, total_found_nodes, returned_nodes, is_truncated, \
            suggested_next_seed}.",
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
        let session_id = input.session_id.clone();
        let depth = usize::try_from(input.depth.unwrap_or(1).max(0)).unwrap_or(usize::MAX);
        let version = past::version(ctx, &session_id, input.version_id.as_deref(), input.as_of.as_deref()).await?;
        if let Some(version) = version {
            let answer = past::read(ctx, &session_id, Some(&version), move |structure| {
                if input.seed_ids.is_empty() { whole(structure, input) } else { seeded(structure, depth, input) }
            });
            return answer.await?.map(|output| Output { version_id: Some(version), ..output });
        }
        if input.seed_ids.is_empty() {
            return ctx.runtime.read(&session_id, move |structure, _| whole(structure, input)).await?;
        }
        // A neighbourhood: read from the store without loading the session, when it can be.
        let seeds = input.seed_ids.clone();
        ctx.runtime.read_neighbourhood(&session_id, seeds, depth, move |graph| seeded(graph, depth, input)).await?
    }
}

/// The whole graph, or without `max_objects: 0` a page of it: nodes in graph order from `offset`,
/// at most `max_objects` of them (by default as many as fit [`DOCUMENT_BUDGET`], estimated), with
/// each relation whose last participant is among them (so every relation comes on one page).
fn whole(structure: &KnowledgeStructure, input: Input) -> Result<Output, ToolError> {
    let total = node_count(structure);
    if input.max_objects == Some(0) || (input.offset == 0 && input.max_objects.is_none() && !too_large(structure)) {
        return answer(structure.clone(), total, None, None, input);
    }
    let cap = input.max_objects.map_or(usize::MAX, |n| usize::try_from(n).unwrap_or(usize::MAX));
    // An object's share of the answer: its canonical text, indented and escaped once more.
    fn cost(object: &cks_core::KnowledgeObject) -> usize {
        2 * crate::bounds::json_size(&object.to_value())
    }
    let skipped = usize::try_from(input.offset).unwrap_or(usize::MAX);
    // A relation comes on the page of its last participant: those on earlier pages count as there.
    let earlier: HashSet<&str> =
        structure.objects().filter(|o| !o.is_relation()).take(skipped).map(|o| o.id()).collect();
    let mut nodes = structure.objects().filter(|o| !o.is_relation()).skip(skipped);
    let mut chosen: HashSet<&str> = HashSet::new();
    let (mut used, mut count, mut next) = (0, 0, None);
    for node in nodes.by_ref() {
        let relations: Vec<&str> = structure
            .relations_of(node.id())
            .iter()
            .filter_map(|r| Some((r, r.relation()?)))
            .filter(|(r, rel)| {
                !chosen.contains(r.id())
                    && rel.participants.iter().all(|p| *p == node.id() || chosen.contains(p) || earlier.contains(p))
            })
            .map(|(r, _)| r.id())
            .collect();
        let bytes = cost(node) + relations.iter().filter_map(|id| structure.get(id)).map(|r| cost(r)).sum::<usize>();
        let over_budget = input.max_objects.is_none() && count > 0 && used + bytes > DOCUMENT_BUDGET;
        if count == cap || over_budget {
            next = Some(node.id().to_owned());
            break;
        }
        used += bytes;
        count += 1;
        chosen.insert(node.id());
        chosen.extend(relations);
    }
    let reason = next
        .as_ref()
        .map(|_| if input.max_objects.is_some() { "max_objects_exceeded" } else { "answer_size_exceeded" }.to_owned());
    let next_offset = next.as_ref().map(|_| input.offset + count as u64);
    let page = structure.objects().filter(|o| chosen.contains(o.id())).map(|o| cks_core::KnowledgeObject::clone(o));
    let page = KnowledgeStructure::from_objects(page).unwrap_or_default();
    let mut output = answer(page, total, reason, next, input)?;
    output.is_truncated = output.returned_nodes < total;
    output.next_offset = next_offset;
    Ok(output)
}

/// Whether the whole graph's document would outgrow the default size (measured only when the
/// graph is small enough for that to be in doubt).
fn too_large(structure: &KnowledgeStructure) -> bool {
    structure.len() > crate::bounds::SERIALIZE_LIMIT
        || crate::convert::client_document(structure).len() > DOCUMENT_BUDGET
}

/// A neighbourhood's default size, without `max_objects` and `max_tokens`: a token budget (the
/// reference's estimate, about a quarter of an object's characters) whose nodes' document is
/// about 40 KB.
const DEFAULT_TOKENS: usize = 3_000;

fn seeded(graph: &dyn Neighbourhoods, depth: usize, input: Input) -> Result<Output, ToolError> {
    let by_default = input.max_objects.is_none() && input.max_tokens.is_none();
    let query = SubgraphQuery {
        seed_ids: input.seed_ids.clone(),
        depth,
        include_relation_types: input.include_relation_types.clone(),
        include_object_types: input.include_object_types.clone(),
        max_objects: input.max_objects.map(|n| n as usize),
        max_tokens: input.max_tokens.map(|n| n as usize).or(by_default.then_some(DEFAULT_TOKENS)),
        type_weights: input.type_weights.clone(),
    };
    let result = query_subgraph(graph, &query);
    let reason = result.truncation_reason.map(|r| match by_default {
        true => "answer_size_exceeded".to_owned(),
        false => format!("{r}_exceeded"),
    });
    answer(result.structure, result.total_found_nodes, reason, result.suggested_next_seed, input)
}

fn answer(
    mut sub: KnowledgeStructure,
    total: usize,
    truncation: Option<String>,
    next_seed: Option<String>,
    input: Input,
) -> Result<Output, ToolError> {
    let mut is_truncated = truncation.is_some();
    if let Some(filters) = input.structure_filters.filter(|f| !f.is_empty()) {
        sub = filter_structure(&sub, &filters, &input.seed_ids);
        // As in the reference: after a filter, truncated means fewer returned than found.
        is_truncated = node_count(&sub) < total;
    }
    let returned = node_count(&sub);
    let subgraph = if input.compact_mode {
        Subgraph::Compact(compact(&sub))
    } else {
        Subgraph::Serialized(crate::convert::client_document(&sub))
    };
    Ok(Output {
        session_id: input.session_id,
        subgraph,
        subgraph_root_hash: sub.root_hash().to_hex(),
        total_found_nodes: total,
        returned_nodes: returned,
        is_truncated,
        truncation_reason: truncation,
        suggested_next_seed: next_seed,
        version_id: None,
        next_offset: None,
    })
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
        seeds.iter().any(|s| s == o.id()) || filters.iter().all(|(k, v)| matches(o.structure.get(k), v))
    };
    let nodes: std::collections::HashSet<&str> =
        structure.objects().filter(|o| !o.is_relation() && keep_node(o)).map(|o| o.id()).collect();
    let kept = structure.objects().filter(|o| match o.relation() {
        Some(relation) => relation.participants.iter().all(|p| nodes.contains(p)),
        None => nodes.contains(o.id()),
    });
    KnowledgeStructure::from_objects(kept.map(|o| cks_core::KnowledgeObject::clone(o))).unwrap_or_default()
}

/// Filter equality as in the reference: a boolean filter needs the same boolean, numbers compare
/// numerically, anything else compares as text (a missing field reads as `None`, as Python
/// prints it).
fn matches(actual: Option<&Value>, expected: &Value) -> bool {
    match (actual, expected) {
        (actual, Value::Bool(b)) => actual == Some(&Value::Bool(*b)),
        (Some(Value::Number(a)), Value::Number(b)) => a.as_f64() == b.as_f64(),
        (actual, expected) => as_text(actual) == as_text(Some(expected)),
    }
}

/// A value as Python's `str()` writes the scalars; nested values as JSON.
fn as_text(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => "None".into(),
        Some(Value::Bool(true)) => "True".into(),
        Some(Value::Bool(false)) => "False".into(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

fn compact(structure: &KnowledgeStructure) -> Compact {
    let nodes = structure
        .objects()
        .filter(|o| !o.is_relation())
        .map(|o| Node {
            identity: NodeIdentity {
                id: o.id().to_owned(),
                r#type: o.identity.r#type.to_string(),
                name: o.identity.name.to_string(),
            },
            structure: o.structure.to_map(),
        })
        .collect();
    let edges = structure
        .objects()
        .filter_map(|o| o.relation().map(|r| (o.id().to_owned(), r)))
        .map(|(id, r)| Edge {
            source: r.participants.first().map(|p| (*p).to_owned()),
            target: r.participants.get(1).map(|p| (*p).to_owned()),
            r#type: r.relation_type.to_owned(),
            id,
            participants: r.participants.iter().map(|p| (*p).to_owned()).collect(),
        })
        .collect();
    Compact { nodes, edges }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::tools::versions::testing::{call, context, keys, node, relation, session};

    async fn graph(ctx: &crate::context::ToolContext) -> String {
        let (sid, _) = session(
            ctx,
            json!([
                node("a", "Claim", "A", json!({"status": "active", "n": 1})),
                node("b", "Claim", "B", json!({"status": "draft"})),
                node("c", "Person", "C", json!({})),
                relation("rab", &["a", "b"], "contradicts"),
                relation("rca", &["c", "a"], "authored")
            ]),
        )
        .await;
        sid
    }

    #[tokio::test]
    async fn returns_the_reference_keys_and_counts() {
        let ctx = context();
        let sid = graph(&ctx).await;
        let result = call(&ctx, "query_subgraph", json!({"session_id": sid, "seed_ids": ["b"]})).await;
        assert_eq!(
            keys(&result),
            [
                "is_truncated",
                "returned_nodes",
                "session_id",
                "subgraph",
                "subgraph_root_hash",
                "suggested_next_seed",
                "total_found_nodes",
                "truncation_reason"
            ]
        );
        assert_eq!(result["total_found_nodes"], 2);
        assert_eq!(result["returned_nodes"], 2);
        assert_eq!(result["is_truncated"], false);
        assert_eq!(result["truncation_reason"], json!(null));
        assert!(result["subgraph"].as_str().unwrap().contains("\"rab\""));
    }

    #[tokio::test]
    async fn a_depth_of_zero_or_less_returns_the_seeds_alone() {
        let ctx = context();
        let sid = graph(&ctx).await;
        for depth in [0, -3] {
            let result =
                call(&ctx, "query_subgraph", json!({"session_id": sid, "seed_ids": ["b"], "depth": depth})).await;
            assert_eq!(result["returned_nodes"], 1, "depth {depth}: {result}");
            assert_eq!(result["total_found_nodes"], 1);
        }
        let one = call(&ctx, "query_subgraph", json!({"session_id": sid, "seed_ids": ["b"], "depth": 1})).await;
        assert!(one["returned_nodes"].as_u64().unwrap() > 1, "depth 1 follows relations: {one}");
    }

    #[tokio::test]
    async fn compact_mode_has_nodes_and_source_target_type_edges() {
        let ctx = context();
        let sid = graph(&ctx).await;
        let result = call(&ctx, "query_subgraph", json!({"session_id": sid, "compact_mode": true})).await;
        let sub = &result["subgraph"];
        assert_eq!(sub["nodes"].as_array().unwrap().len(), 3);
        assert_eq!(
            sub["nodes"][0],
            json!({"identity": {"id": "a", "type": "Claim", "name": "A"},
                                           "structure": {"status": "active", "n": 1}})
        );
        assert_eq!(
            sub["edges"],
            json!([{"source": "a", "target": "b", "type": "contradicts", "id": "rab", "participants": ["a", "b"]},
                   {"source": "c", "target": "a", "type": "authored", "id": "rca", "participants": ["c", "a"]}])
        );
    }

    #[tokio::test]
    async fn structure_filters_keep_seeds_and_compare_as_the_reference() {
        let ctx = context();
        let sid = graph(&ctx).await;
        let filtered = call(
            &ctx,
            "query_subgraph",
            json!({"session_id": sid, "seed_ids": ["c"], "depth": 2, "structure_filters": {"status": "active"}}),
        )
        .await;
        assert_eq!(filtered["total_found_nodes"], 3);
        assert_eq!(filtered["returned_nodes"], 2, "c (the seed) and a");
        assert_eq!(filtered["is_truncated"], true);
        let numeric_as_text = call(
            &ctx,
            "query_subgraph",
            json!({"session_id": sid, "seed_ids": ["c"], "depth": 2, "structure_filters": {"n": "1"}}),
        )
        .await;
        assert_eq!(numeric_as_text["returned_nodes"], 2, "'1' matches 1 as text");
        let missing_is_none = call(
            &ctx,
            "query_subgraph",
            json!({"session_id": sid, "seed_ids": ["c"], "depth": 2, "structure_filters": {"n": "None"}}),
        )
        .await;
        assert_eq!(missing_is_none["returned_nodes"], 2, "c (seed) and b, which has no 'n'");
    }

    #[tokio::test]
    async fn reads_the_graph_as_it_was_at_a_version_or_a_time() {
        let ctx = context();
        let sid = graph(&ctx).await;
        let versions = call(&ctx, "list_versions", json!({"session_id": sid})).await;
        let then = versions["versions"][0]["version_id"].as_str().unwrap().to_owned();
        let time = versions["versions"][0]["created_at"].as_str().unwrap().to_owned();
        let ops = json!({"session_id": sid, "operations": [{"type": "remove_object", "object_id": "rab"},
            {"type": "update_object", "object_id": "a", "structure_patch": {"status": "retired"}}]});
        assert!(call(&ctx, "evolve_knowledge", ops).await.get("error").is_none());
        let now = call(&ctx, "query_subgraph", json!({"session_id": sid, "seed_ids": ["b"]})).await;
        assert_eq!(now["returned_nodes"], 1, "{now}");
        let past_hash = ctx.runtime.version_state(&sid, &then).await.unwrap();
        for past in [json!({"version_id": then}), json!({"as_of": time})] {
            let mut seeded = json!({"session_id": sid, "seed_ids": ["b"]});
            seeded.as_object_mut().unwrap().extend(past.as_object().unwrap().clone());
            let result = call(&ctx, "query_subgraph", seeded).await;
            assert_eq!(result["returned_nodes"], 2, "{past}: {result}");
            assert_eq!(result["version_id"], then.as_str());
            let mut whole = json!({"session_id": sid, "compact_mode": true});
            whole.as_object_mut().unwrap().extend(past.as_object().unwrap().clone());
            let result = call(&ctx, "query_subgraph", whole).await;
            let a = result["subgraph"]["nodes"].as_array().unwrap().iter().find(|n| n["identity"]["id"] == "a");
            assert_eq!(a.unwrap()["structure"]["status"], "active");
            assert_eq!(result["subgraph"]["edges"].as_array().unwrap().len(), 2);
            let mut hashed = json!({"session_id": sid});
            hashed.as_object_mut().unwrap().extend(past.as_object().unwrap().clone());
            let result = call(&ctx, "query_subgraph", hashed).await;
            assert_eq!(result["subgraph_root_hash"], past_hash.root_hash().to_hex());
        }
        let after = call(&ctx, "query_subgraph", json!({"session_id": sid, "seed_ids": ["b"]})).await;
        assert_eq!(after["subgraph_root_hash"], now["subgraph_root_hash"], "the present is untouched");
        let early = json!({"session_id": sid, "as_of": "1999-12-31T23:59:59Z"});
        assert_eq!(call(&ctx, "query_subgraph", early).await["error"], "version_not_found");
    }

    #[tokio::test]
    async fn errors() {
        let ctx = context();
        assert_eq!(
            call(&ctx, "query_subgraph", json!({})).await,
            json!({"error": "missing_parameter", "message": "Missing required parameter: 'session_id'."})
        );
        assert_eq!(call(&ctx, "query_subgraph", json!({"session_id": "nope"})).await["error"], "session_not_found");
    }

    #[tokio::test]
    async fn a_large_graph_without_seeds_is_cut_by_default_and_continues_from_next_offset() {
        let ctx = context();
        let mut objects: Vec<_> =
            (0..600).map(|i| node(&format!("n{i:03}"), "Claim", "N", json!({"text": "x".repeat(60)}))).collect();
        objects.extend(
            (0..599).map(|i| relation(&format!("r{i:03}"), &[&format!("n{i:03}"), &format!("n{:03}", i + 1)], "next")),
        );
        let (sid, _) = session(&ctx, json!(objects)).await;
        let all =
            call(&ctx, "query_subgraph", json!({"session_id": sid, "max_objects": 0, "compact_mode": true})).await;
        assert_eq!((all["returned_nodes"].as_u64(), all["is_truncated"].as_bool()), (Some(600), Some(false)));
        assert_eq!(all["subgraph"]["edges"].as_array().unwrap().len(), 599);
        assert!(all.get("next_offset").is_none());
        let (mut nodes, mut edges, mut offset) = (0, Vec::new(), json!(0));
        while !offset.is_null() {
            let page = call(&ctx, "query_subgraph", json!({"session_id": sid, "offset": offset})).await;
            assert!(serde_json::to_string(&page).unwrap().len() < 64 * 1024, "{}", page["returned_nodes"]);
            assert_eq!(page["total_found_nodes"], 600);
            let more = page.get("next_offset").is_some();
            assert_eq!(page["truncation_reason"], if more { json!("answer_size_exceeded") } else { json!(null) });
            assert_eq!(page["is_truncated"], true);
            let sub: serde_json::Value = serde_json::from_str(page["subgraph"].as_str().unwrap()).unwrap();
            let objects = sub["objects"].as_array().unwrap();
            let returned = objects.iter().filter(|o| o["identity"]["type"] != "Relation").count();
            assert_eq!(page["returned_nodes"], returned);
            if more {
                assert_eq!(page["suggested_next_seed"], format!("n{:03}", nodes + returned));
            }
            nodes += returned;
            let relations = objects.iter().filter(|o| o["identity"]["type"] == "Relation");
            edges.extend(relations.map(|o| o["identity"]["id"].as_str().unwrap().to_owned()));
            offset = page.get("next_offset").cloned().unwrap_or_default();
        }
        assert_eq!(nodes, 600);
        let listed = edges.len();
        edges.sort();
        edges.dedup();
        assert_eq!((listed, edges.len()), (599, 599), "every relation on exactly one page, across pages too");
        let capped =
            call(&ctx, "query_subgraph", json!({"session_id": sid, "max_objects": 5, "compact_mode": true})).await;
        assert_eq!(capped["subgraph"]["nodes"].as_array().unwrap().len(), 5);
        assert_eq!(
            (capped["next_offset"].as_u64(), capped["truncation_reason"].as_str()),
            (Some(5), Some("max_objects_exceeded"))
        );
    }

    #[tokio::test]
    async fn a_large_neighbourhood_is_cut_by_default_unless_a_budget_is_given() {
        let ctx = context();
        let mut objects = vec![node("hub", "Hub", "Hub", json!({}))];
        objects.extend((0..600).map(|i| node(&format!("s{i:03}"), "Claim", "S", json!({"text": "x".repeat(60)}))));
        objects.extend((0..600).map(|i| relation(&format!("r{i:03}"), &["hub", &format!("s{i:03}")], "has")));
        let (sid, _) = session(&ctx, json!(objects)).await;
        let cut = call(&ctx, "query_subgraph", json!({"session_id": sid, "seed_ids": ["hub"]})).await;
        assert!(serde_json::to_string(&cut).unwrap().len() < 64 * 1024);
        assert_eq!(cut["total_found_nodes"], 601);
        assert_eq!(
            (cut["is_truncated"].as_bool(), cut["truncation_reason"].as_str()),
            (Some(true), Some("answer_size_exceeded"))
        );
        assert!(cut["suggested_next_seed"].is_string());
        for budget in [json!({"max_tokens": 0}), json!({"max_objects": 0}), json!({"max_objects": 1000})] {
            let mut args = json!({"session_id": sid, "seed_ids": ["hub"], "compact_mode": true});
            args.as_object_mut().unwrap().extend(budget.as_object().unwrap().clone());
            let all = call(&ctx, "query_subgraph", args).await;
            assert_eq!(
                (all["returned_nodes"].as_u64(), all["is_truncated"].as_bool()),
                (Some(601), Some(false)),
                "{budget}"
            );
        }
        let tokens =
            call(&ctx, "query_subgraph", json!({"session_id": sid, "seed_ids": ["hub"], "max_tokens": 100})).await;
        assert_eq!(tokens["truncation_reason"], "max_tokens_exceeded");
    }
}
