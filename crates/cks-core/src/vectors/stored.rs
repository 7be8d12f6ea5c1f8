//! A settled [`VectorIndex`] as bytes, so a store can keep a session's index and a restart
//! reads it instead of settling every object against the known vectors. (At 100,000 objects,
//! reading every known vector and settling the index took two fifths of the processor's time
//! from a restart to the first search.)
//!
//! The bytes name the root hash of the structure the index was made from, and an index is set
//! only on a structure of that root hash ([`crate::KnowledgeStructure::set_vector_index`]): its
//! rows are then exactly that structure's searchable objects with vectors.
//!
//! An index is written in parts of at most [`ROWS_PER_PART`] rows, so neither writing nor
//! reading holds more than one part's bytes beside the index (a whole index is about 300 bytes
//! an object: 300 MB at a million). Each row names its text's key, so the vectors read can join
//! the known vectors and be shared with them rather than held twice.
//!
//! Layout of a part (little-endian): the magic `CKSVXI01`; [`TEXT_VERSION`] (u32); the root hash
//! (32 bytes); the model's length (u32) and bytes; the dimensions `d` (u32); the part's number
//! and the number of parts (u32, u32); the rows `n` (u32); per row its object's id (length u32,
//! then bytes), its text key (16 bytes), its vector's scale (f32) and its `d` codes.

use std::sync::Arc;

use super::{TEXT_VERSION, TextKey, Vector, VectorIndex};
use crate::stored::{Reader, StoredIndexError};
use crate::{ContentHash, KnowledgeObject, KnowledgeStructure};

const MAGIC: &[u8; 8] = b"CKSVXI01";

/// The most rows a part holds (about 1.1 MB at 256 dimensions).
const ROWS_PER_PART: usize = 4096;

/// A settled index's rows, taken out to be written ([`VectorIndex::kept`]): they share the
/// index's objects and vectors, so taking them is quick, and writing them holds no lock.
#[derive(Clone, Debug)]
pub struct KeptVectors {
    pub(super) model: Box<str>,
    pub(super) dims: usize,
    pub(super) root: ContentHash,
    pub(super) rows: Vec<(Arc<KnowledgeObject>, TextKey, Vector)>,
}

impl KeptVectors {
    /// How many rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The parts' bytes, each made when asked for.
    pub fn into_parts(self) -> impl ExactSizeIterator<Item = Vec<u8>> + Send + 'static {
        let count = self.rows.len().div_ceil(ROWS_PER_PART).max(1);
        (0..count).map(move |number| {
            let rows = self.rows.chunks(ROWS_PER_PART).nth(number).unwrap_or_default();
            self.part(number, count, rows)
        })
    }

    fn part(&self, number: usize, count: usize, rows: &[(Arc<KnowledgeObject>, TextKey, Vector)]) -> Vec<u8> {
        let ids: usize = rows.iter().map(|(object, ..)| object.id().len()).sum();
        let mut bytes = Vec::with_capacity(64 + self.model.len() + ids + rows.len() * (4 + 16 + 4 + self.dims));
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&TEXT_VERSION.to_le_bytes());
        bytes.extend_from_slice(&self.root.0);
        bytes.extend_from_slice(&length(self.model.len()).to_le_bytes());
        bytes.extend_from_slice(self.model.as_bytes());
        bytes.extend_from_slice(&length(self.dims).to_le_bytes());
        bytes.extend_from_slice(&length(number).to_le_bytes());
        bytes.extend_from_slice(&length(count).to_le_bytes());
        bytes.extend_from_slice(&length(rows.len()).to_le_bytes());
        for (object, key, vector) in rows {
            bytes.extend_from_slice(&length(object.id().len()).to_le_bytes());
            bytes.extend_from_slice(object.id().as_bytes());
            bytes.extend_from_slice(key);
            bytes.extend_from_slice(&vector.to_bytes());
        }
        bytes
    }
}

/// A length or a count as written; nothing kept comes near 2³².
fn length(n: usize) -> u32 {
    u32::try_from(n).expect("fewer than 2³² of anything in an index")
}

/// A kept index read back, part by part ([`StoredVectors::read_part`]), to be set on a
/// structure of the same root hash.
#[derive(Debug, Default)]
pub struct StoredVectors {
    root: Option<ContentHash>,
    model: Box<str>,
    dims: usize,
    parts: usize,
    read: usize,
    /// The rows' ids, one after the other (one allocation, not one an id), and where each ends.
    ids: String,
    ends: Vec<usize>,
    rows: Vec<(TextKey, Vector)>,
}

impl StoredVectors {
    /// Reads the next part (parts are read in order). Refuses bytes made under another
    /// [`TEXT_VERSION`] and a part that disagrees with the ones before it.
    pub fn read_part(&mut self, bytes: &[u8]) -> Result<(), StoredIndexError> {
        let mut reader = Reader::new(bytes);
        let root = reader.head(MAGIC, "vector index", "text version", TEXT_VERSION)?;
        let model_len = reader.u32()? as usize;
        let model = std::str::from_utf8(reader.take(model_len)?)
            .map_err(|_| StoredIndexError::new("the model's name is not UTF-8"))?;
        let dims = reader.u32()? as usize;
        let (number, count, rows) = (reader.u32()? as usize, reader.u32()? as usize, reader.u32()? as usize);
        if number == 0 {
            *self =
                StoredVectors { root: Some(root), model: model.into(), dims, parts: count, ..StoredVectors::default() };
            let expected = rows.saturating_mul(count).min(1 << 24);
            self.rows.reserve(expected);
            self.ends.reserve(expected);
        } else if (Some(root), model, dims, count) != (self.root, &*self.model, self.dims, self.parts) {
            return Err(StoredIndexError::new(format!("part {number} is of another index")));
        }
        if number != self.read || number >= count {
            return Err(StoredIndexError::new(format!("part {number} out of order")));
        }
        for _ in 0..rows {
            let id_len = reader.u32()? as usize;
            let id =
                std::str::from_utf8(reader.take(id_len)?).map_err(|_| StoredIndexError::new("an id is not UTF-8"))?;
            let key: TextKey = reader.take(16)?.try_into().expect("16 bytes");
            let vector = Vector::from_bytes(reader.take(4 + dims)?)
                .filter(|_| dims > 0)
                .ok_or_else(|| StoredIndexError::new(format!("object {id}: not a vector")))?;
            self.ids.push_str(id);
            self.ends.push(self.ids.len());
            self.rows.push((key, vector));
        }
        if !reader.is_done() {
            return Err(StoredIndexError::new("bytes after the rows"));
        }
        self.read += 1;
        Ok(())
    }

    /// Whether every part was read.
    pub fn is_complete(&self) -> bool {
        self.parts > 0 && self.read == self.parts
    }

    /// The model whose vectors these are.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// Each row's text key and vector, the vector to be replaced (by the one already known for
    /// that key, so the two are held once).
    pub fn vectors_mut(&mut self) -> impl Iterator<Item = (&TextKey, &mut Vector)> {
        self.rows.iter_mut().map(|(key, vector)| (&*key, vector))
    }
}

impl VectorIndex {
    /// The index of `stored` over `structure`, which has the root hash it was made from: each
    /// row must name one of its searchable objects, once.
    pub(crate) fn from_stored(
        stored: StoredVectors,
        structure: &KnowledgeStructure,
    ) -> Result<VectorIndex, StoredIndexError> {
        if !stored.is_complete() {
            return Err(StoredIndexError::new("parts missing"));
        }
        if stored.root != Some(structure.root_hash()) {
            return Err(StoredIndexError::new("made from a structure with other objects"));
        }
        let mut index = VectorIndex { model: stored.model, ..VectorIndex::default() };
        let rows = stored.rows.len();
        index.ids.reserve(rows);
        index.vectors.reserve(rows);
        index.keys.reserve(rows);
        index.rows.reserve(rows);
        index.bits.reserve(rows * super::words(stored.dims));
        // The rows were written in the index's order, which is the structure's order for an index
        // settled whole and not changed since: each row is then the next searchable entry, and
        // only rows that are not are looked up.
        let mut entries = structure.entries().filter(|entry| !entry.is_relation());
        let mut start = 0;
        for (&end, (key, vector)) in stored.ends.iter().zip(stored.rows) {
            let id = &stored.ids[start..end];
            start = end;
            let entry = match entries.next() {
                Some(next) if next.object.id() == id => next,
                _ => structure
                    .entry(id)
                    .filter(|entry| !entry.is_relation())
                    .ok_or_else(|| StoredIndexError::new(format!("object {id}: no such searchable object")))?,
            };
            index.push_row(entry.object.clone(), key, &vector);
        }
        if index.rows.len() != index.ids.len() {
            return Err(StoredIndexError::new("an object in two rows"));
        }
        Ok(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::random_graph;
    use crate::vectors::{Vectors, embedding_text, text_key};
    use std::collections::HashMap;

    /// A stand-in model: a text's vector from its key's bytes.
    fn vector_of(key: &TextKey) -> Vector {
        let values: Vec<f32> = key.iter().chain(key.iter()).map(|b| f32::from(*b) - 127.5).collect();
        Vector::quantize(&values).unwrap()
    }

    /// A structure of `nodes` nodes with its index settled against every text's vector.
    fn settled(nodes: usize) -> (KnowledgeStructure, HashMap<TextKey, Vector>) {
        let graph = random_graph(nodes, nodes / 2, 5);
        let known: HashMap<TextKey, Vector> = graph
            .entries()
            .filter_map(|e| embedding_text(&e.object))
            .map(|text| (text_key(&text), vector_of(&text_key(&text))))
            .collect();
        graph.vector_index().lock().unwrap().sync_known(&graph, "stand-in", 1, Vectors(|k: &TextKey| known.get(k)));
        (graph, known)
    }

    fn read(parts: impl Iterator<Item = Vec<u8>>) -> Result<StoredVectors, StoredIndexError> {
        let mut stored = StoredVectors::default();
        for part in parts {
            stored.read_part(&part)?;
        }
        Ok(stored)
    }

    #[test]
    fn an_index_read_back_in_parts_ranks_as_the_index_written() {
        let (graph, known) = settled(ROWS_PER_PART + 500);
        let index = graph.vector_index().lock().unwrap();
        let kept = index.kept(graph.root_hash()).expect("settled");
        assert_eq!(kept.len(), ROWS_PER_PART + 500);
        assert_eq!(kept.clone().into_parts().len(), 2);
        let stored = read(kept.clone().into_parts()).unwrap();
        assert!(stored.is_complete());
        assert_eq!(stored.model(), "stand-in");

        let mut loaded = graph.clone();
        loaded.set_vector_index(stored).unwrap();
        let set = loaded.vector_index().lock().unwrap();
        assert!(set.is_settled("stand-in"));
        let by_id = |index: &VectorIndex| index.rows().map(|(id, v)| (id.to_owned(), v)).collect::<HashMap<_, _>>();
        assert_eq!(by_id(&set), by_id(&index));
        let query = known.values().nth(3).unwrap();
        assert_eq!(set.rank(query, 10), index.rank(query, 10));
        assert!(set.bits == index.bits && set.keys.len() == set.len());
    }

    #[test]
    fn an_index_is_set_only_whole_on_a_structure_of_the_same_objects() {
        let (graph, _) = settled(300);
        let kept = graph.vector_index().lock().unwrap().kept(graph.root_hash()).unwrap();
        let part = kept.clone().into_parts().next().unwrap();

        let mut changed = random_graph(300, 150, 6);
        let error = changed.set_vector_index(read(std::iter::once(part.clone())).unwrap()).unwrap_err();
        assert!(error.0.contains("other objects"), "{error}");
        assert!(!changed.vector_index().lock().unwrap().is_settled("stand-in"), "left as it was");

        let mut other_version = part.clone();
        other_version[8] = 9;
        assert!(read(std::iter::once(other_version)).unwrap_err().0.contains("text version 9"));
        assert!(read(std::iter::once(part[..part.len() - 1].to_vec())).is_err());
        assert!(read(std::iter::once(b"CKSTXI01".to_vec())).is_err());
        // The second part of one index after the first of another.
        let (big, _) = settled(ROWS_PER_PART + 10);
        let big_kept = big.vector_index().lock().unwrap().kept(big.root_hash()).unwrap();
        let error = read([part, big_kept.clone().into_parts().nth(1).unwrap()].into_iter()).unwrap_err();
        assert!(error.0.contains("another index"), "{error}");
        // The first part alone is not the whole index.
        let mut first_only = StoredVectors::default();
        first_only.read_part(&big_kept.clone().into_parts().next().unwrap()).unwrap();
        assert!(big.clone().set_vector_index(first_only).unwrap_err().0.contains("parts missing"));
    }

    #[test]
    fn an_index_whose_rows_moved_is_set_alike() {
        let (mut graph, known) = settled(300);
        // Removing a row moves the last into its place: the rows leave the structure's order.
        let mut log = crate::ChangeSet::default();
        assert!(graph.remove("n7", &mut log));
        let any = known.values().next().unwrap();
        let mut index = graph.vector_index().lock().unwrap();
        index.sync_known(&graph, "stand-in", 2, Vectors(|k: &TextKey| Some(known.get(k).unwrap_or(any))));
        let kept = index.kept(graph.root_hash()).expect("settled again");
        let mut loaded = graph.clone();
        loaded.set_vector_index(read(kept.into_parts()).unwrap()).unwrap();
        let by_id = |index: &VectorIndex| index.rows().map(|(id, v)| (id.to_owned(), v)).collect::<HashMap<_, _>>();
        assert_eq!(by_id(&loaded.vector_index().lock().unwrap()), by_id(&index));
        assert_eq!(by_id(&index).len(), 299);
    }

    #[test]
    fn an_index_with_changes_not_settled_is_not_kept() {
        let (mut graph, _) = settled(50);
        let object = graph.entries().find(|e| !e.is_relation()).unwrap().object.clone();
        let mut log = crate::ChangeSet::default();
        let mut changed = (*object).clone();
        changed.structure.insert("note", serde_json::json!("changed"));
        graph.put(changed, &mut log).unwrap();
        assert!(graph.vector_index().lock().unwrap().kept(graph.root_hash()).is_none());
    }
}
