//! `request_process_stop`: asks the most recently started process of a kind to stop after its
//! current task.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::latest;
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// 'critic', 'enrichment', 'fork_resolution' or 'pipeline'.
    pub(crate) process_kind: String,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(untagged)]
pub(crate) enum Output {
    Requested { process_kind: String, instance_id: String, accepted: bool },
    Missing { process_kind: String, found: bool },
}

pub(crate) struct RequestProcessStop;

#[async_trait::async_trait]
impl Tool for RequestProcessStop {
    type Input = Input;
    type Output = Output;
    const TITLE: &'static str = "Stop a process";
    const META: ToolMeta = ToolMeta {
        name: "request_process_stop",
        description: "Ask the most recently started autonomous process of 'process_kind' to stop gracefully: it \
            finishes its current task, then stops (within one poll interval when idle), whichever server of the \
            shared store runs it. Returns {process_kind, instance_id, accepted: true} once the request is recorded, \
            not once the process stopped: process_status shows 'stopped' then. {process_kind, found: false} when \
            no process of that kind was ever recorded.",
        mutates_graph: false,
        creates_session: false,
        destructive: true,
        idempotent: true,
        open_world: false,
        session_fields: &[],
        session_checks: &[],
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        let Some(process) = latest(ctx, &input.process_kind).await? else {
            return Ok(Output::Missing { process_kind: input.process_kind, found: false });
        };
        let accepted = ctx.runtime.request_process_stop(&process.instance_id).await?;
        Ok(Output::Requested { process_kind: input.process_kind, instance_id: process.instance_id, accepted })
    }
}
