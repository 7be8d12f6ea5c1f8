//! Stored chats: the conversations `ai_chat` keeps server-side when asked to (`new_chat`), listed,
//! read and deleted here through the runtime's [`Chats`](cks_runtime::chats::Chats), which hides
//! the chats of closed sessions. Never offered to `ai_chat`: a model could otherwise read or
//! delete other chats.

mod delete_chat;
mod get_chat;
mod list_chats;

use crate::ErrorCode;
use cks_runtime::store::ChatSummary;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use crate::error::ToolError;
use crate::tool::{Listed, listed};

pub(crate) fn tools() -> Vec<Listed> {
    vec![listed(list_chats::ListChats), listed(get_chat::GetChat), listed(delete_chat::DeleteChat)]
}

/// A chat without its contents.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ChatView {
    chat_id: String,
    /// The session every turn of the chat works on.
    session_id: String,
    /// The first user message on one line, at most 80 characters, or the title given.
    title: String,
    message_count: u64,
    created_at: String,
    /// When the last turn was saved.
    updated_at: String,
}

impl From<ChatSummary> for ChatView {
    fn from(c: ChatSummary) -> Self {
        ChatView {
            chat_id: c.chat_id,
            session_id: c.session_id,
            title: c.title,
            message_count: c.message_count,
            created_at: c.created_at,
            updated_at: c.updated_at,
        }
    }
}

/// The answer for a chat that does not exist, or that the caller cannot reach.
pub(crate) fn chat_not_found(chat_id: &str) -> ToolError {
    ToolError::new(ErrorCode::ChatNotFound, format!("Chat '{chat_id}' not found.")).with("chat_id", chat_id)
}

/// A stored JSON list (a chat's messages or turns).
fn stored_list(chat_id: &str, what: &str, text: &str) -> Result<Vec<Value>, ToolError> {
    serde_json::from_str(text).map_err(|e| ToolError::internal(format!("chat '{chat_id}' has unreadable {what}: {e}")))
}

#[cfg(test)]
pub(crate) mod testing {
    use serde_json::{Value, json};

    use cks_runtime::store::ChatRow;

    use crate::ToolContext;

    /// Saves a chat of `session_id` with `prompts.len()` turns (each a user message and a reply,
    /// and one recorded call) as `ai_chat` would.
    pub(crate) async fn stored_chat(ctx: &ToolContext, session_id: &str, prompts: &[&str]) -> String {
        let chat_id = uuid::Uuid::new_v4().to_string();
        let mut messages = Vec::new();
        let mut turns = Vec::new();
        for (turn, prompt) in prompts.iter().enumerate() {
            messages.push(json!({"role": "user", "content": prompt}));
            turns.push(json!({"turn": turn + 1, "message_index": messages.len(), "at": "2026-01-01T00:00:00.000000Z",
                "calls": [{"name": "query_subgraph", "arguments": {"session_id": session_id}, "result": {}, "is_error": false}]}));
            messages.push(json!({"role": "assistant", "content": [{"type": "text", "text": format!("re: {prompt}")}]}));
        }
        // Chats saved one after another list in that order: their timestamps differ.
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        let now = cks_runtime::chats::timestamp();
        let row = ChatRow {
            chat_id: chat_id.clone(),
            session_id: session_id.to_owned(),
            title: cks_runtime::chats::title_from(prompts.first().copied().unwrap_or_default()),
            message_count: messages.len() as u64,
            messages: Value::Array(messages).to_string(),
            tool_calls: Value::Array(turns).to_string(),
            created_at: now.clone(),
            updated_at: now,
            revision: 0,
        };
        assert!(ctx.runtime.chats().save(&row, None).await.unwrap());
        chat_id
    }
}
