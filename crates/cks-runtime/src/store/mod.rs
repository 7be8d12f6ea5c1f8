//! The storage boundary: one [`Store`] trait, implemented by the in-memory store (tests), the
//! embedded SQLite store (the default) and the PostgreSQL store (`cks-postgres`). It is made of
//! one trait per noun: [`HistoryStore`] (sessions and their versions), [`GalleryStore`],
//! [`SettingStore`], [`ChatStore`], [`TaskStore`] and [`EmbeddingStore`]; each store implements
//! each in a file of its own. [`prelude`] brings them all into scope.
//!
//! Stores keep rows, not graphs. The runtime encodes states and deltas (see [`crate::codec`]) and
//! hands stores opaque text, so every store persists exactly the same bytes and the conformance
//! suite ([`crate::conformance`]) can hold them all to one contract:
//!
//! - a session row with its head (latest version sequence number, id and state hash);
//! - version rows `1..=head_seq`, append-only, each either a delta against the previous state or
//!   marked as a full snapshot;
//! - snapshot rows keyed by sequence number; sequence 0 is the session's starting state;
//! - the graph registry's entries ([`registry`]);
//! - the durable task queue ([`tasks`]);
//! - stored chats, each saved whole under a revision counter ([`chats`]);
//! - embeddings of texts, by model and text hash ([`EmbeddingStore`]): a cache of what the
//!   content embeds to, kept when everything else is replaced ([`Store::replace_all`]).
//!
//! Invariant: [`HistoryStore::import_sessions`] writes whole histories all or nothing (in the stores that
//! can: SQLite and memory) and never touches a session that already exists.
//! Invariant: [`HistoryStore::append_version`] is atomic and compare-and-swaps the head: it succeeds only
//! when the stored head is still the caller's `expected_seq` and the session is open, and then
//! writes the version row, the optional snapshot and the new head together.

pub mod chats;
pub mod memory;
pub mod opener;
pub mod registry;
pub mod sqlite;
pub mod tasks;

use async_trait::async_trait;
use cks_core::KnowledgeStructure;
use cks_core::vectors::StoredVectors;
use std::fmt::Debug;

pub use chats::{ChatRow, ChatSummary};
pub use opener::{OpenError, StoreLocation, StoreOpener};

/// The store traits, for calling a store's methods (`use cks_runtime::store::prelude::*`).
pub mod prelude {
    pub use super::{ChatStore, EmbeddingStore, GalleryStore, HistoryStore, SettingStore, Store, TaskStore};
}
pub use registry::GraphRow;

/// A pool of connections as it is used now (`Store::connections`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Connections {
    /// Open now: in use and idle.
    pub open: usize,
    /// Open and waiting for a caller.
    pub idle: usize,
    /// The most it opens.
    pub max: usize,
    /// Callers waiting for one.
    pub waiting: usize,
}
pub use tasks::{NewTask, TaskFilter, TaskRef, TaskRow, TaskStatus};

/// A session row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionRow {
    pub session_id: String,
    pub created_at: String,
    pub parent_session_id: Option<String>,
    pub parent_version_id: Option<String>,
    pub closed: bool,
    /// JSON object text.
    pub metadata: String,
    pub snapshot_interval: u32,
    pub head: Head,
}

/// The latest committed version of a session (`seq == 0`: no versions yet, only the start state).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Head {
    pub seq: u64,
    pub version_id: Option<String>,
    pub state_hash: String,
    pub object_count: u64,
}

/// A version row, without its payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VersionRow {
    pub seq: u64,
    pub version_id: String,
    pub transaction_id: String,
    pub created_at: String,
    pub state_hash: String,
    pub object_count: u64,
    /// JSON object text.
    pub metadata: String,
    /// Whether a full snapshot is stored at this sequence number.
    pub has_snapshot: bool,
}

/// A version row with its delta (absent when the version is stored only as a snapshot).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredVersion {
    pub row: VersionRow,
    pub delta: Option<String>,
}

/// One commit: the new version, its payload(s), and the head it must replace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewVersion {
    pub session_id: String,
    pub expected_seq: u64,
    pub row: VersionRow,
    pub delta: Option<String>,
    pub snapshot: Option<String>,
}

/// What is needed to rebuild the state at a sequence number: the nearest snapshot at or before it
/// (its text, or what [`HistoryStore::load_chain_decoded`] decoded it into) and the versions after that
/// snapshot, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chain<S = String> {
    pub snapshot_seq: u64,
    pub snapshot: S,
    pub versions: Vec<StoredVersion>,
}

/// A kept vector index's parts, each made as the store asks for it
/// ([`HistoryStore::save_vector_index`]).
pub type Parts = Box<dyn Iterator<Item = Vec<u8>> + Send>;

/// Reads the next part of a kept vector index into `read` (the version and the parts so far):
/// what each store's [`HistoryStore::load_vector_index`] does with the parts, in order.
pub fn read_vector_part(read: &mut Option<(u64, StoredVectors)>, seq: u64, bytes: &[u8]) -> Result<(), StoreError> {
    let (at, stored) = read.get_or_insert_with(|| (seq, StoredVectors::default()));
    if *at != seq {
        return Err(StoreError::Corrupt(format!("vector index parts of versions {at} and {seq}")));
    }
    stored.read_part(bytes).map_err(|e| StoreError::Corrupt(e.to_string()))
}

/// Decodes a snapshot where the store reads it, from a reader of its text (see
/// [`HistoryStore::load_chain_decoded`]).
pub type SnapshotDecoder = Box<dyn FnOnce(&mut dyn std::io::Read) -> Result<KnowledgeStructure, StoreError> + Send>;

/// Random reads of a stored text (a snapshot's state, for [`HistoryStore::read_located`]).
pub trait ReadAt {
    /// Fills `buf` with the bytes from `offset` on; an error when the text ends first.
    fn read_exact_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), StoreError>;
}

impl ReadAt for &[u8] {
    fn read_exact_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), StoreError> {
        let start = usize::try_from(offset).ok();
        match start.and_then(|start| self.get(start..start.checked_add(buf.len())?)) {
            Some(bytes) => {
                buf.copy_from_slice(bytes);
                Ok(())
            }
            None => Err(StoreError::Corrupt(format!("a read at {offset} runs past the stored state"))),
        }
    }
}

/// The head state's nearest snapshot as [`HistoryStore::read_located`] lends it: its locator (where each
/// object's text lies, written beside the snapshot by the runtime), random reads of its text, and
/// the versions after it up to the head.
pub struct Located<'a> {
    pub snapshot_seq: u64,
    pub locator: &'a [u8],
    pub state: &'a mut dyn ReadAt,
    pub versions: Vec<StoredVersion>,
}

impl std::fmt::Debug for Located<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Located")
            .field("snapshot_seq", &self.snapshot_seq)
            .field("locator_bytes", &self.locator.len())
            .field("versions", &self.versions.len())
            .finish_non_exhaustive()
    }
}

/// Reads what it needs of a [`Located`] snapshot, where the store reads it.
pub type LocatedReader = Box<dyn FnOnce(Located<'_>) -> Result<(), StoreError> + Send>;

/// One version of an imported history: its row and payload(s), as for [`NewVersion`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImportedVersion {
    pub row: VersionRow,
    pub delta: Option<String>,
    pub snapshot: Option<String>,
}

/// A whole session written at once (an import from another store or server): its row, whose head
/// must be its last version (or, without versions, its starting state) and whose `closed` is its
/// final state, its starting state (snapshot 0) and its versions `1..=head.seq` in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImportedSession {
    pub row: SessionRow,
    pub initial_state: String,
    pub versions: Vec<ImportedVersion>,
}

impl ImportedSession {
    /// The seq and text of the snapshot the head state is rebuilt from: the last one stored up to
    /// the head (snapshot 0, the starting state, when no version holds one).
    pub fn head_snapshot(&self) -> (u64, &str) {
        self.versions
            .iter()
            .rev()
            .filter(|v| v.row.seq <= self.row.head.seq)
            .find_map(|v| v.snapshot.as_deref().map(|text| (v.row.seq, text)))
            .unwrap_or((0, &self.initial_state))
    }
}

/// What [`HistoryStore::import_sessions`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImportOutcome {
    /// Sessions written, in the order given.
    pub imported: Vec<String>,
    /// Sessions left alone because a session with that id was already stored.
    pub skipped: Vec<String>,
}

/// Store failures.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("session '{0}' already exists")]
    SessionExists(String),
    #[error("session '{0}' not found")]
    SessionNotFound(String),
    #[error("session '{0}' is closed")]
    SessionClosed(String),
    #[error("session '{session_id}' moved on: expected head {expected}, found {found}")]
    Conflict { session_id: String, expected: u64, found: u64 },
    #[error("stored data is inconsistent: {0}")]
    Corrupt(String),
    #[error("storage backend error: {0}")]
    Backend(String),
    /// The storage cannot be reached now (a database restarting, a network fault); the operation
    /// did not happen, or its outcome is unknown, and may be retried.
    #[error("storage unavailable: {0}")]
    Unavailable(String),
}

/// Sessions and their histories: session rows, versions, snapshots and their locators, and the
/// sessions' text indexes.
#[async_trait]
pub trait HistoryStore: Send + Sync + Debug + 'static {
    /// Creates a session with its starting state (snapshot 0). Fails if the id exists.
    /// Takes the state's text: a million objects' text is not copied again to be stored.
    async fn create_session(&self, session: &SessionRow, initial_state: String) -> Result<(), StoreError>;

    async fn load_session(&self, session_id: &str) -> Result<Option<SessionRow>, StoreError>;

    /// Every session row, oldest first. Never loads states.
    async fn list_sessions(&self) -> Result<Vec<SessionRow>, StoreError>;

    /// The current head sequence number; a cheap freshness probe.
    async fn head_seq(&self, session_id: &str) -> Result<Option<u64>, StoreError>;

    /// A token that changes whenever another writer may have committed since it was last read;
    /// `None` when the store cannot tell (then every access probes [`HistoryStore::head_seq`]). Must be
    /// cheap and must not block on IO: it is called on every read.
    fn change_token(&self) -> Option<u64> {
        None
    }

    /// Appends one version atomically, with compare-and-swap on the head (see module docs).
    async fn append_version(&self, version: &NewVersion) -> Result<(), StoreError>;

    /// Version rows of a session, oldest first, without payloads.
    async fn list_versions(&self, session_id: &str) -> Result<Vec<VersionRow>, StoreError>;

    /// Finds a version by id: its session and sequence number.
    async fn find_version(&self, version_id: &str) -> Result<Option<(String, u64)>, StoreError>;

    /// The chain that rebuilds the state at `seq`.
    async fn load_chain(&self, session_id: &str, seq: u64) -> Result<Chain, StoreError>;

    /// The same chain, its snapshot handed to `decode` off the async workers. A store that can
    /// read the text a piece at a time does, so a large state is decoded without its whole text
    /// in memory (for 100,000 objects, 17 MB of freshly faulted pages beside the structure).
    async fn load_chain_decoded(
        &self,
        session_id: &str,
        seq: u64,
        decode: SnapshotDecoder,
    ) -> Result<Chain<KnowledgeStructure>, StoreError> {
        let Chain { snapshot_seq, snapshot, versions } = self.load_chain(session_id, seq).await?;
        let snapshot = tokio::task::spawn_blocking(move || decode(&mut snapshot.as_bytes()))
            .await
            .map_err(|e| StoreError::Backend(format!("decoding task failed: {e}")))??;
        Ok(Chain { snapshot_seq, snapshot, versions })
    }

    /// Lends `read` the head state's nearest snapshot with its locator ([`Located`]), in one read
    /// of the store, so a few objects can be read without loading the session. `false`, and
    /// `read` not called, when that snapshot has no locator (or the store keeps none).
    async fn read_located(&self, session_id: &str, read: LocatedReader) -> Result<bool, StoreError> {
        let _ = (session_id, read);
        Ok(false)
    }

    /// Whether this store keeps snapshot locators ([`HistoryStore::save_locator`]): the runtime builds none
    /// for a store that does not.
    fn keeps_locators(&self) -> bool {
        false
    }

    /// Keeps `locator` beside the snapshot stored at `seq` (see [`HistoryStore::read_located`]); a store
    /// that keeps none ignores it.
    async fn save_locator(&self, session_id: &str, seq: u64, locator: Vec<u8>) -> Result<(), StoreError> {
        let _ = (session_id, seq, locator);
        Ok(())
    }

    /// Whether this store keeps text indexes ([`HistoryStore::save_text_index`]): the runtime
    /// writes none for a store that does not.
    fn keeps_text_indexes(&self) -> bool {
        false
    }

    /// Keeps a session's text index ([`cks_core::KnowledgeStructure::text_index_bytes`]) of the
    /// state at version `seq`, in place of the one kept before unless that one is of a later
    /// version. Only a shortcut: a session loaded without one builds it when searched.
    async fn save_text_index(&self, session_id: &str, seq: u64, index: Vec<u8>) -> Result<(), StoreError> {
        let _ = (session_id, seq, index);
        Ok(())
    }

    /// The text index kept for a session and the version it indexes, if any.
    async fn load_text_index(&self, session_id: &str) -> Result<Option<(u64, Vec<u8>)>, StoreError> {
        let _ = session_id;
        Ok(None)
    }

    /// Whether this store keeps vector indexes ([`HistoryStore::save_vector_index`]).
    fn keeps_vector_indexes(&self) -> bool {
        false
    }

    /// Keeps a session's settled vector index of the state at version `seq`, written part by
    /// part ([`cks_core::vectors::KeptVectors::into_parts`]) in one transaction, in place of the
    /// one kept before unless that one is of a later version. Only a shortcut, like the text
    /// index: a session loaded without one settles its index against the known vectors.
    async fn save_vector_index(&self, session_id: &str, seq: u64, parts: Parts) -> Result<(), StoreError> {
        let _ = (session_id, seq, parts);
        Ok(())
    }

    /// The vector index kept for a session, read part by part, and the version it indexes.
    async fn load_vector_index(&self, session_id: &str) -> Result<Option<(u64, StoredVectors)>, StoreError> {
        let _ = session_id;
        Ok(None)
    }

    /// Versions after `after_seq` up to the head, with deltas (used to catch up with other writers).
    async fn load_versions_after(&self, session_id: &str, after_seq: u64) -> Result<Vec<StoredVersion>, StoreError>;

    /// The snapshot stored at exactly `seq`, if any.
    async fn load_snapshot(&self, session_id: &str, seq: u64) -> Result<Option<String>, StoreError>;

    async fn set_closed(&self, session_id: &str, closed: bool) -> Result<(), StoreError>;

    /// Replaces a session's metadata (JSON object text) if it is still `expected`, atomically (a
    /// compare-and-swap): `false`, and nothing written, when another writer changed it since it was
    /// read. Who a session is shared with is kept there ([`crate::access`]), and two shares at
    /// once, here or on another process, must both land: the caller reads, changes and swaps
    /// again. Versions and the head are left alone.
    async fn swap_session_metadata(&self, session_id: &str, expected: &str, metadata: &str)
    -> Result<bool, StoreError>;

    /// Writes whole sessions with their histories, keeping their ids, timestamps and metadata.
    /// A session whose id is already stored is skipped (so importing the same data twice writes
    /// nothing the second time); a version id already stored elsewhere is an error
    /// ([`StoreError::Corrupt`]), and then nothing is written.
    ///
    /// This default checks everything first, then writes through the other methods one session
    /// after another, so only a backend failure midway can leave earlier sessions written; stores
    /// that have transactions override it to write everything or nothing.
    async fn import_sessions(&self, sessions: &[ImportedSession]) -> Result<ImportOutcome, StoreError> {
        check_imports(sessions)?;
        let mut outcome = ImportOutcome::default();
        let mut fresh = Vec::new();
        for session in sessions {
            if self.load_session(&session.row.session_id).await?.is_some() {
                outcome.skipped.push(session.row.session_id.clone());
                continue;
            }
            for version in &session.versions {
                if let Some((owner, _)) = self.find_version(&version.row.version_id).await? {
                    return Err(version_taken(&version.row.version_id, &owner));
                }
            }
            fresh.push(session);
        }
        for session in fresh {
            let first = SessionRow { closed: false, head: initial_head(session), ..session.row.clone() };
            self.create_session(&first, session.initial_state.clone()).await?;
            for (expected_seq, version) in (0u64..).zip(&session.versions) {
                self.append_version(&NewVersion {
                    session_id: session.row.session_id.clone(),
                    expected_seq,
                    row: version.row.clone(),
                    delta: version.delta.clone(),
                    snapshot: version.snapshot.clone(),
                })
                .await?;
            }
            if session.row.closed {
                self.set_closed(&session.row.session_id, true).await?;
            }
            outcome.imported.push(session.row.session_id.clone());
        }
        Ok(outcome)
    }
}

/// The graph registry's entries ([`registry`]).
#[async_trait]
pub trait GalleryStore: Send + Sync + Debug + 'static {
    /// Writes a registry entry (see [`registry`] for the rules when the name is taken) and returns
    /// the entry as stored. The session must exist ([`StoreError::SessionNotFound`]).
    async fn put_graph(&self, row: GraphRow) -> Result<GraphRow, StoreError>;

    /// The registry entry under `name`.
    async fn get_graph(&self, name: &str) -> Result<Option<GraphRow>, StoreError>;

    /// Removes the registry entry under `name` (never its session); false when there was none.
    async fn delete_graph(&self, name: &str) -> Result<bool, StoreError>;

    /// Every registry entry, most recently updated first ([`registry::sort_newest_first`]).
    async fn list_graphs(&self) -> Result<Vec<GraphRow>, StoreError>;
}

/// Settings the server keeps with its data, and the store's replica id.
#[async_trait]
pub trait SettingStore: Send + Sync + Debug + 'static {
    /// This store's replica id: made on first use and the same for the store's whole life, so
    /// version vectors can tell this database's commits from another's. `None` when the store
    /// keeps no such identity.
    async fn replica_id(&self) -> Result<Option<String>, StoreError> {
        Ok(None)
    }

    /// A setting the server keeps with its data (such as whether a sweeper should run), shared
    /// by every process on the store; `None` when never saved.
    async fn load_setting(&self, key: &str) -> Result<Option<String>, StoreError>;

    /// Saves a setting (replacing its value).
    async fn save_setting(&self, key: &str, value: &str) -> Result<(), StoreError>;

    /// The setting's value, saving `value` first when it has none: of processes racing to set it,
    /// every one gets the value that was saved first.
    async fn setting_or_insert(&self, key: &str, value: &str) -> Result<String, StoreError>;

    /// The settings whose keys start with `prefix`, as (key, value) sorted by key.
    async fn list_settings(&self, prefix: &str) -> Result<Vec<(String, String)>, StoreError>;

    /// Forgets a setting; whether it existed.
    async fn delete_setting(&self, key: &str) -> Result<bool, StoreError>;
}

/// Stored chats ([`chats`]).
#[async_trait]
pub trait ChatStore: Send + Sync + Debug + 'static {
    /// Saves a whole chat ([`chats`]) in one transaction, durable when it returns. With
    /// `expected_revision` it replaces the stored row only while that row has this revision and
    /// the same session; without, it only creates a chat whose id is not stored yet. `false`, and
    /// nothing written, when that does not hold (another save came first). The row is written as
    /// given, its `revision` included (callers write `expected_revision + 1`, or 1 for a new chat).
    /// The session must exist ([`StoreError::SessionNotFound`]).
    async fn save_chat(&self, chat: &ChatRow, expected_revision: Option<u64>) -> Result<bool, StoreError>;

    async fn load_chat(&self, chat_id: &str) -> Result<Option<ChatRow>, StoreError>;

    /// Chats (of `session_id` when given, else of every session) without their contents, most
    /// recently updated first ([`chats::sort_newest_first`]), at most `limit` of them.
    async fn list_chats(&self, session_id: Option<&str>, limit: usize) -> Result<Vec<ChatSummary>, StoreError>;

    /// Deletes a chat; false when there was none.
    async fn delete_chat(&self, chat_id: &str) -> Result<bool, StoreError>;
}

/// The durable task queue ([`tasks`]).
#[async_trait]
pub trait TaskStore: Send + Sync + Debug + 'static {
    /// Queues a task ([`tasks`]); `None`, and nothing written, when a task with the same
    /// `dedup_key` exists.
    async fn enqueue_task(&self, task: &NewTask) -> Result<Option<i64>, StoreError>;

    /// Claims the oldest claimable task (of `task_type` when given): a pending one whose retry
    /// time has come, or one whose claim is older than `lease_ms`. Marks it in progress as of
    /// `now_ms` and returns it so. Atomic: concurrent claims never return the same task.
    async fn claim_task(
        &self,
        task_type: Option<&str>,
        now_ms: i64,
        lease_ms: i64,
    ) -> Result<Option<TaskRow>, StoreError>;

    async fn get_task(&self, task_id: i64) -> Result<Option<TaskRow>, StoreError>;

    /// Tasks matching `filter`, oldest first.
    async fn list_tasks(&self, filter: &TaskFilter) -> Result<Vec<TaskRow>, StoreError>;

    /// Deletes a finished task; false when `task` names no task (or a claim that no longer holds).
    async fn complete_task(&self, task: TaskRef) -> Result<bool, StoreError>;

    /// Returns a task to pending after a failed attempt, with its new `retry_count` and `error`,
    /// claimable from `next_retry_at_ms`; false as for [`TaskStore::complete_task`].
    async fn fail_task(
        &self,
        task: TaskRef,
        retry_count: u32,
        error: &str,
        next_retry_at_ms: i64,
    ) -> Result<bool, StoreError>;

    /// Gives up on a task: dead, with `error` and, when given, the failed attempts counted so far;
    /// false as for [`TaskStore::complete_task`].
    async fn dead_letter_task(&self, task: TaskRef, error: &str, retry_count: Option<u32>) -> Result<bool, StoreError>;

    /// Returns a dead task to pending, claimable at `now_ms`, its retry count and error cleared;
    /// false unless the task is dead.
    async fn retry_dead_task(&self, task_id: i64, now_ms: i64) -> Result<bool, StoreError>;

    /// Renews a claim as of `now_ms` (the task's `claimed_at_ms` becomes `now_ms`); false unless
    /// `task` still holds it.
    async fn renew_task(&self, task: TaskRef, now_ms: i64) -> Result<bool, StoreError>;

    /// Writes tasks exactly as another store kept them, ids and states included (a restore or a
    /// copy); a task whose id or dedup key is taken already is left out. Tasks queued later get
    /// higher ids than any written. Returns how many were written; all or none are.
    async fn import_tasks(&self, tasks: &[TaskRow]) -> Result<u64, StoreError>;
}

/// One stored embedding: the hash of the text embedded and the vector's bytes (the runtime's
/// encoding; stores keep them opaque).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmbeddingRow {
    pub text_hash: [u8; 16],
    pub vector: Vec<u8>,
}

/// Embeddings kept by model and text hash, so an unchanged text is never embedded twice (after a
/// restart, a branch, an import, a revert).
///
/// They are a cache of what the content embeds to, not data of their own: replacing everything
/// stored ([`Store::replace_all`]) keeps them, and a restore's texts find their vectors again.
#[async_trait]
pub trait EmbeddingStore: Send + Sync + Debug + 'static {
    /// Keeps `rows` under `model`; a (model, text hash) already kept is left as it is (the same
    /// text embeds to the same vector), and of one hash given twice the first is kept. All rows
    /// or none are written.
    async fn save_embeddings(&self, model: &str, rows: &[EmbeddingRow]) -> Result<(), StoreError>;

    /// Every row kept under `model`, in any order.
    async fn load_embeddings(&self, model: &str) -> Result<Vec<EmbeddingRow>, StoreError>;

    /// The rows kept under `model` for these text hashes (those that are kept), in any order.
    async fn load_embeddings_of(&self, model: &str, text_hashes: &[[u8; 16]]) -> Result<Vec<EmbeddingRow>, StoreError>;

    /// Each model with rows kept, with how many, ordered by model name (byte order).
    async fn embedding_models(&self) -> Result<Vec<(String, u64)>, StoreError>;

    /// Forgets every row of `model`; returns how many were removed.
    async fn delete_embeddings(&self, model: &str) -> Result<u64, StoreError>;
}

/// The persistence contract every store implements (see the module docs for the invariants):
/// each noun's part, plus what concerns the whole store.
#[async_trait]
pub trait Store: HistoryStore + GalleryStore + SettingStore + ChatStore + TaskStore + EmbeddingStore {
    /// A short name for logs ("memory", "sqlite", ...).
    fn kind(&self) -> &'static str;

    /// Tells the other processes on the same storage about an event of this one (best effort; the
    /// stores no other process shares do nothing).
    fn publish(&self, _event: &crate::events::Event) {}

    /// The events other processes on the same storage published ([`Store::publish`]); `None`
    /// when no other process can share the storage.
    fn remote_events(&self) -> Option<tokio::sync::broadcast::Receiver<crate::events::Event>> {
        None
    }

    /// How its pool of connections is used now; `None` for a store without one.
    fn connections(&self) -> Option<Connections> {
        None
    }

    /// Replaces everything stored — every session, version, snapshot, registry entry and chat — with
    /// `sessions`, in one transaction: on any failure the store is left as it was. The store's
    /// replica id is kept, and so are the embeddings ([`EmbeddingStore`]): they are a cache of
    /// content, and the restored texts find their vectors there. (A restore in `clear` mode.)
    async fn replace_all(&self, sessions: &[ImportedSession]) -> Result<ImportOutcome, StoreError>;
}

/// The head of an imported session before its versions are appended one by one: the row's head
/// when it has none (then that is its starting state); otherwise a placeholder at sequence 0 that
/// the first version's compare-and-swap replaces (stores see opaque states and cannot hash them).
fn initial_head(session: &ImportedSession) -> Head {
    if session.versions.is_empty() {
        return session.row.head.clone();
    }
    Head { seq: 0, version_id: None, state_hash: String::new(), object_count: 0 }
}

/// The error for an imported version id that another session already has.
pub fn version_taken(version_id: &str, owner: &str) -> StoreError {
    StoreError::Corrupt(format!("version id '{version_id}' already exists (in session '{owner}')"))
}

/// Checks that each imported session is well-formed: versions numbered `1..=n`, each with a
/// payload, the head naming the last one, and no version id twice.
pub fn check_imports(sessions: &[ImportedSession]) -> Result<(), StoreError> {
    let mut seen = std::collections::HashSet::new();
    for session in sessions {
        let id = &session.row.session_id;
        let bad = |detail: String| StoreError::Corrupt(format!("imported session '{id}': {detail}"));
        for (seq, version) in (1u64..).zip(&session.versions) {
            if version.row.seq != seq {
                return Err(bad(format!("version #{seq} is numbered {}", version.row.seq)));
            }
            if version.delta.is_none() && version.snapshot.is_none() {
                return Err(bad(format!("version #{seq} has neither a delta nor a snapshot")));
            }
            if !seen.insert(version.row.version_id.as_str()) {
                return Err(bad(format!("version id '{}' appears twice", version.row.version_id)));
            }
        }
        let last = session.versions.last().map(|v| &v.row);
        if session.row.head.seq != session.versions.len() as u64
            || session.row.head.version_id.as_ref() != last.map(|r| &r.version_id)
        {
            return Err(bad("its head is not its last version".into()));
        }
    }
    Ok(())
}
