//! The task queue in SQLite: one `tasks` table; every change of state is one statement (a claim
//! is an `UPDATE … RETURNING` of the oldest claimable row), so it is atomic against other
//! connections and processes on the same file.

use super::*;

use rusqlite::{Connection, OptionalExtension, Row, params};

use super::backend;
use crate::store::{NewTask, StoreError, TaskFilter, TaskRef, TaskRow, TaskStatus};

const COLUMNS: &str = "task_id, task_type, session_id, payload, status, retry_count, last_error, next_retry_at_ms, \
                       claimed_at_ms, created_at_ms, dedup_key";

/// The condition that `task` (?1 the id, ?2 the claim or NULL) still holds.
const HELD: &str = "task_id = ?1 AND (?2 IS NULL OR (status = 'IN_PROGRESS' AND claimed_at_ms = ?2))";

fn task_row(row: &Row<'_>) -> rusqlite::Result<TaskRow> {
    let status: String = row.get(4)?;
    Ok(TaskRow {
        task_id: row.get(0)?,
        task_type: row.get(1)?,
        session_id: row.get(2)?,
        payload: row.get(3)?,
        status: TaskStatus::parse(&status).ok_or_else(|| {
            rusqlite::Error::FromSqlConversionFailure(
                4,
                rusqlite::types::Type::Text,
                format!("task status {status}").into(),
            )
        })?,
        retry_count: row.get(5)?,
        last_error: row.get(6)?,
        next_retry_at_ms: row.get(7)?,
        claimed_at_ms: row.get(8)?,
        created_at_ms: row.get(9)?,
        dedup_key: row.get(10)?,
    })
}

pub(super) fn enqueue(conn: &Connection, task: &NewTask) -> Result<Option<i64>, StoreError> {
    conn.prepare_cached(
        "INSERT INTO tasks (task_type, session_id, payload, status, next_retry_at_ms, created_at_ms, dedup_key) \
         VALUES (?1, ?2, ?3, 'PENDING', ?4, ?4, ?5) ON CONFLICT (dedup_key) DO NOTHING RETURNING task_id",
    )
    .and_then(|mut s| {
        s.query_row(params![task.task_type, task.session_id, task.payload, task.created_at_ms, task.dedup_key], |r| {
            r.get(0)
        })
        .optional()
    })
    .map_err(backend)
}

pub(super) fn claim(
    conn: &Connection,
    task_type: Option<&str>,
    now_ms: i64,
    lease_ms: i64,
) -> Result<Option<TaskRow>, StoreError> {
    conn.prepare_cached(&format!(
        "UPDATE tasks SET status = 'IN_PROGRESS', claimed_at_ms = ?2 WHERE task_id = ( \
             SELECT task_id FROM tasks WHERE (?1 IS NULL OR task_type = ?1) \
             AND ((status = 'PENDING' AND next_retry_at_ms <= ?2) \
                  OR (status = 'IN_PROGRESS' AND claimed_at_ms <= ?2 - ?3)) \
             ORDER BY created_at_ms, task_id LIMIT 1) \
         RETURNING {COLUMNS}"
    ))
    .and_then(|mut s| s.query_row(params![task_type, now_ms, lease_ms], task_row).optional())
    .map_err(backend)
}

pub(super) fn get(conn: &Connection, task_id: i64) -> Result<Option<TaskRow>, StoreError> {
    conn.prepare_cached(&format!("SELECT {COLUMNS} FROM tasks WHERE task_id = ?1"))
        .and_then(|mut s| s.query_row([task_id], task_row).optional())
        .map_err(backend)
}

pub(super) fn list(conn: &Connection, filter: &TaskFilter) -> Result<Vec<TaskRow>, StoreError> {
    conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM tasks WHERE (?1 IS NULL OR status = ?1) AND (?2 IS NULL OR task_type = ?2) \
         AND (?3 IS NULL OR session_id = ?3) ORDER BY created_at_ms, task_id"
    ))
    .and_then(|mut s| {
        s.query_map(params![filter.status.map(TaskStatus::as_str), filter.task_type, filter.session_id], task_row)?
            .collect()
    })
    .map_err(backend)
}

pub(super) fn complete(conn: &Connection, task: TaskRef) -> Result<bool, StoreError> {
    conn.prepare_cached(&format!("DELETE FROM tasks WHERE {HELD}"))
        .and_then(|mut s| s.execute(params![task.task_id, task.claimed_at_ms]))
        .map(|n| n > 0)
        .map_err(backend)
}

pub(super) fn fail(
    conn: &Connection,
    task: TaskRef,
    retry_count: u32,
    error: &str,
    next_retry_at_ms: i64,
) -> Result<bool, StoreError> {
    conn.prepare_cached(&format!(
        "UPDATE tasks SET status = 'PENDING', retry_count = ?3, last_error = ?4, next_retry_at_ms = ?5, \
         claimed_at_ms = NULL WHERE {HELD}"
    ))
    .and_then(|mut s| s.execute(params![task.task_id, task.claimed_at_ms, retry_count, error, next_retry_at_ms]))
    .map(|n| n > 0)
    .map_err(backend)
}

pub(super) fn dead_letter(
    conn: &Connection,
    task: TaskRef,
    error: &str,
    retry_count: Option<u32>,
) -> Result<bool, StoreError> {
    conn.prepare_cached(&format!(
        "UPDATE tasks SET status = 'DEAD', last_error = ?3, retry_count = COALESCE(?4, retry_count), \
         claimed_at_ms = NULL WHERE {HELD}"
    ))
    .and_then(|mut s| s.execute(params![task.task_id, task.claimed_at_ms, error, retry_count]))
    .map(|n| n > 0)
    .map_err(backend)
}

pub(super) fn retry_dead(conn: &Connection, task_id: i64, now_ms: i64) -> Result<bool, StoreError> {
    conn.prepare_cached(
        "UPDATE tasks SET status = 'PENDING', retry_count = 0, last_error = NULL, next_retry_at_ms = ?2 \
         WHERE task_id = ?1 AND status = 'DEAD'",
    )
    .and_then(|mut s| s.execute(params![task_id, now_ms]))
    .map(|n| n > 0)
    .map_err(backend)
}

pub(super) fn renew(conn: &Connection, task: TaskRef, now_ms: i64) -> Result<bool, StoreError> {
    conn.prepare_cached(&format!("UPDATE tasks SET claimed_at_ms = ?3 WHERE {HELD} AND status = 'IN_PROGRESS'"))
        .and_then(|mut s| s.execute(params![task.task_id, task.claimed_at_ms, now_ms]))
        .map(|n| n > 0)
        .map_err(backend)
}

/// Writes the tasks whose id and dedup key are free, in one transaction (AUTOINCREMENT then
/// numbers later tasks after the highest id written).
pub(super) fn import(conn: &mut Connection, tasks: &[TaskRow]) -> Result<u64, StoreError> {
    let tx = conn.transaction().map_err(backend)?;
    let mut written = 0;
    {
        let mut insert = tx
            .prepare_cached(&format!(
                "INSERT INTO tasks ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) \
                 ON CONFLICT DO NOTHING"
            ))
            .map_err(backend)?;
        for t in tasks {
            written += insert
                .execute(params![
                    t.task_id,
                    t.task_type,
                    t.session_id,
                    t.payload,
                    t.status.as_str(),
                    t.retry_count,
                    t.last_error,
                    t.next_retry_at_ms,
                    t.claimed_at_ms,
                    t.created_at_ms,
                    t.dedup_key
                ])
                .map_err(backend)? as u64;
        }
    }
    tx.commit().map_err(backend)?;
    Ok(written)
}

#[async_trait]
impl TaskStore for SqliteStore {
    async fn enqueue_task(&self, task: &NewTask) -> Result<Option<i64>, StoreError> {
        let task = task.clone();
        self.run(move |conn| tasks::enqueue(conn, &task)).await
    }

    async fn claim_task(
        &self,
        task_type: Option<&str>,
        now_ms: i64,
        lease_ms: i64,
    ) -> Result<Option<TaskRow>, StoreError> {
        let task_type = task_type.map(str::to_owned);
        self.run(move |conn| tasks::claim(conn, task_type.as_deref(), now_ms, lease_ms)).await
    }

    async fn get_task(&self, task_id: i64) -> Result<Option<TaskRow>, StoreError> {
        self.run(move |conn| tasks::get(conn, task_id)).await
    }

    async fn list_tasks(&self, filter: &TaskFilter) -> Result<Vec<TaskRow>, StoreError> {
        let filter = filter.clone();
        self.run(move |conn| tasks::list(conn, &filter)).await
    }

    async fn complete_task(&self, task: TaskRef) -> Result<bool, StoreError> {
        self.run(move |conn| tasks::complete(conn, task)).await
    }

    async fn fail_task(
        &self,
        task: TaskRef,
        retry_count: u32,
        error: &str,
        next_retry_at_ms: i64,
    ) -> Result<bool, StoreError> {
        let error = error.to_owned();
        self.run(move |conn| tasks::fail(conn, task, retry_count, &error, next_retry_at_ms)).await
    }

    async fn dead_letter_task(&self, task: TaskRef, error: &str, retry_count: Option<u32>) -> Result<bool, StoreError> {
        let error = error.to_owned();
        self.run(move |conn| tasks::dead_letter(conn, task, &error, retry_count)).await
    }

    async fn retry_dead_task(&self, task_id: i64, now_ms: i64) -> Result<bool, StoreError> {
        self.run(move |conn| tasks::retry_dead(conn, task_id, now_ms)).await
    }

    async fn renew_task(&self, task: TaskRef, now_ms: i64) -> Result<bool, StoreError> {
        self.run(move |conn| tasks::renew(conn, task, now_ms)).await
    }

    async fn import_tasks(&self, tasks: &[TaskRow]) -> Result<u64, StoreError> {
        let tasks = tasks.to_vec();
        self.run(move |conn| tasks::import(conn, &tasks)).await
    }
}
