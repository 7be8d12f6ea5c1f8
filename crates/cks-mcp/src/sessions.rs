//! What lets any replica on a shared store serve any request of an MCP session over HTTP, and a
//! restarted server its next one:
//!
//! - the session's record in the store ([`StoredSessions`], rmcp's `SessionStore`): its handshake,
//!   which a replica that has not seen the session replays to serve it, and the log level its
//!   client chose;
//! - cancellation between replicas ([`Calls`]): a `notifications/cancelled` may reach a replica
//!   other than the one running the call, so it is passed on as a runtime event, which every
//!   replica on the store receives, and the one running the call stops it ([`follow`]);
//! - a session's end, passed on the same way, so no replica serves it after its client closed it;
//! - its subscriptions, in its record, told by the replica holding its `GET` stream ([`Streams`]),
//!   which sees every commit's event.
//!
//! Over stdio, and for the stateless revision, none of this is needed: a stdio client has one
//! server, and a stateless request keeps its call on the connection that carries it.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use rmcp::RoleServer;
use rmcp::model::{InitializeRequestParams, RequestId};
use rmcp::service::{Peer, RequestContext};
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::store::{SessionState, SessionStore, SessionStoreError};
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use cks_runtime::Runtime;
use cks_runtime::events::{Event, EventKind};

use crate::subscriptions;

/// The header naming a request's MCP session.
const SESSION_HEADER: &str = "mcp-session-id";

/// The MCP session a request belongs to, when it came over HTTP in one.
pub(crate) fn session_of(context: &RequestContext<RoleServer>) -> Option<String> {
    session_in(&context.extensions)
}

/// The MCP session named by the HTTP request a message came in.
pub(crate) fn session_in(extensions: &rmcp::model::Extensions) -> Option<String> {
    let parts = extensions.get::<axum::http::request::Parts>()?;
    parts.headers.get(SESSION_HEADER)?.to_str().ok().map(str::to_owned)
}

/// The notification this server sends itself into a session whose `GET` stream opened here, so
/// that it learns the session's peer (see [`Streams`]).
pub(crate) const STREAM_OPENED: &str = "notifications/cks/stream_opened";

/// A request id as one text: `5` and `"5"` are different requests.
pub(crate) fn request_key(id: &RequestId) -> String {
    serde_json::to_string(id).unwrap_or_default()
}

/// One session's record, as stored.
#[allow(deprecated)] // logging is deprecated from 2026-07-28 on, and spoken until then
#[derive(Clone, Serialize, Deserialize)]
struct Record {
    initialize: InitializeRequestParams,
    #[serde(default)]
    log_level: Option<rmcp::model::LoggingLevel>,
    /// The resources the client subscribed to (`resources/subscribe`).
    #[serde(default)]
    subscriptions: BTreeSet<String>,
    /// The tools it found beyond its profile (`find_tools`), which its list then offers too.
    #[serde(default)]
    found_tools: BTreeSet<String>,
}

/// The most records kept at once: past it, all are let go and read again as they are needed
/// (sessions that are never ended would otherwise be kept for good).
const MAX_KEPT: usize = 10_000;

/// MCP sessions' records in the runtime's store, each read once and kept here until it changes
/// (on any replica: [`follow`] forgets it), so a session's calls do not read the store each time.
#[derive(Clone, Debug, Default)]
pub(crate) struct StoredSessions {
    /// Not kept alive by the records: a runtime that is dropped ends [`follow`].
    runtime: std::sync::Weak<Runtime>,
    read: Arc<Mutex<HashMap<String, Record>>>,
}

impl std::fmt::Debug for Record {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Record").field("subscriptions", &self.subscriptions).finish_non_exhaustive()
    }
}

impl StoredSessions {
    pub(crate) fn new(runtime: &Arc<Runtime>) -> Self {
        StoredSessions { runtime: Arc::downgrade(runtime), read: Arc::default() }
    }

    fn runtime(&self) -> Result<Arc<Runtime>, SessionStoreError> {
        self.runtime.upgrade().ok_or_else(|| "the server is shutting down".into())
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, HashMap<String, Record>> {
        self.read.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn keep(&self, session: &str, record: &Record) {
        let mut kept = self.kept();
        if kept.len() >= MAX_KEPT {
            kept.clear();
        }
        kept.insert(session.to_owned(), record.clone());
    }

    /// Forgets the copy of a session's record: it changed, or the session ended.
    fn forget(&self, session: &str) {
        self.kept().remove(session);
    }

    async fn record(&self, session: &str) -> Result<Option<Record>, SessionStoreError> {
        if let Some(record) = self.kept().get(session) {
            return Ok(Some(record.clone()));
        }
        let Some(text) = self.runtime()?.transport_session(session).await? else { return Ok(None) };
        let record: Option<Record> = serde_json::from_str(&text).ok();
        if let Some(record) = &record {
            self.keep(session, record);
        }
        Ok(record)
    }

    async fn save(&self, session: &str, record: &Record) -> Result<(), SessionStoreError> {
        self.runtime()?.save_transport_session(session, &serde_json::to_string(record)?).await?;
        // This replica's next call sees it at once; the others once they hear of the change.
        self.keep(session, record);
        Ok(())
    }

    /// The log level the session's client chose, on whichever replica it chose it.
    #[allow(deprecated)]
    pub(crate) async fn log_level(&self, session: &str) -> Option<rmcp::model::LoggingLevel> {
        self.record(session).await.ok().flatten().and_then(|record| record.log_level)
    }

    /// Keeps the log level the session's client chose; false when the session has no record.
    #[allow(deprecated)]
    pub(crate) async fn set_log_level(
        &self,
        session: &str,
        level: rmcp::model::LoggingLevel,
    ) -> Result<bool, SessionStoreError> {
        let Some(mut record) = self.record(session).await? else { return Ok(false) };
        record.log_level = Some(level);
        self.save(session, &record).await?;
        Ok(true)
    }

    /// Adds (`subscribed`) or removes a resource of the session's subscriptions; false when the
    /// session has no record.
    pub(crate) async fn set_subscribed(
        &self,
        session: &str,
        uri: &str,
        subscribed: bool,
    ) -> Result<bool, SessionStoreError> {
        let Some(mut record) = self.record(session).await? else { return Ok(false) };
        if subscribed {
            record.subscriptions.insert(uri.to_owned());
        } else {
            record.subscriptions.remove(uri);
        }
        self.save(session, &record).await?;
        Ok(true)
    }

    /// The tools the session's client found beyond its profile.
    pub(crate) async fn found_tools(&self, session: &str) -> BTreeSet<String> {
        self.record(session).await.ok().flatten().map(|record| record.found_tools).unwrap_or_default()
    }

    /// Adds tools the session's client found; true when one was new.
    pub(crate) async fn add_found_tools(&self, session: &str, names: &[String]) -> Result<bool, SessionStoreError> {
        let Some(mut record) = self.record(session).await? else { return Ok(false) };
        let before = record.found_tools.len();
        record.found_tools.extend(names.iter().cloned());
        if record.found_tools.len() == before {
            return Ok(false);
        }
        self.save(session, &record).await?;
        Ok(true)
    }

    async fn subscriptions(&self, session: &str) -> BTreeSet<String> {
        self.record(session).await.ok().flatten().map(|record| record.subscriptions).unwrap_or_default()
    }
}

#[async_trait::async_trait]
impl SessionStore for StoredSessions {
    async fn load(&self, session: &str) -> Result<Option<SessionState>, SessionStoreError> {
        Ok(self.record(session).await?.map(|record| SessionState::new(record.initialize)))
    }

    async fn store(&self, session: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        let record = Record {
            initialize: state.initialize_params.clone(),
            log_level: None,
            subscriptions: BTreeSet::new(),
            found_tools: BTreeSet::new(),
        };
        self.save(session, &record).await
    }

    async fn delete(&self, session: &str) -> Result<(), SessionStoreError> {
        self.runtime()?.end_transport_session(session).await?;
        Ok(())
    }
}

/// The calls this process runs in MCP sessions, by session and request id, so that a cancellation
/// received by any replica stops them.
#[derive(Debug, Default)]
pub(crate) struct Calls {
    running: Mutex<HashMap<(String, String), CancellationToken>>,
}

/// A call's place in [`Calls`], given up when the call ends.
pub(crate) struct Running<'a> {
    calls: &'a Calls,
    key: (String, String),
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.calls.lock().remove(&self.key);
    }
}

impl Calls {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), CancellationToken>> {
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Notes that the call `request` of `session` runs here until the guard is dropped; a
    /// cancellation of it cancels `token`.
    pub(crate) fn run(&self, session: String, request: String, token: CancellationToken) -> Running<'_> {
        let key = (session, request);
        self.lock().insert(key.clone(), token);
        Running { calls: self, key }
    }

    /// Stops the call, if it runs here.
    pub(crate) fn cancel(&self, session: &str, request: &str) {
        if let Some(token) = self.lock().get(&(session.to_owned(), request.to_owned())) {
            token.cancel();
        }
    }
}

/// The sessions whose `GET` stream (where a session's own notifications go) is open here, with
/// the peer that writes to it, so that the changes to what they subscribed to reach them.
#[derive(Debug, Default)]
pub(crate) struct Streams {
    open: Mutex<HashMap<String, OpenStream>>,
}

#[derive(Debug)]
struct OpenStream {
    count: usize,
    peer: Option<Peer<RoleServer>>,
}

/// An open `GET` stream's place in [`Streams`], given up when the stream closes.
pub(crate) struct StreamOpen {
    streams: Arc<Streams>,
    session: String,
}

impl Drop for StreamOpen {
    fn drop(&mut self) {
        let mut open = self.streams.lock();
        if let Some(stream) = open.get_mut(&self.session) {
            stream.count -= 1;
            if stream.count == 0 {
                open.remove(&self.session);
            }
        }
    }
}

impl Streams {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, OpenStream>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Notes a `GET` stream of `session` open here; whether its peer is known already.
    pub(crate) fn opened(self: &Arc<Self>, session: &str) -> (StreamOpen, bool) {
        let mut open = self.lock();
        let stream = open.entry(session.to_owned()).or_insert(OpenStream { count: 0, peer: None });
        stream.count += 1;
        let known = stream.peer.is_some();
        (StreamOpen { streams: self.clone(), session: session.to_owned() }, known)
    }

    /// The peer of `session`, while a stream of it is open here.
    pub(crate) fn note_peer(&self, session: &str, peer: &Peer<RoleServer>) {
        if let Some(stream) = self.lock().get_mut(session) {
            stream.peer.get_or_insert_with(|| peer.clone());
        }
    }

    fn peers(&self) -> Vec<(String, Peer<RoleServer>)> {
        self.lock().iter().filter_map(|(session, s)| Some((session.clone(), s.peer.clone()?))).collect()
    }
}

/// Follows what the processes on the runtime's store tell each other of MCP sessions, until the
/// runtime's events end: a call to stop, if it runs here (in `calls`); a session ended, which this
/// process lets go of too (in `sessions`), so that its next request is refused here as well; a
/// change to a resource, told to the sessions subscribed to it whose stream is open here.
pub(crate) async fn follow(
    mut events: broadcast::Receiver<Event>,
    records: StoredSessions,
    calls: Arc<Calls>,
    streams: Arc<Streams>,
    sessions: Arc<LocalSessionManager>,
) {
    loop {
        match events.recv().await {
            Ok(event) => match &event.kind {
                EventKind::CallCancelled { transport_session, request_id } => {
                    calls.cancel(transport_session, request_id);
                }
                EventKind::TransportSessionChanged { transport_session } => records.forget(transport_session),
                EventKind::TransportSessionEnded { transport_session } => {
                    records.forget(transport_session);
                    // Not here (or ended here already): nothing to let go of.
                    let _ = sessions.close_session(&Arc::from(transport_session.as_str())).await;
                }
                kind => {
                    let changes = subscriptions::changes(kind);
                    if changes.uris.is_empty() {
                        continue;
                    }
                    for (session, peer) in streams.peers() {
                        let subscribed = records.subscriptions(&session).await;
                        let uris = changes.uris.iter().filter(|uri| subscribed.contains(*uri)).cloned().collect();
                        subscriptions::notify(&peer, uris).await;
                    }
                }
            },
            // What was missed is missed: a call whose cancellation was lost runs to its end, and
            // the copies of records, which may have changed meanwhile, are read again.
            Err(RecvError::Lagged(_)) => records.kept().clear(),
            Err(RecvError::Closed) => return,
        }
    }
}
