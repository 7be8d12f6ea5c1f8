//! `resolve_contradiction`: lists a session's contradictions (relations a `MutualExclusionRule`
//! or `FunctionalRelationRule` forbids together) or resolves the named ones by removing one
//! relation of each, committed when asked.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeSet;

use cks_core::ops::Operation;
use cks_core::validate::{Contradiction, contradictions};

use super::{Resolution, resolution_task};
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Named, SessionCheck, Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    pub(crate) session_id: String,
    /// The contradictions to resolve (ids from the listing, or a contradiction_detected task's
    /// payload.location).
    pub(crate) contradiction_ids: Option<Vec<String>>,
    /// Commit the removals (default false: only propose them).
    #[serde(default)]
    pub(crate) commit: bool,
    /// The conflict task this resolves (completed once committed).
    pub(crate) task_id: Option<i64>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Listed {
    id: String,
    code: String,
    severity: String,
    message: String,
    relation_ids: Vec<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(untagged)]
pub(crate) enum Output {
    Listing {
        session_id: String,
        contradiction_count: usize,
        contradictions: Vec<Listed>,
    },
    Resolving {
        session_id: String,
        /// Per id: {contradiction_id, code, removed_relation_id}, or {contradiction_id, error, message}.
        results: Vec<Value>,
        /// The remove_relation operations (committed with 'commit').
        operations: Vec<Value>,
        #[serde(flatten)]
        resolution: Resolution,
    },
}

pub(crate) struct ResolveContradiction;

#[async_trait::async_trait]
impl Tool for ResolveContradiction {
    type Input = Input;
    type Output = Output;
    const NAMED: &'static [(&'static str, Named)] = &[("task_id", Named::Task)];
    const TITLE: &'static str = "Resolve a contradiction";
    const META: ToolMeta = ToolMeta {
        name: "resolve_contradiction",
        description: "A session's contradictions: relations a MutualExclusionRule or FunctionalRelationRule forbids. \
            Without 'contradiction_ids': lists them, {contradiction_count, contradictions: [{id, code, message, \
            relation_ids}]}. With them: removes the alphabetically first relation of each, answering {results, \
            operations} (an unknown id is contradiction_not_found in 'results'); 'commit' commits the removals \
            ('commit_result').",
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
        let found = ctx.runtime.read(&input.session_id, |s, _| contradictions(s)).await?;
        let Some(ids) = input.contradiction_ids.filter(|ids| !ids.is_empty()) else {
            return Ok(Output::Listing {
                session_id: input.session_id,
                contradiction_count: found.len(),
                contradictions: found.into_iter().map(listed).collect(),
            });
        };
        let task = resolution_task(ctx, input.task_id, &input.session_id).await?;
        let mut results = Vec::new();
        let mut removed = BTreeSet::new();
        let mut operations = Vec::new();
        for id in ids {
            // Ids can repeat across the two checks; the later contradiction answers, as in the reference.
            match found.iter().rev().find(|c| c.location == id) {
                None => results.push(json!({"contradiction_id": id, "error": "contradiction_not_found",
                    "message": format!("No live contradiction '{id}' in session '{}'.", input.session_id)})),
                Some(c) => {
                    let relation = c.relation_ids[0].clone();
                    results.push(json!({"contradiction_id": id, "code": c.code, "removed_relation_id": relation}));
                    if removed.insert(relation.clone()) {
                        operations.push(Operation::RemoveRelation { relation_id: relation });
                    }
                }
            }
        }
        let wire = operations.iter().map(Operation::to_value).collect();
        let extensions = ["mutual_exclusion", "functional_relation"];
        let resolution =
            Resolution::commit_if(ctx, input.commit, &input.session_id, operations, &extensions, Self::META.name, task)
                .await;
        Ok(Output::Resolving { session_id: input.session_id, results, operations: wire, resolution })
    }
}

fn listed(c: Contradiction) -> Listed {
    Listed {
        id: c.location,
        code: c.code.into(),
        severity: "error".into(),
        message: c.message,
        relation_ids: c.relation_ids,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::testing::{call, context};
    use crate::testing::{contradicted_session, queue};

    #[tokio::test]
    async fn lists_then_resolves_by_removing_a_relation_and_completes_the_task() {
        let ctx = context();
        let id = contradicted_session(&ctx, Vec::new()).await;
        let listing = call(&ctx, "resolve_contradiction", json!({"session_id": id})).await;
        assert_eq!(listing["contradiction_count"], 1);
        let found = &listing["contradictions"][0];
        assert_eq!((found["id"].as_str(), &found["relation_ids"]), (Some("c1"), &json!(["c1", "s1"])));

        let task = queue(&ctx, "contradiction_detected", &id, json!({"location": "c1"})).await;
        let proposal =
            call(&ctx, "resolve_contradiction", json!({"session_id": id, "contradiction_ids": ["c1", "zz"]})).await;
        assert_eq!(
            proposal["results"][0],
            json!({"contradiction_id": "c1", "code": "CKS-EXT-MUTUAL-EXCLUSION", "removed_relation_id": "c1"})
        );
        assert_eq!(proposal["results"][1]["error"], "contradiction_not_found");
        assert_eq!(proposal["operations"], json!([{"type": "remove_relation", "relation_id": "c1"}]));
        assert!(proposal.get("commit_result").is_none());

        let resolved = call(
            &ctx,
            "resolve_contradiction",
            json!({"session_id": id, "contradiction_ids": ["c1"], "commit": true, "task_id": task}),
        )
        .await;
        assert_eq!(resolved["commit_result"]["evolved"], true, "{resolved}");
        assert_eq!(resolved["task_completed"], true);
        assert!(ctx.runtime.tasks().get(task).await.unwrap().is_none());
        let versions = ctx.runtime.list_versions(&id).await.unwrap();
        let metadata = &versions.last().unwrap().metadata;
        assert_eq!(
            (metadata["tool"].as_str(), metadata["task_id"].as_i64()),
            (Some("resolve_contradiction"), Some(task))
        );
        let after = call(&ctx, "resolve_contradiction", json!({"session_id": id})).await;
        assert_eq!(after["contradiction_count"], 0);

        let other = call(
            &ctx,
            "resolve_contradiction",
            json!({"session_id": id, "contradiction_ids": ["c1"], "task_id": 12345}),
        )
        .await;
        assert_eq!(other["error"], "task_not_found");
    }
}
