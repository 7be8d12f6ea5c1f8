//! Reasoning-object extensions over `InferenceStep` objects (taken in structure order):
//! `inference_referential_integrity`, `confidence_bounds`, `supersession_chain` and
//! `inference_confidence_conflict` and `stale_premise`.
//!
//! A step is **active** when its own `superseded_by` is falsy (the reference's code checks the
//! step's own field, whatever its docstring says).
//!
//! - CKS-EXT-INFERENCE-REFERENTIAL-INTEGRITY: each `premises` item and a non-null `conclusion`
//!   must name an existing object (an empty string is checked and fails).
//! - CKS-EXT-CONFIDENCE-BOUNDS: a present `confidence` must be a non-bool number in [0, 1].
//! - CKS-EXT-SUPERSESSION-CHAIN: a truthy `superseded_by` must name an existing `InferenceStep`
//!   whose `conclusion` equals this step's (Python `==`, missing equals null); at most one of these
//!   errors per step. Then one error per supersession cycle, located at its member that comes
//!   first in structure order: `Supersession cycle detected: A -> B -> A.`
//! - CKS-EXT-INFERENCE-CONFIDENCE-CONFLICT (warning): active steps with a non-null conclusion
//!   and a valid confidence are grouped by conclusion and by `float(confidence)`; a conclusion
//!   with more than one distinct value gets one warning at its smallest step id.
//! - CKS-EXT-STALE-PREMISE (warning): an active step whose `premises` cite an `InferenceStep` with a
//!   truthy `superseded_by` gets one warning per such premise, located at the citing step.
//!
//! Decisions: a non-list `premises` means no premises; non-string ids are unknown; only string
//! conclusions are grouped by the conflict check.

use serde_json::Value;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use super::pyrepr::{py_eq, py_repr, py_repr_str_list, py_str, repr_float, truthy};
use super::{Diagnostic, Severity, Stage, semantic_error};
use crate::object::KnowledgeObject;
use crate::structure::KnowledgeStructure;

const STEP_TYPE: &str = "InferenceStep";
const REFERENTIAL_CODE: &str = "CKS-EXT-INFERENCE-REFERENTIAL-INTEGRITY";
const BOUNDS_CODE: &str = "CKS-EXT-CONFIDENCE-BOUNDS";
const CHAIN_CODE: &str = "CKS-EXT-SUPERSESSION-CHAIN";
const CONFLICT_CODE: &str = "CKS-EXT-INFERENCE-CONFIDENCE-CONFLICT";
const STALE_PREMISE_CODE: &str = "CKS-EXT-STALE-PREMISE";

fn steps(structure: &KnowledgeStructure) -> impl Iterator<Item = &Arc<KnowledgeObject>> {
    structure.objects_of_type(STEP_TYPE).into_iter()
}

/// Whether a JSON value, used as an id, names an existing object.
fn resolves(structure: &KnowledgeStructure, value: &Value) -> bool {
    value.as_str().is_some_and(|id| structure.contains(id))
}

/// A non-bool JSON number as `float(v)`.
fn real(value: Option<&Value>) -> Option<f64> {
    match value {
        Some(Value::Number(n)) => n.as_f64(),
        _ => None,
    }
}

/// CKS-EXT-INFERENCE-REFERENTIAL-INTEGRITY.
pub(crate) fn check_referential_integrity(structure: &KnowledgeStructure, out: &mut Vec<Diagnostic>) {
    for step in steps(structure) {
        let id = step.id();
        if let Some(Value::Array(premises)) = step.structure.get("premises") {
            for premise in premises {
                if !resolves(structure, premise) {
                    out.push(semantic_error(
                        REFERENTIAL_CODE,
                        format!("InferenceStep '{id}' references unknown premise '{}'.", py_str(premise)),
                        id,
                    ));
                }
            }
        }
        match step.structure.get("conclusion") {
            None | Some(Value::Null) => {}
            Some(conclusion) if resolves(structure, conclusion) => {}
            Some(conclusion) => out.push(semantic_error(
                REFERENTIAL_CODE,
                format!("InferenceStep '{id}' references unknown conclusion '{}'.", py_str(conclusion)),
                id,
            )),
        }
    }
}

/// CKS-EXT-CONFIDENCE-BOUNDS.
pub(crate) fn check_confidence_bounds(structure: &KnowledgeStructure, out: &mut Vec<Diagnostic>) {
    for step in steps(structure) {
        let id = step.id();
        let Some(confidence) = step.structure.get("confidence") else {
            continue;
        };
        match real(Some(confidence)) {
            None => out.push(semantic_error(
                BOUNDS_CODE,
                format!("InferenceStep '{id}' has a non-numeric confidence value ({}).", py_repr(confidence)),
                id,
            )),
            Some(value) if !(0.0..=1.0).contains(&value) => out.push(semantic_error(
                BOUNDS_CODE,
                format!("InferenceStep '{id}' has confidence {}, outside [0, 1].", py_repr(confidence)),
                id,
            )),
            Some(_) => {}
        }
    }
}

/// The `InferenceStep` a `superseded_by` value names, if it is one.
fn successor_step<'s>(structure: &'s KnowledgeStructure, step: &KnowledgeObject) -> Option<&'s Arc<KnowledgeObject>> {
    let successor = step.structure.get("superseded_by")?.as_str()?;
    structure.get(successor).filter(|o| o.identity.r#type == STEP_TYPE)
}

/// CKS-EXT-SUPERSESSION-CHAIN.
pub(crate) fn check_supersession_chain(structure: &KnowledgeStructure, out: &mut Vec<Diagnostic>) {
    for step in steps(structure) {
        let id = step.id();
        let successor_value = step.structure.get("superseded_by");
        if !truthy(successor_value) {
            continue;
        }
        let successor_text = successor_value.map(py_str).unwrap_or_default();
        let successor = successor_value.and_then(Value::as_str).and_then(|s| structure.get(s));
        let message = match successor {
            None => {
                format!("InferenceStep '{id}' is superseded_by unknown object '{successor_text}'.")
            }
            Some(next) if next.identity.r#type != STEP_TYPE => {
                format!("InferenceStep '{id}' is superseded_by '{successor_text}', which is not an InferenceStep.")
            }
            Some(next) if !py_eq(next.structure.get("conclusion"), step.structure.get("conclusion")) => {
                format!(
                    "InferenceStep '{id}' is superseded_by '{successor_text}', which targets a different conclusion."
                )
            }
            Some(_) => continue,
        };
        out.push(semantic_error(CHAIN_CODE, message, id));
    }

    // Cycles. Each step has at most one successor step, so this is a functional graph: find the
    // steps on cycles in linear time, then report each cycle once, from its first member in
    // structure order, listing members along the chain (the reference's bounded walk gives the
    // same cycles and the same paths).
    let mut on_cycle: HashSet<&str> = HashSet::new();
    let mut done: HashSet<&str> = HashSet::new();
    for step in steps(structure) {
        let mut path: Vec<&str> = Vec::new();
        let mut position: HashMap<&str, usize> = HashMap::new();
        let mut current = Some(step);
        while let Some(node) = current {
            let node_id = node.id();
            if done.contains(node_id) {
                break;
            }
            if let Some(&first) = position.get(node_id) {
                on_cycle.extend(&path[first..]);
                break;
            }
            position.insert(node_id, path.len());
            path.push(node_id);
            current = successor_step(structure, node);
        }
        done.extend(path);
    }

    let mut reported: HashSet<&str> = HashSet::new();
    for step in steps(structure) {
        let start = step.id();
        if !on_cycle.contains(start) || reported.contains(start) {
            continue;
        }
        let mut cycle = vec![start];
        let mut current = successor_step(structure, step);
        while let Some(node) = current {
            cycle.push(node.id());
            if node.id() == start {
                break;
            }
            current = successor_step(structure, node);
        }
        reported.extend(cycle.iter().copied());
        out.push(semantic_error(CHAIN_CODE, format!("Supersession cycle detected: {}.", cycle.join(" -> ")), start));
    }
}

/// The confidence conflicts alone (without the always-on constraints a full validation runs
/// first): what a sweeper looking for them needs.
pub fn confidence_conflicts(structure: &KnowledgeStructure) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    check_confidence_conflict(structure, &mut out);
    out
}

/// CKS-EXT-INFERENCE-CONFIDENCE-CONFLICT.
pub(crate) fn check_confidence_conflict(structure: &KnowledgeStructure, out: &mut Vec<Diagnostic>) {
    // conclusion → [(float(confidence), [step ids])], groups in first-seen order.
    let mut by_conclusion: BTreeMap<&str, Vec<(f64, Vec<&str>)>> = BTreeMap::new();
    for step in steps(structure) {
        if truthy(step.structure.get("superseded_by")) {
            continue;
        }
        let Some(Value::String(conclusion)) = step.structure.get("conclusion") else {
            continue;
        };
        let Some(confidence) = real(step.structure.get("confidence")) else {
            continue;
        };
        if !(0.0..=1.0).contains(&confidence) {
            continue;
        }
        let groups = by_conclusion.entry(conclusion).or_default();
        match groups.iter_mut().find(|(value, _)| *value == confidence) {
            Some((_, ids)) => ids.push(step.id()),
            None => groups.push((confidence, vec![step.id()])),
        }
    }

    for (conclusion, mut groups) in by_conclusion {
        if groups.len() <= 1 {
            continue;
        }
        groups.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut all_ids: Vec<&str> = groups.iter().flat_map(|(_, ids)| ids.iter().copied()).collect();
        all_ids.sort_unstable();
        let breakdown: Vec<String> = groups
            .iter_mut()
            .map(|(value, ids)| {
                ids.sort_unstable();
                format!("{}: {}", repr_float(*value), py_repr_str_list(ids))
            })
            .collect();
        let Some(location) = all_ids.first() else {
            continue;
        };
        out.push(Diagnostic::new(
            CONFLICT_CODE,
            Severity::Warning,
            Stage::Semantic,
            format!(
                "{} active InferenceStep(s) reach conclusion '{conclusion}' with disagreeing confidence values ({}). \
                 This is a resolvable belief conflict, not a structural error -- consider a RecordInference with \
                 'superseded_by' to reconcile it.",
                all_ids.len(),
                breakdown.join(", ")
            ),
            Some(location),
        ));
    }
}

/// The stale premises alone: what a sweeper looking for them needs.
pub fn stale_premises(structure: &KnowledgeStructure) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    check_stale_premises(structure, &mut out);
    out
}

/// CKS-EXT-STALE-PREMISE.
pub(crate) fn check_stale_premises(structure: &KnowledgeStructure, out: &mut Vec<Diagnostic>) {
    for step in steps(structure) {
        // A superseded step's own premises no longer matter going forward.
        if truthy(step.structure.get("superseded_by")) {
            continue;
        }
        let Some(Value::Array(premises)) = step.structure.get("premises") else {
            continue;
        };
        for premise_id in premises.iter().filter_map(Value::as_str) {
            let Some(premise) = structure.get(premise_id).filter(|p| p.identity.r#type == STEP_TYPE) else {
                continue;
            };
            let successor = premise.structure.get("superseded_by");
            if !truthy(successor) {
                continue;
            }
            let successor = successor.map(py_str).unwrap_or_default();
            out.push(Diagnostic::new(
                STALE_PREMISE_CODE,
                Severity::Warning,
                Stage::Semantic,
                format!(
                    "InferenceStep '{}' cites '{premise_id}' as a premise, but '{premise_id}' has itself been \
                     superseded_by '{successor}' -- consider citing the current step instead.",
                    step.id()
                ),
                Some(step.id()),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::super::{Extension, Severity};
    use crate::object::KnowledgeObject;
    use serde_json::{Value, json};

    fn step(id: &str, structure: Value) -> KnowledgeObject {
        obj(id, "InferenceStep", structure)
    }

    #[test]
    fn referential_integrity_passes_on_resolving_ids() {
        let objects = vec![
            node("p"),
            node("c"),
            step("s", json!({"premises": ["p"], "conclusion": "c"})),
            step("t", json!({"premises": "p", "conclusion": null})),
        ];
        assert_eq!(run_ext(Extension::InferenceReferentialIntegrity, objects), []);
    }

    #[test]
    fn referential_integrity_reports_each_unknown_id() {
        let objects = vec![
            node("p"),
            step("s", json!({"premises": ["p", "ghost", 5, ["x"], "ghost"], "conclusion": ""})),
            step("t", json!({"conclusion": "nowhere"})),
        ];
        assert_eq!(
            located(&run_ext(Extension::InferenceReferentialIntegrity, objects)),
            pairs(&[
                ("s", "InferenceStep 's' references unknown conclusion ''."),
                ("s", "InferenceStep 's' references unknown premise '5'."),
                ("s", "InferenceStep 's' references unknown premise '['x']'."),
                ("s", "InferenceStep 's' references unknown premise 'ghost'."),
                ("s", "InferenceStep 's' references unknown premise 'ghost'."),
                ("t", "InferenceStep 't' references unknown conclusion 'nowhere'."),
            ])
        );
    }

    #[test]
    fn confidence_bounds() {
        let ok = vec![step("a", json!({"confidence": 0})), step("b", json!({"confidence": 1.0})), step("c", json!({}))];
        assert_eq!(run_ext(Extension::ConfidenceBounds, ok), []);
        let bad = vec![
            step("a", json!({"confidence": 1.5})),
            step("b", json!({"confidence": -1})),
            step("c", json!({"confidence": true})),
            step("d", json!({"confidence": null})),
            step("e", json!({"confidence": "0.5"})),
            obj("f", "Claim", json!({"confidence": 7})),
        ];
        assert_eq!(
            located(&run_ext(Extension::ConfidenceBounds, bad)),
            pairs(&[
                ("a", "InferenceStep 'a' has confidence 1.5, outside [0, 1]."),
                ("b", "InferenceStep 'b' has confidence -1, outside [0, 1]."),
                ("c", "InferenceStep 'c' has a non-numeric confidence value (True)."),
                ("d", "InferenceStep 'd' has a non-numeric confidence value (None)."),
                ("e", "InferenceStep 'e' has a non-numeric confidence value ('0.5')."),
            ])
        );
    }

    #[test]
    fn supersession_chain_valid() {
        let objects = vec![
            step("s1", json!({"conclusion": "c", "superseded_by": "s2"})),
            step("s2", json!({"conclusion": "c", "superseded_by": ""})),
            step("s3", json!({"superseded_by": "s4"})),
            step("s4", json!({"conclusion": null})),
        ];
        assert_eq!(run_ext(Extension::SupersessionChain, objects), []);
    }

    #[test]
    fn supersession_chain_pairwise_errors() {
        let objects = vec![
            node("n"),
            step("a", json!({"conclusion": "c", "superseded_by": "ghost"})),
            step("b", json!({"conclusion": "c", "superseded_by": "n"})),
            step("d", json!({"conclusion": "c", "superseded_by": "e"})),
            step("e", json!({"conclusion": "other"})),
            step("f", json!({"conclusion": "c", "superseded_by": 5})),
        ];
        assert_eq!(
            located(&run_ext(Extension::SupersessionChain, objects)),
            pairs(&[
                ("a", "InferenceStep 'a' is superseded_by unknown object 'ghost'."),
                ("b", "InferenceStep 'b' is superseded_by 'n', which is not an InferenceStep."),
                ("d", "InferenceStep 'd' is superseded_by 'e', which targets a different conclusion."),
                ("f", "InferenceStep 'f' is superseded_by unknown object '5'."),
            ])
        );
    }

    #[test]
    fn supersession_cycles_are_reported_once_from_their_first_member() {
        let objects = vec![
            step("tail", json!({"conclusion": "c", "superseded_by": "y"})),
            step("y", json!({"conclusion": "c", "superseded_by": "z"})),
            step("x", json!({"conclusion": "c", "superseded_by": "y"})),
            step("z", json!({"conclusion": "c", "superseded_by": "x"})),
            step("self", json!({"conclusion": "c", "superseded_by": "self"})),
        ];
        assert_eq!(
            located(&run_ext(Extension::SupersessionChain, objects)),
            pairs(&[
                ("self", "Supersession cycle detected: self -> self."),
                ("y", "Supersession cycle detected: y -> z -> x -> y."),
            ])
        );
    }

    #[test]
    fn confidence_conflict_warns_once_per_conclusion() {
        let objects = vec![
            step("s3", json!({"conclusion": "c", "confidence": 0.9})),
            step("s2", json!({"conclusion": "c", "confidence": 0.6})),
            step("s1", json!({"conclusion": "c", "confidence": 0.9})),
            step("old", json!({"conclusion": "c", "confidence": 0.1, "superseded_by": "s1"})),
            step("bad", json!({"conclusion": "c", "confidence": 2})),
            step("k1", json!({"conclusion": "k", "confidence": 1})),
            step("k2", json!({"conclusion": "k", "confidence": 1.0})),
        ];
        let found = run_ext(Extension::InferenceConfidenceConflict, objects);
        assert_eq!(found.iter().map(|d| d.severity).collect::<Vec<_>>(), [Severity::Warning]);
        assert_eq!(
            located(&found),
            pairs(&[(
                "s1",
                "3 active InferenceStep(s) reach conclusion 'c' with disagreeing confidence values (0.6: ['s2'], 0.9: ['s1', 's3']). This is a resolvable belief conflict, not a structural error -- consider a RecordInference with 'superseded_by' to reconcile it."
            )])
        );
    }

    #[test]
    fn confidence_conflict_silent_when_values_agree() {
        let objects = vec![
            step("a", json!({"conclusion": "c", "confidence": 1})),
            step("b", json!({"conclusion": "c", "confidence": 1.0})),
            step("d", json!({"conclusion": "c"})),
        ];
        assert_eq!(run_ext(Extension::InferenceConfidenceConflict, objects), []);
    }

    #[test]
    fn stale_premise_warns_per_superseded_step_cited_by_an_active_step() {
        let objects = vec![
            step("old", json!({"conclusion": "c", "superseded_by": "new"})),
            step("new", json!({"conclusion": "c"})),
            node("fact"),
            // Cites the superseded step (once per citation) and things out of scope.
            step("user", json!({"conclusion": "d", "premises": ["fact", "old", "new", "nowhere"]})),
            // Superseded itself: its premises no longer matter.
            step("gone", json!({"conclusion": "d", "premises": ["old"], "superseded_by": "user"})),
            step("odd", json!({"conclusion": "d", "premises": "old"})),
        ];
        assert_eq!(
            located(&run_ext(Extension::StalePremise, objects)),
            pairs(&[(
                "user",
                "InferenceStep 'user' cites 'old' as a premise, but 'old' has itself been superseded_by 'new' -- consider citing the current step instead."
            )])
        );
    }
}
