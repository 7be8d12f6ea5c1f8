//! The provenance staleness sweeper: subjects whose newest `VerificationRecord` was checked longer
//! ago than the TTL (`cks_core::validate::provenance_freshness`), queued as `provenance_conflict`
//! for `refresh_verification`, which re-checks the source and adds a newer record. A session that
//! does not change is looked at again when its next subject goes stale, and not before.

use serde_json::{Value, json};
use time::OffsetDateTime;

use cks_core::KnowledgeStructure;
use cks_core::validate::provenance_freshness;

use super::{Check, Finding, Sweep};
use crate::session::SessionInfo;

pub(crate) struct Stale {
    /// How long a check stays fresh.
    pub(crate) ttl: time::Duration,
}

impl Sweep for Stale {
    fn agent_id(&self) -> &'static str {
        "provenance_staleness"
    }

    fn task_type(&self) -> &'static str {
        "provenance_conflict"
    }

    fn check(&self, structure: &KnowledgeStructure, _info: &SessionInfo, now: OffsetDateTime) -> Check {
        let freshness = provenance_freshness(structure, self.ttl, now);
        let findings = freshness
            .stale
            .into_iter()
            .map(|stale| {
                let record_id = stale.record.id();
                // The URL that was checked lives on the subject (a Document's url), when it has one.
                let source_url = stale
                    .subject_id
                    .and_then(|id| structure.get(id))
                    .and_then(|subject| subject.structure.get("url").cloned())
                    .unwrap_or(Value::Null);
                Finding {
                    // A record re-checked and stale again is a newer record: a new finding.
                    key: record_id.to_owned(),
                    payload: json!({"record_id": record_id, "subject_id": stale.subject_id, "source_url": source_url,
                                    "checked_at": stale.checked_at, "reason": "ttl_expired"}),
                }
            })
            .collect();
        Check { findings, recheck_at: freshness.next_stale_at }
    }
}
