//! The matcher: whether two objects — or a name not yet in the graph and an object — are the
//! same thing. One component for everything that asks: `find_duplicates`, the duplicates
//! sweeper, and `remember` resolving what a text names against the graph.
//!
//! Each comparison is within one type (types compared folded, so `person` is `Person`), between
//! [`Profile`]s: an object's names (its `name` and its `aliases`, folded), the numbers in them, and
//! the whole numbers among its fields. Evidence, strongest first:
//!
//! - `same_name`: a name of one equals a name of the other once folded (lower case, every run of
//!   characters that are neither letters nor digits one space).
//! - `similar_name`: the Jaccard similarity of two names' character trigrams (each name padded
//!   with a space at each end) is at least [`NAME_SIMILARITY`], 0.8, and the numbers in the names
//!   are the same. 0.8 keeps plurals and reordered words ("Knowledge graph" / "Knowledge graphs"
//!   0.82, "Albert Einstein" / "Einstein, Albert" 0.87) and leaves out names that differ in the one
//!   word that tells them apart ("Protein A" / "Protein B" 0.64, "World War I" / "World War II"
//!   0.77); numbers must agree because "Chapter 11" and "Chapter 12" are two things however alike
//!   they read.
//! - `contained_name`: every word of one name is a word of the other ("Alice" / "Alice Smith").
//!   Often the same thing named shorter, sometimes not: never enough alone.
//! - `similar_meaning`: the cosine of their vectors is at least [`COSINE`], 0.95. Meaning tells
//!   what a thing is about, not which one it is: never enough alone either.
//!
//! Against them, `conflict`: a field both objects have whose values are whole numbers (a year, a
//! count, an edition), different. Two records that disagree on such a field describe two things
//! however alike their names; fields with fractions (prices, measures) vary between sources and
//! are not compared. A name not yet in the graph has no fields: what a text says of a thing is
//! news about it, not its identity.
//!
//! The decision: `same` on a same or similar name without a conflict; `review` on a contained name
//! or similar meaning without a conflict, and on a `same` that is ambiguous (an object with two or
//! more `same` partners whose scores are within [`AMBIGUITY`] of its best: the text does not tell
//! which); `different` otherwise. A wrong merge costs more than a missed one, so anything short of
//! a name is left to a person. The score is the strongest evidence: the name similarity or the
//! cosine, whichever is higher.

mod pairs;

use std::collections::{BTreeMap, HashSet};

use serde_json::{Value, json};

use crate::KnowledgeStructure;
use crate::object::KnowledgeObject;
use crate::vectors::{Vector, VectorIndex};

pub use pairs::{DISTINCT_FROM, MAX_PAIRS, MAX_SAME_NAME, Pair, pairs};

/// The least Jaccard similarity of two names' trigrams for `similar_name`.
pub const NAME_SIMILARITY: f64 = 0.8;

/// The least cosine similarity of two vectors for `similar_meaning`.
pub const COSINE: f32 = 0.95;

/// How close two `same` partners' scores must be for the choice between them to be ambiguous.
pub const AMBIGUITY: f64 = 0.05;

/// The structure key holding an object's other names.
pub const ALIASES: &str = "aliases";

/// Types whose objects the server writes for itself, one per check, step or remembered text:
/// alike by design, never compared.
pub const SKIPPED_TYPES: [&str; 3] = ["VerificationRecord", "InferenceStep", "Episode"];

/// What the matcher decided about a pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Decision {
    Same,
    Review,
    Different,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Same => "same",
            Decision::Review => "review",
            Decision::Different => "different",
        }
    }
}

/// What a comparison found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Evidence {
    pub same_name: bool,
    /// The best trigram similarity of a name of one and a name of the other.
    pub name_similarity: f64,
    /// Whether the names with that similarity have the same numbers.
    pub numbers_agree: bool,
    pub contained_name: bool,
    pub cosine: Option<f32>,
    /// The field whose whole numbers differ, with both values.
    pub conflict: Option<(String, i64, i64)>,
    /// The decision was `same` but another partner is as likely.
    pub ambiguous: bool,
}

impl Evidence {
    /// The reasons in words, strongest first.
    pub fn reasons(&self) -> Vec<&'static str> {
        let mut reasons = Vec::new();
        if self.same_name {
            reasons.push("same_name");
        } else if self.similar_name() {
            reasons.push("similar_name");
        }
        if self.contained_name && !self.same_name {
            reasons.push("contained_name");
        }
        if self.cosine.is_some_and(|c| c >= COSINE) {
            reasons.push("similar_meaning");
        }
        if self.conflict.is_some() {
            reasons.push("conflicting_field");
        }
        if self.ambiguous {
            reasons.push("ambiguous");
        }
        reasons
    }

    fn similar_name(&self) -> bool {
        self.name_similarity >= NAME_SIMILARITY && self.numbers_agree
    }

    /// The figures behind the reasons, rounded to three places: `name_similarity`, `cosine` when
    /// known, and `conflict` (`{field, values}`) when a field tells the two apart.
    pub fn scores(&self) -> serde_json::Map<String, Value> {
        let mut scores = serde_json::Map::new();
        scores.insert("name_similarity".into(), json!(round(self.name_similarity)));
        if let Some(cosine) = self.cosine {
            scores.insert("cosine".into(), json!(round(f64::from(cosine))));
        }
        if let Some((field, x, y)) = &self.conflict {
            scores.insert("conflict".into(), json!({"field": field, "values": [x, y]}));
        }
        scores
    }

    /// The strongest evidence as one number in [0, 1].
    pub fn score(&self) -> f64 {
        let name = if self.same_name { 1.0 } else { self.name_similarity };
        name.max(self.cosine.map_or(0.0, f64::from)).clamp(0.0, 1.0)
    }

    /// The decision this evidence supports, ambiguity aside.
    pub fn decision(&self) -> Decision {
        if self.conflict.is_some() {
            Decision::Different
        } else if (self.same_name || self.similar_name()) && !self.ambiguous {
            Decision::Same
        } else if self.same_name
            || self.similar_name()
            || self.contained_name
            || self.cosine.is_some_and(|c| c >= COSINE)
        {
            Decision::Review
        } else {
            Decision::Different
        }
    }
}

/// One name, folded, with what comparing it needs.
#[derive(Clone, Debug)]
struct Name {
    folded: String,
    trigrams: Vec<String>,
    numbers: Vec<String>,
}

impl Name {
    fn new(raw: &str) -> Option<Name> {
        let folded = fold(raw);
        if folded.is_empty() {
            return None;
        }
        Some(Name {
            trigrams: trigrams(&folded),
            numbers: numbers(&folded).into_iter().map(str::to_owned).collect(),
            folded,
        })
    }
}

/// What the matcher compares of one object (or of a name not yet in the graph).
#[derive(Clone, Debug)]
pub struct Profile {
    /// The type, folded.
    ty: String,
    /// The name first, then the aliases; none empty, none twice.
    names: Vec<Name>,
    /// The fields whose values are whole numbers, by key.
    fields: BTreeMap<String, i64>,
}

impl Profile {
    /// An object's profile: its type, name, aliases and whole-number fields.
    pub fn of(object: &KnowledgeObject) -> Profile {
        let aliases = aliases(object);
        let mut profile = Profile::named(&object.identity.r#type, &object.identity.name, &aliases);
        for (key, value) in object.structure.iter() {
            if key != ALIASES
                && let Some(number) = whole_number(value)
            {
                profile.fields.insert(key.to_owned(), number);
            }
        }
        profile
    }

    /// The profile of a thing known only by its type and names.
    pub fn named(ty: &str, name: &str, aliases: &[String]) -> Profile {
        let mut names: Vec<Name> = Vec::new();
        for raw in std::iter::once(name).chain(aliases.iter().map(String::as_str)) {
            if let Some(name) = Name::new(raw)
                && !names.iter().any(|n| n.folded == name.folded)
            {
                names.push(name);
            }
        }
        Profile { ty: fold(ty), names, fields: BTreeMap::new() }
    }

    /// Whether the two can be compared: the same type, each with a name.
    pub fn comparable(&self, other: &Profile) -> bool {
        self.ty == other.ty && !self.names.is_empty() && !other.names.is_empty()
    }

    /// The names, folded: the name first.
    pub fn folded_names(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(|n| n.folded.as_str())
    }
}

/// An object's aliases: the strings of its `aliases` list (or its one string).
pub fn aliases(object: &KnowledgeObject) -> Vec<String> {
    match object.structure.get(ALIASES) {
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
        Some(Value::String(alias)) => vec![alias.clone()],
        _ => Vec::new(),
    }
}

/// A JSON number without a fraction, or a string of at most 18 digits.
fn whole_number(value: &Value) -> Option<i64> {
    match value {
        Value::Number(n) => n.as_i64(),
        Value::String(s) if !s.is_empty() && s.len() <= 18 && s.bytes().all(|b| b.is_ascii_digit()) => s.parse().ok(),
        _ => None,
    }
}

/// Compares two profiles; `cosine` is their vectors' similarity where both are known.
pub fn compare(a: &Profile, b: &Profile, cosine: Option<f32>) -> Evidence {
    let mut evidence = Evidence { cosine, ..Evidence::default() };
    if !a.comparable(b) {
        return evidence;
    }
    for x in &a.names {
        for y in &b.names {
            if x.folded == y.folded {
                evidence.same_name = true;
                evidence.name_similarity = 1.0;
                evidence.numbers_agree = true;
            }
            let similarity = jaccard(&x.trigrams, &y.trigrams);
            let agree = x.numbers == y.numbers;
            // The best similarity, preferring names whose numbers agree.
            if (agree, similarity) > (evidence.numbers_agree, evidence.name_similarity) {
                evidence.name_similarity = similarity;
                evidence.numbers_agree = agree;
            }
            evidence.contained_name |= contained(&x.folded, &y.folded) || contained(&y.folded, &x.folded);
        }
    }
    evidence.conflict =
        a.fields.iter().find_map(|(key, &x)| b.fields.get(key).filter(|&&y| y != x).map(|&y| (key.clone(), x, y)));
    evidence
}

/// Whether every word of `short` is a word of `long`.
fn contained(short: &str, long: &str) -> bool {
    let words: Vec<&str> = long.split(' ').collect();
    short.split(' ').all(|w| words.contains(&w))
}

/// One object judged against a profile.
#[derive(Clone, Debug)]
pub struct Candidate<'a> {
    pub object: &'a KnowledgeObject,
    pub evidence: Evidence,
    pub decision: Decision,
    pub score: f64,
}

/// How many objects each name's lexical search offers for comparison.
const NAME_SEARCH: usize = 50;

/// How many objects the vector search offers.
const MEANING_SEARCH: usize = 10;

/// The objects of `structure` that may be the thing `profile` describes, judged, best first
/// (`same` before `review` before `different`, then by score, then by id). `meaning` is the
/// structure's vector index with the thing's own vector, where it is known; `exclude` an id never
/// to offer (the object itself).
///
/// Objects come from a lexical search of each name (the structure's text index) and from the
/// vector index: the cost follows those searches, not the graph.
pub fn candidates<'a>(
    structure: &'a KnowledgeStructure,
    profile: &Profile,
    meaning: Option<(&VectorIndex, &Vector)>,
    exclude: Option<&str>,
) -> Vec<Candidate<'a>> {
    let index = structure.text_index();
    let mut ids: Vec<&str> =
        profile.names.iter().flat_map(|name| index.rank(&name.folded, NAME_SEARCH, 0.0)).map(|(id, _)| id).collect();
    if let Some((vectors, vector)) = meaning {
        ids.extend(vectors.rank(vector, MEANING_SEARCH).into_iter().map(|(id, _)| id));
    }
    let mut taken: HashSet<&str> = HashSet::new();
    let mut found: Vec<Candidate<'a>> = Vec::new();
    for id in ids {
        if Some(id) == exclude || !taken.insert(id) {
            continue;
        }
        let Some(object) = structure.get(id) else { continue };
        if object.is_relation() || SKIPPED_TYPES.contains(&object.identity.r#type.as_str()) {
            continue;
        }
        let other = Profile::of(object);
        if !profile.comparable(&other) {
            continue;
        }
        let cosine = meaning.and_then(|(vectors, vector)| vectors.cosine(vector, id));
        let evidence = compare(profile, &other, cosine);
        found.push(Candidate { object, decision: evidence.decision(), score: evidence.score(), evidence });
    }
    mark_ambiguous(&mut found);
    found.sort_by(|a, b| {
        a.decision.cmp(&b.decision).then(b.score.total_cmp(&a.score)).then(a.object.id().cmp(b.object.id()))
    });
    found
}

/// When two or more `same` candidates are within [`AMBIGUITY`] of the best, which one the profile
/// is cannot be told: every `same` candidate becomes `review`.
fn mark_ambiguous(found: &mut [Candidate]) {
    let same = || found.iter().filter(|c| c.decision == Decision::Same);
    let best = same().map(|c| c.score).fold(f64::NAN, f64::max);
    if same().filter(|c| c.score >= best - AMBIGUITY).count() > 1 {
        for candidate in found.iter_mut().filter(|c| c.decision == Decision::Same) {
            candidate.evidence.ambiguous = true;
            candidate.decision = Decision::Review;
        }
    }
}

/// `x` to three decimal places, as answers show scores.
pub fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// A name folded for comparison: lower case, every run of other characters than letters and
/// digits one space, none at either end.
pub fn fold(name: &str) -> String {
    let mut folded = String::with_capacity(name.len());
    for word in name.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
        if !folded.is_empty() {
            folded.push(' ');
        }
        folded.extend(word.chars().flat_map(char::to_lowercase));
    }
    folded
}

/// The trigrams of a folded name, padded with a space at each end, sorted and unique.
fn trigrams(folded: &str) -> Vec<String> {
    let chars: Vec<char> = std::iter::once(' ').chain(folded.chars()).chain(std::iter::once(' ')).collect();
    let mut grams: Vec<String> = chars.windows(3).map(|w| w.iter().collect()).collect();
    grams.sort_unstable();
    grams.dedup();
    grams
}

/// The runs of digits in a name.
fn numbers(folded: &str) -> Vec<&str> {
    folded.split(|c: char| !c.is_ascii_digit()).filter(|n| !n.is_empty()).collect()
}

/// The Jaccard similarity of two sorted sets.
fn jaccard<T: Ord>(a: &[T], b: &[T]) -> f64 {
    let (mut i, mut j, mut shared) = (0, 0, 0usize);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                shared += 1;
                i += 1;
                j += 1;
            }
        }
    }
    let union = a.len() + b.len() - shared;
    if union == 0 { 0.0 } else { shared as f64 / union as f64 }
}

#[cfg(test)]
mod tests;
