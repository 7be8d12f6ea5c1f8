//! `resolve_gossip_conflict`: settles two sessions' divergent states by a three-way merge of the
//! source into the target, the conflicting objects settled by the caller (`resolutions`) or by
//! the configured LLM (`auto_resolve`).
//!
//! The reference meets such divergence through its gossip between peers; here it works on any two
//! sessions (a branch and its parent, or two replicas' copies imported side by side). A merge with
//! nothing in conflict is committed at once, as the reference does; a merge with conflicts commits
//! nothing until each conflict has a resolution.

use crate::ErrorCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use cks_llm::ChatRequest;

use super::resolution_task;
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{ArgumentCode, Named, SessionCheck, Tool, ToolMeta};
use crate::tools::branches::ConflictEntry;
use crate::tools::branches::merge_branch::{self, MergeBranch};
use crate::tools::llm::json_answer::{JsonAnswer, ask_json};

/// How conflicts are settled: returned as `policy` to a caller that settles them itself, and the
/// LLM's system prompt with `auto_resolve`.
const POLICY: &str = "Two sessions changed the same objects differently since they diverged. For each \
conflicting object choose \"branch_a\" (keep the target's version), \"branch_b\" (take the source's), null \
(leave the object out) or a complete object {\"identity\": {...}, \"structure\": {...}} combining both. Prefer \
the edit that is more specific, better sourced or held with more confidence; combine them when both add \
something true. Answer with one JSON object mapping each object_id to its resolution, and nothing else.";

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The session to merge into (must be open).
    pub(crate) target_session_id: String,
    /// The session to merge in.
    pub(crate) source_session_id: String,
    /// Per conflicting object id: "branch_a" (target's), "branch_b" (source's), null (drop it) or a
    /// whole object.
    #[serde(default)]
    #[schemars(schema_with = "crate::schema::object")]
    pub(crate) resolutions: Option<Value>,
    /// Let the configured LLM settle what resolutions leave open.
    #[serde(default)]
    pub(crate) auto_resolve: bool,
    /// Model for auto_resolve (default: the provider's).
    pub(crate) model: Option<String>,
    /// Answer token limit for auto_resolve (default CKS_LLM_MAX_TOKENS).
    pub(crate) max_tokens: Option<u32>,
    /// The gossip_conflict task this settles (completed once merged).
    pub(crate) task_id: Option<i64>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    #[serde(flatten)]
    merge: merge_branch::Output,
    /// Conflicts left open: how to settle them.
    #[serde(skip_serializing_if = "Option::is_none")]
    policy: Option<&'static str>,
    /// With 'auto_resolve': the resolutions the model chose.
    #[serde(skip_serializing_if = "Option::is_none")]
    llm_resolutions: Option<Value>,
    /// Whether the task named by 'task_id' was completed (only with 'task_id').
    #[serde(skip_serializing_if = "Option::is_none")]
    task_completed: Option<bool>,
}

pub(crate) struct ResolveGossipConflict;

#[async_trait::async_trait]
impl Tool for ResolveGossipConflict {
    type Input = Input;
    type Output = Output;
    const ARGUMENT_CODES: &'static [ArgumentCode] =
        &[ArgumentCode::missing("source_session_id", ErrorCode::SessionNotFound)];
    const NAMED: &'static [(&'static str, Named)] = &[("task_id", Named::Task)];
    const TITLE: &'static str = "Resolve a gossip conflict";
    const META: ToolMeta = ToolMeta {
        name: "resolve_gossip_conflict",
        description: "Settle two sessions' divergent states: three-way merge 'source_session_id' into \
            'target_session_id', as merge_branch. Conflicts are settled by 'resolutions' or, with 'auto_resolve', by \
            the configured LLM ('llm_resolutions'); any left open commit nothing and answer {merged: false, \
            conflicts, policy}. Returns {merged: true, session_id, version_id}. LLM errors: internal_error, \
            llm_output_parse_error.",
        mutates_graph: true,
        creates_session: false,
        // A merge: the source's removals and the chosen sides replace what the target holds.
        destructive: true,
        idempotent: false,
        // 'auto_resolve' asks the configured LLM.
        open_world: true,
        session_fields: &["target_session_id", "source_session_id"],
        session_checks: &[SessionCheck::open("target_session_id"), SessionCheck::exists("source_session_id")],
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        let task = resolution_task(ctx, input.task_id, &input.target_session_id).await?;
        // The merge's version names this tool (merge_branch becomes `via_tool`) and the task.
        let mut ctx = ctx.clone();
        ctx.audit.insert("tool".into(), json!(Self::META.name));
        if let Some(task) = task {
            ctx.audit.insert("task_id".into(), json!(task));
        }
        let mut resolutions = input.resolutions.clone();
        let mut merge = merge_with(&ctx, &input, resolutions.clone()).await?;
        let mut llm_resolutions = None;
        if let (false, true, Some(open)) = (merge.merged, input.auto_resolve, merge.conflicts.as_ref()) {
            let answer = ask(&ctx, &input, open).await?;
            ctx.audit.insert("provider".into(), json!(answer.provider));
            ctx.audit.insert("model".into(), json!(answer.model));
            let chosen = answer.value;
            let mut all = match resolutions.take() {
                Some(Value::Object(given)) => given,
                _ => Map::new(),
            };
            if let Value::Object(chosen) = &chosen {
                all.extend(chosen.clone());
            }
            merge = merge_with(&ctx, &input, Some(Value::Object(all)))
                .await
                .map_err(|e| e.with("raw_decision", chosen.clone()))?;
            llm_resolutions = Some(chosen);
        }
        let task_completed = match task {
            Some(task_id) if merge.merged => {
                Some(ctx.runtime.tasks().complete(cks_runtime::store::TaskRef::any(task_id)).await.unwrap_or(false))
            }
            Some(_) => Some(false),
            None => None,
        };
        let policy = (!merge.merged && merge.conflicts.is_some()).then_some(POLICY);
        Ok(Output { merge, policy, llm_resolutions, task_completed })
    }
}

async fn merge_with(
    ctx: &ToolContext,
    input: &Input,
    resolutions: Option<Value>,
) -> Result<merge_branch::Output, ToolError> {
    let merge_input = merge_branch::Input {
        target_session_id: input.target_session_id.clone(),
        source_session_id: input.source_session_id.clone(),
        base_version_id: None,
        resolutions,
        return_structure: None,
    };
    MergeBranch.run(ctx, merge_input).await
}

/// Asks the configured LLM to settle `open`.
async fn ask(ctx: &ToolContext, input: &Input, open: &[ConflictEntry]) -> Result<JsonAnswer, ToolError> {
    let conflicts = serde_json::to_string_pretty(open).expect("conflicts encode");
    let prompt = format!(
        "Merging session '{}' (branch_b, the source) into '{}' (branch_a, the target). These objects conflict:\n\n\
         {conflicts}\n\nAnswer with the JSON object of resolutions only.",
        input.source_session_id, input.target_session_id
    );
    let request = ChatRequest {
        model: input.model.clone().filter(|m| !m.trim().is_empty()),
        system: Some(POLICY.to_owned()),
        max_tokens: input.max_tokens,
        ..ChatRequest::from_prompt(prompt)
    };
    ask_json(ctx, request, false, ResolveGossipConflict::META.name, "LLM resolution").await
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};
    use std::sync::Arc;

    use cks_runtime::store::TaskRef;
    use cks_testkit::{ProviderServer, Reply};

    use crate::ToolContext;
    use crate::registry::Registry;
    use crate::testing::queue;
    use crate::testing::{call, context, llm_context, llm_env, obj, session, structure};

    /// A target and a branch of it that both changed `a.v` (1 → 2 and 1 → 3); the branch also adds `s`.
    async fn diverged(ctx: &ToolContext) -> (String, String) {
        let target = session(ctx, structure(vec![obj("a", "Claim", "A", json!({"v": 1}))])).await;
        let branch =
            call(ctx, "create_branch", json!({"session_id": target})).await["session_id"].as_str().unwrap().to_owned();
        let update = |v: i64| json!([{"type": "update_object", "object_id": "a", "structure_patch": {"v": v}}]);
        call(ctx, "evolve_knowledge", json!({"session_id": target, "operations": update(2)})).await;
        let mut ops = update(3);
        ops.as_array_mut()
            .unwrap()
            .push(json!({"type": "add_object", "identity": {"id": "s", "type": "Claim", "name": "S"}}));
        call(ctx, "evolve_knowledge", json!({"session_id": branch, "operations": ops})).await;
        (target, branch)
    }

    async fn value_of_a(ctx: &ToolContext, session_id: &str) -> Value {
        ctx.runtime.read(session_id, |s, _| s.get("a").unwrap().structure["v"].clone()).await.unwrap()
    }

    #[tokio::test]
    async fn conflicts_wait_for_resolutions_then_merge_and_complete_the_task() {
        let ctx = context();
        let (target, branch) = diverged(&ctx).await;
        let before = ctx.runtime.list_versions(&target).await.unwrap().len();
        let args = json!({"target_session_id": target, "source_session_id": branch});
        let open = call(&ctx, "resolve_gossip_conflict", args.clone()).await;
        assert_eq!(open["merged"], false);
        assert_eq!(open["conflicts"][0]["object_id"], "a");
        assert!(open["policy"].as_str().unwrap().contains("branch_a"));
        assert_eq!(ctx.runtime.list_versions(&target).await.unwrap().len(), before, "nothing committed");

        let task = queue(&ctx, "gossip_conflict", &target, json!({"source_session_id": branch})).await;
        let mut settle = args;
        settle["resolutions"] = json!({"a": "branch_b"});
        settle["task_id"] = json!(task);
        let merged = call(&ctx, "resolve_gossip_conflict", settle).await;
        assert_eq!(
            (merged["merged"].as_bool(), merged["task_completed"].as_bool()),
            (Some(true), Some(true)),
            "{merged}"
        );
        assert!(merged.get("policy").is_none());
        assert_eq!(value_of_a(&ctx, &target).await, 3);
        assert!(ctx.runtime.tasks().get(task).await.unwrap().is_none());
        let versions = ctx.runtime.list_versions(&target).await.unwrap();
        let metadata = &versions.last().unwrap().metadata;
        assert_eq!(
            (metadata["tool"].as_str(), metadata["via_tool"].as_str(), metadata["task_id"].as_i64()),
            (Some("resolve_gossip_conflict"), Some("merge_branch"), Some(task))
        );

        // Nothing in conflict: merged at once.
        let again =
            call(&ctx, "resolve_gossip_conflict", json!({"target_session_id": target, "source_session_id": branch}))
                .await;
        assert_eq!(again["merged"], true);
        let missing =
            call(&ctx, "resolve_gossip_conflict", json!({"target_session_id": target, "source_session_id": "nope"}))
                .await;
        assert_eq!(missing["error"], "session_not_found");
    }

    #[tokio::test]
    async fn the_model_settles_what_is_left_open() {
        let server = ProviderServer::start().await;
        let ctx = llm_context(&llm_env("anthropic", &server.base_url()));
        let (target, branch) = diverged(&ctx).await;
        server.push(Reply::Text("Keep the target's: {\"a\": \"branch_a\"}".into()));
        let args = json!({"target_session_id": target, "source_session_id": branch, "auto_resolve": true});
        let merged = call(&ctx, "resolve_gossip_conflict", args).await;
        assert_eq!(merged["merged"], true, "{merged}");
        assert_eq!(merged["llm_resolutions"], json!({"a": "branch_a"}));
        assert_eq!(value_of_a(&ctx, &target).await, 2);
        let ids = ctx.runtime.read(&target, |s, _| s.contains("s")).await.unwrap();
        assert!(ids, "the rest of the branch merged");
        let prompt = server.requests()[0].body["messages"][0]["content"].to_string();
        assert!(prompt.contains("target_diff") && prompt.contains(&branch));
        let versions = ctx.runtime.list_versions(&target).await.unwrap();
        assert_eq!(versions.last().unwrap().metadata["provider"], "anthropic");

        let (target, branch) = diverged(&ctx).await;
        server.push(Reply::Text("{\"a\": \"both\"}".into()));
        let args = json!({"target_session_id": target, "source_session_id": branch, "auto_resolve": true});
        let refused = call(&ctx, "resolve_gossip_conflict", args).await;
        assert_eq!(
            (refused["error"].as_str(), refused["raw_decision"].clone()),
            (Some("invalid_parameter"), json!({"a": "both"}))
        );
    }

    #[tokio::test]
    async fn a_dead_lettered_gossip_task_is_proposed_and_approved() {
        let mut ctx = context();
        ctx.registry = Some(Arc::new(Registry::standard()));
        let (target, branch) = diverged(&ctx).await;
        let task =
            queue(&ctx, "gossip_conflict", &target, json!({"source_session_id": branch, "conflicts": ["a"]})).await;
        assert!(ctx.runtime.tasks().dead_letter(TaskRef::any(task), "stuck").await.unwrap());
        let proposed = call(&ctx, "review_dead_letter", json!({"task_id": task})).await["proposed_resolution"].clone();
        assert_eq!(
            proposed,
            json!({"tool": "resolve_gossip_conflict",
            "arguments": {"target_session_id": target, "source_session_id": branch}})
        );
        let unsettled =
            call(&ctx, "approve_resolution", json!({"task_id": task, "resolution": proposed.clone()})).await;
        assert_eq!(unsettled["approved"], false, "the conflict is still open");
        let mut settled = proposed;
        settled["arguments"]["resolutions"] = json!({"a": "branch_a"});
        let approved = call(&ctx, "approve_resolution", json!({"task_id": task, "resolution": settled})).await;
        assert_eq!(approved["approved"], true, "{approved}");
        assert!(ctx.runtime.tasks().get(task).await.unwrap().is_none());
    }
}
