//! The task queue in PostgreSQL: one `cks_tasks` table, shared by every replica. Every change of
//! state is one statement, so it is atomic on its own; a claim is an `UPDATE … RETURNING` of the
//! oldest claimable row, picked with `FOR UPDATE SKIP LOCKED`, so concurrent claimers on any
//! connections or processes each take a different task and never wait on one another's row.

use crate::*;
use cks_runtime::store::prelude::*;

use deadpool_postgres::GenericClient;
use tokio_postgres::Row;

use cks_runtime::store::{NewTask, StoreError, TaskFilter, TaskRef, TaskRow, TaskStatus};

use crate::db_error;

const COLUMNS: &str = "task_id, task_type, session_id, payload, status, retry_count, last_error, next_retry_at_ms, \
                       claimed_at_ms, created_at_ms, dedup_key";

/// The condition that `task` ($1 the id, $2 the claim or NULL) still holds.
const HELD: &str = "task_id = $1 AND ($2::bigint IS NULL OR (status = 'IN_PROGRESS' AND claimed_at_ms = $2::bigint))";

fn task_row(r: &Row) -> Result<TaskRow, StoreError> {
    let status: String = r.get(4);
    Ok(TaskRow {
        task_id: r.get(0),
        task_type: r.get(1),
        session_id: r.get(2),
        payload: r.get(3),
        status: TaskStatus::parse(&status).ok_or_else(|| {
            StoreError::Corrupt(format!("task {} has an unknown status '{status}'", r.get::<_, i64>(0)))
        })?,
        retry_count: u32::try_from(r.get::<_, i64>(5)).unwrap_or(0),
        last_error: r.get(6),
        next_retry_at_ms: r.get(7),
        claimed_at_ms: r.get(8),
        created_at_ms: r.get(9),
        dedup_key: r.get(10),
    })
}

/// Runs a change of state; whether it changed a task.
async fn change(
    client: &impl GenericClient,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<bool, StoreError> {
    let statement = client.prepare_cached(sql).await.map_err(db_error)?;
    Ok(client.execute(&statement, params).await.map_err(db_error)? > 0)
}

pub(crate) async fn enqueue(client: &impl GenericClient, task: &NewTask) -> Result<Option<i64>, StoreError> {
    let statement = client
        .prepare_cached(
            "INSERT INTO cks_tasks (task_type, session_id, payload, status, next_retry_at_ms, created_at_ms, dedup_key) \
             VALUES ($1, $2, $3, 'PENDING', $4, $4, $5) ON CONFLICT (dedup_key) DO NOTHING RETURNING task_id",
        )
        .await
        .map_err(db_error)?;
    let row = client
        .query_opt(
            &statement,
            &[&task.task_type, &task.session_id, &task.payload, &task.created_at_ms, &task.dedup_key],
        )
        .await
        .map_err(db_error)?;
    Ok(row.map(|r| r.get(0)))
}

pub(crate) async fn claim(
    client: &impl GenericClient,
    task_type: Option<&str>,
    now_ms: i64,
    lease_ms: i64,
) -> Result<Option<TaskRow>, StoreError> {
    // A claim made at or before this has expired (worked out here: `bigint` arithmetic in the
    // database fails on overflow).
    let expired_by = now_ms.saturating_sub(lease_ms);
    let statement = client
        .prepare_cached(&format!(
            "UPDATE cks_tasks SET status = 'IN_PROGRESS', claimed_at_ms = $2 WHERE task_id = ( \
                 SELECT task_id FROM cks_tasks WHERE ($1::text IS NULL OR task_type = $1::text) \
                 AND ((status = 'PENDING' AND next_retry_at_ms <= $2) \
                      OR (status = 'IN_PROGRESS' AND claimed_at_ms <= $3)) \
                 ORDER BY created_at_ms, task_id LIMIT 1 FOR UPDATE SKIP LOCKED) \
             RETURNING {COLUMNS}"
        ))
        .await
        .map_err(db_error)?;
    let row = client.query_opt(&statement, &[&task_type, &now_ms, &expired_by]).await.map_err(db_error)?;
    row.as_ref().map(task_row).transpose()
}

pub(crate) async fn get(client: &impl GenericClient, task_id: i64) -> Result<Option<TaskRow>, StoreError> {
    let statement = client
        .prepare_cached(&format!("SELECT {COLUMNS} FROM cks_tasks WHERE task_id = $1"))
        .await
        .map_err(db_error)?;
    let row = client.query_opt(&statement, &[&task_id]).await.map_err(db_error)?;
    row.as_ref().map(task_row).transpose()
}

pub(crate) async fn list(client: &impl GenericClient, filter: &TaskFilter) -> Result<Vec<TaskRow>, StoreError> {
    let statement = client
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM cks_tasks WHERE ($1::text IS NULL OR status = $1::text) \
             AND ($2::text IS NULL OR task_type = $2::text) AND ($3::text IS NULL OR session_id = $3::text) \
             ORDER BY created_at_ms, task_id"
        ))
        .await
        .map_err(db_error)?;
    let rows = client
        .query(&statement, &[&filter.status.map(TaskStatus::as_str), &filter.task_type, &filter.session_id])
        .await
        .map_err(db_error)?;
    rows.iter().map(task_row).collect()
}

pub(crate) async fn complete(client: &impl GenericClient, task: TaskRef) -> Result<bool, StoreError> {
    change(client, &format!("DELETE FROM cks_tasks WHERE {HELD}"), &[&task.task_id, &task.claimed_at_ms]).await
}

pub(crate) async fn fail(
    client: &impl GenericClient,
    task: TaskRef,
    retry_count: u32,
    error: &str,
    next_retry_at_ms: i64,
) -> Result<bool, StoreError> {
    change(
        client,
        &format!(
            "UPDATE cks_tasks SET status = 'PENDING', retry_count = $3, last_error = $4, next_retry_at_ms = $5, \
             claimed_at_ms = NULL WHERE {HELD}"
        ),
        &[&task.task_id, &task.claimed_at_ms, &i64::from(retry_count), &error, &next_retry_at_ms],
    )
    .await
}

pub(crate) async fn dead_letter(
    client: &impl GenericClient,
    task: TaskRef,
    error: &str,
    retry_count: Option<u32>,
) -> Result<bool, StoreError> {
    let retry_count = retry_count.map(i64::from);
    change(
        client,
        &format!(
            "UPDATE cks_tasks SET status = 'DEAD', last_error = $3, retry_count = COALESCE($4, retry_count), \
             claimed_at_ms = NULL WHERE {HELD}"
        ),
        &[&task.task_id, &task.claimed_at_ms, &error, &retry_count],
    )
    .await
}

pub(crate) async fn retry_dead(client: &impl GenericClient, task_id: i64, now_ms: i64) -> Result<bool, StoreError> {
    change(
        client,
        "UPDATE cks_tasks SET status = 'PENDING', retry_count = 0, last_error = NULL, next_retry_at_ms = $2 \
         WHERE task_id = $1 AND status = 'DEAD'",
        &[&task_id, &now_ms],
    )
    .await
}

pub(crate) async fn renew(client: &impl GenericClient, task: TaskRef, now_ms: i64) -> Result<bool, StoreError> {
    change(
        client,
        &format!("UPDATE cks_tasks SET claimed_at_ms = $3 WHERE {HELD} AND status = 'IN_PROGRESS'"),
        &[&task.task_id, &task.claimed_at_ms, &now_ms],
    )
    .await
}

/// Writes the tasks whose id and dedup key are free, in one transaction, then moves the id
/// sequence past the highest id written (a value it handed out before is never handed out again).
pub(crate) async fn import(client: &mut deadpool_postgres::Object, tasks: &[TaskRow]) -> Result<u64, StoreError> {
    let tx = client.transaction().await.map_err(db_error)?;
    let insert = tx
        .prepare_cached(&format!(
            "INSERT INTO cks_tasks ({COLUMNS}) OVERRIDING SYSTEM VALUE \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) ON CONFLICT DO NOTHING"
        ))
        .await
        .map_err(db_error)?;
    let mut written = 0;
    for t in tasks {
        let retry_count = i64::from(t.retry_count);
        written += tx
            .execute(
                &insert,
                &[
                    &t.task_id,
                    &t.task_type,
                    &t.session_id,
                    &t.payload,
                    &t.status.as_str(),
                    &retry_count,
                    &t.last_error,
                    &t.next_retry_at_ms,
                    &t.claimed_at_ms,
                    &t.created_at_ms,
                    &t.dedup_key,
                ],
            )
            .await
            .map_err(db_error)?;
    }
    if written > 0 {
        tx.execute(
            "SELECT setval(pg_get_serial_sequence('cks_tasks', 'task_id'), \
             GREATEST((SELECT MAX(task_id) FROM cks_tasks), nextval(pg_get_serial_sequence('cks_tasks', 'task_id'))))",
            &[],
        )
        .await
        .map_err(db_error)?;
    }
    tx.commit().await.map_err(db_error)?;
    Ok(written)
}

#[async_trait]
impl TaskStore for PostgresStore {
    async fn enqueue_task(&self, task: &NewTask) -> Result<Option<i64>, StoreError> {
        tasks::enqueue(&self.client().await?, task).await
    }

    async fn claim_task(
        &self,
        task_type: Option<&str>,
        now_ms: i64,
        lease_ms: i64,
    ) -> Result<Option<TaskRow>, StoreError> {
        tasks::claim(&self.client().await?, task_type, now_ms, lease_ms).await
    }

    async fn get_task(&self, task_id: i64) -> Result<Option<TaskRow>, StoreError> {
        tasks::get(&self.client().await?, task_id).await
    }

    async fn list_tasks(&self, filter: &TaskFilter) -> Result<Vec<TaskRow>, StoreError> {
        tasks::list(&self.client().await?, filter).await
    }

    async fn complete_task(&self, task: TaskRef) -> Result<bool, StoreError> {
        tasks::complete(&self.client().await?, task).await
    }

    async fn fail_task(
        &self,
        task: TaskRef,
        retry_count: u32,
        error: &str,
        next_retry_at_ms: i64,
    ) -> Result<bool, StoreError> {
        tasks::fail(&self.client().await?, task, retry_count, error, next_retry_at_ms).await
    }

    async fn dead_letter_task(&self, task: TaskRef, error: &str, retry_count: Option<u32>) -> Result<bool, StoreError> {
        tasks::dead_letter(&self.client().await?, task, error, retry_count).await
    }

    async fn retry_dead_task(&self, task_id: i64, now_ms: i64) -> Result<bool, StoreError> {
        tasks::retry_dead(&self.client().await?, task_id, now_ms).await
    }

    async fn renew_task(&self, task: TaskRef, now_ms: i64) -> Result<bool, StoreError> {
        tasks::renew(&self.client().await?, task, now_ms).await
    }

    async fn import_tasks(&self, tasks: &[TaskRow]) -> Result<u64, StoreError> {
        tasks::import(&mut self.client().await?, tasks).await
    }
}
