//! The tool abstraction: a typed input with a derived JSON Schema, a handler, and metadata.
//!
//! A tool is one file: a `#[derive(Deserialize, JsonSchema)]` input struct, a
//! `#[derive(Serialize, JsonSchema)]` result struct, a unit struct implementing [`Tool`], its
//! [`ToolMeta`] and its title (what a host is told: [`Hints`]). The registry erases both types
//! through [`DynTool`] so that one list can hold every tool; the derived schemas are published as
//! the tool's `inputSchema` and `outputSchema`.

use crate::ErrorCode;
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::sync::Arc;

use crate::context::ToolContext;
use crate::error::ToolError;

/// A check on a session-naming argument, run before the handler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionCheck {
    pub field: &'static str,
    /// The tool writes to the session. Either way a closed session is `session_not_found` (closing
    /// a session removes it from what tools can reach); the flag documents intent, and a session
    /// closed between the check and a commit is refused by the runtime with `session_closed`.
    pub open: bool,
    /// A missing argument is `missing_parameter`; else the check applies only when it is given.
    pub required: bool,
}

impl SessionCheck {
    /// The named session must exist (and so be open); the tool writes to it.
    pub const fn open(field: &'static str) -> Self {
        SessionCheck { field, open: true, required: true }
    }

    /// The named session must exist (and so be open); the tool only reads it.
    pub const fn exists(field: &'static str) -> Self {
        SessionCheck { field, open: false, required: true }
    }

    /// Check only when the argument is given.
    pub const fn if_given(self) -> Self {
        SessionCheck { required: false, ..self }
    }
}

/// What an argument other than a session names. The registry finds the session it belongs to and
/// refuses the call, as if the thing did not exist, when the caller may not reach that session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Named {
    /// A stored chat's id (`chat_not_found`).
    Chat,
    /// A queued task's id (`task_not_found`).
    Task,
    /// A registered graph's name (`graph_not_found`). A read-only tool also reaches a `public`
    /// graph, and a `team` graph of one of the caller's groups.
    Graph,
    /// A registered graph the tool only reads, whatever else it changes (a clone's or a merge's
    /// source): a `public` graph, and a `team` graph of one of the caller's groups, are reachable.
    GraphSource,
}

/// Which kind of argument fault an [`ArgumentCode`] answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgumentFault {
    /// A required argument is absent.
    Missing,
    /// The argument is present but does not match its published schema (wrong type, bad item, ...).
    Malformed,
}

/// A tool's own error code for a fault in one argument, used by the registry's schema check
/// instead of the generic `missing_parameter` / `invalid_parameter`. The published schema stays
/// unchanged: this only chooses the code a client sees when the schema is not met.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArgumentCode {
    pub field: &'static str,
    pub fault: ArgumentFault,
    pub code: ErrorCode,
}

impl ArgumentCode {
    /// `code` when `field` is present but does not match its schema.
    pub const fn malformed(field: &'static str, code: ErrorCode) -> Self {
        ArgumentCode { field, fault: ArgumentFault::Malformed, code }
    }

    /// `code` when the required `field` is absent.
    pub const fn missing(field: &'static str, code: ErrorCode) -> Self {
        ArgumentCode { field, fault: ArgumentFault::Missing, code }
    }
}

/// A form of an argument the tool accepts beyond its published schema, and what it stands for.
/// The registry rewrites such a value before the schema check, so the handler sees only the
/// published form and the schema an LLM reads stays the simple, honest one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coercion {
    /// A single string stands for the list holding just that string.
    ListOfOne,
    /// Any value stands for its truthiness (`null`, `false`, `0`, `""`, `[]`, `{}` are false).
    Truthy,
    /// A number or boolean stands for its JSON text.
    Text,
    /// An object or array stands for its JSON text (a document given decoded).
    JsonText,
}

impl Coercion {
    /// The rewritten value, or `None` when this coercion does not apply to it.
    pub fn apply(self, value: &Value) -> Option<Value> {
        match (self, value) {
            (Coercion::ListOfOne, Value::String(_)) => Some(Value::Array(vec![value.clone()])),
            (Coercion::Truthy, Value::Bool(_)) => None,
            (Coercion::Truthy, other) => Some(Value::Bool(match other {
                Value::Null => false,
                Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
                Value::String(s) => !s.is_empty(),
                Value::Array(a) => !a.is_empty(),
                Value::Object(o) => !o.is_empty(),
                Value::Bool(b) => *b,
            })),
            (Coercion::Text, Value::Number(_) | Value::Bool(_)) => Some(Value::String(value.to_string())),
            (Coercion::JsonText, Value::Object(_) | Value::Array(_)) => Some(Value::String(value.to_string())),
            _ => None,
        }
    }
}

/// What a tool is and what it may do; the single source for `tools/list` annotations, argument
/// checks and the `ai_chat` exposure decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ToolMeta {
    pub name: &'static str,
    pub description: &'static str,
    /// Changes stored state: the graph of an existing session (appends versions, closes it) or its
    /// gallery entry.
    pub mutates_graph: bool,
    /// Creates new sessions.
    pub creates_session: bool,
    /// May discard or overwrite state (revert, close) rather than only add to it.
    pub destructive: bool,
    /// Calling it twice with the same arguments has no further effect.
    pub idempotent: bool,
    /// Talks to the world outside this server (an LLM, the network).
    pub open_world: bool,
    /// Every argument that names a session. `ai_chat` overwrites all of them with its own session.
    pub session_fields: &'static [&'static str],
    /// Checks run on session arguments before the handler.
    pub session_checks: &'static [SessionCheck],
    /// Whether the LLM inside `ai_chat` may call this tool. Declared for every tool, no default.
    pub llm_exposed: bool,
}

impl ToolMeta {
    /// True when the tool neither changes nor creates a graph or a session. The access rules read
    /// this; what a host is told also counts the server's other state ([`Hints::read_only`]).
    pub const fn read_only(&self) -> bool {
        !self.mutates_graph && !self.creates_session && !self.destructive
    }
}

/// What a host is told of a tool before calling it: a title a person reads and the four hints
/// hosts check. Facts only; the binary writes them as MCP's `title` and `annotations`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hints {
    /// A short name for people ("Query a subgraph"); empty when the tool declares none.
    pub title: &'static str,
    /// Changes nothing: no graph, session, gallery entry, chat, queue, process or file.
    pub read_only: bool,
    /// May discard or overwrite what is there, rather than only add to it.
    pub destructive: bool,
    /// A second call with the same arguments changes nothing more.
    pub idempotent: bool,
    /// Reaches beyond the server: an LLM provider, a web page, another database.
    pub open_world: bool,
}

impl Hints {
    /// The hints of `T`, from its `TITLE`, `CHANGES_SERVER` and `META`.
    pub const fn of<T: Tool>() -> Hints {
        Hints {
            title: T::TITLE,
            read_only: T::META.read_only() && !T::CHANGES_SERVER,
            destructive: T::META.destructive,
            idempotent: T::META.idempotent,
            open_world: T::META.open_world,
        }
    }
}

/// A tool with a typed input.
#[async_trait]
pub trait Tool: Send + Sync + 'static {
    type Input: DeserializeOwned + JsonSchema + Send + 'static;
    /// The result. When its schema describes an object, it is published as the tool's
    /// `outputSchema` (a free-form `Value` publishes none).
    type Output: Serialize + JsonSchema + Send + 'static;
    const META: ToolMeta;
    /// The name a person reads in a host's list of tools ("Query a subgraph"): MCP's `title`.
    /// Every standard tool gives one (tested); the default, none, only lets a tool be written first.
    const TITLE: &'static str = "";
    /// Changes state that [`ToolMeta`] does not declare: the task queue, a sweeper, a file on the
    /// server's disk, another store. A host is then told the tool is not read-only; the access
    /// rules still follow `META`.
    const CHANGES_SERVER: bool = false;
    /// Error codes for argument faults that differ from the generic ones (see [`ArgumentCode`]).
    /// Session arguments need no entry: a malformed one is always `session_not_found`.
    const ARGUMENT_CODES: &'static [ArgumentCode] = &[];
    /// Forms of arguments accepted beyond the published schema (see [`Coercion`]).
    const ARGUMENT_COERCIONS: &'static [(&'static str, Coercion)] = &[];
    /// Arguments naming a chat, a task or a registered graph (see [`Named`]); session arguments
    /// are declared in [`ToolMeta::session_fields`].
    const NAMED: &'static [(&'static str, Named)] = &[];

    /// Whether a call with these arguments may discard or overwrite state (what a person is asked
    /// to approve): a destructive tool's every call, and for others the calls that remove or
    /// replace what the graph holds.
    fn destructive_call(arguments: &Value) -> bool {
        let _ = arguments;
        Self::META.destructive
    }

    async fn run(&self, ctx: &ToolContext, input: Self::Input) -> Result<Self::Output, ToolError>;

    /// The result as JSON. `serde_json::to_value` copies every string; a tool whose result can
    /// carry a whole graph's text builds the value itself and moves that text in.
    fn into_value(output: Self::Output) -> Result<Value, serde_json::Error> {
        serde_json::to_value(output)
    }
}

/// The type-erased form the registry stores.
#[async_trait]
pub trait DynTool: Send + Sync + 'static {
    fn meta(&self) -> &'static ToolMeta;
    /// See [`Hints`].
    fn hints(&self) -> Hints;
    fn input_schema(&self) -> Value;
    fn argument_codes(&self) -> &'static [ArgumentCode];
    fn argument_coercions(&self) -> &'static [(&'static str, Coercion)];
    /// See [`Tool::NAMED`].
    fn named(&self) -> &'static [(&'static str, Named)];
    fn output_schema(&self) -> Option<Value>;
    /// See [`Tool::destructive_call`].
    fn destructive_call(&self, arguments: &Value) -> bool;
    async fn run_json(&self, ctx: &ToolContext, args: Value) -> Result<Value, ToolError>;
}

/// A standard tool with its metadata, which the registry reads without calling into the tool:
/// start-up then runs none of the tools' code (each tool's code lies in its own pages).
pub(crate) struct Listed {
    pub(crate) meta: &'static ToolMeta,
    pub(crate) tool: Arc<dyn DynTool>,
}

/// `tool` with its metadata, for a group's list.
#[inline(always)]
pub(crate) fn listed<T: Tool>(tool: T) -> Listed {
    Listed { meta: &T::META, tool: Arc::new(tool) }
}

#[async_trait]
impl<T: Tool> DynTool for T {
    fn meta(&self) -> &'static ToolMeta {
        &T::META
    }

    fn hints(&self) -> Hints {
        Hints::of::<T>()
    }

    fn input_schema(&self) -> Value {
        crate::schema::input_schema::<T::Input>()
    }

    fn argument_codes(&self) -> &'static [ArgumentCode] {
        T::ARGUMENT_CODES
    }

    fn argument_coercions(&self) -> &'static [(&'static str, Coercion)] {
        T::ARGUMENT_COERCIONS
    }

    fn named(&self) -> &'static [(&'static str, Named)] {
        T::NAMED
    }

    fn output_schema(&self) -> Option<Value> {
        crate::schema::output_schema::<T::Output>()
    }

    fn destructive_call(&self, arguments: &Value) -> bool {
        T::destructive_call(arguments)
    }

    async fn run_json(&self, ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
        let input = serde_json::from_value::<T::Input>(args)
            .map_err(|e| ToolError::invalid_parameter(format!("Invalid arguments for '{}': {e}", T::META.name)))?;
        let output = self.run(ctx, input).await?;
        T::into_value(output)
            .map_err(|e| ToolError::internal(format!("tool '{}' produced an unencodable result: {e}", T::META.name)))
    }
}
