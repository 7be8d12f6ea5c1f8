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
//! [`lexical_context`] first lends each candidate's BM25 a share of its neighbours': the answer
//! to a question often sits next to the object whose words match it (the reply after a question,
//! the paragraph after a heading) and shares neither its words nor its meaning.

/// One candidate's scores.
#[derive(Clone, Debug, PartialEq)]
pub struct Fused<'a> {
    pub id: &'a str,
    /// The fused score, in `0..=1`.
    pub score: f64,
    /// The word side's score it was fused with (BM25, with what neighbours lent it), when positive.
    pub lexical: Option<f64>,
    /// Cosine similarity, when the object has a vector.
    pub vector: Option<f64>,
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
            Fused { id, score, lexical: bm25, vector: cosine }
        })
        .collect();
    fused.sort_by(best_first);
    fused.truncate(limit);
    fused
}

/// What a neighbour's match counts for, against a candidate's own ([`lexical_context`]):
/// evidence at one remove counts half. It must never outweigh an object's own words: on
/// documents grouped by topic, a stronger share lifts a match's whole group above the answer
/// (and the fused ranking below its vector side), while on conversations half keeps most of
/// what neighbours add (BENCHMARKS.md has both).
const CONTEXT_WEIGHT: f64 = 0.5;

/// Each candidate with its own BM25 (`own`) and what its `neighbours` lend it:
/// [`CONTEXT_WEIGHT`] times the mean of their own BM25, a neighbour that holds no query word
/// counting 0. In the candidates' order.
pub fn lexical_context<'a>(
    candidates: impl IntoIterator<Item = &'a str>,
    mut own: impl FnMut(&'a str) -> f64,
    neighbours: impl Fn(&'a str) -> Vec<&'a str>,
) -> Vec<(&'a str, f64, f64)> {
    candidates
        .into_iter()
        .map(|id| {
            let theirs: Vec<f64> = neighbours(id).into_iter().map(&mut own).collect();
            let lent =
                if theirs.is_empty() { 0.0 } else { CONTEXT_WEIGHT * theirs.iter().sum::<f64>() / theirs.len() as f64 };
            (id, own(id), lent)
        })
        .collect()
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

    /// A sequence a, b, c, d, e: each object's neighbours are the ones beside it.
    fn beside(id: &str) -> Vec<&'static str> {
        const ORDER: [&str; 5] = ["a", "b", "c", "d", "e"];
        let Some(at) = ORDER.iter().position(|o| *o == id) else { return Vec::new() };
        [at.checked_sub(1), Some(at + 1)].into_iter().flatten().filter_map(|i| ORDER.get(i).copied()).collect()
    }

    #[test]
    fn neighbours_lend_half_the_mean_of_their_bm25() {
        let own = |id: &str| match id {
            "b" => 3.0,
            "d" => 1.0,
            _ => 0.0,
        };
        let lent = lexical_context(["c", "a", "b", "x"], own, beside);
        // c: half the mean of b's 3 and d's 1; a: half its one neighbour b's 3; b: a's and c's
        // nothing; x has no neighbours.
        assert_eq!(lent, vec![("c", 0.0, 1.0), ("a", 0.0, 1.5), ("b", 3.0, 0.0), ("x", 0.0, 0.0)]);
    }

    #[test]
    fn what_neighbours_lend_never_outweighs_what_they_hold() {
        // However well the neighbours match, a candidate gains less than their best own score.
        let own = |id: &str| if id == "x" { 0.0 } else { 7.0 };
        for (id, _, lent) in lexical_context(["a", "c", "e"], own, beside) {
            assert!(lent < 7.0, "{id} was lent {lent}");
        }
    }

    #[test]
    fn a_ranking_fused_with_an_empty_side_is_that_ranking() {
        // Ids out of alphabetical order, so that ties broken by id would show.
        let words = [("d", Some(9.0), None), ("b", Some(4.5), None), ("c", Some(1.0), None), ("a", Some(0.2), None)];
        let meanings = [("z", None, Some(0.9)), ("m", None, Some(0.5)), ("q", None, Some(-0.1))];
        fn ids(fused: Vec<Fused<'_>>) -> Vec<&str> {
            fused.into_iter().map(|f| f.id).collect()
        }
        for weight in [0.1, 0.35, 0.65, 0.9] {
            assert_eq!(ids(fuse(words, weight, 10)), vec!["d", "b", "c", "a"], "weight {weight}");
            assert_eq!(ids(fuse(meanings, weight, 10)), vec!["z", "m", "q"], "weight {weight}");
        }
    }

    #[test]
    fn two_sides_that_agree_keep_their_order() {
        // Each candidate ranks the same on both sides: the fused order is that order, whatever
        // the scales and the weight.
        let candidates: Vec<(String, Option<f64>, Option<f64>)> = (0..20)
            .map(|i| (format!("o{:02}", 19 - i), Some(30.0 / (1.0 + f64::from(i))), Some(0.9 - 0.04 * f64::from(i))))
            .collect();
        for weight in [0.1, 0.5, 0.65, 0.9] {
            let fused = fuse(candidates.iter().map(|(id, l, v)| (id.as_str(), *l, *v)), weight, 20);
            let order: Vec<&str> = fused.iter().map(|f| f.id).collect();
            let expected: Vec<&str> = candidates.iter().map(|(id, _, _)| id.as_str()).collect();
            assert_eq!(order, expected, "weight {weight}");
        }
    }
}
