//! What a tool handler can reach: the runtime, shared services, and per-call state (progress,
//! cancellation, audit metadata for the versions it commits).

use crate::ErrorCode;
use serde_json::{Map, Value};
use std::any::Any;
use std::fmt;
use std::sync::Arc;

use cks_core::validate::ProvenanceKey;
use cks_llm::LlmClient;
use cks_runtime::store::StoreOpener;
use cks_runtime::store::opener::SqliteOnly;
use cks_runtime::{Runtime, Sweepers};
use tokio_util::sync::CancellationToken;

use crate::error::ToolError;
use crate::principal::Principal;
use crate::registry::Registry;
use cks_web::fetch::Fetcher;

/// How tools reach an LLM.
#[derive(Debug, Clone)]
pub enum LlmAccess {
    Ready(LlmClient),
    /// The LLM configuration is invalid; the message says why (never contains a secret).
    Misconfigured(String),
    /// No LLM client in this context (e.g. unit tests of graph tools).
    Absent,
}

impl LlmAccess {
    /// The client, or the `llm_provider_unavailable` error to return.
    pub fn client(&self) -> Result<&LlmClient, ToolError> {
        match self {
            LlmAccess::Ready(client) => Ok(client),
            LlmAccess::Misconfigured(message) => {
                Err(ToolError::new(ErrorCode::LlmProviderUnavailable, message.clone()))
            }
            LlmAccess::Absent => Err(ToolError::new(ErrorCode::LlmProviderUnavailable, "No LLM client is configured.")),
        }
    }
}

/// A fresh random key, for contexts the server did not give its configured one (tests, tools
/// run outside a server): nothing signed elsewhere verifies under it.
fn unguessable_key() -> ProvenanceKey {
    ProvenanceKey::new(rand::random::<[u8; 32]>().to_vec())
}

/// Receives progress reports of a long-running call (e.g. each LLM round trip of `ai_chat`).
pub trait ProgressSink: Send + Sync {
    fn report(&self, progress: f64, total: Option<f64>, message: Option<String>);
}

/// Per-call context handed to a tool handler.
#[derive(Clone)]
pub struct ToolContext {
    pub runtime: Arc<Runtime>,
    /// The LLM client for tools that call a model.
    pub llm: LlmAccess,
    /// The registry itself, for tools that call other tools (`ai_chat`).
    pub registry: Option<Arc<Registry>>,
    /// Reports progress to the caller, when the caller asked for it.
    pub progress: Option<Arc<dyn ProgressSink>>,
    /// What the caller watches the call with, for the one tool that knows its type (`ai_chat`'s
    /// event sink behind a streaming transport: `cks_chat::watch_with`); other tools ignore it.
    pub watcher: Option<Arc<dyn Any + Send + Sync>>,
    /// Cancelled when the caller gives up (e.g. MCP `notifications/cancelled`).
    pub cancel: CancellationToken,
    /// Metadata recorded on every version committed during this call (e.g. `ai_chat` provenance).
    pub audit: Map<String, Value>,
    /// The server's key for `VerificationRecord` signatures.
    pub provenance: Arc<ProvenanceKey>,
    /// The background sweepers, where the server runs them.
    pub sweepers: Option<Arc<Sweepers>>,
    /// The guarded HTTP client for the URLs tools are given (public addresses only, unless the
    /// server's configuration allows more).
    pub fetcher: Arc<Fetcher>,
    /// Opens the stores a tool is named (`migrate_storage`'s target); the binary's knows every
    /// store crate.
    pub stores: Arc<dyn StoreOpener>,
    /// Who makes the call, when an access token named them (HTTP with OAuth); `None` for the
    /// server's one local user (stdio, or a static HTTP token).
    pub principal: Option<Arc<Principal>>,
    /// The counters of the Critic running in this process, for `get_metrics`.
    pub critic_metrics: Arc<crate::critic_metrics::CriticMetrics>,
}

impl fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolContext").field("audit", &self.audit).finish_non_exhaustive()
    }
}

impl ToolContext {
    pub fn new(runtime: Arc<Runtime>) -> Self {
        ToolContext {
            runtime,
            llm: LlmAccess::Absent,
            registry: None,
            progress: None,
            watcher: None,
            cancel: CancellationToken::new(),
            audit: Map::new(),
            provenance: Arc::new(unguessable_key()),
            sweepers: None,
            fetcher: Arc::new(Fetcher::default()),
            stores: Arc::new(SqliteOnly),
            principal: None,
            critic_metrics: Arc::default(),
        }
    }

    /// Whether the caller may reach the session ([`crate::principal::reaches`]).
    pub async fn reaches(&self, session_id: &str) -> Result<bool, ToolError> {
        Ok(crate::principal::reaches(&self.runtime, self.principal.as_deref(), session_id).await?)
    }

    /// `id` when the caller may reach that session ([`crate::principal::reachable_id`]).
    pub async fn reachable_id(&self, id: Option<String>) -> Result<Option<String>, ToolError> {
        Ok(crate::principal::reachable_id(&self.runtime, self.principal.as_deref(), id).await?)
    }

    /// Sets to null what in `metadata` names a session the caller cannot reach
    /// ([`crate::principal::hide_unreachable_sessions`]).
    pub async fn hide_unreachable_sessions(&self, metadata: &mut Map<String, Value>) -> Result<(), ToolError> {
        Ok(crate::principal::hide_unreachable_sessions(&self.runtime, self.principal.as_deref(), metadata).await?)
    }

    /// Whether the caller's reach is limited: a principal without `cks:admin`.
    pub fn restricted(&self) -> bool {
        self.principal.as_ref().is_some_and(|principal| !principal.allows(crate::principal::Scope::Admin))
    }

    /// The items whose session the caller may reach, in order (what a listing across sessions
    /// shows). Each session is asked about once.
    pub async fn reachable<T>(&self, items: Vec<T>, session_of: impl Fn(&T) -> &str) -> Result<Vec<T>, ToolError> {
        if !self.restricted() {
            return Ok(items);
        }
        let mut known = std::collections::HashMap::new();
        let mut kept = Vec::with_capacity(items.len());
        for item in items {
            let id = session_of(&item).to_owned();
            let reaches = match known.get(&id) {
                Some(reaches) => *reaches,
                None => *known.entry(id.clone()).or_insert(self.reaches(&id).await?),
            };
            if reaches {
                kept.push(item);
            }
        }
        Ok(kept)
    }

    /// Metadata for a version committed by `tool`: the tool name, the call's audit entries, then
    /// the given extras. When the audit names an outer tool (e.g. `ai_chat` calling
    /// `evolve_knowledge`), `tool` is the outer one and `via_tool` the one that committed.
    pub fn version_metadata(
        &self,
        tool: &str,
        extra: impl IntoIterator<Item = (&'static str, Value)>,
    ) -> Map<String, Value> {
        let mut metadata = Map::new();
        metadata.insert("tool".into(), Value::String(tool.to_owned()));
        for (key, value) in &self.audit {
            if key == "tool" {
                metadata.insert("via_tool".into(), Value::String(tool.to_owned()));
            }
            metadata.insert(key.clone(), value.clone());
        }
        for (key, value) in extra {
            metadata.insert(key.to_owned(), value);
        }
        metadata
    }
}
