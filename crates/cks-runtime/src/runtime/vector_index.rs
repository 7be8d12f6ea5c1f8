//! Each searched session's settled vector index kept in the store, so a restart reads it instead
//! of reading every known vector and settling every object against them (at 100,000 objects,
//! two fifths of the processor's time from a restart to the first search).
//!
//! One index is kept a session, of the state at one version, under the model that made it. A
//! load reads it beside the snapshot, its vectors join the known ones ([`Embeddings::share`]),
//! and the rebuild sets it when it passes that version; the versions replayed after it mark
//! what they change, as any change does, and the first search reads by key only the vectors of
//! those. It is kept once a read finds the index settled (every object with its vector, nothing
//! pending or changed since) and none is kept at or after the session's latest snapshot, which is
//! where a rebuild starts. It is only a shortcut: an index missing, of another model, of a version
//! the rebuild does not pass, or unreadable is settled from nothing when the session is next
//! searched, against every stored vector (which such a load starts reading beside the session).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use cks_core::vectors::StoredVectors;

use super::{NOT_KEPT, Runtime, Session};
use crate::embeddings::Embeddings;
use crate::session::SessionState;

impl Runtime {
    /// The session's kept vector index under the current model, read (off the async workers)
    /// with its vectors made known, and the version it indexes. When none can be read, the known
    /// vectors are read now, beside the session's load, for its first settle.
    pub(super) async fn read_vector_index(&self, id: &str) -> Option<(u64, StoredVectors)> {
        let embeddings = self.embeddings()?.clone();
        let kept = if self.store.keeps_vector_indexes() {
            self.store.load_vector_index(id).await.unwrap_or_else(|e| {
                tracing::warn!(session_id = id, error = %e, "kept vector index not read; it is settled when searched");
                None
            })
        } else {
            None
        };
        match kept {
            Some((seq, mut stored)) if stored.model() == embeddings.model() => {
                let shared = Arc::clone(&embeddings);
                tokio::task::spawn_blocking(move || {
                    shared.share(&mut stored);
                    (seq, stored)
                })
                .await
                .ok()
            }
            _ => {
                load_in_background(embeddings);
                None
            }
        }
    }

    /// Keeps the session's vector index in the background when it is settled under the current
    /// model and none is kept at or after the latest snapshot. Called after each read and each
    /// commit; costs a comparison when there is nothing to keep.
    pub(super) fn keep_vector_index(&self, session: &Session, state: &SessionState) {
        let seq = state.row.head.seq;
        let kept = session.vector_index_kept.load(Ordering::Acquire);
        if !self.store.keeps_vector_indexes() || kept == seq || (kept != NOT_KEPT && kept >= state.last_snapshot_seq) {
            return;
        }
        let (Some(embeddings), Some(index)) = (self.embeddings(), state.structure.built_vector_index()) else {
            return;
        };
        let rows = {
            let index = index.lock().unwrap_or_else(|p| p.into_inner());
            if index.model() != embeddings.model() {
                return;
            }
            index.kept(state.structure.root_hash())
        };
        let Some(rows) = rows else { return };
        if session.vector_index_kept.swap(seq, Ordering::AcqRel) == seq {
            return;
        }
        let (store, id) = (Arc::clone(&self.store), session.id.clone());
        self.saving.spawn(async move {
            if let Err(e) = store.save_vector_index(&id, seq, Box::new(rows.into_parts())).await {
                tracing::warn!(session_id = id, seq, error = %e, "vector index not kept; it is settled after a restart");
            }
        });
    }
}

/// Reads the known vectors in the background (once; later calls find them read).
fn load_in_background(embeddings: Arc<Embeddings>) {
    if embeddings.is_loaded() {
        return;
    }
    tokio::spawn(async move {
        if let Err(e) = embeddings.load().await {
            tracing::warn!(error = %e, "stored embeddings not read; the first search tries again");
        }
    });
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Mutex;
    use std::time::Duration;

    use cks_core::sample::random_graph;
    use cks_core::vectors::Vector;
    use cks_embed::{EmbedError, Embedder};
    use serde_json::json;

    use super::*;
    use crate::runtime::{CommitRequest, NewSession, RuntimeConfig};
    use crate::store::HistoryStore;
    use crate::store::sqlite::{SqliteOptions, SqliteStore};

    /// A stand-in model named `name` that counts the texts it embeds.
    #[derive(Debug)]
    struct Counting {
        name: &'static str,
        texts: Mutex<usize>,
    }

    #[async_trait::async_trait]
    impl Embedder for Counting {
        fn model(&self) -> &str {
            self.name
        }

        async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
            *self.texts.lock().unwrap() += texts.len();
            Ok(texts.iter().map(|t| t.bytes().take(8).map(f32::from).chain([t.len() as f32]).collect()).collect())
        }
    }

    fn counting(name: &'static str) -> Arc<Counting> {
        Arc::new(Counting { name, texts: Mutex::new(0) })
    }

    fn open(path: &std::path::Path, model: &Arc<Counting>) -> (Arc<SqliteStore>, Arc<Runtime>, Arc<Embeddings>) {
        let store = Arc::new(SqliteStore::open(path, &SqliteOptions::default()).unwrap());
        let runtime = Arc::new(Runtime::new(store.clone(), RuntimeConfig::default()));
        let embeddings = runtime.enable_embeddings(model.clone());
        (store, runtime, embeddings)
    }

    /// The index's rows by id, once settled; and how many objects are pending.
    async fn rows(runtime: &Runtime, embeddings: &Embeddings, id: &str) -> (BTreeMap<String, Vec<u8>>, usize) {
        runtime
            .read(id, |s, _| {
                embeddings.settle(s, |index, synced| {
                    (index.rows().map(|(id, v)| (id.to_owned(), v.to_bytes())).collect(), synced.pending)
                })
            })
            .await
            .unwrap()
    }

    /// The kept index's version, once the background save has landed.
    async fn kept(store: &SqliteStore, id: &str) -> u64 {
        for _ in 0..500 {
            if let Some((seq, _)) = store.load_vector_index(id).await.unwrap() {
                return seq;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("no vector index kept");
    }

    /// A session searched once every object has its vector, in a store at `path`.
    async fn searched(path: &std::path::Path, model: &Arc<Counting>) -> (String, BTreeMap<String, Vec<u8>>) {
        let (store, runtime, embeddings) = open(path, model);
        let id = runtime.create_session(random_graph(40, 20, 7), NewSession::default()).await.unwrap().session_id;
        // The first settle queues every text (the follower's may not have run yet).
        rows(&runtime, &embeddings, &id).await;
        assert!(embeddings.idle_within(Duration::from_secs(10)).await);
        let (rows, pending) = self::rows(&runtime, &embeddings, &id).await;
        assert_eq!((rows.len(), pending), (40, 0));
        assert_eq!(kept(&store, &id).await, 0);
        (id, rows)
    }

    #[tokio::test]
    async fn a_session_loads_with_its_kept_index_and_needs_no_known_vector_until_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cks.db");
        let model = counting("stand-in");
        let (id, before) = searched(&path, &model).await;
        let embedded = *model.texts.lock().unwrap();

        let (_, runtime, embeddings) = open(&path, &model);
        let missing = runtime.read(&id, |s, _| embeddings.missing_for(s)).await.unwrap();
        assert_eq!(missing, Some(Vec::new()), "set as the session loaded: nothing to look up");
        assert!(!embeddings.is_loaded(), "no known vector read for it");
        assert_eq!(rows(&runtime, &embeddings, &id).await, (before.clone(), 0), "the rows kept");
        // Its vectors joined the known ones: reading the store's adds none twice.
        embeddings.load().await.unwrap();
        assert_eq!(embeddings.status().known, 40);

        // A change after it: the changed object is settled against the known vectors.
        let change = json!([{"type": "update_object", "object_id": "n3", "structure_patch": {"note": "walrus"}}]);
        let change = cks_core::ops::parse_operations(&change).unwrap();
        runtime.commit(&id, CommitRequest::operations(change)).await.unwrap();
        rows(&runtime, &embeddings, &id).await;
        assert!(embeddings.idle_within(Duration::from_secs(10)).await);
        let (after, pending) = rows(&runtime, &embeddings, &id).await;
        assert_eq!(pending, 0);
        assert_eq!(after.len(), 40);
        assert_ne!(after["n3"], before["n3"]);
        assert!(after.iter().filter(|(id, _)| *id != "n3").all(|(id, v)| before[id] == *v));
        assert_eq!(*model.texts.lock().unwrap(), embedded + 1, "only the changed text embedded");
        drop(runtime);

        // Restarted with that change after the version kept (no snapshot since, so the index is
        // not kept again): only the changed object's vector is read, by its key.
        let (_, runtime, embeddings) = open(&path, &model);
        let missing = runtime.read(&id, |s, _| embeddings.missing_for(s)).await.unwrap().expect("the kept index set");
        assert_eq!(missing.len(), 1, "the changed object's text");
        embeddings.fetch(&missing).await.unwrap();
        assert_eq!(rows(&runtime, &embeddings, &id).await, (after, 0));
        assert!(!embeddings.is_loaded());
        assert_eq!(embeddings.status().known, 41, "the kept index's 40 and the changed one");
        assert_eq!(*model.texts.lock().unwrap(), embedded + 1, "nothing embedded again");
    }

    #[tokio::test]
    async fn an_index_of_another_model_or_damaged_is_passed_over_and_settled_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cks.db");
        let (id, _) = searched(&path, &counting("stand-in")).await;

        // Another model: its vectors are not these, so the index is settled anew under this one.
        let other = counting("other");
        let (_, runtime, embeddings) = open(&path, &other);
        assert_eq!(runtime.read(&id, |s, _| embeddings.missing_for(s)).await.unwrap(), None, "every object to settle");
        embeddings.load().await.unwrap();
        rows(&runtime, &embeddings, &id).await;
        assert!(embeddings.idle_within(Duration::from_secs(10)).await);
        let (rows, pending) = rows(&runtime, &embeddings, &id).await;
        assert_eq!((rows.len(), pending), (40, 0));
        drop(runtime);

        // Damaged: the session loads without it.
        let store = SqliteStore::open(&path, &SqliteOptions::default()).unwrap();
        let mut first = store.load_vector_index(&id).await.unwrap().map(|(seq, _)| seq);
        assert!(first.take().is_some());
        store.save_vector_index(&id, 9, Box::new(std::iter::once(b"CKSVXI01 damaged".to_vec()))).await.unwrap();
        assert!(store.load_vector_index(&id).await.is_err());
        let model = counting("stand-in");
        let (_, runtime, embeddings) = open(&path, &model);
        assert_eq!(runtime.read(&id, |s, _| embeddings.missing_for(s)).await.unwrap(), None);
        // Settled as the stored vectors are read (the load starts beside the session's): a text
        // queued before its vector was read is found, not embedded again.
        self::rows(&runtime, &embeddings, &id).await;
        assert!(embeddings.idle_within(Duration::from_secs(10)).await);
        let (rows, pending) = self::rows(&runtime, &embeddings, &id).await;
        assert_eq!((rows.len(), pending), (40, 0), "settled against the stored vectors");
        assert_eq!(*model.texts.lock().unwrap(), 0, "none embedded again");
        // A vector index is a cache: a stored vector is the same however it was reached.
        assert!(rows.values().all(|v| Vector::from_bytes(v).is_some()));
    }
}
