//! `list_graphs`: the graphs a caller may discover, most recently updated first.

use schemars::JsonSchema;
use serde::Deserialize;

use cks_runtime::gallery::GraphFilter;

use super::{Listing, given, listing};
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Coercion, Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// Only graphs with a tag containing this text (case-insensitive).
    pub(crate) tag: Option<String>,
    /// Only public graphs, even with 'team'.
    #[serde(default)]
    pub(crate) public_only: bool,
    /// Also this team's graphs (with an access token: one of your groups).
    pub(crate) team: Option<String>,
    #[serde(flatten)]
    pub(crate) paging: crate::bounds::Paging,
}

pub(crate) struct ListGraphs;

#[async_trait::async_trait]
impl Tool for ListGraphs {
    type Input = Input;
    type Output = Listing;
    const ARGUMENT_COERCIONS: &'static [(&'static str, Coercion)] = &[("public_only", Coercion::Truthy)];
    const TITLE: &'static str = "List gallery graphs";
    const META: ToolMeta = ToolMeta {
        name: "list_graphs",
        description: "List the gallery graphs you may discover, most recently updated first: every public graph, \
            plus those of 'team' (private graphs are found by exact name with get_graph). Returns {graphs: [{name, \
            session_id, description, tags, updated_at, visibility, lifecycle_state}]}, a page of about 48 KB by default \
            (limit, offset; next_offset when cut).",
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
        let filter =
            GraphFilter { public_only: input.public_only, team: given(input.team), tag: given(input.tag), query: None };
        listing(ctx, filter, &input.paging).await
    }
}
