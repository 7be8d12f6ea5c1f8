//! `find_tools`: the tools beyond a client's list (its profile, `profile.rs`), found by a need in
//! words and answered with their input schemas, so a model can call one at once. Every tool is
//! callable by name, listed or not; this is how a model learns one exists. The ranking is the one
//! `ai_chat`'s discovery uses (`discovery.rs`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::context::ToolContext;
use crate::discovery::{best, tool_words, words};
use crate::error::{ErrorCode, ToolError};
use crate::tool::{Tool, ToolMeta};

/// Matches answered when the caller gives no `limit`.
const DEFAULT_LIMIT: u32 = 5;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Input {
    /// What you want to do, in a few words ("draw the graph", "settle a duplicate"). Without
    /// it: every tool by name.
    #[serde(default)]
    need: Option<String>,
    /// Most tools to answer (default 5).
    #[serde(default)]
    #[schemars(range(min = 1, max = 20))]
    limit: Option<u32>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    tools: Vec<Found>,
    note: &'static str,
}

/// A tool found: with its description and input schema for a need, by name otherwise.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Found {
    name: &'static str,
    title: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'static str>,
    #[serde(rename = "inputSchema", skip_serializing_if = "Option::is_none")]
    input_schema: Option<Value>,
}

pub(crate) struct FindTools;

#[async_trait::async_trait]
impl Tool for FindTools {
    type Input = Input;
    type Output = Output;
    const TITLE: &'static str = "Find tools";
    const META: ToolMeta = ToolMeta {
        name: "find_tools",
        description: "Find a tool for a need your listed tools do not cover ('need': a few words, e.g. 'resolve a \
            duplicate', 'back up storage'). Answers the best matches with their input schemas; call them by name. \
            Without 'need', or when nothing matches: every tool by name and title.",
        mutates_graph: false,
        creates_session: false,
        destructive: false,
        idempotent: true,
        open_world: false,
        session_fields: &[],
        session_checks: &[],
        // A chat has its own find_tools over the tools it may call (`cks-chat`'s discovery).
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        let registry = ctx
            .registry
            .as_ref()
            .ok_or_else(|| ToolError::new(ErrorCode::InternalError, "The tool registry is not available."))?;
        let others: Vec<_> = registry.iter().filter(|tool| tool.meta().name != Self::META.name).collect();
        let need = words(input.need.as_deref().unwrap_or_default());
        let candidates: Vec<_> =
            others.iter().map(|tool| (*tool, tool_words(tool.meta().name, tool.meta().description))).collect();
        let limit = input.limit.unwrap_or(DEFAULT_LIMIT) as usize;
        let matched = best(&candidates, &need, limit);
        if !matched.is_empty() {
            let tools = matched
                .into_iter()
                .map(|tool| Found {
                    name: tool.meta().name,
                    title: tool.hints().title,
                    description: Some(tool.meta().description),
                    input_schema: Some(Value::Object(tool.schema().as_ref().clone())),
                })
                .collect();
            return Ok(Output { tools, note: "Call these tools by name with these arguments." });
        }
        let tools = others
            .iter()
            .map(|tool| Found {
                name: tool.meta().name,
                title: tool.hints().title,
                description: None,
                input_schema: None,
            })
            .collect();
        let note = if need.is_empty() {
            "Every tool. Call find_tools with a need to get a tool's arguments."
        } else {
            "No tool matched that need; here is every tool. Try other words to get a tool's arguments."
        };
        Ok(Output { tools, note })
    }
}
