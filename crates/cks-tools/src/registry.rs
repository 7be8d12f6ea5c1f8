//! The one tool registry: the source of `tools/list`, of dispatch, and of the tool specs `ai_chat`
//! offers an LLM.
//!
//! Every call goes through the same steps: arguments are checked against the tool's published
//! schema (`missing_parameter`, `invalid_parameter`, or the code the tool declares for that argument
//! in `Tool::ARGUMENT_CODES`; a malformed session argument is `session_not_found`), session arguments
//! are checked (`session_not_found`, for closed sessions too), the caller's access to everything
//! the call names is checked ([`check_access`]), the handler runs behind a panic boundary (a panic
//! becomes `internal_error` and the server keeps serving) as the caller's principal, and one
//! structured log line records the tool, session, duration and outcome.

use crate::ErrorCode;
use futures::FutureExt;
use indexmap::IndexMap;
use jsonschema::error::ValidationErrorKind;
use serde_json::{Map, Value};
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use cks_runtime::RuntimeError;

use crate::context::ToolContext;
use crate::error::ToolError;
use crate::principal::Scope;
use crate::telemetry::ToolTelemetry;
use crate::tool::{ArgumentFault, DynTool, Hints, Listed, Named, SessionCheck, ToolMeta};

/// A JSON Schema object, shared by everything that publishes it (the MCP tool list, `ai_chat`'s
/// offers): each is built once, on first use, and never copied.
pub type SharedSchema = Arc<Map<String, Value>>;

/// One registered tool with its published schemas and their validators.
pub struct RegisteredTool {
    pub tool: Arc<dyn DynTool>,
    meta: &'static ToolMeta,
    /// The group it is listed in (`knowledge`, `versions`, ...): what a tool profile can name.
    group: &'static str,
    /// The committed text of the schemas of a standard tool, parsed on first use instead of derived.
    published: Option<&'static Published>,
    // Built on first use: deriving every tool's schemas ran most of a server's start-up, and a
    // session that never lists the tools needs the schemas of the few it calls.
    schema: OnceLock<SharedSchema>,
    output_schema: OnceLock<Option<SharedSchema>>,
    // Compiled on first use: compiling every tool's schemas took most of the server's start.
    validator: OnceLock<jsonschema::Validator>,
    output_validators: OnceLock<Option<OutputValidators>>,
}

/// The committed schemas of one standard tool, minified (`build.rs`, from `schemas/tools.json`).
#[derive(Debug)]
struct Published {
    name: &'static str,
    input: &'static str,
    output: Option<&'static str>,
}

include!(concat!(env!("OUT_DIR"), "/published.rs"));

/// A JSON Schema object from its committed text; `None` if the text is not one (it always is:
/// the build wrote it from JSON), and the schema is then derived.
fn parse_schema(text: &str) -> Option<SharedSchema> {
    serde_json::from_str::<Map<String, Value>>(text).ok().map(Arc::new)
}

/// A derived schema as a shared object.
fn shared(name: &str, schema: Value) -> SharedSchema {
    match schema {
        Value::Object(map) => Arc::new(map),
        other => panic!("tool '{name}' has a schema that is not an object: {other}"),
    }
}

/// The compiled `outputSchema`, and each of its two branches alone for precise messages.
struct OutputValidators {
    either: jsonschema::Validator,
    success: jsonschema::Validator,
    error: jsonschema::Validator,
}

impl OutputValidators {
    fn compile(name: &str, schema: &Map<String, Value>) -> Self {
        let compile = |schema: &Value| {
            jsonschema::validator_for(schema)
                .unwrap_or_else(|e| panic!("tool '{name}' has an invalid output schema: {e}"))
        };
        let branch = |i: usize| {
            let mut branch = schema.get("anyOf").map_or(Value::Null, |branches| branches[i].clone());
            if let (Some(defs), Value::Object(map)) = (schema.get("$defs"), &mut branch) {
                map.insert("$defs".into(), defs.clone());
            }
            compile(&branch)
        };
        OutputValidators { either: compile(&Value::Object(schema.clone())), success: branch(0), error: branch(1) }
    }
}

impl std::fmt::Debug for RegisteredTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegisteredTool").field("name", &self.meta().name).finish_non_exhaustive()
    }
}

impl RegisteredTool {
    /// The group it is listed in; empty for a tool registered in none.
    pub fn group(&self) -> &'static str {
        self.group
    }

    pub fn meta(&self) -> &'static ToolMeta {
        self.meta
    }

    /// The title and hints a host is told (see [`Hints`]).
    pub fn hints(&self) -> Hints {
        self.tool.hints()
    }

    /// The published `inputSchema`.
    pub fn schema(&self) -> &SharedSchema {
        self.schema.get_or_init(|| {
            self.published
                .and_then(|published| parse_schema(published.input))
                .unwrap_or_else(|| shared(self.meta().name, self.tool.input_schema()))
        })
    }

    /// The published `outputSchema`, when the tool's result type is an object.
    pub fn output_schema(&self) -> Option<&SharedSchema> {
        let derived = || self.tool.output_schema().map(|schema| shared(self.meta().name, schema));
        self.output_schema
            .get_or_init(|| match self.published {
                Some(Published { output: None, .. }) => None,
                Some(Published { output: Some(text), .. }) => parse_schema(text).or_else(derived),
                None => derived(),
            })
            .as_ref()
    }

    fn validator(&self) -> &jsonschema::Validator {
        self.validator.get_or_init(|| {
            // Draft 7, the draft the input schemas are derived in: its meta-schema is a fraction of
            // 2020-12's, which the first call compiled to check each schema, and the keywords
            // the inputs use (types, properties, items, enum, minimum) mean the same in both;
            // formats stay annotations, as 2020-12 has them.
            jsonschema::options()
                .with_draft(jsonschema::Draft::Draft7)
                .should_validate_formats(false)
                .build(&Value::Object(Map::clone(self.schema())))
                .unwrap_or_else(|e| panic!("tool '{}' has an invalid input schema: {e}", self.meta().name))
        })
    }

    fn output_validators(&self) -> Option<&OutputValidators> {
        self.output_validators
            .get_or_init(|| self.output_schema().map(|schema| OutputValidators::compile(self.meta().name, schema)))
            .as_ref()
    }

    /// Checks a result against the published `outputSchema` (always passes without one). The
    /// message names the first mismatch against the success shape, or the error shape when the
    /// result is an error object.
    pub fn check_output(&self, result: &Value) -> Result<(), String> {
        let Some(validators) = self.output_validators() else { return Ok(()) };
        if validators.either.is_valid(result) {
            return Ok(());
        }
        let branch = if result.get("error").is_some() { &validators.error } else { &validators.success };
        let detail = branch.iter_errors(result).next().map_or_else(
            || "no branch of the schema matches".to_owned(),
            |e| format!("at '{}': {e}", e.instance_path()),
        );
        Err(format!("result of '{}' does not match its outputSchema {detail}", self.meta().name))
    }
}

/// A call to a name the registry does not know (a protocol error, not a business error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Unknown tool: {0}")]
pub struct UnknownTool(pub String);

/// The tool registry.
#[derive(Debug, Default)]
pub struct Registry {
    tools: IndexMap<&'static str, RegisteredTool>,
    telemetry: ToolTelemetry,
}

impl Registry {
    /// The standard tool set, in listing order, with its committed schemas.
    pub fn standard() -> Self {
        let mut registry = Registry::default();
        for (group, tools) in crate::tools::groups() {
            for Listed { meta, tool } in tools {
                let published = PUBLISHED.iter().find(|published| published.name == meta.name);
                registry.add(group, meta, tool, published);
            }
        }
        registry
    }

    /// Adds a tool (used for tools defined in higher crates, such as `ai_chat`), in no group.
    ///
    /// # Panics
    /// When the name is taken, or (in debug builds; otherwise at the tool's first call) when one
    /// of the tool's schemas does not compile: both are programming errors caught by the tests.
    pub fn register(&mut self, tool: Arc<dyn DynTool>) {
        self.register_in("", tool);
    }

    /// Adds a tool in `group` (see [`RegisteredTool::group`]); panics as [`Self::register`].
    pub fn register_in(&mut self, group: &'static str, tool: Arc<dyn DynTool>) {
        self.add(group, tool.meta(), tool, None);
    }

    fn add(
        &mut self,
        group: &'static str,
        meta: &'static ToolMeta,
        tool: Arc<dyn DynTool>,
        published: Option<&'static Published>,
    ) {
        let entry = RegisteredTool {
            tool,
            meta,
            group,
            published,
            schema: OnceLock::new(),
            output_schema: OnceLock::new(),
            validator: OnceLock::new(),
            output_validators: OnceLock::new(),
        };
        // Every test builds the registry in a debug build: a schema that does not compile fails
        // there at once, not at some later call.
        #[cfg(debug_assertions)]
        {
            entry.validator();
            entry.output_validators();
        }
        let previous = self.tools.insert(meta.name, entry);
        assert!(previous.is_none(), "tool '{}' registered twice", meta.name);
    }

    /// Adds a tool in place of the one registered under its name, if any (a deployment's own
    /// implementation of a standard tool; the tests' stand-ins).
    pub fn replace(&mut self, tool: Arc<dyn DynTool>) {
        let group = self.tools.shift_remove(tool.meta().name).map_or("", |replaced| replaced.group);
        self.register_in(group, tool);
    }

    pub fn get(&self, name: &str) -> Option<&RegisteredTool> {
        self.tools.get(name)
    }

    pub fn iter(&self) -> impl Iterator<Item = &RegisteredTool> {
        self.tools.values()
    }

    pub fn len(&self) -> usize {
        self.tools.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// Call counts, errors and latencies of the calls made through this registry (for `get_metrics`).
    pub fn telemetry(&self) -> &ToolTelemetry {
        &self.telemetry
    }

    /// Calls a tool. Business failures come back as `{"error", "message", ...}` values; only an
    /// unknown name is an `Err`.
    pub async fn call(&self, name: &str, args: Value, ctx: &ToolContext) -> Result<Value, UnknownTool> {
        Ok(self.invoke(name, args, ctx).await?.unwrap_or_else(|error| error.to_value()))
    }

    /// Calls a tool, for callers in this process (the chat loop, the workers): its result, or its
    /// business error as a [`ToolError`] to match on; only an unknown name is the outer `Err`.
    pub async fn invoke(
        &self,
        name: &str,
        args: Value,
        ctx: &ToolContext,
    ) -> Result<Result<Value, ToolError>, UnknownTool> {
        let entry = self.tools.get(name).ok_or_else(|| UnknownTool(name.to_owned()))?;
        let started = Instant::now();
        let session = session_of(entry.meta(), &args);
        let outcome = self.run(entry, args, ctx).await;
        let duration_ms = started.elapsed().as_secs_f64() * 1000.0;
        // Debug builds (every test run) hold each result to the schema the tool publishes, so a
        // result shape cannot drift from its declared type unnoticed.
        #[cfg(debug_assertions)]
        {
            let checked = match &outcome {
                Ok(value) => entry.check_output(value),
                Err(error) => entry.check_output(&error.to_value()),
            };
            if let Err(mismatch) = checked {
                panic!("{mismatch}");
            }
        }
        let error = match &outcome {
            Ok(value) => value.get("error").and_then(Value::as_str),
            Err(error) => Some(error.code.as_str()),
        };
        self.telemetry.record(entry.meta().name, duration_ms, error);
        tracing::info!(
            target: "cks_tool_call",
            tool = name,
            session = session.as_deref(),
            duration_ms,
            outcome = logged_outcome(&outcome, ctx),
            error,
        );
        Ok(outcome)
    }

    /// Whether `args` would pass the argument checks of `name` that need no session lookup (the
    /// published schema). Unknown tools fail.
    pub fn check_arguments(&self, name: &str, args: &Value) -> Result<(), ToolError> {
        let entry = self
            .tools
            .get(name)
            .ok_or_else(|| ToolError::new(ErrorCode::UnknownTool, format!("Unknown tool: {name}")))?;
        check_schema(entry, &normalise_args(args.clone())?)
    }

    async fn run(&self, entry: &RegisteredTool, args: Value, ctx: &ToolContext) -> Result<Value, ToolError> {
        let mut args = normalise_args(args)?;
        coerce(entry, &mut args);
        check_schema(entry, &args)?;
        check_sessions(entry.meta(), &args, ctx).await?;
        check_access(entry, &args, ctx).await?;
        // Sessions, versions and tasks the handler makes record the caller.
        let principal = ctx.principal.as_ref().map(|principal| principal.id());
        let handler = cks_runtime::access::as_principal(principal, entry.tool.run_json(ctx, args));
        match AssertUnwindSafe(handler).catch_unwind().await {
            Ok(result) => result,
            Err(panic) => {
                // A handler panicked, possibly half-way through changing a loaded session: drop
                // every loaded session so the next access reloads the committed state.
                ctx.runtime.forget_loaded_sessions();
                let detail = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "the handler panicked".into());
                Err(ToolError::internal(format!("tool '{}' failed: {detail}", entry.meta().name)))
            }
        }
    }
}

/// `null` means no arguments; `null` values mean "not given" (as the reference's falsy checks do).
fn normalise_args(args: Value) -> Result<Value, ToolError> {
    match args {
        Value::Null => Ok(Value::Object(Map::new())),
        Value::Object(mut map) => {
            map.retain(|_, v| !v.is_null());
            Ok(Value::Object(map))
        }
        other => Err(ToolError::invalid_parameter(format!("Arguments must be a JSON object, got {other}."))),
    }
}

/// Rewrites the argument forms the tool accepts beyond its schema into their published form.
fn coerce(entry: &RegisteredTool, args: &mut Value) {
    for (field, coercion) in entry.tool.argument_coercions() {
        if let Some(value) = args.get_mut(*field)
            && let Some(rewritten) = coercion.apply(value)
        {
            *value = rewritten;
        }
    }
}

fn check_schema(entry: &RegisteredTool, args: &Value) -> Result<(), ToolError> {
    // `json_data` is published as a string (one type suits every LLM provider), but a decoded
    // document object is accepted too, as the reference accepts it.
    let json_data_object = args.get("json_data").is_some_and(Value::is_object);
    let Some(error) = entry
        .validator()
        .iter_errors(args)
        .find(|e| !(json_data_object && e.instance_path().to_string() == "/json_data"))
    else {
        return Ok(());
    };
    if let ValidationErrorKind::Required { property } = error.kind() {
        let name = property.as_str().map_or_else(|| property.to_string(), str::to_owned);
        if let Some(code) = declared_code(entry, &name, ArgumentFault::Missing) {
            return Err(ToolError::new(code, format!("Missing required parameter: '{name}'.")).with("parameter", name));
        }
        return Err(ToolError::missing_parameter(&name));
    }
    let path = error.instance_path().to_string();
    let field = path.trim_start_matches('/').split('/').next().unwrap_or_default().to_owned();
    // Every tool taking evolution operations reports a malformed list as `invalid_operations`, as
    // the reference's handlers do (it checks no schema), rather than as a bad parameter.
    if field == "operations" {
        return Err(match args.get("operations") {
            Some(Value::Array(_)) => {
                ToolError::new(ErrorCode::InvalidOperations, format!("Could not parse 'operations': {error}."))
            }
            _ => ToolError::new(ErrorCode::InvalidOperations, "Operations must be a JSON array."),
        });
    }
    // Likewise a malformed extension list names extensions that do not exist.
    if field == "extensions" {
        let given = args.get("extensions").map(Value::to_string).unwrap_or_default();
        return Err(ToolError::from(cks_core::UnknownExtension { unknown: vec![given] }));
    }
    let message = if field.is_empty() {
        format!("Invalid arguments: {error}.")
    } else {
        format!("Invalid value for '{field}': {error}.")
    };
    if entry.meta().session_checks.iter().any(|check| check.field == field) {
        // A session argument that is not a string names no session.
        let given = match args.get(&field) {
            Some(Value::String(text)) => text.clone(),
            Some(other) => other.to_string(),
            None => String::new(),
        };
        return Err(ToolError::new(ErrorCode::SessionNotFound, format!("Session '{given}' not found."))
            .with("session_id", given));
    }
    if let Some(code) = declared_code(entry, &field, ArgumentFault::Malformed) {
        return Err(ToolError::new(code, message).with("parameter", field));
    }
    Err(ToolError::invalid_parameter(message).with("parameter", field))
}

/// The code the tool declares for this fault of this argument, if any.
fn declared_code(entry: &RegisteredTool, field: &str, fault: ArgumentFault) -> Option<ErrorCode> {
    entry.tool.argument_codes().iter().find(|c| c.field == field && c.fault == fault).map(|c| c.code)
}

/// A closed session is `session_not_found` to every tool, reader or writer: closing a session
/// removes it from what clients can reach, as in the reference server (its history stays in the
/// store).
async fn check_sessions(meta: &ToolMeta, args: &Value, ctx: &ToolContext) -> Result<(), ToolError> {
    for check in meta.session_checks {
        let SessionCheck { field, required, .. } = *check;
        let id = match args.get(field).and_then(Value::as_str) {
            Some(id) if !id.is_empty() => id,
            _ if required => return Err(ToolError::missing_parameter(field)),
            _ => continue,
        };
        ctx.runtime.check_open(id).await.map_err(|e| match e {
            RuntimeError::SessionNotFound(_) | RuntimeError::SessionClosed(_) => session_not_found(id),
            other => other.into(),
        })?;
    }
    Ok(())
}

fn session_not_found(id: &str) -> ToolError {
    ToolError::new(ErrorCode::SessionNotFound, format!("Session '{id}' not found.")).with("session_id", id)
}

/// The one access check, run before every handler. With a principal (OAuth over HTTP), each
/// session the call names (every declared session argument, given or optional) and each chat,
/// task or registered graph it names ([`Named`]) must belong to a session the principal may
/// reach; otherwise the call is answered as if the thing did not exist (`session_not_found`,
/// `chat_not_found`, `task_not_found`, `graph_not_found`), so a refusal tells nothing of what
/// another principal keeps. Without a principal (stdio, a static token) and with `cks:admin`,
/// everything is reachable.
async fn check_access(entry: &RegisteredTool, args: &Value, ctx: &ToolContext) -> Result<(), ToolError> {
    let Some(principal) = ctx.principal.as_deref() else { return Ok(()) };
    if principal.allows(Scope::Admin) {
        return Ok(());
    }
    for field in entry.meta().session_fields {
        if let Some(id) = args.get(*field).and_then(Value::as_str)
            && !ctx.reaches(id).await?
        {
            return Err(session_not_found(id));
        }
    }
    for (field, named) in entry.tool.named() {
        let Some(value) = args.get(*field) else { continue };
        match named {
            Named::Chat => {
                let Some(id) = value.as_str() else { continue };
                if let Some(chat) = ctx.runtime.chats().get(id).await?
                    && !ctx.reaches(&chat.session_id).await?
                {
                    return Err(crate::tools::chats::chat_not_found(id));
                }
            }
            Named::Task => {
                let Some(id) = value.as_i64() else { continue };
                let task = ctx.runtime.tasks().get(id).await.map_err(crate::tools::conflicts::store_error)?;
                if let Some(task) = task
                    && !ctx.reaches(&task.session_id).await?
                {
                    return Err(crate::tools::conflicts::task_not_found(id, ""));
                }
            }
            Named::Graph | Named::GraphSource => {
                let Some(name) = value.as_str() else { continue };
                let reads = *named == Named::GraphSource || entry.meta().read_only();
                if let Some(graph) = ctx.runtime.graph(name).await?
                    && !(reads && crate::tools::gallery::readable(principal, &graph))
                    && !ctx.reaches(&graph.session_id).await?
                {
                    return Err(crate::tools::gallery::graph_not_found(name));
                }
            }
        }
    }
    Ok(())
}

/// The outcome logged for a call: an error result, a call that the client cancelled (whether the
/// tool stopped early or not, the caller gave up on it), or ok.
fn logged_outcome(outcome: &Result<Value, ToolError>, ctx: &ToolContext) -> &'static str {
    let Ok(value) = outcome else { return "error" };
    if value.get("error").is_some() {
        "error"
    } else if value.get("cancelled") == Some(&Value::Bool(true)) || ctx.cancel.is_cancelled() {
        "cancelled"
    } else {
        "ok"
    }
}

fn session_of(meta: &ToolMeta, args: &Value) -> Option<String> {
    meta.session_fields.iter().find_map(|f| args.get(*f).and_then(Value::as_str)).map(str::to_owned)
}

#[cfg(test)]
mod access_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_cancelled_call_is_logged_as_cancelled() {
        let ctx = crate::testing::context();
        assert_eq!(logged_outcome(&Ok(json!({"reply": "hi"})), &ctx), "ok");
        assert_eq!(logged_outcome(&Ok(json!({"reply": "stopped", "cancelled": true})), &ctx), "cancelled");
        assert_eq!(logged_outcome(&Err(ToolError::new(ErrorCode::InvalidParameter, "m")), &ctx), "error");
        ctx.cancel.cancel();
        assert_eq!(logged_outcome(&Ok(json!({"reply": "hi"})), &ctx), "cancelled");
        assert_eq!(logged_outcome(&Err(ToolError::new(ErrorCode::Cancelled, "m")), &ctx), "error");
    }

    #[test]
    fn arguments_are_checked_against_the_published_schema() {
        let registry = Registry::standard();
        assert!(registry.check_arguments("list_versions", &json!({"session_id": "s"})).is_ok());
        let e = registry.check_arguments("list_versions", &json!({})).unwrap_err();
        assert_eq!(e.to_value()["error"], "missing_parameter");
        assert!(registry.check_arguments("list_versions", &json!({"session_id": 3})).is_err());
        assert!(registry.check_arguments("no_such_tool", &json!({})).is_err());
    }
}
