//! `serialize_knowledge`: the canonical CKS JSON document of a session's current structure, or of
//! a structure given as `json_data`.
//!
//! As in the reference, the `json_data` path returns the document itself (a bare string, so the
//! tool publishes no `outputSchema`). Unlike the reference, it stores nothing: the reference
//! creates a session and a version the caller never learns about (an orphan).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::context::ToolContext;
use crate::convert::{client_document, compact_client_document, parse_json_data};
use crate::error::ToolError;
use crate::tool::{SessionCheck, Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    #[serde(default)]
    #[schemars(schema_with = "crate::schema::json_data")]
    pub(crate) json_data: Option<Value>,
    /// The session to serialize (then `json_data` is ignored).
    pub(crate) session_id: Option<String>,
    /// No indentation: same content, about a third smaller (default false).
    #[serde(default)]
    pub(crate) compact: bool,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(untagged)]
pub(crate) enum Output {
    /// A session's current state.
    Session {
        session_id: String,
        /// The canonical CKS JSON document (with its `_cks_*` versioning keys).
        serialized: String,
    },
    /// The structure given as `json_data`: the canonical CKS JSON document itself.
    Document(String),
}

pub(crate) struct SerializeKnowledge;

#[async_trait::async_trait]
impl Tool for SerializeKnowledge {
    type Input = Input;
    type Output = Output;
    const TITLE: &'static str = "Serialize a knowledge structure";
    const META: ToolMeta = ToolMeta {
        name: "serialize_knowledge",
        description: "Return a knowledge structure as a canonical CKS JSON document: a session's current \
            state ('session_id'; returns {session_id, serialized}) or 'json_data' (returns the document text). \
            Stores nothing.",
        mutates_graph: false,
        creates_session: false,
        destructive: false,
        idempotent: true,
        open_world: false,
        session_fields: &["session_id"],
        session_checks: &[SessionCheck::exists("session_id").if_given()],
        // A chat reads the whole graph with query_subgraph (nodes and edges); a second way to read it
        // only costs a weak model its choice and every model prompt tokens.
        llm_exposed: true,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        let document = if input.compact { compact_client_document } else { client_document };
        if let Some(session_id) = input.session_id.filter(|s| !s.is_empty()) {
            let serialized = ctx.runtime.read(&session_id, |s, _| document(s)).await?;
            return Ok(Output::Session { session_id, serialized });
        }
        let json_data = input.json_data.ok_or_else(|| ToolError::missing_parameter("json_data"))?;
        let structure = parse_json_data(json_data)?;
        crate::provenance::require_verified(ctx, &structure, "serialize")?;
        Ok(Output::Document(document(&structure)))
    }

    /// The document is moved into the value, not copied: at a million objects it is 300 MB.
    fn into_value(output: Output) -> Result<Value, serde_json::Error> {
        Ok(match output {
            Output::Session { session_id, serialized } => {
                let mut map = serde_json::Map::new();
                map.insert("session_id".into(), Value::String(session_id));
                map.insert("serialized".into(), Value::String(serialized));
                Value::Object(map)
            }
            Output::Document(document) => Value::String(document),
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::testing::{call, context, obj, session, structure};

    /// The document without its time stamp, parsed.
    fn document(text: &Value) -> Value {
        let mut document: Value = serde_json::from_str(text.as_str().expect("a string")).unwrap();
        let stamp = document["_cks_metadata"].as_object_mut().unwrap().remove("serialized_at");
        assert!(stamp.unwrap().as_str().unwrap().ends_with("+00:00"));
        document
    }

    #[test]
    fn the_result_moves_the_document_into_the_same_value_serde_writes() {
        use super::{Output, SerializeKnowledge};
        use crate::tool::Tool;
        let outputs = || {
            [
                Output::Session { session_id: "s".into(), serialized: "{\n  \"objects\": []\n}".into() },
                Output::Document("{\"objects\":[]}".into()),
            ]
        };
        for (output, same) in outputs().into_iter().zip(outputs()) {
            assert_eq!(SerializeKnowledge::into_value(output).unwrap(), serde_json::to_value(same).unwrap());
        }
        let document = "{}".repeat(100);
        let address = document.as_ptr();
        let value = SerializeKnowledge::into_value(Output::Document(document)).unwrap();
        assert_eq!(value.as_str().map(str::as_ptr), Some(address), "the document was copied");
    }

    #[tokio::test]
    async fn serializes_a_session_or_json_data_without_storing_anything() {
        let ctx = context();
        let data = structure(vec![obj("b", "T", "B", json!({"k": 1})), obj("a", "T", "A", json!({}))]);
        let id = session(&ctx, data.clone()).await;
        let canonical: Value = cks_core::json::to_value(&cks_core::json::parse_value(data.clone()).unwrap());
        let mut expected = canonical.clone();
        expected["_cks_format_version"] = json!("1.0");
        expected["_cks_min_reader_version"] = json!("1.13.0");
        expected["_cks_metadata"] = json!({"cks_core_version": cks_core::json::READER_VERSION});

        let result = call(&ctx, "serialize_knowledge", json!({"session_id": id})).await;
        assert_eq!(result.as_object().unwrap().len(), 2);
        assert_eq!(result["session_id"], json!(id));
        assert_eq!(document(&result["serialized"]), expected);
        assert!(result["serialized"].as_str().unwrap().starts_with("{\n  \"_cks_format_version\": \"1.0\",\n"));
        let compact = call(&ctx, "serialize_knowledge", json!({"session_id": id, "compact": true})).await;
        assert!(compact["serialized"].as_str().unwrap().starts_with("{\"_cks_format_version\":\"1.0\","));
        assert_eq!(document(&compact["serialized"]), expected);

        let sessions_before = ctx.runtime.list_sessions().await.unwrap().len();
        let result = call(&ctx, "serialize_knowledge", json!({"json_data": data.to_string()})).await;
        assert!(result.is_string(), "the bare document, as the reference returns it");
        assert_eq!(document(&result), expected);
        assert_eq!(ctx.runtime.list_sessions().await.unwrap().len(), sessions_before, "no orphan session");
    }

    #[tokio::test]
    async fn errors() {
        let ctx = context();
        let missing = call(&ctx, "serialize_knowledge", json!({})).await;
        assert_eq!(missing["error"], "missing_parameter");
        assert_eq!(missing["message"], "Missing required parameter: 'json_data'.");
        assert_eq!(call(&ctx, "serialize_knowledge", json!({"json_data": "{not json"})).await["error"], "invalid_json");
        let too_new = json!({"objects": [], "_cks_min_reader_version": "99.0"}).to_string();
        let refused = call(&ctx, "serialize_knowledge", json!({"json_data": too_new})).await;
        assert_eq!(refused["error"], "invalid_json");
        assert!(refused["message"].as_str().unwrap().contains("requires a reader of cks-core >= 99.0"));
        let unknown = call(&ctx, "serialize_knowledge", json!({"session_id": "nope"})).await;
        assert_eq!(
            unknown,
            json!({"error": "session_not_found", "message": "Session 'nope' not found.", "session_id": "nope"})
        );
    }
}
