//! The tool executor of `ai_chat` over the one tool registry: which tools the LLM is offered, and
//! how its calls are pinned to the chat's session.
//!
//! Reachable: the tools declared `llm_exposed`, not on a fixed denylist of server-management tools
//! (a second guard in case a tool is ever mis-declared), and pinnable: naming at most one session,
//! which the executor pins, and creating sessions only through that argument. The first offer
//! ([`crate::offer::CHAT_TOOLS`] and `find_tools`) is fixed; the model finds the others with
//! `find_tools` ([`crate::discovery`]), and each tool it found, or called, stays offered for the
//! rest of the conversation (the history says which). Offered schemas hold only the offered
//! arguments: the session arguments are filled in by the executor, so the model needs neither to
//! know nor to send them.
//!
//! Every call to anything else is refused with `unknown_or_disallowed_tool` and nothing runs; a
//! call using an argument the chat is not offered (such as `json_data`, which would make a new
//! session) is refused with `invalid_parameter`. Found tools get every check offered ones do. A call runs in its own task, bounded by the time
//! the turn has left: when that runs out the turn stops waiting, and the call, which may be
//! half-way through a commit, finishes on its own rather than being dropped mid-write.

use async_trait::async_trait;
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument as _;

use cks_llm::{ContentBlock, Message, ToolSpec};
use cks_tools::{ErrorCode, RegisteredTool, Registry, ToolContext, ToolError};

use crate::offer::{CHAT_TOOLS, FIND_TOOLS, WITHHELD_ARGUMENTS, chat_tool, offered_first};
use crate::turn::{Execution, Origin, ToolExecutor};

/// Tools an LLM in a chat may never call, whatever their declaration says: server management,
/// everything that starts or stops background work, and the stored chats (a model could otherwise
/// read or delete other conversations).
pub const DENIED_TOOLS: [&str; 17] = [
    "migrate_storage",
    "export_storage",
    "import_storage",
    "create_api_key",
    "list_api_keys",
    "revoke_api_key",
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
    /// The last offer made, with the found tools it was made for: a turn asks for the offer
    /// before every LLM request, and it changes only when a tool is found.
    offer: std::sync::Mutex<Option<(Vec<String>, Vec<ToolSpec>)>>,
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
        RegistryExecutor { registry, ctx, session_id: session_id.into(), offer: std::sync::Mutex::default() }
    }

    /// The registry entry of `name`, when a chat may call it.
    fn reachable(&self, name: &str) -> Option<&RegisteredTool> {
        if DENIED_TOOLS.contains(&name) {
            return None;
        }
        let tool = self.registry.get(name).filter(|t| t.meta().llm_exposed)?;
        let meta = tool.meta();
        // A tool that creates sessions must have a session argument to pin, or a call could make
        // a session the chat does not own; a second session argument would name another session
        // (pinning both to this one would only make the call meaningless).
        if (meta.creates_session && meta.session_fields.is_empty()) || meta.session_fields.len() > 1 {
            return None;
        }
        Some(tool)
    }

    /// The registry entry and offer of `name`, when a chat may call it.
    pub(crate) fn offered(&self, name: &str) -> Option<(&RegisteredTool, Offer)> {
        self.reachable(name).map(|tool| (tool, Offer::of(tool)))
    }

    /// Every tool a chat may call beyond the first offer, by name.
    pub(crate) fn discoverable(&self) -> impl Iterator<Item = (&RegisteredTool, Offer)> {
        self.registry.iter().filter(|t| !offered_first(t.meta().name)).filter_map(|t| self.offered(t.meta().name))
    }

    /// The tools of the conversation `history` found with `find_tools` or called, in the order
    /// they first appear, that are not in the first offer.
    fn found(&self, history: &[Message]) -> Vec<String> {
        let mut searches = std::collections::HashSet::new();
        let mut names: Vec<String> = Vec::new();
        let mut note = |name: &str| {
            if !offered_first(name) && !names.iter().any(|n| n == name) && self.reachable(name).is_some() {
                names.push(name.to_owned());
            }
        };
        for block in history.iter().flat_map(|m| &m.content) {
            match block {
                ContentBlock::ToolUse { id, name, .. } if name == FIND_TOOLS.name => {
                    searches.insert(id.as_str());
                }
                ContentBlock::ToolUse { name, .. } => note(name),
                ContentBlock::ToolResult { tool_use_id, content, .. } if searches.contains(tool_use_id.as_str()) => {
                    for name in crate::discovery::found_in(content) {
                        note(&name);
                    }
                }
                _ => {}
            }
        }
        names
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
                    && !offer.arguments.iter().any(|a| a == k)
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

/// A tool as offered to a chat's model: its written offer ([`crate::offer`]), or one made from
/// the tool's own declaration (the first sentence of its description; every argument but the
/// session arguments and the withheld ones).
pub(crate) struct Offer {
    pub(crate) description: std::borrow::Cow<'static, str>,
    pub(crate) arguments: Vec<String>,
    pub(crate) switched_on: &'static [&'static str],
}

impl Offer {
    fn of(tool: &RegisteredTool) -> Offer {
        if let Some(written) = chat_tool(tool.meta().name) {
            return Offer {
                description: written.description.into(),
                arguments: written.arguments.iter().map(|a| (*a).to_owned()).collect(),
                switched_on: written.switched_on,
            };
        }
        let meta = tool.meta();
        let description = meta.description;
        let first = description.find(". ").map_or(description, |end| &description[..=end]);
        let arguments = tool
            .schema()
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| p.keys().filter(|k| !meta.session_fields.contains(&k.as_str())))
            .into_iter()
            .flatten()
            .filter(|k| !WITHHELD_ARGUMENTS.contains(&k.as_str()))
            .cloned()
            .collect();
        Offer { description: first.to_owned().into(), arguments, switched_on: &[] }
    }

    /// What the model is sent: the tool's name, this description and its schema restricted to
    /// the offered arguments.
    pub(crate) fn spec(&self, tool: &RegisteredTool) -> ToolSpec {
        let mut schema = Value::Object(tool.schema().as_ref().clone());
        let offered = |k: &str| self.arguments.iter().any(|a| a == k);
        if let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) {
            properties.retain(|k, _| offered(k));
        }
        if let Some(required) = schema.get_mut("required").and_then(Value::as_array_mut) {
            required.retain(|r| r.as_str().is_some_and(offered));
            if required.is_empty() {
                schema.as_object_mut().map(|o| o.remove("required"));
            }
        }
        ToolSpec { name: tool.meta().name.to_owned(), description: self.description.to_string(), input_schema: schema }
    }
}

#[async_trait]
impl ToolExecutor for RegistryExecutor {
    fn specs(&self, history: &[Message]) -> Vec<ToolSpec> {
        let found = self.found(history);
        let mut last = self.offer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((names, specs)) = last.as_ref()
            && *names == found
        {
            return specs.clone();
        }
        let spec = |name: &str| self.offered(name).map(|(tool, offer)| offer.spec(tool));
        let mut specs: Vec<ToolSpec> = CHAT_TOOLS.iter().filter_map(|offer| spec(offer.name)).collect();
        specs.push(crate::discovery::spec());
        specs.extend(found.iter().filter_map(|name| spec(name)));
        *last = Some((found, specs.clone()));
        specs
    }

    fn accepts(&self, name: &str, arguments: &Value) -> bool {
        if name == FIND_TOOLS.name {
            return crate::discovery::Need::read(arguments).is_ok();
        }
        match self.prepare(name, arguments) {
            Ok((_, args)) => self.registry.check_arguments(name, &args).is_ok(),
            Err(_) => false,
        }
    }

    fn needs_approval(&self, name: &str, arguments: &Value) -> bool {
        self.offered(name).is_some_and(|(tool, _)| tool.tool.destructive_call(arguments))
    }

    fn pinned(&self, name: &str, arguments: &Value) -> Value {
        if name == FIND_TOOLS.name {
            return crate::discovery::own_arguments(arguments);
        }
        match self.prepare(name, arguments) {
            Ok((_, arguments)) | Err((arguments, _)) => arguments,
        }
    }

    async fn execute(&self, name: &str, arguments: &Value, origin: Origin<'_>, time_left: Duration) -> Execution {
        if name == FIND_TOOLS.name {
            let arguments = crate::discovery::own_arguments(arguments);
            let result = crate::discovery::find(self, &arguments);
            let is_error = result.get("error").is_some();
            return Execution { arguments, result, is_error, changed_state: false };
        }
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
        // The call's own span, for traces only (`cks_trace`), under the turn's; the task it runs in
        // keeps both, so its log line still names the request.
        let span = tracing::info_span!(
            target: "cks_trace",
            "tool_call",
            otel.name = format!("execute_tool {name}").as_str(),
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = name,
            "error.type" = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        let traced = span.clone();
        let call = tokio::spawn(
            async move { registry.invoke(&owned_name, owned_args, &ctx).await }.instrument(span).in_current_span(),
        );
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
        if let Some(code) = result.get("error").and_then(Value::as_str) {
            traced.record("error.type", code);
            traced.record("otel.status_code", "error");
        }
        // A call that ran out of time may still commit: count it as a change.
        let changed_state = mutates && (!is_error || timed_out);
        Execution { arguments, result, is_error, changed_state }
    }
}
