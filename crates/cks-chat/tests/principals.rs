//! `ai_chat` turns by one principal whose scripted model asks, again and again, for another
//! principal's sessions, versions, chats, tasks and private graphs: every call goes through the
//! registry as the caller, so none of it is read or changed.

mod support;

use proptest::prelude::*;
use serde_json::{Map, Value, json};
use std::sync::Arc;

use cks_runtime::access::as_principal;
use cks_runtime::store::ChatRow;
use cks_tools::{Principal, Scope, ToolContext};

use support::{Answer, Harness, Scripted, graph};

/// Text only A's data holds.
const SECRET: &str = "secret-of-a-5e1d";

fn principal(subject: &str) -> Principal {
    Principal {
        issuer: "https://id.example".into(),
        subject: subject.into(),
        scope: Some(Scope::Write),
        groups: vec![],
    }
}

/// What A keeps.
#[derive(Clone, Default)]
struct OfA {
    session: String,
    version: String,
    chat: String,
    task: i64,
    graph: String,
}

/// The argument names a model may use to point at A's things, and what each gets.
const KEYS: [&str; 12] = [
    "session_id",
    "source_session_id",
    "target_session_id",
    "graph_a_session_id",
    "chat_id",
    "task_id",
    "name",
    "graph_name",
    "target_version_id",
    "version_id",
    "json_data",
    "operations",
];

fn value(key: &str, of_a: &OfA) -> Value {
    match key {
        "chat_id" => json!(of_a.chat),
        "task_id" => json!(of_a.task),
        "name" | "graph_name" => json!(of_a.graph),
        "target_version_id" | "version_id" => json!(of_a.version),
        "json_data" => json!(""),
        "operations" => json!([{"type": "remove_object", "object_id": "a-a"}]),
        _ => json!(of_a.session),
    }
}

/// Per answer of the model: its calls, each a tool (index into the registry) and the argument keys.
type Script = Vec<Vec<(usize, Vec<usize>)>>;

fn script() -> impl Strategy<Value = Script> {
    let call = (0..200usize, proptest::collection::vec(0..KEYS.len(), 0..6));
    proptest::collection::vec(proptest::collection::vec(call, 1..4), 1..9)
}

struct World {
    runtime: tokio::runtime::Runtime,
    harness: Harness,
    b: ToolContext,
    b_session: String,
    of_a: OfA,
    case: Arc<std::sync::Mutex<(Script, usize)>>,
    names: Vec<String>,
}

async fn snapshot(ctx: &ToolContext, of_a: &OfA) -> String {
    let store = ctx.runtime.store();
    let parts = [
        format!("{:?}", store.load_session(&of_a.session).await.unwrap()),
        format!("{:?}", store.list_versions(&of_a.session).await.unwrap()),
        format!("{:?}", store.load_chat(&of_a.chat).await.unwrap()),
        format!("{:?}", store.get_task(of_a.task).await.unwrap()),
        format!("{:?}", store.get_graph(&of_a.graph).await.unwrap()),
    ];
    parts.join("\n")
}

fn world() -> &'static World {
    static WORLD: std::sync::OnceLock<World> = std::sync::OnceLock::new();
    WORLD.get_or_init(|| {
        let case: Arc<std::sync::Mutex<(Script, usize)>> = Arc::default();
        let playing = case.clone();
        let of_a_cell: Arc<std::sync::OnceLock<(OfA, Vec<String>)>> = Arc::default();
        let reading = of_a_cell.clone();
        let model = Scripted::unrecorded(move || {
            let (of_a, names) = reading.get().expect("set before any turn");
            let mut case = playing.lock().unwrap();
            let i = case.1;
            case.1 += 1;
            match case.0.get(i) {
                Some(calls) => Answer::Tools(
                    calls
                        .iter()
                        .map(|(tool, keys)| {
                            let args: Map<String, Value> =
                                keys.iter().map(|k| (KEYS[*k].to_owned(), value(KEYS[*k], of_a))).collect();
                            (names[tool % names.len()].clone(), Value::Object(args))
                        })
                        .collect(),
                ),
                None => Answer::Text("done".into()),
            }
        });
        let harness = Harness::new(model);
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let a = ToolContext { principal: Some(Arc::new(principal("a"))), ..harness.ctx.clone() };
        let b = ToolContext { principal: Some(Arc::new(principal("b"))), ..harness.ctx.clone() };
        let (of_a, b_session) = runtime.block_on(async {
            let mut data = graph("a");
            data["objects"][0]["identity"]["name"] = json!(SECRET);
            let session = as_principal(Some(principal("a").id()), harness.session(data)).await;
            let evolved = harness
                .registry
                .call("evolve_knowledge", json!({"session_id": session, "operations": [{"type": "add_object", "identity": {"id": "n", "type": "Note", "name": SECRET}}]}), &a)
                .await
                .unwrap();
            let version = evolved["version_id"].as_str().unwrap_or_else(|| panic!("{evolved}")).to_owned();
            let chat = ChatRow {
                chat_id: "chat-of-a".into(),
                session_id: session.clone(),
                title: SECRET.into(),
                messages: json!([{"role": "user", "content": SECRET}]).to_string(),
                message_count: 1,
                tool_calls: "[]".into(),
                created_at: "2026-01-01T00:00:00Z".into(),
                updated_at: "2026-01-01T00:00:00Z".into(),
                revision: 1,
            };
            harness.ctx.runtime.chats().save(&chat, None).await.unwrap();
            let tasks = harness.ctx.runtime.tasks();
            let note = json!({"note": SECRET});
            let task = tasks.enqueue("inference_conflict", &session, &note, None).await.unwrap().unwrap();
            let registered = harness
                .registry
                .call("register_graph", json!({"name": "graph-of-a", "session_id": session, "description": SECRET}), &a)
                .await
                .unwrap();
            assert!(registered.get("error").is_none(), "{registered}");
            let b_session = as_principal(Some(principal("b").id()), harness.session(graph("b"))).await;
            (OfA { session, version, chat: chat.chat_id, task, graph: "graph-of-a".into() }, b_session)
        });
        let names: Vec<String> = harness.registry.iter().map(|t| t.meta().name.to_owned()).collect();
        let _ = of_a_cell.set((of_a.clone(), names.clone()));
        World { runtime, harness, b, b_session, of_a, case, names }
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn chat_turns_by_b_never_reach_the_data_of_a(script in script()) {
        let world = world();
        world.runtime.block_on(async {
            let before = snapshot(&world.harness.ctx, &world.of_a).await;
            *world.case.lock().unwrap() = (script, 0);
            let out = world
                .harness
                .registry
                .call("ai_chat", json!({"session_id": world.b_session, "prompt": "show me everything"}), &world.b)
                .await
                .unwrap();
            assert!(out.get("reply").is_some() || out.get("error").is_some(), "{out}");
            assert!(out["tool_calls"].as_array().is_some_and(|calls| !calls.is_empty()), "the model's calls were answered");
            assert!(!out.to_string().contains(SECRET), "B read A's data: {out}");
            assert_eq!(snapshot(&world.harness.ctx, &world.of_a).await, before, "B changed A's data: {out}");
        });
    }
}

#[test]
fn a_chat_of_b_cannot_be_on_a_session_or_chat_of_a() {
    let world = world();
    assert!(world.names.len() > 50, "the registry's every tool is in play");
    world.runtime.block_on(async {
        let call = |args: Value| world.harness.registry.call("ai_chat", args, &world.b);
        let on_a = call(json!({"session_id": world.of_a.session, "prompt": "hi"})).await.unwrap();
        assert_eq!(on_a["error"], "session_not_found", "{on_a}");
        let chat_of_a = call(json!({"session_id": world.b_session, "chat_id": world.of_a.chat, "prompt": "hi"})).await;
        assert_eq!(chat_of_a.unwrap()["error"], "chat_not_found");
    });
}
