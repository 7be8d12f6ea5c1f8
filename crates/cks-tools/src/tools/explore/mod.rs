//! Graph exploration: subgraph queries, search, drawing, contradiction and duplicate checks.

pub(crate) mod detect_contradictions;
mod find_duplicates;
mod query_subgraph;
mod search_semantic;
mod visualize_graph;

use crate::tool::{Listed, listed};

pub(crate) fn tools() -> Vec<Listed> {
    vec![
        listed(query_subgraph::QuerySubgraph),
        listed(search_semantic::SearchSemantic),
        listed(visualize_graph::VisualizeGraph),
        listed(detect_contradictions::DetectContradictions),
        listed(find_duplicates::FindDuplicates),
    ]
}
