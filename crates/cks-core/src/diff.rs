//! Structural diff: the evolution operations that turn one structure into another, and a summary of
//! what changed.
//!
//! Rules:
//! - Objects are compared by id and content hash only (entries carry their hashes), so a diff costs
//!   O(n) hash comparisons and never compares JSON values.
//! - A modified object (same id, different hash) becomes a remove followed by an add: operations have
//!   no "replace relation" form, and `update_object` cannot change identity or relations.
//! - `remove_object` and `remove_relation` cascade to every relation naming the removed id
//!   (transitively). So the *affected* ids are the closure of the changed and removed ids under
//!   "a source relation names an affected id". Every affected relation is removed explicitly (namers
//!   before the relations they name, so no cascade fires in an acyclic structure) and every affected
//!   id that exists in the target is re-added from the target.
//! - Output order: `remove_relation` ops, `remove_object` ops, `add_object` ops (target order),
//!   `add_relation` ops (target order, except that a relation naming another relation being added
//!   comes after it).
//!
//! - The source side is a [`Base`]: a whole structure, or the target rewound through what changed
//!   since ([`crate::Rewind`]); the second costs what changed, and only the order of the removals
//!   may differ between the two (it follows the base's order, which a rewound base does not keep).
//!
//! The target must be referentially closed (every participant exists), as every structure built by
//! operations is; otherwise the `add_relation` for a dangling relation fails when applied.

use indexmap::IndexSet;
use std::collections::{HashMap, HashSet};

use crate::object::{KnowledgeObject, PARTICIPANTS, RELATION_TYPE};
use crate::ops::Operation;
use crate::rewind::{Base, BaseView};
use crate::structure::KnowledgeStructure;

/// The operations that turn `source` into a structure with the same content as `target`.
pub fn diff(source: &KnowledgeStructure, target: &KnowledgeStructure) -> Vec<Operation> {
    diff_from(Base::Whole(source), target)
}

/// [`diff`] from any base: with a [`Base::Rewound`] one, the cost follows what changed between the
/// two sides, not the size of either.
pub fn diff_from(base: Base<'_>, target: &KnowledgeStructure) -> Vec<Operation> {
    let source = BaseView::new(base, target);
    // Ids that are removed or modified, and the relations that a cascade from them would reach.
    let mut affected: IndexSet<&str> = IndexSet::new();
    let mut pending: Vec<&str> = Vec::new();
    let mut seed = |id| {
        if affected.insert(id) {
            pending.push(id);
        }
    };
    match base {
        Base::Whole(structure) => {
            for entry in structure.entries() {
                if target.entry(entry.object.id()).map(|t| t.hash) != Some(entry.hash) {
                    seed(entry.object.id());
                }
            }
        }
        Base::Rewound(rewind) => {
            for (id, before) in rewind.changed() {
                if let Some(before) = before.filter(|b| target.entry(id).map(|t| t.hash) != Some(b.hash)) {
                    seed(before.object.id());
                }
            }
        }
    }
    while let Some(id) = pending.pop() {
        for relation in source.relations_of(id) {
            if affected.insert(relation) {
                pending.push(relation);
            }
        }
    }

    let mut ops = Vec::new();
    push_removals(&source, &affected, &mut ops);

    // Everything affected that the target still has, plus everything new in the target, in
    // target order.
    let mut to_add: Vec<&KnowledgeObject> = Vec::new();
    match base {
        Base::Whole(_) => {
            for entry in target.entries() {
                let id = entry.object.id();
                if affected.contains(id) || !source.contains(id) {
                    to_add.push(&entry.object);
                }
            }
        }
        Base::Rewound(rewind) => {
            let added = rewind.changed().filter(|(_, before)| before.is_none()).map(|(id, _)| id);
            let mut positions: Vec<usize> =
                affected.iter().copied().chain(added).filter_map(|id| target.index_of(id)).collect();
            positions.sort_unstable();
            positions.dedup();
            to_add.extend(positions.into_iter().filter_map(|i| target.entry_at(i)).map(|e| &*e.object));
        }
    }
    ops.extend(to_add.iter().filter(|o| !o.is_relation()).map(|o| add_op(o)));
    let relations: Vec<&KnowledgeObject> = to_add.into_iter().filter(|o| o.is_relation()).collect();
    ops.extend(participants_first(&relations).into_iter().map(add_op));
    ops
}

/// Emits the removals of the affected ids: relations first (each after the affected relations that
/// name it), then plain objects. A simulated cascade keeps the ops valid even for cyclic relations
/// (which only a parsed, never an evolved, structure can hold): an id already swept away by an
/// earlier cascade gets no op of its own.
fn push_removals<'s>(source: &BaseView<'s>, affected: &IndexSet<&'s str>, ops: &mut Vec<Operation>) {
    let is_relation = |id: &str| source.get(id).is_some_and(|o| o.is_relation());
    // Depth-first post-order over "is named by" edges, iterative so deep chains cannot overflow.
    let mut order: Vec<&'s str> = Vec::new();
    let mut seen: HashSet<&'s str> = HashSet::new();
    for &start in affected.iter().filter(|id| is_relation(id)) {
        if !seen.insert(start) {
            continue;
        }
        let mut stack: Vec<(&'s str, Vec<&'s str>, usize)> = vec![(start, source.relations_of(start), 0)];
        while let Some((id, namers, next)) = stack.pop() {
            if let Some(&namer) = namers.get(next) {
                stack.push((id, namers, next + 1));
                if seen.insert(namer) {
                    stack.push((namer, source.relations_of(namer), 0));
                }
            } else {
                order.push(id);
            }
        }
    }

    let mut gone: HashSet<&str> = HashSet::new();
    for id in order {
        if sweep(source, id, &mut gone) {
            ops.push(Operation::RemoveRelation { relation_id: id.to_owned() });
        }
    }
    for &id in affected.iter().filter(|id| !is_relation(id)) {
        if sweep(source, id, &mut gone) {
            ops.push(Operation::RemoveObject { object_id: id.to_owned() });
        }
    }
}

/// Marks `id` and everything its removal would cascade to as gone; false if it already was.
fn sweep<'s>(source: &BaseView<'s>, id: &'s str, gone: &mut HashSet<&'s str>) -> bool {
    if gone.contains(id) {
        return false;
    }
    let mut stack = vec![id];
    while let Some(next) = stack.pop() {
        if gone.insert(next) {
            stack.extend(source.relations_of(next).into_iter().filter(|r| !gone.contains(r)));
        }
    }
    true
}

/// Orders relations so that a relation comes after the relations (from the same list) it names;
/// otherwise the input order is kept. Cycles are broken at the back edge instead of looping.
fn participants_first<'a>(relations: &[&'a KnowledgeObject]) -> Vec<&'a KnowledgeObject> {
    let by_id: HashMap<&str, &KnowledgeObject> = relations.iter().map(|o| (o.id(), *o)).collect();
    let mut seen: HashSet<&str> = HashSet::with_capacity(relations.len());
    let mut order = Vec::with_capacity(relations.len());
    for relation in relations {
        if !seen.insert(relation.id()) {
            continue;
        }
        let mut stack: Vec<(&KnowledgeObject, usize)> = vec![(relation, 0)];
        while let Some((object, next)) = stack.pop() {
            let participant = object.relation().and_then(|r| r.participants.get(next).copied());
            match participant {
                Some(p) => {
                    stack.push((object, next + 1));
                    if let Some(named) = by_id.get(p).filter(|_| seen.insert(p)) {
                        stack.push((named, 0));
                    }
                }
                None => order.push(object),
            }
        }
    }
    order
}

/// The operation that adds `object` (taken from the target) to a structure.
fn add_op(object: &KnowledgeObject) -> Operation {
    let identity = object.identity.clone();
    match object.relation() {
        Some(relation) => {
            let mut structure = object.structure.clone();
            structure.remove(PARTICIPANTS);
            structure.remove(RELATION_TYPE);
            Operation::AddRelation {
                participants: relation.participants.iter().map(|p| (*p).to_owned()).collect(),
                relation_type: relation.relation_type.to_owned(),
                identity,
                structure,
            }
        }
        // Not a well-formed relation: structures never hold such an object, but if one appears
        // `add_object` will shape-check it and report the problem instead of us guessing.
        None => Operation::AddObject { identity, structure: object.structure.clone() },
    }
}

/// Ids that differ between two structures, split into objects and relations.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DiffSummary {
    /// In the target only, target order.
    pub added_objects: Vec<String>,
    /// In the source only, source order.
    pub removed_objects: Vec<String>,
    /// In both with different content, target order.
    pub modified_objects: Vec<String>,
    pub added_relations: Vec<String>,
    pub removed_relations: Vec<String>,
    pub modified_relations: Vec<String>,
}

impl DiffSummary {
    /// True when the two structures hold the same objects.
    pub fn is_empty(&self) -> bool {
        self.added_objects.is_empty()
            && self.removed_objects.is_empty()
            && self.modified_objects.is_empty()
            && self.added_relations.is_empty()
            && self.removed_relations.is_empty()
            && self.modified_relations.is_empty()
    }
}

/// Summarizes what changed from `source` to `target`. Relation or object is decided by
/// `is_relation()` on the side that has the object (the target's version for modified ids).
pub fn summarize(source: &KnowledgeStructure, target: &KnowledgeStructure) -> DiffSummary {
    summarize_from(Base::Whole(source), target)
}

/// [`summarize`] from any base. From a [`Base::Rewound`] one the removed ids are listed in the
/// order they were first changed (the base's own order is not kept).
pub fn summarize_from(base: Base<'_>, target: &KnowledgeStructure) -> DiffSummary {
    let mut summary = DiffSummary::default();
    let mut classify = |before: Option<&crate::structure::Entry>, after: &crate::structure::Entry| {
        let object = &after.object;
        let list = match (before, object.is_relation()) {
            (None, false) => &mut summary.added_objects,
            (None, true) => &mut summary.added_relations,
            (Some(s), _) if s.hash == after.hash => return,
            (Some(_), false) => &mut summary.modified_objects,
            (Some(_), true) => &mut summary.modified_relations,
        };
        list.push(object.identity.id.to_string());
    };
    let source = BaseView::new(base, target);
    let removed: Vec<&KnowledgeObject> = match base {
        Base::Whole(structure) => {
            for entry in target.entries() {
                classify(structure.entry(entry.object.id()), entry);
            }
            structure.objects().filter(|o| !target.contains(o.id())).map(|o| &**o).collect()
        }
        Base::Rewound(rewind) => {
            let mut present: Vec<(usize, &crate::structure::Entry)> =
                rewind.changed().filter_map(|(id, _)| target.entry_full(id).map(|(i, _, e)| (i, e))).collect();
            present.sort_unstable_by_key(|(i, _)| *i);
            for (_, entry) in present {
                classify(source.entry(entry.object.id()), entry);
            }
            rewind
                .changed()
                .filter(|(id, _)| !target.contains(id))
                .filter_map(|(_, before)| before.map(|e| &*e.object))
                .collect()
        }
    };
    for object in removed {
        let list = if object.is_relation() { &mut summary.removed_relations } else { &mut summary.removed_objects };
        list.push(object.identity.id.to_string());
    }
    summary
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::parse_str;
    use crate::ops::apply;
    use crate::rewind::Rewind;
    use crate::testing::{arb_edits, arb_structure, mutate, mutate_logged};
    use proptest::prelude::*;
    use serde_json::json;

    fn structure(objects: serde_json::Value) -> KnowledgeStructure {
        crate::json::parse_value(json!({ "objects": objects })).unwrap()
    }

    fn node(id: &str, v: i64) -> serde_json::Value {
        json!({"identity": {"id": id, "type": "Node", "name": id}, "structure": {"v": v}})
    }

    fn rel(id: &str, participants: &[&str], ty: &str) -> serde_json::Value {
        json!({"identity": {"id": id, "type": "Relation", "name": id},
               "structure": {"participants": participants, "relation_type": ty, "w": 1}})
    }

    fn wire(ops: &[Operation]) -> Vec<String> {
        ops.iter().map(|o| o.to_string()).collect()
    }

    fn applied(source: &KnowledgeStructure, ops: &[Operation]) -> KnowledgeStructure {
        let mut next = source.clone();
        apply(&mut next, ops).unwrap();
        next
    }

    #[test]
    fn identical_structures_need_no_ops() {
        let s = structure(json!([node("a", 1), node("b", 2), rel("r", &["a", "b"], "x")]));
        assert!(diff(&s, &s).is_empty());
        assert!(summarize(&s, &s).is_empty());
    }

    #[test]
    fn modification_cascades_to_relations_and_re_adds_them() {
        // r2 names r1, which names a: modifying a affects a, r1 and r2.
        let source = structure(json!([
            node("a", 1),
            node("b", 2),
            node("c", 3),
            rel("r1", &["a", "b"], "x"),
            rel("r2", &["r1", "c"], "meta"),
            rel("r3", &["b", "c"], "x"),
        ]));
        let target = structure(json!([
            node("a", 10),
            node("b", 2),
            node("c", 3),
            rel("r1", &["a", "b"], "x"),
            rel("r2", &["r1", "c"], "meta"),
            rel("r3", &["b", "c"], "x"),
            node("d", 4),
        ]));
        let ops = diff(&source, &target);
        assert_eq!(
            wire(&ops),
            [
                "remove_relation 'r2'",
                "remove_relation 'r1'",
                "remove_object 'a'",
                "add_object 'a'",
                "add_object 'd'",
                "add_relation 'r1'",
                "add_relation 'r2'",
            ]
        );
        let Operation::AddRelation { participants, relation_type, structure, .. } = &ops[5] else { panic!() };
        assert_eq!(participants, &["a", "b"]);
        assert_eq!(relation_type, "x");
        assert_eq!(serde_json::Value::from(structure.clone()), json!({"w": 1}));
        assert!(applied(&source, &ops).same_content(&target));
    }

    #[test]
    fn relation_naming_a_relation_is_added_after_it() {
        let source = structure(json!([node("a", 1), node("b", 2)]));
        // In target order the meta relation comes first; it must be added second.
        let target = structure(json!([
            rel("meta", &["r", "a"], "about"),
            node("a", 1),
            node("b", 2),
            rel("r", &["a", "b"], "x"),
        ]));
        let ops = diff(&source, &target);
        assert_eq!(wire(&ops), ["add_relation 'r'", "add_relation 'meta'"]);
        assert!(applied(&source, &ops).same_content(&target));
    }

    #[test]
    fn removals_and_kind_changes() {
        let source = structure(json!([node("a", 1), node("b", 2), rel("r", &["a", "b"], "x"), node("k", 0)]));
        // k turns from an object into a relation; b goes away, taking r with it.
        let target = structure(json!([node("a", 1), rel("k", &["a", "a"], "self")]));
        let ops = diff(&source, &target);
        assert_eq!(wire(&ops), ["remove_relation 'r'", "remove_object 'b'", "remove_object 'k'", "add_relation 'k'"]);
        assert!(applied(&source, &ops).same_content(&target));
        let summary = summarize(&source, &target);
        assert_eq!(
            summary,
            DiffSummary {
                removed_objects: vec!["b".into()],
                removed_relations: vec!["r".into()],
                modified_relations: vec!["k".into()],
                ..Default::default()
            }
        );
    }

    #[test]
    fn summary_lists_ids_in_order() {
        let source = structure(json!([node("a", 1), node("b", 2), node("c", 3), rel("r", &["a", "b"], "x")]));
        let target = parse_str(
            r#"{"objects": [
            {"identity": {"id": "c", "type": "Node", "name": "c"}, "structure": {"v": 30}},
            {"identity": {"id": "z", "type": "Node", "name": "z"}},
            {"identity": {"id": "a", "type": "Node", "name": "a"}, "structure": {"v": 1}},
            {"identity": {"id": "r", "type": "Relation", "name": "r"}, "structure": {"participants": ["a", "c"], "relation_type": "x", "w": 1}},
            {"identity": {"id": "r9", "type": "Relation", "name": "r9"}, "structure": {"participants": ["a", "z"], "relation_type": "y"}}
        ]}"#,
        )
        .unwrap();
        let summary = summarize(&source, &target);
        assert_eq!(summary.added_objects, ["z"]);
        assert_eq!(summary.removed_objects, ["b"]);
        assert_eq!(summary.modified_objects, ["c"]);
        assert_eq!(summary.added_relations, ["r9"]);
        assert_eq!(summary.modified_relations, ["r"]);
        assert!(summary.removed_relations.is_empty());
        assert!(applied(&source, &diff(&source, &target)).same_content(&target));
    }

    #[test]
    fn cyclic_relations_do_not_break_the_ops() {
        // Only a parsed document can hold a relation cycle; removing it must still apply cleanly.
        let source = structure(json!([node("a", 1), rel("r1", &["a", "r2"], "x"), rel("r2", &["a", "r1"], "x")]));
        let target = structure(json!([node("a", 2)]));
        let ops = diff(&source, &target);
        assert!(applied(&source, &ops).same_content(&target));
        assert_eq!(ops.iter().filter(|o| matches!(o, Operation::RemoveRelation { .. })).count(), 1);
    }

    proptest! {
        #[test]
        fn applying_the_diff_reaches_the_target((a, edits) in arb_structure().prop_flat_map(|a| (Just(a), arb_edits()))) {
            let b = mutate(&a, &edits);
            let ops = diff(&a, &b);
            let mut next = a.clone();
            let result = apply(&mut next, &ops);
            prop_assert!(result.is_ok(), "{:?}", result.err());
            prop_assert!(next.same_content(&b));
            // And the way back.
            let back = diff(&b, &a);
            let mut prev = b.clone();
            prop_assert!(apply(&mut prev, &back).is_ok());
            prop_assert!(prev.same_content(&a));
            prop_assert!(diff(&a, &a).is_empty());
            let summary = summarize(&a, &b);
            prop_assert_eq!(summary.is_empty(), a.same_content(&b));
        }

        #[test]
        fn a_rewound_base_diffs_like_the_whole_one((a, edits) in arb_structure().prop_flat_map(|a| (Just(a), arb_edits()))) {
            let (b, log) = mutate_logged(&a, &edits);
            let mut rewind = Rewind::default();
            rewind.record_change_set(&log);
            prop_assert_eq!(rewind.root_hash(&b), a.root_hash());
            let whole = wire(&diff(&a, &b));
            let rewound_ops = diff_from(Base::Rewound(&rewind), &b);
            let rewound = wire(&rewound_ops);
            // Removals come first in both; only their order may differ.
            let removals = |ops: &[String]| {
                let mut removals: Vec<String> = ops.iter().filter(|o| o.starts_with("remove_")).cloned().collect();
                removals.sort();
                removals
            };
            prop_assert_eq!(removals(&whole), removals(&rewound));
            let additions = |ops: &[String]| ops.iter().filter(|o| o.starts_with("add_")).cloned().collect::<Vec<_>>();
            prop_assert_eq!(additions(&whole), additions(&rewound));
            prop_assert!(applied(&a, &rewound_ops).same_content(&b));
            let sorted = |mut ids: Vec<String>| { ids.sort(); ids };
            let (w, r) = (summarize(&a, &b), summarize_from(Base::Rewound(&rewind), &b));
            prop_assert_eq!(&w.added_objects, &r.added_objects);
            prop_assert_eq!(&w.modified_objects, &r.modified_objects);
            prop_assert_eq!(&w.added_relations, &r.added_relations);
            prop_assert_eq!(&w.modified_relations, &r.modified_relations);
            prop_assert_eq!(sorted(w.removed_objects), sorted(r.removed_objects));
            prop_assert_eq!(sorted(w.removed_relations), sorted(r.removed_relations));
        }
    }
}
