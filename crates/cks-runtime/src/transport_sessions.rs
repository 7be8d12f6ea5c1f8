//! What a transport keeps of a client's protocol session between its requests (for MCP over
//! HTTP: the session's handshake and the log level its client chose), kept in the store, so any
//! replica on the same store can answer the session's next request, and a restarted server its
//! first. The record is opaque text here; a setting under `transport_session.` holds it with the
//! time it was saved. A session's end is news to every process on the store, as is a client's
//! request to stop one of its calls (`Runtime::cancel_call`). Records saved more than a week ago are pruned when another is saved (at most
//! once an hour in a process): a client still using one is told its session is gone, and opens
//! another, as MCP has it.

use std::sync::atomic::{AtomicI64, Ordering};

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::error::RuntimeError;
use crate::events::EventKind;
use crate::runtime::Runtime;

const RECORD: &str = "transport_session.";
/// Records saved longer ago than this are pruned.
const PRUNE_AFTER: time::Duration = time::Duration::days(7);
/// The least time between two prunes in one process, in milliseconds.
const PRUNE_EVERY_MS: i64 = 3_600_000;
/// When this process last pruned (milliseconds since the epoch).
static PRUNED_AT_MS: AtomicI64 = AtomicI64::new(0);

#[derive(Serialize, Deserialize)]
struct Stored {
    saved_at: String,
    record: String,
}

impl Runtime {
    /// Saves (or replaces) the record of the transport session `id`, and tells every process on
    /// the store (an [`EventKind::TransportSessionChanged`]).
    pub async fn save_transport_session(&self, id: &str, record: &str) -> Result<(), RuntimeError> {
        let stored = Stored { saved_at: crate::runtime::now(), record: record.to_owned() };
        let text = serde_json::to_string(&stored).expect("records encode");
        self.store().save_setting(&format!("{RECORD}{id}"), &text).await?;
        self.emit(EventKind::TransportSessionChanged { transport_session: id.to_owned() });
        let now_ms = crate::tasks::now_ms();
        let last = PRUNED_AT_MS.load(Ordering::Relaxed);
        if now_ms - last >= PRUNE_EVERY_MS
            && PRUNED_AT_MS.compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed).is_ok()
        {
            self.prune_transport_sessions(OffsetDateTime::now_utc() - PRUNE_AFTER).await?;
        }
        Ok(())
    }

    /// The record of the transport session `id`, if one was saved and not deleted or pruned.
    pub async fn transport_session(&self, id: &str) -> Result<Option<String>, RuntimeError> {
        let Some(text) = self.store().load_setting(&format!("{RECORD}{id}")).await? else { return Ok(None) };
        Ok(serde_json::from_str::<Stored>(&text).ok().map(|stored| stored.record))
    }

    /// Ends the transport session `id`: deletes its record and tells every process on the store
    /// (an [`EventKind::TransportSessionEnded`]); false when it had no record.
    pub async fn end_transport_session(&self, id: &str) -> Result<bool, RuntimeError> {
        let deleted = self.store().delete_setting(&format!("{RECORD}{id}")).await?;
        self.emit(EventKind::TransportSessionEnded { transport_session: id.to_owned() });
        Ok(deleted)
    }

    /// Deletes the records saved before `before` (and any that cannot be read).
    async fn prune_transport_sessions(&self, before: OffsetDateTime) -> Result<(), RuntimeError> {
        for (key, text) in self.store().list_settings(RECORD).await? {
            let saved = serde_json::from_str::<Stored>(&text)
                .ok()
                .and_then(|stored| OffsetDateTime::parse(&stored.saved_at, &Rfc3339).ok());
            if saved.is_none_or(|at| at < before) {
                self.store().delete_setting(&key).await?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::store::memory::MemoryStore;
    use crate::store::prelude::*;
    use crate::{Runtime, RuntimeConfig};

    use super::*;

    #[tokio::test]
    async fn records_are_kept_replaced_deleted_and_pruned_when_old() {
        let store = Arc::new(MemoryStore::new());
        let runtime = Runtime::new(store.clone(), RuntimeConfig::default());
        runtime.save_transport_session("a", "first").await.unwrap();
        runtime.save_transport_session("a", "second").await.unwrap();
        runtime.save_transport_session("b", "{\"x\": 1}").await.unwrap();
        assert_eq!(runtime.transport_session("a").await.unwrap().as_deref(), Some("second"));
        let other = Runtime::new(store.clone(), RuntimeConfig::default());
        assert_eq!(
            other.transport_session("b").await.unwrap().as_deref(),
            Some("{\"x\": 1}"),
            "any runtime on the store"
        );
        let mut events = runtime.subscribe();
        runtime.save_transport_session("a", "third").await.unwrap();
        let changed = EventKind::TransportSessionChanged { transport_session: "a".into() };
        assert_eq!(events.recv().await.unwrap().kind, changed);
        assert!(runtime.end_transport_session("a").await.unwrap());
        assert_eq!(
            events.recv().await.unwrap().kind,
            EventKind::TransportSessionEnded { transport_session: "a".into() }
        );
        assert!(!runtime.end_transport_session("a").await.unwrap());
        assert_eq!(runtime.transport_session("a").await.unwrap(), None);

        let old = Stored { saved_at: "2020-01-01T00:00:00Z".into(), record: "old".into() };
        store.save_setting("transport_session.old", &serde_json::to_string(&old).unwrap()).await.unwrap();
        store.save_setting("transport_session.unreadable", "not json").await.unwrap();
        runtime.prune_transport_sessions(OffsetDateTime::now_utc() - PRUNE_AFTER).await.unwrap();
        assert_eq!(runtime.transport_session("old").await.unwrap(), None);
        assert_eq!(store.load_setting("transport_session.unreadable").await.unwrap(), None);
        assert_eq!(runtime.transport_session("b").await.unwrap().as_deref(), Some("{\"x\": 1}"), "a recent one stays");
    }
}
