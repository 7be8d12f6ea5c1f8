//! JSON-LD as the reference's command line reads and writes it: a mapping of JSON nodes, not
//! JSON-LD processing (no context expansion, no IRIs), so that files move between the two tools
//! unchanged.
//!
//! Reading: each node of `@graph` (or the document itself when there is no `@graph` list) is an
//! object, nodes sharing an `@id` merged (later keys win); its type is the first `@type`, its name
//! `name`, else `rdfs:label`, else its id; its structure is the node's keys as they are. Every
//! other key's string values and `{"@id": ...}` values are also relations `subject-key-target`.
//!
//! Writing: one node per non-relation object (`@id`, `@type`, `name`, then its structure), and
//! each relation as a property of its first participant pointing to its second.

use cks_core::validate::pyrepr::py_str;
use cks_core::{Identity, KnowledgeObject, KnowledgeStructure, StructureError};
use std::collections::HashMap;

use crate::pyjson::Json;

/// Keys of a node that never name a relation.
const NOT_RELATIONS: [&str; 6] = ["@id", "@type", "@context", "@graph", "name", "rdfs:label"];

/// The objects and relations a JSON-LD document describes.
pub(crate) fn to_structure(document: &Json) -> Result<KnowledgeStructure, String> {
    let nodes = nodes(document)?;
    let mut merged: Vec<(String, Json)> = Vec::new();
    let mut position: HashMap<String, usize> = HashMap::new();
    for node in &nodes {
        let id = match lookup(node, "@id") {
            None => "unknown".to_owned(),
            Some(Json::Str(id)) => id.clone(),
            Some(other) => return Err(format!("a node's @id must be a string, not {}", py_str(&other.to_value()))),
        };
        match position.get(&id) {
            Some(&at) => {
                if let Json::Dict(entries) = node {
                    for (key, value) in entries {
                        merged[at].1.set(key, value.clone());
                    }
                }
            }
            None => {
                position.insert(id.clone(), merged.len());
                merged.push((id, (*node).clone()));
            }
        }
    }
    let mut objects: Vec<KnowledgeObject> = merged.iter().map(|(id, node)| node_object(id, node)).collect();
    for node in &nodes {
        objects.extend(node_relations(node)?);
    }
    KnowledgeStructure::from_objects(objects).map_err(|e| match e {
        StructureError::DuplicateId(id) => format!("Duplicate canonical identity '{id}'."),
        other => other.to_string(),
    })
}

/// The nodes of a document: its `@graph` list, or the document itself.
fn nodes(document: &Json) -> Result<Vec<&Json>, String> {
    let Json::Dict(_) = document else { return Err("a JSON-LD document must be a JSON object".into()) };
    let nodes: Vec<&Json> = match lookup(document, "@graph") {
        Some(Json::List(items)) => items.iter().collect(),
        _ => vec![document],
    };
    match nodes.iter().find(|n| !matches!(n, Json::Dict(_))) {
        Some(_) => Err("every node of @graph must be a JSON object".into()),
        None => Ok(nodes),
    }
}

fn lookup<'a>(node: &'a Json, key: &str) -> Option<&'a Json> {
    match node {
        Json::Dict(entries) => entries.iter().find(|(k, _)| k == key).map(|(_, v)| v),
        _ => None,
    }
}

fn node_object(id: &str, node: &Json) -> KnowledgeObject {
    let r#type = match lookup(node, "@type") {
        Some(Json::List(types)) if !types.is_empty() => py_str(&types[0].to_value()),
        Some(Json::Str(name)) => name.clone(),
        _ => "Entity".to_owned(),
    };
    let name = match lookup(node, "name").or_else(|| lookup(node, "rdfs:label")) {
        Some(name) => py_str(&name.to_value()),
        None => id.to_owned(),
    };
    let structure = match node.to_value() {
        serde_json::Value::Object(map) => map,
        _ => serde_json::Map::new(),
    };
    KnowledgeObject::new(Identity::new(id, r#type, name), structure)
}

/// The relations a node states: one per string or `{"@id": ...}` value of its other keys.
fn node_relations(node: &Json) -> Result<Vec<KnowledgeObject>, String> {
    let subject = match lookup(node, "@id") {
        Some(Json::Str(id)) if !id.is_empty() => id,
        _ => return Ok(Vec::new()),
    };
    let Json::Dict(entries) = node else { return Ok(Vec::new()) };
    let mut relations = Vec::new();
    for (predicate, values) in entries {
        if NOT_RELATIONS.contains(&predicate.as_str()) {
            continue;
        }
        let values = match values {
            Json::List(items) => items.iter().collect(),
            single => vec![single],
        };
        for value in values {
            let target = match value {
                Json::Str(target) => target,
                Json::Dict(_) => match lookup(value, "@id") {
                    None | Some(Json::Null) => continue,
                    Some(Json::Str(target)) => target,
                    Some(_) => return Err(format!("the @id of a value of '{predicate}' must be a string")),
                },
                _ => continue,
            };
            let structure = serde_json::json!({"participants": [subject, target], "relation_type": predicate});
            let serde_json::Value::Object(structure) = structure else { unreachable!("a JSON object literal") };
            relations.push(KnowledgeObject::new(
                Identity::new(format!("{subject}-{predicate}-{target}"), "Relation", predicate.as_str()),
                structure,
            ));
        }
    }
    Ok(relations)
}

/// The JSON-LD document of a structure (`{"@graph": [...]}`).
pub(crate) fn from_structure(structure: &KnowledgeStructure) -> Result<Json, String> {
    let mut graph: Vec<Json> = Vec::new();
    for object in structure.objects().filter(|o| !o.is_relation()) {
        let identity = &object.identity;
        let mut node = Json::Dict(vec![
            ("@id".into(), Json::str(identity.id.as_str())),
            ("@type".into(), Json::str(identity.r#type.as_str())),
            ("name".into(), Json::str(identity.name.as_str())),
        ]);
        for (key, value) in object.structure.iter() {
            if key != "participants" && key != "relation_type" {
                node.set(key, Json::from(value));
            }
        }
        graph.push(node);
    }
    // Where each `@id` first appears, so a relation finds its subject's node without a scan.
    let mut node_of: HashMap<String, usize> = HashMap::new();
    for (index, node) in graph.iter().enumerate() {
        if let Some(Json::Str(id)) = lookup(node, "@id") {
            node_of.entry(id.clone()).or_insert(index);
        }
    }
    for object in structure.relations() {
        let Some(relation) = object.relation() else { continue };
        let (Some(&source), Some(&target)) = (relation.participants.first(), relation.participants.get(1)) else {
            continue;
        };
        let edge = Json::Dict(vec![("@id".into(), Json::str(target))]);
        match node_of.get(source) {
            Some(&index) => {
                let node = &mut graph[index];
                if lookup(node, relation.relation_type).is_none() {
                    node.set(relation.relation_type, Json::List(Vec::new()));
                }
                match node.get_mut(relation.relation_type) {
                    Some(Json::List(edges)) => edges.push(edge),
                    _ => {
                        return Err(format!(
                            "relation '{}' cannot be written: '{source}' has a field '{}' that is not a list",
                            object.id(),
                            relation.relation_type
                        ));
                    }
                }
            }
            None => {
                node_of.insert(source.to_owned(), graph.len());
                graph.push(Json::Dict(vec![
                    ("@id".into(), Json::str(source)),
                    ("@type".into(), Json::str("Entity")),
                    (relation.relation_type.to_owned(), Json::List(vec![edge])),
                ]));
            }
        }
    }
    Ok(Json::Dict(vec![("@graph".into(), Json::List(graph))]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pyjson::loads;

    #[test]
    fn nodes_merge_and_values_become_relations() {
        let document = loads(
            r#"{"@graph": [
                {"@id": "a", "@type": ["Person"], "name": "Alice", "knows": [{"@id": "b"}, "c"], "age": 3},
                {"@id": "b", "rdfs:label": "Bob"},
                {"@id": "a", "email": "a@x"}
            ]}"#,
        )
        .unwrap();
        let structure = to_structure(&document).unwrap();
        let ids: Vec<&str> = structure.ids().collect();
        assert_eq!(ids, ["a", "b", "a-knows-b", "a-knows-c", "a-email-a@x"]);
        let a = structure.get("a").unwrap();
        assert_eq!((a.identity.r#type.as_str(), a.identity.name.as_str()), ("Person", "Alice"));
        assert_eq!(a.structure.get("email"), Some(&serde_json::json!("a@x")));
        assert_eq!(structure.get("b").unwrap().identity.name, "Bob");
    }

    #[test]
    fn a_repeated_relation_is_a_duplicate_identity() {
        let document = loads(r#"{"@id": "a", "p": ["b", "b"]}"#).unwrap();
        assert_eq!(to_structure(&document).unwrap_err(), "Duplicate canonical identity 'a-p-b'.");
        assert!(to_structure(&loads("[1]").unwrap()).is_err());
        assert!(to_structure(&loads(r#"{"@graph": ["x"]}"#).unwrap()).is_err());
    }
}
