//! What the built-in issuer remembers between requests, in the store so that any replica can
//! answer the next one: authorization codes (used once, within a minute) and refresh tokens.
//! Each is kept under the SHA-256 of its value, never the value.
//!
//! A refresh token is used once: using it answers a new one of the same family and keeps a
//! mark that it was spent. A spent token presented again means it leaked (OAuth 2.1 §4.3.1):
//! every live token of its family is revoked, so neither the thief nor the client can go on.
//!
//! Taking a code or a refresh token deletes its setting first; only the request whose delete
//! removed it goes on, so two requests racing with one value cannot both succeed.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use cks_runtime::Runtime;

use super::{BuiltinError, digest, now, random_id};

pub(crate) const CODE: &str = "oauth.code.";
pub(crate) const REFRESH: &str = "oauth.refresh.";
pub(crate) const SPENT: &str = "oauth.spent.";

/// How long an authorization code can be traded.
pub const CODE_SECONDS: u64 = 60;
/// How long a refresh token lives unused.
pub const REFRESH_SECONDS: u64 = 30 * 86_400;

/// What a person allowed a client: the principal, the scope, the resource; with the
/// authorization request's redirect URI and PKCE challenge while it is a code.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    pub client_id: String,
    pub subject: String,
    #[serde(default)]
    pub groups: Vec<String>,
    /// The upstream issuer the person signed in at; `None` for a local user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity_issuer: Option<String>,
    pub scope: String,
    pub resource: String,
    /// Every refresh token descending from one sign-in shares it.
    pub family: String,
    pub expires_at: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redirect_uri: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code_challenge: Option<String>,
}

/// A spent refresh token's mark.
#[derive(Debug, Serialize, Deserialize)]
struct Spent {
    family: String,
    expires_at: u64,
}

/// Why a code or a refresh token is not good (each is `invalid_grant`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    Unknown,
    Expired,
    /// A spent refresh token: its family is revoked.
    Replayed,
}

#[derive(Debug)]
pub struct Grants {
    runtime: Arc<Runtime>,
}

impl Grants {
    pub fn new(runtime: Arc<Runtime>) -> Grants {
        Grants { runtime }
    }

    /// A new authorization code for `grant`.
    pub async fn issue_code(&self, grant: &Grant) -> Result<String, BuiltinError> {
        let code = random_id(32);
        let grant = Grant { expires_at: now() + CODE_SECONDS, ..grant.clone() };
        self.save(CODE, &code, &grant).await?;
        Ok(code)
    }

    /// The grant behind a code, which is gone once taken.
    pub async fn take_code(&self, code: &str) -> Result<Result<Grant, Refused>, BuiltinError> {
        Ok(match self.take::<Grant>(CODE, code).await? {
            None => Err(Refused::Unknown),
            Some(grant) if grant.expires_at <= now() => Err(Refused::Expired),
            Some(grant) => Ok(grant),
        })
    }

    /// A new refresh token for `grant` (its family kept).
    pub async fn issue_refresh(&self, grant: &Grant) -> Result<String, BuiltinError> {
        let token = random_id(32);
        let grant =
            Grant { expires_at: now() + REFRESH_SECONDS, redirect_uri: None, code_challenge: None, ..grant.clone() };
        self.save(REFRESH, &token, &grant).await?;
        Ok(token)
    }

    /// The grant behind a refresh token, which is spent once taken. A spent one revokes its family.
    pub async fn take_refresh(&self, token: &str) -> Result<Result<Grant, Refused>, BuiltinError> {
        if let Some(grant) = self.take::<Grant>(REFRESH, token).await? {
            let spent = Spent { family: grant.family.clone(), expires_at: grant.expires_at };
            self.save(SPENT, token, &spent).await?;
            return Ok(if grant.expires_at <= now() { Err(Refused::Expired) } else { Ok(grant) });
        }
        let Some(spent) = self.load::<Spent>(SPENT, token).await? else { return Ok(Err(Refused::Unknown)) };
        self.revoke_family(&spent.family).await?;
        tracing::warn!(target: "cks_auth", family = %spent.family, "a spent refresh token was used again: its family is revoked");
        Ok(Err(Refused::Replayed))
    }

    /// Revokes every live refresh token of a family.
    async fn revoke_family(&self, family: &str) -> Result<(), BuiltinError> {
        for (key, text) in self.runtime.store().list_settings(REFRESH).await? {
            if serde_json::from_str::<Grant>(&text).is_ok_and(|grant| grant.family == family) {
                self.runtime.store().delete_setting(&key).await?;
            }
        }
        Ok(())
    }

    /// Forgets codes, refresh tokens and marks past their lifetime.
    pub async fn sweep(&self) -> Result<usize, BuiltinError> {
        #[derive(Deserialize)]
        struct Lifetime {
            expires_at: u64,
        }
        let mut forgotten = 0;
        for prefix in [CODE, REFRESH, SPENT] {
            for (key, text) in self.runtime.store().list_settings(prefix).await? {
                if serde_json::from_str::<Lifetime>(&text).is_ok_and(|l| l.expires_at <= now())
                    && self.runtime.store().delete_setting(&key).await?
                {
                    forgotten += 1;
                }
            }
        }
        Ok(forgotten)
    }

    /// A new family, for a sign-in.
    pub fn family() -> String {
        random_id(12)
    }

    async fn save(&self, prefix: &str, value: &str, record: &impl Serialize) -> Result<(), BuiltinError> {
        let text = serde_json::to_string(record).expect("grants encode");
        Ok(self.runtime.store().save_setting(&format!("{prefix}{}", digest(value)), &text).await?)
    }

    async fn load<T: serde::de::DeserializeOwned>(&self, prefix: &str, value: &str) -> Result<Option<T>, BuiltinError> {
        let text = self.runtime.store().load_setting(&format!("{prefix}{}", digest(value))).await?;
        Ok(text.and_then(|text| serde_json::from_str(&text).ok()))
    }

    /// The record, deleted: `None` when there was none, or another request took it first.
    async fn take<T: serde::de::DeserializeOwned>(&self, prefix: &str, value: &str) -> Result<Option<T>, BuiltinError> {
        let key = format!("{prefix}{}", digest(value));
        let Some(text) = self.runtime.store().load_setting(&key).await? else { return Ok(None) };
        if !self.runtime.store().delete_setting(&key).await? {
            return Ok(None);
        }
        Ok(serde_json::from_str(&text).ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cks_runtime::RuntimeConfig;
    use cks_runtime::store::memory::MemoryStore;

    fn grant() -> Grant {
        Grant {
            client_id: "c".into(),
            subject: "alice".into(),
            groups: vec![],
            identity_issuer: None,
            scope: "cks:read".into(),
            resource: "https://kg.example.com/mcp".into(),
            family: Grants::family(),
            expires_at: 0,
            redirect_uri: Some("https://app.example/cb".into()),
            code_challenge: Some("x".repeat(43)),
        }
    }

    fn grants() -> Grants {
        Grants::new(Arc::new(Runtime::new(Arc::new(MemoryStore::new()), RuntimeConfig::default())))
    }

    #[tokio::test]
    async fn a_code_is_taken_once() {
        let grants = grants();
        let code = grants.issue_code(&grant()).await.unwrap();
        let taken = grants.take_code(&code).await.unwrap().unwrap();
        assert_eq!((taken.subject.as_str(), taken.code_challenge.is_some()), ("alice", true));
        assert_eq!(grants.take_code(&code).await.unwrap(), Err(Refused::Unknown));
        assert_eq!(grants.take_code("made-up").await.unwrap(), Err(Refused::Unknown));
    }

    #[tokio::test]
    async fn a_spent_refresh_token_used_again_revokes_its_family_only() {
        let grants = grants();
        let first = grants.issue_refresh(&grant()).await.unwrap();
        let other = grants.issue_refresh(&grant()).await.unwrap();
        let taken = grants.take_refresh(&first).await.unwrap().unwrap();
        let second = grants.issue_refresh(&taken).await.unwrap();
        assert_eq!(grants.take_refresh(&first).await.unwrap(), Err(Refused::Replayed));
        assert_eq!(grants.take_refresh(&second).await.unwrap(), Err(Refused::Unknown), "the family is revoked");
        assert!(grants.take_refresh(&other).await.unwrap().is_ok(), "another sign-in's family is not");
        // Nothing is kept under a token's value.
        let keys = grants.runtime.store().list_settings("oauth.").await.unwrap();
        assert!(keys.iter().all(|(key, text)| !key.contains(&first) && !text.contains(&first)));
    }

    #[tokio::test]
    async fn expired_records_are_refused_and_swept() {
        let grants = grants();
        let code = grants.issue_code(&grant()).await.unwrap();
        let key = format!("{CODE}{}", digest(&code));
        let mut stale = grant();
        stale.expires_at = now() - 1;
        grants.runtime.store().save_setting(&key, &serde_json::to_string(&stale).unwrap()).await.unwrap();
        let _live = grants.issue_refresh(&grant()).await.unwrap();
        assert_eq!(grants.sweep().await.unwrap(), 1);
        assert_eq!(grants.take_code(&code).await.unwrap(), Err(Refused::Unknown));
        assert_eq!(grants.runtime.store().list_settings(REFRESH).await.unwrap().len(), 1);
    }
}
