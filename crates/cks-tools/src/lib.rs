//! The tools of cks-mcp and their one registry.
//!
//! Invariant: this crate knows nothing of MCP or HTTP serving; `cks-mcp` adapts the registry to MCP
//! and `ai_chat` offers the same registry's `llm_exposed` tools to an LLM. Its only outbound HTTP
//! client (apart from the LLM client it is handed) is the guarded fetcher, `fetch.rs`.

pub mod context;
pub mod convert;
pub mod error;
pub mod fetch;
pub mod html;
pub(crate) mod inference;
pub mod processes;
pub mod provenance;
pub mod registry;
pub mod schema;
pub mod telemetry;
pub mod tool;
pub mod tools;

pub use context::{ChatEvent, ChatEventSink, LlmAccess, ProgressSink, ToolContext};
pub use error::ToolError;
pub use registry::{RegisteredTool, Registry, UnknownTool};
pub use tool::{ArgumentCode, ArgumentFault, Coercion, DynTool, SessionCheck, Tool, ToolMeta};
