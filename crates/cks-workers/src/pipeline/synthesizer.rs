//! The Synthesizer: merges the run's approved findings into new objects in one LLM call (JSON),
//! committed with a `ReasoningNode` that records the synthesis and links to every source
//! (`synthesizes`), each new object linked to it (`part_of`), and the sources' transition to
//! `awaiting_arbitration`; then the run's arbitration is queued. With nothing approved it asks the
//! model nothing.

use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, HashSet};

use super::{Failure, Job, Produced, combined_hash, content_hash, link, neighbourhood, node, pretty, shown};
use cks_tools::services::parse_json;
use cks_tools::services::pipeline::{Payload, Step};

/// The most objects one synthesis adds.
const MAX_OBJECTS: usize = 50;

const SYSTEM: &str = "You are the synthesis step of a pipeline that improves a knowledge graph. You are shown \
objects of the graph, each with a reviewed and approved finding about it, and what surrounds them. Turn the \
findings into new objects for the graph: merge findings that say the same thing into one object, and when two \
findings disagree, keep both positions as separate objects of type Claim rather than choosing between them. \
Answer with one JSON object and nothing else: {\"objects\": [{\"id\": \"<short id>\", \"type\": \"<type>\", \
\"name\": \"<name>\", \"structure\": {<fields>}}]}";

pub(super) async fn synthesize(job: &Job<'_>) -> Result<(), Failure> {
    let work = job.run_work().await?;
    let findings: BTreeMap<String, String> = work
        .iter()
        .filter(|w| w.step == Step::Researcher.name())
        .filter_map(|w| Some((w.unit.clone(), w.outputs.first()?.clone())))
        .collect();
    let asked = job.payload.object_ids.clone();
    let depth = job.config.synthesizer_query_depth;
    let short_run = job.short_run().to_owned();
    let found = job
        .read(move |s| {
            let sources: Vec<(String, String, Value, Value)> = asked
                .iter()
                .filter_map(|id| {
                    let object = s.get(id)?;
                    let finding = findings
                        .get(id)
                        .and_then(|f| s.get(f))
                        .and_then(|f| f.structure.get("content").cloned())
                        .unwrap_or(Value::Null);
                    Some((id.clone(), content_hash(object), shown(object), finding))
                })
                .collect();
            let ids: Vec<String> = sources.iter().map(|(id, ..)| id.clone()).collect();
            let hash = combined_hash(sources.iter().map(|(_, hash, ..)| hash.as_str()));
            let synthesis_id = format!("synthesis-{short_run}-{}", &hash[..12]);
            let earlier = s.get(&synthesis_id).map(|n| n.structure.get("produced").cloned().unwrap_or(Value::Null));
            let objects: Vec<_> = ids.iter().filter_map(|id| s.get(id).cloned()).collect();
            let hashes: Vec<String> = sources.iter().map(|(_, hash, ..)| hash.clone()).collect();
            let context = neighbourhood(s, &ids, depth);
            (sources, synthesis_id, earlier, objects, hashes, context)
        })
        .await?;
    let (sources, synthesis_id, earlier, objects, hashes, context) = found;
    if sources.is_empty() {
        let note = Some("no finding was approved: nothing to synthesize".to_owned());
        job.done(Produced { note, ..Produced::default() }).await?;
        return queue_arbitration(job, &[]).await;
    }
    if let Some(produced) = earlier {
        let produced: Vec<String> =
            produced.as_array().into_iter().flatten().filter_map(Value::as_str).map(str::to_owned).collect();
        let mut outputs = vec![synthesis_id.clone()];
        outputs.extend(produced.iter().cloned());
        let note = Some("an earlier synthesis of the same findings was reused".to_owned());
        job.done(Produced { outputs, note, ..Produced::default() }).await?;
        return queue_arbitration(job, &produced).await;
    }
    let shown_sources: Vec<Value> =
        sources.iter().map(|(_, _, object, finding)| json!({"object": object, "approved_finding": finding})).collect();
    let prompt = format!(
        "The objects and their approved findings:\n{}\n\nWhat surrounds them in the graph:\n{}\n\nAnswer with the \
         JSON object only.",
        pretty(&json!(shown_sources)),
        pretty(&json!(context))
    );
    let answer = job.ask(SYSTEM, prompt, job.config.synthesizer_max_tokens).await?;
    let value = parse_json(&answer.text, false).map_err(|e| job.retry(format!("{}: {}", e.code, e.message)))?;
    let proposed = proposed_objects(&value).map_err(|why| job.retry(why))?;

    let source_ids: Vec<String> = sources.iter().map(|(id, ..)| id.clone()).collect();
    let mut operations = Vec::new();
    let mut produced = Vec::new();
    for Proposed { id, ty, name, mut structure } in proposed {
        let node_id = format!("{synthesis_id}-{id}");
        structure.extend(job.stamp("synthesized_fact", Some(&answer)));
        structure.insert("synthesis_id".into(), json!(synthesis_id));
        operations.push(node(&node_id, &ty, &name, structure));
        operations.push(link(&node_id, &synthesis_id, "part_of"));
        produced.push(node_id);
    }
    let mut record = job.stamp("synthesis", Some(&answer));
    record.insert("produced".into(), json!(produced));
    record.insert("source_object_ids".into(), json!(source_ids));
    operations.insert(0, node(&synthesis_id, "ReasoningNode", "Synthesis of reviewed findings", record));
    for id in &source_ids {
        operations.push(link(&synthesis_id, id, "synthesizes"));
    }
    for (object, hash) in objects.iter().zip(&hashes) {
        operations.push(job.transition(object, "synthesized", "awaiting_arbitration", Some(&synthesis_id), hash));
    }
    let version_id = job.commit(operations, Some(&answer)).await?;
    let mut outputs = vec![synthesis_id];
    outputs.extend(produced.iter().cloned());
    job.done(Produced::answered(outputs, version_id, &answer)).await?;
    queue_arbitration(job, &produced).await
}

/// An object a synthesis answer proposes.
#[derive(Debug, PartialEq)]
pub(super) struct Proposed {
    pub(super) id: String,
    pub(super) ty: String,
    pub(super) name: String,
    pub(super) structure: Map<String, Value>,
}

/// The objects a synthesis answer proposes, each id once, at most [`MAX_OBJECTS`]. Fields that
/// would make an object a relation, or that are the pipeline's own bookkeeping, are dropped.
pub(super) fn proposed_objects(answer: &Value) -> Result<Vec<Proposed>, String> {
    let Some(objects) = answer.get("objects").and_then(Value::as_array) else {
        return Err("the synthesis answer has no 'objects' list".into());
    };
    if objects.is_empty() {
        return Err("the synthesis answer's 'objects' list is empty".into());
    }
    let mut seen = HashSet::new();
    let mut proposed = Vec::new();
    for entry in objects.iter().take(MAX_OBJECTS) {
        let Some(id) = entry.get("id").and_then(Value::as_str).map(str::trim).filter(|id| !id.is_empty()) else {
            return Err(format!("a synthesized object has no 'id': {entry}"));
        };
        if !seen.insert(id.to_owned()) {
            continue;
        }
        let text = |key: &str| entry.get(key).and_then(Value::as_str).map(str::trim).filter(|t| !t.is_empty());
        let ty = text("type").unwrap_or("Claim").to_owned();
        let name = text("name").unwrap_or(id).to_owned();
        let mut structure = entry.get("structure").and_then(Value::as_object).cloned().unwrap_or_default();
        for field in ["participants", "relation_type", "current_status", "transition_log"] {
            structure.remove(field);
        }
        proposed.push(Proposed { id: id.to_owned(), ty, name, structure });
    }
    Ok(proposed)
}

/// Queues the run's arbitration, over the run's objects and what the synthesis added.
async fn queue_arbitration(job: &Job<'_>, produced: &[String]) -> Result<(), Failure> {
    let mut object_ids = job.run.object_ids.clone();
    object_ids.extend(produced.iter().cloned());
    job.next(Step::Arbiter, "", Payload { object_ids, ..Payload::default() }).await
}
