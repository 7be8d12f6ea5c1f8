//! The always-on constraints (dangling participants, `derives` arity, `derives` cycles), both as
//! whole-structure checks for [`super::validate`] and as the incremental [`check_changes`] used
//! on the commit path.

use indexmap::IndexMap;
use std::collections::{HashMap, HashSet};

use super::{CYCLE, DANGLING_REF, DERIVATION_ARITY, Diagnostic, Severity, Stage, binary, sort_diagnostics};
use crate::object::{DERIVES, RelationView};
use crate::structure::{ChangeSet, KnowledgeStructure};

fn dangling(relation_id: &str, participant: &str) -> Diagnostic {
    Diagnostic::new(
        DANGLING_REF,
        Severity::Error,
        Stage::Structural,
        format!("Relation '{relation_id}' references unknown object '{participant}'."),
        Some(relation_id),
    )
}

fn arity(relation_id: &str) -> Diagnostic {
    Diagnostic::new(
        DERIVATION_ARITY,
        Severity::Error,
        Stage::Semantic,
        "A derivation relation shall contain exactly two participants.",
        Some(relation_id),
    )
}

fn cycle(location: &str) -> Diagnostic {
    Diagnostic::new(CYCLE, Severity::Error, Stage::Semantic, "A derivation cycle was detected.", Some(location))
}

/// CKS-STRUCT-DANGLING-REF: one error per participant occurrence that names no object.
pub(crate) fn check_dangling_refs(structure: &KnowledgeStructure, out: &mut Vec<Diagnostic>) {
    // Each participant id is a key of the incidence index, once however many relations name it:
    // when every one names an object, nothing dangles, and the relations need not be read.
    if structure.participant_ids().all(|id| structure.contains(id)) {
        return;
    }
    for object in structure.relations() {
        if let Some(relation) = object.relation() {
            for participant in &relation.participants {
                if !structure.contains(participant) {
                    out.push(dangling(object.id(), participant));
                }
            }
        }
    }
}

/// CKS-SEM-DERIVATION-ARITY: a `derives` relation has exactly two participants.
pub(crate) fn check_derivation_arity(structure: &KnowledgeStructure, out: &mut Vec<Diagnostic>) {
    for object in structure.relations() {
        if let Some(relation) = object.relation()
            && relation.relation_type == DERIVES
            && relation.participants.len() != 2
        {
            out.push(arity(object.id()));
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Colour {
    Gray,
    Black,
}

/// CKS-SEM-CYCLE, exactly as the reference: adjacency over binary `derives` edges between
/// existing objects (roots in order of first appearance as a source, duplicate edges kept), an
/// iterative white/gray/black DFS, and one error per back edge at the back edge's tail.
pub(crate) fn check_derivation_cycles(structure: &KnowledgeStructure, out: &mut Vec<Diagnostic>) {
    let mut adjacency: IndexMap<&str, Vec<&str>> = IndexMap::new();
    for object in structure.relations() {
        let Some(relation) = object.relation() else {
            continue;
        };
        if relation.relation_type != DERIVES {
            continue;
        }
        if let Some((source, target)) = binary(&relation)
            && structure.contains(source)
            && structure.contains(target)
        {
            adjacency.entry(source).or_default().push(target);
        }
    }

    let mut colour: HashMap<&str, Colour> = HashMap::new();
    let empty: Vec<&str> = Vec::new();
    for root in adjacency.keys().copied() {
        if colour.contains_key(root) {
            continue;
        }
        colour.insert(root, Colour::Gray);
        // (node, index of the next neighbour to look at)
        let mut stack: Vec<(&str, usize)> = vec![(root, 0)];
        while let Some(frame) = stack.last_mut() {
            let node = frame.0;
            let neighbours = adjacency.get(node).unwrap_or(&empty);
            let mut descend = None;
            while let Some(&next) = neighbours.get(frame.1) {
                frame.1 += 1;
                match colour.get(next) {
                    Some(Colour::Gray) => out.push(cycle(node)),
                    Some(Colour::Black) => {}
                    None => {
                        descend = Some(next);
                        break;
                    }
                }
            }
            match descend {
                Some(next) => {
                    colour.insert(next, Colour::Gray);
                    stack.push((next, 0));
                }
                None => {
                    colour.insert(node, Colour::Black);
                    stack.pop();
                }
            }
        }
    }
}

/// The always-on **error** diagnostics that a change introduced, assuming the structure had none
/// before it. `after` is the structure with `changes` applied (they must be its latest changes).
///
/// Cost is proportional to the change: each net-changed relation is checked for dangling
/// participants and `derives` arity; each removed id is looked up in the incidence index for
/// relations that still name it; and each added or changed binary `derives` edge `(s, t)` between
/// existing objects runs a DFS from `t` over `derives` edges (only the derivation subgraph
/// reachable from `t`) looking for `s`. When one closes a cycle, the cycles are reported as the
/// full validator reports them (one DFS over the whole derivation graph: a refused change pays
/// for it, an accepted one never does).
///
/// This finds exactly the always-on errors the full [`super::validate`] finds, given that the
/// structure before the change had none: every new dangling reference is either on a changed
/// relation or names a removed id, and every new cycle contains a new edge.
pub fn check_changes(after: &KnowledgeStructure, changes: &ChangeSet) -> Vec<Diagnostic> {
    let net = changes.net();
    let mut out = Vec::new();
    let mut closes_a_cycle = false;

    // Relations added or changed by the change set: checked in full.
    for (id, change) in &net {
        if change.after.is_none() {
            continue;
        }
        let Some(object) = after.get(id) else {
            continue;
        };
        let Some(relation) = object.relation() else {
            continue;
        };
        for participant in &relation.participants {
            if !after.contains(participant) {
                out.push(dangling(id, participant));
            }
        }
        if relation.relation_type == DERIVES {
            match binary(&relation) {
                Some((source, target)) => {
                    closes_a_cycle = closes_a_cycle
                        || after.contains(source) && after.contains(target) && reaches(after, target, source);
                }
                None => out.push(arity(id)),
            }
        }
    }

    // Removed ids: unchanged relations that still name them now dangle.
    for (id, change) in &net {
        if change.after.is_some() || after.contains(id) {
            continue;
        }
        for relation in after.relations_of(id) {
            let relation_id = relation.id();
            if net.get(relation_id).is_some_and(|c| c.after.is_some()) {
                continue; // already checked in full above
            }
            let Some(relation) = relation.relation().map(|r| r.participants) else {
                continue;
            };
            for participant in relation.iter().filter(|p| **p == id.as_str()) {
                out.push(dangling(relation_id, participant));
            }
        }
    }

    if closes_a_cycle {
        check_derivation_cycles(after, &mut out);
    }
    sort_diagnostics(&mut out);
    out
}

/// The `(source, target)` of a binary `derives` relation, when `relation` is one.
fn derives_edge<'a>(relation: &RelationView<'a>) -> Option<(&'a str, &'a str)> {
    match (relation.relation_type, relation.participants.as_slice()) {
        (DERIVES, [source, target]) => Some((source, target)),
        _ => None,
    }
}

/// Whether `goal` is reachable from `start` over `derives` edges between existing objects
/// (`start == goal` counts: a self-loop).
fn reaches(structure: &KnowledgeStructure, start: &str, goal: &str) -> bool {
    if start == goal {
        return true;
    }
    let mut visited: HashSet<&str> = HashSet::from([start]);
    let mut stack = vec![start];
    while let Some(node) = stack.pop() {
        for relation in structure.derives_from(node) {
            let Some((_, target)) = relation.relation().as_ref().and_then(derives_edge) else {
                continue;
            };
            if !structure.contains(target) {
                continue;
            }
            if target == goal {
                return true;
            }
            if visited.insert(target) {
                stack.push(target);
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::super::{ValidationOptions, validate};
    use super::*;
    use crate::object::KnowledgeObject;
    use proptest::prelude::*;

    fn always_on(objects: Vec<KnowledgeObject>) -> Vec<(String, String, String)> {
        validate(&structure(objects), &ValidationOptions::default())
            .diagnostics
            .into_iter()
            .map(|d| (d.code, d.location.unwrap_or_default(), d.message))
            .collect()
    }

    fn triple(code: &str, location: &str, message: &str) -> (String, String, String) {
        (code.to_owned(), location.to_owned(), message.to_owned())
    }

    #[test]
    fn valid_graph_has_no_always_on_diagnostics() {
        let objects = vec![
            node("a"),
            node("b"),
            node("c"),
            rel("r1", &["a", "b"], "derives"),
            rel("r2", &["b", "c"], "derives"),
            rel("r3", &["a", "b", "c"], "groups"),
            rel("r4", &["r1", "r4"], "about"),
        ];
        assert_eq!(always_on(objects), []);
    }

    #[test]
    fn dangling_participants_are_reported_per_occurrence() {
        let objects = vec![node("a"), rel("r", &["ghost", "a", "ghost", "other"], "mentions")];
        assert_eq!(
            always_on(objects),
            [
                triple(DANGLING_REF, "r", "Relation 'r' references unknown object 'ghost'."),
                triple(DANGLING_REF, "r", "Relation 'r' references unknown object 'ghost'."),
                triple(DANGLING_REF, "r", "Relation 'r' references unknown object 'other'."),
            ]
        );
    }

    #[test]
    fn derives_with_three_participants_is_an_arity_error_and_no_edge() {
        let objects = vec![
            node("a"),
            node("b"),
            node("c"),
            rel("d", &["a", "b", "c"], "derives"),
            rel("e", &["a", "b"], "Derives"),
        ];
        assert_eq!(
            always_on(objects),
            [triple(DERIVATION_ARITY, "d", "A derivation relation shall contain exactly two participants.")]
        );
    }

    #[test]
    fn cycle_errors_are_at_the_back_edge_tail() {
        let msg = "A derivation cycle was detected.";
        assert_eq!(always_on(vec![node("a"), rel("r", &["a", "a"], "derives")]), [triple(CYCLE, "a", msg)]);
        let two = vec![node("a"), node("b"), rel("r1", &["a", "b"], "derives"), rel("r2", &["b", "a"], "derives")];
        assert_eq!(always_on(two), [triple(CYCLE, "b", msg)]);
        // Roots follow the first appearance of a source: here `b` is first, so the back edge is a -> b.
        let reordered =
            vec![node("a"), node("b"), rel("r2", &["b", "a"], "derives"), rel("r1", &["a", "b"], "derives")];
        assert_eq!(always_on(reordered), [triple(CYCLE, "a", msg)]);
        // Two back edges into one cycle give two errors; a duplicate edge gives another.
        let many = vec![
            node("a"),
            node("b"),
            node("c"),
            rel("r1", &["a", "b"], "derives"),
            rel("r2", &["b", "c"], "derives"),
            rel("r3", &["c", "a"], "derives"),
            rel("r4", &["c", "b"], "derives"),
            rel("r5", &["c", "a"], "derives"),
        ];
        assert_eq!(always_on(many), [triple(CYCLE, "c", msg), triple(CYCLE, "c", msg), triple(CYCLE, "c", msg)]);
    }

    #[test]
    fn dangling_derives_edges_are_not_cycle_edges() {
        let objects = vec![node("a"), rel("r1", &["a", "ghost"], "derives"), rel("r2", &["ghost", "a"], "derives")];
        let found = always_on(objects);
        assert_eq!(found.iter().filter(|d| d.0 == CYCLE).count(), 0);
        assert_eq!(found.iter().filter(|d| d.0 == DANGLING_REF).count(), 2);
    }

    #[test]
    fn deep_chain_does_not_overflow_the_stack() {
        let n = 20_000;
        let mut objects: Vec<KnowledgeObject> = (0..n).map(|i| node(&format!("n{i}"))).collect();
        for i in 0..n - 1 {
            objects.push(rel(&format!("d{i}"), &[&format!("n{i}"), &format!("n{}", i + 1)], "derives"));
        }
        objects.push(rel("back", &[&format!("n{}", n - 1), "n0"], "derives"));
        let found = always_on(objects);
        assert_eq!(found, [triple(CYCLE, &format!("n{}", n - 1), "A derivation cycle was detected.")]);
    }

    fn apply(s: &mut KnowledgeStructure, f: impl FnOnce(&mut KnowledgeStructure, &mut ChangeSet)) -> ChangeSet {
        let mut log = ChangeSet::default();
        f(s, &mut log);
        log
    }

    #[test]
    fn check_changes_reports_dangling_arity_and_cycles() {
        let mut s = structure(vec![
            node("a"),
            node("b"),
            node("c"),
            rel("r1", &["a", "b"], "derives"),
            rel("r2", &["b", "c"], "derives"),
            rel("m", &["a", "c"], "mentions"),
        ]);
        // Closing a cycle: c -> a.
        let log = apply(&mut s, |s, log| s.put(rel("r3", &["c", "a"], "derives"), log).unwrap());
        let found = check_changes(&s, &log);
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].code.as_str(), found[0].location.as_deref()), (CYCLE, Some("c")));
        assert_eq!(found[0].message, "A derivation cycle was detected.");
        s.undo(log);

        // Two new edges closing one cycle: one finding, where the full validator puts it.
        let log = apply(&mut s, |s, log| {
            s.put(rel("d1", &["c", "b"], "derives"), log).unwrap();
            s.put(rel("d2", &["b", "c"], "derives"), log).unwrap();
        });
        let found = check_changes(&s, &log);
        let mut full = Vec::new();
        check_derivation_cycles(&s, &mut full);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found, full);
        s.undo(log);

        // A raw remove leaves r2 and m dangling.
        let log = apply(&mut s, |s, log| {
            s.remove("c", log);
        });
        let found: Vec<_> =
            check_changes(&s, &log).into_iter().map(|d| (d.code, d.location.unwrap_or_default(), d.message)).collect();
        assert_eq!(
            found,
            [
                triple(DANGLING_REF, "m", "Relation 'm' references unknown object 'c'."),
                triple(DANGLING_REF, "r2", "Relation 'r2' references unknown object 'c'."),
            ]
        );
        s.undo(log);

        // A cascading remove leaves nothing behind.
        let log = apply(&mut s, |s, log| {
            s.remove_cascading("c", log);
        });
        assert_eq!(check_changes(&s, &log), []);
        s.undo(log);

        // A new relation with a missing participant and derives arity 3.
        let log = apply(&mut s, |s, log| s.put(rel("r9", &["a", "b", "zz"], "derives"), log).unwrap());
        let found: Vec<_> =
            check_changes(&s, &log).into_iter().map(|d| (d.code, d.location.unwrap_or_default(), d.message)).collect();
        assert_eq!(
            found,
            [
                triple(DERIVATION_ARITY, "r9", "A derivation relation shall contain exactly two participants."),
                triple(DANGLING_REF, "r9", "Relation 'r9' references unknown object 'zz'."),
            ]
        );
        s.undo(log);

        // Self-loop and a harmless change.
        let log = apply(&mut s, |s, log| s.put(rel("r1", &["a", "a"], "derives"), log).unwrap());
        assert_eq!(check_changes(&s, &log).iter().map(|d| d.location.as_deref()).collect::<Vec<_>>(), [Some("a")]);
        s.undo(log);
        let log = apply(&mut s, |s, log| s.put(node("d"), log).unwrap());
        assert_eq!(check_changes(&s, &log), []);
    }

    #[test]
    fn check_changes_only_walks_the_reachable_derivation_subgraph() {
        // A big derivation graph far away from the change: the DFS from the new edge's target
        // visits only what that target reaches.
        let mut objects: Vec<KnowledgeObject> = (0..2000).map(|i| node(&format!("n{i}"))).collect();
        for i in 0..1999 {
            objects.push(rel(&format!("d{i}"), &[&format!("n{i}"), &format!("n{}", i + 1)], "derives"));
        }
        objects.push(node("x"));
        objects.push(node("y"));
        let mut s = structure(objects);
        let log = apply(&mut s, |s, log| s.put(rel("e", &["x", "y"], "derives"), log).unwrap());
        assert_eq!(check_changes(&s, &log), []);
        let log2 = apply(&mut s, |s, log| s.put(rel("f", &["n1999", "n0"], "derives"), log).unwrap());
        assert_eq!(check_changes(&s, &log2).len(), 1);
    }

    /// One random edit.
    #[derive(Clone, Debug)]
    enum Op {
        PutNode(usize),
        PutRelation { id: usize, participants: Vec<usize>, derives: bool },
        Remove(usize),
        RemoveCascading(usize),
    }

    const POOL: usize = 12;

    fn id_of(i: usize) -> String {
        if i < POOL { format!("n{i}") } else { format!("r{}", i - POOL) }
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..POOL).prop_map(Op::PutNode),
            (0..POOL, prop::collection::vec(0..POOL + 2, 2..4), prop::bool::weighted(0.7))
                .prop_map(|(id, participants, derives)| Op::PutRelation { id: id + POOL, participants, derives }),
            (0..2 * POOL).prop_map(Op::Remove),
            (0..2 * POOL).prop_map(Op::RemoveCascading),
        ]
    }

    /// A valid graph: nodes n0..n{k}, forward-only `derives` edges (acyclic) and other relations.
    fn valid_graph() -> impl Strategy<Value = KnowledgeStructure> {
        (2..POOL, prop::collection::vec((0..POOL, 0..POOL, prop::bool::ANY), 0..14)).prop_map(|(n, edges)| {
            let mut objects: Vec<KnowledgeObject> = (0..n).map(|i| node(&id_of(i))).collect();
            for (k, (a, b, derives)) in edges.into_iter().enumerate() {
                let (a, b) = (a % n, b % n);
                let (lo, hi) = (a.min(b), a.max(b));
                if derives && lo != hi {
                    objects.push(rel(&id_of(POOL + k), &[&id_of(lo), &id_of(hi)], "derives"));
                } else {
                    objects.push(rel(&id_of(POOL + k), &[&id_of(a), &id_of(b)], "mentions"));
                }
            }
            structure(objects)
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

        #[test]
        fn check_changes_agrees_with_full_validation(start in valid_graph(), ops in prop::collection::vec(op(), 1..6)) {
            prop_assert!(validate(&start, &ValidationOptions::default()).diagnostics.is_empty());
            let mut s = start;
            let mut log = ChangeSet::default();
            for op in ops {
                match op {
                    Op::PutNode(i) => s.put(node(&id_of(i)), &mut log).unwrap(),
                    Op::PutRelation { id, participants, derives } => {
                        let names: Vec<String> = participants.iter().map(|&p| id_of(p)).collect();
                        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
                        s.put(rel(&id_of(id), &refs, if derives { "derives" } else { "mentions" }), &mut log).unwrap();
                    }
                    Op::Remove(i) => { s.remove(&id_of(i), &mut log); }
                    Op::RemoveCascading(i) => { s.remove_cascading(&id_of(i), &mut log); }
                }
            }
            let incremental = check_changes(&s, &log);
            let full = validate(&s, &ValidationOptions::default());
            prop_assert!(incremental.iter().all(|d| d.severity == Severity::Error));
            prop_assert_eq!(!incremental.is_empty(), !full.errors().is_empty(), "incremental {:?} full {:?}", incremental, full.diagnostics);
            // Exactly the full validator's findings, cycle locations included.
            let mut full_sorted = full.diagnostics.clone();
            sort_diagnostics(&mut full_sorted);
            prop_assert_eq!(incremental, full_sorted);
        }
    }
}
