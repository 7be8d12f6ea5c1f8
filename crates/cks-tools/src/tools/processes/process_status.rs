//! `process_status`: the most recently started process of a kind.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{ProcessView, latest};
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
    Found(Box<ProcessView>),
    Missing { process_kind: String, found: bool },
}

pub(crate) struct ProcessStatus;

#[async_trait::async_trait]
impl Tool for ProcessStatus {
    type Input = Input;
    type Output = Output;
    const TITLE: &'static str = "Process status";
    const META: ToolMeta = ToolMeta {
        name: "process_status",
        description: "The most recently started autonomous process of 'process_kind' ('critic'; 'enrichment', \
            'fork_resolution' and 'pipeline' are the reference's other kinds), as list_processes shows it, from the \
            store shared by every server; {process_kind, found: false} when none was ever recorded.",
        mutates_graph: false,
        creates_session: false,
        destructive: false,
        idempotent: true,
        open_world: false,
        session_fields: &[],
        session_checks: &[],
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        Ok(match latest(ctx, &input.process_kind).await? {
            Some(found) => Output::Found(Box::new(found)),
            None => Output::Missing { process_kind: input.process_kind, found: false },
        })
    }
}
