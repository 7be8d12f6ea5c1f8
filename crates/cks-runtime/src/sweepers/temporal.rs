//! The temporal staleness sweeper: facts whose `valid_until` has passed (`temporal_validity`),
//! queued as `temporal_conflict`. A session that does not change is looked at again when its next
//! fact expires, and not before.

use serde_json::{Value, json};
use time::OffsetDateTime;

use cks_core::KnowledgeStructure;
use cks_core::validate::{Extension, Severity};

use super::{Check, Finding, Sweep};
use crate::session::SessionInfo;

pub(crate) struct Expired;

impl Sweep for Expired {
    fn agent_id(&self) -> &'static str {
        "temporal_staleness"
    }

    fn task_type(&self) -> &'static str {
        "temporal_conflict"
    }

    fn check(&self, structure: &KnowledgeStructure, _info: &SessionInfo, now: OffsetDateTime) -> Check {
        let code = Extension::TemporalValidity.code();
        // The structure's index of valid_until values: a lookup once built (the first sweep of a
        // loaded session builds it), not a scan of every object.
        let index = structure.expiry_index();
        let findings = index
            .diagnostics(structure, now)
            .into_iter()
            // Errors are malformed dates, which validation reports to whoever commits them.
            .filter(|d| d.code == code && d.severity == Severity::Warning)
            .filter_map(|d| {
                let object = structure.get(d.location.as_deref()?)?;
                let valid_until = object.structure.get("valid_until").cloned().unwrap_or(Value::Null);
                Some(Finding {
                    // A fact extended and expired again is a new finding.
                    key: format!("{}:{valid_until}", object.id()),
                    payload: json!({"object_id": object.id(), "object_type": object.identity.r#type,
                        "valid_until": valid_until, "message": d.message, "reason": "valid_until_expired"}),
                })
            })
            .collect();
        Check { findings, recheck_at: index.next(now) }
    }
}
