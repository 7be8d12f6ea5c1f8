//! API keys checked over HTTP: a `Authorization: Bearer cks_…` header names a key, the key names
//! a principal with its scope. The keys are made, listed and revoked by the admin tools
//! (`cks-tools`' `tools/keys/`, also `cks-mcp keys …`); this file only checks them.
//!
//! The check runs on every request, so it reads a copy of the records held in memory: found by
//! the key's id, then the key's digest compared in constant time. The copy is read again
//! - when any process on the store announces a change (`ApiKeysChanged`: a key made or revoked
//!   here, or on another replica of a PostgreSQL store);
//! - before it is trusted once it is older than the refresh interval (a process that announces
//!   nothing, such as the command line on a SQLite file, changed the keys).
//!
//! An id the copy does not know is looked up alone (a key made a moment ago, its announcement
//! still on its way): one read by key, as cheap as the request that asks.
//!
//! A key's text never appears in a log line, an error or a response; its id may.

use std::collections::HashMap;
use std::sync::{Arc, RwLock, Weak};
use std::time::{Duration, Instant};

use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use tokio::sync::broadcast::error::RecvError;

use cks_runtime::Runtime;
use cks_runtime::api_keys::ApiKeyRecord;
use cks_runtime::events::EventKind;
use cks_tools::Principal;
use cks_tools::api_keys;

/// How long a copy of the records is trusted without an announcement.
pub const REFRESH: Duration = Duration::from_secs(2);

/// Why a key is refused. Its text says what was wrong, never what the key was.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("no API key has this value")]
    Unknown,
    #[error("the API key was revoked")]
    Revoked,
    #[error("the API key expired")]
    Expired,
    #[error("the API keys could not be read; try again")]
    Unavailable,
}

/// The keys as this process knows them.
#[derive(Debug)]
pub struct KeyRing {
    runtime: Arc<Runtime>,
    refresh: Duration,
    copy: RwLock<Copy>,
    /// Held while the records are read, so concurrent requests read them once.
    reading: tokio::sync::Mutex<()>,
}

#[derive(Debug)]
struct Copy {
    keys: HashMap<String, Key>,
    read_at: Instant,
}

#[derive(Debug)]
struct Key {
    digest: [u8; 32],
    principal: Option<Arc<Principal>>,
    expires_at: Option<OffsetDateTime>,
    revoked: bool,
}

impl KeyRing {
    /// Reads the keys and follows the store's announcements of changes for as long as the ring
    /// is held.
    pub async fn load(runtime: Arc<Runtime>, refresh: Duration) -> Result<Arc<KeyRing>, cks_runtime::RuntimeError> {
        let events = runtime.subscribe();
        let ring = Arc::new(KeyRing {
            copy: RwLock::new(Copy { keys: HashMap::new(), read_at: Instant::now() }),
            runtime,
            refresh,
            reading: tokio::sync::Mutex::new(()),
        });
        ring.read().await?;
        tokio::spawn(follow(Arc::downgrade(&ring), events));
        Ok(ring)
    }

    /// The principal a key acts as.
    pub async fn check(&self, text: &str) -> Result<Arc<Principal>, KeyError> {
        let id = api_keys::id_of(text).ok_or(KeyError::Unknown)?;
        let digest: [u8; 32] = Sha256::digest(text.as_bytes()).into();
        let age = self.age();
        if age > self.refresh {
            self.read_since(age).await?;
        }
        match self.find(id, &digest) {
            Err(KeyError::Unknown) => {
                self.read_one(id).await?;
                self.find(id, &digest)
            }
            found => found,
        }
    }

    /// Looks one key up in the store, and keeps it when found.
    async fn read_one(&self, id: &str) -> Result<(), KeyError> {
        let record = self.runtime.api_key(id).await.map_err(unavailable)?;
        if let Some((id, key)) = record.and_then(entry) {
            self.copy.write().unwrap_or_else(std::sync::PoisonError::into_inner).keys.insert(id, key);
        }
        Ok(())
    }

    fn age(&self) -> Duration {
        self.copy.read().unwrap_or_else(std::sync::PoisonError::into_inner).read_at.elapsed()
    }

    fn find(&self, id: &str, digest: &[u8; 32]) -> Result<Arc<Principal>, KeyError> {
        let copy = self.copy.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        let key = copy.keys.get(id).ok_or(KeyError::Unknown)?;
        if !bool::from(key.digest.ct_eq(digest)) {
            return Err(KeyError::Unknown);
        }
        if key.revoked {
            return Err(KeyError::Revoked);
        }
        if key.expires_at.is_some_and(|at| at <= OffsetDateTime::now_utc()) {
            return Err(KeyError::Expired);
        }
        // A record naming no scope of ours acts as no one.
        key.principal.clone().ok_or(KeyError::Unknown)
    }

    /// Reads the records again, unless another request did since the copy was `age` old.
    async fn read_since(&self, age: Duration) -> Result<(), KeyError> {
        let _reading = self.reading.lock().await;
        if self.age() < age {
            return Ok(());
        }
        self.read().await.map_err(unavailable)
    }

    async fn read(&self) -> Result<(), cks_runtime::RuntimeError> {
        let started = Instant::now();
        let keys = self.runtime.api_keys().await?.into_iter().filter_map(entry).collect();
        // Stamped with the read's start: a change announced while it ran is read again.
        *self.copy.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Copy { keys, read_at: started };
        Ok(())
    }

    /// Marks the copy stale, so the next check reads the records first.
    fn stale(&self) {
        let mut copy = self.copy.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        copy.read_at = Instant::now().checked_sub(self.refresh + Duration::from_millis(1)).unwrap_or(copy.read_at);
    }
}

/// A record as the copy keeps it; `None` when its digest does not read (no key matches it).
fn entry(record: ApiKeyRecord) -> Option<(String, Key)> {
    let digest: [u8; 32] = crate::secret::hex_decode(&record.digest)?.try_into().ok()?;
    let key = Key {
        digest,
        principal: api_keys::principal(&record).map(Arc::new),
        // An expiry that does not read ends the key at once.
        expires_at: record
            .expires_at
            .as_deref()
            .map(|at| OffsetDateTime::parse(at, &Rfc3339).unwrap_or(OffsetDateTime::UNIX_EPOCH)),
        revoked: record.revoked_at.is_some(),
    };
    Some((record.id, key))
}

fn unavailable(e: cks_runtime::RuntimeError) -> KeyError {
    tracing::warn!(target: "cks_auth", error = %e, "API keys could not be read");
    KeyError::Unavailable
}

/// Reads the keys again when the store announces a change, until the ring is dropped.
async fn follow(ring: Weak<KeyRing>, mut events: tokio::sync::broadcast::Receiver<cks_runtime::events::Event>) {
    loop {
        let changed = match events.recv().await {
            Ok(event) => matches!(event.kind, EventKind::ApiKeysChanged { .. }),
            Err(RecvError::Lagged(_)) => true,
            Err(RecvError::Closed) => return,
        };
        let Some(ring) = ring.upgrade() else { return };
        if changed {
            ring.stale();
            let _ = ring.read_since(Duration::ZERO).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cks_runtime::RuntimeConfig;
    use cks_runtime::store::memory::MemoryStore;
    use cks_tools::Scope;
    use serde_json::json;

    async fn call(ctx: &cks_tools::ToolContext, tool: &str, args: serde_json::Value) -> serde_json::Value {
        cks_tools::Registry::standard().call(tool, args, ctx).await.unwrap()
    }

    async fn create(ctx: &cks_tools::ToolContext, args: serde_json::Value) -> (String, String) {
        let made = call(ctx, "create_api_key", args).await;
        (made["key"].as_str().unwrap().to_owned(), made["id"].as_str().unwrap().to_owned())
    }

    fn tools(runtime: &Arc<Runtime>) -> cks_tools::ToolContext {
        cks_tools::ToolContext::new(runtime.clone())
    }

    #[tokio::test]
    async fn a_key_acts_as_its_principal_until_revoked() {
        let runtime = Arc::new(Runtime::new(Arc::new(MemoryStore::new()), RuntimeConfig::default()));
        let ctx = tools(&runtime);
        // A refresh interval longer than the test: only announcements can change what it knows.
        let ring = KeyRing::load(runtime.clone(), Duration::from_secs(3600)).await.unwrap();
        let (key, id) = create(&ctx, json!({"subject": "ci", "scope": "cks:write", "groups": ["curators"]})).await;

        // Made after the ring read the keys: an unknown id is looked up.
        let principal = ring.check(&key).await.unwrap();
        assert_eq!((principal.issuer.as_str(), principal.subject.as_str()), (api_keys::ISSUER, "ci"));
        assert!(principal.allows(Scope::Write) && !principal.allows(Scope::Admin));
        assert_eq!(principal.groups, ["curators"]);

        // The same id with another secret is no key.
        let forged = format!("{}{}", &key[..key.len() - 1], if key.ends_with('0') { '1' } else { '0' });
        assert_eq!(ring.check(&forged).await.unwrap_err(), KeyError::Unknown);
        assert_eq!(ring.check("eyJhbGciOiJSUzI1NiJ9.e30.sig").await.unwrap_err(), KeyError::Unknown);

        call(&ctx, "revoke_api_key", json!({"id": id})).await;
        let refused = wait_for(|| async { ring.check(&key).await.err() }).await;
        assert_eq!(refused, KeyError::Revoked);
        assert!(!refused.to_string().contains(&key[16..]));
    }

    #[tokio::test]
    async fn an_expired_key_is_refused() {
        let runtime = Arc::new(Runtime::new(Arc::new(MemoryStore::new()), RuntimeConfig::default()));
        let ctx = tools(&runtime);
        let (key, id) = create(&ctx, json!({"subject": "ci", "scope": "cks:read", "expires_in_days": 1})).await;
        let mut record = runtime.api_key(&id).await.unwrap().unwrap();
        let ring = KeyRing::load(runtime.clone(), Duration::from_secs(3600)).await.unwrap();
        assert!(ring.check(&key).await.is_ok());
        record.expires_at = Some("2020-01-01T00:00:00Z".into());
        runtime.save_api_key(&record).await.unwrap();
        assert_eq!(wait_for(|| async { ring.check(&key).await.err() }).await, KeyError::Expired);
    }

    #[tokio::test]
    async fn a_change_nobody_announced_is_seen_after_the_refresh_interval() {
        let runtime = Arc::new(Runtime::new(Arc::new(MemoryStore::new()), RuntimeConfig::default()));
        let ctx = tools(&runtime);
        let (key, id) = create(&ctx, json!({"subject": "ci", "scope": "cks:read"})).await;
        let ring = KeyRing::load(runtime.clone(), Duration::from_millis(50)).await.unwrap();
        assert!(ring.check(&key).await.is_ok());
        // Written to the store directly, as another process would: no announcement here.
        let mut record = runtime.api_key(&id).await.unwrap().unwrap();
        record.revoked_at = Some("2026-01-01T00:00:00Z".into());
        let text = serde_json::to_string(&record).unwrap();
        runtime.store().save_setting(&format!("api_key.{id}"), &text).await.unwrap();
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert_eq!(ring.check(&key).await.unwrap_err(), KeyError::Revoked);
    }

    /// What `probe` finds once it finds something, within five seconds (announcements are
    /// handled by a task of their own).
    async fn wait_for<F, Fut>(probe: F) -> KeyError
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Option<KeyError>>,
    {
        for _ in 0..500 {
            if let Some(found) = probe().await {
                return found;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the key was still accepted after five seconds");
    }
}
