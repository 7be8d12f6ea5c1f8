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
        description: "List the server's background sweepers, which re-check what changed and queue what they \
            find as conflict tasks: 'inference_staleness' (inference steps reaching one conclusion with disagreeing \
            confidence, or citing a superseded step: inference_conflict, also kept for list_inference_conflicts), \
            'provenance_staleness' (subjects whose newest VerificationRecord is older than the TTL: \
            provenance_conflict), 'temporal_staleness' (facts whose valid_until passed: temporal_conflict), \
            'graph_freshness' (registered graphs not updated within 7 days: graph_outdated), 'graph_health' \
            (registered graphs whose check_graph_health score is below 0.7: health_check), 'contradiction' \
            (relations a MutualExclusionRule or FunctionalRelationRule forbids: contradiction_detected) and \
            'duplicates' (objects of one type with the same or similar names, or close meanings: \
            duplicate_candidate, for resolve_duplicate). Returns \
            {agents: [{agent_id, kind: 'sweeper', task_type, running, interval_seconds, last_run_at, \
            last_run_duration_ms, last_result_count, last_sessions_checked (sessions, or graphs for the graph \
            sweepers), last_error, sweeps_completed}]}; the last_* fields are null before a sweeper's first sweep, \
            and last_error is null for a caller who cannot reach the session it names.",
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
