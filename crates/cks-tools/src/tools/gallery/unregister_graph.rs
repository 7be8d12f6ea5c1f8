//! `unregister_graph`: remove a name from the gallery (never the session it points at).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{graph_not_found, required};
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Named, Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The registered name to remove.
    pub(crate) name: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    /// Always true.
    unregistered: bool,
    name: String,
}

pub(crate) struct UnregisterGraph;

#[async_trait::async_trait]
impl Tool for UnregisterGraph {
    type Input = Input;
    type Output = Output;
    const NAMED: &'static [(&'static str, Named)] = &[("name", Named::Graph)];
    const TITLE: &'static str = "Remove a gallery name";
    const META: ToolMeta = ToolMeta {
        name: "unregister_graph",
        description: "Remove a name from the gallery: get_graph, list_graphs and search_graphs no longer find \
            it. The session and its graph are not touched and stay reachable by session id. An unknown name is \
            'graph_not_found'. Returns {unregistered: true, name}.",
        mutates_graph: true,
        creates_session: false,
        destructive: true,
        // A second call finds no name and changes nothing.
        idempotent: true,
        open_world: false,
        session_fields: &[],
        session_checks: &[],
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        let name = required(&input.name, "name")?;
        if !ctx.runtime.unregister_graph(name).await? {
            return Err(graph_not_found(name));
        }
        Ok(Output { unregistered: true, name: input.name })
    }
}
