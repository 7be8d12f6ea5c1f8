//! Three-way merge of two branches that share a base version.
//!
//! Rules (those of the reference):
//! - Each id is judged by entry hashes. A branch *changed* an id when its hash differs from the
//!   base's (added, removed or modified all count). An id changed by one branch takes that branch's
//!   version (or absence); an id changed by neither keeps the base's.
//! - An id *conflicts* only when both branches changed it and ended with different hashes; both
//!   deleting it, or both making the identical change, converges without a conflict.
//! - Every conflict needs a [`Resolution`]; a resolution for an id that does not conflict is an
//!   error (it usually means the caller merged against the wrong base), and unresolved conflicts are
//!   all reported at once, sorted by id.
//! - Order of the result: surviving base ids in base order (each value from the winning side, in
//!   place), then ids added on branch A in A's order, then ids added only on branch B in B's order.
//! - Fast paths (no resolutions given): if branch B has the base's content the result is exactly
//!   branch A, and vice versa, so `merge(base, a, base) == a` and `merge(base, base, b) == b` hold
//!   with exact equality (order included).
//! - Finally every relation that names a missing object is dropped, transitively (a relation naming
//!   a dropped relation goes too), and reported, so a merge never leaves a dangling reference.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use crate::json::parse_object;
use crate::object::KnowledgeObject;
use crate::structure::{ChangeSet, Entry, KnowledgeStructure};

/// How one conflicting id is settled.
#[derive(Clone, Debug, PartialEq)]
pub enum Resolution {
    /// Take branch A's version (or its deletion).
    BranchA,
    /// Take branch B's version (or its deletion).
    BranchB,
    /// Leave the id out of the result (JSON `null`).
    Drop,
    /// Use this object; its id must be the conflicting id.
    Object(KnowledgeObject),
}

/// Resolutions keyed by object id.
pub type Resolutions = BTreeMap<String, Resolution>;

/// One id that both branches changed differently.
#[derive(Clone, Debug, PartialEq)]
pub struct Conflict {
    pub object_id: String,
    pub base: Option<Arc<KnowledgeObject>>,
    pub branch_a: Option<Arc<KnowledgeObject>>,
    pub branch_b: Option<Arc<KnowledgeObject>>,
}

/// The merged structure and what the merge had to do to get there.
#[derive(Clone, Debug, PartialEq)]
pub struct MergeOutcome {
    pub structure: KnowledgeStructure,
    /// Relations left out because a participant was missing, in merged order.
    pub dropped_relations: Vec<String>,
    /// Conflicting ids settled by a resolution, sorted.
    pub conflicts_resolved: Vec<String>,
}

/// Why a merge did not produce a structure.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum MergeError {
    #[error("{}", conflicts_message(.0))]
    Conflicts(Vec<Conflict>),
    #[error("resolution given for '{0}', which is not in conflict")]
    ResolutionNotNeeded(String),
    #[error("invalid resolution for '{id}': {message}")]
    InvalidResolution { id: String, message: String },
    #[error("resolutions must be a JSON object mapping object ids to resolutions")]
    ResolutionsNotAnObject,
}

fn conflicts_message(conflicts: &[Conflict]) -> String {
    let ids: Vec<&str> = conflicts.iter().map(|c| c.object_id.as_str()).collect();
    format!(
        "merge has {} unresolved conflict(s): {}; resolve each with \"branch_a\", \"branch_b\", null or an object",
        ids.len(),
        ids.join(", ")
    )
}

impl fmt::Display for Resolution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Resolution::BranchA => f.write_str("branch_a"),
            Resolution::BranchB => f.write_str("branch_b"),
            Resolution::Drop => f.write_str("null"),
            Resolution::Object(object) => write!(f, "{object}"),
        }
    }
}

/// Parses `{"id": "branch_a" | "branch_b" | null | {identity, structure}}`.
pub fn parse_resolutions(value: &Value) -> Result<Resolutions, MergeError> {
    let Value::Object(map) = value else { return Err(MergeError::ResolutionsNotAnObject) };
    let mut resolutions = Resolutions::new();
    for (id, raw) in map {
        let invalid = |message: String| MergeError::InvalidResolution { id: id.clone(), message };
        let resolution = match raw {
            Value::String(s) if s == "branch_a" => Resolution::BranchA,
            Value::String(s) if s == "branch_b" => Resolution::BranchB,
            Value::Null => Resolution::Drop,
            Value::Object(_) => {
                let object = parse_object(0, raw.clone()).map_err(|e| {
                    // `parse_object` numbers its messages for documents; a resolution has no index.
                    let message = e.to_string();
                    invalid(message.strip_prefix("Object #0: ").unwrap_or(&message).to_owned())
                })?;
                if object.id() != id {
                    return Err(invalid(format!("the object's identity.id is '{}'", object.id())));
                }
                Resolution::Object(object)
            }
            other => {
                return Err(invalid(format!("expected \"branch_a\", \"branch_b\", null or an object, got {other}")));
            }
        };
        resolutions.insert(id.clone(), resolution);
    }
    Ok(resolutions)
}

/// The merged value of one id: an entry taken from one of the inputs, or a resolution's object.
enum Merged<'a> {
    Entry(&'a Entry),
    Object(&'a KnowledgeObject),
}

/// The three inputs of a merge and the caller's resolutions.
struct Sides<'s> {
    base: &'s KnowledgeStructure,
    branch_a: &'s KnowledgeStructure,
    branch_b: &'s KnowledgeStructure,
    resolutions: &'s Resolutions,
}

impl<'s> Sides<'s> {
    /// The merged value of `id` (`None`: absent from the result). Conflicts without a resolution
    /// are collected into `unresolved` so that all of them can be reported together.
    fn decide(&self, id: &str, unresolved: &mut Vec<Conflict>) -> Option<Merged<'s>> {
        let (o, a, b) = (self.base.entry(id), self.branch_a.entry(id), self.branch_b.entry(id));
        let (ho, ha, hb) = (o.map(|e| e.hash), a.map(|e| e.hash), b.map(|e| e.hash));
        // Unchanged on B, or the same change on both: A's value. Unchanged on A: B's value.
        if hb == ho || ha == hb {
            return a.map(Merged::Entry);
        }
        if ha == ho {
            return b.map(Merged::Entry);
        }
        match self.resolutions.get(id) {
            Some(Resolution::BranchA) => a.map(Merged::Entry),
            Some(Resolution::BranchB) => b.map(Merged::Entry),
            Some(Resolution::Drop) => None,
            Some(Resolution::Object(object)) => Some(Merged::Object(object)),
            None => {
                let object = |e: Option<&Entry>| e.map(|e| e.object.clone());
                unresolved.push(Conflict {
                    object_id: id.to_owned(),
                    base: object(o),
                    branch_a: object(a),
                    branch_b: object(b),
                });
                None
            }
        }
    }
}

/// Merges `branch_a` and `branch_b`, both derived from `base`.
///
/// Errors: [`MergeError::ResolutionNotNeeded`] for a resolution of an id that does not conflict
/// (checked first, in id order), [`MergeError::Conflicts`] listing every conflict left unresolved,
/// [`MergeError::InvalidResolution`] for a resolution object with another id or a malformed
/// relation shape.
pub fn merge(
    base: &KnowledgeStructure,
    branch_a: &KnowledgeStructure,
    branch_b: &KnowledgeStructure,
    resolutions: &Resolutions,
) -> Result<MergeOutcome, MergeError> {
    if resolutions.is_empty() {
        // With a resolution given, the general path reports it as not needed.
        let fast = if branch_b.same_content(base) {
            Some(branch_a)
        } else if branch_a.same_content(base) {
            Some(branch_b)
        } else {
            None
        };
        if let Some(result) = fast {
            return Ok(MergeOutcome {
                structure: result.clone(),
                dropped_relations: Vec::new(),
                conflicts_resolved: Vec::new(),
            });
        }
    }

    let hash = |s: &KnowledgeStructure, id: &str| s.entry(id).map(|e| e.hash);
    let conflicting = |id: &str| {
        let (o, a, b) = (hash(base, id), hash(branch_a, id), hash(branch_b, id));
        a != o && b != o && a != b
    };
    if let Some(id) = resolutions.keys().find(|id| !conflicting(id)) {
        return Err(MergeError::ResolutionNotNeeded(id.clone()));
    }

    let sides = Sides { base, branch_a, branch_b, resolutions };
    let mut unresolved: Vec<Conflict> = Vec::new();
    let mut order: Vec<(&str, Merged<'_>)> = Vec::new();
    let added_on_a = branch_a.ids().filter(|id| !base.contains(id));
    let added_on_b = branch_b.ids().filter(|id| !base.contains(id) && !branch_a.contains(id));
    for id in base.ids().chain(added_on_a).chain(added_on_b) {
        if let Some(value) = sides.decide(id, &mut unresolved) {
            order.push((id, value));
        }
    }
    if !unresolved.is_empty() {
        unresolved.sort_by(|x, y| x.object_id.cmp(&y.object_id));
        return Err(MergeError::Conflicts(unresolved));
    }

    let mut structure = KnowledgeStructure::new();
    let mut log = ChangeSet::default();
    for (id, value) in order {
        match value {
            Merged::Entry(entry) => structure.put_entry(entry.clone(), &mut log),
            Merged::Object(object) => {
                if object.id() != id {
                    let message = format!("the object's identity.id is '{}'", object.id());
                    return Err(MergeError::InvalidResolution { id: id.to_owned(), message });
                }
                structure
                    .put(object.clone(), &mut log)
                    .map_err(|e| MergeError::InvalidResolution { id: id.to_owned(), message: e.to_string() })?;
            }
        }
        // The merge is built from scratch; there is nothing to undo.
        log.changes.clear();
    }

    let dropped_relations = drop_dangling(&mut structure);
    Ok(MergeOutcome { structure, dropped_relations, conflicts_resolved: resolutions.keys().cloned().collect() })
}

/// Removes every relation with a participant that is not in the structure, and transitively the
/// relations naming removed ones. Returns their ids in structure order.
fn drop_dangling(structure: &mut KnowledgeStructure) -> Vec<String> {
    let mut dropped: HashSet<String> = HashSet::new();
    let mut pending: Vec<String> = structure
        .relations()
        .filter(|r| {
            r.relation().is_some_and(|view| view.participants.iter().any(|p| !structure.contains(p) && *p != r.id()))
        })
        .map(|r| r.identity.id.to_string())
        .collect();
    while let Some(id) = pending.pop() {
        if dropped.insert(id.clone()) {
            pending.extend(
                structure.relations_of(&id).iter().map(|r| r.id()).filter(|r| !dropped.contains(*r)).map(str::to_owned),
            );
        }
    }
    if dropped.is_empty() {
        return Vec::new();
    }
    let ordered: Vec<String> = structure.ids().filter(|id| dropped.contains(*id)).map(str::to_owned).collect();
    // Rebuild rather than remove one by one: each removal shifts the order, O(n) apiece.
    let mut kept = KnowledgeStructure::new();
    let mut log = ChangeSet::default();
    for entry in structure.entries().filter(|e| !dropped.contains(e.object.id())) {
        kept.put_entry(entry.clone(), &mut log);
        log.changes.clear();
    }
    *structure = kept;
    ordered
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{arb_edits, arb_structure, is_closed, mutate, node, relation};
    use proptest::prelude::*;
    use serde_json::json;

    fn build(objects: Vec<KnowledgeObject>) -> KnowledgeStructure {
        KnowledgeStructure::from_objects(objects).unwrap()
    }

    fn base() -> KnowledgeStructure {
        build(vec![
            node("a", "Claim", 1),
            node("b", "Claim", 2),
            node("c", "Claim", 3),
            relation("r", &["a", "b"], "supports"),
        ])
    }

    fn with(s: &KnowledgeStructure, object: KnowledgeObject) -> KnowledgeStructure {
        let mut s = s.clone();
        s.put(object, &mut ChangeSet::default()).unwrap();
        s
    }

    fn without(s: &KnowledgeStructure, id: &str) -> KnowledgeStructure {
        let mut s = s.clone();
        s.remove_cascading(id, &mut ChangeSet::default());
        s
    }

    fn ids(s: &KnowledgeStructure) -> Vec<&str> {
        s.ids().collect()
    }

    fn none() -> Resolutions {
        Resolutions::new()
    }

    fn conflict_ids(err: MergeError) -> Vec<String> {
        match err {
            MergeError::Conflicts(conflicts) => conflicts.into_iter().map(|c| c.object_id).collect(),
            other => panic!("expected conflicts, got {other}"),
        }
    }

    #[test]
    fn fast_paths_return_the_changed_branch_exactly() {
        let base = base();
        let a = with(&without(&base, "c"), node("d", "Claim", 4));
        assert_eq!(merge(&base, &a, &base, &none()).unwrap().structure, a);
        assert_eq!(merge(&base, &base, &a, &none()).unwrap().structure, a);
    }

    #[test]
    fn both_deleting_converges() {
        let base = base();
        let a = with(&without(&base, "c"), node("a", "Claim", 10));
        let b = with(&without(&base, "c"), node("b", "Claim", 20));
        let out = merge(&base, &a, &b, &none()).unwrap();
        assert_eq!(ids(&out.structure), ["a", "b", "r"]);
        assert_eq!(out.structure.get("a").unwrap().structure["v"], 10);
        assert_eq!(out.structure.get("b").unwrap().structure["v"], 20);
        assert!(out.dropped_relations.is_empty() && out.conflicts_resolved.is_empty());
    }

    #[test]
    fn identical_changes_converge_and_one_sided_changes_win() {
        let base = base();
        let a = with(&with(&base, node("a", "Claim", 7)), node("new", "Source", 1));
        let b = with(&with(&with(&base, node("a", "Claim", 7)), node("new", "Source", 1)), node("c", "Claim", 9));
        let out = merge(&base, &a, &b, &none()).unwrap();
        assert_eq!(ids(&out.structure), ["a", "b", "c", "r", "new"]);
        assert_eq!(out.structure.get("a").unwrap().structure["v"], 7);
        assert_eq!(out.structure.get("c").unwrap().structure["v"], 9);
    }

    #[test]
    fn additions_follow_a_then_b_order() {
        let base = base();
        let a = with(&with(&base, node("a2", "Claim", 0)), node("a1", "Claim", 0));
        let b = with(&with(&base, node("b1", "Claim", 0)), node("a1", "Claim", 0));
        let b = with(&b, node("c", "Claim", 30));
        let out = merge(&base, &a, &b, &none()).unwrap();
        assert_eq!(ids(&out.structure), ["a", "b", "c", "r", "a2", "a1", "b1"]);
        assert_eq!(out.structure.get("c").unwrap().structure["v"], 30);
    }

    #[test]
    fn differing_changes_conflict_and_are_all_reported() {
        let base = base();
        // c: modified on both; b: modified on A, deleted on B; x: added on both differently.
        let a = with(&with(&with(&base, node("c", "Claim", 10)), node("b", "Claim", 5)), node("x", "Claim", 1));
        let b = with(&with(&without(&base, "b"), node("c", "Claim", 20)), node("x", "Claim", 2));
        let err = merge(&base, &a, &b, &none()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "merge has 3 unresolved conflict(s): b, c, x; resolve each with \"branch_a\", \"branch_b\", null or an object"
        );
        let MergeError::Conflicts(conflicts) = err else { unreachable!() };
        let b_conflict = &conflicts[0];
        assert_eq!(b_conflict.base.as_deref(), Some(&node("b", "Claim", 2)));
        assert_eq!(b_conflict.branch_a.as_deref(), Some(&node("b", "Claim", 5)));
        assert_eq!(b_conflict.branch_b, None);
        assert_eq!(conflicts[2].base, None);

        // Partial resolutions still report what is left.
        let partial = Resolutions::from([("c".to_owned(), Resolution::BranchA)]);
        assert_eq!(conflict_ids(merge(&base, &a, &b, &partial).unwrap_err()), ["b", "x"]);
    }

    #[test]
    fn each_resolution_kind_applies() {
        let base = base();
        let a = with(&with(&with(&base, node("c", "Claim", 10)), node("b", "Claim", 5)), node("x", "Claim", 1));
        let b = with(&with(&without(&base, "b"), node("c", "Claim", 20)), node("x", "Claim", 2));
        let resolutions = parse_resolutions(&json!({
            "b": "branch_b",
            "c": {"identity": {"id": "c", "type": "Claim", "name": "merged"}, "structure": {"v": 15}},
            "x": null,
        }))
        .unwrap();
        let out = merge(&base, &a, &b, &resolutions).unwrap();
        // b deleted (B's side) took relation r with it on branch B; r is unchanged on A, so B's
        // deletion of r stands too.
        assert_eq!(ids(&out.structure), ["a", "c"]);
        assert_eq!(out.structure.get("c").unwrap().identity.name, "merged");
        assert_eq!(out.conflicts_resolved, ["b", "c", "x"]);

        let keep_a = Resolutions::from([
            ("b".to_owned(), Resolution::BranchA),
            ("c".to_owned(), Resolution::BranchB),
            ("x".to_owned(), Resolution::BranchA),
        ]);
        let out = merge(&base, &a, &b, &keep_a).unwrap();
        // b kept from A, but r was deleted on B only (A left it unchanged), so r is gone.
        assert_eq!(ids(&out.structure), ["a", "b", "c", "x"]);
        assert_eq!(out.structure.get("b").unwrap().structure["v"], 5);
        assert_eq!(out.structure.get("c").unwrap().structure["v"], 20);
        assert_eq!(out.structure.get("x").unwrap().structure["v"], 1);
    }

    #[test]
    fn dangling_relations_are_dropped_transitively_and_reported() {
        let base = base();
        // A deletes a (cascading r away); B adds s naming r, and t naming s.
        let a = without(&base, "a");
        let b = with(&with(&base, relation("s", &["r", "c"], "about")), relation("t", &["s", "b"], "about"));
        let out = merge(&base, &a, &b, &none()).unwrap();
        assert_eq!(ids(&out.structure), ["b", "c"]);
        assert_eq!(out.dropped_relations, ["s", "t"]);
        assert!(is_closed(&out.structure));
    }

    #[test]
    fn resolution_errors() {
        let base = base();
        let a = with(&base, node("c", "Claim", 10));
        let b = with(&base, node("c", "Claim", 20));
        let not_needed = Resolutions::from([("a".to_owned(), Resolution::BranchA), ("c".to_owned(), Resolution::Drop)]);
        let err = merge(&base, &a, &b, &not_needed).unwrap_err();
        assert_eq!(err, MergeError::ResolutionNotNeeded("a".into()));
        assert_eq!(err.to_string(), "resolution given for 'a', which is not in conflict");
        // Also on the fast path: nothing conflicts there.
        let err = merge(&base, &a, &base, &not_needed).unwrap_err();
        assert_eq!(err, MergeError::ResolutionNotNeeded("a".into()));

        let mut bad = relation("c", &["a", "b"], "supports");
        bad.structure.insert("participants", json!(["a"]));
        let err = merge(&base, &a, &b, &Resolutions::from([("c".to_owned(), Resolution::Object(bad))])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid resolution for 'c': relation 'c' must have at least 2 participants (found 1)"
        );
        let err = merge(&base, &a, &b, &Resolutions::from([("c".to_owned(), Resolution::Object(node("d", "T", 0)))]))
            .unwrap_err();
        assert_eq!(err.to_string(), "invalid resolution for 'c': the object's identity.id is 'd'");
    }

    #[test]
    fn resolution_parsing() {
        assert_eq!(parse_resolutions(&json!([])).unwrap_err(), MergeError::ResolutionsNotAnObject);
        assert_eq!(
            parse_resolutions(&json!({"c": "branch_c"})).unwrap_err().to_string(),
            "invalid resolution for 'c': expected \"branch_a\", \"branch_b\", null or an object, got \"branch_c\""
        );
        assert_eq!(
            parse_resolutions(&json!({"c": {"identity": {"id": "d", "type": "T", "name": ""}}}))
                .unwrap_err()
                .to_string(),
            "invalid resolution for 'c': the object's identity.id is 'd'"
        );
        assert_eq!(
            parse_resolutions(&json!({"c": {"structure": {}}})).unwrap_err().to_string(),
            "invalid resolution for 'c': Missing object identity."
        );
        let parsed = parse_resolutions(&json!({"b": "branch_a", "a": "branch_b", "c": null})).unwrap();
        assert_eq!(
            parsed.into_iter().collect::<Vec<_>>(),
            [
                ("a".to_owned(), Resolution::BranchB),
                ("b".to_owned(), Resolution::BranchA),
                ("c".to_owned(), Resolution::Drop)
            ]
        );
    }

    proptest! {
        #[test]
        fn merging_with_an_unchanged_side_is_the_other_side(
            (base, edits) in arb_structure().prop_flat_map(|s| (Just(s), arb_edits()))
        ) {
            let a = mutate(&base, &edits);
            prop_assert_eq!(&merge(&base, &a, &base, &none()).unwrap().structure, &a);
            prop_assert_eq!(&merge(&base, &base, &a, &none()).unwrap().structure, &a);
            // Identical changes on both sides converge to the same content.
            let both = merge(&base, &a, &a, &none()).unwrap();
            prop_assert!(both.structure.same_content(&a));
        }

        #[test]
        fn merges_only_conflict_on_doubly_changed_ids_and_never_dangle(
            (base, ea, eb) in arb_structure().prop_flat_map(|s| (Just(s), arb_edits(), arb_edits()))
        ) {
            let a = mutate(&base, &ea);
            let b = mutate(&base, &eb);
            let hash = |s: &KnowledgeStructure, id: &str| s.entry(id).map(|e| e.hash);
            let outcome = match merge(&base, &a, &b, &none()) {
                Ok(outcome) => outcome,
                Err(MergeError::Conflicts(conflicts)) => {
                    for c in &conflicts {
                        let (o, x, y) = (hash(&base, &c.object_id), hash(&a, &c.object_id), hash(&b, &c.object_id));
                        prop_assert!(x != o && y != o && x != y, "{} is not a real conflict", c.object_id);
                    }
                    let all_a: Resolutions =
                        conflicts.iter().map(|c| (c.object_id.clone(), Resolution::BranchA)).collect();
                    merge(&base, &a, &b, &all_a).unwrap()
                }
                Err(other) => return Err(TestCaseError::fail(other.to_string())),
            };
            prop_assert!(is_closed(&outcome.structure));
            for id in &outcome.dropped_relations {
                prop_assert!(!outcome.structure.contains(id));
            }
        }
    }
}
