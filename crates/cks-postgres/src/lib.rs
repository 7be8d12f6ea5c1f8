//! The PostgreSQL store: the same rows as the SQLite store, in a database that several server
//! processes (replicas behind a load balancer) share.
//!
//! - Commits are one transaction that compare-and-swaps the session head (`UPDATE … WHERE
//!   head_seq = expected`, which row-locks the session), so concurrent writers on any replicas
//!   stay linear and lose nothing: the loser sees [`StoreError::Conflict`] and the runtime retries.
//! - There is no change token: a replica cannot know without asking whether another one has
//!   committed, so every access checks the session's head (one indexed lookup) and reads are never
//!   stale.
//! - Events travel between replicas by `LISTEN`/`NOTIFY` on one channel ([`EVENT_CHANNEL`]): each
//!   runtime's events are published, and every other process re-publishes them to its own
//!   subscribers (`/events`). The listening connection reconnects by itself.
//! - The schema is created and migrated on start, in one transaction under an advisory lock, so
//!   replicas starting together against a new database do not race. Tables are prefixed `cks_`
//!   and live in the connection's schema (choose one with `options=-csearch_path=…` in the URL).
//! - The durable task queue is one table, `cks_tasks` (`tasks.rs`): every change of state is one
//!   statement, and a claim takes the oldest claimable row with `FOR UPDATE SKIP LOCKED`, so
//!   workers on every replica share one queue and never claim the same task.
//! - Stored chats are one table, `cks_chats` (`chats.rs`): a save is one statement guarded by
//!   the revision its writer read, so two replicas saving one chat cannot both succeed.
//! - Embeddings are one table, `cks_embeddings` (`embeddings.rs`), keyed by model and text hash;
//!   a save sends its rows as arrays, thousands to a statement.
//! - Connection failures (the database restarting, refusing connections, a network fault) are
//!   [`StoreError::Unavailable`]; pooled connections that broke are replaced on next use.

mod chats;
mod connect;
mod embeddings;
mod gallery;
mod schema;
mod settings;
mod tasks;

use async_trait::async_trait;
use cks_runtime::store::prelude::*;
use deadpool_postgres::{GenericClient, Pool};
use tokio::sync::broadcast;
use tokio_postgres::error::SqlState;
use tokio_postgres::{IsolationLevel, Row};

use cks_core::KnowledgeStructure;
use cks_core::vectors::StoredVectors;
use cks_runtime::events::Event;
use cks_runtime::store::{
    Chain, GraphRow, Head, ImportOutcome, ImportedSession, NewVersion, Parts, SessionRow, SnapshotDecoder, Store,
    StoreError, StoredVersion, VersionRow, read_vector_part,
};

pub use connect::{ConnectError, PostgresOptions, is_postgres_url};
pub use schema::MIGRATIONS;

/// The `NOTIFY` channel of runtime events.
pub const EVENT_CHANNEL: &str = "cks_events";

/// The PostgreSQL store (cheap to clone: clones share the pool and the event listener).
#[derive(Clone, Debug)]
pub struct PostgresStore {
    pool: Pool,
    remote: broadcast::Sender<Event>,
    /// Events (JSON) go out on pooled connections, off the caller's path.
    publisher: tokio::sync::mpsc::Sender<String>,
}

impl PostgresStore {
    /// The chain that rebuilds the state at `seq`, its snapshot still the row that holds it
    /// (`seq`, `state`). One repeatable-read snapshot of the database, so the head, the snapshot
    /// and the versions agree even while another replica commits.
    async fn read_chain(&self, id: &str, seq: u64) -> Result<Chain<Row>, StoreError> {
        let mut client = self.client().await?;
        let tx = client
            .build_transaction()
            .isolation_level(IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(db_error)?;
        let head = tx
            .query_opt("SELECT head_seq FROM cks_sessions WHERE session_id = $1", &[&id])
            .await
            .map_err(db_error)?
            .map(|r| uint(r.get(0)));
        match head {
            None => return Err(StoreError::SessionNotFound(id.to_owned())),
            Some(head) if seq > head => {
                return Err(StoreError::Corrupt(format!("session '{id}' has no version #{seq}")));
            }
            Some(_) => {}
        }
        let snapshot = tx
            .query_opt(
                "SELECT seq, state FROM cks_snapshots WHERE session_id = $1 AND seq <= $2 ORDER BY seq DESC LIMIT 1",
                &[&id, &int(seq)],
            )
            .await
            .map_err(db_error)?
            .ok_or_else(|| StoreError::Corrupt(format!("session '{id}' has no snapshot")))?;
        let snapshot_seq = uint(snapshot.get(0));
        let versions = versions_between(&tx, id, snapshot_seq, seq).await?;
        tx.commit().await.map_err(db_error)?;
        Ok(Chain { snapshot_seq, snapshot, versions })
    }

    /// Connects (waiting up to the options' connect timeout), creates or migrates the schema, and
    /// starts listening for other replicas' events.
    pub async fn connect(url: &str, options: &PostgresOptions) -> Result<PostgresStore, ConnectError> {
        let target = connect::Target::parse(url, options)?;
        let pool = target.pool(options)?;
        let mut client = pool.get().await.map_err(|e| target.explain(e))?;
        schema::migrate(&mut client).await.map_err(ConnectError::Schema)?;
        drop(client);
        // This process's mark on the events it publishes, so its listener skips its own.
        let origin = uuid::Uuid::new_v4().to_string();
        let (remote, _) = broadcast::channel(1024);
        tokio::spawn(connect::listen(target.clone(), origin.clone(), remote.clone()));
        let (publisher, outbox) = tokio::sync::mpsc::channel(4096);
        tokio::spawn(publish_events(pool.clone(), origin.clone(), outbox));
        Ok(PostgresStore { pool, remote, publisher })
    }

    /// The schema version of the database.
    pub async fn schema_version(&self) -> Result<i32, StoreError> {
        let client = self.client().await?;
        schema::version(&client).await
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.pool.get().await.map_err(|e| StoreError::Unavailable(format!("no database connection: {e}")))
    }
}

/// Sends queued events, everything queued so far in one round trip and as few notifications as
/// fit (sent one by one, a burst of commits queued faster than it went out, and every listener
/// woke once per event); an event that cannot be sent is dropped (events are best effort: the
/// data itself is always read from the database).
async fn publish_events(pool: Pool, origin: String, mut outbox: tokio::sync::mpsc::Receiver<String>) {
    const MAX_BATCH: usize = 512;
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while outbox.recv_many(&mut batch, MAX_BATCH).await > 0 {
        let payloads = pack(&origin, &batch);
        let sent = async {
            let client = pool.get().await.map_err(|e| e.to_string())?;
            let notify = client
                .prepare_cached(
                    "SELECT pg_notify($1, payload) FROM unnest($2::text[]) WITH ORDINALITY AS t(payload, n) ORDER BY n",
                )
                .await
                .map_err(|e| e.to_string())?;
            client.execute(&notify, &[&EVENT_CHANNEL, &payloads]).await.map_err(|e| e.to_string())
        };
        if let Err(e) = sent.await {
            tracing::debug!("{} events were not sent to the other replicas: {e}", batch.len());
        }
        batch.clear();
    }
}

/// Packs events (each its JSON text) into as few [`Published`] payloads as stay under
/// PostgreSQL's notification limit, in order.
fn pack(origin: &str, events: &[String]) -> Vec<String> {
    let head = format!("{{\"origin\":{},\"events\":[", serde_json::Value::from(origin));
    let mut payloads = Vec::new();
    let mut payload = head.clone();
    for event in events {
        let empty = payload.len() == head.len();
        if !empty && payload.len() + 1 + event.len() + 2 > MAX_PAYLOAD_BYTES {
            payload.push_str("]}");
            payloads.push(std::mem::replace(&mut payload, head.clone()));
        } else if !empty {
            payload.push(',');
        }
        payload.push_str(event);
    }
    if payload.len() > head.len() {
        payload.push_str("]}");
        payloads.push(payload);
    }
    payloads
}

/// The wire form of published events: this process's mark, and its events in order.
#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct Published {
    pub(crate) origin: String,
    pub(crate) events: Vec<Event>,
}

/// The longest notification PostgreSQL accepts is 8,000 bytes (a longer one fails the statement
/// that sends it, and with it the batch); payloads stay under this.
const MAX_PAYLOAD_BYTES: usize = 7_900;
/// The longest one event may be, as JSON, so that it fits a payload with the origin around it.
const MAX_EVENT_BYTES: usize = 7_000;

fn db_error(e: tokio_postgres::Error) -> StoreError {
    let unavailable = match e.code() {
        None => true,
        Some(code) => [
            SqlState::ADMIN_SHUTDOWN,
            SqlState::CRASH_SHUTDOWN,
            SqlState::CANNOT_CONNECT_NOW,
            SqlState::CONNECTION_EXCEPTION,
            SqlState::CONNECTION_FAILURE,
            SqlState::CONNECTION_DOES_NOT_EXIST,
            SqlState::T_R_SERIALIZATION_FAILURE,
            SqlState::T_R_DEADLOCK_DETECTED,
            SqlState::TOO_MANY_CONNECTIONS,
        ]
        .contains(code),
    };
    if unavailable { StoreError::Unavailable(e.to_string()) } else { StoreError::Backend(e.to_string()) }
}

/// Sequence numbers and counts are `u64` here and `BIGINT` there.
fn int(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn uint(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

const SESSION_COLUMNS: &str = "session_id, created_at, parent_session_id, parent_version_id, closed, metadata, \
     snapshot_interval, head_seq, head_version_id, head_state_hash, object_count";

fn session_row(r: &Row) -> SessionRow {
    SessionRow {
        session_id: r.get(0),
        created_at: r.get(1),
        parent_session_id: r.get(2),
        parent_version_id: r.get(3),
        closed: r.get(4),
        metadata: r.get(5),
        snapshot_interval: u32::try_from(r.get::<_, i32>(6)).unwrap_or(0),
        head: Head { seq: uint(r.get(7)), version_id: r.get(8), state_hash: r.get(9), object_count: uint(r.get(10)) },
    }
}

const GRAPH_COLUMNS: &str = "name, session_id, description, tags, created_at, updated_at, source_graph_name, \
     visibility, team, lifecycle_state";

fn graph_row(r: &Row) -> GraphRow {
    GraphRow {
        name: r.get(0),
        session_id: r.get(1),
        description: r.get(2),
        tags: r.get(3),
        created_at: r.get(4),
        updated_at: r.get(5),
        source_graph_name: r.get(6),
        visibility: r.get(7),
        team: r.get(8),
        lifecycle_state: r.get(9),
    }
}

const VERSION_ROW_COLUMNS: &str =
    "seq, version_id, transaction_id, created_at, state_hash, object_count, metadata, has_snapshot";

fn version_row(r: &Row) -> VersionRow {
    VersionRow {
        seq: uint(r.get(0)),
        version_id: r.get(1),
        transaction_id: r.get(2),
        created_at: r.get(3),
        state_hash: r.get(4),
        object_count: uint(r.get(5)),
        metadata: r.get(6),
        has_snapshot: r.get(7),
    }
}

fn stored_version(r: &Row) -> StoredVersion {
    StoredVersion { row: version_row(r), delta: r.get(8) }
}

async fn versions_between(
    client: &impl GenericClient,
    id: &str,
    after: u64,
    upto: u64,
) -> Result<Vec<StoredVersion>, StoreError> {
    let statement = client
        .prepare_cached(&format!(
            "SELECT {VERSION_ROW_COLUMNS}, delta FROM cks_versions \
             WHERE session_id = $1 AND seq > $2 AND seq <= $3 ORDER BY seq"
        ))
        .await
        .map_err(db_error)?;
    let rows = client.query(&statement, &[&id, &int(after), &int(upto)]).await.map_err(db_error)?;
    Ok(rows.iter().map(stored_version).collect())
}

async fn session_exists(client: &impl GenericClient, id: &str) -> Result<bool, StoreError> {
    let statement =
        client.prepare_cached("SELECT 1 FROM cks_sessions WHERE session_id = $1").await.map_err(db_error)?;
    Ok(client.query_opt(&statement, &[&id]).await.map_err(db_error)?.is_some())
}

/// Inserts a session row; `false` when a session with its id is already stored.
async fn insert_session(client: &impl GenericClient, row: &SessionRow) -> Result<bool, StoreError> {
    let statement = client
        .prepare_cached(&format!(
            "INSERT INTO cks_sessions ({SESSION_COLUMNS}) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11) \
             ON CONFLICT (session_id) DO NOTHING"
        ))
        .await
        .map_err(db_error)?;
    let inserted = client
        .execute(
            &statement,
            &[
                &row.session_id,
                &row.created_at,
                &row.parent_session_id,
                &row.parent_version_id,
                &row.closed,
                &row.metadata,
                &i32::try_from(row.snapshot_interval).unwrap_or(i32::MAX),
                &int(row.head.seq),
                &row.head.version_id,
                &row.head.state_hash,
                &int(row.head.object_count),
            ],
        )
        .await
        .map_err(db_error)?;
    Ok(inserted > 0)
}

async fn insert_snapshot(client: &impl GenericClient, id: &str, seq: u64, state: &str) -> Result<(), StoreError> {
    let statement = client
        .prepare_cached("INSERT INTO cks_snapshots (session_id, seq, state) VALUES ($1, $2, $3)")
        .await
        .map_err(db_error)?;
    client.execute(&statement, &[&id, &int(seq), &state]).await.map_err(db_error)?;
    Ok(())
}

/// Inserts a version row; a taken version id is [`StoreError::Corrupt`].
async fn insert_version(
    client: &impl GenericClient,
    id: &str,
    row: &VersionRow,
    delta: Option<&str>,
    has_snapshot: bool,
) -> Result<(), StoreError> {
    let statement = client
        .prepare_cached(&format!(
            "INSERT INTO cks_versions (session_id, {VERSION_ROW_COLUMNS}, delta) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10)"
        ))
        .await
        .map_err(db_error)?;
    client
        .execute(
            &statement,
            &[
                &id,
                &int(row.seq),
                &row.version_id,
                &row.transaction_id,
                &row.created_at,
                &row.state_hash,
                &int(row.object_count),
                &row.metadata,
                &has_snapshot,
                &delta,
            ],
        )
        .await
        .map_err(|e| version_insert_error(e, &row.version_id))?;
    Ok(())
}

/// A taken version id is [`StoreError::Corrupt`]; anything else is the database's error.
fn version_insert_error(e: tokio_postgres::Error, version_id: &str) -> StoreError {
    if e.code() == Some(&SqlState::UNIQUE_VIOLATION) {
        StoreError::Corrupt(format!("version id '{version_id}' already exists"))
    } else {
        db_error(e)
    }
}

#[async_trait]
impl HistoryStore for PostgresStore {
    async fn create_session(&self, row: &SessionRow, initial_state: String) -> Result<(), StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        if !insert_session(&tx, row).await? {
            return Err(StoreError::SessionExists(row.session_id.clone()));
        }
        insert_snapshot(&tx, &row.session_id, 0, &initial_state).await?;
        tx.commit().await.map_err(db_error)
    }

    async fn load_session(&self, id: &str) -> Result<Option<SessionRow>, StoreError> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached(&format!("SELECT {SESSION_COLUMNS} FROM cks_sessions WHERE session_id = $1"))
            .await
            .map_err(db_error)?;
        Ok(client.query_opt(&statement, &[&id]).await.map_err(db_error)?.as_ref().map(session_row))
    }

    async fn list_sessions(&self) -> Result<Vec<SessionRow>, StoreError> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached(&format!(
                "SELECT {SESSION_COLUMNS} FROM cks_sessions ORDER BY created_at COLLATE \"C\", session_id COLLATE \"C\""
            ))
            .await
            .map_err(db_error)?;
        Ok(client.query(&statement, &[]).await.map_err(db_error)?.iter().map(session_row).collect())
    }

    async fn head_seq(&self, id: &str) -> Result<Option<u64>, StoreError> {
        let client = self.client().await?;
        let statement =
            client.prepare_cached("SELECT head_seq FROM cks_sessions WHERE session_id = $1").await.map_err(db_error)?;
        Ok(client.query_opt(&statement, &[&id]).await.map_err(db_error)?.map(|r| uint(r.get(0))))
    }

    async fn append_version(&self, new: &NewVersion) -> Result<(), StoreError> {
        if new.delta.is_none() && new.snapshot.is_none() {
            return Err(StoreError::Corrupt("a version needs a delta or a snapshot".into()));
        }
        let client = self.client().await?;
        let row = &new.row;
        if row.seq == new.expected_seq + 1 {
            // One statement, so one round trip and atomic on its own: the head moves only if it
            // is still where the writer found it, and the version (and its snapshot) goes in with it.
            let append = client
                .prepare_cached(&format!(
                    "WITH swapped AS (UPDATE cks_sessions SET head_seq = $2, head_version_id = $3, head_state_hash = $6, \
                       object_count = $7 WHERE session_id = $1 AND head_seq = $11 AND NOT closed RETURNING session_id), \
                     version AS (INSERT INTO cks_versions (session_id, {VERSION_ROW_COLUMNS}, delta) \
                       SELECT session_id, $2, $3, $4, $5, $6, $7, $8, $9, $10 FROM swapped RETURNING seq), \
                     snapshot AS (INSERT INTO cks_snapshots (session_id, seq, state) \
                       SELECT $1, seq, $12 FROM version WHERE $12::text IS NOT NULL RETURNING seq) \
                     SELECT (SELECT count(*) FROM version), (SELECT count(*) FROM snapshot)"
                ))
                .await
                .map_err(db_error)?;
            let appended = client
                .query_one(
                    &append,
                    &[
                        &new.session_id,
                        &int(row.seq),
                        &row.version_id,
                        &row.transaction_id,
                        &row.created_at,
                        &row.state_hash,
                        &int(row.object_count),
                        &row.metadata,
                        &new.snapshot.is_some(),
                        &new.delta.as_deref(),
                        &int(new.expected_seq),
                        &new.snapshot.as_deref(),
                    ],
                )
                .await
                .map_err(|e| version_insert_error(e, &row.version_id))?;
            if appended.get::<_, i64>(0) == 1 {
                return Ok(());
            }
        }
        let found = client
            .query_opt("SELECT head_seq, closed FROM cks_sessions WHERE session_id = $1", &[&new.session_id])
            .await
            .map_err(db_error)?;
        let session_id = new.session_id.clone();
        Err(match found {
            None => StoreError::SessionNotFound(session_id),
            Some(r) if r.get::<_, bool>(1) => StoreError::SessionClosed(session_id),
            Some(r) => StoreError::Conflict { session_id, expected: new.expected_seq, found: uint(r.get(0)) },
        })
    }

    async fn list_versions(&self, id: &str) -> Result<Vec<VersionRow>, StoreError> {
        let client = self.client().await?;
        if !session_exists(&client, id).await? {
            return Err(StoreError::SessionNotFound(id.to_owned()));
        }
        let statement = client
            .prepare_cached(&format!(
                "SELECT {VERSION_ROW_COLUMNS} FROM cks_versions WHERE session_id = $1 ORDER BY seq"
            ))
            .await
            .map_err(db_error)?;
        Ok(client.query(&statement, &[&id]).await.map_err(db_error)?.iter().map(version_row).collect())
    }

    async fn find_version(&self, version_id: &str) -> Result<Option<(String, u64)>, StoreError> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached("SELECT session_id, seq FROM cks_versions WHERE version_id = $1")
            .await
            .map_err(db_error)?;
        let row = client.query_opt(&statement, &[&version_id]).await.map_err(db_error)?;
        Ok(row.map(|r| (r.get(0), uint(r.get(1)))))
    }

    async fn load_chain(&self, id: &str, seq: u64) -> Result<Chain, StoreError> {
        let Chain { snapshot_seq, snapshot, versions } = self.read_chain(id, seq).await?;
        Ok(Chain { snapshot_seq, snapshot: snapshot.get(1), versions })
    }

    /// The snapshot is decoded from the row's own buffer, on the blocking pool.
    async fn load_chain_decoded(
        &self,
        id: &str,
        seq: u64,
        decode: SnapshotDecoder,
    ) -> Result<Chain<KnowledgeStructure>, StoreError> {
        let Chain { snapshot_seq, snapshot, versions } = self.read_chain(id, seq).await?;
        let snapshot = tokio::task::spawn_blocking(move || decode(&mut snapshot.get::<_, &str>(1).as_bytes()))
            .await
            .map_err(|e| StoreError::Backend(format!("decoding task failed: {e}")))??;
        Ok(Chain { snapshot_seq, snapshot, versions })
    }

    async fn load_versions_after(&self, id: &str, after_seq: u64) -> Result<Vec<StoredVersion>, StoreError> {
        let client = self.client().await?;
        versions_between(&client, id, after_seq, i64::MAX as u64).await
    }

    fn keeps_text_indexes(&self) -> bool {
        true
    }

    async fn save_text_index(&self, id: &str, seq: u64, index: Vec<u8>) -> Result<(), StoreError> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached(
                "INSERT INTO cks_text_indexes (session_id, seq, text_index) VALUES ($1, $2, $3) \
                 ON CONFLICT (session_id) DO UPDATE SET seq = excluded.seq, text_index = excluded.text_index \
                 WHERE excluded.seq >= cks_text_indexes.seq",
            )
            .await
            .map_err(db_error)?;
        client.execute(&statement, &[&id, &int(seq), &index]).await.map_err(db_error)?;
        Ok(())
    }

    async fn load_text_index(&self, id: &str) -> Result<Option<(u64, Vec<u8>)>, StoreError> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached("SELECT seq, text_index FROM cks_text_indexes WHERE session_id = $1")
            .await
            .map_err(db_error)?;
        let row = client.query_opt(&statement, &[&id]).await.map_err(db_error)?;
        Ok(row.map(|r| (r.get::<_, i64>(0) as u64, r.get(1))))
    }

    fn keeps_vector_indexes(&self) -> bool {
        true
    }

    async fn save_vector_index(&self, id: &str, seq: u64, parts: Parts) -> Result<(), StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        // Locks the session's row: two replicas keeping its index at once write one after the other.
        tx.execute("SELECT 1 FROM cks_sessions WHERE session_id = $1 FOR UPDATE", &[&id]).await.map_err(db_error)?;
        let kept = tx
            .query_opt("SELECT seq FROM cks_vector_indexes WHERE session_id = $1 AND part = 0", &[&id])
            .await
            .map_err(db_error)?;
        if kept.is_some_and(|row| row.get::<_, i64>(0) as u64 > seq) {
            return Ok(());
        }
        tx.execute("DELETE FROM cks_vector_indexes WHERE session_id = $1", &[&id]).await.map_err(db_error)?;
        let insert = tx
            .prepare("INSERT INTO cks_vector_indexes (session_id, part, seq, bytes) VALUES ($1, $2, $3, $4)")
            .await
            .map_err(db_error)?;
        for (part, bytes) in parts.enumerate() {
            let part = i32::try_from(part).map_err(|_| StoreError::Backend("too many parts".into()))?;
            tx.execute(&insert, &[&id, &part, &int(seq), &bytes]).await.map_err(db_error)?;
        }
        tx.commit().await.map_err(db_error)
    }

    async fn load_vector_index(&self, id: &str) -> Result<Option<(u64, StoredVectors)>, StoreError> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached("SELECT seq, bytes FROM cks_vector_indexes WHERE session_id = $1 ORDER BY part")
            .await
            .map_err(db_error)?;
        // Row by row, so no more than a part's bytes are held beside what was read.
        let rows = client.query_raw(&statement, [&id]).await.map_err(db_error)?;
        futures::pin_mut!(rows);
        let mut read = None;
        while let Some(row) = futures::TryStreamExt::try_next(&mut rows).await.map_err(db_error)? {
            read_vector_part(&mut read, row.get::<_, i64>(0) as u64, row.get::<_, &[u8]>(1))?;
        }
        Ok(read)
    }

    async fn load_snapshot(&self, id: &str, seq: u64) -> Result<Option<String>, StoreError> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached("SELECT state FROM cks_snapshots WHERE session_id = $1 AND seq = $2")
            .await
            .map_err(db_error)?;
        Ok(client.query_opt(&statement, &[&id, &int(seq)]).await.map_err(db_error)?.map(|r| r.get(0)))
    }

    async fn set_closed(&self, id: &str, closed: bool) -> Result<(), StoreError> {
        let client = self.client().await?;
        let changed = client
            .execute("UPDATE cks_sessions SET closed = $1 WHERE session_id = $2", &[&closed, &id])
            .await
            .map_err(db_error)?;
        if changed == 0 {
            return Err(StoreError::SessionNotFound(id.to_owned()));
        }
        Ok(())
    }

    /// One statement: the row's lock orders two swaps, and the second re-reads the row the first
    /// wrote (READ COMMITTED re-checks the condition), so it writes only over what it expected.
    async fn swap_session_metadata(&self, id: &str, expected: &str, metadata: &str) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let changed = client
            .execute(
                "UPDATE cks_sessions SET metadata = $1 WHERE session_id = $2 AND metadata = $3",
                &[&metadata, &id, &expected],
            )
            .await
            .map_err(db_error)?;
        if changed == 0 {
            let exists =
                client.query_opt("SELECT 1 FROM cks_sessions WHERE session_id = $1", &[&id]).await.map_err(db_error)?;
            if exists.is_none() {
                return Err(StoreError::SessionNotFound(id.to_owned()));
            }
        }
        Ok(changed > 0)
    }

    /// One transaction for the whole import: everything is written, or nothing.
    async fn import_sessions(&self, sessions: &[ImportedSession]) -> Result<ImportOutcome, StoreError> {
        cks_runtime::store::check_imports(sessions)?;
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        let outcome = import_into(&tx, sessions).await?;
        tx.commit().await.map_err(db_error)?;
        Ok(outcome)
    }
}

#[async_trait]
impl Store for PostgresStore {
    fn kind(&self) -> &'static str {
        "postgres"
    }

    fn connections(&self) -> Option<cks_runtime::store::Connections> {
        let status = self.pool.status();
        Some(cks_runtime::store::Connections {
            open: status.size,
            idle: status.available,
            max: status.max_size,
            waiting: status.waiting,
        })
    }

    fn publish(&self, event: &Event) {
        let mut event = event.clone();
        // Only a rollback's reason can make an event long; it is cut until the event fits.
        let mut room = MAX_EVENT_BYTES;
        loop {
            if let cks_runtime::events::EventKind::TransactionRolledBack { reason, .. } = &mut event.kind
                && reason.len() > room / 2
            {
                let cut = (0..=room / 2).rev().find(|&i| reason.is_char_boundary(i)).unwrap_or(0);
                reason.truncate(cut);
            }
            let Ok(payload) = serde_json::to_string(&event) else { return };
            if payload.len() <= MAX_EVENT_BYTES {
                // A full outbox drops the event rather than slow a commit down.
                let _ = self.publisher.try_send(payload);
                return;
            }
            if room == 0 {
                return;
            }
            room /= 2;
        }
    }

    fn remote_events(&self) -> Option<broadcast::Receiver<Event>> {
        Some(self.remote.subscribe())
    }

    async fn replace_all(&self, sessions: &[ImportedSession]) -> Result<ImportOutcome, StoreError> {
        cks_runtime::store::check_imports(sessions)?;
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        tx.batch_execute(
            "DELETE FROM cks_chats; DELETE FROM cks_graph_registry; DELETE FROM cks_text_indexes; \
             DELETE FROM cks_vector_indexes; \
             DELETE FROM cks_snapshots; DELETE FROM cks_versions; DELETE FROM cks_sessions;",
        )
        .await
        .map_err(db_error)?;
        let outcome = import_into(&tx, sessions).await?;
        tx.commit().await.map_err(db_error)?;
        Ok(outcome)
    }
}

/// Writes the sessions not stored yet, inside the caller's transaction.
async fn import_into(
    tx: &deadpool_postgres::Transaction<'_>,
    sessions: &[ImportedSession],
) -> Result<ImportOutcome, StoreError> {
    let mut outcome = ImportOutcome::default();
    let owner_of =
        tx.prepare_cached("SELECT session_id FROM cks_versions WHERE version_id = $1").await.map_err(db_error)?;
    for session in sessions {
        let row = &session.row;
        if !insert_session(tx, row).await? {
            outcome.skipped.push(row.session_id.clone());
            continue;
        }
        insert_snapshot(tx, &row.session_id, 0, &session.initial_state).await?;
        for version in &session.versions {
            let v = &version.row;
            if let Some(owner) = tx.query_opt(&owner_of, &[&v.version_id]).await.map_err(db_error)? {
                return Err(cks_runtime::store::version_taken(&v.version_id, &owner.get::<_, String>(0)));
            }
            insert_version(tx, &row.session_id, v, version.delta.as_deref(), version.snapshot.is_some()).await?;
            if let Some(snapshot) = &version.snapshot {
                insert_snapshot(tx, &row.session_id, v.seq, snapshot).await?;
            }
        }
        outcome.imported.push(row.session_id.clone());
    }
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cks_runtime::events::EventKind;

    fn event(n: usize, reason_bytes: usize) -> Event {
        Event {
            event_id: format!("e{n}"),
            created_at: "2026-12-01T00:00:00Z".into(),
            kind: EventKind::TransactionRolledBack {
                session_id: "s".into(),
                transaction_id: format!("t{n}"),
                reason: "é".repeat(reason_bytes / 2),
            },
        }
    }

    #[test]
    fn events_are_packed_in_order_into_payloads_postgres_accepts() {
        let events: Vec<Event> = (0..300).map(|n| event(n, if n % 7 == 0 { 6_000 } else { 40 })).collect();
        let texts: Vec<String> = events.iter().map(|e| serde_json::to_string(e).unwrap()).collect();
        let payloads = pack("origin-1", &texts);
        assert!(payloads.len() > 1 && payloads.len() < texts.len(), "{} payloads", payloads.len());
        let mut unpacked = Vec::new();
        for payload in &payloads {
            assert!(payload.len() <= MAX_PAYLOAD_BYTES, "{} bytes", payload.len());
            let published: Published = serde_json::from_str(payload).unwrap();
            assert_eq!(published.origin, "origin-1");
            unpacked.extend(published.events);
        }
        assert_eq!(unpacked, events);
    }
}
