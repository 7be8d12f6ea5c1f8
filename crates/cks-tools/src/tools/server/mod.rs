//! The server itself: what it can do beyond the graph tools, and whether each part is on.

mod list_plugins;

use crate::tool::{Listed, listed};

pub(crate) fn tools() -> Vec<Listed> {
    vec![listed(list_plugins::ListPlugins)]
}
