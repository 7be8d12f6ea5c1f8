//! API keys' records: the credentials of headless clients (scripts, CI jobs, agents without a
//! browser), one per principal use. A record is a setting under `api_key.<id>`, so every server on
//! the store reads the same keys. It holds a digest of the key, never the key itself.
//!
//! Every change is announced to every process on the store ([`EventKind::ApiKeysChanged`]), so a
//! revoked key stops working on every replica, not only on the one that revoked it.
//!
//! Keys are not part of backups: credentials do not travel with the data (like the provenance
//! secret). A restored or migrated store gets new keys.

use serde::{Deserialize, Serialize};

use crate::error::RuntimeError;
use crate::events::EventKind;
use crate::runtime::Runtime;

pub(crate) const RECORD: &str = "api_key.";

/// One API key, as kept.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiKeyRecord {
    /// The key's public part: it names the key in lists, logs and revocations.
    pub id: String,
    /// The principal the key acts as: its issuer and subject, as an access token's `iss` and `sub`.
    pub issuer: String,
    pub subject: String,
    /// The scope it holds (`cks:read`, `cks:write` or `cks:admin`).
    pub scope: String,
    /// The groups it belongs to, as an access token's groups claim.
    #[serde(default)]
    pub groups: Vec<String>,
    /// What it is for, in the operator's words.
    #[serde(default)]
    pub label: Option<String>,
    /// The SHA-256 of the whole key, in hex.
    pub digest: String,
    /// RFC 3339 times.
    pub created_at: String,
    #[serde(default)]
    pub expires_at: Option<String>,
    #[serde(default)]
    pub revoked_at: Option<String>,
}

impl Runtime {
    /// Saves a key's record (new, or revoked) and tells every process on the store.
    pub async fn save_api_key(&self, record: &ApiKeyRecord) -> Result<(), RuntimeError> {
        let value = serde_json::to_string(record).expect("records encode");
        self.store().save_setting(&format!("{RECORD}{}", record.id), &value).await?;
        self.emit(EventKind::ApiKeysChanged { key_id: record.id.clone() });
        Ok(())
    }

    /// One key's record; `None` when there is none by that id.
    pub async fn api_key(&self, id: &str) -> Result<Option<ApiKeyRecord>, RuntimeError> {
        let text = self.store().load_setting(&format!("{RECORD}{id}")).await?;
        Ok(text.and_then(|text| serde_json::from_str(&text).ok()))
    }

    /// Every key's record, the oldest first. A record that does not read is skipped: a key
    /// nobody can check is no key.
    pub async fn api_keys(&self) -> Result<Vec<ApiKeyRecord>, RuntimeError> {
        let rows = self.store().list_settings(RECORD).await?;
        let mut records: Vec<ApiKeyRecord> =
            rows.iter().filter_map(|(_, text)| serde_json::from_str(text).ok()).collect();
        records.sort_by(|a, b| a.created_at.cmp(&b.created_at).then_with(|| a.id.cmp(&b.id)));
        Ok(records)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::RuntimeConfig;
    use crate::store::memory::MemoryStore;

    fn record(id: &str, created_at: &str) -> ApiKeyRecord {
        ApiKeyRecord {
            id: id.into(),
            issuer: "urn:cks-mcp:keys".into(),
            subject: "ci".into(),
            scope: "cks:read".into(),
            groups: vec![],
            label: None,
            digest: "00".repeat(32),
            created_at: created_at.into(),
            expires_at: None,
            revoked_at: None,
        }
    }

    #[tokio::test]
    async fn keys_are_kept_listed_oldest_first_and_announced() {
        let runtime = Runtime::new(Arc::new(MemoryStore::new()), RuntimeConfig::default());
        let mut events = runtime.subscribe();
        runtime.save_api_key(&record("b", "2026-01-02T00:00:00Z")).await.unwrap();
        runtime.save_api_key(&record("a", "2026-01-03T00:00:00Z")).await.unwrap();
        let ids: Vec<String> = runtime.api_keys().await.unwrap().into_iter().map(|r| r.id).collect();
        assert_eq!(ids, ["b", "a"]);
        assert_eq!(events.recv().await.unwrap().kind, EventKind::ApiKeysChanged { key_id: "b".into() });

        let mut revoked = record("b", "2026-01-02T00:00:00Z");
        revoked.revoked_at = Some("2026-02-01T00:00:00Z".into());
        runtime.save_api_key(&revoked).await.unwrap();
        assert_eq!(runtime.api_key("b").await.unwrap(), Some(revoked));
        assert_eq!(runtime.api_key("c").await.unwrap(), None);
    }
}
