//! In-process runtime events, published on a broadcast channel.
//!
//! Slow subscribers lose the oldest events (the channel is bounded) rather than slowing commits.

use serde::{Deserialize, Serialize};

/// One runtime event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub event_id: String,
    pub created_at: String,
    #[serde(flatten)]
    pub kind: EventKind,
}

/// What happened.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event_type")]
pub enum EventKind {
    SessionCreated { session_id: String },
    SessionClosed { session_id: String },
    VersionCreated { session_id: String, version_id: String, transaction_id: String },
    TransactionCommitted { session_id: String, transaction_id: String },
    TransactionRolledBack { session_id: String, transaction_id: String, reason: String },
}

impl EventKind {
    /// The reference's event class name, used by event filters.
    pub fn event_type(&self) -> &'static str {
        match self {
            EventKind::SessionCreated { .. } => "SessionCreated",
            EventKind::SessionClosed { .. } => "SessionClosed",
            EventKind::VersionCreated { .. } => "VersionCreated",
            EventKind::TransactionCommitted { .. } => "TransactionCommitted",
            EventKind::TransactionRolledBack { .. } => "TransactionRolledBack",
        }
    }

    pub fn session_id(&self) -> &str {
        match self {
            EventKind::SessionCreated { session_id }
            | EventKind::SessionClosed { session_id }
            | EventKind::VersionCreated { session_id, .. }
            | EventKind::TransactionCommitted { session_id, .. }
            | EventKind::TransactionRolledBack { session_id, .. } => session_id,
        }
    }
}
