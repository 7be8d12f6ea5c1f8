//! Tool errors: business failures returned to the caller as data, `{"error": code, "message", ...}`,
//! with the reference's error codes. [`ErrorCode`] names every code once; the JSON form is made
//! by [`ToolError::to_value`], at the edge.
//!
//! Invariant: no code outside this module compares an error code with a string (tests check the
//! JSON a caller sees).

use serde_json::{Map, Value};

use cks_runtime::RuntimeError;

/// Declares [`ErrorCode`]: each variant with the code the caller reads.
macro_rules! error_codes {
    ($($variant:ident => $code:literal,)*) => {
        /// Every code a tool, the registry or `ai_chat` answers a business error with.
        #[non_exhaustive]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum ErrorCode {
            $($variant,)*
        }

        impl ErrorCode {
            /// Every code.
            pub const ALL: &[ErrorCode] = &[$(ErrorCode::$variant,)*];

            /// The code as the caller reads it (`"session_not_found"`).
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => $code,)*
                }
            }

            /// The code a caller's text names, if any (a result read back, a lower layer's code).
            pub fn parse(code: &str) -> Option<ErrorCode> {
                match code {
                    $($code => Some(ErrorCode::$variant),)*
                    _ => None,
                }
            }
        }
    };
}

error_codes! {
    ApprovalRequired => "approval_required",
    BadItems => "bad_items",
    BranchFailed => "branch_failed",
    Cancelled => "cancelled",
    ChatBusy => "chat_busy",
    ChatNotFound => "chat_not_found",
    CksParseError => "cks_parse_error",
    ConcurrentModification => "concurrent_modification",
    ConstructKnowledgeFailed => "construct_knowledge_failed",
    DeadlineExceeded => "deadline_exceeded",
    DuplicateObjectConflict => "duplicate_object_conflict",
    EmptyQuery => "empty_query",
    EvolutionFailed => "evolution_failed",
    EvolveFailed => "evolve_failed",
    FileNotFound => "file_not_found",
    GraphNotFound => "graph_not_found",
    ImportFailed => "import_failed",
    InternalError => "internal_error",
    InvalidArbiterDecision => "invalid_arbiter_decision",
    InvalidBundle => "invalid_bundle",
    InvalidFormat => "invalid_format",
    InvalidJson => "invalid_json",
    InvalidOperations => "invalid_operations",
    InvalidParameter => "invalid_parameter",
    InvalidResolutions => "invalid_resolutions",
    InvalidStateTransition => "invalid_state_transition",
    LlmCallFailed => "llm_call_failed",
    LlmOutputParseError => "llm_output_parse_error",
    LlmProviderUnavailable => "llm_provider_unavailable",
    MergeFailed => "merge_failed",
    MissingDecision => "missing_decision",
    MissingParameter => "missing_parameter",
    NoItems => "no_items",
    NoOperations => "no_operations",
    NotAnInferenceStep => "not_an_inference_step",
    NotApproved => "not_approved",
    NotFound => "not_found",
    NotSessionOwner => "not_session_owner",
    ObjectNotFound => "object_not_found",
    RateLimited => "rate_limited",
    RelationAlreadyExists => "relation_already_exists",
    SessionClosed => "session_closed",
    SessionExists => "session_exists",
    SessionNotFound => "session_not_found",
    StorageUnavailable => "storage_unavailable",
    TargetExists => "target_exists",
    TargetUnavailable => "target_unavailable",
    TaskNotDeadLettered => "task_not_dead_lettered",
    TaskNotFound => "task_not_found",
    TaskSessionMismatch => "task_session_mismatch",
    TooManyToolCalls => "too_many_tool_calls",
    ToolNotFound => "tool_not_found",
    ToolTaskTypeMismatch => "tool_task_type_mismatch",
    ToolUnavailable => "tool_unavailable",
    UnknownExtension => "unknown_extension",
    UnknownOrDisallowedTool => "unknown_or_disallowed_tool",
    UnknownTaskType => "unknown_task_type",
    UnknownTool => "unknown_tool",
    UnsafeUrl => "unsafe_url",
    UnsupportedBackend => "unsupported_backend",
    UnsupportedFormat => "unsupported_format",
    UnverifiedProvenance => "unverified_provenance",
    ValidationFailed => "validation_failed",
    VersionNotFound => "version_not_found",
    WriteFailed => "write_failed",
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A business error: becomes the tool's result, never a protocol error.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolError {
    pub code: ErrorCode,
    pub message: String,
    /// Extra keys merged into the result object (e.g. `diagnostics`).
    pub details: Map<String, Value>,
}

impl ToolError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ToolError { code, message: message.into(), details: Map::new() }
    }

    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.details.insert(key.to_owned(), value.into());
        self
    }

    pub fn missing_parameter(name: &str) -> Self {
        ToolError::new(ErrorCode::MissingParameter, format!("Missing required parameter: '{name}'."))
    }

    pub fn invalid_parameter(message: impl Into<String>) -> Self {
        ToolError::new(ErrorCode::InvalidParameter, message)
    }

    pub fn invalid_json(detail: impl std::fmt::Display) -> Self {
        ToolError::new(ErrorCode::InvalidJson, format!("The input is not a valid knowledge structure: {detail}"))
    }

    pub fn internal(message: impl Into<String>) -> Self {
        ToolError::new(ErrorCode::InternalError, format!("Internal error: {}", message.into()))
    }

    /// The result object.
    pub fn to_value(&self) -> Value {
        let mut map = Map::new();
        map.insert("error".into(), Value::String(self.code.as_str().to_owned()));
        map.insert("message".into(), Value::String(self.message.clone()));
        for (key, value) in &self.details {
            map.insert(key.clone(), value.clone());
        }
        Value::Object(map)
    }
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for ToolError {}

impl From<RuntimeError> for ToolError {
    fn from(e: RuntimeError) -> Self {
        // The runtime's codes are all listed (the tests hold every one they meet to this).
        debug_assert!(ErrorCode::parse(e.code()).is_some(), "unlisted runtime code {}", e.code());
        let error = ToolError::new(ErrorCode::parse(e.code()).unwrap_or(ErrorCode::InternalError), e.to_string());
        match e {
            RuntimeError::ValidationFailed { diagnostics } => {
                error.with("diagnostics", crate::convert::diagnostics_brief(&diagnostics))
            }
            RuntimeError::UnverifiedProvenance { diagnostics } => {
                ToolError::new(error.code, format!("Cannot commit evolution: {}", error.message))
                    .with("details", crate::provenance::details(&diagnostics))
            }
            _ => error,
        }
    }
}

impl From<cks_core::json::ParseError> for ToolError {
    fn from(e: cks_core::json::ParseError) -> Self {
        ToolError::invalid_json(e)
    }
}

impl From<cks_core::ops::OperationError> for ToolError {
    fn from(e: cks_core::ops::OperationError) -> Self {
        ToolError::new(ErrorCode::InvalidOperations, e.to_string())
    }
}

impl From<cks_core::UnknownExtension> for ToolError {
    fn from(e: cks_core::UnknownExtension) -> Self {
        ToolError::new(ErrorCode::UnknownExtension, e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::ErrorCode;

    #[test]
    fn every_code_reads_back_as_itself_and_is_distinct() {
        let mut seen = std::collections::HashSet::new();
        for code in ErrorCode::ALL {
            assert_eq!(ErrorCode::parse(code.as_str()), Some(*code));
            assert!(seen.insert(code.as_str()), "{code} twice");
            assert!(code.as_str().bytes().all(|b| b.is_ascii_lowercase() || b == b'_'), "{code}");
        }
        assert_eq!(ErrorCode::parse("no_such_code"), None);
    }
}
