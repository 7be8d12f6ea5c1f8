//! The knowledge structure: an ordered set of objects with unique ids, plus the indexes that keep
//! every hot operation proportional to the change rather than to the graph.
//!
//! Maintained on every insert and removal:
//! - the position of each object (insertion order is the canonical output order);
//! - each object's content hash and the root-hash accumulator (see [`crate::hash`]);
//! - the incidence index: object id → relations that name it as a participant (hyperedge walks,
//!   cascading removals, dangling-reference checks);
//! - the `derives` out-edges (cycle checks walk only the derivation graph).
//!
//! Mutations go through [`KnowledgeStructure::put`] and [`KnowledgeStructure::remove`], which record
//! [`Change`]s; a [`ChangeSet`] can be undone exactly (positions included) or replayed elsewhere.

use compact_str::CompactString;
use indexmap::{IndexMap, IndexSet};
use smallvec::SmallVec;
use std::borrow::Borrow;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, OnceLock};

use crate::hash::{ContentHash, RootAccumulator, object_hash};
use crate::kinds::KindIndex;
use crate::object::{DERIVES, KnowledgeObject, RelationShapeError};
use crate::text::{StoredIndexError, TextIndex};
use crate::validate::ExpiryIndex;
use crate::vectors::{StoredVectors, VectorIndex};

/// An object together with its content hash.
#[derive(Clone, Debug)]
pub struct Entry {
    pub object: Arc<KnowledgeObject>,
    pub hash: ContentHash,
    /// Whether the object is a relation, kept beside it: a pass over every entry (a search
    /// index's first build) then reads it without a visit to the object's fields.
    relation: bool,
}

impl Entry {
    pub fn new(object: KnowledgeObject) -> Self {
        Entry::from_shared(Arc::new(object))
    }

    pub fn from_shared(object: Arc<KnowledgeObject>) -> Self {
        let hash = object_hash(&object);
        let relation = object.is_relation();
        Entry { object, hash, relation }
    }

    /// [`KnowledgeObject::is_relation`] of the object.
    pub fn is_relation(&self) -> bool {
        self.relation
    }
}

impl AsRef<KnowledgeObject> for Entry {
    fn as_ref(&self) -> &KnowledgeObject {
        &self.object
    }
}

/// An object (or an entry) as an index holds it: hashed, compared and found by the object's id, so
/// the index keeps no copy of the id.
#[derive(Clone, Debug)]
pub(crate) struct ById<T>(pub(crate) T);

impl<T: AsRef<KnowledgeObject>> ById<T> {
    pub(crate) fn id(&self) -> &str {
        self.0.as_ref().id()
    }
}

impl<T: AsRef<KnowledgeObject>> PartialEq for ById<T> {
    fn eq(&self, other: &Self) -> bool {
        self.id() == other.id()
    }
}

impl<T: AsRef<KnowledgeObject>> Eq for ById<T> {}

impl<T: AsRef<KnowledgeObject>> Hash for ById<T> {
    // As `str` hashes, which `Borrow<str>` requires: indexes are searched by id.
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.id().hash(state);
    }
}

impl<T: AsRef<KnowledgeObject>> Borrow<str> for ById<T> {
    fn borrow(&self) -> &str {
        self.id()
    }
}

/// One primitive mutation, with what is needed to undo it.
#[derive(Clone, Debug)]
pub enum Change {
    /// An object was inserted (`previous == None`, appended at the end) or replaced in place.
    Put { index: usize, previous: Option<Entry>, current: Entry },
    /// An object was removed from `index`; later objects moved up by one.
    Remove { index: usize, previous: Entry },
}

impl Change {
    pub fn id(&self) -> &str {
        match self {
            Change::Put { current, .. } => current.object.id(),
            Change::Remove { previous, .. } => previous.object.id(),
        }
    }
}

/// The ordered primitive changes made by one edit (an evolution, a merge, a replay).
#[derive(Clone, Debug, Default)]
pub struct ChangeSet {
    pub changes: Vec<Change>,
}

/// Before and after of one id across a whole change set.
#[derive(Clone, Debug)]
pub struct NetChange {
    pub before: Option<Entry>,
    pub after: Option<Entry>,
}

impl ChangeSet {
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    /// The net effect per id, in order of first touch. Ids whose content ended where it started
    /// are omitted.
    pub fn net(&self) -> IndexMap<String, NetChange> {
        let mut net: IndexMap<String, NetChange> = IndexMap::new();
        for change in &self.changes {
            let (before, after) = match change {
                Change::Put { previous, current, .. } => (previous.clone(), Some(current.clone())),
                Change::Remove { previous, .. } => (Some(previous.clone()), None),
            };
            net.entry(change.id().to_owned())
                .and_modify(|n| n.after = after.clone())
                .or_insert(NetChange { before, after });
        }
        net.retain(|_, n| n.before.as_ref().map(|e| e.hash) != n.after.as_ref().map(|e| e.hash));
        net
    }
}

/// Errors raised by primitive mutations.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StructureError {
    #[error("duplicate object id '{0}'")]
    DuplicateId(String),
    #[error(transparent)]
    RelationShape(#[from] RelationShapeError),
}

/// The hasher of the structure's maps: seeded per process, and faster than the standard
/// library's SipHash on the short ids every load and commit looks up.
pub(crate) type IdHasher = foldhash::fast::RandomState;
/// An index from an id to the relations that name it. The relations themselves, not their ids:
/// a copy is a reference count where an id was an allocation, and a walk reads the relation
/// without looking it up. Most objects are named by one or two relations: those are held inline
/// (in the room a `Vec` takes), as are keys up to 24 bytes.
type RelationIndex = HashMap<CompactString, Relations, IdHasher>;
type Relations = SmallVec<[Arc<KnowledgeObject>; 2]>;

/// An ordered set of knowledge objects with unique ids.
#[derive(Debug, Default)]
pub struct KnowledgeStructure {
    objects: IndexSet<ById<Entry>, IdHasher>,
    /// participant id → relations naming it (each relation listed once per participant id).
    incidence: RelationIndex,
    /// `derives` source id → the binary `derives` relations leaving it.
    derives_out: RelationIndex,
    root: RootAccumulator,
    /// The text index, once the structure has been searched; kept up to date from then on.
    text: OnceLock<Box<TextIndex>>,
    /// The `valid_until` index, once asked for; kept up to date from then on.
    expiries: OnceLock<Box<ExpiryIndex>>,
    /// The index by type and relation type, once asked for; kept up to date from then on.
    kinds: OnceLock<Box<KindIndex>>,
    /// The vector index, once asked for; told of every change from then on. Behind a lock
    /// because readers settle it (vectors arrive after the change that asked for them).
    vectors: OnceLock<Box<Mutex<VectorIndex>>>,
}

impl Clone for KnowledgeStructure {
    /// A copy without the text index: copies are made to be changed or handed out, seldom to be
    /// searched, and one that is builds its own.
    fn clone(&self) -> Self {
        KnowledgeStructure {
            objects: self.objects.clone(),
            incidence: self.incidence.clone(),
            derives_out: self.derives_out.clone(),
            root: self.root,
            text: OnceLock::new(),
            expiries: OnceLock::new(),
            kinds: OnceLock::new(),
            vectors: OnceLock::new(),
        }
    }
}

impl PartialEq for KnowledgeStructure {
    /// Same objects in the same order.
    fn eq(&self, other: &Self) -> bool {
        self.objects.len() == other.objects.len()
            && self.entries().zip(other.entries()).all(|(a, b)| a.hash == b.hash && a.object == b.object)
    }
}

impl KnowledgeStructure {
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds a structure; fails on duplicate ids or malformed relations.
    pub fn from_objects(objects: impl IntoIterator<Item = KnowledgeObject>) -> Result<Self, StructureError> {
        let mut structure = Self::new();
        for object in objects {
            structure.insert_new(object)?;
        }
        Ok(structure)
    }

    pub fn len(&self) -> usize {
        self.objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    pub fn get(&self, id: &str) -> Option<&Arc<KnowledgeObject>> {
        self.objects.get(id).map(|slot| &slot.0.object)
    }

    pub fn entry(&self, id: &str) -> Option<&Entry> {
        self.objects.get(id).map(|slot| &slot.0)
    }

    pub fn contains(&self, id: &str) -> bool {
        self.objects.contains(id)
    }

    pub fn index_of(&self, id: &str) -> Option<usize> {
        self.objects.get_index_of(id)
    }

    /// The entry at a position in canonical order.
    pub fn entry_at(&self, position: usize) -> Option<&Entry> {
        self.objects.get_index(position).map(|slot| &slot.0)
    }

    /// Objects in canonical (insertion) order.
    pub fn objects(&self) -> impl ExactSizeIterator<Item = &Arc<KnowledgeObject>> + '_ {
        self.objects.iter().map(|slot| &slot.0.object)
    }

    pub fn entries(&self) -> impl ExactSizeIterator<Item = &Entry> + '_ {
        self.objects.iter().map(|slot| &slot.0)
    }

    /// Relations in canonical order.
    pub fn relations(&self) -> impl Iterator<Item = &Arc<KnowledgeObject>> + '_ {
        self.entries().filter(|e| e.is_relation()).map(|e| &e.object)
    }

    /// The relations that name `id` as a participant.
    pub fn relations_of(&self, id: &str) -> &[Arc<KnowledgeObject>] {
        self.incidence.get(id).map_or(&[], Relations::as_slice)
    }

    /// Every id some relation names as a participant, each once.
    pub(crate) fn participant_ids(&self) -> impl Iterator<Item = &str> + '_ {
        self.incidence.keys().map(CompactString::as_str)
    }

    /// The binary `derives` relations whose source is `id`.
    pub fn derives_from(&self, id: &str) -> &[Arc<KnowledgeObject>] {
        self.derives_out.get(id).map_or(&[], Relations::as_slice)
    }

    /// The order-independent root hash (see [`crate::hash`]), maintained incrementally.
    pub fn root_hash(&self) -> ContentHash {
        self.root.root()
    }

    pub(crate) fn root_accumulator(&self) -> RootAccumulator {
        self.root
    }

    /// Root hash recomputed from scratch; used by tests and reconstruction checks.
    pub fn root_hash_from_scratch(&self) -> ContentHash {
        let mut acc = RootAccumulator::default();
        for entry in self.entries() {
            acc.insert(&object_hash(&entry.object));
        }
        acc.root()
    }

    /// Same content regardless of order (root-hash equality, as in the reference).
    pub fn same_content(&self, other: &Self) -> bool {
        self.root == other.root
    }

    /// The object with this id, its position and its id as stored.
    pub fn entry_full(&self, id: &str) -> Option<(usize, &str, &Entry)> {
        self.objects.get_full(id).map(|(position, slot)| (position, slot.0.object.id(), &slot.0))
    }

    /// The text index of this structure's searchable objects, built on first use and kept up to
    /// date by every later change.
    pub fn text_index(&self) -> &TextIndex {
        self.text.get_or_init(|| Box::new(TextIndex::build(self)))
    }

    /// The text index when it was built or set, without building it.
    pub fn built_text_index(&self) -> Option<&TextIndex> {
        self.text.get().map(|index| &**index)
    }

    /// The text index as bytes, when it was built or set: what a store keeps, to be set again
    /// on a structure loaded with the same content ([`Self::set_text_index`]).
    pub fn text_index_bytes(&self) -> Option<Vec<u8>> {
        self.built_text_index().map(|index| index.to_bytes(&self.root_hash()))
    }

    /// Takes `index`, read back from bytes with the root hash of the structure it was made from
    /// ([`TextIndex::from_bytes`]), as this structure's text index instead of building one. It
    /// is taken only when this structure has that root hash (the same objects, so the same
    /// index) and has no text index yet; otherwise the structure is left as it was.
    pub fn set_text_index(&mut self, index: TextIndex, of: ContentHash) -> Result<(), StoredIndexError> {
        if of != self.root_hash() {
            return Err(StoredIndexError::new("made from a structure with other objects"));
        }
        self.text.set(Box::new(index)).map_err(|_| StoredIndexError::new("the structure has a text index already"))
    }

    /// The vector index when it was made or set, without making it.
    pub fn built_vector_index(&self) -> Option<&Mutex<VectorIndex>> {
        self.vectors.get().map(|index| &**index)
    }

    /// Takes `stored`, a kept vector index read back whole, as this structure's vector index
    /// instead of settling a new one. It is taken only when this structure has the root hash it
    /// was made from and no vector index yet, and each row names one of its searchable objects;
    /// otherwise the structure is left as it was.
    pub fn set_vector_index(&mut self, stored: StoredVectors) -> Result<(), StoredIndexError> {
        if self.vectors.get().is_some() {
            return Err(StoredIndexError::new("the structure has a vector index already"));
        }
        let index = VectorIndex::from_stored(stored, self)?;
        self.vectors.set(Box::new(Mutex::new(index))).map_err(|_| StoredIndexError::new("set twice"))
    }

    /// The vector index of this structure, made on first use (every object still to settle:
    /// see [`VectorIndex::sync`]) and told of every later change.
    pub fn vector_index(&self) -> &Mutex<VectorIndex> {
        self.vectors.get_or_init(|| Box::new(Mutex::new(VectorIndex::new())))
    }

    /// The index of `valid_until`s, built on first use and kept up to date by every later
    /// change.
    pub fn expiry_index(&self) -> &ExpiryIndex {
        self.expiries.get_or_init(|| Box::new(ExpiryIndex::build(self)))
    }

    /// The objects whose type is `ty`, in structure order (an index built on first use and kept up
    /// to date by every later change: the cost follows how many there are, not the structure).
    pub fn objects_of_type(&self, ty: &str) -> Vec<&Arc<KnowledgeObject>> {
        self.in_order(self.kind_index().of_type(ty))
    }

    /// The relations whose `relation_type` is `relation_type`, in structure order (same index).
    pub fn relations_of_type(&self, relation_type: &str) -> Vec<&Arc<KnowledgeObject>> {
        self.in_order(self.kind_index().of_relation_type(relation_type))
    }

    fn kind_index(&self) -> &KindIndex {
        self.kinds.get_or_init(|| Box::new(KindIndex::build(self)))
    }

    fn in_order<'a>(&'a self, ids: impl Iterator<Item = &'a str>) -> Vec<&'a Arc<KnowledgeObject>> {
        let mut found: Vec<(usize, &Arc<KnowledgeObject>)> =
            ids.filter_map(|id| self.objects.get_full(id).map(|(position, slot)| (position, &slot.0.object))).collect();
        found.sort_unstable_by_key(|(position, _)| *position);
        found.into_iter().map(|(_, object)| object).collect()
    }

    /// All object ids, in order.
    pub fn ids(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.objects.iter().map(ById::id)
    }

    /// Appends an object whose id is new (loading a document: no change is recorded).
    pub(crate) fn insert_new(&mut self, object: KnowledgeObject) -> Result<(), StructureError> {
        object.check_relation_shape()?;
        self.insert_shaped(Entry::new(object))
    }

    /// [`Self::insert_new`] for an object whose relation fields were checked already (the
    /// parser checks them by stricter rules): a snapshot's million objects are not checked twice.
    pub(crate) fn insert_shaped(&mut self, entry: Entry) -> Result<(), StructureError> {
        if !self.objects.insert(ById(entry.clone())) {
            return Err(StructureError::DuplicateId(entry.object.identity.id.to_string()));
        }
        self.index_insert(&entry);
        Ok(())
    }

    /// Inserts a new object at the end, or replaces an existing one in place.
    pub fn put(&mut self, object: KnowledgeObject, log: &mut ChangeSet) -> Result<(), StructureError> {
        object.check_relation_shape()?;
        self.put_entry(Entry::new(object), log);
        Ok(())
    }

    /// Like [`Self::put`] for an entry whose shape was already checked and hash computed.
    pub fn put_entry(&mut self, entry: Entry, log: &mut ChangeSet) {
        let (index, previous) = self.objects.replace_full(ById(entry.clone()));
        let previous = previous.map(|slot| slot.0);
        // The old version leaves the indexes before the new one enters (as in `undo`): an id is
        // never indexed twice.
        if let Some(previous) = &previous {
            self.index_remove(previous);
        }
        self.index_insert(&entry);
        log.changes.push(Change::Put { index, previous, current: entry });
    }

    /// Removes one object (no cascade); returns whether it existed.
    pub fn remove(&mut self, id: &str, log: &mut ChangeSet) -> bool {
        match self.objects.shift_remove_full(id) {
            Some((index, ById(previous))) => {
                self.index_remove(&previous);
                log.changes.push(Change::Remove { index, previous });
                true
            }
            None => false,
        }
    }

    /// Removes an object and the relations that name it, one level deep (the `remove_object`
    /// operation, as the reference applies it): a relation naming one of those relations is left
    /// dangling for validation to refuse. Returns the removed ids (the object first).
    pub fn remove_with_relations(&mut self, id: &str, log: &mut ChangeSet) -> Vec<String> {
        if !self.remove(id, log) {
            return Vec::new();
        }
        let mut removed = vec![id.to_owned()];
        let naming: Vec<String> = self.relations_of(id).iter().map(|r| r.identity.id.to_string()).collect();
        for relation in naming {
            if self.remove(&relation, log) {
                removed.push(relation);
            }
        }
        removed
    }

    /// Removes an object and, transitively, every relation that names a removed id.
    /// Returns the removed ids in removal order (the object first).
    pub fn remove_cascading(&mut self, id: &str, log: &mut ChangeSet) -> Vec<String> {
        let mut removed = Vec::new();
        let mut pending = vec![id.to_owned()];
        while let Some(next) = pending.pop() {
            if self.remove(&next, log) {
                pending.extend(self.relations_of(&next).iter().map(|r| r.identity.id.to_string()));
                removed.push(next);
            }
        }
        removed
    }

    /// Reverts the given changes (which must be the latest made to this structure), newest first.
    pub fn undo(&mut self, log: ChangeSet) {
        for change in log.changes.into_iter().rev() {
            match change {
                Change::Put { index, previous: Some(previous), current } => {
                    self.index_remove(&current);
                    self.index_insert(&previous);
                    let (at, _) = self.objects.replace_full(ById(previous));
                    debug_assert_eq!(at, index, "a replaced object keeps its position");
                }
                Change::Put { previous: None, current, .. } => {
                    self.index_remove(&current);
                    self.objects.pop();
                }
                Change::Remove { index, previous } => {
                    self.index_insert(&previous);
                    self.objects.shift_insert(index, ById(previous));
                }
            }
        }
    }

    fn index_insert(&mut self, entry: &Entry) {
        self.root.insert(&entry.hash);
        let object = &entry.object;
        if let Some(text) = self.text.get_mut() {
            text.insert(object);
        }
        if let Some(expiries) = self.expiries.get_mut() {
            expiries.insert(object);
        }
        if let Some(kinds) = self.kinds.get_mut() {
            kinds.insert(object);
        }
        if let Some(vectors) = self.vectors.get_mut() {
            vectors.get_mut().unwrap_or_else(|p| p.into_inner()).mark(object);
        }
        if let Some(relation) = object.relation() {
            let incidence = &mut self.incidence;
            for_each_distinct(&relation.participants, |participant| {
                incidence.entry(participant.into()).or_default().push(object.clone());
            });
            if let (DERIVES, Some((source, _))) = (relation.relation_type, relation.source_target()) {
                self.derives_out.entry(source.into()).or_default().push(object.clone());
            }
        }
    }

    fn index_remove(&mut self, entry: &Entry) {
        self.root.remove(&entry.hash);
        let object = &entry.object;
        if let Some(text) = self.text.get_mut() {
            text.remove(object);
        }
        if let Some(expiries) = self.expiries.get_mut() {
            expiries.remove(object);
        }
        if let Some(kinds) = self.kinds.get_mut() {
            kinds.remove(object);
        }
        if let Some(vectors) = self.vectors.get_mut() {
            vectors.get_mut().unwrap_or_else(|p| p.into_inner()).mark(object);
        }
        let id = object.id();
        if let Some(relation) = object.relation() {
            // A repeated participant was indexed once (see `index_insert`), so it is unindexed once:
            // otherwise replacing the relation would also drop the new version's incidence entry.
            for_each_distinct(&relation.participants, |participant| {
                remove_from_index(&mut self.incidence, participant, id);
            });
            if let (DERIVES, Some((source, _))) = (relation.relation_type, relation.source_target()) {
                remove_from_index(&mut self.derives_out, source, id);
            }
        }
    }
}

/// Calls `f` with each of a relation's participants once, in order. Most relations have two or
/// three: each is compared with those before it, where a set would cost an allocation.
fn for_each_distinct(participants: &[&str], mut f: impl FnMut(&str)) {
    if participants.len() <= 16 {
        for (i, participant) in participants.iter().enumerate() {
            if !participants[..i].contains(participant) {
                f(participant);
            }
        }
    } else {
        let mut seen = HashSet::with_capacity(participants.len());
        for participant in participants {
            if seen.insert(*participant) {
                f(participant);
            }
        }
    }
}

fn remove_from_index(index: &mut RelationIndex, key: &str, id: &str) {
    if let Some(relations) = index.get_mut(key) {
        if let Some(pos) = relations.iter().position(|r| r.id() == id) {
            relations.swap_remove(pos);
        }
        if relations.is_empty() {
            index.remove(key);
        }
    }
}

/// A stored, replayable primitive: the net of a [`Change`] without undo information.
#[derive(Clone, Debug, PartialEq)]
pub enum DeltaOp {
    Put(Arc<KnowledgeObject>),
    Remove(String),
}

impl ChangeSet {
    /// The replayable form of this change set (what a stored delta holds).
    pub fn to_delta(&self) -> Vec<DeltaOp> {
        self.changes
            .iter()
            .map(|c| match c {
                Change::Put { current, .. } => DeltaOp::Put(current.object.clone()),
                Change::Remove { previous, .. } => DeltaOp::Remove(previous.object.identity.id.to_string()),
            })
            .collect()
    }
}

impl KnowledgeStructure {
    /// Applies a stored delta. Puts of malformed relations cannot occur in deltas we wrote, but a
    /// corrupt store must not panic: such a put is reported as an error.
    pub fn apply_delta(&mut self, delta: &[DeltaOp]) -> Result<ChangeSet, StructureError> {
        let mut log = ChangeSet::default();
        for op in delta {
            match op {
                DeltaOp::Put(object) => {
                    if let Err(e) = object.check_relation_shape() {
                        self.undo(log);
                        return Err(e.into());
                    }
                    self.put_entry(Entry::from_shared(object.clone()), &mut log);
                }
                DeltaOp::Remove(id) => {
                    self.remove(id, &mut log);
                }
            }
        }
        Ok(log)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::Identity;
    use serde_json::{Value, json};

    fn node(id: &str) -> KnowledgeObject {
        KnowledgeObject::new(Identity::new(id, "Node", id), crate::Structure::new())
    }

    fn rel(id: &str, a: &str, b: &str, ty: &str) -> KnowledgeObject {
        let Value::Object(s) = json!({"participants": [a, b], "relation_type": ty}) else { unreachable!() };
        KnowledgeObject::new(Identity::new(id, "Relation", id), s)
    }

    fn ids(relations: &[Arc<KnowledgeObject>]) -> Vec<&str> {
        relations.iter().map(|r| r.id()).collect()
    }

    fn sample() -> KnowledgeStructure {
        KnowledgeStructure::from_objects([
            node("a"),
            node("b"),
            node("c"),
            rel("r1", "a", "b", "derives"),
            rel("r2", "b", "c", "x"),
        ])
        .unwrap()
    }

    #[test]
    fn duplicate_ids_are_rejected() {
        let err = KnowledgeStructure::from_objects([node("a"), node("a")]).unwrap_err();
        assert_eq!(err, StructureError::DuplicateId("a".into()));
    }

    #[test]
    fn indexes_follow_relations() {
        let s = sample();
        assert_eq!(s.relations_of("b").len(), 2);
        assert_eq!(ids(s.derives_from("a")), ["r1"]);
        assert!(s.derives_from("b").is_empty());
    }

    #[test]
    fn cascade_removes_relations_and_undo_restores_order() {
        let mut s = sample();
        let before = s.clone();
        let mut log = ChangeSet::default();
        let removed = s.remove_cascading("b", &mut log);
        assert_eq!(removed.len(), 3);
        assert_eq!(s.ids().collect::<Vec<_>>(), ["a", "c"]);
        assert!(s.relations_of("a").is_empty());
        s.undo(log);
        assert_eq!(s, before);
        assert_eq!(s.root_hash(), before.root_hash());
        assert_eq!(s.relations_of("b").len(), 2);
    }

    #[test]
    fn removing_with_relations_goes_one_level_deep() {
        let mut s = KnowledgeStructure::from_objects([
            node("a"),
            node("b"),
            rel("ab", "a", "b", "links"),
            rel("about-ab", "b", "ab", "comments"),
        ])
        .unwrap();
        let mut log = ChangeSet::default();
        assert_eq!(s.remove_with_relations("a", &mut log), ["a", "ab"]);
        assert_eq!(s.ids().collect::<Vec<_>>(), ["b", "about-ab"], "the relation naming 'ab' is left");
        assert!(s.remove_with_relations("ghost", &mut log).is_empty());
    }

    #[test]
    fn replacing_a_relation_with_a_repeated_participant_keeps_its_incidence() {
        let mut s = KnowledgeStructure::from_objects([node("a"), rel("r", "a", "a", "self")]).unwrap();
        let mut renamed = rel("r", "a", "a", "self");
        renamed.identity.name = "renamed".into();
        let mut log = ChangeSet::default();
        s.put(renamed, &mut log).unwrap();
        assert_eq!(ids(s.relations_of("a")), ["r"]);
        assert!(Arc::ptr_eq(&s.relations_of("a")[0], s.get("r").unwrap()), "the index holds the new version");
        s.remove_cascading("a", &mut log);
        assert!(s.is_empty(), "the relation goes with its only participant");
    }

    #[test]
    fn put_replaces_in_place_and_delta_replays() {
        let mut s = sample();
        let copy = s.clone();
        let mut log = ChangeSet::default();
        s.put(rel("r2", "c", "a", "y"), &mut log).unwrap();
        s.put(node("d"), &mut log).unwrap();
        s.remove("r1", &mut log);
        assert_eq!(s.index_of("r2"), Some(3));
        assert_eq!(s.root_hash(), s.root_hash_from_scratch());
        let mut replayed = copy.clone();
        replayed.apply_delta(&log.to_delta()).unwrap();
        assert_eq!(replayed, s);
        let net = log.net();
        assert_eq!(net.keys().collect::<Vec<_>>(), ["r2", "d", "r1"]);
        s.undo(log);
        assert_eq!(s, copy);
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        #[derive(Clone, Debug)]
        enum Step {
            PutNode(u8, u8),
            PutRelation(u8, u8, u8, bool),
            Remove(u8),
            RemoveCascading(u8),
        }

        fn step() -> impl Strategy<Value = Step> {
            prop_oneof![
                (0..12u8, any::<u8>()).prop_map(|(i, v)| Step::PutNode(i, v)),
                (12..20u8, 0..12u8, 0..12u8, any::<bool>()).prop_map(|(r, a, b, d)| Step::PutRelation(r, a, b, d)),
                (0..20u8).prop_map(Step::Remove),
                (0..20u8).prop_map(Step::RemoveCascading),
            ]
        }

        fn run(s: &mut KnowledgeStructure, step: &Step, log: &mut ChangeSet) {
            match *step {
                Step::PutNode(i, v) => {
                    // Words that repeat across objects and versions, for the text index.
                    let Value::Object(st) = json!({"v": v, "note": format!("w{} w{}", v % 5, v % 3)}) else {
                        unreachable!()
                    };
                    s.put(KnowledgeObject::new(Identity::new(format!("o{i}"), "Node", "n"), st), log).unwrap();
                }
                Step::PutRelation(r, a, b, derives) => {
                    let ty = if derives { "derives" } else { "x" };
                    s.put(rel(&format!("o{r}"), &format!("o{a}"), &format!("o{b}"), ty), log).unwrap();
                }
                Step::Remove(i) => {
                    s.remove(&format!("o{i}"), log);
                }
                Step::RemoveCascading(i) => {
                    s.remove_cascading(&format!("o{i}"), log);
                }
            }
        }

        proptest! {
            /// The incrementally maintained root hash always equals a from-scratch computation,
            /// indexes agree with a rebuild, and undo restores the exact previous structure.
            #[test]
            fn incremental_state_matches_from_scratch(
                first in proptest::collection::vec(step(), 0..30),
                second in proptest::collection::vec(step(), 1..30),
            ) {
                let mut s = KnowledgeStructure::new();
                let mut log = ChangeSet::default();
                first.iter().for_each(|st| run(&mut s, st, &mut log));
                prop_assert_eq!(s.root_hash(), s.root_hash_from_scratch());
                // Searched from here on: the text and kind indexes follow every later change.
                s.text_index();
                s.kind_index();
                let checkpoint = s.clone();
                let mut log = ChangeSet::default();
                second.iter().for_each(|st| run(&mut s, st, &mut log));
                prop_assert_eq!(s.root_hash(), s.root_hash_from_scratch());
                let rebuilt = KnowledgeStructure::from_objects(s.objects().map(|o| KnowledgeObject::clone(o))).unwrap();
                for id in s.ids() {
                    for (kept, from_scratch) in
                        [(s.relations_of(id), rebuilt.relations_of(id)), (s.derives_from(id), rebuilt.derives_from(id))]
                    {
                        // The same relations, each the version the structure holds now.
                        prop_assert!(kept.iter().all(|r| s.get(r.id()).is_some_and(|now| Arc::ptr_eq(r, now))));
                        let (mut a, mut b) = (ids(kept), ids(from_scratch));
                        a.sort_unstable();
                        b.sort_unstable();
                        prop_assert_eq!(a, b);
                    }
                }
                prop_assert_eq!(s.text_index(), &TextIndex::build(&s));
                prop_assert_eq!(s.kind_index(), &KindIndex::build(&s));
                prop_assert!(s.kind_index().held().all(|o| s.get(o.id()).is_some_and(|now| Arc::ptr_eq(o, now))));
                let mut replayed = checkpoint.clone();
                replayed.apply_delta(&log.to_delta()).unwrap();
                prop_assert_eq!(&replayed, &s);
                prop_assert_eq!(replayed.text_index(), s.text_index());
                // An index kept as bytes and set on a copy of the checkpoint (as a store's is on a
                // loaded snapshot) follows the changes after it like one built there.
                let bytes = TextIndex::build(&checkpoint).to_bytes(&checkpoint.root_hash());
                let (root, kept) = TextIndex::from_bytes(&bytes).unwrap();
                if s.root_hash() != root {
                    // Not on a structure with other objects.
                    prop_assert!(s.clone().set_text_index(kept.clone(), root).is_err());
                }
                let mut restored = checkpoint.clone();
                restored.set_text_index(kept, root).unwrap();
                restored.apply_delta(&log.to_delta()).unwrap();
                prop_assert_eq!(restored.built_text_index(), Some(s.text_index()));
                s.undo(log);
                prop_assert_eq!(&s, &checkpoint);
                prop_assert_eq!(s.root_hash(), checkpoint.root_hash());
                prop_assert_eq!(s.text_index(), &TextIndex::build(&checkpoint));
                prop_assert_eq!(s.kind_index(), &KindIndex::build(&checkpoint));
            }
        }
    }
}
