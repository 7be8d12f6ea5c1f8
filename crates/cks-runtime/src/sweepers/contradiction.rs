//! The contradiction sweeper: relations that the graph's own rules say cannot hold together
//! (`mutual_exclusion`, `functional_relation`), queued as `contradiction_detected`.

use serde_json::json;
use time::OffsetDateTime;

use cks_core::KnowledgeStructure;
use cks_core::validate::contradictions;

use super::{Check, Finding, Sweep};
use crate::session::SessionInfo;

pub(crate) struct Contradictions;

impl Sweep for Contradictions {
    fn agent_id(&self) -> &'static str {
        "contradiction"
    }

    fn task_type(&self) -> &'static str {
        "contradiction_detected"
    }

    fn check(&self, structure: &KnowledgeStructure, _info: &SessionInfo, _now: OffsetDateTime) -> Check {
        let findings = contradictions(structure)
            .into_iter()
            .map(|c| Finding {
                key: format!("{}:{}", c.code, c.location),
                payload: json!({"code": c.code, "severity": "error", "message": c.message, "location": c.location,
                                "relation_ids": c.relation_ids}),
            })
            .collect();
        Check { findings, recheck_at: None }
    }
}
