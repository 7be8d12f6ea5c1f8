//! Stored chats in SQLite: one `chats` table. A save is one immediate transaction (the session
//! checked, then one `INSERT` or one revision-guarded `UPDATE`), so it is all or nothing, and once
//! `COMMIT` returns it survives the process being killed (see the store's durability notes).

use super::*;

use rusqlite::{Connection, OptionalExtension, Row, TransactionBehavior, params};

use super::backend;
use crate::store::{ChatRow, ChatSummary, StoreError};

const SUMMARY_COLUMNS: &str = "chat_id, session_id, title, message_count, created_at, updated_at, revision";

fn summary(row: &Row<'_>) -> rusqlite::Result<ChatSummary> {
    Ok(ChatSummary {
        chat_id: row.get(0)?,
        session_id: row.get(1)?,
        title: row.get(2)?,
        message_count: row.get(3)?,
        created_at: row.get(4)?,
        updated_at: row.get(5)?,
        revision: row.get(6)?,
    })
}

pub(super) fn save(conn: &mut Connection, chat: &ChatRow, expected_revision: Option<u64>) -> Result<bool, StoreError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(backend)?;
    let session_exists = tx
        .prepare_cached("SELECT 1 FROM sessions WHERE session_id = ?1")
        .and_then(|mut s| s.exists([&chat.session_id]))
        .map_err(backend)?;
    if !session_exists {
        return Err(StoreError::SessionNotFound(chat.session_id.clone()));
    }
    let c = chat;
    let written = match expected_revision {
        None => tx
            .prepare_cached(
                "INSERT INTO chats (chat_id, session_id, title, messages, message_count, tool_calls, created_at, \
             updated_at, revision) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) ON CONFLICT (chat_id) DO NOTHING",
            )
            .and_then(|mut s| {
                s.execute(params![
                    c.chat_id,
                    c.session_id,
                    c.title,
                    c.messages,
                    c.message_count,
                    c.tool_calls,
                    c.created_at,
                    c.updated_at,
                    c.revision
                ])
            }),
        Some(expected) => tx
            .prepare_cached(
                "UPDATE chats SET title = ?3, messages = ?4, message_count = ?5, tool_calls = ?6, created_at = ?7, \
                 updated_at = ?8, revision = ?9 WHERE chat_id = ?1 AND session_id = ?2 AND revision = ?10",
            )
            .and_then(|mut s| {
                s.execute(params![
                    c.chat_id,
                    c.session_id,
                    c.title,
                    c.messages,
                    c.message_count,
                    c.tool_calls,
                    c.created_at,
                    c.updated_at,
                    c.revision,
                    expected
                ])
            }),
    }
    .map_err(backend)?;
    tx.commit().map_err(backend)?;
    Ok(written > 0)
}

pub(super) fn load(conn: &Connection, chat_id: &str) -> Result<Option<ChatRow>, StoreError> {
    conn.prepare_cached(
        "SELECT chat_id, session_id, title, messages, message_count, tool_calls, created_at, updated_at, revision \
         FROM chats WHERE chat_id = ?1",
    )
    .and_then(|mut s| {
        s.query_row([chat_id], |r| {
            Ok(ChatRow {
                chat_id: r.get(0)?,
                session_id: r.get(1)?,
                title: r.get(2)?,
                messages: r.get(3)?,
                message_count: r.get(4)?,
                tool_calls: r.get(5)?,
                created_at: r.get(6)?,
                updated_at: r.get(7)?,
                revision: r.get(8)?,
            })
        })
        .optional()
    })
    .map_err(backend)
}

pub(super) fn list(conn: &Connection, session_id: Option<&str>, limit: usize) -> Result<Vec<ChatSummary>, StoreError> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    conn.prepare_cached(&format!(
        "SELECT {SUMMARY_COLUMNS} FROM chats WHERE (?1 IS NULL OR session_id = ?1) \
         ORDER BY updated_at DESC, chat_id LIMIT ?2"
    ))
    .and_then(|mut s| s.query_map(params![session_id, limit], summary)?.collect())
    .map_err(backend)
}

pub(super) fn delete(conn: &Connection, chat_id: &str) -> Result<bool, StoreError> {
    conn.prepare_cached("DELETE FROM chats WHERE chat_id = ?1")
        .and_then(|mut s| s.execute([chat_id]))
        .map(|n| n > 0)
        .map_err(backend)
}

#[async_trait]
impl ChatStore for SqliteStore {
    async fn save_chat(&self, chat: &ChatRow, expected_revision: Option<u64>) -> Result<bool, StoreError> {
        let chat = chat.clone();
        self.run(move |conn| chats::save(conn, &chat, expected_revision)).await
    }

    async fn load_chat(&self, chat_id: &str) -> Result<Option<ChatRow>, StoreError> {
        let chat_id = chat_id.to_owned();
        self.run(move |conn| chats::load(conn, &chat_id)).await
    }

    async fn list_chats(&self, session_id: Option<&str>, limit: usize) -> Result<Vec<ChatSummary>, StoreError> {
        let session_id = session_id.map(str::to_owned);
        self.run(move |conn| chats::list(conn, session_id.as_deref(), limit)).await
    }

    async fn delete_chat(&self, chat_id: &str) -> Result<bool, StoreError> {
        let chat_id = chat_id.to_owned();
        self.run(move |conn| chats::delete(conn, &chat_id)).await
    }
}
