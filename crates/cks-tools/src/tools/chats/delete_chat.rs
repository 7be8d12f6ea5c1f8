//! `delete_chat`: forgets a stored chat (the graph changes its turns made stay: they are versions
//! of the session).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Named, Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The chat to delete.
    pub(crate) chat_id: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    /// False when there was no such chat (or its session is closed).
    deleted: bool,
}

pub(crate) struct DeleteChat;

#[async_trait::async_trait]
impl Tool for DeleteChat {
    type Input = Input;
    type Output = Output;
    const NAMED: &'static [(&'static str, Named)] = &[("chat_id", Named::Chat)];
    const TITLE: &'static str = "Delete a chat";
    const META: ToolMeta = ToolMeta {
        name: "delete_chat",
        description: "Delete a stored chat: its messages and recorded tool calls are gone for good; the changes its \
            turns made to the graph stay (they are versions of the session). Returns {deleted: true}, or {deleted: \
            false} when there was no such chat (or its session is closed).",
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
        Ok(Output { deleted: ctx.runtime.chats().delete(&input.chat_id).await? })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::testing::{call, context, session, structure};
    use crate::tools::chats::testing::stored_chat;

    #[tokio::test]
    async fn a_chat_is_deleted_once_and_only_while_its_session_is_open() {
        let ctx = context();
        let id = session(&ctx, structure(vec![])).await;
        let (gone, kept) = (stored_chat(&ctx, &id, &["one"]).await, stored_chat(&ctx, &id, &["two"]).await);
        assert_eq!(call(&ctx, "delete_chat", json!({"chat_id": gone})).await, json!({"deleted": true}));
        assert_eq!(call(&ctx, "delete_chat", json!({"chat_id": gone})).await, json!({"deleted": false}));
        assert_eq!(call(&ctx, "get_chat", json!({"chat_id": gone})).await["error"], "chat_not_found");
        let listed = call(&ctx, "list_chats", json!({"session_id": id})).await;
        assert_eq!((listed["count"].as_u64(), listed["chats"][0]["chat_id"].as_str()), (Some(1), Some(&*kept)));

        ctx.runtime.close(&id).await.unwrap();
        assert_eq!(call(&ctx, "delete_chat", json!({"chat_id": kept})).await, json!({"deleted": false}));
        assert!(ctx.runtime.store().load_chat(&kept).await.unwrap().is_some(), "kept with the closed session");
        assert_eq!(call(&ctx, "delete_chat", json!({})).await["error"], "missing_parameter");
    }
}
