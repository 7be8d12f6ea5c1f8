//! Every tool, grouped by area; each group lists its tools in listing order.

pub mod agents;
pub mod branches;
pub mod chats;
pub mod conflicts;
pub mod enrichment;
pub mod explore;
pub mod export;
pub mod gallery;
pub mod keys;
pub mod knowledge;
pub mod llm;
pub mod memory;
pub mod pipeline;
pub mod processes;
pub mod server;
pub mod storage;
pub mod versions;

use crate::tool::Listed;

/// The standard tool set by group (the names `CKS_MCP_TOOLS` accepts), in `tools/list` order.
pub(crate) fn groups() -> Vec<(&'static str, Vec<Listed>)> {
    vec![
        ("knowledge", knowledge::tools()),
        ("versions", versions::tools()),
        ("branches", branches::tools()),
        ("explore", explore::tools()),
        ("export", export::tools()),
        ("gallery", gallery::tools()),
        ("llm", llm::tools()),
        ("memory", memory::tools()),
        ("chats", chats::tools()),
        ("conflicts", conflicts::tools()),
        ("agents", agents::tools()),
        ("processes", processes::tools()),
        ("pipeline", pipeline::tools()),
        ("enrichment", enrichment::tools()),
        ("storage", storage::tools()),
        ("keys", keys::tools()),
        ("server", server::tools()),
    ]
}
