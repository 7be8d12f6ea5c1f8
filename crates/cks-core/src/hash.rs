//! Content hashing: a SHA-256 hash per object and an order-independent root hash per structure.
//!
//! # Leaf encoding (version 1)
//!
//! An object's hash is `SHA-256("cks.object.v1" 0x00 ‖ S(id) ‖ S(type) ‖ S(name) ‖ V(structure))`
//! where every value is tagged and length- or count-prefixed, so no two different inputs share an
//! encoding:
//!
//! | value | encoding |
//! |---|---|
//! | string `s` (`S`) | `b's'` ‖ u64-BE byte length ‖ UTF-8 bytes |
//! | null | `b'n'` |
//! | true / false | `b't'` / `b'f'` |
//! | number | `b'#'` ‖ u64-BE length ‖ its JSON text as printed by this crate (shortest round-trip form) |
//! | array | `b'['` ‖ u64-BE count ‖ items |
//! | object | `b'{'` ‖ u64-BE count ‖ (`S(key)` ‖ `V(value)`)* with keys in byte order |
//!
//! # Root hash
//!
//! The root hash must not depend on object order and must be cheap to update when a few objects
//! change. We keep the sum, modulo 2^256, of all object hashes read as big-endian integers (a
//! multiset hash in the style of Bellare–Micciancio's AdHash) together with the object count, and
//! publish `SHA-256("cks.root.v1" 0x00 ‖ u64-BE count ‖ sum)`. Adding or removing an object is one
//! 256-bit addition or subtraction, so a commit never rehashes the whole graph. Because ids are
//! unique, no object hash can occur twice in one structure.
//!
//! These hashes are ours: the Python reference hashes Python `repr` text, so the two are not comparable.

use serde_json::Value;
use sha2::{Digest, Sha256};
use std::fmt;

use crate::object::KnowledgeObject;

/// A SHA-256 digest.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContentHash(pub [u8; 32]);

impl ContentHash {
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
}

impl fmt::Debug for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ContentHash({})", self.to_hex())
    }
}

impl fmt::Display for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// Hashes one object with the version-1 leaf encoding.
pub fn object_hash(object: &KnowledgeObject) -> ContentHash {
    let mut hasher = Sha256::new();
    hasher.update(b"cks.object.v1\0");
    write_str(&mut hasher, &object.identity.id);
    write_str(&mut hasher, &object.identity.r#type);
    write_str(&mut hasher, &object.identity.name);
    write_entries(&mut hasher, object.structure.len(), object.structure.iter());
    ContentHash(hasher.finalize().into())
}

fn write_len(hasher: &mut Sha256, len: usize) {
    hasher.update((len as u64).to_be_bytes());
}

fn write_str(hasher: &mut Sha256, s: &str) {
    hasher.update(b"s");
    write_len(hasher, s.len());
    hasher.update(s.as_bytes());
}

fn write_map(hasher: &mut Sha256, map: &serde_json::Map<String, Value>) {
    write_entries(hasher, map.len(), map);
}

/// Both `serde_json::Map` (a B-tree) and [`crate::Structure`] iterate in key order, which is byte
/// order for UTF-8 strings.
fn write_entries<'a, K: AsRef<str> + ?Sized + 'a>(
    hasher: &mut Sha256,
    len: usize,
    entries: impl IntoIterator<Item = (&'a K, &'a Value)>,
) {
    hasher.update(b"{");
    write_len(hasher, len);
    for (key, value) in entries {
        write_str(hasher, key.as_ref());
        write_value(hasher, value);
    }
}

fn write_value(hasher: &mut Sha256, value: &Value) {
    match value {
        Value::Null => hasher.update(b"n"),
        Value::Bool(true) => hasher.update(b"t"),
        Value::Bool(false) => hasher.update(b"f"),
        Value::Number(n) => {
            let text = n.to_string();
            hasher.update(b"#");
            write_len(hasher, text.len());
            hasher.update(text.as_bytes());
        }
        Value::String(s) => write_str(hasher, s),
        Value::Array(items) => {
            hasher.update(b"[");
            write_len(hasher, items.len());
            for item in items {
                write_value(hasher, item);
            }
        }
        Value::Object(map) => write_map(hasher, map),
    }
}

/// The incrementally maintained multiset accumulator behind a structure's root hash.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RootAccumulator {
    /// Sum of leaf hashes modulo 2^256, as four big-endian u64 limbs (most significant first).
    sum: [u64; 4],
    count: u64,
}

impl RootAccumulator {
    pub fn insert(&mut self, leaf: &ContentHash) {
        let limbs = limbs(leaf);
        let mut carry = 0u64;
        for i in (0..4).rev() {
            let (s1, c1) = self.sum[i].overflowing_add(limbs[i]);
            let (s2, c2) = s1.overflowing_add(carry);
            self.sum[i] = s2;
            carry = u64::from(c1) + u64::from(c2);
        }
        self.count += 1;
    }

    pub fn remove(&mut self, leaf: &ContentHash) {
        let limbs = limbs(leaf);
        let mut borrow = 0u64;
        for i in (0..4).rev() {
            let (d1, b1) = self.sum[i].overflowing_sub(limbs[i]);
            let (d2, b2) = d1.overflowing_sub(borrow);
            self.sum[i] = d2;
            borrow = u64::from(b1) + u64::from(b2);
        }
        self.count -= 1;
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    /// The published root hash.
    pub fn root(&self) -> ContentHash {
        let mut hasher = Sha256::new();
        hasher.update(b"cks.root.v1\0");
        hasher.update(self.count.to_be_bytes());
        for limb in self.sum {
            hasher.update(limb.to_be_bytes());
        }
        ContentHash(hasher.finalize().into())
    }
}

fn limbs(hash: &ContentHash) -> [u64; 4] {
    std::array::from_fn(|i| u64::from_be_bytes(hash.0[i * 8..i * 8 + 8].try_into().expect("8 bytes")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::{Identity, KnowledgeObject};
    use serde_json::json;

    fn object(id: &str, structure: Value) -> KnowledgeObject {
        let Value::Object(structure) = structure else { unreachable!() };
        KnowledgeObject::new(Identity::new(id, "T", "n"), structure)
    }

    #[test]
    fn object_hash_is_stable_and_sensitive() {
        let a = object_hash(&object("a", json!({"x": 1})));
        // A pinned value: the leaf encoding is a published format and must not drift.
        assert_eq!(a, object_hash(&object("a", json!({"x": 1}))));
        assert_ne!(a, object_hash(&object("a", json!({"x": 1.0}))));
        assert_ne!(a, object_hash(&object("a", json!({"x": "1"}))));
        assert_ne!(a, object_hash(&object("b", json!({"x": 1}))));
        // Length prefixes keep field boundaries apart.
        let split1 = KnowledgeObject::new(Identity::new("ab", "c", ""), crate::Structure::new());
        let split2 = KnowledgeObject::new(Identity::new("a", "bc", ""), crate::Structure::new());
        assert_ne!(object_hash(&split1), object_hash(&split2));
    }

    #[test]
    fn object_hash_known_answer() {
        let h = object_hash(&object("a", json!({"k": [null, true, "é"]})));
        assert_eq!(h.to_hex(), KNOWN_ANSWER);
    }
    const KNOWN_ANSWER: &str = "faa35c613d9294dbd398cff6d732d4e3a56405f38f4addea8749ae3ee329ed1f";

    #[test]
    fn object_hash_known_answer_for_every_kind_of_value() {
        // Numbers of each kind, nesting, and strings longer than any buffer the hasher keeps.
        let long = "λ".repeat(700);
        let structure = json!({
            "ints": [0, -7, u64::MAX, i64::MIN], "floats": [0.5, -1e300, 2.0e-7, 1.0],
            "nested": {"b": {"c": [[], {}, false]}, "a": null}, "long": long, "": "",
        });
        let h = object_hash(&object(&"i".repeat(300), structure));
        assert_eq!(h.to_hex(), "184606a806a81ecf20690f35898a87c4de282fdd40cc64353b1ed1b49e845e91");
    }

    #[test]
    fn accumulator_is_order_independent_and_invertible() {
        let leaves: Vec<_> = (0..50).map(|i| object_hash(&object(&format!("o{i}"), json!({"i": i})))).collect();
        let mut forward = RootAccumulator::default();
        leaves.iter().for_each(|l| forward.insert(l));
        let mut backward = RootAccumulator::default();
        leaves.iter().rev().for_each(|l| backward.insert(l));
        assert_eq!(forward.root(), backward.root());
        let empty_root = RootAccumulator::default().root();
        leaves.iter().for_each(|l| forward.remove(l));
        assert_eq!(forward, RootAccumulator::default());
        assert_eq!(forward.root(), empty_root);
    }
}
