//! Adversarial transcripts: a model that calls random tool names (offered, found through
//! `find_tools`, denied, unknown) with
//! random arguments — real ids of other sessions in every string field, wrong types, nested junk,
//! huge strings — as structured calls or written as text (plain JSON or in `<tool_call>` tags),
//! which the loop may recover as calls. After every transcript: no other session changed, no
//! denied tool ran, no session was created, only offered or found tools ran from text, the loop ended
//! within the cap, nothing panicked.

mod support;

use async_trait::async_trait;
use proptest::prelude::*;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use cks_chat::{AiChatConfig, CHAT_TOOLS, DENIED_TOOLS, FIND_TOOLS};
use cks_runtime::gallery::{GraphFilter, Registration, Visibility};
use cks_tools::{Tool, ToolContext, ToolError, ToolMeta};

use support::{Answer, Harness, Scripted, graph};

static DENIED_RUNS: AtomicUsize = AtomicUsize::new(0);

#[derive(Debug, Deserialize, JsonSchema)]
struct AnyInput {}

/// A tool registered under a denied name and (wrongly) declared exposed: the denylist must still
/// keep it from running.
struct Trap(&'static str);

#[async_trait]
impl Tool for Trap {
    type Input = AnyInput;
    type Output = Value;
    const META: ToolMeta = ToolMeta {
        name: "placeholder",
        description: "must never run in a chat",
        mutates_graph: true,
        creates_session: false,
        destructive: true,
        idempotent: false,
        open_world: false,
        session_fields: &[],
        session_checks: &[],
        llm_exposed: true,
    };
    async fn run(&self, _ctx: &ToolContext, _input: AnyInput) -> Result<Value, ToolError> {
        DENIED_RUNS.fetch_add(1, Ordering::SeqCst);
        Ok(json!({"ran": self.0}))
    }
}

macro_rules! trap {
    ($ty:ident, $name:literal) => {
        struct $ty;
        #[async_trait]
        impl Tool for $ty {
            type Input = AnyInput;
            type Output = Value;
            const META: ToolMeta = ToolMeta { name: $name, ..Trap::META };
            async fn run(&self, ctx: &ToolContext, input: AnyInput) -> Result<Value, ToolError> {
                Trap($name).run(ctx, input).await
            }
        }
    };
}
trap!(TrapExport, "export_storage");
trap!(TrapImport, "import_storage");
trap!(TrapMigrate, "migrate_storage");
trap!(TrapStop, "request_process_stop");
trap!(TrapPipeline, "start_pipeline");

/// The other session's graph, registered under this name before every case.
const OTHER_GRAPH: &str = "the-other-graph";

const NAMES: &[&str] = &[
    "evolve_knowledge",
    "query_subgraph",
    "validate_knowledge",
    "serialize_knowledge",
    "explain_knowledge",
    "suggest_evolution",
    "list_versions",
    "revert_version",
    "compare_versions",
    "explain_diff",
    "search_semantic",
    "visualize_graph",
    "detect_contradictions",
    "merge_branch",
    "create_branch",
    "fork_sandbox",
    "close_session",
    "export_session",
    "register_graph",
    "unregister_graph",
    "get_graph",
    "list_graphs",
    "search_graphs",
    "update_graph_lifecycle",
    "check_graph_freshness",
    "check_graph_health",
    "explain_graph",
    "compare_graphs",
    "clone_graph",
    "merge_graphs",
    "link_graphs",
    "ai_chat",
    "find_tools",
    "resolve_contradiction",
    "resolve_temporal_conflict",
    "resolve_duplicate",
    "arbitrate_inference_conflict",
    "list_inference_conflicts",
    "list_dead_lettered_conflicts",
    "no_such_tool",
    "",
];

#[derive(Clone, Debug)]
enum Junk {
    OtherSession,
    /// The name under which the other session's graph is registered in the gallery.
    OtherGraph,
    ChatSession,
    Text(String),
    Huge(usize),
    Number(i64),
    Bool(bool),
    Null,
    List(Vec<Junk>),
    Object(Vec<(String, Junk)>),
    AddObject(String),
}

fn junk() -> impl Strategy<Value = Junk> {
    let leaf = prop_oneof![
        4 => Just(Junk::OtherSession),
        2 => Just(Junk::OtherGraph),
        1 => Just(Junk::ChatSession),
        2 => "[a-z_ -]{0,12}".prop_map(Junk::Text),
        1 => (1_000usize..40_000).prop_map(Junk::Huge),
        1 => any::<i64>().prop_map(Junk::Number),
        1 => any::<bool>().prop_map(Junk::Bool),
        1 => Just(Junk::Null),
        1 => "[a-z]{1,6}".prop_map(Junk::AddObject),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Junk::List),
            proptest::collection::vec(("[a-z_]{1,10}", inner), 0..4).prop_map(Junk::Object),
        ]
    })
}

fn render(junk: &Junk, other: &str, chat: &str) -> Value {
    match junk {
        Junk::OtherSession => json!(other),
        Junk::OtherGraph => json!(OTHER_GRAPH),
        Junk::ChatSession => json!(chat),
        Junk::Text(t) => json!(t),
        Junk::Huge(n) => json!("x".repeat(*n)),
        Junk::Number(n) => json!(n),
        Junk::Bool(b) => json!(b),
        Junk::Null => Value::Null,
        Junk::List(items) => items.iter().map(|j| render(j, other, chat)).collect(),
        Junk::Object(fields) => {
            Value::Object(fields.iter().map(|(k, v)| (k.clone(), render(v, other, chat))).collect())
        }
        Junk::AddObject(id) => {
            json!([{"type": "add_object", "identity": {"id": id, "type": "T", "name": other}}])
        }
    }
}

/// Arguments: common argument names (each string field gets the other session's id or junk) plus
/// random keys.
fn arguments() -> impl Strategy<Value = Vec<(String, Junk)>> {
    let key = prop_oneof![
        Just("session_id".to_owned()),
        Just("target_session_id".to_owned()),
        Just("source_session_id".to_owned()),
        Just("json_data".to_owned()),
        Just("operations".to_owned()),
        Just("seed_ids".to_owned()),
        Just("target_version_id".to_owned()),
        Just("object_id".to_owned()),
        Just("query".to_owned()),
        Just("name".to_owned()),
        Just("graph_name".to_owned()),
        Just("graph_a_name".to_owned()),
        Just("graph_b_session_id".to_owned()),
        Just("state".to_owned()),
        Just("team".to_owned()),
        Just("need".to_owned()),
        Just("task_id".to_owned()),
        "[a-z_]{1,12}",
    ];
    proptest::collection::vec((key, junk()), 0..6)
}

/// How an answer is written: structured calls, or its first call as text.
#[derive(Clone, Copy, Debug)]
enum Form {
    Structured,
    Json,
    Tagged,
}

/// Answers of the model: per answer, its form and the calls (tool index, arguments).
type Script = Vec<(Form, Vec<(usize, Vec<(String, Junk)>)>)>;

fn transcript() -> impl Strategy<Value = Script> {
    let form = prop_oneof![2 => Just(Form::Structured), 1 => Just(Form::Json), 1 => Just(Form::Tagged)];
    // Up to 10 answers of 1-3 calls each; more than the cap of 8 on purpose.
    proptest::collection::vec((form, proptest::collection::vec((0..NAMES.len() + 5, arguments()), 1..4)), 1..11)
}

fn tool_name(index: usize) -> &'static str {
    match index.checked_sub(NAMES.len()) {
        None => NAMES[index],
        Some(i) => DENIED_TOOLS[i % DENIED_TOOLS.len()],
    }
}

/// What the scripted model plays in the current case.
#[derive(Default)]
struct Case {
    script: Script,
    final_text: bool,
    answered: usize,
    other: String,
    chat: String,
}

struct World {
    runtime: tokio::runtime::Runtime,
    harness: Harness,
    model: Arc<Scripted>,
    case: Arc<std::sync::Mutex<Case>>,
}

/// One runtime, registry and model for all cases (building the registry compiles every schema).
fn world() -> &'static World {
    static WORLD: std::sync::OnceLock<World> = std::sync::OnceLock::new();
    WORLD.get_or_init(|| {
        let case = Arc::new(std::sync::Mutex::new(Case::default()));
        let playing = case.clone();
        let model = Scripted::unrecorded(move || {
            let mut case = playing.lock().unwrap();
            let i = case.answered;
            case.answered += 1;
            let (other, chat) = (case.other.clone(), case.chat.clone());
            let call = |(name, args): &(usize, Vec<(String, Junk)>)| {
                let args: Map<String, Value> =
                    args.iter().map(|(k, v)| (k.clone(), render(v, &other, &chat))).collect();
                (tool_name(*name).to_owned(), Value::Object(args))
            };
            match case.script.get(i) {
                Some((Form::Structured, calls)) => Answer::Tools(calls.iter().map(call).collect()),
                Some((form, calls)) => {
                    let (name, arguments) = call(&calls[0]);
                    let text = json!({"name": name, "arguments": arguments}).to_string();
                    Answer::Text(match form {
                        Form::Tagged => format!("<tool_call>\n{text}\n</tool_call>"),
                        _ => text,
                    })
                }
                None if case.final_text => Answer::Text(format!("finished; by the way {other}")),
                None => Answer::Tools(vec![("list_versions".into(), json!({"session_id": other}))]),
            }
        });
        let harness = Harness::with_config(model.clone(), AiChatConfig::default(), |r| {
            // In place of the real storage and process tools, which are declared hidden from the model.
            r.replace(Arc::new(TrapExport));
            r.replace(Arc::new(TrapImport));
            r.replace(Arc::new(TrapMigrate));
            r.replace(Arc::new(TrapStop));
            r.replace(Arc::new(TrapPipeline));
        });
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        World { runtime, harness, model, case }
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10_000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_transcripts_cannot_escape_the_session(script in transcript(), final_text in any::<bool>()) {
        let world = world();
        let h = &world.harness;
        world.runtime.block_on(async move {
            let chat = h.session(graph("c")).await;
            let other = h.session(graph("o")).await;
            let third = h.session(graph("t")).await;
            *world.case.lock().unwrap() =
                Case { script, final_text, answered: 0, other: other.clone(), chat: chat.clone() };
            let calls_before = world.model.calls();
            let other_before = h.state(&other).await;
            let third_before = h.state(&third).await;
            let registered = h
                .ctx
                .runtime
                .register_graph(Registration {
                    name: OTHER_GRAPH.into(),
                    session_id: other.clone(),
                    description: "another session's graph".into(),
                    tags: String::new(),
                    visibility: Visibility::Public,
                    team: None,
                    source_graph_name: None,
                    lifecycle: None,
                })
                .await
                .unwrap();
            let mut events = h.ctx.runtime.subscribe();

            let out = h.chat(json!({"session_id": chat, "prompt": "do anything"})).await;

            assert!(out.get("reply").is_some() || out.get("error").is_some(), "{out}");
            assert!(world.model.calls() - calls_before <= 8, "the loop ended within the cap");
            assert_eq!(h.state(&other).await, other_before);
            assert_eq!(h.state(&third).await, third_before);
            let graphs = h.ctx.runtime.graphs(&GraphFilter::default()).await.unwrap();
            assert_eq!(graphs, [registered], "the gallery is unchanged");
            while let Ok(event) = events.try_recv() {
                let kind = &event.kind;
                assert_ne!(kind.event_type(), "SessionCreated", "no session was created");
                assert_eq!(kind.session_id(), chat, "only the chat session saw events: {kind:?}");
            }
            assert_eq!(DENIED_RUNS.load(Ordering::SeqCst), 0, "a denied tool ran");
            for call in out["tool_calls"].as_array().unwrap() {
                if call["recovered_from_text"] == true {
                    let name = call["name"].as_str().unwrap();
                    let offered = CHAT_TOOLS.iter().any(|t| t.name == name)
                        || name == FIND_TOOLS.name
                        || h.registry.get(name).is_some_and(|t| t.meta().llm_exposed);
                    assert!(offered, "only offered or found tools run from text: {call}");
                    assert!(!DENIED_TOOLS.contains(&name), "{call}");
                }
                if let Some(session) = call["arguments"].get("session_id") {
                    let refused = call["result"]["error"] == "unknown_or_disallowed_tool";
                    assert!(refused || session == &json!(chat), "{call}");
                }
            }
        });
    }
}
