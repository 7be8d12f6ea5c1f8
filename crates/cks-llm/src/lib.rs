//! `cks-llm`: the LLM client used by `ai_chat` and `construct_knowledge`.
//!
//! - [`conversation`]: the provider-neutral, Anthropic-shaped conversation ([`Message`], [`ContentBlock`],
//!   [`ChatRequest`], [`ChatResponse`]); provider-private data rides inside blocks as [`ProviderState`]; a
//!   request may ask for a JSON answer matching an [`OutputSchema`].
//! - `providers`: four adapters (Anthropic, OpenAI-compatible, Gemini, Ollama) that only translate.
//! - `http`: the one HTTP layer — timeouts, bounded jittered retries, SSE/NDJSON streams, redaction.
//! - [`config`]: provider selection and settings from an injected environment.
//! - [`LlmClient`]: `chat`, `status`, `list_models`, `telemetry`.
//! - [`ProviderEmbedder`]: search by meaning through a provider's embeddings endpoint (Ollama,
//!   OpenAI-compatible, Gemini), a [`cks_embed::Embedder`] on the same HTTP layer.
//!
//! Invariant: only `providers/*` know a provider's JSON; only `http` talks to the network; the client and
//! its callers never branch on a provider's name.
//!
//! ```no_run
//! # async fn demo() -> Result<(), cks_llm::LlmError> {
//! use cks_llm::{ChatRequest, LlmClient};
//! let client = LlmClient::from_env(|name| std::env::var(name).ok())?;
//! let answer = client.chat(ChatRequest::from_prompt("Say hello")).await?;
//! println!("{} ({} via {})", answer.text(), answer.model, answer.provider);
//! # Ok(()) }
//! ```

mod client;
pub mod config;
pub mod conversation;
mod embeddings;
mod error;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod http;
mod providers;
mod redact;
mod retry;
mod stream;
mod telemetry;

pub use client::{ChatOptions, DeltaSink, LlmClient, LlmStatus};
pub use config::{
    HttpConfig, LlmConfig, MAX_MODEL_NAME_LEN, ProviderChoice, ProviderConfig, RetryPolicy, check_model_name,
};
pub use conversation::{
    ChatRequest, ChatResponse, ContentBlock, Message, OutputSchema, ProviderKind, ProviderState, Role, StopReason,
    ToolCall, ToolResult, ToolSpec, Usage,
};
pub use embeddings::{EmbedderError, ProviderEmbedder, default_embedding_model, embedding_providers};
pub use error::{ErrorContext, ErrorKind, LlmError};
pub use providers::ModelInfo;
pub use redact::{REDACTED, Redactor, Secret, secret_variables};
pub use telemetry::{CallOutcome, CallRecord, Operation, TelemetrySnapshot, Totals};
