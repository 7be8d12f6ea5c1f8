//! Test support for the cks-mcp workspace: a scripted LLM provider server, throw-away PostgreSQL
//! servers ([`postgres`]), and a small web server for pages a test fetches ([`web`]).
//!
//! [`ProviderServer`] listens on `127.0.0.1` (a free port) and speaks four wire formats at once: Anthropic
//! Messages, OpenAI-compatible chat completions, Google Gemini `generateContent` and Ollama `/api/chat`, each
//! streaming and not. Tests queue [`Reply`]s; each request to a chat endpoint pops the next one and gets it
//! rendered in the wire format of the endpoint that was hit, so one script works for every provider. Replies can
//! be answers (text, tool calls, both, or the JSON of a structured answer: [`Reply::Json`]) or faults (rate limits, overload, server errors, garbage, truncated bodies,
//! errors in the middle of a stream, dropped connections), and a streamed request can be answered with the whole
//! non-streamed JSON body, as some gateways do ([`Reply::NotStreamed`]). Every request is recorded, and each
//! endpoint makes the strict request checks of the real API (see the provider modules), answering client bugs
//! with the provider's own 4xx error.
//!
//! ```no_run
//! # async fn demo() {
//! use cks_testkit::{ProviderServer, Reply, ToolCall};
//! use serde_json::json;
//!
//! let server = ProviderServer::start().await;
//! server.push(Reply::ToolCalls(vec![ToolCall::new("get_weather", json!({"city": "Oslo"}))]));
//! server.push(Reply::RateLimited { retry_after_secs: Some(1) });
//! server.push(Reply::text("It is 4 C with light snow in Oslo."));
//! // point the client under test at server.base_url(), then:
//! let seen = server.requests();
//! # let _ = seen;
//! # }
//! ```
//!
//! The wire shapes follow the providers' published API references and their documented real-world quirks.
//! The strict checks of each endpoint are listed in its module's source docs (`src/provider/*.rs`); the ones that
//! matter most: Anthropic wants `x-api-key` (401 without), `anthropic-version`, `model`, `max_tokens`, no unknown
//! fields at the top level or in content blocks, and `tool_result`s that answer exactly the `tool_use`s of the
//! message before; OpenAI wants each `tool` message to answer a `tool_calls` id of the assistant message before,
//! and string `arguments`; Gemini wants an API key (403 without), `parameters` without unsupported JSON-Schema
//! keywords, thought signatures returned on the parts they were issued on, and object `functionResponse.response`;
//! Ollama wants `model`, `messages` and object `arguments`. A rejected request does not consume a scripted reply.
//!
//! The same server answers the embeddings endpoints of Ollama (`/api/embed`), OpenAI (`/v1/embeddings`) and
//! Gemini (`:batchEmbedContents`) with deterministic vectors ([`embedding`]), checks their requests as strictly,
//! and takes scripted faults for them from a queue of their own ([`ProviderServer::push_embedding`]).
//!
//! Note for HTTP clients in tests: the workspace's `reqwest` is built with `rustls-no-provider`, and building a
//! `reqwest::Client` panics, even for plain `http://`, unless a rustls crypto provider is installed first (e.g.
//! `rustls::crypto::ring::default_provider().install_default()`).

pub mod postgres;
mod provider;
mod script;
mod server;
pub mod web;

pub use provider::{EMBEDDING_DIMS, Provider, embedding};
pub use script::{DEFAULT_USAGE, Reply, ToolCall};
pub use server::{ProviderServer, RecordedRequest};
