//! Evolution operations: the wire format (`{"type": "add_object", ...}`), their parsing, and their
//! atomic application to a structure.
//!
//! A batch of operations either applies completely or not at all: on the first failure every change
//! already made is undone (positions included) and the error names the failing operation,
//! "Operation #i: ..." with `i` counted from 0 as the reference does.
//!
//! Deliberate differences from the reference, all stricter or safer:
//! - identity fields must be strings (the reference accepts any value there);
//! - `add_relation` checks the relation shape (≥ 2 string participants, non-empty type);
//! - `add_object` whose structure holds both `participants` and `relation_type` is a relation and is
//!   shape-checked like one (our model decides relation-ness from the structure alone);
//!
//! As in the reference, `remove_object` also removes the relations naming the object, one level
//! deep, and `remove_relation` removes only the relation: a relation that names a removed relation
//! is left dangling, and the commit's validation refuses the change (`CKS-STRUCT-DANGLING-REF`).

use serde_json::{Map, Value};
use std::fmt;

use crate::object::{Identity, KnowledgeObject, PARTICIPANTS, RELATION_TYPE, RelationShapeError, Structure};
use crate::structure::{ChangeSet, KnowledgeStructure, StructureError};

/// How `update_object` combines the patch with the current structure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PatchMode {
    /// Shallow merge; a `null` value deletes the key.
    #[default]
    Merge,
    /// The patch becomes the structure.
    Replace,
}

/// One evolution operation.
#[derive(Clone, Debug, PartialEq)]
pub enum Operation {
    AddObject { identity: Identity, structure: Structure },
    AddRelation { identity: Identity, participants: Vec<String>, relation_type: String, structure: Structure },
    RemoveObject { object_id: String },
    RemoveRelation { relation_id: String },
    UpdateObject { object_id: String, structure_patch: Structure, mode: PatchMode },
    RenameObject { object_id: String, new_name: String },
    RecordInference { identity: Identity, structure: Structure },
    ResolveInferenceConflict { conclusion_id: String, winner_id: String },
}

/// The operation type names, as on the wire.
pub const OPERATION_TYPES: [&str; 8] = [
    "add_object",
    "add_relation",
    "remove_object",
    "remove_relation",
    "update_object",
    "rename_object",
    "record_inference",
    "resolve_inference_conflict",
];

/// A failed operation: its 0-based position in the batch and the reason.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("Operation #{index}: {kind}")]
pub struct OperationError {
    pub index: usize,
    pub kind: OperationErrorKind,
}

/// Why an operation could not be parsed or applied.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum OperationErrorKind {
    #[error("operations must be a JSON array of operation objects")]
    NotAList,
    #[error("operation must be an object")]
    NotAnObject,
    #[error("missing 'type' field")]
    MissingType,
    #[error("unknown operation type {0}; expected one of: {types}", types = OPERATION_TYPES.join(", "))]
    UnknownType(String),
    #[error("missing '{0}' field")]
    MissingField(&'static str),
    #[error("'{field}' must be {expected}, got {got}")]
    WrongType { field: &'static str, expected: &'static str, got: &'static str },
    #[error("invalid 'identity': {0}")]
    InvalidIdentity(String),
    #[error("Unknown update mode {0}; expected 'merge' or 'replace'.")]
    UnknownUpdateMode(String),
    #[error("new_name must be a non-empty string.")]
    EmptyNewName,
    #[error("RecordInference requires identity.type == 'InferenceStep', got '{0}'.")]
    NotAnInferenceStep(String),
    #[error("InferenceStep requires a non-empty 'conclusion' field.")]
    MissingConclusionField,
    #[error("conclusion_id must be a non-empty string.")]
    EmptyConclusionId,
    #[error("winner_id must be a non-empty string.")]
    EmptyWinnerId,
    #[error("conclusion_id and winner_id must differ.")]
    SameConclusionAndWinner,
    #[error("Conflicting value for '{field}' in structure: expected {expected}, got {got}")]
    ConflictingRelationField { field: &'static str, expected: String, got: String },
    #[error("{0}")]
    RelationShape(RelationShapeError),
    #[error("Object '{0}' already exists.")]
    ObjectExists(String),
    #[error("Relation '{0}' already exists.")]
    RelationExists(String),
    #[error("Participant '{0}' does not exist.")]
    ParticipantMissing(String),
    #[error("Object '{0}' does not exist.")]
    ObjectMissing(String),
    #[error("Relation '{0}' does not exist.")]
    RelationMissing(String),
    #[error("'{0}' is a KnowledgeObject, not a CanonicalRelation; use remove_object instead.")]
    NotARelation(String),
    #[error("'{0}' is a CanonicalRelation; update_object only updates plain KnowledgeObjects.")]
    IsARelation(String),
    #[error("Premise '{0}' does not exist.")]
    PremiseMissing(String),
    #[error("Conclusion '{0}' does not exist.")]
    ConclusionMissing(String),
    #[error("winner_id '{0}' does not exist.")]
    WinnerMissing(String),
    #[error("winner_id '{winner}' is not an InferenceStep (type='{found}').")]
    WinnerNotAStep { winner: String, found: String },
    #[error("winner_id '{winner}' does not conclude '{conclusion}' (concludes {found}).")]
    WinnerWrongConclusion { winner: String, conclusion: String, found: String },
    #[error(
        "winner_id '{winner}' is already superseded by '{by}' -- cannot resolve a conflict in favor of an already-retired step."
    )]
    WinnerSuperseded { winner: String, by: String },
}

fn json_type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Python-style truthiness, which the reference's operation rules are written in.
pub(crate) fn truthy(value: Option<&Value>) -> bool {
    match value {
        None | Some(Value::Null) | Some(Value::Bool(false)) => false,
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
        Some(Value::Number(n)) => n.as_f64() != Some(0.0),
        Some(Value::Bool(true)) => true,
    }
}

/// Parses a JSON array of wire operations.
pub fn parse_operations(value: &Value) -> Result<Vec<Operation>, OperationError> {
    let Value::Array(items) = value else {
        return Err(OperationError { index: 0, kind: OperationErrorKind::NotAList });
    };
    items
        .iter()
        .enumerate()
        .map(|(index, item)| Operation::from_value(item).map_err(|kind| OperationError { index, kind }))
        .collect()
}

struct Fields<'a>(&'a Map<String, Value>);

impl<'a> Fields<'a> {
    fn required(&self, field: &'static str) -> Result<&'a Value, OperationErrorKind> {
        match self.0.get(field) {
            None | Some(Value::Null) => Err(OperationErrorKind::MissingField(field)),
            Some(value) => Ok(value),
        }
    }

    fn string(&self, field: &'static str) -> Result<String, OperationErrorKind> {
        match self.required(field)? {
            Value::String(s) => Ok(s.clone()),
            other => Err(OperationErrorKind::WrongType { field, expected: "a string", got: json_type_name(other) }),
        }
    }

    fn object(&self, field: &'static str, required: bool) -> Result<Structure, OperationErrorKind> {
        match self.0.get(field) {
            None | Some(Value::Null) if !required => Ok(Structure::new()),
            None | Some(Value::Null) => Err(OperationErrorKind::MissingField(field)),
            Some(Value::Object(map)) => Ok(map.clone().into()),
            Some(other) => {
                Err(OperationErrorKind::WrongType { field, expected: "an object", got: json_type_name(other) })
            }
        }
    }

    fn identity(&self) -> Result<Identity, OperationErrorKind> {
        let Value::Object(identity) = self.required("identity")? else {
            let got = json_type_name(&self.0["identity"]);
            return Err(OperationErrorKind::WrongType { field: "identity", expected: "an object", got });
        };
        let unknown: Vec<&str> =
            identity.keys().map(String::as_str).filter(|k| !["id", "type", "name"].contains(k)).collect();
        if !unknown.is_empty() {
            return Err(OperationErrorKind::InvalidIdentity(format!("unknown field(s): {}", unknown.join(", "))));
        }
        let field = |name: &str| match identity.get(name) {
            Some(Value::String(s)) => Ok(s.as_str()),
            Some(_) => Err(OperationErrorKind::InvalidIdentity(format!("'{name}' must be a string"))),
            None => Err(OperationErrorKind::InvalidIdentity(format!("missing field '{name}'"))),
        };
        Ok(Identity::new(field("id")?, field("type")?, field("name")?))
    }
}

impl Operation {
    /// The wire name of this operation's type.
    pub fn type_name(&self) -> &'static str {
        match self {
            Operation::AddObject { .. } => "add_object",
            Operation::AddRelation { .. } => "add_relation",
            Operation::RemoveObject { .. } => "remove_object",
            Operation::RemoveRelation { .. } => "remove_relation",
            Operation::UpdateObject { .. } => "update_object",
            Operation::RenameObject { .. } => "rename_object",
            Operation::RecordInference { .. } => "record_inference",
            Operation::ResolveInferenceConflict { .. } => "resolve_inference_conflict",
        }
    }

    /// Parses one wire operation.
    pub fn from_value(value: &Value) -> Result<Operation, OperationErrorKind> {
        let Value::Object(map) = value else { return Err(OperationErrorKind::NotAnObject) };
        let fields = Fields(map);
        let type_name = match map.get("type") {
            None | Some(Value::Null) => return Err(OperationErrorKind::MissingType),
            Some(Value::String(s)) => s.as_str(),
            Some(other) => return Err(OperationErrorKind::UnknownType(other.to_string())),
        };
        Ok(match type_name {
            "add_object" => {
                Operation::AddObject { identity: fields.identity()?, structure: fields.object("structure", false)? }
            }
            "add_relation" => {
                let identity = fields.identity()?;
                fields.required("participants")?;
                fields.required("relation_type")?;
                let participants = match &map["participants"] {
                    Value::Array(items) => {
                        items.iter().map(|p| p.as_str().map(str::to_owned)).collect::<Option<Vec<_>>>().ok_or(
                            OperationErrorKind::RelationShape(RelationShapeError::ParticipantsNotStrings {
                                id: identity.id.to_string(),
                            }),
                        )?
                    }
                    other => {
                        let got = json_type_name(other);
                        return Err(OperationErrorKind::WrongType { field: "participants", expected: "an array", got });
                    }
                };
                let relation_type = fields.string("relation_type")?;
                Operation::AddRelation {
                    identity,
                    participants,
                    relation_type,
                    structure: fields.object("structure", false)?,
                }
            }
            "remove_object" => Operation::RemoveObject { object_id: fields.string("object_id")? },
            "remove_relation" => Operation::RemoveRelation { relation_id: fields.string("relation_id")? },
            "update_object" => {
                let object_id = fields.string("object_id")?;
                let structure_patch = fields.object("structure_patch", true)?;
                let mode = match map.get("mode") {
                    None | Some(Value::Null) => PatchMode::Merge,
                    Some(Value::String(m)) if m == "merge" => PatchMode::Merge,
                    Some(Value::String(m)) if m == "replace" => PatchMode::Replace,
                    Some(Value::String(m)) => return Err(OperationErrorKind::UnknownUpdateMode(format!("'{m}'"))),
                    Some(other) => return Err(OperationErrorKind::UnknownUpdateMode(other.to_string())),
                };
                Operation::UpdateObject { object_id, structure_patch, mode }
            }
            "rename_object" => {
                let object_id = fields.string("object_id")?;
                let new_name = fields.string("new_name")?;
                if new_name.trim().is_empty() {
                    return Err(OperationErrorKind::EmptyNewName);
                }
                Operation::RenameObject { object_id, new_name }
            }
            "record_inference" => {
                let identity = fields.identity()?;
                let structure = fields.object("structure", false)?;
                if identity.r#type != "InferenceStep" {
                    return Err(OperationErrorKind::NotAnInferenceStep(identity.r#type.into()));
                }
                if !truthy(structure.get("conclusion")) {
                    return Err(OperationErrorKind::MissingConclusionField);
                }
                Operation::RecordInference { identity, structure }
            }
            "resolve_inference_conflict" => {
                fields.required("conclusion_id")?;
                fields.required("winner_id")?;
                let non_empty = |field: &'static str, err: OperationErrorKind| match map.get(field) {
                    Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.clone()),
                    _ => Err(err),
                };
                let conclusion_id = non_empty("conclusion_id", OperationErrorKind::EmptyConclusionId)?;
                let winner_id = non_empty("winner_id", OperationErrorKind::EmptyWinnerId)?;
                if conclusion_id == winner_id {
                    return Err(OperationErrorKind::SameConclusionAndWinner);
                }
                Operation::ResolveInferenceConflict { conclusion_id, winner_id }
            }
            other => return Err(OperationErrorKind::UnknownType(format!("'{other}'"))),
        })
    }

    /// The wire form of this operation.
    pub fn to_value(&self) -> Value {
        let identity_value = |identity: &Identity| serde_json::json!({"id": identity.id, "type": identity.r#type, "name": identity.name});
        let mut map = Map::new();
        map.insert("type".into(), Value::String(self.type_name().into()));
        let mut put = |key: &str, value: Value| {
            map.insert(key.into(), value);
        };
        match self {
            Operation::AddObject { identity, structure } | Operation::RecordInference { identity, structure } => {
                put("identity", identity_value(identity));
                put("structure", Value::Object(structure.to_map()));
            }
            Operation::AddRelation { identity, participants, relation_type, structure } => {
                put("identity", identity_value(identity));
                put("participants", participants.iter().cloned().map(Value::String).collect());
                put("relation_type", Value::String(relation_type.clone()));
                put("structure", Value::Object(structure.to_map()));
            }
            Operation::RemoveObject { object_id } => put("object_id", Value::String(object_id.clone())),
            Operation::RemoveRelation { relation_id } => put("relation_id", Value::String(relation_id.clone())),
            Operation::UpdateObject { object_id, structure_patch, mode } => {
                put("object_id", Value::String(object_id.clone()));
                put("structure_patch", Value::Object(structure_patch.to_map()));
                put("mode", Value::String(if *mode == PatchMode::Merge { "merge" } else { "replace" }.into()));
            }
            Operation::RenameObject { object_id, new_name } => {
                put("object_id", Value::String(object_id.clone()));
                put("new_name", Value::String(new_name.clone()));
            }
            Operation::ResolveInferenceConflict { conclusion_id, winner_id } => {
                put("conclusion_id", Value::String(conclusion_id.clone()));
                put("winner_id", Value::String(winner_id.clone()));
            }
        }
        Value::Object(map)
    }

    /// The ids this operation names directly (created, changed or removed).
    pub fn target_id(&self) -> &str {
        match self {
            Operation::AddObject { identity, .. }
            | Operation::AddRelation { identity, .. }
            | Operation::RecordInference { identity, .. } => &identity.id,
            Operation::RemoveObject { object_id }
            | Operation::UpdateObject { object_id, .. }
            | Operation::RenameObject { object_id, .. } => object_id,
            Operation::RemoveRelation { relation_id } => relation_id,
            Operation::ResolveInferenceConflict { conclusion_id, .. } => conclusion_id,
        }
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} '{}'", self.type_name(), self.target_id())
    }
}

/// Applies a batch atomically, recording the primitive changes; on error nothing is changed.
pub fn apply(structure: &mut KnowledgeStructure, operations: &[Operation]) -> Result<ChangeSet, OperationError> {
    let mut log = ChangeSet::default();
    for (index, operation) in operations.iter().enumerate() {
        if let Err(kind) = apply_one(structure, operation, &mut log) {
            structure.undo(log);
            return Err(OperationError { index, kind });
        }
    }
    Ok(log)
}

/// Applies a batch to a copy and returns the new structure.
pub fn evolve(structure: &KnowledgeStructure, operations: &[Operation]) -> Result<KnowledgeStructure, OperationError> {
    let mut next = structure.clone();
    apply(&mut next, operations)?;
    Ok(next)
}

fn put(
    structure: &mut KnowledgeStructure,
    object: KnowledgeObject,
    log: &mut ChangeSet,
) -> Result<(), OperationErrorKind> {
    structure.put(object, log).map_err(|e| match e {
        StructureError::RelationShape(e) => OperationErrorKind::RelationShape(e),
        StructureError::DuplicateId(id) => OperationErrorKind::ObjectExists(id),
    })
}

fn apply_one(
    structure: &mut KnowledgeStructure,
    operation: &Operation,
    log: &mut ChangeSet,
) -> Result<(), OperationErrorKind> {
    use OperationErrorKind as E;
    match operation {
        Operation::AddObject { identity, structure: fields } => {
            if structure.contains(&identity.id) {
                return Err(E::ObjectExists(identity.id.to_string()));
            }
            put(structure, KnowledgeObject::new(identity.clone(), fields.clone()), log)
        }
        Operation::AddRelation { identity, participants, relation_type, structure: fields } => {
            if structure.contains(&identity.id) {
                return Err(E::RelationExists(identity.id.to_string()));
            }
            let mut fields = fields.clone();
            let participants_value = Value::Array(participants.iter().cloned().map(Value::String).collect());
            for (field, expected) in
                [(PARTICIPANTS, participants_value), (RELATION_TYPE, Value::String(relation_type.clone()))]
            {
                match fields.get(field) {
                    Some(got) if *got != expected => {
                        return Err(E::ConflictingRelationField {
                            field,
                            expected: expected.to_string(),
                            got: got.to_string(),
                        });
                    }
                    _ => fields.insert(field, expected),
                };
            }
            let object = KnowledgeObject::new(identity.clone(), fields);
            object.check_relation_shape().map_err(E::RelationShape)?;
            if let Some(missing) = participants.iter().find(|p| !structure.contains(p) && **p != identity.id) {
                return Err(E::ParticipantMissing(missing.clone()));
            }
            put(structure, object, log)
        }
        Operation::RemoveObject { object_id } => {
            if !structure.contains(object_id) {
                return Err(E::ObjectMissing(object_id.clone()));
            }
            structure.remove_with_relations(object_id, log);
            Ok(())
        }
        Operation::RemoveRelation { relation_id } => match structure.get(relation_id) {
            None => Err(E::RelationMissing(relation_id.clone())),
            Some(object) if !object.is_relation() => Err(E::NotARelation(relation_id.clone())),
            Some(_) => {
                // Only the relation: one that names it is left for validation to refuse.
                structure.remove(relation_id, log);
                Ok(())
            }
        },
        Operation::UpdateObject { object_id, structure_patch, mode } => {
            let object = structure.get(object_id).ok_or_else(|| E::ObjectMissing(object_id.clone()))?;
            if object.is_relation() {
                return Err(E::IsARelation(object_id.clone()));
            }
            let mut updated = KnowledgeObject::clone(object);
            match mode {
                PatchMode::Replace => updated.structure = structure_patch.clone(),
                PatchMode::Merge => {
                    for (key, value) in structure_patch {
                        if value.is_null() {
                            updated.structure.remove(key);
                        } else {
                            updated.structure.insert(key, value.clone());
                        }
                    }
                }
            }
            put(structure, updated, log)
        }
        Operation::RenameObject { object_id, new_name } => {
            let object = structure.get(object_id).ok_or_else(|| E::ObjectMissing(object_id.clone()))?;
            let mut renamed = KnowledgeObject::clone(object);
            renamed.identity.name = new_name.as_str().into();
            put(structure, renamed, log)
        }
        Operation::RecordInference { identity, structure: fields } => {
            if structure.contains(&identity.id) {
                return Err(E::ObjectExists(identity.id.to_string()));
            }
            if let Some(Value::Array(premises)) = fields.get("premises") {
                for premise in premises {
                    let id = premise.as_str().map_or_else(|| premise.to_string(), str::to_owned);
                    if !structure.contains(&id) {
                        return Err(E::PremiseMissing(id));
                    }
                }
            }
            let conclusion = fields.get("conclusion").map(|c| c.as_str().map_or_else(|| c.to_string(), str::to_owned));
            if let Some(conclusion) = conclusion.filter(|c| !structure.contains(c)) {
                return Err(E::ConclusionMissing(conclusion));
            }
            put(structure, KnowledgeObject::new(identity.clone(), fields.clone()), log)
        }
        Operation::ResolveInferenceConflict { conclusion_id, winner_id } => {
            let winner = structure.get(winner_id).ok_or_else(|| E::WinnerMissing(winner_id.clone()))?;
            if winner.identity.r#type != "InferenceStep" {
                return Err(E::WinnerNotAStep { winner: winner_id.clone(), found: winner.identity.r#type.to_string() });
            }
            if winner.structure.get("conclusion").and_then(Value::as_str) != Some(conclusion_id.as_str()) {
                let found = winner.structure.get("conclusion").map_or_else(|| "None".into(), Value::to_string);
                return Err(E::WinnerWrongConclusion {
                    winner: winner_id.clone(),
                    conclusion: conclusion_id.clone(),
                    found,
                });
            }
            if truthy(winner.structure.get("superseded_by")) {
                let by = winner.structure["superseded_by"].as_str().unwrap_or_default().to_owned();
                return Err(E::WinnerSuperseded { winner: winner_id.clone(), by });
            }
            let losers: Vec<KnowledgeObject> = structure
                .objects()
                .filter(|o| {
                    o.identity.r#type == "InferenceStep"
                        && o.id() != winner_id
                        && o.structure.get("conclusion").and_then(Value::as_str) == Some(conclusion_id.as_str())
                        && !truthy(o.structure.get("superseded_by"))
                })
                .map(|o| {
                    let mut retired = KnowledgeObject::clone(o);
                    retired.structure.insert("superseded_by", Value::String(winner_id.clone()));
                    retired
                })
                .collect();
            for loser in losers {
                put(structure, loser, log)?;
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::parse_str;
    use serde_json::json;

    fn base() -> KnowledgeStructure {
        parse_str(
            r#"{"objects": [
            {"identity": {"id": "a", "type": "Claim", "name": "A"}, "structure": {"x": 1, "y": 2}},
            {"identity": {"id": "b", "type": "Claim", "name": "B"}},
            {"identity": {"id": "r", "type": "Relation", "name": "a-b"}, "structure": {"participants": ["a", "b"], "relation_type": "supports"}}
        ]}"#,
        )
        .unwrap()
    }

    fn run(structure: &mut KnowledgeStructure, ops: Value) -> Result<ChangeSet, String> {
        let ops = parse_operations(&ops).map_err(|e| e.to_string())?;
        apply(structure, &ops).map_err(|e| e.to_string())
    }

    #[test]
    fn parse_errors_name_the_operation() {
        let cases = [
            (json!([{}]), "Operation #0: missing 'type' field"),
            (
                json!([{"type": "add_object", "identity": {"id": "x", "type": "T", "name": "n"}}, {"type": "explode"}]),
                "Operation #1: unknown operation type 'explode'; expected one of: add_object, add_relation, remove_object, remove_relation, update_object, rename_object, record_inference, resolve_inference_conflict",
            ),
            (json!([{"type": "add_object"}]), "Operation #0: missing 'identity' field"),
            (json!([{"type": "add_object", "identity": []}]), "Operation #0: 'identity' must be an object, got array"),
            (
                json!([{"type": "add_object", "identity": {"id": 1, "type": "T", "name": "n"}}]),
                "Operation #0: invalid 'identity': 'id' must be a string",
            ),
            (
                json!([{"type": "update_object", "object_id": "a", "structure_patch": {}, "mode": "zap"}]),
                "Operation #0: Unknown update mode 'zap'; expected 'merge' or 'replace'.",
            ),
            (
                json!([{"type": "rename_object", "object_id": "a", "new_name": " "}]),
                "Operation #0: new_name must be a non-empty string.",
            ),
            (
                json!([{"type": "record_inference", "identity": {"id": "s", "type": "Claim", "name": "n"}}]),
                "Operation #0: RecordInference requires identity.type == 'InferenceStep', got 'Claim'.",
            ),
            (
                json!([{"type": "resolve_inference_conflict", "conclusion_id": "c", "winner_id": "c"}]),
                "Operation #0: conclusion_id and winner_id must differ.",
            ),
            (json!("nope"), "Operation #0: operations must be a JSON array of operation objects"),
            (json!([3]), "Operation #0: operation must be an object"),
        ];
        for (ops, expected) in cases {
            assert_eq!(parse_operations(&ops).unwrap_err().to_string(), expected);
        }
    }

    #[test]
    fn failing_batch_changes_nothing() {
        let mut s = base();
        let before = s.clone();
        let err = run(&mut s, json!([
            {"type": "add_object", "identity": {"id": "c", "type": "Claim", "name": "C"}},
            {"type": "remove_object", "object_id": "a"},
            {"type": "add_relation", "identity": {"id": "r2", "type": "Relation", "name": ""}, "participants": ["c", "zz"], "relation_type": "x"}
        ])).unwrap_err();
        assert_eq!(err, "Operation #2: Participant 'zz' does not exist.");
        assert_eq!(s, before);
    }

    #[test]
    fn update_merge_replace_rename_and_cascade() {
        let mut s = base();
        run(&mut s, json!([{"type": "update_object", "object_id": "a", "structure_patch": {"x": null, "z": 3}}]))
            .unwrap();
        assert_eq!(Value::from(s.get("a").unwrap().structure.clone()), json!({"y": 2, "z": 3}));
        run(
            &mut s,
            json!([{"type": "update_object", "object_id": "a", "structure_patch": {"q": 1}, "mode": "replace"}]),
        )
        .unwrap();
        assert_eq!(Value::from(s.get("a").unwrap().structure.clone()), json!({"q": 1}));
        assert_eq!(s.index_of("a"), Some(0), "updates keep the position");
        let err = run(&mut s, json!([{"type": "update_object", "object_id": "r", "structure_patch": {}}])).unwrap_err();
        assert_eq!(err, "Operation #0: 'r' is a CanonicalRelation; update_object only updates plain KnowledgeObjects.");
        run(&mut s, json!([{"type": "rename_object", "object_id": "r", "new_name": "renamed"}])).unwrap();
        assert_eq!(s.get("r").unwrap().identity.name, "renamed");
        let log = run(&mut s, json!([{"type": "remove_object", "object_id": "b"}])).unwrap();
        assert_eq!(s.ids().collect::<Vec<_>>(), ["a"]);
        assert_eq!(log.net().len(), 2);
        let err = run(&mut s, json!([{"type": "remove_relation", "relation_id": "a"}])).unwrap_err();
        assert_eq!(err, "Operation #0: 'a' is a KnowledgeObject, not a CanonicalRelation; use remove_object instead.");
    }

    #[test]
    fn add_relation_merges_structure_and_rejects_conflicts() {
        let mut s = base();
        run(
            &mut s,
            json!([{"type": "add_relation", "identity": {"id": "r2", "type": "Relation", "name": ""},
            "participants": ["b", "a"], "relation_type": "refutes", "structure": {"weight": 2}}]),
        )
        .unwrap();
        let r2 = s.get("r2").unwrap();
        assert_eq!(r2.relation().unwrap().participants.as_slice(), ["b", "a"]);
        assert_eq!(r2.structure["weight"], 2);
        let err = run(
            &mut s,
            json!([{"type": "add_relation", "identity": {"id": "r3", "type": "Relation", "name": ""},
            "participants": ["b", "a"], "relation_type": "x", "structure": {"relation_type": "y"}}]),
        )
        .unwrap_err();
        assert_eq!(err, "Operation #0: Conflicting value for 'relation_type' in structure: expected \"x\", got \"y\"");
        let err = run(
            &mut s,
            json!([{"type": "add_relation", "identity": {"id": "r3", "type": "Relation", "name": ""},
            "participants": ["b"], "relation_type": "x"}]),
        )
        .unwrap_err();
        assert_eq!(err, "Operation #0: relation 'r3' must have at least 2 participants (found 1)");
    }

    #[test]
    fn inference_recording_and_resolution() {
        let mut s = base();
        let step = |id: &str, confidence: f64| {
            json!({"type": "record_inference",
            "identity": {"id": id, "type": "InferenceStep", "name": id},
            "structure": {"premises": ["a"], "conclusion": "b", "confidence": confidence}})
        };
        run(&mut s, json!([step("s1", 0.9), step("s2", 0.4), step("s3", 0.5)])).unwrap();
        let err = run(
            &mut s,
            json!([{"type": "record_inference", "identity": {"id": "s4", "type": "InferenceStep", "name": ""},
            "structure": {"premises": ["nope"], "conclusion": "b"}}]),
        )
        .unwrap_err();
        assert_eq!(err, "Operation #0: Premise 'nope' does not exist.");
        run(&mut s, json!([{"type": "resolve_inference_conflict", "conclusion_id": "b", "winner_id": "s1"}])).unwrap();
        assert_eq!(s.get("s2").unwrap().structure["superseded_by"], "s1");
        assert_eq!(s.get("s3").unwrap().structure["superseded_by"], "s1");
        assert!(s.get("s1").unwrap().structure.get("superseded_by").is_none());
        let err = run(&mut s, json!([{"type": "resolve_inference_conflict", "conclusion_id": "b", "winner_id": "s2"}]))
            .unwrap_err();
        assert_eq!(
            err,
            "Operation #0: winner_id 's2' is already superseded by 's1' -- cannot resolve a conflict in favor of an already-retired step."
        );
    }

    #[test]
    fn wire_round_trip() {
        let ops = json!([
            {"type": "add_object", "identity": {"id": "x", "type": "T", "name": "n"}, "structure": {"k": [1]}},
            {"type": "add_relation", "identity": {"id": "y", "type": "Relation", "name": ""}, "participants": ["x", "a"], "relation_type": "t", "structure": {}},
            {"type": "update_object", "object_id": "x", "structure_patch": {"k": null}, "mode": "merge"},
            {"type": "rename_object", "object_id": "x", "new_name": "m"},
            {"type": "remove_relation", "relation_id": "y"},
            {"type": "remove_object", "object_id": "x"},
            {"type": "resolve_inference_conflict", "conclusion_id": "c", "winner_id": "w"}
        ]);
        let parsed = parse_operations(&ops).unwrap();
        let back: Value = parsed.iter().map(Operation::to_value).collect();
        assert_eq!(back, ops);
    }
}
