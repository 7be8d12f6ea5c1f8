//! Budgeted subgraph queries: the neighbourhood of some seed objects, cut to fit a caller's budget.
//!
//! Rules:
//! - Nodes are non-relation objects; relations are (hyper)edges. A relation id is never a valid
//!   seed; unknown seeds are ignored; with no valid seed the result is empty.
//! - Breadth-first over hyperedges: from a node, every relation naming it (of an included relation
//!   type, when `include_relation_types` is given) reaches all of its other participants in one hop,
//!   up to `depth` hops. `include_object_types` filters the non-seed nodes: a node of another type
//!   is neither returned nor traversed through.
//! - Budget (as in the reference): seeds are always kept and count toward `max_objects`, a cap on
//!   the nodes returned. The other nodes are ranked by `degree × type_weight / (distance + 1)`
//!   (degree: relations of an included type naming the node in the whole structure; type weight
//!   from `type_weights`, default 1.0; ties by id) and taken in that order: selection stops once
//!   `max_objects` nodes are kept, and a node that would overrun `max_tokens` is skipped (a smaller
//!   one further down may still fit). The token estimate of an object is the reference's: a quarter
//!   of the characters of `id:type:name:structure` (Python's print of the structure) plus 10; seeds
//!   use up the token budget first. A budget of 0 is no budget. Only
//!   nodes count toward the budgets: relations follow from the chosen nodes.
//! - Vertex-induced, as in the reference: a relation is returned iff every participant is a node of
//!   the result and its type passes the filter (so a relation naming a relation is not returned).
//! - Output keeps the structure's order.
//!
//! Cost is proportional to the explored neighbourhood: walks use the incidence index and the output
//! is built from the chosen ids only, never by scanning the whole structure.

use indexmap::IndexMap;
use serde_json::Value;
use std::collections::{HashMap, HashSet};

use crate::neighbourhood::Neighbourhoods;
use crate::object::{KnowledgeObject, RelationView};
use crate::structure::{ChangeSet, KnowledgeStructure};

/// What to extract. `Default` is depth 1, no filters, no budgets, no weights.
#[derive(Clone, Debug, PartialEq)]
pub struct SubgraphQuery {
    pub seed_ids: Vec<String>,
    pub depth: usize,
    pub include_relation_types: Option<Vec<String>>,
    pub include_object_types: Option<Vec<String>>,
    pub max_objects: Option<usize>,
    pub max_tokens: Option<usize>,
    pub type_weights: HashMap<String, f64>,
}

impl Default for SubgraphQuery {
    fn default() -> Self {
        SubgraphQuery {
            seed_ids: Vec::new(),
            depth: 1,
            include_relation_types: None,
            include_object_types: None,
            max_objects: None,
            max_tokens: None,
            type_weights: HashMap::new(),
        }
    }
}

/// The extracted subgraph and how it was cut.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SubgraphResult {
    pub structure: KnowledgeStructure,
    /// Nodes reached (seeds included) before budgeting.
    pub total_found_nodes: usize,
    /// Nodes kept (relations not counted).
    pub returned_nodes: usize,
    pub is_truncated: bool,
    /// `"max_objects"`, `"max_tokens"` or `"max_objects_and_max_tokens"`: the budgets that cut the
    /// result.
    pub truncation_reason: Option<String>,
    /// The best-ranked node that was cut, a good seed for a follow-up query.
    pub suggested_next_seed: Option<String>,
}

/// The token estimate of one object, as the reference computes it: a quarter of the characters
/// of `id:type:name:structure` (the structure as Python prints it), plus 10.
pub fn estimate_tokens(object: &KnowledgeObject) -> usize {
    let identity = &object.identity;
    let text = identity.id.chars().count() + identity.r#type.chars().count() + identity.name.chars().count() + 3;
    let structure = map_repr_len(object.structure.iter());
    (text + structure) / 4 + 10
}

/// Characters of Python's `repr` of a dict with these entries: `{'k': v, ...}`.
fn map_repr_len<'a, K: AsRef<str> + ?Sized + 'a>(entries: impl Iterator<Item = (&'a K, &'a Value)>) -> usize {
    let mut len = 2;
    let mut count: usize = 0;
    for (key, value) in entries {
        len += str_repr_len(key.as_ref()) + 2 + repr_len(value);
        count += 1;
    }
    len + 2 * count.saturating_sub(1)
}

/// Characters of Python's `repr` of a value inside a parsed structure: nested objects are
/// `mappingproxy({...})`, arrays are tuples.
fn repr_len(value: &Value) -> usize {
    match value {
        Value::Null => 4,
        Value::Bool(true) => 4,
        Value::Bool(false) => 5,
        Value::Number(n) => match n.as_f64() {
            Some(f) if !(n.is_i64() || n.is_u64()) => float_repr_len(f),
            _ => n.to_string().len(),
        },
        Value::String(text) => str_repr_len(text),
        Value::Array(items) => {
            let inner: usize = items.iter().map(repr_len).sum::<usize>() + 2 * items.len().saturating_sub(1);
            // `(x,)` for one item.
            2 + inner + usize::from(items.len() == 1)
        }
        Value::Object(map) => "mappingproxy()".len() + map_repr_len(map.iter()),
    }
}

/// Characters of Python's `repr` of a string: quoted, with escapes.
fn str_repr_len(text: &str) -> usize {
    let double_quoted = text.contains('\'') && !text.contains('"');
    let mut len = 2;
    for c in text.chars() {
        len += match c {
            '\\' | '\n' | '\r' | '\t' => 2,
            '\'' if !double_quoted => 2,
            c if c.is_control() => {
                if (c as u32) < 0x100 {
                    4
                } else {
                    6
                }
            }
            _ => 1,
        };
    }
    len
}

/// Characters of Python's `repr` of a float: the shortest round-trip digits, fixed notation for
/// exponents from -4 to 15 (with `.0` for whole numbers), else `1e+16` style.
fn float_repr_len(value: f64) -> usize {
    if !value.is_finite() {
        // `nan`, `inf`, `-inf` (JSON cannot carry them, but a structure built in code can).
        return if value < 0.0 { 4 } else { 3 };
    }
    let scientific = format!("{value:e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let negative = usize::from(mantissa.starts_with('-'));
    let digits = mantissa.chars().filter(char::is_ascii_digit).count();
    if (-4..16).contains(&exponent) {
        let fixed = format!("{value}");
        negative + fixed.trim_start_matches('-').len() + if fixed.contains('.') { 0 } else { 2 }
    } else {
        // d[.ddd]e+XX, at least two exponent digits.
        let exponent_digits = exponent.unsigned_abs().to_string().len().max(2);
        negative + digits + usize::from(digits > 1) + 2 + exponent_digits
    }
}

/// The relation's view when it is a relation of an included type.
fn traversable<'s>(relation: &'s KnowledgeObject, types: Option<&HashSet<&str>>) -> Option<RelationView<'s>> {
    relation.relation().filter(|view| types.is_none_or(|t| t.contains(view.relation_type)))
}

/// Extracts the budgeted neighbourhood of the query's seeds.
pub fn query_subgraph<G: Neighbourhoods + ?Sized>(structure: &G, query: &SubgraphQuery) -> SubgraphResult {
    let relation_types: Option<HashSet<&str>> =
        query.include_relation_types.as_ref().map(|types| types.iter().map(String::as_str).collect());
    let object_types: Option<HashSet<&str>> =
        query.include_object_types.as_ref().map(|types| types.iter().map(String::as_str).collect());
    let traversable = |relation| traversable(relation, relation_types.as_ref());

    // Node id → distance, in discovery order (seeds first).
    let mut found: IndexMap<&str, usize> = IndexMap::new();
    for seed in &query.seed_ids {
        if let Some(object) = structure.get(seed).filter(|o| !o.is_relation()) {
            found.entry(object.id()).or_insert(0);
        }
    }
    let seeds = found.len();
    if seeds == 0 {
        return SubgraphResult::default();
    }

    // Participants that are not nodes of this query (relations, filtered types, dangling ids).
    let mut rejected: HashSet<&str> = HashSet::new();
    let mut cursor = 0;
    while let Some((&id, &distance)) = found.get_index(cursor) {
        cursor += 1;
        if distance >= query.depth {
            continue;
        }
        for relation in structure.relations_of(id) {
            let Some(view) = traversable(relation) else { continue };
            for participant in view.participants {
                if found.contains_key(participant) || rejected.contains(participant) {
                    continue;
                }
                match structure.get(participant) {
                    Some(object)
                        if !object.is_relation()
                            && object_types.as_ref().is_none_or(|t| t.contains(object.identity.r#type.as_str())) =>
                    {
                        found.insert(object.id(), distance + 1);
                    }
                    _ => {
                        rejected.insert(participant);
                    }
                }
            }
        }
    }

    let max_objects = query.max_objects.filter(|&m| m > 0);
    let max_tokens = query.max_tokens.filter(|&m| m > 0);
    let mut kept: Vec<&str> = found.keys().copied().collect();
    let mut cut_objects = false;
    let mut cut_tokens = false;
    let mut next_seed: Option<&str> = None;
    if (max_objects.is_some() || max_tokens.is_some()) && found.len() > seeds {
        // Rank the non-seed nodes, ties by id.
        let degree = |id: &str| structure.relations_of(id).iter().filter(|r| traversable(r).is_some()).count();
        let score = |id: &str, distance: usize| {
            let weight = structure
                .get(id)
                .and_then(|o| query.type_weights.get(o.identity.r#type.as_str()))
                .copied()
                .unwrap_or(1.0);
            degree(id).max(1) as f64 * weight / (distance + 1) as f64
        };
        let mut ranked: Vec<(&str, f64)> = found.iter().skip(seeds).map(|(&id, &d)| (id, score(id, d))).collect();
        ranked.sort_by(|x, y| y.1.total_cmp(&x.1).then_with(|| x.0.cmp(y.0)));

        let tokens = |id: &str| structure.get(id).map_or(0, |o| estimate_tokens(o));
        kept.truncate(seeds);
        let mut used_tokens = kept.iter().map(|id| tokens(id)).fold(0, usize::saturating_add);
        for &(id, _) in &ranked {
            if max_objects.is_some_and(|max| kept.len() >= max) {
                cut_objects = true;
                break;
            }
            if let Some(max) = max_tokens {
                let needed = used_tokens.saturating_add(tokens(id));
                if needed > max {
                    cut_tokens = true;
                    continue;
                }
                used_tokens = needed;
            }
            kept.push(id);
        }
        let chosen: HashSet<&str> = kept.iter().copied().collect();
        next_seed = ranked.iter().map(|(id, _)| *id).find(|id| !chosen.contains(id));
    }
    let returned_nodes = kept.len();

    // Vertex-induced relations: every participant a kept node.
    let nodes: HashSet<&str> = kept.iter().copied().collect();
    let mut relations: HashSet<&str> = HashSet::new();
    for &id in &nodes {
        for relation in structure.relations_of(id) {
            let relation_id = relation.id();
            if relations.contains(relation_id) {
                continue;
            }
            let Some(view) = traversable(relation) else { continue };
            if view.participants.iter().all(|p| nodes.contains(p)) {
                relations.insert(relation_id);
            }
        }
    }
    kept.extend(relations);

    kept.sort_by_key(|id| structure.order_of(id).unwrap_or(u64::MAX));
    let mut output = KnowledgeStructure::new();
    let mut log = ChangeSet::default();
    for id in kept {
        if let Some(entry) = structure.entry(id) {
            output.put_entry(entry.clone(), &mut log);
            // A fresh structure: nothing to undo.
            log.changes.clear();
        }
    }

    SubgraphResult {
        structure: output,
        total_found_nodes: found.len(),
        returned_nodes,
        is_truncated: returned_nodes < found.len(),
        truncation_reason: match (cut_objects, cut_tokens) {
            (true, true) => Some("max_objects_and_max_tokens".to_owned()),
            (true, false) => Some("max_objects".to_owned()),
            (false, true) => Some("max_tokens".to_owned()),
            (false, false) => None,
        },
        suggested_next_seed: next_seed.map(str::to_owned),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{NODE_TYPES, RELATION_TYPES, arb_structure, node, relation};
    use proptest::prelude::*;
    use proptest::sample::Index;

    /// a–b supports, b–c cites, c–d about, (a, e, f) supports, and m1 about (r1, d).
    fn sample() -> KnowledgeStructure {
        KnowledgeStructure::from_objects([
            node("a", "Claim", 1),
            node("b", "Claim", 2),
            node("c", "Source", 3),
            node("d", "Person", 4),
            node("e", "Claim", 5),
            node("f", "Claim", 6),
            relation("r1", &["a", "b"], "supports"),
            relation("r2", &["b", "c"], "cites"),
            relation("r3", &["c", "d"], "about"),
            relation("r4", &["a", "e", "f"], "supports"),
            relation("m1", &["r1", "d"], "about"),
        ])
        .unwrap()
    }

    fn query(seeds: &[&str], depth: usize) -> SubgraphQuery {
        SubgraphQuery { seed_ids: seeds.iter().map(|s| (*s).to_owned()).collect(), depth, ..Default::default() }
    }

    fn ids(result: &SubgraphResult) -> Vec<&str> {
        result.structure.ids().collect()
    }

    fn strings(items: &[&str]) -> Option<Vec<String>> {
        Some(items.iter().map(|s| (*s).to_owned()).collect())
    }

    #[test]
    fn default_query_has_depth_one() {
        assert_eq!(SubgraphQuery::default().depth, 1);
    }

    #[test]
    fn depth_controls_the_reach() {
        let s = sample();
        let r = query_subgraph(&s, &query(&["a"], 0));
        assert_eq!(ids(&r), ["a"]);
        let r = query_subgraph(&s, &query(&["a"], 1));
        assert_eq!(ids(&r), ["a", "b", "e", "f", "r1", "r4"]);
        assert_eq!((r.total_found_nodes, r.returned_nodes, r.is_truncated), (4, 4, false));
        let r = query_subgraph(&s, &query(&["a"], 2));
        assert_eq!(ids(&r), ["a", "b", "c", "e", "f", "r1", "r2", "r4"]);
        // At depth 3 d comes in; m1 names the relation r1, so it is not returned (as in the reference).
        let r = query_subgraph(&s, &query(&["a"], 3));
        assert_eq!(ids(&r), ["a", "b", "c", "d", "e", "f", "r1", "r2", "r3", "r4"]);
        assert_eq!(r.truncation_reason, None);
        assert_eq!(r.suggested_next_seed, None);
    }

    #[test]
    fn relation_and_object_type_filters() {
        let s = sample();
        let q = SubgraphQuery { include_relation_types: strings(&["supports"]), ..query(&["a"], 3) };
        assert_eq!(ids(&query_subgraph(&s, &q)), ["a", "b", "e", "f", "r1", "r4"]);
        // c is a Source: neither returned nor walked through, so d is out of reach.
        let q = SubgraphQuery { include_object_types: strings(&["Claim"]), ..query(&["a"], 3) };
        assert_eq!(ids(&query_subgraph(&s, &q)), ["a", "b", "e", "f", "r1", "r4"]);
        // Seeds are kept whatever their type.
        let q = SubgraphQuery { include_object_types: strings(&["Claim"]), ..query(&["c"], 1) };
        assert_eq!(ids(&query_subgraph(&s, &q)), ["b", "c", "r2"]);
    }

    #[test]
    fn relation_and_unknown_seeds_are_ignored() {
        let s = sample();
        let r = query_subgraph(&s, &query(&["r1", "nope"], 2));
        assert_eq!(r, SubgraphResult::default());
        assert!(r.structure.is_empty());
        let r = query_subgraph(&s, &query(&["nope", "r1", "d", "d"], 1));
        assert_eq!(ids(&r), ["c", "d", "r3"]);
        assert_eq!(r.total_found_nodes, 2);
    }

    #[test]
    fn max_objects_caps_the_nodes_seeds_included() {
        let s = sample();
        // Scores at depth 2 from a: b 2/2, c 2/3, e 1/2, f 1/2.
        let q = SubgraphQuery { max_objects: Some(3), ..query(&["a"], 2) };
        let r = query_subgraph(&s, &q);
        assert_eq!(ids(&r), ["a", "b", "c", "r1", "r2"]);
        assert_eq!((r.total_found_nodes, r.returned_nodes, r.is_truncated), (5, 3, true));
        assert_eq!(r.truncation_reason.as_deref(), Some("max_objects"));
        assert_eq!(r.suggested_next_seed.as_deref(), Some("e"), "e and f tie; the smaller id first");

        // Weighting Claims: b 6/2, e 3/2, f 3/2, c 2/3.
        let weights = HashMap::from([("Claim".to_owned(), 3.0)]);
        let q = SubgraphQuery { max_objects: Some(3), type_weights: weights, ..query(&["a"], 2) };
        let r = query_subgraph(&s, &q);
        assert_eq!(ids(&r), ["a", "b", "e", "r1"]);
        assert_eq!(r.suggested_next_seed.as_deref(), Some("f"));

        // Seeds are kept even beyond the cap.
        let q = SubgraphQuery { max_objects: Some(1), ..query(&["a", "d"], 2) };
        let r = query_subgraph(&s, &q);
        assert_eq!(r.returned_nodes, 2);
        assert_eq!(r.truncation_reason.as_deref(), Some("max_objects"));

        let q = SubgraphQuery { max_objects: Some(5), ..query(&["a"], 2) };
        let r = query_subgraph(&s, &q);
        assert!(!r.is_truncated);
        assert_eq!(r.returned_nodes, 5);
        assert_eq!(r.suggested_next_seed, None);
        // 0 is no budget.
        let q = SubgraphQuery { max_objects: Some(0), max_tokens: Some(0), ..query(&["a"], 2) };
        assert_eq!(query_subgraph(&s, &q).returned_nodes, 5);
    }

    #[test]
    fn max_tokens_counts_seeds_first_and_skips_what_does_not_fit() {
        let s = sample();
        let a = s.get("a").unwrap();
        // "a:Claim:name a:{'v': 1}": 23 characters.
        assert_eq!(estimate_tokens(a), 15);
        let budget = estimate_tokens(a) + estimate_tokens(s.get("b").unwrap()) + 1;
        let q = SubgraphQuery { max_tokens: Some(budget), ..query(&["a"], 2) };
        let r = query_subgraph(&s, &q);
        assert_eq!(ids(&r), ["a", "b", "r1"]);
        assert_eq!(r.truncation_reason.as_deref(), Some("max_tokens"));
        assert_eq!(r.suggested_next_seed.as_deref(), Some("c"));
        // A seed over budget on its own is still returned; everything else is cut.
        let q = SubgraphQuery { max_tokens: Some(1), ..query(&["a"], 2) };
        let r = query_subgraph(&s, &q);
        assert_eq!(ids(&r), ["a"]);
        assert_eq!((r.returned_nodes, r.total_found_nodes), (1, 5));
        assert_eq!(r.suggested_next_seed.as_deref(), Some("b"));

        // A node too large for what is left is skipped, and a smaller one further down still fits.
        let mut big = node("b", "Claim", 2);
        big.structure.insert("text", serde_json::json!("x".repeat(400)));
        let s = KnowledgeStructure::from_objects([
            node("a", "Claim", 1),
            big,
            node("e", "Claim", 5),
            relation("r1", &["a", "b"], "supports"),
            relation("r2", &["b", "a"], "cites"),
            relation("r4", &["a", "e"], "supports"),
        ])
        .unwrap();
        let budget = estimate_tokens(s.get("a").unwrap()) + estimate_tokens(s.get("e").unwrap());
        let q = SubgraphQuery { max_tokens: Some(budget), max_objects: Some(2), ..query(&["a"], 1) };
        let r = query_subgraph(&s, &q);
        assert_eq!(ids(&r), ["a", "e", "r4"], "b ranks first but does not fit");
        assert_eq!(r.truncation_reason.as_deref(), Some("max_tokens"));
        assert_eq!(r.suggested_next_seed.as_deref(), Some("b"));
    }

    #[test]
    fn token_estimate_is_the_references() {
        // Expected values computed by the reference's estimator.
        let mut o = node("é", "T", 0);
        o.identity.name = Default::default();
        assert_eq!(estimate_tokens(&o), 13);
        let object = |structure: serde_json::Value| {
            let mut o = node("x", "T", 0);
            o.identity.name = "N".into();
            o.structure = serde_json::from_value(structure).unwrap();
            o
        };
        let tricky = object(serde_json::json!({
            "t": "it's \"q\"\n\\", "f": 1.5, "g": 100.0, "h": 1e-5, "k": 1.5e16, "b": false, "n": null,
            "l": [1], "m": [], "o": {"p": [1, 2]}, "neg": -0.25
        }));
        assert_eq!(estimate_tokens(&tricky), 51);
        assert_eq!(estimate_tokens(&object(serde_json::json!({"s": "don't"}))), 15);
    }

    fn arb_query() -> impl Strategy<Value = (KnowledgeStructure, SubgraphQuery)> {
        arb_structure().prop_flat_map(|s| {
            let seeds = prop::collection::vec(any::<Index>(), 0..4);
            let filter = |names: &'static [&'static str]| {
                prop::option::weighted(0.3, prop::sample::subsequence(names, 1..=names.len()))
                    .prop_map(|t| t.map(|t| t.into_iter().map(str::to_owned).collect::<Vec<_>>()))
            };
            (
                Just(s),
                seeds,
                0..4usize,
                filter(&RELATION_TYPES),
                filter(&NODE_TYPES),
                prop::option::of(0..5usize),
                prop::option::weighted(0.3, 0..120usize),
                prop::option::of(0.0..4.0f64),
            )
                .prop_map(
                    |(s, seeds, depth, rel_types, obj_types, max_objects, max_tokens, claim_weight)| {
                        let mut seed_ids: Vec<String> =
                            seeds.iter().map(|i| s.ids().nth(i.index(s.len())).unwrap_or("").to_owned()).collect();
                        seed_ids.push("unknown".into());
                        let type_weights = claim_weight.map(|w| ("Claim".to_owned(), w)).into_iter().collect();
                        let query = SubgraphQuery {
                            seed_ids,
                            depth,
                            include_relation_types: rel_types,
                            include_object_types: obj_types,
                            max_objects,
                            max_tokens,
                            type_weights,
                        };
                        (s, query)
                    },
                )
        })
    }

    /// Depth-limited reach computed the slow way: one pass over all relations per level.
    fn naive_reach(s: &KnowledgeStructure, q: &SubgraphQuery) -> HashSet<String> {
        let passes = |ty: &str, filter: &Option<Vec<String>>| filter.as_ref().is_none_or(|f| f.iter().any(|t| t == ty));
        let mut level: HashSet<String> =
            q.seed_ids.iter().filter(|id| s.get(id).is_some_and(|o| !o.is_relation())).cloned().collect();
        let mut reached = level.clone();
        for _ in 0..q.depth {
            let mut next = HashSet::new();
            for r in s.relations() {
                let view = r.relation().unwrap();
                if !passes(view.relation_type, &q.include_relation_types)
                    || !view.participants.iter().any(|p| level.contains(*p))
                {
                    continue;
                }
                for p in view.participants {
                    let ok = s
                        .get(p)
                        .is_some_and(|o| !o.is_relation() && passes(&o.identity.r#type, &q.include_object_types));
                    if ok && !reached.contains(p) {
                        next.insert(p.to_owned());
                    }
                }
            }
            reached.extend(next.iter().cloned());
            level = next;
        }
        reached
    }

    proptest! {
        #[test]
        fn subgraphs_are_vertex_induced_and_within_budget((s, q) in arb_query()) {
            let r = query_subgraph(&s, &q);
            let out = &r.structure;
            // Every returned object is the source's, unchanged, in the source's order.
            let positions: Vec<usize> = out.ids().map(|id| s.index_of(id).unwrap()).collect();
            prop_assert!(positions.windows(2).all(|w| w[0] < w[1]));
            for entry in out.entries() {
                let original = s.entry(entry.object.id()).unwrap();
                prop_assert_eq!(&entry.object, &original.object);
                prop_assert_eq!(entry.hash, original.hash);
            }
            // Every valid seed is kept.
            let seeds: HashSet<&str> =
                q.seed_ids.iter().map(String::as_str).filter(|id| s.get(id).is_some_and(|o| !o.is_relation())).collect();
            for seed in &seeds {
                prop_assert!(out.contains(seed));
            }
            let nodes = out.objects().filter(|o| !o.is_relation()).count();
            prop_assert_eq!(nodes, r.returned_nodes);
            if let Some(max) = q.max_objects.filter(|&m| m > 0) {
                prop_assert!(r.returned_nodes <= seeds.len().max(max));
            }
            prop_assert!(r.returned_nodes <= r.total_found_nodes);
            prop_assert_eq!(r.is_truncated, r.returned_nodes < r.total_found_nodes);
            prop_assert_eq!(r.is_truncated, r.truncation_reason.is_some());
            prop_assert_eq!(r.is_truncated, r.suggested_next_seed.is_some());
            if let Some(next) = &r.suggested_next_seed {
                prop_assert!(s.contains(next) && !out.contains(next));
            }
            // Vertex-induced: a relation is in iff all its participants are returned nodes and its
            // type passes.
            let passes = |ty: &str| q.include_relation_types.as_ref().is_none_or(|f| f.iter().any(|t| t == ty));
            for relation in s.relations() {
                let view = relation.relation().unwrap();
                let induced = passes(view.relation_type)
                    && view.participants.iter().all(|p| out.get(p).is_some_and(|o| !o.is_relation()));
                prop_assert_eq!(out.contains(relation.id()), induced, "relation {}", relation.id());
            }
            // Without budgets, the nodes are exactly the depth-limited reach.
            if q.max_objects.unwrap_or(0) == 0 && q.max_tokens.unwrap_or(0) == 0 {
                let reach = naive_reach(&s, &q);
                let got: HashSet<String> = out.objects().filter(|o| !o.is_relation()).map(|o| o.identity.id.to_string()).collect();
                prop_assert_eq!(got, reach.clone());
                prop_assert_eq!(r.total_found_nodes, reach.len());
            }
        }
    }
}
