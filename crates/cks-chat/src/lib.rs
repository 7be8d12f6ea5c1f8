//! `ai_chat`: one chat turn in which an LLM calls this server's own tools against one session.
//!
//! - [`turn`]: the loop. It sees a [`turn::ChatModel`] and a [`turn::ToolExecutor`] and nothing
//!   else: no provider names, no MCP, no registry.
//! - [`executor`]: the executor over the tool registry — the exposure rules and session pinning.
//! - [`offer`]: the compact tool set a chat model is offered first, with descriptions written for
//!   it, and the written offers of the tools it can find; `discovery`: `find_tools`.
//! - [`grounding`]: what the model is told about its session before each turn.
//! - [`events`]: the live events of a turn, for a caller that watches it.
//! - [`tool`]: the `ai_chat` tool that wires the two to the LLM client and the registry, and
//!   saves the turns of stored chats.
//!
//! Invariant: a chat turn can only run tools that are declared `llm_exposed` and not on the
//! server-management denylist, and every session-naming argument of every call is the chat's own
//! session.

mod discovery;
pub mod events;
pub mod executor;
pub mod grounding;
pub mod offer;
pub mod tool;
pub mod turn;

pub use events::{ChatEvent, ChatEventSink, watch_with};
pub use executor::{DENIED_TOOLS, RegistryExecutor};
pub use offer::{CHAT_TOOLS, ChatTool, DISCOVERABLE, FIND_TOOLS};
pub use tool::{AI_CHAT_VARIABLES, AiChat, AiChatConfig, AiChatConfigError, SYSTEM_PROMPT};
pub use turn::{
    ChatModel, Decision, Execution, Origin, PendingApproval, Stop, ToolCallRecord, ToolExecutor, TurnConfig,
    TurnFailure, TurnObserver, TurnOutput, continue_turn, pending_approval, result_summary, run_turn,
};
