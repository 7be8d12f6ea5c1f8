//! Tool errors: business failures returned to the caller as data, `{"error": code, "message", ...}`,
//! with the reference's error codes.

use serde_json::{Map, Value};
use std::borrow::Cow;

use cks_runtime::RuntimeError;

/// A business error: becomes the tool's result, never a protocol error.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolError {
    pub code: Cow<'static, str>,
    pub message: String,
    /// Extra keys merged into the result object (e.g. `diagnostics`).
    pub details: Map<String, Value>,
}

impl ToolError {
    pub fn new(code: impl Into<Cow<'static, str>>, message: impl Into<String>) -> Self {
        ToolError { code: code.into(), message: message.into(), details: Map::new() }
    }

    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.details.insert(key.to_owned(), value.into());
        self
    }

    pub fn missing_parameter(name: &str) -> Self {
        ToolError::new("missing_parameter", format!("Missing required parameter: '{name}'."))
    }

    pub fn invalid_parameter(message: impl Into<String>) -> Self {
        ToolError::new("invalid_parameter", message)
    }

    pub fn invalid_json(detail: impl std::fmt::Display) -> Self {
        ToolError::new("invalid_json", format!("The input is not a valid knowledge structure: {detail}"))
    }

    pub fn internal(message: impl Into<String>) -> Self {
        ToolError::new("internal_error", format!("Internal error: {}", message.into()))
    }

    /// The result object.
    pub fn to_value(&self) -> Value {
        let mut map = Map::new();
        map.insert("error".into(), Value::String(self.code.to_string()));
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
        let error = ToolError::new(e.code(), e.to_string());
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
        ToolError::new("invalid_operations", e.to_string())
    }
}

impl From<cks_core::UnknownExtension> for ToolError {
    fn from(e: cks_core::UnknownExtension) -> Self {
        ToolError::new("unknown_extension", e.to_string())
    }
}
