//! `verification_record` (CKS-EXT-VERIFICATION-RECORD): a `VerificationRecord` states a technical
//! fact about an external check of one subject object, and nothing more.
//!
//! Links are the `verified_by` relations with exactly two participants `(subject, record)`.
//! For each `VerificationRecord`, independently (location = the record id):
//! 1. exactly one linked subject, and it exists;
//! 2. `checked_at` is a non-empty string accepted by the verification date rule (see `dates`);
//!    no past/future check, so validation stays deterministic;
//! 3. `checked_via` is one of `automated_http_check`, `automated_search_check`, `manual_review`;
//! 4. `http_status`, when the key is present (even null), is an integer (not a bool or float) in 100–599;
//! 5. none of `reliability_score`, `confidence`, `score`, `reasons`, `warning_signs`,
//!    `recommendations` is present.
//!
//! The server's signature (`_cks_mcp_signature`) is checked by [`super::provenance`], with the
//! key the caller passes in.

use serde_json::Value;
use std::collections::HashMap;

use super::dates::verification_timestamp_ok;
use super::pyrepr::py_repr_opt;
use super::{Diagnostic, binary, semantic_error};
use crate::structure::KnowledgeStructure;

const CODE: &str = "CKS-EXT-VERIFICATION-RECORD";
const RECORD_TYPE: &str = "VerificationRecord";
const VERIFIED_BY: &str = "verified_by";
const METHODS: [&str; 3] = ["automated_http_check", "automated_search_check", "manual_review"];
const JUDGMENT_KEYS: [&str; 6] =
    ["reliability_score", "confidence", "score", "reasons", "warning_signs", "recommendations"];

pub(crate) fn check(structure: &KnowledgeStructure, out: &mut Vec<Diagnostic>) {
    let mut subjects_by_record: HashMap<&str, Vec<&str>> = HashMap::new();
    for object in structure.relations() {
        let Some(relation) = object.relation() else {
            continue;
        };
        if relation.relation_type != VERIFIED_BY {
            continue;
        }
        if let Some((subject, record)) = binary(&relation) {
            subjects_by_record.entry(record).or_default().push(subject);
        }
    }

    for object in structure.objects() {
        if object.identity.r#type != RECORD_TYPE {
            continue;
        }
        let id = object.id();
        let data = &object.structure;
        let subjects = subjects_by_record.get(id).map_or(&[][..], Vec::as_slice);
        match subjects {
            [subject] if !structure.contains(subject) => out.push(semantic_error(
                CODE,
                format!("VerificationRecord '{id}' references unknown subject object '{subject}'."),
                id,
            )),
            [_] => {}
            _ => out.push(semantic_error(
                CODE,
                format!(
                    "VerificationRecord '{id}' must have exactly one '{VERIFIED_BY}' relation to the subject it \
                     verifies (found {}).",
                    subjects.len()
                ),
                id,
            )),
        }

        let checked_at = data.get("checked_at");
        if !verification_timestamp_ok(checked_at) {
            out.push(semantic_error(
                CODE,
                format!(
                    "VerificationRecord '{id}' must carry a well-formed ISO 8601 'checked_at' timestamp (got {}).",
                    py_repr_opt(checked_at)
                ),
                id,
            ));
        }

        let checked_via = data.get("checked_via");
        let recognised = matches!(checked_via, Some(Value::String(s)) if METHODS.contains(&s.as_str()));
        if !recognised {
            out.push(semantic_error(
                CODE,
                format!(
                    "VerificationRecord '{id}' has 'checked_via'={}, which is not one of the recognized verification \
                     methods ({}).",
                    py_repr_opt(checked_via),
                    METHODS.join(", ")
                ),
                id,
            ));
        }

        if let Some(status) = data.get("http_status") {
            let valid = matches!(status, Value::Number(n) if n.as_i64().is_some_and(|v| (100..=599).contains(&v)));
            if !valid {
                out.push(semantic_error(
                    CODE,
                    format!(
                        "VerificationRecord '{id}' has 'http_status'={}, which is not a valid HTTP status code (100-599).",
                        py_repr_opt(Some(status))
                    ),
                    id,
                ));
            }
        }

        let mut leaked: Vec<&str> = JUDGMENT_KEYS.iter().copied().filter(|k| data.contains_key(k)).collect();
        if !leaked.is_empty() {
            leaked.sort_unstable();
            out.push(semantic_error(
                CODE,
                format!(
                    "VerificationRecord '{id}' must not carry qualitative judgment fields ({}); a verification record \
                     states a technical fact about the check, not an opinion about the subject.",
                    leaked.join(", ")
                ),
                id,
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::Extension;
    use super::super::test_support::*;
    use serde_json::json;

    fn run(objects: Vec<crate::object::KnowledgeObject>) -> Vec<(String, String)> {
        located(&run_ext(Extension::VerificationRecord, objects))
    }

    fn record(id: &str, structure: serde_json::Value) -> crate::object::KnowledgeObject {
        obj(id, "VerificationRecord", structure)
    }

    #[test]
    fn well_formed_record_passes() {
        let objects = vec![
            node("doc"),
            record(
                "v",
                json!({"checked_at": "2026-08-15T10:00:00Z", "checked_via": "automated_http_check", "http_status": 200}),
            ),
            record("w", json!({"checked_at": "2026-08-15T10:00:00+02:00", "checked_via": "manual_review"})),
            rel("l1", &["doc", "v"], "verified_by"),
            rel("l2", &["doc", "w"], "verified_by"),
        ];
        assert_eq!(run(objects), []);
    }

    #[test]
    fn every_field_rule_reports_with_python_reprs() {
        let objects = vec![
            node("doc"),
            record(
                "v",
                json!({"checked_at": "yesterday", "checked_via": "web_fetch", "http_status": 200.0, "score": 1, "reasons": []}),
            ),
            rel("l1", &["doc", "v"], "verified_by"),
        ];
        assert_eq!(
            run(objects),
            pairs(&[
                (
                    "v",
                    "VerificationRecord 'v' has 'checked_via'='web_fetch', which is not one of the recognized verification methods (automated_http_check, automated_search_check, manual_review)."
                ),
                (
                    "v",
                    "VerificationRecord 'v' has 'http_status'=200.0, which is not a valid HTTP status code (100-599)."
                ),
                (
                    "v",
                    "VerificationRecord 'v' must carry a well-formed ISO 8601 'checked_at' timestamp (got 'yesterday')."
                ),
                (
                    "v",
                    "VerificationRecord 'v' must not carry qualitative judgment fields (reasons, score); a verification record states a technical fact about the check, not an opinion about the subject."
                ),
            ])
        );
    }

    #[test]
    fn missing_fields_links_and_bad_status_values() {
        let objects = vec![
            record("v", json!({"http_status": true})),
            record("w", json!({"checked_at": "2026-08-15", "checked_via": ["manual_review"], "http_status": 600})),
            rel("l", &["ghost", "w"], "verified_by"),
        ];
        assert_eq!(
            run(objects),
            pairs(&[
                (
                    "v",
                    "VerificationRecord 'v' has 'checked_via'=None, which is not one of the recognized verification methods (automated_http_check, automated_search_check, manual_review)."
                ),
                (
                    "v",
                    "VerificationRecord 'v' has 'http_status'=True, which is not a valid HTTP status code (100-599)."
                ),
                ("v", "VerificationRecord 'v' must carry a well-formed ISO 8601 'checked_at' timestamp (got None)."),
                (
                    "v",
                    "VerificationRecord 'v' must have exactly one 'verified_by' relation to the subject it verifies (found 0)."
                ),
                (
                    "w",
                    "VerificationRecord 'w' has 'checked_via'=['manual_review'], which is not one of the recognized verification methods (automated_http_check, automated_search_check, manual_review)."
                ),
                ("w", "VerificationRecord 'w' has 'http_status'=600, which is not a valid HTTP status code (100-599)."),
                ("w", "VerificationRecord 'w' references unknown subject object 'ghost'."),
            ])
        );
        let null_status = vec![
            node("d"),
            record("v", json!({"checked_at": "2026-08-15", "checked_via": "manual_review", "http_status": null})),
            rel("l", &["d", "v"], "verified_by"),
        ];
        assert_eq!(
            run(null_status),
            pairs(&[(
                "v",
                "VerificationRecord 'v' has 'http_status'=None, which is not a valid HTTP status code (100-599)."
            )])
        );
    }
}
