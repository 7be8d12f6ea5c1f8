//! Each searched session's text index kept in the store, so a restart reads it instead of
//! tokenising every object again (at 100,000 objects, a few tens of milliseconds instead of a
//! few hundred).
//!
//! One index is kept a session, of the state at one version: a load sets it on the state when
//! the rebuild passes that version (the snapshot, or a version replayed after it), and the
//! versions replayed after it keep it up to date as any change does. It is kept when a session
//! that keeps none is searched, and again at each snapshot written after that; a session never
//! searched keeps none. It is only a shortcut: an index missing, of a version before the
//! snapshot loaded, or unreadable is built when the session is next searched, and kept then.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use cks_core::ContentHash;
use cks_core::text::TextIndex;

use super::{NOT_KEPT, Runtime, Session};
use crate::session::SessionState;
use crate::store::StoreError;

impl Runtime {
    /// The session's kept text index, read and decoded (off the async workers), with the version
    /// it indexes. `None` when the store keeps none or the one kept cannot be read.
    pub(super) async fn read_text_index(&self, id: &str) -> Option<(u64, ContentHash, TextIndex)> {
        if !self.store.keeps_text_indexes() {
            return None;
        }
        let read = async {
            let Some((seq, bytes)) = self.store.load_text_index(id).await? else { return Ok(None) };
            let decoded = tokio::task::spawn_blocking(move || TextIndex::from_bytes(&bytes))
                .await
                .map_err(|e| StoreError::Backend(format!("decoding task failed: {e}")))?;
            let (root, index) = decoded.map_err(|e| StoreError::Corrupt(e.to_string()))?;
            Ok::<_, StoreError>(Some((seq, root, index)))
        };
        read.await.unwrap_or_else(|e| {
            tracing::warn!(session_id = id, error = %e, "kept text index not read; it is built when searched");
            None
        })
    }

    /// Keeps the session's text index in the background when it has one and keeps none yet
    /// (a first search, or a load that found none to set), or when the session is at a version
    /// with a snapshot whose index is not kept yet. Called after each read and each commit; costs
    /// a comparison when there is nothing to keep.
    pub(super) fn keep_text_index(&self, session: &Session, state: &SessionState) {
        let seq = state.row.head.seq;
        let kept = session.text_index_kept.load(Ordering::Acquire);
        if !self.store.keeps_text_indexes() || kept == seq || (kept != NOT_KEPT && seq != state.last_snapshot_seq) {
            return;
        }
        if state.structure.built_text_index().is_none() || session.text_index_kept.swap(seq, Ordering::AcqRel) == seq {
            return;
        }
        let Some(bytes) = state.structure.text_index_bytes() else { return };
        let (store, id) = (Arc::clone(&self.store), session.id.clone());
        self.saving.spawn(async move {
            if let Err(e) = store.save_text_index(&id, seq, bytes).await {
                tracing::warn!(session_id = id, seq, error = %e, "text index not kept; it is built after a restart");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use cks_core::ops;
    use cks_core::sample::random_graph;
    use serde_json::json;

    use super::*;
    use crate::runtime::{CommitRequest, NewSession, RuntimeConfig};
    use crate::store::HistoryStore;
    use crate::store::sqlite::{SqliteOptions, SqliteStore};

    fn open(path: &std::path::Path) -> (Arc<SqliteStore>, Runtime) {
        let store = Arc::new(SqliteStore::open(path, &SqliteOptions::default()).unwrap());
        let config = RuntimeConfig { snapshot_interval: 2, ..Default::default() };
        (store.clone(), Runtime::new(store, config))
    }

    /// A store at `path` holding one session of a small sample graph, never searched.
    async fn with_session(path: &std::path::Path) -> (Arc<SqliteStore>, Runtime, String) {
        let (store, runtime) = open(path);
        let id = runtime.create_session(random_graph(6, 2, 9), NewSession::default()).await.unwrap().session_id;
        (store, runtime, id)
    }

    /// The version whose index the store keeps, once the background save has landed.
    async fn kept(store: &SqliteStore, id: &str, seq: u64) -> Vec<u8> {
        for _ in 0..500 {
            if let Some((kept, bytes)) = store.load_text_index(id).await.unwrap()
                && kept == seq
            {
                return bytes;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("no text index kept at version {seq}");
    }

    async fn change(runtime: &Runtime, id: &str, object: &str, words: &str) {
        let change = json!([{"type": "update_object", "object_id": object, "structure_patch": {"note": words}}]);
        runtime.commit(id, CommitRequest::operations(ops::parse_operations(&change).unwrap())).await.unwrap();
    }

    /// The session's text index as set or built now, and one built from its objects.
    async fn indexes(runtime: &Runtime, id: &str) -> (Option<TextIndex>, TextIndex) {
        runtime.read(id, |s, _| (s.built_text_index().cloned(), TextIndex::build(s))).await.unwrap()
    }

    #[tokio::test]
    async fn a_searched_session_is_loaded_with_its_index_kept_and_brought_up_to_date() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cks.db");
        let (store, runtime, id) = with_session(&path).await;
        assert!(store.load_text_index(&id).await.unwrap().is_none(), "never searched, nothing kept");
        runtime.read(&id, |s, _| s.text_index().rank("walrus", 3, 0.0).len()).await.unwrap();
        kept(&store, &id, 0).await;
        // A version without a snapshot: replayed over the kept index after the restart.
        change(&runtime, &id, "n1", "walrus tusks").await;
        drop(runtime);

        let (store, runtime) = open(&path);
        let (set, built) = indexes(&runtime, &id).await;
        assert_eq!(set.as_ref(), Some(&built), "set from the store before any search, and up to date");
        assert_eq!(
            runtime.read(&id, |s, _| s.text_index().rank("walrus", 3, 0.0)[0].0.to_owned()).await.unwrap(),
            "n1"
        );
        // The next snapshot keeps the index beside it, in place of the first.
        change(&runtime, &id, "n2", "narwhal").await;
        let bytes = kept(&store, &id, 2).await;
        let (set, _) = indexes(&runtime, &id).await;
        assert_eq!(TextIndex::from_bytes(&bytes).ok().map(|(_, index)| index), set);
        drop(runtime);

        // Damaged bytes are passed over: the session loads, and builds its index when searched.
        store.save_text_index(&id, 2, b"CKSTXI01 damaged".to_vec()).await.unwrap();
        let (_, runtime) = open(&path);
        let (set, built) = indexes(&runtime, &id).await;
        assert_eq!(set, None);
        assert!(runtime.read(&id, |s, _| s.text_index() == &built).await.unwrap());
    }

    #[tokio::test]
    async fn an_index_kept_between_snapshots_is_set_when_the_rebuild_passes_its_version() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cks.db");
        let (store, runtime, id) = with_session(&path).await;
        // Version 1 has no snapshot (one every two versions): the first search is there.
        change(&runtime, &id, "n1", "walrus tusks").await;
        runtime.read(&id, |s, _| s.text_index().len()).await.unwrap();
        kept(&store, &id, 1).await;
        drop(runtime);

        let (_, runtime) = open(&path);
        let (set, built) = indexes(&runtime, &id).await;
        assert_eq!(set.as_ref(), Some(&built), "set after version 1 was replayed over the snapshot");
    }
}
