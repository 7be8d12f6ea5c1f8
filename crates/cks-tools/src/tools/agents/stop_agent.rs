//! `stop_agent`: stops a background sweeper once its current sweep is done.

use super::{AgentInput, AgentOutput};
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Tool, ToolMeta};

pub(crate) struct StopAgent;

#[async_trait::async_trait]
impl Tool for StopAgent {
    type Input = AgentInput;
    type Output = AgentOutput;
    const TITLE: &'static str = "Stop a sweeper";
    const CHANGES_SERVER: bool = true;
    const META: ToolMeta = ToolMeta {
        name: "stop_agent",
        description: "Stop a background sweeper by 'agent_id' (see list_agents), after the sweep in progress, if any, \
            is done; it stays stopped after a restart, and other servers on the same database stop theirs at their \
            next sweep. What it queued stays queued. Changes made meanwhile are still seen by its next \
            sweep once it is started again. Returns its status (running: false), or {agent_id, found: false} for an \
            id that names no sweeper.",
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
            Some(sweepers) => sweepers.stop_agent(&input.agent_id).await?,
            None => None,
        };
        AgentOutput::of(ctx, input.agent_id, status).await
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::testing::{call, session};
    use crate::tools::agents::testing::context;

    #[tokio::test]
    async fn start_sweeps_and_stop_stops_and_unknown_ids_are_not_found() {
        let ctx = context().await;
        let expired = json!({"identity": {"id": "f", "type": "Fact", "name": "f"},
                             "structure": {"valid_until": "2001-01-01"}});
        let id = session(&ctx, json!({"objects": [expired]})).await;
        let started = call(&ctx, "start_agent", json!({"agent_id": "temporal_staleness"})).await;
        assert_eq!(started["running"], true);
        let mut status = json!(null);
        for _ in 0..200 {
            status = call(&ctx, "agent_status", json!({"agent_id": "temporal_staleness"})).await;
            if !status["last_run_at"].is_null() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert_eq!(
            (status["last_sessions_checked"].as_u64(), status["last_result_count"].as_u64()),
            (Some(1), Some(1))
        );
        let task = call(&ctx, "list_dead_lettered_conflicts", json!({})).await;
        assert_eq!(task["count"], 0, "queued, not dead");
        let queued = ctx.runtime.tasks().list(&Default::default()).await.unwrap();
        assert_eq!((queued.len(), queued[0].session_id.as_str()), (1, id.as_str()));

        let stopped = call(&ctx, "stop_agent", json!({"agent_id": "temporal_staleness"})).await;
        assert_eq!(stopped["running"], false);
        for tool in ["agent_status", "start_agent", "stop_agent"] {
            let unknown = call(&ctx, tool, json!({"agent_id": "critic"})).await;
            assert_eq!(unknown, json!({"agent_id": "critic", "found": false}), "{tool}");
        }
        assert_eq!(call(&ctx, "list_agents", json!({"extra": 1})).await["error"], "invalid_parameter");
    }
}
