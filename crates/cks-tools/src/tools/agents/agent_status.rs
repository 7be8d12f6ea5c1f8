//! `agent_status`: one background sweeper's status.

use super::{AgentInput, AgentOutput};
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Tool, ToolMeta};

pub(crate) struct AgentStatus;

#[async_trait::async_trait]
impl Tool for AgentStatus {
    type Input = AgentInput;
    type Output = AgentOutput;
    const TITLE: &'static str = "Sweeper status";
    const META: ToolMeta = ToolMeta {
        name: "agent_status",
        description: "The status of one background sweeper by 'agent_id' (see list_agents): the same fields as an \
            entry of list_agents. An id that names no sweeper answers {agent_id, found: false}, which is not an \
            error.",
        mutates_graph: false,
        creates_session: false,
        destructive: false,
        idempotent: true,
        open_world: false,
        session_fields: &[],
        session_checks: &[],
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, input: AgentInput) -> Result<AgentOutput, ToolError> {
        let status = ctx.sweepers.as_ref().and_then(|s| s.status(&input.agent_id));
        AgentOutput::of(ctx, input.agent_id, status).await
    }
}
