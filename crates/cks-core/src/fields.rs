//! The free-form part of an object (its `structure`): JSON values by key, kept as one vector sorted
//! by key.
//!
//! A session can hold a million objects, each with a handful of keys. `serde_json::Map` is a
//! B-tree whose every node has room for eleven entries (about 640 bytes), however few it holds; a
//! sorted vector of three entries takes about 170. Lookups are a binary search over those few
//! keys, and iteration is in key (byte) order — the canonical order for serialization and hashing,
//! as it is for `serde_json::Map`. Nested objects inside the values stay `serde_json` maps: they
//! are rarer, and clients hand them over as they are.

use compact_str::CompactString;
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value};
use smallvec::SmallVec;
use std::fmt;

/// An object's `structure`: a map from keys to JSON values, in key order.
#[derive(Clone, Default, PartialEq)]
pub struct Structure {
    /// Sorted by key, keys unique. Keys are short and repeat across objects: held inline, they
    /// cost no allocation of their own.
    entries: Vec<(CompactString, Value)>,
}

impl Structure {
    pub fn new() -> Self {
        Structure { entries: Vec::new() }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn position(&self, key: &str) -> Result<usize, usize> {
        self.entries.binary_search_by(|(k, _)| k.as_str().cmp(key))
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.position(key).ok().map(|i| &self.entries[i].1)
    }

    pub fn get_mut(&mut self, key: &str) -> Option<&mut Value> {
        self.position(key).ok().map(|i| &mut self.entries[i].1)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.position(key).is_ok()
    }

    /// Sets `key` to `value`; returns the value it replaces.
    pub fn insert(&mut self, key: &str, value: Value) -> Option<Value> {
        match self.position(key) {
            Ok(i) => Some(std::mem::replace(&mut self.entries[i].1, value)),
            Err(i) => {
                self.entries.insert(i, (key.into(), value));
                None
            }
        }
    }

    pub fn remove(&mut self, key: &str) -> Option<Value> {
        self.position(key).ok().map(|i| self.entries.remove(i).1)
    }

    /// Entries in key order.
    pub fn iter(&self) -> Iter<'_> {
        Iter(self.entries.iter())
    }

    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &str> + ExactSizeIterator + '_ {
        self.entries.iter().map(|(k, _)| k.as_str())
    }

    pub fn values(&self) -> impl DoubleEndedIterator<Item = &Value> + ExactSizeIterator + '_ {
        self.entries.iter().map(|(_, v)| v)
    }

    /// The same entries as a `serde_json` map (for building JSON values).
    pub fn to_map(&self) -> Map<String, Value> {
        self.iter().map(|(k, v)| (k.to_owned(), v.clone())).collect()
    }

    /// Builds from entries in any order; of two entries with one key the later wins, as when
    /// `serde_json` reads an object with a repeated key.
    fn from_entries(mut entries: Vec<(CompactString, Value)>) -> Self {
        if !entries.windows(2).all(|pair| pair[0].0 < pair[1].0) {
            // A stable sort keeps repeated keys in input order; the last of each run is kept.
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            let mut unique: Vec<(CompactString, Value)> = Vec::with_capacity(entries.len());
            for entry in entries {
                match unique.last_mut() {
                    Some(last) if last.0 == entry.0 => *last = entry,
                    _ => unique.push(entry),
                }
            }
            entries = unique;
        }
        // Exact already when decoded; a vector collected from an iterator may have room to spare.
        entries.shrink_to_fit();
        Structure { entries }
    }
}

/// An iterator over a [`Structure`]'s entries, in key order.
#[derive(Clone, Debug)]
pub struct Iter<'a>(std::slice::Iter<'a, (CompactString, Value)>);

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a str, &'a Value);

    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|(k, v)| (k.as_str(), v))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.0.next_back().map(|(k, v)| (k.as_str(), v))
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a Structure {
    type Item = (&'a str, &'a Value);
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl IntoIterator for Structure {
    type Item = (String, Value);
    type IntoIter = IntoIter;

    fn into_iter(self) -> IntoIter {
        IntoIter(self.entries.into_iter())
    }
}

/// The entries of a [`Structure`], taken in key order.
#[derive(Debug)]
pub struct IntoIter(std::vec::IntoIter<(CompactString, Value)>);

impl Iterator for IntoIter {
    type Item = (String, Value);

    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|(k, v)| (k.into_string(), v))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl<K: Into<CompactString>> FromIterator<(K, Value)> for Structure {
    fn from_iter<I: IntoIterator<Item = (K, Value)>>(entries: I) -> Self {
        Structure::from_entries(entries.into_iter().map(|(k, v)| (k.into(), v)).collect())
    }
}

impl From<Map<String, Value>> for Structure {
    fn from(map: Map<String, Value>) -> Self {
        map.into_iter().collect()
    }
}

impl From<Structure> for Map<String, Value> {
    fn from(structure: Structure) -> Self {
        structure.into_iter().collect()
    }
}

impl From<Structure> for Value {
    fn from(structure: Structure) -> Self {
        Value::Object(structure.into())
    }
}

impl PartialEq<Map<String, Value>> for Structure {
    fn eq(&self, other: &Map<String, Value>) -> bool {
        self.len() == other.len() && self.iter().zip(other).all(|((k, v), (ok, ov))| k == ok && v == ov)
    }
}

impl std::ops::Index<&str> for Structure {
    type Output = Value;

    /// The value of `key`; panics when there is none, as indexing `serde_json::Map` does.
    fn index(&self, key: &str) -> &Value {
        self.get(key).unwrap_or_else(|| panic!("no key {key:?} in the structure"))
    }
}

impl fmt::Debug for Structure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl Serialize for Structure {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.len()))?;
        for (key, value) in self {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Structure {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Entries;

        impl<'de> Visitor<'de> for Entries {
            type Value = Structure;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Structure, A::Error> {
                // JSON gives no count: a vector grown entry by entry and then shrunk to fit would
                // be reallocated twice or more per object, so the entries wait on the stack.
                let mut gathered: SmallVec<[(CompactString, Value); 8]> = SmallVec::new();
                while let Some(entry) = access.next_entry::<CompactString, Value>()? {
                    gathered.push(entry);
                }
                let mut entries = Vec::with_capacity(gathered.len());
                entries.extend(gathered);
                Ok(Structure::from_entries(entries))
            }
        }

        deserializer.deserialize_map(Entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn keys(structure: &Structure) -> Vec<&str> {
        structure.keys().collect()
    }

    #[test]
    fn keeps_keys_sorted_and_unique_through_inserts_and_removals() {
        let mut structure = Structure::new();
        assert_eq!(structure.insert("b", json!(1)), None);
        assert_eq!(structure.insert("a", json!(2)), None);
        assert_eq!(structure.insert("c", json!(3)), None);
        assert_eq!(structure.insert("b", json!(4)), Some(json!(1)));
        assert_eq!(keys(&structure), ["a", "b", "c"]);
        assert_eq!(structure.get("b"), Some(&json!(4)));
        assert_eq!(structure.remove("a"), Some(json!(2)));
        assert_eq!(structure.remove("a"), None);
        assert_eq!(keys(&structure), ["b", "c"]);
        assert!(!structure.contains_key("a") && structure.contains_key("c"));
    }

    #[test]
    fn reads_and_writes_json_like_serde_jsons_map() {
        // Byte order, not alphabetical: "B" < "a" < "é".
        let text = r#"{"é": 1, "a": [true], "B": {"z": null, "y": 2}, "a": "last"}"#;
        let ours: Structure = serde_json::from_str(text).unwrap();
        let theirs: Map<String, Value> = serde_json::from_str(text).unwrap();
        assert_eq!(ours, theirs);
        assert_eq!(keys(&ours), ["B", "a", "é"]);
        assert_eq!(ours["a"], json!("last"), "a repeated key keeps its last value");
        assert_eq!(serde_json::to_string(&ours).unwrap(), serde_json::to_string(&theirs).unwrap());
        assert_eq!(Structure::from(theirs.clone()), ours);
        assert_eq!(Map::from(ours.clone()), theirs);
    }

    #[test]
    fn collecting_unsorted_entries_sorts_them_and_keeps_the_last_of_a_key() {
        let structure: Structure = [("b", 1), ("a", 2), ("b", 3), ("c", 4), ("a", 5)]
            .map(|(k, v)| (k.to_owned(), json!(v)))
            .into_iter()
            .collect();
        assert_eq!(keys(&structure), ["a", "b", "c"]);
        assert_eq!(structure.values().cloned().collect::<Vec<_>>(), [json!(5), json!(3), json!(4)]);
    }
}
