//! Contradiction detection: `mutual_exclusion` (CKS-EXT-MUTUAL-EXCLUSION) and
//! `functional_relation` (CKS-EXT-FUNCTIONAL-RELATION).
//!
//! - `mutual_exclusion`: each `MutualExclusionRule` with truthy, different `relation_type_a` and
//!   `relation_type_b` adds the unordered pair `(A, B)` (A < B); rules accumulate. Every binary
//!   relation (dangling ones included) is indexed by type and ordered `(source, target)`, the last
//!   relation per type and pair winning. For each pair in sorted order and each shared
//!   `(source, target)` in sorted order: one error located at type A's relation.
//! - `functional_relation`: the truthy `relation_type`s of `FunctionalRelationRule` objects are
//!   single-valued. Binary relations of those types are indexed `type → source → target →
//!   relation` (last relation per target wins). For each type, then source, in sorted order: more
//!   than one distinct target is one error, located at the smallest kept relation id. A relation
//!   with a truthy `ended_by` (a fact another fact replaced: it holds until its `valid_until`) is
//!   history, not a current value, and is not counted. The reference has no such field, so its
//!   graphs are judged as it judges them.
//!
//! Decision: only string rule values are read (a non-string can never equal a relation type).

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use super::pyrepr::py_repr_str_list;
use super::{Diagnostic, binary, semantic_error};
use crate::KnowledgeObject;
use crate::structure::KnowledgeStructure;

const MUTUAL_EXCLUSION_CODE: &str = "CKS-EXT-MUTUAL-EXCLUSION";
const FUNCTIONAL_CODE: &str = "CKS-EXT-FUNCTIONAL-RELATION";

fn truthy_str(value: Option<&Value>) -> Option<&str> {
    match value {
        Some(Value::String(s)) if !s.is_empty() => Some(s),
        _ => None,
    }
}

/// One contradiction: the relations that cannot all hold, and where the check reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Contradiction {
    pub code: &'static str,
    /// The diagnostic's location: the id that names this contradiction.
    pub location: String,
    pub message: String,
    /// The relations involved, sorted.
    pub relation_ids: Vec<String>,
}

impl Contradiction {
    fn new(code: &'static str, location: &str, message: String, mut relation_ids: Vec<String>) -> Self {
        relation_ids.sort();
        relation_ids.dedup();
        Contradiction { code, location: location.to_owned(), message, relation_ids }
    }
}

/// Every contradiction the two checks report, mutual exclusions first.
pub fn contradictions(structure: &KnowledgeStructure) -> Vec<Contradiction> {
    let mut found = mutual_exclusions(structure);
    found.extend(functional_violations(structure));
    found
}

fn report(found: Vec<Contradiction>, out: &mut Vec<Diagnostic>) {
    out.extend(found.into_iter().map(|c| semantic_error(c.code, c.message, &c.location)));
}

/// CKS-EXT-MUTUAL-EXCLUSION.
pub(crate) fn check_mutual_exclusion(structure: &KnowledgeStructure, out: &mut Vec<Diagnostic>) {
    report(mutual_exclusions(structure), out);
}

/// CKS-EXT-FUNCTIONAL-RELATION.
pub(crate) fn check_functional_relations(structure: &KnowledgeStructure, out: &mut Vec<Diagnostic>) {
    report(functional_violations(structure), out);
}

fn mutual_exclusions(structure: &KnowledgeStructure) -> Vec<Contradiction> {
    let mut out = Vec::new();
    let mut pairs: BTreeSet<(&str, &str)> = BTreeSet::new();
    for object in structure.objects_of_type("MutualExclusionRule") {
        let a = truthy_str(object.structure.get("relation_type_a"));
        let b = truthy_str(object.structure.get("relation_type_b"));
        if let (Some(a), Some(b)) = (a, b)
            && a != b
        {
            pairs.insert((a.min(b), a.max(b)));
        }
    }
    if pairs.is_empty() {
        return out;
    }

    // Only the relation types a rule names are read (in structure order: the last relation of a
    // type between a pair wins).
    let mut by_type: HashMap<&str, HashMap<(&str, &str), &str>> = HashMap::new();
    for relation_type in pairs.iter().flat_map(|(a, b)| [*a, *b]) {
        if by_type.contains_key(relation_type) {
            continue;
        }
        let of_type = by_type.entry(relation_type).or_default();
        for object in structure.relations_of_type(relation_type) {
            if let Some(pair) = object.relation().as_ref().and_then(binary) {
                of_type.insert(pair, object.id());
            }
        }
    }

    let empty = HashMap::new();
    for (type_a, type_b) in pairs {
        let map_a = by_type.get(type_a).unwrap_or(&empty);
        let map_b = by_type.get(type_b).unwrap_or(&empty);
        let shared: BTreeSet<&(&str, &str)> = map_a.keys().filter(|k| map_b.contains_key(*k)).collect();
        for pair @ (source, target) in shared {
            let (Some(relation_a), Some(relation_b)) = (map_a.get(pair), map_b.get(pair)) else {
                continue;
            };
            out.push(Contradiction::new(
                MUTUAL_EXCLUSION_CODE,
                relation_a,
                format!(
                    "Relation '{relation_a}' (type '{type_a}') and relation '{relation_b}' (type '{type_b}') both \
                     connect '{source}' to '{target}', but a MutualExclusionRule declares these relation_types \
                     mutually exclusive."
                ),
                vec![(*relation_a).to_owned(), (*relation_b).to_owned()],
            ));
        }
    }
    out
}

/// The key of a relation a later fact ended (it names that fact).
pub const ENDED_BY: &str = "ended_by";

/// Whether `object` is a fact a later one ended (its `ended_by` names one): history, not what
/// holds now.
pub fn ended(object: &KnowledgeObject) -> bool {
    truthy_str(object.structure.get(ENDED_BY)).is_some()
}

fn functional_violations(structure: &KnowledgeStructure) -> Vec<Contradiction> {
    let mut out = Vec::new();
    let functional: HashSet<&str> = structure
        .objects_of_type("FunctionalRelationRule")
        .into_iter()
        .filter_map(|o| truthy_str(o.structure.get("relation_type")))
        .collect();
    if functional.is_empty() {
        return out;
    }

    let mut targets: BTreeMap<&str, BTreeMap<&str, BTreeMap<&str, &str>>> = BTreeMap::new();
    for relation_type in functional {
        for object in structure.relations_of_type(relation_type) {
            if ended(object) {
                continue;
            }
            if let Some((source, target)) = object.relation().as_ref().and_then(binary) {
                targets.entry(relation_type).or_default().entry(source).or_default().insert(target, object.id());
            }
        }
    }

    for (relation_type, sources) in targets {
        for (source, by_target) in sources {
            if by_target.len() <= 1 {
                continue;
            }
            let target_ids: Vec<&str> = by_target.keys().copied().collect();
            let Some(location) = by_target.values().min() else {
                continue;
            };
            out.push(Contradiction::new(
                FUNCTIONAL_CODE,
                location,
                format!(
                    "Source '{source}' has {} distinct targets via functional relation_type '{relation_type}': {}. A \
                     FunctionalRelationRule declares this relation_type single-valued per source.",
                    target_ids.len(),
                    py_repr_str_list(&target_ids)
                ),
                by_target.values().map(|id| (*id).to_owned()).collect(),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::Extension;
    use super::super::test_support::*;
    use serde_json::{Value, json};

    #[test]
    fn mutual_exclusion_flags_the_same_ordered_pair() {
        let objects = vec![
            node("earth"),
            node("theory"),
            obj(
                "rule",
                "MutualExclusionRule",
                json!({"relation_type_a": "supports", "relation_type_b": "contradicts"}),
            ),
            obj("noop", "MutualExclusionRule", json!({"relation_type_a": "x", "relation_type_b": "x"})),
            rel("s1", &["earth", "theory"], "supports"),
            rel("s2", &["earth", "theory"], "supports"), // last one wins
            rel("c1", &["earth", "theory"], "contradicts"),
            rel("c2", &["theory", "earth"], "contradicts"), // reversed: not flagged
            rel("x1", &["earth", "theory"], "x"),
            rel("x2", &["earth", "theory"], "x"),
        ];
        assert_eq!(
            located(&run_ext(Extension::MutualExclusion, objects)),
            pairs(&[(
                "c1",
                "Relation 'c1' (type 'contradicts') and relation 's2' (type 'supports') both connect 'earth' to 'theory', but a MutualExclusionRule declares these relation_types mutually exclusive."
            )])
        );
    }

    #[test]
    fn mutual_exclusion_without_conflict_or_rules_is_silent() {
        let base = vec![node("a"), node("b"), rel("s", &["a", "b"], "supports"), rel("c", &["b", "a"], "contradicts")];
        assert_eq!(run_ext(Extension::MutualExclusion, base.clone()), []);
        let mut with_rule = base;
        with_rule.push(obj(
            "rule",
            "MutualExclusionRule",
            json!({"relation_type_a": "supports", "relation_type_b": "contradicts"}),
        ));
        assert_eq!(run_ext(Extension::MutualExclusion, with_rule), []);
    }

    #[test]
    fn functional_relation_flags_distinct_targets() {
        let objects = vec![
            node("earth"),
            node("sun"),
            node("mars"),
            obj("rule", "FunctionalRelationRule", json!({"relation_type": "orbits"})),
            rel("z1", &["earth", "sun"], "orbits"),
            rel("b2", &["earth", "mars"], "orbits"),
            rel("a3", &["earth", "sun"], "orbits"), // same target again: replaces z1
            rel("m1", &["mars", "sun"], "orbits"),
            rel("m2", &["mars", "sun"], "orbits"), // duplicates of one target are fine
        ];
        assert_eq!(
            located(&run_ext(Extension::FunctionalRelation, objects)),
            pairs(&[(
                "a3",
                "Source 'earth' has 2 distinct targets via functional relation_type 'orbits': ['mars', 'sun']. A FunctionalRelationRule declares this relation_type single-valued per source."
            )])
        );
    }

    #[test]
    fn an_ended_relation_is_not_a_current_value() {
        let rule = json!({"identity": {"id": "fr", "type": "FunctionalRelationRule", "name": "fr"},
                          "structure": {"relation_type": "lives_in"}});
        let relation = |id: &str, target: &str, extra: Value| {
            let mut structure = json!({"participants": ["ann", target], "relation_type": "lives_in"});
            structure.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            json!({"identity": {"id": id, "type": "Fact", "name": id}, "structure": structure})
        };
        let node = |id: &str| json!({"identity": {"id": id, "type": "T", "name": id}, "structure": {}});
        let objects = |old: Value| {
            json!({"objects": [node("ann"), node("oslo"), node("bergen"), rule.clone(), old,
                               relation("new", "bergen", json!({}))]})
        };
        let ended = crate::json::parse_value(objects(relation(
            "old",
            "oslo",
            json!({"valid_until": "2026-05-01", "ended_by": "new"}),
        )));
        assert!(super::contradictions(&ended.unwrap()).is_empty());
        let current = crate::json::parse_value(objects(relation("old", "oslo", json!({"valid_until": "2026-05-01"}))));
        assert_eq!(super::contradictions(&current.unwrap()).len(), 1, "a valid_until alone ends nothing");
    }

    #[test]
    fn functional_relation_needs_a_rule() {
        let objects =
            vec![node("e"), node("s"), node("m"), rel("r1", &["e", "s"], "orbits"), rel("r2", &["e", "m"], "orbits")];
        assert_eq!(run_ext(Extension::FunctionalRelation, objects), []);
    }
}
