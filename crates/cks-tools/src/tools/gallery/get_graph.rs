//! `get_graph`: the entry registered under an exact name, whatever its visibility.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{GraphRecord, hide_unreadable_sources, required};
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Named, Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The registered name to look up.
    pub(crate) name: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    /// False when no graph is registered under the name (the entry's keys are then absent).
    found: bool,
    #[serde(flatten)]
    record: Option<GraphRecord>,
}

pub(crate) struct GetGraph;

#[async_trait::async_trait]
impl Tool for GetGraph {
    type Input = Input;
    type Output = Output;
    const NAMED: &'static [(&'static str, Named)] = &[("name", Named::Graph)];
    const TITLE: &'static str = "Get a gallery graph";
    const META: ToolMeta = ToolMeta {
        name: "get_graph",
        description: "Look up a graph in the gallery by its exact registered name, to resume work on its session \
            instead of rebuilding it. Works for every visibility (a private graph is found by its name only). \
            Returns {found: true, name, session_id, description, tags, created_at, updated_at, public, visibility, \
            team, source_graph_name, lifecycle_state}, or {found: false}.",
        mutates_graph: false,
        creates_session: false,
        destructive: false,
        idempotent: true,
        open_world: false,
        session_fields: &[],
        session_checks: &[],
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        let mut entry: Vec<_> = ctx.runtime.graph(required(&input.name, "name")?).await?.into_iter().collect();
        hide_unreadable_sources(ctx, &mut entry).await?;
        let entry = entry.pop();
        Ok(Output { found: entry.is_some(), record: entry.map(GraphRecord::from) })
    }
}
