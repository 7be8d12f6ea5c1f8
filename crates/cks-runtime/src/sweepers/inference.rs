//! The inference staleness sweeper: active inference steps that reach the same conclusion with
//! disagreeing confidence (`inference_confidence_conflict`), queued per session as one
//! `inference_conflict` task holding that session's current findings, and kept in the inbox
//! `list_inference_conflicts` reads.

use serde_json::json;
use time::OffsetDateTime;

use cks_core::KnowledgeStructure;
use cks_core::validate::confidence_conflicts;

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
        let found = confidence_conflicts(structure);
        if found.is_empty() {
            return Check { findings: Vec::new(), recheck_at: None };
        }
        let mut locations: Vec<String> = found.iter().filter_map(|d| d.location.clone()).collect();
        locations.sort();
        let diagnostics: Vec<_> = found
            .iter()
            .map(|d| json!({"code": d.code, "severity": d.severity.as_str(), "message": d.message, "location": d.location}))
            .collect();
        // One task per set of conflicts: a session whose conflicts change is queued again.
        let finding = Finding {
            key: locations.join(","),
            payload: json!({"version_id": info.latest_version_id.clone().unwrap_or_default(), "diagnostics": diagnostics}),
        };
        Check { findings: vec![finding], recheck_at: None }
    }
}
