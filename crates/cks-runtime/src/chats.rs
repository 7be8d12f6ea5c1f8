//! Stored chats as the runtime's users see them ([`crate::store::chats`] holds the rows): which
//! chats can be reached, the timestamps they carry, and the titles they are given.
//!
//! A chat is reachable while its session is: closing a session removes it from what tools can
//! reach, and its chats with it. Like the session's history, they stay in the store (a session is
//! never deleted, only closed, or replaced with everything else by a restore, which removes them).

use std::sync::Arc;

use crate::RuntimeError;
use crate::store::{ChatRow, ChatSummary, Store};

/// The longest title made from a chat's first message, in characters.
pub const TITLE_CHARS: usize = 80;

/// The stored chats of a runtime's store.
#[derive(Clone, Debug)]
pub struct Chats {
    store: Arc<dyn Store>,
}

impl Chats {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Chats { store }
    }

    /// Whether `session_id` names a stored, open session.
    async fn reachable(&self, session_id: &str) -> Result<bool, RuntimeError> {
        Ok(self.store.load_session(session_id).await?.is_some_and(|s| !s.closed))
    }

    /// The chat, unless there is none or its session is closed.
    pub async fn get(&self, chat_id: &str) -> Result<Option<ChatRow>, RuntimeError> {
        let Some(chat) = self.store.load_chat(chat_id).await? else { return Ok(None) };
        Ok(self.reachable(&chat.session_id).await?.then_some(chat))
    }

    /// The chats of an open session, most recently updated first, at most `limit`.
    pub async fn list(&self, session_id: &str, limit: usize) -> Result<Vec<ChatSummary>, RuntimeError> {
        if !self.reachable(session_id).await? {
            return Err(RuntimeError::SessionNotFound(session_id.to_owned()));
        }
        Ok(self.store.list_chats(Some(session_id), limit).await?)
    }

    /// Deletes a chat [`Chats::get`] would return; false when there is none.
    pub async fn delete(&self, chat_id: &str) -> Result<bool, RuntimeError> {
        if self.get(chat_id).await?.is_none() {
            return Ok(false);
        }
        Ok(self.store.delete_chat(chat_id).await?)
    }

    /// Saves a whole chat read at `expected_revision` (`None`: a new chat) as the next revision;
    /// false, and nothing written, when another save came first (see
    /// [`ChatStore::save_chat`](crate::store::ChatStore::save_chat)).
    pub async fn save(&self, chat: &ChatRow, expected_revision: Option<u64>) -> Result<bool, RuntimeError> {
        let chat = ChatRow { revision: expected_revision.map_or(1, |r| r + 1), ..chat.clone() };
        Ok(self.store.save_chat(&chat, expected_revision).await?)
    }
}

impl crate::Runtime {
    /// The stored chats in this runtime's store.
    pub fn chats(&self) -> Chats {
        Chats::new(self.store().clone())
    }
}

/// A new chat's id (a uuid).
pub fn new_chat_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// The current time as chats keep it: RFC 3339 in UTC with exactly six decimals, so that the
/// text of two timestamps sorts as their times do (stores list chats by it).
pub fn timestamp() -> String {
    let now = time::OffsetDateTime::now_utc();
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
        now.year(),
        u8::from(now.month()),
        now.day(),
        now.hour(),
        now.minute(),
        now.second(),
        now.microsecond()
    )
}

/// A chat's title from its first user message: the text on one line, cut to [`TITLE_CHARS`]
/// characters (at a word boundary when there is one in the last quarter) with an ellipsis.
pub fn title_from(text: &str) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() <= TITLE_CHARS {
        return line;
    }
    let cut: String = line.chars().take(TITLE_CHARS - 1).collect();
    let at_word = cut.rfind(' ').filter(|&i| cut[..i].chars().count() >= TITLE_CHARS * 3 / 4);
    format!("{}…", at_word.map_or(cut.as_str(), |i| &cut[..i]).trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory::MemoryStore;
    use crate::{NewSession, Runtime, RuntimeConfig};

    #[test]
    fn titles_are_one_line_and_at_most_80_characters() {
        assert_eq!(title_from("  What is\n in   the graph?  "), "What is in the graph?");
        let long = "word ".repeat(40);
        let title = title_from(&long);
        assert!(title.chars().count() <= TITLE_CHARS && title.ends_with("word…"), "{title}");
        let unbroken = "é".repeat(200);
        let title = title_from(&unbroken);
        assert_eq!(title.chars().count(), TITLE_CHARS);
        assert!(title.ends_with('…'));
        assert_eq!(title_from(""), "");
    }

    #[test]
    fn timestamps_have_a_fixed_width() {
        let t = timestamp();
        assert_eq!(t.len(), "2026-01-01T00:00:00.000000Z".len(), "{t}");
        assert!(time::OffsetDateTime::parse(&t, &time::format_description::well_known::Rfc3339).is_ok(), "{t}");
    }

    #[tokio::test]
    async fn chats_of_a_closed_session_cannot_be_reached() {
        let rt = Runtime::new(Arc::new(MemoryStore::new()), RuntimeConfig::default());
        let session = rt.create_session(Default::default(), NewSession::default()).await.unwrap().session_id;
        let chat = ChatRow {
            chat_id: "c1".into(),
            session_id: session.clone(),
            title: "t".into(),
            messages: "[]".into(),
            tool_calls: "[]".into(),
            created_at: timestamp(),
            updated_at: timestamp(),
            ..ChatRow::default()
        };
        let chats = rt.chats();
        assert!(chats.save(&chat, None).await.unwrap());
        assert_eq!(chats.get("c1").await.unwrap().map(|c| c.revision), Some(1), "a new chat is revision 1");
        assert!(chats.save(&chat, Some(1)).await.unwrap());
        assert!(!chats.save(&chat, Some(1)).await.unwrap(), "revision 1 is gone");
        assert_eq!(chats.list(&session, 10).await.unwrap().len(), 1);

        rt.close(&session).await.unwrap();
        assert_eq!(chats.get("c1").await.unwrap(), None);
        assert!(matches!(chats.list(&session, 10).await, Err(RuntimeError::SessionNotFound(_))));
        assert!(!chats.delete("c1").await.unwrap(), "a chat that cannot be reached is not deleted");
        assert!(rt.store().load_chat("c1").await.unwrap().is_some(), "it stays stored, as the session's history does");
    }
}
