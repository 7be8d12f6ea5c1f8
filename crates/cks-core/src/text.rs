//! Lexical search over a structure: Okapi BM25 over each non-relation object's name (counted
//! twice: names matter most), type and the text of its structure (string, number and boolean
//! values, nested values included), tokenised into lowercase alphanumeric runs with a small
//! English stop-word list, each run reduced to its English stem.
//!
//! The [`TextIndex`] (term → objects holding it, with counts; each object's length) is built the
//! first time a structure is searched and from then on kept up to date by every change to the
//! structure, so a query costs what its terms' posting lists cost, not a scan of the graph.
//! Objects are numbered inside the index, so a posting is two integers and a query sums into an
//! array; ids are read only for the results kept. Structures never searched carry no index.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::{KnowledgeObject, KnowledgeStructure};

mod stored;
pub use crate::stored::StoredIndexError;
pub use stored::TERMS_VERSION;

/// BM25 term-frequency saturation.
const K1: f64 = 1.2;
/// BM25 length normalisation.
const B: f64 = 0.75;

const STOP_WORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "has", "in", "is", "it", "its", "of", "on", "or",
    "that", "the", "this", "to", "was", "were", "what", "which", "who", "with",
];

type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// One object holding a term: its ordinal and the term's count in its text.
#[derive(Clone, Copy, Debug)]
struct Posting {
    doc: u32,
    count: u32,
}

/// One term's posting list, in no particular order (a removal moves the last posting into the
/// hole), and the term itself, to forget it when its last holder goes.
#[derive(Clone, Debug, Default)]
struct Term {
    name: Arc<str>,
    postings: Vec<Posting>,
}

/// The inverted index of a structure's searchable objects.
///
/// Each object holds an ordinal, and everything kept per object is a `Vec` indexed by it: the
/// postings name ordinals, so scoring sums into a dense array and reads lengths by position, and
/// an object's id text is looked at only for the results kept. A removed object's ordinal is
/// reused by the next insertion. Each object also records, per term, where its posting sits, so a
/// removal takes each posting out in constant time without tokenising the object again, and one
/// object's score for given terms reads its own few terms instead of the terms' lists.
///
/// Equality is of what is indexed (ids, their terms and counts), not of ordinals or list order,
/// so an index kept through changes equals one built afresh.
#[derive(Clone, Debug, Default)]
pub struct TextIndex {
    /// term → its number in `lists`.
    terms: Map<Arc<str>, u32>,
    /// By term number; an empty list is a free number (listed in `free_terms`).
    lists: Vec<Term>,
    free_terms: Vec<u32>,
    /// object id → its ordinal.
    ordinals: Map<Arc<str>, u32>,
    /// By ordinal: the object's id (`None` for a free ordinal, listed in `free`).
    ids: Vec<Option<Arc<str>>>,
    /// By ordinal: the object's length in tokens (0 when free).
    lengths: Vec<u32>,
    /// By ordinal: the first eight bytes of the object's id, which order most ties between
    /// equal scores without reading the ids themselves (see [`Top`]).
    keys: Vec<u64>,
    /// By ordinal: (term number, position of the object's posting in that term's list).
    forward: Vec<Box<[(u32, u32)]>>,
    free: Vec<u32>,
    total_length: u64,
    /// At least the longest length indexed (never lowered by a removal): how far a per-query
    /// table of scores by length may be worth filling.
    longest: u32,
    /// A zeroed accumulator by ordinal, lent to one ranking at a time.
    scratch: Scratch,
}

/// A reusable score accumulator: an index of a million objects would otherwise allocate and zero
/// eight megabytes per query. Always left zeroed; a ranking that finds it lent out uses its own.
#[derive(Debug, Default)]
struct Scratch(Mutex<Vec<f64>>);

impl Clone for Scratch {
    fn clone(&self) -> Self {
        Scratch::default()
    }
}

impl PartialEq for TextIndex {
    fn eq(&self, other: &Self) -> bool {
        self.ordinals.len() == other.ordinals.len()
            && self.terms.len() == other.terms.len()
            && self.total_length == other.total_length
            && self.ordinals.iter().all(|(id, &doc)| {
                other.ordinals.get(id).is_some_and(|&theirs| {
                    self.lengths[doc as usize] == other.lengths[theirs as usize]
                        && self.terms_of(doc) == other.terms_of(theirs)
                })
            })
    }
}

impl TextIndex {
    /// Indexes every searchable object of `structure`. A large structure's texts are read into
    /// terms on every core, each thread numbering the words and stems it met (a graph repeats its
    /// words far more often than it has new ones); the postings are then laid down in order.
    pub fn build(structure: &KnowledgeStructure) -> TextIndex {
        let objects: Vec<&KnowledgeObject> =
            structure.entries().filter(|e| !e.is_relation()).map(|e| &*e.object).collect();
        let threads = crate::threads_for(objects.len(), PARALLEL_BUILD_FROM);
        let part = objects.len().div_ceil(threads).max(1);
        let read: Vec<(Reader, Vec<Counted>)> = std::thread::scope(|scope| {
            let reading: Vec<_> = objects
                .chunks(part)
                .map(|objects| {
                    scope.spawn(move || {
                        let mut reader = Reader::default();
                        let counted = objects.iter().map(|object| reader.term_counts(object)).collect::<Vec<_>>();
                        (reader, counted)
                    })
                })
                .collect();
            reading.into_iter().map(|r| r.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))).collect()
        });
        let mut index = TextIndex::default();
        let mut objects = objects.into_iter();
        for (reader, counted) in read {
            // The index's number for each of the thread's terms, found when first met.
            let mut numbers = vec![u32::MAX; reader.stems.len()];
            // The thread's counts first: zip stops on them without taking another object.
            for (counts, object) in counted.into_iter().zip(objects.by_ref()) {
                index.remove_id(object.id());
                let length = counts.iter().map(|&(_, count)| count).sum();
                let terms: Vec<(u32, u32)> = counts
                    .iter()
                    .map(|&(local, count)| {
                        let number = &mut numbers[local as usize];
                        if *number == u32::MAX {
                            *number = index.term_number(&reader.stems[local as usize]);
                        }
                        (*number, count)
                    })
                    .collect();
                index.insert_numbered(object, length, terms);
            }
        }
        index
    }

    /// Adds an object's text (relations are not searchable and are ignored). The structure
    /// removes an object's previous version before it adds the next.
    pub(crate) fn insert(&mut self, object: &KnowledgeObject) {
        if object.is_relation() {
            return;
        }
        self.insert_counted(object, term_counts(object));
    }

    /// Adds a searchable object whose terms are counted already.
    fn insert_counted(&mut self, object: &KnowledgeObject, counts: Map<String, u32>) {
        // Never two postings for one id, whatever the caller did before.
        self.remove_id(object.id());
        let length: u32 = counts.values().sum();
        let terms = counts.into_iter().map(|(term, count)| (self.term_number(&term), count)).collect();
        self.insert_numbered(object, length, terms);
    }

    /// A term's number, given to it now when it has none.
    fn term_number(&mut self, term: &str) -> u32 {
        match self.terms.get(term) {
            Some(&number) => number,
            None => self.new_term(term.into()),
        }
    }

    /// Adds a searchable object given its terms by number, each once, and its length. Its id
    /// must be out of the index before its terms were numbered: taking an object out can free a
    /// term's number.
    fn insert_numbered(&mut self, object: &KnowledgeObject, length: u32, terms: Vec<(u32, u32)>) {
        let id: Arc<str> = object.id().into();
        let doc = match self.free.pop() {
            Some(doc) => {
                self.ids[doc as usize] = Some(id.clone());
                self.lengths[doc as usize] = length;
                self.keys[doc as usize] = sort_key(&id);
                doc
            }
            None => {
                self.ids.push(Some(id.clone()));
                self.lengths.push(length);
                self.keys.push(sort_key(&id));
                self.forward.push(Box::default());
                ordinal(self.ids.len() - 1)
            }
        };
        let mut entries = Vec::with_capacity(terms.len());
        for (number, count) in terms {
            let postings = &mut self.lists[number as usize].postings;
            entries.push((number, ordinal(postings.len())));
            postings.push(Posting { doc, count });
        }
        self.forward[doc as usize] = entries.into_boxed_slice();
        self.ordinals.insert(id, doc);
        self.total_length += u64::from(length);
        self.longest = self.longest.max(length);
    }

    fn new_term(&mut self, name: Arc<str>) -> u32 {
        let number = match self.free_terms.pop() {
            Some(number) => number,
            None => {
                self.lists.push(Term::default());
                ordinal(self.lists.len() - 1)
            }
        };
        self.lists[number as usize].name = name.clone();
        self.terms.insert(name, number);
        number
    }

    /// Takes an object's text out again (the same version that was inserted).
    pub(crate) fn remove(&mut self, object: &KnowledgeObject) {
        if !object.is_relation() {
            self.remove_id(object.id());
        }
    }

    fn remove_id(&mut self, id: &str) {
        let Some(doc) = self.ordinals.remove(id) else { return };
        let entries = std::mem::take(&mut self.forward[doc as usize]);
        for &(number, position) in &entries {
            let term = &mut self.lists[number as usize];
            term.postings.swap_remove(position as usize);
            if let Some(moved) = term.postings.get(position as usize) {
                // The list's last posting filled the hole: its object learns where it is now.
                let mine = self.forward[moved.doc as usize].iter_mut().find(|(n, _)| *n == number);
                if let Some(entry) = mine {
                    entry.1 = position;
                }
            } else if term.postings.is_empty() {
                let name = std::mem::take(&mut term.name);
                term.postings = Vec::new();
                self.terms.remove(&name);
                self.free_terms.push(number);
            }
        }
        self.total_length -= u64::from(self.lengths[doc as usize]);
        self.lengths[doc as usize] = 0;
        self.keys[doc as usize] = 0;
        self.ids[doc as usize] = None;
        self.free.push(doc);
    }

    /// An object's terms and counts, sorted: what equality compares.
    fn terms_of(&self, doc: u32) -> Vec<(&str, u32)> {
        let mut terms: Vec<(&str, u32)> = self.forward[doc as usize]
            .iter()
            .map(|&(number, position)| {
                let term = &self.lists[number as usize];
                (&*term.name, term.postings[position as usize].count)
            })
            .collect();
        terms.sort_unstable();
        terms
    }

    /// The count of term `number` in object `doc`'s text, if it holds the term.
    fn count(&self, doc: u32, number: u32) -> Option<u32> {
        let &(_, position) = self.forward[doc as usize].iter().find(|(n, _)| *n == number)?;
        Some(self.lists[number as usize].postings[position as usize].count)
    }

    /// The id of a live ordinal (every ordinal a posting names is live).
    fn id(&self, doc: u32) -> &str {
        self.ids[doc as usize].as_deref().unwrap_or_default()
    }

    /// The average length BM25 normalises by, and the number of objects.
    fn statistics(&self) -> (f64, f64) {
        let n = self.ordinals.len() as f64;
        (n, (self.total_length as f64 / n).max(1.0))
    }

    /// About how many postings walked cost what one lookup in an object's own terms costs.
    const LOOKUP_COST: usize = 16;

    /// Up to `limit` searchable objects scoring at least `min_score` (and above 0) in BM25 for
    /// `query`, best first; equal scores in the order of their ids. The cost follows the posting
    /// lists of the query's terms, not the graph, and no list is sorted or gathered whole: the
    /// objects only the last (most common) term holds are kept `limit` at a time.
    pub fn rank<'a>(&'a self, query: &str, limit: usize, min_score: f64) -> Vec<(&'a str, f64)> {
        let mut terms: Vec<String> = tokens(query).collect();
        terms.sort_unstable();
        terms.dedup();
        if terms.is_empty() || self.ordinals.is_empty() || limit == 0 {
            return Vec::new();
        }
        let (n, average) = self.statistics();
        let mut lists: Vec<Scorer> = terms
            .iter()
            .filter_map(|term| self.terms.get(term.as_str()))
            .map(|&number| {
                let postings = &self.lists[number as usize].postings;
                let df = postings.len() as f64;
                Scorer::new((1.0 + (n - df + 0.5) / (df + 0.5)).ln(), number, postings, average, self.longest)
            })
            .collect();
        let keep = |s: f64| s > 0.0 && s >= min_score;
        // Rarest terms first (MaxScore): a term adds at most idf × (K1 + 1) to a score, so once
        // `limit` objects already score above what the terms left could give an object not seen
        // yet, those terms' (long, common) lists only complete the scores of the objects seen.
        // (A stable sort: equal idfs stay in the terms' order, and so does each sum's order.)
        lists.sort_by(|a, b| b.idf.total_cmp(&a.idf));
        let Some((last, rarer)) = lists.split_last() else { return Vec::new() };
        let bound = |lists: &[Scorer]| -> f64 { lists.iter().map(|s| s.idf * (K1 + 1.0)).sum() };
        let mut lent = self.scratch.0.try_lock().ok();
        let mut own = Vec::new();
        let sums: &mut Vec<f64> = lent.as_deref_mut().unwrap_or(&mut own);
        if sums.len() < self.ids.len() {
            sums.resize(self.ids.len(), 0.0);
        }
        let mut best = Top::new(limit);
        // The objects with a sum (every score is positive, so a sum of 0 means none yet).
        let mut seen: Vec<u32> = Vec::new();
        let mut walked = 0;
        while walked < rarer.len() {
            let unseen_at_most = bound(&lists[walked..]);
            if walked > 0 && seen.iter().filter(|&&doc| sums[doc as usize] > unseen_at_most).count() >= limit {
                break;
            }
            let scorer = &rarer[walked];
            for posting in scorer.postings {
                let sum = &mut sums[posting.doc as usize];
                if *sum == 0.0 {
                    seen.push(posting.doc);
                }
                *sum += scorer.score(posting, &self.lengths);
            }
            walked += 1;
        }
        if walked == rarer.len() {
            // Every rarer list was walked: the last list completes the objects seen, and of the
            // ones it alone holds only the best `limit` can make the cut, which a comparison of
            // scores tells before any id is read.
            for posting in last.postings {
                let alone = last.score(posting, &self.lengths);
                let sum = &mut sums[posting.doc as usize];
                if *sum != 0.0 {
                    *sum += alone;
                } else if keep(alone) {
                    best.offer(self, posting.doc, alone);
                }
            }
        } else {
            for scorer in &lists[walked..] {
                // Completing the objects seen: a lookup in each one's own terms when they are few
                // beside the list (a lookup is a cache miss in a large index, a posting is not).
                if seen.len().saturating_mul(Self::LOOKUP_COST) < scorer.postings.len() {
                    for &doc in &seen {
                        if let Some(count) = self.count(doc, scorer.number) {
                            sums[doc as usize] += scorer.score(&Posting { doc, count }, &self.lengths);
                        }
                    }
                } else {
                    for posting in scorer.postings {
                        let sum = &mut sums[posting.doc as usize];
                        if *sum != 0.0 {
                            *sum += scorer.score(posting, &self.lengths);
                        }
                    }
                }
            }
        }
        for &doc in &seen {
            let sum = std::mem::take(&mut sums[doc as usize]);
            if keep(sum) {
                best.offer(self, doc, sum);
            }
        }
        best.into_sorted()
    }
}

/// The first eight bytes of an id, zero-padded, as a big-endian number: where two keys differ,
/// they order as their ids do (a shorter id's padding sorts before any byte but 0).
fn sort_key(id: &str) -> u64 {
    let mut bytes = [0; 8];
    let n = id.len().min(8);
    bytes[..n].copy_from_slice(&id.as_bytes()[..n]);
    u64::from_be_bytes(bytes)
}

/// The best `limit` objects offered, higher scores first, equal scores by id. Offers from a long
/// list mostly tie or lose against the worst kept; they are told apart by score and by the
/// ids' first bytes, from arrays by ordinal, and an id is read only when both are equal.
struct Top<'a> {
    limit: usize,
    /// A heap whose top is the worst kept.
    heap: std::collections::BinaryHeap<Kept<'a>>,
}

/// Ordered so that the better ranks lower: a max-heap's top is the worst kept. Keys order as
/// ids do where they differ, so (score, key, id) orders as (score, id).
struct Kept<'a> {
    score: f64,
    key: u64,
    id: &'a str,
}

impl PartialEq for Kept<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == std::cmp::Ordering::Equal
    }
}

impl Eq for Kept<'_> {}

impl PartialOrd for Kept<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Kept<'_> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other.score.total_cmp(&self.score).then(self.key.cmp(&other.key)).then_with(|| self.id.cmp(other.id))
    }
}

impl<'a> Top<'a> {
    fn new(limit: usize) -> Self {
        Top { limit, heap: std::collections::BinaryHeap::new() }
    }

    /// Offers object `doc` of `index` with `score`; kept if it beats the worst kept.
    fn offer(&mut self, index: &'a TextIndex, doc: u32, score: f64) {
        use std::cmp::Ordering::{Equal, Greater, Less};
        if self.limit == 0 {
            return;
        }
        let key = index.keys[doc as usize];
        if self.heap.len() >= self.limit {
            let Some(worst) = self.heap.peek() else { return };
            // Most offers lose: one test, no branch per comparison (scores are finite).
            let lose = (score < worst.score) | ((score == worst.score) & (key > worst.key));
            if lose {
                return;
            }
            let better = match score.total_cmp(&worst.score).then(worst.key.cmp(&key)) {
                Greater => true,
                Less => false,
                Equal => index.id(doc) < worst.id,
            };
            if !better {
                return;
            }
            self.heap.pop();
        }
        self.heap.push(Kept { score, key, id: index.id(doc) });
    }

    fn into_sorted(self) -> Vec<(&'a str, f64)> {
        self.heap.into_sorted_vec().into_iter().map(|kept| (kept.id, kept.score)).collect()
    }
}

/// One query term's list and how its postings score.
struct Scorer<'a> {
    idf: f64,
    number: u32,
    postings: &'a [Posting],
    average: f64,
    /// The scores of a single occurrence by the holder's length, for long lists: the same
    /// arithmetic done once per length instead of once per posting.
    once: Vec<f64>,
}

impl<'a> Scorer<'a> {
    /// Lists at least this long get a table of single-occurrence scores.
    const TABULATED: usize = 4096;
    /// The longest length tabulated.
    const TABLE: u32 = 1024;

    fn new(idf: f64, number: u32, postings: &'a [Posting], average: f64, longest: u32) -> Self {
        let mut scorer = Scorer { idf, number, postings, average, once: Vec::new() };
        if postings.len() >= Self::TABULATED {
            scorer.once = (0..=longest.min(Self::TABLE)).map(|length| scorer.compute(1, length)).collect();
        }
        scorer
    }

    fn compute(&self, count: u32, length: u32) -> f64 {
        bm25(self.idf, count, length, self.average)
    }

    fn score(&self, posting: &Posting, lengths: &[u32]) -> f64 {
        let length = lengths[posting.doc as usize];
        match self.once.get(length as usize) {
            Some(&score) if posting.count == 1 => score,
            _ => self.compute(posting.count, length),
        }
    }
}

/// One term's BM25 score in one object: the one formula every path uses, so that every path
/// gives the same bits.
fn bm25(idf: f64, count: u32, length: u32, average: f64) -> f64 {
    let f = f64::from(count);
    idf * f * (K1 + 1.0) / (f + K1 * (1.0 - B + B * f64::from(length) / average))
}

/// An ordinal or a position in a list; an index holds fewer than 2³² objects.
fn ordinal(index: usize) -> u32 {
    u32::try_from(index).unwrap_or(u32::MAX)
}

impl TextIndex {
    /// The BM25 score of one object for `query` (0 when it holds no query term): what
    /// [`TextIndex::rank`] gives it, for objects another ranking found. Scoring many objects,
    /// [`query_terms`] once and [`TextIndex::weighted_score`] for each cost less.
    pub fn score(&self, query: &str, id: &str) -> f64 {
        self.weighted_score(&query_terms(query), id)
    }
}

/// A query's distinct terms, each weighing 1: what [`TextIndex::weighted_score`] takes.
pub fn query_terms(query: &str) -> Vec<(String, f64)> {
    let mut terms: Vec<String> = tokens(query).collect();
    terms.sort_unstable();
    terms.dedup();
    terms.into_iter().map(|term| (term, 1.0)).collect()
}

impl TextIndex {
    /// The BM25 score of one object for weighted terms (already tokens): `Σ weight × bm25(term)`.
    pub fn weighted_score(&self, terms: &[(String, f64)], id: &str) -> f64 {
        let Some(&doc) = self.ordinals.get(id) else { return 0.0 };
        let length = self.lengths[doc as usize];
        let (n, average) = self.statistics();
        terms
            .iter()
            .filter_map(|(term, weight)| {
                let &number = self.terms.get(term.as_str())?;
                let count = self.count(doc, number)?;
                let df = self.lists[number as usize].postings.len() as f64;
                let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
                let f = f64::from(count);
                Some(weight * idf * f * (K1 + 1.0) / (f + K1 * (1.0 - B + B * f64::from(length) / average)))
            })
            .sum()
    }
}

/// Pseudo-relevance feedback (RM3's expansion): the `limit` terms the best matches' structure
/// text holds most, each match weighing by its score and each term by its share of that
/// match's text; the query's own terms left out. Weights sum to `limit`; equal weights in the
/// order of the terms. Names and types are left out: an id-like name says nothing of meaning.
pub fn expansion(query: &str, feedback: &[(&KnowledgeObject, f64)], limit: usize) -> Vec<(String, f64)> {
    let asked: std::collections::HashSet<String> = tokens(query).collect();
    let mut weights: Map<String, f64> = Map::default();
    for (object, score) in feedback {
        let mut text = String::new();
        for value in object.structure.values() {
            flatten(value, &mut text);
        }
        let terms: Vec<String> = tokens(&text).collect();
        let share = score / terms.len().max(1) as f64;
        for term in terms {
            if !asked.contains(&term) {
                *weights.entry(term).or_default() += share;
            }
        }
    }
    let mut ranked: Vec<(String, f64)> = weights.into_iter().filter(|(_, w)| *w > 0.0).collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    ranked.truncate(limit);
    let total: f64 = ranked.iter().map(|(_, w)| w).sum();
    for (_, weight) in &mut ranked {
        *weight *= limit as f64 / total;
    }
    ranked
}

/// The best `limit` (id, score) pairs offered: higher scores first, equal scores by id.
pub(crate) struct Best<'a> {
    limit: usize,
    /// A heap whose top is the worst kept.
    heap: std::collections::BinaryHeap<Kept<'a>>,
}

impl<'a> Best<'a> {
    pub(crate) fn new(limit: usize) -> Self {
        Best { limit, heap: std::collections::BinaryHeap::new() }
    }

    fn kept(id: &str, score: f64) -> Kept<'_> {
        Kept { score, key: sort_key(id), id }
    }

    pub(crate) fn offer(&mut self, id: &'a str, score: f64) {
        if self.heap.len() < self.limit {
            self.heap.push(Self::kept(id, score));
        } else if self.admits(id, score) {
            self.heap.pop();
            self.heap.push(Self::kept(id, score));
        }
    }

    /// Whether an offer of `score` for `id` would be kept (for now).
    pub(crate) fn admits(&self, id: &str, score: f64) -> bool {
        self.heap.len() < self.limit || self.heap.peek().is_some_and(|worst| Self::kept(id, score) < *worst)
    }

    pub(crate) fn into_sorted(self) -> Vec<(&'a str, f64)> {
        self.heap.into_sorted_vec().into_iter().map(|kept| (kept.id, kept.score)).collect()
    }
}

/// Lowercase alphanumeric runs, stop words dropped, each reduced to its English stem (Snowball's
/// Porter2), so "runs", "running" and "run" are one term.
pub fn tokens(text: &str) -> impl Iterator<Item = String> + '_ {
    words(text).map(stem)
}

/// The lowercase alphanumeric runs of `text` that are not stop words.
fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|t| !t.is_empty())
        .map(str::to_lowercase)
        .filter(|t| !STOP_WORDS.contains(&t.as_str()))
}

/// A word's English stem.
fn stem(word: String) -> String {
    static STEMMER: std::sync::LazyLock<rust_stemmers::Stemmer> =
        std::sync::LazyLock::new(|| rust_stemmers::Stemmer::create(rust_stemmers::Algorithm::English));
    match STEMMER.stem(&word) {
        std::borrow::Cow::Borrowed(stem) if stem.len() == word.len() => word,
        stem => stem.into_owned(),
    }
}

/// Below this many searchable objects, a build reads their texts on one thread.
const PARALLEL_BUILD_FROM: usize = 4096;

/// One object's terms, by the numbers of the [`Reader`] that read it, each with its count.
type Counted = Box<[(u32, u32)]>;

/// What one thread of a build knows of the words it read: each lowercase word's term (its stem)
/// by a number of the thread's own, or none for a stop word, so that a word met again costs one
/// lookup and nothing is allocated for it.
#[derive(Default)]
struct Reader {
    words: Map<String, Option<u32>>,
    /// The thread's terms: stems by number, and numbers by stem.
    stems: Vec<String>,
    numbers: Map<String, u32>,
    /// A lowercase word, reused; the counts of one object's terms, and which were counted.
    word: String,
    counts: Vec<u32>,
    counted: Vec<u32>,
}

impl Reader {
    /// [`term_counts`] of one object, by the thread's term numbers, in the order first met.
    fn term_counts(&mut self, object: &KnowledgeObject) -> Counted {
        let text = searchable_text(object, 2);
        for run in text.split(|c: char| !c.is_alphanumeric()).filter(|t| !t.is_empty()) {
            let Some(term) = self.term(run) else { continue };
            if self.counts.len() <= term as usize {
                self.counts.resize(term as usize + 1, 0);
            }
            if self.counts[term as usize] == 0 {
                self.counted.push(term);
            }
            self.counts[term as usize] += 1;
        }
        let counts = self.counted.iter().map(|&term| (term, std::mem::take(&mut self.counts[term as usize])));
        let counts = counts.collect();
        self.counted.clear();
        counts
    }

    /// The term of an alphanumeric run, as [`words`] and [`stem`] make it; `None` for a stop word.
    fn term(&mut self, run: &str) -> Option<u32> {
        let lower = if run.is_ascii() {
            self.word.clear();
            self.word.extend(run.chars().map(|c| c.to_ascii_lowercase()));
            &self.word
        } else {
            // Not one character at a time: a final sigma lowercases by its place in the word.
            self.word = run.to_lowercase();
            &self.word
        };
        if let Some(&term) = self.words.get(lower.as_str()) {
            return term;
        }
        let word = lower.clone();
        let term = (!STOP_WORDS.contains(&word.as_str())).then(|| {
            let stem = stem(word.clone());
            match self.numbers.get(&stem) {
                Some(&number) => number,
                None => {
                    let number = ordinal(self.stems.len());
                    self.stems.push(stem.clone());
                    self.numbers.insert(stem, number);
                    number
                }
            }
        });
        self.words.insert(word, term);
        term
    }
}

/// An object's searchable text: its name (`name_times` times), its type, then the string,
/// number and boolean values of its structure, nested ones included, separated by spaces.
pub(crate) fn searchable_text(object: &KnowledgeObject, name_times: usize) -> String {
    let mut text = String::new();
    for _ in 0..name_times {
        text.push_str(&object.identity.name);
        text.push(' ');
    }
    text.push_str(&object.identity.r#type);
    text.push(' ');
    for value in object.structure.values() {
        flatten(value, &mut text);
    }
    text.truncate(text.trim_end().len());
    text
}

/// An object's text for a sentence encoder: its name (when `named`), its type, then its
/// structure's values, the shortest first. An encoder reads a text's first few hundred word
/// pieces and averages them: a title or a label after a long body is cut off or drowned in it.
pub(crate) fn encoder_text(object: &KnowledgeObject, named: bool) -> String {
    let mut values: Vec<String> = object
        .structure
        .values()
        .map(|value| {
            let mut text = String::new();
            flatten(value, &mut text);
            text
        })
        .collect();
    // Stable: values of one length keep the structure's order.
    values.sort_by_key(|value| value.chars().count());
    let mut text = String::new();
    if named {
        text.push_str(&object.identity.name);
        text.push(' ');
    }
    text.push_str(&object.identity.r#type);
    text.push(' ');
    values.iter().for_each(|value| text.push_str(value));
    text.truncate(text.trim_end().len());
    text
}

/// How often each term occurs in an object's searchable text (its name counted twice).
fn term_counts(object: &KnowledgeObject) -> Map<String, u32> {
    let text = searchable_text(object, 2);
    let mut counts: Map<String, u32> = Map::default();
    for token in tokens(&text) {
        *counts.entry(token).or_default() += 1;
    }
    counts
}

fn flatten(value: &Value, out: &mut String) {
    match value {
        Value::Null => {}
        Value::Bool(b) => out.push_str(if *b { "true " } else { "false " }),
        Value::Number(n) => {
            out.push_str(&n.to_string());
            out.push(' ');
        }
        Value::String(s) => {
            out.push_str(s);
            out.push(' ');
        }
        Value::Array(items) => items.iter().for_each(|v| flatten(v, out)),
        Value::Object(map) => map.values().for_each(|v| flatten(v, out)),
    }
}

#[cfg(test)]
mod tests {
    use crate::sample::random_graph;

    /// Every searchable object scored from scratch, best first, equal scores by id.
    fn naive<'a>(graph: &'a crate::KnowledgeStructure, query: &str) -> Vec<(&'a str, f64)> {
        let index = super::TextIndex::build(graph);
        let terms: std::collections::BTreeSet<String> = super::tokens(query).collect();
        let n = index.ordinals.len() as f64;
        let average = (index.total_length as f64 / n).max(1.0);
        let df = |t: &str| Some(index.lists[*index.terms.get(t)? as usize].postings.len() as f64);
        let mut scored: Vec<(&str, f64)> = graph
            .objects()
            .filter(|o| !o.is_relation())
            .map(|o| {
                let counts = super::term_counts(o);
                let length: u32 = counts.values().sum();
                let total = terms
                    .iter()
                    .filter_map(|t| Some((counts.get(t.as_str())?, df(t)?)))
                    .map(|(&count, df)| {
                        let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
                        let f = f64::from(count);
                        idf * f * (super::K1 + 1.0)
                            / (f + super::K1 * (1.0 - super::B + super::B * f64::from(length) / average))
                    })
                    .sum::<f64>();
                (o.id(), total)
            })
            .filter(|(_, s)| *s > 0.0)
            .collect();
        scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
        scored
    }

    #[test]
    fn the_ranking_is_the_from_scratch_scores_best_first_ties_by_id() {
        let graph = random_graph(800, 300, 11);
        let index = graph.text_index();
        for query in ["t3 concept", "sample", "t7 t9 sample", "entity 12 t1", "42 sample", "t4", "nothing here"] {
            let expected = naive(&graph, query);
            let ranked = index.rank(query, usize::MAX, 0.0);
            assert_eq!(ranked.len(), expected.len(), "{query:?}");
            for ((id, score), (want_id, want_score)) in ranked.iter().zip(&expected) {
                assert_eq!(id, want_id, "{query:?}");
                assert!((score - want_score).abs() < 1e-9, "{query:?}: {score} vs {want_score}");
            }
        }
    }

    #[test]
    fn the_best_few_are_the_head_of_the_full_ranking() {
        let graph = random_graph(600, 300, 7);
        let index = graph.text_index();
        for query in ["t3 concept", "t7 t9 sample", "entity 12 t1", "number 5 t19 generated", "t4", "nothing here"] {
            let everything = index.rank(query, usize::MAX, 0.0);
            for limit in [1, 3, 10, 50] {
                let best = index.rank(query, limit, 0.0);
                let expected = &everything[..limit.min(everything.len())];
                assert_eq!(best, expected, "{query:?}, limit {limit}");
            }
            let floor = everything.get(5).map_or(0.0, |(_, score)| *score);
            let above: Vec<_> = everything.iter().filter(|(_, s)| *s >= floor).take(20).cloned().collect();
            assert_eq!(index.rank(query, 20, floor), above, "{query:?} with min_score");
        }
        assert!(!index.rank("t3 concept", 3, 0.0).is_empty());
    }

    /// A `Note` named `name` whose structure holds `text`.
    fn note(id: &str, name: &str, text: &str) -> crate::KnowledgeObject {
        let mut structure = serde_json::Map::new();
        structure.insert("text".into(), serde_json::json!(text));
        crate::KnowledgeObject::new(crate::Identity::new(id, "Note", name), structure)
    }

    #[test]
    fn expansion_takes_the_best_matches_words_weighted_by_score_and_share() {
        let object = |id: &str, text: &str| note(id, "x1", text);
        let (a, b) = (object("a", "painting lakes and sunsets"), object("b", "sunsets at the lake"));
        let terms = super::expansion("paint", &[(&a, 1.0), (&b, 0.5)], 2);
        // a: lake, sunset 1/3 each (its "paint" is the query's); b: sunset, lake 0.5/2 each.
        let names: Vec<&str> = terms.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(names, vec!["lake", "sunset"]);
        assert!((terms.iter().map(|(_, w)| w).sum::<f64>() - 2.0).abs() < 1e-9);
        assert!(super::expansion("x", &[], 5).is_empty());
    }

    #[test]
    fn a_large_build_read_on_every_core_equals_objects_added_one_by_one() {
        let graph = random_graph(super::PARALLEL_BUILD_FROM + 1000, 200, 5);
        let mut one_by_one = super::TextIndex::default();
        for object in graph.objects() {
            one_by_one.insert(object);
        }
        let built = super::TextIndex::build(&graph);
        assert_eq!(built, one_by_one);
        assert_eq!(built.rank("sample 421", 20, 0.0), one_by_one.rank("sample 421", 20, 0.0));
    }

    #[test]
    fn a_build_reads_words_as_one_object_at_a_time_does() {
        // Upper case, stop words, letters beyond ASCII (a final sigma lowers by its place), digits.
        let texts = ["The RUNNING of the Bulls", "ΟΔΟΣ Σίσυφος straße STRASSE", "and or 3D 42 x", "Running runs"];
        let graph = crate::KnowledgeStructure::from_objects(
            texts.iter().enumerate().map(|(i, text)| note(&format!("n{i}"), text, text)),
        )
        .unwrap();
        let mut one_by_one = super::TextIndex::default();
        for object in graph.objects() {
            one_by_one.insert(object);
        }
        assert_eq!(super::TextIndex::build(&graph), one_by_one);
    }

    #[test]
    fn words_match_by_their_stems() {
        let terms = |text: &str| super::tokens(text).collect::<Vec<_>>();
        assert_eq!(terms("Running runs RUN"), vec!["run", "run", "run"]);
        assert_eq!(terms("The painted paintings of Mount Fuji"), vec!["paint", "paint", "mount", "fuji"]);
        assert_eq!(terms("42 3D"), vec!["42", "3d"]);
    }

    #[test]
    fn one_objects_score_is_its_score_in_the_ranking() {
        let graph = random_graph(300, 100, 4);
        let index = graph.text_index();
        for query in ["t3 concept", "entity 12 t1", "nothing here"] {
            for (id, score) in index.rank(query, usize::MAX, 0.0) {
                assert!((index.score(query, id) - score).abs() < 1e-9, "{query:?} {id}");
            }
        }
        assert_eq!(index.score("t3", "no such object"), 0.0);
    }

    #[test]
    fn long_lists_score_as_short_ones_do() {
        // Every node holds "sample" and "generated": lists long enough for the table of scores
        // by length.
        let graph = random_graph(super::Scorer::TABULATED + 500, 0, 3);
        let index = graph.text_index();
        assert!(index.lists[index.terms["sampl"] as usize].postings.len() >= super::Scorer::TABULATED);
        for query in ["sample", "sample 421", "generated claim t3", "benchmarks number 77"] {
            let expected = naive(&graph, query);
            let ranked = index.rank(query, usize::MAX, 0.0);
            assert_eq!(ranked.len(), expected.len(), "{query:?}");
            for ((id, score), (want_id, want_score)) in ranked.iter().zip(&expected) {
                assert_eq!(id, want_id, "{query:?}");
                assert!((score - want_score).abs() < 1e-9, "{query:?}: {score} vs {want_score}");
            }
            assert_eq!(index.rank(query, 7, 0.0), ranked[..7.min(ranked.len())], "{query:?}");
        }
    }

    /// What the index's parts must agree on: each object's postings sit where it says, every
    /// posting names a live object, free ordinals and term numbers hold nothing.
    fn assert_consistent(index: &super::TextIndex) {
        let mut postings = 0;
        for (doc, entries) in index.forward.iter().enumerate() {
            let live = index.ids[doc].is_some();
            assert_eq!(live, !index.free.contains(&(doc as u32)), "ordinal {doc}");
            if let Some(id) = &index.ids[doc] {
                assert_eq!(index.ordinals.get(id), Some(&(doc as u32)));
            } else {
                assert!(entries.is_empty() && index.lengths[doc] == 0, "free ordinal {doc}");
            }
            for &(number, position) in entries.iter() {
                assert_eq!(index.lists[number as usize].postings[position as usize].doc, doc as u32);
            }
            postings += entries.len();
        }
        assert_eq!(postings, index.lists.iter().map(|t| t.postings.len()).sum::<usize>());
        for (number, term) in index.lists.iter().enumerate() {
            let free = index.free_terms.contains(&(number as u32));
            assert_eq!(free, term.postings.is_empty(), "term {number}");
            if !free {
                assert_eq!(index.terms.get(&term.name), Some(&(number as u32)));
            }
        }
        assert_eq!(index.ordinals.len(), index.ids.iter().flatten().count());
        assert_eq!(index.total_length, index.lengths.iter().map(|&l| u64::from(l)).sum::<u64>());
    }

    mod incremental {
        use std::collections::BTreeMap;

        use proptest::prelude::*;

        use super::assert_consistent;
        use crate::text::TextIndex;
        use crate::{Identity, KnowledgeObject};

        /// Put object `i` with these words (replacing its previous version), or remove it.
        #[derive(Clone, Debug)]
        enum Step {
            Put(u8, Vec<u8>),
            Remove(u8),
        }

        fn step() -> impl Strategy<Value = Step> {
            prop_oneof![
                3 => (0..16u8, proptest::collection::vec(0..12u8, 0..8)).prop_map(|(i, w)| Step::Put(i, w)),
                1 => (0..16u8).prop_map(Step::Remove),
            ]
        }

        fn object(i: u8, words: &[u8]) -> KnowledgeObject {
            let text: Vec<String> = words.iter().map(|w| format!("w{w}")).collect();
            let mut structure = serde_json::Map::new();
            structure.insert("text".into(), serde_json::json!(text.join(" ")));
            // Names repeat across objects too: the same term counted by several holders.
            KnowledgeObject::new(Identity::new(format!("o{i}"), "Note", format!("n{}", i % 3)), structure)
        }

        proptest! {
            /// After any sequence of insertions, replacements and removals the kept index equals
            /// one built from what is left, ranks every query the same to the bit and scores every
            /// object the same, and its ordinals and postings agree.
            #[test]
            fn a_kept_index_ranks_as_a_fresh_one(steps in proptest::collection::vec(step(), 1..60)) {
                let mut kept = TextIndex::default();
                let mut now: BTreeMap<u8, KnowledgeObject> = BTreeMap::new();
                for step in &steps {
                    match step {
                        Step::Put(i, words) => {
                            if let Some(old) = now.remove(i) {
                                kept.remove(&old);
                            }
                            let new = object(*i, words);
                            kept.insert(&new);
                            now.insert(*i, new);
                        }
                        Step::Remove(i) => {
                            if let Some(old) = now.remove(i) {
                                kept.remove(&old);
                            }
                        }
                    }
                    assert_consistent(&kept);
                }
                let mut fresh = TextIndex::default();
                now.values().for_each(|o| fresh.insert(o));
                prop_assert_eq!(&kept, &fresh);
                for query in ["w1", "w2 w3", "w0 w5 n1", "n0 w11 w4 w7", "n2", "absent w9"] {
                    for limit in [1, 3, usize::MAX] {
                        prop_assert_eq!(kept.rank(query, limit, 0.0), fresh.rank(query, limit, 0.0), "{}", query);
                    }
                    let terms = crate::text::query_terms(query);
                    for o in now.values() {
                        prop_assert_eq!(kept.weighted_score(&terms, o.id()), fresh.weighted_score(&terms, o.id()));
                    }
                }
            }
        }
    }

    #[test]
    fn an_index_differing_in_one_count_or_object_is_not_equal() {
        use crate::KnowledgeObject;
        let object = |id: &str, text: &str| note(id, "x", text);
        let index = |objects: &[KnowledgeObject]| {
            let mut index = super::TextIndex::default();
            objects.iter().for_each(|o| index.insert(o));
            index
        };
        let (a, b) = (object("a", "red apple"), object("b", "green apple"));
        assert_eq!(index(&[a.clone(), b.clone()]), index(&[b.clone(), a.clone()]));
        assert_ne!(index(&[a.clone(), b.clone()]), index(&[a.clone(), object("b", "green apple apple")]));
        assert_ne!(index(&[a.clone(), b.clone()]), index(&[a.clone(), object("c", "green apple")]));
        assert_ne!(index(&[a.clone(), b.clone()]), index(std::slice::from_ref(&a)));
        // Inserting an id again replaces it.
        assert_eq!(index(&[a.clone(), b.clone(), object("a", "red apple")]), index(&[a, b]));
    }

    #[test]
    fn ties_rank_by_id_whatever_the_ids_first_bytes() {
        use crate::{Identity, KnowledgeObject};
        let ids = ["concept-0010", "concept-0009", "concept-001", "c", "concept-", "conc", "b", "concept\u{0}", "é"];
        let mut index = super::TextIndex::default();
        for id in ids {
            let mut structure = serde_json::Map::new();
            structure.insert("text".into(), serde_json::json!("same words"));
            index.insert(&KnowledgeObject::new(Identity::new(id, "Note", "x"), structure));
        }
        let mut sorted = ids.to_vec();
        sorted.sort_unstable();
        for limit in 1..=ids.len() {
            let ranked: Vec<&str> = index.rank("same words", limit, 0.0).into_iter().map(|(id, _)| id).collect();
            assert_eq!(ranked, sorted[..limit], "limit {limit}");
        }
        for a in ids {
            for b in ids {
                let (ka, kb) = (super::sort_key(a), super::sort_key(b));
                assert!(ka == kb || ka.cmp(&kb) == a.cmp(b), "{a:?} {b:?}");
            }
        }
    }
}
