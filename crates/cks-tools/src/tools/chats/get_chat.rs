//! `get_chat`: one stored chat, whole: its messages as `ai_chat` returned them and each turn's
//! tool calls with their results.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{chat_not_found, stored_list};
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Named, Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The chat to read (from ai_chat's answer or list_chats).
    pub(crate) chat_id: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    chat_id: String,
    session_id: String,
    title: String,
    /// The conversation (Anthropic Messages shape), exactly as ai_chat returned it after the last turn.
    #[schemars(schema_with = "objects")]
    messages: Vec<Value>,
    message_count: u64,
    /// One entry per turn, oldest first: {turn, message_index (the index in 'messages' of the turn's
    /// first answer), at, calls: [{name, arguments, result, is_error}]}.
    #[schemars(schema_with = "objects")]
    tool_calls: Vec<Value>,
    created_at: String,
    updated_at: String,
    /// Counts the saves: 1 after the first turn, one more after each turn since.
    revision: u64,
}

/// Lists of objects (the descriptions are the fields' own).
fn objects(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::Schema::try_from(json!({"type": "array", "items": {"type": "object"}})).expect("a schema object")
}

pub(crate) struct GetChat;

#[async_trait::async_trait]
impl Tool for GetChat {
    type Input = Input;
    type Output = Output;
    const NAMED: &'static [(&'static str, Named)] = &[("chat_id", Named::Chat)];
    const TITLE: &'static str = "Read a chat";
    const META: ToolMeta = ToolMeta {
        name: "get_chat",
        description: "A stored chat, whole: {chat_id, session_id, title, messages (as ai_chat returned them after \
            the last turn), message_count, tool_calls (one entry per turn: {turn, message_index, at, calls: [{name, \
            arguments, result, is_error}]}), created_at, updated_at, revision}. Errors: chat_not_found (also for a \
            chat whose session is closed).",
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
        let chat = ctx.runtime.chats().get(&input.chat_id).await?.ok_or_else(|| chat_not_found(&input.chat_id))?;
        Ok(Output {
            messages: stored_list(&chat.chat_id, "messages", &chat.messages)?,
            tool_calls: stored_list(&chat.chat_id, "tool calls", &chat.tool_calls)?,
            chat_id: chat.chat_id,
            session_id: chat.session_id,
            title: chat.title,
            message_count: chat.message_count,
            created_at: chat.created_at,
            updated_at: chat.updated_at,
            revision: chat.revision,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::testing::{call, context, session, structure};
    use crate::tools::chats::testing::stored_chat;

    #[tokio::test]
    async fn a_chat_is_read_whole() {
        let ctx = context();
        let id = session(&ctx, structure(vec![])).await;
        let chat_id = stored_chat(&ctx, &id, &["What is in the graph?", "And now?"]).await;
        let chat = call(&ctx, "get_chat", json!({"chat_id": chat_id})).await;
        assert_eq!((chat["chat_id"].as_str(), chat["session_id"].as_str()), (Some(&*chat_id), Some(id.as_str())));
        assert_eq!(chat["title"], "What is in the graph?");
        assert_eq!(chat["message_count"], 4);
        assert_eq!(chat["messages"].as_array().map(Vec::len), Some(4));
        assert_eq!(chat["messages"][2], json!({"role": "user", "content": "And now?"}));
        assert_eq!(chat["tool_calls"][1]["turn"], 2);
        assert_eq!(chat["tool_calls"][1]["message_index"], 3);
        assert_eq!(chat["tool_calls"][1]["calls"][0]["name"], "query_subgraph");
        assert_eq!(chat["revision"], 1);
        assert_eq!(chat["created_at"], chat["updated_at"]);
    }

    #[tokio::test]
    async fn unknown_chats_and_chats_of_closed_sessions_are_not_found() {
        let ctx = context();
        let id = session(&ctx, structure(vec![])).await;
        let chat_id = stored_chat(&ctx, &id, &["hi"]).await;
        let unknown = call(&ctx, "get_chat", json!({"chat_id": "no-such-chat"})).await;
        assert_eq!(
            unknown,
            json!({"error": "chat_not_found", "message": "Chat 'no-such-chat' not found.", "chat_id": "no-such-chat"})
        );
        ctx.runtime.close(&id).await.unwrap();
        assert_eq!(call(&ctx, "get_chat", json!({"chat_id": chat_id})).await["error"], "chat_not_found");
        assert_eq!(call(&ctx, "get_chat", json!({})).await["error"], "missing_parameter");
    }
}
