//! `serialize_knowledge`: the canonical CKS JSON of a session's current structure, or of a
//! structure given as `json_data`.
//!
//! Unlike the reference, the `json_data` path stores nothing: the reference creates a session
//! and a version the caller never learns about (an orphan) and returns a bare string; here it
//! returns `{serialized}` and leaves the store untouched.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use cks_core::json::to_canonical_string;

use crate::context::ToolContext;
use crate::convert::parse_json_data;
use crate::error::ToolError;
use crate::tool::{SessionCheck, Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    #[serde(default)]
    #[schemars(schema_with = "crate::schema::json_data")]
    pub(crate) json_data: Option<Value>,
    /// Serialize this session's current structure (then `json_data` is ignored).
    pub(crate) session_id: Option<String>,
}

pub(crate) struct SerializeKnowledge;

#[async_trait::async_trait]
impl Tool for SerializeKnowledge {
    type Input = Input;
    type Output = Value;
    const META: ToolMeta = ToolMeta {
        name: "serialize_knowledge",
        description: "Return a knowledge structure in canonical CKS JSON (sorted keys, two-space indent): a \
            session's current state with 'session_id' ({session_id, serialized}), or the structure given as \
            'json_data' ({serialized}). Read-only: unlike the reference server, the json_data path stores no \
            session and returns an object rather than a bare string.",
        mutates_graph: false,
        creates_session: false,
        destructive: false,
        idempotent: true,
        open_world: false,
        session_fields: &["session_id"],
        session_checks: &[SessionCheck::exists("session_id").if_given()],
        llm_exposed: true,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Value, ToolError> {
        if let Some(session_id) = input.session_id.filter(|s| !s.is_empty()) {
            let serialized = ctx.runtime.read(&session_id, |s, _| to_canonical_string(s)).await?;
            return Ok(json!({"session_id": session_id, "serialized": serialized}));
        }
        let json_data = input.json_data.ok_or_else(|| ToolError::missing_parameter("json_data"))?;
        let structure = parse_json_data(&json_data)?;
        crate::provenance::require_verified(ctx, &structure, "serialize")?;
        Ok(json!({"serialized": to_canonical_string(&structure)}))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::tools::test_support::{call, context, obj, session, structure};

    #[tokio::test]
    async fn serializes_a_session_or_json_data_without_storing_anything() {
        let ctx = context();
        let data = structure(vec![obj("b", "T", "B", json!({"k": 1})), obj("a", "T", "A", json!({}))]);
        let id = session(&ctx, data.clone()).await;
        let expected = cks_core::json::to_canonical_string(&cks_core::json::parse_value(data.clone()).unwrap());

        let result = call(&ctx, "serialize_knowledge", json!({"session_id": id})).await;
        assert_eq!(result, json!({"session_id": id, "serialized": expected}));

        let sessions_before = ctx.runtime.list_sessions().await.unwrap().len();
        let result = call(&ctx, "serialize_knowledge", json!({"json_data": data.to_string()})).await;
        assert_eq!(result, json!({"serialized": expected}));
        assert_eq!(ctx.runtime.list_sessions().await.unwrap().len(), sessions_before, "no orphan session");
        assert!(expected.starts_with("{\n  \"objects\": [\n"));
    }

    #[tokio::test]
    async fn errors() {
        let ctx = context();
        let missing = call(&ctx, "serialize_knowledge", json!({})).await;
        assert_eq!(missing["error"], "missing_parameter");
        assert_eq!(missing["message"], "Missing required parameter: 'json_data'.");
        assert_eq!(call(&ctx, "serialize_knowledge", json!({"json_data": "{not json"})).await["error"], "invalid_json");
        let unknown = call(&ctx, "serialize_knowledge", json!({"session_id": "nope"})).await;
        assert_eq!(
            unknown,
            json!({"error": "session_not_found", "message": "Session 'nope' not found.", "session_id": "nope"})
        );
    }
}
