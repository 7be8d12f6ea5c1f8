//! The health of a registered graph, one score from 0.0 to 1.0 weighted as the reference weighs
//! it: what `check_graph_health` reports and what the `graph_health` and `graph_freshness`
//! sweepers watch. One definition, so a score never differs between the tool and a sweep.
//!
//! | part | weight | score |
//! |---|---|---|
//! | component versions | 0.3 | share of versioned `Component` objects current by the graph's last recorded check ([`crate::versions`]; 1 without any) |
//! | entry freshness | 0.1 | 1 when the registry entry was updated within 7 days |
//! | contradictions | 0.3 | 1 without `mutual_exclusion` / `functional_relation` contradictions |
//! | verification coverage | 0.2 | share of verified subjects whose newest `VerificationRecord` was checked within 30 days (1 without any) |
//! | dead letters | 0.1 | 1 without dead-lettered tasks of the graph's session, else 0.5 |

use time::format_description::well_known::Rfc3339;
use time::{Duration, OffsetDateTime};

use cks_core::KnowledgeStructure;
use cks_core::validate::{contradictions, provenance_freshness};

use crate::versions::{VersionRecord, components};

/// How long a registry entry stays fresh after an update.
pub const FRESHNESS_TTL: Duration = Duration::days(7);
/// How long a verification counts after its check.
pub const COVERAGE_TTL: Duration = Duration::days(30);

/// A time as the registry and `VerificationRecord`s write it (RFC 3339; one without an offset is
/// UTC, as the reference reads it).
pub fn parse_time(text: &str) -> Option<OffsetDateTime> {
    OffsetDateTime::parse(text, &Rfc3339).or_else(|_| OffsetDateTime::parse(&format!("{text}Z"), &Rfc3339)).ok()
}

/// Whether an entry updated at `updated_at` is fresh at `now`; `None` when the time cannot be read.
pub fn is_fresh(updated_at: &str, now: OffsetDateTime) -> Option<bool> {
    Some(now - parse_time(updated_at)? < FRESHNESS_TTL)
}

/// What the graph itself shows: counted once, scored by [`GraphHealth`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GraphContent {
    /// `Component` objects that record a version.
    pub components: usize,
    /// Those whose recorded version is the one their code was last found to publish.
    pub components_current: usize,
    pub contradictions: usize,
    /// Verified subjects (and records linked to no subject), as the provenance staleness rule
    /// judges them: a subject is as fresh as its newest record.
    pub records: usize,
    /// Those checked within [`COVERAGE_TTL`] of `now`.
    pub records_fresh: usize,
    pub objects: usize,
    pub relations: usize,
    /// When the next fresh record stops counting (the score can change then without a commit).
    pub next_record_expiry: Option<OffsetDateTime>,
}

impl GraphContent {
    /// Measures `structure` at `now`, its components against `versions`, the graph's last recorded
    /// check (none: no component is known to be current).
    pub fn measure(structure: &KnowledgeStructure, now: OffsetDateTime, versions: Option<&VersionRecord>) -> Self {
        let freshness = provenance_freshness(structure, COVERAGE_TTL, now);
        let components = components(structure);
        GraphContent {
            components_current: versions.map_or(0, |record| record.up_to_date(&components)),
            components: components.len(),
            contradictions: contradictions(structure).len(),
            records: freshness.judged,
            records_fresh: freshness.judged - freshness.stale.len(),
            objects: structure.len(),
            relations: structure.relations().count(),
            next_record_expiry: freshness.next_stale_at,
        }
    }
}

/// A graph's health at one moment.
#[derive(Clone, Debug, PartialEq)]
pub struct GraphHealth {
    pub content: GraphContent,
    /// The entry's freshness; `None` when its time cannot be read.
    pub fresh: Option<bool>,
    /// Dead-lettered tasks of the graph's session.
    pub dead_letters: usize,
}

impl GraphHealth {
    pub fn version_score(&self) -> f64 {
        match self.content.components {
            0 => 1.0,
            total => self.content.components_current as f64 / total as f64,
        }
    }

    pub fn freshness_score(&self) -> f64 {
        if self.fresh == Some(true) { 1.0 } else { 0.0 }
    }

    pub fn contradiction_score(&self) -> f64 {
        if self.content.contradictions == 0 { 1.0 } else { 0.0 }
    }

    pub fn coverage_score(&self) -> f64 {
        match self.content.records {
            0 => 1.0,
            total => self.content.records_fresh as f64 / total as f64,
        }
    }

    pub fn dead_letter_score(&self) -> f64 {
        if self.dead_letters == 0 { 1.0 } else { 0.5 }
    }

    /// The weighted score, summed in the reference's order so equal inputs give the same float.
    pub fn score(&self) -> f64 {
        0.3 * self.version_score()
            + 0.1 * self.freshness_score()
            + 0.3 * self.contradiction_score()
            + 0.2 * self.coverage_score()
            + 0.1 * self.dead_letter_score()
    }

    /// When the score next changes by itself (the entry or a record ages), if it does.
    pub fn next_change(&self, updated_at: &str) -> Option<OffsetDateTime> {
        let entry_ages =
            (self.fresh == Some(true)).then(|| parse_time(updated_at)).flatten().map(|at| at + FRESHNESS_TTL);
        [entry_ages, self.content.next_record_expiry].into_iter().flatten().min()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn at(text: &str) -> OffsetDateTime {
        OffsetDateTime::parse(text, &Rfc3339).unwrap()
    }

    #[test]
    fn measures_and_scores_as_weighted() {
        let structure = cks_core::json::parse_value(json!({"objects": [
            {"identity": {"id": "c", "type": "Component", "name": "c"}, "structure": {"version": "1.0"}},
            {"identity": {"id": "r1", "type": "VerificationRecord", "name": "v"}, "structure": {"checked_at": "2026-11-20T00:00:00Z"}},
            {"identity": {"id": "r2", "type": "VerificationRecord", "name": "v"}, "structure": {"checked_at": "2026-01-01T00:00:00"}},
            {"identity": {"id": "r3", "type": "VerificationRecord", "name": "v"}, "structure": {"checked_at": "never"}},
            // r0 is older than r1, for the same subject: the subject is as fresh as r1.
            {"identity": {"id": "s", "type": "Source", "name": "s"}},
            {"identity": {"id": "r0", "type": "VerificationRecord", "name": "v"}, "structure": {"checked_at": "2025-01-01T00:00:00Z"}},
            {"identity": {"id": "l0", "type": "Relation", "name": "l"}, "structure": {"participants": ["s", "r0"], "relation_type": "verified_by"}},
            {"identity": {"id": "l1", "type": "Relation", "name": "l"}, "structure": {"participants": ["s", "r1"], "relation_type": "verified_by"}},
        ]}))
        .unwrap();
        let now = at("2026-12-01T00:00:00Z");
        let content = GraphContent::measure(&structure, now, None);
        // Judged: subject s (by r1, fresh) and r2 standing alone (stale); r3's time is unreadable.
        assert_eq!((content.components, content.records, content.records_fresh), (1, 2, 1));
        assert_eq!(content.next_record_expiry, Some(at("2026-12-20T00:00:00Z")));
        let health = GraphHealth { content, fresh: is_fresh("2026-11-28T00:00:00Z", now), dead_letters: 2 };
        assert_eq!(health.fresh, Some(true));
        let expected = 0.3 * 0.0 + 0.1 * 1.0 + 0.3 * 1.0 + 0.2 * (1.0 / 2.0) + 0.1 * 0.5;
        assert_eq!(health.score(), expected);
        // The entry ages on Dec 5, before the record does.
        assert_eq!(health.next_change("2026-11-28T00:00:00Z"), Some(at("2026-12-05T00:00:00Z")));
        assert_eq!(is_fresh("2026-11-20T00:00:00Z", now), Some(false));
        assert_eq!(is_fresh("yesterday", now), None);
    }
}
