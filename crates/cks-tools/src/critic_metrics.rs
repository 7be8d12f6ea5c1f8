//! The Critic's counters by task type, as `get_metrics` reports them (`critic_agent_metrics`, the
//! reference's keys). One set per server process, shared by its tool contexts and the Critic
//! running beside them; kept in memory only, like the rest of `get_metrics`.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// What became of a task the Critic took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CriticEvent {
    /// Claimed and worked on.
    Processed,
    /// Settled: the task is completed.
    Completed,
    /// Failed, to be tried again after its backoff.
    Retried,
    /// Given up on.
    DeadLettered,
    /// Its claim was lost to another worker mid-task.
    LeaseLost,
}

/// The counts so far, each by task type.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CriticCounts {
    pub processed: BTreeMap<String, u64>,
    pub completed: BTreeMap<String, u64>,
    pub retried: BTreeMap<String, u64>,
    pub dead_lettered: BTreeMap<String, u64>,
    pub lease_lost: BTreeMap<String, u64>,
}

/// The counters (empty while no Critic runs in the process).
#[derive(Debug, Default)]
pub struct CriticMetrics {
    counts: Mutex<CriticCounts>,
}

impl CriticMetrics {
    /// Counts `event` for a task of `task_type`.
    pub fn count(&self, event: CriticEvent, task_type: &str) {
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        let by_type = match event {
            CriticEvent::Processed => &mut counts.processed,
            CriticEvent::Completed => &mut counts.completed,
            CriticEvent::Retried => &mut counts.retried,
            CriticEvent::DeadLettered => &mut counts.dead_lettered,
            CriticEvent::LeaseLost => &mut counts.lease_lost,
        };
        *by_type.entry(task_type.to_owned()).or_default() += 1;
    }

    pub fn snapshot(&self) -> CriticCounts {
        self.counts.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}
