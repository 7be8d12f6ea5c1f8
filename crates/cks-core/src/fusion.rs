//! Hybrid ranking: lexical (BM25) and vector (cosine) scores of the same candidates fused into
//! one score.
//!
//! BM25 scores are unbounded and their scale changes with the query; cosines of a static model
//! sit in a narrow band. So each side is min-max normalised over the candidates (the best scores
//! 1, the worst 0) and the fused score is `weight × cosine' + (1 − weight) × bm25'`, over the
//! union of both sides' candidates, each scored on both sides. A candidate without a vector
//! counts as the worst cosine; one without a query word as a BM25 of 0. Deterministic: equal
//! scores fall back to the ids' order.
//!
//! [`with_context`] then lends each candidate a share of its neighbours' scores: the answer to
//! a question often sits next to the object that matches it (the reply after a question, the
//! paragraph after a heading) and shares neither its words nor its meaning.

use std::collections::{HashMap, HashSet};

/// One candidate's scores.
#[derive(Clone, Debug, PartialEq)]
pub struct Fused<'a> {
    pub id: &'a str,
    /// The fused score, in `0..=1`.
    pub score: f64,
    /// BM25, when the object holds a query word.
    pub lexical: Option<f64>,
    /// Cosine similarity, when the object has a vector.
    pub vector: Option<f64>,
    /// What its neighbours lent it ([`with_context`]), when they lent anything.
    pub context: Option<f64>,
}

/// Fuses the candidates' scores and keeps the best `limit`, best first, equal scores by id.
/// Each candidate appears once in `candidates` with whatever scores it has.
pub fn fuse<'a>(
    candidates: impl IntoIterator<Item = (&'a str, Option<f64>, Option<f64>)>,
    weight: f64,
    limit: usize,
) -> Vec<Fused<'a>> {
    let candidates: Vec<(&str, Option<f64>, Option<f64>)> = candidates.into_iter().collect();
    let lexical = Scale::of(candidates.iter().map(|c| c.1.unwrap_or(0.0)));
    let vector = Scale::of(candidates.iter().filter_map(|c| c.2));
    let mut fused: Vec<Fused> = candidates
        .into_iter()
        .map(|(id, bm25, cosine)| {
            let lexical_part = lexical.place(bm25.unwrap_or(0.0));
            let vector_part = cosine.map_or(0.0, |c| vector.place(c));
            let score = weight * vector_part + (1.0 - weight) * lexical_part;
            Fused { id, score, lexical: bm25, vector: cosine, context: None }
        })
        .collect();
    fused.sort_by(best_first);
    fused.truncate(limit);
    fused
}

/// The share of its best neighbour's score a candidate gains ([`with_context`]); chosen on a
/// development set of conversations (BENCHMARKS.md).
const CONTEXT_WEIGHT: f64 = 0.3;

/// How many of the best candidates bring their neighbours in as candidates of their own.
const CONTEXT_SEEDS: usize = 10;

/// Each candidate's score raised by [`CONTEXT_WEIGHT`] times the best score among its
/// `neighbours`, then the best `limit`, best first, equal scores by id. The neighbours of the
/// best few candidates join as candidates too (scoring what their neighbours lend them), so the
/// object next to a strong match can be found though nothing in it matches. What a candidate
/// gains comes from the scores before any gain, and `neighbours` must be symmetric (each
/// candidate lends to its neighbours rather than asking each of them).
pub fn with_context<'a>(
    mut fused: Vec<Fused<'a>>,
    neighbours: impl Fn(&str) -> Vec<&'a str>,
    limit: usize,
) -> Vec<Fused<'a>> {
    type Fast = foldhash::fast::RandomState;
    fused.sort_by(best_first);
    let mut lent: HashMap<&'a str, f64, Fast> = HashMap::default();
    let mut joining: Vec<&'a str> = Vec::new();
    for (rank, lender) in fused.iter().enumerate().filter(|(_, f)| f.score > 0.0) {
        for near in neighbours(lender.id) {
            let best = lent.entry(near).or_insert(0.0);
            *best = best.max(lender.score);
            if rank < CONTEXT_SEEDS {
                joining.push(near);
            }
        }
    }
    let present: HashSet<&str, Fast> = fused.iter().map(|f| f.id).collect();
    joining.sort_unstable();
    joining.dedup();
    joining.retain(|id| !present.contains(id));
    fused.extend(joining.into_iter().map(|id| Fused { id, score: 0.0, lexical: None, vector: None, context: None }));
    for f in &mut fused {
        if let Some(gain) = lent.get(f.id).map(|best| CONTEXT_WEIGHT * best) {
            f.score += gain;
            f.context = Some(gain);
        }
    }
    fused.sort_by(best_first);
    fused.truncate(limit);
    fused
}

/// The better score first; equal scores by id.
fn best_first(a: &Fused, b: &Fused) -> std::cmp::Ordering {
    b.score.total_cmp(&a.score).then_with(|| a.id.cmp(b.id))
}

/// The range of one side's scores.
struct Scale {
    low: f64,
    high: f64,
}

impl Scale {
    fn of(scores: impl Iterator<Item = f64>) -> Scale {
        scores.fold(Scale { low: f64::INFINITY, high: f64::NEG_INFINITY }, |s, x| Scale {
            low: s.low.min(x),
            high: s.high.max(x),
        })
    }

    /// Where `score` lies between the worst (0) and the best (1). When all scores are equal,
    /// a positive one counts as the best: it still beats a side that found nothing.
    fn place(&self, score: f64) -> f64 {
        if self.high - self.low > f64::EPSILON {
            (score - self.low) / (self.high - self.low)
        } else if score > 0.0 {
            1.0
        } else {
            0.0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_are_the_weighted_sum_of_both_sides_normalised() {
        let fused = fuse([("a", Some(4.0), Some(0.2)), ("b", Some(2.0), Some(0.6)), ("c", None, Some(0.4))], 0.5, 10);
        let scores: Vec<(&str, f64)> = fused.iter().map(|f| (f.id, (f.score * 1e9).round() / 1e9)).collect();
        // a: 0.5 × 0 + 0.5 × 1; b: 0.5 × 1 + 0.5 × 0.5; c: 0.5 × 0.5 + 0.5 × 0.
        assert_eq!(scores, vec![("b", 0.75), ("a", 0.5), ("c", 0.25)]);
        assert_eq!(fused[2].lexical, None);
        assert_eq!(fused[0].vector, Some(0.6));
        // A candidate without a vector counts as the worst cosine.
        let fused = fuse([("a", Some(1.0), None), ("b", None, Some(0.3))], 0.7, 10);
        let scores: Vec<(&str, f64)> = fused.iter().map(|f| (f.id, (f.score * 1e9).round() / 1e9)).collect();
        assert_eq!(scores, vec![("b", 0.7), ("a", 0.3)]);
    }

    #[test]
    fn the_order_is_deterministic_and_limited() {
        let candidates =
            [("d", Some(1.0), None), ("b", Some(1.0), None), ("c", None, Some(0.3)), ("a", Some(1.0), None)];
        let once = fuse(candidates, 0.7, 3);
        let reversed = fuse(candidates.iter().rev().copied(), 0.7, 3);
        assert_eq!(once, reversed);
        // c's cosine is the best (only) one: 0.7; a, b and d tie at 0.3 and go by id.
        assert_eq!(once.iter().map(|f| f.id).collect::<Vec<_>>(), vec!["c", "a", "b"]);
        assert!(fuse(candidates, 0.7, 0).is_empty());
        // Only one side: the weights do not matter to the order.
        let lexical_only = fuse([("x", Some(3.0), None), ("y", Some(5.0), None)], 0.9, 2);
        assert_eq!(lexical_only.iter().map(|f| f.id).collect::<Vec<_>>(), vec!["y", "x"]);
    }

    fn scored(id: &str, score: f64) -> Fused<'_> {
        Fused { id, score, lexical: Some(score), vector: None, context: None }
    }

    /// A sequence a, b, c, d, e: each object's neighbours are the ones beside it.
    fn beside(id: &str) -> Vec<&'static str> {
        const ORDER: [&str; 5] = ["a", "b", "c", "d", "e"];
        let Some(at) = ORDER.iter().position(|o| *o == id) else { return Vec::new() };
        [at.checked_sub(1), Some(at + 1)].into_iter().flatten().filter_map(|i| ORDER.get(i).copied()).collect()
    }

    #[test]
    fn neighbours_lend_a_share_of_their_best_score() {
        let ranked = with_context(vec![scored("c", 1.0), scored("e", 0.5)], beside, 10);
        let scores: Vec<(&str, f64, Option<f64>)> = ranked
            .iter()
            .map(|f| (f.id, (f.score * 1e9).round() / 1e9, f.context.map(|c| (c * 1e9).round() / 1e9)))
            .collect();
        // c gains nothing (b and d did not score); nor does e (its only neighbour, d, did not).
        // b and d join as c's neighbours, with 0.3 × 1.0 each; d's best neighbour is c, not e.
        assert_eq!(scores, vec![("c", 1.0, None), ("e", 0.5, None), ("b", 0.3, Some(0.3)), ("d", 0.3, Some(0.3))]);
        // The joined keep no side's score of their own.
        assert_eq!((ranked[2].lexical, ranked[2].vector), (None, None));
    }

    #[test]
    fn a_weak_match_next_to_a_strong_one_overtakes_a_lone_one() {
        let ranked = with_context(vec![scored("a", 1.0), scored("b", 0.4), scored("e", 0.5)], beside, 2);
        // b: 0.4 + 0.3 × 1.0 = 0.7 > e's 0.5; a gains 0.3 × 0.4 from b (gains are lent from the
        // scores before any gain).
        assert_eq!(ranked.iter().map(|f| f.id).collect::<Vec<_>>(), vec!["a", "b"]);
        assert!((ranked[0].score - 1.12).abs() < 1e-9);
        // The input's order does not matter.
        let reversed = with_context(vec![scored("e", 0.5), scored("b", 0.4), scored("a", 1.0)], beside, 2);
        assert_eq!(ranked, reversed);
        assert!(with_context(vec![scored("a", 1.0)], |_| Vec::new(), 0).is_empty());
    }
}
