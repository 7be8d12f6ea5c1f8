//! `arbitrate_inference_conflict`: settles the findings of the inference staleness sweeper.
//!
//! A confidence conflict (several active `InferenceStep`s conclude one object with different
//! confidence) is settled by naming the step that stays: the caller names it (`winner_id`, or
//! `winners` for several conclusions), or the configured LLM weighs the competing steps against
//! the arbitration policy (`auto_resolve`, one call for a whole batch). The loser steps are then
//! superseded by the winner (`resolve_inference_conflict`). A stale premise (an active step citing
//! a step since superseded) is settled mechanically: the citation moves to the cited step's live
//! successor.
//!
//! Unlike the reference, whose argument check demands `conclusion_id`, every mode is reachable
//! over MCP: the batch and stale-premise modes are what a swept `inference_conflict` task needs.

use crate::ErrorCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, HashSet};

use cks_core::KnowledgeStructure;
use cks_core::ops::{Operation, PatchMode};
use cks_llm::ChatRequest;

use super::{Resolution, resolution_task};
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Named, SessionCheck, Tool, ToolMeta};
use crate::tools::llm::json_answer::{JsonAnswer, ask_json};
use cks_core::inference::{STEP_TYPE, explain, truthy};

/// What the arbiter weighs, returned as `policy` so a calling model can decide by the same rules,
/// and sent as the arbiter's system prompt.
const CRITERIA: &str = "Several InferenceSteps are active for one conclusion and disagree. Choose the one that \
should remain active; the others will be superseded by it. Weigh all of the following together:
1. The operator is a starting point, not the answer: deductive is stronger than inductive, inductive than \
abductive, abductive than heuristic, unless the justification says otherwise.
2. A confidence value counts only as far as its justification supports it; a high number with a vague reason is \
weak.
3. Look at the premises: a missing premise, a premise that was itself superseded, or a cut-off chain weakens the \
step that rests on it.
4. A step whose alternatives_considered names and rules out real alternatives has done more work than one that \
lists none.
5. Prefer justifications that are specific and could be checked over circular or generic ones.
6. If the steps are still tied, keep the order given (already ranked: confidence descending, then structure \
order).
Say plainly when the call is close, and show it in a lower confidence_in_decision; still name exactly one winner.";

const SINGLE_ANSWER: &str = "Answer with one JSON object and nothing else: {\"winner_step_id\": \"<step_id>\", \
\"reasoning\": \"<two to four sentences naming the criteria that decided>\", \"runner_up_ids\": [\"<step_id>\"], \
\"confidence_in_decision\": <0.0 to 1.0>}";

const BATCH_ANSWER: &str = "Decide each conclusion on its own evidence. Answer with one JSON array and nothing \
else, one object per conclusion in the order given: {\"conclusion_id\": \"<id>\", \"winner_step_id\": \
\"<step_id>\", \"reasoning\": \"<two to four sentences>\", \"runner_up_ids\": [\"<step_id>\"], \
\"confidence_in_decision\": <0.0 to 1.0>}";

const CONFIDENCE_EXTENSIONS: [&str; 2] = ["inference_confidence_conflict", "supersession_chain"];
fn policy() -> String {
    format!("{CRITERIA}\n\n{SINGLE_ANSWER}")
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    pub(crate) session_id: String,
    /// The object whose active InferenceSteps disagree. Not with conclusion_ids or stale_premise_ids.
    pub(crate) conclusion_id: Option<String>,
    /// Batch: several disputed conclusions, each answered in 'results' (one LLM call, one commit).
    pub(crate) conclusion_ids: Option<Vec<String>>,
    /// Active InferenceSteps whose premises cite a superseded step (no LLM). Not with
    /// conclusion_id(s).
    pub(crate) stale_premise_ids: Option<Vec<String>>,
    /// The step that stays (one of active_steps); no LLM call.
    pub(crate) winner_id: Option<String>,
    /// Batch winner_id: {conclusion_id: step id}.
    #[serde(default)]
    #[schemars(schema_with = "crate::schema::object")]
    pub(crate) winners: Option<Map<String, Value>>,
    /// Why winner_id wins (kept in the decision).
    pub(crate) reasoning: Option<String>,
    /// Let the configured LLM decide where no winner is given.
    #[serde(default)]
    pub(crate) auto_resolve: bool,
    /// Apply the decisions as a new version.
    #[serde(default)]
    pub(crate) commit: bool,
    /// Model for auto_resolve (default CKS_ARBITER_MODEL, else the provider's).
    pub(crate) model: Option<String>,
    /// Answer token limit for auto_resolve (default CKS_ARBITER_MAX_TOKENS, 1024).
    pub(crate) max_tokens: Option<u32>,
    /// The inference_conflict task this settles (completed once committed).
    pub(crate) task_id: Option<i64>,
}

/// A decision about one conclusion.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub(crate) struct Decision {
    winner_step_id: String,
    /// Why (the caller's text, or the model's).
    reasoning: Value,
    runner_up_ids: Value,
    /// The model's confidence in its decision (null for a caller's decision).
    confidence_in_decision: Value,
    /// auto_resolve only.
    #[serde(skip_serializing_if = "Option::is_none")]
    model_used: Option<String>,
}

#[derive(Debug, Default, Serialize, JsonSchema)]
pub(crate) struct Output {
    session_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    conclusion_id: Option<String>,
    /// Whether at least two active steps disagree (single mode).
    #[serde(skip_serializing_if = "Option::is_none")]
    conflict: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    /// The competing steps, ranked by entrenchment (explain_knowledge's shape).
    #[serde(skip_serializing_if = "Option::is_none")]
    active_steps: Option<Vec<Value>>,
    /// The arbitration criteria, for a caller that decides itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    policy: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    decision: Option<Decision>,
    /// "caller" or "auto_resolve".
    #[serde(skip_serializing_if = "Option::is_none")]
    decision_source: Option<&'static str>,
    /// Batch and stale-premise modes: one entry per id asked about, in order.
    #[serde(skip_serializing_if = "Option::is_none")]
    results: Option<Vec<Value>>,
    /// True when nothing asked about needs settling (no conflict, no stale premise): the finding is
    /// gone.
    #[serde(skip_serializing_if = "Option::is_none")]
    acknowledged: Option<bool>,
    #[serde(flatten)]
    resolution: Resolution,
}

pub(crate) struct ArbitrateInferenceConflict;

#[async_trait::async_trait]
impl Tool for ArbitrateInferenceConflict {
    type Input = Input;
    type Output = Output;
    const NAMED: &'static [(&'static str, Named)] = &[("task_id", Named::Task)];
    const TITLE: &'static str = "Arbitrate an inference conflict";
    const META: ToolMeta = ToolMeta {
        name: "arbitrate_inference_conflict",
        description: "Settle an inference conflict: active InferenceSteps concluding 'conclusion_id' with \
            disagreeing confidence. Alone it returns {conflict, active_steps (ranked), policy}. Decide with \
            'winner_id' or 'auto_resolve' (the configured LLM decides by the policy); the result adds 'decision'. \
            'commit' applies it (the other steps become superseded_by the winner); commit without a decision is \
            missing_decision. Batch: 'conclusion_ids' (+ 'winners'), answered in 'results'. 'stale_premise_ids' \
            instead moves citations of superseded steps to their live successors. LLM errors: \
            llm_output_parse_error, invalid_arbiter_decision.",
        mutates_graph: true,
        creates_session: false,
        destructive: false,
        idempotent: false,
        // 'auto_resolve' asks the configured LLM.
        open_world: true,
        session_fields: &["session_id"],
        session_checks: &[SessionCheck::open("session_id")],
        llm_exposed: true,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        let single = input.conclusion_id.as_deref().is_some_and(|c| !c.is_empty());
        if input.stale_premise_ids.is_some() && (single || input.conclusion_ids.is_some()) {
            return Err(ToolError::invalid_parameter(
                "'stale_premise_ids' settles stale premises (CKS-EXT-STALE-PREMISE), 'conclusion_id'/'conclusion_ids' \
                 confidence conflicts (CKS-EXT-INFERENCE-CONFIDENCE-CONFLICT): call once per kind.",
            ));
        }
        if single && input.conclusion_ids.is_some() {
            return Err(ToolError::invalid_parameter(
                "Provide either 'conclusion_id' (single) or 'conclusion_ids' (batch), not both.",
            ));
        }
        if input.winner_id.as_deref().is_some_and(|w| !w.is_empty()) && input.conclusion_ids.is_some() {
            return Err(ToolError::invalid_parameter(
                "'winner_id' goes with 'conclusion_id'; with 'conclusion_ids' use 'winners' {conclusion_id: step_id}.",
            ));
        }
        let task = resolution_task(ctx, input.task_id, &input.session_id).await?;
        if let Some(ids) = &input.stale_premise_ids {
            let ids = non_empty_ids("stale_premise_ids", ids)?;
            return stale_premises(ctx, &input, ids, task).await;
        }
        if let Some(ids) = &input.conclusion_ids {
            let ids = non_empty_ids("conclusion_ids", ids)?;
            return batch(ctx, &input, ids, task).await;
        }
        let Some(conclusion_id) = input.conclusion_id.clone().filter(|c| !c.is_empty()) else {
            return Err(ToolError::missing_parameter("conclusion_id"));
        };
        single_conclusion(ctx, &input, conclusion_id, task).await
    }
}

/// The ids of a list argument: non-empty, no empty strings, no repeats.
fn non_empty_ids<'a>(name: &str, ids: &'a [String]) -> Result<&'a [String], ToolError> {
    let invalid =
        |what: &str| Err(ToolError::invalid_parameter(format!("'{name}' {what}")).with("parameter", name.to_owned()));
    if ids.is_empty() {
        return invalid("must be a non-empty list of ids.");
    }
    if ids.iter().any(String::is_empty) {
        return invalid("must contain only non-empty strings.");
    }
    if ids.iter().collect::<HashSet<_>>().len() != ids.len() {
        return invalid("contains duplicates.");
    }
    Ok(ids)
}

/// The active steps concluding each id, ranked by entrenchment.
async fn active_steps(ctx: &ToolContext, session_id: &str, ids: &[String]) -> Result<Vec<Vec<Value>>, ToolError> {
    let explained = ctx
        .runtime
        .read(session_id, |s, _| ids.iter().map(|id| explain(s, id)["active_steps"].take()).collect::<Vec<_>>())
        .await?;
    Ok(explained.into_iter().map(|steps| if let Value::Array(steps) = steps { steps } else { Vec::new() }).collect())
}

fn step_ids(steps: &[Value]) -> Vec<String> {
    let mut ids: Vec<String> = steps.iter().filter_map(|s| s["step_id"].as_str().map(str::to_owned)).collect();
    ids.sort();
    ids
}

fn caller_decision(winner: &str, reasoning: Option<&str>, ids: &[String]) -> Decision {
    Decision {
        winner_step_id: winner.to_owned(),
        reasoning: json!(reasoning.filter(|r| !r.is_empty()).unwrap_or("Caller-supplied resolution.")),
        runner_up_ids: json!(ids.iter().filter(|id| *id != winner).collect::<Vec<_>>()),
        confidence_in_decision: Value::Null,
        model_used: None,
    }
}

fn invalid_winner(parameter: &str, winner: &Value, ids: &[String]) -> ToolError {
    let shown = winner.as_str().map_or_else(|| winner.to_string(), |w| format!("'{w}'"));
    ToolError::invalid_parameter(format!(
        "Invalid value {shown} for parameter '{parameter}'. Allowed: {}.",
        ids.join(", ")
    ))
    .with("parameter", parameter.to_owned())
}

/// The decision a model's parsed answer gives for a conclusion whose active step ids are `ids`.
fn model_decision(answer: &Value, ids: &[String], model: &str) -> Result<Decision, ToolError> {
    let winner = answer.get("winner_step_id").and_then(Value::as_str).filter(|w| ids.iter().any(|id| id == w));
    let Some(winner) = winner else {
        let chosen = answer.get("winner_step_id").cloned().unwrap_or(Value::Null);
        return Err(ToolError::new(
            ErrorCode::InvalidArbiterDecision,
            format!("The arbiter chose winner_step_id {chosen}, which is not among the active steps {ids:?}."),
        )
        .with("raw_decision", answer.clone()));
    };
    let runner_ups = match answer.get("runner_up_ids") {
        Some(Value::Array(list)) if !list.is_empty() => Value::Array(list.clone()),
        _ => json!(ids.iter().filter(|id| *id != winner).collect::<Vec<_>>()),
    };
    Ok(Decision {
        winner_step_id: winner.to_owned(),
        reasoning: answer.get("reasoning").cloned().unwrap_or(Value::Null),
        runner_up_ids: runner_ups,
        confidence_in_decision: answer.get("confidence_in_decision").cloned().unwrap_or(Value::Null),
        model_used: Some(model.to_owned()),
    })
}

/// Asks the configured LLM by the policy; `array` says whether the answer is a batch (a JSON array).
async fn ask(ctx: &ToolContext, input: &Input, prompt: String, array: bool) -> Result<JsonAnswer, ToolError> {
    let config = ctx.llm.client().ok().map(|c| c.config());
    let request = ChatRequest {
        model: input
            .model
            .clone()
            .filter(|m| !m.trim().is_empty())
            .or_else(|| config.and_then(|c| c.arbiter_model.clone())),
        system: Some(format!("{CRITERIA}\n\n{}", if array { BATCH_ANSWER } else { SINGLE_ANSWER })),
        max_tokens: input.max_tokens.or(config.map(|c| c.arbiter_max_tokens)),
        ..ChatRequest::from_prompt(prompt)
    };
    ask_json(ctx, request, array, ArbitrateInferenceConflict::META.name, "LLM arbiter call").await
}

fn steps_text(steps: &[Value]) -> String {
    serde_json::to_string_pretty(steps).expect("JSON values encode")
}

/// Commits the decisions, the version naming the provider and model when a model decided.
async fn commit_decisions(
    ctx: &ToolContext,
    input: &Input,
    decisions: Vec<(String, String)>,
    model: Option<(&'static str, String)>,
    task: Option<i64>,
) -> Resolution {
    let operations = decisions
        .into_iter()
        .map(|(conclusion_id, winner_id)| Operation::ResolveInferenceConflict { conclusion_id, winner_id })
        .collect();
    let mut ctx = ctx.clone();
    if let Some((provider, model)) = model {
        ctx.audit.insert("provider".into(), json!(provider));
        ctx.audit.insert("model".into(), json!(model));
    }
    let name = ArbitrateInferenceConflict::META.name;
    Resolution::commit_if(&ctx, input.commit, &input.session_id, operations, &CONFIDENCE_EXTENSIONS, name, task).await
}

async fn single_conclusion(
    ctx: &ToolContext,
    input: &Input,
    conclusion_id: String,
    task: Option<i64>,
) -> Result<Output, ToolError> {
    let steps = active_steps(ctx, &input.session_id, std::slice::from_ref(&conclusion_id)).await?.remove(0);
    let mut output = Output {
        session_id: input.session_id.clone(),
        conclusion_id: Some(conclusion_id.clone()),
        ..Output::default()
    };
    if steps.len() < 2 {
        output.conflict = Some(false);
        output.message =
            Some("Fewer than two active InferenceSteps conclude this object -- nothing to arbitrate.".into());
        output.active_steps = Some(steps);
        output.acknowledged = Some(true);
        output.resolution = Resolution::acknowledged(ctx, task).await;
        return Ok(output);
    }
    let ids = step_ids(&steps);
    let mut decided_by = None;
    let decision = match input.winner_id.as_deref().filter(|w| !w.is_empty()) {
        Some(winner) if ids.iter().any(|id| id == winner) => {
            Some((caller_decision(winner, input.reasoning.as_deref(), &ids), "caller"))
        }
        Some(winner) => return Err(invalid_winner("winner_id", &json!(winner), &ids)),
        None if input.auto_resolve => {
            let prompt = format!(
                "Conclusion under dispute: object '{conclusion_id}'.\n\n{} active InferenceSteps conclude it, ranked \
                 by entrenchment (confidence descending, then structure order):\n\n{}\n\nDecide by the policy and \
                 answer with the JSON decision only.",
                steps.len(),
                steps_text(&steps)
            );
            let answer = ask(ctx, input, prompt, false).await?;
            decided_by = Some((answer.provider, answer.model.clone()));
            Some((model_decision(&answer.value, &ids, &answer.model)?, "auto_resolve"))
        }
        None => None,
    };
    if input.commit && decision.is_none() {
        return Err(missing_decision());
    }
    output.conflict = Some(true);
    output.active_steps = Some(steps);
    output.policy = Some(policy());
    if let Some((decision, source)) = decision {
        let chosen = vec![(conclusion_id, decision.winner_step_id.clone())];
        output.resolution = commit_decisions(ctx, input, chosen, decided_by, task).await;
        output.decision = Some(decision);
        output.decision_source = Some(source);
    }
    Ok(output)
}

fn missing_decision() -> ToolError {
    ToolError::new(
        ErrorCode::MissingDecision,
        "commit=true needs a decision: pass 'winner_id' ('winners' in batch mode) or 'auto_resolve': true.",
    )
}

async fn batch(ctx: &ToolContext, input: &Input, ids: &[String], task: Option<i64>) -> Result<Output, ToolError> {
    let no_winners = Map::new();
    let winners = input.winners.as_ref().unwrap_or(&no_winners);
    let all_steps = active_steps(ctx, &input.session_id, ids).await?;
    let mut results: Vec<Value> = Vec::with_capacity(ids.len());
    let mut decisions: BTreeMap<usize, (Decision, &'static str)> = BTreeMap::new();
    // (index in results, conclusion, its active step ids) still to be decided by the model.
    let mut undecided: Vec<(usize, &str, Vec<String>, &[Value])> = Vec::new();
    for (index, (conclusion_id, steps)) in ids.iter().zip(&all_steps).enumerate() {
        if steps.len() < 2 {
            results.push(json!({"conclusion_id": conclusion_id, "conflict": false,
                "message": "Fewer than two active InferenceSteps conclude this object -- nothing to arbitrate.",
                "active_steps": steps}));
            continue;
        }
        results.push(json!({"conclusion_id": conclusion_id, "conflict": true, "active_steps": steps}));
        let step_ids = step_ids(steps);
        match winners.get(conclusion_id) {
            Some(Value::String(winner)) if step_ids.contains(winner) => {
                decisions.insert(index, (caller_decision(winner, None, &step_ids), "caller"));
            }
            Some(other) => {
                let error = invalid_winner(&format!("winners['{conclusion_id}']"), other, &step_ids);
                merge(&mut results[index], error.to_value());
            }
            None if input.auto_resolve => undecided.push((index, conclusion_id, step_ids, steps)),
            None => {}
        }
    }
    let mut decided_by = None;
    if !undecided.is_empty() {
        let blocks: Vec<String> = undecided
            .iter()
            .map(|(_, id, _, steps)| {
                format!(
                    "conclusion_id: '{id}'\n{} active InferenceSteps, ranked by entrenchment:\n{}",
                    steps.len(),
                    steps_text(steps)
                )
            })
            .collect();
        let prompt = format!(
            "{} disputed conclusions to decide:\n\n{}\n\nDecide each by the policy and answer with the JSON array \
             only.",
            undecided.len(),
            blocks.join("\n\n---\n\n")
        );
        match ask(ctx, input, prompt, true).await {
            Err(error) => undecided.iter().for_each(|(index, ..)| merge(&mut results[*index], error.to_value())),
            Ok(answer) => {
                decided_by = Some((answer.provider, answer.model.clone()));
                let by_conclusion: Vec<&Value> =
                    answer.value.as_array().map(|a| a.iter().collect()).unwrap_or_default();
                for (index, conclusion_id, step_ids, _) in &undecided {
                    let found = by_conclusion
                        .iter()
                        .find(|d| d.get("conclusion_id").and_then(Value::as_str) == Some(conclusion_id));
                    let decided = match found {
                        Some(answer_for) => model_decision(answer_for, step_ids, &answer.model),
                        None => Err(ToolError::new(
                            ErrorCode::InvalidArbiterDecision,
                            format!("The arbiter gave no decision for conclusion '{conclusion_id}'."),
                        )
                        .with("raw_decision", answer.value.clone())),
                    };
                    match decided {
                        Ok(decision) => {
                            decisions.insert(*index, (decision, "auto_resolve"));
                        }
                        Err(error) => merge(&mut results[*index], error.to_value()),
                    }
                }
            }
        }
    }
    let mut chosen = Vec::new();
    for (index, (decision, source)) in decisions {
        let conclusion_id = ids[index].clone();
        chosen.push((conclusion_id, decision.winner_step_id.clone()));
        results[index]["decision"] = serde_json::to_value(decision).expect("decisions encode");
        results[index]["decision_source"] = json!(source);
    }
    let in_conflict = results.iter().any(|r| r["conflict"] == true);
    if !in_conflict {
        return Ok(Output {
            session_id: input.session_id.clone(),
            results: Some(results),
            policy: Some(policy()),
            acknowledged: Some(true),
            resolution: Resolution::acknowledged(ctx, task).await,
            ..Output::default()
        });
    }
    if input.commit && chosen.is_empty() {
        let mut error = missing_decision();
        // Why the model reached none, when it was asked (the items carry the details).
        if let Some(why) = results.iter().find_map(|r| r.get("message").filter(|_| r.get("error").is_some())) {
            error.message = format!("No decision was reached: {}", why.as_str().unwrap_or_default());
        }
        return Err(error.with("results", results).with("policy", policy()));
    }
    let resolution = commit_decisions(ctx, input, chosen, decided_by, task).await;
    Ok(Output {
        session_id: input.session_id.clone(),
        results: Some(results),
        policy: Some(policy()),
        resolution,
        ..Output::default()
    })
}

/// Adds an error's fields to a result entry.
fn merge(entry: &mut Value, error: Value) {
    if let (Value::Object(entry), Value::Object(error)) = (entry, error) {
        entry.extend(error);
    }
}

/// The live successor of `step_id`: the end of its `superseded_by` chain through existing
/// InferenceSteps (a cycle or a dangling link stops the walk at the last step reached).
fn live_successor<'s>(structure: &'s KnowledgeStructure, step_id: &'s str) -> &'s str {
    let mut seen = HashSet::from([step_id]);
    let mut current = step_id;
    while let Some(step) = structure.get(current).filter(|o| o.identity.r#type == STEP_TYPE) {
        let next = step.structure.get("superseded_by");
        let Some(next) = next.filter(|n| truthy(Some(n))).and_then(Value::as_str) else { break };
        let is_step = structure.get(next).is_some_and(|o| o.identity.r#type == STEP_TYPE);
        if !is_step || !seen.insert(next) {
            break;
        }
        current = next;
    }
    current
}

async fn stale_premises(
    ctx: &ToolContext,
    input: &Input,
    ids: &[String],
    task: Option<i64>,
) -> Result<Output, ToolError> {
    let (results, operations) = ctx
        .runtime
        .read(&input.session_id, |s, _| {
            let mut results = Vec::new();
            let mut operations = Vec::new();
            for step_id in ids {
                let Some(step) = s.get(step_id) else {
                    results.push(json!({"step_id": step_id, "error": "object_not_found",
                        "message": format!("Step '{step_id}' not found.")}));
                    continue;
                };
                if step.identity.r#type != STEP_TYPE {
                    results.push(json!({"step_id": step_id, "error": "not_an_inference_step",
                        "message": format!("'{step_id}' is not an InferenceStep.")}));
                    continue;
                }
                let premises = match step.structure.get("premises") {
                    Some(Value::Array(items)) => items.clone(),
                    _ => Vec::new(),
                };
                let mut fixes = Map::new();
                let rewritten: Vec<Value> = premises
                    .iter()
                    .map(|premise| match premise.as_str() {
                        Some(id) => {
                            let live = live_successor(s, id);
                            if live != id {
                                fixes.insert(id.to_owned(), json!(live));
                            }
                            json!(live)
                        }
                        None => premise.clone(),
                    })
                    .collect();
                if fixes.is_empty() {
                    results.push(json!({"step_id": step_id, "resolved": false, "message": "No stale premises found."}));
                    continue;
                }
                results.push(json!({"step_id": step_id, "resolved": true, "fixes": fixes}));
                let patch = [("premises".to_owned(), Value::Array(rewritten))].into_iter().collect();
                operations.push(Operation::UpdateObject {
                    object_id: step_id.clone(),
                    structure_patch: patch,
                    mode: PatchMode::Merge,
                });
            }
            (results, operations)
        })
        .await?;
    let name = ArbitrateInferenceConflict::META.name;
    let nothing_stale = operations.is_empty();
    let resolution = if nothing_stale {
        Resolution::acknowledged(ctx, task).await
    } else {
        Resolution::commit_if(ctx, input.commit, &input.session_id, operations, &["supersession_chain"], name, task)
            .await
    };
    Ok(Output {
        session_id: input.session_id.clone(),
        results: Some(results),
        acknowledged: nothing_stale.then_some(true),
        resolution,
        ..Output::default()
    })
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};
    use std::sync::Arc;

    use cks_runtime::store::TaskRef;
    use cks_testkit::{ProviderServer, Reply};

    use super::CRITERIA;
    use crate::registry::Registry;
    use crate::testing::queue;
    use crate::testing::{call, context, llm_context, llm_env, obj, session, structure};

    fn step(id: &str, conclusion: &str, confidence: f64) -> Value {
        obj(
            id,
            "InferenceStep",
            id,
            json!({"premises": ["p"], "conclusion": conclusion, "confidence": confidence,
                                            "operator": "inductive", "justification": format!("because {id}")}),
        )
    }

    /// Conclusions c (steps a 0.9, b 0.4) and d (steps x 0.8, y 0.3), and e with one step.
    fn disputed() -> Value {
        structure(vec![
            obj("p", "Evidence", "p", json!({})),
            obj("c", "Claim", "c", json!({})),
            obj("d", "Claim", "d", json!({})),
            obj("e", "Claim", "e", json!({})),
            step("a", "c", 0.9),
            step("b", "c", 0.4),
            step("x", "d", 0.8),
            step("y", "d", 0.3),
            step("only", "e", 0.5),
        ])
    }

    async fn superseded_by(ctx: &crate::ToolContext, session_id: &str, id: &str) -> Value {
        let id = id.to_owned();
        ctx.runtime
            .read(session_id, move |s, _| s.get(&id).unwrap().structure.get("superseded_by").cloned())
            .await
            .unwrap()
            .unwrap_or(Value::Null)
    }

    #[tokio::test]
    async fn a_callers_decision_is_shown_then_committed_and_completes_the_task() {
        let ctx = context();
        let id = session(&ctx, disputed()).await;
        let shown = call(&ctx, "arbitrate_inference_conflict", json!({"session_id": id, "conclusion_id": "c"})).await;
        assert_eq!(shown["conflict"], true);
        let ranked: Vec<&str> =
            shown["active_steps"].as_array().unwrap().iter().map(|s| s["step_id"].as_str().unwrap()).collect();
        assert_eq!(ranked, ["a", "b"], "ranked by confidence");
        assert!(shown["policy"].as_str().unwrap().starts_with(CRITERIA));
        assert!(shown.get("decision").is_none() && shown.get("commit_result").is_none());

        let lonely = call(&ctx, "arbitrate_inference_conflict", json!({"session_id": id, "conclusion_id": "e"})).await;
        assert_eq!((lonely["conflict"].as_bool(), lonely["active_steps"].as_array().unwrap().len()), (Some(false), 1));

        let wrong = call(
            &ctx,
            "arbitrate_inference_conflict",
            json!({"session_id": id, "conclusion_id": "c", "winner_id": "x"}),
        )
        .await;
        assert_eq!(wrong["error"], "invalid_parameter");
        assert_eq!(wrong["message"], "Invalid value 'x' for parameter 'winner_id'. Allowed: a, b.");
        let undecided =
            call(&ctx, "arbitrate_inference_conflict", json!({"session_id": id, "conclusion_id": "c", "commit": true}))
                .await;
        assert_eq!(undecided["error"], "missing_decision");

        let task = queue(&ctx, "inference_conflict", &id, json!({"diagnostics": []})).await;
        let decided = call(
            &ctx,
            "arbitrate_inference_conflict",
            json!({"session_id": id, "conclusion_id": "c",
            "winner_id": "b", "reasoning": "better argued", "commit": true, "task_id": task}),
        )
        .await;
        assert_eq!(
            decided["decision"],
            json!({"winner_step_id": "b", "reasoning": "better argued",
            "runner_up_ids": ["a"], "confidence_in_decision": null})
        );
        assert_eq!(decided["decision_source"], "caller");
        assert_eq!(decided["commit_result"]["evolved"], true, "{decided}");
        assert_eq!(decided["task_completed"], true);
        assert!(ctx.runtime.tasks().get(task).await.unwrap().is_none());
        assert_eq!(superseded_by(&ctx, &id, "a").await, "b");
        let versions = ctx.runtime.list_versions(&id).await.unwrap();
        let metadata = &versions.last().unwrap().metadata;
        assert_eq!(
            (metadata["tool"].as_str(), metadata["task_id"].as_i64()),
            (Some("arbitrate_inference_conflict"), Some(task))
        );
        let settled = call(&ctx, "arbitrate_inference_conflict", json!({"session_id": id, "conclusion_id": "c"})).await;
        assert_eq!(settled["conflict"], false);
    }

    #[tokio::test]
    async fn the_model_decides_by_the_policy() {
        let server = ProviderServer::start().await;
        let ctx = llm_context(&llm_env("anthropic", &server.base_url()));
        let id = session(&ctx, disputed()).await;
        let args = json!({"session_id": id, "conclusion_id": "c", "auto_resolve": true, "commit": true});

        server.push(Reply::Text(
            "```json\n{\"winner_step_id\": \"b\", \"reasoning\": \"specific\", \"confidence_in_decision\": 0.7}\n```"
                .into(),
        ));
        let decided = call(&ctx, "arbitrate_inference_conflict", args.clone()).await;
        assert_eq!(decided["decision_source"], "auto_resolve", "{decided}");
        let decision = &decided["decision"];
        assert_eq!((decision["winner_step_id"].as_str(), decision["runner_up_ids"].clone()), (Some("b"), json!(["a"])));
        assert_eq!(decision["confidence_in_decision"], 0.7);
        let model = decision["model_used"].as_str().unwrap().to_owned();
        assert_eq!(decided["commit_result"]["evolved"], true);
        assert_eq!(superseded_by(&ctx, &id, "a").await, "b");
        let versions = ctx.runtime.list_versions(&id).await.unwrap();
        assert_eq!(versions.last().unwrap().metadata["provider"], "anthropic");

        let request = &server.requests()[0].body;
        assert_eq!(request["max_tokens"], 1024, "CKS_ARBITER_MAX_TOKENS' default");
        assert_eq!(request["model"], model.as_str());
        assert!(request["system"].to_string().contains("Weigh all of the following together"));
        let prompt = request["messages"][0]["content"].to_string();
        assert!(prompt.contains("object 'c'") && prompt.contains("because a") && prompt.contains("because b"));

        // Answers that cannot be used are errors, and nothing is committed.
        let before = ctx.runtime.list_versions(&id).await.unwrap().len();
        let fresh = session(&ctx, disputed()).await;
        let args = json!({"session_id": fresh, "conclusion_id": "d", "auto_resolve": true, "commit": true});
        server.push(Reply::Text("I cannot decide.".into()));
        let unparsed = call(&ctx, "arbitrate_inference_conflict", args.clone()).await;
        assert_eq!(
            (unparsed["error"].as_str(), unparsed["raw_output"].as_str()),
            (Some("llm_output_parse_error"), Some("I cannot decide."))
        );
        server.push(Reply::Text("{\"winner_step_id\": \"a\"}".into()));
        let outside = call(&ctx, "arbitrate_inference_conflict", args).await;
        assert_eq!(outside["error"], "invalid_arbiter_decision");
        assert_eq!(outside["raw_decision"], json!({"winner_step_id": "a"}));
        assert_eq!(superseded_by(&ctx, &fresh, "y").await, Value::Null);
        assert_eq!(ctx.runtime.list_versions(&id).await.unwrap().len(), before);
    }

    #[tokio::test]
    async fn without_a_provider_auto_resolve_is_an_internal_error() {
        let ctx = context();
        let id = session(&ctx, disputed()).await;
        let failed = call(
            &ctx,
            "arbitrate_inference_conflict",
            json!({"session_id": id, "conclusion_id": "c", "auto_resolve": true}),
        )
        .await;
        assert_eq!(failed["error"], "internal_error");
        assert!(failed["message"].as_str().unwrap().starts_with("Internal error: LLM arbiter call failed: "));
    }

    #[tokio::test]
    async fn a_batch_takes_the_callers_winners_and_one_model_call_for_the_rest() {
        let server = ProviderServer::start().await;
        let ctx = llm_context(&llm_env("anthropic", &server.base_url()));
        let id = session(&ctx, disputed()).await;
        server
            .push(Reply::Text("[{\"conclusion_id\": \"d\", \"winner_step_id\": \"y\", \"reasoning\": \"r\"}]".into()));
        let args = json!({"session_id": id, "conclusion_ids": ["c", "d", "e"], "winners": {"c": "a"},
                          "auto_resolve": true, "commit": true});
        let result = call(&ctx, "arbitrate_inference_conflict", args).await;
        let results = result["results"].as_array().unwrap();
        assert_eq!(results.len(), 3, "{result}");
        assert_eq!(
            (results[0]["decision_source"].as_str(), results[0]["decision"]["winner_step_id"].as_str()),
            (Some("caller"), Some("a"))
        );
        assert_eq!(
            (results[1]["decision_source"].as_str(), results[1]["decision"]["winner_step_id"].as_str()),
            (Some("auto_resolve"), Some("y"))
        );
        assert_eq!(results[2]["conflict"], false);
        assert_eq!(server.requests().len(), 1, "one call for the whole batch");
        let prompt = server.requests()[0].body["messages"][0]["content"].to_string();
        assert!(prompt.contains("conclusion_id: 'd'") && !prompt.contains("conclusion_id: 'c'"));
        assert_eq!(result["commit_result"]["operations_applied"], 2);
        assert_eq!(superseded_by(&ctx, &id, "b").await, "a");
        assert_eq!(superseded_by(&ctx, &id, "x").await, "y");

        let fresh = session(&ctx, disputed()).await;
        let bad = call(
            &ctx,
            "arbitrate_inference_conflict",
            json!({"session_id": fresh, "conclusion_ids": ["c"], "winners": {"c": "zz"}, "commit": true}),
        )
        .await;
        assert_eq!(bad["error"], "missing_decision", "no decision to commit: {bad}");
        assert_eq!(bad["results"][0]["error"], "invalid_parameter");
        assert_eq!(bad["results"][0]["message"], "Invalid value 'zz' for parameter 'winners['c']'. Allowed: a, b.");
        for (args, message) in [
            (json!({"conclusion_ids": []}), "'conclusion_ids' must be a non-empty list of ids."),
            (json!({"conclusion_ids": ["c", "c"]}), "'conclusion_ids' contains duplicates."),
            (
                json!({"conclusion_ids": ["c"], "conclusion_id": "c"}),
                "Provide either 'conclusion_id' (single) or 'conclusion_ids' (batch), not both.",
            ),
        ] {
            let mut args = args;
            args["session_id"] = json!(fresh);
            let refused = call(&ctx, "arbitrate_inference_conflict", args).await;
            assert_eq!(
                (refused["error"].as_str(), refused["message"].as_str()),
                (Some("invalid_parameter"), Some(message))
            );
        }
        let missing = call(&ctx, "arbitrate_inference_conflict", json!({"session_id": fresh})).await;
        assert_eq!(missing["error"], "missing_parameter");
    }

    #[tokio::test]
    async fn stale_premises_move_to_the_live_successor() {
        let ctx = context();
        let objects = vec![
            obj("p", "Evidence", "p", json!({})),
            obj("c", "Claim", "c", json!({})),
            obj("old", "InferenceStep", "old", json!({"premises": ["p"], "conclusion": "c", "superseded_by": "mid"})),
            obj("mid", "InferenceStep", "mid", json!({"premises": ["p"], "conclusion": "c", "superseded_by": "new"})),
            obj("new", "InferenceStep", "new", json!({"premises": ["p"], "conclusion": "c"})),
            obj("user", "InferenceStep", "user", json!({"premises": ["p", "old"], "conclusion": "p"})),
            obj("fine", "InferenceStep", "fine", json!({"premises": ["new"], "conclusion": "p"})),
        ];
        let id = session(&ctx, structure(objects)).await;
        let args = json!({"session_id": id, "stale_premise_ids": ["user", "fine", "p", "nope"], "commit": true});
        let result = call(&ctx, "arbitrate_inference_conflict", args).await;
        assert_eq!(
            result["results"],
            json!([
                {"step_id": "user", "resolved": true, "fixes": {"old": "new"}},
                {"step_id": "fine", "resolved": false, "message": "No stale premises found."},
                {"step_id": "p", "error": "not_an_inference_step", "message": "'p' is not an InferenceStep."},
                {"step_id": "nope", "error": "object_not_found", "message": "Step 'nope' not found."},
            ])
        );
        assert_eq!(result["commit_result"]["evolved"], true, "{result}");
        let premises =
            ctx.runtime.read(&id, |s, _| s.get("user").unwrap().structure["premises"].clone()).await.unwrap();
        assert_eq!(premises, json!(["p", "new"]));
        let mixed = call(
            &ctx,
            "arbitrate_inference_conflict",
            json!({"session_id": id, "stale_premise_ids": ["user"], "conclusion_id": "c"}),
        )
        .await;
        assert_eq!(mixed["error"], "invalid_parameter");
    }

    #[tokio::test]
    async fn a_dead_lettered_inference_task_is_proposed_and_approved() {
        let mut ctx = context();
        ctx.registry = Some(Arc::new(Registry::standard()));
        let objects = vec![
            obj("p", "Evidence", "p", json!({})),
            obj("old", "InferenceStep", "old", json!({"premises": ["p"], "conclusion": "p", "superseded_by": "new"})),
            obj("new", "InferenceStep", "new", json!({"premises": ["p"], "conclusion": "p"})),
            obj("user", "InferenceStep", "user", json!({"premises": ["old"], "conclusion": "p"})),
        ];
        let id = session(&ctx, structure(objects)).await;
        let payload = json!({"version_id": "", "diagnostics": [
            {"code": "CKS-EXT-STALE-PREMISE", "severity": "warning", "message": "m", "location": "user"}]});
        let task = queue(&ctx, "inference_conflict", &id, payload).await;
        assert!(ctx.runtime.tasks().dead_letter(TaskRef::any(task), "stuck").await.unwrap());
        let review = call(&ctx, "review_dead_letter", json!({"task_id": task})).await;
        let proposed = review["proposed_resolution"].clone();
        assert_eq!(
            proposed,
            json!({"tool": "arbitrate_inference_conflict",
            "arguments": {"session_id": id, "stale_premise_ids": ["user"], "commit": true}})
        );
        let approved = call(&ctx, "approve_resolution", json!({"task_id": task, "resolution": proposed})).await;
        assert_eq!(approved["approved"], true, "{approved}");
        assert!(ctx.runtime.tasks().get(task).await.unwrap().is_none());

        let conflict = json!({"diagnostics": [{"code": "CKS-EXT-INFERENCE-CONFIDENCE-CONFLICT", "location": "a", "conclusion_id": "c"},
                                               {"code": "CKS-EXT-STALE-PREMISE", "location": "user"}]});
        let task = queue(&ctx, "inference_conflict", &id, conflict).await;
        assert!(ctx.runtime.tasks().dead_letter(TaskRef::any(task), "stuck").await.unwrap());
        let review = call(&ctx, "review_dead_letter", json!({"task_id": task})).await;
        assert_eq!(
            review["proposed_resolution"]["arguments"],
            json!({"session_id": id, "conclusion_ids": ["c"], "auto_resolve": true, "commit": true})
        );
    }
}
