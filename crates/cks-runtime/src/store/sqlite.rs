//! The embedded SQLite store (bundled SQLite, WAL journal, one transaction per commit).
//!
//! Durability: with `synchronous=NORMAL` in WAL mode a commit is in the OS once `COMMIT` returns,
//! so a killed process loses nothing it acknowledged; `synchronous=FULL` (see [`SqliteOptions`])
//! also survives power loss at the price of an fsync per commit.
//!
//! Concurrency: one connection behind a mutex, used from tokio's blocking pool; a thread of the
//! store's own moves the log into the database file ([`checkpoint`]). Several processes
//! may share one file; the head compare-and-swap in [`HistoryStore::append_version`] keeps their commits
//! linear, and `busy_timeout` waits out their write locks.
//!
//! Schema versions live in `PRAGMA user_version`; [`MIGRATIONS`] are applied in order, each in its
//! own transaction, when a database is opened.

use crate::store::prelude::*;
use async_trait::async_trait;
use rusqlite::{Connection, OpenFlags, OptionalExtension, TransactionBehavior, params};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod chats;
mod checkpoint;
mod embeddings;
mod gallery;
mod settings;
mod tasks;

use checkpoint::Checkpointer;

use cks_core::KnowledgeStructure;
use cks_core::vectors::StoredVectors;

use super::{
    Chain, GraphRow, Head, ImportOutcome, ImportedSession, Located, LocatedReader, NewVersion, Parts, ReadAt,
    SessionRow, SnapshotDecoder, Store, StoreError, StoredVersion, VersionRow, check_imports, read_vector_part,
    version_taken,
};

/// Schema migrations; entry `i` upgrades a database from `user_version == i` to `i + 1`.
pub const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE sessions (
    session_id        TEXT PRIMARY KEY,
    created_at        TEXT NOT NULL,
    parent_session_id TEXT,
    parent_version_id TEXT,
    closed            INTEGER NOT NULL DEFAULT 0,
    metadata          TEXT NOT NULL,
    snapshot_interval INTEGER NOT NULL,
    head_seq          INTEGER NOT NULL,
    head_version_id   TEXT,
    head_state_hash   TEXT NOT NULL,
    object_count      INTEGER NOT NULL
);
CREATE TABLE versions (
    session_id     TEXT NOT NULL REFERENCES sessions(session_id),
    seq            INTEGER NOT NULL,
    version_id     TEXT NOT NULL UNIQUE,
    transaction_id TEXT NOT NULL,
    created_at     TEXT NOT NULL,
    state_hash     TEXT NOT NULL,
    object_count   INTEGER NOT NULL,
    metadata       TEXT NOT NULL,
    delta          TEXT,
    has_snapshot   INTEGER NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
CREATE TABLE snapshots (
    session_id TEXT NOT NULL REFERENCES sessions(session_id),
    seq        INTEGER NOT NULL,
    state      TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
"#,
    r#"
CREATE TABLE store_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
"#,
    r#"
CREATE TABLE graph_registry (
    name              TEXT PRIMARY KEY,
    session_id        TEXT NOT NULL REFERENCES sessions(session_id),
    description       TEXT NOT NULL,
    tags              TEXT NOT NULL,
    created_at        TEXT NOT NULL,
    updated_at        TEXT NOT NULL,
    source_graph_name TEXT,
    visibility        TEXT NOT NULL,
    team              TEXT,
    lifecycle_state   TEXT
) WITHOUT ROWID;
CREATE INDEX graph_registry_by_update ON graph_registry (updated_at DESC, name);
"#,
    r#"
CREATE TABLE tasks (
    task_id          INTEGER PRIMARY KEY AUTOINCREMENT,
    task_type        TEXT NOT NULL,
    session_id       TEXT NOT NULL,
    payload          TEXT NOT NULL,
    status           TEXT NOT NULL CHECK (status IN ('PENDING', 'IN_PROGRESS', 'DEAD')),
    retry_count      INTEGER NOT NULL DEFAULT 0,
    last_error       TEXT,
    next_retry_at_ms INTEGER NOT NULL,
    claimed_at_ms    INTEGER,
    created_at_ms    INTEGER NOT NULL,
    dedup_key        TEXT UNIQUE
);
CREATE INDEX tasks_by_age ON tasks (created_at_ms, task_id);
CREATE INDEX tasks_by_session ON tasks (session_id, status);
"#,
    // Stored chats (`sqlite/chats.rs`).
    r#"
CREATE TABLE chats (
    chat_id       TEXT PRIMARY KEY,
    session_id    TEXT NOT NULL REFERENCES sessions(session_id),
    title         TEXT NOT NULL,
    messages      TEXT NOT NULL,
    message_count INTEGER NOT NULL,
    tool_calls    TEXT NOT NULL,
    created_at    TEXT NOT NULL,
    updated_at    TEXT NOT NULL,
    revision      INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX chats_by_session ON chats (session_id, updated_at DESC, chat_id);
CREATE INDEX chats_by_update ON chats (updated_at DESC, chat_id);
"#,
    // States and deltas in rowid tables. A WITHOUT ROWID table keeps each row in its key's
    // b-tree, and SQLite reads a cell's whole payload to compare keys when that payload
    // overflows its page: every insert and lookup near a stored state read whole states of tens
    // of megabytes (a quarter of creating a 200,000-object session). Now the key (session, seq)
    // is a small index entry and the state is read once, by rowid.
    r#"
CREATE TABLE versions_by_rowid (
    session_id     TEXT NOT NULL REFERENCES sessions(session_id),
    seq            INTEGER NOT NULL,
    version_id     TEXT NOT NULL UNIQUE,
    transaction_id TEXT NOT NULL,
    created_at     TEXT NOT NULL,
    state_hash     TEXT NOT NULL,
    object_count   INTEGER NOT NULL,
    metadata       TEXT NOT NULL,
    delta          TEXT,
    has_snapshot   INTEGER NOT NULL,
    UNIQUE (session_id, seq)
);
INSERT INTO versions_by_rowid SELECT session_id, seq, version_id, transaction_id, created_at, state_hash,
    object_count, metadata, delta, has_snapshot FROM versions ORDER BY session_id, seq;
DROP TABLE versions;
ALTER TABLE versions_by_rowid RENAME TO versions;
CREATE TABLE snapshots_by_rowid (
    session_id TEXT NOT NULL REFERENCES sessions(session_id),
    seq        INTEGER NOT NULL,
    state      TEXT NOT NULL,
    UNIQUE (session_id, seq)
);
INSERT INTO snapshots_by_rowid SELECT session_id, seq, state FROM snapshots ORDER BY session_id, seq;
DROP TABLE snapshots;
ALTER TABLE snapshots_by_rowid RENAME TO snapshots;
"#,
    // Where each object of a snapshot lies in its text (`Store::read_located`); written after the
    // snapshot, so a snapshot may have none. A table of its own: adding a column to a snapshot's
    // row would rewrite the row, its state included.
    r#"
CREATE TABLE snapshot_locators (
    session_id TEXT NOT NULL REFERENCES sessions(session_id),
    seq        INTEGER NOT NULL,
    locator    BLOB NOT NULL,
    PRIMARY KEY (session_id, seq)
);
"#,
    // Embeddings by model and text hash (`sqlite/embeddings.rs`). WITHOUT ROWID, so a model's
    // rows lie together in key order and load in one range scan; a vector of a few hundred bytes
    // leaves its row on one page (unlike the states above, whose rows overflow).
    r#"
CREATE TABLE embeddings (
    model     TEXT NOT NULL,
    text_hash BLOB NOT NULL,
    vector    BLOB NOT NULL,
    PRIMARY KEY (model, text_hash)
) WITHOUT ROWID;
"#,
    // Each session's text index at one version (`Store::save_text_index`): one row a session,
    // the latest kept.
    r#"
CREATE TABLE text_indexes (
    session_id TEXT PRIMARY KEY REFERENCES sessions(session_id),
    seq        INTEGER NOT NULL,
    text_index BLOB NOT NULL
);
"#,
    // Each session's settled vector index at one version (`Store::save_vector_index`), in
    // parts of a few thousand rows; the latest kept.
    r#"
CREATE TABLE vector_indexes (
    session_id TEXT NOT NULL REFERENCES sessions(session_id),
    part       INTEGER NOT NULL,
    seq        INTEGER NOT NULL,
    bytes      BLOB NOT NULL,
    PRIMARY KEY (session_id, part)
);
"#,
];

/// Tuning knobs of the SQLite store.
#[derive(Clone, Debug)]
pub struct SqliteOptions {
    /// `PRAGMA synchronous=FULL` instead of `NORMAL`: survive power loss, not only process death.
    pub synchronous_full: bool,
    /// How long to wait for another process's write lock.
    pub busy_timeout: Duration,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions { synchronous_full: false, busy_timeout: Duration::from_secs(10) }
    }
}

/// The most idle reading connections kept open.
const READERS: usize = 4;

/// The SQLite-backed store.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    conn: Arc<Mutex<Connection>>,
    /// Connections for reading whole states and other long reads: WAL lets them read while
    /// `conn` writes, so parsing a large state as it is read holds up no commit, and a session's
    /// state, its text index and the embeddings can be read at once. Opened as needed; at most
    /// [`READERS`] kept open when idle.
    readers: Arc<Mutex<Vec<Connection>>>,
    path: PathBuf,
    busy_timeout: Duration,
    /// Last, so that its connection is the last one closed (see [`Checkpointer`]); `None` where
    /// commits checkpoint the log themselves.
    #[expect(dead_code, reason = "held for its drop, which stops the thread")]
    checkpointer: Option<Arc<Checkpointer>>,
}

fn backend(e: rusqlite::Error) -> StoreError {
    StoreError::Backend(e.to_string())
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` and brings its schema up to date.
    pub fn open(path: impl AsRef<Path>, options: &SqliteOptions) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| StoreError::Backend(format!("cannot create directory {}: {e}", dir.display())))?;
        }
        let mut conn = Connection::open(&path).map_err(backend)?;
        conn.busy_timeout(options.busy_timeout).map_err(backend)?;
        // Before anything is changed in the file (the journal mode is stored in it).
        if is_reference_database(&conn)? {
            return Err(StoreError::Backend(format!(
                "{} is a database of the Python reference server (cks-mcp 1.77); move it aside and import it \
                 with `cks-mcp import-reference PATH`",
                path.display()
            )));
        }
        conn.pragma_update(None, "journal_mode", "WAL").map_err(backend)?;
        conn.pragma_update(None, "synchronous", if options.synchronous_full { "FULL" } else { "NORMAL" })
            .map_err(backend)?;
        conn.pragma_update(None, "foreign_keys", "ON").map_err(backend)?;
        migrate(&mut conn)?;
        let checkpointer = Checkpointer::install(&mut conn, &path, options.busy_timeout).map(Arc::new);
        Ok(SqliteStore {
            conn: Arc::new(Mutex::new(conn)),
            readers: Arc::default(),
            path,
            busy_timeout: options.busy_timeout,
            checkpointer,
        })
    }

    fn open_reader(&self) -> Result<Connection, StoreError> {
        let conn =
            Connection::open_with_flags(&self.path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
                .map_err(backend)?;
        conn.busy_timeout(self.busy_timeout).map_err(backend)?;
        Ok(conn)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The schema version of the open database.
    pub fn schema_version(&self) -> Result<u32, StoreError> {
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        conn.pragma_query_value(None, "user_version", |r| r.get(0)).map_err(backend)
    }

    /// Runs `PRAGMA integrity_check` and returns its verdict ("ok" when healthy).
    pub fn integrity_check(&self) -> Result<String, StoreError> {
        let conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).map_err(backend)
    }

    /// Runs `f` on an idle reading connection (or a new one) in tokio's blocking pool: long
    /// reads there hold up no write, nor each other.
    async fn on_reader<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<R, StoreError> + Send + 'static,
    ) -> Result<R, StoreError> {
        let store = self.clone();
        tokio::task::spawn_blocking(move || {
            let idle = store.readers.lock().unwrap_or_else(|p| p.into_inner()).pop();
            let mut reader = match idle {
                Some(reader) => reader,
                None => store.open_reader()?,
            };
            let result = f(&mut reader);
            let mut readers = store.readers.lock().unwrap_or_else(|p| p.into_inner());
            if readers.len() < READERS {
                readers.push(reader);
            }
            result
        })
        .await
        .map_err(|e| StoreError::Backend(format!("storage task failed: {e}")))?
    }

    /// Runs `f` on the connection in tokio's blocking pool.
    async fn run<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<R, StoreError> + Send + 'static,
    ) -> Result<R, StoreError> {
        let conn = self.conn.clone();
        tokio::task::spawn_blocking(move || {
            // A panic while holding the lock cannot leave a half-done write: SQLite rolls back
            // the open transaction when the `Transaction` guard drops during unwinding.
            let mut guard = conn.lock().unwrap_or_else(|p| p.into_inner());
            f(&mut guard)
        })
        .await
        .map_err(|e| StoreError::Backend(format!("storage task failed: {e}")))?
    }
}

/// A stored text read at random places, through SQLite's incremental blob reading.
struct BlobAt<'conn>(rusqlite::blob::Blob<'conn>);

impl ReadAt for BlobAt<'_> {
    fn read_exact_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), StoreError> {
        let start =
            usize::try_from(offset).map_err(|_| StoreError::Corrupt(format!("no stored state reaches {offset}")))?;
        self.0.read_at_exact(buf, start).map_err(backend)
    }
}

fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    let current: u32 = conn.pragma_query_value(None, "user_version", |r| r.get(0)).map_err(backend)?;
    if current as usize > MIGRATIONS.len() {
        return Err(StoreError::Backend(format!(
            "database schema version {current} is newer than this server supports ({}); upgrade cks-mcp",
            MIGRATIONS.len()
        )));
    }
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(current as usize) {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(backend)?;
        tx.execute_batch(sql).map_err(backend)?;
        tx.pragma_update(None, "user_version", (index + 1) as u32).map_err(backend)?;
        tx.commit().map_err(backend)?;
    }
    Ok(())
}

/// Whether the file holds the reference server's tables (a `sessions` table of JSON `data` rows)
/// rather than nothing or ours (ours has no `data` column in any version of its schema).
fn is_reference_database(conn: &Connection) -> Result<bool, StoreError> {
    conn.prepare("SELECT 1 FROM pragma_table_info('sessions') WHERE name = 'data'")
        .and_then(|mut s| s.exists([]))
        .map_err(backend)
}

const SESSION_COLUMNS: &str = "session_id, created_at, parent_session_id, parent_version_id, closed, metadata, \
     snapshot_interval, head_seq, head_version_id, head_state_hash, object_count";

fn session_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<SessionRow> {
    Ok(SessionRow {
        session_id: r.get(0)?,
        created_at: r.get(1)?,
        parent_session_id: r.get(2)?,
        parent_version_id: r.get(3)?,
        closed: r.get(4)?,
        metadata: r.get(5)?,
        snapshot_interval: r.get(6)?,
        head: Head { seq: r.get(7)?, version_id: r.get(8)?, state_hash: r.get(9)?, object_count: r.get(10)? },
    })
}

const GRAPH_COLUMNS: &str = "name, session_id, description, tags, created_at, updated_at, source_graph_name, \
     visibility, team, lifecycle_state";

fn graph_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<GraphRow> {
    Ok(GraphRow {
        name: r.get(0)?,
        session_id: r.get(1)?,
        description: r.get(2)?,
        tags: r.get(3)?,
        created_at: r.get(4)?,
        updated_at: r.get(5)?,
        source_graph_name: r.get(6)?,
        visibility: r.get(7)?,
        team: r.get(8)?,
        lifecycle_state: r.get(9)?,
    })
}

fn graph_by_name(conn: &Connection, name: &str) -> Result<Option<GraphRow>, StoreError> {
    conn.prepare_cached(&format!("SELECT {GRAPH_COLUMNS} FROM graph_registry WHERE name = ?1"))
        .and_then(|mut s| s.query_row([name], graph_row).optional())
        .map_err(backend)
}

const VERSION_COLUMNS: &str =
    "seq, version_id, transaction_id, created_at, state_hash, object_count, metadata, has_snapshot, delta";

fn stored_version(r: &rusqlite::Row<'_>) -> rusqlite::Result<StoredVersion> {
    Ok(StoredVersion {
        row: VersionRow {
            seq: r.get(0)?,
            version_id: r.get(1)?,
            transaction_id: r.get(2)?,
            created_at: r.get(3)?,
            state_hash: r.get(4)?,
            object_count: r.get(5)?,
            metadata: r.get(6)?,
            has_snapshot: r.get(7)?,
        },
        delta: r.get(8)?,
    })
}

fn versions_between(conn: &Connection, id: &str, after: u64, upto: u64) -> Result<Vec<StoredVersion>, StoreError> {
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT {VERSION_COLUMNS} FROM versions WHERE session_id = ?1 AND seq > ?2 AND seq <= ?3 ORDER BY seq"
        ))
        .map_err(backend)?;
    let rows = stmt.query_map(params![id, after, upto], stored_version).map_err(backend)?;
    rows.collect::<Result<Vec<_>, _>>().map_err(backend)
}

/// Reads, in one read transaction, the chain that rebuilds the state at `seq`; `snapshot` reads
/// the snapshot, given its row's `rowid`, in that transaction.
fn read_chain<S>(
    conn: &mut Connection,
    id: &str,
    seq: u64,
    snapshot: impl FnOnce(&Connection, i64) -> Result<S, StoreError>,
) -> Result<Chain<S>, StoreError> {
    let tx = conn.transaction().map_err(backend)?;
    let head: Option<u64> = tx
        .query_row("SELECT head_seq FROM sessions WHERE session_id = ?1", [id], |r| r.get(0))
        .optional()
        .map_err(backend)?;
    match head {
        None => return Err(StoreError::SessionNotFound(id.to_owned())),
        Some(head) if seq > head => {
            return Err(StoreError::Corrupt(format!("session '{id}' has no version #{seq}")));
        }
        Some(_) => {}
    }
    let (snapshot_seq, rowid): (u64, i64) = tx
        .query_row(
            "SELECT seq, rowid FROM snapshots WHERE session_id = ?1 AND seq <= ?2 ORDER BY seq DESC LIMIT 1",
            params![id, seq],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .map_err(backend)?
        .ok_or_else(|| StoreError::Corrupt(format!("session '{id}' has no snapshot")))?;
    let snapshot = snapshot(&tx, rowid)?;
    let versions = versions_between(&tx, id, snapshot_seq, seq)?;
    Ok(Chain { snapshot_seq, snapshot, versions })
}

#[async_trait]
impl HistoryStore for SqliteStore {
    /// SQLite's `data_version` moves when another connection (this process or another) commits;
    /// our own commits through this connection leave it alone, and the runtime knows those.
    ///
    /// This runs on an async worker, so it never waits for the connection: a blocking-pool task
    /// may hold it for as long as SQLite's busy timeout. While it is busy the answer is "cannot
    /// tell", and the caller probes the head through the blocking pool instead.
    fn change_token(&self) -> Option<u64> {
        let conn = match self.conn.try_lock() {
            Ok(conn) => conn,
            Err(std::sync::TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        conn.pragma_query_value(None, "data_version", |r| r.get::<_, i64>(0)).ok().map(|v| v as u64)
    }

    async fn create_session(&self, row: &SessionRow, initial_state: String) -> Result<(), StoreError> {
        let (row, state) = (row.clone(), initial_state);
        self.run(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(backend)?;
            let inserted = insert_session(&tx, &row).map_err(backend)?;
            if !inserted {
                return Err(StoreError::SessionExists(row.session_id));
            }
            tx.execute(
                "INSERT INTO snapshots (session_id, seq, state) VALUES (?1, 0, ?2)",
                params![row.session_id, state],
            )
            .map_err(backend)?;
            tx.commit().map_err(backend)
        })
        .await
    }

    async fn load_session(&self, id: &str) -> Result<Option<SessionRow>, StoreError> {
        let id = id.to_owned();
        self.run(move |conn| {
            conn.prepare_cached(&format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE session_id = ?1"))
                .and_then(|mut s| s.query_row([id], session_row).optional())
                .map_err(backend)
        })
        .await
    }

    async fn list_sessions(&self) -> Result<Vec<SessionRow>, StoreError> {
        self.run(|conn| {
            let mut stmt = conn
                .prepare_cached(&format!("SELECT {SESSION_COLUMNS} FROM sessions ORDER BY created_at, session_id"))
                .map_err(backend)?;
            let rows = stmt.query_map([], session_row).map_err(backend)?;
            rows.collect::<Result<Vec<_>, _>>().map_err(backend)
        })
        .await
    }

    async fn head_seq(&self, id: &str) -> Result<Option<u64>, StoreError> {
        let id = id.to_owned();
        self.run(move |conn| {
            conn.prepare_cached("SELECT head_seq FROM sessions WHERE session_id = ?1")
                .and_then(|mut s| s.query_row([id], |r| r.get(0)).optional())
                .map_err(backend)
        })
        .await
    }

    async fn append_version(&self, new: &NewVersion) -> Result<(), StoreError> {
        let new = new.clone();
        self.run(move |conn| {
            if new.delta.is_none() && new.snapshot.is_none() {
                return Err(StoreError::Corrupt("a version needs a delta or a snapshot".into()));
            }
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(backend)?;
            let swapped = tx
                .prepare_cached(
                    "UPDATE sessions SET head_seq = ?1, head_version_id = ?2, head_state_hash = ?3, object_count = ?4 \
                     WHERE session_id = ?5 AND head_seq = ?6 AND closed = 0",
                )
                .and_then(|mut s| {
                    s.execute(params![
                        new.row.seq,
                        new.row.version_id,
                        new.row.state_hash,
                        new.row.object_count,
                        new.session_id,
                        new.expected_seq
                    ])
                })
                .map_err(backend)?;
            if swapped == 0 || new.row.seq != new.expected_seq + 1 {
                let found: Option<(u64, bool)> = tx
                    .query_row("SELECT head_seq, closed FROM sessions WHERE session_id = ?1", [&new.session_id], |r| {
                        Ok((r.get(0)?, r.get(1)?))
                    })
                    .optional()
                    .map_err(backend)?;
                return Err(match found {
                    None => StoreError::SessionNotFound(new.session_id),
                    Some((_, true)) => StoreError::SessionClosed(new.session_id),
                    Some((found, false)) => {
                        StoreError::Conflict { session_id: new.session_id, expected: new.expected_seq, found }
                    }
                });
            }
            tx.prepare_cached(&format!(
                "INSERT INTO versions (session_id, {VERSION_COLUMNS}) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10)"
            ))
            .and_then(|mut s| {
                s.execute(params![
                    new.session_id,
                    new.row.seq,
                    new.row.version_id,
                    new.row.transaction_id,
                    new.row.created_at,
                    new.row.state_hash,
                    new.row.object_count,
                    new.row.metadata,
                    new.snapshot.is_some(),
                    new.delta
                ])
            })
            .map_err(|e| match e {
                rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::ConstraintViolation => {
                    StoreError::Corrupt(format!("version id '{}' already exists", new.row.version_id))
                }
                e => backend(e),
            })?;
            if let Some(snapshot) = &new.snapshot {
                tx.prepare_cached("INSERT INTO snapshots (session_id, seq, state) VALUES (?1, ?2, ?3)")
                    .and_then(|mut s| s.execute(params![new.session_id, new.row.seq, snapshot]))
                    .map_err(backend)?;
            }
            tx.commit().map_err(backend)
        })
        .await
    }

    async fn list_versions(&self, id: &str) -> Result<Vec<VersionRow>, StoreError> {
        let id = id.to_owned();
        self.run(move |conn| {
            let exists = conn
                .prepare_cached("SELECT 1 FROM sessions WHERE session_id = ?1")
                .and_then(|mut s| s.exists([&id]))
                .map_err(backend)?;
            if !exists {
                return Err(StoreError::SessionNotFound(id));
            }
            let mut stmt = conn
                .prepare_cached(
                    "SELECT seq, version_id, transaction_id, created_at, state_hash, object_count, metadata, has_snapshot \
                     FROM versions WHERE session_id = ?1 ORDER BY seq",
                )
                .map_err(backend)?;
            let rows = stmt
                .query_map([&id], |r| {
                    Ok(VersionRow {
                        seq: r.get(0)?,
                        version_id: r.get(1)?,
                        transaction_id: r.get(2)?,
                        created_at: r.get(3)?,
                        state_hash: r.get(4)?,
                        object_count: r.get(5)?,
                        metadata: r.get(6)?,
                        has_snapshot: r.get(7)?,
                    })
                })
                .map_err(backend)?;
            rows.collect::<Result<Vec<_>, _>>().map_err(backend)
        })
        .await
    }

    async fn find_version(&self, version_id: &str) -> Result<Option<(String, u64)>, StoreError> {
        let version_id = version_id.to_owned();
        self.run(move |conn| {
            conn.prepare_cached("SELECT session_id, seq FROM versions WHERE version_id = ?1")
                .and_then(|mut s| s.query_row([version_id], |r| Ok((r.get(0)?, r.get(1)?))).optional())
                .map_err(backend)
        })
        .await
    }

    async fn load_chain(&self, id: &str, seq: u64) -> Result<Chain, StoreError> {
        let id = id.to_owned();
        self.run(move |conn| {
            read_chain(conn, &id, seq, |tx, rowid| {
                tx.query_row("SELECT state FROM snapshots WHERE rowid = ?1", [rowid], |r| r.get(0)).map_err(backend)
            })
        })
        .await
    }

    /// On the reading connection, so a long parse holds up no other statement; the text is read
    /// from the row a piece at a time (SQLite's incremental blob reading), never held whole.
    async fn load_chain_decoded(
        &self,
        id: &str,
        seq: u64,
        decode: SnapshotDecoder,
    ) -> Result<Chain<KnowledgeStructure>, StoreError> {
        let id = id.to_owned();
        self.on_reader(move |conn| {
            read_chain(conn, &id, seq, |tx, rowid| {
                let mut state = tx.blob_open("main", "snapshots", "state", rowid, true).map_err(backend)?;
                decode(&mut state)
            })
        })
        .await
    }

    /// On the reading connection, in one read transaction: the locator is read whole, the state
    /// where the reader asks (incremental blob reading).
    async fn read_located(&self, id: &str, read: LocatedReader) -> Result<bool, StoreError> {
        let id = id.to_owned();
        self.on_reader(move |conn| {
            let tx = conn.transaction().map_err(backend)?;
            let head: u64 = tx
                .query_row("SELECT head_seq FROM sessions WHERE session_id = ?1", [&id], |r| r.get(0))
                .optional()
                .map_err(backend)?
                .ok_or_else(|| StoreError::SessionNotFound(id.clone()))?;
            let nearest: Option<(u64, i64, Option<Vec<u8>>)> = tx
                .query_row(
                    "SELECT s.seq, s.rowid, l.locator FROM snapshots s LEFT JOIN snapshot_locators l \
                     ON l.session_id = s.session_id AND l.seq = s.seq \
                     WHERE s.session_id = ?1 AND s.seq <= ?2 ORDER BY s.seq DESC LIMIT 1",
                    params![id, head],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
                .optional()
                .map_err(backend)?;
            let Some((snapshot_seq, rowid, Some(locator))) = nearest else { return Ok(false) };
            let mut state = BlobAt(tx.blob_open("main", "snapshots", "state", rowid, true).map_err(backend)?);
            let versions = versions_between(&tx, &id, snapshot_seq, head)?;
            read(Located { snapshot_seq, locator: &locator, state: &mut state, versions })?;
            Ok(true)
        })
        .await
    }

    fn keeps_locators(&self) -> bool {
        true
    }

    async fn save_locator(&self, id: &str, seq: u64, locator: Vec<u8>) -> Result<(), StoreError> {
        let id = id.to_owned();
        self.run(move |conn| {
            conn.prepare_cached(
                "INSERT OR REPLACE INTO snapshot_locators (session_id, seq, locator) VALUES (?1, ?2, ?3)",
            )
            .and_then(|mut s| s.execute(params![id, seq, locator]))
            .map(drop)
            .map_err(backend)
        })
        .await
    }

    fn keeps_text_indexes(&self) -> bool {
        true
    }

    async fn save_text_index(&self, id: &str, seq: u64, index: Vec<u8>) -> Result<(), StoreError> {
        let id = id.to_owned();
        self.run(move |conn| {
            conn.prepare_cached(
                "INSERT INTO text_indexes (session_id, seq, text_index) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (session_id) DO UPDATE SET seq = excluded.seq, text_index = excluded.text_index \
                 WHERE excluded.seq >= text_indexes.seq",
            )
            .and_then(|mut s| s.execute(params![id, seq, index]))
            .map(drop)
            .map_err(backend)
        })
        .await
    }

    async fn load_text_index(&self, id: &str) -> Result<Option<(u64, Vec<u8>)>, StoreError> {
        let id = id.to_owned();
        self.on_reader(move |conn| {
            conn.prepare_cached("SELECT seq, text_index FROM text_indexes WHERE session_id = ?1")
                .and_then(|mut s| s.query_row([id], |r| Ok((r.get(0)?, r.get(1)?))).optional())
                .map_err(backend)
        })
        .await
    }

    fn keeps_vector_indexes(&self) -> bool {
        true
    }

    async fn save_vector_index(&self, id: &str, seq: u64, parts: Parts) -> Result<(), StoreError> {
        let id = id.to_owned();
        self.run(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(backend)?;
            let kept: Option<u64> = tx
                .query_row("SELECT seq FROM vector_indexes WHERE session_id = ?1 AND part = 0", [&id], |r| r.get(0))
                .optional()
                .map_err(backend)?;
            if kept.is_some_and(|kept| kept > seq) {
                return Ok(());
            }
            tx.execute("DELETE FROM vector_indexes WHERE session_id = ?1", [&id]).map_err(backend)?;
            {
                let mut insert = tx
                    .prepare_cached("INSERT INTO vector_indexes (session_id, part, seq, bytes) VALUES (?1, ?2, ?3, ?4)")
                    .map_err(backend)?;
                for (part, bytes) in parts.enumerate() {
                    insert.execute(params![id, part as u64, seq, bytes]).map_err(backend)?;
                }
            }
            tx.commit().map_err(backend)
        })
        .await
    }

    async fn load_vector_index(&self, id: &str) -> Result<Option<(u64, StoredVectors)>, StoreError> {
        let id = id.to_owned();
        self.on_reader(move |conn| {
            let mut statement = conn
                .prepare_cached("SELECT seq, bytes FROM vector_indexes WHERE session_id = ?1 ORDER BY part")
                .map_err(backend)?;
            let mut rows = statement.query([id]).map_err(backend)?;
            let mut read = None;
            while let Some(row) = rows.next().map_err(backend)? {
                let bytes = row.get_ref(1).and_then(|v| v.as_blob().map_err(Into::into)).map_err(backend)?;
                read_vector_part(&mut read, row.get(0).map_err(backend)?, bytes)?;
            }
            Ok(read)
        })
        .await
    }

    async fn load_versions_after(&self, id: &str, after_seq: u64) -> Result<Vec<StoredVersion>, StoreError> {
        let id = id.to_owned();
        self.run(move |conn| versions_between(conn, &id, after_seq, u64::MAX >> 1)).await
    }

    async fn load_snapshot(&self, id: &str, seq: u64) -> Result<Option<String>, StoreError> {
        let id = id.to_owned();
        self.run(move |conn| {
            conn.prepare_cached("SELECT state FROM snapshots WHERE session_id = ?1 AND seq = ?2")
                .and_then(|mut s| s.query_row(params![id, seq], |r| r.get(0)).optional())
                .map_err(backend)
        })
        .await
    }

    async fn set_closed(&self, id: &str, closed: bool) -> Result<(), StoreError> {
        let id = id.to_owned();
        self.run(move |conn| {
            let changed = conn
                .execute("UPDATE sessions SET closed = ?1 WHERE session_id = ?2", params![closed, id])
                .map_err(backend)?;
            if changed == 0 {
                return Err(StoreError::SessionNotFound(id));
            }
            Ok(())
        })
        .await
    }

    /// One statement: SQLite runs it under the database's write lock, so the comparison and the
    /// write are one step for every connection and process on the file.
    async fn swap_session_metadata(&self, id: &str, expected: &str, metadata: &str) -> Result<bool, StoreError> {
        let (id, expected, metadata) = (id.to_owned(), expected.to_owned(), metadata.to_owned());
        self.run(move |conn| {
            let changed = conn
                .execute(
                    "UPDATE sessions SET metadata = ?1 WHERE session_id = ?2 AND metadata = ?3",
                    params![metadata, id, expected],
                )
                .map_err(backend)?;
            if changed == 0 {
                let exists = conn
                    .query_row("SELECT 1 FROM sessions WHERE session_id = ?1", params![id], |_| Ok(()))
                    .optional()
                    .map_err(backend)?;
                if exists.is_none() {
                    return Err(StoreError::SessionNotFound(id));
                }
            }
            Ok(changed > 0)
        })
        .await
    }

    /// One transaction for the whole import: everything is written, or nothing.
    async fn import_sessions(&self, sessions: &[ImportedSession]) -> Result<ImportOutcome, StoreError> {
        check_imports(sessions)?;
        let sessions = sessions.to_vec();
        self.run(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(backend)?;
            let outcome = import_into(&tx, &sessions)?;
            tx.commit().map_err(backend)?;
            Ok(outcome)
        })
        .await
    }
}

#[async_trait]
impl Store for SqliteStore {
    fn kind(&self) -> &'static str {
        "sqlite"
    }

    async fn replace_all(&self, sessions: &[ImportedSession]) -> Result<ImportOutcome, StoreError> {
        check_imports(sessions)?;
        let sessions = sessions.to_vec();
        self.run(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(backend)?;
            tx.execute_batch(
                "DELETE FROM chats; DELETE FROM graph_registry; DELETE FROM snapshot_locators; DELETE FROM text_indexes; \
                 DELETE FROM vector_indexes; DELETE FROM snapshots; \
                 DELETE FROM versions; DELETE FROM sessions;",
            )
            .map_err(backend)?;
            let outcome = import_into(&tx, &sessions)?;
            tx.commit().map_err(backend)?;
            Ok(outcome)
        })
        .await
    }
}

/// Writes the sessions not stored yet, inside the caller's transaction.
fn import_into(tx: &rusqlite::Transaction<'_>, sessions: &[ImportedSession]) -> Result<ImportOutcome, StoreError> {
    let mut outcome = ImportOutcome::default();
    for session in sessions {
        let row = &session.row;
        let exists = tx
            .prepare_cached("SELECT 1 FROM sessions WHERE session_id = ?1")
            .and_then(|mut s| s.exists([&row.session_id]))
            .map_err(backend)?;
        if exists {
            outcome.skipped.push(row.session_id.clone());
            continue;
        }
        insert_session(tx, row).map_err(backend)?;
        let mut insert_snapshot =
            tx.prepare_cached("INSERT INTO snapshots (session_id, seq, state) VALUES (?1, ?2, ?3)").map_err(backend)?;
        insert_snapshot.execute(params![row.session_id, 0u64, session.initial_state]).map_err(backend)?;
        let mut owner_of =
            tx.prepare_cached("SELECT session_id FROM versions WHERE version_id = ?1").map_err(backend)?;
        let mut insert_version = tx
            .prepare_cached(&format!(
                "INSERT INTO versions (session_id, {VERSION_COLUMNS}) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10)"
            ))
            .map_err(backend)?;
        for version in &session.versions {
            let v = &version.row;
            let owner: Option<String> =
                owner_of.query_row([&v.version_id], |r| r.get(0)).optional().map_err(backend)?;
            if let Some(owner) = owner {
                return Err(version_taken(&v.version_id, &owner));
            }
            insert_version
                .execute(params![
                    row.session_id,
                    v.seq,
                    v.version_id,
                    v.transaction_id,
                    v.created_at,
                    v.state_hash,
                    v.object_count,
                    v.metadata,
                    version.snapshot.is_some(),
                    version.delta
                ])
                .map_err(backend)?;
            if let Some(snapshot) = &version.snapshot {
                insert_snapshot.execute(params![row.session_id, v.seq, snapshot]).map_err(backend)?;
            }
        }
        outcome.imported.push(row.session_id.clone());
    }
    Ok(outcome)
}

/// Inserts a session row; `false` when a session with its id is already stored.
fn insert_session(tx: &rusqlite::Transaction<'_>, row: &SessionRow) -> rusqlite::Result<bool> {
    let mut insert = tx.prepare_cached(&format!(
        "INSERT OR IGNORE INTO sessions ({SESSION_COLUMNS}) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11)"
    ))?;
    let inserted = insert.execute(params![
        row.session_id,
        row.created_at,
        row.parent_session_id,
        row.parent_version_id,
        row.closed,
        row.metadata,
        row.snapshot_interval,
        row.head.seq,
        row.head.version_id,
        row.head.state_hash,
        row.head.object_count
    ])?;
    Ok(inserted > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_change_token_never_waits_for_a_busy_connection() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("t.db"), &SqliteOptions::default()).unwrap();
        assert!(store.change_token().is_some());
        // A blocking-pool task holding the connection (as one waiting out another process's
        // write lock would, for up to the busy timeout).
        let held = store.conn.lock().unwrap();
        let (send, answer) = std::sync::mpsc::channel();
        let probe = store.clone();
        std::thread::spawn(move || send.send(probe.change_token()).unwrap());
        let token = answer.recv_timeout(Duration::from_secs(60)).expect("change_token waited for the connection");
        assert_eq!(token, None, "a busy connection cannot tell");
        drop(held);
        assert!(store.change_token().is_some());
    }

    /// A write that takes the log past the threshold is moved into the database file by the
    /// store's own thread, with no further write to trigger it; the store's drop waits for that
    /// thread, so the log is gone once the store is, and the state reads back after a reopen.
    #[tokio::test]
    async fn the_log_is_checkpointed_beside_the_writer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let store = SqliteStore::open(&path, &SqliteOptions::default()).unwrap();
        let state: String = (0..3 * 4096 * checkpoint::CHECKPOINT_PAGES as usize / 2)
            .map(|i| char::from(b'a' + (i % 23) as u8))
            .collect();
        let row = SessionRow { session_id: "big".into(), ..SessionRow::default() };
        store.create_session(&row, state.clone()).await.unwrap();
        let database_len = || std::fs::metadata(&path).unwrap().len() as usize;
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while database_len() < state.len() {
            assert!(std::time::Instant::now() < deadline, "the log was not checkpointed: {} bytes", database_len());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        drop(store);
        let log = dir.path().join("t.db-wal");
        assert!(!log.exists(), "the store's last connection was not closed with it");
        let reopened = SqliteStore::open(&path, &SqliteOptions::default()).unwrap();
        assert_eq!(reopened.load_snapshot("big", 0).await.unwrap().as_deref(), Some(state.as_str()));
    }

    /// A state of more than a piece is read back from its row a piece at a time, after a restart;
    /// one that does not parse is reported as corrupt.
    #[tokio::test]
    async fn a_large_state_is_read_back_in_pieces() {
        use crate::{CommitRequest, NewSession, Runtime, RuntimeConfig, RuntimeError};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let runtime = || {
            let store = SqliteStore::open(&path, &SqliteOptions::default()).unwrap();
            Runtime::new(Arc::new(store), RuntimeConfig::default())
        };
        let graph = cks_core::sample::random_graph(4_000, 4_000, 3);
        assert!(crate::codec::encode_state(&graph).len() > 1 << 20, "the state fits in one piece");
        let first = runtime();
        let id = first.create_session(graph.clone(), NewSession::default()).await.unwrap().session_id;
        let operations = cks_core::ops::parse_operations(&serde_json::json!([{"type": "add_object",
            "identity": {"id": "late", "type": "Node", "name": "late"}, "structure": {"k": 1}}]))
        .unwrap();
        let head = first.commit(&id, CommitRequest::operations(operations)).await.unwrap().version.state_hash;
        drop(first);

        let read = |rt: Runtime| {
            let id = id.clone();
            async move { rt.read(&id, |s, _| (s.len(), s.root_hash().to_hex())).await }
        };
        assert_eq!(read(runtime()).await.unwrap(), (graph.len() + 1, head));

        let conn = Connection::open(&path).unwrap();
        conn.execute("UPDATE snapshots SET state = substr(state, 1, length(state) - 10)", []).unwrap();
        drop(conn);
        let failed = read(runtime()).await;
        assert!(
            matches!(&failed, Err(RuntimeError::Corrupt { detail, .. }) if detail.starts_with("stored state does not parse")),
            "{failed:?}"
        );
    }
}
