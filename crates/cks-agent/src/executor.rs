//! The tool executor of `ai_chat` over the one tool registry: which tools the LLM is offered, and
//! how its calls are pinned to the chat's session.
//!
//! Offered: tools declared `llm_exposed`, minus a fixed denylist of server-management tools (a
//! second guard in case a tool is ever mis-declared). Offered schemas omit the session-naming
//! arguments: the executor fills them in, so the model needs neither to know nor to send them.
//! Every call to anything else is refused with `unknown_or_disallowed_tool` and nothing runs.

use async_trait::async_trait;
use serde_json::{Map, Value, json};
use std::sync::Arc;

use cks_llm::ToolSpec;
use cks_tools::{Registry, ToolContext};

use crate::turn::{Execution, Origin, ToolExecutor};

/// Tools an LLM in a chat may never call, whatever their declaration says.
pub const DENIED_TOOLS: [&str; 9] = [
    "migrate_storage",
    "export_storage",
    "import_storage",
    "list_plugins",
    "register_graph",
    "start_agent",
    "stop_agent",
    "request_process_stop",
    "ai_chat",
];

/// Runs registry tools for one chat turn, pinned to one session.
pub struct RegistryExecutor {
    registry: Arc<Registry>,
    ctx: ToolContext,
    session_id: String,
}

impl std::fmt::Debug for RegistryExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryExecutor").field("session_id", &self.session_id).finish_non_exhaustive()
    }
}

impl RegistryExecutor {
    /// `ctx` is the context the tools run with (its audit metadata is extended per call).
    pub fn new(registry: Arc<Registry>, ctx: ToolContext, session_id: impl Into<String>) -> Self {
        RegistryExecutor { registry, ctx, session_id: session_id.into() }
    }

    fn offered(&self, name: &str) -> bool {
        !DENIED_TOOLS.contains(&name) && self.registry.get(name).is_some_and(|t| t.meta().llm_exposed)
    }
}

#[async_trait]
impl ToolExecutor for RegistryExecutor {
    fn specs(&self) -> Vec<ToolSpec> {
        self.registry
            .iter()
            .filter(|t| self.offered(t.meta().name))
            .map(|t| {
                let meta = t.meta();
                let mut schema = t.schema.clone();
                if let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) {
                    for field in meta.session_fields {
                        properties.remove(*field);
                    }
                }
                if let Some(required) = schema.get_mut("required").and_then(Value::as_array_mut) {
                    required.retain(|r| !r.as_str().is_some_and(|r| meta.session_fields.contains(&r)));
                    if required.is_empty() {
                        schema.as_object_mut().map(|o| o.remove("required"));
                    }
                }
                ToolSpec { name: meta.name.to_owned(), description: meta.description.to_owned(), input_schema: schema }
            })
            .collect()
    }

    async fn execute(&self, name: &str, arguments: &Value, origin: Origin<'_>) -> Execution {
        let mut args = match arguments {
            Value::Object(map) => map.clone(),
            _ => Map::new(),
        };
        let tool = match self.registry.get(name) {
            Some(tool) if self.offered(name) => tool,
            _ => {
                let result = json!({
                    "error": "unknown_or_disallowed_tool",
                    "message": format!("Tool '{name}' is not available in this chat. Use one of the tools offered."),
                });
                return Execution { arguments: Value::Object(args), result, is_error: true };
            }
        };
        // Pinning: whatever the model wrote, every session-naming argument is this chat's session.
        for field in tool.meta().session_fields {
            args.insert((*field).to_owned(), Value::String(self.session_id.clone()));
        }
        let mut ctx = self.ctx.clone();
        ctx.audit.insert("tool".into(), json!("ai_chat"));
        ctx.audit.insert("provider".into(), json!(origin.provider));
        ctx.audit.insert("model".into(), json!(origin.model));
        let arguments = Value::Object(args);
        let result = match self.registry.call(name, arguments.clone(), &ctx).await {
            Ok(result) => result,
            Err(unknown) => json!({"error": "unknown_or_disallowed_tool", "message": unknown.to_string()}),
        };
        let is_error = result.get("error").is_some();
        Execution { arguments, result, is_error }
    }
}
