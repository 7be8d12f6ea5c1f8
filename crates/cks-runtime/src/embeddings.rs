//! Embeddings kept with the graph: every searchable object's text embedded once per model, in
//! the background, and kept in the store by the text's key, so an unchanged text is never
//! embedded again (after a restart, a branch, an import, a revert).
//!
//! - [`Embeddings`] holds the vectors known so far and a queue of texts to embed. The store's
//!   vectors are read whole only for an index settled from nothing ([`Embeddings::load`]);
//!   otherwise by key, those of what changed ([`Embeddings::ready_for`]), and the worker reads a
//!   batch's from the store before it embeds what is left. One worker task drains the queue in
//!   batches; a failing embedder is retried with a growing pause, and nothing waits on it: a
//!   commit never does, and a search ranks what has vectors and says how many are pending.
//! - A follower settles each session that gets a new version, so its changed objects are queued
//!   right after the commit rather than at the next search.
//! - The session's [`VectorIndex`] (in its structure) is settled against the known vectors by
//!   [`Embeddings::settle`]; the known vectors' generation moves each time some arrive.
//! - Each object's text key is remembered by the object's content hash and kept in the store
//!   too (under [`TEXT_KEYS`], beside the models' vectors), so the first settle of a session
//!   loaded after a restart looks keys and vectors up instead of making and hashing every
//!   object's text (0.4 s at 100,000 objects).
//! - A session's settled index is kept in the store too (`runtime/vector_index.rs`): a session
//!   loaded with it needs no known vector until something changes, and its vectors join the
//!   known ones ([`Embeddings::share`]) rather than being held twice.
//!
//! Invariant: a vector is only ever looked up by (model, text key): the same text under the same
//! model has one vector, wherever it occurs.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

use cks_core::KnowledgeStructure;
use cks_core::vectors::{
    ObjectKey, Remembered, StoredVectors, Synced, TEXT_VERSION, TextKey, Vector, VectorIndex, embedding_text,
    object_key, text_key,
};
use cks_embed::{EmbedError, Embedder};
use tokio::sync::{OnceCell, mpsc, watch};
use tracing::Instrument as _;

use crate::events::EventKind;
use crate::runtime::Runtime;
use crate::store::{EmbeddingRow, Store, StoreError};

/// The longest pause between two tries of a failing embedder.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// How long a search waits for its query's vector: a provider that is down (and retried, with
/// the model client's own timeouts) would otherwise hold the search for minutes, where ranking
/// by words alone answers now.
const QUERY_WAIT: Duration = Duration::from_secs(10);

/// Where the store keeps the text keys remembered by object: rows of the embeddings table whose
/// "model" is this name. Keys are the same under every model, so they are kept once; the name
/// says how the texts were made ([`TEXT_VERSION`]), and keys made another way are not read. No
/// model has this name (they are a provider's `kind:model` or a static model's own).
///
/// A row holds up to [`KEYS_PER_ROW`] keys: its "vector" is pairs of an object key and its text
/// key (32 bytes a pair), its "text hash" a random id. A restart then reads a row per
/// [`KEYS_PER_ROW`] objects rather than one per object (100,000 rows took as long to read as the
/// vectors did).
pub static TEXT_KEYS: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| format!("cks.text-keys.v{TEXT_VERSION}"));

/// The most keys one row of [`TEXT_KEYS`] holds: 768 bytes, so a row stays within what SQLite
/// keeps of a row on its b-tree page (about 1,000 bytes on a 4 KiB page). A longer row spills
/// onto overflow pages, and SQLite reads a spilled row whole each time a search through the
/// table compares with it: with rows of 1 MiB, every vector saved at a 1M-object commit read
/// megabytes (one-object commits 1.5–2.2 ms instead of 0.7).
const KEYS_PER_ROW: usize = 24;

/// The bytes of an object key and its text key in a row of [`TEXT_KEYS`].
const KEY_PAIR: usize = 32;

type Hashed<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// The embeddings of one model over one store.
#[derive(Debug)]
pub struct Embeddings {
    embedder: Arc<dyn Embedder>,
    store: Arc<dyn Store>,
    known: RwLock<Hashed<TextKey, Vector>>,
    /// Each object's text key by its content, as far as known (read from the store with the
    /// vectors, then added to as settles make keys).
    keys: RwLock<Hashed<ObjectKey, TextKey>>,
    /// Keys made by settles, for the keeper to write to the store.
    to_keep: mpsc::UnboundedSender<Vec<(ObjectKey, TextKey)>>,
    /// Keys sent to the keeper and not written yet (or given up on).
    keeping: AtomicUsize,
    /// Text keys made by this process's settles (not remembered).
    keys_made: AtomicU64,
    /// Moves (and wakes the waiters) each time vectors arrive.
    generation: watch::Sender<u64>,
    /// The store's vectors were read into `known`.
    loaded: OnceCell<()>,
    queue: mpsc::UnboundedSender<(TextKey, String)>,
    /// Texts queued and not embedded yet, with when: each is queued once.
    queued: Mutex<HashMap<TextKey, Instant>>,
    /// Texts embedded by this process (not read from the store).
    embedded: AtomicU64,
    /// Embedder failures so far.
    failures: AtomicU64,
    /// Whether the model was asked to ready itself ([`Self::prepare_soon`]).
    prepared: AtomicBool,
}

/// What [`Embeddings::status`] reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmbeddingStatus {
    pub model: String,
    pub known: usize,
    pub queued: usize,
    /// How long the oldest queued text has waited (zero when none waits): the lag of search by
    /// meaning behind the graph.
    pub lag: Duration,
    pub embedded: u64,
    pub failures: u64,
    /// Objects whose text key is remembered.
    pub text_keys: usize,
    /// Text keys made by this process (objects whose key was not remembered).
    pub keys_made: u64,
}

impl Embeddings {
    /// Embeddings through `embedder` over `store`; starts the worker (needs a tokio runtime).
    pub fn start(embedder: Arc<dyn Embedder>, store: Arc<dyn Store>) -> Arc<Embeddings> {
        let (queue, receiver) = mpsc::unbounded_channel();
        let (to_keep, keeping) = mpsc::unbounded_channel();
        let embeddings = Arc::new(Embeddings {
            embedder,
            store,
            known: RwLock::default(),
            keys: RwLock::default(),
            to_keep,
            keeping: AtomicUsize::new(0),
            keys_made: AtomicU64::new(0),
            generation: watch::Sender::new(0),
            loaded: OnceCell::new(),
            queue,
            queued: Mutex::default(),
            embedded: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            prepared: AtomicBool::new(false),
        });
        tokio::spawn(work(Arc::downgrade(&embeddings), receiver));
        tokio::spawn(keep_keys(embeddings.store.clone(), Arc::downgrade(&embeddings), keeping));
        embeddings
    }

    pub fn model(&self) -> &str {
        self.embedder.model()
    }

    pub fn status(&self) -> EmbeddingStatus {
        let (queued, lag) = {
            let queued = self.queued.lock().unwrap_or_else(|p| p.into_inner());
            (queued.len(), queued.values().map(Instant::elapsed).max().unwrap_or_default())
        };
        EmbeddingStatus {
            model: self.model().to_owned(),
            known: self.known.read().unwrap_or_else(|p| p.into_inner()).len(),
            queued,
            lag,
            embedded: self.embedded.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            text_keys: self.keys.read().unwrap_or_else(|p| p.into_inner()).len(),
            keys_made: self.keys_made.load(Ordering::Relaxed),
        }
    }

    /// Reads the store's vectors of this model, once.
    pub async fn load(&self) -> Result<(), StoreError> {
        self.loaded.get_or_try_init(|| self.read_stored()).await.map(|_| ())
    }

    /// Whether the store's vectors were read ([`Self::load`]).
    pub fn is_loaded(&self) -> bool {
        self.loaded.initialized()
    }

    /// The text keys that `structure`'s next settle looks up and no known vector has; `None` when
    /// it settles every object, which wants every known vector ([`Self::load`]). A session loaded
    /// with its kept index looks up only what changed after the version kept.
    pub fn missing_for(&self, structure: &KnowledgeStructure) -> Option<Vec<TextKey>> {
        let index = structure.vector_index().lock().unwrap_or_else(|p| p.into_inner());
        let (changed, pending) = index.to_look_up(self.model())?;
        let known = self.known.read().unwrap_or_else(|p| p.into_inner());
        let keys = self.keys.read().unwrap_or_else(|p| p.into_inner());
        let mut missing: Vec<TextKey> = pending.into_iter().filter(|key| !known.contains_key(key)).collect();
        for entry in changed.into_iter().filter_map(|id| structure.entry(id)).filter(|entry| !entry.is_relation()) {
            let key = keys.get(&object_key(&entry.hash)).copied();
            let key = key.unwrap_or_else(|| text_key(&embedding_text(&entry.object).unwrap_or_default()));
            if !known.contains_key(&key) {
                missing.push(key);
            }
        }
        Some(missing)
    }

    /// Reads the store's vectors of these text keys (those it keeps), so that a settle finds them
    /// without every known vector read first.
    pub async fn fetch(&self, keys: &[TextKey]) -> Result<(), StoreError> {
        if keys.is_empty() || self.is_loaded() {
            return Ok(());
        }
        let rows = self.store.load_embeddings_of(self.model(), keys).await?;
        let mut found = 0;
        {
            let mut known = self.known.write().unwrap_or_else(|p| p.into_inner());
            for row in rows {
                if let Entry::Vacant(free) = known.entry(row.text_hash)
                    && let Some(vector) = Vector::from_bytes(&row.vector)
                {
                    free.insert(vector);
                    found += 1;
                }
            }
        }
        if found > 0 {
            // Objects waiting for these vectors are looked up again at the next settle.
            self.generation.send_modify(|g| *g += 1);
        }
        Ok(())
    }

    /// Makes the vectors of a kept index known, and holds each once: a vector known already
    /// takes the place of the one read, and one not known yet joins the known.
    pub fn share(&self, stored: &mut StoredVectors) {
        let mut known = self.known.write().unwrap_or_else(|p| p.into_inner());
        for (key, vector) in stored.vectors_mut() {
            match known.entry(*key) {
                Entry::Occupied(held) => *vector = held.get().clone(),
                Entry::Vacant(free) => {
                    free.insert(vector.clone());
                }
            }
        }
    }

    /// Reads the store's vectors of this model again, as after a restore put others there (the
    /// ones known stay: a text's vector under one model does not change).
    pub async fn reload(&self) -> Result<(), StoreError> {
        self.read_stored().await?;
        let _ = self.loaded.set(());
        Ok(())
    }

    async fn read_stored(&self) -> Result<(), StoreError> {
        let (rows, keys) =
            tokio::try_join!(self.store.load_embeddings(self.model()), self.store.load_embeddings(&TEXT_KEYS))?;
        {
            let mut known = self.known.write().unwrap_or_else(|p| p.into_inner());
            known.reserve(rows.len());
            for row in rows {
                // A vector known already (from a kept index) is held once.
                if let Entry::Vacant(free) = known.entry(row.text_hash)
                    && let Some(vector) = Vector::from_bytes(&row.vector)
                {
                    free.insert(vector);
                }
            }
        }
        let long_rows = keys.iter().any(|row| row.vector.len() > KEYS_PER_ROW * KEY_PAIR);
        {
            let mut known = self.keys.write().unwrap_or_else(|p| p.into_inner());
            known.reserve(keys.iter().map(|row| row.vector.len() / KEY_PAIR).sum());
            for row in keys {
                let (pairs, rest) = row.vector.as_chunks::<KEY_PAIR>();
                if !rest.is_empty() {
                    // Not a row of pairs (nothing this version wrote): nothing in it is trusted.
                    continue;
                }
                for pair in pairs {
                    let (object, key) = pair.split_at(KEY_PAIR / 2);
                    known.insert(object.try_into().expect("half a pair"), key.try_into().expect("half a pair"));
                }
            }
        }
        if long_rows {
            self.rewrite_keys().await;
        }
        self.generation.send_modify(|g| *g += 1);
        Ok(())
    }

    /// Writes every key known again, in rows of today's length, in place of the stored rows (some
    /// of which an earlier version made longer). The keys are only a shortcut: if this fails,
    /// they are made again after the next restart.
    async fn rewrite_keys(&self) {
        if let Err(e) = self.store.delete_embeddings(&TEXT_KEYS).await {
            tracing::warn!(error = %e, "long rows of text keys not rewritten");
            return;
        }
        let all: Vec<(ObjectKey, TextKey)> =
            self.keys.read().unwrap_or_else(|p| p.into_inner()).iter().map(|(o, k)| (*o, *k)).collect();
        self.keeping.fetch_add(all.len(), Ordering::AcqRel);
        let _ = self.to_keep.send(all);
    }

    /// The vector of a query, embedded now; `None` when the text has nothing to compare by.
    /// Fails when the embedder has not answered within [`QUERY_WAIT`].
    pub async fn embed_query(&self, text: &str) -> Result<Option<Vector>, EmbedError> {
        let texts = [text.to_owned()];
        let span = self.batch_span(1);
        let vectors = tokio::time::timeout(QUERY_WAIT, self.embedder.embed(&texts))
            .instrument(span.clone())
            .await
            .map_err(|_| EmbedError::Provider(format!("no answer within {} s", QUERY_WAIT.as_secs())))
            .and_then(|embedded| embedded);
        let vectors = failed_on(&span, vectors)?;
        Ok(vectors.first().and_then(|v| Vector::quantize(v)))
    }

    /// The span of one embedding batch, for traces only (`cks_trace`): the model and how many
    /// texts, never the texts.
    fn batch_span(&self, texts: usize) -> tracing::Span {
        tracing::info_span!(
            target: "cks_trace",
            "embed",
            otel.name = format!("embeddings {}", self.model()).as_str(),
            otel.status_code = tracing::field::Empty,
            gen_ai.operation.name = "embeddings",
            gen_ai.request.model = self.model(),
            "cks.texts" = texts,
            "error.type" = tracing::field::Empty,
        )
    }

    /// Settles `structure`'s vector index against the vectors known now and queues what it
    /// still needs; runs `f` on the settled index. Call it while holding the session (a read
    /// is enough: the index has a lock of its own).
    pub fn settle<R>(&self, structure: &KnowledgeStructure, f: impl FnOnce(&VectorIndex, &Synced) -> R) -> R {
        // The index first, then the known vectors and keys: `remember` takes the keys for writing
        // while it holds the index, so every settle takes them in that order.
        let mut index = structure.vector_index().lock().unwrap_or_else(|p| p.into_inner());
        let generation = *self.generation.borrow();
        let vectors = self.known.read().unwrap_or_else(|p| p.into_inner());
        let keys = self.keys.read().unwrap_or_else(|p| p.into_inner());
        let mut synced =
            index.sync_known(structure, self.model(), generation, Remembered { vectors: &vectors, keys: &keys });
        drop((vectors, keys));
        self.prepare_soon();
        self.enqueue(&synced.to_embed);
        self.remember(std::mem::take(&mut synced.new_keys));
        f(&index, &synced)
    }

    /// Readies the model in the background the first time a session settles (a search by
    /// meaning or a batch may follow), not at start: a server that never holds a session never
    /// loads it (tens of MB), and its first answers do not share the cores with the load.
    fn prepare_soon(&self) {
        if self.prepared.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let embedder = self.embedder.clone();
        runtime.spawn_blocking(move || {
            if let Err(e) = embedder.prepare() {
                tracing::warn!(error = %e, "embedding model not readied; the first search tries again");
            }
        });
    }

    /// Keeps keys a settle made, here and (by the keeper, in the background) in the store.
    fn remember(&self, made: Vec<(ObjectKey, TextKey)>) {
        if made.is_empty() {
            return;
        }
        self.keys.write().unwrap_or_else(|p| p.into_inner()).extend(made.iter().copied());
        self.keeping.fetch_add(made.len(), Ordering::AcqRel);
        self.keys_made.fetch_add(made.len() as u64, Ordering::Relaxed);
        // The keeper lives as long as `self`: a send cannot fail while it is called.
        let _ = self.to_keep.send(made);
    }

    fn enqueue(&self, texts: &[(TextKey, String)]) {
        if texts.is_empty() {
            return;
        }
        let mut queued = self.queued.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        for (key, text) in texts {
            if let Entry::Vacant(waiting) = queued.entry(*key) {
                waiting.insert(now);
                // The worker lives as long as `self`: a send cannot fail while it is called.
                let _ = self.queue.send((*key, text.clone()));
            }
        }
    }

    /// Waits until nothing is queued to embed or to keep, or `timeout` passed; true when nothing is.
    pub async fn idle_within(&self, timeout: Duration) -> bool {
        let mut generation = self.generation.subscribe();
        let idle = || {
            self.queued.lock().unwrap_or_else(|p| p.into_inner()).is_empty()
                && self.keeping.load(Ordering::Acquire) == 0
        };
        let wait = async {
            while !idle() {
                if generation.changed().await.is_err() {
                    break;
                }
            }
        };
        let _ = tokio::time::timeout(timeout, wait).await;
        idle()
    }

    /// Takes out of `batch` the texts whose vectors are known or kept in the store (they were
    /// queued before those were read), so that they are not embedded again; the store's become
    /// known.
    async fn take_stored(&self, batch: &mut Vec<(TextKey, String)>) {
        if !self.is_loaded() {
            let keys: Vec<TextKey> = batch.iter().map(|(key, _)| *key).collect();
            if let Err(e) = self.fetch(&keys).await {
                tracing::warn!(error = %e, "stored embeddings not read; the texts are embedded");
                return;
            }
        }
        let taken: Vec<TextKey> = {
            let known = self.known.read().unwrap_or_else(|p| p.into_inner());
            let taken = batch.iter().filter(|(key, _)| known.contains_key(key)).map(|(key, _)| *key).collect();
            batch.retain(|(key, _)| !known.contains_key(key));
            taken
        };
        if !taken.is_empty() {
            let mut queued = self.queued.lock().unwrap_or_else(|p| p.into_inner());
            for key in &taken {
                queued.remove(key);
            }
            drop(queued);
            self.generation.send_modify(|g| *g += 1);
        }
    }

    /// Readies the known vectors for `session_id`'s next settle: those of what its index looks
    /// up, read by key ([`Self::missing_for`]), or every one when it settles every object.
    pub async fn ready_for(&self, runtime: &Runtime, session_id: &str) -> Result<(), StoreError> {
        if self.is_loaded() {
            return Ok(());
        }
        match runtime.read(session_id, |structure, _| self.missing_for(structure)).await {
            Ok(Some(keys)) => self.fetch(&keys).await,
            Ok(None) => self.load().await,
            // Nothing to settle.
            Err(_) => Ok(()),
        }
    }

    /// Embeds one batch, keeps it in the store, then makes it known.
    async fn embed_batch(&self, batch: &[(TextKey, String)]) -> Result<(), EmbedError> {
        let texts: Vec<String> = batch.iter().map(|(_, t)| t.clone()).collect();
        let span = self.batch_span(texts.len());
        let vectors = failed_on(&span, self.embedder.embed(&texts).instrument(span.clone()).await)?;
        if vectors.len() != batch.len() {
            return Err(EmbedError::Provider(format!("{} vectors for {} texts", vectors.len(), batch.len())));
        }
        let mut rows = Vec::with_capacity(batch.len());
        let mut made = Vec::with_capacity(batch.len());
        for ((key, _), values) in batch.iter().zip(&vectors) {
            // A text with nothing to compare by (no known word) still gets a vector, so it is not
            // asked for again: a zero vector ranks nowhere.
            let vector = Vector::quantize(values).unwrap_or_else(|| Vector::zero(values.len().max(1)));
            rows.push(EmbeddingRow { text_hash: *key, vector: vector.to_bytes() });
            made.push((*key, vector));
        }
        if let Err(e) = self.store.save_embeddings(self.model(), &rows).await {
            // Kept in memory anyway: the store is a cache of what can be embedded again.
            tracing::warn!(error = %e, "embeddings not saved");
        }
        {
            let mut known = self.known.write().unwrap_or_else(|p| p.into_inner());
            known.extend(made);
        }
        {
            let mut queued = self.queued.lock().unwrap_or_else(|p| p.into_inner());
            for (key, _) in batch {
                queued.remove(key);
            }
        }
        self.embedded.fetch_add(batch.len() as u64, Ordering::Relaxed);
        self.generation.send_modify(|g| *g += 1);
        Ok(())
    }
}

/// `result`, its failure noted on `span`.
fn failed_on<T>(span: &tracing::Span, result: Result<T, EmbedError>) -> Result<T, EmbedError> {
    if result.is_err() {
        span.record("error.type", "embedding_failed").record("otel.status_code", "error");
    }
    result
}

/// The keeper: writes the keys settles made to the store, what has arrived by then in one save.
/// A failed save loses nothing but time: the keys are made again after the next restart.
async fn keep_keys(
    store: Arc<dyn Store>,
    embeddings: Weak<Embeddings>,
    mut made: mpsc::UnboundedReceiver<Vec<(ObjectKey, TextKey)>>,
) {
    while let Some(mut keys) = made.recv().await {
        while let Ok(more) = made.try_recv() {
            keys.extend(more);
        }
        let rows: Vec<EmbeddingRow> = keys
            .chunks(KEYS_PER_ROW)
            .map(|chunk| EmbeddingRow {
                text_hash: rand::random(),
                vector: chunk.iter().flat_map(|(object, key)| object.iter().chain(key)).copied().collect(),
            })
            .collect();
        if let Err(e) = store.save_embeddings(&TEXT_KEYS, &rows).await {
            tracing::warn!(error = %e, keys = keys.len(), "text keys not saved");
        }
        let Some(embeddings) = embeddings.upgrade() else { continue };
        embeddings.keeping.fetch_sub(keys.len(), Ordering::AcqRel);
        // Wakes the waiters of `idle_within` (a settle then looks its pending objects up again and
        // finds no vector new: a pass over what is pending, no more).
        embeddings.generation.send_modify(|g| *g += 1);
    }
}

/// The worker: batches of queued texts, embedded one after the other; a failed batch is tried
/// again after a pause that doubles up to [`MAX_BACKOFF`].
async fn work(embeddings: Weak<Embeddings>, mut receiver: mpsc::UnboundedReceiver<(TextKey, String)>) {
    let mut batch = Vec::new();
    let mut backoff = Duration::from_millis(250);
    while let Some(first) = receiver.recv().await {
        batch.push(first);
        loop {
            let Some(embeddings) = embeddings.upgrade() else { return };
            let size = embeddings.embedder.batch_size().max(1);
            while batch.len() < size {
                match receiver.try_recv() {
                    Ok(item) => batch.push(item),
                    Err(_) => break,
                }
            }
            embeddings.take_stored(&mut batch).await;
            if batch.is_empty() {
                if receiver.is_empty() {
                    break;
                }
                continue;
            }
            match embeddings.embed_batch(&batch).await {
                Ok(()) => {
                    batch.clear();
                    backoff = Duration::from_millis(250);
                    if receiver.is_empty() {
                        break;
                    }
                }
                Err(e) => {
                    embeddings.failures.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(error = %e, texts = batch.len(), retry_in_ms = backoff.as_millis() as u64, "embedding failed; will retry");
                    drop(embeddings);
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    }
}

impl Runtime {
    /// Turns on search by meaning through `embedder`: starts the worker and the follower that
    /// queues each new version's changes. Once per runtime; a second call returns the first.
    pub fn enable_embeddings(self: &Arc<Self>, embedder: Arc<dyn Embedder>) -> Arc<Embeddings> {
        let mut started = false;
        let embeddings = self
            .embeddings
            .get_or_init(|| {
                started = true;
                Embeddings::start(embedder, self.store().clone())
            })
            .clone();
        if started {
            tokio::spawn(follow(Arc::downgrade(self), self.subscribe()));
            // The model is readied when a session first settles, and the stored vectors are read
            // when first needed: by a session loaded without a kept vector index (as it loads),
            // or by a change to settle.
        }
        embeddings
    }

    /// The embeddings, when search by meaning is on.
    pub fn embeddings(&self) -> Option<&Arc<Embeddings>> {
        self.embeddings.get()
    }
}

/// Settles each session that gets a new version (or is created), so its texts are queued now.
async fn follow(runtime: Weak<Runtime>, mut events: tokio::sync::broadcast::Receiver<crate::events::Event>) {
    loop {
        let event = match events.recv().await {
            Ok(event) => event,
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        };
        let session_id = match &event.kind {
            EventKind::SessionCreated { session_id } | EventKind::VersionCreated { session_id, .. } => session_id,
            _ => continue,
        };
        let Some(runtime) = runtime.upgrade() else { return };
        let Some(embeddings) = runtime.embeddings().cloned() else { continue };
        // Only sessions this process holds: another replica's commits are settled at the next
        // search here, or by that replica.
        if !runtime.is_loaded(session_id) {
            continue;
        }
        if let Err(e) = embeddings.ready_for(&runtime, session_id).await {
            tracing::warn!(error = %e, "stored embeddings not read");
        }
        let settled = runtime.read(session_id, |structure, _| embeddings.settle(structure, |_, _| ())).await;
        if let Err(e) = settled {
            tracing::debug!(session_id = session_id.as_str(), error = %e, "session not settled for embedding");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{CommitRequest, MergeReport, NewSession, RuntimeConfig};
    use crate::store::sqlite::{SqliteOptions, SqliteStore};
    use cks_core::ops::Operation;
    use cks_core::{Identity, KnowledgeObject};
    use std::collections::BTreeMap;

    /// Counts the texts it is asked for; a text's vector is its length and its first byte.
    #[derive(Debug, Default)]
    struct Counting {
        texts: Mutex<Vec<String>>,
    }

    #[async_trait::async_trait]
    impl Embedder for Counting {
        fn model(&self) -> &str {
            "counting"
        }

        async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
            self.texts.lock().unwrap().extend(texts.iter().cloned());
            Ok(texts.iter().map(|t| vec![t.len() as f32, f32::from(t.as_bytes()[0]), 1.0]).collect())
        }
    }

    fn graph(names: &[&str]) -> KnowledgeStructure {
        let objects =
            names.iter().map(|n| KnowledgeObject::new(Identity::new(*n, "Thing", *n), serde_json::Map::new()));
        KnowledgeStructure::from_objects(objects).unwrap()
    }

    async fn settled(runtime: &Runtime, embeddings: &Embeddings, id: &str) -> (usize, usize) {
        runtime.read(id, |s, _| embeddings.settle(s, |index, synced| (index.len(), synced.pending))).await.unwrap()
    }

    #[tokio::test]
    async fn texts_are_embedded_once_in_the_background_and_read_back_after_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let counting = Arc::new(Counting::default());
        let id = {
            let store = Arc::new(SqliteStore::open(&path, &SqliteOptions::default()).unwrap());
            let runtime = Arc::new(Runtime::new(store, RuntimeConfig::default()));
            let embeddings = runtime.enable_embeddings(counting.clone());
            let info = runtime.create_session(graph(&["alpha", "beta", "gamma"]), NewSession::default()).await.unwrap();
            // The follower queues the new session's texts: they are embedded without a search asking.
            for _ in 0..1000 {
                if counting.texts.lock().unwrap().len() == 3 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            assert!(embeddings.idle_within(Duration::from_secs(10)).await);
            assert_eq!(settled(&runtime, &embeddings, &info.session_id).await, (3, 0));
            // A second session with the same texts (a branch, an import) embeds nothing new.
            let twin = runtime.create_session(graph(&["alpha", "beta", "gamma"]), NewSession::default()).await.unwrap();
            assert_eq!(settled(&runtime, &embeddings, &twin.session_id).await, (3, 0));
            assert_eq!(embeddings.status().embedded, 3);
            info.session_id
        };
        assert_eq!(counting.texts.lock().unwrap().len(), 3);

        // Restarted: the vectors are read from the store, none embedded again.
        let store = Arc::new(SqliteStore::open(&path, &SqliteOptions::default()).unwrap());
        let runtime = Arc::new(Runtime::new(store, RuntimeConfig::default()));
        let embeddings = runtime.enable_embeddings(counting.clone());
        embeddings.load().await.unwrap();
        assert_eq!(settled(&runtime, &embeddings, &id).await, (3, 0));
        assert!(embeddings.idle_within(Duration::from_secs(1)).await);
        assert_eq!(counting.texts.lock().unwrap().len(), 3, "{:?}", counting.texts.lock().unwrap());
        let status = embeddings.status();
        assert_eq!((status.known, status.text_keys), (3, 3));
        assert_eq!(status.keys_made, 0, "the first settle after a restart reads the keys, makes none");
    }

    #[tokio::test]
    async fn a_queued_text_whose_vector_the_store_keeps_is_read_by_key_not_embedded() {
        let store: Arc<dyn Store> = Arc::new(crate::store::memory::MemoryStore::new());
        let counting = Arc::new(Counting::default());
        let kept = Vector::quantize(&[1.0, 2.0, 3.0]).unwrap();
        let key = text_key("alpha");
        store.save_embeddings("counting", &[EmbeddingRow { text_hash: key, vector: kept.to_bytes() }]).await.unwrap();
        let embeddings = Embeddings::start(counting.clone(), store);
        embeddings.enqueue(&[(key, "alpha".into()), (text_key("beta"), "beta".into())]);
        assert!(embeddings.idle_within(Duration::from_secs(10)).await);
        assert_eq!(*counting.texts.lock().unwrap(), ["beta"], "only the text the store lacks");
        assert!(!embeddings.is_loaded(), "read by key, not whole");
        assert_eq!(embeddings.known.read().unwrap().get(&key), Some(&kept));
        assert_eq!(embeddings.status().known, 2);
    }

    /// The session's settled index equals one built from scratch over the same structure and
    /// vectors, without remembered keys: rows and pending objects alike.
    async fn assert_index_is_a_rebuild(runtime: &Runtime, embeddings: &Embeddings, id: &str) {
        type Rows = BTreeMap<String, (Option<Vec<u8>>, Option<TextKey>)>;
        fn rows(index: &VectorIndex) -> Rows {
            let mut rows = Rows::new();
            for (id, vector) in index.rows() {
                rows.entry(id.to_owned()).or_default().0 = Some(vector.to_bytes());
            }
            for (id, key) in index.pending() {
                rows.entry(id.to_owned()).or_default().1 = Some(*key);
            }
            rows
        }
        runtime
            .read(id, |structure, _| {
                let kept = embeddings.settle(structure, |index, _| rows(index));
                let copy = structure.clone();
                let vectors = embeddings.known.read().unwrap();
                let mut fresh = copy.vector_index().lock().unwrap();
                fresh.sync(&copy, embeddings.model(), 0, |k| vectors.get(k));
                assert_eq!(kept, rows(&fresh));
                assert_eq!(kept.len(), structure.objects().filter(|o| !o.is_relation()).count());
            })
            .await
            .unwrap();
    }

    fn add(id: &str, words: &str) -> Operation {
        let structure: cks_core::Structure = [("note", serde_json::json!(words))].into_iter().collect();
        Operation::AddObject { identity: Identity::new(id, "Thing", id), structure }
    }

    /// Commits, a revert, a branch merged back and restarts, on each store that keeps no
    /// other process's writes: after each, the index is a rebuild, and after a restart nothing
    /// is embedded again and no text key made again.
    #[tokio::test]
    async fn the_index_is_a_rebuild_after_commits_reverts_merges_and_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let memory: Arc<dyn Store> = Arc::new(crate::store::memory::MemoryStore::new());
        let stores: [Box<dyn Fn() -> Arc<dyn Store>>; 2] = [
            Box::new(move || memory.clone()),
            Box::new(move || Arc::new(SqliteStore::open(&path, &SqliteOptions::default()).unwrap())),
        ];
        for open in stores {
            let counting = Arc::new(Counting::default());
            let runtime = Arc::new(Runtime::new(open(), RuntimeConfig::default()));
            let embeddings = runtime.enable_embeddings(counting.clone());
            let id = runtime.create_session(graph(&["alpha", "beta"]), NewSession::default()).await.unwrap().session_id;
            let first = runtime.list_versions(&id).await.unwrap().last().map(|v| v.version_id.clone());
            assert_index_is_a_rebuild(&runtime, &embeddings, &id).await;
            let ops = vec![
                add("gamma", "a new thing"),
                Operation::UpdateObject {
                    object_id: "beta".into(),
                    structure_patch: [("note", serde_json::json!("changed"))].into_iter().collect(),
                    mode: Default::default(),
                },
                Operation::RemoveObject { object_id: "alpha".into() },
            ];
            runtime.commit(&id, CommitRequest::operations(ops)).await.unwrap();
            assert_index_is_a_rebuild(&runtime, &embeddings, &id).await;
            assert!(embeddings.idle_within(Duration::from_secs(10)).await);
            assert_index_is_a_rebuild(&runtime, &embeddings, &id).await;
            if let Some(first) = first {
                runtime.revert(&id, &first, Default::default()).await.unwrap();
                assert_index_is_a_rebuild(&runtime, &embeddings, &id).await;
            }
            let branch = runtime.create_branch(&id, None, Default::default()).await.unwrap().session_id;
            runtime.commit(&branch, CommitRequest::operations(vec![add("delta", "from the branch")])).await.unwrap();
            runtime.commit(&id, CommitRequest::operations(vec![add("epsilon", "on the trunk")])).await.unwrap();
            let merged = runtime.merge_branch(&id, &branch, None, &Default::default(), Default::default()).await;
            assert!(matches!(merged.unwrap(), MergeReport::Merged { changed: true, .. }));
            assert_index_is_a_rebuild(&runtime, &embeddings, &id).await;
            assert!(embeddings.idle_within(Duration::from_secs(10)).await);
            assert_index_is_a_rebuild(&runtime, &embeddings, &id).await;
            let embedded = counting.texts.lock().unwrap().len();
            drop((embeddings, runtime));

            // Restarted: the keys and vectors are read back; the index settles by lookups alone.
            let runtime = Arc::new(Runtime::new(open(), RuntimeConfig::default()));
            let embeddings = runtime.enable_embeddings(counting.clone());
            embeddings.load().await.unwrap();
            assert_index_is_a_rebuild(&runtime, &embeddings, &id).await;
            assert_eq!(embeddings.status().keys_made, 0);
            runtime.commit(&id, CommitRequest::operations(vec![add("zeta", "after the restart")])).await.unwrap();
            assert_index_is_a_rebuild(&runtime, &embeddings, &id).await;
            assert!(embeddings.idle_within(Duration::from_secs(10)).await);
            assert_eq!(embeddings.status().keys_made, 1, "only the new object's key is made");
            assert_eq!(counting.texts.lock().unwrap().len(), embedded + 1, "only the new text is embedded");
        }
    }

    /// Keys are kept many to a row, and read back whole, across rows, by the next process.
    #[tokio::test]
    async fn kept_keys_are_read_back_from_rows_of_many() {
        let store: Arc<dyn Store> = Arc::new(crate::store::memory::MemoryStore::new());
        let made: Vec<(ObjectKey, TextKey)> = (0..KEYS_PER_ROW as u32 + 100)
            .map(|i| {
                let object: ObjectKey = std::array::from_fn(|b| (i >> (8 * (b % 4))) as u8 ^ b as u8);
                (object, std::array::from_fn(|b| object[15 - b]))
            })
            .collect();
        let first = Embeddings::start(Arc::new(Counting::default()), store.clone());
        first.remember(made[..10].to_vec());
        first.remember(made[10..].to_vec());
        assert!(first.idle_within(Duration::from_secs(10)).await);
        let rows = store.load_embeddings(&TEXT_KEYS).await.unwrap();
        assert!(rows.len() < made.len() && rows.iter().all(|r| r.vector.len() <= KEYS_PER_ROW * KEY_PAIR));
        // A row of something else (not whole pairs) is passed over.
        store.save_embeddings(&TEXT_KEYS, &[EmbeddingRow { text_hash: [7; 16], vector: vec![1; 40] }]).await.unwrap();

        let next = Embeddings::start(Arc::new(Counting::default()), store);
        next.load().await.unwrap();
        let read: HashMap<ObjectKey, TextKey> = next.keys.read().unwrap().iter().map(|(o, k)| (*o, *k)).collect();
        assert_eq!(read, made.into_iter().collect::<HashMap<_, _>>());
    }

    /// Rows of keys longer than today's (an earlier version wrote rows of 1 MiB) are written again
    /// in short rows when the next process reads them; no key is lost.
    #[tokio::test]
    async fn long_rows_of_keys_are_rewritten_short() {
        let store: Arc<dyn Store> = Arc::new(crate::store::memory::MemoryStore::new());
        let made: Vec<(ObjectKey, TextKey)> = (0..100u8)
            .map(|i| (std::array::from_fn(|b| i ^ b as u8), std::array::from_fn(|b| i.wrapping_add(b as u8))))
            .collect();
        let long = EmbeddingRow {
            text_hash: [1; 16],
            vector: made.iter().flat_map(|(object, key)| object.iter().chain(key)).copied().collect(),
        };
        store.save_embeddings(&TEXT_KEYS, &[long]).await.unwrap();

        let first = Embeddings::start(Arc::new(Counting::default()), store.clone());
        first.load().await.unwrap();
        assert!(first.idle_within(Duration::from_secs(10)).await);
        let rows = store.load_embeddings(&TEXT_KEYS).await.unwrap();
        assert_eq!(rows.len(), 100usize.div_ceil(KEYS_PER_ROW), "short rows in place of the long one");
        assert!(rows.iter().all(|r| r.vector.len() <= KEYS_PER_ROW * KEY_PAIR));

        let next = Embeddings::start(Arc::new(Counting::default()), store);
        next.load().await.unwrap();
        let read: HashMap<ObjectKey, TextKey> = next.keys.read().unwrap().iter().map(|(o, k)| (*o, *k)).collect();
        assert_eq!(read, made.into_iter().collect::<HashMap<_, _>>());
    }

    /// Never answers, as a provider that is down behind long retries.
    #[derive(Debug)]
    struct Silent;

    #[async_trait::async_trait]
    impl Embedder for Silent {
        fn model(&self) -> &str {
            "silent"
        }

        async fn embed(&self, _texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
            std::future::pending().await
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_query_waits_for_its_vector_a_bounded_time() {
        let runtime =
            Arc::new(Runtime::new(Arc::new(crate::store::memory::MemoryStore::new()), RuntimeConfig::default()));
        let embeddings = runtime.enable_embeddings(Arc::new(Silent));
        let error = embeddings.embed_query("anything").await.unwrap_err();
        assert_eq!(error, EmbedError::Provider(format!("no answer within {} s", QUERY_WAIT.as_secs())));
    }

    #[tokio::test]
    async fn the_lag_is_how_long_the_oldest_queued_text_has_waited() {
        let store: Arc<dyn Store> = Arc::new(crate::store::memory::MemoryStore::new());
        let silent = Embeddings::start(Arc::new(Silent), store.clone());
        assert_eq!(silent.status().lag, Duration::ZERO);
        silent.enqueue(&[(text_key("alpha"), "alpha".into())]);
        tokio::time::sleep(Duration::from_millis(30)).await;
        silent.enqueue(&[(text_key("beta"), "beta".into()), (text_key("alpha"), "alpha".into())]);
        let status = silent.status();
        assert_eq!(status.queued, 2);
        assert!(status.lag >= Duration::from_millis(30), "the first text's wait, not the last's: {:?}", status.lag);
        // Once embedded, nothing waits.
        let counting = Embeddings::start(Arc::new(Counting::default()), store);
        counting.enqueue(&[(text_key("alpha"), "alpha".into())]);
        assert!(counting.idle_within(Duration::from_secs(10)).await);
        assert_eq!(counting.status().lag, Duration::ZERO);
    }

    #[tokio::test]
    async fn a_restore_brings_its_vectors_to_the_running_server() {
        let counting = Arc::new(Counting::default());
        let source =
            Arc::new(Runtime::new(Arc::new(crate::store::memory::MemoryStore::new()), RuntimeConfig::default()));
        let embeddings = source.enable_embeddings(counting.clone());
        let id = source.create_session(graph(&["alpha", "beta"]), NewSession::default()).await.unwrap().session_id;
        settled(&source, &embeddings, &id).await;
        assert!(embeddings.idle_within(Duration::from_secs(10)).await);
        let mut backup = Vec::new();
        source.export_storage(&mut backup, true, &mut |_, _| ()).await.unwrap();

        // A running server whose vectors were read before the restore.
        let fresh = Arc::new(Counting::default());
        let target =
            Arc::new(Runtime::new(Arc::new(crate::store::memory::MemoryStore::new()), RuntimeConfig::default()));
        let embeddings = target.enable_embeddings(fresh.clone());
        embeddings.load().await.unwrap();
        let dump = crate::backup::parse(&backup).unwrap();
        target.restore_storage(&dump, crate::backup::Mode::Clear).await.unwrap();
        assert_eq!(settled(&target, &embeddings, &id).await, (2, 0), "the restored vectors are known");
        assert!(embeddings.idle_within(Duration::from_secs(1)).await);
        assert!(fresh.texts.lock().unwrap().is_empty(), "nothing embedded again");
    }
}
