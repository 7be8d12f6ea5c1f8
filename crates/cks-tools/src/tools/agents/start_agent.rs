//! `start_agent`: starts a background sweeper, which sweeps at once and then every interval.

use super::{AgentInput, AgentOutput};
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Tool, ToolMeta};

pub(crate) struct StartAgent;

#[async_trait::async_trait]
impl Tool for StartAgent {
    type Input = AgentInput;
    type Output = AgentOutput;
    const TITLE: &'static str = "Start a sweeper";
    const CHANGES_SERVER: bool = true;
    const META: ToolMeta = ToolMeta {
        name: "start_agent",
        description: "Start a background sweeper by 'agent_id' (see list_agents) on this server: it sweeps at once, \
            then every interval, and is started again after a restart. Starting a running sweeper changes nothing. Returns its status (as agent_status), \
            or {agent_id, found: false} for an id that names no sweeper.",
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
        let status = match &ctx.sweepers {
            Some(sweepers) => sweepers.start_agent(&input.agent_id).await?,
            None => None,
        };
        AgentOutput::of(ctx, input.agent_id, status).await
    }
}
