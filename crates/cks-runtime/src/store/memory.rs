//! The in-memory store: the reference implementation of the [`Store`] contract, for tests and
//! ephemeral servers. One mutex guards everything, which makes every method trivially atomic.

use crate::store::prelude::*;
use async_trait::async_trait;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use super::registry::sort_newest_first;
use super::{
    Chain, ChatRow, ChatSummary, EmbeddingRow, GraphRow, ImportOutcome, ImportedSession, NewTask, NewVersion,
    SessionRow, Store, StoreError, StoredVersion, TaskFilter, TaskRef, TaskRow, TaskStatus, VersionRow, check_imports,
    version_taken,
};

#[derive(Debug, Default)]
struct SessionData {
    row: SessionRow,
    versions: Vec<StoredVersion>,
    snapshots: BTreeMap<u64, String>,
}

/// A store that lives and dies with the process.
#[derive(Debug)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
    /// Bumped on every write; every runtime sharing this store sees it move.
    writes: std::sync::atomic::AtomicU64,
    /// Made with the store: the data lives no longer than it does.
    replica_id: String,
}

#[derive(Debug, Default)]
struct Inner {
    sessions: HashMap<String, SessionData>,
    order: Vec<String>,
    version_index: HashMap<String, (String, u64)>,
    graphs: HashMap<String, GraphRow>,
    /// By task id, which is also the order of creation.
    tasks: BTreeMap<i64, TaskRow>,
    last_task_id: i64,
    settings: HashMap<String, String>,
    chats: HashMap<String, ChatRow>,
    /// Vectors by model, then text hash; a model is here only while it has rows.
    embeddings: BTreeMap<String, HashMap<[u8; 16], Vec<u8>>>,
}

impl Inner {
    /// The task `task` names, if it holds.
    fn held_task(&mut self, task: TaskRef) -> Option<&mut TaskRow> {
        self.tasks.get_mut(&task.task_id).filter(|row| task.holds(row))
    }
}

impl Default for SessionRow {
    fn default() -> Self {
        SessionRow {
            session_id: String::new(),
            created_at: String::new(),
            parent_session_id: None,
            parent_version_id: None,
            closed: false,
            metadata: "{}".into(),
            snapshot_interval: 10,
            head: super::Head { seq: 0, version_id: None, state_hash: String::new(), object_count: 0 },
        }
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore {
            inner: Mutex::default(),
            writes: std::sync::atomic::AtomicU64::default(),
            replica_id: uuid::Uuid::new_v4().to_string(),
        }
    }
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    fn write<R>(&self, f: impl FnOnce(&mut Inner) -> Result<R, StoreError>) -> Result<R, StoreError> {
        let result = self.with(f);
        self.writes.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        result
    }

    fn with<R>(&self, f: impl FnOnce(&mut Inner) -> Result<R, StoreError>) -> Result<R, StoreError> {
        // A poisoned lock only means another thread panicked mid-call; the data is still consistent
        // because every method validates before it mutates.
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut guard)
    }
}

fn session<'a>(inner: &'a Inner, id: &str) -> Result<&'a SessionData, StoreError> {
    inner.sessions.get(id).ok_or_else(|| StoreError::SessionNotFound(id.to_owned()))
}

#[async_trait]
impl HistoryStore for MemoryStore {
    fn change_token(&self) -> Option<u64> {
        Some(self.writes.load(std::sync::atomic::Ordering::SeqCst))
    }

    async fn create_session(&self, row: &SessionRow, initial_state: String) -> Result<(), StoreError> {
        self.write(|inner| {
            if inner.sessions.contains_key(&row.session_id) {
                return Err(StoreError::SessionExists(row.session_id.clone()));
            }
            let data =
                SessionData { row: row.clone(), versions: Vec::new(), snapshots: BTreeMap::from([(0, initial_state)]) };
            inner.sessions.insert(row.session_id.clone(), data);
            inner.order.push(row.session_id.clone());
            Ok(())
        })
    }

    async fn load_session(&self, id: &str) -> Result<Option<SessionRow>, StoreError> {
        self.with(|inner| Ok(inner.sessions.get(id).map(|s| s.row.clone())))
    }

    async fn list_sessions(&self) -> Result<Vec<SessionRow>, StoreError> {
        self.with(|inner| Ok(inner.order.iter().map(|id| inner.sessions[id].row.clone()).collect()))
    }

    async fn head_seq(&self, id: &str) -> Result<Option<u64>, StoreError> {
        self.with(|inner| Ok(inner.sessions.get(id).map(|s| s.row.head.seq)))
    }

    async fn append_version(&self, new: &NewVersion) -> Result<(), StoreError> {
        self.write(|inner| {
            if inner.version_index.contains_key(&new.row.version_id) {
                return Err(StoreError::Corrupt(format!("version id '{}' already exists", new.row.version_id)));
            }
            let data = inner
                .sessions
                .get_mut(&new.session_id)
                .ok_or_else(|| StoreError::SessionNotFound(new.session_id.clone()))?;
            if data.row.closed {
                return Err(StoreError::SessionClosed(new.session_id.clone()));
            }
            if data.row.head.seq != new.expected_seq || new.row.seq != new.expected_seq + 1 {
                return Err(StoreError::Conflict {
                    session_id: new.session_id.clone(),
                    expected: new.expected_seq,
                    found: data.row.head.seq,
                });
            }
            if new.delta.is_none() && new.snapshot.is_none() {
                return Err(StoreError::Corrupt("a version needs a delta or a snapshot".into()));
            }
            data.row.head = super::Head {
                seq: new.row.seq,
                version_id: Some(new.row.version_id.clone()),
                state_hash: new.row.state_hash.clone(),
                object_count: new.row.object_count,
            };
            if let Some(snapshot) = &new.snapshot {
                data.snapshots.insert(new.row.seq, snapshot.clone());
            }
            let row = VersionRow { has_snapshot: new.snapshot.is_some(), ..new.row.clone() };
            data.versions.push(StoredVersion { row, delta: new.delta.clone() });
            inner.version_index.insert(new.row.version_id.clone(), (new.session_id.clone(), new.row.seq));
            Ok(())
        })
    }

    async fn list_versions(&self, id: &str) -> Result<Vec<VersionRow>, StoreError> {
        self.with(|inner| Ok(session(inner, id)?.versions.iter().map(|v| v.row.clone()).collect()))
    }

    async fn find_version(&self, version_id: &str) -> Result<Option<(String, u64)>, StoreError> {
        self.with(|inner| Ok(inner.version_index.get(version_id).cloned()))
    }

    async fn load_chain(&self, id: &str, seq: u64) -> Result<Chain, StoreError> {
        self.with(|inner| {
            let data = session(inner, id)?;
            if seq > data.row.head.seq {
                return Err(StoreError::Corrupt(format!("session '{id}' has no version #{seq}")));
            }
            let (&snapshot_seq, snapshot) = data
                .snapshots
                .range(..=seq)
                .next_back()
                .ok_or_else(|| StoreError::Corrupt(format!("session '{id}' has no snapshot")))?;
            let versions = data.versions[snapshot_seq as usize..seq as usize].to_vec();
            Ok(Chain { snapshot_seq, snapshot: snapshot.clone(), versions })
        })
    }

    async fn load_versions_after(&self, id: &str, after_seq: u64) -> Result<Vec<StoredVersion>, StoreError> {
        self.with(|inner| {
            let data = session(inner, id)?;
            Ok(data.versions.iter().skip(after_seq as usize).cloned().collect())
        })
    }

    async fn load_snapshot(&self, id: &str, seq: u64) -> Result<Option<String>, StoreError> {
        self.with(|inner| Ok(session(inner, id)?.snapshots.get(&seq).cloned()))
    }

    async fn set_closed(&self, id: &str, closed: bool) -> Result<(), StoreError> {
        self.write(|inner| {
            let data = inner.sessions.get_mut(id).ok_or_else(|| StoreError::SessionNotFound(id.to_owned()))?;
            data.row.closed = closed;
            Ok(())
        })
    }

    async fn swap_session_metadata(&self, id: &str, expected: &str, metadata: &str) -> Result<bool, StoreError> {
        self.write(|inner| {
            let data = inner.sessions.get_mut(id).ok_or_else(|| StoreError::SessionNotFound(id.to_owned()))?;
            if data.row.metadata != expected {
                return Ok(false);
            }
            metadata.clone_into(&mut data.row.metadata);
            Ok(true)
        })
    }

    /// Everything is checked under the one lock before anything is written: all or nothing.
    async fn import_sessions(&self, sessions: &[ImportedSession]) -> Result<ImportOutcome, StoreError> {
        check_imports(sessions)?;
        self.write(|inner| import_into(inner, sessions))
    }
}

#[async_trait]
impl GalleryStore for MemoryStore {
    async fn put_graph(&self, row: GraphRow) -> Result<GraphRow, StoreError> {
        self.write(|inner| {
            session(inner, &row.session_id)?;
            let existing = inner.graphs.get(&row.name).cloned();
            let stored = row.over(existing.as_ref());
            inner.graphs.insert(stored.name.clone(), stored.clone());
            Ok(stored)
        })
    }

    async fn get_graph(&self, name: &str) -> Result<Option<GraphRow>, StoreError> {
        self.with(|inner| Ok(inner.graphs.get(name).cloned()))
    }

    async fn delete_graph(&self, name: &str) -> Result<bool, StoreError> {
        self.write(|inner| Ok(inner.graphs.remove(name).is_some()))
    }

    async fn list_graphs(&self) -> Result<Vec<GraphRow>, StoreError> {
        self.with(|inner| {
            let mut rows: Vec<GraphRow> = inner.graphs.values().cloned().collect();
            sort_newest_first(&mut rows);
            Ok(rows)
        })
    }
}

#[async_trait]
impl SettingStore for MemoryStore {
    async fn replica_id(&self) -> Result<Option<String>, StoreError> {
        Ok(Some(self.replica_id.clone()))
    }

    async fn load_setting(&self, key: &str) -> Result<Option<String>, StoreError> {
        self.with(|inner| Ok(inner.settings.get(key).cloned()))
    }

    async fn save_setting(&self, key: &str, value: &str) -> Result<(), StoreError> {
        self.write(|inner| {
            inner.settings.insert(key.to_owned(), value.to_owned());
            Ok(())
        })
    }

    async fn setting_or_insert(&self, key: &str, value: &str) -> Result<String, StoreError> {
        self.write(|inner| Ok(inner.settings.entry(key.to_owned()).or_insert_with(|| value.to_owned()).clone()))
    }

    async fn list_settings(&self, prefix: &str) -> Result<Vec<(String, String)>, StoreError> {
        self.with(|inner| {
            let mut found: Vec<(String, String)> = inner
                .settings
                .iter()
                .filter(|(k, _)| k.starts_with(prefix))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            found.sort();
            Ok(found)
        })
    }

    async fn delete_setting(&self, key: &str) -> Result<bool, StoreError> {
        self.write(|inner| Ok(inner.settings.remove(key).is_some()))
    }
}

#[async_trait]
impl ChatStore for MemoryStore {
    async fn save_chat(&self, chat: &ChatRow, expected_revision: Option<u64>) -> Result<bool, StoreError> {
        self.write(|inner| {
            session(inner, &chat.session_id)?;
            let stored = inner.chats.get(&chat.chat_id);
            let holds = match (stored, expected_revision) {
                (None, None) => true,
                (Some(row), Some(revision)) => row.revision == revision && row.session_id == chat.session_id,
                _ => false,
            };
            if holds {
                inner.chats.insert(chat.chat_id.clone(), chat.clone());
            }
            Ok(holds)
        })
    }

    async fn load_chat(&self, chat_id: &str) -> Result<Option<ChatRow>, StoreError> {
        self.with(|inner| Ok(inner.chats.get(chat_id).cloned()))
    }

    async fn list_chats(&self, session_id: Option<&str>, limit: usize) -> Result<Vec<ChatSummary>, StoreError> {
        self.with(|inner| {
            let mut rows: Vec<ChatSummary> = inner
                .chats
                .values()
                .filter(|c| session_id.is_none_or(|s| c.session_id == s))
                .map(ChatRow::summary)
                .collect();
            super::chats::sort_newest_first(&mut rows);
            rows.truncate(limit);
            Ok(rows)
        })
    }

    async fn delete_chat(&self, chat_id: &str) -> Result<bool, StoreError> {
        self.write(|inner| Ok(inner.chats.remove(chat_id).is_some()))
    }
}

#[async_trait]
impl TaskStore for MemoryStore {
    async fn enqueue_task(&self, task: &NewTask) -> Result<Option<i64>, StoreError> {
        self.write(|inner| {
            if task.dedup_key.is_some() && inner.tasks.values().any(|t| t.dedup_key == task.dedup_key) {
                return Ok(None);
            }
            inner.last_task_id += 1;
            let task_id = inner.last_task_id;
            inner.tasks.insert(
                task_id,
                TaskRow {
                    task_id,
                    task_type: task.task_type.clone(),
                    session_id: task.session_id.clone(),
                    payload: task.payload.clone(),
                    status: TaskStatus::Pending,
                    retry_count: 0,
                    last_error: None,
                    next_retry_at_ms: task.created_at_ms,
                    claimed_at_ms: None,
                    created_at_ms: task.created_at_ms,
                    dedup_key: task.dedup_key.clone(),
                },
            );
            Ok(Some(task_id))
        })
    }

    async fn claim_task(
        &self,
        task_type: Option<&str>,
        now_ms: i64,
        lease_ms: i64,
    ) -> Result<Option<TaskRow>, StoreError> {
        self.write(|inner| {
            let next = inner
                .tasks
                .values_mut()
                .filter(|t| task_type.is_none_or(|ty| t.task_type == ty) && t.claimable(now_ms, lease_ms))
                .min_by_key(|t| (t.created_at_ms, t.task_id));
            Ok(next.map(|task| {
                task.status = TaskStatus::InProgress;
                task.claimed_at_ms = Some(now_ms);
                task.clone()
            }))
        })
    }

    async fn get_task(&self, task_id: i64) -> Result<Option<TaskRow>, StoreError> {
        self.with(|inner| Ok(inner.tasks.get(&task_id).cloned()))
    }

    async fn list_tasks(&self, filter: &TaskFilter) -> Result<Vec<TaskRow>, StoreError> {
        self.with(|inner| {
            let mut rows: Vec<TaskRow> = inner.tasks.values().filter(|t| t.matches(filter)).cloned().collect();
            rows.sort_by_key(|t| (t.created_at_ms, t.task_id));
            Ok(rows)
        })
    }

    async fn complete_task(&self, task: TaskRef) -> Result<bool, StoreError> {
        self.write(|inner| {
            let held = inner.held_task(task).is_some();
            if held {
                inner.tasks.remove(&task.task_id);
            }
            Ok(held)
        })
    }

    async fn fail_task(
        &self,
        task: TaskRef,
        retry_count: u32,
        error: &str,
        next_retry_at_ms: i64,
    ) -> Result<bool, StoreError> {
        self.write(|inner| {
            Ok(inner
                .held_task(task)
                .map(|row| {
                    row.status = TaskStatus::Pending;
                    row.retry_count = retry_count;
                    row.last_error = Some(error.to_owned());
                    row.next_retry_at_ms = next_retry_at_ms;
                    row.claimed_at_ms = None;
                })
                .is_some())
        })
    }

    async fn dead_letter_task(&self, task: TaskRef, error: &str, retry_count: Option<u32>) -> Result<bool, StoreError> {
        self.write(|inner| {
            Ok(inner
                .held_task(task)
                .map(|row| {
                    row.status = TaskStatus::Dead;
                    row.retry_count = retry_count.unwrap_or(row.retry_count);
                    row.last_error = Some(error.to_owned());
                    row.claimed_at_ms = None;
                })
                .is_some())
        })
    }

    async fn retry_dead_task(&self, task_id: i64, now_ms: i64) -> Result<bool, StoreError> {
        self.write(|inner| {
            Ok(inner
                .tasks
                .get_mut(&task_id)
                .filter(|row| row.status == TaskStatus::Dead)
                .map(|row| {
                    row.status = TaskStatus::Pending;
                    row.retry_count = 0;
                    row.last_error = None;
                    row.next_retry_at_ms = now_ms;
                })
                .is_some())
        })
    }

    async fn renew_task(&self, task: TaskRef, now_ms: i64) -> Result<bool, StoreError> {
        self.write(|inner| {
            Ok(inner
                .held_task(task)
                .filter(|row| row.status == TaskStatus::InProgress)
                .map(|row| row.claimed_at_ms = Some(now_ms))
                .is_some())
        })
    }

    async fn import_tasks(&self, tasks: &[TaskRow]) -> Result<u64, StoreError> {
        self.write(|inner| {
            let mut written = 0;
            for task in tasks {
                let key_taken = task.dedup_key.is_some() && inner.tasks.values().any(|t| t.dedup_key == task.dedup_key);
                if key_taken || inner.tasks.contains_key(&task.task_id) {
                    continue;
                }
                inner.tasks.insert(task.task_id, task.clone());
                inner.last_task_id = inner.last_task_id.max(task.task_id);
                written += 1;
            }
            Ok(written)
        })
    }
}

#[async_trait]
impl EmbeddingStore for MemoryStore {
    async fn save_embeddings(&self, model: &str, rows: &[EmbeddingRow]) -> Result<(), StoreError> {
        if rows.is_empty() {
            return Ok(());
        }
        self.write(|inner| {
            let kept = inner.embeddings.entry(model.to_owned()).or_default();
            for row in rows {
                kept.entry(row.text_hash).or_insert_with(|| row.vector.clone());
            }
            Ok(())
        })
    }

    async fn load_embeddings(&self, model: &str) -> Result<Vec<EmbeddingRow>, StoreError> {
        self.with(|inner| {
            let kept = inner.embeddings.get(model).into_iter().flatten();
            Ok(kept.map(|(hash, vector)| EmbeddingRow { text_hash: *hash, vector: vector.clone() }).collect())
        })
    }

    async fn load_embeddings_of(&self, model: &str, text_hashes: &[[u8; 16]]) -> Result<Vec<EmbeddingRow>, StoreError> {
        self.with(|inner| {
            let Some(kept) = inner.embeddings.get(model) else { return Ok(Vec::new()) };
            let found = text_hashes.iter().filter_map(|hash| Some((hash, kept.get(hash)?)));
            Ok(found.map(|(hash, vector)| EmbeddingRow { text_hash: *hash, vector: vector.clone() }).collect())
        })
    }

    async fn embedding_models(&self) -> Result<Vec<(String, u64)>, StoreError> {
        self.with(|inner| Ok(inner.embeddings.iter().map(|(model, rows)| (model.clone(), rows.len() as u64)).collect()))
    }

    async fn delete_embeddings(&self, model: &str) -> Result<u64, StoreError> {
        self.write(|inner| Ok(inner.embeddings.remove(model).map_or(0, |rows| rows.len() as u64)))
    }
}

#[async_trait]
impl Store for MemoryStore {
    fn kind(&self) -> &'static str {
        "memory"
    }

    /// Built aside, then swapped in under the lock: all or nothing.
    async fn replace_all(&self, sessions: &[ImportedSession]) -> Result<ImportOutcome, StoreError> {
        check_imports(sessions)?;
        self.write(|inner| {
            let mut fresh = Inner::default();
            let outcome = import_into(&mut fresh, sessions)?;
            // Embeddings are a cache of content, not data: they stay.
            fresh.embeddings = std::mem::take(&mut inner.embeddings);
            *inner = fresh;
            Ok(outcome)
        })
    }
}

/// Writes the sessions not stored yet; fails before writing anything when a version id is taken.
fn import_into(inner: &mut Inner, sessions: &[ImportedSession]) -> Result<ImportOutcome, StoreError> {
    let mut outcome = ImportOutcome::default();
    let fresh: Vec<&ImportedSession> = sessions
        .iter()
        .filter(|s| {
            let exists = inner.sessions.contains_key(&s.row.session_id);
            if exists {
                outcome.skipped.push(s.row.session_id.clone());
            }
            !exists
        })
        .collect();
    for session in &fresh {
        for version in &session.versions {
            if let Some((owner, _)) = inner.version_index.get(&version.row.version_id) {
                return Err(version_taken(&version.row.version_id, owner));
            }
        }
    }
    for session in fresh {
        let id = session.row.session_id.clone();
        let mut data = SessionData {
            row: session.row.clone(),
            versions: Vec::new(),
            snapshots: BTreeMap::from([(0, session.initial_state.clone())]),
        };
        for version in &session.versions {
            if let Some(snapshot) = &version.snapshot {
                data.snapshots.insert(version.row.seq, snapshot.clone());
            }
            let row = VersionRow { has_snapshot: version.snapshot.is_some(), ..version.row.clone() };
            inner.version_index.insert(row.version_id.clone(), (id.clone(), row.seq));
            data.versions.push(StoredVersion { row, delta: version.delta.clone() });
        }
        inner.sessions.insert(id.clone(), data);
        inner.order.push(id.clone());
        outcome.imported.push(id);
    }
    Ok(outcome)
}
