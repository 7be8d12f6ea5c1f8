//! Who makes a call and what they may do: the principal an access token names, with its scopes.
//!
//! Over HTTP with OAuth, `cks-mcp` validates the token and hands the principal to every call it
//! runs ([`crate::ToolContext::principal`]). Over stdio, and with one static HTTP token, there is
//! none: the caller is the server's one local user, who reaches everything.
//!
//! A principal reaches a session it owns, one shared with it or with one of its groups, and an
//! ownerless one ([`cks_runtime::access`]); `cks:admin` reaches every session.

use std::fmt;

use cks_runtime::access::{PrincipalId, SessionAccess};
use cks_runtime::{Runtime, RuntimeError};
use serde_json::{Map, Value};

use crate::tool::ToolMeta;

/// What a token allows, from least to most: each scope implies the ones before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// Read graphs, resources and prompts; subscribe; complete arguments.
    Read,
    /// Change graphs and run `ai_chat`.
    Write,
    /// Administer the server: storage, processes, sweepers, the gallery's entries.
    Admin,
}

impl Scope {
    /// Every scope, from least to most.
    pub const ALL: [Scope; 3] = [Scope::Read, Scope::Write, Scope::Admin];

    /// The scope's name in tokens and metadata.
    pub const fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "cks:read",
            Scope::Write => "cks:write",
            Scope::Admin => "cks:admin",
        }
    }

    /// The scope a token's scope name stands for; other names are not ours.
    pub fn parse(name: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|scope| scope.as_str() == name)
    }
}

/// Tools that administer the server: its storage, processes and sweepers, its API keys, the
/// gallery's shared names, and the task queue as a whole (a claim takes the next task of any
/// session). They need `cks:admin` whatever else their metadata says.
pub const ADMIN_TOOLS: &[&str] = &[
    "export_storage",
    "import_storage",
    "migrate_storage",
    "start_agent",
    "stop_agent",
    "request_process_stop",
    "unregister_graph",
    "update_graph_lifecycle",
    "retry_dead_letter",
    "reject_resolution",
    "claim_conflict_task",
    "create_api_key",
    "list_api_keys",
    "revoke_api_key",
];

/// Tools whose metadata declares no graph change, yet which change the server's state: the task
/// queue's claims and outcomes, queued work, a recorded version check (which also makes the
/// server fetch the URLs a graph names).
pub const WRITE_TOOLS: &[&str] =
    &["check_component_versions", "dead_letter_conflict_task", "fail_conflict_task", "request_enrichment"];

impl Scope {
    /// The scope a call of the tool needs: [`ADMIN_TOOLS`] need `cks:admin`; [`WRITE_TOOLS`] and
    /// every tool whose metadata declares a change need `cks:write`; the others `cks:read`.
    pub fn for_tool(meta: &ToolMeta) -> Scope {
        if ADMIN_TOOLS.contains(&meta.name) {
            Scope::Admin
        } else if WRITE_TOOLS.contains(&meta.name) || !meta.read_only() {
            Scope::Write
        } else {
            Scope::Read
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The caller an access token names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    /// The authorization server that issued the token (`iss`).
    pub issuer: String,
    /// The caller's identifier at that issuer (`sub`); unique only together with the issuer.
    pub subject: String,
    /// The highest of our scopes the token holds; `None` when it holds none of them.
    pub scope: Option<Scope>,
    /// The groups the token names (the configured claim): sessions shared with one of them, and
    /// the gallery's `team` graphs of one of them, are reachable.
    pub groups: Vec<String>,
}

impl Principal {
    /// Whether the token allows what `needed` allows (a higher scope implies the lower).
    pub fn allows(&self, needed: Scope) -> bool {
        self.scope.is_some_and(|held| held >= needed)
    }

    /// The principal as sessions record it.
    pub fn id(&self) -> PrincipalId {
        PrincipalId { issuer: self.issuer.clone(), subject: self.subject.clone() }
    }

    /// Whether this principal may reach a session with this access record (`None`: ownerless).
    pub fn reaches(&self, access: Option<&SessionAccess>) -> bool {
        self.allows(Scope::Admin) || access.is_none_or(|access| access.admits(&self.id(), &self.groups))
    }

    /// Whether this principal belongs to `team` (the groups its token names).
    pub fn in_team(&self, team: &str) -> bool {
        self.groups.iter().any(|group| group == team)
    }
}

/// Whether the caller may reach the session: always without a principal (the one local user);
/// with one, see [`Principal::reaches`]. A session that does not exist is reachable, so that the
/// caller answers for it as it would without a principal.
pub async fn reaches(runtime: &Runtime, principal: Option<&Principal>, id: &str) -> Result<bool, RuntimeError> {
    let Some(principal) = principal.filter(|p| !p.allows(Scope::Admin)) else { return Ok(true) };
    match runtime.access(id).await {
        Ok(access) => Ok(principal.reaches(access.as_ref())),
        Err(RuntimeError::SessionNotFound(_)) => Ok(true),
        Err(other) => Err(other),
    }
}

/// `id` when the caller may reach that session, else `None`: how a result names another session
/// (a parent, an ancestor, a merge's source) without naming one the caller cannot reach.
pub async fn reachable_id(
    runtime: &Runtime,
    principal: Option<&Principal>,
    id: Option<String>,
) -> Result<Option<String>, RuntimeError> {
    match id {
        Some(id) if reaches(runtime, principal, &id).await? => Ok(Some(id)),
        _ => Ok(None),
    }
}

/// Sets to null each value of `metadata` that names a session the caller cannot reach: a text
/// under a key ending in `session_id` (a merge's or a clone's `source_session_id`, the sides of a
/// merge of graphs).
pub async fn hide_unreachable_sessions(
    runtime: &Runtime,
    principal: Option<&Principal>,
    metadata: &mut Map<String, Value>,
) -> Result<(), RuntimeError> {
    if principal.is_none_or(|p| p.allows(Scope::Admin)) {
        return Ok(());
    }
    for (key, value) in metadata.iter_mut() {
        if key.ends_with("session_id")
            && let Value::String(id) = value
            && !reaches(runtime, principal, id).await?
        {
            *value = Value::Null;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admin_implies_write_implies_read() {
        let with = |scope| Principal { issuer: "i".into(), subject: "s".into(), scope, groups: vec![] };
        assert!(with(Some(Scope::Admin)).allows(Scope::Write) && with(Some(Scope::Admin)).allows(Scope::Read));
        assert!(with(Some(Scope::Write)).allows(Scope::Read) && !with(Some(Scope::Write)).allows(Scope::Admin));
        assert!(!with(Some(Scope::Read)).allows(Scope::Write));
        assert!(!with(None).allows(Scope::Read));
        assert_eq!(Scope::parse("cks:write"), Some(Scope::Write));
        assert_eq!(Scope::parse("cks:owner"), None);
    }

    #[test]
    fn a_principal_reaches_its_own_shared_and_ownerless_sessions_and_admin_all() {
        let with = |subject: &str, scope| Principal {
            issuer: "i".into(),
            subject: subject.into(),
            scope: Some(scope),
            groups: vec!["lab".into()],
        };
        let owned_by_a = SessionAccess::owned_by(with("a", Scope::Read).id());
        assert!(with("a", Scope::Read).reaches(Some(&owned_by_a)));
        assert!(!with("b", Scope::Write).reaches(Some(&owned_by_a)));
        assert!(with("b", Scope::Admin).reaches(Some(&owned_by_a)));
        assert!(with("b", Scope::Read).reaches(None), "ownerless sessions are everyone's");
        let shared_with_lab = SessionAccess { groups: vec!["lab".into()], ..owned_by_a };
        assert!(with("b", Scope::Read).reaches(Some(&shared_with_lab)));
    }
}
