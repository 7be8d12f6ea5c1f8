//! `temporal_validity` (CKS-EXT-TEMPORAL-VALIDITY): flags objects whose `valid_until` has passed.
//!
//! Every object is checked (relations and any type included). A missing or null `valid_until` is
//! skipped. The value is read as Python's `fromisoformat(str(v))` (so the number `20240101`
//! parses and `true` becomes the malformed `"True"`); a naive value is taken as UTC.
//! - Unparseable: **error** `Object '<id>' has malformed 'valid_until': <repr>` (no final period).
//! - Parsed and strictly before `now`: **warning** `Object '<id>' expired at <str(v)>.`
//!
//! `now` is injected through [`super::ValidationOptions::now`], so results are reproducible.

use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use time::OffsetDateTime;

use super::dates::temporal_instant;
use super::pyrepr::{py_repr, py_str};
use super::{Diagnostic, Severity, Stage};
use crate::object::KnowledgeObject;
use crate::structure::KnowledgeStructure;

const CODE: &str = "CKS-EXT-TEMPORAL-VALIDITY";

pub(crate) fn check(structure: &KnowledgeStructure, now: OffsetDateTime, out: &mut Vec<Diagnostic>) {
    for object in structure.objects() {
        let id = object.id();
        let value = match object.structure.get("valid_until") {
            None | Some(Value::Null) => continue,
            Some(value) => value,
        };
        match valid_until_instant(value) {
            None => out.push(malformed(id, value)),
            Some(expiry) if expiry < now => out.push(expired(id, value)),
            Some(_) => {}
        }
    }
}

fn malformed(id: &str, value: &Value) -> Diagnostic {
    let message = format!("Object '{id}' has malformed 'valid_until': {}", py_repr(value));
    Diagnostic::new(CODE, Severity::Error, Stage::Semantic, message, Some(id))
}

fn expired(id: &str, value: &Value) -> Diagnostic {
    let message = format!("Object '{id}' expired at {}.", py_str(value));
    Diagnostic::new(CODE, Severity::Warning, Stage::Semantic, message, Some(id))
}

/// The objects of a structure that have a `valid_until`, ordered by it, kept by the structure
/// once asked for ([`KnowledgeStructure::expiry_index`]) and updated with every change, so that
/// what has expired, and when the next object will, costs a lookup instead of a scan.
#[derive(Debug, Default)]
pub struct ExpiryIndex {
    /// (expiry, id) of every object with a readable `valid_until`.
    by_time: BTreeSet<(OffsetDateTime, String)>,
    /// id → its expiry, or `None` when its `valid_until` is malformed.
    of: HashMap<String, Option<OffsetDateTime>>,
}

impl ExpiryIndex {
    pub(crate) fn build(structure: &KnowledgeStructure) -> Self {
        let mut index = ExpiryIndex::default();
        for object in structure.objects() {
            index.insert(object);
        }
        index
    }

    pub(crate) fn insert(&mut self, object: &KnowledgeObject) {
        let value = match object.structure.get("valid_until") {
            None | Some(Value::Null) => return,
            Some(value) => value,
        };
        let expiry = valid_until_instant(value);
        if let Some(at) = expiry {
            self.by_time.insert((at, object.id().to_owned()));
        }
        self.of.insert(object.id().to_owned(), expiry);
    }

    pub(crate) fn remove(&mut self, object: &KnowledgeObject) {
        if let Some(Some(at)) = self.of.remove(object.id()) {
            self.by_time.remove(&(at, object.id().to_owned()));
        }
    }

    /// What [`expired_and_malformed`] reports, from the index: the objects expired before `now`
    /// (oldest first) and those whose `valid_until` is malformed.
    pub fn diagnostics(&self, structure: &KnowledgeStructure, now: OffsetDateTime) -> Vec<Diagnostic> {
        let value = |id: &str| structure.get(id).and_then(|o| o.structure.get("valid_until").cloned());
        let mut out: Vec<Diagnostic> = self
            .of
            .iter()
            .filter(|(_, expiry)| expiry.is_none())
            .filter_map(|(id, _)| Some(malformed(id, &value(id)?)))
            .collect();
        out.sort_by(|a, b| a.location.cmp(&b.location));
        for (_, id) in self.by_time.iter().take_while(|(at, _)| *at < now) {
            if let Some(value) = value(id) {
                out.push(expired(id, &value));
            }
        }
        out
    }

    /// The earliest expiry still to come at `now`.
    pub fn next(&self, now: OffsetDateTime) -> Option<OffsetDateTime> {
        self.by_time.range((now, String::new())..).next().map(|(at, _)| *at)
    }
}

/// The check's findings alone, as of `now` (without the always-on constraints a full
/// validation runs first): what a sweeper looking for expired facts needs.
pub fn expired_and_malformed(structure: &KnowledgeStructure, now: OffsetDateTime) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    check(structure, now, &mut out);
    out
}

/// A `valid_until` value as the check reads it; `None` when it is malformed.
pub fn valid_until_instant(value: &Value) -> Option<OffsetDateTime> {
    temporal_instant(&py_str(value))
}

/// The earliest `valid_until` still to come at `now` (read as the check reads it): when a
/// structure that does not change will next have an object expire.
pub fn next_expiry(structure: &KnowledgeStructure, now: OffsetDateTime) -> Option<OffsetDateTime> {
    structure
        .objects()
        .filter_map(|object| match object.structure.get("valid_until") {
            None | Some(Value::Null) => None,
            Some(value) => valid_until_instant(value),
        })
        .filter(|expiry| *expiry >= now)
        .min()
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::super::{Extension, Severity, ValidationOptions, validate};
    use serde_json::json;
    use time::{Date, Month, OffsetDateTime, Time};

    fn now() -> OffsetDateTime {
        let date = Date::from_calendar_date(2026, Month::August, 15).expect("date");
        date.with_time(Time::from_hms(12, 0, 0).expect("time")).assume_utc()
    }

    fn run(objects: Vec<crate::object::KnowledgeObject>) -> Vec<(Severity, String, String)> {
        let options =
            ValidationOptions { now: Some(now()), ..ValidationOptions::with_extensions([Extension::TemporalValidity]) };
        validate(&structure(objects), &options)
            .diagnostics
            .into_iter()
            .filter(|d| d.code == "CKS-EXT-TEMPORAL-VALIDITY")
            .map(|d| (d.severity, d.location.unwrap_or_default(), d.message))
            .collect()
    }

    #[test]
    fn the_index_answers_what_the_scan_does_through_changes() {
        let mut s = structure(vec![
            obj("past", "Fact", json!({"valid_until": "2026-08-14"})),
            obj("later", "Fact", json!({"valid_until": "2026-09-01"})),
            obj("bad", "Fact", json!({"valid_until": "someday"})),
            obj("none", "Fact", json!({})),
        ]);
        let same = |s: &crate::structure::KnowledgeStructure| {
            let key = |d: &super::Diagnostic| (d.location.clone(), d.severity, d.message.clone());
            let mut scanned: Vec<_> = super::expired_and_malformed(s, now()).iter().map(key).collect();
            let mut indexed: Vec<_> = s.expiry_index().diagnostics(s, now()).iter().map(key).collect();
            scanned.sort();
            indexed.sort();
            assert_eq!(scanned, indexed);
            assert_eq!(s.expiry_index().next(now()), super::next_expiry(s, now()));
            scanned.len()
        };
        assert_eq!(same(&s), 2);
        let mut log = crate::structure::ChangeSet::default();
        s.put(obj("later", "Fact", json!({"valid_until": "2026-08-01"})), &mut log).unwrap();
        s.put(obj("none", "Fact", json!({"valid_until": "2027-01-01"})), &mut log).unwrap();
        s.put(obj("bad", "Fact", json!({"valid_until": null})), &mut log).unwrap();
        s.remove("past", &mut log);
        assert_eq!(same(&s), 1);
        s.undo(log);
        assert_eq!(same(&s), 2);
    }

    #[test]
    fn the_next_expiry_is_the_earliest_still_to_come() {
        let s = structure(vec![
            obj("past", "Fact", json!({"valid_until": "2026-08-14"})),
            obj("later", "Fact", json!({"valid_until": "2026-09-01"})),
            obj("soon", "Fact", json!({"valid_until": "2026-08-15T13:00:00Z"})),
            obj("bad", "Fact", json!({"valid_until": "someday"})),
        ]);
        let soon =
            Date::from_calendar_date(2026, Month::August, 15).unwrap().with_time(Time::from_hms(13, 0, 0).unwrap());
        assert_eq!(super::next_expiry(&s, now()), Some(soon.assume_utc()));
        assert_eq!(super::next_expiry(&structure(vec![]), now()), None);
    }

    #[test]
    fn future_missing_null_and_exact_now_are_fine() {
        let objects = vec![
            obj("a", "Fact", json!({"valid_until": "2026-08-16"})),
            obj("b", "Fact", json!({})),
            obj("c", "Fact", json!({"valid_until": null})),
            obj("d", "Fact", json!({"valid_until": "2026-08-15T12:00:00Z"})),
            obj("e", "Fact", json!({"valid_until": "2026-08-15T13:00:00+01:00"})),
        ];
        assert_eq!(run(objects), []);
    }

    #[test]
    fn expired_values_warn_with_the_raw_value() {
        let objects = vec![
            obj("a", "Fact", json!({"valid_until": "2026-08-15T11:59:59"})),
            obj("b", "Fact", json!({"valid_until": 20240101})),
            obj("c", "Fact", json!({"valid_until": "2026-08-15T13:00:00+02:00"})),
            rel("r", &["a", "b"], "mentions"),
        ];
        let mut objects = objects;
        if let Some(last) = objects.last_mut() {
            last.structure.insert("valid_until", json!("2026-W01"));
        }
        assert_eq!(
            run(objects),
            [
                (Severity::Warning, "a".to_owned(), "Object 'a' expired at 2026-08-15T11:59:59.".to_owned()),
                (Severity::Warning, "b".to_owned(), "Object 'b' expired at 20240101.".to_owned()),
                (Severity::Warning, "c".to_owned(), "Object 'c' expired at 2026-08-15T13:00:00+02:00.".to_owned()),
                (Severity::Warning, "r".to_owned(), "Object 'r' expired at 2026-W01.".to_owned()),
            ]
        );
    }

    #[test]
    fn malformed_values_are_errors_without_a_final_period() {
        let objects = vec![
            obj("a", "Fact", json!({"valid_until": "next week"})),
            obj("b", "Fact", json!({"valid_until": true})),
            obj("c", "Fact", json!({"valid_until": ""})),
            obj("d", "Fact", json!({"valid_until": 5})),
        ];
        assert_eq!(
            run(objects),
            [
                (Severity::Error, "a".to_owned(), "Object 'a' has malformed 'valid_until': 'next week'".to_owned()),
                (Severity::Error, "b".to_owned(), "Object 'b' has malformed 'valid_until': True".to_owned()),
                (Severity::Error, "c".to_owned(), "Object 'c' has malformed 'valid_until': ''".to_owned()),
                (Severity::Error, "d".to_owned(), "Object 'd' has malformed 'valid_until': 5".to_owned()),
            ]
        );
    }
}
