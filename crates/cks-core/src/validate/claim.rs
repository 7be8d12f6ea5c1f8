//! `claim_integrity` (CKS-EXT-CLAIM-INTEGRITY): shape and consistency of `Claim` objects.
//!
//! For each `Claim`, in structure order, located at the claim id, in this order:
//! 1. `statement` is a non-empty string;
//! 2. `confidence` is a non-bool number in [0, 1] (a missing one fails);
//! 3. `author` is a non-empty string;
//! 4. `status` is one of accepted, draft, proposed, rejected, superseded;
//! 5. `created_at` passes the claim date rule (see `dates`: a trailing `Z` or no offset; an
//!    explicit offset is rejected);
//! 6. a non-null `valid_from` / `valid_until` passes the same rule;
//! 7. a non-null `agent` is a string;
//! 8. `provenance_ids`, `supporting_claims`, `contradicting_claims`, when present (null
//!    included), are lists of strings; if any is not, the claim's remaining checks are skipped;
//! 9. every listed id exists (duplicates are reported again);
//! 10. supporting and contradicting ids that exist are Claims;
//! 11. the claim does not list itself;
//! 12. no id is both supporting and contradicting.

use serde_json::Value;
use std::collections::BTreeSet;

use super::dates::claim_timestamp_ok;
use super::pyrepr::{py_repr_opt, repr_str};
use super::{Diagnostic, semantic_error};
use crate::object::Structure;
use crate::structure::KnowledgeStructure;

const CODE: &str = "CKS-EXT-CLAIM-INTEGRITY";
const CLAIM_TYPE: &str = "Claim";
const STATUSES: [&str; 5] = ["accepted", "draft", "proposed", "rejected", "superseded"];
const ID_LIST_KEYS: [&str; 3] = ["provenance_ids", "supporting_claims", "contradicting_claims"];
const CLAIM_LIST_KEYS: [&str; 2] = ["supporting_claims", "contradicting_claims"];

fn non_empty_string(value: Option<&Value>) -> bool {
    matches!(value, Some(Value::String(s)) if !s.is_empty())
}

/// The strings of a list-of-strings value, or `None` when it is not one.
fn string_list(value: Option<&Value>) -> Option<Vec<&str>> {
    match value {
        Some(Value::Array(items)) => items.iter().map(Value::as_str).collect(),
        _ => None,
    }
}

/// The ids under `key` (absent key: none). Only called once the lists are known to be well-typed.
fn ids<'a>(data: &'a Structure, key: &str) -> Vec<&'a str> {
    string_list(data.get(key)).unwrap_or_default()
}

pub(crate) fn check(structure: &KnowledgeStructure, out: &mut Vec<Diagnostic>) {
    for object in structure.objects() {
        if object.identity.r#type != CLAIM_TYPE {
            continue;
        }
        let id = object.id();
        let data = &object.structure;
        let mut error = |message: String| out.push(semantic_error(CODE, message, id));

        let statement = data.get("statement");
        if !non_empty_string(statement) {
            error(format!("Claim '{id}' must carry a non-empty string 'statement' (got {}).", py_repr_opt(statement)));
        }

        let confidence = data.get("confidence");
        let confidence_ok =
            matches!(confidence, Some(Value::Number(n)) if n.as_f64().is_some_and(|c| (0.0..=1.0).contains(&c)));
        if !confidence_ok {
            error(format!(
                "Claim '{id}' must carry a 'confidence' number in [0, 1] (got {}).",
                py_repr_opt(confidence)
            ));
        }

        if !non_empty_string(data.get("author")) {
            error(format!(
                "Claim '{id}' must carry a non-empty string 'author' (got {}).",
                py_repr_opt(data.get("author"))
            ));
        }

        let status = data.get("status");
        if !matches!(status, Some(Value::String(s)) if STATUSES.contains(&s.as_str())) {
            error(format!(
                "Claim '{id}' has 'status'={}, which is not one of the recognized statuses ({}).",
                py_repr_opt(status),
                STATUSES.join(", ")
            ));
        }

        let created_at = data.get("created_at");
        if !claim_timestamp_ok(created_at) {
            error(format!(
                "Claim '{id}' must carry a well-formed ISO 8601 'created_at' timestamp (got {}).",
                py_repr_opt(created_at)
            ));
        }

        for key in ["valid_from", "valid_until"] {
            match data.get(key) {
                None | Some(Value::Null) => {}
                Some(value) if claim_timestamp_ok(Some(value)) => {}
                Some(value) => error(format!(
                    "Claim '{id}' has '{key}'={}, which is not a well-formed ISO 8601 timestamp.",
                    py_repr_opt(Some(value))
                )),
            }
        }

        match data.get("agent") {
            None | Some(Value::Null) | Some(Value::String(_)) => {}
            Some(agent) => error(format!(
                "Claim '{id}' has 'agent'={}, which must be a string when present.",
                py_repr_opt(Some(agent))
            )),
        }

        let mut malformed = false;
        for key in ID_LIST_KEYS {
            if let Some(value) = data.get(key)
                && string_list(Some(value)).is_none()
            {
                malformed = true;
                error(format!(
                    "Claim '{id}' has '{key}'={}, which must be a list of strings when present.",
                    py_repr_opt(Some(value))
                ));
            }
        }
        if malformed {
            continue;
        }

        for key in ID_LIST_KEYS {
            for reference in ids(data, key) {
                if !structure.contains(reference) {
                    error(format!("Claim '{id}' references unknown object '{reference}' in '{key}'."));
                }
            }
        }

        for key in CLAIM_LIST_KEYS {
            for reference in ids(data, key) {
                if let Some(target) = structure.get(reference)
                    && target.identity.r#type != CLAIM_TYPE
                {
                    error(format!(
                        "Claim '{id}' references '{reference}' in '{key}', but that object's identity.type is \
                         {}, not '{CLAIM_TYPE}'.",
                        repr_str(&target.identity.r#type)
                    ));
                }
            }
        }

        let supporting: BTreeSet<&str> = ids(data, "supporting_claims").into_iter().collect();
        let contradicting: BTreeSet<&str> = ids(data, "contradicting_claims").into_iter().collect();
        if supporting.contains(id) || contradicting.contains(id) {
            error(format!("Claim '{id}' must not reference itself in 'supporting_claims' or 'contradicting_claims'."));
        }
        let overlap: Vec<&str> = supporting.intersection(&contradicting).copied().collect();
        if !overlap.is_empty() {
            error(format!(
                "Claim '{id}' has the same id(s) ({}) in both 'supporting_claims' and 'contradicting_claims'.",
                overlap.join(", ")
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::Extension;
    use super::super::test_support::*;
    use crate::object::KnowledgeObject;
    use serde_json::{Value, json};

    fn claim(id: &str, extra: Value) -> KnowledgeObject {
        let mut base = json!({
            "statement": "The sky is blue.",
            "confidence": 0.8,
            "author": "alice",
            "status": "accepted",
            "created_at": "2026-08-15T10:00:00Z",
        });
        if let (Some(base), Value::Object(extra)) = (base.as_object_mut(), extra) {
            base.extend(extra);
        }
        obj(id, "Claim", base)
    }

    fn run(objects: Vec<KnowledgeObject>) -> Vec<(String, String)> {
        located(&run_ext(Extension::ClaimIntegrity, objects))
    }

    #[test]
    fn well_formed_claims_pass() {
        let objects = vec![
            node("src"),
            claim(
                "c1",
                json!({"created_at": "2026-08-15", "valid_from": "2026-08-15T10:00:00", "valid_until": null, "agent": null, "provenance_ids": ["src"], "supporting_claims": ["c2"]}),
            ),
            claim("c2", json!({"confidence": 1, "contradicting_claims": [], "agent": "bot"})),
        ];
        assert_eq!(run(objects), []);
    }

    #[test]
    fn field_rules_report_in_python_wording() {
        let objects = vec![obj(
            "c",
            "Claim",
            json!({"statement": "", "confidence": true, "status": "final", "created_at": "2026-08-15T10:00:00+02:00", "valid_from": "soon", "agent": 7}),
        )];
        assert_eq!(
            run(objects),
            pairs(&[
                ("c", "Claim 'c' has 'agent'=7, which must be a string when present."),
                (
                    "c",
                    "Claim 'c' has 'status'='final', which is not one of the recognized statuses (accepted, draft, proposed, rejected, superseded)."
                ),
                ("c", "Claim 'c' has 'valid_from'='soon', which is not a well-formed ISO 8601 timestamp."),
                ("c", "Claim 'c' must carry a 'confidence' number in [0, 1] (got True)."),
                ("c", "Claim 'c' must carry a non-empty string 'author' (got None)."),
                ("c", "Claim 'c' must carry a non-empty string 'statement' (got '')."),
                (
                    "c",
                    "Claim 'c' must carry a well-formed ISO 8601 'created_at' timestamp (got '2026-08-15T10:00:00+02:00')."
                ),
            ])
        );
    }

    #[test]
    fn malformed_id_lists_stop_the_reference_checks() {
        let objects = vec![claim(
            "c",
            json!({"provenance_ids": null, "supporting_claims": ["c", 3], "contradicting_claims": ["ghost"]}),
        )];
        assert_eq!(
            run(objects),
            pairs(&[
                ("c", "Claim 'c' has 'provenance_ids'=None, which must be a list of strings when present."),
                ("c", "Claim 'c' has 'supporting_claims'=['c', 3], which must be a list of strings when present."),
            ])
        );
    }

    #[test]
    fn references_types_self_and_overlap() {
        let objects = vec![
            node("doc"),
            claim("other", json!({})),
            claim(
                "c",
                json!({"provenance_ids": ["ghost", "ghost"], "supporting_claims": ["doc", "c", "other", "zz"], "contradicting_claims": ["other", "zz"]}),
            ),
        ];
        assert_eq!(
            run(objects),
            pairs(&[
                (
                    "c",
                    "Claim 'c' has the same id(s) (other, zz) in both 'supporting_claims' and 'contradicting_claims'."
                ),
                ("c", "Claim 'c' must not reference itself in 'supporting_claims' or 'contradicting_claims'."),
                (
                    "c",
                    "Claim 'c' references 'doc' in 'supporting_claims', but that object's identity.type is 'Node', not 'Claim'."
                ),
                ("c", "Claim 'c' references unknown object 'ghost' in 'provenance_ids'."),
                ("c", "Claim 'c' references unknown object 'ghost' in 'provenance_ids'."),
                ("c", "Claim 'c' references unknown object 'zz' in 'contradicting_claims'."),
                ("c", "Claim 'c' references unknown object 'zz' in 'supporting_claims'."),
            ])
        );
    }
}
