//! Canonical JSON: parsing and serializing knowledge structures in the reference's CKS-003 format.
//!
//! Output is `{"objects": [...], "version": "1.0"}` with keys sorted, a two-space indent, non-ASCII
//! characters kept, and objects in the structure's own order. Input accepts what the reference
//! accepts and rejects what it rejects, with the reference's messages (see [`ParseError`]).

use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use serde_json::{Map, Value};

use crate::object::{Identity, KnowledgeObject, PARTICIPANTS, RELATION_TYPE};
use crate::structure::KnowledgeStructure;

/// The one serialization format version this crate reads and writes.
pub const FORMAT_VERSION: &str = "1.0";

/// Why a document is not a knowledge structure. Messages follow the reference parser's wording.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("Invalid JSON: {0}")]
    InvalidJson(String),
    #[error("Top-level JSON value must be an object.")]
    NotAnObject,
    #[error("Missing top-level 'objects' array.")]
    MissingObjects,
    #[error("'objects' must be a JSON array.")]
    ObjectsNotArray,
    #[error("Unsupported serialization version {0}.")]
    UnsupportedVersion(String),
    #[error("Object #{index}: Each object must be represented by a JSON object.")]
    ObjectNotAnObject { index: usize },
    #[error("Object #{index}: Unknown object field(s): {fields}")]
    UnknownObjectFields { index: usize, fields: String },
    #[error("Object #{index}: Missing object identity.")]
    MissingIdentity { index: usize },
    #[error("Object #{index}: Object identity must be an object.")]
    IdentityNotAnObject { index: usize },
    #[error("Object #{index}: Unknown identity field(s): {fields}")]
    UnknownIdentityFields { index: usize, fields: String },
    #[error("Object #{index}: Missing identity field '{field}'.")]
    MissingIdentityField { index: usize, field: &'static str },
    #[error("Object #{index}: Identity fields must all be strings.")]
    IdentityFieldNotString { index: usize },
    #[error("Object #{index}: Object structure must be an object.")]
    StructureNotAnObject { index: usize },
    #[error("Object #{index}: Relation participants must be a list.")]
    ParticipantsNotList { index: usize },
    #[error("Object #{index}: CanonicalRelation requires at least two participants.")]
    TooFewParticipants { index: usize },
    #[error("Object #{index}: Relation participants must all be strings.")]
    ParticipantNotString { index: usize },
    #[error("Object #{index}: Relation type must be a string.")]
    RelationTypeNotString { index: usize },
    #[error("Object #{index}: Relation type cannot be empty.")]
    EmptyRelationType { index: usize },
    #[error("Duplicate canonical identity: '{0}'")]
    DuplicateId(String),
}

/// Parses a canonical JSON document.
pub fn parse_str(text: &str) -> Result<KnowledgeStructure, ParseError> {
    let value: Value = serde_json::from_str(text).map_err(|e| ParseError::InvalidJson(e.to_string()))?;
    parse_value(value)
}

/// Parses an already decoded JSON document.
pub fn parse_value(value: Value) -> Result<KnowledgeStructure, ParseError> {
    let Value::Object(mut root) = value else { return Err(ParseError::NotAnObject) };
    let objects = match root.remove("objects") {
        None => return Err(ParseError::MissingObjects),
        Some(Value::Array(objects)) => objects,
        Some(_) => return Err(ParseError::ObjectsNotArray),
    };
    match root.get("version") {
        None | Some(Value::Null) => {}
        Some(Value::String(v)) if v == FORMAT_VERSION => {}
        Some(Value::String(v)) => return Err(ParseError::UnsupportedVersion(format!("'{v}'"))),
        Some(other) => return Err(ParseError::UnsupportedVersion(other.to_string())),
    }
    // Other top-level keys (`_cks_format_version`, `_cks_metadata`, ...) are accepted and ignored,
    // as by the reference.
    let mut structure = KnowledgeStructure::new();
    let mut log = crate::structure::ChangeSet::default();
    for (index, raw) in objects.into_iter().enumerate() {
        let object = parse_object(index, raw)?;
        if structure.contains(object.id()) {
            return Err(ParseError::DuplicateId(object.identity.id));
        }
        // Shape was checked by `parse_object`; `put` cannot fail here.
        structure.put(object, &mut log).map_err(|_| ParseError::TooFewParticipants { index })?;
        log.changes.clear();
    }
    Ok(structure)
}

/// Parses one `{identity, structure}` record. `index` is its 0-based position, used in messages.
pub fn parse_object(index: usize, raw: Value) -> Result<KnowledgeObject, ParseError> {
    let Value::Object(mut record) = raw else { return Err(ParseError::ObjectNotAnObject { index }) };
    let unknown = unknown_keys(&record, &["identity", "structure"]);
    if !unknown.is_empty() {
        return Err(ParseError::UnknownObjectFields { index, fields: unknown });
    }
    let identity = match record.remove("identity") {
        None => return Err(ParseError::MissingIdentity { index }),
        Some(Value::Object(identity)) => identity,
        Some(_) => return Err(ParseError::IdentityNotAnObject { index }),
    };
    let identity = parse_identity(index, identity)?;
    let structure = match record.remove("structure") {
        None => Map::new(),
        Some(Value::Object(structure)) => structure,
        Some(_) => return Err(ParseError::StructureNotAnObject { index }),
    };
    check_relation_fields(index, &structure)?;
    Ok(KnowledgeObject::new(identity, structure))
}

fn parse_identity(index: usize, mut identity: Map<String, Value>) -> Result<Identity, ParseError> {
    let unknown = unknown_keys(&identity, &["id", "type", "name"]);
    if !unknown.is_empty() {
        return Err(ParseError::UnknownIdentityFields { index, fields: unknown });
    }
    let mut take = |field: &'static str| match identity.remove(field) {
        None => Err(ParseError::MissingIdentityField { index, field }),
        Some(value) => Ok(value),
    };
    let (id, r#type, name) = (take("id")?, take("type")?, take("name")?);
    match (id, r#type, name) {
        (Value::String(id), Value::String(r#type), Value::String(name)) => Ok(Identity { id, r#type, name }),
        _ => Err(ParseError::IdentityFieldNotString { index }),
    }
}

fn check_relation_fields(index: usize, structure: &Map<String, Value>) -> Result<(), ParseError> {
    let (Some(participants), Some(relation_type)) = (structure.get(PARTICIPANTS), structure.get(RELATION_TYPE)) else {
        return Ok(());
    };
    let Value::Array(participants) = participants else { return Err(ParseError::ParticipantsNotList { index }) };
    if participants.len() < 2 {
        return Err(ParseError::TooFewParticipants { index });
    }
    if !participants.iter().all(Value::is_string) {
        return Err(ParseError::ParticipantNotString { index });
    }
    let Value::String(relation_type) = relation_type else { return Err(ParseError::RelationTypeNotString { index }) };
    if relation_type.trim().is_empty() {
        return Err(ParseError::EmptyRelationType { index });
    }
    Ok(())
}

fn unknown_keys(map: &Map<String, Value>, allowed: &[&str]) -> String {
    let unknown: Vec<&str> = map.keys().map(String::as_str).filter(|k| !allowed.contains(k)).collect();
    unknown.join(", ")
}

/// Serializes to the canonical pretty form (sorted keys, two-space indent, non-ASCII kept).
pub fn to_canonical_string(structure: &KnowledgeStructure) -> String {
    let mut out = Vec::with_capacity(structure.len() * 160 + 64);
    let mut ser =
        serde_json::Serializer::with_formatter(&mut out, serde_json::ser::PrettyFormatter::with_indent(b"  "));
    // Serializing in-memory JSON values into a Vec cannot fail.
    Canonical(structure).serialize(&mut ser).expect("serializing to memory");
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// Serializes to the compact canonical form (same content and key order, no whitespace); used for
/// storage, where bytes matter more than looks.
pub fn to_compact_string(structure: &KnowledgeStructure) -> String {
    serde_json::to_string(&Canonical(structure)).expect("serializing to memory")
}

/// The canonical JSON value of a structure.
pub fn to_value(structure: &KnowledgeStructure) -> Value {
    serde_json::to_value(Canonical(structure)).expect("serializing to memory")
}

/// Serializes a structure in canonical form without building an intermediate `Value`.
#[derive(Debug, Clone, Copy)]
pub struct Canonical<'a>(pub &'a KnowledgeStructure);

impl Serialize for Canonical<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut root = serializer.serialize_map(Some(2))?;
        root.serialize_entry("objects", &Objects(self.0))?;
        root.serialize_entry("version", FORMAT_VERSION)?;
        root.end()
    }
}

struct Objects<'a>(&'a KnowledgeStructure);

impl Serialize for Objects<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.0.len()))?;
        for object in self.0.objects() {
            seq.serialize_element(&CanonicalObject(object))?;
        }
        seq.end()
    }
}

/// Serializes one object as `{"identity": {"id", "name", "type"}, "structure": {...}}`.
#[derive(Debug, Clone, Copy)]
pub struct CanonicalObject<'a>(pub &'a KnowledgeObject);

impl Serialize for CanonicalObject<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut object = serializer.serialize_map(Some(2))?;
        object.serialize_entry("identity", &CanonicalIdentity(&self.0.identity))?;
        object.serialize_entry("structure", &self.0.structure)?;
        object.end()
    }
}

struct CanonicalIdentity<'a>(&'a Identity);

impl Serialize for CanonicalIdentity<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut identity = serializer.serialize_map(Some(3))?;
        identity.serialize_entry("id", &self.0.id)?;
        identity.serialize_entry("name", &self.0.name)?;
        identity.serialize_entry("type", &self.0.r#type)?;
        identity.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EARTH: &str = r#"{"version": "1.0", "objects": [
        {"identity": {"id": "planet-earth", "type": "Planet", "name": "Earth"}, "structure": {"mass_kg": 5.97e24, "b": 1, "a": "é"}},
        {"identity": {"id": "star-sun", "type": "Star", "name": "Sun"}},
        {"identity": {"id": "rel-orbit-1", "type": "Relation", "name": "Earth orbits Sun"},
         "structure": {"participants": ["planet-earth", "star-sun"], "relation_type": "orbits"}}]}"#;

    #[test]
    fn serializes_canonically() {
        let s = parse_str(EARTH).unwrap();
        let expected = r#"{
  "objects": [
    {
      "identity": {
        "id": "planet-earth",
        "name": "Earth",
        "type": "Planet"
      },
      "structure": {
        "a": "é",
        "b": 1,
        "mass_kg": 5.97e+24
      }
    },
    {
      "identity": {
        "id": "star-sun",
        "name": "Sun",
        "type": "Star"
      },
      "structure": {}
    },
    {
      "identity": {
        "id": "rel-orbit-1",
        "name": "Earth orbits Sun",
        "type": "Relation"
      },
      "structure": {
        "participants": [
          "planet-earth",
          "star-sun"
        ],
        "relation_type": "orbits"
      }
    }
  ],
  "version": "1.0"
}"#;
        assert_eq!(to_canonical_string(&s), expected);
        assert_eq!(parse_str(&to_compact_string(&s)).unwrap(), s);
        assert_eq!(to_value(&s), serde_json::from_str::<Value>(expected).unwrap());
    }

    fn err(text: &str) -> String {
        parse_str(text).unwrap_err().to_string()
    }

    #[test]
    fn parse_errors_match_the_reference() {
        assert!(err("{").starts_with("Invalid JSON: "));
        assert_eq!(err("[]"), "Top-level JSON value must be an object.");
        assert_eq!(err("{}"), "Missing top-level 'objects' array.");
        assert_eq!(err(r#"{"objects": {}}"#), "'objects' must be a JSON array.");
        assert_eq!(err(r#"{"objects": [], "version": "2.0"}"#), "Unsupported serialization version '2.0'.");
        assert_eq!(err(r#"{"objects": [], "version": 1.0}"#), "Unsupported serialization version 1.0.");
        assert_eq!(err(r#"{"objects": [1]}"#), "Object #0: Each object must be represented by a JSON object.");
        assert_eq!(
            err(r#"{"objects": [{"identity": {}, "z": 1, "a": 2}]}"#),
            "Object #0: Unknown object field(s): a, z"
        );
        assert_eq!(err(r#"{"objects": [{}]}"#), "Object #0: Missing object identity.");
        assert_eq!(err(r#"{"objects": [{"identity": []}]}"#), "Object #0: Object identity must be an object.");
        assert_eq!(
            err(r#"{"objects": [{"identity": {"id": "a", "type": "T", "name": "n", "x": 1}}]}"#),
            "Object #0: Unknown identity field(s): x"
        );
        assert_eq!(err(r#"{"objects": [{"identity": {"type": "T"}}]}"#), "Object #0: Missing identity field 'id'.");
        assert_eq!(
            err(r#"{"objects": [{"identity": {"id": 1, "type": "T", "name": "n"}}]}"#),
            "Object #0: Identity fields must all be strings."
        );
        let obj = |structure: &str| {
            format!(
                r#"{{"objects": [{{"identity": {{"id": "r", "type": "R", "name": ""}}, "structure": {structure}}}]}}"#
            )
        };
        assert_eq!(err(&obj("null")), "Object #0: Object structure must be an object.");
        assert_eq!(
            err(&obj(r#"{"participants": "a", "relation_type": "x"}"#)),
            "Object #0: Relation participants must be a list."
        );
        assert_eq!(
            err(&obj(r#"{"participants": ["a"], "relation_type": "x"}"#)),
            "Object #0: CanonicalRelation requires at least two participants."
        );
        assert_eq!(
            err(&obj(r#"{"participants": ["a", 1], "relation_type": "x"}"#)),
            "Object #0: Relation participants must all be strings."
        );
        assert_eq!(
            err(&obj(r#"{"participants": ["a", "b"], "relation_type": 3}"#)),
            "Object #0: Relation type must be a string."
        );
        assert_eq!(
            err(&obj(r#"{"participants": ["a", "b"], "relation_type": " "}"#)),
            "Object #0: Relation type cannot be empty."
        );
        assert_eq!(
            err(
                r#"{"objects": [{"identity": {"id": "a", "type": "T", "name": "n"}}, {"identity": {"id": "a", "type": "T", "name": "m"}}]}"#
            ),
            "Duplicate canonical identity: 'a'"
        );
    }

    #[test]
    fn lenient_where_the_reference_is() {
        let s = parse_str(
            r#"{"objects": [{"identity": {"id": "", "type": "", "name": ""}}], "_cks_metadata": {}, "version": null}"#,
        )
        .unwrap();
        assert_eq!(s.len(), 1);
        // Only one of the two relation keys: an ordinary object.
        let s = parse_str(
            r#"{"objects": [{"identity": {"id": "a", "type": "T", "name": "n"}, "structure": {"participants": 1}}]}"#,
        )
        .unwrap();
        assert!(!s.get("a").unwrap().is_relation());
    }

    mod properties {
        use super::*;
        use crate::structure::ChangeSet;
        use crate::testing::arb_structure;
        use proptest::prelude::*;

        fn arb_json() -> impl Strategy<Value = Value> {
            let leaf = prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::Bool),
                any::<i64>().prop_map(Value::from),
                any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
                "\\PC{0,12}".prop_map(Value::String),
            ];
            leaf.prop_recursive(3, 24, 4, |inner| {
                prop_oneof![
                    proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                    proptest::collection::btree_map("\\PC{0,6}", inner, 0..4)
                        .prop_map(|m| Value::Object(m.into_iter().collect())),
                ]
            })
        }

        proptest! {
            /// parse(serialize(s)) == s, for the pretty and the compact form, and hashes survive.
            #[test]
            fn parse_inverts_serialize(base in arb_structure(), extras in proptest::collection::vec(arb_json(), 0..8)) {
                let mut s = base;
                let ids: Vec<String> = s.ids().map(str::to_owned).collect();
                let mut log = ChangeSet::default();
                for (id, extra) in ids.iter().zip(extras) {
                    let mut object = KnowledgeObject::clone(s.get(id).unwrap());
                    object.structure.insert("extra".into(), extra);
                    s.put(object, &mut log).unwrap();
                }
                let pretty = parse_str(&to_canonical_string(&s)).unwrap();
                prop_assert_eq!(&pretty, &s);
                let compact = parse_str(&to_compact_string(&s)).unwrap();
                prop_assert_eq!(&compact, &s);
                prop_assert_eq!(compact.root_hash(), s.root_hash());
            }
        }
    }
}
