//! Graph exploration: subgraph queries, search, drawing, contradiction checks.

pub(crate) mod detect_contradictions;
mod query_subgraph;
mod search_semantic;
mod visualize_graph;

use std::sync::Arc;

use crate::tool::DynTool;

pub(crate) fn tools() -> Vec<Arc<dyn DynTool>> {
    vec![
        Arc::new(query_subgraph::QuerySubgraph),
        Arc::new(search_semantic::SearchSemantic),
        Arc::new(visualize_graph::VisualizeGraph),
        Arc::new(detect_contradictions::DetectContradictions),
    ]
}
