//! `resolve_duplicate`: settles a `duplicate_candidate` task (two objects the duplicates sweeper
//! found alike) on a person's decision, in one commit of the task's session:
//!
//! - `merge`: one object is merged into the other. Every relation naming the merged object is
//!   rewired to the kept one (removed and added again under its own id, the merged id replaced),
//!   except a relation that would name only the kept object (it related the two duplicates to each
//!   other) and one that would equal, structure and all, a relation the kept object already has:
//!   those are removed, as nothing is lost with them. Structure keys only the merged object has are
//!   carried over to the kept one; where both have a key, the kept object's value stands. The kept
//!   object keeps its identity (id, type, name); the merged object is removed. The version's
//!   metadata says `merged_ids` and `merged_into`; earlier versions still hold both objects.
//! - `distinct`: a `distinct_from` relation joins the two, so the sweeper never pairs them again.
//!
//! Either way the task is completed once the commit succeeds. Ids that other objects' structures
//! mention (an inference step's premises) are not rewritten: only relations are.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use cks_core::ops::{Operation, PatchMode};
use cks_core::{Identity, KnowledgeObject, KnowledgeStructure, Structure};
use cks_runtime::sweepers::{DISTINCT_FROM, DUPLICATE_CANDIDATE};

use super::{Resolution, complete, store_error, task_not_found};
use crate::ErrorCode;
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Named, SessionCheck, Tool, ToolMeta};
use crate::tools::knowledge::evolve_knowledge::{Change, commit_operations};

/// What to do with the pair: `merge` (one thing: merge one into the other) or `distinct` (two
/// things: never pair them again).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Decision {
    Merge,
    Distinct,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The session of the task.
    pub(crate) session_id: String,
    /// The duplicate_candidate task to settle.
    pub(crate) task_id: i64,
    /// 'merge' (one thing) or 'distinct' (two things).
    pub(crate) decision: Decision,
    /// With 'merge': the object to keep (default: the task's keep_id).
    pub(crate) keep_id: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    session_id: String,
    task_id: i64,
    decision: Decision,
    /// The two objects of the pair.
    object_ids: [String; 2],
    /// With 'merge': the object kept and the object merged into it (then removed).
    #[serde(skip_serializing_if = "Option::is_none")]
    kept_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    merged_id: Option<String>,
    /// Relations that named the merged object and now name the kept one.
    rewired_relation_ids: Vec<String>,
    /// Relations removed: they would have named only the kept object, or repeated one of its relations.
    removed_relation_ids: Vec<String>,
    /// Structure keys copied from the merged object (the kept object had none of them).
    carried_keys: Vec<String>,
    /// The operations committed.
    operations: Vec<Value>,
    #[serde(flatten)]
    resolution: Resolution,
}

pub(crate) struct ResolveDuplicate;

#[async_trait::async_trait]
impl Tool for ResolveDuplicate {
    type Input = Input;
    type Output = Output;
    const NAMED: &'static [(&'static str, Named)] = &[("task_id", Named::Task)];
    const TITLE: &'static str = "Resolve a duplicate";
    const META: ToolMeta = ToolMeta {
        name: "resolve_duplicate",
        description: "Settle a duplicate_candidate task (two alike objects of one type) in one commit. 'merge': \
            'keep_id' stays, relations naming the other are rewired to it (exact repeats removed), keys only the \
            other has are copied over, and the other is removed. 'distinct': a distinct_from relation joins them and \
            they are never paired again. Returns {decision, kept_id, merged_id, rewired_relation_ids, \
            removed_relation_ids, commit_result, task_completed}. Errors: task_not_found, tool_task_type_mismatch, \
            object_not_found (an object of the pair is gone).",
        mutates_graph: true,
        creates_session: false,
        destructive: true,
        idempotent: false,
        open_world: false,
        session_fields: &["session_id"],
        session_checks: &[SessionCheck::open("session_id")],
        llm_exposed: true,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        let task = ctx.runtime.tasks().get(input.task_id).await.map_err(store_error)?;
        let task = task.ok_or_else(|| task_not_found(input.task_id, ""))?;
        if task.task_type != DUPLICATE_CANDIDATE {
            return Err(ToolError::new(
                ErrorCode::ToolTaskTypeMismatch,
                format!(
                    "Task {} is a {} task; resolve_duplicate settles {DUPLICATE_CANDIDATE} tasks.",
                    task.task_id, task.task_type
                ),
            )
            .with("task_id", task.task_id));
        }
        if task.session_id != input.session_id {
            return Err(ToolError::new(
                ErrorCode::TaskSessionMismatch,
                format!(
                    "Task {} belongs to session '{}', not to '{}'.",
                    task.task_id, task.session_id, input.session_id
                ),
            )
            .with("task_id", task.task_id));
        }
        let payload: Value = serde_json::from_str(&task.payload).unwrap_or(Value::Null);
        let pair = payload_pair(&payload).ok_or_else(|| {
            ToolError::invalid_parameter(format!(
                "Task {}'s payload names no pair of objects ('object_ids').",
                task.task_id
            ))
            .with("parameter", "task_id")
        })?;
        let keep = match input.keep_id.as_deref().or_else(|| payload.get("keep_id").and_then(Value::as_str)) {
            Some(keep) if pair.contains(&keep.to_owned()) => keep.to_owned(),
            Some(keep) => {
                return Err(ToolError::invalid_parameter(format!(
                    "keep_id '{keep}' is not one of the pair ('{}', '{}').",
                    pair[0], pair[1]
                ))
                .with("parameter", "keep_id"));
            }
            None => pair[0].clone(),
        };
        let merge = if keep == pair[0] { pair[1].clone() } else { pair[0].clone() };
        let decision = input.decision;
        let plan = ctx
            .runtime
            .read(&input.session_id, |s, _| match decision {
                Decision::Merge => merge_plan(s, &keep, &merge),
                Decision::Distinct => distinct_plan(s, &pair),
            })
            .await??;
        let metadata: Vec<(&'static str, Value)> = match decision {
            Decision::Merge => vec![
                ("task_id", json!(task.task_id)),
                ("decision", json!("merge")),
                ("merged_ids", json!([merge])),
                ("merged_into", json!(keep)),
            ],
            Decision::Distinct => {
                vec![("task_id", json!(task.task_id)), ("decision", json!("distinct")), ("distinct_ids", json!(pair))]
            }
        };
        let operations: Vec<Value> = plan.operations.iter().map(Operation::to_value).collect();
        let change = Change { operations: plan.operations, extensions: Vec::new(), return_structure: Some(false) };
        let resolution = match commit_operations(ctx, input.session_id.clone(), change, Self::META.name, metadata).await
        {
            Ok(committed) => Resolution {
                commit_result: Some(serde_json::to_value(committed).expect("results encode")),
                task_completed: complete(ctx, Some(task.task_id)).await,
            },
            Err(e) => Resolution { commit_result: Some(e.to_value()), task_completed: Some(false) },
        };
        let merging = decision == Decision::Merge;
        Ok(Output {
            session_id: input.session_id,
            task_id: task.task_id,
            decision,
            object_ids: pair,
            kept_id: merging.then_some(keep),
            merged_id: merging.then_some(merge),
            rewired_relation_ids: plan.rewired,
            removed_relation_ids: plan.removed,
            carried_keys: plan.carried,
            operations,
            resolution,
        })
    }
}

/// The two object ids a task's payload names.
fn payload_pair(payload: &Value) -> Option<[String; 2]> {
    match payload.get("object_ids")?.as_array()?.as_slice() {
        [a, b] if a != b => Some([a.as_str()?.to_owned(), b.as_str()?.to_owned()]),
        _ => None,
    }
}

/// What a decision commits.
#[derive(Default)]
struct Plan {
    operations: Vec<Operation>,
    rewired: Vec<String>,
    removed: Vec<String>,
    carried: Vec<String>,
}

/// The object `id`, when it is still there and not a relation.
fn object<'s>(structure: &'s KnowledgeStructure, id: &str) -> Result<&'s KnowledgeObject, ToolError> {
    match structure.get(id) {
        Some(object) if !object.is_relation() => Ok(object),
        _ => Err(ToolError::new(
            ErrorCode::ObjectNotFound,
            format!("Object '{id}' of the pair is no longer in the session (merged or removed since it was queued)."),
        )
        .with("object_id", id)),
    }
}

fn merge_plan(structure: &KnowledgeStructure, keep: &str, merge: &str) -> Result<Plan, ToolError> {
    let kept = object(structure, keep)?;
    let merged = object(structure, merge)?;
    let mut plan = Plan::default();
    // The kept object's relations that stay as they are, then each rewired one: what a rewired
    // relation must not repeat.
    let mut standing: Vec<Structure> =
        structure.relations_of(keep).iter().filter(|r| !names(r, merge)).map(|r| r.structure.clone()).collect();
    let mut seen = std::collections::HashSet::new();
    for relation in structure.relations_of(merge) {
        if !seen.insert(relation.id().to_owned()) {
            continue;
        }
        let Some(view) = relation.relation() else { continue };
        let participants: Vec<String> =
            view.participants.iter().map(|p| if *p == merge { keep.to_owned() } else { (*p).to_owned() }).collect();
        let relation_type = view.relation_type.to_owned();
        let mut rewired = relation.structure.clone();
        rewired.insert(cks_core::object::PARTICIPANTS, json!(participants));
        let id = relation.id().to_owned();
        plan.operations.push(Operation::RemoveRelation { relation_id: id.clone() });
        if participants.iter().all(|p| p == keep) || standing.contains(&rewired) {
            plan.removed.push(id);
            continue;
        }
        standing.push(rewired.clone());
        plan.operations.push(Operation::AddRelation {
            identity: relation.identity.clone(),
            participants,
            relation_type,
            structure: rewired,
        });
        plan.rewired.push(id);
    }
    let mut carried = Structure::new();
    for (key, value) in &merged.structure {
        if !kept.structure.contains_key(key) && !value.is_null() {
            carried.insert(key, value.clone());
            plan.carried.push(key.to_owned());
        }
    }
    if !plan.carried.is_empty() {
        plan.operations.push(Operation::UpdateObject {
            object_id: keep.to_owned(),
            structure_patch: carried,
            mode: PatchMode::Merge,
        });
    }
    plan.operations.push(Operation::RemoveObject { object_id: merge.to_owned() });
    Ok(plan)
}

/// Whether `relation` names `id` as a participant.
fn names(relation: &KnowledgeObject, id: &str) -> bool {
    relation.relation().is_some_and(|r| r.participants.contains(&id))
}

fn distinct_plan(structure: &KnowledgeStructure, pair: &[String; 2]) -> Result<Plan, ToolError> {
    object(structure, &pair[0])?;
    object(structure, &pair[1])?;
    let identity = Identity::new(format!("rel-{}", uuid::Uuid::new_v4().simple()), "Relation", "distinct from");
    let relation = Operation::AddRelation {
        identity,
        participants: pair.to_vec(),
        relation_type: DISTINCT_FROM.to_owned(),
        structure: Structure::new(),
    };
    Ok(Plan { operations: vec![relation], ..Plan::default() })
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::testing::{call, context, obj, queue, rel, session, structure};

    fn pair_payload(a: &str, b: &str, keep: &str) -> Value {
        json!({"object_ids": [a, b], "keep_id": keep, "merge_id": if keep == a { b } else { a },
               "type": "Concept", "reasons": ["same_name"], "scores": {"name_similarity": 1.0}})
    }

    async fn ids(ctx: &crate::ToolContext, session_id: &str) -> Vec<String> {
        ctx.runtime.read(session_id, |s, _| s.ids().map(str::to_owned).collect()).await.unwrap()
    }

    #[tokio::test]
    async fn a_merge_rewires_relations_removes_the_other_and_completes_the_task() {
        let ctx = context();
        let id = session(
            &ctx,
            structure(vec![
                obj("kg", "Concept", "Knowledge graph", json!({"summary": "kept", "year": 2012})),
                obj("kg2", "Concept", "knowledge-graph", json!({"summary": "other", "source": "wiki"})),
                obj("db", "Concept", "Graph database", json!({})),
                obj("ai", "Field", "AI", json!({})),
                rel("r-db", &["kg", "db"], "related_to"),
                rel("r-db2", &["kg2", "db"], "related_to"),
                rel("r-ai", &["ai", "kg2"], "includes"),
                rel("r-self", &["kg", "kg2"], "same_as"),
            ]),
        )
        .await;
        let before = ctx.runtime.list_versions(&id).await.unwrap().last().unwrap().version_id.clone();
        let task = queue(&ctx, "duplicate_candidate", &id, pair_payload("kg", "kg2", "kg")).await;

        let merged =
            call(&ctx, "resolve_duplicate", json!({"session_id": id, "task_id": task, "decision": "merge"})).await;
        assert_eq!(merged["commit_result"]["evolved"], true, "{merged}");
        assert_eq!(merged["task_completed"], true);
        assert_eq!((merged["kept_id"].as_str(), merged["merged_id"].as_str()), (Some("kg"), Some("kg2")));
        assert_eq!(merged["rewired_relation_ids"], json!(["r-ai"]));
        let mut removed: Vec<String> = serde_json::from_value(merged["removed_relation_ids"].clone()).unwrap();
        removed.sort();
        assert_eq!(removed, ["r-db2", "r-self"], "a repeat of r-db, and a self-loop");
        assert_eq!(merged["carried_keys"], json!(["source"]));
        assert!(ctx.runtime.tasks().get(task).await.unwrap().is_none(), "completed");

        let mut now = ids(&ctx, &id).await;
        now.sort();
        assert_eq!(now, ["ai", "db", "kg", "r-ai", "r-db"]);
        let (kept, rewired) = ctx
            .runtime
            .read(&id, |s, _| (s.get("kg").unwrap().to_value(), s.get("r-ai").unwrap().to_value()))
            .await
            .unwrap();
        assert_eq!(kept["identity"], json!({"id": "kg", "type": "Concept", "name": "Knowledge graph"}));
        assert_eq!(kept["structure"], json!({"summary": "kept", "year": 2012, "source": "wiki"}));
        assert_eq!(rewired["structure"]["participants"], json!(["ai", "kg"]));
        assert_eq!(rewired["structure"]["relation_type"], "includes");

        let versions = ctx.runtime.list_versions(&id).await.unwrap();
        let metadata = &versions.last().unwrap().metadata;
        assert_eq!(metadata["tool"], "resolve_duplicate");
        assert_eq!((metadata["merged_ids"].clone(), metadata["merged_into"].clone()), (json!(["kg2"]), json!("kg")));
        assert_eq!(metadata["task_id"], task);
        assert_eq!(versions.len(), 2, "one commit");
        let old = ctx.runtime.read_at(&id, &before, |s| (s.contains("kg"), s.contains("kg2"), s.len())).await.unwrap();
        assert_eq!(old, (true, true, 8), "the version before still has both");
    }

    #[tokio::test]
    async fn distinct_records_the_decision_and_errors_are_data() {
        let ctx = context();
        let objects = vec![obj("a", "Concept", "Mercury", json!({})), obj("b", "Concept", "mercury", json!({}))];
        let id = session(&ctx, structure(objects)).await;
        let task = queue(&ctx, "duplicate_candidate", &id, pair_payload("a", "b", "a")).await;

        let wrong_keep = json!({"session_id": id, "task_id": task, "decision": "merge", "keep_id": "zz"});
        assert_eq!(call(&ctx, "resolve_duplicate", wrong_keep).await["error"], "invalid_parameter");
        let other = queue(&ctx, "contradiction_detected", &id, json!({"location": "c1"})).await;
        let mismatch = json!({"session_id": id, "task_id": other, "decision": "merge"});
        assert_eq!(call(&ctx, "resolve_duplicate", mismatch).await["error"], "tool_task_type_mismatch");
        let missing = json!({"session_id": id, "task_id": 9_999, "decision": "merge"});
        assert_eq!(call(&ctx, "resolve_duplicate", missing).await["error"], "task_not_found");
        let elsewhere = session(&ctx, structure(Vec::new())).await;
        let foreign = json!({"session_id": elsewhere, "task_id": task, "decision": "merge"});
        assert_eq!(call(&ctx, "resolve_duplicate", foreign).await["error"], "task_session_mismatch");

        let distinct =
            call(&ctx, "resolve_duplicate", json!({"session_id": id, "task_id": task, "decision": "distinct"})).await;
        assert_eq!(distinct["task_completed"], true, "{distinct}");
        assert!(distinct.get("kept_id").is_none());
        let relations = ctx
            .runtime
            .read(&id, |s, _| {
                s.relations_of_type("distinct_from")
                    .iter()
                    .map(|r| r.structure.get("participants").cloned())
                    .collect::<Vec<_>>()
            })
            .await
            .unwrap();
        assert_eq!(relations, [Some(json!(["a", "b"]))]);
        let metadata = ctx.runtime.list_versions(&id).await.unwrap().last().unwrap().metadata.clone();
        assert_eq!(
            (metadata["decision"].as_str(), metadata["distinct_ids"].clone()),
            (Some("distinct"), json!(["a", "b"]))
        );

        // An object gone since the task was queued.
        let stale = queue(&ctx, "duplicate_candidate", &id, pair_payload("a", "gone", "a")).await;
        let gone =
            call(&ctx, "resolve_duplicate", json!({"session_id": id, "task_id": stale, "decision": "merge"})).await;
        assert_eq!((gone["error"].as_str(), gone["object_id"].as_str()), (Some("object_not_found"), Some("gone")));
        assert!(ctx.runtime.tasks().get(stale).await.unwrap().is_some(), "left as it was");
    }

    #[tokio::test]
    async fn a_dead_lettered_duplicate_is_listed_reviewed_and_approved_as_a_merge() {
        let mut ctx = context();
        ctx.registry = Some(std::sync::Arc::new(crate::registry::Registry::standard()));
        let objects = vec![obj("a", "Concept", "Mercury", json!({})), obj("b", "Concept", "mercury", json!({}))];
        let id = session(&ctx, structure(objects)).await;
        let task = queue(&ctx, "duplicate_candidate", &id, pair_payload("a", "b", "b")).await;
        let dead = cks_runtime::store::TaskRef::any(task);
        assert!(ctx.runtime.tasks().dead_letter(dead, "unsure").await.unwrap());
        let listed = call(&ctx, "list_dead_lettered_conflicts", json!({"task_type": "duplicate_candidate"})).await;
        assert_eq!(listed["tasks"][0]["task_id"], task, "{listed}");
        let review = call(&ctx, "review_dead_letter", json!({"task_id": task})).await;
        let proposed = review["proposed_resolution"].clone();
        assert_eq!(
            proposed,
            json!({"tool": "resolve_duplicate",
                   "arguments": {"session_id": id, "task_id": task, "decision": "merge", "keep_id": "b"}})
        );
        let approved = call(&ctx, "approve_resolution", json!({"task_id": task, "resolution": proposed})).await;
        assert_eq!(approved["approved"], true, "{approved}");
        assert_eq!(ids(&ctx, &id).await, ["b"]);
        assert!(ctx.runtime.tasks().get(task).await.unwrap().is_none());
    }
}
