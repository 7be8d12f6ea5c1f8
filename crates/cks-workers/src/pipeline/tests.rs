use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

use cks_core::KnowledgeStructure;
use cks_runtime::events::EventKind;
use cks_runtime::store::memory::MemoryStore;
use cks_runtime::store::{TaskFilter, TaskStatus};
use cks_runtime::{QueueConfig, Runtime, RuntimeConfig};
use cks_testkit::{DEFAULT_USAGE, ProviderServer, Reply};

use super::PipelineConfig;
use super::reviewer::verdict;
use super::synthesizer::proposed_objects;
use crate::{Processes, ProcessesConfig};
use cks_tools::Registry;
use cks_tools::ToolContext;
use cks_tools::testing::{call, llm_context, llm_env, obj, rel, session, structure};

/// A context whose model is the scripted `provider` and whose queue has `queue`'s settings.
fn context(provider: &ProviderServer, queue: QueueConfig) -> ToolContext {
    let mut ctx = llm_context(&llm_env("anthropic", &provider.base_url()));
    let config = RuntimeConfig { queue, ..RuntimeConfig::default() };
    ctx.runtime = Arc::new(Runtime::new(Arc::new(MemoryStore::new()), config));
    ctx.registry = Some(Arc::new(Registry::standard()));
    ctx
}

fn pipeline(config: PipelineConfig) -> ProcessesConfig {
    ProcessesConfig {
        pipeline: PipelineConfig {
            enabled: true,
            poll_interval: Duration::from_millis(20),
            liveness_interval: Duration::from_secs(1),
            ..config
        },
        ..ProcessesConfig::default()
    }
}

/// Earth and a theory, which a rule forbids to be both supported and contradicted by Earth.
async fn troubled(ctx: &ToolContext) -> String {
    let rule = json!({"relation_type_a": "supports", "relation_type_b": "contradicts"});
    let objects = vec![
        obj("rule", "MutualExclusionRule", "rule", rule),
        obj("e", "Planet", "Earth", json!({"note": "third planet"})),
        obj("t", "Claim", "Theory", json!({})),
        rel("s1", &["e", "t"], "supports"),
        rel("c1", &["e", "t"], "contradicts"),
    ];
    session(ctx, structure(objects)).await
}

/// Earth, the Moon and a theory Earth supports; with `contradicted`, Earth also contradicts the
/// theory, which a rule forbids (the Moon takes part in no contradiction).
async fn solar(ctx: &ToolContext, contradicted: bool) -> String {
    let rule = json!({"relation_type_a": "supports", "relation_type_b": "contradicts"});
    let mut objects = vec![
        obj("rule", "MutualExclusionRule", "rule", rule),
        obj("e", "Planet", "Earth", json!({"note": "third planet"})),
        obj("m", "Satellite", "Moon", json!({})),
        obj("t", "Claim", "Theory", json!({})),
        rel("s1", &["e", "t"], "supports"),
    ];
    if contradicted {
        objects.push(rel("c1", &["e", "t"], "contradicts"));
    }
    session(ctx, structure(objects)).await
}

/// Where a run left object `id`: its `current_status` and its transition log's last entry.
fn ended(graph: &KnowledgeStructure, id: &str) -> (String, Value) {
    let object = graph.get(id).unwrap();
    let last = object.structure["transition_log"].as_array().unwrap().last().unwrap().clone();
    (object.structure["current_status"].as_str().unwrap().to_owned(), last)
}

/// Every object a pipeline touched is where the reference's completed runs leave one (`resolved`,
/// or `needs_research` after a rejection), none waiting for a step that will not come.
fn assert_settled(graph: &KnowledgeStructure) {
    for object in graph.objects() {
        if let Some(status) = object.structure.get("current_status") {
            assert!(status == "resolved" || status == "needs_research", "{} ends {status}", object.id());
        }
    }
}

async fn wait_for(what: &str, mut done: impl AsyncFnMut() -> bool) {
    for _ in 0..800 {
        if done().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

async fn the_run(ctx: &ToolContext, session: &str) -> Value {
    call(ctx, "list_pipeline_runs", json!({"session_id": session})).await["runs"][0].clone()
}

async fn wait_for_run(ctx: &ToolContext, session: &str, status: &str) -> Value {
    wait_for(&format!("the run to be {status}"), async || the_run(ctx, session).await["status"] == status).await;
    the_run(ctx, session).await
}

fn step<'a>(run: &'a Value, name: &str) -> &'a Value {
    run["steps"].as_array().unwrap().iter().find(|s| s["name"] == name).unwrap()
}

#[tokio::test]
async fn a_run_goes_through_its_four_steps_each_committed_and_recorded() {
    let provider = ProviderServer::start().await;
    let ctx = context(&provider, QueueConfig::default());
    let id = troubled(&ctx).await;
    let contradiction = call(&ctx, "resolve_contradiction", json!({"session_id": id})).await["contradictions"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // Later steps are claimed first, so each object is reviewed before the next one is researched.
    provider.push_all([
        Reply::Usage(Box::new(Reply::Text("Earth is the third planet from the Sun.".into())), 30, 10),
        Reply::Text("APPROVE: accurate and specific.".into()),
        Reply::Text("The theory is contested.".into()),
        Reply::Text("**REJECT**: too vague to check.".into()),
        Reply::Text(
            "```json\n{\"objects\": [{\"id\": \"orbit\", \"type\": \"Fact\", \"name\": \"Earth orbits the Sun\", \
             \"structure\": {\"period_days\": 365, \"participants\": [\"x\", \"y\"]}}]}\n```"
                .into(),
        ),
        Reply::Text(format!(
            "[{{\"contradiction_id\": \"{contradiction}\", \"winner_relation_id\": \"s1\", \"reason\": \"better sourced\"}}]"
        )),
    ]);
    let started = call(&ctx, "start_pipeline", json!({"session_id": id, "object_ids": ["e", "t"]})).await;
    assert_eq!(started["status"], "started", "{started}");
    let mut events = ctx.runtime.subscribe();
    let processes = Processes::start(ctx.clone(), &pipeline(PipelineConfig::default()));
    let run = wait_for_run(&ctx, &id, "completed").await;
    processes.shutdown().await;

    // Each step on each object announced as it started and as it ended, as the reference does.
    let mut started = Vec::new();
    let mut completed = Vec::new();
    while let Ok(event) = events.try_recv() {
        match event.kind {
            EventKind::AgentStepStarted { step_name, object_id, claims_status, .. } => {
                started.push(format!("{step_name} {object_id} from {claims_status}"));
            }
            EventKind::AgentStepCompleted { step_name, object_id, succeeded, transitioned_to, .. } => {
                assert!(succeeded, "{step_name} {object_id}");
                completed.push(format!("{step_name} {object_id} to {transitioned_to}"));
            }
            _ => {}
        }
    }
    started.sort();
    completed.sort();
    assert_eq!(
        started,
        [
            "Arbiter  from awaiting_arbitration",
            "Researcher e from awaiting_research",
            "Researcher t from awaiting_research",
            "Reviewer e from awaiting_review",
            "Reviewer t from awaiting_review",
            "Synthesizer  from awaiting_synthesis",
        ]
    );
    assert_eq!(completed[0], "Arbiter  to resolved");
    assert_eq!(completed.len(), 6, "{completed:?}");

    let statuses: Vec<&str> = run["steps"].as_array().unwrap().iter().map(|s| s["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["completed"; 4], "{run}");
    let reviewer = step(&run, "Reviewer");
    assert_eq!((reviewer["approved"].clone(), reviewer["rejected"].clone()), (json!(["e"]), json!(["t"])));
    let synthesizer = step(&run, "Synthesizer");
    let outputs: Vec<&str> = synthesizer["outputs"].as_array().unwrap().iter().map(|o| o.as_str().unwrap()).collect();
    assert_eq!(outputs.len(), 2, "the synthesis record and one new object: {outputs:?}");
    assert!(outputs[1].starts_with(outputs[0]) && outputs[1].ends_with("-orbit"));
    let usual = u64::from(DEFAULT_USAGE.0 + DEFAULT_USAGE.1);
    assert_eq!(step(&run, "Researcher")["tokens_spent"], 40 + usual, "30+10 scripted, then the default");
    assert_eq!(run["tokens_spent"], 40 + 5 * usual);

    // Each step asked with its own limit and its own instructions.
    let requests = provider.requests();
    let limits: Vec<u64> = requests.iter().map(|r| r.body["max_tokens"].as_u64().unwrap()).collect();
    assert_eq!(limits, [512, 256, 512, 256, 1024, 512]);
    let system = |i: usize| requests[i].body["system"].to_string();
    assert!(system(0).contains("research step") && system(1).contains("review step"));
    assert!(system(4).contains("synthesis step") && system(5).contains("arbitration step"));
    let synthesis_prompt = requests[4].body["messages"][0]["content"].to_string();
    assert!(synthesis_prompt.contains("third planet from the Sun"), "the approved finding is synthesized");
    assert!(!synthesis_prompt.contains("contested"), "the rejected one is not");

    // The graph: findings and verdicts linked to their objects, the synthesized object (never a
    // relation), the model's winner kept and the other relation removed.
    let graph = ctx.runtime.read(&id, |s, _| s.clone()).await.unwrap();
    let finding = graph.objects().find(|o| o.id().starts_with("research-e-")).unwrap();
    assert_eq!(finding.structure["content"], "Earth is the third planet from the Sun.");
    let verdict = graph.objects().find(|o| o.id().starts_with("review-t-")).unwrap();
    assert_eq!(
        (verdict.structure["approved"].as_bool(), verdict.structure["reason"].as_str()),
        (Some(false), Some("too vague to check."))
    );
    let orbit = graph.get(outputs[1]).unwrap();
    assert_eq!((orbit.identity.r#type.as_str(), orbit.structure["period_days"].as_i64()), ("Fact", Some(365)));
    assert!(!orbit.is_relation());
    assert!(graph.contains("s1") && !graph.contains("c1"));
    let log = graph.get("e").unwrap().structure["transition_log"].as_array().unwrap().clone();
    let actions: Vec<&str> = log.iter().map(|t| t["action"].as_str().unwrap()).collect();
    assert_eq!(actions, ["researched", "reviewed", "synthesized", "arbitrated"]);
    assert_eq!(graph.get("e").unwrap().structure["current_status"], "resolved");

    // One version per step that asked the model, naming the process, task, step, run and model.
    let versions = ctx.runtime.list_versions(&id).await.unwrap();
    let by_pipeline: Vec<_> =
        versions.iter().filter(|v| v.metadata.get("process") == Some(&json!("pipeline"))).collect();
    let steps: Vec<&str> = by_pipeline.iter().map(|v| v.metadata["step"].as_str().unwrap()).collect();
    assert_eq!(steps, ["Researcher", "Reviewer", "Researcher", "Reviewer", "Synthesizer", "Arbiter"]);
    for version in &by_pipeline {
        let metadata = &version.metadata;
        assert_eq!(
            (metadata["run_id"].as_str(), metadata["provider"].as_str()),
            (run["run_id"].as_str(), Some("anthropic"))
        );
        assert!(metadata["task_id"].is_i64() && metadata["model"].is_string(), "{metadata:?}");
        assert!(metadata["tool"].as_str().unwrap().starts_with("pipeline_"));
    }
    assert!(ctx.runtime.tasks().list(&TaskFilter::default()).await.unwrap().is_empty(), "every task completed");

    // Started again, the same run reuses everything and asks the model nothing.
    let again = call(&ctx, "start_pipeline", json!({"session_id": id, "object_ids": ["t", "e"]})).await;
    assert_eq!((again["run_id"].clone(), again["attempt"].as_u64()), (run["run_id"].clone(), Some(2)));
    let processes = Processes::start(ctx.clone(), &pipeline(PipelineConfig::default()));
    let rerun = wait_for_run(&ctx, &id, "completed").await;
    processes.shutdown().await;
    assert_eq!(provider.requests().len(), 6, "no new LLM call");
    assert_eq!((rerun["attempt"].as_u64(), rerun["tokens_spent"].as_u64()), (Some(2), Some(0)));
    assert!(step(&rerun, "Arbiter")["note"].as_str().unwrap().contains("no contradiction"));
    assert_eq!(step(&rerun, "Synthesizer")["outputs"], synthesizer["outputs"]);
}

#[tokio::test]
async fn a_run_with_no_contradiction_ends_with_its_objects_resolved_or_needing_research() {
    let provider = ProviderServer::start().await;
    let ctx = context(&provider, QueueConfig::default());
    let id = solar(&ctx, false).await;
    provider.push_all([
        Reply::Text("Earth is the third planet from the Sun.".into()),
        Reply::Text("APPROVE: accurate.".into()),
        Reply::Text("The theory is contested.".into()),
        Reply::Text("REJECT: too vague.".into()),
        Reply::Text("{\"objects\": [{\"id\": \"orbit\", \"type\": \"Fact\", \"name\": \"Earth orbits\"}]}".into()),
    ]);
    call(&ctx, "start_pipeline", json!({"session_id": id, "object_ids": ["e", "t"]})).await;
    let processes = Processes::start(ctx.clone(), &pipeline(PipelineConfig::default()));
    let run = wait_for_run(&ctx, &id, "completed").await;
    processes.shutdown().await;
    assert_eq!(provider.requests().len(), 5, "nothing to arbitrate: no arbitration call");
    assert!(step(&run, "Arbiter")["note"].as_str().unwrap().contains("nothing to arbitrate"), "{run}");

    // The approved object, which the Synthesizer left awaiting arbitration, is resolved; the
    // rejected one stays where the Reviewer put it, as in the reference.
    let graph = ctx.runtime.read(&id, |s, _| s.clone()).await.unwrap();
    let (status, last) = ended(&graph, "e");
    assert_eq!(status, "resolved");
    assert_eq!(
        (&last["agent"], &last["action"], &last["transitioned_to"], &last["reasoning_node_id"]),
        (&json!("ArbiterAgent"), &json!("uncontested"), &json!("resolved"), &Value::Null)
    );
    let (status, last) = ended(&graph, "t");
    assert_eq!((status.as_str(), &last["agent"]), ("needs_research", &json!("ReviewerAgent")));
    assert!(graph.get("m").unwrap().structure.get("current_status").is_none(), "not in the run");
    assert_settled(&graph);
    // The Arbiter's commit names its step, and no model: none answered.
    let versions = ctx.runtime.list_versions(&id).await.unwrap();
    let arbiter: Vec<_> = versions.iter().filter(|v| v.metadata.get("step") == Some(&json!("Arbiter"))).collect();
    assert_eq!(arbiter.len(), 1);
    assert!(arbiter[0].metadata.get("model").is_none(), "{:?}", arbiter[0].metadata);
}

#[tokio::test]
async fn a_run_where_only_some_objects_are_contradicted_resolves_the_others_too() {
    let provider = ProviderServer::start().await;
    let ctx = context(&provider, QueueConfig::default());
    let id = solar(&ctx, true).await;
    provider.push_all([
        Reply::Text("Earth is the third planet from the Sun.".into()),
        Reply::Text("APPROVE: accurate.".into()),
        Reply::Text("The Moon orbits Earth.".into()),
        Reply::Text("APPROVE: accurate.".into()),
        Reply::Text("The theory is contested.".into()),
        Reply::Text("REJECT: too vague.".into()),
        Reply::Text("{\"objects\": [{\"id\": \"orbit\", \"type\": \"Fact\", \"name\": \"Earth orbits\"}]}".into()),
        Reply::Text("[{\"contradiction_id\": \"c1\", \"winner_relation_id\": \"s1\", \"reason\": \"sourced\"}]".into()),
    ]);
    call(&ctx, "start_pipeline", json!({"session_id": id, "object_ids": ["e", "m", "t"]})).await;
    let processes = Processes::start(ctx.clone(), &pipeline(PipelineConfig::default()));
    let run = wait_for_run(&ctx, &id, "completed").await;
    processes.shutdown().await;
    assert_eq!(provider.requests().len(), 8, "{run}");
    assert_eq!(
        (step(&run, "Reviewer")["approved"].clone(), step(&run, "Reviewer")["rejected"].clone()),
        (json!(["e", "m"]), json!(["t"]))
    );

    // Earth and the theory take part in the contradiction: arbitrated, the rejected theory too (as
    // the reference's Arbiter moves every participant). The Moon takes part in none: resolved all
    // the same, in the same commit.
    let graph = ctx.runtime.read(&id, |s, _| s.clone()).await.unwrap();
    let verdict = step(&run, "Arbiter")["outputs"][0].clone();
    for (object, action, node) in
        [("e", "arbitrated", &verdict), ("t", "arbitrated", &verdict), ("m", "uncontested", &Value::Null)]
    {
        let (status, last) = ended(&graph, object);
        assert_eq!(status, "resolved", "{object}");
        assert_eq!(
            (&last["agent"], &last["action"], &last["reasoning_node_id"]),
            (&json!("ArbiterAgent"), &json!(action), node),
            "{object}"
        );
    }
    assert!(graph.contains("s1") && !graph.contains("c1"));
    assert_settled(&graph);
    let versions = ctx.runtime.list_versions(&id).await.unwrap();
    assert_eq!(versions.iter().filter(|v| v.metadata.get("step") == Some(&json!("Arbiter"))).count(), 1);
}

#[tokio::test]
async fn a_rerun_whose_contradiction_was_arbitrated_before_still_resolves_its_objects() {
    let provider = ProviderServer::start().await;
    let ctx = context(&provider, QueueConfig::default());
    let id = troubled(&ctx).await;
    let synthesis =
        || Reply::Text("{\"objects\": [{\"id\": \"orbit\", \"type\": \"Fact\", \"name\": \"Earth orbits\"}]}".into());
    provider.push_all([
        Reply::Text("Earth is the third planet from the Sun.".into()),
        Reply::Text("APPROVE: accurate.".into()),
        Reply::Text("The theory is contested.".into()),
        Reply::Text("REJECT: too vague.".into()),
        synthesis(),
        Reply::Text("[{\"contradiction_id\": \"c1\", \"winner_relation_id\": \"s1\", \"reason\": \"sourced\"}]".into()),
    ]);
    call(&ctx, "start_pipeline", json!({"session_id": id, "object_ids": ["e", "t"]})).await;
    let processes = Processes::start(ctx.clone(), &pipeline(PipelineConfig::default()));
    let first = wait_for_run(&ctx, &id, "completed").await;
    processes.shutdown().await;
    let verdict = step(&first, "Arbiter")["outputs"][0].clone();

    // Earth changes and the removed relation comes back: the run started again researches,
    // reviews and synthesizes Earth anew, and finds the contradiction it arbitrated before.
    let changed = call(&ctx, "evolve_knowledge", json!({"session_id": id, "operations": [
        {"type": "update_object", "object_id": "e", "structure_patch": {"note": "the third planet"}, "mode": "merge"},
        {"type": "add_relation", "identity": {"id": "c1", "type": "Relation", "name": "c1"},
         "participants": ["e", "t"], "relation_type": "contradicts"},
    ]}))
    .await;
    assert!(changed.get("error").is_none(), "{changed}");
    provider.push_all([
        Reply::Text("Earth is the third planet, indeed.".into()),
        Reply::Text("APPROVE: accurate.".into()),
        synthesis(),
    ]);
    let again = call(&ctx, "start_pipeline", json!({"session_id": id, "object_ids": ["e", "t"]})).await;
    assert_eq!(again["attempt"], 2, "{again}");
    let processes = Processes::start(ctx.clone(), &pipeline(PipelineConfig::default()));
    let rerun = wait_for_run(&ctx, &id, "completed").await;
    processes.shutdown().await;
    assert_eq!(provider.requests().len(), 9, "no second arbitration call");
    let arbiter = step(&rerun, "Arbiter");
    assert!(arbiter["note"].as_str().unwrap().contains("arbitrated before"), "{rerun}");
    assert_eq!(arbiter["outputs"], json!([verdict]));

    // Earth, synthesized again, is resolved by the earlier verdict; the theory keeps what the
    // first run's arbitration left (its rejection was reused, so nothing moved it since).
    let graph = ctx.runtime.read(&id, |s, _| s.clone()).await.unwrap();
    let (status, last) = ended(&graph, "e");
    assert_eq!(status, "resolved");
    assert_eq!(
        (&last["agent"], &last["action"], &last["reasoning_node_id"], &last["run_id"]),
        (&json!("ArbiterAgent"), &json!("arbitrated"), &verdict, &rerun["run_id"])
    );
    let actions: Vec<&str> = graph.get("e").unwrap().structure["transition_log"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        ["researched", "reviewed", "synthesized", "arbitrated", "researched", "reviewed", "synthesized", "arbitrated"]
    );
    assert_eq!(ended(&graph, "t").0, "resolved");
    assert_settled(&graph);
}

#[tokio::test]
async fn a_failing_provider_fails_the_task_retries_it_then_dead_letters_it() {
    let provider = ProviderServer::start().await;
    let queue = QueueConfig { max_retries: 1, ..QueueConfig::default() };
    let ctx = context(&provider, queue);
    let id = troubled(&ctx).await;
    provider.set_default(Some(Reply::ServerError));
    call(&ctx, "start_pipeline", json!({"session_id": id, "object_ids": ["e"]})).await;
    let mut events = ctx.runtime.subscribe();
    let processes = Processes::start(ctx.clone(), &pipeline(PipelineConfig::default()));

    // The first attempt fails: the task waits for its retry, and the run says why.
    wait_for("the first failure", async || step(&the_run(&ctx, &id).await, "Researcher")["error"].is_string()).await;
    let run = the_run(&ctx, &id).await;
    assert_eq!(
        (run["status"].as_str(), step(&run, "Researcher")["status"].as_str()),
        (Some("running"), Some("active"))
    );
    // The provider's failure as it is, its status named: an outage is no internal error.
    let error = step(&run, "Researcher")["error"].as_str().unwrap().to_owned();
    assert!(error.starts_with("LLM Researcher call failed: provider server error: anthropic ("), "{error}");
    assert!(error.contains("HTTP 500") && !error.contains("Internal error"), "{error}");
    let ended = std::iter::from_fn(|| events.try_recv().ok())
        .find_map(|e| match e.kind {
            EventKind::AgentStepCompleted { succeeded, transitioned_to, error, .. } => {
                Some((succeeded, transitioned_to, error))
            }
            _ => None,
        })
        .expect("an AgentStepCompleted event");
    assert!(!ended.0 && ended.1.is_empty() && ended.2.contains("LLM Researcher call failed"), "{ended:?}");
    let pending = ctx.runtime.tasks().list(&TaskFilter::default()).await.unwrap();
    assert_eq!((pending.len(), pending[0].retry_count, pending[0].status), (1, 1, TaskStatus::Pending));

    // The retry (after 2 s) fails too: out of retries, the task is dead and the run failed.
    let run = wait_for_run(&ctx, &id, "failed").await;
    let researcher = step(&run, "Researcher");
    let dead = ctx.runtime.tasks().get(researcher["dead_letter_task_id"].as_i64().unwrap()).await.unwrap().unwrap();
    assert_eq!((dead.status, dead.retry_count), (TaskStatus::Dead, 2));
    let reason = researcher["error"].as_str().unwrap();
    assert!(reason.starts_with("LLM Researcher call failed: provider server error") && reason.contains("HTTP 500"));
    assert!(reason.ends_with(" (gave up after 2 failed attempts)"), "{reason}");
    assert_eq!(dead.last_error.as_deref(), Some(reason), "the task and the run give the same reason");
    assert_eq!(step(&run, "Reviewer")["status"], "pending");
    let status = call(&ctx, "process_status", json!({"process_kind": "pipeline"})).await;
    assert_eq!((status["status"].as_str(), status["tasks_failed"].as_u64()), (Some("alive"), Some(2)), "{status}");
    processes.shutdown().await;
    assert_eq!(ctx.runtime.list_versions(&id).await.unwrap().len(), 1, "nothing committed");
}

#[tokio::test]
async fn a_run_over_its_token_budget_stops_asking_the_model() {
    let provider = ProviderServer::start().await;
    let ctx = context(&provider, QueueConfig::default());
    let id = troubled(&ctx).await;
    provider.set_default(Some(Reply::Usage(Box::new(Reply::Text("A finding.".into())), 100, 100)));
    call(&ctx, "start_pipeline", json!({"session_id": id, "object_ids": ["e"]})).await;
    let config = PipelineConfig { run_max_tokens: 150, ..PipelineConfig::default() };
    let processes = Processes::start(ctx.clone(), &pipeline(config));
    let run = wait_for_run(&ctx, &id, "failed").await;
    processes.shutdown().await;
    assert_eq!(provider.requests().len(), 1, "the review was never asked for");
    assert_eq!(step(&run, "Researcher")["status"], "completed");
    let reviewer = step(&run, "Reviewer");
    assert_eq!((reviewer["status"].as_str(), reviewer["dead_letter_task_id"].clone()), (Some("failed"), Value::Null));
    assert!(reviewer["error"].as_str().unwrap().starts_with("budget_exhausted: the run has spent 200"), "{reviewer}");
    assert!(ctx.runtime.tasks().list(&TaskFilter { status: None, ..TaskFilter::default() }).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_slow_step_keeps_its_claim_by_renewing_it() {
    let provider = ProviderServer::start().await;
    let queue = QueueConfig { lease: Duration::from_millis(600), ..QueueConfig::default() };
    let ctx = context(&provider, queue);
    let id = troubled(&ctx).await;
    provider.push(Reply::Delay(Duration::from_millis(2_000), Box::new(Reply::Text("Slowly found.".into()))));
    provider.set_default(Some(Reply::Text("APPROVE: fine.".into())));
    call(&ctx, "start_pipeline", json!({"session_id": id, "object_ids": ["e"]})).await;
    let processes = Processes::start(ctx.clone(), &pipeline(PipelineConfig::default()));
    wait_for("the research to be under way", async || provider.requests().len() == 1).await;
    // Well past the lease, nobody else can take the task: its holder keeps renewing the claim.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert!(ctx.runtime.tasks().claim(Some("pipeline_research_request")).await.unwrap().is_none());
    wait_for("the research to be done", async || {
        step(&the_run(&ctx, &id).await, "Researcher")["status"] == "completed"
    })
    .await;
    processes.shutdown().await;
    let run = the_run(&ctx, &id).await;
    assert_eq!(step(&run, "Researcher")["outputs"].as_array().unwrap().len(), 1);
    let versions = ctx.runtime.list_versions(&id).await.unwrap();
    assert_eq!(versions.iter().filter(|v| v.metadata.get("step") == Some(&json!("Researcher"))).count(), 1);
}

#[test]
fn verdicts_read_the_first_word_and_anything_unclear_is_a_rejection() {
    assert_eq!(verdict("APPROVE: accurate."), (true, "accurate.".to_owned()));
    assert_eq!(verdict("  **Approved** - matches the sources"), (true, "matches the sources".to_owned()));
    assert_eq!(verdict("reject: vague"), (false, "vague".to_owned()));
    assert_eq!(verdict("REJECT"), (false, "REJECT".to_owned()));
    let (approved, reason) = verdict("I think it is fine.");
    assert!(!approved && reason.contains("neither APPROVE nor REJECT") && reason.ends_with("I think it is fine."));
}

#[test]
fn a_synthesis_answer_needs_objects_with_ids_and_never_makes_relations() {
    assert!(proposed_objects(&json!({"objects": []})).unwrap_err().contains("empty"));
    assert!(proposed_objects(&json!({"items": [{"id": "a"}]})).unwrap_err().contains("no 'objects'"));
    assert!(proposed_objects(&json!({"objects": [{"name": "a"}]})).unwrap_err().contains("no 'id'"));
    let proposed = proposed_objects(&json!({"objects": [
        {"id": "a", "structure": {"participants": ["x", "y"], "relation_type": "r", "kept": 1}},
        {"id": "a", "name": "again"},
        {"id": "b", "type": "Fact", "name": "B"},
    ]}))
    .unwrap();
    assert_eq!(proposed.len(), 2, "a repeated id counts once");
    let first = &proposed[0];
    assert_eq!(
        (first.id.as_str(), first.ty.as_str(), first.name.as_str()),
        ("a", "Claim", "a"),
        "a Claim named by its id by default"
    );
    assert_eq!(Value::from(first.structure.clone()), json!({"kept": 1}));
    assert_eq!((proposed[1].ty.as_str(), proposed[1].name.as_str()), ("Fact", "B"));
}
