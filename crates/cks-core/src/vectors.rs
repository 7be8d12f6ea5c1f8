//! Search by meaning over a structure: each searchable object's text as a model embeds it, its
//! key (a hash of that text, so an unchanged text is never embedded twice), compact vectors, and
//! the [`VectorIndex`] of a structure's vectors, ranked by cosine similarity.
//!
//! The structure cannot embed anything itself (models live outside this crate), so the index
//! keeps a row per object whose vector is known and, for the others, what is pending. Every
//! change to the structure marks the changed id; [`VectorIndex::sync`] settles the marked ids
//! and the pending ones against whatever vectors are known by then (a lookup the caller passes),
//! so a search costs the changes since the last one, not a pass over the graph.
//!
//! The first sync of a loaded session settles every object. Reading each object's text and
//! hashing it costs about 4 µs an object (0.4 s at 100,000), so the caller may also remember
//! each object's text key by the object's content hash ([`ObjectKey`], which the structure
//! already holds): a sync asks [`Known::text_key`] first, makes the text only for objects it
//! does not know, and reports the keys it made ([`Synced::new_keys`]) for the caller to keep.
//! A remembered key is a cache of a pure function of the object's content (under
//! [`TEXT_VERSION`]), so the index is the same whichever keys were remembered.
//!
//! A ranking reads every row while the index is small. Past [`EXACT_ROWS`] rows it first
//! compares one bit per dimension (the sign of each code: an eighth of the bytes), keeps the
//! rows closest by Hamming distance, [`SHORTLIST_FACTOR`] times as many as asked for, and ranks
//! those by their bytes: the scan reads an eighth of the memory, and what it misses are rows
//! that were far down the shortlist's tail anyway.

use std::collections::HashSet;
use std::sync::Arc;

mod stored;
pub use stored::{KeptVectors, StoredVectors};

use sha2::{Digest, Sha256};

use crate::structure::{ById, Entry};
use crate::text::encoder_text;
use crate::{ContentHash, KnowledgeObject, KnowledgeStructure};

type Map<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// What identifies an embedded text: the first 16 bytes of its SHA-256.
pub type TextKey = [u8; 16];

/// The text of an object that a model embeds: its name, its type, then its structure's values,
/// the shortest first (a title before the body it names: `text::encoder_text`). `None` for
/// relations, which are not searched.
///
/// A name that only repeats the object's id ("D1:3", "test-env-pro01a") is left out when the
/// structure has text: it tells an encoder nothing. Words still find an object by its id.
pub fn embedding_text(object: &KnowledgeObject) -> Option<String> {
    if object.is_relation() {
        return None;
    }
    if object.identity.name == object.id() {
        let unnamed = encoder_text(object, false);
        if unnamed.len() > object.identity.r#type.len() {
            return Some(unnamed);
        }
    }
    Some(encoder_text(object, true))
}

/// The key of a text.
pub fn text_key(text: &str) -> TextKey {
    let digest = Sha256::digest(text.as_bytes());
    let mut key = [0u8; 16];
    key.copy_from_slice(&digest[..16]);
    key
}

/// How [`embedding_text`] makes an object's text. Keys remembered by object ([`ObjectKey`]) are
/// good only for the text they were made from: this changes whenever `embedding_text`'s output
/// does (a test holds one object's key fixed), so keys kept under an older version are not read.
pub const TEXT_VERSION: u32 = 2;

/// What identifies an object's content when its text key is remembered: the first 16 bytes of
/// its content hash (which covers its id, type, name and structure: everything its text is
/// made from).
pub type ObjectKey = [u8; 16];

/// The [`ObjectKey`] of an object with this content hash.
pub fn object_key(hash: &ContentHash) -> ObjectKey {
    let mut key = [0u8; 16];
    key.copy_from_slice(&hash.0[..16]);
    key
}

/// What a sync finds known: the vector of a text and, when the caller remembers it, the text key
/// of an object's content.
pub trait Known<'v> {
    /// The vector of the text with this key, if any.
    fn vector(&self, key: &TextKey) -> Option<&'v Vector>;

    /// The key of the text of an object with this content, if remembered (saves making the text).
    fn text_key(&self, _object: &ObjectKey) -> Option<TextKey> {
        None
    }
}

/// What is remembered in two maps: vectors by text key, and text keys by object content.
pub struct Remembered<'a, S> {
    pub vectors: &'a std::collections::HashMap<TextKey, Vector, S>,
    pub keys: &'a std::collections::HashMap<ObjectKey, TextKey, S>,
}

impl<S> std::fmt::Debug for Remembered<'_, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remembered").field("vectors", &self.vectors.len()).field("keys", &self.keys.len()).finish()
    }
}

impl<'a, S: std::hash::BuildHasher> Known<'a> for Remembered<'a, S> {
    fn vector(&self, key: &TextKey) -> Option<&'a Vector> {
        self.vectors.get(key)
    }

    fn text_key(&self, object: &ObjectKey) -> Option<TextKey> {
        self.keys.get(object).copied()
    }
}

/// Vectors alone: no key remembered.
struct Vectors<F>(F);

impl<'v, F: Fn(&TextKey) -> Option<&'v Vector>> Known<'v> for Vectors<F> {
    fn vector(&self, key: &TextKey) -> Option<&'v Vector> {
        (self.0)(key)
    }
}

/// How many objects a first sync looks up before it settles them.
const LOOKUP_BLOCK: usize = 32;

/// An object's remembered text key and that key's vector, as far as known.
fn look_up<'v>(entry: &Entry, known: &impl Known<'v>) -> (Option<TextKey>, Option<&'v Vector>) {
    let remembered = known.text_key(&object_key(&entry.hash));
    (remembered, remembered.and_then(|key| known.vector(&key)))
}

/// Below this many objects, a first sync reads them on one thread.
const PARALLEL_SYNC_FROM: usize = 8192;

/// Up to this many rows, a ranking compares every row's bytes.
pub const EXACT_ROWS: usize = 20_000;

/// Past [`EXACT_ROWS`], how many times the rows asked for the sign bits shortlist (at least
/// [`SHORTLIST_MIN`]).
pub const SHORTLIST_FACTOR: usize = 8;
const SHORTLIST_MIN: usize = 512;

/// A unit vector kept in one signed byte per dimension and a scale: a quarter of `f32`'s
/// size, and cosine similarities within about 1 % of the exact ones. A clone shares the bytes:
/// the known vectors and every index whose rows hold them keep one copy.
///
/// The bytes begin with the codes' sign bits (see [`sign_bits`]), made when the vector is: an
/// index copies a row's bits from the first cache line of its vector, where making them at the
/// index's first settle read every code from memory (a third of that settle's time).
#[derive(Clone, Debug, PartialEq)]
pub struct Vector {
    scale: f32,
    dims: u32,
    /// The sign bits (little-endian `u64`s, [`words`] of them), then the codes.
    bytes: Arc<[i8]>,
}

/// The sign-bit words of a vector of `dims` dimensions.
fn words(dims: usize) -> usize {
    dims.div_ceil(64)
}

impl Vector {
    /// A vector of these codes, its bytes allocated once.
    fn new(scale: f32, codes: impl ExactSizeIterator<Item = i8>) -> Vector {
        let dims = codes.len();
        let head = words(dims) * 8;
        let mut bytes: Arc<[i8]> = std::iter::repeat_n(0, head + dims).collect();
        let fresh = Arc::get_mut(&mut bytes).expect("a new allocation has no other owner");
        let (bits, tail) = fresh.split_at_mut(head);
        for (code, value) in tail.iter_mut().zip(codes) {
            *code = value;
        }
        for (word, value) in bits.as_chunks_mut::<8>().0.iter_mut().zip(sign_bits(tail)) {
            *word = value.to_le_bytes().map(|b| b as i8);
        }
        let dims = u32::try_from(dims).expect("a vector has fewer than 2³² dimensions");
        Vector { scale, dims, bytes }
    }

    /// The normalised, quantised form of `values`; `None` when they are empty, all zero or not
    /// finite (nothing to compare by).
    pub fn quantize(values: &[f32]) -> Option<Vector> {
        let norm = values.iter().map(|v| v * v).sum::<f32>().sqrt();
        if values.is_empty() || !norm.is_finite() || norm == 0.0 {
            return None;
        }
        let largest = values.iter().fold(0f32, |m, v| m.max(v.abs())) / norm;
        let scale = largest / 127.0;
        Some(Vector::new(scale, values.iter().map(|v| (v / norm / scale).round().clamp(-127.0, 127.0) as i8)))
    }

    /// A vector that is similar to nothing (for a text with nothing to compare by).
    pub fn zero(dims: usize) -> Vector {
        Vector::new(f32::MIN_POSITIVE, std::iter::repeat_n(0, dims))
    }

    pub fn dims(&self) -> usize {
        self.dims as usize
    }

    /// One signed byte per dimension.
    fn codes(&self) -> &[i8] {
        &self.bytes[words(self.dims()) * 8..]
    }

    /// The codes' sign bits, as [`sign_bits`] makes them.
    fn bits(&self) -> impl Iterator<Item = u64> + '_ {
        self.bytes[..words(self.dims()) * 8]
            .as_chunks::<8>()
            .0
            .iter()
            .map(|word| u64::from_le_bytes(word.map(|b| b as u8)))
    }

    /// The approximate cosine similarity of two vectors of the same model.
    pub fn cosine(&self, other: &Vector) -> f32 {
        dot(self.codes(), other.codes()) as f32 * self.scale * other.scale
    }

    /// The stored form: the scale (4 bytes, little-endian), then one byte per dimension.
    pub fn to_bytes(&self) -> Vec<u8> {
        let codes = self.codes();
        let mut bytes = Vec::with_capacity(4 + codes.len());
        bytes.extend_from_slice(&self.scale.to_le_bytes());
        bytes.extend(codes.iter().map(|c| *c as u8));
        bytes
    }

    /// Reads [`Vector::to_bytes`]' form back; `None` when it is not one.
    pub fn from_bytes(bytes: &[u8]) -> Option<Vector> {
        let (scale, codes) = bytes.split_first_chunk::<4>()?;
        let scale = f32::from_le_bytes(*scale);
        (!codes.is_empty() && scale.is_finite() && scale > 0.0)
            .then(|| Vector::new(scale, codes.iter().map(|c| *c as i8)))
    }
}

/// The sign bits of codes, 64 to a word (the last word padded with zeros). The comparisons go
/// into bytes first, then the bytes into bits: both loops vectorise, where one loop doing both
/// does not (three times as fast; a first settle makes 400,000 words at 100,000 objects).
fn sign_bits(codes: &[i8]) -> impl Iterator<Item = u64> + '_ {
    codes.chunks(64).map(|chunk| {
        let mut positive = [0u8; 64];
        for (flag, &code) in positive.iter_mut().zip(chunk) {
            *flag = u8::from(code > 0);
        }
        positive.iter().enumerate().fold(0u64, |word, (i, &flag)| word | (u64::from(flag) << i))
    })
}

/// The integer dot product, in blocks the compiler turns into vector instructions.
fn dot(a: &[i8], b: &[i8]) -> i32 {
    const LANES: usize = 32;
    let mut sums = [0i32; LANES];
    let (a_blocks, a_rest) = a.as_chunks::<LANES>();
    let (b_blocks, b_rest) = b.as_chunks::<LANES>();
    for (x, y) in a_blocks.iter().zip(b_blocks) {
        for lane in 0..LANES {
            sums[lane] += i32::from(x[lane]) * i32::from(y[lane]);
        }
    }
    let rest: i32 = a_rest.iter().zip(b_rest).map(|(x, y)| i32::from(*x) * i32::from(*y)).sum();
    sums.iter().sum::<i32>() + rest
}

/// Where a sync stands after it ran.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Synced {
    /// Texts that became pending in this sync, each once: what to embed.
    pub to_embed: Vec<(TextKey, String)>,
    /// How many searchable objects have no vector yet.
    pub pending: usize,
    /// The text keys this sync made for objects whose key was not remembered ([`Known::text_key`]):
    /// what to remember.
    pub new_keys: Vec<(ObjectKey, TextKey)>,
}

/// An object as the index holds it: by reference count, found by its id.
type Held = ById<Arc<KnowledgeObject>>;

/// The vectors of a structure's searchable objects under one model.
#[derive(Debug, Default)]
pub struct VectorIndex {
    model: Box<str>,
    /// The lookup's generation when the pending objects were last looked up.
    generation: Option<u64>,
    /// Row `i`: `ids[i]` (the object it was made from) and `vectors[i]` (its bytes shared with
    /// the known vectors, not copied: a first settle at 100,000 objects would write 25 MB).
    ids: Vec<Arc<KnowledgeObject>>,
    vectors: Vec<Vector>,
    /// Row `i`'s text key: what a kept index names each vector by ([`KeptVectors`]).
    keys: Vec<TextKey>,
    /// Row `i`'s sign bits: `bits[i * words..][..words]`, bit `d` set when code `d` is positive.
    bits: Vec<u64>,
    dims: usize,
    rows: Map<Held, usize>,
    /// Every object is to settle (before the first sync, and after a change of model): the next
    /// sync reads the structure's entries in order rather than a set of every id.
    all_marked: bool,
    /// Objects changed since the last sync (any version of each: only the id is read).
    marked: HashSet<Held, foldhash::fast::RandomState>,
    /// Objects waiting for their text's vector.
    pending: Map<Held, TextKey>,
}

impl VectorIndex {
    /// An index with every object still to settle.
    pub(crate) fn new() -> Self {
        VectorIndex { all_marked: true, ..Default::default() }
    }

    /// Notes that `object` changed (was added, replaced or removed).
    pub(crate) fn mark(&mut self, object: &Arc<KnowledgeObject>) {
        if !self.all_marked && !self.marked.contains(object.id()) {
            self.marked.insert(ById(object.clone()));
        }
    }

    /// Brings the index up to date with `structure` under `model`: the marked objects are looked
    /// up again, and so are the pending ones when the lookup's `generation` moved. `lookup` gives
    /// the vector known for a text, if any. A different model starts the index over.
    pub fn sync<'v>(
        &mut self,
        structure: &KnowledgeStructure,
        model: &str,
        generation: u64,
        lookup: impl Fn(&TextKey) -> Option<&'v Vector> + Sync,
    ) -> Synced {
        self.sync_known(structure, model, generation, Vectors(lookup))
    }

    /// [`Self::sync`] with text keys remembered by object: `known` gives the vector known for a
    /// text and, when it remembers it, an object's text key.
    pub fn sync_known<'v>(
        &mut self,
        structure: &KnowledgeStructure,
        model: &str,
        generation: u64,
        known: impl Known<'v> + Sync,
    ) -> Synced {
        if *self.model != *model {
            *self = VectorIndex { model: model.into(), ..VectorIndex::new() };
        }
        let mut synced = Synced::default();
        let mut queued: HashSet<TextKey, foldhash::fast::RandomState> = HashSet::default();
        if std::mem::take(&mut self.all_marked) {
            self.marked.clear();
            self.clear_rows();
            self.pending.clear();
            self.settle_all(structure, &known, &mut synced, &mut queued);
        } else {
            for held in std::mem::take(&mut self.marked) {
                let id = held.id();
                self.remove_row(id);
                self.pending.remove(id);
                if let Some(entry) = structure.entry(id) {
                    self.settle(entry, &known, &mut synced, &mut queued);
                }
            }
        }
        if self.generation != Some(generation) && !self.pending.is_empty() {
            let found: Vec<(Arc<KnowledgeObject>, TextKey, &Vector)> = self
                .pending
                .iter()
                .filter_map(|(held, key)| Some((held.0.clone(), *key, known.vector(key)?)))
                .collect();
            for (object, key, vector) in found {
                self.pending.remove(object.id());
                self.push_row(object, key, vector);
            }
        }
        self.generation = Some(generation);
        synced.pending = self.pending.len();
        synced
    }

    /// Settles every object of `structure` into an empty index. A large structure is read on
    /// every core, each thread looking up its share of the objects and laying down their rows;
    /// the shares are then joined in order (the lookups miss the caches, so two threads wait
    /// on memory at once).
    fn settle_all<'v>(
        &mut self,
        structure: &KnowledgeStructure,
        known: &(impl Known<'v> + Sync),
        synced: &mut Synced,
        queued: &mut HashSet<TextKey, foldhash::fast::RandomState>,
    ) {
        // Only searchable objects, so each thread's share is as much work (relations are often
        // added after the objects they join: a share of entries could be all relations).
        let entries: Vec<&Entry> = structure.entries().filter(|entry| !entry.is_relation()).collect();
        // A small structure (a new session's) settles on this thread.
        let threads = crate::threads_for(entries.len(), PARALLEL_SYNC_FROM);
        let parts: Vec<(VectorIndex, Synced)> = if threads == 1 {
            vec![Self::settle_share(self.model.clone(), &entries, entries.len(), known)]
        } else {
            self.settle_shares(&entries, threads, known)
        };
        for (mut share, found) in parts {
            self.pending.extend(std::mem::take(&mut share.pending));
            if self.is_empty() {
                // The first share's rows become the index's, moved rather than copied.
                (self.ids, self.vectors, self.keys, self.bits, self.rows, self.dims) =
                    (share.ids, share.vectors, share.keys, share.bits, share.rows, share.dims);
            } else if share.dims == self.dims {
                // (Rows of another shape than the first share's are not comparable: their objects
                // stay unranked by meaning, as `push_row` leaves them.)
                let start = self.ids.len();
                self.rows.extend(share.rows.into_iter().map(|(object, row)| (object, start + row)));
                self.ids.extend(share.ids);
                self.vectors.extend(share.vectors);
                self.keys.extend(share.keys);
                self.bits.extend(share.bits);
            }
            for (key, text) in found.to_embed {
                if queued.insert(key) {
                    synced.to_embed.push((key, text));
                }
            }
            synced.new_keys.extend(found.new_keys);
        }
    }

    /// The shares of [`Self::settle_all`] settled on `threads` threads, in order.
    fn settle_shares<'v>(
        &self,
        entries: &[&Entry],
        threads: usize,
        known: &(impl Known<'v> + Sync),
    ) -> Vec<(VectorIndex, Synced)> {
        let part = entries.len().div_ceil(threads).max(1);
        std::thread::scope(|scope| {
            let settling: Vec<_> = entries
                .chunks(part)
                .enumerate()
                .map(|(number, share)| {
                    // Room for every row at once (the first share's for every share's, as the
                    // others join it): growing the rows by doubling copies them again, and growing
                    // the map hashes every id again.
                    let room = if number == 0 { entries.len() } else { share.len() };
                    let model = self.model.clone();
                    scope.spawn(move || Self::settle_share(model, share, room, known))
                })
                .collect();
            settling.into_iter().map(|s| s.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))).collect()
        })
    }

    /// One thread's share of [`Self::settle_all`]: an index of `entries` (searchable objects)
    /// alone, with room for `room` rows, and what its settle found. The lookups are made a block
    /// at a time, apart from the rest of the work: in a short loop the processor waits on
    /// several at once.
    fn settle_share<'v>(
        model: Box<str>,
        entries: &[&Entry],
        room: usize,
        known: &impl Known<'v>,
    ) -> (VectorIndex, Synced) {
        let mut share = VectorIndex { model, ..VectorIndex::default() };
        let (mut synced, mut queued) = (Synced::default(), HashSet::default());
        share.ids.reserve(room);
        share.vectors.reserve(room);
        share.keys.reserve(room);
        share.rows.reserve(room);
        let mut looked = Vec::with_capacity(LOOKUP_BLOCK);
        for block in entries.chunks(LOOKUP_BLOCK) {
            looked.clear();
            looked.extend(block.iter().map(|entry| look_up(entry, known)));
            for (entry, &(remembered, vector)) in block.iter().zip(&looked) {
                share.settle_looked_up(entry, remembered, vector, known, &mut synced, &mut queued);
            }
        }
        (share, synced)
    }

    /// Gives `entry` (not in the index) its row, or makes it pending. Its text is made only when
    /// its key is not remembered or its vector is to be made.
    fn settle<'v>(
        &mut self,
        entry: &Entry,
        known: &impl Known<'v>,
        synced: &mut Synced,
        queued: &mut HashSet<TextKey, foldhash::fast::RandomState>,
    ) {
        if entry.is_relation() {
            return;
        }
        let (remembered, vector) = look_up(entry, known);
        self.settle_looked_up(entry, remembered, vector, known, synced, queued);
    }

    /// [`Self::settle`] of a searchable object whose remembered key, and that key's vector, were
    /// looked up already ([`look_up`]).
    fn settle_looked_up<'v>(
        &mut self,
        entry: &Entry,
        remembered: Option<TextKey>,
        vector: Option<&'v Vector>,
        known: &impl Known<'v>,
        synced: &mut Synced,
        queued: &mut HashSet<TextKey, foldhash::fast::RandomState>,
    ) {
        let object = &entry.object;
        let mut text = None;
        let key = remembered.unwrap_or_else(|| {
            let made = embedding_text(object).unwrap_or_default();
            let key = text_key(&made);
            synced.new_keys.push((object_key(&entry.hash), key));
            text = Some(made);
            key
        });
        let vector = if remembered.is_some() { vector } else { known.vector(&key) };
        match vector {
            Some(vector) => self.push_row(object.clone(), key, vector),
            None => {
                self.pending.insert(ById(object.clone()), key);
                if queued.insert(key) {
                    let text = text.unwrap_or_else(|| embedding_text(object).unwrap_or_default());
                    synced.to_embed.push((key, text));
                }
            }
        }
    }

    fn push_row(&mut self, object: Arc<KnowledgeObject>, key: TextKey, vector: &Vector) {
        if self.ids.is_empty() {
            self.dims = vector.dims();
            // The bits of as many rows as there is room for ids (a first sync's hint).
            self.bits.reserve(self.ids.capacity() * self.words());
        }
        if vector.dims() != self.dims {
            // A vector of another shape cannot be compared: the object stays unranked by meaning.
            return;
        }
        self.rows.insert(ById(object.clone()), self.ids.len());
        self.ids.push(object);
        self.bits.extend(vector.bits());
        self.vectors.push(vector.clone());
        self.keys.push(key);
    }

    fn remove_row(&mut self, id: &str) {
        let Some(row) = self.rows.remove(id) else { return };
        let last = self.ids.len() - 1;
        if row != last {
            self.ids.swap(row, last);
            self.vectors.swap(row, last);
            self.keys.swap(row, last);
            let words = self.words();
            let (head, tail) = self.bits.split_at_mut(last * words);
            head[row * words..][..words].swap_with_slice(&mut tail[..words]);
            *self.rows.get_mut(self.ids[row].id()).expect("every row is in `rows`") = row;
        }
        self.ids.pop();
        self.vectors.pop();
        self.keys.pop();
        self.bits.truncate(last * self.words());
    }

    fn clear_rows(&mut self) {
        self.rows.clear();
        self.ids.clear();
        self.vectors.clear();
        self.keys.clear();
        self.bits.clear();
    }

    /// Whether the index is settled under `model`: every searchable object was looked up, none
    /// is waiting for its vector and nothing changed since. Only such an index is kept.
    pub fn is_settled(&self, model: &str) -> bool {
        *self.model == *model && !self.all_marked && self.marked.is_empty() && self.pending.is_empty()
    }

    /// What the next sync under `model` looks up, when that is not every object: the ids changed
    /// since the last sync, and the keys of the objects waiting for their vectors. `None` when
    /// every object is to settle (a new index, or another model's).
    pub fn to_look_up(&self, model: &str) -> Option<(Vec<&str>, Vec<TextKey>)> {
        (*self.model == *model && !self.all_marked)
            .then(|| (self.marked.iter().map(|held| held.id()).collect(), self.pending.values().copied().collect()))
    }

    /// The rows to keep ([`KeptVectors`]) of a settled index of a structure whose root hash is
    /// `root`; `None` while it is not settled. The rows share the index's objects and vectors.
    pub fn kept(&self, root: ContentHash) -> Option<KeptVectors> {
        self.is_settled(&self.model).then(|| KeptVectors {
            model: self.model.clone(),
            dims: self.dims,
            root,
            rows: self
                .ids
                .iter()
                .zip(&self.keys)
                .zip(&self.vectors)
                .map(|((o, k), v)| (o.clone(), *k, v.clone()))
                .collect(),
        })
    }

    /// Sign-bit words per row.
    fn words(&self) -> usize {
        words(self.dims)
    }

    /// How many objects have a vector.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The model whose vectors the index holds.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// Up to `limit` objects most similar to `query`, best first; equal similarities in the
    /// order of their ids.
    pub fn rank(&self, query: &Vector, limit: usize) -> Vec<(&str, f32)> {
        if query.dims() != self.dims || limit == 0 {
            return Vec::new();
        }
        let mut best = crate::text::Best::new(limit);
        let offer = |row: usize| {
            best.offer(self.ids[row].id(), f64::from(query.cosine(&self.vectors[row])));
        };
        if self.len() <= EXACT_ROWS {
            (0..self.len()).for_each(offer);
        } else {
            self.shortlist(query, (limit * SHORTLIST_FACTOR).max(SHORTLIST_MIN)).into_iter().for_each(offer);
        }
        best.into_sorted().into_iter().map(|(id, s)| (id, s as f32)).collect()
    }

    /// About `wanted` rows (at least, unless there are fewer) closest to `query` by the Hamming
    /// distance of their sign bits.
    fn shortlist(&self, query: &Vector, wanted: usize) -> Vec<usize> {
        let words = self.words();
        let target: Vec<u64> = query.bits().collect();
        let distances: Vec<u16> = self
            .bits
            .chunks_exact(words)
            .map(|row| row.iter().zip(&target).map(|(a, b)| (a ^ b).count_ones() as u16).sum())
            .collect();
        // The smallest distance whose rows, with the closer ones, make up `wanted`.
        let mut counts = vec![0usize; self.dims + 1];
        for &d in &distances {
            counts[usize::from(d)] += 1;
        }
        let mut within = 0;
        let mut cutoff = self.dims as u16;
        for (d, count) in counts.iter().enumerate() {
            within += count;
            if within >= wanted {
                cutoff = d as u16;
                break;
            }
        }
        distances.iter().enumerate().filter(|&(_, &d)| d <= cutoff).map(|(row, _)| row).collect()
    }

    /// The similarity of one object to `query`, when it has a vector.
    pub fn cosine(&self, query: &Vector, id: &str) -> Option<f32> {
        let row = *self.rows.get(id)?;
        (query.dims() == self.dims).then(|| query.cosine(&self.vectors[row]))
    }

    /// An object's vector, when it has one.
    pub fn vector(&self, id: &str) -> Option<&Vector> {
        self.rows.get(id).map(|&row| &self.vectors[row])
    }

    /// The similarity of two objects, when both have a vector.
    pub fn similarity(&self, a: &str, b: &str) -> Option<f32> {
        let (a, b) = (*self.rows.get(a)?, *self.rows.get(b)?);
        Some(self.vectors[a].cosine(&self.vectors[b]))
    }

    /// Each row as `(id, vector)`, in no particular order (for tests: an index equals a rebuild).
    pub fn rows(&self) -> impl Iterator<Item = (&str, Vector)> + '_ {
        self.ids.iter().zip(&self.vectors).map(|(id, vector)| (id.id(), vector.clone()))
    }

    /// The pending objects and their keys, in no particular order.
    pub fn pending(&self) -> impl Iterator<Item = (&str, &TextKey)> + '_ {
        self.pending.iter().map(|(held, key)| (held.id(), key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::random_graph;
    use std::collections::{BTreeMap, HashMap};

    /// A stand-in model: a text's vector from its key's bytes (same text, same vector).
    fn vector_of(key: &TextKey) -> Vector {
        let values: Vec<f32> = key.iter().chain(key.iter()).map(|b| f32::from(*b) - 127.5).collect();
        Vector::quantize(&values).unwrap()
    }

    /// The rows by id (and a check that each row's sign bits are its codes').
    fn rows(index: &VectorIndex) -> BTreeMap<String, Vector> {
        let words = index.words();
        for (row, vector) in index.vectors.iter().enumerate() {
            assert!(
                sign_bits(vector.codes()).eq(index.bits[row * words..][..words].iter().copied())
                    && vector.bits().eq(sign_bits(vector.codes())),
                "row {row}'s bits"
            );
        }
        assert_eq!(index.bits.len(), index.len() * words);
        index.rows().map(|(id, v)| (id.to_owned(), v)).collect()
    }

    #[test]
    fn sign_bits_mark_the_positive_codes_64_to_a_word() {
        // 70 codes: positive at 0, 3, 63 and 64 (zero and negative ones are not), the last word
        // padded with zeros.
        let mut codes = vec![-1i8; 70];
        codes[1] = 0;
        for (at, code) in [(0, 1), (3, 127), (63, 2), (64, 1)] {
            codes[at] = code;
        }
        let words: Vec<u64> = sign_bits(&codes).collect();
        assert_eq!(words, vec![1 | 1 << 3 | 1 << 63, 1]);
    }

    /// Past [`EXACT_ROWS`], the sign-bit shortlist finds the exact best rows of clustered
    /// vectors (as a model's are: near neighbours share most signs), before and after removals.
    #[test]
    fn a_large_index_shortlists_by_sign_bits_and_ranks_as_an_exact_scan() {
        let mut seed = 7u64;
        let mut noise = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % 2001) as f32 / 1000.0 - 1.0
        };
        let dims = 96;
        let centres: Vec<Vec<f32>> = (0..400).map(|_| (0..dims).map(|_| noise()).collect()).collect();
        let mut near = |centre: &[f32]| -> Vector {
            Vector::quantize(&centre.iter().map(|c| c + 0.3 * noise()).collect::<Vec<_>>()).unwrap()
        };
        let mut index = VectorIndex::default();
        let n = EXACT_ROWS + 15_000;
        for i in 0..n {
            let object = crate::testing::node(&format!("o{i}"), "Claim", 0);
            index.push_row(Arc::new(object), [0; 16], &near(&centres[i % centres.len()]));
        }
        let exact = |index: &VectorIndex, query: &Vector, limit: usize| -> Vec<(String, f32)> {
            let mut all: Vec<(String, f32)> = index.rows().map(|(id, v)| (id.to_owned(), query.cosine(&v))).collect();
            all.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            all.truncate(limit);
            all
        };
        let owned = |ranked: Vec<(&str, f32)>| -> Vec<(String, f32)> {
            ranked.into_iter().map(|(id, s)| (id.to_owned(), s)).collect()
        };
        for c in [3, 150, 399] {
            let query = near(&centres[c]);
            assert_eq!(owned(index.rank(&query, 10)), exact(&index, &query, 10), "centre {c}");
        }
        for i in (0..n).step_by(3) {
            index.remove_row(&format!("o{i}"));
        }
        rows(&index);
        assert!(index.len() > EXACT_ROWS);
        let query = near(&centres[42]);
        assert_eq!(owned(index.rank(&query, 20)), exact(&index, &query, 20));
    }

    #[test]
    fn quantized_cosines_are_close_to_exact_ones_and_bytes_round_trip() {
        let a: Vec<f32> = (0..64).map(|i| ((i * 37 % 17) as f32 - 8.0) / 3.0).collect();
        let b: Vec<f32> = (0..64).map(|i| ((i * 11 % 13) as f32 - 6.0) / 2.0).collect();
        let exact = {
            let dot: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
            let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
            dot / norm(&a) / norm(&b)
        };
        let (qa, qb) = (Vector::quantize(&a).unwrap(), Vector::quantize(&b).unwrap());
        assert!((qa.cosine(&qb) - exact).abs() < 0.01, "{} vs {exact}", qa.cosine(&qb));
        assert!((qa.cosine(&qa) - 1.0).abs() < 0.01);
        assert_eq!(Vector::from_bytes(&qa.to_bytes()), Some(qa));
        assert_eq!(Vector::quantize(&[0.0, 0.0]), None);
        assert_eq!(Vector::quantize(&[f32::NAN]), None);
        assert_eq!(Vector::from_bytes(&[0, 0, 128, 63]), None, "a scale and no codes");
    }

    #[test]
    fn a_sync_embeds_each_text_once_and_finds_vectors_as_they_arrive() {
        let graph = random_graph(200, 50, 3);
        let known: HashMap<TextKey, Vector> = HashMap::new();
        let index_lock = graph.vector_index();
        let mut index = index_lock.lock().unwrap();
        let synced = index.sync(&graph, "m", 0, |k| known.get(k));
        let searchable = graph.objects().filter(|o| !o.is_relation()).count();
        assert_eq!(synced.pending, searchable);
        let keys: HashSet<TextKey> = synced.to_embed.iter().map(|(k, _)| *k).collect();
        assert_eq!(keys.len(), synced.to_embed.len(), "each text is asked for once");
        for (key, text) in &synced.to_embed {
            assert_eq!(text_key(text), *key);
        }
        // Nothing new: the same generation looks nothing up again, and asks for nothing.
        let again = index.sync(&graph, "m", 0, |k| known.get(k));
        assert_eq!(again, Synced { pending: searchable, ..Synced::default() });
        // The vectors arrive: the next generation settles every pending object.
        let known: HashMap<TextKey, Vector> = keys.iter().map(|k| (*k, vector_of(k))).collect();
        let settled = index.sync(&graph, "m", 1, |k| known.get(k));
        assert_eq!(settled.pending, 0);
        assert_eq!(index.len(), searchable);
        // A row holds the known vector's bytes, not a copy of them.
        let shared = known.values().map(|v| Arc::as_ptr(&v.bytes)).collect::<HashSet<_>>();
        assert!(index.vectors.iter().all(|v| shared.contains(&Arc::as_ptr(&v.bytes))));
        // Another model starts over.
        let other = index.sync(&graph, "other", 1, |_| None);
        assert_eq!(other.pending, searchable);
        assert!(index.is_empty());
    }

    #[test]
    fn the_ranking_is_by_cosine_best_first_ties_by_id() {
        let graph = random_graph(300, 0, 5);
        let lock = graph.vector_index();
        let mut index = lock.lock().unwrap();
        let keys: Vec<TextKey> =
            graph.objects().filter_map(|o| embedding_text(o)).map(|t| text_key(&t)).collect::<Vec<_>>();
        let known: HashMap<TextKey, Vector> = keys.iter().map(|k| (*k, vector_of(k))).collect();
        index.sync(&graph, "m", 0, |k| known.get(k));
        let query = vector_of(&keys[7]);
        let ranked = index.rank(&query, 10);
        let mut expected: Vec<(String, f32)> = graph
            .objects()
            .filter_map(|o| Some((o.id().to_owned(), query.cosine(known.get(&text_key(&embedding_text(o)?))?))))
            .collect();
        expected.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let expected: Vec<(&str, f32)> = expected.iter().take(10).map(|(id, s)| (id.as_str(), *s)).collect();
        assert_eq!(ranked, expected);
        assert!((ranked[0].1 - 1.0).abs() < 0.01, "the object's own text is the best match");
    }

    /// A text's key remembered by object is good only while [`embedding_text`] makes the same
    /// text: this fails when it changes, and then [`TEXT_VERSION`] must change with it (or keys
    /// kept by an older version would find the vectors of texts no object has any more).
    #[test]
    fn the_text_version_names_how_texts_are_made() {
        let mut object = crate::testing::node("n1", "Claim", 7);
        object.structure.insert("description", serde_json::json!("Alpha beta, gamma 42."));
        let key = text_key(&embedding_text(&object).unwrap());
        let mut named_by_id = crate::testing::node("n2", "Claim", 7);
        named_by_id.identity.name = "n2".into();
        let key_by_id = text_key(&embedding_text(&named_by_id).unwrap());
        assert_eq!(
            (TEXT_VERSION, hex::encode(key), hex::encode(key_by_id)),
            (2, "64d3d037b353758e78e1976f008a2453".to_owned(), "e079f99b3c5470cbb638517b4ff27db3".to_owned()),
            "bump TEXT_VERSION"
        );
    }

    #[test]
    fn a_name_that_repeats_the_id_is_not_embedded_unless_it_is_all_there_is() {
        let turn = |name: &str, text: Option<&str>| {
            let mut structure = serde_json::Map::new();
            if let Some(text) = text {
                structure.insert("text".into(), serde_json::json!(text));
            }
            KnowledgeObject::new(crate::Identity::new("D1:3", "Utterance", name), structure)
        };
        let said = Some("I moved to Bergen in May.");
        assert_eq!(embedding_text(&turn("D1:3", said)).unwrap(), "Utterance I moved to Bergen in May.");
        // Named: the name leads.
        assert_eq!(
            embedding_text(&turn("Moving day", said)).unwrap(),
            "Moving day Utterance I moved to Bergen in May."
        );
        // Short values before long ones, whatever the keys' order.
        let mut titled = turn("D1:3", said);
        titled.structure.insert("a_title", serde_json::json!("Moving"));
        titled.structure.insert("when", serde_json::json!(2023));
        assert_eq!(embedding_text(&titled).unwrap(), "Utterance 2023 Moving I moved to Bergen in May.");
        // Nothing but the id tells it apart: the id stays.
        assert_eq!(embedding_text(&turn("D1:3", None)).unwrap(), "D1:3 Utterance");
    }

    #[test]
    fn a_sync_makes_the_text_only_of_objects_whose_key_it_does_not_know() {
        let graph = random_graph(300, 60, 9);
        let searchable: Vec<&Entry> = graph.entries().filter(|e| !e.object.is_relation()).collect();
        let vectors: HashMap<TextKey, Vector> = HashMap::new();
        let mut keys: HashMap<ObjectKey, TextKey> = HashMap::new();
        let synced = VectorIndex::new().sync_known(&graph, "m", 0, Remembered { vectors: &vectors, keys: &keys });
        assert_eq!(synced.new_keys.len(), searchable.len(), "every key is made, once");
        for (entry, (object, key)) in searchable.iter().zip(&synced.new_keys) {
            assert_eq!((object_key(&entry.hash), text_key(&embedding_text(&entry.object).unwrap())), (*object, *key));
        }
        keys.extend(synced.new_keys.iter().copied());
        // Remembered: no key is made again, and the texts still to embed are made (the same ones).
        let again = VectorIndex::new().sync_known(&graph, "m", 0, Remembered { vectors: &vectors, keys: &keys });
        assert!(again.new_keys.is_empty());
        assert_eq!(again.to_embed, synced.to_embed);
        // With the vectors known too, a first sync is lookups alone.
        let vectors: HashMap<TextKey, Vector> = keys.values().map(|k| (*k, vector_of(k))).collect();
        let mut index = VectorIndex::new();
        let settled = index.sync_known(&graph, "m", 0, Remembered { vectors: &vectors, keys: &keys });
        assert_eq!(settled, Synced::default());
        assert_eq!(index.len(), searchable.len());
    }

    #[test]
    fn a_first_sync_on_every_core_settles_as_one_object_at_a_time_does() {
        let graph = random_graph(PARALLEL_SYNC_FROM * 2 + 100, 300, 4);
        let keys: Vec<TextKey> = graph.objects().filter_map(|o| embedding_text(o)).map(|t| text_key(&t)).collect();
        // Two in three texts have vectors; the rest are pending, some asked for twice (same text).
        let vectors: HashMap<TextKey, Vector> =
            keys.iter().enumerate().filter(|(i, _)| i % 3 != 0).map(|(_, k)| (*k, vector_of(k))).collect();
        let lookup = |k: &TextKey| vectors.get(k);
        let mut parallel = VectorIndex::new();
        let synced = parallel.sync(&graph, "m", 0, lookup);
        let mut serial = VectorIndex { model: "m".into(), ..VectorIndex::default() };
        let (mut expected, mut queued) = (Synced::default(), HashSet::default());
        for entry in graph.entries() {
            serial.settle(entry, &Vectors(lookup), &mut expected, &mut queued);
        }
        expected.pending = serial.pending.len();
        assert!(expected.pending > 0 && serial.len() > PARALLEL_SYNC_FROM);
        assert_eq!(rows(&parallel), rows(&serial));
        assert_eq!(synced, expected, "the same texts asked for, once each, in the same order");
        // Every row is where `rows` says: removals leave the rest as they were.
        for id in graph.ids().step_by(7) {
            parallel.remove_row(id);
            serial.remove_row(id);
        }
        assert_eq!(rows(&parallel), rows(&serial));
        let query = vector_of(&keys[1]);
        assert_eq!(parallel.rank(&query, 5), serial.rank(&query, 5));
    }

    mod properties {
        use super::*;
        use crate::ChangeSet;
        use crate::testing::{arb_structure, node};
        use proptest::prelude::*;

        /// Random changes (adds, updates, removals; kept or undone; synced now and then; restarts,
        /// which start a new index from the keys remembered so far) leave the index equal to one
        /// built from scratch over the final structure, vectors and pending objects alike, and
        /// every remembered key the key of its object's text.
        fn check(mut graph: KnowledgeStructure, steps: Vec<(u8, u16, bool)>) -> Result<(), TestCaseError> {
            let keys: Vec<TextKey> = graph.objects().filter_map(|o| embedding_text(o)).map(|t| text_key(&t)).collect();
            // Half the texts have vectors; the rest stay pending.
            let vectors: HashMap<TextKey, Vector> = keys.iter().step_by(2).map(|k| (*k, vector_of(k))).collect();
            let mut remembered: HashMap<ObjectKey, TextKey> = HashMap::new();
            let sync = |graph: &KnowledgeStructure, remembered: &mut HashMap<ObjectKey, TextKey>, generation| {
                let known = Remembered { vectors: &vectors, keys: remembered };
                let synced = graph.vector_index().lock().unwrap().sync_known(graph, "m", generation, known);
                remembered.extend(synced.new_keys);
            };
            sync(&graph, &mut remembered, 0);
            for (kind, n, keep) in steps {
                let ids: Vec<String> = graph.ids().map(str::to_owned).collect();
                let mut log = ChangeSet::default();
                match kind % 4 {
                    0 => {
                        let _ = graph.put(node(&format!("new{}", n % 20), "Claim", i64::from(n)), &mut log);
                    }
                    1 if !ids.is_empty() => {
                        let id = &ids[usize::from(n) % ids.len()];
                        if let Some(object) = graph.get(id).filter(|o| !o.is_relation()).cloned() {
                            let mut changed = KnowledgeObject::clone(&object);
                            changed.structure.insert("v", serde_json::json!(n % 7));
                            let _ = graph.put(changed, &mut log);
                        }
                    }
                    2 if !ids.is_empty() => {
                        graph.remove_cascading(&ids[usize::from(n) % ids.len()], &mut log);
                    }
                    3 => {
                        // A restart: the structure as loaded again, without its index.
                        graph = graph.clone();
                    }
                    _ => {}
                }
                if !keep {
                    graph.undo(log);
                }
                if n % 3 == 0 {
                    sync(&graph, &mut remembered, 0);
                }
            }
            sync(&graph, &mut remembered, 1);
            let lock = graph.vector_index();
            let index = lock.lock().unwrap();
            let mut fresh = VectorIndex::new();
            let synced = fresh.sync(&graph, "m", 1, |k: &TextKey| vectors.get(k));
            prop_assert_eq!(rows(&index), rows(&fresh));
            let pending = |i: &VectorIndex| -> BTreeMap<String, TextKey> {
                i.pending().map(|(id, k)| (id.to_owned(), *k)).collect()
            };
            prop_assert_eq!(pending(&index), pending(&fresh));
            let made: HashMap<ObjectKey, TextKey> = synced.new_keys.into_iter().collect();
            for (object, key) in &made {
                prop_assert_eq!(remembered.get(object), Some(key), "the remembered key is the text's");
            }
            Ok(())
        }

        proptest! {
            #[test]
            fn the_index_equals_a_rebuild(
                graph in arb_structure(),
                steps in prop::collection::vec((0u8..4, 0u16..500, any::<bool>()), 0..40),
            ) {
                check(graph, steps)?;
            }
        }
    }
}
