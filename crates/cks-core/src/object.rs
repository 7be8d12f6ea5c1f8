//! Knowledge objects and relations: the atoms of a knowledge structure.
//!
//! An object is an `identity` (exactly `id`, `type`, `name`) plus a free-form JSON `structure`.
//! An object *is a relation* when its structure holds both `participants` and `relation_type`;
//! relations are hyperedges, so every participant reaches every other participant in one hop.

use compact_str::CompactString;
use serde_json::{Map, Value};
use smallvec::SmallVec;
use std::fmt;

pub use crate::fields::Structure;

/// The structure key that lists a relation's participants.
pub const PARTICIPANTS: &str = "participants";
/// The structure key that names a relation's type.
pub const RELATION_TYPE: &str = "relation_type";
/// The relation type with semantic meaning: `derives` edges are (source, target) and must be acyclic.
pub const DERIVES: &str = "derives";

/// The three identity strings of an object. Each is held inline up to 24 bytes (most ids and
/// type names, many names), without an allocation of its own.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Identity {
    pub id: CompactString,
    pub r#type: CompactString,
    pub name: CompactString,
}

impl Identity {
    pub fn new(id: impl Into<CompactString>, r#type: impl Into<CompactString>, name: impl Into<CompactString>) -> Self {
        Identity { id: id.into(), r#type: r#type.into(), name: name.into() }
    }
}

/// One object of a knowledge structure.
#[derive(Clone, Debug, PartialEq)]
pub struct KnowledgeObject {
    pub identity: Identity,
    pub structure: Structure,
}

/// A borrowed view of a relation's two defining fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RelationView<'a> {
    /// Held inline up to four (relations are nearly all binary): reading a relation allocates
    /// nothing, and indexing a million relations reads a million of them.
    pub participants: SmallVec<[&'a str; 4]>,
    pub relation_type: &'a str,
}

impl RelationView<'_> {
    /// `(source, target)` for a binary relation; `None` for any other arity.
    pub fn source_target(&self) -> Option<(&str, &str)> {
        match self.participants.as_slice() {
            [source, target] => Some((source, target)),
            _ => None,
        }
    }
}

/// Why an object that claims to be a relation is malformed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RelationShapeError {
    #[error("relation '{id}' must have at least 2 participants (found {found})")]
    TooFewParticipants { id: String, found: usize },
    #[error("relation '{id}': 'participants' must be a list of object id strings")]
    ParticipantsNotStrings { id: String },
    #[error("relation '{id}': 'relation_type' must be a non-empty string")]
    EmptyRelationType { id: String },
}

impl KnowledgeObject {
    pub fn new(identity: Identity, structure: impl Into<Structure>) -> Self {
        KnowledgeObject { identity, structure: structure.into() }
    }

    pub fn id(&self) -> &str {
        &self.identity.id
    }

    /// True when the structure holds both relation keys (whatever their shape).
    pub fn is_relation(&self) -> bool {
        self.structure.contains_key(PARTICIPANTS) && self.structure.contains_key(RELATION_TYPE)
    }

    /// The relation fields, when this object is a well-formed relation.
    ///
    /// Objects inside a [`crate::KnowledgeStructure`] are always well-formed (checked on insert), so
    /// there `None` simply means "not a relation".
    pub fn relation(&self) -> Option<RelationView<'_>> {
        let participants = self.structure.get(PARTICIPANTS)?.as_array()?;
        let relation_type = self.structure.get(RELATION_TYPE)?.as_str()?;
        let participants = participants.iter().map(Value::as_str).collect::<Option<SmallVec<_>>>()?;
        Some(RelationView { participants, relation_type })
    }

    /// Checks the shape rules of a relation (≥ 2 string participants, non-empty type).
    /// Objects that are not relations always pass.
    pub fn check_relation_shape(&self) -> Result<(), RelationShapeError> {
        if !self.is_relation() {
            return Ok(());
        }
        let id = || self.identity.id.to_string();
        let participants = match &self.structure[PARTICIPANTS] {
            Value::Array(items) if items.iter().all(Value::is_string) => items.len(),
            _ => return Err(RelationShapeError::ParticipantsNotStrings { id: id() }),
        };
        match &self.structure[RELATION_TYPE] {
            Value::String(s) if !s.is_empty() => {}
            _ => return Err(RelationShapeError::EmptyRelationType { id: id() }),
        }
        if participants < 2 {
            return Err(RelationShapeError::TooFewParticipants { id: id(), found: participants });
        }
        Ok(())
    }

    /// The object's canonical JSON value: `{"identity": {...}, "structure": {...}}`.
    pub fn to_value(&self) -> Value {
        let mut identity = Map::new();
        identity.insert("id".into(), Value::String(self.identity.id.to_string()));
        identity.insert("name".into(), Value::String(self.identity.name.to_string()));
        identity.insert("type".into(), Value::String(self.identity.r#type.to_string()));
        let mut object = Map::new();
        object.insert("identity".into(), Value::Object(identity));
        object.insert("structure".into(), Value::Object(self.structure.to_map()));
        Value::Object(object)
    }
}

impl fmt::Display for KnowledgeObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} '{}' ({})", self.identity.r#type, self.identity.name, self.identity.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(structure: Value) -> KnowledgeObject {
        let Value::Object(structure) = structure else { unreachable!() };
        KnowledgeObject::new(Identity::new("r", "Relation", "r"), structure)
    }

    #[test]
    fn relation_needs_both_keys() {
        assert!(!obj(json!({"participants": ["a", "b"]})).is_relation());
        assert!(!obj(json!({"relation_type": "x"})).is_relation());
        let rel = obj(json!({"participants": ["a", "b"], "relation_type": "derives"}));
        let view = rel.relation().unwrap();
        assert_eq!(view.source_target(), Some(("a", "b")));
        assert_eq!(view.relation_type, "derives");
    }

    #[test]
    fn relation_shape_errors() {
        let few = obj(json!({"participants": ["a"], "relation_type": "x"}));
        assert_eq!(
            few.check_relation_shape(),
            Err(RelationShapeError::TooFewParticipants { id: "r".into(), found: 1 })
        );
        let bad = obj(json!({"participants": ["a", 3], "relation_type": "x"}));
        assert!(matches!(bad.check_relation_shape(), Err(RelationShapeError::ParticipantsNotStrings { .. })));
        let empty = obj(json!({"participants": ["a", "b"], "relation_type": ""}));
        assert!(matches!(empty.check_relation_shape(), Err(RelationShapeError::EmptyRelationType { .. })));
    }
}
