//! `list_api_keys`: every API key, the oldest first, with its state; never a key's value.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::KeyView;
use crate::bounds::{Cut, Paging};
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Input {
    /// Also list revoked and expired keys (default false).
    #[serde(default)]
    pub(crate) all: bool,
    #[serde(flatten)]
    pub(crate) paging: Paging,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    /// All keys that match, listed or not.
    key_count: usize,
    keys: Vec<KeyView>,
    #[serde(flatten)]
    cut: Cut,
}

pub(crate) struct ListApiKeys;

#[async_trait::async_trait]
impl Tool for ListApiKeys {
    type Input = Input;
    type Output = Output;
    const TITLE: &'static str = "List API keys";
    const META: ToolMeta = ToolMeta {
        name: "list_api_keys",
        description: "List the API keys that work now (with 'all': revoked and expired ones too), the oldest \
            first. Returns {key_count, keys: [{id, issuer, subject, scope, groups, label, created_at, expires_at, \
            revoked_at, state: active|expired|revoked}]}, paged (limit, offset). A key's value is never shown.",
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
        let now = OffsetDateTime::now_utc();
        let keys: Vec<KeyView> = ctx
            .runtime
            .api_keys()
            .await?
            .into_iter()
            .map(|record| KeyView::new(record, now))
            .filter(|view| input.all || view.state == "active")
            .collect();
        let key_count = keys.len();
        let page = input.paging.page(keys);
        Ok(Output { key_count, cut: page.cut(), keys: page.items })
    }
}
