//! A [`TextIndex`] as bytes, so a store can keep a session's index beside a snapshot and a
//! restart reads it instead of tokenising every object again.
//!
//! The bytes name the root hash of the structure the index was made from, and an index is set
//! only on a structure of that root hash ([`crate::KnowledgeStructure::set_text_index`]): what
//! it indexes is then exactly that structure's objects, and nothing need be compared one by one.
//!
//! Layout (little-endian): the magic `CKSTXI01`; [`TERMS_VERSION`] (u32); the structure's root
//! hash (32 bytes); the object count `n`
//! (u32), the term count `t` (u32) and the posting count `p` (u64); per object its length in
//! tokens (u32) and the end of its id in the id bytes (u32); per term the end of its name in the
//! name bytes (u32) and the end of its postings (u64); the postings, each an object's number and
//! the term's count in it (u32, u32); the ids' bytes; the names' bytes. Objects are numbered
//! `0..n` in the order written; the ordinals of the index written are not kept.

use std::sync::Arc;

use super::{Posting, Term, TextIndex, ordinal, sort_key};
use crate::ContentHash;
use crate::stored::{Reader, StoredIndexError, u32_at, u64_at};

const MAGIC: &[u8; 8] = b"CKSTXI01";

/// How text becomes terms (tokens, stop words, stems). Bytes written under another version are
/// refused, so an index kept before a change to the terms is built again; a test pins the terms
/// of a sample text, and fails until this moves with them.
pub const TERMS_VERSION: u32 = 1;

const HEADER: usize = 8 + 4 + 32 + 4 + 4 + 8;

impl TextIndex {
    /// The index of a structure whose root hash is `root`, as bytes ([`TextIndex::from_bytes`]
    /// reads them back).
    pub(crate) fn to_bytes(&self, root: &ContentHash) -> Vec<u8> {
        // Live objects renumbered densely, in ordinal order.
        let mut dense = vec![u32::MAX; self.ids.len()];
        let live: Vec<u32> = (0..ordinal(self.ids.len())).filter(|&doc| self.ids[doc as usize].is_some()).collect();
        for (number, &doc) in live.iter().enumerate() {
            dense[doc as usize] = ordinal(number);
        }
        let terms: Vec<&Term> = self.lists.iter().filter(|term| !term.postings.is_empty()).collect();
        let postings: usize = terms.iter().map(|term| term.postings.len()).sum();
        let id_bytes: usize = live.iter().map(|&doc| self.id(doc).len()).sum();
        let name_bytes: usize = terms.iter().map(|term| term.name.len()).sum();
        let mut bytes =
            Vec::with_capacity(HEADER + live.len() * 8 + terms.len() * 12 + postings * 8 + id_bytes + name_bytes);
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&TERMS_VERSION.to_le_bytes());
        bytes.extend_from_slice(&root.0);
        bytes.extend_from_slice(&ordinal(live.len()).to_le_bytes());
        bytes.extend_from_slice(&ordinal(terms.len()).to_le_bytes());
        bytes.extend_from_slice(&(postings as u64).to_le_bytes());
        let mut end = 0u32;
        for &doc in &live {
            end += ordinal(self.id(doc).len());
            bytes.extend_from_slice(&self.lengths[doc as usize].to_le_bytes());
            bytes.extend_from_slice(&end.to_le_bytes());
        }
        let (mut name_end, mut postings_end) = (0u32, 0u64);
        for term in &terms {
            name_end += ordinal(term.name.len());
            postings_end += term.postings.len() as u64;
            bytes.extend_from_slice(&name_end.to_le_bytes());
            bytes.extend_from_slice(&postings_end.to_le_bytes());
        }
        for term in &terms {
            for posting in &term.postings {
                bytes.extend_from_slice(&dense[posting.doc as usize].to_le_bytes());
                bytes.extend_from_slice(&posting.count.to_le_bytes());
            }
        }
        for &doc in &live {
            bytes.extend_from_slice(self.id(doc).as_bytes());
        }
        for term in &terms {
            bytes.extend_from_slice(term.name.as_bytes());
        }
        bytes
    }

    /// Reads an index written by [`TextIndex::to_bytes`], with the root hash of the structure it
    /// was made from. Refuses bytes of another [`TERMS_VERSION`], and any whose parts disagree
    /// (an id twice, an object's counts not adding up to its length, a term twice in an
    /// object): they were damaged.
    pub fn from_bytes(bytes: &[u8]) -> Result<(ContentHash, TextIndex), StoredIndexError> {
        let mut reader = Reader::new(bytes);
        let root = reader.head(MAGIC, "text index", "terms version", TERMS_VERSION)?;
        let n = reader.u32()? as usize;
        let t = reader.u32()? as usize;
        let p = usize::try_from(reader.u64()?).map_err(|_| StoredIndexError::new("too many postings"))?;
        let objects = reader.take(n.checked_mul(8).ok_or_else(|| StoredIndexError::new("too many objects"))?)?;
        let terms = reader.take(t.checked_mul(12).ok_or_else(|| StoredIndexError::new("too many terms"))?)?;
        let postings = reader.take(p.checked_mul(8).ok_or_else(|| StoredIndexError::new("too many postings"))?)?;
        let id_end = if n == 0 { 0 } else { u32_at(objects, 8 * n - 4) as usize };
        let ids = std::str::from_utf8(reader.take(id_end)?).map_err(|_| StoredIndexError::new("an id is not UTF-8"))?;
        let name_end = if t == 0 { 0 } else { u32_at(terms, 12 * t - 12) as usize };
        let names =
            std::str::from_utf8(reader.take(name_end)?).map_err(|_| StoredIndexError::new("a term is not UTF-8"))?;
        if !reader.is_done() {
            return Err(StoredIndexError::new("bytes after the index"));
        }

        let mut index = TextIndex::default();
        index.ordinals.reserve(n);
        index.ids.reserve(n);
        index.lengths.reserve(n);
        index.keys.reserve(n);
        let mut start = 0;
        for doc in 0..n {
            let length = u32_at(objects, 8 * doc);
            let end = u32_at(objects, 8 * doc + 4) as usize;
            let id: Arc<str> = ids.get(start..end).ok_or_else(|| StoredIndexError::new("an id out of bounds"))?.into();
            start = end;
            if index.ordinals.insert(id.clone(), ordinal(doc)).is_some() {
                return Err(StoredIndexError::new(format!("object {id} twice")));
            }
            index.keys.push(sort_key(&id));
            index.ids.push(Some(id));
            index.lengths.push(length);
            index.total_length += u64::from(length);
            index.longest = index.longest.max(length);
        }

        // Each object's entries: counted first, so each gets one allocation of its size.
        let mut sizes = vec![0u32; n];
        for posting in postings.chunks_exact(8) {
            let doc = u32_at(posting, 0) as usize;
            *sizes.get_mut(doc).ok_or_else(|| StoredIndexError::new("a posting names no object"))? += 1;
        }
        let mut forward: Vec<Vec<(u32, u32)>> = sizes.iter().map(|&size| Vec::with_capacity(size as usize)).collect();
        let mut counted = vec![0u32; n];
        index.terms.reserve(t);
        index.lists.reserve(t);
        let (mut name_start, mut postings_start) = (0, 0);
        for number in 0..t {
            let name_end = u32_at(terms, 12 * number) as usize;
            let postings_end = usize::try_from(u64_at(terms, 12 * number + 4)).unwrap_or(usize::MAX);
            let name: Arc<str> =
                names.get(name_start..name_end).ok_or_else(|| StoredIndexError::new("a term out of bounds"))?.into();
            let list = postings
                .get(8 * postings_start..postings_end.saturating_mul(8))
                .filter(|list| !list.is_empty())
                .ok_or_else(|| StoredIndexError::new(format!("term {name}: postings out of bounds")))?;
            (name_start, postings_start) = (name_end, postings_end);
            let term = ordinal(number);
            let mut kept = Vec::with_capacity(list.len() / 8);
            for posting in list.chunks_exact(8) {
                let (doc, count) = (u32_at(posting, 0), u32_at(posting, 4));
                let entries = &mut forward[doc as usize];
                if entries.last().is_some_and(|&(last, _)| last == term) || count == 0 {
                    return Err(StoredIndexError::new(format!(
                        "term {name} in object {} twice or no times",
                        index.id(doc)
                    )));
                }
                entries.push((term, ordinal(kept.len())));
                counted[doc as usize] += count;
                kept.push(Posting { doc, count });
            }
            if index.terms.insert(name.clone(), term).is_some() {
                return Err(StoredIndexError::new(format!("term {name} twice")));
            }
            index.lists.push(Term { name, postings: kept });
        }
        if postings_start != p {
            return Err(StoredIndexError::new("postings no term holds"));
        }
        if let Some(doc) = (0..n).find(|&doc| counted[doc] != index.lengths[doc]) {
            return Err(StoredIndexError::new(format!(
                "object {}: counts do not add up to its length",
                index.id(ordinal(doc))
            )));
        }
        index.forward = forward.into_iter().map(Vec::into_boxed_slice).collect();
        Ok((root, index))
    }

    /// How many objects are indexed.
    pub fn len(&self) -> usize {
        self.ordinals.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ordinals.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::object::{Identity, KnowledgeObject};
    use crate::sample::random_graph;

    #[test]
    fn an_index_read_back_equals_the_index_written_and_ranks_alike() {
        let graph = random_graph(3000, 500, 7);
        let built = TextIndex::build(&graph);
        let (root, read) = TextIndex::from_bytes(&built.to_bytes(&graph.root_hash())).unwrap();
        assert_eq!(root, graph.root_hash());
        assert_eq!(read, built);
        assert_eq!(read.len(), built.len());
        for query in ["sample 421", "generated number", "nothing-like-this"] {
            assert_eq!(read.rank(query, 20, 0.0), built.rank(query, 20, 0.0), "{query}");
        }
        let empty = TextIndex::default().to_bytes(&ContentHash([7; 32]));
        assert_eq!(TextIndex::from_bytes(&empty).unwrap(), (ContentHash([7; 32]), TextIndex::default()));
    }

    #[test]
    fn the_terms_of_a_sample_text_are_pinned_to_the_terms_version() {
        // When this fails, text is made into other terms than before: move TERMS_VERSION with it.
        let serde_json::Value::Object(structure) = json!({"Note": "The runners ran, running 3 races"}) else {
            unreachable!()
        };
        let object = KnowledgeObject::new(Identity::new("Ran-1", "Running", "Ran"), structure);
        let mut terms: Vec<String> = super::super::term_counts(&object).into_keys().collect();
        terms.sort();
        assert_eq!((TERMS_VERSION, terms), (1, ["3", "race", "ran", "run", "runner"].map(String::from).to_vec()));
    }

    #[test]
    fn damaged_bytes_are_refused() {
        let graph = random_graph(200, 50, 3);
        let bytes = TextIndex::build(&graph).to_bytes(&graph.root_hash());
        let mut other_version = bytes.clone();
        other_version[8] = 9;
        assert!(TextIndex::from_bytes(&other_version).unwrap_err().0.contains("terms version 9"));
        assert!(TextIndex::from_bytes(&bytes[..bytes.len() - 1]).is_err());
        assert!(TextIndex::from_bytes(b"CKSLOC01").is_err());
        // A count changed: the object's counts no longer add up to its length.
        let (n, t) = (u32_at(&bytes, 44) as usize, u32_at(&bytes, 48) as usize);
        let first_posting = HEADER + n * 8 + t * 12;
        let mut counts = bytes.clone();
        counts[first_posting + 4] += 1;
        assert!(TextIndex::from_bytes(&counts).unwrap_err().0.contains("add up"));
    }
}
