//! `list_chats`: a session's stored chats, most recently updated first, without their messages.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::ChatView;
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{SessionCheck, Tool, ToolMeta};

/// Chats listed when 'limit' is absent or 0.
const DEFAULT_LIMIT: usize = 50;

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The session whose chats to list.
    pub(crate) session_id: String,
    /// The most chats to return, most recently updated first (default 50; 0 means the default).
    pub(crate) limit: Option<u32>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    chats: Vec<ChatView>,
    /// How many chats are returned.
    count: usize,
}

pub(crate) struct ListChats;

#[async_trait::async_trait]
impl Tool for ListChats {
    type Input = Input;
    type Output = Output;
    const TITLE: &'static str = "List chats";
    const META: ToolMeta = ToolMeta {
        name: "list_chats",
        description: "A session's stored chats (started with ai_chat and new_chat: true), most recently updated \
            first, at most 'limit' (50), without their messages. Each: {chat_id, session_id, title (the first user \
            message, at most 80 characters, or the title given), message_count, created_at, updated_at}. Chats are \
            kept in the store: they survive restarts and show on every server of the store. Returns {chats, \
            count}; get_chat reads one whole.",
        mutates_graph: false,
        creates_session: false,
        destructive: false,
        idempotent: true,
        open_world: false,
        session_fields: &["session_id"],
        session_checks: &[SessionCheck::exists("session_id")],
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        let limit = match input.limit {
            None | Some(0) => DEFAULT_LIMIT,
            Some(n) => n as usize,
        };
        let chats: Vec<ChatView> =
            ctx.runtime.chats().list(&input.session_id, limit).await?.into_iter().map(ChatView::from).collect();
        Ok(Output { count: chats.len(), chats })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::testing::{call, context, session, structure};
    use crate::tools::chats::testing::stored_chat;

    #[tokio::test]
    async fn chats_are_listed_most_recently_updated_first_and_limited() {
        let ctx = context();
        let id = session(&ctx, structure(vec![])).await;
        let other = session(&ctx, structure(vec![])).await;
        assert_eq!(call(&ctx, "list_chats", json!({"session_id": id})).await, json!({"chats": [], "count": 0}));
        let first = stored_chat(&ctx, &id, &["What is in the graph?", "And now?"]).await;
        let second = stored_chat(&ctx, &id, &["Add a note"]).await;
        stored_chat(&ctx, &other, &["Elsewhere"]).await;

        let listed = call(&ctx, "list_chats", json!({"session_id": id})).await;
        assert_eq!(listed["count"], 2, "{listed}");
        let chats = listed["chats"].as_array().unwrap();
        assert_eq!((chats[0]["chat_id"].as_str(), chats[1]["chat_id"].as_str()), (Some(&*second), Some(&*first)));
        let keys: Vec<&str> = chats[1].as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, ["chat_id", "created_at", "message_count", "session_id", "title", "updated_at"]);
        assert_eq!(
            (chats[1]["title"].as_str(), chats[1]["message_count"].as_u64(), chats[1]["session_id"].as_str()),
            (Some("What is in the graph?"), Some(4), Some(id.as_str()))
        );

        let limited = call(&ctx, "list_chats", json!({"session_id": id, "limit": 1})).await;
        assert_eq!((limited["count"].as_u64(), limited["chats"][0]["chat_id"].as_str()), (Some(1), Some(&*second)));
        assert_eq!(call(&ctx, "list_chats", json!({"session_id": id, "limit": 0})).await["count"], 2);
        assert_eq!(
            call(&ctx, "list_chats", json!({"session_id": id, "limit": -1})).await["error"],
            "invalid_parameter"
        );
        assert_eq!(call(&ctx, "list_chats", json!({})).await["error"], "missing_parameter");
    }

    #[tokio::test]
    async fn a_closed_or_unknown_session_has_no_chats_to_list() {
        let ctx = context();
        let id = session(&ctx, structure(vec![])).await;
        stored_chat(&ctx, &id, &["hi"]).await;
        ctx.runtime.close(&id).await.unwrap();
        assert_eq!(call(&ctx, "list_chats", json!({"session_id": id})).await["error"], "session_not_found");
        let nobody = json!({"session_id": "00000000-0000-4000-8000-000000000000"});
        assert_eq!(call(&ctx, "list_chats", nobody).await["error"], "session_not_found");
    }
}
