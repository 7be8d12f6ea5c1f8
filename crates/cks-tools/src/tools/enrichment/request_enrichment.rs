//! `request_enrichment`: queues an `enrichment_request` task asking the Enrichment process to
//! search external sources about one object and commit what it finds, linked to the object. It
//! only queues; the process (`CKS_EMBED_ENRICHMENT_AGENT`) of any server on the store does the
//! work.
//!
//! Unlike the reference, an object the session does not hold is refused here instead of being
//! queued to find nothing later, and asking again while the same request still waits queues
//! nothing twice.

use crate::ErrorCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use cks_runtime::RuntimeError;

use super::{Payload, TASK_TYPE};
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{SessionCheck, Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The session holding the object.
    pub(crate) session_id: String,
    /// The object to find more about.
    pub(crate) object_id: String,
    /// What to search for instead of the object's name.
    pub(crate) query: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    /// Whether this call queued a task (false: the same request is still waiting).
    enqueued: bool,
    /// Always true: every store of this server keeps the task queue.
    supported: bool,
    session_id: String,
    object_id: String,
    /// The queued task (absent when nothing was queued).
    #[serde(skip_serializing_if = "Option::is_none")]
    task_id: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

pub(crate) struct RequestEnrichment;

#[async_trait::async_trait]
impl Tool for RequestEnrichment {
    type Input = Input;
    type Output = Output;
    const TITLE: &'static str = "Request enrichment";
    const CHANGES_SERVER: bool = true;
    const META: ToolMeta = ToolMeta {
        name: "request_enrichment",
        description: "Queue a task asking the Enrichment process to search external sources (Wikipedia and arXiv by \
            default) for more about one object and commit what it finds: each page as a Document, a \
            VerificationRecord and an enriched_by relation. Answers at once; list_processes shows the process. \
            Returns {enqueued, task_id}; the same request still waiting queues nothing (enqueued: false); an unknown \
            object is object_not_found.",
        mutates_graph: false,
        creates_session: false,
        destructive: false,
        idempotent: false,
        open_world: false,
        session_fields: &["session_id"],
        session_checks: &[SessionCheck::open("session_id")],
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        if input.object_id.is_empty() {
            return Err(ToolError::missing_parameter("object_id"));
        }
        let held = ctx.runtime.read(&input.session_id, |s, _| s.get(&input.object_id).is_some()).await?;
        if !held {
            return Err(ToolError::new(
                ErrorCode::ObjectNotFound,
                format!("Object '{}' not found in session '{}'.", input.object_id, input.session_id),
            ));
        }
        let query = input.query.map(|q| q.trim().to_owned()).filter(|q| !q.is_empty());
        let payload = Payload { object_id: input.object_id.clone(), query: query.clone() };
        let payload = serde_json::to_value(&payload).map_err(|e| ToolError::internal(e.to_string()))?;
        let dedup = format!("enrich:{}:{}:{}", input.session_id, input.object_id, query.unwrap_or_default());
        let queue = ctx.runtime.tasks();
        let task_id =
            queue.enqueue(TASK_TYPE, &input.session_id, &payload, Some(dedup)).await.map_err(RuntimeError::from)?;
        Ok(Output {
            enqueued: task_id.is_some(),
            supported: true,
            message: task_id.is_none().then(|| "The same enrichment request is already waiting in the queue.".into()),
            session_id: input.session_id,
            object_id: input.object_id,
            task_id,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::testing::{call, context, obj, session, structure};

    #[tokio::test]
    async fn a_request_is_queued_once_for_an_object_the_session_holds() {
        let ctx = context();
        let id = session(&ctx, structure(vec![obj("drug", "Drug", "Drug X", json!({}))])).await;
        let queued = call(&ctx, "request_enrichment", json!({"session_id": id, "object_id": "drug"})).await;
        assert_eq!((queued["enqueued"].as_bool(), queued["supported"].as_bool()), (Some(true), Some(true)), "{queued}");
        let task = ctx.runtime.tasks().get(queued["task_id"].as_i64().unwrap()).await.unwrap().unwrap();
        assert_eq!((task.task_type.as_str(), task.session_id.as_str()), ("enrichment_request", id.as_str()));
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&task.payload).unwrap(),
            json!({"object_id": "drug", "query": null})
        );

        let again = call(&ctx, "request_enrichment", json!({"session_id": id, "object_id": "drug"})).await;
        assert_eq!(again["enqueued"], false, "{again}");
        assert!(again.get("task_id").is_none());
        let other_query = json!({"session_id": id, "object_id": "drug", "query": "drug X trials"});
        let asked = call(&ctx, "request_enrichment", other_query).await;
        assert_eq!(asked["enqueued"], true, "another question is another request");

        let unknown = call(&ctx, "request_enrichment", json!({"session_id": id, "object_id": "nope"})).await;
        assert_eq!(unknown["error"], "object_not_found");
        let no_session = call(&ctx, "request_enrichment", json!({"session_id": "missing", "object_id": "drug"})).await;
        assert_eq!(no_session["error"], "session_not_found");
        assert_eq!(call(&ctx, "request_enrichment", json!({"session_id": id})).await["error"], "missing_parameter");
    }
}
