//! The text forms the runtime hands to stores: states as compact canonical JSON, and deltas as a
//! JSON list of primitive changes, `[{"put": {identity, structure}}, {"del": "<id>"}]`.
//!
//! A delta replays the exact primitive mutations of a commit (a put replaces in place or appends,
//! a del removes and closes the gap), so replaying it reproduces the committed state including
//! object order, not only its content.

use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use serde_json::Value;
use std::sync::Arc;

use cks_core::json::{self, CanonicalObject};
use cks_core::{DeltaOp, KnowledgeStructure};

use crate::store::StoreError;

pub fn encode_state(structure: &KnowledgeStructure) -> String {
    json::to_compact_string(structure)
}

pub fn decode_state(text: &str) -> Result<KnowledgeStructure, StoreError> {
    json::parse_str(text).map_err(|e| StoreError::Corrupt(format!("stored state does not parse: {e}")))
}

struct Delta<'a>(&'a [DeltaOp]);

impl Serialize for Delta<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.0.len()))?;
        for op in self.0 {
            seq.serialize_element(&DeltaEntry(op))?;
        }
        seq.end()
    }
}

struct DeltaEntry<'a>(&'a DeltaOp);

impl Serialize for DeltaEntry<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(1))?;
        match self.0 {
            DeltaOp::Put(object) => map.serialize_entry("put", &CanonicalObject(object))?,
            DeltaOp::Remove(id) => map.serialize_entry("del", id)?,
        }
        map.end()
    }
}

pub fn encode_delta(delta: &[DeltaOp]) -> String {
    serde_json::to_string(&Delta(delta)).expect("serializing to memory")
}

pub fn decode_delta(text: &str) -> Result<Vec<DeltaOp>, StoreError> {
    let corrupt = |detail: String| StoreError::Corrupt(format!("stored delta is malformed: {detail}"));
    let Value::Array(items) = serde_json::from_str(text).map_err(|e| corrupt(e.to_string()))? else {
        return Err(corrupt("not a list".into()));
    };
    items
        .into_iter()
        .enumerate()
        .map(|(index, item)| match item {
            Value::Object(mut map) if map.len() == 1 => match (map.remove("put"), map.remove("del")) {
                (Some(object), None) => json::parse_object(index, object)
                    .map(|o| DeltaOp::Put(Arc::new(o)))
                    .map_err(|e| corrupt(e.to_string())),
                (None, Some(Value::String(id))) => Ok(DeltaOp::Remove(id)),
                _ => Err(corrupt(format!("entry #{index} is neither put nor del"))),
            },
            _ => Err(corrupt(format!("entry #{index} is not a one-key object"))),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use cks_core::{ChangeSet, Identity, KnowledgeObject};

    #[test]
    fn delta_round_trips_and_rejects_garbage() {
        let mut s = KnowledgeStructure::new();
        let mut log = ChangeSet::default();
        s.put(KnowledgeObject::new(Identity::new("a", "T", "é"), Default::default()), &mut log).unwrap();
        s.remove("a", &mut log);
        let delta = log.to_delta();
        let text = encode_delta(&delta);
        assert_eq!(text, r#"[{"put":{"identity":{"id":"a","name":"é","type":"T"},"structure":{}}},{"del":"a"}]"#);
        assert_eq!(decode_delta(&text).unwrap(), delta);
        for bad in ["{}", "[1]", r#"[{"put": 1}]"#, r#"[{"del": 1}]"#, r#"[{"put": {}, "del": "a"}]"#, "["] {
            assert!(matches!(decode_delta(bad), Err(StoreError::Corrupt(_))), "{bad}");
        }
    }
}
