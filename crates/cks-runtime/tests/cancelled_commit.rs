//! A commit whose future is dropped while its version is being written (a client that
//! disconnects cancels its call) leaves the cached session exactly as the store has it: unchanged
//! when the write never happened, and showing the new version when the store finished it anyway.

use async_trait::async_trait;
use cks_runtime::store::prelude::*;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use tokio::sync::Notify;

use cks_core::ops::parse_operations;
use cks_runtime::store::sqlite::{SqliteOptions, SqliteStore};
use cks_runtime::store::{
    Chain, ChatRow, ChatSummary, EmbeddingRow, GraphRow, ImportOutcome, ImportedSession, NewTask, NewVersion,
    SessionRow, Store, StoreError, StoredVersion, TaskFilter, TaskRef, TaskRow, VersionRow,
};
use cks_runtime::{CommitRequest, NewSession, Runtime, RuntimeConfig};

const PASS: u8 = 0;
/// The next append stalls forever before writing.
const STALL_BEFORE: u8 = 1;
/// The next append writes, then stalls forever before answering.
const STALL_AFTER: u8 = 2;

/// SQLite (whose change token does not move on its own commits) with an append that can stall.
#[derive(Debug)]
struct StallingStore {
    inner: SqliteStore,
    mode: AtomicU8,
    stalled: Notify,
}

#[async_trait]
impl HistoryStore for StallingStore {
    fn change_token(&self) -> Option<u64> {
        self.inner.change_token()
    }

    async fn create_session(&self, session: &SessionRow, initial_state: String) -> Result<(), StoreError> {
        self.inner.create_session(session, initial_state).await
    }

    async fn load_session(&self, session_id: &str) -> Result<Option<SessionRow>, StoreError> {
        self.inner.load_session(session_id).await
    }

    async fn list_sessions(&self) -> Result<Vec<SessionRow>, StoreError> {
        self.inner.list_sessions().await
    }

    async fn head_seq(&self, session_id: &str) -> Result<Option<u64>, StoreError> {
        self.inner.head_seq(session_id).await
    }

    async fn append_version(&self, version: &NewVersion) -> Result<(), StoreError> {
        match self.mode.swap(PASS, Ordering::SeqCst) {
            STALL_BEFORE => {}
            STALL_AFTER => self.inner.append_version(version).await?,
            _ => return self.inner.append_version(version).await,
        }
        self.stalled.notify_one();
        std::future::pending().await
    }

    async fn list_versions(&self, session_id: &str) -> Result<Vec<VersionRow>, StoreError> {
        self.inner.list_versions(session_id).await
    }

    async fn find_version(&self, version_id: &str) -> Result<Option<(String, u64)>, StoreError> {
        self.inner.find_version(version_id).await
    }

    async fn load_chain(&self, session_id: &str, seq: u64) -> Result<Chain, StoreError> {
        self.inner.load_chain(session_id, seq).await
    }

    async fn load_versions_after(&self, session_id: &str, after_seq: u64) -> Result<Vec<StoredVersion>, StoreError> {
        self.inner.load_versions_after(session_id, after_seq).await
    }

    async fn load_snapshot(&self, session_id: &str, seq: u64) -> Result<Option<String>, StoreError> {
        self.inner.load_snapshot(session_id, seq).await
    }

    async fn set_closed(&self, session_id: &str, closed: bool) -> Result<(), StoreError> {
        self.inner.set_closed(session_id, closed).await
    }

    async fn swap_session_metadata(
        &self,
        session_id: &str,
        expected: &str,
        metadata: &str,
    ) -> Result<bool, StoreError> {
        self.inner.swap_session_metadata(session_id, expected, metadata).await
    }
}

#[async_trait]
impl GalleryStore for StallingStore {
    async fn put_graph(&self, row: GraphRow) -> Result<GraphRow, StoreError> {
        self.inner.put_graph(row).await
    }

    async fn get_graph(&self, name: &str) -> Result<Option<GraphRow>, StoreError> {
        self.inner.get_graph(name).await
    }

    async fn delete_graph(&self, name: &str) -> Result<bool, StoreError> {
        self.inner.delete_graph(name).await
    }

    async fn list_graphs(&self) -> Result<Vec<GraphRow>, StoreError> {
        self.inner.list_graphs().await
    }
}

#[async_trait]
impl SettingStore for StallingStore {
    async fn load_setting(&self, key: &str) -> Result<Option<String>, StoreError> {
        self.inner.load_setting(key).await
    }

    async fn save_setting(&self, key: &str, value: &str) -> Result<(), StoreError> {
        self.inner.save_setting(key, value).await
    }

    async fn setting_or_insert(&self, key: &str, value: &str) -> Result<String, StoreError> {
        self.inner.setting_or_insert(key, value).await
    }

    async fn list_settings(&self, prefix: &str) -> Result<Vec<(String, String)>, StoreError> {
        self.inner.list_settings(prefix).await
    }

    async fn delete_setting(&self, key: &str) -> Result<bool, StoreError> {
        self.inner.delete_setting(key).await
    }
}

#[async_trait]
impl ChatStore for StallingStore {
    async fn save_chat(&self, chat: &ChatRow, expected_revision: Option<u64>) -> Result<bool, StoreError> {
        self.inner.save_chat(chat, expected_revision).await
    }

    async fn load_chat(&self, chat_id: &str) -> Result<Option<ChatRow>, StoreError> {
        self.inner.load_chat(chat_id).await
    }

    async fn list_chats(&self, session_id: Option<&str>, limit: usize) -> Result<Vec<ChatSummary>, StoreError> {
        self.inner.list_chats(session_id, limit).await
    }

    async fn delete_chat(&self, chat_id: &str) -> Result<bool, StoreError> {
        self.inner.delete_chat(chat_id).await
    }
}

#[async_trait]
impl TaskStore for StallingStore {
    async fn enqueue_task(&self, task: &NewTask) -> Result<Option<i64>, StoreError> {
        self.inner.enqueue_task(task).await
    }

    async fn claim_task(&self, ty: Option<&str>, now_ms: i64, lease_ms: i64) -> Result<Option<TaskRow>, StoreError> {
        self.inner.claim_task(ty, now_ms, lease_ms).await
    }

    async fn get_task(&self, task_id: i64) -> Result<Option<TaskRow>, StoreError> {
        self.inner.get_task(task_id).await
    }

    async fn list_tasks(&self, filter: &TaskFilter) -> Result<Vec<TaskRow>, StoreError> {
        self.inner.list_tasks(filter).await
    }

    async fn complete_task(&self, task: TaskRef) -> Result<bool, StoreError> {
        self.inner.complete_task(task).await
    }

    async fn fail_task(&self, task: TaskRef, retries: u32, error: &str, next_ms: i64) -> Result<bool, StoreError> {
        self.inner.fail_task(task, retries, error, next_ms).await
    }

    async fn dead_letter_task(&self, task: TaskRef, error: &str, retry_count: Option<u32>) -> Result<bool, StoreError> {
        self.inner.dead_letter_task(task, error, retry_count).await
    }

    async fn retry_dead_task(&self, task_id: i64, now_ms: i64) -> Result<bool, StoreError> {
        self.inner.retry_dead_task(task_id, now_ms).await
    }

    async fn renew_task(&self, task: TaskRef, now_ms: i64) -> Result<bool, StoreError> {
        self.inner.renew_task(task, now_ms).await
    }
    async fn import_tasks(&self, tasks: &[TaskRow]) -> Result<u64, StoreError> {
        self.inner.import_tasks(tasks).await
    }
}

#[async_trait]
impl EmbeddingStore for StallingStore {
    async fn save_embeddings(&self, model: &str, rows: &[EmbeddingRow]) -> Result<(), StoreError> {
        self.inner.save_embeddings(model, rows).await
    }

    async fn load_embeddings(&self, model: &str) -> Result<Vec<EmbeddingRow>, StoreError> {
        self.inner.load_embeddings(model).await
    }

    async fn load_embeddings_of(&self, model: &str, text_hashes: &[[u8; 16]]) -> Result<Vec<EmbeddingRow>, StoreError> {
        self.inner.load_embeddings_of(model, text_hashes).await
    }

    async fn embedding_models(&self) -> Result<Vec<(String, u64)>, StoreError> {
        self.inner.embedding_models().await
    }

    async fn delete_embeddings(&self, model: &str) -> Result<u64, StoreError> {
        self.inner.delete_embeddings(model).await
    }
}

#[async_trait]
impl Store for StallingStore {
    fn kind(&self) -> &'static str {
        "stalling"
    }

    async fn replace_all(&self, sessions: &[ImportedSession]) -> Result<ImportOutcome, StoreError> {
        self.inner.replace_all(sessions).await
    }
}

fn add(id: &str) -> CommitRequest {
    let operations = json!([{"type": "add_object", "identity": {"id": id, "type": "Node", "name": id}}]);
    CommitRequest::operations(parse_operations(&operations).unwrap())
}

async fn setup() -> (tempfile::TempDir, Arc<StallingStore>, Runtime, String) {
    let dir = tempfile::tempdir().unwrap();
    let inner = SqliteStore::open(dir.path().join("t.db"), &SqliteOptions::default()).unwrap();
    let store = Arc::new(StallingStore { inner, mode: AtomicU8::new(PASS), stalled: Notify::new() });
    let runtime = Runtime::new(store.clone(), RuntimeConfig::default());
    let id = runtime.create_session(Default::default(), NewSession::default()).await.unwrap().session_id;
    runtime.commit(&id, add("a")).await.unwrap();
    (dir, store, runtime, id)
}

/// Starts a commit of `b` and drops it once the store has stalled.
async fn commit_and_drop(runtime: &Runtime, store: &StallingStore, id: &str) {
    let commit = runtime.commit(id, add("b"));
    tokio::select! {
        result = commit => panic!("the stalled commit finished: {result:?}"),
        () = store.stalled.notified() => {}
    }
}

async fn object_ids(runtime: &Runtime, id: &str) -> Vec<String> {
    let mut ids = runtime
        .read(id, |structure, _| structure.objects().map(|o| o.identity.id.to_string()).collect::<Vec<_>>())
        .await
        .unwrap();
    ids.sort();
    ids
}

#[tokio::test]
async fn a_commit_dropped_before_the_write_changes_nothing() {
    let (_dir, store, runtime, id) = setup().await;
    let head = runtime.info(&id).await.unwrap();
    store.mode.store(STALL_BEFORE, Ordering::SeqCst);
    commit_and_drop(&runtime, &store, &id).await;
    assert_eq!(object_ids(&runtime, &id).await, ["a"]);
    let after = runtime.info(&id).await.unwrap();
    assert_eq!(after.state_hash, head.state_hash);
    // The session is still usable, and the next commit is built on the stored head.
    runtime.commit(&id, add("c")).await.unwrap();
    assert_eq!(object_ids(&runtime, &id).await, ["a", "c"]);
    assert_eq!(runtime.list_versions(&id).await.unwrap().len(), 2);
}

#[tokio::test]
async fn a_commit_dropped_after_the_write_shows_what_the_store_has() {
    let (_dir, store, runtime, id) = setup().await;
    store.mode.store(STALL_AFTER, Ordering::SeqCst);
    commit_and_drop(&runtime, &store, &id).await;
    assert_eq!(object_ids(&runtime, &id).await, ["a", "b"]);
    runtime.commit(&id, add("c")).await.unwrap();
    assert_eq!(object_ids(&runtime, &id).await, ["a", "b", "c"]);
    assert_eq!(runtime.list_versions(&id).await.unwrap().len(), 3);
}
