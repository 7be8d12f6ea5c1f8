//! Graph exploration: subgraph queries.

mod query_subgraph;

use std::sync::Arc;

use crate::tool::DynTool;

pub(crate) fn tools() -> Vec<Arc<dyn DynTool>> {
    vec![Arc::new(query_subgraph::QuerySubgraph)]
}
