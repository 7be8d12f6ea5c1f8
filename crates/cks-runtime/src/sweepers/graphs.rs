//! The sweepers over registered graphs (the gallery): `graph_freshness` queues a
//! `graph_outdated` task for an entry not updated within its TTL, `graph_auto_update` one for a
//! graph whose `Component` objects record older versions than their code publishes, and
//! `graph_health` a `health_check` task for a graph whose health score fell below the bar. They
//! score with [`crate::health`] and [`crate::versions`], as `check_graph_freshness`,
//! `check_component_versions` and `check_graph_health` do.
//!
//! A sweep lists the registry (one read) and looks again only at a graph whose entry changed,
//! whose session or recorded version check changed, or whose score can have changed with time
//! since (the entry or a verification record aged). `graph_auto_update` is the exception: a
//! release changes nothing here, so it checks every graph's components each sweep.

use serde_json::json;
use time::OffsetDateTime;

use super::{Check, Finding, Sweep};
use crate::gallery::GraphEntry;
use crate::health::{FRESHNESS_TTL, GraphHealth, is_fresh};
use crate::versions::VersionRecord;

/// The score below which a graph is reported (the reference's default).
pub(crate) const MIN_HEALTH_SCORE: f64 = 0.7;

pub(crate) struct Freshness;

impl Sweep for Freshness {
    fn agent_id(&self) -> &'static str {
        "graph_freshness"
    }

    fn task_type(&self) -> &'static str {
        "graph_outdated"
    }

    fn over_graphs(&self) -> Option<GraphReads> {
        Some(GraphReads { health: false, versions: false })
    }

    fn check_graph(&self, entry: &GraphEntry, _reads: &Read<'_>, now: OffsetDateTime) -> Check {
        match is_fresh(&entry.updated_at, now) {
            Some(false) => Check {
                findings: vec![Finding {
                    // Updated and outdated again is a new finding.
                    key: entry.updated_at.clone(),
                    payload: json!({"name": entry.name, "session_id": entry.session_id,
                        "updated_at": entry.updated_at, "ttl_seconds": FRESHNESS_TTL.whole_seconds(),
                        "reason": "ttl_expired"}),
                }],
                recheck_at: None,
            },
            // A fresh entry ages at a known time; one whose time cannot be read never does.
            _ => Check {
                findings: Vec::new(),
                recheck_at: crate::health::parse_time(&entry.updated_at).map(|at| at + FRESHNESS_TTL),
            },
        }
    }
}

pub(crate) struct Health;

impl Sweep for Health {
    fn agent_id(&self) -> &'static str {
        "graph_health"
    }

    fn task_type(&self) -> &'static str {
        "health_check"
    }

    fn over_graphs(&self) -> Option<GraphReads> {
        Some(GraphReads { health: true, versions: false })
    }

    fn check_graph(&self, entry: &GraphEntry, reads: &Read<'_>, _now: OffsetDateTime) -> Check {
        let Some(health) = reads.health else { return Check { findings: Vec::new(), recheck_at: None } };
        let recheck_at = health.next_change(&entry.updated_at);
        let score = health.score();
        if score >= MIN_HEALTH_SCORE {
            return Check { findings: Vec::new(), recheck_at };
        }
        let finding = Finding {
            // Reported once while its task is open; again after it is settled if still unhealthy.
            key: String::new(),
            payload: json!({"name": entry.name, "session_id": entry.session_id, "health_score": score,
                "metrics": {"version_freshness": health.version_score(), "ttl_freshness": health.freshness_score(),
                            "contradictions": health.contradiction_score(),
                            "verification_coverage": health.coverage_score(),
                            "dead_letter": health.dead_letter_score()},
                "min_score": MIN_HEALTH_SCORE}),
        };
        Check { findings: vec![finding], recheck_at }
    }
}

/// Checks each graph's components against the versions their code publishes (read by the
/// sweepers' [`crate::versions::VersionSource`]), and queues a `graph_outdated` task for a graph
/// with outdated ones, as the reference's `GraphAutoUpdateSweeper` does. It only reports: bringing
/// a graph up to date takes a model (`update_registered_graph`). A component whose version could
/// not be read is not reported: not knowing is not being outdated.
pub(crate) struct AutoUpdate;

impl Sweep for AutoUpdate {
    fn agent_id(&self) -> &'static str {
        "graph_auto_update"
    }

    fn task_type(&self) -> &'static str {
        "graph_outdated"
    }

    fn over_graphs(&self) -> Option<GraphReads> {
        Some(GraphReads { health: false, versions: true })
    }

    fn check_graph(&self, entry: &GraphEntry, reads: &Read<'_>, _now: OffsetDateTime) -> Check {
        let outdated: Vec<_> = reads
            .versions
            .into_iter()
            .flat_map(VersionRecord::outdated)
            .map(|c| json!({"component": c.component, "graph_version": c.graph_version, "actual_version": c.actual_version}))
            .collect();
        if outdated.is_empty() {
            return Check { findings: Vec::new(), recheck_at: None };
        }
        let finding = Finding {
            // Reported once while its task is open; again after it is settled if still outdated.
            key: String::new(),
            payload: json!({"name": entry.name, "session_id": entry.session_id, "reason": "version_outdated",
                "outdated_components": outdated, "auto_apply_requested": false}),
        };
        Check { findings: vec![finding], recheck_at: None }
    }
}

/// What a sweep over graphs reads besides the registry.
#[derive(Clone, Copy, Debug)]
pub(crate) struct GraphReads {
    /// Each graph's health (its session, its dead letters, its recorded version check).
    pub(crate) health: bool,
    /// A new check of each graph's component versions, recorded as it is made.
    pub(crate) versions: bool,
}

/// What was read of one graph, as its sweep's [`GraphReads`] asked.
#[derive(Default)]
pub(crate) struct Read<'a> {
    /// Its health, when its session could be read.
    pub(crate) health: Option<&'a GraphHealth>,
    /// The check just made, when its session could be read.
    pub(crate) versions: Option<&'a VersionRecord>,
}
