//! The duplicates sweeper: pairs of objects that are likely the same thing, queued as
//! `duplicate_candidate` for a person to settle with `resolve_duplicate` (merge the two, or
//! record that they are distinct). It only queues: nothing is merged without that call.
//!
//! Two objects are a pair when they have the same type (relations, and the records the server
//! writes for itself — `VerificationRecord`, `InferenceStep` — are never compared) and:
//!
//! - `same_name`: their names are equal once folded: lower case, and every run of characters that
//!   are neither letters nor digits one space ("Machine-Learning" and "machine learning"). A type
//!   where more than [`MAX_SAME_NAME`] objects share a folded name uses it as a label (every
//!   `Document` part called "Introduction"), not as an identity, so that name pairs nothing.
//! - `similar_name`: the Jaccard similarity of the folded names' character trigrams (the name
//!   padded with a space at each end) is at least [`NAME_SIMILARITY`], 0.8, and the numbers in the
//!   names are the same. 0.8 keeps plurals and reordered words of names of a few words ("Knowledge
//!   graph" / "Knowledge graphs" 0.82, "Albert Einstein" / "Einstein, Albert" 0.87) and leaves out
//!   names that differ in the one word that tells them apart ("Protein A" / "Protein B" 0.64, "World
//!   War I" / "World War II" 0.77); numbers must agree because "Chapter 11" and "Chapter 12" are two
//!   things however alike they read. A single misspelt short word scores low (about 0.4): meaning
//!   catches those when vectors are known.
//! - `similar_meaning`: the cosine of their vectors is at least [`COSINE`], 0.95, when the
//!   structure's vector index holds both (search by meaning is on). Without vectors the sweeper
//!   works by names alone.
//!
//! Each pair is queued once (its key names both ids), with both objects, the reasons and their
//! scores, and which object a merge would keep: the one with more relations, the older (earlier in
//! the structure's order) when they have as many. A pair joined by a [`DISTINCT_FROM`] relation —
//! what `resolve_duplicate` commits for a `distinct` decision — is never queued again; a merged
//! pair is gone with the merged object.
//!
//! Cost, per session looked at (only sessions that changed, as for every sweeper): one pass over the
//! objects, grouped by type. Names are compared only through shared trigrams, rarest first
//! (prefix filtering: two names this similar must share one of the first few of their rarest
//! trigrams), looking at most [`MAX_NAME_POSTINGS`] postings; vectors only within a type,
//! each type's pairs at most [`MAX_COSINES`] in all (a type with more is left to names), and each
//! object pairs with its [`NEIGHBOURS`] closest. At most [`MAX_FINDINGS`] pairs are reported, the
//! oldest objects first; once those are settled the next sweep reports the next ones.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use serde_json::{Value, json};
use time::OffsetDateTime;

use cks_core::KnowledgeStructure;
use cks_core::vectors::Vector;

use super::{Check, Finding, Sweep};
use crate::session::SessionInfo;

/// The type of the tasks this sweeper queues.
pub const DUPLICATE_CANDIDATE: &str = "duplicate_candidate";

/// The relation type that records two objects as distinct things: a pair it joins is never a
/// duplicate candidate again.
pub const DISTINCT_FROM: &str = "distinct_from";

/// Types whose objects the server writes for itself, one per check or step: alike by design.
const SKIPPED_TYPES: [&str; 2] = ["VerificationRecord", "InferenceStep"];

/// The most objects of one type that may share a folded name and still pair by it.
pub(crate) const MAX_SAME_NAME: usize = 5;

/// The least Jaccard similarity of two names' trigrams for `similar_name`.
pub(crate) const NAME_SIMILARITY: f64 = 0.8;

/// The least cosine similarity of two vectors for `similar_meaning`.
pub(crate) const COSINE: f32 = 0.95;

/// The postings of name trigrams looked at per session, at most (a few milliseconds' work).
const MAX_NAME_POSTINGS: usize = 2_000_000;

/// The vector comparisons per session, at most.
const MAX_COSINES: usize = 2_000_000;

/// The most pairs by meaning one object takes part in (its closest).
const NEIGHBOURS: usize = 3;

/// The most pairs one check reports.
pub(crate) const MAX_FINDINGS: usize = 500;

/// When a session whose vectors are still being made is looked at again.
const PENDING_RECHECK: time::Duration = time::Duration::seconds(60);

pub(crate) struct Duplicates;

impl Sweep for Duplicates {
    fn agent_id(&self) -> &'static str {
        "duplicates"
    }

    fn task_type(&self) -> &'static str {
        DUPLICATE_CANDIDATE
    }

    fn reads_vectors(&self) -> bool {
        true
    }

    fn check(&self, structure: &KnowledgeStructure, _info: &SessionInfo, now: OffsetDateTime) -> Check {
        let (pairs, vectors_pending) = find(structure);
        let findings = pairs
            .into_iter()
            .map(|pair| Finding { key: pair_key(&pair.ids[0], &pair.ids[1]), payload: pair.payload })
            .collect();
        // Vectors still being made: look again soon, when they may be known.
        Check { findings, recheck_at: vectors_pending.then(|| now + PENDING_RECHECK) }
    }
}

/// A pair's key within its session: both ids, in order, the first's length first so no two pairs
/// share one.
fn pair_key(a: &str, b: &str) -> String {
    format!("{}:{a}|{b}", a.len())
}

/// A candidate pair as queued: its ids (ordered) and payload.
pub(crate) struct Pair {
    pub(crate) ids: [String; 2],
    pub(crate) payload: Value,
}

/// An object that can be compared.
struct Candidate<'a> {
    id: &'a str,
    ty: &'a str,
    name: &'a str,
    folded: String,
    /// Its place in the structure's order (older first).
    position: usize,
}

/// What was found about a pair (by candidate index, lower first).
#[derive(Default)]
struct Evidence {
    same_name: bool,
    name_similarity: Option<f64>,
    cosine: Option<f32>,
}

/// The candidate pairs of `structure`, oldest first, at most [`MAX_FINDINGS`]; and whether some
/// objects still wait for their vectors.
pub(crate) fn find(structure: &KnowledgeStructure) -> (Vec<Pair>, bool) {
    let candidates: Vec<Candidate> = structure
        .objects()
        .enumerate()
        .filter(|(_, o)| !o.is_relation() && !SKIPPED_TYPES.contains(&o.identity.r#type.as_str()))
        .filter_map(|(position, o)| {
            let folded = fold(&o.identity.name);
            (!folded.is_empty()).then(|| Candidate {
                id: o.id(),
                ty: &o.identity.r#type,
                name: &o.identity.name,
                folded,
                position,
            })
        })
        .collect();
    let mut by_type: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (index, candidate) in candidates.iter().enumerate() {
        by_type.entry(candidate.ty).or_default().push(index);
    }
    by_type.retain(|_, members| members.len() > 1);

    let mut found: BTreeMap<(usize, usize), Evidence> = BTreeMap::new();
    for members in by_type.values() {
        same_names(&candidates, members, &mut found);
    }
    let mut budget = MAX_NAME_POSTINGS;
    for members in by_type.values() {
        // Names with other numbers never pair: each set of numbers is compared apart.
        let mut by_numbers: BTreeMap<Vec<&str>, Vec<usize>> = BTreeMap::new();
        for &index in members {
            by_numbers.entry(numbers(&candidates[index].folded)).or_default().push(index);
        }
        for group in by_numbers.values().filter(|g| g.len() > 1) {
            similar_names(&candidates, group, &mut budget, &mut found);
        }
    }
    let vectors_pending = similar_meanings(structure, &candidates, &by_type, &mut found);

    let distinct = distinct_pairs(structure);
    let pairs = found
        .into_iter()
        .filter(|((a, b), _)| {
            let (a, b) = ordered(candidates[*a].id, candidates[*b].id);
            !distinct.contains(&(a, b))
        })
        .take(MAX_FINDINGS)
        .map(|((a, b), evidence)| pair(structure, &candidates[a], &candidates[b], &evidence))
        .collect();
    (pairs, vectors_pending)
}

/// A name folded for comparison: lower case, every run of other characters than letters and
/// digits one space, none at either end.
pub(crate) fn fold(name: &str) -> String {
    let mut folded = String::with_capacity(name.len());
    for word in name.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
        if !folded.is_empty() {
            folded.push(' ');
        }
        folded.extend(word.chars().flat_map(char::to_lowercase));
    }
    folded
}

fn ordered<'a>(a: &'a str, b: &'a str) -> (&'a str, &'a str) {
    if a <= b { (a, b) } else { (b, a) }
}

fn key(a: usize, b: usize) -> (usize, usize) {
    (a.min(b), a.max(b))
}

/// Objects whose folded names are equal: each paired with the oldest of its name (so a name's
/// pairs stay the same as objects of it come and go), unless the name is a label.
fn same_names(candidates: &[Candidate], members: &[usize], found: &mut BTreeMap<(usize, usize), Evidence>) {
    let mut by_name: HashMap<&str, Vec<usize>> = HashMap::new();
    for &index in members {
        by_name.entry(&candidates[index].folded).or_default().push(index);
    }
    for named in by_name.values().filter(|n| n.len() > 1 && n.len() <= MAX_SAME_NAME) {
        // `members` is in structure order: the first is the oldest.
        for &other in &named[1..] {
            found.entry(key(named[0], other)).or_default().same_name = true;
        }
    }
}

/// The trigrams of a folded name, padded with a space at each end.
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

/// Objects whose names' trigrams are [`NAME_SIMILARITY`] alike (and not equal: [`same_names`]
/// decides those) among `members`, which have the same numbers. Each posting looked at counts
/// against `budget`. All-pairs by prefix filtering: each name's trigrams in order of rarity within
/// the type; two names at least `t` alike share one of their first `|x| - ⌈t·|x|⌉ + 1`, so only
/// names sharing such a trigram are compared, sizes permitting.
fn similar_names(
    candidates: &[Candidate],
    members: &[usize],
    budget: &mut usize,
    found: &mut BTreeMap<(usize, usize), Evidence>,
) {
    // One object per name (the oldest; [`same_names`] pairs the rest with it), labels left out.
    let mut named: HashMap<&str, (usize, usize)> = HashMap::new();
    for &index in members {
        named.entry(&candidates[index].folded).or_insert((index, 0)).1 += 1;
    }
    let mut members: Vec<usize> =
        named.into_values().filter(|(_, count)| *count <= MAX_SAME_NAME).map(|(index, _)| index).collect();
    members.sort_unstable();
    let mut ids: HashMap<String, u32> = HashMap::new();
    let sets: Vec<Vec<u32>> = members
        .iter()
        .map(|&index| {
            let mut set: Vec<u32> = trigrams(&candidates[index].folded)
                .into_iter()
                .map(|g| {
                    let next = ids.len() as u32;
                    *ids.entry(g).or_insert(next)
                })
                .collect();
            set.sort_unstable();
            set
        })
        .collect();
    let mut frequency = vec![0u32; ids.len()];
    for set in &sets {
        for &gram in set {
            frequency[gram as usize] += 1;
        }
    }
    // Smaller sets first: a later set is never smaller, so the size filter looks one way.
    let mut order: Vec<usize> = (0..members.len()).collect();
    order.sort_by_key(|&m| (sets[m].len(), m));
    let mut postings: HashMap<u32, Vec<usize>> = HashMap::new();
    for &m in &order {
        let set = &sets[m];
        let mut rare = set.clone();
        rare.sort_by_key(|&g| (frequency[g as usize], g));
        let prefix = set.len() - (NAME_SIMILARITY * set.len() as f64).ceil() as usize + 1;
        let mut seen: HashSet<usize> = HashSet::new();
        for &gram in &rare[..prefix.min(rare.len())] {
            for &other in postings.get(&gram).map_or(&[][..], Vec::as_slice) {
                if *budget == 0 {
                    return;
                }
                *budget -= 1;
                if !seen.insert(other) || (sets[other].len() as f64) < NAME_SIMILARITY * set.len() as f64 {
                    continue;
                }
                let similarity = jaccard(set, &sets[other]);
                if similarity >= NAME_SIMILARITY {
                    found.entry(key(members[m], members[other])).or_default().name_similarity = Some(similarity);
                }
            }
            postings.entry(gram).or_default().push(m);
        }
    }
}

/// The Jaccard similarity of two sorted sets.
fn jaccard(a: &[u32], b: &[u32]) -> f64 {
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
    shared as f64 / (a.len() + b.len() - shared) as f64
}

/// Objects of a type whose vectors are [`COSINE`] alike, each with its [`NEIGHBOURS`] closest.
/// Reads the vector index as it stands (the sweep settles it first when search by meaning is on);
/// says whether some objects still wait for a vector.
fn similar_meanings(
    structure: &KnowledgeStructure,
    candidates: &[Candidate],
    by_type: &BTreeMap<&str, Vec<usize>>,
    found: &mut BTreeMap<(usize, usize), Evidence>,
) -> bool {
    let index_of: HashMap<&str, usize> = candidates.iter().enumerate().map(|(i, c)| (c.id, i)).collect();
    // Copied out, so searches of the session do not wait while they are compared.
    let (mut vectors, pending) = {
        let index = structure.vector_index().lock().unwrap_or_else(|p| p.into_inner());
        let pending = index.pending().next().is_some();
        let mut vectors: BTreeMap<&str, Vec<(usize, Vector)>> = BTreeMap::new();
        if !index.is_empty() {
            for (id, vector) in index.rows() {
                let Some(&i) = index_of.get(id) else { continue };
                if by_type.contains_key(candidates[i].ty) {
                    vectors.entry(candidates[i].ty).or_default().push((i, vector));
                }
            }
        }
        (vectors, pending)
    };
    let mut budget = MAX_COSINES;
    for of_type in vectors.values_mut() {
        let pairs = of_type.len() * (of_type.len() - 1) / 2;
        if of_type.len() < 2 || pairs > budget {
            continue;
        }
        budget -= pairs;
        of_type.sort_by_key(|(i, _)| *i);
        let mut closest: Vec<Vec<(f32, usize)>> = vec![Vec::new(); of_type.len()];
        for a in 0..of_type.len() {
            for b in a + 1..of_type.len() {
                let cosine = of_type[a].1.cosine(&of_type[b].1);
                if cosine >= COSINE {
                    closest[a].push((cosine, b));
                    closest[b].push((cosine, a));
                }
            }
        }
        for (a, near) in closest.iter_mut().enumerate() {
            near.sort_by(|x, y| y.0.total_cmp(&x.0).then(x.1.cmp(&y.1)));
            for &(cosine, b) in near.iter().take(NEIGHBOURS) {
                found.entry(key(of_type[a].0, of_type[b].0)).or_default().cosine = Some(cosine);
            }
        }
    }
    pending
}

/// Every pair of objects a [`DISTINCT_FROM`] relation joins, ids in order.
fn distinct_pairs(structure: &KnowledgeStructure) -> BTreeSet<(&str, &str)> {
    let mut pairs = BTreeSet::new();
    for relation in structure.relations_of_type(DISTINCT_FROM) {
        let Some(view) = relation.relation() else { continue };
        for (i, a) in view.participants.iter().enumerate() {
            for b in &view.participants[i + 1..] {
                pairs.insert(ordered(a, b));
            }
        }
    }
    pairs
}

/// The payload of a pair: both objects, why they pair, and which a merge would keep.
fn pair(structure: &KnowledgeStructure, a: &Candidate, b: &Candidate, evidence: &Evidence) -> Pair {
    let relations = |c: &Candidate| structure.relations_of(c.id).len();
    // More relations wins; then the older.
    let a_first = (relations(a), std::cmp::Reverse(a.position)) >= (relations(b), std::cmp::Reverse(b.position));
    let (keep, merge) = if a_first { (a, b) } else { (b, a) };
    let mut reasons = Vec::new();
    let mut scores = serde_json::Map::new();
    if evidence.same_name {
        reasons.push("same_name");
        scores.insert("name_similarity".into(), json!(1.0));
    }
    if let Some(similarity) = evidence.name_similarity {
        reasons.push("similar_name");
        scores.insert("name_similarity".into(), json!((similarity * 1000.0).round() / 1000.0));
    }
    if let Some(cosine) = evidence.cosine {
        reasons.push("similar_meaning");
        scores.insert("cosine".into(), json!((f64::from(cosine) * 1000.0).round() / 1000.0));
    }
    let (first, second) = if a.id <= b.id { (a, b) } else { (b, a) };
    let object = |c: &Candidate| json!({"id": c.id, "name": c.name, "type": c.ty, "relation_count": relations(c)});
    Pair {
        ids: [first.id.to_owned(), second.id.to_owned()],
        payload: json!({
            "object_ids": [first.id, second.id],
            "objects": [object(first), object(second)],
            "type": a.ty,
            "reasons": reasons,
            "scores": scores,
            "keep_id": keep.id,
            "merge_id": merge.id,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cks_core::json::parse_value;

    fn graph(objects: Vec<Value>) -> KnowledgeStructure {
        parse_value(json!({"objects": objects})).unwrap()
    }

    fn obj(id: &str, ty: &str, name: &str) -> Value {
        json!({"identity": {"id": id, "type": ty, "name": name}, "structure": {}})
    }

    fn ids(pairs: &[Pair]) -> Vec<[&str; 2]> {
        pairs.iter().map(|p| [p.ids[0].as_str(), p.ids[1].as_str()]).collect()
    }

    #[test]
    fn names_fold_and_trigram_similarity_follows_the_documented_examples() {
        assert_eq!(fold("  Machine-Learning!! (ML) "), "machine learning ml");
        assert_eq!(fold("—"), "");
        let similarity = |a: &str, b: &str| {
            let (a, b) = (trigrams(&fold(a)), trigrams(&fold(b)));
            let shared = a.iter().filter(|g| b.contains(g)).count();
            shared as f64 / (a.len() + b.len() - shared) as f64
        };
        assert!(similarity("Knowledge graph", "Knowledge graphs") >= NAME_SIMILARITY);
        assert!(similarity("Albert Einstein", "Einstein, Albert") >= NAME_SIMILARITY);
        assert!(similarity("Protein A", "Protein B") < NAME_SIMILARITY);
        assert!(similarity("World War I", "World War II") < NAME_SIMILARITY);
        assert_eq!(numbers("chapter 11 part 2"), ["11", "2"]);
    }

    #[test]
    fn pairs_same_and_similar_names_within_a_type_only() {
        let g = graph(vec![
            obj("a", "Concept", "Knowledge Graph"),
            obj("b", "Concept", "knowledge-graph"),
            obj("c", "Concept", "Knowledge graphs"),
            obj("d", "Person", "Knowledge Graph"),
            obj("e", "Concept", "Chapter 11 of the handbook"),
            obj("f", "Concept", "Chapter 12 of the handbook"),
            obj("g", "Concept", "Protein A"),
            obj("h", "Concept", "Protein B"),
            json!({"identity": {"id": "r", "type": "Relation", "name": "Knowledge Graph"},
                   "structure": {"participants": ["a", "d"], "relation_type": "about"}}),
        ]);
        let (pairs, pending) = find(&g);
        assert!(!pending);
        // b pairs with c through a: a name is compared by its oldest object.
        assert_eq!(ids(&pairs), [["a", "b"], ["a", "c"]]);
        let first = &pairs[0].payload;
        assert_eq!(first["reasons"], json!(["same_name"]));
        assert_eq!(first["scores"], json!({"name_similarity": 1.0}));
        assert_eq!((first["keep_id"].as_str(), first["merge_id"].as_str()), (Some("a"), Some("b")), "a has a relation");
        assert_eq!(
            first["objects"][0],
            json!({"id": "a", "name": "Knowledge Graph", "type": "Concept", "relation_count": 1})
        );
        let similar = &pairs[1].payload;
        assert_eq!(similar["reasons"], json!(["similar_name"]));
        assert!(similar["scores"]["name_similarity"].as_f64().unwrap() >= NAME_SIMILARITY);
        assert_eq!(similar["keep_id"], "a");
    }

    #[test]
    fn a_name_many_objects_share_is_a_label_and_distinct_pairs_are_left_out() {
        let mut objects: Vec<Value> =
            (0..=MAX_SAME_NAME).map(|i| obj(&format!("s{i}"), "Section", "Introduction")).collect();
        objects.push(obj("x", "Concept", "Graph database"));
        objects.push(obj("y", "Concept", "Graph Database"));
        objects.push(obj("v1", "VerificationRecord", "verification"));
        objects.push(obj("v2", "VerificationRecord", "verification"));
        assert_eq!(ids(&find(&graph(objects.clone())).0), [["x", "y"]]);
        objects.push(json!({"identity": {"id": "d", "type": "Relation", "name": "r"},
                            "structure": {"participants": ["y", "x"], "relation_type": DISTINCT_FROM}}));
        assert!(find(&graph(objects)).0.is_empty());
    }

    #[test]
    fn names_are_compared_without_comparing_every_pair() {
        // Thousands of names of one type, a few near-identical: found, each once.
        let mut objects: Vec<Value> =
            (0..3_000).map(|i| obj(&format!("n{i}"), "Concept", &format!("concept number {i} of many"))).collect();
        objects.push(obj("twin", "Concept", "Concept number 17 of many!"));
        objects.push(obj("plural", "Concept", "concepts number 1200 of many"));
        let (pairs, _) = find(&graph(objects));
        let mut found = ids(&pairs);
        found.sort();
        assert_eq!(found, [["n1200", "plural"], ["n17", "twin"]]);
    }

    #[test]
    fn vectors_in_the_index_pair_objects_by_meaning() {
        let g = graph(vec![
            obj("a", "Concept", "Car"),
            obj("b", "Concept", "Automobile"),
            obj("c", "Concept", "Banana"),
            obj("d", "Fruit", "Automobile"),
        ]);
        // A stand-in model: cars point one way, the rest elsewhere.
        let vector = |text: &str| {
            let text = text.to_lowercase();
            let values: [f32; 4] = if text.contains("car") || text.contains("automobile") {
                [1.0, 0.1, 0.0, 0.0]
            } else {
                [0.0, 0.0, 1.0, 0.2]
            };
            Vector::quantize(&values).unwrap()
        };
        let known: HashMap<cks_core::vectors::TextKey, Vector> = g
            .objects()
            .filter_map(|o| cks_core::vectors::embedding_text(o))
            .map(|t| (cks_core::vectors::text_key(&t), vector(&t)))
            .collect();
        g.vector_index().lock().unwrap().sync(&g, "m", 0, |k| known.get(k));
        let (pairs, pending) = find(&g);
        assert!(!pending);
        assert_eq!(ids(&pairs), [["a", "b"]], "the same type only");
        assert_eq!(pairs[0].payload["reasons"], json!(["similar_meaning"]));
        assert!(pairs[0].payload["scores"]["cosine"].as_f64().unwrap() >= f64::from(COSINE));

        // Vectors asked for and not known yet: pending, so the session is looked at again.
        let fresh = graph(vec![obj("a", "Concept", "Car")]);
        fresh.vector_index().lock().unwrap().sync(&fresh, "m", 0, |_| None);
        assert!(find(&fresh).1);
    }
}
