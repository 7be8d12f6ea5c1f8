//! `share_session`: let other principals, or the members of a group, reach a session one owns
//! (read and change it, its branches' parent, its versions, chats and tasks), or stop letting them.
//!
//! Only the owner (or `cks:admin`, or the local user where there are no principals) changes who a
//! session is shared with; those it is shared with cannot share it further. An ownerless session
//! is everyone's already, so there is nothing to share.

use cks_runtime::access::{PrincipalId, SessionAccess};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ErrorCode;
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::principal::Scope;
use crate::tool::{Coercion, SessionCheck, Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The session to share; the caller must own it.
    pub(crate) session_id: String,
    /// Subjects (the tokens' 'sub') of principals at the owner's issuer.
    #[serde(default)]
    pub(crate) principals: Vec<String>,
    /// Groups, as the tokens' groups claim names them.
    #[serde(default)]
    pub(crate) groups: Vec<String>,
    /// Stop sharing with the principals and groups given, instead of starting.
    #[serde(default)]
    pub(crate) remove: bool,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    session_id: String,
    /// The owner's issuer and subject.
    owner: Owner,
    /// The subjects the session is now shared with, sorted.
    principals: Vec<String>,
    /// The groups the session is now shared with, sorted.
    groups: Vec<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
struct Owner {
    issuer: String,
    subject: String,
}

pub(crate) struct ShareSession;

#[async_trait::async_trait]
impl Tool for ShareSession {
    type Input = Input;
    type Output = Output;
    const ARGUMENT_COERCIONS: &'static [(&'static str, Coercion)] =
        &[("principals", Coercion::ListOfOne), ("groups", Coercion::ListOfOne), ("remove", Coercion::Truthy)];
    const TITLE: &'static str = "Share a session";
    const META: ToolMeta = ToolMeta {
        name: "share_session",
        description: "Share a session you own with other principals (their subjects at your issuer) or with \
            groups (as access tokens name them), or stop sharing with them (remove: true). Those it is shared \
            with read and change it as its owner does, but cannot share it further. Returns {session_id, \
            owner: {issuer, subject}, principals, groups} as they now are. Errors: not_session_owner (the \
            session is not yours, or has no owner: an ownerless session is everyone's).",
        mutates_graph: true,
        creates_session: false,
        destructive: false,
        idempotent: true,
        open_world: false,
        session_fields: &["session_id"],
        session_checks: &[SessionCheck::exists("session_id")],
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        let id = &input.session_id;
        let not_owner = |why: &str| {
            ToolError::new(ErrorCode::NotSessionOwner, format!("Session '{id}' {why}.")).with("session_id", id.as_str())
        };
        // Read, changed and written as one compare-and-swap, retried on what a share at the same
        // time (here or on another replica) left: no grant is lost to a later write.
        let access = ctx
            .runtime
            .update_access(id, |stored| {
                let mut access = stored.ok_or_else(|| not_owner("has no owner: it is everyone's"))?;
                if let Some(principal) = &ctx.principal
                    && !principal.allows(Scope::Admin)
                    && principal.id() != access.owner
                {
                    return Err(not_owner("is not yours to share"));
                }
                let principals = input
                    .principals
                    .iter()
                    .map(|subject| PrincipalId { issuer: access.owner.issuer.clone(), subject: subject.clone() })
                    .filter(|p| *p != access.owner);
                if input.remove {
                    let principals: Vec<PrincipalId> = principals.collect();
                    access.principals.retain(|p| !principals.contains(p));
                    access.groups.retain(|g| !input.groups.contains(g));
                } else {
                    let principals: Vec<PrincipalId> = principals.collect();
                    access.principals.extend(principals);
                    access.groups.extend(input.groups.iter().cloned());
                }
                tidy(&mut access);
                Ok(access)
            })
            .await?;
        Ok(Output {
            session_id: input.session_id,
            principals: access.principals.into_iter().map(|p| p.subject).collect(),
            groups: access.groups,
            owner: Owner { issuer: access.owner.issuer, subject: access.owner.subject },
        })
    }
}

/// Sorted, without duplicates or empty names.
fn tidy(access: &mut SessionAccess) {
    access.principals.retain(|p| !p.subject.is_empty());
    access.principals.sort();
    access.principals.dedup();
    access.groups.retain(|g| !g.is_empty());
    access.groups.sort();
    access.groups.dedup();
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};
    use std::sync::Arc;

    use crate::testing::{call, context, structure};
    use crate::{Principal, Scope, ToolContext};

    fn as_(ctx: &ToolContext, subject: &str, groups: &[&str]) -> ToolContext {
        with_scope(ctx, subject, Scope::Write, groups)
    }

    fn with_scope(ctx: &ToolContext, subject: &str, scope: Scope, groups: &[&str]) -> ToolContext {
        let principal = Principal {
            issuer: "https://id.example".into(),
            subject: subject.into(),
            scope: Some(scope),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
        };
        ToolContext { principal: Some(Arc::new(principal)), ..ctx.clone() }
    }

    /// Shares of one session at once, by its owner and by an administrator, through `contexts`
    /// in turn (one per server process on the store), each granting a principal and a group of
    /// its own: afterwards every grant is recorded, and each grantee reaches the session.
    async fn concurrent_shares_all_land(contexts: &[ToolContext]) {
        const SHARES: usize = 24;
        let owner = as_(&contexts[0], "owner", &[]);
        let add = json!({"type": "add_object", "identity": {"id": "e", "type": "Planet", "name": "Earth"}});
        let made =
            call(&owner, "evolve_knowledge", json!({"json_data": structure(vec![]).to_string(), "operations": [add]}))
                .await;
        let id = made["session_id"].as_str().unwrap_or_else(|| panic!("{made}")).to_owned();
        let mut calls = Vec::new();
        for i in 0..SHARES {
            let ctx = &contexts[i % contexts.len()];
            let caller = if i % 2 == 0 { as_(ctx, "owner", &[]) } else { with_scope(ctx, "root", Scope::Admin, &[]) };
            let args = json!({"session_id": id, "principals": [format!("p{i}")], "groups": [format!("g{i}")]});
            calls.push(tokio::spawn(async move { call(&caller, "share_session", args).await }));
        }
        for shared in calls {
            let shared = shared.await.unwrap();
            assert!(shared.get("error").is_none(), "{shared}");
        }
        let listed = call(&owner, "share_session", json!({"session_id": id})).await;
        let mut expected: Vec<String> = (0..SHARES).map(|i| format!("p{i}")).collect();
        expected.sort();
        assert_eq!(listed["principals"], json!(expected), "no grant was lost");
        let mut groups: Vec<String> = (0..SHARES).map(|i| format!("g{i}")).collect();
        groups.sort();
        assert_eq!(listed["groups"], json!(groups));
        for i in 0..SHARES {
            let ctx = &contexts[i % contexts.len()];
            assert!(read(&as_(ctx, &format!("p{i}"), &[]), &id).await.get("error").is_none(), "p{i} reaches it");
            assert!(read(&as_(ctx, "x", &[&format!("g{i}")]), &id).await.get("error").is_none(), "g{i} reaches it");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_shares_lose_no_grant_on_the_memory_store() {
        concurrent_shares_all_land(&[context()]).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_shares_lose_no_grant_on_sqlite_across_processes() {
        use cks_runtime::store::sqlite::SqliteStore;
        use cks_runtime::{Runtime, RuntimeConfig};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cks.db");
        // Two runtimes, each with its own connection to the file: two server processes.
        let open = || {
            let store = SqliteStore::open(&path, &Default::default()).unwrap();
            ToolContext::new(Arc::new(Runtime::new(Arc::new(store), RuntimeConfig::default())))
        };
        concurrent_shares_all_land(&[open(), open()]).await;
    }

    async fn read(ctx: &ToolContext, id: &str) -> Value {
        call(ctx, "serialize_knowledge", json!({"session_id": id})).await
    }

    #[tokio::test]
    async fn the_owner_shares_with_principals_and_groups_and_stops() {
        let ctx = context();
        let (a, b, c) = (as_(&ctx, "a", &[]), as_(&ctx, "b", &[]), as_(&ctx, "c", &["lab"]));
        let data = structure(vec![]).to_string();
        let add = json!({"type": "add_object", "identity": {"id": "e", "type": "Planet", "name": "Earth"}});
        let made = call(&a, "evolve_knowledge", json!({"json_data": data, "operations": [add]})).await;
        let id = made["session_id"].as_str().unwrap();
        assert_eq!(read(&b, id).await["error"], "session_not_found");

        let shared =
            call(&a, "share_session", json!({"session_id": id, "principals": ["b", "b"], "groups": "lab"})).await;
        assert_eq!(
            shared,
            json!({"session_id": id, "owner": {"issuer": "https://id.example", "subject": "a"},
                   "principals": ["b"], "groups": ["lab"]})
        );
        assert!(read(&b, id).await.get("error").is_none());
        assert!(read(&c, id).await.get("error").is_none());
        // Those it is shared with cannot share it further.
        let refused = call(&b, "share_session", json!({"session_id": id, "principals": ["d"]})).await;
        assert_eq!(refused["error"], "not_session_owner");

        let unshared = call(&a, "share_session", json!({"session_id": id, "principals": ["b"], "remove": true})).await;
        assert_eq!(unshared["principals"], json!([]));
        assert_eq!(read(&b, id).await["error"], "session_not_found");
        assert!(read(&c, id).await.get("error").is_none(), "the group keeps it");

        // An ownerless session has no one to share it.
        let ownerless = crate::testing::session(&ctx, structure(vec![])).await;
        let refused = call(&ctx, "share_session", json!({"session_id": ownerless, "groups": ["lab"]})).await;
        assert_eq!(refused["error"], "not_session_owner");
    }
}
