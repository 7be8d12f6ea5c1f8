//! Whole-store backups, restores and copies between stores, through the [`Store`] trait only, so
//! every store can be the source or the target (SQLite → PostgreSQL → SQLite keeps everything).
//!
//! A backup is one JSON document ([`FORMAT`], version [`FORMAT_VERSION`]): every session with its
//! row and its whole history exactly as stored — version ids, transaction ids, timestamps,
//! metadata, state hashes, the deltas and snapshots themselves — the gallery's registry, the
//! stored chats and the stored embeddings (backups written before chats or embeddings were kept
//! have none, and read as having none). It is written session by session and model by model, so
//! exporting a large store does not hold it in memory. The task queue goes under the key the
//! Python reference's dumps give theirs (`outbox_tasks`), every task as stored (pending, claimed
//! and dead, ids included); the pipeline runs' and the processes' records under `records`, each
//! its stored key and JSON text.
//!
//! Embeddings are written per model, each row its text hash and vector as lowercase hex (the
//! document's other values are text; hex is the plainest text for bytes), rows in hash order:
//!
//! ```json
//! "embeddings": [{"model": "m", "rows": [{"text_hash": "00ff…", "vector": "7f01…"}]}]
//! ```
//!
//! Restoring is all or nothing: the sessions are written in one store transaction; in `merge`
//! mode sessions and registry names already stored are left alone
//! ([`HistoryStore::import_sessions`](crate::store::HistoryStore::import_sessions)),
//! in `clear` mode everything stored is replaced, in the same transaction ([`Store::replace_all`]).
//! The head snapshot of each large session written then gets its locator, where the store keeps
//! them (see [`crate::locator::locate_imported`]). The registry entries follow, one by one, then
//! the chats (in `merge` mode a chat already stored is left alone), then the embeddings, a model
//! at a time, in either mode added to those kept (a text already embedded keeps its vector:
//! embeddings are a cache of content, which even `clear` keeps). Then the tasks, in one store
//! transaction (a task whose id or dedup key is taken is left alone), and the records (in `merge`
//! mode a key already stored is left alone); `clear` mode first deletes the tasks and records kept.

use std::io::Write;

use serde::{Deserialize, Serialize};

use crate::store::{
    ChatRow, EmbeddingRow, GraphRow, Head, ImportedSession, ImportedVersion, SessionRow, Store, StoreError, TaskFilter,
    TaskRef, TaskRow, TaskStatus, VersionRow,
};

/// The settings a backup holds: the pipeline runs' and the processes' records.
const RECORDS: [&str; 4] =
    [crate::pipeline_runs::RUN, crate::pipeline_runs::WORK, crate::processes::RECORD, crate::processes::STOP];

/// The `format` of a backup document.
pub const FORMAT: &str = "cks-mcp-storage";
/// The version of the backup format this server writes and reads.
pub const FORMAT_VERSION: u64 = 1;

/// One session in a backup: its row (the head is its last version) and its history.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DumpedSession {
    pub session_id: String,
    pub created_at: String,
    pub parent_session_id: Option<String>,
    pub parent_version_id: Option<String>,
    pub closed: bool,
    /// JSON object text, as stored.
    pub metadata: String,
    pub snapshot_interval: u32,
    /// The head's state hash and object count (the last version's; without versions, the
    /// starting state's).
    pub state_hash: String,
    pub object_count: u64,
    /// The stored starting state (snapshot 0).
    pub initial_state: String,
    pub versions: Vec<DumpedVersion>,
}

/// One version as stored: its row and its payload(s).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DumpedVersion {
    pub seq: u64,
    pub version_id: String,
    pub transaction_id: String,
    pub created_at: String,
    pub state_hash: String,
    pub object_count: u64,
    /// JSON object text, as stored.
    pub metadata: String,
    pub delta: Option<String>,
    pub snapshot: Option<String>,
}

/// One gallery entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DumpedGraph {
    pub name: String,
    pub session_id: String,
    pub description: String,
    pub tags: String,
    pub created_at: String,
    pub updated_at: String,
    pub source_graph_name: Option<String>,
    pub visibility: String,
    pub team: Option<String>,
    pub lifecycle_state: Option<String>,
}

/// One stored chat, whole: its messages and tool calls as the JSON text stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DumpedChat {
    pub chat_id: String,
    pub session_id: String,
    pub title: String,
    pub messages: String,
    pub message_count: u64,
    pub tool_calls: String,
    pub created_at: String,
    pub updated_at: String,
    pub revision: u64,
}

/// One model's stored embeddings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DumpedEmbeddings {
    pub model: String,
    pub rows: Vec<DumpedEmbedding>,
}

/// One stored embedding; both fields are hex in the document.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DumpedEmbedding {
    #[serde(with = "hex::hash")]
    pub text_hash: [u8; 16],
    #[serde(with = "hex::bytes")]
    pub vector: Vec<u8>,
}

/// One queued task, as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DumpedTask {
    pub task_id: i64,
    pub task_type: String,
    pub session_id: String,
    /// JSON text, as stored.
    pub payload: String,
    /// `PENDING`, `IN_PROGRESS` or `DEAD`.
    pub status: String,
    pub retry_count: u32,
    pub last_error: Option<String>,
    pub next_retry_at_ms: i64,
    pub claimed_at_ms: Option<i64>,
    pub created_at_ms: i64,
    pub dedup_key: Option<String>,
}

/// One pipeline-run or process record: its key and its JSON text, as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DumpedRecord {
    pub key: String,
    pub value: String,
}

/// A whole backup document, as read back.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Dump {
    pub format: String,
    pub version: u64,
    pub exported_at: String,
    pub sessions: Vec<DumpedSession>,
    pub graphs: Vec<DumpedGraph>,
    /// Absent from backups written before chats were stored.
    #[serde(default)]
    pub chats: Vec<DumpedChat>,
    /// Absent from backups written before embeddings were stored (and empty in those written
    /// while none were).
    #[serde(default)]
    pub embeddings: Vec<DumpedEmbeddings>,
    /// The task queue (empty in backups written before it was kept).
    #[serde(default)]
    pub outbox_tasks: Vec<DumpedTask>,
    /// Absent from backups written before the pipeline runs' and processes' records were kept.
    #[serde(default)]
    pub records: Vec<DumpedRecord>,
}

/// What a backup, restore or copy moved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub sessions: u64,
    pub versions: u64,
    pub graphs: u64,
    pub chats: u64,
    /// Embedding rows: those written to a backup; in a restore or copy, those the target did not
    /// keep before (a text it had embedded already keeps its vector, and is not counted).
    pub embeddings: u64,
    /// Queued tasks.
    pub tasks: u64,
    /// Pipeline-run and process records.
    pub records: u64,
    /// Sessions, registry names, chats, tasks or records left alone because the target already had
    /// them (merge).
    pub skipped: u64,
}

/// Restore modes (the reference's names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Add what is not there yet; keep what is.
    Merge,
    /// Empty the store first.
    Clear,
}

/// Why a backup, restore or copy failed.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot write the backup: {0}")]
    Write(#[from] std::io::Error),
    #[error("not a backup of this server: {0}")]
    Format(String),
}

/// Reads one session and its whole stored history.
pub async fn dump_session(store: &dyn Store, row: &SessionRow) -> Result<DumpedSession, StoreError> {
    let id = &row.session_id;
    let missing = |seq: u64| StoreError::Corrupt(format!("session '{id}' has no snapshot #{seq}"));
    let initial_state = store.load_snapshot(id, 0).await?.ok_or_else(|| missing(0))?;
    let mut versions = Vec::new();
    for stored in store.load_versions_after(id, 0).await?.into_iter().filter(|v| v.row.seq <= row.head.seq) {
        let snapshot = if stored.row.has_snapshot {
            Some(store.load_snapshot(id, stored.row.seq).await?.ok_or_else(|| missing(stored.row.seq))?)
        } else {
            None
        };
        let v = stored.row;
        versions.push(DumpedVersion {
            seq: v.seq,
            version_id: v.version_id,
            transaction_id: v.transaction_id,
            created_at: v.created_at,
            state_hash: v.state_hash,
            object_count: v.object_count,
            metadata: v.metadata,
            delta: stored.delta,
            snapshot,
        });
    }
    Ok(DumpedSession {
        session_id: row.session_id.clone(),
        created_at: row.created_at.clone(),
        parent_session_id: row.parent_session_id.clone(),
        parent_version_id: row.parent_version_id.clone(),
        closed: row.closed,
        metadata: row.metadata.clone(),
        snapshot_interval: row.snapshot_interval,
        state_hash: row.head.state_hash.clone(),
        object_count: row.head.object_count,
        initial_state,
        versions,
    })
}

/// Writes a backup of everything in `store` to `out`, one session at a time, the stored
/// embeddings too when `embeddings` is set; `progress` is told (done, total) after each session.
pub async fn export(
    store: &dyn Store,
    out: &mut (dyn Write + Send),
    embeddings: bool,
    progress: &mut (dyn FnMut(usize, usize) + Send),
) -> Result<Counts, BackupError> {
    let sessions = store.list_sessions().await?;
    let graphs = store.list_graphs().await?;
    let mut counts = Counts::default();
    write!(
        out,
        "{{\"format\":{},\"version\":{FORMAT_VERSION},\"exported_at\":{},\"sessions\":[",
        serde_json::Value::from(FORMAT),
        serde_json::Value::from(crate::runtime::now())
    )?;
    for (index, row) in sessions.iter().enumerate() {
        let dumped = dump_session(store, row).await?;
        if index > 0 {
            out.write_all(b",\n")?;
        }
        serde_json::to_writer(&mut *out, &dumped).map_err(std::io::Error::from)?;
        counts.sessions += 1;
        counts.versions += dumped.versions.len() as u64;
        progress(index + 1, sessions.len());
    }
    out.write_all(b"],\n\"graphs\":")?;
    let graphs: Vec<DumpedGraph> = graphs.into_iter().map(DumpedGraph::from).collect();
    counts.graphs = graphs.len() as u64;
    serde_json::to_writer(&mut *out, &graphs).map_err(std::io::Error::from)?;
    out.write_all(b",\n\"chats\":[")?;
    // One chat in memory at a time; a chat deleted since the listing is left out.
    for summary in store.list_chats(None, usize::MAX).await? {
        let Some(chat) = store.load_chat(&summary.chat_id).await? else { continue };
        if counts.chats > 0 {
            out.write_all(b",\n")?;
        }
        serde_json::to_writer(&mut *out, &DumpedChat::from(chat)).map_err(std::io::Error::from)?;
        counts.chats += 1;
    }
    out.write_all(b"],\n\"embeddings\":[")?;
    if embeddings {
        counts.embeddings = export_embeddings(store, out).await?;
    }
    out.write_all(b"],\n\"outbox_tasks\":")?;
    let tasks = dump_tasks(store).await?;
    counts.tasks = tasks.len() as u64;
    serde_json::to_writer(&mut *out, &tasks).map_err(std::io::Error::from)?;
    out.write_all(b",\n\"records\":")?;
    let records = dump_records(store).await?;
    counts.records = records.len() as u64;
    serde_json::to_writer(&mut *out, &records).map_err(std::io::Error::from)?;
    out.write_all(b"}\n")?;
    out.flush()?;
    Ok(counts)
}

/// Every queued task, whatever its state, oldest first.
async fn dump_tasks(store: &dyn Store) -> Result<Vec<DumpedTask>, StoreError> {
    let all = TaskFilter { status: None, ..TaskFilter::default() };
    Ok(store.list_tasks(&all).await?.into_iter().map(DumpedTask::from).collect())
}

/// Every pipeline-run and process record.
async fn dump_records(store: &dyn Store) -> Result<Vec<DumpedRecord>, StoreError> {
    let mut records = Vec::new();
    for prefix in RECORDS {
        let kept = store.list_settings(prefix).await?;
        records.extend(kept.into_iter().map(|(key, value)| DumpedRecord { key, value }));
    }
    Ok(records)
}

/// Writes dumped tasks and records into `store` (see the module docs for the modes).
async fn restore_queue(
    store: &dyn Store,
    tasks: &[DumpedTask],
    records: &[DumpedRecord],
    mode: Mode,
) -> Result<Counts, BackupError> {
    if mode == Mode::Clear {
        for task in dump_tasks(store).await? {
            store.complete_task(TaskRef::any(task.task_id)).await?;
        }
        for record in dump_records(store).await? {
            store.delete_setting(&record.key).await?;
        }
    }
    let rows = tasks.iter().map(TaskRow::try_from).collect::<Result<Vec<_>, _>>()?;
    let mut counts = Counts { tasks: store.import_tasks(&rows).await?, ..Counts::default() };
    counts.skipped += rows.len() as u64 - counts.tasks;
    for record in records {
        // Only the records a backup holds: a document naming another setting is refused.
        if !RECORDS.iter().any(|prefix| record.key.starts_with(prefix)) {
            return Err(BackupError::Format(format!("'{}' is not a pipeline-run or process record", record.key)));
        }
        if mode == Mode::Merge && store.load_setting(&record.key).await?.is_some() {
            counts.skipped += 1;
            continue;
        }
        store.save_setting(&record.key, &record.value).await?;
        counts.records += 1;
    }
    Ok(counts)
}

/// Writes each model's embeddings (see the module docs), one model in memory at a time; returns
/// how many rows were written. A model forgotten since the listing is left out.
async fn export_embeddings(store: &dyn Store, out: &mut (dyn Write + Send)) -> Result<u64, BackupError> {
    let mut written = 0;
    let mut line = Vec::new();
    for (model, _) in store.embedding_models().await? {
        let mut rows = store.load_embeddings(&model).await?;
        if rows.is_empty() {
            continue;
        }
        // In hash order, so a store's backup reads the same whatever order its rows come in.
        rows.sort_unstable_by_key(|row| row.text_hash);
        if written > 0 {
            out.write_all(b",\n")?;
        }
        write!(out, "{{\"model\":{},\"rows\":[", serde_json::Value::from(model))?;
        for (index, row) in rows.iter().enumerate() {
            line.clear();
            if index > 0 {
                line.push(b',');
            }
            line.extend_from_slice(b"{\"text_hash\":\"");
            hex::encode_into(&row.text_hash, &mut line);
            line.extend_from_slice(b"\",\"vector\":\"");
            hex::encode_into(&row.vector, &mut line);
            line.extend_from_slice(b"\"}");
            out.write_all(&line)?;
        }
        out.write_all(b"]}")?;
        written += rows.len() as u64;
    }
    Ok(written)
}

/// Parses a backup document, refusing anything else with a reason.
pub fn parse(text: &[u8]) -> Result<Dump, BackupError> {
    let value: serde_json::Value =
        serde_json::from_slice(text).map_err(|e| BackupError::Format(format!("not JSON: {e}")))?;
    match value.get("format").and_then(|f| f.as_str()) {
        Some(FORMAT) => {}
        Some(other) => return Err(BackupError::Format(format!("its format is '{other}', not '{FORMAT}'"))),
        None if value.get("version").is_some() && value.get("sessions").is_some() => {
            return Err(BackupError::Format(
                "it looks like a dump of the Python reference server, whose session records this server does not \
                 read; import the reference's database instead (`cks-mcp import-reference`)"
                    .into(),
            ));
        }
        None => return Err(BackupError::Format(format!("it has no \"format\": \"{FORMAT}\""))),
    }
    let version = value.get("version").and_then(|v| v.as_u64());
    if version != Some(FORMAT_VERSION) {
        return Err(BackupError::Format(format!(
            "format version {version:?} is not the version {FORMAT_VERSION} this server reads"
        )));
    }
    serde_json::from_value(value).map_err(|e| BackupError::Format(e.to_string()))
}

/// Writes dumped sessions, registry entries, chats and embeddings into `store` (see the module
/// docs for the modes).
pub async fn restore(
    store: &dyn Store,
    sessions: &[DumpedSession],
    graphs: &[DumpedGraph],
    chats: &[DumpedChat],
    embeddings: &[DumpedEmbeddings],
    queue: (&[DumpedTask], &[DumpedRecord]),
    mode: Mode,
) -> Result<Counts, BackupError> {
    let imports: Vec<ImportedSession> = sessions.iter().map(to_import).collect();
    let outcome = match mode {
        Mode::Merge => store.import_sessions(&imports).await?,
        Mode::Clear => store.replace_all(&imports).await?,
    };
    crate::locator::locate_imported(store, &imports, &outcome.imported).await;
    let mut counts = Counts { skipped: outcome.skipped.len() as u64, ..Counts::default() };
    for session in sessions.iter().filter(|s| outcome.imported.contains(&s.session_id)) {
        counts.sessions += 1;
        counts.versions += session.versions.len() as u64;
    }
    for graph in graphs {
        if mode == Mode::Merge && store.get_graph(&graph.name).await?.is_some() {
            counts.skipped += 1;
            continue;
        }
        store.put_graph(GraphRow::from(graph.clone())).await?;
        counts.graphs += 1;
    }
    for chat in chats {
        // Written as dumped, its revision included; one already stored is left alone.
        if store.save_chat(&ChatRow::from(chat.clone()), None).await? {
            counts.chats += 1;
        } else {
            counts.skipped += 1;
        }
    }
    if !embeddings.is_empty() {
        let models: Vec<&str> = embeddings.iter().map(|m| m.model.as_str()).collect();
        let before = kept_embeddings(store, &models).await?;
        for dumped in embeddings {
            let rows: Vec<EmbeddingRow> = dumped.rows.iter().map(EmbeddingRow::from).collect();
            store.save_embeddings(&dumped.model, &rows).await?;
        }
        counts.embeddings = kept_embeddings(store, &models).await?.saturating_sub(before);
    }
    Ok(counts + restore_queue(store, queue.0, queue.1, mode).await?)
}

/// How many embedding rows `store` keeps under `models`.
async fn kept_embeddings(store: &dyn Store, models: &[&str]) -> Result<u64, StoreError> {
    let kept = store.embedding_models().await?;
    Ok(kept.iter().filter(|(model, _)| models.contains(&model.as_str())).map(|(_, rows)| rows).sum())
}

/// No tasks and no records, for a restore of other parts.
const NONE: (&[DumpedTask], &[DumpedRecord]) = (&[], &[]);

/// Copies everything in `from` into `to`, a session at a time (merge: what `to` has is kept);
/// `progress` is told (done, total) after each session.
pub async fn copy(
    from: &dyn Store,
    to: &dyn Store,
    progress: &mut (dyn FnMut(usize, usize) + Send),
) -> Result<Counts, BackupError> {
    let sessions = from.list_sessions().await?;
    let mut counts = Counts::default();
    for (index, row) in sessions.iter().enumerate() {
        let dumped = dump_session(from, row).await?;
        counts = counts + restore(to, std::slice::from_ref(&dumped), &[], &[], &[], NONE, Mode::Merge).await?;
        progress(index + 1, sessions.len());
    }
    let graphs: Vec<DumpedGraph> = from.list_graphs().await?.into_iter().map(DumpedGraph::from).collect();
    counts = counts + restore(to, &[], &graphs, &[], &[], NONE, Mode::Merge).await?;
    for summary in from.list_chats(None, usize::MAX).await? {
        let Some(chat) = from.load_chat(&summary.chat_id).await? else { continue };
        counts = counts + restore(to, &[], &[], &[DumpedChat::from(chat)], &[], NONE, Mode::Merge).await?;
    }
    let (tasks, records) = (dump_tasks(from).await?, dump_records(from).await?);
    counts = counts + restore_queue(to, &tasks, &records, Mode::Merge).await?;
    // A model at a time, straight from one store to the other.
    let models: Vec<String> = from.embedding_models().await?.into_iter().map(|(model, _)| model).collect();
    let names: Vec<&str> = models.iter().map(String::as_str).collect();
    let before = kept_embeddings(to, &names).await?;
    for model in &models {
        let rows = from.load_embeddings(model).await?;
        to.save_embeddings(model, &rows).await?;
    }
    counts.embeddings += kept_embeddings(to, &names).await?.saturating_sub(before);
    Ok(counts)
}

impl std::ops::Add for Counts {
    type Output = Counts;
    fn add(self, other: Counts) -> Counts {
        Counts {
            sessions: self.sessions + other.sessions,
            versions: self.versions + other.versions,
            graphs: self.graphs + other.graphs,
            chats: self.chats + other.chats,
            embeddings: self.embeddings + other.embeddings,
            tasks: self.tasks + other.tasks,
            records: self.records + other.records,
            skipped: self.skipped + other.skipped,
        }
    }
}

/// A dumped session as the store's import wants it.
fn to_import(session: &DumpedSession) -> ImportedSession {
    let head = Head {
        seq: session.versions.last().map_or(0, |v| v.seq),
        version_id: session.versions.last().map(|v| v.version_id.clone()),
        state_hash: session.state_hash.clone(),
        object_count: session.object_count,
    };
    ImportedSession {
        row: SessionRow {
            session_id: session.session_id.clone(),
            created_at: session.created_at.clone(),
            parent_session_id: session.parent_session_id.clone(),
            parent_version_id: session.parent_version_id.clone(),
            closed: session.closed,
            metadata: session.metadata.clone(),
            snapshot_interval: session.snapshot_interval,
            head,
        },
        initial_state: session.initial_state.clone(),
        versions: session
            .versions
            .iter()
            .map(|v| ImportedVersion {
                row: VersionRow {
                    seq: v.seq,
                    version_id: v.version_id.clone(),
                    transaction_id: v.transaction_id.clone(),
                    created_at: v.created_at.clone(),
                    state_hash: v.state_hash.clone(),
                    object_count: v.object_count,
                    metadata: v.metadata.clone(),
                    has_snapshot: v.snapshot.is_some(),
                },
                delta: v.delta.clone(),
                snapshot: v.snapshot.clone(),
            })
            .collect(),
    }
}

impl From<GraphRow> for DumpedGraph {
    fn from(g: GraphRow) -> Self {
        DumpedGraph {
            name: g.name,
            session_id: g.session_id,
            description: g.description,
            tags: g.tags,
            created_at: g.created_at,
            updated_at: g.updated_at,
            source_graph_name: g.source_graph_name,
            visibility: g.visibility,
            team: g.team,
            lifecycle_state: g.lifecycle_state,
        }
    }
}

impl From<DumpedGraph> for GraphRow {
    fn from(g: DumpedGraph) -> Self {
        GraphRow {
            name: g.name,
            session_id: g.session_id,
            description: g.description,
            tags: g.tags,
            created_at: g.created_at,
            updated_at: g.updated_at,
            source_graph_name: g.source_graph_name,
            visibility: g.visibility,
            team: g.team,
            lifecycle_state: g.lifecycle_state,
        }
    }
}

impl From<ChatRow> for DumpedChat {
    fn from(c: ChatRow) -> Self {
        DumpedChat {
            chat_id: c.chat_id,
            session_id: c.session_id,
            title: c.title,
            messages: c.messages,
            message_count: c.message_count,
            tool_calls: c.tool_calls,
            created_at: c.created_at,
            updated_at: c.updated_at,
            revision: c.revision,
        }
    }
}

impl From<DumpedChat> for ChatRow {
    fn from(c: DumpedChat) -> Self {
        ChatRow {
            chat_id: c.chat_id,
            session_id: c.session_id,
            title: c.title,
            messages: c.messages,
            message_count: c.message_count,
            tool_calls: c.tool_calls,
            created_at: c.created_at,
            updated_at: c.updated_at,
            revision: c.revision,
        }
    }
}

impl From<TaskRow> for DumpedTask {
    fn from(t: TaskRow) -> Self {
        DumpedTask {
            task_id: t.task_id,
            task_type: t.task_type,
            session_id: t.session_id,
            payload: t.payload,
            status: t.status.as_str().to_owned(),
            retry_count: t.retry_count,
            last_error: t.last_error,
            next_retry_at_ms: t.next_retry_at_ms,
            claimed_at_ms: t.claimed_at_ms,
            created_at_ms: t.created_at_ms,
            dedup_key: t.dedup_key,
        }
    }
}

impl TryFrom<&DumpedTask> for TaskRow {
    type Error = BackupError;
    fn try_from(t: &DumpedTask) -> Result<Self, BackupError> {
        let status = TaskStatus::parse(&t.status)
            .ok_or_else(|| BackupError::Format(format!("task {} has an unknown status '{}'", t.task_id, t.status)))?;
        Ok(TaskRow {
            task_id: t.task_id,
            task_type: t.task_type.clone(),
            session_id: t.session_id.clone(),
            payload: t.payload.clone(),
            status,
            retry_count: t.retry_count,
            last_error: t.last_error.clone(),
            next_retry_at_ms: t.next_retry_at_ms,
            claimed_at_ms: t.claimed_at_ms,
            created_at_ms: t.created_at_ms,
            dedup_key: t.dedup_key.clone(),
        })
    }
}

impl From<&DumpedEmbedding> for EmbeddingRow {
    fn from(e: &DumpedEmbedding) -> Self {
        EmbeddingRow { text_hash: e.text_hash, vector: e.vector.clone() }
    }
}

/// Bytes as lowercase hex text, the backup's form for them (upper case is read too).
mod hex {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    const DIGITS: &[u8; 16] = b"0123456789abcdef";

    pub(super) fn encode_into(bytes: &[u8], out: &mut Vec<u8>) {
        out.reserve(bytes.len() * 2);
        for byte in bytes {
            out.extend_from_slice(&[DIGITS[usize::from(byte >> 4)], DIGITS[usize::from(byte & 15)]]);
        }
    }

    pub(super) fn encode(bytes: &[u8]) -> String {
        let mut out = Vec::new();
        encode_into(bytes, &mut out);
        String::from_utf8(out).expect("hex digits are ASCII")
    }

    pub(super) fn decode(text: &str) -> Option<Vec<u8>> {
        let digit = |c: u8| char::from(c).to_digit(16).map(|d| d as u8);
        if !text.len().is_multiple_of(2) {
            return None;
        }
        text.as_bytes().chunks_exact(2).map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?)).collect()
    }

    /// A field of any length.
    pub(super) mod bytes {
        use super::*;

        pub(in super::super) fn serialize<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
            serializer.serialize_str(&encode(bytes))
        }

        pub(in super::super) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
            let text = String::deserialize(deserializer)?;
            decode(&text).ok_or_else(|| D::Error::custom(format!("'{text}' is not hex")))
        }
    }

    /// A text hash: 16 bytes.
    pub(super) mod hash {
        use super::*;

        pub(in super::super) fn serialize<S: Serializer>(hash: &[u8; 16], serializer: S) -> Result<S::Ok, S::Error> {
            serializer.serialize_str(&encode(hash))
        }

        pub(in super::super) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<[u8; 16], D::Error> {
            let text = String::deserialize(deserializer)?;
            decode(&text)
                .and_then(|bytes| bytes.try_into().ok())
                .ok_or_else(|| D::Error::custom(format!("'{text}' is not a text hash (32 hex digits)")))
        }
    }
}

impl crate::Runtime {
    /// Writes a backup of this runtime's whole store (see [`export`]).
    pub async fn export_storage(
        &self,
        out: &mut (dyn Write + Send),
        embeddings: bool,
        progress: &mut (dyn FnMut(usize, usize) + Send),
    ) -> Result<Counts, BackupError> {
        export(&**self.store(), out, embeddings, progress).await
    }

    /// Restores a backup into this runtime's store (see [`restore`]); what was loaded or cached
    /// before is forgotten, so every read after it sees the restored store, and the restored
    /// vectors are read, so none is embedded again.
    pub async fn restore_storage(&self, dump: &Dump, mode: Mode) -> Result<Counts, BackupError> {
        let store = &**self.store();
        let queue = (&dump.outbox_tasks[..], &dump.records[..]);
        let restored = restore(store, &dump.sessions, &dump.graphs, &dump.chats, &dump.embeddings, queue, mode).await;
        self.forget_loaded_sessions();
        self.gallery.clear();
        if let Some(embeddings) = self.embeddings()
            && let Err(e) = embeddings.reload().await
        {
            tracing::warn!(error = %e, "restored embeddings not read; their texts will be embedded again");
        }
        restored
    }

    /// Copies this runtime's whole store into `target`, leaving this one untouched (see [`copy`]).
    pub async fn copy_storage_to(
        &self,
        target: &dyn Store,
        progress: &mut (dyn FnMut(usize, usize) + Send),
    ) -> Result<Counts, BackupError> {
        copy(&**self.store(), target, progress).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory::MemoryStore;
    use crate::store::prelude::*;
    use crate::store::sqlite::{SqliteOptions, SqliteStore};
    use std::collections::BTreeSet;

    fn rows(count: u8, salt: u8) -> Vec<EmbeddingRow> {
        (0..count).map(|n| EmbeddingRow { text_hash: [n ^ salt; 16], vector: vec![n, salt, 0, 255] }).collect()
    }

    async fn kept(store: &dyn Store, model: &str) -> BTreeSet<(Vec<u8>, Vec<u8>)> {
        let rows = store.load_embeddings(model).await.unwrap();
        rows.into_iter().map(|row| (row.text_hash.to_vec(), row.vector)).collect()
    }

    async fn with_embeddings() -> MemoryStore {
        let store = MemoryStore::new();
        store.save_embeddings("model-a", &rows(40, 0)).await.unwrap();
        store.save_embeddings("model-b", &rows(7, 0x5a)).await.unwrap();
        store
    }

    /// Exported under two models, restored into a fresh store of another kind: the same rows.
    #[tokio::test]
    async fn embeddings_are_backed_up_and_restored() {
        let source = with_embeddings().await;
        let mut text = Vec::new();
        let exported = export(&source, &mut text, true, &mut |_, _| {}).await.unwrap();
        assert_eq!(exported.embeddings, 47);
        let dump = parse(&text).unwrap();
        let models: Vec<&str> = dump.embeddings.iter().map(|m| m.model.as_str()).collect();
        assert_eq!(models, ["model-a", "model-b"]);

        let dir = tempfile::tempdir().unwrap();
        let target = SqliteStore::open(dir.path().join("t.db"), &SqliteOptions::default()).unwrap();
        let restored = restore(&target, &[], &[], &[], &dump.embeddings, NONE, Mode::Merge).await.unwrap();
        assert_eq!(restored.embeddings, 47);
        for model in ["model-a", "model-b"] {
            assert_eq!(kept(&target, model).await, kept(&source, model).await, "{model}");
        }
        assert_eq!(target.embedding_models().await.unwrap(), source.embedding_models().await.unwrap());

        // Again: every row is kept already, so nothing is counted.
        let again = restore(&target, &[], &[], &[], &dump.embeddings, NONE, Mode::Clear).await.unwrap();
        assert_eq!(again.embeddings, 0);
        assert_eq!(kept(&target, "model-a").await, kept(&source, "model-a").await);
    }

    #[tokio::test]
    async fn embeddings_are_copied_and_only_new_rows_counted() {
        let source = with_embeddings().await;
        let target = MemoryStore::new();
        target.save_embeddings("model-a", &rows(10, 0)).await.unwrap();
        let copied = copy(&source, &target, &mut |_, _| {}).await.unwrap();
        assert_eq!(copied.embeddings, 37);
        for model in ["model-a", "model-b"] {
            assert_eq!(kept(&target, model).await, kept(&source, model).await, "{model}");
        }
    }

    /// The task queue and the pipeline-run and process records are copied as stored (ids, states
    /// and claims included) into another kind of store, which numbers its next task after them.
    #[tokio::test]
    async fn the_queue_and_the_records_are_copied() {
        use crate::store::NewTask;
        let source = MemoryStore::new();
        for n in 0..3 {
            let task = NewTask {
                task_type: format!("kind_{n}"),
                session_id: "s".into(),
                payload: "{}".into(),
                dedup_key: (n > 0).then(|| format!("finding-{n}")),
                created_at_ms: 1_000 + n,
            };
            source.enqueue_task(&task).await.unwrap();
        }
        let completed = source.claim_task(Some("kind_0"), 2_000, 60_000).await.unwrap().unwrap();
        source.complete_task(TaskRef::claimed(&completed)).await.unwrap();
        let dead = source.claim_task(Some("kind_1"), 2_000, 60_000).await.unwrap().unwrap();
        source.dead_letter_task(TaskRef::claimed(&dead), "no", Some(2)).await.unwrap();
        source.claim_task(Some("kind_2"), 2_500, 60_000).await.unwrap().unwrap();
        source.save_setting("pipeline_run.s.r", "{}").await.unwrap();
        source.save_setting("process.i", "{}").await.unwrap();
        source.save_setting("provenance.other", "{}").await.unwrap();

        let dir = tempfile::tempdir().unwrap();
        let target = SqliteStore::open(dir.path().join("t.db"), &SqliteOptions::default()).unwrap();
        let copied = copy(&source, &target, &mut |_, _| {}).await.unwrap();
        assert_eq!((copied.tasks, copied.records), (2, 2));
        assert_eq!(dump_tasks(&target).await.unwrap(), dump_tasks(&source).await.unwrap());
        assert_eq!(dump_records(&target).await.unwrap(), dump_records(&source).await.unwrap());
        assert_eq!(target.load_setting("provenance.other").await.unwrap(), None, "only the records a backup holds");
        let next = NewTask {
            task_type: "later".into(),
            session_id: "s".into(),
            payload: "{}".into(),
            dedup_key: None,
            created_at_ms: 3_000,
        };
        assert_eq!(target.enqueue_task(&next).await.unwrap(), Some(4), "after the highest id copied");
        let again = copy(&source, &target, &mut |_, _| {}).await.unwrap();
        assert_eq!((again.tasks, again.records), (0, 0), "what is there is kept");

        // A record the backup cannot hold is refused.
        let stranger = DumpedRecord { key: "settings.secret".into(), value: "{}".into() };
        let refused = restore_queue(&target, &[], &[stranger], Mode::Merge).await;
        assert!(matches!(refused, Err(BackupError::Format(_))));
    }

    /// Rows are written in hash order, as lowercase hex; upper case reads too; a hash of another
    /// length or a vector that is not hex is refused before anything is written.
    #[tokio::test]
    async fn the_embeddings_section_is_hex_and_checked_when_read() {
        let store = MemoryStore::new();
        let row = |hash: u8, vector: Vec<u8>| EmbeddingRow { text_hash: [hash; 16], vector };
        store.save_embeddings("m \"quoted\"", &[row(0xab, vec![0x01, 0xfe]), row(0x01, vec![])]).await.unwrap();
        let mut text = Vec::new();
        export(&store, &mut text, true, &mut |_, _| {}).await.unwrap();
        let value: serde_json::Value = serde_json::from_slice(&text).unwrap();
        assert_eq!(
            value["embeddings"],
            serde_json::json!([{"model": "m \"quoted\"", "rows": [
                {"text_hash": "01".repeat(16), "vector": ""},
                {"text_hash": "ab".repeat(16), "vector": "01fe"},
            ]}])
        );
        let reread = serde_json::to_value(parse(&text).unwrap().embeddings).unwrap();
        assert_eq!(reread, value["embeddings"], "parsed and written again, the section is the same");

        let with = |embeddings: serde_json::Value| {
            let mut dump = value.clone();
            dump["embeddings"] = embeddings;
            parse(dump.to_string().as_bytes())
        };
        let upper = with(serde_json::json!([{"model": "m", "rows": [{"text_hash": "AB".repeat(16), "vector": "0A"}]}]));
        assert_eq!(upper.unwrap().embeddings[0].rows[0], DumpedEmbedding { text_hash: [0xab; 16], vector: vec![10] });
        for bad in [
            serde_json::json!([{"model": "m", "rows": [{"text_hash": "ab".repeat(15), "vector": ""}]}]),
            serde_json::json!([{"model": "m", "rows": [{"text_hash": "ab".repeat(16), "vector": "0g"}]}]),
            serde_json::json!([{"model": "m", "rows": [{"text_hash": "ab".repeat(16), "vector": "abc"}]}]),
            serde_json::json!([{"model": "m", "rows": [{"text_hash": "ab".repeat(16)}]}]),
        ] {
            assert!(matches!(with(bad.clone()), Err(BackupError::Format(_))), "{bad}");
        }
        assert!(with(serde_json::json!([])).unwrap().embeddings.is_empty(), "a backup written while none were kept");
    }
}
