//! `list_inference_conflicts`: the inference conflicts the `inference_staleness` sweeper found
//! and nobody has listed yet (the reference's in-process inbox; the same findings are also queued
//! as `inference_conflict` tasks, which this tool does not touch).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// Only this session's findings (default: every session's).
    pub(crate) session_id: Option<String>,
    /// Return the findings without removing them (default false: each is returned once).
    #[serde(default)]
    pub(crate) peek: bool,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Conflict {
    record_id: String,
    /// Seconds since the Unix epoch.
    detected_at: f64,
    session_id: String,
    /// The session's head version when the sweep found it.
    version_id: Value,
    /// [{code, severity, message, location}], plus a confidence conflict's `conclusion_id` (its
    /// location is one of the disagreeing steps).
    diagnostics: Value,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    conflicts: Vec<Conflict>,
    count: usize,
}

pub(crate) struct ListInferenceConflicts;

#[async_trait::async_trait]
impl Tool for ListInferenceConflicts {
    type Input = Input;
    type Output = Output;
    const TITLE: &'static str = "List inference conflicts";
    const CHANGES_SERVER: bool = true;
    const META: ToolMeta = ToolMeta {
        name: "list_inference_conflicts",
        description: "Inference conflicts found in the background by the 'inference_staleness' sweeper (active \
            InferenceSteps reaching one conclusion with disagreeing confidence, or citing a step since superseded as a \
            premise) that have not been listed yet, oldest \
            first: {conflicts: [{record_id, detected_at (seconds since the epoch), session_id, version_id, \
            diagnostics: [{code, severity, message, location, conclusion_id (confidence conflicts)}]}], count}. Each finding is returned once unless \
            'peek' is true; 'session_id' keeps one session's. Kept in memory (lost on restart); the same findings \
            are also queued as inference_conflict tasks (claim_conflict_task), which listing leaves alone.",
        mutates_graph: false,
        creates_session: false,
        destructive: false,
        idempotent: false,
        open_world: false,
        session_fields: &["session_id"],
        session_checks: &[],
        llm_exposed: true,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        let session_id = input.session_id.filter(|s| !s.is_empty());
        let Some(sweepers) = ctx.sweepers.as_ref() else { return Ok(Output { count: 0, conflicts: Vec::new() }) };
        let records = if session_id.is_none() && ctx.restricted() {
            // Only the records of sessions the caller reaches are shown, and only those consumed.
            let records = ctx.reachable(sweepers.inbox(None, false), |record| &record.session_id).await?;
            if !input.peek {
                let mut sessions: Vec<&str> = records.iter().map(|record| record.session_id.as_str()).collect();
                sessions.sort_unstable();
                sessions.dedup();
                for session in sessions {
                    sweepers.inbox(Some(session), true);
                }
            }
            records
        } else {
            sweepers.inbox(session_id.as_deref(), !input.peek)
        };
        let conflicts: Vec<Conflict> = records
            .into_iter()
            .map(|record| Conflict {
                record_id: record.record_id,
                detected_at: record.detected_at,
                session_id: record.session_id,
                version_id: record.payload.get("version_id").cloned().unwrap_or(Value::Null),
                diagnostics: record.payload.get("diagnostics").cloned().unwrap_or(Value::Null),
            })
            .collect();
        Ok(Output { count: conflicts.len(), conflicts })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::testing::{call, obj, session, structure};
    use crate::tools::agents::testing::context;

    #[tokio::test]
    async fn lists_what_the_sweeper_found_once_unless_peeking() {
        let ctx = context().await;
        let step = |id: &str, confidence: f64| {
            obj(id, "InferenceStep", id, json!({"premises": ["p"], "conclusion": "c", "confidence": confidence}))
        };
        let id = session(
            &ctx,
            structure(vec![
                obj("p", "E", "p", json!({})),
                obj("c", "C", "c", json!({})),
                step("s1", 0.9),
                step("s2", 0.2),
            ]),
        )
        .await;
        ctx.sweepers.as_ref().unwrap().run_once("inference_staleness").await.unwrap().unwrap();
        let peeked = call(&ctx, "list_inference_conflicts", json!({"peek": true})).await;
        assert_eq!(peeked["count"], 1);
        let conflict = &peeked["conflicts"][0];
        assert_eq!(conflict["session_id"], id.as_str());
        assert!(conflict["version_id"].is_string() && conflict["detected_at"].as_f64().unwrap() > 1.7e9);
        assert_eq!(conflict["diagnostics"][0]["code"], "CKS-EXT-INFERENCE-CONFIDENCE-CONFLICT");
        assert_eq!(call(&ctx, "list_inference_conflicts", json!({"session_id": "other"})).await["count"], 0);
        assert_eq!(call(&ctx, "list_inference_conflicts", json!({})).await["count"], 1);
        assert_eq!(call(&ctx, "list_inference_conflicts", json!({})).await["count"], 0, "drained");
        let queued = ctx.runtime.tasks().list(&Default::default()).await.unwrap();
        assert_eq!(queued.len(), 1, "the task stays queued");
    }
}
