//! `close_session`: mark a session closed. It stays readable (list, compare, query, branch from a
//! version); commits to it are refused with `session_closed`.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use cks_runtime::RuntimeError;

use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{SessionCheck, Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The session to close.
    pub(crate) session_id: String,
}

pub(crate) struct CloseSession;

#[async_trait::async_trait]
impl Tool for CloseSession {
    type Input = Input;
    type Output = Value;
    const META: ToolMeta = ToolMeta {
        name: "close_session",
        description: "Close a session, typically a branch that has been merged or abandoned. A closed session \
            refuses further changes ('session_closed') but, unlike in the reference server, stays readable: its \
            history can still be listed, compared and explained. Closing an already closed session succeeds \
            again ('already_closed': true). Returns {session_id, closed: true}.",
        mutates_graph: true,
        creates_session: false,
        destructive: true,
        idempotent: true,
        open_world: false,
        session_fields: &["session_id"],
        session_checks: &[SessionCheck::exists("session_id")],
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Value, ToolError> {
        match ctx.runtime.close(&input.session_id).await {
            Ok(_) => Ok(json!({"session_id": input.session_id, "closed": true})),
            Err(RuntimeError::SessionClosed(_)) => {
                Ok(json!({"session_id": input.session_id, "closed": true, "already_closed": true}))
            }
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::tools::versions::testing::{call, context, node, session};

    #[tokio::test]
    async fn closes_and_stays_readable() {
        let ctx = context();
        let (sid, version) = session(&ctx, json!([node("a", "Claim", "A", json!({}))])).await;
        let result = call(&ctx, "close_session", json!({"session_id": sid})).await;
        assert_eq!(result, json!({"session_id": sid, "closed": true}));
        assert!(ctx.runtime.info(&sid).await.unwrap().closed);

        let again = call(&ctx, "close_session", json!({"session_id": sid})).await;
        assert_eq!(again, json!({"session_id": sid, "closed": true, "already_closed": true}));

        let listed = call(&ctx, "list_versions", json!({"session_id": sid})).await;
        assert_eq!(listed["versions"][0]["version_id"], version);
        let write = call(
            &ctx,
            "evolve_knowledge",
            json!({"session_id": sid, "operations": [{"type": "remove_object", "object_id": "a"}]}),
        )
        .await;
        assert_eq!(write["error"], "session_closed");
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
