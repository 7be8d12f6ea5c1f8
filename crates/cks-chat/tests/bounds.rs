//! Every part of a chat turn is bounded: tool calls per answer, the deadline before and during
//! each tool call, the bytes of the turn's result, output tokens per LLM call, repeated calls;
//! and what a chat is offered stays small, plain, and unable to create sessions.

mod support;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use cks_chat::{AiChat, AiChatConfig, CHAT_TOOLS, DENIED_TOOLS, DISCOVERABLE, FIND_TOOLS, SYSTEM_PROMPT};
use cks_llm::ContentBlock;
use cks_tools::{Registry, SessionCheck, Tool, ToolContext, ToolError, ToolMeta};

use support::{Answer, Harness, Scripted, add_object, graph};

fn tools(calls: &[(&str, Value)]) -> Answer {
    Answer::Tools(calls.iter().map(|(n, a)| ((*n).to_owned(), a.clone())).collect())
}

fn config(change: impl FnOnce(&mut AiChatConfig)) -> AiChatConfig {
    let mut config = AiChatConfig::default();
    change(&mut config);
    config
}

fn tool_results(message: &Value) -> Vec<Value> {
    message["content"].as_array().unwrap().iter().filter(|b| b["type"] == "tool_result").cloned().collect()
}

#[tokio::test]
async fn calls_over_the_per_answer_cap_do_not_run_and_are_answered() {
    let many: Vec<(&str, Value)> = (0..5).map(|i| ("evolve_knowledge", add_object(&format!("n{i}")))).collect();
    let model = Scripted::new(vec![tools(&many), Answer::Text("done".into())]);
    let h = Harness::with_config(model.clone(), config(|c| c.turn.max_tool_calls_per_answer = 2), |_| {});
    let sid = h.session(graph("s")).await;
    let out = h.chat(json!({"session_id": sid, "prompt": "add five"})).await;

    let ids: Vec<String> = h.ctx.runtime.read(&sid, |s, _| s.ids().map(str::to_owned).collect()).await.unwrap();
    assert!(ids.contains(&"n0".to_owned()) && ids.contains(&"n1".to_owned()));
    for skipped in ["n2", "n3", "n4"] {
        assert!(!ids.contains(&skipped.to_owned()), "{skipped} ran");
    }
    let results = tool_results(&out["messages"][2]);
    assert_eq!(results.len(), 5, "every call has a result");
    for r in &results[2..] {
        assert_eq!(r["is_error"], true);
        assert!(r["content"].as_str().unwrap().contains("too_many_tool_calls"), "{r}");
    }
    let records = out["tool_calls"].as_array().unwrap();
    assert_eq!(records.len(), 5);
    assert_eq!(records[4]["result"]["error"], "too_many_tool_calls");
    assert!(records[4]["result"]["message"].as_str().unwrap().contains("at most 2"));
    assert_eq!(out["reply"], "done");
    assert!(out.get("truncated").is_none(), "the turn itself finished: {out}");
}

#[derive(Debug, Deserialize, JsonSchema)]
struct SlowInput {
    #[allow(dead_code)]
    session_id: String,
    /// Seconds to take (under the name of an offered argument).
    depth: u64,
}

/// Registered under an offered name: takes as long as it is told.
struct Slow;

#[async_trait]
impl Tool for Slow {
    type Input = SlowInput;
    type Output = Value;
    const META: ToolMeta = ToolMeta {
        name: "query_subgraph",
        description: "slow",
        mutates_graph: false,
        creates_session: false,
        destructive: false,
        idempotent: true,
        open_world: false,
        session_fields: &["session_id"],
        session_checks: &[SessionCheck::open("session_id")],
        llm_exposed: true,
    };
    async fn run(&self, _ctx: &ToolContext, input: SlowInput) -> Result<Value, ToolError> {
        tokio::time::sleep(Duration::from_secs(input.depth)).await;
        Ok(json!({"slept": input.depth}))
    }
}

/// A chat offer where `query_subgraph` is [`Slow`] (the registry has only it and `ai_chat`).
fn slow_harness(model: Arc<Scripted>, deadline: Duration) -> Harness {
    let mut registry = Registry::default();
    registry.register(Arc::new(Slow));
    Harness::build(model, config(|c| c.turn.deadline = deadline), registry, |_| {})
}

#[tokio::test(start_paused = true)]
async fn the_deadline_bounds_each_tool_call_and_stops_the_next() {
    // The clock is paused and jumps to the next timer: "seconds" are instant and exact.
    let calls = [
        ("query_subgraph", json!({"depth": 3})),
        ("query_subgraph", json!({"depth": 3600})),
        ("query_subgraph", json!({"depth": 1})),
    ];
    let model = Scripted::new(vec![tools(&calls), Answer::Text("never".into())]);
    let h = slow_harness(model.clone(), Duration::from_secs(5));
    let sid = h.session(graph("s")).await;
    let out = h.chat(json!({"session_id": sid, "prompt": "slow"})).await;

    assert_eq!(out["truncated"], true, "{out}");
    assert_eq!(out["truncation_reason"], "deadline");
    assert_eq!(model.calls(), 1, "no LLM call after the deadline");
    let records = out["tool_calls"].as_array().unwrap();
    assert_eq!(records[0]["result"]["slept"], 3);
    assert_eq!(records[1]["result"]["error"], "deadline_exceeded", "bounded by the 2 s left: {}", records[1]);
    assert_eq!(records.len(), 2, "the third call did not run");
    let results = tool_results(&out["messages"][2]);
    assert_eq!(results.len(), 3, "every call has a result");
    assert!(results[2]["content"].as_str().unwrap().contains("deadline_exceeded"));
}

#[tokio::test]
async fn the_bytes_of_a_turns_result_are_bounded() {
    // Each query_subgraph result is about 1 KB; the bound lets the first in.
    let calls: Vec<Answer> = (0..4).map(|i| tools(&[("query_subgraph", json!({"max_objects": 10 + i}))])).collect();
    let mut script = calls;
    script.push(Answer::Text("done".into()));
    let model = Scripted::new(script);
    let h = Harness::with_config(model.clone(), config(|c| c.turn.max_result_bytes = 1500), |_| {});
    let sid = h.session(graph("s")).await;
    let out = h.chat(json!({"session_id": sid, "prompt": "read"})).await;

    let records = out["tool_calls"].as_array().unwrap();
    assert_eq!(records.len(), 4);
    assert!(records[0]["result"].get("subgraph").is_some(), "the first result is kept: {}", records[0]);
    let cut: Vec<&Value> = records.iter().filter(|r| r["result"].get("omitted").is_some()).collect();
    assert!(!cut.is_empty(), "some results were cut");
    assert!(cut[0]["result"]["omitted"].as_str().unwrap().contains("1500 bytes"), "{}", cut[0]);
    assert_eq!(out["truncated"], true);
    assert_eq!(out["truncation_reason"], "result_max_bytes");
    assert_eq!(out["results_omitted"], cut.len());
    assert_eq!(out["reply"], "done", "the turn itself went on");
    let recorded = serde_json::to_string(&out["tool_calls"]).unwrap().len();
    assert!(recorded < 1500 + 4 * 400, "recorded calls stay near the bound: {recorded}");
    // The model still saw every result.
    let seen = model.request(4);
    let sent: usize =
        seen.messages.iter().flat_map(|m| &m.content).filter(|b| matches!(b, ContentBlock::ToolResult { .. })).count();
    assert_eq!(sent, 4);

    // A turn within the bound reports nothing new.
    let model = Scripted::new(vec![tools(&[("query_subgraph", json!({}))]), Answer::Text("ok".into())]);
    let h = Harness::new(model);
    let sid = h.session(graph("s")).await;
    let out = h.chat(json!({"session_id": sid, "prompt": "read"})).await;
    assert!(out.get("truncated").is_none() && out.get("results_omitted").is_none(), "{out}");
    assert!(
        out["tool_calls"][0].get("repeat_of").is_none() && out["tool_calls"][0].get("recovered_from_text").is_none()
    );
}

#[tokio::test]
async fn repeated_calls_are_answered_from_the_first_and_a_loop_stops() {
    let same = || tools(&[("evolve_knowledge", add_object("once"))]);
    let model = Scripted::with_fallback(vec![same(), same()], same);
    let h = Harness::new(model.clone());
    let sid = h.session(graph("s")).await;
    let (_, versions_before) = h.state(&sid).await;
    let out = h.chat(json!({"session_id": sid, "prompt": "add"})).await;

    assert_eq!(h.state(&sid).await.1, versions_before + 1, "the call ran once");
    let records = out["tool_calls"].as_array().unwrap();
    assert_eq!(records[0]["result"]["evolved"], true);
    assert_eq!(records[1]["repeat_of"], 0);
    assert_eq!(records[1]["result"], records[0]["result"]);
    let second_result = &tool_results(&out["messages"][4])[0];
    assert!(second_result["content"].as_str().unwrap().contains("already made this exact call"));
    assert_eq!(out["truncated"], true);
    assert_eq!(out["truncation_reason"], "repeated_tool_calls");
    assert_eq!(model.calls(), 3, "stopped after two answers of nothing but repeats, not at the cap of 8");
}

#[tokio::test]
async fn a_read_after_a_change_is_not_a_repeat() {
    let read = || tools(&[("query_subgraph", json!({}))]);
    let model = Scripted::new(vec![
        read(),
        tools(&[("evolve_knowledge", add_object("fresh"))]),
        read(),
        Answer::Text("done".into()),
    ]);
    let h = Harness::new(model.clone());
    let sid = h.session(graph("s")).await;
    let out = h.chat(json!({"session_id": sid, "prompt": "add and check"})).await;
    let records = out["tool_calls"].as_array().unwrap();
    assert_eq!(records.len(), 3);
    assert!(records[2].get("repeat_of").is_none(), "{}", records[2]);
    assert!(records[2]["result"].to_string().contains("fresh"), "the second read sees the change");
    assert!(!records[0]["result"].to_string().contains("fresh"));
}

#[tokio::test]
async fn a_chat_reads_the_graph_as_nodes_and_edges() {
    let model = Scripted::new(vec![
        tools(&[("query_subgraph", json!({})), ("query_subgraph", json!({"compact_mode": false}))]),
        Answer::Text("done".into()),
    ]);
    let h = Harness::new(model);
    let sid = h.session(graph("s")).await;
    let out = h.chat(json!({"session_id": sid, "prompt": "what is there"})).await;
    let records = out["tool_calls"].as_array().unwrap();
    assert_eq!(records[0]["arguments"]["compact_mode"], true, "{}", records[0]);
    let subgraph = &records[0]["result"]["subgraph"];
    assert!(subgraph["nodes"].is_array() && subgraph["edges"].is_array(), "compact, not a document: {subgraph}");
    assert_eq!(records[1]["result"]["error"], "invalid_parameter", "the switch is not the model's: {}", records[1]);
}

#[tokio::test]
async fn output_tokens_per_llm_call_are_capped_and_configurable() {
    let model = Scripted::new(vec![Answer::Text("a".into())]);
    let h = Harness::new(model.clone());
    let sid = h.session(graph("s")).await;
    h.chat(json!({"session_id": sid, "prompt": "hi"})).await;
    assert_eq!(model.request(0).max_tokens, Some(2048));

    let env: HashMap<String, String> = [("CKS_AI_CHAT_MAX_OUTPUT_TOKENS".to_owned(), "300".to_owned())].into();
    let model = Scripted::new(vec![Answer::Text("a".into())]);
    let h = Harness::with_config(model.clone(), AiChatConfig::from_env(&env).unwrap(), |_| {});
    let sid = h.session(graph("s")).await;
    h.chat(json!({"session_id": sid, "prompt": "hi"})).await;
    assert_eq!(model.request(0).max_tokens, Some(300));
}

#[test]
fn bad_limit_values_name_the_variable_and_the_accepted_form() {
    for variable in [
        "CKS_AI_CHAT_MAX_ITERATIONS",
        "CKS_AI_CHAT_TIMEOUT_SECONDS",
        "CKS_AI_CHAT_MAX_TOKENS",
        "CKS_AI_CHAT_MAX_OUTPUT_TOKENS",
        "CKS_AI_CHAT_MAX_TOOL_CALLS",
        "CKS_AI_CHAT_TOOL_RESULT_MAX_BYTES",
        "CKS_AI_CHAT_RESULT_MAX_BYTES",
    ] {
        for bad in ["many", "0", "-3", "1.5"] {
            let env: HashMap<String, String> = [(variable.to_owned(), bad.to_owned())].into();
            let message = AiChatConfig::from_env(&env).unwrap_err().to_string();
            assert!(message.contains(variable) && message.contains(bad), "{message}");
            assert!(message.contains("whole number of at least 1"), "{message}");
        }
        let env: HashMap<String, String> = [(variable.to_owned(), " 7 ".to_owned())].into();
        assert!(AiChatConfig::from_env(&env).is_ok(), "{variable}");
    }
    let env: HashMap<String, String> = [
        ("CKS_AI_CHAT_MAX_TOOL_CALLS".to_owned(), "3".to_owned()),
        ("CKS_AI_CHAT_RESULT_MAX_BYTES".into(), "999".into()),
    ]
    .into();
    let config = AiChatConfig::from_env(&env).unwrap();
    assert_eq!((config.turn.max_tool_calls_per_answer, config.turn.max_result_bytes), (3, 999));
}

#[tokio::test]
async fn hostile_model_names_are_invalid_parameters() {
    let model = Scripted::new(vec![Answer::Text("never".into())]);
    let h = Harness::new(model.clone());
    let sid = h.session(graph("s")).await;
    let out = h.chat(json!({"session_id": sid, "prompt": "hi", "model": "../x?y#"})).await;
    assert_eq!(out["error"], "invalid_parameter", "{out}");
    assert_eq!(out["parameter"], "model");
    assert!(out["message"].as_str().unwrap().contains("ASCII letters"), "{out}");
    assert_eq!(model.calls(), 0);
}

#[test]
fn ai_chat_is_annotated_destructive() {
    // It can run revert_version, which replaces the current state.
    let meta = <AiChat as Tool>::META;
    assert!(meta.destructive && meta.mutates_graph && !meta.read_only());
}

// --- What a chat is offered ---

#[derive(Debug, Deserialize, JsonSchema)]
struct AnyInput {}

static SPAWNS: AtomicUsize = AtomicUsize::new(0);

/// A tool that creates sessions and names none the executor could pin, under an offered name.
struct Spawner;

#[async_trait]
impl Tool for Spawner {
    type Input = AnyInput;
    type Output = Value;
    const META: ToolMeta = ToolMeta {
        name: "evolve_knowledge",
        description: "makes a new session",
        mutates_graph: true,
        creates_session: true,
        destructive: false,
        idempotent: false,
        open_world: false,
        session_fields: &[],
        session_checks: &[],
        llm_exposed: true,
    };
    async fn run(&self, _ctx: &ToolContext, _input: AnyInput) -> Result<Value, ToolError> {
        SPAWNS.fetch_add(1, Ordering::SeqCst);
        Ok(json!({"session_id": "new"}))
    }
}

#[tokio::test]
async fn tools_that_create_sessions_run_only_pinned() {
    let mut registry = Registry::default();
    registry.register(Arc::new(Spawner));
    let model = Scripted::new(vec![tools(&[("evolve_knowledge", json!({}))]), Answer::Text("ok".into())]);
    let h = Harness::build(model.clone(), AiChatConfig::default(), registry, |_| {});
    let sid = h.session(graph("s")).await;
    let out = h.chat(json!({"session_id": sid, "prompt": "go"})).await;
    let offered: Vec<String> = model.request(0).tools.iter().map(|t| t.name.clone()).collect();
    assert_eq!(offered, ["find_tools"], "an unpinnable session-creating tool is not offered");
    assert_eq!(out["tool_calls"][0]["result"]["error"], "unknown_or_disallowed_tool");
    assert_eq!(SPAWNS.load(Ordering::SeqCst), 0, "it did not run");

    // The real evolve_knowledge: json_data (a new session) is refused, not left to the handler.
    let data = graph("x").to_string();
    let model = Scripted::new(vec![
        tools(&[("evolve_knowledge", json!({"json_data": data, "operations": add_object("z")["operations"]}))]),
        Answer::Text("ok".into()),
    ]);
    let h = Harness::new(model.clone());
    let sid = h.session(graph("s")).await;
    let before = h.state(&sid).await;
    let out = h.chat(json!({"session_id": sid, "prompt": "go"})).await;
    assert_eq!(out["tool_calls"][0]["result"]["error"], "invalid_parameter", "{out}");
    assert!(out["tool_calls"][0]["result"]["message"].as_str().unwrap().contains("'json_data'"));
    assert_eq!(h.ctx.runtime.list_sessions().await.unwrap().len(), 1, "no session was created");
    assert_eq!(h.state(&sid).await, before);
    for spec in &model.request(0).tools {
        assert!(spec.input_schema["properties"].get("json_data").is_none(), "{}", spec.name);
        let text = format!("{} {}", spec.description, spec.input_schema);
        assert!(!text.contains("json_data") && !text.contains("new session"), "{}: {text}", spec.name);
    }
}

/// The first request's fixed part: the offered tools as sent plus the system prompt.
fn offer_bytes(request: &cks_llm::ChatRequest) -> usize {
    let tools = serde_json::to_string(&request.tools).unwrap().len();
    tools + request.system.as_deref().unwrap_or("").len()
}

/// About 4 bytes per token: 2,900 prompt tokens less room for the user's message and the
/// provider's framing.
const OFFER_BOUND_BYTES: usize = 10_000;

#[derive(Debug, Deserialize, JsonSchema)]
struct FillerInput {
    #[allow(dead_code)]
    session_id: String,
    /// A parameter with a long description, as real tools have.
    #[allow(dead_code)]
    detail: Option<String>,
}

macro_rules! filler {
    ($($ty:ident $name:literal),*) => {$(
        struct $ty;
        #[async_trait]
        impl Tool for $ty {
            type Input = FillerInput;
            type Output = Value;
            const META: ToolMeta = ToolMeta {
                name: $name,
                description: "An exposed tool added later, with a description as long as the longer real ones: it \
                    explains its options, its result fields and its differences from the reference server in detail.",
                mutates_graph: false,
                creates_session: false,
                destructive: false,
                idempotent: true,
                open_world: false,
                session_fields: &["session_id"],
                session_checks: &[SessionCheck::open("session_id")],
                llm_exposed: true,
            };
            async fn run(&self, _ctx: &ToolContext, _input: FillerInput) -> Result<Value, ToolError> {
                Ok(json!({}))
            }
        }
    )*};
}

filler!(F01 "extra_01", F02 "extra_02", F03 "extra_03", F04 "extra_04", F05 "extra_05", F06 "extra_06",
    F07 "extra_07", F08 "extra_08", F09 "extra_09", F10 "extra_10", F11 "extra_11", F12 "extra_12",
    F13 "extra_13", F14 "extra_14", F15 "extra_15", F16 "extra_16", F17 "extra_17", F18 "extra_18",
    F19 "extra_19", F20 "extra_20", F21 "extra_21", F22 "extra_22", F23 "extra_23", F24 "extra_24",
    F25 "extra_25", F26 "extra_26", F27 "extra_27", F28 "extra_28", F29 "extra_29", F30 "extra_30",
    F31 "extra_31", F32 "extra_32", F33 "extra_33", F34 "extra_34", F35 "extra_35", F36 "extra_36",
    F37 "extra_37", F38 "extra_38", F39 "extra_39", F40 "extra_40", F41 "extra_41", F42 "extra_42",
    F43 "extra_43", F44 "extra_44", F45 "extra_45", F46 "extra_46");

#[tokio::test]
async fn the_first_request_stays_small_as_the_registry_grows() {
    let model = Scripted::new(vec![Answer::Text("a".into()), Answer::Text("b".into())]);
    let h = Harness::new(model.clone());
    let sid = h.session(graph("s")).await;
    h.chat(json!({"session_id": sid, "prompt": "hi"})).await;
    let first = model.request(0);
    let bytes = offer_bytes(&first);
    println!("offer: {bytes} bytes ({} tools + system prompt), bound {OFFER_BOUND_BYTES}", first.tools.len());
    assert!(bytes <= OFFER_BOUND_BYTES, "the offer is {bytes} bytes");
    let system = first.system.as_deref().unwrap();
    assert!(system.starts_with(SYSTEM_PROMPT), "{system}");
    assert!(system.ends_with("The graph has 3 objects: 2 Claim, 1 Relation.\nObjects: s-a = s alpha (Claim); s-b = s beta (Claim).\nRelations: s-a supports s-b."), "grounded in the session: {system}");
    let offered: Vec<&str> = first.tools.iter().map(|t| t.name.as_str()).collect();
    let planned: Vec<&str> = CHAT_TOOLS.iter().map(|t| t.name).chain([FIND_TOOLS.name]).collect();
    assert_eq!(offered, planned);

    // The registry grown to 70 tools, every new one exposed: the offer does not change.
    let registry_len = |h: &Harness| h.registry.len();
    let model = Scripted::new(vec![Answer::Text("a".into())]);
    let grown = Harness::with_config(model.clone(), AiChatConfig::default(), |r| {
        let extra: Vec<Arc<dyn cks_tools::DynTool>> = vec![
            Arc::new(F01),
            Arc::new(F02),
            Arc::new(F03),
            Arc::new(F04),
            Arc::new(F05),
            Arc::new(F06),
            Arc::new(F07),
            Arc::new(F08),
            Arc::new(F09),
            Arc::new(F10),
            Arc::new(F11),
            Arc::new(F12),
            Arc::new(F13),
            Arc::new(F14),
            Arc::new(F15),
            Arc::new(F16),
            Arc::new(F17),
            Arc::new(F18),
            Arc::new(F19),
            Arc::new(F20),
            Arc::new(F21),
            Arc::new(F22),
            Arc::new(F23),
            Arc::new(F24),
            Arc::new(F25),
            Arc::new(F26),
            Arc::new(F27),
            Arc::new(F28),
            Arc::new(F29),
            Arc::new(F30),
            Arc::new(F31),
            Arc::new(F32),
            Arc::new(F33),
            Arc::new(F34),
            Arc::new(F35),
            Arc::new(F36),
            Arc::new(F37),
            Arc::new(F38),
            Arc::new(F39),
            Arc::new(F40),
            Arc::new(F41),
            Arc::new(F42),
            Arc::new(F43),
            Arc::new(F44),
            Arc::new(F45),
            Arc::new(F46),
        ];
        for tool in extra {
            r.register(tool);
        }
    });
    assert!(registry_len(&grown) >= 70, "{}", registry_len(&grown));
    let sid = grown.session(graph("s")).await;
    grown.chat(json!({"session_id": sid, "prompt": "hi"})).await;
    assert_eq!(offer_bytes(&model.request(0)), bytes);
}

#[test]
fn every_offered_tool_is_exposed_and_every_exposed_tool_is_offered() {
    let registry = Registry::standard();
    for offer in CHAT_TOOLS.iter().chain(DISCOVERABLE) {
        let tool = registry.get(offer.name).unwrap_or_else(|| panic!("{} is not a tool", offer.name));
        assert!(tool.meta().llm_exposed, "{} is offered but not exposed", offer.name);
        let declared = tool.schema()["properties"].as_object().unwrap();
        for argument in offer.arguments {
            assert!(declared.contains_key(*argument), "{}: no argument {argument}", offer.name);
            assert!(
                !tool.meta().session_fields.contains(argument),
                "{}: {argument} is pinned, not offered",
                offer.name
            );
        }
        assert!(!offer.arguments.contains(&"json_data"), "{}: json_data is never offered", offer.name);
    }
    for tool in registry.iter().filter(|t| t.meta().llm_exposed) {
        assert!(
            CHAT_TOOLS.iter().chain(DISCOVERABLE).any(|o| o.name == tool.meta().name),
            "{} is exposed but has no written chat offer (add one in offer.rs, with a short description)",
            tool.meta().name
        );
    }
    // What is found is exposed, never denied, and names at most the chat's own session.
    for offer in DISCOVERABLE {
        let meta = registry.get(offer.name).unwrap().meta();
        assert!(!DENIED_TOOLS.contains(&offer.name), "{}", offer.name);
        assert!(!CHAT_TOOLS.iter().any(|o| o.name == offer.name), "{} is offered first already", offer.name);
        assert!(meta.session_fields.len() <= 1 && !meta.creates_session, "{}", offer.name);
    }
}

#[test]
fn descriptions_steer_a_weak_model() {
    let description = |name: &str| CHAT_TOOLS.iter().find(|t| t.name == name).unwrap().description;
    assert!(description("query_subgraph").contains("list"), "listing objects reads the graph");
    assert!(description("query_subgraph").contains("relates to"), "'what relates to X' is a query");
    assert!(description("evolve_knowledge").contains("add"), "adding an object evolves the graph");
    assert!(description("list_versions").contains("not its objects"));
    assert!(description("compare_versions").contains("never an object id"));
    assert!(SYSTEM_PROMPT.len() < 600, "the system prompt is short");
}
