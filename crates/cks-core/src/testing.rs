//! Shared proptest strategies: random knowledge structures and random edits of them.
//!
//! Structures are built from index-based recipes (so shrinking stays meaningful) and are always
//! referentially closed: relations name 2–3 existing objects, occasionally earlier relations, and
//! may repeat a participant. Edits keep that property, like evolution operations do.

use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::{Map, Value, json};

use crate::object::{Identity, KnowledgeObject, PARTICIPANTS, RELATION_TYPE};
use crate::structure::{ChangeSet, KnowledgeStructure};

/// Node types the strategies draw from (subgraph tests filter and weight by them).
pub(crate) const NODE_TYPES: [&str; 3] = ["Claim", "Source", "Person"];
/// Relation types the strategies draw from.
pub(crate) const RELATION_TYPES: [&str; 3] = ["supports", "cites", "about"];

pub(crate) fn node(id: &str, r#type: &str, value: i64) -> KnowledgeObject {
    let mut structure = Map::new();
    structure.insert("v".into(), json!(value));
    KnowledgeObject::new(Identity::new(id, r#type, format!("name {id}")), structure)
}

pub(crate) fn relation(id: &str, participants: &[&str], relation_type: &str) -> KnowledgeObject {
    let mut structure = Map::new();
    structure.insert(PARTICIPANTS.into(), participants.iter().map(|p| Value::from(*p)).collect());
    structure.insert(RELATION_TYPE.into(), Value::from(relation_type));
    KnowledgeObject::new(Identity::new(id, "Relation", id), structure)
}

/// Recipe of one relation: participant picks, type, and whether earlier relations may be named.
type RelationRecipe = (Vec<Index>, usize, bool);

/// A random structure of 1–12 nodes and 0–12 relations.
pub(crate) fn arb_structure() -> impl Strategy<Value = KnowledgeStructure> {
    let nodes = prop::collection::vec((0..NODE_TYPES.len(), -3i64..4), 1..12);
    let relations = prop::collection::vec(
        (prop::collection::vec(any::<Index>(), 2..=3), 0..RELATION_TYPES.len(), prop::bool::weighted(0.2)),
        0..12,
    );
    (nodes, relations).prop_map(|(nodes, relations)| build(&nodes, &relations))
}

fn build(nodes: &[(usize, i64)], relations: &[RelationRecipe]) -> KnowledgeStructure {
    let mut objects = Vec::new();
    let mut node_ids = Vec::new();
    for (i, (ty, value)) in nodes.iter().enumerate() {
        let id = format!("n{i}");
        objects.push(node(&id, NODE_TYPES[*ty], *value));
        node_ids.push(id);
    }
    let mut relation_ids: Vec<String> = Vec::new();
    for (i, (picks, ty, meta)) in relations.iter().enumerate() {
        let pool: Vec<&str> = if *meta && !relation_ids.is_empty() {
            node_ids.iter().chain(&relation_ids).map(String::as_str).collect()
        } else {
            node_ids.iter().map(String::as_str).collect()
        };
        let participants: Vec<&str> = picks.iter().map(|p| *p.get(&pool)).collect();
        let id = format!("r{i}");
        objects.push(relation(&id, &participants, RELATION_TYPES[*ty]));
        relation_ids.push(id);
    }
    KnowledgeStructure::from_objects(objects).expect("generated structures are well-formed")
}

/// One random edit, resolved against the structure when applied.
#[derive(Clone, Debug)]
pub(crate) enum Edit {
    /// Remove an existing object, cascading to relations naming it.
    Remove(Index),
    /// Change a node's value (relations are left alone: operations cannot update them).
    Update(Index, i64),
    /// Rename any object, relations included.
    Rename(Index),
    /// Add a fresh node.
    AddNode(usize),
    /// Add a fresh relation among existing objects.
    AddRelation(Index, Index, usize),
}

pub(crate) fn arb_edits() -> impl Strategy<Value = Vec<Edit>> {
    let edit = prop_oneof![
        any::<Index>().prop_map(Edit::Remove),
        (any::<Index>(), -3i64..4).prop_map(|(i, v)| Edit::Update(i, v)),
        any::<Index>().prop_map(Edit::Rename),
        (0..NODE_TYPES.len()).prop_map(Edit::AddNode),
        (any::<Index>(), any::<Index>(), 0..RELATION_TYPES.len()).prop_map(|(a, b, t)| Edit::AddRelation(a, b, t)),
    ];
    prop::collection::vec(edit, 0..8)
}

/// Applies the edits to a copy of `base`. Fresh ids are `x0`, `x1`, ... so that two branches
/// edited from the same base can add the same id with different content (a conflict).
pub(crate) fn mutate(base: &KnowledgeStructure, edits: &[Edit]) -> KnowledgeStructure {
    mutate_logged(base, edits).0
}

/// [`mutate`], also returning the primitive changes it made.
pub(crate) fn mutate_logged(base: &KnowledgeStructure, edits: &[Edit]) -> (KnowledgeStructure, ChangeSet) {
    let mut s = base.clone();
    let mut log = ChangeSet::default();
    for (n, edit) in edits.iter().enumerate() {
        let ids: Vec<String> = s.ids().map(str::to_owned).collect();
        let pick = |i: &Index| (!ids.is_empty()).then(|| ids[i.index(ids.len())].clone());
        match edit {
            Edit::Remove(i) => {
                if let Some(id) = pick(i) {
                    s.remove_cascading(&id, &mut log);
                }
            }
            Edit::Update(i, v) => {
                if let Some(object) = pick(i).and_then(|id| s.get(&id).cloned()).filter(|o| !o.is_relation()) {
                    let mut updated = KnowledgeObject::clone(&object);
                    updated.structure.insert("v", json!(v * 100 + n as i64));
                    s.put(updated, &mut log).expect("a node stays well-formed");
                }
            }
            Edit::Rename(i) => {
                if let Some(object) = pick(i).and_then(|id| s.get(&id).cloned()) {
                    let mut renamed = KnowledgeObject::clone(&object);
                    renamed.identity.name = format!("renamed {n}").into();
                    s.put(renamed, &mut log).expect("renaming keeps the shape");
                }
            }
            Edit::AddNode(ty) => {
                let id = format!("x{n}");
                if !s.contains(&id) {
                    s.put(node(&id, NODE_TYPES[*ty], n as i64), &mut log).expect("a node is well-formed");
                }
            }
            Edit::AddRelation(a, b, ty) => {
                let id = format!("x{n}");
                if let (Some(a), Some(b), false) = (pick(a), pick(b), s.contains(&id)) {
                    s.put(relation(&id, &[&a, &b], RELATION_TYPES[*ty]), &mut log).expect("well-formed relation");
                }
            }
        }
    }
    (s, log)
}

/// True when every relation's participants all exist (or are the relation itself).
pub(crate) fn is_closed(s: &KnowledgeStructure) -> bool {
    s.relations().all(|r| r.relation().is_some_and(|v| v.participants.iter().all(|p| s.contains(p) || *p == r.id())))
}

/// An object in canonical JSON.
pub(crate) fn json_object(id: &str, r#type: &str, name: &str, structure: Value) -> Value {
    json!({"identity": {"id": id, "type": r#type, "name": name}, "structure": structure})
}

/// A structure in canonical JSON.
pub(crate) fn json_structure(objects: Vec<Value>) -> Value {
    json!({"version": "1.0", "objects": objects})
}
