//! The duplicates sweeper: pairs of objects that are likely the same thing, queued as
//! `duplicate_candidate` for a person to settle with `resolve_duplicate` (merge the two, or
//! record that they are distinct). It only queues: nothing is merged without that call.
//!
//! Which pairs, and what is decided about each, is the matcher's (`cks_core::matching`, shared
//! with `find_duplicates` and `remember`): every pair it judges `same` or `review` is queued once
//! (its key names both ids), with both objects, the reasons and their scores, the decision, and
//! which object a merge would keep: the one with more relations, the older (earlier in the
//! structure's order) when they have as many. A pair joined by a `distinct_from` relation — what
//! `resolve_duplicate` commits for a `distinct` decision — is never queued again; a merged pair is
//! gone with the merged object.
//!
//! Cost, per session looked at (only sessions that changed, as for every sweeper): the matcher's
//! pass over the session, at most `MAX_PAIRS` pairs, the oldest objects first; once those are
//! settled the next sweep reports the next ones.

use serde_json::{Value, json};
use time::OffsetDateTime;

use cks_core::KnowledgeStructure;
use cks_core::matching::{self, Decision, Pair, Profile};

use super::{Check, Finding, Sweep};
use crate::session::SessionInfo;
use crate::{Runtime, RuntimeError};

/// The type of the tasks this sweeper queues.
pub const DUPLICATE_CANDIDATE: &str = "duplicate_candidate";

/// The relation type that records two objects as distinct things: a pair it joins is never a
/// duplicate candidate again.
pub const DISTINCT_FROM: &str = matching::DISTINCT_FROM;

/// When a session whose vectors are still being made is looked at again.
const PENDING_RECHECK: time::Duration = time::Duration::seconds(60);

pub(crate) struct Duplicates;

impl Sweep for Duplicates {
    fn agent_id(&self) -> &'static str {
        "duplicates"
    }

    fn task_type(&self) -> &'static str {
        DUPLICATE_CANDIDATE
    }

    fn reads_vectors(&self) -> bool {
        true
    }

    fn check(&self, structure: &KnowledgeStructure, _info: &SessionInfo, now: OffsetDateTime) -> Check {
        let (pairs, vectors_pending) = matching::pairs(structure);
        let findings = pairs
            .iter()
            .map(|pair| Finding { key: pair_key(&pair.ids[0], &pair.ids[1]), payload: payload(structure, pair) })
            .collect();
        // Vectors still being made: look again soon, when they may be known.
        Check { findings, recheck_at: vectors_pending.then(|| now + PENDING_RECHECK) }
    }
}

/// Queues pairs of objects of `session_id` (ids, in any order) as `duplicate_candidate` tasks,
/// judged on the session as it is now and keyed as this sweeper keys them, so a pair is queued
/// once whoever finds it first. For callers that find pairs themselves (`remember`, which leaves
/// an entity it cannot tell apart from an object to a person). Returns the tasks queued anew.
pub async fn queue_pairs(
    runtime: &Runtime,
    session_id: &str,
    pairs: &[(String, String)],
) -> Result<Vec<i64>, RuntimeError> {
    let findings: Vec<Finding> = runtime
        .read(session_id, |structure, _| {
            pairs
                .iter()
                .filter_map(|(a, b)| {
                    let (a, b) = if a <= b { (a, b) } else { (b, a) };
                    let (x, y) = (structure.get(a)?, structure.get(b)?);
                    let evidence = matching::compare(&Profile::of(x), &Profile::of(y), None);
                    let pair = Pair {
                        ids: [a.clone(), b.clone()],
                        positions: [structure.index_of(a)?, structure.index_of(b)?],
                        decision: Decision::Review,
                        score: evidence.score(),
                        evidence,
                    };
                    Some(Finding { key: pair_key(a, b), payload: payload(structure, &pair) })
                })
                .collect()
        })
        .await?;
    let mut queued = Vec::new();
    for finding in findings {
        let key = format!("{}:{session_id}:{}", Duplicates.agent_id(), finding.key);
        if let Some(task) =
            runtime.tasks().enqueue(DUPLICATE_CANDIDATE, session_id, &finding.payload, Some(key)).await?
        {
            queued.push(task);
        }
    }
    Ok(queued)
}

/// A pair's key within its session: both ids, in order, the first's length first so no two pairs
/// share one.
fn pair_key(a: &str, b: &str) -> String {
    format!("{}:{a}|{b}", a.len())
}

/// The payload of a pair: both objects, why they pair, the decision, and which a merge would keep.
pub(crate) fn payload(structure: &KnowledgeStructure, pair: &Pair) -> Value {
    let relations = |id: &str| structure.relations_of(id).len();
    let [a, b] = &pair.ids;
    // More relations wins; then the older.
    let a_first =
        (relations(a), std::cmp::Reverse(pair.positions[0])) >= (relations(b), std::cmp::Reverse(pair.positions[1]));
    let (keep, merge) = if a_first { (a, b) } else { (b, a) };
    let evidence = &pair.evidence;
    let object = |id: &str| {
        let o = structure.get(id).expect("a pair names objects of the structure");
        json!({"id": id, "name": o.identity.name.as_str(), "type": o.identity.r#type.as_str(), "relation_count": relations(id)})
    };
    let ty = structure.get(a).map(|o| o.identity.r#type.to_string()).unwrap_or_default();
    json!({
        "object_ids": [a, b],
        "objects": [object(a), object(b)],
        "type": ty,
        "reasons": evidence.reasons(),
        "scores": evidence.scores(),
        "score": matching::round(pair.score),
        "decision": pair.decision.as_str(),
        "keep_id": keep,
        "merge_id": merge,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use cks_core::json::parse_value;

    #[test]
    fn the_payload_names_both_objects_the_reasons_and_which_a_merge_keeps() {
        let g: KnowledgeStructure = parse_value(json!({"objects": [
            {"identity": {"id": "a", "type": "Concept", "name": "Knowledge Graph"}, "structure": {}},
            {"identity": {"id": "b", "type": "Concept", "name": "knowledge-graph"}, "structure": {}},
            {"identity": {"id": "c", "type": "Concept", "name": "Other"}, "structure": {}},
            {"identity": {"id": "r", "type": "Relation", "name": "r"},
             "structure": {"participants": ["b", "c"], "relation_type": "about"}},
        ]}))
        .unwrap();
        let (pairs, _) = matching::pairs(&g);
        assert_eq!(pairs.len(), 1);
        let payload = payload(&g, &pairs[0]);
        assert_eq!(payload["reasons"], json!(["same_name"]));
        assert_eq!(payload["scores"], json!({"name_similarity": 1.0}));
        assert_eq!((payload["decision"].as_str(), payload["score"].as_f64()), (Some("same"), Some(1.0)));
        assert_eq!(
            (payload["keep_id"].as_str(), payload["merge_id"].as_str()),
            (Some("b"), Some("a")),
            "b has a relation"
        );
        assert_eq!(
            payload["objects"][1],
            json!({"id": "b", "name": "knowledge-graph", "type": "Concept", "relation_count": 1})
        );
        assert_eq!(pair_key("a", "b"), "1:a|b");
    }
}
