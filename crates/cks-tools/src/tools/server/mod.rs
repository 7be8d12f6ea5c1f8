//! The server itself: what it can do beyond the graph tools, whether each part is on, and how to
//! find a tool.

mod find_tools;
mod list_plugins;

use crate::tool::{Listed, listed};

pub(crate) fn tools() -> Vec<Listed> {
    vec![listed(list_plugins::ListPlugins), listed(find_tools::FindTools)]
}
