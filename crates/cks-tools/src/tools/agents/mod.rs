//! The background sweepers (the reference's "agents"): list them, one's status, start and stop
//! one. Starting and stopping are server management: never offered to `ai_chat`, and on its
//! denylist besides.

mod agent_status;
mod list_agents;
mod start_agent;
mod stop_agent;

use cks_runtime::SweeperStatus;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Listed, listed};
use crate::tools::conflicts::timestamp;

pub(crate) fn tools() -> Vec<Listed> {
    vec![
        listed(list_agents::ListAgents),
        listed(agent_status::AgentStatus),
        listed(start_agent::StartAgent),
        listed(stop_agent::StopAgent),
    ]
}

/// The input of the tools that name one sweeper.
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct AgentInput {
    /// Which sweeper, e.g. 'contradiction' (see list_agents for the ids).
    pub(crate) agent_id: String,
}

/// A sweeper's status, as the tools report it.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct AgentRecord {
    agent_id: String,
    /// Always 'sweeper'.
    kind: String,
    /// The type of the tasks it queues.
    task_type: String,
    running: bool,
    interval_seconds: u64,
    /// When the last sweep started (ISO 8601), null before the first.
    last_run_at: Option<String>,
    last_run_duration_ms: Option<f64>,
    /// Findings in the sessions the last sweep looked at (queued then or earlier).
    last_result_count: Option<u64>,
    /// Sessions the last sweep looked at (those changed since the sweep before, or due again).
    last_sessions_checked: Option<u64>,
    last_error: Option<String>,
    /// Sweeps finished since the server started.
    sweeps_completed: u64,
}

impl From<SweeperStatus> for AgentRecord {
    fn from(status: SweeperStatus) -> Self {
        AgentRecord {
            agent_id: status.agent_id.to_owned(),
            kind: "sweeper".into(),
            task_type: status.task_type.to_owned(),
            running: status.running,
            interval_seconds: status.interval.as_secs(),
            last_run_at: status.last_run_at_ms.map(timestamp),
            // Microseconds, as the reference measures; no binary-fraction noise in the digits.
            last_run_duration_ms: status.last_run_duration.map(|d| d.as_micros() as f64 / 1_000.0),
            last_result_count: status.last_result_count,
            last_sessions_checked: status.last_sessions_checked,
            last_error: status.last_error,
            sweeps_completed: status.sweeps,
        }
    }
}

/// One sweeper's status, or `{agent_id, found: false}` when there is no such sweeper.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(untagged)]
pub(crate) enum AgentOutput {
    Found(AgentRecord),
    NotFound {
        agent_id: String,
        /// False: no sweeper has this id.
        found: bool,
    },
}

impl AgentOutput {
    pub(crate) async fn of(
        ctx: &ToolContext,
        agent_id: String,
        status: Option<SweeperStatus>,
    ) -> Result<Self, ToolError> {
        Ok(match status {
            Some(status) => AgentOutput::Found(shown(ctx, status).await?.into()),
            None => AgentOutput::NotFound { agent_id, found: false },
        })
    }
}

/// A sweeper's status as the caller may see it. A sweeper belongs to no session (it looks at
/// every one), so every caller sees it and its counts; only an error naming a session (one the
/// last sweep could not read) is kept to those who reach that session.
pub(crate) async fn shown(ctx: &ToolContext, mut status: SweeperStatus) -> Result<SweeperStatus, ToolError> {
    if let Some(session) = &status.last_error_session_id
        && !ctx.reaches(session).await?
    {
        status.last_error = None;
        status.last_error_session_id = None;
    }
    Ok(status)
}

#[cfg(test)]
pub(crate) mod testing {
    use std::time::Duration;

    use cks_runtime::{Sweepers, SweepersConfig};

    use crate::context::ToolContext;

    /// A tool context with the standard sweepers, stopped.
    pub(crate) async fn context() -> ToolContext {
        let mut ctx = crate::testing::context();
        let config = SweepersConfig { interval: Duration::from_secs(3_600), start: false, ..SweepersConfig::default() };
        ctx.sweepers = Some(Sweepers::start(ctx.runtime.clone(), &config).await.expect("sweepers start"));
        ctx
    }
}
