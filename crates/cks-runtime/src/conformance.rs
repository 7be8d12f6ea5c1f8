//! The store conformance suite: one set of checks every [`Store`] implementation must pass, run
//! against the raw store contract and through the [`Runtime`] on top of it.
//!
//! A store under test is given as an `open` function; each call returns a new handle onto the
//! same underlying storage (a clone of the in-memory store, a new connection to the same SQLite
//! file), which is how restarts and competing processes are simulated.

use serde_json::{Map, Value, json};
use std::sync::Arc;

use cks_core::KnowledgeStructure;
use cks_core::json::parse_value;
use cks_core::ops::parse_operations;
use cks_core::text::TextIndex;

use crate::store::{
    ChatRow, EmbeddingRow, GraphRow, Head, ImportedSession, ImportedVersion, NewTask, NewVersion, SessionRow,
    SnapshotDecoder, Store, StoreError, TaskFilter, TaskRef, TaskStatus, VersionRow,
};
use crate::{CommitRequest, MergeReport, NewSession, Runtime, RuntimeConfig, RuntimeError};

/// Opens a handle onto the storage under test.
pub type Open = Arc<dyn Fn() -> Arc<dyn Store> + Send + Sync>;

/// Runs every check; panics (test failure) with a message naming the failing check. The checks
/// go by the store's parts: [`HistoryStore`](crate::store::HistoryStore), then the gallery, task,
/// setting, chat and embedding stores, then the runtime on top, then [`Store`] as a whole.
pub async fn run_all(open: Open) {
    // HistoryStore: sessions, versions, chains, imports.
    store_sessions(open()).await;
    store_compare_and_swap(open()).await;
    store_chains(open()).await;
    store_imports(open()).await;
    // GalleryStore, TaskStore, SettingStore, ChatStore, EmbeddingStore.
    store_graph_registry(open.clone()).await;
    store_task_queue(open.clone()).await;
    store_settings(open.clone()).await;
    store_chats(open.clone()).await;
    store_embeddings(open.clone()).await;
    // The runtime over the whole store.
    runtime_commit_and_reconstruct(open.clone()).await;
    runtime_rejects_bad_input(open()).await;
    runtime_revert_branch_merge(open()).await;
    runtime_restart_sees_everything(open.clone()).await;
    runtime_keeps_text_indexes(open.clone()).await;
    store_vector_indexes(open()).await;
    runtime_concurrent_writers(open.clone()).await;
    runtime_concurrent_shares(open.clone()).await;
    // Last: it backs up everything the checks above left behind, empties the store and restores.
    store_backup_and_restore(open.clone()).await;
}

/// A pending, a claimed and a dead task, and a pipeline run's and a process's records, for the
/// backup to hold.
async fn queue_and_records(store: &dyn Store) {
    for (i, key) in ["backup-pending", "backup-claimed", "backup-dead"].into_iter().enumerate() {
        store.enqueue_task(&new_task(&format!("backup_check_{i}"), "s1", 1_000, Some(key))).await.unwrap();
    }
    let claimed = store.claim_task(Some("backup_check_1"), 2_000, 60_000).await.unwrap().unwrap();
    let dead = store.claim_task(Some("backup_check_2"), 2_000, 60_000).await.unwrap().unwrap();
    assert!(store.dead_letter_task(TaskRef::claimed(&dead), "gave up", Some(3)).await.unwrap());
    assert_eq!(claimed.status, TaskStatus::InProgress);
    store.save_setting("pipeline_run.s1.r1", r#"{"run_id": "r1"}"#).await.unwrap();
    store.save_setting("pipeline_work.s1.r1.Researcher.a", r#"{"unit": "a"}"#).await.unwrap();
    store.save_setting("process.i1", r#"{"instance_id": "i1"}"#).await.unwrap();
    store.save_setting("process_stop.i1", "requested").await.unwrap();
}

async fn store_backup_and_restore(open: Open) {
    use crate::backup::{self, Mode};
    let store = open();
    queue_and_records(&*store).await;
    let mut first = Vec::new();
    let exported = backup::export(&*store, &mut first, true, &mut |_, _| {}).await.unwrap();
    let dump = backup::parse(&first).unwrap();
    assert!(
        exported.sessions > 3
            && exported.versions > 3
            && exported.graphs > 0
            && exported.chats > 0
            && exported.embeddings > 0
            && exported.tasks >= 3
            && exported.records >= 3,
        "{exported:?}"
    );
    assert_eq!((dump.outbox_tasks.len() as u64, dump.records.len() as u64), (exported.tasks, exported.records));
    assert_eq!(dump.sessions.len() as u64, exported.sessions);
    let shared = dump.sessions.iter().any(|s| s.metadata.contains(crate::access::ACCESS_KEY));
    assert!(shared, "a session's owner and shares (its metadata) are backed up");
    assert_eq!(dump.chats.len() as u64, exported.chats);
    let models = store.embedding_models().await.unwrap();
    assert_eq!(dump.embeddings.iter().map(|m| m.rows.len() as u64).sum::<u64>(), exported.embeddings);
    assert_eq!(models.iter().map(|(_, rows)| rows).sum::<u64>(), exported.embeddings);

    // Replacing with nothing empties the store, but for the embeddings (a cache of content).
    store.replace_all(&[]).await.unwrap();
    assert!(store.list_sessions().await.unwrap().is_empty(), "replace_all leaves sessions");
    assert!(store.list_graphs().await.unwrap().is_empty(), "replace_all leaves registry entries");
    assert!(store.list_chats(None, usize::MAX).await.unwrap().is_empty(), "replace_all leaves chats");
    assert_eq!(store.embedding_models().await.unwrap(), models, "replace_all forgot embeddings");
    // Forgotten here, so the restore has them to write.
    for (model, rows) in &models {
        assert_eq!(store.delete_embeddings(model).await.unwrap(), *rows);
    }

    let queue = (&dump.outbox_tasks[..], &dump.records[..]);
    let restored =
        backup::restore(&*store, &dump.sessions, &dump.graphs, &dump.chats, &dump.embeddings, queue, Mode::Clear)
            .await
            .unwrap();
    assert_eq!(
        (restored.sessions, restored.versions, restored.graphs, restored.chats, restored.embeddings),
        (exported.sessions, exported.versions, exported.graphs, exported.chats, exported.embeddings)
    );
    assert_eq!((restored.tasks, restored.records), (exported.tasks, exported.records));
    let mut second = Vec::new();
    backup::export(&*open(), &mut second, true, &mut |_, _| {}).await.unwrap();
    let again = backup::parse(&second).unwrap();
    assert_eq!(again.sessions, dump.sessions, "a restore changed a stored session or version");
    assert_eq!(again.graphs, dump.graphs, "a restore changed the registry");
    assert_eq!(again.chats, dump.chats, "a restore changed a chat");
    assert_eq!(again.embeddings, dump.embeddings, "a restore changed an embedding");
    assert_eq!(again.outbox_tasks, dump.outbox_tasks, "a restore changed a task");
    assert_eq!(again.records, dump.records, "a restore changed a record");
    // A task queued after the restore is numbered after every restored one.
    let highest = dump.outbox_tasks.iter().map(|t| t.task_id).max().unwrap();
    let next = store.enqueue_task(&new_task("backup_check", "s1", 1_000, None)).await.unwrap().unwrap();
    assert!(next > highest, "task id {next} after a restore of ids up to {highest}");
    store.complete_task(TaskRef::any(next)).await.unwrap();

    let merged =
        backup::restore(&*store, &dump.sessions, &dump.graphs, &dump.chats, &dump.embeddings, queue, Mode::Merge)
            .await
            .unwrap();
    assert_eq!(
        (
            merged.sessions,
            merged.versions,
            merged.graphs,
            merged.chats,
            merged.embeddings,
            merged.tasks,
            merged.records
        ),
        (0, 0, 0, 0, 0, 0, 0),
        "merge wrote what was there"
    );
    let kept = exported.sessions + exported.graphs + exported.chats + exported.tasks + exported.records;
    assert_eq!(merged.skipped, kept);
    assert_eq!(store.embedding_models().await.unwrap(), models);

    // A backup from before chats, or embeddings, were stored has none.
    let mut old: serde_json::Value = serde_json::from_slice(&first).unwrap();
    old.as_object_mut().unwrap().remove("chats");
    old.as_object_mut().unwrap().remove("embeddings");
    old.as_object_mut().unwrap().remove("records");
    old["outbox_tasks"] = json!([]);
    let old = backup::parse(old.to_string().as_bytes()).unwrap();
    assert!(old.chats.is_empty() && old.embeddings.is_empty() && old.records.is_empty());

    // Every restored head rebuilds with its stored hashes verified, on a fresh handle (the
    // sessions the runtime wrote; the raw-contract checks store opaque placeholder states).
    let rt = runtime(open());
    for session in dump.sessions.iter().filter(|s| crate::codec::decode_state(&s.initial_state).is_ok()) {
        let count = rt.read(&session.session_id, |s, _| s.len()).await.unwrap();
        let expected = session.versions.last().map(|v| v.object_count);
        if let Some(expected) = expected {
            assert_eq!(count as u64, expected, "session {}", session.session_id);
        }
    }
    assert!(backup::parse(b"{\"version\": 1, \"sessions\": []}").unwrap_err().to_string().contains("Python reference"));
    assert!(backup::parse(b"[]").is_err());
}

fn row(id: &str) -> SessionRow {
    SessionRow {
        session_id: id.into(),
        created_at: "2026-01-01T00:00:00Z".into(),
        parent_session_id: None,
        parent_version_id: None,
        closed: false,
        metadata: "{}".into(),
        snapshot_interval: 10,
        head: Head { seq: 0, version_id: None, state_hash: "h0".into(), object_count: 0 },
    }
}

fn version(id: &str, seq: u64, delta: Option<&str>, snapshot: Option<&str>) -> NewVersion {
    NewVersion {
        session_id: id.into(),
        expected_seq: seq - 1,
        row: VersionRow {
            seq,
            version_id: format!("{id}-v{seq}"),
            transaction_id: format!("{id}-t{seq}"),
            created_at: "2026-01-01T00:00:00Z".into(),
            state_hash: format!("h{seq}"),
            object_count: seq,
            metadata: "{}".into(),
            has_snapshot: snapshot.is_some(),
        },
        delta: delta.map(str::to_owned),
        snapshot: snapshot.map(str::to_owned),
    }
}

async fn store_sessions(store: Arc<dyn Store>) {
    let id = format!("conf-sessions-{}", uuid::Uuid::new_v4());
    assert_eq!(store.load_session(&id).await.unwrap(), None, "unknown session loads as None");
    store.create_session(&row(&id), "S0".into()).await.unwrap();
    assert!(
        matches!(store.create_session(&row(&id), "S0".into()).await, Err(StoreError::SessionExists(_))),
        "creating a session twice fails"
    );
    assert_eq!(store.load_session(&id).await.unwrap(), Some(row(&id)));
    assert!(store.list_sessions().await.unwrap().iter().any(|s| s.session_id == id), "list_sessions lists it");
    assert_eq!(store.head_seq(&id).await.unwrap(), Some(0));
    assert_eq!(store.load_snapshot(&id, 0).await.unwrap().as_deref(), Some("S0"));
    store.set_closed(&id, true).await.unwrap();
    assert!(store.load_session(&id).await.unwrap().unwrap().closed, "set_closed persists");
    assert!(
        matches!(store.append_version(&version(&id, 1, Some("[]"), None)).await, Err(StoreError::SessionClosed(_))),
        "a closed session takes no versions"
    );
    assert!(matches!(store.set_closed("no-such-session", true).await, Err(StoreError::SessionNotFound(_))));
    // Sharing rewrites the metadata; the backup at the end carries it.
    let shared = r#"{"_cks_access":{"owner":{"issuer":"i","subject":"a"},"principals":[],"groups":["lab"]}}"#;
    let before = store.load_session(&id).await.unwrap().unwrap().metadata;
    assert!(store.swap_session_metadata(&id, &before, shared).await.unwrap(), "the swap over the stored text lands");
    assert_eq!(store.load_session(&id).await.unwrap().unwrap().metadata, shared, "swap_session_metadata persists");
    assert!(!store.swap_session_metadata(&id, &before, "{}").await.unwrap(), "a swap over stale text is refused");
    assert_eq!(store.load_session(&id).await.unwrap().unwrap().metadata, shared, "and writes nothing");
    assert!(matches!(
        store.swap_session_metadata("no-such-session", "{}", "{}").await,
        Err(StoreError::SessionNotFound(_))
    ));
    assert!(matches!(store.list_versions("no-such-session").await, Err(StoreError::SessionNotFound(_))));
    assert_eq!(store.head_seq("no-such-session").await.unwrap(), None);
}

fn imported(id: &str, versions: u64, closed: bool) -> ImportedSession {
    let versions: Vec<ImportedVersion> = (1..=versions)
        .map(|seq| {
            let v = version(id, seq, Some("[]"), (seq == 2).then_some("S2"));
            ImportedVersion { row: v.row, delta: v.delta, snapshot: v.snapshot }
        })
        .collect();
    let last = versions.last().map(|v| v.row.clone());
    let mut row = row(id);
    row.closed = closed;
    row.metadata = r#"{"from":"elsewhere"}"#.into();
    if let Some(last) = last {
        row.head = Head {
            seq: last.seq,
            version_id: Some(last.version_id),
            state_hash: last.state_hash,
            object_count: last.seq,
        };
    }
    ImportedSession { row, initial_state: "S0".into(), versions }
}

fn graph(name: &str, session_id: &str, updated_at: &str) -> GraphRow {
    GraphRow {
        name: name.into(),
        session_id: session_id.into(),
        description: format!("about {name}"),
        tags: "a,b".into(),
        created_at: updated_at.into(),
        updated_at: updated_at.into(),
        source_graph_name: None,
        visibility: "private".into(),
        team: None,
        lifecycle_state: None,
    }
}

/// Registry entries: upsert by name with created_at, lineage and lifecycle kept; newest first;
/// removal leaves the session; an unknown session is refused; another handle sees everything.
async fn store_graph_registry(open: Open) {
    let store = open();
    store.create_session(&row("g1"), "{}".into()).await.unwrap();
    store.create_session(&row("g2"), "{}".into()).await.unwrap();

    let first = GraphRow {
        source_graph_name: Some("origin".into()),
        lifecycle_state: Some("published".into()),
        ..graph("alpha", "g1", "2026-01-01T00:00:01Z")
    };
    assert_eq!(store.put_graph(first.clone()).await.unwrap(), first);
    store.put_graph(graph("beta", "g2", "2026-01-01T00:00:02Z")).await.unwrap();
    let names = |rows: Vec<GraphRow>| rows.into_iter().map(|r| r.name).collect::<Vec<_>>();
    assert_eq!(names(store.list_graphs().await.unwrap()), ["beta", "alpha"], "newest first");

    // Re-registering replaces the entry but keeps what the new row leaves unset.
    let again = GraphRow { description: "new".into(), ..graph("alpha", "g2", "2026-01-01T00:00:03Z") };
    let stored = store.put_graph(again).await.unwrap();
    assert_eq!(stored.session_id, "g2");
    assert_eq!(stored.description, "new");
    assert_eq!(stored.created_at, "2026-01-01T00:00:01Z", "created_at is kept");
    assert_eq!(stored.source_graph_name.as_deref(), Some("origin"), "lineage is kept");
    assert_eq!(stored.lifecycle_state.as_deref(), Some("published"), "lifecycle is kept");
    assert_eq!(store.get_graph("alpha").await.unwrap(), Some(stored.clone()));
    assert_eq!(names(store.list_graphs().await.unwrap()), ["alpha", "beta"]);

    // Ties in updated_at are ordered by name.
    store.put_graph(graph("aardvark", "g1", "2026-01-01T00:00:03Z")).await.unwrap();
    assert_eq!(names(store.list_graphs().await.unwrap()), ["aardvark", "alpha", "beta"]);

    let missing = store.put_graph(graph("ghost", "no-such-session", "2026-01-01T00:00:04Z")).await;
    assert!(matches!(missing, Err(StoreError::SessionNotFound(_))), "{missing:?}");
    assert_eq!(store.get_graph("ghost").await.unwrap(), None);

    assert!(store.delete_graph("alpha").await.unwrap());
    assert!(!store.delete_graph("alpha").await.unwrap(), "already gone");
    assert!(store.load_session("g2").await.unwrap().is_some(), "the session stays");
    assert_eq!(store.get_graph("alpha").await.unwrap(), None);

    let other = open();
    assert_eq!(names(other.list_graphs().await.unwrap()), ["aardvark", "beta"], "another handle sees the registry");
}

fn new_task(task_type: &str, session_id: &str, created_at_ms: i64, dedup_key: Option<&str>) -> NewTask {
    NewTask {
        task_type: task_type.into(),
        session_id: session_id.into(),
        payload: json!({"n": created_at_ms}).to_string(),
        dedup_key: dedup_key.map(str::to_owned),
        created_at_ms,
    }
}

async fn store_task_queue(open: Open) {
    let store = open();
    // Other checks may have queued tasks: everything here uses types of its own.
    let (a, b) = ("conformance_a", "conformance_b");
    let first = store.enqueue_task(&new_task(a, "s1", 1_000, Some("finding-1"))).await.unwrap().unwrap();
    let second = store.enqueue_task(&new_task(b, "s2", 1_001, None)).await.unwrap().unwrap();
    let third = store.enqueue_task(&new_task(a, "s1", 1_002, None)).await.unwrap().unwrap();
    assert!(first < second && second < third, "task ids increase");
    assert_eq!(
        store.enqueue_task(&new_task(a, "s1", 1_003, Some("finding-1"))).await.unwrap(),
        None,
        "a finding already queued is not queued again"
    );

    // Oldest claimable first; a task is not claimable before its time.
    let claimed = store.claim_task(Some(a), 1_000, 100).await.unwrap().expect("the first task");
    assert_eq!((claimed.task_id, claimed.status, claimed.claimed_at_ms), (first, TaskStatus::InProgress, Some(1_000)));
    assert_eq!(claimed.payload, json!({"n": 1_000}).to_string());
    assert!(store.claim_task(Some(a), 1_000, 100).await.unwrap().is_none(), "the third is not due yet");
    assert_eq!(store.claim_task(Some(b), 1_001, 100).await.unwrap().unwrap().task_id, second);

    // A lease that expired makes the task claimable again; the old holder's claim no longer holds.
    assert_eq!(store.claim_task(Some(a), 1_099, 100).await.unwrap().unwrap().task_id, third);
    let retaken = store.claim_task(Some(a), 1_100, 100).await.unwrap().expect("the expired claim");
    assert_eq!((retaken.task_id, retaken.claimed_at_ms), (first, Some(1_100)));
    assert!(!store.complete_task(TaskRef::claimed(&claimed)).await.unwrap(), "an expired claim cannot complete");
    assert!(!store.renew_task(TaskRef::claimed(&claimed), 1_150).await.unwrap());
    assert!(store.renew_task(TaskRef::claimed(&retaken), 1_150).await.unwrap());
    let next = store.claim_task(Some(a), 1_200, 100).await.unwrap().map(|t| t.task_id);
    assert_eq!(next, Some(third), "the renewed claim holds while the third's expired");
    assert!(store.complete_task(TaskRef::any(third)).await.unwrap());
    let renewed = TaskRef { task_id: first, claimed_at_ms: Some(1_150) };

    // A failure puts it back with its count, error and retry time.
    assert!(store.fail_task(renewed, 1, "provider timed out", 5_000).await.unwrap());
    let failed = store.get_task(first).await.unwrap().unwrap();
    assert_eq!(
        (
            failed.status,
            failed.retry_count,
            failed.last_error.as_deref(),
            failed.next_retry_at_ms,
            failed.claimed_at_ms
        ),
        (TaskStatus::Pending, 1, Some("provider timed out"), 5_000, None)
    );
    assert!(store.claim_task(Some(a), 4_999, 100).await.unwrap().is_none());
    let again = store.claim_task(Some(a), 5_000, 100).await.unwrap().unwrap();
    assert_eq!((again.task_id, again.retry_count), (first, 1));

    // Dead letters are kept, never claimed, still block their finding, and can be retried.
    assert!(store.dead_letter_task(TaskRef::claimed(&again), "gave up", Some(2)).await.unwrap());
    assert!(store.claim_task(Some(a), i64::MAX / 2, 100).await.unwrap().map(|t| t.task_id) != Some(first));
    let dead = store
        .list_tasks(&TaskFilter { status: Some(TaskStatus::Dead), task_type: Some(a.into()), ..Default::default() })
        .await
        .unwrap();
    assert_eq!(
        dead.iter().map(|t| (t.task_id, t.last_error.as_deref(), t.retry_count)).collect::<Vec<_>>(),
        [(first, Some("gave up"), 2)]
    );
    assert_eq!(store.enqueue_task(&new_task(a, "s1", 6_000, Some("finding-1"))).await.unwrap(), None);
    assert!(!store.retry_dead_task(second, 6_000).await.unwrap(), "only a dead task is retried");
    // A restart sees the same queue.
    let store = open();
    assert!(store.retry_dead_task(first, 6_000).await.unwrap());
    let retried = store.get_task(first).await.unwrap().unwrap();
    assert_eq!((retried.status, retried.retry_count, retried.last_error), (TaskStatus::Pending, 0, None));

    // Completing deletes the task and frees its finding.
    assert!(store.complete_task(TaskRef::any(first)).await.unwrap());
    assert!(store.get_task(first).await.unwrap().is_none());
    assert!(!store.complete_task(TaskRef::any(first)).await.unwrap());
    assert!(store.enqueue_task(&new_task(a, "s1", 7_000, Some("finding-1"))).await.unwrap().is_some());

    let of_s2 = store
        .list_tasks(&TaskFilter { session_id: Some("s2".into()), task_type: Some(b.into()), ..Default::default() })
        .await
        .unwrap();
    assert_eq!(of_s2.iter().map(|t| t.task_id).collect::<Vec<_>>(), [second]);

    // Concurrent claimers on separate handles never share a task.
    let c = "conformance_c";
    let mut queued = Vec::new();
    for n in 0..40 {
        queued.push(store.enqueue_task(&new_task(c, "s3", 10_000 + n, None)).await.unwrap().unwrap());
    }
    let claimers = (0..6).map(|_| {
        let store = open();
        tokio::spawn(async move {
            let mut mine = Vec::new();
            while let Some(task) = store.claim_task(Some(c), 20_000, 60_000).await.unwrap() {
                mine.push(task.task_id);
            }
            mine
        })
    });
    let mut claimed: Vec<i64> = futures_join(claimers).await.into_iter().flatten().collect();
    claimed.sort_unstable();
    assert_eq!(claimed, queued, "every task claimed exactly once");
    for task_id in queued {
        assert!(store.complete_task(TaskRef::any(task_id)).await.unwrap());
    }
}

async fn store_settings(open: Open) {
    let store = open();
    assert_eq!(store.load_setting("conformance.flag").await.unwrap(), None);
    store.save_setting("conformance.flag", "off").await.unwrap();
    store.save_setting("conformance.flag", "on").await.unwrap();
    // Another handle (a restart, another process) reads what was saved last.
    assert_eq!(open().load_setting("conformance.flag").await.unwrap().as_deref(), Some("on"));
    assert_eq!(store.load_setting("replica_id").await.unwrap(), None, "settings are apart from the store's own keys");

    // Listed by prefix, sorted by key; deleted one by one.
    let prefix = format!("conformance.list-{}.", uuid::Uuid::new_v4());
    for (key, value) in [("b", "2"), ("a", "1"), ("a.x", "3")] {
        store.save_setting(&format!("{prefix}{key}"), value).await.unwrap();
    }
    store.save_setting("conformance.elsewhere", "x").await.unwrap();
    let listed = open().list_settings(&prefix).await.unwrap();
    let expected: Vec<(String, String)> =
        [("a", "1"), ("a.x", "3"), ("b", "2")].iter().map(|(k, v)| (format!("{prefix}{k}"), (*v).to_owned())).collect();
    assert_eq!(listed, expected);
    assert!(store.delete_setting(&format!("{prefix}a")).await.unwrap());
    assert!(!store.delete_setting(&format!("{prefix}a")).await.unwrap(), "already gone");
    assert_eq!(store.list_settings(&prefix).await.unwrap().len(), 2);
    assert_eq!(store.list_settings("conformance.no-such-prefix.").await.unwrap(), []);

    // The first value saved stays, whoever asks later.
    let key = format!("conformance.once-{}", uuid::Uuid::new_v4());
    assert_eq!(store.setting_or_insert(&key, "first").await.unwrap(), "first");
    assert_eq!(open().setting_or_insert(&key, "second").await.unwrap(), "first");
    assert_eq!(store.load_setting(&key).await.unwrap().as_deref(), Some("first"));
}

/// Embeddings: saved and loaded back by (model, hash); a hash already kept keeps its first vector
/// and is counted once; models are apart, counted and ordered by name; a model is forgotten whole
/// and alone; an empty save and a save of thousands are fine; another handle sees everything.
/// Two models are left for the backup check.
async fn store_embeddings(open: Open) {
    let store = open();
    // Other checks may have left embeddings: every model here is one of this run's, and sorts as
    // its name says ("a" < "b" < "big").
    let unique = uuid::Uuid::new_v4();
    let model = |name: &str| format!("conf-embeddings-{unique}-{name}");
    let (a, b, big) = (model("a"), model("b"), model("big"));
    let mine = |models: Vec<(String, u64)>| -> Vec<(String, u64)> {
        models.into_iter().filter(|(name, _)| name.starts_with(&model(""))).collect()
    };
    // Hashes that differ in their first and last bytes, so no store can get by on either alone.
    let hash = |n: u32| {
        let mut hash = [0u8; 16];
        hash[..4].copy_from_slice(&n.wrapping_mul(0x9e37_79b9).to_be_bytes());
        hash[12..].copy_from_slice(&n.to_le_bytes());
        hash
    };
    let row = |n: u32, fill: u8| EmbeddingRow { text_hash: hash(n), vector: vec![fill; 3 + n as usize % 5] };
    let sorted = |mut rows: Vec<EmbeddingRow>| {
        rows.sort_by_key(|row| row.text_hash);
        rows
    };

    store.save_embeddings(&a, &[]).await.unwrap();
    assert_eq!(store.load_embeddings(&a).await.unwrap(), [], "an empty save keeps nothing");
    assert_eq!(mine(store.embedding_models().await.unwrap()), [], "an empty save makes no model");

    let first = sorted(vec![row(1, 1), row(2, 2), row(3, 3), EmbeddingRow { text_hash: hash(5), vector: vec![] }]);
    store.save_embeddings(&a, &first).await.unwrap();
    assert_eq!(sorted(store.load_embeddings(&a).await.unwrap()), first, "saved rows load back as saved");
    assert_eq!(
        sorted(store.load_embeddings_of(&a, &[hash(3), hash(9), hash(1)]).await.unwrap()),
        [row(1, 1), row(3, 3)],
        "rows asked for by hash: those kept"
    );
    assert_eq!(store.load_embeddings_of(&b, &[hash(1)]).await.unwrap(), [], "another model's are not these");

    // A hash kept already keeps its vector; a hash given twice in one save keeps the first.
    store.save_embeddings(&a, &[row(2, 9), row(4, 4), row(4, 8)]).await.unwrap();
    let kept = sorted([first.clone(), vec![row(4, 4)]].concat());
    assert_eq!(sorted(open().load_embeddings(&a).await.unwrap()), kept, "another handle sees the first vectors");

    // Models are apart: one hash under two models holds two vectors.
    store.save_embeddings(&b, &[row(1, 7)]).await.unwrap();
    assert_eq!(store.load_embeddings(&b).await.unwrap(), [row(1, 7)]);
    assert_eq!(sorted(store.load_embeddings(&a).await.unwrap()), kept, "a save under b changed a");
    assert_eq!(store.load_embeddings(&model("none")).await.unwrap(), [], "a model never saved has no rows");

    // Thousands of rows in one save.
    let many: Vec<EmbeddingRow> =
        (0..5_000u32).map(|n| EmbeddingRow { text_hash: hash(n), vector: n.to_le_bytes().repeat(16) }).collect();
    store.save_embeddings(&big, &many).await.unwrap();
    assert_eq!(sorted(open().load_embeddings(&big).await.unwrap()), sorted(many), "a large save round-trips");

    // Long rows, as the runtime keeps text keys (1 MiB of them to a row).
    let long: Vec<EmbeddingRow> = (0..2u32)
        .map(|n| EmbeddingRow {
            text_hash: hash(1_000_000 + n),
            vector: (0..1 << 20).map(|i| (i * 7 + n) as u8).collect(),
        })
        .collect();
    store.save_embeddings(&big, &long).await.unwrap();
    let read = open().load_embeddings(&big).await.unwrap();
    assert_eq!(read.len(), 5_002);
    assert!(long.iter().all(|row| read.contains(row)), "a long row round-trips");

    let counted = |rows: &[(&String, u64)]| rows.iter().map(|(m, n)| ((*m).clone(), *n)).collect::<Vec<_>>();
    assert_eq!(mine(open().embedding_models().await.unwrap()), counted(&[(&a, 5), (&b, 1), (&big, 5_002)]));

    assert_eq!(store.delete_embeddings(&big).await.unwrap(), 5_002, "a delete counts the rows removed");
    assert_eq!(store.delete_embeddings(&big).await.unwrap(), 0, "already gone");
    assert_eq!(store.load_embeddings(&big).await.unwrap(), []);
    assert_eq!(mine(store.embedding_models().await.unwrap()), counted(&[(&a, 5), (&b, 1)]));
    assert_eq!(sorted(store.load_embeddings(&a).await.unwrap()), kept, "a delete touched another model");
}

fn chat(chat_id: &str, session_id: &str, updated_at: &str, messages: u64) -> ChatRow {
    ChatRow {
        chat_id: chat_id.into(),
        session_id: session_id.into(),
        title: format!("about {chat_id}"),
        messages: json!((0..messages).map(|n| json!({"role": "user", "content": format!("m{n}")})).collect::<Vec<_>>())
            .to_string(),
        message_count: messages,
        tool_calls: json!([{"turn": 1, "tool_calls": []}]).to_string(),
        created_at: "2026-01-01T00:00:00.000000Z".into(),
        updated_at: updated_at.into(),
        revision: 1,
    }
}

/// Chats: created once, replaced only from the revision stored (and only by one of concurrent
/// writers), listed newest first without their contents, deleted; a chat needs its session;
/// another handle sees everything. Some are left for the backup check.
async fn store_chats(open: Open) {
    let store = open();
    let unique = uuid::Uuid::new_v4();
    let (s1, s2) = (format!("conf-chats-1-{unique}"), format!("conf-chats-2-{unique}"));
    store.create_session(&row(&s1), "{}".into()).await.unwrap();
    store.create_session(&row(&s2), "{}".into()).await.unwrap();
    let id = |n: u32| format!("conf-chat-{n}-{unique}");

    let first = chat(&id(1), &s1, "2026-01-01T00:00:01.000000Z", 2);
    assert!(store.save_chat(&first, None).await.unwrap(), "a new chat is saved");
    assert!(!store.save_chat(&first, None).await.unwrap(), "a chat id is created once");
    assert_eq!(store.load_chat(&id(1)).await.unwrap(), Some(first.clone()), "the row is stored as given");
    assert_eq!(store.load_chat("conf-no-such-chat").await.unwrap(), None);

    // Replaced only from the revision stored, within its session.
    let second =
        ChatRow { revision: 2, message_count: 4, updated_at: "2026-01-01T00:00:03.000000Z".into(), ..first.clone() };
    assert!(!store.save_chat(&second, Some(2)).await.unwrap(), "revision 2 is not stored yet");
    let moved = ChatRow { session_id: s2.clone(), ..second.clone() };
    assert!(!store.save_chat(&moved, Some(1)).await.unwrap(), "a chat stays in its session");
    assert!(store.save_chat(&second, Some(1)).await.unwrap());
    assert!(!store.save_chat(&ChatRow { revision: 3, ..second.clone() }, Some(1)).await.unwrap(), "1 is gone");
    assert!(!store.save_chat(&chat(&id(9), &s1, "x", 0), Some(1)).await.unwrap(), "no chat to replace");
    assert_eq!(store.load_chat(&id(9)).await.unwrap(), None);
    assert_eq!(open().load_chat(&id(1)).await.unwrap(), Some(second.clone()), "another handle sees the save");

    let missing = store.save_chat(&chat(&id(8), "conf-no-such-session", "x", 0), None).await;
    assert!(matches!(missing, Err(StoreError::SessionNotFound(_))), "{missing:?}");
    assert_eq!(store.load_chat(&id(8)).await.unwrap(), None);

    // Listed most recently updated first (ties by id), without contents, per session or all.
    store.save_chat(&chat(&id(2), &s1, "2026-01-01T00:00:02.000000Z", 1), None).await.unwrap();
    store.save_chat(&chat(&id(3), &s1, "2026-01-01T00:00:02.000000Z", 1), None).await.unwrap();
    store.save_chat(&chat(&id(4), &s2, "2026-01-01T00:00:05.000000Z", 3), None).await.unwrap();
    let ids = |rows: Vec<crate::store::ChatSummary>| rows.into_iter().map(|r| r.chat_id).collect::<Vec<_>>();
    assert_eq!(ids(store.list_chats(Some(&s1), 10).await.unwrap()), [id(1), id(2), id(3)]);
    assert_eq!(ids(store.list_chats(Some(&s1), 2).await.unwrap()), [id(1), id(2)], "at most limit");
    assert_eq!(store.list_chats(Some(&s1), 0).await.unwrap(), []);
    let listed = open().list_chats(Some(&s1), 1).await.unwrap();
    assert_eq!(listed, [second.summary()], "a summary: count, times and revision, no contents");
    let everywhere = ids(store.list_chats(None, usize::MAX).await.unwrap());
    let mine: Vec<String> = everywhere.into_iter().filter(|c| c.ends_with(&unique.to_string())).collect();
    assert_eq!(mine, [id(4), id(1), id(2), id(3)], "without a session: every session's chats");
    assert_eq!(store.list_chats(Some("conf-no-such-session"), 10).await.unwrap(), []);

    // Of concurrent saves from one revision, on separate handles, exactly one is kept.
    let racers = (0..6u64).map(|n| {
        let store = open();
        let row = ChatRow { revision: 3, message_count: 10 + n, ..second.clone() };
        tokio::spawn(async move { store.save_chat(&row, Some(2)).await.unwrap().then_some(10 + n) })
    });
    let won: Vec<u64> = futures_join(racers).await.into_iter().flatten().collect();
    assert_eq!(won.len(), 1, "one save wins: {won:?}");
    let stored = store.load_chat(&id(1)).await.unwrap().unwrap();
    assert_eq!((stored.revision, stored.message_count), (3, won[0]), "and it is the one stored");

    assert!(store.delete_chat(&id(2)).await.unwrap());
    assert!(!store.delete_chat(&id(2)).await.unwrap(), "already gone");
    assert_eq!(open().load_chat(&id(2)).await.unwrap(), None);
    assert!(store.load_session(&s1).await.unwrap().is_some(), "the session stays");
}

async fn store_imports(store: Arc<dyn Store>) {
    let (a, b) = (format!("conf-import-a-{}", uuid::Uuid::new_v4()), format!("conf-import-b-{}", uuid::Uuid::new_v4()));
    let outcome = store.import_sessions(&[imported(&a, 3, true), imported(&b, 0, false)]).await.unwrap();
    assert_eq!((outcome.imported, outcome.skipped), (vec![a.clone(), b.clone()], vec![]), "both sessions imported");
    let stored = store.load_session(&a).await.unwrap().expect("imported session loads");
    assert_eq!(stored, imported(&a, 3, true).row, "the session row is kept as given (closed, metadata, head)");
    let versions = store.list_versions(&a).await.unwrap();
    assert_eq!(
        versions.iter().map(|v| v.version_id.as_str()).collect::<Vec<_>>(),
        [format!("{a}-v1"), format!("{a}-v2"), format!("{a}-v3")]
    );
    assert!(versions[1].has_snapshot, "snapshots are marked");
    assert_eq!(store.find_version(&format!("{a}-v3")).await.unwrap(), Some((a.clone(), 3)));
    let chain = store.load_chain(&a, 3).await.unwrap();
    assert_eq!((chain.snapshot_seq, chain.snapshot.as_str(), chain.versions.len()), (2, "S2", 1));
    assert_eq!(store.load_snapshot(&b, 0).await.unwrap().as_deref(), Some("S0"));

    let again = store.import_sessions(&[imported(&a, 3, true)]).await.unwrap();
    assert_eq!((again.imported, again.skipped), (vec![], vec![a.clone()]), "a second import skips what exists");

    // A version id already stored (in session a) makes the whole import fail, writing nothing.
    let c = format!("conf-import-c-{}", uuid::Uuid::new_v4());
    let mut clash = imported(&format!("{c}-other"), 1, false);
    clash.versions[0].row.version_id = format!("{a}-v1");
    clash.row.head.version_id = Some(format!("{a}-v1"));
    let err = store.import_sessions(&[imported(&c, 2, false), clash]).await.unwrap_err();
    assert!(matches!(err, StoreError::Corrupt(ref m) if m.contains("already exists")), "{err}");
    assert_eq!(store.load_session(&c).await.unwrap(), None, "nothing of a failed import is written");
    assert_eq!(store.find_version(&format!("{c}-v1")).await.unwrap(), None);

    let mut gap = imported(&c, 2, false);
    gap.versions.remove(0);
    assert!(matches!(store.import_sessions(&[gap]).await, Err(StoreError::Corrupt(_))), "versions must be 1..=n");
}

async fn store_compare_and_swap(store: Arc<dyn Store>) {
    let id = format!("conf-cas-{}", uuid::Uuid::new_v4());
    store.create_session(&row(&id), "S0".into()).await.unwrap();
    store.append_version(&version(&id, 1, Some("[]"), None)).await.unwrap();
    // A writer that still believes the head is 0 loses.
    let mut stale = version(&id, 1, Some("[]"), None);
    stale.row.version_id = format!("{id}-stale");
    match store.append_version(&stale).await {
        Err(StoreError::Conflict { expected: 0, found: 1, .. }) => {}
        other => panic!("stale append must be a conflict, got {other:?}"),
    }
    // A version id may not be reused; nothing is half-written when that happens.
    let mut dup = version(&id, 2, Some("[]"), Some("S2"));
    dup.row.version_id = format!("{id}-v1");
    assert!(store.append_version(&dup).await.is_err(), "duplicate version id is refused");
    assert_eq!(store.head_seq(&id).await.unwrap(), Some(1), "failed append leaves the head alone");
    assert_eq!(store.load_snapshot(&id, 2).await.unwrap(), None, "failed append leaves no snapshot");
    assert_eq!(store.list_versions(&id).await.unwrap().len(), 1);
    assert!(store.append_version(&version(&id, 2, None, None)).await.is_err(), "a version needs a payload");
    store.append_version(&version(&id, 2, Some("[2]"), Some("S2"))).await.unwrap();
    let head = store.load_session(&id).await.unwrap().unwrap().head;
    assert_eq!(head, Head { seq: 2, version_id: Some(format!("{id}-v2")), state_hash: "h2".into(), object_count: 2 });
    assert_eq!(store.find_version(&format!("{id}-v2")).await.unwrap(), Some((id.clone(), 2)));
    assert_eq!(store.find_version("nope").await.unwrap(), None);
    assert!(
        matches!(
            store.append_version(&version("no-such-session", 1, Some("[]"), None)).await,
            Err(StoreError::SessionNotFound(_))
        ),
        "append to an unknown session"
    );

    // Racing writers with the same expectation: exactly one wins.
    let racers = (0..8).map(|i| {
        let store = store.clone();
        let mut v = version(&id, 3, Some("[]"), None);
        v.row.version_id = format!("{id}-race-{i}");
        tokio::spawn(async move { store.append_version(&v).await })
    });
    let results: Vec<_> = futures_join(racers).await;
    let winners = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(winners, 1, "exactly one racing append wins");
    assert!(results.iter().filter(|r| r.is_err()).all(|r| matches!(r, Err(StoreError::Conflict { .. }))));
}

async fn futures_join<T: Send + 'static>(handles: impl Iterator<Item = tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::new();
    for handle in handles.collect::<Vec<_>>() {
        out.push(handle.await.expect("task panicked"));
    }
    out
}

async fn store_chains(store: Arc<dyn Store>) {
    let id = format!("conf-chain-{}", uuid::Uuid::new_v4());
    store.create_session(&row(&id), "S0".into()).await.unwrap();
    for seq in 1..=7 {
        let snapshot = (seq == 4).then_some("S4");
        store.append_version(&version(&id, seq, Some(&format!("[{seq}]")), snapshot)).await.unwrap();
    }
    let chain = store.load_chain(&id, 3).await.unwrap();
    assert_eq!((chain.snapshot_seq, chain.snapshot.as_str()), (0, "S0"));
    assert_eq!(chain.versions.iter().map(|v| v.row.seq).collect::<Vec<_>>(), [1, 2, 3]);
    let chain = store.load_chain(&id, 6).await.unwrap();
    assert_eq!((chain.snapshot_seq, chain.snapshot.as_str()), (4, "S4"));
    assert_eq!(chain.versions.iter().map(|v| v.row.seq).collect::<Vec<_>>(), [5, 6]);
    assert_eq!(chain.versions[0].delta.as_deref(), Some("[5]"));
    let chain = store.load_chain(&id, 4).await.unwrap();
    assert!(chain.versions.is_empty());
    assert!(store.load_chain(&id, 8).await.is_err(), "no chain beyond the head");
    // Decoded where it is read: the decoder reads the snapshot's text, its error is the load's.
    let decode = || -> SnapshotDecoder {
        Box::new(|reader| {
            let mut text = String::new();
            reader.read_to_string(&mut text).map_err(|e| StoreError::Backend(e.to_string()))?;
            match text.as_str() {
                "S4" => Ok(small_graph()),
                other => Err(StoreError::Corrupt(format!("cannot decode {other}"))),
            }
        })
    };
    let chain = store.load_chain_decoded(&id, 6, decode()).await.unwrap();
    assert_eq!((chain.snapshot_seq, chain.snapshot.root_hash()), (4, small_graph().root_hash()));
    assert_eq!(chain.versions.iter().map(|v| v.row.seq).collect::<Vec<_>>(), [5, 6]);
    let failed = store.load_chain_decoded(&id, 3, decode()).await.map(|_| ());
    assert!(matches!(&failed, Err(StoreError::Corrupt(e)) if e == "cannot decode S0"), "{failed:?}");
    assert!(store.load_chain_decoded(&id, 8, decode()).await.is_err(), "no chain beyond the head");
    let after = store.load_versions_after(&id, 5).await.unwrap();
    assert_eq!(after.iter().map(|v| v.row.seq).collect::<Vec<_>>(), [6, 7]);
    let listed = store.list_versions(&id).await.unwrap();
    assert_eq!(
        listed.iter().map(|v| v.has_snapshot).collect::<Vec<_>>(),
        [false, false, false, true, false, false, false]
    );
}

fn structure(value: Value) -> KnowledgeStructure {
    parse_value(value).expect("test structure parses")
}

fn small_graph() -> KnowledgeStructure {
    structure(json!({"version": "1.0", "objects": [
        {"identity": {"id": "a", "type": "Claim", "name": "A"}, "structure": {"n": 1}},
        {"identity": {"id": "b", "type": "Claim", "name": "B"}},
        {"identity": {"id": "r", "type": "Relation", "name": "a derives b"},
         "structure": {"participants": ["a", "b"], "relation_type": "derives"}}
    ]}))
}

fn ops(value: Value) -> CommitRequest {
    CommitRequest::operations(parse_operations(&value).expect("test operations parse"))
}

fn add(id: &str) -> Value {
    json!({"type": "add_object", "identity": {"id": id, "type": "Node", "name": id}})
}

fn runtime(store: Arc<dyn Store>) -> Runtime {
    Runtime::new(store, RuntimeConfig { snapshot_interval: 3, ..Default::default() })
}

async fn runtime_commit_and_reconstruct(open: Open) {
    let rt = runtime(open());
    let mut events = rt.subscribe();
    let info = rt.create_session(small_graph(), NewSession::default()).await.unwrap();
    let id = info.session_id;
    assert_eq!(info.version_count, 0);
    let mut expected_states = vec![rt.read(&id, |s, _| s.clone()).await.unwrap()];
    let mut version_ids = Vec::new();
    for i in 0..12 {
        let request = match i % 3 {
            0 => ops(json!([add(&format!("n{i}"))])),
            1 => ops(json!([{"type": "update_object", "object_id": "a", "structure_patch": {"n": i}}])),
            _ => ops(json!([{"type": "remove_object", "object_id": format!("n{}", i - 2)}])),
        };
        let committed = rt.commit(&id, request.with_metadata(Map::from_iter([("i".into(), json!(i))]))).await.unwrap();
        assert_eq!(committed.version.seq, i + 1);
        version_ids.push(committed.version.version_id);
        expected_states.push(rt.read(&id, |s, _| s.clone()).await.unwrap());
    }
    let versions = rt.list_versions(&id).await.unwrap();
    assert_eq!(versions.iter().map(|v| v.version_id.clone()).collect::<Vec<_>>(), version_ids);
    assert_eq!(versions[4].metadata["i"], json!(4));
    assert!(versions.iter().any(|v| v.is_snapshot), "snapshots are taken on a small graph");
    assert!(versions.iter().any(|v| !v.is_snapshot), "deltas between snapshots");
    for (i, version_id) in version_ids.iter().enumerate() {
        let state = rt.version_state(&id, version_id).await.unwrap();
        assert_eq!(state, expected_states[i + 1], "reconstructed version #{} matches what was committed", i + 1);
    }
    // Events: created, then per commit VersionCreated + TransactionCommitted.
    let first = events.recv().await.unwrap();
    assert_eq!(first.kind.event_type(), "SessionCreated");
    let second = events.recv().await.unwrap();
    assert_eq!(second.kind.event_type(), "VersionCreated");
    assert_eq!(events.recv().await.unwrap().kind.event_type(), "TransactionCommitted");
}

async fn runtime_rejects_bad_input(store: Arc<dyn Store>) {
    let rt = runtime(store);
    let id = rt.create_session(small_graph(), NewSession::default()).await.unwrap().session_id;
    let before = rt.read(&id, |s, _| s.clone()).await.unwrap();
    let mut events = rt.subscribe();
    let cases = [
        (
            json!([{"type": "add_relation", "identity": {"id": "x", "type": "Relation", "name": ""},
                 "participants": ["a", "ghost"], "relation_type": "t"}]),
            "invalid_operations",
        ),
        (
            json!([{"type": "add_relation", "identity": {"id": "x", "type": "Relation", "name": ""},
                 "participants": ["b", "a"], "relation_type": "derives"}]),
            "validation_failed",
        ),
        (
            json!([{"type": "add_relation", "identity": {"id": "x", "type": "Relation", "name": ""},
                 "participants": ["a", "b", "a"], "relation_type": "derives"}]),
            "validation_failed",
        ),
        (json!([{"type": "teleport"}]), "parse"),
    ];
    for (operations, expected) in cases {
        let outcome = match parse_operations(&operations) {
            Err(_) => "parse".to_owned(),
            Ok(parsed) => rt.commit(&id, CommitRequest::operations(parsed)).await.unwrap_err().code().to_owned(),
        };
        assert_eq!(outcome, expected, "{operations}");
    }
    assert_eq!(rt.read(&id, |s, _| s.clone()).await.unwrap(), before, "failed commits change nothing");
    assert!(rt.list_versions(&id).await.unwrap().is_empty(), "failed commits add no version");
    // Each commit validation refused: rolled back, then ValidationFailed naming the codes.
    let mut refused = Vec::new();
    while let Ok(event) = events.try_recv() {
        if let crate::events::EventKind::ValidationFailed { session_id, message, .. } = event.kind {
            assert_eq!(session_id, id);
            refused.push(message);
        }
    }
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert!(refused[0].starts_with("Validation failed: ") && refused[0].contains("CKS-SEM-CYCLE"), "{refused:?}");
    let cyclic = structure(json!({"objects": [
        {"identity": {"id": "a", "type": "T", "name": ""}},
        {"identity": {"id": "r", "type": "Relation", "name": ""}, "structure": {"participants": ["a", "a"], "relation_type": "derives"}}
    ]}));
    assert_eq!(rt.create_session(cyclic, NewSession::default()).await.unwrap_err().code(), "validation_failed");
    assert_eq!(rt.info("no-such-session").await.unwrap_err().code(), "session_not_found");
    rt.close(&id).await.unwrap();
    assert_eq!(rt.commit(&id, ops(json!([add("z")]))).await.unwrap_err().code(), "session_closed");
    assert!(rt.info(&id).await.unwrap().closed);
}

async fn runtime_revert_branch_merge(store: Arc<dyn Store>) {
    let rt = runtime(store);
    let id = rt
        .create_session(small_graph(), NewSession { first_version: Some(Map::new()), ..Default::default() })
        .await
        .unwrap()
        .session_id;
    let v1 = rt.list_versions(&id).await.unwrap()[0].version_id.clone();
    rt.commit(&id, ops(json!([add("c")]))).await.unwrap();
    let reverted = rt.revert(&id, &v1, Map::new()).await.unwrap();
    assert_eq!(reverted.version.seq, 3, "revert appends a version");
    assert_eq!(reverted.version.metadata["reverted_to"], json!(v1));
    assert_eq!(rt.read(&id, |s, _| s.clone()).await.unwrap(), small_graph());
    assert_eq!(rt.list_versions(&id).await.unwrap().len(), 3, "history never shrinks");
    assert_eq!(rt.revert(&id, "no-such-version", Map::new()).await.unwrap_err().code(), "version_not_found");

    // Branch, change both sides differently, merge back.
    let branch = rt.create_branch(&id, None, Map::new()).await.unwrap();
    assert_eq!(branch.parent_session_id.as_deref(), Some(id.as_str()));
    assert_eq!(branch.parent_version_id, Some(reverted.version.version_id.clone()));
    rt.commit(&branch.session_id, ops(json!([add("from-branch")]))).await.unwrap();
    rt.commit(&id, ops(json!([add("from-main")]))).await.unwrap();
    let report = rt.merge_branch(&id, &branch.session_id, None, &Default::default(), Map::new()).await.unwrap();
    let MergeReport::Merged { committed, changed: true, .. } = report else { panic!("merge commits: {report:?}") };
    assert_eq!(committed.version.metadata["operation"], json!("merge"));
    let ids: Vec<String> = rt.read(&id, |s, _| s.ids().map(str::to_owned).collect()).await.unwrap();
    assert!(ids.contains(&"from-branch".to_owned()) && ids.contains(&"from-main".to_owned()), "{ids:?}");

    // Conflicting edits are reported, not committed.
    let branch2 = rt.create_branch(&id, None, Map::new()).await.unwrap().session_id;
    let patch = |n: i64| ops(json!([{"type": "update_object", "object_id": "a", "structure_patch": {"n": n}}]));
    rt.commit(&branch2, patch(100)).await.unwrap();
    rt.commit(&id, patch(200)).await.unwrap();
    let versions_before = rt.list_versions(&id).await.unwrap().len();
    match rt.merge_branch(&id, &branch2, None, &Default::default(), Map::new()).await.unwrap() {
        MergeReport::Conflicts(conflicts) => assert_eq!(conflicts[0].object_id, "a"),
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(rt.list_versions(&id).await.unwrap().len(), versions_before, "a conflicted merge commits nothing");
    let unrelated = rt.create_session(small_graph(), NewSession::default()).await.unwrap().session_id;
    assert_eq!(
        rt.merge_branch(&id, &unrelated, None, &Default::default(), Map::new()).await.unwrap_err().code(),
        "merge_failed"
    );
}

async fn runtime_restart_sees_everything(open: Open) {
    let (id, closed_id, expected, versions) = {
        let rt = runtime(open());
        let id = rt.create_session(small_graph(), NewSession::default()).await.unwrap().session_id;
        for i in 0..7 {
            rt.commit(&id, ops(json!([add(&format!("k{i}"))]))).await.unwrap();
        }
        let closed_id = rt.create_session(small_graph(), NewSession::default()).await.unwrap().session_id;
        rt.close(&closed_id).await.unwrap();
        (id.clone(), closed_id, rt.read(&id, |s, _| s.clone()).await.unwrap(), rt.list_versions(&id).await.unwrap())
    };
    let rt = runtime(open());
    assert_eq!(rt.loaded_sessions(), 0, "nothing is loaded at start-up");
    assert_eq!(rt.read(&id, |s, _| s.clone()).await.unwrap(), expected);
    assert_eq!(rt.list_versions(&id).await.unwrap(), versions);
    assert!(rt.info(&closed_id).await.unwrap().closed);
    // A session closed by another process refuses this process's commits too.
    let other = runtime(open());
    let id2 = rt.create_session(small_graph(), NewSession::default()).await.unwrap().session_id;
    rt.read(&id2, |_, _| ()).await.unwrap();
    other.close(&id2).await.unwrap();
    assert_eq!(rt.commit(&id2, ops(json!([add("late")]))).await.unwrap_err().code(), "session_closed");
    let listed = rt.list_sessions().await.unwrap();
    assert!(listed.iter().any(|s| s.session_id == id && s.version_count == 7));
}

/// A store that keeps text indexes keeps a searched session's, and the next process loads the
/// session with it, equal to one built; a later version's index replaces an earlier one's,
/// never the reverse. A store that keeps none loads the session without one.
async fn runtime_keeps_text_indexes(open: Open) {
    let store = open();
    let rt = runtime(store.clone());
    let id = rt.create_session(small_graph(), NewSession::default()).await.unwrap().session_id;
    rt.read(&id, |s, _| s.text_index().len()).await.unwrap();
    rt.commit(&id, ops(json!([add("after-the-search")]))).await.unwrap();
    let mut kept = None;
    for _ in 0..500 {
        kept = store.load_text_index(&id).await.unwrap();
        if kept.is_some() || !store.keeps_text_indexes() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(kept.is_some(), store.keeps_text_indexes(), "{}: a searched session's index kept", store.kind());
    let (set, built) =
        runtime(open()).read(&id, |s, _| (s.built_text_index().cloned(), TextIndex::build(s))).await.unwrap();
    assert_eq!(set.is_some(), store.keeps_text_indexes(), "{}: the session loads with its index", store.kind());
    if let Some(set) = set {
        assert_eq!(set, built, "{}: the index read back and brought up to date equals a build", store.kind());
    }
    let Some((seq, bytes)) = kept else { return };
    store.save_text_index(&id, seq + 5, b"later".to_vec()).await.unwrap();
    store.save_text_index(&id, seq + 1, bytes).await.unwrap();
    assert_eq!(store.load_text_index(&id).await.unwrap(), Some((seq + 5, b"later".to_vec())), "{}", store.kind());
}

/// A store that keeps vector indexes gives back a session's in parts, whole and in order, to be
/// set on a structure of the same objects; a later version's index replaces an earlier one's,
/// never the reverse. A store that keeps none gives none back.
async fn store_vector_indexes(store: Arc<dyn Store>) {
    use cks_core::vectors::{TextKey, Vector, embedding_text, text_key};
    // More objects than one part holds.
    let graph = cks_core::sample::random_graph(4200, 0, 3);
    let vector_of = |key: &TextKey| Vector::quantize(&key.map(|b| f32::from(b) - 127.5)).unwrap();
    let known: std::collections::HashMap<TextKey, Vector> = graph
        .objects()
        .filter_map(|o| embedding_text(o))
        .map(|text| (text_key(&text), vector_of(&text_key(&text))))
        .collect();
    let kept = {
        let mut index = graph.vector_index().lock().unwrap();
        index.sync(&graph, "stand-in", 1, |key| known.get(key));
        index.kept(graph.root_hash()).expect("settled")
    };
    let id = format!("conf-vectors-{}", uuid::Uuid::new_v4());
    store.create_session(&row(&id), "S0".into()).await.unwrap();
    store.save_vector_index(&id, 3, Box::new(kept.clone().into_parts())).await.unwrap();
    let read = store.load_vector_index(&id).await.unwrap();
    assert_eq!(read.is_some(), store.keeps_vector_indexes(), "{}: kept and read back", store.kind());
    let Some((seq, stored)) = read else { return };
    assert_eq!(seq, 3);
    let mut loaded = graph.clone();
    loaded.set_vector_index(stored).unwrap();
    let query = known.values().next().unwrap();
    let rank = |s: &KnowledgeStructure| {
        s.vector_index()
            .lock()
            .unwrap()
            .rank(query, 10)
            .into_iter()
            .map(|(id, c)| (id.to_owned(), c))
            .collect::<Vec<_>>()
    };
    assert_eq!(rank(&loaded), rank(&graph), "{}: set on the same objects, it ranks alike", store.kind());

    // An earlier version's index does not replace a later one's; a later one's does.
    let one_row = {
        let small = cks_core::sample::random_graph(1, 0, 4);
        let mut index = small.vector_index().lock().unwrap();
        index.sync(&small, "stand-in", 1, |key| Some(known.get(key).unwrap_or(query)));
        index.kept(small.root_hash()).expect("settled")
    };
    store.save_vector_index(&id, 2, Box::new(one_row.clone().into_parts())).await.unwrap();
    let (seq, stored) = store.load_vector_index(&id).await.unwrap().unwrap();
    assert_eq!(seq, 3, "{}", store.kind());
    assert!(graph.clone().set_vector_index(stored).is_ok(), "{}: the later index whole", store.kind());
    store.save_vector_index(&id, 4, Box::new(one_row.into_parts())).await.unwrap();
    let (seq, stored) = store.load_vector_index(&id).await.unwrap().unwrap();
    assert_eq!(seq, 4, "{}", store.kind());
    assert!(stored.is_complete(), "{}: only the new index's one part", store.kind());
}

/// Shares of one session at once, from two runtimes (two server processes) on one store, each
/// granting a principal of its own: every grant is recorded, none lost to a later write.
async fn runtime_concurrent_shares(open: Open) {
    use crate::access::{PrincipalId, SessionAccess};
    let who = |subject: String| PrincipalId { issuer: "https://id.example".into(), subject };
    let a = Arc::new(runtime(open()));
    let b = Arc::new(runtime(open()));
    let id = a.create_session(small_graph(), NewSession::default()).await.unwrap().session_id;
    a.set_access(&id, &SessionAccess::owned_by(who("owner".into()))).await.unwrap();
    // Loaded on both sides, so each keeps a copy of the metadata to refresh.
    a.read(&id, |_, _| ()).await.unwrap();
    b.read(&id, |_, _| ()).await.unwrap();
    let mut tasks = Vec::new();
    for (name, rt) in [("a", a.clone()), ("b", b.clone())] {
        for i in 0..16 {
            let (rt, id, grantee) = (rt.clone(), id.clone(), who(format!("{name}{i}")));
            tasks.push(tokio::spawn(async move {
                rt.update_access(&id, |access| {
                    let mut access = access.expect("the session has an owner");
                    access.principals.push(grantee.clone());
                    access.groups.push(format!("group-{}", grantee.subject));
                    Ok::<_, RuntimeError>(access)
                })
                .await
            }));
        }
    }
    for task in tasks {
        task.await.unwrap().unwrap_or_else(|e| panic!("a share failed: {e}"));
    }
    let access = a.access(&id).await.unwrap().unwrap();
    let mut granted: Vec<String> = access.principals.iter().map(|p| p.subject.clone()).collect();
    granted.sort();
    let mut expected: Vec<String> = ["a", "b"].iter().flat_map(|n| (0..16).map(move |i| format!("{n}{i}"))).collect();
    expected.sort();
    assert_eq!(granted, expected, "every concurrent grant is recorded exactly once");
    assert_eq!(access.groups.len(), 32, "and every group");
    assert_eq!(access.owner, who("owner".into()), "the owner is kept");
    // A runtime's loaded copy shows the metadata as its last change left it in the store.
    a.update_access(&id, |access| Ok::<_, RuntimeError>(access.unwrap())).await.unwrap();
    let shown = SessionAccess::of(&a.info(&id).await.unwrap().metadata).unwrap();
    assert_eq!(shown.principals.len(), 32, "the loaded copy shows every grant");
    let refused = a.update_access(&id, |_| Err::<SessionAccess, _>(RuntimeError::SessionClosed(id.clone()))).await;
    assert!(matches!(refused, Err(RuntimeError::SessionClosed(_))), "a refusing change writes nothing");
    assert_eq!(a.access(&id).await.unwrap().unwrap(), access);
}

async fn runtime_concurrent_writers(open: Open) {
    // Two runtimes on one store stand for two server processes.
    let a = Arc::new(runtime(open()));
    let b = Arc::new(runtime(open()));
    let id = a.create_session(small_graph(), NewSession::default()).await.unwrap().session_id;
    let mut tasks = Vec::new();
    for (name, rt) in [("a", a.clone()), ("b", b.clone())] {
        for i in 0..6 {
            let (rt, id) = (rt.clone(), id.clone());
            tasks.push(tokio::spawn(async move { rt.commit(&id, ops(json!([add(&format!("{name}{i}"))]))).await }));
        }
    }
    for task in tasks {
        match task.await.unwrap() {
            Ok(_) => {}
            Err(RuntimeError::ConcurrentModification { .. }) => panic!("retries should absorb 12 writers"),
            Err(e) => panic!("commit failed: {e}"),
        }
    }
    let versions = a.list_versions(&id).await.unwrap();
    assert_eq!(versions.len(), 12, "every commit landed exactly once");
    assert_eq!(versions.iter().map(|v| v.seq).collect::<Vec<_>>(), (1..=12).collect::<Vec<_>>());
    let seen_by_a = a.read(&id, |s, _| s.len()).await.unwrap();
    let seen_by_b = b.read(&id, |s, _| s.len()).await.unwrap();
    assert_eq!((seen_by_a, seen_by_b), (15, 15), "both runtimes see all commits");
}
