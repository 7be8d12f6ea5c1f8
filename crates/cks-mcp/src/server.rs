//! The protocol-independent core of the server: the tool list with titles and MCP annotations, tool calls
//! through the registry, resources and prompts. The rmcp handler (stdio and streamable HTTP) and
//! the bare JSON-RPC HTTP form both call into it, so every transport behaves the same.

use serde_json::{Map, Value, json};
use std::sync::Arc;

use rmcp::model::{CallToolResult, ContentBlock, ErrorCode, ErrorData};
use tokio_util::sync::CancellationToken;

use cks_core::validate::ProvenanceKey;
use cks_runtime::store::StoreOpener;
use cks_runtime::{Runtime, Sweepers};
use cks_tools::{LlmAccess, ProgressSink, RegisteredTool, Registry, ToolContext, ToolProfile};
use cks_web::fetch::{FetchPolicy, Fetcher};

use crate::json_text::LargeText;
use crate::{prompts, resources};

/// The MCP protocol version we announce to clients that ask for none we know.
pub const PROTOCOL_VERSION: &str = "2025-11-25";

/// Shared server state.
#[derive(Debug, Clone)]
pub struct CksServer {
    pub runtime: Arc<Runtime>,
    pub registry: Arc<Registry>,
    pub llm: LlmAccess,
    /// The key of `VerificationRecord` signatures; without one, each call gets a random key.
    pub provenance: Option<Arc<ProvenanceKey>>,
    /// The background sweepers the agent tools report on and control.
    pub sweepers: Option<Arc<Sweepers>>,
    /// The guarded HTTP client of the tools that fetch a URL they are given.
    pub fetcher: Arc<Fetcher>,
    /// Opens the stores tools name (`migrate_storage`'s target).
    pub stores: Arc<dyn StoreOpener>,
    /// The counters of the Critic running in this process (`get_metrics`).
    pub critic_metrics: Arc<cks_tools::critic_metrics::CriticMetrics>,
    /// The tools `tools/list` offers (`CKS_MCP_TOOLS`); every tool is callable either way.
    profile: Arc<ToolProfile>,
    /// The `tools/list` entries, built at the first list (a session that never lists the tools
    /// parses no schema it does not call); their schemas are the registry's own.
    tools: Arc<std::sync::OnceLock<Vec<rmcp::model::Tool>>>,
    /// What is kept of the stdio client between its requests (over HTTP, a session's record
    /// keeps it: `sessions.rs`).
    client: Arc<ClientState>,
    /// The calls running in MCP sessions over HTTP, for cancellations from other replicas.
    pub(crate) calls: Arc<crate::sessions::Calls>,
    /// The MCP sessions over HTTP whose notification stream is open here.
    pub(crate) streams: Arc<crate::sessions::Streams>,
    /// The records of MCP sessions over HTTP, as read from the store.
    pub(crate) records: crate::sessions::StoredSessions,
    /// Seals the chats that wait for an approval on the stateless revision.
    pub(crate) states: crate::approvals::States,
    /// What each caller may hold (`limits.rs`).
    pub(crate) limits: Arc<crate::limits::Limits>,
    /// Whether results leave their large texts unescaped for the transport (see
    /// [`Self::leaving_large_texts_to_the_transport`]).
    large_texts_unescaped: bool,
}

/// What the server keeps of its stdio client between requests: the level it chose for log
/// messages (`logging/setLevel`), the resources it subscribed to and the tools it found beyond
/// its profile (`find_tools`), which its list then offers too.
#[derive(Debug, Default)]
pub(crate) struct ClientState {
    #[allow(deprecated)] // logging is deprecated from 2026-07-28 on, and spoken until then
    log_level: std::sync::Mutex<Option<rmcp::model::LoggingLevel>>,
    pub(crate) subscribed: Arc<crate::subscriptions::Subscribed>,
    found: std::sync::Mutex<std::collections::BTreeSet<String>>,
}

#[allow(deprecated)]
impl ClientState {
    pub(crate) fn log_level(&self) -> Option<rmcp::model::LoggingLevel> {
        *self.log_level.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn set_log_level(&self, level: rmcp::model::LoggingLevel) {
        *self.log_level.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(level);
    }

    pub(crate) fn found(&self) -> std::collections::BTreeSet<String> {
        self.found.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Adds tools found; true when one was new.
    pub(crate) fn add_found(&self, names: &[String]) -> bool {
        let mut found = self.found.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let before = found.len();
        found.extend(names.iter().cloned());
        found.len() > before
    }
}

/// Per-call options from the transport.
#[derive(Default, Clone)]
pub struct CallOptions {
    pub progress: Option<Arc<dyn ProgressSink>>,
    pub cancel: CancellationToken,
    /// Who makes the call, when an access token named them (`auth.rs`).
    pub principal: Option<Arc<cks_tools::Principal>>,
}

impl std::fmt::Debug for CallOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallOptions").field("progress", &self.progress.is_some()).finish_non_exhaustive()
    }
}

impl CksServer {
    pub fn new(runtime: Arc<Runtime>, registry: Arc<Registry>, llm: LlmAccess) -> Self {
        CksServer {
            records: crate::sessions::StoredSessions::new(&runtime),
            runtime,
            registry,
            llm,
            provenance: None,
            sweepers: None,
            fetcher: Arc::new(Fetcher::default()),
            stores: Arc::new(crate::stores::Stores::default()),
            critic_metrics: Arc::default(),
            profile: Arc::new(ToolProfile::All),
            tools: Arc::default(),
            client: Arc::default(),
            calls: Arc::default(),
            streams: Arc::default(),
            // Without the shared secret, a key of this process's own.
            states: crate::approvals::States::new(rand::random()),
            large_texts_unescaped: false,
            limits: Arc::default(),
        }
    }

    /// Holds each caller to `settings` (by default, principals to the defaults of `limits.rs`).
    pub fn with_limits(mut self, settings: crate::limits::Settings) -> Self {
        self.limits = Arc::new(crate::limits::Limits::new(settings));
        self
    }

    /// Lists the tools of `profile` (every tool otherwise).
    pub fn with_profile(mut self, profile: ToolProfile) -> Self {
        self.profile = Arc::new(profile);
        self
    }

    /// Fetches what tools are asked to fetch under `policy` (by default public addresses only).
    pub fn with_fetch_policy(mut self, policy: FetchPolicy) -> Self {
        self.fetcher = Arc::new(Fetcher::new(policy));
        self
    }

    /// Lets the agent tools see and control `sweepers`.
    pub fn with_sweepers(mut self, sweepers: Arc<Sweepers>) -> Self {
        self.sweepers = Some(sweepers);
        self
    }

    /// Uses `key` to check and to make provenance signatures.
    /// The approvals of the stateless revision are sealed with a key derived from it.
    pub fn with_provenance(mut self, key: ProvenanceKey) -> Self {
        self.states = crate::approvals::States::new(key.derived("mcp requestState"));
        self.provenance = Some(Arc::new(key));
        self
    }

    /// Leaves a result's large text (a whole graph's document) unescaped, in a block only the
    /// stdio transport reads (`json_text::LargeText::into_block`): it escapes the text for its
    /// line as it writes it, the escapes of the result's text and of the line in one pass.
    pub(crate) fn leaving_large_texts_to_the_transport(mut self) -> Self {
        self.large_texts_unescaped = true;
        self
    }

    /// What is kept of the stdio client.
    pub(crate) fn client(&self) -> &ClientState {
        &self.client
    }

    /// `serverInfo`.
    pub fn server_info() -> Value {
        json!({"name": "cks-mcp", "version": env!("CARGO_PKG_VERSION")})
    }

    /// The `initialize` result for the bare JSON-RPC form.
    pub fn initialize_result(requested: Option<&str>) -> Value {
        json!({
            "protocolVersion": requested.filter(|v| SUPPORTED_VERSIONS.contains(v)).unwrap_or(PROTOCOL_VERSION),
            "capabilities": {
                "tools": {"listChanged": true},
                "resources": {"subscribe": true},
                "prompts": {},
                "completions": {},
                "logging": {},
                "extensions": {rmcp::model::TASKS_EXTENSION_ID: {}, crate::apps::EXTENSION_ID: crate::apps::capability()},
            },
            "serverInfo": Self::server_info(),
        })
    }

    /// Every tool's `tools/list` entry: name, title, description, inputSchema and annotations
    /// from the metadata.
    pub fn tools(&self) -> &[rmcp::model::Tool] {
        self.tools.get_or_init(|| self.registry.iter().map(tool_entry).collect())
    }

    /// The `tools/list` entries offered: the profile's, and those the client `found` beyond it.
    pub fn listed_tools(&self, found: &std::collections::BTreeSet<String>) -> Vec<rmcp::model::Tool> {
        let offered = |tool: &&rmcp::model::Tool| self.profile.offers(&tool.name) || found.contains(tool.name.as_ref());
        self.tools().iter().filter(offered).cloned().collect()
    }

    /// Whether the profile leaves `name` out of the list (it stays callable).
    pub fn unlisted(&self, name: &str) -> bool {
        !self.profile.offers(name)
    }

    /// The context a tool call runs in, before per-call state (progress, cancellation).
    pub fn context(&self) -> ToolContext {
        let mut ctx = ToolContext::new(self.runtime.clone());
        ctx.llm = self.llm.clone();
        ctx.registry = Some(self.registry.clone());
        ctx.sweepers = self.sweepers.clone();
        ctx.fetcher = self.fetcher.clone();
        ctx.stores = self.stores.clone();
        ctx.critic_metrics = self.critic_metrics.clone();
        if let Some(key) = &self.provenance {
            ctx.provenance = key.clone();
        }
        ctx
    }

    /// Calls a tool. Business errors are results (`content[0].text` and `structuredContent` hold
    /// the same JSON object); only an unknown tool is a protocol error.
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: Option<Map<String, Value>>,
        options: CallOptions,
    ) -> Result<CallToolResult, ErrorData> {
        let mut ctx = self.context();
        ctx.progress = options.progress;
        ctx.cancel = options.cancel;
        ctx.principal = options.principal;
        let args = arguments.map_or(Value::Object(Map::new()), Value::Object);
        let structured = self.registry.get(name).is_some_and(|tool| tool.output_schema().is_some());
        let value = self
            .registry
            .call(name, args, &ctx)
            .await
            // The code MCP's own example gives an unknown tool (COMPATIBILITY.md, `unknown-tool`).
            .map_err(|e| ErrorData::new(ErrorCode::INVALID_PARAMS, e.to_string(), None))?;
        Ok(tool_result(value, structured, self.large_texts_unescaped))
    }

    /// A result made from the JSON object a tool with an output schema answered.
    pub(crate) fn result_of(&self, value: Value) -> CallToolResult {
        tool_result(value, true, self.large_texts_unescaped)
    }

    /// The resources `principal` (none: the one local user) may read.
    pub async fn list_resources(&self, principal: Option<&cks_tools::Principal>) -> Result<Value, ErrorData> {
        resources::list(&self.runtime, principal).await
    }

    pub async fn read_resource(&self, uri: &str, principal: Option<&cks_tools::Principal>) -> Result<Value, ErrorData> {
        resources::read(&self.runtime, uri, principal).await
    }

    /// `Ok` when `uri` names a resource that exists now and `principal` may read; the same error
    /// as reading it otherwise.
    pub(crate) async fn read_resource_exists(
        &self,
        uri: &str,
        principal: Option<&cks_tools::Principal>,
    ) -> Result<(), ErrorData> {
        resources::exists(&self.runtime, uri, principal).await
    }

    pub fn list_prompts(&self) -> Value {
        prompts::list()
    }

    pub fn get_prompt(&self, name: &str, arguments: &Map<String, Value>) -> Result<Value, ErrorData> {
        prompts::get(name, arguments)
    }
}

/// The span a tool call runs in: its log lines carry the request's id, the MCP session it came in
/// (over HTTP) and the principal's subject (with OAuth), so one request's lines can be found. When
/// traces are on, it is the call's span (`tools/call <tool>`), a child of the trace `carrier`
/// names, if any (`telemetry::trace_call`).
pub(crate) fn request_span(
    request_id: &str,
    mcp_session: Option<&str>,
    principal: Option<&cks_tools::Principal>,
    tool: &str,
    carrier: crate::telemetry::Carrier<'_>,
) -> tracing::Span {
    // The tool-call lines' target, so that the filter that lets them through lets it through.
    let span = tracing::info_span!(
        target: "cks_tool_call",
        "request",
        request_id = request_id,
        mcp_session = tracing::field::Empty,
        principal = tracing::field::Empty
    );
    if let Some(session) = mcp_session {
        span.record("mcp_session", session);
    }
    if let Some(principal) = principal {
        span.record("principal", principal.subject.as_str());
    }
    crate::telemetry::trace_call(&span, tool, carrier);
    span
}

/// Marks `span` (a tool call's) failed when `result` is a business error, for its trace.
pub(crate) fn note_outcome(span: &tracing::Span, result: &CallToolResult) {
    if result.is_error == Some(true) && crate::telemetry::tracing_on() {
        let code = result.structured_content.as_ref().and_then(|v| v.get("error")).and_then(Value::as_str);
        crate::telemetry::call_failed(span, code.unwrap_or("tool_error"));
    }
}

/// Protocol versions we can speak, newest first.
pub const SUPPORTED_VERSIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// One `tools/list` entry. It carries no `outputSchema`: hosts show a model the tool's
/// description, which says what it answers, and the schemas of every result's shape would double
/// the list. Results still carry `structuredContent`, which MCP allows without a schema.
fn tool_entry(tool: &RegisteredTool) -> rmcp::model::Tool {
    let meta = tool.meta();
    let hints = tool.hints();
    let title = (!hints.title.is_empty()).then(|| hints.title.to_owned());
    // The title goes in both places: `title` (2025-06-18 on) for hosts that show it, and
    // `annotations.title` for older revisions and the directories that check it there.
    let annotations = rmcp::model::ToolAnnotations::from_raw(
        title.clone(),
        Some(hints.read_only),
        Some(hints.destructive),
        Some(hints.idempotent),
        Some(hints.open_world),
    );
    let mut entry = rmcp::model::Tool::new_with_raw(meta.name, Some(meta.description.into()), tool.schema().clone())
        .with_annotations(annotations);
    entry.title = title;
    crate::apps::annotate(&mut entry);
    entry
}

/// Wraps a tool's result: its JSON text as `content[0]` (what the reference sends and cks-studio
/// parses) and, for a tool whose result is an object with a schema in the registry (`structured`),
/// the object itself as `structuredContent`.
///
/// The one tool without such a schema, `serialize_knowledge`, returns documents of any size (and
/// sometimes a bare string, which `structuredContent` cannot carry): its result travels once, as
/// the text, rather than twice.
///
/// A large text (a graph's document) becomes the result's text without a copy: escaped in its own
/// buffer, or, with `large_text_unescaped`, not escaped at all, for the transport to escape.
///
/// A business error (`{"error": code, "message": ...}`) is marked `isError`, as MCP asks of a
/// tool's own failure, with the same content as any other result.
pub fn tool_result(value: Value, structured: bool, large_text_unescaped: bool) -> CallToolResult {
    if value.get("error").is_some_and(Value::is_string) {
        let text = serde_json::to_string(&value).unwrap_or_else(|_| "{}".into());
        let mut result = CallToolResult::error(vec![ContentBlock::text(text)]);
        if structured {
            result.structured_content = Some(value);
        }
        return result;
    }
    if structured && value.is_object() {
        let text = serde_json::to_string(&value).unwrap_or_else(|_| "{}".into());
        let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
        result.structured_content = Some(value);
        return result;
    }
    let block = match LargeText::split(value) {
        Ok(large) if large_text_unescaped => large.into_block(),
        Ok(large) => ContentBlock::text(large.into_text()),
        Err(value) => ContentBlock::text(serde_json::to_string(&value).unwrap_or_else(|_| "null".into())),
    };
    CallToolResult::success(vec![block])
}

#[cfg(test)]
mod tests {
    use super::{tool_entry, tool_result};
    use serde_json::{Value, json};
    use std::collections::BTreeMap;

    /// The `tools/list` entries of the server's registry (the standard tools and `ai_chat`), by name.
    fn listed() -> BTreeMap<String, Value> {
        let mut registry = cks_tools::Registry::standard();
        registry.register(std::sync::Arc::new(cks_chat::AiChat::default()));
        registry
            .iter()
            .map(|tool| {
                let entry = serde_json::to_value(tool_entry(tool)).unwrap();
                (entry["name"].as_str().unwrap().to_owned(), entry)
            })
            .collect()
    }

    #[test]
    fn every_listed_tool_has_a_title_and_the_four_hints() {
        let tools = listed();
        assert!(tools.len() > 70, "{}", tools.len());
        for (name, entry) in &tools {
            let annotations = &entry["annotations"];
            for hint in ["readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"] {
                assert!(annotations[hint].is_boolean(), "{name} lacks {hint}: {annotations}");
            }
            let title = entry["title"].as_str().unwrap_or_default();
            assert!(!title.trim().is_empty(), "{name} has no title");
            assert_ne!(title, name, "{name}'s title is its name");
            assert_eq!(annotations["title"], entry["title"], "{name}");
            // Hosts read the description; result schemas would double the list.
            assert!(entry.get("outputSchema").is_none(), "{name}");
        }
    }

    #[test]
    fn hints_say_what_the_tools_do() {
        let tools = listed();
        let hint = |name: &str, hint: &str| tools[name]["annotations"][hint].as_bool().unwrap();
        for read in ["query_subgraph", "list_versions", "compare_versions", "get_graph", "export_session"] {
            assert!(hint(read, "readOnlyHint"), "{read}");
        }
        // They change no graph, yet a queue, a sweeper or a file: not read-only.
        for writes in ["start_agent", "claim_conflict_task", "request_enrichment", "export_storage"] {
            assert!(!hint(writes, "readOnlyHint"), "{writes}");
        }
        for deletes in ["delete_chat", "revert_version", "close_session", "import_storage"] {
            assert!(hint(deletes, "destructiveHint") && !hint(deletes, "readOnlyHint"), "{deletes}");
        }
        for adds in ["create_branch", "clone_graph", "register_graph"] {
            assert!(!hint(adds, "readOnlyHint"), "{adds}");
        }
        for open in ["ai_chat", "construct_knowledge", "ingest_document", "verify_source", "list_llm_models"] {
            assert!(hint(open, "openWorldHint"), "{open}");
        }
        for closed in ["query_subgraph", "evolve_knowledge", "delete_chat", "list_versions"] {
            assert!(!hint(closed, "openWorldHint"), "{closed}");
        }
        assert!(hint("close_session", "idempotentHint") && !hint("evolve_knowledge", "idempotentHint"));
        assert_eq!(tools["query_subgraph"]["title"], "Query a subgraph");
    }

    #[test]
    fn objects_of_tools_with_an_output_schema_are_structured_and_other_results_are_text_only() {
        let object = serde_json::to_value(tool_result(json!({"a": 1}), true, false)).unwrap();
        assert_eq!(object["content"], json!([{"type": "text", "text": "{\"a\":1}"}]));
        assert_eq!(object["structuredContent"], json!({"a": 1}));
        let unpromised = serde_json::to_value(tool_result(json!({"a": 1}), false, false)).unwrap();
        assert_eq!(unpromised["content"], object["content"]);
        assert!(unpromised.get("structuredContent").is_none());

        let document = serde_json::to_value(tool_result(json!("{\n  \"objects\": []\n}"), true, false)).unwrap();
        let text = document["content"][0]["text"].as_str().unwrap();
        assert_eq!(serde_json::from_str::<serde_json::Value>(text).unwrap(), json!("{\n  \"objects\": []\n}"));
        assert!(document.get("structuredContent").is_none());
    }

    #[test]
    fn business_errors_are_marked_and_keep_their_content() {
        let failed = json!({"error": "session_not_found", "message": "Session S not found"});
        let result = serde_json::to_value(tool_result(failed.clone(), true, false)).unwrap();
        assert_eq!(result["isError"], true);
        assert_eq!(result["structuredContent"], failed);
        let text = result["content"][0]["text"].as_str().unwrap();
        assert_eq!(serde_json::from_str::<serde_json::Value>(text).unwrap(), failed);
        let unstructured = serde_json::to_value(tool_result(failed.clone(), false, false)).unwrap();
        assert_eq!(unstructured["isError"], true);
        assert!(unstructured.get("structuredContent").is_none());

        let fine = serde_json::to_value(tool_result(json!({"valid": true, "error": null}), true, false)).unwrap();
        assert_ne!(fine["isError"], true, "{fine}");
    }
}
