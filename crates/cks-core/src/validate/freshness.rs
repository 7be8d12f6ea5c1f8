//! How fresh each subject's provenance is: the rule the provenance staleness sweeper applies.
//!
//! A subject's provenance is its `VerificationRecord`s (linked by `verified_by (subject, record)`);
//! it is as fresh as its **newest** record. A record is re-checked by adding a newer one (records
//! are signed and never edited), so a subject whose newest record was checked less than the TTL
//! ago is fresh however old its earlier records are. A record linked to no subject stands alone.
//!
//! `checked_at` is read with the `verification_record` rule (every `Z` becomes `+00:00`, a naive
//! value is UTC); a record whose `checked_at` that rule rejects is ignored (validation reports
//! it). Where a record is linked to several subjects (an error validation reports), the last
//! link counts, as in the reference's sweeper.
//!
//! Decisions (the reference's sweeper differs): every record is judged by its subject's newest
//! one, where the reference reports each old record for ever once a newer one exists; a
//! `checked_at` with an explicit offset is read, where the reference skips it; a date without a
//! time is midnight UTC, where the reference's comparison raises and ends the sweep.

use serde_json::Value;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use time::{Duration, OffsetDateTime};

use super::binary;
use super::dates::verification_instant;
use crate::object::KnowledgeObject;
use crate::structure::KnowledgeStructure;

const RECORD_TYPE: &str = "VerificationRecord";
const VERIFIED_BY: &str = "verified_by";

/// The newest record of a subject whose provenance has gone stale.
#[derive(Debug, Clone, PartialEq)]
pub struct StaleRecord<'a> {
    pub record: &'a KnowledgeObject,
    /// The subject it verifies (`None` for a record linked to no subject).
    pub subject_id: Option<&'a str>,
    /// Its `checked_at` as stored.
    pub checked_at: &'a Value,
    /// Its `checked_at` as an instant.
    pub checked: OffsetDateTime,
}

/// What [`provenance_freshness`] finds.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ProvenanceFreshness<'a> {
    /// The stale subjects' newest records, in object order.
    pub stale: Vec<StaleRecord<'a>>,
    /// When the next fresh subject goes stale, if the structure does not change.
    pub next_stale_at: Option<OffsetDateTime>,
    /// How many subjects (and records linked to none) were judged: fresh ones are the rest.
    pub judged: usize,
}

/// Which subjects' provenance is stale at `now`: those whose newest record was checked `ttl` or
/// longer ago.
pub fn provenance_freshness(
    structure: &KnowledgeStructure,
    ttl: Duration,
    now: OffsetDateTime,
) -> ProvenanceFreshness<'_> {
    // The structure's kind index: the cost follows the records and their links, not the graph.
    let mut subject_of: HashMap<&str, &str> = HashMap::new();
    for object in structure.relations_of_type(VERIFIED_BY) {
        let Some(relation) = object.relation() else { continue };
        if let Some((subject, record)) = binary(&relation) {
            subject_of.insert(record, subject);
        }
    }

    // (linked, subject or record id) -> (position, record, subject, checked_at, instant) of the newest.
    type Newest<'a> = (usize, &'a KnowledgeObject, Option<&'a str>, &'a Value, OffsetDateTime);
    let mut newest: HashMap<(bool, &str), Newest<'_>> = HashMap::new();
    for (position, record) in structure.objects_of_type(RECORD_TYPE).into_iter().enumerate() {
        let Some(checked_at) = record.structure.get("checked_at") else { continue };
        let Some(checked) = verification_instant(Some(checked_at)) else { continue };
        let subject = subject_of.get(record.id()).copied();
        let group = (subject.is_some(), subject.unwrap_or(record.id()));
        let candidate = (position, record.as_ref(), subject, checked_at, checked);
        match newest.entry(group) {
            Entry::Vacant(slot) => {
                slot.insert(candidate);
            }
            // A later record checked at the same instant is the newer one.
            Entry::Occupied(mut slot) if checked >= slot.get().4 => {
                slot.insert(candidate);
            }
            Entry::Occupied(_) => {}
        }
    }

    let mut freshness = ProvenanceFreshness { judged: newest.len(), ..ProvenanceFreshness::default() };
    let mut stale = Vec::new();
    for (position, record, subject_id, checked_at, checked) in newest.into_values() {
        match checked.checked_add(ttl) {
            Some(stale_at) if stale_at > now => {
                freshness.next_stale_at = Some(freshness.next_stale_at.map_or(stale_at, |at| at.min(stale_at)));
            }
            // A TTL reaching past the calendar: never stale.
            None if !ttl.is_negative() => {}
            _ => stale.push((position, StaleRecord { record, subject_id, checked_at, checked })),
        }
    }
    stale.sort_by_key(|(position, _)| *position);
    freshness.stale = stale.into_iter().map(|(_, record)| record).collect();
    freshness
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::*;
    use serde_json::json;
    use time::{Date, Month, Time};

    fn at(day: u8, hour: u8) -> OffsetDateTime {
        let date = Date::from_calendar_date(2026, Month::August, day).expect("date");
        date.with_time(Time::from_hms(hour, 0, 0).expect("time")).assume_utc()
    }

    fn record(id: &str, checked_at: &str) -> KnowledgeObject {
        obj(id, "VerificationRecord", json!({"checked_at": checked_at, "checked_via": "automated_http_check"}))
    }

    fn stale_ids(freshness: &ProvenanceFreshness<'_>) -> Vec<(String, Option<String>)> {
        freshness.stale.iter().map(|s| (s.record.id().to_owned(), s.subject_id.map(str::to_owned))).collect()
    }

    #[test]
    fn a_subject_is_as_fresh_as_its_newest_record() {
        let s = structure(vec![
            node("doc"),
            node("page"),
            record("old", "2026-08-01T00:00:00Z"),
            record("new", "2026-08-14T00:00:00Z"),
            record("page-v", "2026-08-02T12:00:00Z"),
            record("loose", "2026-08-03"),
            rel("l1", &["doc", "old"], "verified_by"),
            rel("l2", &["doc", "new"], "verified_by"),
            rel("l3", &["page", "page-v"], "verified_by"),
        ]);
        let ttl = Duration::days(10);
        let found = provenance_freshness(&s, ttl, at(15, 0));
        // doc's newest record is a day old; page's and the unlinked record are 12+ days old.
        assert_eq!(stale_ids(&found), [("page-v".to_owned(), Some("page".to_owned())), ("loose".to_owned(), None)]);
        assert_eq!(found.stale[0].checked_at, &json!("2026-08-02T12:00:00Z"));
        assert_eq!(found.stale[0].checked, at(2, 12));
        assert_eq!(found.next_stale_at, Some(at(24, 0)), "doc goes stale ten days after its newest check");

        // Before doc's old record was followed by a newer one, doc was stale.
        let before = structure(vec![
            node("doc"),
            record("old", "2026-08-01T00:00:00Z"),
            rel("l1", &["doc", "old"], "verified_by"),
        ]);
        assert_eq!(
            stale_ids(&provenance_freshness(&before, ttl, at(15, 0))),
            [("old".to_owned(), Some("doc".to_owned()))]
        );
        let an_hour_before = provenance_freshness(&before, ttl, at(10, 23));
        assert!(an_hour_before.stale.is_empty());
        assert_eq!(an_hour_before.next_stale_at, Some(at(11, 0)));
        let at_the_ttl = provenance_freshness(&before, ttl, at(11, 0));
        assert_eq!((at_the_ttl.stale.len(), at_the_ttl.next_stale_at), (1, None), "stale at exactly the TTL");
    }

    #[test]
    fn checked_at_is_read_as_the_verification_rule_reads_it() {
        let s = structure(vec![
            node("a"),
            node("b"),
            node("c"),
            record("offset", "2026-08-01T10:00:00+02:00"),
            record("naive", "2026-08-01"),
            record("bad", "last week"),
            obj("missing", "VerificationRecord", json!({})),
            rel("la", &["a", "offset"], "verified_by"),
            rel("lb", &["b", "naive"], "verified_by"),
            rel("lc", &["c", "bad"], "verified_by"),
        ]);
        let found = provenance_freshness(&s, Duration::days(1), at(15, 0));
        assert_eq!(
            stale_ids(&found),
            [("offset".to_owned(), Some("a".to_owned())), ("naive".to_owned(), Some("b".to_owned()))]
        );
        assert_eq!(found.stale[0].checked, at(1, 8));
        assert_eq!(found.stale[1].checked, at(1, 0));
        assert_eq!(found.next_stale_at, None);
    }

    #[test]
    fn ties_and_extreme_ttls() {
        let s = structure(vec![
            node("doc"),
            record("first", "2026-08-01T00:00:00Z"),
            record("second", "2026-08-01T00:00:00Z"),
            rel("l1", &["doc", "first"], "verified_by"),
            rel("l2", &["doc", "second"], "verified_by"),
        ]);
        assert_eq!(
            stale_ids(&provenance_freshness(&s, Duration::days(1), at(15, 0))),
            [("second".to_owned(), Some("doc".to_owned()))]
        );
        let forever = provenance_freshness(&s, Duration::MAX, at(15, 0));
        assert!(forever.stale.is_empty() && forever.next_stale_at.is_none());
        assert_eq!(provenance_freshness(&s, Duration::ZERO, at(1, 0)).stale.len(), 1);
    }
}
