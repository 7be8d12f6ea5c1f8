//! Runtime errors, each with the reference's error code for tool results.

use cks_core::ops::OperationError;
use cks_core::validate::{Diagnostic, Severity};

use crate::store::StoreError;

/// Why a runtime call failed.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("Session '{0}' not found.")]
    SessionNotFound(String),
    #[error(
        "Session '{0}' is already closed and cannot be modified. Open a new session or branch from an existing one."
    )]
    SessionClosed(String),
    #[error("Version '{version_id}' not found in session '{session_id}'.")]
    VersionNotFound { session_id: String, version_id: String },
    /// A read of the past named a time no version of the session answers.
    #[error("No version of session '{session_id}' to read: {detail}.")]
    NoVersionAt { session_id: String, detail: String },
    #[error(transparent)]
    Operation(#[from] OperationError),
    #[error("The knowledge structure is invalid. Details: {}", summarize(diagnostics))]
    ValidationFailed { diagnostics: Vec<Diagnostic> },
    /// The new state holds a `VerificationRecord` whose signature does not verify under the key
    /// the commit asked for (the diagnostics are the error-level provenance findings).
    #[error("VerificationRecord has invalid or missing provenance signature.")]
    UnverifiedProvenance { diagnostics: Vec<Diagnostic> },
    #[error("Session '{session_id}' was modified concurrently; gave up after {attempts} attempt(s). Retry the call.")]
    ConcurrentModification { session_id: String, attempts: u32 },
    #[error("{0}")]
    Merge(#[from] cks_core::merge::MergeError),
    #[error(
        "No merge base for merging '{source_session_id}' into '{target_session_id}': the source is not a branch of the target; pass base_version_id."
    )]
    NoMergeBase { target_session_id: String, source_session_id: String },
    #[error("Stored history of session '{session_id}' is inconsistent: {detail}")]
    Corrupt { session_id: String, detail: String },
    #[error("Storage error: {0}")]
    Store(StoreError),
}

fn summarize(diagnostics: &[Diagnostic]) -> String {
    let errors: Vec<String> = diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .map(|d| match &d.location {
            Some(location) => format!("{} at '{}': {}", d.code, location, d.message),
            None => format!("{}: {}", d.code, d.message),
        })
        .collect();
    errors.join("; ")
}

impl RuntimeError {
    /// The error code used in tool results (`{"error": code, "message": ...}`).
    pub fn code(&self) -> &'static str {
        match self {
            RuntimeError::SessionNotFound(_) => "session_not_found",
            RuntimeError::SessionClosed(_) => "session_closed",
            RuntimeError::VersionNotFound { .. } | RuntimeError::NoVersionAt { .. } => "version_not_found",
            RuntimeError::Operation(_) => "invalid_operations",
            RuntimeError::ValidationFailed { .. } | RuntimeError::UnverifiedProvenance { .. } => "validation_failed",
            RuntimeError::ConcurrentModification { .. } => "concurrent_modification",
            RuntimeError::Merge(_) | RuntimeError::NoMergeBase { .. } => "merge_failed",
            RuntimeError::Store(StoreError::Unavailable(_)) => "storage_unavailable",
            RuntimeError::Corrupt { .. } | RuntimeError::Store(_) => "internal_error",
        }
    }
}

impl From<StoreError> for RuntimeError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::SessionNotFound(id) => RuntimeError::SessionNotFound(id),
            StoreError::SessionClosed(id) => RuntimeError::SessionClosed(id),
            StoreError::Corrupt(detail) => RuntimeError::Corrupt { session_id: String::new(), detail },
            other => RuntimeError::Store(other),
        }
    }
}
