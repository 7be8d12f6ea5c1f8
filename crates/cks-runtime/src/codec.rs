//! The text forms the runtime hands to stores: states as compact canonical JSON, and deltas as a
//! JSON list of primitive changes, `[{"put": {identity, structure}, "was": null}, {"del": "<id>",
//! "was": {identity, structure}}]`.
//!
//! A delta replays the exact primitive mutations of a commit (a put replaces in place or appends,
//! a del removes and closes the gap), so replaying it reproduces the committed state including
//! object order, not only its content. `was` is the object as it was before the change (`null`:
//! it did not exist), so a run of deltas read backwards says what an old version held without
//! rebuilding it ([`Rewind`]). Deltas written before `was` existed lack it and still replay.

use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use serde_json::Value;
use std::sync::Arc;

use cks_core::json::{self, CanonicalObject};
use cks_core::{Change, ChangeSet, DeltaOp, KnowledgeObject, KnowledgeStructure, Rewind};

use crate::store::StoreError;

pub fn encode_state(structure: &KnowledgeStructure) -> String {
    json::to_compact_string(structure)
}

pub fn decode_state(text: &str) -> Result<KnowledgeStructure, StoreError> {
    json::parse_str(text).map_err(unparsable)
}

/// [`decode_state`] of a text read a piece at a time, never held whole.
pub fn read_state(reader: &mut dyn std::io::Read) -> Result<KnowledgeStructure, StoreError> {
    json::parse_read(reader).map_err(unparsable)
}

fn unparsable(e: json::ParseError) -> StoreError {
    StoreError::Corrupt(format!("stored state does not parse: {e}"))
}

struct Delta<'a>(&'a [Change]);

impl Serialize for Delta<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.0.len()))?;
        for change in self.0 {
            seq.serialize_element(&DeltaEntry(change))?;
        }
        seq.end()
    }
}

struct DeltaEntry<'a>(&'a Change);

impl Serialize for DeltaEntry<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(2))?;
        let previous = match self.0 {
            Change::Put { current, previous, .. } => {
                map.serialize_entry("put", &CanonicalObject(&current.object))?;
                previous.as_ref()
            }
            Change::Remove { previous, .. } => {
                map.serialize_entry("del", previous.object.id())?;
                Some(previous)
            }
        };
        map.serialize_entry("was", &previous.map(|e| CanonicalObject(&e.object)))?;
        map.end()
    }
}

/// The stored form of a commit's primitive changes, with what each changed object was before.
pub fn encode_delta(changes: &ChangeSet) -> String {
    serde_json::to_string(&Delta(&changes.changes)).expect("serializing to memory")
}

/// One decoded delta entry: the change to replay and, when the delta recorded it, the object
/// as it was before (`Some(None)`: it did not exist).
type DecodedEntry = (DeltaOp, Option<Option<Arc<KnowledgeObject>>>);

fn decode_entries(text: &str) -> Result<Vec<DecodedEntry>, StoreError> {
    let corrupt = |detail: String| StoreError::Corrupt(format!("stored delta is malformed: {detail}"));
    let Value::Array(items) = serde_json::from_str(text).map_err(|e| corrupt(e.to_string()))? else {
        return Err(corrupt("not a list".into()));
    };
    let object =
        |index: usize, value: Value| json::parse_object(index, value).map(Arc::new).map_err(|e| corrupt(e.to_string()));
    items
        .into_iter()
        .enumerate()
        .map(|(index, item)| {
            let Value::Object(mut map) = item else {
                return Err(corrupt(format!("entry #{index} is not an object")));
            };
            let was = match map.remove("was") {
                None => None,
                Some(Value::Null) => Some(None),
                Some(value) => Some(Some(object(index, value)?)),
            };
            let op = match (map.remove("put"), map.remove("del"), map.is_empty()) {
                (Some(put), None, true) => DeltaOp::Put(object(index, put)?),
                (None, Some(Value::String(id)), true) => DeltaOp::Remove(id),
                _ => return Err(corrupt(format!("entry #{index} is neither put nor del"))),
            };
            Ok((op, was))
        })
        .collect()
}

/// The changes a stored delta replays.
pub fn decode_delta(text: &str) -> Result<Vec<DeltaOp>, StoreError> {
    Ok(decode_entries(text)?.into_iter().map(|(op, _)| op).collect())
}

/// Records a stored delta's changes, with what each object was before, in `rewind`; false (and
/// `rewind` partly filled) when the delta was written without them.
pub fn rewind_delta(text: &str, rewind: &mut Rewind) -> Result<bool, StoreError> {
    for (op, was) in decode_entries(text)? {
        let Some(was) = was else { return Ok(false) };
        let id = match &op {
            DeltaOp::Put(object) => object.id(),
            DeltaOp::Remove(id) => id,
        };
        rewind.record(id, was);
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cks_core::Identity;

    #[test]
    fn delta_round_trips_and_rejects_garbage() {
        let mut s = KnowledgeStructure::new();
        let mut log = ChangeSet::default();
        s.put(KnowledgeObject::new(Identity::new("a", "T", "é"), cks_core::Structure::new()), &mut log).unwrap();
        s.remove("a", &mut log);
        let text = encode_delta(&log);
        let a = r#"{"identity":{"id":"a","name":"é","type":"T"},"structure":{}}"#;
        assert_eq!(text, format!(r#"[{{"put":{a},"was":null}},{{"del":"a","was":{a}}}]"#));
        assert_eq!(decode_delta(&text).unwrap(), log.to_delta());
        // Deltas written before `was` existed replay the same, but cannot be rewound.
        let old = format!(r#"[{{"put":{a}}},{{"del":"a"}}]"#);
        assert_eq!(decode_delta(&old).unwrap(), log.to_delta());
        assert!(!rewind_delta(&old, &mut Rewind::default()).unwrap());
        let mut rewind = Rewind::default();
        assert!(rewind_delta(&text, &mut rewind).unwrap());
        assert_eq!(rewind.len(), 1);
        assert_eq!(rewind.root_hash(&s), KnowledgeStructure::new().root_hash());
        for bad in [
            "{}",
            "[1]",
            r#"[{"put": 1}]"#,
            r#"[{"del": 1}]"#,
            r#"[{"put": {}, "del": "a"}]"#,
            r#"[{"del": "a", "was": 1}]"#,
            r#"[{"del": "a", "extra": 1}]"#,
            "[",
        ] {
            assert!(matches!(decode_delta(bad), Err(StoreError::Corrupt(_))), "{bad}");
        }
    }
}
