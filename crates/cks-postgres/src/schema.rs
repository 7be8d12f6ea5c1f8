//! The schema and its migrations. `cks_schema` holds the version; [`migrate`] brings a database
//! up to date in one transaction under an advisory lock, so replicas that start together against
//! an empty database create it once and the others wait, then find it done.

use deadpool_postgres::GenericClient;

use cks_runtime::store::StoreError;

use crate::db_error;

/// Advisory lock keys (any constants; they only have to differ from each other and from other
/// applications' keys on the same database).
const MIGRATION_LOCK: i64 = 0x0063_6b73_5f6d_6967; // "cks_mig"
pub(crate) const REGISTRY_LOCK: i64 = 0x0063_6b73_5f72_6567; // "cks_reg"

/// Schema migrations; entry `i` upgrades a database from version `i` to `i + 1`.
pub const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE cks_sessions (
    session_id        TEXT PRIMARY KEY,
    created_at        TEXT NOT NULL,
    parent_session_id TEXT,
    parent_version_id TEXT,
    closed            BOOLEAN NOT NULL DEFAULT FALSE,
    metadata          TEXT NOT NULL,
    snapshot_interval INTEGER NOT NULL,
    head_seq          BIGINT NOT NULL,
    head_version_id   TEXT,
    head_state_hash   TEXT NOT NULL,
    object_count      BIGINT NOT NULL
);
CREATE TABLE cks_versions (
    session_id     TEXT NOT NULL REFERENCES cks_sessions(session_id),
    seq            BIGINT NOT NULL,
    version_id     TEXT NOT NULL UNIQUE,
    transaction_id TEXT NOT NULL,
    created_at     TEXT NOT NULL,
    state_hash     TEXT NOT NULL,
    object_count   BIGINT NOT NULL,
    metadata       TEXT NOT NULL,
    delta          TEXT,
    has_snapshot   BOOLEAN NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE TABLE cks_snapshots (
    session_id TEXT NOT NULL REFERENCES cks_sessions(session_id),
    seq        BIGINT NOT NULL,
    state      TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE TABLE cks_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE cks_graph_registry (
    name              TEXT PRIMARY KEY,
    session_id        TEXT NOT NULL REFERENCES cks_sessions(session_id),
    description       TEXT NOT NULL,
    tags              TEXT NOT NULL,
    created_at        TEXT NOT NULL,
    updated_at        TEXT NOT NULL,
    source_graph_name TEXT,
    visibility        TEXT NOT NULL,
    team              TEXT,
    lifecycle_state   TEXT
);
"#,
    // The durable task queue (`tasks.rs`).
    r#"
CREATE TABLE cks_tasks (
    task_id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_type        TEXT NOT NULL,
    session_id       TEXT NOT NULL,
    payload          TEXT NOT NULL,
    status           TEXT NOT NULL CHECK (status IN ('PENDING', 'IN_PROGRESS', 'DEAD')),
    retry_count      BIGINT NOT NULL DEFAULT 0,
    last_error       TEXT,
    next_retry_at_ms BIGINT NOT NULL,
    claimed_at_ms    BIGINT,
    created_at_ms    BIGINT NOT NULL,
    dedup_key        TEXT UNIQUE
);
CREATE INDEX cks_tasks_by_age ON cks_tasks (created_at_ms, task_id);
CREATE INDEX cks_tasks_by_session ON cks_tasks (session_id, status);
"#,
    // Stored chats (`chats.rs`).
    r#"
CREATE TABLE cks_chats (
    chat_id       TEXT PRIMARY KEY,
    session_id    TEXT NOT NULL REFERENCES cks_sessions(session_id),
    title         TEXT NOT NULL,
    messages      TEXT NOT NULL,
    message_count BIGINT NOT NULL,
    tool_calls    TEXT NOT NULL,
    created_at    TEXT NOT NULL,
    updated_at    TEXT NOT NULL,
    revision      BIGINT NOT NULL
);
CREATE INDEX cks_chats_by_session ON cks_chats (session_id, updated_at COLLATE "C" DESC, chat_id COLLATE "C");
CREATE INDEX cks_chats_by_update ON cks_chats (updated_at COLLATE "C" DESC, chat_id COLLATE "C");
"#,
    // Embeddings by model and text hash (`embeddings.rs`).
    r#"
CREATE TABLE cks_embeddings (
    model     TEXT NOT NULL,
    text_hash BYTEA NOT NULL,
    vector    BYTEA NOT NULL,
    PRIMARY KEY (model, text_hash)
);
"#,
    // Each session's text index at one version (`Store::save_text_index`): one row a session,
    // the latest kept.
    r#"
CREATE TABLE cks_text_indexes (
    session_id TEXT PRIMARY KEY REFERENCES cks_sessions(session_id),
    seq        BIGINT NOT NULL,
    text_index BYTEA NOT NULL
);
"#,
    // Each session's settled vector index at one version (`Store::save_vector_index`), in
    // parts of a few thousand rows; the latest kept.
    r#"
CREATE TABLE cks_vector_indexes (
    session_id TEXT NOT NULL REFERENCES cks_sessions(session_id),
    part       INTEGER NOT NULL,
    seq        BIGINT NOT NULL,
    bytes      BYTEA NOT NULL,
    PRIMARY KEY (session_id, part)
);
"#,
];

/// Creates the schema or brings it up to date; refuses a database from a newer server.
pub(crate) async fn migrate(client: &mut deadpool_postgres::Object) -> Result<(), StoreError> {
    let tx = client.transaction().await.map_err(db_error)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK]).await.map_err(db_error)?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS cks_schema (
             id      INTEGER PRIMARY KEY CHECK (id = 1),
             version INTEGER NOT NULL
         );
         INSERT INTO cks_schema (id, version) VALUES (1, 0) ON CONFLICT (id) DO NOTHING;",
    )
    .await
    .map_err(db_error)?;
    let current = version(&tx).await?;
    let known = MIGRATIONS.len() as i32;
    if current > known {
        return Err(StoreError::Backend(format!(
            "database schema version {current} is newer than this server supports ({known}); upgrade cks-mcp"
        )));
    }
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(current.max(0) as usize) {
        tx.batch_execute(sql).await.map_err(db_error)?;
        tx.execute("UPDATE cks_schema SET version = $1 WHERE id = 1", &[&(index as i32 + 1)])
            .await
            .map_err(db_error)?;
    }
    tx.commit().await.map_err(db_error)
}

pub(crate) async fn version(client: &impl GenericClient) -> Result<i32, StoreError> {
    let row = client.query_one("SELECT version FROM cks_schema WHERE id = 1", &[]).await.map_err(db_error)?;
    Ok(row.get(0))
}
