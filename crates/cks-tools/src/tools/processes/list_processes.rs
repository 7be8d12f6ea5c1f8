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
        description: "List the autonomous processes (the Critic, which settles queued conflict tasks) of every \
            server sharing the store, most recently started first. Returns {processes: [{instance_id, process_kind, \
            hostname, status ('alive' or 'stopped'), current_task_id, tasks_done, tasks_failed, last_error, \
            tokens_spent, paused (over its hourly token budget)}]}.",
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
