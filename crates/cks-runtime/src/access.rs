//! Who a session belongs to and who else may reach it.
//!
//! A session created by a principal (a caller an access token named) records its owner, and the
//! principals and groups it is shared with, under one key of its metadata ([`ACCESS_KEY`]). The
//! metadata is already kept by every store, copied by backups and migrations, and shown with the
//! session, so ownership needs no table of its own. A session without the key is ownerless:
//! reachable by everyone, as every session was before owners were recorded.
//!
//! The runtime records the owner; it decides nothing. Callers above it (the tool registry) ask
//! [`SessionAccess::admits`] before they let a call reach a session.
//!
//! The principal creating sessions is carried by the call, not passed to each method: the tool
//! registry runs every handler inside [`as_principal`], and every way a session is made
//! ([`crate::Runtime::create_session`], branches, imports) reads it, so no tool can forget it.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::future::Future;

/// The session metadata key holding its [`SessionAccess`].
pub const ACCESS_KEY: &str = "_cks_access";

/// The key naming the principal who made a version (in its metadata) or queued a task (in its
/// payload): `{"issuer", "subject"}`.
pub const PRINCIPAL_KEY: &str = "principal";

/// A principal: an issuer and the subject it names (unique only together).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PrincipalId {
    pub issuer: String,
    pub subject: String,
}

/// A session's owner and those it is shared with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionAccess {
    pub owner: PrincipalId,
    /// Other principals that may read and change the session.
    #[serde(default)]
    pub principals: Vec<PrincipalId>,
    /// Groups (as tokens name them) whose members may read and change the session.
    #[serde(default)]
    pub groups: Vec<String>,
}

impl SessionAccess {
    /// A session owned by `owner`, shared with no one.
    pub fn owned_by(owner: PrincipalId) -> Self {
        SessionAccess { owner, principals: Vec::new(), groups: Vec::new() }
    }

    /// The access recorded in a session's metadata; `None` for an ownerless session. A record
    /// that does not parse is owned by no one: damage admits no one, rather than everyone.
    pub fn of(metadata: &Map<String, Value>) -> Option<SessionAccess> {
        let value = metadata.get(ACCESS_KEY)?;
        Some(serde_json::from_value(value.clone()).unwrap_or_else(|_| SessionAccess::owned_by(nobody())))
    }

    /// Writes this access into a session's metadata.
    pub fn write_to(&self, metadata: &mut Map<String, Value>) {
        let value = serde_json::to_value(self).expect("access records encode");
        metadata.insert(ACCESS_KEY.into(), value);
    }

    /// Whether `who`, a member of `groups`, may reach the session: its owner, a principal it is
    /// shared with, or a member of a group it is shared with.
    pub fn admits(&self, who: &PrincipalId, groups: &[String]) -> bool {
        self.owner == *who || self.principals.contains(who) || self.groups.iter().any(|g| groups.contains(g))
    }
}

/// No principal: what a damaged access record is owned by.
fn nobody() -> PrincipalId {
    PrincipalId { issuer: String::new(), subject: String::new() }
}

tokio::task_local! {
    static CREATOR: Option<PrincipalId>;
}

/// Runs `call` with `principal` as the creator of every session it makes.
pub async fn as_principal<F: Future>(principal: Option<PrincipalId>, call: F) -> F::Output {
    CREATOR.scope(principal, call).await
}

/// The principal the current call runs as, if any.
pub fn current_principal() -> Option<PrincipalId> {
    CREATOR.try_with(Clone::clone).ok().flatten()
}

/// Records the current principal as the owner in the metadata of a session being made, in place
/// of whatever access the metadata claimed; without a principal the metadata is left as given.
pub(crate) fn stamp(metadata: &mut Map<String, Value>) {
    if let Some(owner) = current_principal() {
        SessionAccess::owned_by(owner).write_to(metadata);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who(subject: &str) -> PrincipalId {
        PrincipalId { issuer: "https://id.example".into(), subject: subject.into() }
    }

    #[test]
    fn the_owner_those_shared_with_and_group_members_are_admitted() {
        let mut access = SessionAccess::owned_by(who("a"));
        assert!(access.admits(&who("a"), &[]));
        assert!(!access.admits(&who("b"), &["lab".into()]));
        access.principals.push(who("b"));
        access.groups.push("lab".into());
        assert!(access.admits(&who("b"), &[]));
        assert!(access.admits(&who("c"), &["lab".into()]));
        assert!(!access.admits(&who("c"), &["other".into()]));
        let other_issuer = PrincipalId { issuer: "https://elsewhere".into(), subject: "a".into() };
        assert!(!access.admits(&other_issuer, &[]));
    }

    #[test]
    fn access_round_trips_through_metadata_and_a_damaged_record_admits_no_one() {
        let mut metadata = Map::new();
        assert_eq!(SessionAccess::of(&metadata), None);
        let access = SessionAccess { owner: who("a"), principals: vec![who("b")], groups: vec!["lab".into()] };
        access.write_to(&mut metadata);
        assert_eq!(SessionAccess::of(&metadata), Some(access));
        metadata.insert(ACCESS_KEY.into(), Value::from("garbage"));
        let damaged = SessionAccess::of(&metadata).unwrap();
        assert!(!damaged.admits(&who("a"), &[]));
    }

    #[tokio::test]
    async fn the_creator_is_the_principal_of_the_call() {
        assert_eq!(current_principal(), None);
        let inner = as_principal(Some(who("a")), async { current_principal() }).await;
        assert_eq!(inner, Some(who("a")));
        let mut metadata = Map::new();
        metadata.insert(ACCESS_KEY.into(), Value::from("claimed"));
        as_principal(Some(who("a")), async { stamp(&mut metadata) }).await;
        assert_eq!(SessionAccess::of(&metadata), Some(SessionAccess::owned_by(who("a"))));
    }

    #[tokio::test]
    async fn sessions_versions_and_tasks_made_in_a_call_record_its_principal() {
        use crate::store::memory::MemoryStore;
        use crate::{CommitRequest, NewSession, Runtime, RuntimeConfig};
        use std::sync::Arc;
        let runtime = Runtime::new(Arc::new(MemoryStore::new()), RuntimeConfig::default());
        let ownerless = runtime.create_session(Default::default(), NewSession::default()).await.unwrap();
        assert_eq!(runtime.access(&ownerless.session_id).await.unwrap(), None, "no principal: ownerless");
        let made = as_principal(Some(who("a")), async {
            let options = NewSession { first_version: Some(Map::new()), ..Default::default() };
            let info = runtime.create_session(Default::default(), options).await.unwrap();
            let branch = runtime.create_branch(&info.session_id, None, Map::new()).await.unwrap();
            runtime.commit(&info.session_id, CommitRequest::operations(Vec::new())).await.unwrap();
            let task = runtime.tasks().enqueue("t", &info.session_id, &serde_json::json!({}), None).await.unwrap();
            (info.session_id, branch.session_id, task.unwrap())
        })
        .await;
        let (session, branch, task) = made;
        for id in [&session, &branch] {
            assert_eq!(runtime.access(id).await.unwrap(), Some(SessionAccess::owned_by(who("a"))));
        }
        let versions = runtime.store().list_versions(&session).await.unwrap();
        for version in versions {
            let metadata: Map<String, Value> = serde_json::from_str(&version.metadata).unwrap();
            assert_eq!(metadata[PRINCIPAL_KEY], serde_json::json!({"issuer": "https://id.example", "subject": "a"}));
        }
        let payload: Value = serde_json::from_str(&runtime.tasks().get(task).await.unwrap().unwrap().payload).unwrap();
        assert_eq!(payload[PRINCIPAL_KEY]["subject"], "a");
        let shared = SessionAccess { owner: who("a"), principals: vec![who("b")], groups: Vec::new() };
        runtime.set_access(&session, &shared).await.unwrap();
        assert_eq!(runtime.access(&session).await.unwrap(), Some(shared.clone()));
        assert_eq!(SessionAccess::of(&runtime.info(&session).await.unwrap().metadata), Some(shared));
    }
}
