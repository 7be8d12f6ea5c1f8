//! The Arbiter: settles the contradictions that touch the run's objects (relations a
//! `MutualExclusionRule` or `FunctionalRelationRule` of the graph forbids together) in one LLM
//! call (JSON): of each contradiction one relation stays and the others are removed, committed with
//! a `ReasoningNode` recording the decisions and the transitions of the objects involved to
//! `resolved`. With no such contradiction, or with the same ones arbitrated before, it asks the
//! model nothing.
//!
//! Either way the run ends here: every object of the run the Synthesizer left `awaiting_arbitration`
//! moves to `resolved` (with the decisions' commit, or in a commit of its own), where the
//! reference's pipeline leaves an approved object; a rejected one stays `needs_research` unless it
//! takes part in a contradiction. With nothing to decide and nothing waiting, it commits nothing.
//!
//! The reference's Arbiter instead drains the `contradiction_detected` queue the Critic drains too;
//! here the Critic keeps that queue, and each run arbitrates what concerns its own objects.

use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use cks_core::KnowledgeObject;
use cks_core::ops::Operation;
use cks_core::validate::contradictions;

use super::{Failure, Job, Produced, combined_hash, content_hash, neighbourhood, node, pretty, shown};
use cks_tools::services::parse_json;

const SYSTEM: &str = "You are the arbitration step of a pipeline that improves a knowledge graph. Each \
contradiction below is a set of relations that a rule of the graph forbids together: exactly one relation of each \
set stays, the others are removed. Keep the relation that is better supported: by more reliable sources, by more \
recent information, by higher stated confidence. Answer with one JSON array and nothing else, one entry per \
contradiction: [{\"contradiction_id\": \"<id>\", \"winner_relation_id\": \"<relation id>\", \"reason\": \"<one \
sentence>\"}]";

/// Where the Synthesizer leaves the run's approved objects, and where the Arbiter leaves them.
const WAITING: &str = "awaiting_arbitration";
const RESOLVED: &str = "resolved";

/// A contradiction the run has to settle: its id, rule code and relations.
struct Contended {
    id: String,
    code: String,
    relation_ids: Vec<String>,
}

pub(super) async fn arbitrate(job: &Job<'_>) -> Result<(), Failure> {
    let mut scope: BTreeSet<String> = job.run.object_ids.iter().cloned().collect();
    scope.extend(job.payload.object_ids.iter().cloned());
    let depth = job.config.arbiter_query_depth;
    let short_run = job.short_run().to_owned();
    let found = job
        .read(move |s| {
            let touches = |relation_id: &String| {
                scope.contains(relation_id)
                    || s.get(relation_id)
                        .and_then(|r| r.relation().map(|v| v.participants.iter().any(|p| scope.contains(*p))))
                        .unwrap_or(false)
            };
            let contended: Vec<Contended> = contradictions(s)
                .into_iter()
                .filter(|c| c.relation_ids.iter().any(touches))
                .map(|c| Contended { id: c.location, code: c.code.to_owned(), relation_ids: c.relation_ids })
                .collect();
            let mut participants = BTreeSet::new();
            let mut relations = Vec::new();
            for c in &contended {
                for id in &c.relation_ids {
                    let Some(relation) = s.get(id) else { continue };
                    relations.push(shown(relation));
                    if let Some(view) = relation.relation() {
                        participants.extend(view.participants.iter().map(|p| (*p).to_owned()));
                    }
                }
            }
            let participants: Vec<String> = participants.into_iter().collect();
            let objects: Vec<_> =
                participants.iter().filter_map(|id| s.get(id)).filter(|o| !o.is_relation()).cloned().collect();
            let keys: Vec<String> =
                contended.iter().map(|c| format!("{}:{}", c.id, c.relation_ids.join(","))).collect();
            let hash = combined_hash(keys.iter().map(String::as_str));
            let verdict_id = format!("arbitration-{short_run}-{}", &hash[..12]);
            let earlier = s.contains(&verdict_id);
            let context = neighbourhood(s, &participants, depth);
            let waiting: Vec<Arc<KnowledgeObject>> = scope
                .iter()
                .filter_map(|id| s.get(id))
                .filter(|o| o.structure.get("current_status").and_then(Value::as_str) == Some(WAITING))
                .cloned()
                .collect();
            (contended, relations, objects, verdict_id, earlier, context, waiting)
        })
        .await?;
    let (contended, relations, objects, verdict_id, earlier, context, waiting) = found;
    if contended.is_empty() || earlier {
        let (outputs, note) = if contended.is_empty() {
            (Vec::new(), "no contradiction touches the run's objects: nothing to arbitrate")
        } else {
            (vec![verdict_id.clone()], "these contradictions were arbitrated before")
        };
        // Nothing to ask, but the run still ends here: what waits for arbitration is resolved.
        let arbitrated: HashSet<&str> = objects.iter().map(|o| o.id()).collect();
        let operations = resolve_waiting(job, &waiting, &arbitrated, &verdict_id);
        let version_id = if operations.is_empty() { None } else { Some(job.commit(operations, None).await?) };
        let note = Some(note.to_owned());
        return job.done(Produced { outputs, note, version_id, ..Produced::default() }).await;
    }
    let shown_contradictions: Vec<Value> = contended
        .iter()
        .map(|c| json!({"contradiction_id": c.id, "rule": c.code, "relation_ids": c.relation_ids}))
        .collect();
    let prompt = format!(
        "The contradictions:\n{}\n\nTheir relations:\n{}\n\nWhat surrounds the related objects:\n{}\n\nAnswer with \
         the JSON array only.",
        pretty(&json!(shown_contradictions)),
        pretty(&json!(relations)),
        pretty(&json!(context))
    );
    let answer = job.ask(SYSTEM, prompt, job.config.arbiter_max_tokens).await?;
    let value = parse_json(&answer.text, true).map_err(|e| job.retry(format!("{}: {}", e.code, e.message)))?;
    let decisions = decisions(&value, &contended).map_err(|why| job.retry(why))?;

    let winners: HashSet<&str> = decisions.values().map(|(winner, _)| winner.as_str()).collect();
    let removed: BTreeSet<&String> =
        contended.iter().flat_map(|c| &c.relation_ids).filter(|id| !winners.contains(id.as_str())).collect();
    let mut operations: Vec<_> =
        removed.iter().map(|id| Operation::RemoveRelation { relation_id: (*id).clone() }).collect();
    let mut record = job.stamp("arbitration_verdict", Some(&answer));
    let decided: Vec<Value> = contended
        .iter()
        .map(|c| {
            let (winner, reason) = &decisions[c.id.as_str()];
            json!({"contradiction_id": c.id, "code": c.code, "winner_relation_id": winner, "reason": reason})
        })
        .collect();
    record.insert("decisions".into(), json!(decided));
    record.insert("removed_relation_ids".into(), json!(removed));
    operations.push(node(&verdict_id, "ReasoningNode", "Arbitration of contradictions", record));
    for object in &objects {
        operations.push(job.transition(object, "arbitrated", RESOLVED, Some(&verdict_id), &content_hash(object)));
    }
    let arbitrated: HashSet<&str> = objects.iter().map(|o| o.id()).collect();
    let uncontested: Vec<_> = waiting.into_iter().filter(|o| !arbitrated.contains(o.id())).collect();
    operations.extend(resolve_waiting(job, &uncontested, &arbitrated, &verdict_id));
    let version_id = job.commit(operations, Some(&answer)).await?;
    job.done(Produced::answered(vec![verdict_id], version_id, &answer)).await
}

/// The transitions to `resolved` of the run's objects that wait for arbitration: `arbitrated` (the
/// verdict named) for those in a contradiction `arbitrated` settles, `uncontested` for the others.
fn resolve_waiting(
    job: &Job<'_>,
    waiting: &[Arc<KnowledgeObject>],
    arbitrated: &HashSet<&str>,
    verdict_id: &str,
) -> Vec<Operation> {
    waiting
        .iter()
        .map(|object| {
            let hash = content_hash(object);
            if arbitrated.contains(object.id()) {
                job.transition(object, "arbitrated", RESOLVED, Some(verdict_id), &hash)
            } else {
                job.transition(object, "uncontested", RESOLVED, None, &hash)
            }
        })
        .collect()
}

/// The model's decision for each contradiction: the relation that stays, and why. Every
/// contradiction needs one, naming one of its own relations.
fn decisions<'a>(answer: &Value, contended: &'a [Contended]) -> Result<BTreeMap<&'a str, (String, Value)>, String> {
    let given: Vec<&Map<String, Value>> =
        answer.as_array().into_iter().flatten().filter_map(Value::as_object).collect();
    let mut decided = BTreeMap::new();
    for c in contended {
        let Some(decision) = given.iter().find(|d| d.get("contradiction_id").and_then(Value::as_str) == Some(&c.id))
        else {
            return Err(format!("the arbitration answer has no decision for contradiction '{}'", c.id));
        };
        let winner = decision.get("winner_relation_id").and_then(Value::as_str).unwrap_or_default();
        if !c.relation_ids.iter().any(|r| r == winner) {
            return Err(format!(
                "the arbitration answer keeps '{winner}' for contradiction '{}', which is not one of its relations ({})",
                c.id,
                c.relation_ids.join(", ")
            ));
        }
        let reason = decision.get("reason").cloned().unwrap_or(Value::Null);
        decided.insert(c.id.as_str(), (winner.to_owned(), reason));
    }
    Ok(decided)
}
