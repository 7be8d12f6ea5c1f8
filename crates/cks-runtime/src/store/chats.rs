//! Stored chats' rows: the server-side conversations of `ai_chat`, one row per chat. Stores keep
//! the rows as given; what a chat holds (the messages, each turn's tool calls) is JSON text they
//! never parse, and which chats a caller may see is decided above them ([`crate::chats`]).
//!
//! A chat is saved whole, with optimistic concurrency: every save names the revision it read, and
//! is refused (nothing written) when the stored revision moved on, so of two turns that read the
//! same revision only the first to save is kept.
//!
//! Invariant: [`ChatStore::save_chat`](super::ChatStore::save_chat) writes the whole row or nothing; a
//! save with an expected revision replaces the row only while the stored row has that revision and
//! the same session; a save without one only creates a row whose id is not stored yet.
//! Invariant: a chat belongs to one stored session: a save naming an unknown session is refused
//! ([`StoreError::SessionNotFound`](super::StoreError::SessionNotFound)), and replacing everything
//! ([`Store::replace_all`](super::Store::replace_all)) removes every chat with the sessions.

/// One chat as stored.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChatRow {
    /// A uuid, made when the chat is started.
    pub chat_id: String,
    /// The session every turn of the chat works on.
    pub session_id: String,
    pub title: String,
    /// JSON array text: the conversation (Anthropic Messages shape) exactly as `ai_chat` returns it.
    pub messages: String,
    /// How many messages `messages` holds (stores never parse it, and listings show the count).
    pub message_count: u64,
    /// JSON array text: one entry per turn, with the tool calls the turn made and their results.
    pub tool_calls: String,
    /// RFC 3339, UTC, fixed width (see [`crate::chats::timestamp`]), so the text sorts as time.
    pub created_at: String,
    pub updated_at: String,
    /// 1 when the chat is first saved, one more with every save after that.
    pub revision: u64,
}

/// A chat without its contents, as listings show it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChatSummary {
    pub chat_id: String,
    pub session_id: String,
    pub title: String,
    pub message_count: u64,
    pub created_at: String,
    pub updated_at: String,
    pub revision: u64,
}

impl ChatRow {
    pub fn summary(&self) -> ChatSummary {
        ChatSummary {
            chat_id: self.chat_id.clone(),
            session_id: self.session_id.clone(),
            title: self.title.clone(),
            message_count: self.message_count,
            created_at: self.created_at.clone(),
            updated_at: self.updated_at.clone(),
            revision: self.revision,
        }
    }
}

/// Most recently updated first; the chat id breaks ties, so the order is stable.
pub fn sort_newest_first(rows: &mut [ChatSummary]) {
    rows.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then_with(|| a.chat_id.cmp(&b.chat_id)));
}
