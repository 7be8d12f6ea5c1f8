//! The contradiction sweeper: relations that the graph's own rules say cannot hold together
//! (`mutual_exclusion`, `functional_relation`), queued as `contradiction_detected`.

use serde_json::json;
use time::OffsetDateTime;

use cks_core::KnowledgeStructure;
use cks_core::validate::{Extension, Severity, ValidationOptions, validate};

use super::{Check, Finding, Sweep};

pub(crate) struct Contradictions;

const EXTENSIONS: [Extension; 2] = [Extension::MutualExclusion, Extension::FunctionalRelation];

impl Sweep for Contradictions {
    fn agent_id(&self) -> &'static str {
        "contradiction"
    }

    fn task_type(&self) -> &'static str {
        "contradiction_detected"
    }

    fn check(&self, structure: &KnowledgeStructure, _now: OffsetDateTime) -> Check {
        let codes: Vec<&str> = EXTENSIONS.iter().map(|e| e.code()).collect();
        let report = validate(structure, &ValidationOptions::with_extensions(EXTENSIONS));
        let findings = report
            .diagnostics
            .into_iter()
            .filter(|d| d.severity == Severity::Error && codes.contains(&d.code.as_str()))
            .map(|d| {
                let location = d.location.unwrap_or_default();
                Finding {
                    key: format!("{}:{location}", d.code),
                    payload: json!({"code": d.code, "severity": "error", "message": d.message, "location": location}),
                }
            })
            .collect();
        Check { findings, recheck_at: None }
    }
}
