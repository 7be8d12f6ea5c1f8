//! `close_session`: close a session. From then on every tool answers `session_not_found` for it
//! (its history stays in the store).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{SessionCheck, Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The session to close.
    pub(crate) session_id: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    session_id: String,
    /// Always true.
    closed: bool,
}

pub(crate) struct CloseSession;

#[async_trait::async_trait]
impl Tool for CloseSession {
    type Input = Input;
    type Output = Output;
    const TITLE: &'static str = "Close a session";
    const META: ToolMeta = ToolMeta {
        name: "close_session",
        description: "Close a session, typically a branch that has been merged or abandoned. A closed session \
            is gone: every tool, including close_session, then answers 'session_not_found' for it. Returns \
            {session_id, closed: true}.",
        mutates_graph: true,
        creates_session: false,
        destructive: true,
        idempotent: true,
        open_world: false,
        session_fields: &["session_id"],
        session_checks: &[SessionCheck::exists("session_id")],
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        ctx.runtime.close(&input.session_id).await?;
        Ok(Output { session_id: input.session_id, closed: true })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::tools::versions::testing::{call, context, node, session};

    #[tokio::test]
    async fn closes_and_the_session_is_gone() {
        let ctx = context();
        let (sid, _) = session(&ctx, json!([node("a", "Claim", "A", json!({}))])).await;
        let result = call(&ctx, "close_session", json!({"session_id": sid})).await;
        assert_eq!(result, json!({"session_id": sid, "closed": true}));
        assert!(ctx.runtime.info(&sid).await.unwrap().closed);

        let gone = json!({"error": "session_not_found", "message": format!("Session '{sid}' not found."),
                          "session_id": sid});
        assert_eq!(call(&ctx, "close_session", json!({"session_id": sid})).await, gone);
        assert_eq!(call(&ctx, "list_versions", json!({"session_id": sid})).await, gone);
        assert_eq!(call(&ctx, "query_subgraph", json!({"session_id": sid, "root_id": "a"})).await, gone);
        let write = call(
            &ctx,
            "evolve_knowledge",
            json!({"session_id": sid, "operations": [{"type": "remove_object", "object_id": "a"}]}),
        )
        .await;
        assert_eq!(write, gone);
    }

    #[tokio::test]
    async fn errors() {
        let ctx = context();
        assert_eq!(
            call(&ctx, "close_session", json!({})).await,
            json!({"error": "missing_parameter", "message": "Missing required parameter: 'session_id'."})
        );
        assert_eq!(call(&ctx, "close_session", json!({"session_id": "nope"})).await["error"], "session_not_found");
    }
}
