//! `list_processes`: every autonomous process recorded in the store, most recently started first.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{ProcessView, processes};
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Input {}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    processes: Vec<ProcessView>,
}

pub(crate) struct ListProcesses;

#[async_trait::async_trait]
impl Tool for ListProcesses {
    type Input = Input;
    type Output = Output;
    const TITLE: &'static str = "List processes";
    const META: ToolMeta = ToolMeta {
        name: "list_processes",
        description: "Every autonomous process (the Critic, which settles queued conflict tasks), most recently \
            started first, from the records each keeps in the store — so a server lists the processes of every \
            server sharing its database. Each: {instance_id (one per start), process_kind, hostname, pid, \
            liveness_interval_s, started_at, last_heartbeat_at, current_task_id, current_task_type, status ('alive': \
            a heartbeat within 3 liveness intervals; else 'stopped'), tasks_done, tasks_failed, last_error, \
            tokens_spent, paused (why it takes no tasks for now: over its hourly LLM token budget), stopped_at}. Records of processes silent for 7 days are dropped. \
            current_task_id, current_task_type and last_error are null for a caller who cannot reach the session \
            of the task they concern.",
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
        Ok(Output { processes: processes(ctx).await? })
    }
}
