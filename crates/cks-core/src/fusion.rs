//! Hybrid ranking: lexical (BM25) and vector (cosine) scores of the same candidates fused into
//! one score.
//!
//! BM25 scores are unbounded and their scale changes with the query, so each is divided by the
//! best of the query's candidates (the best lexical match scores 1); cosines are used as they
//! are. The fused score is the weighted sum `weight × cosine + (1 − weight) × bm25 / best`, over
//! the union of both sides' candidates, each scored on both sides (a candidate one side did not
//! find scores 0 there). Deterministic: equal scores fall back to the ids' order.

/// One candidate's scores.
#[derive(Clone, Debug, PartialEq)]
pub struct Fused<'a> {
    pub id: &'a str,
    /// The fused score.
    pub score: f64,
    /// BM25, when the object holds a query term.
    pub lexical: Option<f64>,
    /// Cosine similarity, when the object has a vector.
    pub vector: Option<f64>,
}

/// The weight of the cosine in the fused score, chosen on a development set of conversations
/// (see BENCHMARKS.md); the lexical side gets the rest.
pub const VECTOR_WEIGHT: f64 = 0.7;

/// Fuses the candidates' scores and keeps the best `limit`, best first, equal scores by id.
/// Each candidate appears once in `candidates` with whatever scores it has.
pub fn fuse<'a>(
    candidates: impl IntoIterator<Item = (&'a str, Option<f64>, Option<f64>)>,
    weight: f64,
    limit: usize,
) -> Vec<Fused<'a>> {
    let candidates: Vec<(&str, Option<f64>, Option<f64>)> = candidates.into_iter().collect();
    let best_lexical = candidates.iter().filter_map(|c| c.1).fold(0f64, f64::max);
    let mut fused: Vec<Fused> = candidates
        .into_iter()
        .map(|(id, lexical, vector)| {
            let lexical_part = match (lexical, best_lexical > 0.0) {
                (Some(score), true) => score / best_lexical,
                _ => 0.0,
            };
            let score = weight * vector.unwrap_or(0.0) + (1.0 - weight) * lexical_part;
            Fused { id, score, lexical, vector }
        })
        .collect();
    fused.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| a.id.cmp(b.id)));
    fused.truncate(limit);
    fused
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_are_the_weighted_sum_of_cosine_and_relative_bm25() {
        let fused = fuse([("a", Some(4.0), Some(0.2)), ("b", Some(2.0), Some(0.9)), ("c", None, Some(0.5))], 0.5, 10);
        let scores: Vec<(&str, f64)> = fused.iter().map(|f| (f.id, f.score)).collect();
        assert_eq!(scores, vec![("b", 0.7), ("a", 0.6), ("c", 0.25)]);
        assert_eq!(fused[2].lexical, None);
        assert_eq!(fused[0].vector, Some(0.9));
    }

    #[test]
    fn the_order_is_deterministic_and_limited() {
        let candidates =
            [("d", Some(1.0), None), ("b", Some(1.0), None), ("c", None, Some(0.3)), ("a", Some(1.0), None)];
        let once = fuse(candidates, 0.7, 3);
        let reversed = fuse(candidates.iter().rev().copied(), 0.7, 3);
        assert_eq!(once, reversed);
        assert_eq!(once.iter().map(|f| f.id).collect::<Vec<_>>(), vec!["a", "b", "d"]);
        assert!(fuse(candidates, 0.7, 0).is_empty());
        // Only one side: the weights do not matter to the order.
        let lexical_only = fuse([("x", Some(3.0), None), ("y", Some(5.0), None)], 0.9, 2);
        assert_eq!(lexical_only.iter().map(|f| f.id).collect::<Vec<_>>(), vec!["y", "x"]);
    }
}
