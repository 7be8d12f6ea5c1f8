//! The runtime: the one entry point for reading and changing sessions.
//!
//! Sessions are loaded from the store on first use and kept in a bounded LRU cache, so start-up
//! cost does not depend on how much is stored. Each loaded session has a read/write lock: readers
//! share the current structure; a writer applies its change in place, validates only what changed
//! (a full pass only when opt-in extensions ask for one), persists one version with a head
//! compare-and-swap, and undoes the change in memory if anything fails.
//!
//! Invariant: every committed state passes the always-on checks, which is what lets commits check
//! only the changed objects.
//! Invariant: the in-memory head never runs ahead of the store: memory changes are undone unless
//! the store accepted the version.

use rand::Rng;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use time::format_description::well_known::Rfc3339;
use tokio::sync::{OnceCell, RwLock, broadcast};

use cks_core::merge::{self, Conflict, Resolutions};
use cks_core::neighbourhood::{self, Neighbourhoods};
use cks_core::ops::{self, Operation};
use cks_core::text::TextIndex;
use cks_core::validate::{self, Diagnostic, Extension, ProvenanceKey, Severity, Validated, ValidationOptions};
use cks_core::vectors::StoredVectors;
use cks_core::{Base, ChangeSet, ContentHash, KnowledgeStructure, Rewind};

use crate::access::SessionAccess;
use crate::codec;
use crate::error::RuntimeError;
use crate::events::{Event, EventKind};
use crate::locator::{self, LocatedSource};
use crate::session::{SessionInfo, SessionState, VersionInfo};
use crate::store::{Chain, Head, NewVersion, SessionRow, SnapshotDecoder, Store, StoreError, VersionRow};
use crate::tasks::{QueueConfig, TaskQueue};

mod commit;
mod history;
mod in_flight;
mod past;
mod text_index;
mod vector_index;

/// The version id that stands for "the empty structure" (as in the reference).
pub const EMPTY_STATE_VERSION_ID: &str = "00000000-0000-0000-0000-000000000000";

/// Runtime settings.
#[derive(Clone, Debug)]
pub struct RuntimeConfig {
    /// Store a full snapshot at most every this many versions (deltas in between). A snapshot is
    /// further deferred until the deltas since the last one changed at least 1/8 of the objects,
    /// so its cost is always amortized over that many changes and reconstruction replays at most
    /// about 1/8 of a state's worth of changes on top of a snapshot.
    pub snapshot_interval: u32,
    /// How many sessions stay loaded in memory.
    pub cache_capacity: usize,
    /// How many objects the loaded sessions may hold together before the least recently used are
    /// unloaded (the one in use always stays): memory follows this, not the number of sessions.
    pub cache_objects: usize,
    /// Commit attempts before reporting `concurrent_modification`.
    pub max_commit_attempts: u32,
    /// Check the store for other writers' commits before every access (needed when several
    /// processes share one database; harmless otherwise).
    pub refresh_on_access: bool,
    /// Capacity of the event channel.
    pub event_capacity: usize,
    /// The task queue's lease and retry limit.
    pub queue: QueueConfig,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            snapshot_interval: 10,
            cache_capacity: 64,
            cache_objects: 2_000_000,
            max_commit_attempts: 6,
            refresh_on_access: true,
            event_capacity: 256,
            queue: QueueConfig::default(),
        }
    }
}

/// What a commit changes.
#[derive(Clone, Debug)]
pub enum Edit {
    /// Evolution operations, applied atomically.
    Operations(Vec<Operation>),
    /// A whole new state (revert, merge). With `if_head`, the commit fails with
    /// `concurrent_modification` unless the session's head is still that sequence number.
    Replace { state: Box<KnowledgeStructure>, if_head: Option<u64> },
}

/// A commit request.
#[derive(Clone, Debug, Default)]
pub struct CommitRequest {
    pub edit: Option<Edit>,
    /// Stored with the version (who, why, which tool).
    pub metadata: Map<String, Value>,
    /// Opt-in constraints that must also pass (a full validation pass).
    pub extensions: Vec<Extension>,
    /// When set, every `VerificationRecord` of the new state must carry this key's signature.
    pub provenance: Option<ProvenanceKey>,
}

impl CommitRequest {
    pub fn operations(operations: Vec<Operation>) -> Self {
        CommitRequest { edit: Some(Edit::Operations(operations)), ..Default::default() }
    }

    pub fn replace(state: KnowledgeStructure) -> Self {
        CommitRequest { edit: Some(Edit::Replace { state: Box::new(state), if_head: None }), ..Default::default() }
    }

    pub fn with_metadata(mut self, metadata: Map<String, Value>) -> Self {
        self.metadata = metadata;
        self
    }

    pub fn with_extensions(mut self, extensions: Vec<Extension>) -> Self {
        self.extensions = extensions;
        self
    }

    pub fn with_provenance(mut self, key: ProvenanceKey) -> Self {
        self.provenance = Some(key);
        self
    }
}

/// A successful commit.
#[derive(Clone, Debug)]
pub struct Committed {
    pub version: VersionInfo,
    /// Non-error diagnostics of the new state (warnings, information).
    pub warnings: Vec<Diagnostic>,
    /// Ids whose content changed.
    pub changed_ids: Vec<String>,
}

/// The result of merging a branch.
#[derive(Clone, Debug)]
pub enum MergeReport {
    /// `changed` is false when the merge brought nothing new (the version then records the merge only).
    Merged {
        committed: Box<Committed>,
        changed: bool,
        dropped_relations: Vec<String>,
        resolved: Vec<String>,
    },
    Conflicts(Vec<Conflict>),
}

/// Options for a new session.
#[derive(Clone, Debug, Default)]
pub struct NewSession {
    pub metadata: Map<String, Value>,
    /// When set, the session starts with a first version carrying this metadata.
    pub first_version: Option<Map<String, Value>>,
}

/// A loaded session.
#[derive(Debug)]
pub(crate) struct Session {
    pub(crate) id: String,
    pub(crate) state: RwLock<SessionState>,
    last_used: AtomicU64,
    /// Its object count when last seen (read without waiting for its lock).
    objects: AtomicUsize,
    /// The store's change token when this session was last known to match the store.
    fresh_as_of: AtomicU64,
    /// The version whose text index the store keeps ([`NOT_KEPT`]: none).
    text_index_kept: AtomicU64,
    /// The version whose vector index the store keeps (the same way).
    vector_index_kept: AtomicU64,
}

/// No change token recorded yet.
const NOT_CHECKED: u64 = u64::MAX;

/// No index kept (a `Session::text_index_kept` or `vector_index_kept` value).
const NOT_KEPT: u64 = u64::MAX;

#[derive(Debug, Default)]
struct Cache {
    entries: HashMap<String, Arc<OnceCell<Arc<Session>>>>,
    tick: u64,
}

/// The versioned knowledge runtime over one store.
#[derive(Debug)]
pub struct Runtime {
    store: Arc<dyn Store>,
    config: RuntimeConfig,
    cache: Mutex<Cache>,
    events: broadcast::Sender<Event>,
    /// The store's replica id, read once.
    replica_id: OnceCell<Option<String>>,
    /// The gallery's entries as last read from the store.
    pub(crate) gallery: crate::gallery::Cache,
    /// Search by meaning, once enabled.
    pub(crate) embeddings: std::sync::OnceLock<Arc<crate::embeddings::Embeddings>>,
    /// Indexes being kept in the background ([`Runtime::finish_saving`]).
    saving: Arc<in_flight::InFlight>,
    /// How long commits took, retries included.
    commit_times: crate::histogram::Histogram,
}

/// The most objects [`Runtime::read_neighbourhood`] reads from a store before it loads the
/// session instead: past this, one load costs less than the reads.
const NEIGHBOURHOOD_LIMIT: usize = 5_000;

/// The session metadata key of a session's node id, and the version metadata key that repeats it.
pub const NODE_ID: &str = "node_id";
/// The version metadata key of the version vector (`{node or replica id: commit count}`).
pub const VERSION_VECTOR: &str = "version_vector";

/// The current time as the stores keep it (RFC 3339, UTC).
pub fn now() -> String {
    time::OffsetDateTime::now_utc().format(&Rfc3339).unwrap_or_default()
}

fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Outcome of one commit attempt.
enum Attempt {
    Done(Committed),
    /// Another writer moved the head; the in-memory change was undone.
    Conflict,
}

/// A change applied to the cached structure, with what is needed to take it back.
enum Applied {
    Delta(ChangeSet),
    Replaced(Box<KnowledgeStructure>),
}

impl Applied {
    fn undo(self, structure: &mut KnowledgeStructure) {
        match self {
            Applied::Delta(changes) => structure.undo(changes),
            Applied::Replaced(previous) => *structure = *previous,
        }
    }
}

/// A change applied in memory while its version is being written. If the commit future is
/// dropped at that point (a client that disconnects cancels its call), the change is undone, so
/// the cached state is never one the store may not have. The store may still finish the write on
/// its own thread, so the session's freshness mark is cleared as well: the next access asks the
/// store for its head and reloads whatever it ended up with.
struct InFlight<'a> {
    structure: &'a mut KnowledgeStructure,
    applied: Option<Applied>,
    fresh_as_of: &'a AtomicU64,
}

impl InFlight<'_> {
    /// The write finished (either way): hands the change back to the caller to keep or undo.
    fn settle(mut self) -> Option<Applied> {
        self.applied.take()
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if let Some(applied) = self.applied.take() {
            applied.undo(self.structure);
            self.fresh_as_of.store(NOT_CHECKED, Ordering::Release);
        }
    }
}

impl Runtime {
    /// A runtime over `store`. When other processes share the store, their events are re-published
    /// here (this needs a tokio runtime; outside one, only this process's events are seen).
    pub fn new(store: Arc<dyn Store>, config: RuntimeConfig) -> Self {
        let (events, _) = broadcast::channel(config.event_capacity.max(1));
        if let (Some(remote), Ok(handle)) = (store.remote_events(), tokio::runtime::Handle::try_current()) {
            handle.spawn(forward_remote_events(remote, events.downgrade()));
        }
        Runtime {
            store,
            config,
            cache: Mutex::new(Cache::default()),
            events,
            replica_id: OnceCell::new(),
            gallery: Default::default(),
            embeddings: Default::default(),
            saving: Default::default(),
            commit_times: Default::default(),
        }
    }

    /// How long commits took so far (the successful and the failed), for metrics.
    pub fn commit_times(&self) -> crate::histogram::HistogramCounts {
        self.commit_times.counts()
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Waits until the indexes being kept in the background are written, or `within` passed;
    /// true when they are. A server that is stopping calls it, so that the next start finds them.
    pub async fn finish_saving(&self, within: Duration) -> bool {
        self.saving.wait(within).await
    }

    /// The durable task queue in this runtime's store.
    pub fn tasks(&self) -> TaskQueue {
        TaskQueue::new(self.store.clone(), self.config.queue.clone())
    }

    pub fn config(&self) -> &RuntimeConfig {
        &self.config
    }

    /// Subscribes to runtime events from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.events.subscribe()
    }

    /// Tells every process on the store, this one included, that the call `request_id` of the
    /// transport session `transport_session` is to stop (an [`EventKind::CallCancelled`]).
    pub fn cancel_call(&self, transport_session: &str, request_id: &str) {
        self.emit(EventKind::CallCancelled {
            transport_session: transport_session.to_owned(),
            request_id: request_id.to_owned(),
        });
    }

    /// Publishes an event to this process's subscribers and the other processes on the store.
    pub fn emit(&self, kind: EventKind) {
        let event = Event { event_id: new_id(), created_at: now(), kind };
        self.store.publish(&event);
        // No subscribers is not an error.
        let _ = self.events.send(event);
    }

    /// Number of sessions currently loaded in memory.
    pub fn loaded_sessions(&self) -> usize {
        self.cache.lock().unwrap_or_else(|p| p.into_inner()).entries.len()
    }

    /// Objects held by the loaded sessions: each session's count when last seen (one being
    /// written keeps the count it had), as the cache's object budget counts them.
    pub fn loaded_objects(&self) -> usize {
        let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        let count = |session: &Session| {
            if let Ok(state) = session.state.try_read() {
                session.objects.store(state.structure.len(), Ordering::Relaxed);
            }
            session.objects.load(Ordering::Relaxed)
        };
        cache.entries.values().filter_map(|cell| cell.get()).map(|session| count(session)).sum()
    }

    /// How the store's connections are used, for a store that pools them.
    pub fn connections(&self) -> Option<crate::store::Connections> {
        self.store.connections()
    }

    /// Drops every loaded session; the next access reloads the committed state from the store.
    /// A safety net after a failure that may have left an in-memory state half-changed.
    pub fn forget_loaded_sessions(&self) {
        self.cache.lock().unwrap_or_else(|p| p.into_inner()).entries.clear();
    }

    // ----- sessions -----

    /// Creates a session holding `state`. The state must pass the always-on checks.
    pub async fn create_session(
        &self,
        state: KnowledgeStructure,
        options: NewSession,
    ) -> Result<SessionInfo, RuntimeError> {
        self.create_session_with_parent(checked(state)?, options, None, None).await
    }

    /// Creates a session holding a state its caller has validated already (a million objects
    /// take seconds to check).
    pub async fn create_validated_session(
        &self,
        state: Validated,
        options: NewSession,
    ) -> Result<SessionInfo, RuntimeError> {
        self.create_session_with_parent(state, options, None, None).await
    }

    async fn create_session_with_parent(
        &self,
        state: Validated,
        options: NewSession,
        parent_session_id: Option<String>,
        parent_version_id: Option<String>,
    ) -> Result<SessionInfo, RuntimeError> {
        let state = state.into_inner();
        let mut metadata = options.metadata;
        // Each session (a branch too) counts its commits under its own node id.
        metadata.entry(NODE_ID).or_insert_with(|| Value::String(new_id()));
        crate::access::stamp(&mut metadata);
        let row = SessionRow {
            session_id: new_id(),
            created_at: now(),
            parent_session_id,
            parent_version_id,
            closed: false,
            metadata: Value::Object(metadata).to_string(),
            snapshot_interval: self.config.snapshot_interval.max(1),
            head: Head {
                seq: 0,
                version_id: None,
                state_hash: state.root_hash().to_hex(),
                object_count: state.len() as u64,
            },
        };
        let locator = self.store_first_snapshot(&row, &state).await?;
        let id = row.session_id.clone();
        self.save_locator(&id, 0, locator).await;
        let session = Arc::new(Session {
            id: id.clone(),
            state: RwLock::new(SessionState { row, structure: state, last_snapshot_seq: 0, changes_since_snapshot: 0 }),
            last_used: AtomicU64::new(0),
            objects: AtomicUsize::new(0),
            fresh_as_of: AtomicU64::new(NOT_CHECKED),
            text_index_kept: AtomicU64::new(NOT_KEPT),
            vector_index_kept: AtomicU64::new(NOT_KEPT),
        });
        self.cache_insert(session);
        self.emit(EventKind::SessionCreated { session_id: id.clone() });
        if let Some(metadata) = options.first_version {
            self.commit(&id, CommitRequest::operations(Vec::new()).with_metadata(metadata)).await?;
        }
        self.info(&id).await
    }

    fn cache_insert(&self, session: Arc<Session>) {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        cache.tick += 1;
        session.last_used.store(cache.tick, Ordering::Relaxed);
        let cell = Arc::new(OnceCell::new_with(Some(session.clone())));
        cache.entries.insert(session.id.clone(), cell);
        self.evict(&mut cache);
    }

    fn evict(&self, cache: &mut Cache) {
        let mut loaded: Vec<(u64, usize, String)> = cache
            .entries
            .iter()
            .filter_map(|(id, cell)| {
                let session = cell.get()?;
                // A session being written keeps the count it had when last seen.
                if let Ok(state) = session.state.try_read() {
                    session.objects.store(state.structure.len(), Ordering::Relaxed);
                }
                Some((session.last_used.load(Ordering::Relaxed), session.objects.load(Ordering::Relaxed), id.clone()))
            })
            .collect();
        let mut objects: usize = loaded.iter().map(|(_, n, _)| n).sum();
        let mut entries = cache.entries.len();
        // Least recently used first; the most recent one always stays.
        loaded.sort_unstable();
        for (_, count, id) in loaded.iter().take(loaded.len().saturating_sub(1)) {
            if entries <= self.config.cache_capacity.max(1) && objects <= self.config.cache_objects {
                break;
            }
            cache.entries.remove(id);
            entries -= 1;
            objects -= count;
        }
    }

    /// The loaded session, loading it from the store when needed.
    pub(crate) async fn session(&self, id: &str) -> Result<Arc<Session>, RuntimeError> {
        let cell = {
            let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            cache.tick += 1;
            let tick = cache.tick;
            let cell = cache.entries.entry(id.to_owned()).or_default().clone();
            if let Some(session) = cell.get() {
                session.last_used.store(tick, Ordering::Relaxed);
            }
            cell
        };
        let loaded = cell.get_or_try_init(|| self.load(id)).await;
        match loaded {
            Ok(session) => {
                let session = session.clone();
                let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
                session.last_used.store(cache.tick, Ordering::Relaxed);
                self.evict(&mut cache);
                Ok(session)
            }
            Err(e) => {
                let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
                if cache.entries.get(id).is_some_and(|c| Arc::ptr_eq(c, &cell)) {
                    cache.entries.remove(id);
                }
                Err(e)
            }
        }
    }

    async fn load(&self, id: &str) -> Result<Arc<Session>, RuntimeError> {
        let row = self.store.load_session(id).await?.ok_or_else(|| RuntimeError::SessionNotFound(id.to_owned()))?;
        // The kept indexes are read and decoded while the state is.
        let (chain, text, vectors) =
            tokio::join!(self.load_chain(id, row.head.seq), self.read_text_index(id), self.read_vector_index(id));
        let (state, text, vectors) = Self::rebuild_with_kept(id, row, chain?, text, vectors)?;
        Ok(Arc::new(Session {
            id: id.to_owned(),
            state: RwLock::new(state),
            last_used: AtomicU64::new(0),
            objects: AtomicUsize::new(0),
            fresh_as_of: AtomicU64::new(NOT_CHECKED),
            text_index_kept: AtomicU64::new(text),
            vector_index_kept: AtomicU64::new(vectors),
        }))
    }

    /// Keeps the session's search indexes in the store when there is something new to keep (in
    /// the background; a comparison or two when there is not).
    fn keep_indexes(&self, session: &Session, state: &SessionState) {
        self.keep_text_index(session, state);
        self.keep_vector_index(session, state);
    }

    /// Rebuilds a loaded session's state, setting each kept index on it when the rebuild passes
    /// the version it indexes (the snapshot or a version replayed after it); returns the versions
    /// whose text and vector indexes are kept now ([`NOT_KEPT`] when none is set).
    fn rebuild_with_kept(
        id: &str,
        row: SessionRow,
        chain: Chain<KnowledgeStructure>,
        text: Option<(u64, ContentHash, TextIndex)>,
        vectors: Option<(u64, StoredVectors)>,
    ) -> Result<(SessionState, u64, u64), RuntimeError> {
        let (mut text, mut vectors) = (text, vectors);
        let (mut text_set, mut vectors_set) = (NOT_KEPT, NOT_KEPT);
        let state = SessionState::rebuild_visiting(row, chain, |seq, structure| {
            if let Some((_, root, index)) = text.take_if(|(at, ..)| *at == seq) {
                match structure.set_text_index(index, root) {
                    Ok(()) => text_set = seq,
                    Err(e) => {
                        tracing::warn!(session_id = id, seq, error = %e, "kept text index not used; it is built when searched")
                    }
                }
            }
            if let Some((_, stored)) = vectors.take_if(|(at, _)| *at == seq) {
                match structure.set_vector_index(stored) {
                    Ok(()) => vectors_set = seq,
                    Err(e) => {
                        tracing::warn!(session_id = id, seq, error = %e, "kept vector index not used; it is settled when searched")
                    }
                }
            }
        })
        .map_err(|e| corrupt(id, e))?;
        Ok((state, text_set, vectors_set))
    }

    /// The chain that rebuilds the state at `seq`, its snapshot parsed where the store reads it.
    async fn load_chain(&self, id: &str, seq: u64) -> Result<Chain<KnowledgeStructure>, RuntimeError> {
        let decode: SnapshotDecoder = Box::new(codec::read_state);
        self.store.load_chain_decoded(id, seq, decode).await.map_err(|e| corrupt(id, e))
    }

    /// Creates the session's row with its first snapshot; returns the snapshot's locator where
    /// the store keeps one. The store writes the text (on its own thread) while the locator is
    /// made here: for a large state each takes about as long as the other.
    async fn store_first_snapshot(
        &self,
        row: &SessionRow,
        state: &KnowledgeStructure,
    ) -> Result<Option<Vec<u8>>, RuntimeError> {
        if !self.store.keeps_locators() {
            self.store.create_session(row, codec::encode_state(state)).await?;
            return Ok(None);
        }
        let (text, records) = locator::encode_with_records(state);
        let text_len = text.len();
        let (store, stored_row) = (self.store.clone(), row.clone());
        let writing = tokio::spawn(async move { store.create_session(&stored_row, text).await });
        let locator = locator::locator_of(state, records, text_len);
        writing.await.map_err(|e| StoreError::Backend(format!("storage task failed: {e}")))??;
        Ok(Some(locator))
    }

    /// A snapshot's text, and its locator when the store keeps locators.
    fn encode_snapshot(&self, structure: &KnowledgeStructure) -> (String, Option<Vec<u8>>) {
        if self.store.keeps_locators() {
            let (text, locator) = locator::encode_located(structure);
            (text, Some(locator))
        } else {
            (codec::encode_state(structure), None)
        }
    }

    /// Keeps a stored snapshot's locator. A locator is only a shortcut (reads without one load the
    /// session), so failing to keep it fails nothing.
    async fn save_locator(&self, id: &str, seq: u64, locator: Option<Vec<u8>>) {
        let Some(locator) = locator else { return };
        if let Err(e) = self.store.save_locator(id, seq, locator).await {
            tracing::warn!(session_id = id, seq, error = %e, "snapshot locator not saved");
        }
    }

    /// Brings a loaded session up to the store's head (other processes may have committed).
    async fn refresh(&self, session: &Session, state: &mut SessionState) -> Result<(), RuntimeError> {
        let stored = self.store.head_seq(&session.id).await?;
        let Some(stored) = stored else { return Err(RuntimeError::SessionNotFound(session.id.clone())) };
        if stored == state.row.head.seq {
            return Ok(());
        }
        let id = &session.id;
        let row = self.store.load_session(id).await?.ok_or_else(|| RuntimeError::SessionNotFound(id.clone()))?;
        let newer = self.store.load_versions_after(id, state.row.head.seq).await?;
        let result: Result<(), StoreError> = async {
            for version in &newer {
                if version.delta.is_none() {
                    let snapshot = self.store.load_snapshot(id, version.row.seq).await?.ok_or_else(|| {
                        StoreError::Corrupt(format!("version #{} has no delta and no snapshot", version.row.seq))
                    })?;
                    state.reset_to_snapshot(&version.row, &snapshot)?;
                } else {
                    state.replay(version)?;
                }
            }
            Ok(())
        }
        .await;
        result.map_err(|e| corrupt(id, e))?;
        state.row.closed = row.closed;
        state.row.metadata = row.metadata;
        Ok(())
    }

    /// Whether the session may be behind the store; cheap when the store has a change token.
    async fn may_be_stale(&self, session: &Session) -> Result<bool, RuntimeError> {
        if !self.config.refresh_on_access {
            return Ok(false);
        }
        // Read the token before probing the head: a commit landing in between moves the token,
        // so the next access probes again.
        let token = self.store.change_token();
        if token.is_some_and(|t| session.fresh_as_of.load(Ordering::Acquire) == t) {
            return Ok(false);
        }
        let stored = self.store.head_seq(&session.id).await?;
        let stale = stored != Some(session.state.read().await.row.head.seq);
        if !stale {
            session.fresh_as_of.store(token.unwrap_or(NOT_CHECKED), Ordering::Release);
        }
        Ok(stale)
    }

    /// Runs `f` on the current structure of a session (shared access).
    pub async fn read<R>(
        &self,
        id: &str,
        f: impl FnOnce(&KnowledgeStructure, &SessionInfo) -> R,
    ) -> Result<R, RuntimeError> {
        let session = self.session(id).await?;
        if self.may_be_stale(&session).await? {
            let mut state = session.state.write().await;
            self.refresh(&session, &mut state).await?;
        }
        let state = session.state.read().await;
        let info = state.info();
        let answer = f(&state.structure, &info);
        self.keep_indexes(&session, &state);
        Ok(answer)
    }

    /// Runs `f` on the neighbourhood of `seeds` to `depth` hops in a session's current state: what
    /// a budgeted subgraph query reads ([`neighbourhood`]). A session not loaded yet is not loaded
    /// first when its store can lend its latest snapshot's locator: the neighbourhood is read from
    /// the store, and the session is loaded after the answer, for the next requests. Otherwise, or
    /// when the neighbourhood is large, `f` reads the loaded structure.
    pub async fn read_neighbourhood<R: Send + 'static>(
        self: &Arc<Self>,
        id: &str,
        seeds: Vec<String>,
        depth: usize,
        f: impl FnOnce(&dyn Neighbourhoods) -> R + Send + 'static,
    ) -> Result<R, RuntimeError> {
        if self.is_loaded(id) {
            return self.read(id, |structure, _| f(structure)).await;
        }
        let query = Arc::new(Mutex::new(Some(f)));
        let answer = Arc::new(Mutex::new(None));
        let read: crate::store::LocatedReader = {
            let (query, answer) = (query.clone(), answer.clone());
            Box::new(move |located| {
                let mut source = LocatedSource::new(located)?;
                if let Some(near) = neighbourhood::gather(&mut source, &seeds, depth, NEIGHBOURHOOD_LIMIT)? {
                    let f = query.lock().unwrap_or_else(|p| p.into_inner()).take();
                    *answer.lock().unwrap_or_else(|p| p.into_inner()) = f.map(|f| f(&near));
                }
                Ok(())
            })
        };
        match self.store.read_located(id, read).await {
            Err(StoreError::SessionNotFound(_)) => return Err(RuntimeError::SessionNotFound(id.to_owned())),
            // The loaded session reports what is wrong with the stored state, if anything is.
            Err(e) => tracing::warn!(session_id = id, error = %e, "reading a neighbourhood from the store failed"),
            Ok(_) => {}
        }
        if let Some(answer) = answer.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let runtime = self.clone();
            let id = id.to_owned();
            tokio::spawn(async move {
                if let Err(e) = runtime.session(&id).await {
                    tracing::warn!(session_id = id, error = %e, "loading a session after a read from the store failed");
                }
            });
            return Ok(answer);
        }
        let f = query.lock().unwrap_or_else(|p| p.into_inner()).take();
        match f {
            Some(f) => self.read(id, |structure, _| f(structure)).await,
            // Taken, and no answer: `f` itself failed (the store's task reported how).
            None => Err(StoreError::Backend("the query failed while reading from the store".into()).into()),
        }
    }

    /// Whether the session is loaded, or being loaded, in memory.
    pub fn is_loaded(&self, id: &str) -> bool {
        self.cache.lock().unwrap_or_else(|p| p.into_inner()).entries.contains_key(id)
    }

    /// Fails with [`RuntimeError::SessionNotFound`] unless the session exists, and with
    /// [`RuntimeError::SessionClosed`] when it is closed; loads nothing.
    pub async fn check_open(&self, id: &str) -> Result<(), RuntimeError> {
        let closed = if self.is_loaded(id) {
            self.read(id, |_, info| info.closed).await?
        } else {
            self.store.load_session(id).await?.ok_or_else(|| RuntimeError::SessionNotFound(id.to_owned()))?.closed
        };
        if closed { Err(RuntimeError::SessionClosed(id.to_owned())) } else { Ok(()) }
    }

    /// Who may reach a session; `None` when it is ownerless. Read from the store on every call:
    /// another replica may have shared the session since it was loaded here.
    pub async fn access(&self, id: &str) -> Result<Option<SessionAccess>, RuntimeError> {
        let row = self.store.load_session(id).await?.ok_or_else(|| RuntimeError::SessionNotFound(id.to_owned()))?;
        Ok(SessionAccess::of(&crate::session::parse_metadata(&row.metadata)))
    }

    /// Changes who may reach a session: `change` is given the access stored now (`None`: ownerless)
    /// and returns the access to record, or an error to change nothing. The metadata is written
    /// with a compare-and-swap ([`crate::store::HistoryStore::swap_session_metadata`]); when another writer (a
    /// share at the same time, here or on another replica) changed it in between, `change` runs
    /// again on what that writer left, so no change is lost. Returns the access recorded.
    pub async fn update_access<E: From<RuntimeError>>(
        &self,
        id: &str,
        mut change: impl FnMut(Option<SessionAccess>) -> Result<SessionAccess, E>,
    ) -> Result<SessionAccess, E> {
        const ATTEMPTS: u32 = 1_000;
        for _ in 0..ATTEMPTS {
            let row = self
                .store
                .load_session(id)
                .await
                .map_err(RuntimeError::from)?
                .ok_or_else(|| RuntimeError::SessionNotFound(id.to_owned()))?;
            let mut metadata = crate::session::parse_metadata(&row.metadata);
            let access = change(SessionAccess::of(&metadata))?;
            access.write_to(&mut metadata);
            let text = Value::Object(metadata).to_string();
            if self.store.swap_session_metadata(id, &row.metadata, &text).await.map_err(RuntimeError::from)? {
                self.refresh_metadata(id).await?;
                return Ok(access);
            }
            tokio::task::yield_now().await;
        }
        Err(RuntimeError::ConcurrentModification { session_id: id.to_owned(), attempts: ATTEMPTS }.into())
    }

    /// Records who may reach a session, in place of whatever was recorded.
    pub async fn set_access(&self, id: &str, access: &SessionAccess) -> Result<(), RuntimeError> {
        self.update_access(id, |_| Ok::<_, RuntimeError>(access.clone())).await.map(drop)
    }

    /// A loaded copy of the session shows its metadata as stored now: read under the copy's write
    /// lock, so of two refreshes at once the later one leaves the newer text.
    async fn refresh_metadata(&self, id: &str) -> Result<(), RuntimeError> {
        if !self.is_loaded(id) {
            return Ok(());
        }
        let session = self.session(id).await?;
        let mut state = session.state.write().await;
        let row = self.store.load_session(id).await?.ok_or_else(|| RuntimeError::SessionNotFound(id.to_owned()))?;
        state.row.metadata = row.metadata;
        Ok(())
    }

    /// A session's description; once it has versions, its metadata carries the head version's
    /// `version_vector` too.
    pub async fn info(&self, id: &str) -> Result<SessionInfo, RuntimeError> {
        let mut info = self.read(id, |_, info| info.clone()).await?;
        if info.version_count > 0 {
            let replica_id = self.replica_id.get_or_try_init(|| self.store.replica_id()).await?;
            let node_id = match info.metadata.get(NODE_ID) {
                Some(Value::String(node)) => node.clone(),
                _ => info.session_id.clone(),
            };
            let mut vector = Map::new();
            vector.insert(node_id, Value::from(info.version_count));
            if let Some(replica_id) = replica_id {
                vector.insert(replica_id.clone(), Value::from(info.version_count));
            }
            info.metadata.insert(VERSION_VECTOR.into(), Value::Object(vector));
        }
        Ok(info)
    }

    /// Every stored session (rows only; nothing is loaded).
    pub async fn list_sessions(&self) -> Result<Vec<SessionInfo>, RuntimeError> {
        Ok(self.store.list_sessions().await?.iter().map(SessionInfo::from_row).collect())
    }

    /// Closes a session: it stays readable, but commits are refused with `session_closed`.
    pub async fn close(&self, id: &str) -> Result<SessionInfo, RuntimeError> {
        let session = self.session(id).await?;
        let mut state = session.state.write().await;
        self.refresh(&session, &mut state).await?;
        if state.row.closed {
            return Err(RuntimeError::SessionClosed(id.to_owned()));
        }
        self.store.set_closed(id, true).await?;
        state.row.closed = true;
        self.emit(EventKind::SessionClosed { session_id: id.to_owned() });
        Ok(state.info())
    }
}

/// Re-publishes other processes' events to this runtime's subscribers until the runtime or the
/// store's channel is gone. A subscriber that lags loses events, as with local ones.
async fn forward_remote_events(mut remote: broadcast::Receiver<Event>, local: broadcast::WeakSender<Event>) {
    loop {
        match remote.recv().await {
            Ok(event) => {
                let Some(local) = local.upgrade() else { return };
                let _ = local.send(event);
            }
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                tracing::warn!(missed, "events from other replicas were dropped: this replica fell behind");
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// `state` as a session may hold it: passing the always-on checks.
fn checked(state: KnowledgeStructure) -> Result<Validated, RuntimeError> {
    match Validated::check(state, &ValidationOptions::default()) {
        (_, Ok(valid)) => Ok(valid),
        (report, Err(_)) => Err(RuntimeError::ValidationFailed { diagnostics: report.diagnostics }),
    }
}

fn corrupt(id: &str, e: StoreError) -> RuntimeError {
    match e {
        StoreError::Corrupt(detail) => RuntimeError::Corrupt { session_id: id.to_owned(), detail },
        other => other.into(),
    }
}

/// Ids whose content differs between two states (compared by object hash).
fn changed_ids(before: &KnowledgeStructure, after: &KnowledgeStructure) -> Vec<String> {
    let removed_or_changed =
        before.entries().filter(|e| after.entry(e.object.id()).map(|a| a.hash) != Some(e.hash)).map(|e| e.object.id());
    let added = after.entries().filter(|e| !before.contains(e.object.id())).map(|e| e.object.id());
    removed_or_changed.chain(added).map(str::to_owned).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory::MemoryStore;
    use cks_core::sample::random_graph;
    use serde_json::json;

    fn runtime(capacity: usize) -> Runtime {
        let config = RuntimeConfig { cache_capacity: capacity, ..Default::default() };
        Runtime::new(Arc::new(MemoryStore::new()), config)
    }

    #[tokio::test]
    async fn cache_is_bounded_and_evicted_sessions_reload() {
        let rt = runtime(2);
        let mut ids = Vec::new();
        for seed in 0..4 {
            let info = rt.create_session(random_graph(20, 20, seed), NewSession::default()).await.unwrap();
            ids.push((info.session_id, info.state_hash));
        }
        assert_eq!(rt.loaded_sessions(), 2, "only the most recent sessions stay loaded");
        for (id, hash) in &ids {
            let reloaded = rt.read(id, |s, _| s.root_hash().to_hex()).await.unwrap();
            assert_eq!(&reloaded, hash);
            assert!(rt.loaded_sessions() <= 2);
        }
    }

    #[tokio::test]
    async fn the_cache_holds_at_most_its_object_budget_but_always_the_session_in_use() {
        let config = RuntimeConfig { cache_capacity: 100, cache_objects: 100, ..Default::default() };
        let rt = Runtime::new(Arc::new(MemoryStore::new()), config);
        let mut ids = Vec::new();
        for seed in 0..6 {
            // 40 objects each: two fit in the budget, a third does not.
            ids.push(rt.create_session(random_graph(20, 20, seed), NewSession::default()).await.unwrap().session_id);
            assert!(rt.loaded_sessions() <= 2, "{} loaded", rt.loaded_sessions());
        }
        let big = rt.create_session(random_graph(100, 100, 9), NewSession::default()).await.unwrap().session_id;
        assert_eq!(rt.loaded_sessions(), 1, "a session over the whole budget stays alone");
        assert_eq!(rt.read(&big, |s, _| s.len()).await.unwrap(), 200);
        for id in &ids {
            assert_eq!(rt.read(id, |s, _| s.len()).await.unwrap(), 40, "an unloaded session loads again");
        }
        assert!(rt.loaded_sessions() <= 2);
    }

    fn empty_commit() -> CommitRequest {
        CommitRequest::operations(Vec::new())
    }

    #[tokio::test]
    async fn versions_carry_the_session_node_id_and_a_version_vector() {
        let rt = runtime(4);
        let main = rt.create_session(random_graph(5, 5, 1), NewSession::default()).await.unwrap().session_id;
        rt.commit(&main, empty_commit()).await.unwrap();
        rt.commit(&main, empty_commit()).await.unwrap();
        let branch = rt.create_branch(&main, None, Map::new()).await.unwrap().session_id;
        rt.commit(&branch, empty_commit()).await.unwrap();

        let replica = rt.store.replica_id().await.unwrap().unwrap();
        let node_of = |versions: &[VersionInfo]| versions[0].metadata[NODE_ID].as_str().unwrap().to_owned();
        let main_versions = rt.list_versions(&main).await.unwrap();
        let branch_versions = rt.list_versions(&branch).await.unwrap();
        let (main_node, branch_node) = (node_of(&main_versions), node_of(&branch_versions));
        assert_ne!(main_node, branch_node, "a branch counts under its own node id");
        assert_ne!(main_node, replica);
        for (i, version) in main_versions.iter().enumerate() {
            assert_eq!(version.metadata[NODE_ID], main_node.as_str());
            let expected = json!({main_node.as_str(): i + 1, replica.as_str(): i + 1});
            assert_eq!(version.metadata[VERSION_VECTOR], expected, "version {}", i + 1);
        }
        assert_eq!(branch_versions[0].metadata[VERSION_VECTOR], json!({branch_node.as_str(): 1, replica.as_str(): 1}));
        let info = rt.info(&main).await.unwrap();
        assert_eq!(info.metadata[NODE_ID], main_node.as_str(), "the node id is the session's");
        assert_eq!(
            info.metadata[VERSION_VECTOR],
            json!({main_node.as_str(): 2, replica.as_str(): 2}),
            "as of the head"
        );
    }

    #[tokio::test]
    async fn unknown_sessions_are_not_cached() {
        let rt = runtime(4);
        assert_eq!(rt.read("missing", |s, _| s.len()).await.unwrap_err().code(), "session_not_found");
        assert_eq!(rt.loaded_sessions(), 0);
    }

    #[tokio::test]
    async fn snapshots_are_amortized_over_changes() {
        // 400 objects: a snapshot needs ≥ 10 versions since the last one and ≥ 50 changed objects.
        let rt =
            Runtime::new(Arc::new(MemoryStore::new()), RuntimeConfig { snapshot_interval: 10, ..Default::default() });
        let id = rt.create_session(random_graph(200, 200, 1), NewSession::default()).await.unwrap().session_id;
        for i in 0..60 {
            let ops = cks_core::ops::parse_operations(&serde_json::json!([
                {"type": "update_object", "object_id": format!("n{i}"), "structure_patch": {"k": i}}
            ]))
            .unwrap();
            rt.commit(&id, CommitRequest::operations(ops)).await.unwrap();
        }
        let snapshots: Vec<u64> =
            rt.list_versions(&id).await.unwrap().iter().filter(|v| v.is_snapshot).map(|v| v.seq).collect();
        assert_eq!(snapshots, [50], "one snapshot once 50 objects changed");
    }

    #[tokio::test]
    async fn comparisons_rewind_the_current_state_unless_a_version_since_replaced_it() {
        let rt =
            Runtime::new(Arc::new(MemoryStore::new()), RuntimeConfig { snapshot_interval: 2, ..Default::default() });
        let id = rt.create_session(random_graph(30, 40, 7), NewSession::default()).await.unwrap().session_id;
        let commit = |ops: serde_json::Value| {
            let rt = &rt;
            let id = id.clone();
            async move {
                let ops = ops::parse_operations(&ops).unwrap();
                rt.commit(&id, CommitRequest::operations(ops)).await.unwrap().version.version_id
            }
        };
        let mut versions =
            vec![commit(json!([{"type": "update_object", "object_id": "n1", "structure_patch": {"k": 1}}])).await];
        versions.push(commit(json!([{"type": "remove_object", "object_id": "n2"}])).await);
        versions.push(
            commit(
                json!([{"type": "add_object", "identity": {"id": "x", "type": "Claim", "name": "x"}, "structure": {}},
                          {"type": "add_relation", "identity": {"id": "rx", "type": "Relation", "name": "rx"},
                           "participants": ["x", "n3"], "relation_type": "about", "structure": {}}]),
            )
            .await,
        );
        let reverted = rt.revert(&id, &versions[0], Map::new()).await.unwrap().version.version_id;
        versions.push(reverted);
        versions.push(commit(json!([{"type": "update_object", "object_id": "n4", "structure_patch": {"k": 4}}])).await);

        for (n, version) in versions.iter().enumerate() {
            let (rewound, ops, summary) = rt
                .read_against(&id, version, |base, current, _| {
                    (
                        matches!(base, Base::Rewound(_)),
                        cks_core::diff_from(base, current),
                        cks_core::summarize_from(base, current).modified_objects,
                    )
                })
                .await
                .unwrap();
            // Only the versions after the revert (a whole-state replacement) are rewound.
            assert_eq!(rewound, n >= 3, "version #{n}");
            let mut base = rt.version_state(&id, version).await.unwrap();
            let current = rt.read(&id, |s, _| s.clone()).await.unwrap();
            assert_eq!(summary, cks_core::summarize(&base, &current).modified_objects, "version #{n}");
            ops::apply(&mut base, &ops).unwrap();
            assert!(base.same_content(&current), "version #{n}");
        }
        let unknown = rt.read_against(&id, "no-such-version", |_, _, _| ()).await.unwrap_err();
        assert!(matches!(unknown, RuntimeError::VersionNotFound { .. }));
    }
}
