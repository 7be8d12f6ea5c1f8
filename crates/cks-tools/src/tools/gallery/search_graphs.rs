//! `search_graphs`: the discoverable graphs whose name, description or tags contain a text.

use crate::ErrorCode;
use schemars::JsonSchema;
use serde::Deserialize;

use cks_runtime::gallery::GraphFilter;

use super::{Listing, given, listing};
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Coercion, Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// Text to find (case-insensitive) in each graph's name, description and tags.
    pub(crate) query: String,
    /// Only graphs whose tags contain this text (case-insensitive).
    pub(crate) tag: Option<String>,
    /// Only public graphs, even when 'team' is given.
    #[serde(default)]
    pub(crate) public_only: bool,
    /// Also this team's graphs (with an access token: one of the caller's groups).
    pub(crate) team: Option<String>,
    #[serde(flatten)]
    pub(crate) paging: crate::bounds::Paging,
}

pub(crate) struct SearchGraphs;

#[async_trait::async_trait]
impl Tool for SearchGraphs {
    type Input = Input;
    type Output = Listing;
    const ARGUMENT_COERCIONS: &'static [(&'static str, Coercion)] = &[("public_only", Coercion::Truthy)];
    const TITLE: &'static str = "Search the gallery";
    const META: ToolMeta = ToolMeta {
        name: "search_graphs",
        description: "Search the gallery: the graphs list_graphs would show (public ones, plus the graphs of \
            'team' when given) whose name, description or tags contain 'query' (case-insensitive), most recently \
            updated first. An empty query is 'empty_query'. Returns {graphs: [...]} with the entries and pages of \
            list_graphs.",
        mutates_graph: false,
        creates_session: false,
        destructive: false,
        idempotent: true,
        open_world: false,
        session_fields: &[],
        session_checks: &[],
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Listing, ToolError> {
        let query = input.query.trim();
        if query.is_empty() {
            return Err(ToolError::new(ErrorCode::EmptyQuery, "Query must not be empty."));
        }
        let filter = GraphFilter {
            public_only: input.public_only,
            team: given(input.team),
            tag: given(input.tag),
            query: Some(query.to_owned()),
        };
        listing(ctx, filter, &input.paging).await
    }
}
