//! `revoke_api_key`: a key stops working, on every server of the store.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ErrorCode;
use crate::api_keys;
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Input {
    /// The key's id (from list_api_keys), or the key itself.
    pub(crate) id: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    id: String,
    subject: String,
    /// When it was revoked: now, or earlier when it already was.
    revoked_at: String,
}

pub(crate) struct RevokeApiKey;

#[async_trait::async_trait]
impl Tool for RevokeApiKey {
    type Input = Input;
    type Output = Output;
    const TITLE: &'static str = "Revoke an API key";
    const META: ToolMeta = ToolMeta {
        name: "revoke_api_key",
        description: "Revoke an API key by its 'id' (or the key itself): from now on every server of the store \
            refuses it. Revoking a revoked key changes nothing. Returns {id, subject, revoked_at}; not_found when \
            no key has that id.",
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
        // A key pasted whole is named by its id: its secret goes no further than this line.
        // The text is not echoed back: it may be a mistyped key.
        let id = api_keys::id_of(&input.id).unwrap_or(input.id.trim());
        let Some(mut record) = ctx.runtime.api_key(id).await? else {
            return Err(ToolError::new(ErrorCode::NotFound, "No API key has that id (list_api_keys lists them)."));
        };
        if record.revoked_at.is_none() {
            record.revoked_at = Some(cks_runtime::runtime::now());
            ctx.runtime.save_api_key(&record).await?;
        }
        Ok(Output { id: record.id, subject: record.subject, revoked_at: record.revoked_at.unwrap_or_default() })
    }
}
