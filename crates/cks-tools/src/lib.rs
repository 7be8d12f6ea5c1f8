//! The tools of cks-mcp and their one registry.
//!
//! Invariant: this crate knows nothing of MCP or HTTP serving; `cks-mcp` adapts the registry to MCP
//! and `ai_chat` offers the same registry's `llm_exposed` tools to an LLM. It fetches URLs only
//! through the guarded fetcher of `cks-web`.

pub mod api_keys;
mod bounds;
pub mod context;
pub mod convert;
pub mod critic_metrics;
pub mod discovery;
pub mod error;
pub mod memory;
mod past;
pub mod principal;
pub mod profile;
pub mod provenance;
pub mod registry;
pub mod schema;
pub mod services;
pub mod telemetry;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod tool;
pub mod tools;

pub use context::{LlmAccess, ProgressSink, ToolContext};
pub use error::{ErrorCode, ToolError};
pub use principal::{Principal, Scope};
pub use profile::{ToolProfile, UnknownInProfile};
pub use registry::{RegisteredTool, Registry, SharedSchema, UnknownTool};
pub use tool::{ArgumentCode, ArgumentFault, Coercion, DynTool, Hints, Named, SessionCheck, Tool, ToolMeta};
