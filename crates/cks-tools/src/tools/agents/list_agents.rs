//! `list_agents`: every background sweeper with its status.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::AgentRecord;
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Input {}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    agents: Vec<AgentRecord>,
}

pub(crate) struct ListAgents;

#[async_trait::async_trait]
impl Tool for ListAgents {
    type Input = Input;
    type Output = Output;
    const TITLE: &'static str = "List sweepers";
    const META: ToolMeta = ToolMeta {
        name: "list_agents",
        description: "List the server's background sweepers, which queue what they find as conflict tasks: \
            inference_staleness (inference_conflict), provenance_staleness (provenance_conflict), temporal_staleness \
            (temporal_conflict), graph_freshness (graph_outdated), graph_health (health_check), contradiction \
            (contradiction_detected) and duplicates (duplicate_candidate). Returns {agents: [{agent_id, task_type, \
            running, interval_seconds, last_run_at, last_result_count, last_error, sweeps_completed}]}; last_* are \
            null before the first sweep.",
        mutates_graph: false,
        creates_session: false,
        destructive: false,
        idempotent: true,
        open_world: false,
        session_fields: &[],
        session_checks: &[],
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, _input: Input) -> Result<Output, ToolError> {
        let statuses = ctx.sweepers.as_ref().map(|s| s.statuses()).unwrap_or_default();
        let mut agents = Vec::with_capacity(statuses.len());
        for status in statuses {
            agents.push(AgentRecord::from(super::shown(ctx, status).await?));
        }
        Ok(Output { agents })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::testing::call;
    use crate::tools::agents::testing::context;

    #[tokio::test]
    async fn lists_every_sweeper_with_its_status() {
        let listed = call(&context().await, "list_agents", json!({})).await;
        let agents = listed["agents"].as_array().unwrap();
        let ids: Vec<&str> = agents.iter().map(|a| a["agent_id"].as_str().unwrap()).collect();
        assert_eq!(
            ids,
            [
                "inference_staleness",
                "provenance_staleness",
                "temporal_staleness",
                "graph_freshness",
                "graph_auto_update",
                "graph_health",
                "contradiction",
                "duplicates"
            ]
        );
        assert_eq!(agents[1]["task_type"], "provenance_conflict");
        assert_eq!(agents[4]["task_type"], "graph_outdated");
        assert_eq!(agents[6]["task_type"], "contradiction_detected");
        assert_eq!(
            (agents[6]["running"].as_bool(), agents[6]["interval_seconds"].as_u64()),
            (Some(false), Some(3_600))
        );
        assert!(agents[6]["last_run_at"].is_null() && agents[6]["last_error"].is_null());
        assert_eq!(agents[7]["task_type"], "duplicate_candidate");
        let none = call(&crate::testing::context(), "list_agents", json!({})).await;
        assert_eq!(none, json!({"agents": []}), "a server without sweepers lists none");
    }
}
