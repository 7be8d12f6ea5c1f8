//! Whole-store backups, restores and copies between stores, through the [`Store`] trait only, so
//! every store can be the source or the target (SQLite → PostgreSQL → SQLite keeps everything).
//!
//! A backup is one JSON document ([`FORMAT`], version [`FORMAT_VERSION`]): every session with its
//! row and its whole history exactly as stored — version ids, transaction ids, timestamps,
//! metadata, state hashes, the deltas and snapshots themselves — the gallery's registry, and the
//! stored chats (backups written before chats existed have none, and read as having none). It is
//! written session by session, so exporting a large store does not hold it in memory. The keys
//! the Python reference's dumps have for its embeddings and task queue are present and empty
//! (this server keeps neither).
//!
//! Restoring is all or nothing: the sessions are written in one store transaction; in `merge`
//! mode sessions and registry names already stored are left alone
//! ([`HistoryStore::import_sessions`](crate::store::HistoryStore::import_sessions)),
//! in `clear` mode everything stored is replaced, in the same transaction ([`Store::replace_all`]).
//! The head snapshot of each large session written then gets its locator, where the store keeps
//! them (see [`crate::locator::locate_imported`]). The registry entries follow, one by one, then
//! the chats (in `merge` mode a chat already stored is left alone).

use std::io::Write;

use serde::{Deserialize, Serialize};

use crate::store::{
    ChatRow, GraphRow, Head, ImportedSession, ImportedVersion, SessionRow, Store, StoreError, VersionRow,
};

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
    #[serde(default)]
    pub embeddings: Vec<serde_json::Value>,
    #[serde(default)]
    pub outbox_tasks: Vec<serde_json::Value>,
}

/// What a backup, restore or copy moved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub sessions: u64,
    pub versions: u64,
    pub graphs: u64,
    pub chats: u64,
    /// Sessions, registry names or chats left alone because the target already had them (merge).
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

/// Writes a backup of everything in `store` to `out`, one session at a time; `progress` is told
/// (done, total) after each session.
pub async fn export(
    store: &dyn Store,
    out: &mut (dyn Write + Send),
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
    out.write_all(b"],\"embeddings\":[],\"outbox_tasks\":[]}\n")?;
    out.flush()?;
    Ok(counts)
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

/// Writes dumped sessions, registry entries and chats into `store` (see the module docs for the
/// modes).
pub async fn restore(
    store: &dyn Store,
    sessions: &[DumpedSession],
    graphs: &[DumpedGraph],
    chats: &[DumpedChat],
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
    Ok(counts)
}

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
        counts = counts + restore(to, std::slice::from_ref(&dumped), &[], &[], Mode::Merge).await?;
        progress(index + 1, sessions.len());
    }
    let graphs: Vec<DumpedGraph> = from.list_graphs().await?.into_iter().map(DumpedGraph::from).collect();
    counts = counts + restore(to, &[], &graphs, &[], Mode::Merge).await?;
    for summary in from.list_chats(None, usize::MAX).await? {
        let Some(chat) = from.load_chat(&summary.chat_id).await? else { continue };
        counts = counts + restore(to, &[], &[], &[DumpedChat::from(chat)], Mode::Merge).await?;
    }
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

impl crate::Runtime {
    /// Writes a backup of this runtime's whole store (see [`export`]).
    pub async fn export_storage(
        &self,
        out: &mut (dyn Write + Send),
        progress: &mut (dyn FnMut(usize, usize) + Send),
    ) -> Result<Counts, BackupError> {
        export(&**self.store(), out, progress).await
    }

    /// Restores a backup into this runtime's store (see [`restore`]); what was loaded or cached
    /// before is forgotten, so every read after it sees the restored store.
    pub async fn restore_storage(&self, dump: &Dump, mode: Mode) -> Result<Counts, BackupError> {
        let restored = restore(&**self.store(), &dump.sessions, &dump.graphs, &dump.chats, mode).await;
        self.forget_loaded_sessions();
        self.gallery.clear();
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
