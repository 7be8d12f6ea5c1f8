//! `update_graph_lifecycle`: move a registered graph to another lifecycle state.

use crate::ErrorCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use cks_runtime::gallery::{Lifecycle, Transition};

use super::{graph_not_found, required};
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Named, Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The registered name of the graph.
    pub(crate) name: String,
    /// The state to move to.
    #[schemars(extend("enum" = ["draft", "published", "active", "stale", "under_review", "archived"]))]
    pub(crate) state: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    /// False when the graph was already in the requested state.
    updated: bool,
    /// Why nothing changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    name: String,
    previous_state: String,
    new_state: String,
}

pub(crate) struct UpdateGraphLifecycle;

#[async_trait::async_trait]
impl Tool for UpdateGraphLifecycle {
    type Input = Input;
    type Output = Output;
    const NAMED: &'static [(&'static str, Named)] = &[("name", Named::Graph)];
    const TITLE: &'static str = "Set a graph's lifecycle";
    const META: ToolMeta = ToolMeta {
        name: "update_graph_lifecycle",
        description: "Move a registered graph to another lifecycle state. Allowed: draft → published or archived; \
            published → active, under_review or archived; active → stale, under_review or archived; stale → \
            under_review, active or archived; under_review → active, published or archived; archived is final. \
            A graph registered without a state is 'published' when public, else 'draft'. Another move is \
            'invalid_state_transition' (with 'allowed'); an unknown name 'graph_not_found'. Returns {updated, \
            name, previous_state, new_state} (updated false, with 'reason', when already in that state).",
        mutates_graph: true,
        creates_session: false,
        destructive: false,
        idempotent: true,
        open_world: false,
        session_fields: &[],
        session_checks: &[],
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        let name = required(&input.name, "name")?;
        let to: Lifecycle = required(&input.state, "state")?.parse().map_err(|()| {
            let allowed: Vec<&str> = Lifecycle::ALL.iter().map(|l| l.as_str()).collect();
            ToolError::invalid_parameter(format!(
                "Invalid value for 'state': '{}'. Allowed: {}.",
                input.state,
                allowed.join(", ")
            ))
        })?;
        let outcome = ctx.runtime.transition_graph(name, to).await?.ok_or_else(|| graph_not_found(name))?;
        let output = |updated, reason: Option<&str>, from: Lifecycle| Output {
            updated,
            reason: reason.map(str::to_owned),
            name: name.to_owned(),
            previous_state: from.as_str().to_owned(),
            new_state: to.as_str().to_owned(),
        };
        match outcome {
            Transition::Moved { from, .. } => Ok(output(true, None, from)),
            Transition::Unchanged(state) => Ok(output(false, Some("already in requested state"), state)),
            Transition::Refused { from, to } => {
                let allowed: Vec<&str> = from.next().iter().map(|l| l.as_str()).collect();
                Err(ToolError::new(
                    ErrorCode::InvalidStateTransition,
                    format!("Graph '{name}' cannot transition from '{from}' to '{to}'."),
                )
                .with("name", name)
                .with("previous_state", from.as_str())
                .with("requested_state", to.as_str())
                .with("allowed", allowed))
            }
        }
    }
}
