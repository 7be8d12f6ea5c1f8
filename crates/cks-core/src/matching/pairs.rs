//! The likely duplicates of a whole structure: which pairs to compare without comparing every
//! pair, each then judged by [`compare`](super::compare).
//!
//! Pairs are proposed within a type (relations and [`SKIPPED_TYPES`] never) when:
//!
//! - their names (or aliases) are equal once folded, each object paired with the oldest of its name, unless
//!   more than [`MAX_SAME_NAME`] objects share the name: then it is a label (every `Document` part
//!   called "Introduction"), not an identity, and pairs nothing;
//! - their names' trigrams are [`NAME_SIMILARITY`] alike and their numbers the same, found by
//!   prefix filtering: each name's trigrams in order of rarity within the type; two names at least
//!   `t` alike share one of their first `|x| - ⌈t·|x|⌉ + 1`, so only names sharing such a trigram
//!   are compared, at most [`MAX_NAME_POSTINGS`] postings looked at;
//! - their vectors are [`COSINE`] alike (when the structure's vector index holds both), each object
//!   with its [`NEIGHBOURS`] closest, each type's pairs at most [`MAX_COSINES`] in all (a type with
//!   more is left to names).
//!
//! A pair joined by a [`DISTINCT_FROM`] relation (a person's word that they are two things) is
//! never proposed. At most [`MAX_PAIRS`] pairs are judged, the oldest objects first; pairs judged
//! `different` are left out.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use crate::vectors::Vector;

use super::{
    AMBIGUITY, COSINE, Decision, Evidence, NAME_SIMILARITY, Profile, SKIPPED_TYPES, compare, fold, jaccard, numbers,
    trigrams,
};
use crate::KnowledgeStructure;

/// The relation type that records two objects as distinct things: a pair it joins is never a
/// duplicate candidate again.
pub const DISTINCT_FROM: &str = "distinct_from";

/// The most objects of one type that may share a folded name and still pair by it.
pub const MAX_SAME_NAME: usize = 5;

/// The postings of name trigrams looked at per structure, at most (a few milliseconds' work).
const MAX_NAME_POSTINGS: usize = 2_000_000;

/// The vector comparisons per structure, at most.
const MAX_COSINES: usize = 2_000_000;

/// The most pairs by meaning one object takes part in (its closest).
const NEIGHBOURS: usize = 3;

/// The most pairs judged in one pass.
pub const MAX_PAIRS: usize = 500;

/// A likely duplicate pair: its ids (in order), what was found and decided.
#[derive(Clone, Debug)]
pub struct Pair {
    pub ids: [String; 2],
    /// Positions of the two in the structure's order, as `ids`.
    pub positions: [usize; 2],
    pub evidence: Evidence,
    pub decision: Decision,
    pub score: f64,
}

/// What proposing a pair found (the judging then looks at everything).
#[derive(Default)]
struct PairEvidence {
    cosine: Option<f32>,
}

/// An object that can be compared.
struct Named<'a> {
    id: &'a str,
    ty: &'a str,
    folded: String,
    /// Its aliases, folded (compared as names by [`same_names`]).
    aliases: Vec<String>,
    position: usize,
}

/// The likely duplicates of `structure`, oldest objects first, at most [`MAX_PAIRS`], none judged
/// `different`; and whether some objects still wait for their vectors.
pub fn pairs(structure: &KnowledgeStructure) -> (Vec<Pair>, bool) {
    let named: Vec<Named> = structure
        .objects()
        .enumerate()
        .filter(|(_, o)| !o.is_relation() && !SKIPPED_TYPES.contains(&o.identity.r#type.as_str()))
        .filter_map(|(position, o)| {
            let folded = fold(&o.identity.name);
            let aliases = super::aliases(o).iter().map(|a| fold(a)).filter(|a| !a.is_empty() && *a != folded).collect();
            (!folded.is_empty()).then(|| Named { id: o.id(), ty: &o.identity.r#type, folded, aliases, position })
        })
        .collect();
    let mut by_type: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (index, object) in named.iter().enumerate() {
        by_type.entry(object.ty).or_default().push(index);
    }
    by_type.retain(|_, members| members.len() > 1);

    let mut found: BTreeMap<(usize, usize), PairEvidence> = BTreeMap::new();
    for members in by_type.values() {
        same_names(&named, members, &mut found);
    }
    let mut budget = MAX_NAME_POSTINGS;
    for members in by_type.values() {
        // Names with other numbers never pair: each set of numbers is compared apart.
        let mut by_numbers: BTreeMap<Vec<&str>, Vec<usize>> = BTreeMap::new();
        for &index in members {
            by_numbers.entry(numbers(&named[index].folded)).or_default().push(index);
        }
        for group in by_numbers.values().filter(|g| g.len() > 1) {
            similar_names(&named, group, &mut budget, &mut found);
        }
    }
    let pending = similar_meanings(structure, &named, &by_type, &mut found);

    let distinct = distinct_pairs(structure);
    let mut profiles: HashMap<usize, Profile> = HashMap::new();
    let mut judged: Vec<Pair> = Vec::new();
    for ((a, b), proposed) in found {
        if judged.len() == MAX_PAIRS {
            break;
        }
        let (x, y) = (&named[a], &named[b]);
        if distinct.contains(&ordered(x.id, y.id)) {
            continue;
        }
        let mut profile = |i: usize| -> Profile {
            profiles.entry(i).or_insert_with(|| Profile::of(structure.get(named[i].id).expect("listed"))).clone()
        };
        let (pa, pb) = (profile(a), profile(b));
        let cosine = proposed.cosine.or_else(|| {
            structure
                .built_vector_index()
                .and_then(|v| v.lock().unwrap_or_else(|p| p.into_inner()).similarity(x.id, y.id))
        });
        let evidence = compare(&pa, &pb, cosine);
        let (first, second) = if x.id <= y.id { (x, y) } else { (y, x) };
        judged.push(Pair {
            ids: [first.id.to_owned(), second.id.to_owned()],
            positions: [first.position, second.position],
            decision: evidence.decision(),
            score: evidence.score(),
            evidence,
        });
    }
    mark_ambiguous(&mut judged);
    judged.retain(|p| p.decision != Decision::Different);
    (judged, pending)
}

/// An object with two or more `same` partners within [`AMBIGUITY`] of its best is ambiguous: all
/// its `same` pairs are left to a person.
fn mark_ambiguous(pairs: &mut [Pair]) {
    let mut best: HashMap<&str, f64> = HashMap::new();
    for pair in pairs.iter().filter(|p| p.decision == Decision::Same) {
        for id in &pair.ids {
            let score = best.entry(id).or_insert(f64::MIN);
            *score = score.max(pair.score);
        }
    }
    let mut close: HashMap<String, usize> = HashMap::new();
    for pair in pairs.iter().filter(|p| p.decision == Decision::Same) {
        for id in &pair.ids {
            if pair.score >= best[id.as_str()] - AMBIGUITY {
                *close.entry(id.clone()).or_default() += 1;
            }
        }
    }
    for pair in pairs.iter_mut().filter(|p| p.decision == Decision::Same) {
        if pair.ids.iter().any(|id| close.get(id).is_some_and(|&n| n > 1)) {
            pair.evidence.ambiguous = true;
            pair.decision = Decision::Review;
        }
    }
}

fn ordered<'a>(a: &'a str, b: &'a str) -> (&'a str, &'a str) {
    if a <= b { (a, b) } else { (b, a) }
}

fn key(a: usize, b: usize) -> (usize, usize) {
    (a.min(b), a.max(b))
}

/// Objects whose folded names (or aliases) are equal: each paired with the oldest of its name (so
/// a name's pairs stay the same as objects of it come and go), unless the name is a label.
fn same_names(named: &[Named], members: &[usize], found: &mut BTreeMap<(usize, usize), PairEvidence>) {
    let mut by_name: HashMap<&str, Vec<usize>> = HashMap::new();
    for &index in members {
        let object = &named[index];
        for name in std::iter::once(&object.folded).chain(&object.aliases) {
            by_name.entry(name).or_default().push(index);
        }
    }
    for same in by_name.values().filter(|n| n.len() > 1 && n.len() <= MAX_SAME_NAME) {
        // `members` is in structure order: the first is the oldest.
        for &other in &same[1..] {
            found.entry(key(same[0], other)).or_default();
        }
    }
}

/// Objects whose names' trigrams are [`NAME_SIMILARITY`] alike (and not equal: [`same_names`]
/// proposes those) among `members`, which have the same numbers. Each posting looked at counts
/// against `budget`.
fn similar_names(
    named: &[Named],
    members: &[usize],
    budget: &mut usize,
    found: &mut BTreeMap<(usize, usize), PairEvidence>,
) {
    // One object per name (the oldest; [`same_names`] pairs the rest with it), labels left out.
    let mut by_name: HashMap<&str, (usize, usize)> = HashMap::new();
    for &index in members {
        by_name.entry(&named[index].folded).or_insert((index, 0)).1 += 1;
    }
    let mut members: Vec<usize> =
        by_name.into_values().filter(|(_, count)| *count <= MAX_SAME_NAME).map(|(index, _)| index).collect();
    members.sort_unstable();
    let mut ids: HashMap<String, u32> = HashMap::new();
    let sets: Vec<Vec<u32>> = members
        .iter()
        .map(|&index| {
            let mut set: Vec<u32> = trigrams(&named[index].folded)
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
                if jaccard(set, &sets[other]) >= NAME_SIMILARITY {
                    found.entry(key(members[m], members[other])).or_default();
                }
            }
            postings.entry(gram).or_default().push(m);
        }
    }
}

/// Objects of a type whose vectors are [`COSINE`] alike, each with its [`NEIGHBOURS`] closest.
/// Reads the vector index as it stands; says whether some objects still wait for a vector.
fn similar_meanings(
    structure: &KnowledgeStructure,
    named: &[Named],
    by_type: &BTreeMap<&str, Vec<usize>>,
    found: &mut BTreeMap<(usize, usize), PairEvidence>,
) -> bool {
    let Some(index) = structure.built_vector_index() else { return false };
    let index_of: HashMap<&str, usize> = named.iter().enumerate().map(|(i, c)| (c.id, i)).collect();
    // Copied out, so searches of the session do not wait while they are compared.
    let (mut vectors, pending) = {
        let index = index.lock().unwrap_or_else(|p| p.into_inner());
        let pending = index.pending().next().is_some();
        let mut vectors: BTreeMap<&str, Vec<(usize, Vector)>> = BTreeMap::new();
        for (id, vector) in index.rows() {
            let Some(&i) = index_of.get(id) else { continue };
            if by_type.contains_key(named[i].ty) {
                vectors.entry(named[i].ty).or_default().push((i, vector));
            }
        }
        (vectors, pending)
    };
    let mut budget = MAX_COSINES;
    for of_type in vectors.values_mut() {
        let count = of_type.len() * of_type.len().saturating_sub(1) / 2;
        if of_type.len() < 2 || count > budget {
            continue;
        }
        budget -= count;
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
