//! Data belongs to its principal: with a principal on the call, the registry lets a call reach
//! only the sessions, chats, tasks and registered graphs of sessions the principal may reach, and
//! answers every other as if it did not exist. Without a principal everything is reachable.

use serde_json::{Value, json};
use std::sync::Arc;

use cks_runtime::store::ChatRow;

use crate::testing::{self, structure};
use crate::{Principal, Registry, Scope, ToolContext};

fn as_(ctx: &ToolContext, subject: &str, scope: Scope, groups: &[&str]) -> ToolContext {
    let principal = Principal {
        issuer: "https://id.example".into(),
        subject: subject.into(),
        scope: Some(scope),
        groups: groups.iter().map(|g| (*g).to_owned()).collect(),
    };
    ToolContext { principal: Some(Arc::new(principal)), ..ctx.clone() }
}

async fn call(ctx: &ToolContext, name: &str, args: Value) -> Value {
    Registry::standard().call(name, args, ctx).await.unwrap()
}

/// A session A made, holding one object.
async fn a_session(a: &ToolContext) -> String {
    let add = json!({"type": "add_object", "identity": {"id": "e", "type": "Planet", "name": "Earth"}});
    let made =
        call(a, "evolve_knowledge", json!({"json_data": structure(vec![]).to_string(), "operations": [add]})).await;
    made["session_id"].as_str().unwrap_or_else(|| panic!("{made}")).to_owned()
}

#[tokio::test]
async fn another_principal_finds_no_session_of_a() {
    let ctx = testing::context();
    let a = as_(&ctx, "a", Scope::Write, &[]);
    let b = as_(&ctx, "b", Scope::Write, &["lab"]);
    let id = a_session(&a).await;
    assert!(call(&a, "serialize_knowledge", json!({"session_id": id})).await.get("error").is_none());
    let refused = call(&b, "serialize_knowledge", json!({"session_id": id})).await;
    assert_eq!(refused["error"], "session_not_found", "{refused}");
    let refused = call(
        &b,
        "evolve_knowledge",
        json!({"session_id": id, "operations": [{"type": "remove_object", "object_id": "e"}]}),
    )
    .await;
    assert_eq!(refused["error"], "session_not_found");
    // An optional session argument is checked too.
    let refused = call(&b, "list_dead_lettered_conflicts", json!({"session_id": id})).await;
    assert_eq!(refused["error"], "session_not_found");
    // The local user (no principal) and an administrator reach it.
    assert!(call(&ctx, "serialize_knowledge", json!({"session_id": id})).await.get("error").is_none());
    let admin = as_(&ctx, "root", Scope::Admin, &[]);
    assert!(call(&admin, "serialize_knowledge", json!({"session_id": id})).await.get("error").is_none());
    // Sessions made without a principal are everyone's.
    let ownerless = testing::session(&ctx, structure(vec![])).await;
    assert!(call(&b, "serialize_knowledge", json!({"session_id": ownerless})).await.get("error").is_none());
    // B's branch of its own session is B's.
    let branch = call(&b, "create_branch", json!({"session_id": ownerless})).await;
    let branch = branch["session_id"].as_str().unwrap().to_owned();
    assert_eq!(call(&a, "list_versions", json!({"session_id": branch})).await["error"], "session_not_found");
}

#[tokio::test]
async fn chats_tasks_and_graphs_of_a_are_hidden_from_b() {
    let ctx = testing::context();
    let a = as_(&ctx, "a", Scope::Write, &[]);
    let b = as_(&ctx, "b", Scope::Write, &["lab"]);
    let id = a_session(&a).await;
    let chat = ChatRow {
        chat_id: "chat-a".into(),
        session_id: id.clone(),
        title: "t".into(),
        messages: "[]".into(),
        message_count: 0,
        tool_calls: "[]".into(),
        created_at: "2026-01-01T00:00:00Z".into(),
        updated_at: "2026-01-01T00:00:00Z".into(),
        revision: 1,
    };
    assert!(ctx.runtime.chats().save(&chat, None).await.unwrap());
    assert_eq!(call(&b, "get_chat", json!({"chat_id": "chat-a"})).await["error"], "chat_not_found");
    assert_eq!(call(&b, "delete_chat", json!({"chat_id": "chat-a"})).await["error"], "chat_not_found");
    assert_eq!(call(&a, "get_chat", json!({"chat_id": "chat-a"})).await["chat_id"], "chat-a");

    let task = testing::queue(&ctx, "inference_conflict", &id, json!({})).await;
    let refused = call(&b, "complete_conflict_task", json!({"task_id": task})).await;
    assert_eq!(refused["error"], "task_not_found", "{refused}");
    assert!(ctx.runtime.tasks().get(task).await.unwrap().is_some(), "the task is still queued");

    let registered = call(&a, "register_graph", json!({"name": "secret", "session_id": id})).await;
    assert!(registered.get("error").is_none(), "{registered}");
    assert_eq!(call(&b, "get_graph", json!({"name": "secret"})).await["error"], "graph_not_found");
    let taken = call(
        &b,
        "register_graph",
        json!({"name": "secret", "session_id": testing::session(&ctx, structure(vec![])).await}),
    )
    .await;
    assert_eq!(taken["error"], "graph_not_found", "B cannot take A's name");
    assert_eq!(call(&a, "get_graph", json!({"name": "secret"})).await["session_id"], id.as_str());
    // A team graph is readable by the team's members, a public one by everyone; neither is writable.
    call(&a, "register_graph", json!({"name": "secret", "session_id": id, "visibility": "team", "team": "lab"})).await;
    assert_eq!(call(&b, "get_graph", json!({"name": "secret"})).await["session_id"], id.as_str());
    let outsider = as_(&ctx, "c", Scope::Write, &["other"]);
    assert_eq!(call(&outsider, "get_graph", json!({"name": "secret"})).await["error"], "graph_not_found");
    call(&a, "register_graph", json!({"name": "secret", "session_id": id, "visibility": "public"})).await;
    assert_eq!(call(&outsider, "get_graph", json!({"name": "secret"})).await["session_id"], id.as_str());
    let refused = call(&outsider, "update_graph_lifecycle", json!({"name": "secret", "state": "published"})).await;
    assert_eq!(refused["error"], "graph_not_found", "{refused}");
}

#[tokio::test]
async fn listings_show_only_what_the_principal_reaches() {
    let ctx = testing::context();
    let a = as_(&ctx, "a", Scope::Write, &[]);
    let b = as_(&ctx, "b", Scope::Write, &["lab"]);
    let id = a_session(&a).await;
    testing::queue(&ctx, "gossip_conflict", &id, json!({})).await;
    assert_eq!(call(&a, "list_gossip_conflicts", json!({})).await["count"], 1);
    assert_eq!(call(&b, "list_gossip_conflicts", json!({})).await["count"], 0);
    assert_eq!(call(&ctx, "list_gossip_conflicts", json!({})).await["count"], 1, "the local user sees all");

    // Team graphs come from the token's groups, not from the argument.
    call(&a, "register_graph", json!({"name": "lab-graph", "session_id": id, "visibility": "team", "team": "lab"}))
        .await;
    let names =
        |listing: Value| listing["graphs"].as_array().unwrap().iter().map(|g| g["name"].clone()).collect::<Vec<_>>();
    assert_eq!(names(call(&b, "list_graphs", json!({})).await), [json!("lab-graph")]);
    assert_eq!(names(call(&a, "list_graphs", json!({"team": "lab"})).await), Vec::<Value>::new(), "A is not in lab");
    assert_eq!(names(call(&ctx, "list_graphs", json!({"team": "lab"})).await), [json!("lab-graph")]);
    assert_eq!(names(call(&b, "search_graphs", json!({"query": "lab"})).await), [json!("lab-graph")]);
}
