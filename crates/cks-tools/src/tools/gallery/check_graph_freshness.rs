//! `check_graph_freshness`: whether a registered graph was updated within the freshness TTL.

use cks_runtime::health::{FRESHNESS_TTL, is_fresh};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::required;
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Named, Tool, ToolMeta};

/// A registered graph not updated for this long is stale (the reference's seven days).
#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The registered name of the graph.
    pub(crate) name: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    /// Present (false) only when no graph is registered under the name.
    #[serde(skip_serializing_if = "Option::is_none")]
    found: Option<bool>,
    /// Updated within the TTL; null when the entry's time cannot be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    fresh: Option<Option<bool>>,
    /// When the entry was last updated (for a graph that is not fresh).
    #[serde(skip_serializing_if = "Option::is_none")]
    last_updated: Option<String>,
    /// The TTL in days (for a graph that is not fresh).
    #[serde(skip_serializing_if = "Option::is_none")]
    ttl_days: Option<f64>,
}

pub(crate) struct CheckGraphFreshness;

#[async_trait::async_trait]
impl Tool for CheckGraphFreshness {
    type Input = Input;
    type Output = Output;
    const NAMED: &'static [(&'static str, Named)] = &[("name", Named::Graph)];
    const TITLE: &'static str = "Check a graph's freshness";
    const META: ToolMeta = ToolMeta {
        name: "check_graph_freshness",
        description: "Check whether a registered graph's entry was updated within the last 7 days (read-only; \
            nothing is refreshed). Returns {fresh: true}; {fresh: false, last_updated, ttl_days} for a stale \
            graph; {found: false} for an unknown name.",
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
        let Some(entry) = ctx.runtime.graph(required(&input.name, "name")?).await? else {
            return Ok(Output { found: Some(false), fresh: None, last_updated: None, ttl_days: None });
        };
        let ttl_days = Some(FRESHNESS_TTL.whole_seconds() as f64 / 86_400.0);
        match is_fresh(&entry.updated_at, OffsetDateTime::now_utc()) {
            Some(true) => Ok(Output { found: None, fresh: Some(Some(true)), last_updated: None, ttl_days: None }),
            fresh => Ok(Output { found: None, fresh: Some(fresh), last_updated: Some(entry.updated_at), ttl_days }),
        }
    }
}
