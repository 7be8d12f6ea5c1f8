//! Lexical search over a structure: Okapi BM25 over each non-relation object's name (counted
//! twice: names matter most), type and the text of its structure (string, number and boolean
//! values, nested values included), tokenised into lowercase alphanumeric runs with a small
//! English stop-word list, each run reduced to its English stem.
//!
//! The [`TextIndex`] (term → objects holding it, with counts; each object's length) is built the
//! first time a structure is searched and from then on kept up to date by every change to the
//! structure, so a query costs what its terms' posting lists cost, not a scan of the graph.
//! Structures never searched carry no index.

use std::collections::HashMap;

use serde_json::Value;

use crate::{KnowledgeObject, KnowledgeStructure};

/// BM25 term-frequency saturation.
const K1: f64 = 1.2;
/// BM25 length normalisation.
const B: f64 = 0.75;

const STOP_WORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "has", "in", "is", "it", "its", "of", "on", "or",
    "that", "the", "this", "to", "was", "were", "what", "which", "who", "with",
];

type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
/// The objects holding one term: object id → (the term's count in its text, its length in tokens).
type Holders = Map<Box<str>, (u32, u32)>;

/// The inverted index of a structure's searchable objects.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TextIndex {
    /// term → the objects holding it; each object's length rides along in its postings so that
    /// scoring needs no second lookup.
    postings: Map<Box<str>, Holders>,
    /// object id → its length in tokens.
    lengths: Map<Box<str>, u32>,
    total_length: u64,
}

impl TextIndex {
    /// Indexes every searchable object of `structure`.
    pub fn build(structure: &KnowledgeStructure) -> TextIndex {
        let mut index = TextIndex::default();
        for object in structure.objects() {
            index.insert(object);
        }
        index
    }

    /// Adds an object's text (relations are not searchable and are ignored). The structure
    /// removes an object's previous version before it adds the next.
    pub(crate) fn insert(&mut self, object: &KnowledgeObject) {
        if object.is_relation() {
            return;
        }
        let id: Box<str> = object.id().into();
        let counts = term_counts(object);
        let length: u32 = counts.values().sum();
        for (term, count) in counts {
            self.postings.entry(term.into()).or_default().insert(id.clone(), (count, length));
        }
        self.lengths.insert(id, length);
        self.total_length += u64::from(length);
    }

    /// Takes an object's text out again (the same version that was inserted).
    pub(crate) fn remove(&mut self, object: &KnowledgeObject) {
        if object.is_relation() {
            return;
        }
        let id = object.id();
        for term in term_counts(object).into_keys() {
            if let Some(holders) = self.postings.get_mut(term.as_str()) {
                holders.remove(id);
                if holders.is_empty() {
                    self.postings.remove(term.as_str());
                }
            }
        }
        if let Some(length) = self.lengths.remove(id) {
            self.total_length -= u64::from(length);
        }
    }

    /// Up to `limit` searchable objects scoring at least `min_score` (and above 0) in BM25 for
    /// `query`, best first; equal scores in the order of their ids. The cost follows the posting
    /// lists of the query's terms, not the graph, and no list is sorted or gathered whole: the
    /// objects only the last (most common) term holds are kept `limit` at a time.
    pub fn rank<'a>(&'a self, query: &str, limit: usize, min_score: f64) -> Vec<(&'a str, f64)> {
        let mut terms: Vec<String> = tokens(query).collect();
        terms.sort_unstable();
        terms.dedup();
        let n = self.lengths.len() as f64;
        if terms.is_empty() || self.lengths.is_empty() || limit == 0 {
            return Vec::new();
        }
        let average = (self.total_length as f64 / n).max(1.0);
        let mut postings: Vec<(f64, &Holders)> = terms
            .iter()
            .filter_map(|term| self.postings.get(term.as_str()))
            .map(|holders| {
                let df = holders.len() as f64;
                ((1.0 + (n - df + 0.5) / (df + 0.5)).ln(), holders)
            })
            .collect();
        let score = |idf: f64, (count, length): (u32, u32)| {
            let f = f64::from(count);
            idf * f * (K1 + 1.0) / (f + K1 * (1.0 - B + B * f64::from(length) / average))
        };
        let keep = |s: f64| s > 0.0 && s >= min_score;
        // Rarest terms first (MaxScore): a term adds at most idf × (K1 + 1) to a score, so once
        // `limit` objects already score above what the terms left could give an object not seen
        // yet, those terms' (long, common) lists only complete the scores of the objects seen.
        postings.sort_by(|a, b| b.0.total_cmp(&a.0));
        let Some((last, rarer)) = postings.split_last() else { return Vec::new() };
        let bound = |terms: &[(f64, &Holders)]| -> f64 { terms.iter().map(|(idf, _)| idf * (K1 + 1.0)).sum() };
        let mut sums: Map<&str, f64> = Map::default();
        let mut walked = 0;
        while walked < rarer.len() {
            let unseen_at_most = bound(&postings[walked..]);
            if walked > 0 && sums.values().filter(|s| **s > unseen_at_most).count() >= limit {
                break;
            }
            let (idf, holders) = rarer[walked];
            for (id, &posting) in holders {
                *sums.entry(id).or_default() += score(idf, posting);
            }
            walked += 1;
        }
        let mut best = Best::new(limit);
        if walked == rarer.len() {
            // Every rarer list was walked: the last list completes the objects seen, and of the
            // ones it alone holds only the best `limit` can make the cut.
            let (idf, holders) = *last;
            for (id, sum) in &mut sums {
                if let Some(&posting) = holders.get(*id) {
                    *sum += score(idf, posting);
                }
            }
            // The long list itself: most of its objects rank below the worst kept, which a
            // comparison tells before any lookup by id.
            for (id, &posting) in holders {
                let alone = score(idf, posting);
                if keep(alone) && best.admits(id, alone) && !sums.contains_key(&**id) {
                    best.offer(id, alone);
                }
            }
        } else {
            for (idf, holders) in &postings[walked..] {
                for (id, sum) in &mut sums {
                    if let Some(&posting) = holders.get(*id) {
                        *sum += score(*idf, posting);
                    }
                }
            }
        }
        for (id, sum) in sums {
            if keep(sum) {
                best.offer(id, sum);
            }
        }
        best.into_sorted()
    }
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
        let Some(&length) = self.lengths.get(id) else { return 0.0 };
        let n = self.lengths.len() as f64;
        let average = (self.total_length as f64 / n).max(1.0);
        terms
            .iter()
            .filter_map(|(term, weight)| {
                let holders = self.postings.get(term.as_str())?;
                let (count, _) = holders.get(id)?;
                let df = holders.len() as f64;
                let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
                let f = f64::from(*count);
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
    heap: std::collections::BinaryHeap<Ranked<'a>>,
}

/// Ordered so that the better ranks lower: a max-heap's top is the worst kept.
struct Ranked<'a>(f64, &'a str);

impl PartialEq for Ranked<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == std::cmp::Ordering::Equal
    }
}

impl Eq for Ranked<'_> {}

impl PartialOrd for Ranked<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Ranked<'_> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other.0.total_cmp(&self.0).then_with(|| self.1.cmp(other.1))
    }
}

impl<'a> Best<'a> {
    pub(crate) fn new(limit: usize) -> Self {
        Best { limit, heap: std::collections::BinaryHeap::new() }
    }

    pub(crate) fn offer(&mut self, id: &'a str, score: f64) {
        if self.heap.len() < self.limit {
            self.heap.push(Ranked(score, id));
        } else if self.admits(id, score) {
            self.heap.pop();
            self.heap.push(Ranked(score, id));
        }
    }

    /// Whether an offer of `score` for `id` would be kept (for now).
    pub(crate) fn admits(&self, id: &str, score: f64) -> bool {
        self.heap.len() < self.limit || self.heap.peek().is_some_and(|worst| Ranked(score, id) < *worst)
    }

    pub(crate) fn into_sorted(self) -> Vec<(&'a str, f64)> {
        self.heap.into_sorted_vec().into_iter().map(|Ranked(score, id)| (id, score)).collect()
    }
}

/// Lowercase alphanumeric runs, stop words dropped, each reduced to its English stem (Snowball's
/// Porter2), so "runs", "running" and "run" are one term.
pub fn tokens(text: &str) -> impl Iterator<Item = String> + '_ {
    static STEMMER: std::sync::LazyLock<rust_stemmers::Stemmer> =
        std::sync::LazyLock::new(|| rust_stemmers::Stemmer::create(rust_stemmers::Algorithm::English));
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|t| !t.is_empty())
        .map(str::to_lowercase)
        .filter(|t| !STOP_WORDS.contains(&t.as_str()))
        .map(|t| match STEMMER.stem(&t) {
            std::borrow::Cow::Borrowed(stem) if stem.len() == t.len() => t,
            stem => stem.into_owned(),
        })
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
        let n = index.lengths.len() as f64;
        let average = (index.total_length as f64 / n).max(1.0);
        let mut scored: Vec<(&str, f64)> = graph
            .objects()
            .filter(|o| !o.is_relation())
            .map(|o| {
                let counts = super::term_counts(o);
                let length: u32 = counts.values().sum();
                let total = terms
                    .iter()
                    .filter_map(|t| Some((counts.get(t.as_str())?, index.postings.get(t.as_str())?.len() as f64)))
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

    #[test]
    fn expansion_takes_the_best_matches_words_weighted_by_score_and_share() {
        use crate::{Identity, KnowledgeObject};
        let object = |id: &str, text: &str| {
            let mut structure = serde_json::Map::new();
            structure.insert("text".into(), serde_json::json!(text));
            KnowledgeObject::new(Identity::new(id, "Note", "x1"), structure)
        };
        let (a, b) = (object("a", "painting lakes and sunsets"), object("b", "sunsets at the lake"));
        let terms = super::expansion("paint", &[(&a, 1.0), (&b, 0.5)], 2);
        // a: lake, sunset 1/3 each (its "paint" is the query's); b: sunset, lake 0.5/2 each.
        let names: Vec<&str> = terms.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(names, vec!["lake", "sunset"]);
        assert!((terms.iter().map(|(_, w)| w).sum::<f64>() - 2.0).abs() < 1e-9);
        assert!(super::expansion("x", &[], 5).is_empty());
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
}
