//! The inference staleness sweeper: active inference steps that reach the same conclusion with
//! disagreeing confidence (`inference_confidence_conflict`) and active steps that cite a step
//! since superseded (`stale_premise`), queued per session as one `inference_conflict` task holding
//! that session's current findings, and kept in the inbox `list_inference_conflicts` reads.

use serde_json::{Value, json};
use time::OffsetDateTime;

use cks_core::KnowledgeStructure;
use cks_core::validate::{Diagnostic, Extension, confidence_conflicts, stale_premises};

use super::{Check, Finding, Sweep};
use crate::session::SessionInfo;

pub(crate) struct ConfidenceConflicts;

impl Sweep for ConfidenceConflicts {
    fn agent_id(&self) -> &'static str {
        "inference_staleness"
    }

    fn task_type(&self) -> &'static str {
        "inference_conflict"
    }

    fn keeps_inbox(&self) -> bool {
        true
    }

    fn check(&self, structure: &KnowledgeStructure, info: &SessionInfo, _now: OffsetDateTime) -> Check {
        let mut found = confidence_conflicts(structure);
        found.extend(stale_premises(structure));
        if found.is_empty() {
            return Check { findings: Vec::new(), recheck_at: None };
        }
        let mut keys: Vec<String> =
            found.iter().map(|d| format!("{}@{}", d.code, d.location.as_deref().unwrap_or_default())).collect();
        keys.sort();
        keys.dedup();
        let diagnostics: Vec<Value> = found.iter().map(|d| payload_entry(structure, d)).collect();
        // One task per set of findings: a session whose findings change is queued again.
        let finding = Finding {
            key: keys.join(","),
            payload: json!({"version_id": info.latest_version_id.clone().unwrap_or_default(), "diagnostics": diagnostics}),
        };
        Check { findings: vec![finding], recheck_at: None }
    }
}

/// A finding as the task carries it: the diagnostic, and for a confidence conflict the conclusion
/// it is about (its location is one of the disagreeing steps, as the reference reports it; the
/// conclusion is what `arbitrate_inference_conflict` takes).
fn payload_entry(structure: &KnowledgeStructure, d: &Diagnostic) -> Value {
    let mut entry =
        json!({"code": d.code, "severity": d.severity.as_str(), "message": d.message, "location": d.location});
    if d.code == Extension::InferenceConfidenceConflict.code() {
        let step = d.location.as_deref().and_then(|id| structure.get(id));
        if let Some(conclusion) = step.and_then(|s| s.structure.get("conclusion")) {
            entry["conclusion_id"] = conclusion.clone();
        }
    }
    entry
}
