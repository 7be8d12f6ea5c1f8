//! The tool executor of `ai_chat` over the one tool registry: which tools the LLM is offered, and
//! how its calls are pinned to the chat's session.
//!
//! Offered: the tools of the chat offer ([`crate::offer`]) that are declared `llm_exposed`, not on
//! a fixed denylist of server-management tools (a second guard in case a tool is ever
//! mis-declared), and pinnable: a tool that creates sessions is offered only when it names a
//! session the executor can pin. Offered schemas hold only the offered arguments: the session
//! arguments are filled in by the executor, so the model needs neither to know nor to send them.
//!
//! Every call to anything else is refused with `unknown_or_disallowed_tool` and nothing runs; a
//! call using an argument the chat is not offered (such as `json_data`, which would make a new
//! session) is refused with `invalid_parameter`. A call runs in its own task, bounded by the time
//! the turn has left: when that runs out the turn stops waiting, and the call, which may be
//! half-way through a commit, finishes on its own rather than being dropped mid-write.

use async_trait::async_trait;
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::time::Duration;

use cks_llm::ToolSpec;
use cks_tools::{ErrorCode, RegisteredTool, Registry, ToolContext, ToolError};

use crate::offer::{ChatTool, chat_tool};
use crate::turn::{Execution, Origin, ToolExecutor};

/// Tools an LLM in a chat may never call, whatever their declaration says: server management,
/// everything that starts or stops background work, and the stored chats (a model could otherwise
/// read or delete other conversations).
pub const DENIED_TOOLS: [&str; 14] = [
    "migrate_storage",
    "export_storage",
    "import_storage",
    "list_plugins",
    "register_graph",
    "start_agent",
    "stop_agent",
    "request_process_stop",
    "start_pipeline",
    "request_enrichment",
    "ai_chat",
    "list_chats",
    "get_chat",
    "delete_chat",
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

/// Why a call was refused before anything ran.
fn refusal(code: ErrorCode, message: String) -> Value {
    ToolError::new(code, message).to_value()
}

impl RegistryExecutor {
    /// `ctx` is the context the tools run with (its audit metadata is extended per call).
    pub fn new(registry: Arc<Registry>, ctx: ToolContext, session_id: impl Into<String>) -> Self {
        RegistryExecutor { registry, ctx, session_id: session_id.into() }
    }

    /// The registry entry and offer of `name`, when a chat may call it.
    fn offered(&self, name: &str) -> Option<(&RegisteredTool, &'static ChatTool)> {
        if DENIED_TOOLS.contains(&name) {
            return None;
        }
        let tool = self.registry.get(name).filter(|t| t.meta().llm_exposed)?;
        let meta = tool.meta();
        // A tool that creates sessions must have a session argument to pin, or a call could make
        // a session the chat does not own.
        if meta.creates_session && meta.session_fields.is_empty() {
            return None;
        }
        Some((tool, chat_tool(name)?))
    }

    /// The arguments as they will run: a copy with every session argument pinned (so a tool that
    /// creates sessions, which [`Self::offered`] admits only with a session argument, always
    /// works on this chat's session), or the reason the call is refused.
    fn prepare(&self, name: &str, arguments: &Value) -> Result<(&RegisteredTool, Value), (Value, Value)> {
        let mut args = match arguments {
            Value::Object(map) => map.clone(),
            _ => Map::new(),
        };
        let Some((tool, offer)) = self.offered(name) else {
            let message = format!("Tool '{name}' is not available in this chat. Use one of the tools offered.");
            return Err((Value::Object(args), refusal(ErrorCode::UnknownOrDisallowedTool, message)));
        };
        let meta = tool.meta();
        // Pinning: whatever the model wrote, every session-naming argument is this chat's session.
        for field in meta.session_fields {
            args.insert((*field).to_owned(), Value::String(self.session_id.clone()));
        }
        let declared = tool.schema().get("properties").and_then(Value::as_object);
        let withheld: Vec<&str> = args
            .keys()
            .map(String::as_str)
            .filter(|k| {
                declared.is_some_and(|d| d.contains_key(*k))
                    && !offer.arguments.contains(k)
                    && !meta.session_fields.contains(k)
            })
            .collect();
        if !withheld.is_empty() {
            let message = format!(
                "Argument(s) {} of '{name}' are not available in this chat; it works on this chat's own graph. \
                 Arguments offered: {}.",
                withheld.iter().map(|k| format!("'{k}'")).collect::<Vec<_>>().join(", "),
                if offer.arguments.is_empty() { "none".to_owned() } else { offer.arguments.join(", ") }
            );
            let result = refusal(ErrorCode::InvalidParameter, message);
            return Err((Value::Object(args), result));
        }
        for flag in offer.switched_on {
            args.insert((*flag).to_owned(), Value::Bool(true));
        }
        Ok((tool, Value::Object(args)))
    }
}

/// The registry schema restricted to the offered arguments.
fn offered_schema(schema: &Map<String, Value>, offer: &ChatTool) -> Value {
    let mut schema = Value::Object(schema.clone());
    if let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        properties.retain(|k, _| offer.arguments.contains(&k.as_str()));
    }
    if let Some(required) = schema.get_mut("required").and_then(Value::as_array_mut) {
        required.retain(|r| r.as_str().is_some_and(|r| offer.arguments.contains(&r)));
        if required.is_empty() {
            schema.as_object_mut().map(|o| o.remove("required"));
        }
    }
    schema
}

#[async_trait]
impl ToolExecutor for RegistryExecutor {
    fn specs(&self) -> Vec<ToolSpec> {
        crate::offer::CHAT_TOOLS
            .iter()
            .filter_map(|offer| {
                let (tool, offer) = self.offered(offer.name)?;
                Some(ToolSpec {
                    name: offer.name.to_owned(),
                    description: offer.description.to_owned(),
                    input_schema: offered_schema(tool.schema(), offer),
                })
            })
            .collect()
    }

    fn accepts(&self, name: &str, arguments: &Value) -> bool {
        match self.prepare(name, arguments) {
            Ok((_, args)) => self.registry.check_arguments(name, &args).is_ok(),
            Err(_) => false,
        }
    }

    fn needs_approval(&self, name: &str, arguments: &Value) -> bool {
        self.offered(name).is_some_and(|(tool, _)| tool.tool.destructive_call(arguments))
    }

    fn pinned(&self, name: &str, arguments: &Value) -> Value {
        match self.prepare(name, arguments) {
            Ok((_, arguments)) | Err((arguments, _)) => arguments,
        }
    }

    async fn execute(&self, name: &str, arguments: &Value, origin: Origin<'_>, time_left: Duration) -> Execution {
        let (mutates, arguments) = match self.prepare(name, arguments) {
            Ok((tool, arguments)) => (tool.meta().mutates_graph || tool.meta().creates_session, arguments),
            Err((arguments, result)) => {
                return Execution { arguments, result, is_error: true, changed_state: false };
            }
        };
        let mut ctx = self.ctx.clone();
        // The chat's live events are ai_chat's, not the tools'.
        ctx.watcher = None;
        ctx.audit.insert("tool".into(), json!("ai_chat"));
        // The calls of an answer the user decided on were asked for in an earlier request: which
        // model asked is not known there, and not recorded.
        if !origin.provider.is_empty() {
            ctx.audit.insert("provider".into(), json!(origin.provider));
            ctx.audit.insert("model".into(), json!(origin.model));
        }
        let (registry, owned_name, owned_args) = (self.registry.clone(), name.to_owned(), arguments.clone());
        let call = tokio::spawn(async move { registry.invoke(&owned_name, owned_args, &ctx).await });
        let outcome = match tokio::time::timeout(time_left, call).await {
            Ok(Ok(Ok(outcome))) => outcome,
            Ok(Ok(Err(unknown))) => Err(ToolError::new(ErrorCode::UnknownOrDisallowedTool, unknown.to_string())),
            Ok(Err(join)) => Err(ToolError::new(ErrorCode::InternalError, format!("Tool '{name}' failed: {join}"))),
            Err(_) => Err(ToolError::new(
                ErrorCode::DeadlineExceeded,
                format!(
                    "Tool '{name}' did not finish within the {:.1} s left in this turn; it was not waited for and \
                     may still complete.",
                    time_left.as_secs_f64()
                ),
            )),
        };
        let timed_out = matches!(&outcome, Err(error) if error.code == ErrorCode::DeadlineExceeded);
        let result = outcome.unwrap_or_else(|error| error.to_value());
        let is_error = result.get("error").is_some();
        // A call that ran out of time may still commit: count it as a change.
        let changed_state = mutates && (!is_error || timed_out);
        Execution { arguments, result, is_error, changed_state }
    }
}
