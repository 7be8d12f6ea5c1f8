//! A structure as linked data — JSON-LD or Turtle (the `export_knowledge` tool's formats).
//!
//! Object ids become IRIs under [`ID_BASE`] (percent-encoded where an IRI cannot carry a character
//! as it is; ids that already are absolute IRIs are kept), and types, relation types and structure keys become terms of the `cks:` vocabulary
//! ([`VOCAB`]).
//!
//! JSON-LD has the reference's `@graph`: one node per non-relation object (`@id`, `@type`, `name`
//! and its structure fields), and each relation as a property of its first participant pointing to
//! its second; we add an `@context` that makes those terms IRIs, and write nested structure values
//! as `@json` literals (a bare nested object would be read as a node).
//!
//! Turtle is the full graph: each object a subject with `rdf:type cks:<Type>`, `rdfs:label <name>`
//! and one property per structure field (strings, numbers and booleans as literals, arrays of them
//! as repeated values, anything nested as an `rdf:JSON` literal); each relation a resource with
//! `cks:relationType`, a `cks:participant` link per participant and the ordered `cks:participants`
//! list; a binary relation also adds the direct edge `<source> cks:<relation_type> <target>`. (The
//! reference's Turtle and RDF/XML are empty documents, because its converter is never run; RDF/XML
//! is refused here rather than returned empty.)

use serde::Serialize;
use serde_json::{Map, Value, json};
use std::fmt::Write as _;

use crate::{KnowledgeObject, KnowledgeStructure};

/// Namespace of object IRIs.
pub const ID_BASE: &str = "http://cks.org/";
/// Namespace of the CKS vocabulary (`cks:`).
pub const VOCAB: &str = "http://cks.org/vocab#";
pub const RDF: &str = "http://www.w3.org/1999/02/22-rdf-syntax-ns#";
pub const RDFS: &str = "http://www.w3.org/2000/01/rdf-schema#";
pub const XSD: &str = "http://www.w3.org/2001/XMLSchema#";

/// JSON-LD terms the context defines; structure keys with these names are written as full IRIs.
const CONTEXT_TERMS: [&str; 4] = ["cks", "rdfs", "xsd", "name"];

/// A JSON-LD document.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JsonLd {
    /// Maps the CKS terms to IRIs.
    #[serde(rename = "@context")]
    pub context: Map<String, Value>,
    /// One node per non-relation object: `@id`, `@type`, `name`, its structure fields, and one
    /// property per relation it is the first participant of (`relation_type: [{"@id": second}]`).
    #[serde(rename = "@graph")]
    pub graph: Vec<Map<String, Value>>,
}

/// Percent-encodes everything but RFC 3986 unreserved characters and the non-ASCII characters an
/// IRI may carry as they are (so `größe` stays `größe`, as in the reference), and the dot segments
/// `.`/`..`.
fn encode(text: &str) -> String {
    if text == "." || text == ".." {
        return text.replace('.', "%2E");
    }
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '~') || is_iri_char(c) {
            out.push(c);
        } else {
            let mut buffer = [0; 4];
            for byte in c.encode_utf8(&mut buffer).bytes() {
                let _ = write!(out, "%{byte:02X}");
            }
        }
    }
    out
}

/// A non-ASCII character RFC 3987 allows unencoded in an IRI path (`ucschar`).
fn is_iri_char(c: char) -> bool {
    matches!(c as u32,
        0xA0..=0xD7FF | 0xF900..=0xFDCF | 0xFDF0..=0xFFEF | 0x10000..=0x1FFFD | 0x20000..=0x2FFFD
        | 0x30000..=0x3FFFD | 0x40000..=0x4FFFD | 0x50000..=0x5FFFD | 0x60000..=0x6FFFD
        | 0x70000..=0x7FFFD | 0x80000..=0x8FFFD | 0x90000..=0x9FFFD | 0xA0000..=0xAFFFD
        | 0xB0000..=0xBFFFD | 0xC0000..=0xCFFFD | 0xD0000..=0xDFFFD | 0xE1000..=0xEFFFD)
}

/// An id that already is an absolute IRI safe to write as is (`scheme:rest`, no forbidden chars).
fn is_absolute_iri(id: &str) -> bool {
    let Some((scheme, rest)) = id.split_once(':') else { return false };
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        && !rest.is_empty()
        && !id.chars().any(|c| c <= ' ' || matches!(c, '<' | '>' | '"' | '{' | '}' | '|' | '^' | '`' | '\\'))
}

/// The IRI of an object id.
pub fn object_iri(id: &str) -> String {
    if is_absolute_iri(id) { id.to_owned() } else { format!("{ID_BASE}{}", encode(id)) }
}

/// An id as a JSON-LD `@id` (relative ids resolve against `@base`).
fn object_ref(id: &str) -> String {
    if is_absolute_iri(id) { id.to_owned() } else { encode(id) }
}

/// A vocabulary term for Turtle: `cks:local` when that is a plain prefixed name, else `<IRI>`.
fn term(name: &str) -> String {
    if is_absolute_iri(name) {
        return format!("<{name}>");
    }
    let local = encode(name);
    let plain = !local.is_empty()
        && !local.starts_with(['-', '.'])
        && !local.ends_with('.')
        && local.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if plain { format!("cks:{local}") } else { format!("<{VOCAB}{local}>") }
}

/// A JSON-LD key for a data-derived term (expanded through `@vocab`, unless it would collide).
fn ld_key(name: &str) -> String {
    if is_absolute_iri(name) {
        return name.to_owned();
    }
    let local = encode(name);
    if CONTEXT_TERMS.contains(&local.as_str()) { format!("{VOCAB}{local}") } else { local }
}

/// A type as a JSON-LD `@type` (relative types resolve against `@vocab`).
fn ld_type(name: &str) -> String {
    if is_absolute_iri(name) { name.to_owned() } else { encode(name) }
}

fn relation_fields(object: &KnowledgeObject) -> bool {
    object.relation().is_some()
}

/// The structure fields written as data properties (a relation's defining fields excluded).
fn data_fields(object: &KnowledgeObject) -> impl Iterator<Item = (&str, &Value)> {
    let relation = relation_fields(object);
    object.structure.iter().filter(move |(k, v)| {
        !v.is_null() && !(relation && (*k == crate::object::PARTICIPANTS || *k == crate::object::RELATION_TYPE))
    })
}

fn is_scalar(value: &Value) -> bool {
    matches!(value, Value::String(_) | Value::Number(_) | Value::Bool(_))
}

/// The values of one field: scalars one by one, anything nested as one JSON value.
fn field_values(value: &Value) -> Vec<Value> {
    match value {
        v if is_scalar(v) => vec![v.clone()],
        Value::Array(items) if items.iter().all(is_scalar) => items.clone(),
        other => vec![Value::Null, other.clone()],
    }
}

// ----- JSON-LD -----

fn context() -> Map<String, Value> {
    let context = json!({
        "@vocab": VOCAB,
        "@base": ID_BASE,
        "cks": VOCAB,
        "rdfs": RDFS,
        "xsd": XSD,
        "name": "rdfs:label",
    });
    match context {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

pub fn json_ld(structure: &KnowledgeStructure) -> JsonLd {
    let mut nodes: Vec<Map<String, Value>> = Vec::with_capacity(structure.len());
    let mut node_of: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for object in structure.objects().filter(|o| !o.is_relation()) {
        let mut node = Map::new();
        node.insert("@id".into(), json!(object_ref(object.id())));
        node.insert("@type".into(), json!(ld_type(&object.identity.r#type)));
        node.insert("name".into(), json!(object.identity.name));
        for (key, value) in &object.structure {
            let values = field_values(value);
            let ld = match values.as_slice() {
                _ if value.is_null() => Value::Null,
                [Value::Null, nested] => json!({"@type": "@json", "@value": nested}),
                [single] => single.clone(),
                many => Value::Array(many.to_vec()),
            };
            node.insert(ld_key(key), ld);
        }
        node_of.insert(object.id(), nodes.len());
        nodes.push(node);
    }
    // Each relation as a property of its first participant, pointing to its second.
    for object in structure.objects() {
        let Some(relation) = object.relation() else { continue };
        let (Some(source), Some(target)) = (relation.participants.first(), relation.participants.get(1)) else {
            continue;
        };
        let index = match node_of.get(source) {
            Some(&index) => index,
            None => {
                // The subject is itself a relation: a minimal node stands for it.
                let mut node = Map::new();
                node.insert("@id".into(), json!(object_ref(source)));
                node.insert("@type".into(), json!("Entity"));
                node_of.insert(source, nodes.len());
                nodes.push(node);
                nodes.len() - 1
            }
        };
        let key = ld_key(relation.relation_type);
        let edge = json!({"@id": object_ref(target)});
        match nodes[index].get_mut(&key) {
            Some(Value::Array(items)) => items.push(edge),
            Some(existing) => *existing = json!([existing.clone(), edge]),
            None => {
                nodes[index].insert(key, json!([edge]));
            }
        }
    }
    JsonLd { context: context(), graph: nodes }
}

// ----- Turtle -----

/// A Turtle string literal body (without quotes).
pub fn escape_literal(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

fn literal(value: &Value) -> String {
    match value {
        Value::String(s) => format!("\"{}\"", escape_literal(s)),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) if n.is_i64() || n.is_u64() => n.to_string(),
        Value::Number(n) => format!("\"{n}\"^^xsd:double"),
        other => format!("\"{}\"^^rdf:JSON", escape_literal(&other.to_string())),
    }
}

pub fn turtle(structure: &KnowledgeStructure) -> String {
    let mut out = String::with_capacity(structure.len() * 160 + 256);
    for (prefix, iri) in [("cks", VOCAB), ("rdf", RDF), ("rdfs", RDFS), ("xsd", XSD)] {
        let _ = writeln!(out, "@prefix {prefix}: <{iri}> .");
    }
    for object in structure.objects() {
        let mut predicates = vec![
            format!("a {}", term(&object.identity.r#type)),
            format!("rdfs:label \"{}\"", escape_literal(&object.identity.name)),
        ];
        if let Some(relation) = object.relation() {
            let iris: Vec<String> = relation.participants.iter().map(|p| format!("<{}>", object_iri(p))).collect();
            predicates.push(format!("cks:relationType \"{}\"", escape_literal(relation.relation_type)));
            predicates.push(format!("cks:participant {}", iris.join(", ")));
            predicates.push(format!("cks:participants ( {} )", iris.join(" ")));
        }
        for (key, value) in data_fields(object) {
            let values = field_values(value);
            let objects: Vec<String> = match values.as_slice() {
                [Value::Null, nested] => vec![literal(nested)],
                scalars => scalars.iter().map(literal).collect(),
            };
            if !objects.is_empty() {
                predicates.push(format!("{} {}", term(key), objects.join(", ")));
            }
        }
        let _ = write!(out, "\n<{}> {} .\n", object_iri(object.id()), predicates.join(" ;\n    "));
    }
    let edges: Vec<String> = structure
        .relations()
        .filter_map(|o| o.relation())
        .filter_map(|r| {
            let (source, target) = r.source_target()?;
            Some(format!("<{}> {} <{}> .", object_iri(source), term(r.relation_type), object_iri(target)))
        })
        .collect();
    if !edges.is_empty() {
        out.push_str("\n# Binary relations as direct edges.\n");
        for edge in edges {
            out.push_str(&edge);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iris_and_terms() {
        assert_eq!(object_iri("urn:isbn:123"), "urn:isbn:123");
        assert_eq!(object_iri("a b/c"), "http://cks.org/a%20b%2Fc");
        assert_eq!(object_iri(".."), "http://cks.org/%2E%2E");
        assert_eq!(object_iri("ü"), "http://cks.org/ü");
        assert_eq!(object_iri("größe"), "http://cks.org/größe");
        assert_eq!(object_iri("a\u{a0}b\u{fffe}"), "http://cks.org/a\u{a0}b%EF%BF%BE");
        assert_eq!(term("part of"), "<http://cks.org/vocab#part%20of>");
        assert_eq!(term("born_in"), "cks:born_in");
        assert_eq!(term("http://schema.org/Person"), "<http://schema.org/Person>");
        assert_eq!(ld_key("name"), "http://cks.org/vocab#name");
        assert_eq!(ld_key("dc:title"), "dc:title");
        assert_eq!(ld_type("Solar System"), "Solar%20System");
        assert_eq!(escape_literal("a\u{1}b"), "a\\u0001b");
    }
}
