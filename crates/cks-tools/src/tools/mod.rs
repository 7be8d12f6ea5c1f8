//! Every tool, grouped by area; each group lists its tools in listing order.

pub mod agents;
pub mod branches;
pub mod chats;
pub mod conflicts;
pub mod enrichment;
pub mod explore;
pub mod export;
pub mod gallery;
pub mod knowledge;
pub mod llm;
pub mod pipeline;
pub mod processes;
pub mod server;
pub mod storage;
pub mod versions;

use crate::tool::Listed;

/// The standard tool set, in `tools/list` order.
pub(crate) fn all() -> Vec<Listed> {
    let mut tools = Vec::new();
    tools.extend(knowledge::tools());
    tools.extend(versions::tools());
    tools.extend(branches::tools());
    tools.extend(explore::tools());
    tools.extend(export::tools());
    tools.extend(gallery::tools());
    tools.extend(llm::tools());
    tools.extend(chats::tools());
    tools.extend(conflicts::tools());
    tools.extend(agents::tools());
    tools.extend(processes::tools());
    tools.extend(pipeline::tools());
    tools.extend(enrichment::tools());
    tools.extend(storage::tools());
    tools.extend(server::tools());
    tools
}
