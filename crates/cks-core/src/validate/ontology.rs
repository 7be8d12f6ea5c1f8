//! The type ontology extensions: `type_hierarchy` (CKS-EXT-TYPE-HIERARCHY-CYCLE) and
//! `relation_type` (CKS-EXT-RELATION-TYPE).
//!
//! `TypeDefinition` objects declare `type_name` (skipped when falsy) and an optional
//! `parent_type`. A name's declaring object is the **first** `TypeDefinition` naming it; its
//! parent is the **last** truthy `parent_type` given for it (a later definition without a parent
//! does not clear an earlier one). Each type has at most one parent, so the declarations form a
//! functional graph.
//!
//! - `type_hierarchy`: one error per type name lying on a `parent_type` cycle, sorted by name,
//!   located at the name's declaring object. Types leading into a cycle are not flagged.
//! - `relation_type`: `TypeRule` objects with a truthy `relation_type` (the last rule per type
//!   wins) restrict binary relations of that type whose two participants both exist: the source's
//!   `identity.type` must equal or descend from one of `allowed_source_types` (when that is a
//!   non-empty list), and likewise the target with `allowed_target_types`. One error per failing
//!   side, located at the relation.
//!
//! Decisions (Python crashes or iterates characters): only string `type_name`, `parent_type` and
//! rule `relation_type` values are read (others never match a type); a non-list allowed-types
//! value means no restriction; non-string entries of an allowed list never match but are printed.

use indexmap::IndexMap;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, HashSet};

use super::pyrepr::{py_repr, truthy};
use super::{Diagnostic, binary, semantic_error};
use crate::object::Structure;
use crate::structure::KnowledgeStructure;

const HIERARCHY_CODE: &str = "CKS-EXT-TYPE-HIERARCHY-CYCLE";
const RELATION_TYPE_CODE: &str = "CKS-EXT-RELATION-TYPE";
const TYPE_DEFINITION: &str = "TypeDefinition";
const TYPE_RULE: &str = "TypeRule";

/// The declared is-a hierarchy of type names.
#[derive(Debug, Default)]
struct TypeHierarchy<'a> {
    /// type name → parent name, in order of first parent assignment.
    parent: IndexMap<&'a str, &'a str>,
    /// type name → id of the first `TypeDefinition` declaring it.
    declared_by: HashMap<&'a str, &'a str>,
}

/// A truthy string value, or `None`.
fn truthy_str(value: Option<&Value>) -> Option<&str> {
    match value {
        Some(Value::String(s)) if !s.is_empty() => Some(s),
        _ => None,
    }
}

impl<'a> TypeHierarchy<'a> {
    fn new(structure: &'a KnowledgeStructure) -> Self {
        let mut hierarchy = TypeHierarchy::default();
        for object in structure.objects() {
            if object.identity.r#type != TYPE_DEFINITION {
                continue;
            }
            let Some(type_name) = truthy_str(object.structure.get("type_name")) else {
                continue;
            };
            hierarchy.declared_by.entry(type_name).or_insert(object.id());
            if let Some(parent) = truthy_str(object.structure.get("parent_type")) {
                hierarchy.parent.insert(type_name, parent);
            }
        }
        hierarchy
    }

    /// True when `candidate` equals `ancestor` or reaches it through parent links (cycle-safe).
    fn is_subtype(&self, candidate: &str, ancestor: &str) -> bool {
        let mut seen = HashSet::new();
        let mut current = Some(candidate);
        while let Some(name) = current {
            if name == ancestor {
                return true;
            }
            if !seen.insert(name) {
                return false;
            }
            current = self.parent.get(name).copied();
        }
        false
    }

    /// `{type name: declaring object id}` for every name on a cycle, sorted by name.
    fn cyclic_types(&self) -> BTreeMap<&'a str, &'a str> {
        let mut cyclic = BTreeMap::new();
        let mut resolved: HashSet<&str> = HashSet::new();
        for &start in self.parent.keys() {
            if resolved.contains(start) {
                continue;
            }
            let mut path: Vec<&str> = Vec::new();
            let mut position: HashMap<&str, usize> = HashMap::new();
            let mut current = Some(start);
            while let Some(name) = current {
                if resolved.contains(name) {
                    break;
                }
                if let Some(&first) = position.get(name) {
                    for &member in &path[first..] {
                        cyclic.insert(member, self.declared_by.get(member).copied().unwrap_or(member));
                    }
                    break;
                }
                position.insert(name, path.len());
                path.push(name);
                current = self.parent.get(name).copied();
            }
            resolved.extend(path);
        }
        cyclic
    }
}

/// CKS-EXT-TYPE-HIERARCHY-CYCLE.
pub(crate) fn check_type_hierarchy(structure: &KnowledgeStructure, out: &mut Vec<Diagnostic>) {
    let hierarchy = TypeHierarchy::new(structure);
    for (type_name, object_id) in hierarchy.cyclic_types() {
        out.push(semantic_error(
            HIERARCHY_CODE,
            format!("Type '{type_name}' participates in a TypeDefinition parent_type cycle."),
            object_id,
        ));
    }
}

/// The allowed types of one side of a rule; `None` means unrestricted.
fn allowed_types<'r>(rule: &'r Structure, key: &str) -> Option<&'r [Value]> {
    match rule.get(key) {
        Some(Value::Array(items)) if truthy(rule.get(key)) => Some(items),
        _ => None,
    }
}

/// CKS-EXT-RELATION-TYPE.
pub(crate) fn check_relation_types(structure: &KnowledgeStructure, out: &mut Vec<Diagnostic>) {
    let mut rules: HashMap<&str, &Structure> = HashMap::new();
    for object in structure.objects() {
        if object.identity.r#type != TYPE_RULE {
            continue;
        }
        if let Some(relation_type) = truthy_str(object.structure.get("relation_type")) {
            rules.insert(relation_type, &object.structure);
        }
    }
    if rules.is_empty() {
        return;
    }

    let hierarchy = TypeHierarchy::new(structure);
    for object in structure.relations() {
        let Some(relation) = object.relation() else {
            continue;
        };
        let Some(rule) = rules.get(relation.relation_type) else {
            continue;
        };
        let Some((source_id, target_id)) = binary(&relation) else {
            continue;
        };
        let (Some(source), Some(target)) = (structure.get(source_id), structure.get(target_id)) else {
            continue;
        };

        for (side, endpoint_id, endpoint_type, key) in [
            ("source", source_id, source.identity.r#type.as_str(), "allowed_source_types"),
            ("target", target_id, target.identity.r#type.as_str(), "allowed_target_types"),
        ] {
            let Some(allowed) = allowed_types(rule, key) else {
                continue;
            };
            let matches = allowed.iter().any(|a| a.as_str().is_some_and(|a| hierarchy.is_subtype(endpoint_type, a)));
            if !matches {
                let relation_id = object.id();
                out.push(semantic_error(
                    RELATION_TYPE_CODE,
                    format!(
                        "Relation '{relation_id}' of type '{}' has {side} '{endpoint_id}' of type '{endpoint_type}', \
                         which is not one of the allowed {side} types {} (or a declared subtype).",
                        relation.relation_type,
                        py_repr(&Value::Array(allowed.to_vec()))
                    ),
                    relation_id,
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::Extension;
    use super::super::test_support::*;
    use serde_json::json;

    fn typedef(id: &str, name: &str, parent: Option<&str>) -> crate::object::KnowledgeObject {
        match parent {
            Some(p) => obj(id, "TypeDefinition", json!({"type_name": name, "parent_type": p})),
            None => obj(id, "TypeDefinition", json!({"type_name": name})),
        }
    }

    #[test]
    fn acyclic_hierarchy_passes() {
        let objects = vec![
            typedef("t1", "Planet", Some("Body")),
            typedef("t2", "Body", None),
            typedef("t3", "Moon", Some("Body")),
        ];
        assert_eq!(run_ext(Extension::TypeHierarchy, objects), []);
    }

    #[test]
    fn cycle_members_are_reported_at_their_first_declaration() {
        let objects = vec![
            typedef("t1", "Planet", Some("Moon")),
            typedef("t2", "Moon", Some("Planet")),
            typedef("t3", "Planet", None), // does not clear the parent, and does not move the declaration
            typedef("t4", "Tail", Some("Planet")), // leads into the cycle, not on it
            typedef("t5", "Self", Some("Self")),
            obj("t6", "TypeDefinition", json!({"type_name": "", "parent_type": "X"})),
        ];
        assert_eq!(
            located(&run_ext(Extension::TypeHierarchy, objects)),
            pairs(&[
                ("t1", "Type 'Planet' participates in a TypeDefinition parent_type cycle."),
                ("t2", "Type 'Moon' participates in a TypeDefinition parent_type cycle."),
                ("t5", "Type 'Self' participates in a TypeDefinition parent_type cycle."),
            ])
        );
    }

    #[test]
    fn last_parent_wins() {
        // Planet -> Moon, then Planet -> Body: no cycle remains.
        let objects = vec![
            typedef("t1", "Planet", Some("Moon")),
            typedef("t2", "Moon", Some("Planet")),
            typedef("t3", "Planet", Some("Body")),
        ];
        assert_eq!(run_ext(Extension::TypeHierarchy, objects), []);
    }

    fn orbit_world(extra: Vec<crate::object::KnowledgeObject>) -> Vec<crate::object::KnowledgeObject> {
        let mut objects = vec![
            typedef("td1", "Planet", Some("CelestialBody")),
            typedef("td2", "Star", Some("CelestialBody")),
            obj("earth", "Planet", json!({})),
            obj("sun", "Star", json!({})),
            obj("soup", "Recipe", json!({})),
        ];
        objects.extend(extra);
        objects
    }

    #[test]
    fn allowed_types_and_subtypes_pass() {
        let objects = orbit_world(vec![
            obj(
                "rule",
                "TypeRule",
                json!({"relation_type": "orbits", "allowed_source_types": ["CelestialBody"], "allowed_target_types": ["Star"]}),
            ),
            rel("o1", &["earth", "sun"], "orbits"),
            rel("o2", &["soup", "ghost"], "orbits"),        // dangling: skipped
            rel("o3", &["soup", "sun", "earth"], "orbits"), // not binary: skipped
            rel("x", &["soup", "soup"], "likes"),           // no rule
        ]);
        assert_eq!(run_ext(Extension::RelationType, objects), []);
    }

    #[test]
    fn disallowed_source_and_target_are_reported_separately() {
        let objects = orbit_world(vec![
            obj("old", "TypeRule", json!({"relation_type": "orbits", "allowed_source_types": ["Recipe"]})),
            obj(
                "rule",
                "TypeRule",
                json!({"relation_type": "orbits", "allowed_source_types": ["Planet", "Moon"], "allowed_target_types": ["Star"]}),
            ),
            rel("o1", &["soup", "earth"], "orbits"),
        ]);
        assert_eq!(
            located(&run_ext(Extension::RelationType, objects)),
            pairs(&[
                (
                    "o1",
                    "Relation 'o1' of type 'orbits' has source 'soup' of type 'Recipe', which is not one of the allowed source types ['Planet', 'Moon'] (or a declared subtype)."
                ),
                (
                    "o1",
                    "Relation 'o1' of type 'orbits' has target 'earth' of type 'Planet', which is not one of the allowed target types ['Star'] (or a declared subtype)."
                ),
            ])
        );
    }

    #[test]
    fn empty_or_non_list_allowed_types_do_not_restrict() {
        let objects = orbit_world(vec![
            obj(
                "rule",
                "TypeRule",
                json!({"relation_type": "orbits", "allowed_source_types": [], "allowed_target_types": "Star"}),
            ),
            rel("o1", &["soup", "soup"], "orbits"),
        ]);
        assert_eq!(run_ext(Extension::RelationType, objects), []);
    }

    #[test]
    fn subtype_walk_survives_cycles() {
        let objects = vec![
            typedef("t1", "A", Some("B")),
            typedef("t2", "B", Some("A")),
            obj("a", "A", json!({})),
            obj("rule", "TypeRule", json!({"relation_type": "r", "allowed_source_types": ["C", 5]})),
            rel("x", &["a", "a"], "r"),
        ];
        assert_eq!(
            located(&run_ext(Extension::RelationType, objects)),
            pairs(&[(
                "x",
                "Relation 'x' of type 'r' has source 'a' of type 'A', which is not one of the allowed source types ['C', 5] (or a declared subtype)."
            )])
        );
    }
}
