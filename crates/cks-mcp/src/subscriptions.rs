//! Resource subscriptions: which resources a runtime event changes, and telling a client so.
//! Every process on a store sees every commit's event, so whichever serves a subscription tells
//! its client, whoever committed:
//!
//! - 2026-07-28: `subscriptions/listen`, one long request whose stream carries the notifications
//!   (`mcp.rs`, `listen`);
//! - before: `resources/subscribe` / `resources/unsubscribe`, the notifications on the session's
//!   own stream — over stdio the one pipe ([`follow_stdio`]), over HTTP the session's `GET`
//!   stream, on the replica holding it (`sessions.rs`).
//!
//! Events are matched when they are read, not when they were made, so a subscription may also hear
//! of a commit made just before it; a notification only says "read it again", so that is harmless.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};

use rmcp::RoleServer;
use rmcp::model::ResourceUpdatedNotificationParam;
use rmcp::service::Peer;
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::RecvError;

use cks_runtime::events::{Event, EventKind};

/// The session list's resource.
const SESSIONS: &str = "cks://sessions";

/// What an event changes: the resources, by URI.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Changes {
    pub(crate) uris: Vec<String>,
}

/// What `kind` changes. A new version changes its session, the session's version list and the
/// session list (which counts versions); a new or closed session, the session list and itself.
pub(crate) fn changes(kind: &EventKind) -> Changes {
    match kind {
        EventKind::VersionCreated { session_id, .. } => Changes {
            uris: vec![
                format!("{SESSIONS}/{session_id}"),
                format!("{SESSIONS}/{session_id}/versions"),
                SESSIONS.to_owned(),
            ],
        },
        EventKind::SessionCreated { session_id } | EventKind::SessionClosed { session_id } => {
            Changes { uris: vec![format!("{SESSIONS}/{session_id}"), SESSIONS.to_owned()] }
        }
        _ => Changes::default(),
    }
}

/// Whether `uri` names a resource that can change (a version's state never does).
pub(crate) fn subscribable(uri: &str) -> bool {
    let Some(rest) = uri.strip_prefix(SESSIONS) else { return false };
    if !rest.is_empty() && !rest.starts_with('/') {
        return false;
    }
    let parts: Vec<&str> = rest.split('/').skip(1).collect();
    matches!(parts.as_slice(), [] | [_] | [_, "versions"]) && parts.iter().all(|p| !p.is_empty())
}

/// The URIs one client subscribed to.
#[derive(Debug, Default)]
pub(crate) struct Subscribed {
    uris: Mutex<BTreeSet<String>>,
}

impl Subscribed {
    pub(crate) fn add(&self, uri: String) {
        self.uris.lock().unwrap_or_else(PoisonError::into_inner).insert(uri);
    }

    pub(crate) fn remove(&self, uri: &str) {
        self.uris.lock().unwrap_or_else(PoisonError::into_inner).remove(uri);
    }

    fn matching(&self, changes: &Changes) -> Vec<String> {
        let uris = self.uris.lock().unwrap_or_else(PoisonError::into_inner);
        changes.uris.iter().filter(|uri| uris.contains(*uri)).cloned().collect()
    }
}

/// Sends `notifications/resources/updated` for each of `uris` (a client that went away is not
/// an error here).
pub(crate) async fn notify(peer: &Peer<RoleServer>, uris: Vec<String>) {
    for uri in uris {
        let _ = peer.notify_resource_updated(ResourceUpdatedNotificationParam::new(uri)).await;
    }
}

/// Tells the stdio client of the changes to what it subscribed to, until the runtime's events end.
/// `events` is taken before the task starts, so no commit made meanwhile goes unheard.
pub(crate) async fn follow_stdio(
    mut events: broadcast::Receiver<Event>,
    peer: Peer<RoleServer>,
    subscribed: Arc<Subscribed>,
) {
    loop {
        match events.recv().await {
            Ok(event) => notify(&peer, subscribed.matching(&changes(&event.kind))).await,
            Err(RecvError::Lagged(_)) => continue,
            Err(RecvError::Closed) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_change_their_session_its_versions_and_the_list() {
        let version =
            EventKind::VersionCreated { session_id: "s".into(), version_id: "v".into(), transaction_id: "t".into() };
        assert_eq!(changes(&version).uris, ["cks://sessions/s", "cks://sessions/s/versions", "cks://sessions"]);
        let cancelled = EventKind::CallCancelled { transport_session: "x".into(), request_id: "1".into() };
        assert_eq!(changes(&cancelled), Changes::default());

        let subscribed = Subscribed::default();
        subscribed.add("cks://sessions/s".into());
        subscribed.add("cks://sessions/other".into());
        assert_eq!(subscribed.matching(&changes(&version)), ["cks://sessions/s"]);
        subscribed.remove("cks://sessions/s");
        assert!(subscribed.matching(&changes(&version)).is_empty());
    }

    #[test]
    fn only_what_can_change_can_be_subscribed_to() {
        for uri in ["cks://sessions", "cks://sessions/s", "cks://sessions/s/versions"] {
            assert!(subscribable(uri), "{uri}");
        }
        for uri in
            ["cks://sessions/s/versions/v", "cks://sessionsx", "test://watched-resource", "cks://sessions//versions"]
        {
            assert!(!subscribable(uri), "{uri}");
        }
    }
}
