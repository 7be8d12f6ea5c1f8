//! A snapshot's locator: where each object's record lies in the snapshot's text, the objects by
//! id, and the relations naming each object. Written beside a snapshot ([`encode_located`]), it
//! lets a seeded query read the few objects it needs from the store ([`LocatedSource`]) instead
//! of loading the whole session first.
//!
//! Layout (little-endian): the magic `CKSLOC01`; the object count `n` (u32), the incidence entries
//! `e` (u32) and the text's length (u64); per object in the state's order its record's offset
//! (u64) and length (u32); per object the end of its id in the id bytes (u32); the objects'
//! positions sorted by id (u32 each); per object the end of its relations in the incidence
//! entries (u32); the incidence entries, each a relation's position (u32); the ids' bytes, in the
//! state's order.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use cks_core::json;
use cks_core::neighbourhood::{NeighbourSource, Placed};
use cks_core::{DeltaOp, KnowledgeObject, KnowledgeStructure};

use crate::codec;
use crate::store::{ImportedSession, Located, ReadAt, Store, StoreError};

const MAGIC: &[u8; 8] = b"CKSLOC01";
const HEADER: usize = 8 + 4 + 4 + 8;
const RECORD: usize = 12;

/// The state's stored text ([`codec::encode_state`]) and its locator.
pub fn encode_located(structure: &KnowledgeStructure) -> (String, Vec<u8>) {
    let (text, records) = encode_with_records(structure);
    let locator = locator_of(structure, records, text.len());
    (text, locator)
}

/// Where each object's record lies in a state's text: each one's offset and length.
pub type Records = Vec<(u64, u32)>;

/// The state's stored text and its records, from which [`locator_of`] makes its locator (which
/// can then be made while the text is being stored).
pub fn encode_with_records(structure: &KnowledgeStructure) -> (String, Records) {
    json::to_compact_string_located(structure)
}

/// The locator of the text of `structure` that [`encode_with_records`] wrote.
pub fn locator_of(structure: &KnowledgeStructure, records: Records, text_len: usize) -> Vec<u8> {
    let n = structure.len();
    let ids: Vec<&str> = structure.ids().collect();
    let by_id = sorted(ids.iter().enumerate().map(|(position, id)| Keyed::new(id, position)).collect());
    let (incidence_ends, incidence) = incidence(structure, &by_id);
    let id_bytes: usize = ids.iter().map(|id| id.len()).sum();

    let mut locator = Vec::with_capacity(HEADER + n * (RECORD + 12) + incidence.len() * 4 + id_bytes);
    locator.extend_from_slice(MAGIC);
    locator.extend_from_slice(&(n as u32).to_le_bytes());
    locator.extend_from_slice(&(incidence.len() as u32).to_le_bytes());
    locator.extend_from_slice(&(text_len as u64).to_le_bytes());
    for (offset, len) in records {
        locator.extend_from_slice(&offset.to_le_bytes());
        locator.extend_from_slice(&len.to_le_bytes());
    }
    let mut id_end = 0u32;
    for id in &ids {
        id_end += id.len() as u32;
        locator.extend_from_slice(&id_end.to_le_bytes());
    }
    for object in &by_id {
        locator.extend_from_slice(&object.position.to_le_bytes());
    }
    for list in [&incidence_ends, &incidence] {
        for value in list {
            locator.extend_from_slice(&value.to_le_bytes());
        }
    }
    for id in &ids {
        locator.extend_from_slice(id.as_bytes());
    }
    locator
}

/// An id with a position (its object's, or that of a relation naming it), sortable by id in a
/// few cache lines: a million ids sorted through their strings would read each string, scattered
/// over the objects, twenty times.
#[derive(Clone, Copy)]
struct Keyed<'a> {
    /// The id's first 16 bytes, big-endian, shorter ids padded with zeros: keys that differ order
    /// as their ids do (see [`Self::cmp_id`] for equal ones).
    key: u128,
    id: &'a str,
    position: u32,
}

impl<'a> Keyed<'a> {
    fn new(id: &'a str, position: usize) -> Self {
        let mut head = [0u8; 16];
        let len = id.len().min(16);
        head[..len].copy_from_slice(&id.as_bytes()[..len]);
        Keyed { key: u128::from_be_bytes(head), id, position: position as u32 }
    }

    /// The order of the ids. Of two ids with equal keys, one of 16 bytes or fewer is the other's
    /// beginning (what follows it within the key being zeros in both), so their lengths order
    /// them; only two longer ids are compared byte by byte.
    fn cmp_id(&self, other: &Self) -> std::cmp::Ordering {
        self.key.cmp(&other.key).then_with(|| {
            if self.id.len().min(other.id.len()) <= 16 {
                self.id.len().cmp(&other.id.len())
            } else {
                self.id.cmp(other.id)
            }
        })
    }
}

/// Sorted by id, then by position.
fn sorted(mut keyed: Vec<Keyed<'_>>) -> Vec<Keyed<'_>> {
    keyed.sort_unstable_by(|a, b| a.cmp_id(b).then(a.position.cmp(&b.position)));
    keyed
}

/// Per object, the end of its relations in the entries; and the entries: the positions of the
/// relations naming each object (each relation once per object, in the state's order), object
/// after object. The participants, sorted by id, are matched to the objects sorted by id in one
/// walk instead of being looked up one by one, then placed by counting.
fn incidence(structure: &KnowledgeStructure, by_id: &[Keyed<'_>]) -> (Vec<u32>, Vec<u32>) {
    let mut participants = Vec::new();
    for (position, object) in structure.objects().enumerate() {
        if let Some(relation) = object.relation() {
            participants.extend(relation.participants.iter().map(|id| Keyed::new(id, position)));
        }
    }
    let participants = sorted(participants);
    // (object, relation naming it): by object id, then by relation.
    let mut named: Vec<(u32, u32)> = Vec::with_capacity(participants.len());
    let mut objects = by_id.iter().peekable();
    for (index, participant) in participants.iter().enumerate() {
        // A relation naming one object twice is listed once.
        if index > 0
            && participants[index - 1].cmp_id(participant).is_eq()
            && participants[index - 1].position == participant.position
        {
            continue;
        }
        while objects.next_if(|object| object.cmp_id(participant).is_lt()).is_some() {}
        // A committed state names no missing object; a participant that is missing is left out.
        if let Some(object) = objects.peek().filter(|object| object.cmp_id(participant).is_eq()) {
            named.push((object.position, participant.position));
        }
    }
    let mut ends = vec![0u32; structure.len()];
    for &(participant, _) in &named {
        ends[participant as usize] += 1;
    }
    let mut total = 0;
    for end in &mut ends {
        total += *end;
        *end = total;
    }
    // Filled from each object's end backwards, relations in reverse order: in order when done.
    let mut entries = vec![0u32; named.len()];
    let mut next = ends.clone();
    for &(participant, relation) in named.iter().rev() {
        next[participant as usize] -= 1;
        entries[next[participant as usize] as usize] = relation;
    }
    (ends, entries)
}

fn malformed(what: &str) -> StoreError {
    StoreError::Corrupt(format!("snapshot locator is malformed: {what}"))
}

/// The locator of a snapshot written elsewhere (an imported history, a restored backup), when its
/// text is the one [`encode_located`] writes for the state it holds; otherwise `None`, and a read
/// loads the session, as for any snapshot without a locator.
pub fn locate(text: &str) -> Option<Vec<u8>> {
    let structure = codec::decode_state(text).ok()?;
    let (written, locator) = encode_located(&structure);
    (written == text).then_some(locator)
}

/// The size from which an imported session's snapshot is located: a smaller session loads in a
/// few milliseconds, and a restore of thousands of them should not parse each one again.
pub const LOCATED_IMPORTS_FROM_OBJECTS: u64 = 5_000;

/// Keeps, where `store` keeps locators, the locator of the head snapshot of each of `sessions`
/// that an import wrote (`imported`) and that holds [`LOCATED_IMPORTS_FROM_OBJECTS`] or more, so
/// that a first query after a restart reads it in place, as it does a session created here. A
/// locator is only a shortcut: one that cannot be made or kept fails nothing.
pub async fn locate_imported(store: &dyn Store, sessions: &[ImportedSession], imported: &[String]) {
    if !store.keeps_locators() {
        return;
    }
    let imported: HashSet<&str> = imported.iter().map(String::as_str).collect();
    let large = |s: &&ImportedSession| s.row.head.object_count >= LOCATED_IMPORTS_FROM_OBJECTS;
    for session in sessions.iter().filter(large).filter(|s| imported.contains(s.row.session_id.as_str())) {
        let id = &session.row.session_id;
        let (seq, text) = session.head_snapshot();
        let Some(locator) = locate(text) else {
            tracing::debug!(session_id = %id, seq, "an imported snapshot not in this server's text: no locator");
            continue;
        };
        if let Err(e) = store.save_locator(id, seq, locator).await {
            tracing::warn!(session_id = %id, seq, error = %e, "snapshot locator not saved");
        }
    }
}

/// A locator's sections, read in place.
#[derive(Clone, Copy)]
struct Locator<'a> {
    count: usize,
    text_len: u64,
    records: &'a [u8],
    id_ends: &'a [u8],
    by_id: &'a [u8],
    incidence_ends: &'a [u8],
    incidence: &'a [u8],
    ids: &'a [u8],
}

fn u32_at(section: &[u8], index: usize) -> Result<u32, StoreError> {
    section
        .get(index * 4..index * 4 + 4)
        .map(|b| u32::from_le_bytes(b.try_into().expect("four bytes")))
        .ok_or_else(|| malformed("an index out of its section"))
}

/// The span of the object at `position` in a section of per-object ends: from the previous
/// object's end to its own.
fn span(ends: &[u8], position: u32) -> Result<(usize, usize), StoreError> {
    let position = position as usize;
    let start = if position == 0 { 0 } else { u32_at(ends, position - 1)? as usize };
    let end = u32_at(ends, position)? as usize;
    if start > end {
        return Err(malformed("ends out of order"));
    }
    Ok((start, end))
}

impl<'a> Locator<'a> {
    fn read(bytes: &'a [u8]) -> Result<Self, StoreError> {
        if bytes.len() < HEADER || &bytes[..8] != MAGIC {
            return Err(malformed("no header"));
        }
        let count = u32::from_le_bytes(bytes[8..12].try_into().expect("four bytes")) as usize;
        let entries = u32::from_le_bytes(bytes[12..16].try_into().expect("four bytes")) as usize;
        let text_len = u64::from_le_bytes(bytes[16..24].try_into().expect("eight bytes"));
        let mut rest = &bytes[HEADER..];
        let mut take = |len: usize| -> Result<&'a [u8], StoreError> {
            if rest.len() < len {
                return Err(malformed("shorter than its counts"));
            }
            let (section, after) = rest.split_at(len);
            rest = after;
            Ok(section)
        };
        let records = take(count * RECORD)?;
        let id_ends = take(count * 4)?;
        let by_id = take(count * 4)?;
        let incidence_ends = take(count * 4)?;
        let incidence = take(entries * 4)?;
        let ids = rest;
        Ok(Locator { count, text_len, records, id_ends, by_id, incidence_ends, incidence, ids })
    }

    fn id(&self, position: u32) -> Result<&'a str, StoreError> {
        let (start, end) = span(self.id_ends, position)?;
        self.ids
            .get(start..end)
            .and_then(|bytes| std::str::from_utf8(bytes).ok())
            .ok_or_else(|| malformed("an id out of the id bytes"))
    }

    /// The position of the object with this id.
    fn find(&self, id: &str) -> Result<Option<u32>, StoreError> {
        let (mut low, mut high) = (0, self.count);
        while low < high {
            let middle = (low + high) / 2;
            let position = u32_at(self.by_id, middle)?;
            match self.id(position)?.cmp(id) {
                std::cmp::Ordering::Less => low = middle + 1,
                std::cmp::Ordering::Greater => high = middle,
                std::cmp::Ordering::Equal => return Ok(Some(position)),
            }
        }
        Ok(None)
    }

    fn record(&self, position: u32) -> Result<(u64, usize), StoreError> {
        let at = position as usize * RECORD;
        let bytes = self.records.get(at..at + RECORD).ok_or_else(|| malformed("a record out of its section"))?;
        let offset = u64::from_le_bytes(bytes[..8].try_into().expect("eight bytes"));
        let len = u32::from_le_bytes(bytes[8..].try_into().expect("four bytes")) as usize;
        Ok((offset, len))
    }

    /// The positions of the relations naming the object at `position`.
    fn relations(&self, position: u32) -> Result<Vec<u32>, StoreError> {
        let (start, end) = span(self.incidence_ends, position)?;
        (start..end).map(|entry| u32_at(self.incidence, entry)).collect()
    }
}

/// The head state seen through a located snapshot and the deltas after it: objects read from the
/// snapshot's text one record at a time, the deltas' changes laid over them.
pub struct LocatedSource<'a> {
    locator: Locator<'a>,
    state: &'a mut dyn ReadAt,
    /// What the deltas left of each object they changed (`None`: removed), with its place in the
    /// order.
    changed: HashMap<String, Option<Placed>>,
    /// The relations the deltas left, by participant.
    changed_incidence: HashMap<String, Vec<Placed>>,
    buffer: Vec<u8>,
}

impl std::fmt::Debug for LocatedSource<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocatedSource")
            .field("objects", &self.locator.count)
            .field("changed", &self.changed.len())
            .finish_non_exhaustive()
    }
}

impl<'a> LocatedSource<'a> {
    pub fn new(located: Located<'a>) -> Result<Self, StoreError> {
        let locator = Locator::read(located.locator)?;
        let mut changed: HashMap<String, Option<Placed>> = HashMap::new();
        // A put of an absent object appends it, after every object of the snapshot; a put of a
        // present one keeps its place; a removal closes the gap (no change to the others' order).
        let mut appended = locator.count as u64;
        for version in &located.versions {
            let delta = version.delta.as_deref().ok_or_else(|| {
                StoreError::Corrupt(format!("version #{} after a snapshot has no delta", version.row.seq))
            })?;
            for op in codec::decode_delta(delta)? {
                match op {
                    DeltaOp::Put(object) => {
                        let place = match changed.get(object.id()) {
                            Some(Some((_, place))) => Some(*place),
                            Some(None) => None,
                            None => locator.find(object.id())?.map(u64::from),
                        };
                        let place = place.unwrap_or_else(|| {
                            appended += 1;
                            appended - 1
                        });
                        changed.insert(object.id().to_owned(), Some((object, place)));
                    }
                    DeltaOp::Remove(id) => {
                        changed.insert(id, None);
                    }
                }
            }
        }
        let mut changed_incidence: HashMap<String, Vec<Placed>> = HashMap::new();
        for (object, place) in changed.values().flatten() {
            if let Some(relation) = object.relation() {
                let mut named = relation.participants.clone();
                named.sort_unstable();
                named.dedup();
                for participant in named {
                    changed_incidence.entry(participant.to_owned()).or_default().push((object.clone(), *place));
                }
            }
        }
        Ok(LocatedSource { locator, state: located.state, changed, changed_incidence, buffer: Vec::new() })
    }

    /// The snapshot's object at `position`, read from its record.
    fn read_object(&mut self, position: u32) -> Result<Arc<KnowledgeObject>, StoreError> {
        let (offset, len) = self.locator.record(position)?;
        if offset.saturating_add(len as u64) > self.locator.text_len {
            return Err(malformed("a record past the text's end"));
        }
        self.buffer.resize(len, 0);
        self.state.read_exact_at(offset, &mut self.buffer)?;
        let value = serde_json::from_slice(&self.buffer).map_err(|e| malformed(&format!("a record: {e}")))?;
        let object = json::parse_object(position as usize, value).map_err(|e| malformed(&format!("a record: {e}")))?;
        if object.id() != self.locator.id(position)? {
            return Err(malformed("a record of another object"));
        }
        Ok(Arc::new(object))
    }
}

impl NeighbourSource for LocatedSource<'_> {
    type Error = StoreError;

    fn object(&mut self, id: &str) -> Result<Option<Placed>, StoreError> {
        if let Some(changed) = self.changed.get(id) {
            return Ok(changed.clone());
        }
        match self.locator.find(id)? {
            Some(position) => Ok(Some((self.read_object(position)?, u64::from(position)))),
            None => Ok(None),
        }
    }

    fn relations_of(&mut self, id: &str, at_most: usize) -> Result<Option<Vec<Placed>>, StoreError> {
        let stored = match self.locator.find(id)? {
            Some(position) => self.locator.relations(position)?,
            None => Vec::new(),
        };
        let changed = self.changed_incidence.get(id).map_or(0, Vec::len);
        // Counted before any is read (the relations the deltas removed included).
        if stored.len() + changed > at_most {
            return Ok(None);
        }
        let mut relations = Vec::with_capacity(stored.len() + changed);
        for relation in stored {
            // A relation the deltas changed is named (or not) by what they left of it.
            if !self.changed.contains_key(self.locator.id(relation)?) {
                relations.push((self.read_object(relation)?, u64::from(relation)));
            }
        }
        relations.extend(self.changed_incidence.get(id).into_iter().flatten().cloned());
        Ok(Some(relations))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{StoredVersion, VersionRow};
    use cks_core::neighbourhood::gather;
    use cks_core::{ChangeSet, Identity, Structure};

    fn object(id: &str, participants: Option<&[&str]>) -> KnowledgeObject {
        let mut structure = Structure::new();
        if let Some(participants) = participants {
            structure.insert("relation_type", "supports".into());
            structure.insert("participants", participants.iter().map(|p| serde_json::Value::from(*p)).collect());
        }
        KnowledgeObject::new(Identity::new(id, "Claim", id), structure)
    }

    fn sample() -> KnowledgeStructure {
        KnowledgeStructure::from_objects([
            object("b", None),
            object("a", None),
            object("c", None),
            object("r1", Some(&["a", "b"])),
            object("r2", Some(&["b", "c", "b"])),
        ])
        .unwrap()
    }

    fn version(seq: u64, changes: &ChangeSet) -> StoredVersion {
        StoredVersion {
            row: VersionRow {
                seq,
                version_id: format!("v{seq}"),
                transaction_id: String::new(),
                created_at: String::new(),
                state_hash: String::new(),
                object_count: 0,
                metadata: "{}".into(),
                has_snapshot: false,
            },
            delta: Some(codec::encode_delta(changes)),
        }
    }

    /// An id, its object's place and the relations naming it with theirs.
    type Seen = (String, Option<u64>, Vec<(String, u64)>);

    /// Every object and every object's relations, as the source sees them, sorted.
    fn seen(source: &mut LocatedSource<'_>, ids: &[&str]) -> Vec<Seen> {
        ids.iter()
            .map(|id| {
                let place = source.object(id).unwrap().map(|(o, place)| {
                    assert_eq!(o.id(), *id);
                    place
                });
                let mut relations: Vec<_> = source
                    .relations_of(id, usize::MAX)
                    .unwrap()
                    .unwrap()
                    .into_iter()
                    .map(|(r, p)| (r.id().to_owned(), p))
                    .collect();
                relations.sort();
                ((*id).to_owned(), place, relations)
            })
            .collect()
    }

    fn expected(structure: &KnowledgeStructure, ids: &[&str]) -> Vec<Seen> {
        // Places compare by order only: rank them.
        ids.iter()
            .map(|id| {
                let mut relations: Vec<_> = structure
                    .relations_of(id)
                    .iter()
                    .map(|r| (r.id().to_owned(), structure.index_of(r.id()).unwrap() as u64))
                    .collect();
                relations.sort();
                ((*id).to_owned(), structure.index_of(id).map(|i| i as u64), relations)
            })
            .collect()
    }

    /// Places as ranks, so the source's (snapshot positions, appended after) and the structure's
    /// (positions after the gaps closed) compare.
    fn ranked(mut seen: Vec<Seen>) -> Vec<(String, Option<u64>, Vec<String>)> {
        let mut places: Vec<u64> = seen.iter().filter_map(|(_, p, _)| *p).collect();
        places.sort_unstable();
        let rank = |p: u64| places.binary_search(&p).unwrap() as u64;
        seen.iter_mut()
            .map(|(id, place, relations)| {
                (id.clone(), place.map(rank), relations.iter().map(|(r, _)| r.clone()).collect())
            })
            .collect()
    }

    #[test]
    fn the_text_is_the_stored_text_and_every_record_is_found() {
        let structure = sample();
        let (text, locator) = encode_located(&structure);
        assert_eq!(text, codec::encode_state(&structure));
        let mut state: &[u8] = text.as_bytes();
        let located = Located { snapshot_seq: 0, locator: &locator, state: &mut state, versions: Vec::new() };
        let mut source = LocatedSource::new(located).unwrap();
        let ids = ["a", "b", "c", "r1", "r2", "zz"];
        assert_eq!(seen(&mut source, &ids), expected(&structure, &ids));
        // Too many relations are refused before any is read.
        assert!(source.relations_of("b", 1).unwrap().is_none());
        assert_eq!(source.relations_of("b", 2).unwrap().map(|r| r.len()), Some(2));
        // An empty state has an empty locator that still reads.
        let (text, locator) = encode_located(&KnowledgeStructure::new());
        let mut state: &[u8] = text.as_bytes();
        let located = Located { snapshot_seq: 0, locator: &locator, state: &mut state, versions: Vec::new() };
        assert!(LocatedSource::new(located).unwrap().object("a").unwrap().is_none());
    }

    proptest::proptest! {
        /// Every object is found by its id, and its relations come in the state's order, whatever
        /// the ids: sharing long beginnings, differing only after sixteen bytes or by a trailing
        /// NUL, named twice by one relation, or naming an object that is not there.
        #[test]
        fn ids_of_any_shape_are_found_and_their_relations_listed_in_order(
            picks in proptest::collection::vec((0usize..12, proptest::collection::vec(0usize..14, 2..5)), 1..40),
        ) {
            const IDS: [&str; 14] = [
                "a", "a\0", "a\0b", "b", "é", "sixteen-bytes-id", "sixteen-bytes-id-1", "sixteen-bytes-id-2",
                "sixteen-bytes-ie", "n1", "n10", "n2", "missing", "sixteen-bytes-id-3",
            ];
            let mut objects: Vec<KnowledgeObject> = Vec::new();
            let mut taken = HashSet::new();
            for (index, (node, named)) in picks.iter().enumerate() {
                if taken.insert(IDS[*node]) {
                    objects.push(object(IDS[*node], None));
                }
                let participants: Vec<&str> = named.iter().map(|&i| IDS[i]).collect();
                objects.push(object(&format!("r{index}"), Some(&participants)));
            }
            let structure = KnowledgeStructure::from_objects(objects).unwrap();
            let (text, locator) = encode_located(&structure);
            let mut state: &[u8] = text.as_bytes();
            let located = Located { snapshot_seq: 0, locator: &locator, state: &mut state, versions: Vec::new() };
            let mut source = LocatedSource::new(located).unwrap();
            let ids: Vec<&str> = IDS.iter().copied().chain(structure.ids()).collect();
            for id in ids {
                let found = source.object(id).unwrap().map(|(o, place)| (o.id().to_owned(), place));
                proptest::prop_assert_eq!(found, structure.index_of(id).map(|i| (id.to_owned(), i as u64)));
                let listed: Vec<String> = source
                    .relations_of(id, usize::MAX)
                    .unwrap()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(r, _)| r.id().to_owned())
                    .collect();
                let naming: Vec<String> = if structure.index_of(id).is_none() {
                    // An object that is not there has no relations to list.
                    Vec::new()
                } else {
                    structure
                        .objects()
                        .filter(|o| o.relation().is_some_and(|r| r.participants.contains(&id)))
                        .map(|o| o.id().to_owned())
                        .collect()
                };
                proptest::prop_assert_eq!(listed, naming, "relations of {:?}", id);
            }
        }
    }

    #[test]
    fn the_deltas_after_the_snapshot_are_laid_over_it() {
        let mut structure = sample();
        let (text, locator) = encode_located(&structure);
        let mut first = ChangeSet::default();
        // Changed in place, removed (with its relation), added, and a relation rewired.
        structure.put(object("c", None), &mut first).unwrap();
        structure.remove_cascading("a", &mut first);
        structure.put(object("d", None), &mut first).unwrap();
        structure.put(object("r2", Some(&["c", "d"])), &mut first).unwrap();
        let mut second = ChangeSet::default();
        // Removed and added again: now last.
        structure.remove("b", &mut second);
        structure.put(object("b", None), &mut second).unwrap();
        structure.put(object("r3", Some(&["b", "d"])), &mut second).unwrap();
        // Changed again: keeps the place its first change gave it.
        structure.put(object("d", None), &mut second).unwrap();
        let mut state: &[u8] = text.as_bytes();
        let versions = vec![version(1, &first), version(2, &second)];
        let located = Located { snapshot_seq: 0, locator: &locator, state: &mut state, versions };
        let mut source = LocatedSource::new(located).unwrap();
        let ids = ["a", "b", "c", "d", "r1", "r2", "r3"];
        assert_eq!(ranked(seen(&mut source, &ids)), ranked(expected(&structure, &ids)));
        // And a query over what is gathered from it reads as over the structure.
        let query = cks_core::SubgraphQuery { seed_ids: vec!["d".into()], depth: 2, ..Default::default() };
        let near = gather(&mut source, &query.seed_ids, 2, usize::MAX).unwrap().unwrap();
        assert_eq!(cks_core::query_subgraph(&near, &query), cks_core::query_subgraph(&structure, &query));
    }

    #[test]
    fn a_damaged_locator_or_text_is_reported() {
        let structure = sample();
        let (text, locator) = encode_located(&structure);
        let read = |locator: &[u8], text: &str| -> Result<Vec<Option<Placed>>, StoreError> {
            let mut state: &[u8] = text.as_bytes();
            let located = Located { snapshot_seq: 0, locator, state: &mut state, versions: Vec::new() };
            let mut source = LocatedSource::new(located)?;
            ["a", "r2"].iter().map(|id| source.object(id)).collect()
        };
        assert!(read(&locator, &text).is_ok());
        for damaged in [&locator[..10], &locator[..locator.len() - 30], b"CKSLOC99rest-of-it-here-and-more".as_slice()]
        {
            assert!(matches!(read(damaged, &text), Err(StoreError::Corrupt(_))));
        }
        // A text that moved under the locator: records no longer where it says.
        let shifted = format!(" {text}");
        assert!(matches!(read(&locator, &shifted), Err(StoreError::Corrupt(_))));
        assert!(matches!(read(&locator, &text[..text.len() / 2]), Err(StoreError::Corrupt(_))));
    }
}
