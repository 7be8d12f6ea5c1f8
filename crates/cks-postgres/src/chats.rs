//! Stored chats in PostgreSQL: one `cks_chats` table, shared by every replica. A save is one
//! statement — an `INSERT … ON CONFLICT DO NOTHING` for a new chat, an `UPDATE` guarded by the
//! revision the writer read for an existing one — so it is atomic on its own, and two replicas
//! saving the same chat from the same revision cannot both succeed.

use crate::*;
use cks_runtime::store::prelude::*;

use deadpool_postgres::GenericClient;
use tokio_postgres::Row;

use cks_runtime::store::{ChatRow, ChatSummary, StoreError};

use crate::{db_error, int, session_exists, uint};

const COLUMNS: &str =
    "chat_id, session_id, title, messages, message_count, tool_calls, created_at, updated_at, revision";
const SUMMARY_COLUMNS: &str = "chat_id, session_id, title, message_count, created_at, updated_at, revision";

fn summary(r: &Row) -> ChatSummary {
    ChatSummary {
        chat_id: r.get(0),
        session_id: r.get(1),
        title: r.get(2),
        message_count: uint(r.get(3)),
        created_at: r.get(4),
        updated_at: r.get(5),
        revision: uint(r.get(6)),
    }
}

pub(crate) async fn save(
    client: &impl GenericClient,
    chat: &ChatRow,
    expected_revision: Option<u64>,
) -> Result<bool, StoreError> {
    let c = chat;
    let values: [&(dyn tokio_postgres::types::ToSql + Sync); 9] = [
        &c.chat_id,
        &c.session_id,
        &c.title,
        &c.messages,
        &int(c.message_count),
        &c.tool_calls,
        &c.created_at,
        &c.updated_at,
        &int(c.revision),
    ];
    let written = match expected_revision {
        // The insert reads the session row, so a chat of an unknown session writes nothing.
        None => {
            let statement = client
                .prepare_cached(&format!(
                    "INSERT INTO cks_chats ({COLUMNS}) SELECT $1::text, $2::text, $3::text, $4::text, $5::bigint, \
                     $6::text, $7::text, $8::text, $9::bigint FROM cks_sessions WHERE session_id = $2::text \
                     ON CONFLICT (chat_id) DO NOTHING"
                ))
                .await
                .map_err(db_error)?;
            client.execute(&statement, &values).await.map_err(db_error)?
        }
        Some(expected) => {
            let statement = client
                .prepare_cached(
                    "UPDATE cks_chats SET title = $3, messages = $4, message_count = $5, tool_calls = $6, \
                     created_at = $7, updated_at = $8, revision = $9 \
                     WHERE chat_id = $1 AND session_id = $2 AND revision = $10",
                )
                .await
                .map_err(db_error)?;
            let expected = int(expected);
            let mut with_expected = values.to_vec();
            with_expected.push(&expected);
            client.execute(&statement, &with_expected).await.map_err(db_error)?
        }
    };
    if written == 0 && !session_exists(client, &c.session_id).await? {
        return Err(StoreError::SessionNotFound(c.session_id.clone()));
    }
    Ok(written > 0)
}

pub(crate) async fn load(client: &impl GenericClient, chat_id: &str) -> Result<Option<ChatRow>, StoreError> {
    let statement = client
        .prepare_cached(&format!("SELECT {COLUMNS} FROM cks_chats WHERE chat_id = $1"))
        .await
        .map_err(db_error)?;
    let row = client.query_opt(&statement, &[&chat_id]).await.map_err(db_error)?;
    Ok(row.map(|r| ChatRow {
        chat_id: r.get(0),
        session_id: r.get(1),
        title: r.get(2),
        messages: r.get(3),
        message_count: uint(r.get(4)),
        tool_calls: r.get(5),
        created_at: r.get(6),
        updated_at: r.get(7),
        revision: uint(r.get(8)),
    }))
}

pub(crate) async fn list(
    client: &impl GenericClient,
    session_id: Option<&str>,
    limit: usize,
) -> Result<Vec<ChatSummary>, StoreError> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let statement = client
        .prepare_cached(&format!(
            "SELECT {SUMMARY_COLUMNS} FROM cks_chats WHERE ($1::text IS NULL OR session_id = $1::text) \
             ORDER BY updated_at COLLATE \"C\" DESC, chat_id COLLATE \"C\" LIMIT $2"
        ))
        .await
        .map_err(db_error)?;
    let rows = client.query(&statement, &[&session_id, &limit]).await.map_err(db_error)?;
    Ok(rows.iter().map(summary).collect())
}

pub(crate) async fn delete(client: &impl GenericClient, chat_id: &str) -> Result<bool, StoreError> {
    let statement = client.prepare_cached("DELETE FROM cks_chats WHERE chat_id = $1").await.map_err(db_error)?;
    Ok(client.execute(&statement, &[&chat_id]).await.map_err(db_error)? > 0)
}

#[async_trait]
impl ChatStore for PostgresStore {
    async fn save_chat(&self, chat: &ChatRow, expected_revision: Option<u64>) -> Result<bool, StoreError> {
        chats::save(&self.client().await?, chat, expected_revision).await
    }

    async fn load_chat(&self, chat_id: &str) -> Result<Option<ChatRow>, StoreError> {
        chats::load(&self.client().await?, chat_id).await
    }

    async fn list_chats(&self, session_id: Option<&str>, limit: usize) -> Result<Vec<ChatSummary>, StoreError> {
        chats::list(&self.client().await?, session_id, limit).await
    }

    async fn delete_chat(&self, chat_id: &str) -> Result<bool, StoreError> {
        chats::delete(&self.client().await?, chat_id).await
    }
}
