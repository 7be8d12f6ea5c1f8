//! Data belongs to its principal: with a principal on the call, the registry lets a call reach
//! only the sessions, chats, tasks and registered graphs of sessions the principal may reach, and
//! answers every other as if it did not exist. Without a principal everything is reachable.

use serde_json::{Value, json};
use std::sync::Arc;

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
    let chat = testing::chat("chat-a", &id, "t");
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
    // A public graph may be cloned, but not under a name another principal's graph holds.
    let cloned = call(&outsider, "clone_graph", json!({"graph_name": "secret"})).await;
    assert!(cloned.get("error").is_none(), "{cloned}");
    let taken = call(&outsider, "clone_graph", json!({"graph_name": "secret", "copy_name": "secret"})).await;
    assert_eq!(taken["error"], "graph_not_found", "{taken}");
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

/// Text only A's data holds: it must never reach B.
const SECRET: &str = "secret-of-a-7f3c";

/// What A keeps: a session with a branch, a version, a stored chat, a queued task and a private
/// registered graph.
struct OfA {
    session: String,
    branch: String,
    version: String,
    chat: String,
    task: i64,
    graph: String,
}

async fn data_of_a(a: &ToolContext) -> OfA {
    let add = json!({"type": "add_object", "identity": {"id": "e", "type": "Planet", "name": SECRET}});
    let made =
        call(a, "evolve_knowledge", json!({"json_data": structure(vec![]).to_string(), "operations": [add]})).await;
    let session = made["session_id"].as_str().unwrap().to_owned();
    let version = made["version_id"].as_str().unwrap_or_else(|| panic!("{made}")).to_owned();
    let branch =
        call(a, "create_branch", json!({"session_id": session})).await["session_id"].as_str().unwrap().to_owned();
    let chat = testing::chat("chat-of-a", &session, SECRET);
    a.runtime.chats().save(&chat, None).await.unwrap();
    let task = testing::queue(a, "inference_conflict", &session, json!({"note": SECRET})).await;
    let graph = "graph-of-a".to_owned();
    let registered =
        call(a, "register_graph", json!({"name": graph, "session_id": session, "description": SECRET})).await;
    assert!(registered.get("error").is_none(), "{registered}");
    OfA { session, branch, version, chat: chat.chat_id, task, graph }
}

/// Everything of A's as stored: session rows (metadata, sharing, head, closed), versions, the
/// chat, the task and the gallery entry.
async fn snapshot(ctx: &ToolContext, of_a: &OfA) -> String {
    let store = ctx.runtime.store();
    let mut parts = Vec::new();
    for id in [&of_a.session, &of_a.branch] {
        parts.push(format!("{:?}", store.load_session(id).await.unwrap()));
        parts.push(format!("{:?}", store.list_versions(id).await.unwrap()));
    }
    parts.push(format!("{:?}", store.load_chat(&of_a.chat).await.unwrap()));
    parts.push(format!("{:?}", store.get_task(of_a.task).await.unwrap()));
    parts.push(format!("{:?}", store.get_graph(&of_a.graph).await.unwrap()));
    parts.join("\n")
}

/// A small deterministic generator: every failure names its seed.
struct Dice(u64);

impl Dice {
    fn roll(&mut self, sides: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % sides as u64) as usize
    }
}

/// A value for one argument: what A has of the kind the argument names, or, at random, any of A's
/// ids or a plain value of the schema's type.
fn value_for(tool: &crate::RegisteredTool, field: &str, schema: &Value, of_a: &OfA, dice: &mut Dice) -> Value {
    let sessions = [&of_a.session, &of_a.branch];
    if tool.meta().session_fields.contains(&field) {
        return json!(sessions[dice.roll(2)]);
    }
    if let Some((_, named)) = tool.tool.named().iter().find(|(name, _)| *name == field) {
        return match named {
            crate::Named::Chat => json!(of_a.chat),
            crate::Named::Task => json!(of_a.task),
            crate::Named::Graph | crate::Named::GraphSource => json!(of_a.graph),
        };
    }
    if field.contains("version") {
        return json!(of_a.version);
    }
    let any_id = [json!(of_a.session), json!(of_a.branch), json!(of_a.chat), json!(of_a.graph), json!(of_a.version)];
    match schema.get("type").and_then(Value::as_str) {
        Some("integer" | "number") => [json!(of_a.task), json!(1)][dice.roll(2)].clone(),
        Some("boolean") => json!(dice.roll(2) == 0),
        Some("array") => json!([any_id[dice.roll(any_id.len())].clone()]),
        Some("object") => json!({}),
        _ => any_id[dice.roll(any_id.len())].clone(),
    }
}

/// Random tool calls by B, over every tool B's scope allows, with arguments naming A's sessions,
/// branches, versions, chat, task and private graph, never read or change any of it.
#[tokio::test]
async fn random_calls_by_b_never_reach_the_data_of_a() {
    let ctx = testing::context();
    let a = as_(&ctx, "a", Scope::Write, &["a-team"]);
    let b = as_(&ctx, "b", Scope::Write, &["b-team"]);
    let of_a = data_of_a(&a).await;
    let registry = Registry::standard();
    let before = snapshot(&ctx, &of_a).await;
    let mut tried = 0;
    for seed in 1..=4u64 {
        let mut dice = Dice(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        // A `cks:write` token cannot call the administrative tools at all: HTTP refuses them by scope
        // before the registry sees them, so they are not B's to try here.
        for tool in registry.iter().filter(|tool| Scope::for_tool(tool.meta()) < Scope::Admin) {
            let schema = tool.schema();
            let required: Vec<&str> = schema
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let mut args = serde_json::Map::new();
            for (field, property) in schema.get("properties").and_then(Value::as_object).into_iter().flatten() {
                // Every required argument, and each optional one half the time.
                if required.contains(&field.as_str()) || dice.roll(2) == 0 {
                    args.insert(field.clone(), value_for(tool, field, property, &of_a, &mut dice));
                }
            }
            let name = tool.meta().name;
            let result = registry.call(name, Value::Object(args.clone()), &b).await.unwrap();
            tried += 1;
            assert!(!result.to_string().contains(SECRET), "seed {seed}: {name}({args:?}) read A's data: {result}");
            let after = snapshot(&ctx, &of_a).await;
            assert_eq!(before, after, "seed {seed}: {name}({args:?}) changed A's data: {result}");
        }
    }
    assert!(tried > 200, "every tool was tried");
    // A still reaches everything.
    assert!(call(&a, "serialize_knowledge", json!({"session_id": of_a.session})).await.to_string().contains(SECRET));
}

/// A process's record as a worker writes it, of `kind`, started at `started_at`.
fn process(kind: &str, started_at: &str) -> cks_runtime::processes::ProcessRecord {
    cks_runtime::processes::ProcessRecord {
        started_at: started_at.into(),
        last_heartbeat_at: cks_runtime::runtime::now(),
        liveness_interval_s: 60.0,
        ..cks_runtime::processes::ProcessRecord::starting(kind, 60.0)
    }
}

/// Processes work for every session, so every principal sees them and their totals; the task a
/// process works on and its last error (which quotes that task) only those who reach its session.
#[tokio::test]
async fn processes_show_a_task_and_its_error_only_to_those_who_reach_its_session() {
    let ctx = testing::context();
    let a = as_(&ctx, "a", Scope::Read, &[]);
    let b = as_(&ctx, "b", Scope::Read, &["lab"]);
    let id = a_session(&as_(&ctx, "a", Scope::Write, &[])).await;
    let task = testing::queue(&ctx, "inference_conflict", &id, json!({})).await;
    let busy = cks_runtime::processes::ProcessRecord {
        current_task_id: Some(task),
        current_task_type: Some("inference_conflict".into()),
        current_session_id: Some(id.clone()),
        last_error: Some(format!("task {task}: {SECRET}")),
        last_error_session_id: Some(id.clone()),
        tasks_done: 3,
        ..process("critic", "2026-01-02T00:00:00Z")
    };
    // A record that names no session for its task (a worker from before records named it): the
    // task's session decides. Its error is about no task (a failed claim): everyone's to see.
    let older = cks_runtime::processes::ProcessRecord {
        current_task_id: Some(task),
        current_task_type: Some("inference_conflict".into()),
        last_error: Some("claiming a task: the store is away".into()),
        ..process("enrichment", "2026-01-01T00:00:00Z")
    };
    ctx.runtime.report_process(&busy).await.unwrap();
    ctx.runtime.report_process(&older).await.unwrap();

    let fields =
        |view: &Value| (view["current_task_id"].clone(), view["current_task_type"].clone(), view["last_error"].clone());
    let listed = call(&b, "list_processes", json!({})).await;
    let processes = listed["processes"].as_array().unwrap_or_else(|| panic!("{listed}"));
    assert_eq!(processes.len(), 2, "B sees every process: {listed}");
    assert_eq!(processes[0]["instance_id"], busy.instance_id.as_str());
    assert_eq!(fields(&processes[0]), (Value::Null, Value::Null, Value::Null), "{listed}");
    assert_eq!(processes[0]["tasks_done"], 3, "totals name no one's data");
    assert_eq!(
        fields(&processes[1]),
        (Value::Null, Value::Null, json!("claiming a task: the store is away")),
        "{listed}"
    );
    assert!(!listed.to_string().contains(SECRET) && !listed.to_string().contains(&id));
    // process_status answers for B as for a process working on nothing.
    let status = call(&b, "process_status", json!({"process_kind": "critic"})).await;
    assert_eq!(
        (status["instance_id"].as_str(), fields(&status)),
        (Some(busy.instance_id.as_str()), fields(&processes[0]))
    );

    // A reaches the session, and the local user and an administrator everything: all shown.
    let admin = as_(&ctx, "root", Scope::Admin, &[]);
    for caller in [&a, &ctx, &admin] {
        let listed = call(caller, "list_processes", json!({})).await;
        let processes = listed["processes"].as_array().unwrap();
        assert_eq!(
            fields(&processes[0]),
            (json!(task), json!("inference_conflict"), json!(format!("task {task}: {SECRET}"))),
            "{listed}"
        );
        assert_eq!(processes[1]["current_task_id"], task);
        let status = call(caller, "process_status", json!({"process_kind": "critic"})).await;
        assert_eq!(status["current_task_id"], task);
    }
    // Shared with B's group, it is B's to see too.
    call(&as_(&ctx, "a", Scope::Write, &[]), "share_session", json!({"session_id": id, "groups": ["lab"]})).await;
    let listed = call(&b, "list_processes", json!({})).await;
    assert_eq!(listed["processes"][0]["last_error"], format!("task {task}: {SECRET}"));
    assert_eq!(listed["processes"][1]["current_task_id"], task);
}

/// A sweeper's error naming a session it could not read is shown only to those who reach it.
#[tokio::test]
async fn a_sweepers_error_naming_a_session_is_shown_only_to_those_who_reach_it() {
    let ctx = crate::tools::agents::testing::context().await;
    let a = as_(&ctx, "a", Scope::Read, &[]);
    let b = as_(&ctx, "b", Scope::Read, &[]);
    let mut metadata = serde_json::Map::new();
    cks_runtime::access::SessionAccess::owned_by(a.principal.as_ref().unwrap().id()).write_to(&mut metadata);
    let damaged = cks_runtime::store::SessionRow {
        session_id: format!("damaged-{SECRET}"),
        metadata: Value::Object(metadata).to_string(),
        ..Default::default()
    };
    ctx.runtime.store().create_session(&damaged, "not a structure".into()).await.unwrap();
    let swept = ctx.sweepers.as_ref().unwrap().run_once("contradiction").await.unwrap().unwrap();
    assert!(swept.last_error.unwrap().contains(SECRET), "the sweep skipped A's damaged session");

    let of = |listing: Value| {
        listing["agents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|agent| agent["agent_id"] == "contradiction")
            .cloned()
            .unwrap()
    };
    let seen_by_b = of(call(&b, "list_agents", json!({})).await);
    assert_eq!((seen_by_b["last_error"].clone(), seen_by_b["sweeps_completed"].clone()), (Value::Null, json!(1)));
    let status = call(&b, "agent_status", json!({"agent_id": "contradiction"})).await;
    assert_eq!(status["last_error"], Value::Null, "{status}");
    for caller in [&a, &ctx] {
        assert!(of(call(caller, "list_agents", json!({})).await)["last_error"].as_str().unwrap().contains(SECRET));
        let status = call(caller, "agent_status", json!({"agent_id": "contradiction"})).await;
        assert!(status["last_error"].as_str().unwrap().contains(SECRET), "{status}");
    }
}

/// get_metrics holds totals only: nothing in it names a session, so every principal sees it whole.
#[tokio::test]
async fn metrics_name_no_session() {
    let ctx = testing::context();
    let id = a_session(&as_(&ctx, "a", Scope::Write, &[])).await;
    let b = as_(&ctx, "b", Scope::Read, &[]);
    let metrics = call(&b, "get_metrics", json!({})).await;
    assert_eq!(metrics["runtime_metrics"]["sessions"], 1, "{metrics}");
    assert!(!metrics.to_string().contains(&id) && !metrics.to_string().contains("Earth"));
}

/// An export names no session the caller cannot reach: not its parent, not an ancestor, not a
/// merged branch in a version's metadata. The lineage goes up to the nearest ancestor the caller
/// cannot reach; the local user and an administrator see it whole.
#[tokio::test]
async fn exports_and_listings_name_no_session_the_caller_cannot_reach() {
    let ctx = testing::context();
    let a = as_(&ctx, "a", Scope::Write, &[]);
    let b = as_(&ctx, "b", Scope::Write, &[]);
    let admin = as_(&ctx, "root", Scope::Admin, &[]);
    let branch = |ctx: &ToolContext, of: &str| {
        let (ctx, of) = (ctx.clone(), of.to_owned());
        async move {
            let made = call(&ctx, "create_branch", json!({"session_id": of})).await;
            made["session_id"].as_str().unwrap_or_else(|| panic!("{made}")).to_owned()
        }
    };
    // An ownerless root; A's branch of it, and A's branch of that, shared with B.
    let root = testing::session(&ctx, structure(vec![testing::obj("e", "Planet", "Earth", json!({}))])).await;
    let hidden_parent = branch(&a, &root).await;
    let shared = branch(&a, &hidden_parent).await;
    call(&a, "share_session", json!({"session_id": shared, "principals": ["b"]})).await;
    // A merges a private branch of its own into the shared session.
    let merged = branch(&a, &shared).await;
    let add = json!([{"type": "add_object", "identity": {"id": "m", "type": "Moon", "name": "Moon"}}]);
    assert_eq!(call(&a, "evolve_knowledge", json!({"session_id": merged, "operations": add})).await["evolved"], true);
    let done = call(&a, "merge_branch", json!({"target_session_id": shared, "source_session_id": merged})).await;
    assert!(done.get("error").is_none(), "{done}");
    // B's own branch of the shared session.
    let of_b = branch(&b, &shared).await;

    let export = |ctx: &ToolContext, id: &str| {
        let (ctx, id) = (ctx.clone(), id.to_owned());
        async move {
            let result = call(&ctx, "export_session", json!({"session_id": id})).await;
            assert!(result.get("error").is_none(), "{result}");
            result
        }
    };
    let lineage = |result: &Value| {
        result["bundle"]["lineage"].as_array().unwrap().iter().map(|e| e["session_id"].clone()).collect::<Vec<_>>()
    };
    let by_b = export(&b, &shared).await;
    let text = by_b.to_string();
    assert!(!text.contains(&hidden_parent) && !text.contains(&merged), "B's export names A's sessions: {text}");
    let session = &by_b["bundle"]["session"];
    assert_eq!((&session["parent_session_id"], &session["parent_version_id"]), (&Value::Null, &Value::Null));
    assert_eq!(lineage(&by_b), Vec::<Value>::new(), "the lineage stops before the parent B cannot reach");
    let merge = &by_b["bundle"]["version_history"]["versions"].as_array().unwrap().last().unwrap()["metadata"];
    assert_eq!((&merge["tool"], &merge["source_session_id"]), (&json!("merge_branch"), &Value::Null));
    // The bundle still imports (into another server).
    let elsewhere = as_(&testing::context(), "b", Scope::Write, &[]);
    let imported = call(&elsewhere, "import_session", json!({"bundle_json": by_b["bundle_json"]})).await;
    assert!(imported.get("error").is_none(), "{imported}");

    let by_b = export(&b, &of_b).await;
    assert_eq!(by_b["bundle"]["session"]["parent_session_id"], shared.as_str());
    assert_eq!(lineage(&by_b), [json!(shared)], "up to the nearest ancestor B cannot reach");
    assert!(!by_b.to_string().contains(&hidden_parent) && !by_b.to_string().contains(&root));

    let listed = call(&b, "list_versions", json!({"session_id": shared})).await;
    assert!(!listed.to_string().contains(&merged), "{listed}");

    // A reaches every session of the shared one's lineage; the local user and an administrator all.
    let by_a = export(&a, &shared).await;
    assert_eq!(by_a["bundle"]["session"]["parent_session_id"], hidden_parent.as_str());
    assert_eq!(lineage(&by_a), [json!(hidden_parent), json!(root)]);
    assert!(by_a.to_string().contains(&merged));
    assert!(call(&a, "list_versions", json!({"session_id": shared})).await.to_string().contains(&merged));
    for caller in [&ctx, &admin] {
        assert_eq!(lineage(&export(caller, &of_b).await), [json!(shared), json!(hidden_parent), json!(root)]);
    }
}

/// A sandboxed pipeline run names its parent only to those who reach the parent.
#[tokio::test]
async fn a_pipeline_runs_parent_is_named_only_to_those_who_reach_it() {
    let ctx = testing::context();
    let a = as_(&ctx, "a", Scope::Write, &[]);
    let b = as_(&ctx, "b", Scope::Write, &[]);
    let parent = a_session(&a).await;
    let started = call(&a, "start_pipeline", json!({"session_id": parent, "parent_session_id": parent})).await;
    let sandbox = started["sandbox_session_id"].as_str().unwrap_or_else(|| panic!("{started}")).to_owned();
    call(&a, "share_session", json!({"session_id": sandbox, "principals": ["b"]})).await;
    let by_a = call(&a, "list_pipeline_runs", json!({"session_id": sandbox})).await;
    assert_eq!(by_a["runs"][0]["parent_session_id"], parent.as_str(), "{by_a}");
    let by_b = call(&b, "list_pipeline_runs", json!({"session_id": sandbox})).await;
    assert_eq!(by_b["count"], 1, "{by_b}");
    assert!(by_b["runs"][0].get("parent_session_id").is_none() && !by_b.to_string().contains(&parent), "{by_b}");
}

#[tokio::test]
async fn a_public_clone_names_its_source_only_to_those_who_may_read_it() {
    let ctx = testing::context();
    let a = as_(&ctx, "a", Scope::Write, &[]);
    let b = as_(&ctx, "b", Scope::Write, &["lab"]);
    let id = a_session(&a).await;
    call(&a, "register_graph", json!({"name": "secret", "session_id": id})).await;
    let cloned = call(&a, "clone_graph", json!({"graph_name": "secret", "copy_name": "copy", "public": true})).await;
    assert_eq!(cloned["source_graph_name"], "secret", "{cloned}");
    let source_in = |listing: Value| {
        let graphs = listing["graphs"].as_array().unwrap().clone();
        graphs.into_iter().find(|g| g["name"] == "copy").unwrap()["source_graph_name"].clone()
    };
    assert_eq!(source_in(call(&a, "list_graphs", json!({})).await), "secret");
    assert_eq!(source_in(call(&b, "list_graphs", json!({})).await), Value::Null, "B may not read secret");
    assert_eq!(source_in(call(&b, "search_graphs", json!({"query": "copy"})).await), Value::Null);
    assert_eq!(call(&b, "get_graph", json!({"name": "copy"})).await["source_graph_name"], Value::Null);
    assert_eq!(call(&ctx, "get_graph", json!({"name": "copy"})).await["source_graph_name"], "secret");
    // Once secret is the lab's, B's team, B may read it, and its name shows.
    call(&a, "register_graph", json!({"name": "secret", "session_id": id, "visibility": "team", "team": "lab"})).await;
    assert_eq!(call(&b, "get_graph", json!({"name": "copy"})).await["source_graph_name"], "secret");
}
