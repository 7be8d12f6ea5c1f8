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
    SessionCreated {
        session_id: String,
    },
    SessionClosed {
        session_id: String,
    },
    VersionCreated {
        session_id: String,
        version_id: String,
        transaction_id: String,
    },
    TransactionCommitted {
        session_id: String,
        transaction_id: String,
    },
    TransactionRolledBack {
        session_id: String,
        transaction_id: String,
        reason: String,
    },
    /// A commit was refused by validation (after its `TransactionRolledBack`).
    ValidationFailed {
        session_id: String,
        transaction_id: String,
        message: String,
    },
    /// A sweep found a reasoning conflict not queued before: the diagnostics found, and the
    /// session's version they were found in.
    InferenceConflictDetected {
        session_id: String,
        version_id: String,
        diagnostics: Vec<serde_json::Value>,
    },
    /// A pipeline step began on one object (`object_id` empty for a run-wide step);
    /// `claims_status` is the reference's name for the stage it takes the object from.
    AgentStepStarted {
        step_name: String,
        session_id: String,
        object_id: String,
        claims_status: String,
    },
    /// A pipeline step ended on one object: the stage it moved the object to, or the error.
    AgentStepCompleted {
        step_name: String,
        session_id: String,
        object_id: String,
        succeeded: bool,
        transitioned_to: String,
        error: String,
    },
    /// A client asked to stop a call it made in a transport session (see
    /// [`crate::transport_sessions`]): the process running the call, whichever it is, stops it.
    /// Like the three after it, it concerns no knowledge session ([`EventKind::concerns_a_session`]).
    CallCancelled {
        transport_session: String,
        request_id: String,
    },
    /// A transport session's record changed: a process that keeps a copy reads it again.
    TransportSessionChanged {
        transport_session: String,
    },
    /// A transport session ended (its client closed it): every process that serves it lets it go.
    TransportSessionEnded {
        transport_session: String,
    },
    /// An API key was created or revoked: every process that checks keys reads them again.
    ApiKeysChanged {
        key_id: String,
    },
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
            EventKind::ValidationFailed { .. } => "ValidationFailed",
            EventKind::InferenceConflictDetected { .. } => "InferenceConflictDetected",
            EventKind::AgentStepStarted { .. } => "AgentStepStarted",
            EventKind::AgentStepCompleted { .. } => "AgentStepCompleted",
            EventKind::CallCancelled { .. } => "CallCancelled",
            EventKind::TransportSessionChanged { .. } => "TransportSessionChanged",
            EventKind::TransportSessionEnded { .. } => "TransportSessionEnded",
            EventKind::ApiKeysChanged { .. } => "ApiKeysChanged",
        }
    }

    /// The knowledge session the event is about; empty for one that concerns none.
    pub fn session_id(&self) -> &str {
        match self {
            EventKind::SessionCreated { session_id }
            | EventKind::SessionClosed { session_id }
            | EventKind::VersionCreated { session_id, .. }
            | EventKind::TransactionCommitted { session_id, .. }
            | EventKind::TransactionRolledBack { session_id, .. }
            | EventKind::ValidationFailed { session_id, .. }
            | EventKind::InferenceConflictDetected { session_id, .. }
            | EventKind::AgentStepStarted { session_id, .. }
            | EventKind::AgentStepCompleted { session_id, .. } => session_id,
            EventKind::CallCancelled { .. }
            | EventKind::TransportSessionChanged { .. }
            | EventKind::TransportSessionEnded { .. }
            | EventKind::ApiKeysChanged { .. } => "",
        }
    }

    /// Whether the event is about a knowledge session (what `/events` shows its clients), rather
    /// than news between the server's own processes.
    pub fn concerns_a_session(&self) -> bool {
        !self.session_id().is_empty()
    }
}
