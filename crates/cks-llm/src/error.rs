//! The typed error every call returns, classified so that callers can `match` on what to do next.
//!
//! Each variant carries an [`ErrorContext`]: which provider and model, the HTTP status when there was one,
//! how many attempts were made, and a message that says what to do. Messages pass through the
//! [`Redactor`](crate::Redactor) before an error leaves the HTTP layer, so no configured secret appears here.

use std::fmt;
use std::time::Duration;

use serde::Serialize;

use crate::conversation::ProviderKind;

/// What went wrong, with where and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LlmError {
    /// The key was rejected (401/403). Not retried.
    #[error("authentication failed: {0}")]
    Auth(ErrorContext),
    /// The provider rejected the request (400, 404, 409, 413, 422, ...). Not retried.
    #[error("request rejected: {0}")]
    BadRequest(ErrorContext),
    /// Rate limit or quota (429). Retried unless the quota cannot clear soon.
    #[error("rate limited: {0}")]
    RateLimited(ErrorContext),
    /// The provider is overloaded (Anthropic 529, 503, `overloaded_error`). Retried.
    #[error("provider overloaded: {0}")]
    Overloaded(ErrorContext),
    /// Any other 5xx. Retried.
    #[error("provider server error: {0}")]
    Server(ErrorContext),
    /// No answer in time (our request timeout, 408, 504). Retried.
    #[error("timed out: {0}")]
    Timeout(ErrorContext),
    /// A 2xx answer we could not understand (not JSON, wrong shape). Not retried.
    #[error("malformed response: {0}")]
    MalformedResponse(ErrorContext),
    /// An error reported inside a 200 stream, or a stream that ended early.
    #[error("stream failed: {0}")]
    StreamError(ErrorContext),
    /// The provider could not be reached (connection refused, DNS, reset). Retried.
    #[error("provider unavailable: {0}")]
    Unavailable(ErrorContext),
    /// No provider is configured, or the chosen one lacks its key or has an invalid setting. Not retried.
    #[error("LLM not configured: {0}")]
    NotConfigured(ErrorContext),
}

/// The class of an [`LlmError`], for telemetry and quick matching.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// See [`LlmError::Auth`].
    Auth,
    /// See [`LlmError::BadRequest`].
    BadRequest,
    /// See [`LlmError::RateLimited`].
    RateLimited,
    /// See [`LlmError::Overloaded`].
    Overloaded,
    /// See [`LlmError::Server`].
    Server,
    /// See [`LlmError::Timeout`].
    Timeout,
    /// See [`LlmError::MalformedResponse`].
    MalformedResponse,
    /// See [`LlmError::StreamError`].
    StreamError,
    /// See [`LlmError::Unavailable`].
    Unavailable,
    /// See [`LlmError::NotConfigured`].
    NotConfigured,
}

impl ErrorKind {
    /// The class's name, as telemetry writes it (`rate_limited`).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Auth => "auth",
            ErrorKind::BadRequest => "bad_request",
            ErrorKind::RateLimited => "rate_limited",
            ErrorKind::Overloaded => "overloaded",
            ErrorKind::Server => "server",
            ErrorKind::Timeout => "timeout",
            ErrorKind::MalformedResponse => "malformed_response",
            ErrorKind::StreamError => "stream_error",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::NotConfigured => "not_configured",
        }
    }
}

/// Where an error happened and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ErrorContext {
    /// The provider called (absent when none could be chosen).
    pub provider: Option<ProviderKind>,
    /// The model requested.
    pub model: Option<String>,
    /// The HTTP status, when the provider answered with one.
    pub status: Option<u16>,
    /// What happened and what to do, already redacted.
    pub message: String,
    /// The wait the provider asked for (retry-after, retry-after-ms, Gemini `RetryInfo`).
    pub retry_after: Option<Duration>,
    /// Attempts made (1 = no retry).
    pub attempts: u32,
}

impl ErrorContext {
    /// A context with only a message.
    pub fn msg(message: impl Into<String>) -> Self {
        ErrorContext { message: message.into(), ..ErrorContext::default() }
    }

    /// A context naming provider and model.
    pub fn new(provider: ProviderKind, model: &str, message: impl Into<String>) -> Self {
        ErrorContext {
            provider: Some(provider),
            model: Some(model.to_owned()),
            message: message.into(),
            ..ErrorContext::default()
        }
    }
}

impl fmt::Display for ErrorContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(m) = &self.model {
            parts.push(format!("model {m}"));
        }
        if let Some(s) = self.status {
            parts.push(format!("HTTP {s}"));
        }
        if self.attempts > 1 {
            parts.push(format!("{} attempts", self.attempts));
        }
        if let Some(p) = self.provider {
            write!(f, "{p}")?;
            if !parts.is_empty() {
                f.write_str(" ")?;
            }
        }
        if !parts.is_empty() {
            write!(f, "({})", parts.join(", "))?;
        }
        if self.provider.is_some() || !parts.is_empty() {
            f.write_str(": ")?;
        }
        f.write_str(&self.message)
    }
}

impl LlmError {
    /// The error's class.
    pub fn kind(&self) -> ErrorKind {
        match self {
            LlmError::Auth(_) => ErrorKind::Auth,
            LlmError::BadRequest(_) => ErrorKind::BadRequest,
            LlmError::RateLimited(_) => ErrorKind::RateLimited,
            LlmError::Overloaded(_) => ErrorKind::Overloaded,
            LlmError::Server(_) => ErrorKind::Server,
            LlmError::Timeout(_) => ErrorKind::Timeout,
            LlmError::MalformedResponse(_) => ErrorKind::MalformedResponse,
            LlmError::StreamError(_) => ErrorKind::StreamError,
            LlmError::Unavailable(_) => ErrorKind::Unavailable,
            LlmError::NotConfigured(_) => ErrorKind::NotConfigured,
        }
    }

    /// Build an error of `kind`.
    pub fn from_kind(kind: ErrorKind, ctx: ErrorContext) -> Self {
        match kind {
            ErrorKind::Auth => LlmError::Auth(ctx),
            ErrorKind::BadRequest => LlmError::BadRequest(ctx),
            ErrorKind::RateLimited => LlmError::RateLimited(ctx),
            ErrorKind::Overloaded => LlmError::Overloaded(ctx),
            ErrorKind::Server => LlmError::Server(ctx),
            ErrorKind::Timeout => LlmError::Timeout(ctx),
            ErrorKind::MalformedResponse => LlmError::MalformedResponse(ctx),
            ErrorKind::StreamError => LlmError::StreamError(ctx),
            ErrorKind::Unavailable => LlmError::Unavailable(ctx),
            ErrorKind::NotConfigured => LlmError::NotConfigured(ctx),
        }
    }

    /// Where it happened and what to do.
    pub fn context(&self) -> &ErrorContext {
        match self {
            LlmError::Auth(c)
            | LlmError::BadRequest(c)
            | LlmError::RateLimited(c)
            | LlmError::Overloaded(c)
            | LlmError::Server(c)
            | LlmError::Timeout(c)
            | LlmError::MalformedResponse(c)
            | LlmError::StreamError(c)
            | LlmError::Unavailable(c)
            | LlmError::NotConfigured(c) => c,
        }
    }

    /// Mutable access to the context (the HTTP layer fills in attempts and redacts).
    pub(crate) fn context_mut(&mut self) -> &mut ErrorContext {
        match self {
            LlmError::Auth(c)
            | LlmError::BadRequest(c)
            | LlmError::RateLimited(c)
            | LlmError::Overloaded(c)
            | LlmError::Server(c)
            | LlmError::Timeout(c)
            | LlmError::MalformedResponse(c)
            | LlmError::StreamError(c)
            | LlmError::Unavailable(c)
            | LlmError::NotConfigured(c) => c,
        }
    }

    /// Whether trying again later may succeed (the class, not the retry budget).
    pub fn is_transient(&self) -> bool {
        matches!(
            self.kind(),
            ErrorKind::RateLimited
                | ErrorKind::Overloaded
                | ErrorKind::Server
                | ErrorKind::Timeout
                | ErrorKind::Unavailable
                | ErrorKind::StreamError
        )
    }

    /// A `NotConfigured` error with only a message.
    pub(crate) fn not_configured(provider: Option<ProviderKind>, message: impl Into<String>) -> Self {
        LlmError::NotConfigured(ErrorContext { provider, message: message.into(), ..ErrorContext::default() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_provider_model_status_and_attempts() {
        let mut ctx = ErrorContext::new(ProviderKind::Anthropic, "claude-x", "slow down");
        ctx.status = Some(429);
        ctx.attempts = 4;
        let e = LlmError::RateLimited(ctx);
        assert_eq!(e.to_string(), "rate limited: anthropic (model claude-x, HTTP 429, 4 attempts): slow down");
        assert_eq!(e.kind(), ErrorKind::RateLimited);
        assert!(e.is_transient());
        let e = LlmError::not_configured(None, "set X");
        assert_eq!(e.to_string(), "LLM not configured: set X");
    }
}
