//! The rmcp adapter: MCP over stdio and streamable HTTP, backed by [`CksServer`].
//!
//! Progress: when a `tools/call` carries a `progressToken`, tool progress reports become
//! `notifications/progress`. Cancellation: rmcp cancels the request's token on
//! `notifications/cancelled`; tools watch it through their context.
//!
//! Protocol revisions: every revision rmcp knows, 2026-07-28 included. rmcp negotiates the
//! revision (an `initialize` handshake, or a `server/discover` and per-request `_meta` from
//! 2026-07-28 on), checks per-request metadata and strips what an older revision lacks. Results
//! here are therefore built in their newest shape: each says it is complete (`resultType`), and
//! on 2026-07-28 each list says how long a client may keep it (`ttlMs`, `cacheScope`).
//!
//! Logging: each tool call's log line (the tool, its time, its outcome) goes to the client as
//! `notifications/message` at or above the level it chose: with `logging/setLevel` for the rest of
//! its session on a handshake revision, or per request (`_meta` `io.modelcontextprotocol/logLevel`)
//! on 2026-07-28, which has no `logging/setLevel`.
//!
//! Over HTTP, a session's calls and its chosen level are known to every replica (`sessions.rs`).

use serde::de::DeserializeOwned;
use serde_json::Value;
use std::sync::Arc;

use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CompleteRequestParams, CompleteResult, ErrorCode, ErrorData,
    GetPromptRequestParams, GetPromptResponse, GetPromptResult, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ProgressToken,
    ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, ResultType, ServerConfig,
};
use rmcp::model::{CancelTaskParams, GetTaskParams, GetTaskResult, UpdateTaskParams};
use rmcp::model::{CustomNotification, SubscribeRequestParams, SubscriptionFilter, UnsubscribeRequestParams};
#[allow(deprecated)] // logging is deprecated from 2026-07-28 on, and spoken until then
use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam, SetLevelRequestParams};
use rmcp::service::{NotificationContext, Peer, RequestContext, SubscriptionContext};
use rmcp::{RoleServer, ServerHandler};

use cks_tools::{ErrorCode as ToolErrorCode, ProgressSink, ToolError};
use tracing::Instrument as _;

use crate::limits::{Admission, CHAT_TOOL, Key};
use crate::server::{CallOptions, CksServer};
use crate::sessions;
use crate::{approvals, completions, subscriptions};

fn convert<T: DeserializeOwned>(value: Value) -> Result<T, ErrorData> {
    serde_json::from_value(value).map_err(|e| ErrorData::new(ErrorCode::INTERNAL_ERROR, e.to_string(), None))
}

/// How long a client may keep the tool and prompt lists (2026-07-28 `ttlMs`). They change only
/// when the server is upgraded; a few minutes bounds how long a replica behind a load balancer
/// that was upgraded first and one that was not can disagree in a client's cache.
const FIXED_LIST_TTL_MS: u64 = 300_000;

/// A result in its newest shape: complete (rmcp drops `resultType` for a client of an older
/// revision), with its cache hints where it has them, on the revision that has them.
fn newest_shape(value: Value, ttl_ms: Option<u64>, context: &RequestContext<RoleServer>) -> Value {
    let mut value = value;
    if let Some(map) = value.as_object_mut() {
        map.insert("resultType".into(), Value::from(ResultType::COMPLETE.as_str()));
        if let Some(ttl_ms) = ttl_ms.filter(|_| is_stateless(context)) {
            map.insert("ttlMs".into(), Value::from(ttl_ms));
            // Private: what a list holds will depend on who asks once callers have identities.
            map.insert("cacheScope".into(), serde_json::to_value(CacheScope::Private).unwrap_or_default());
        }
    }
    value
}

/// Sends progress notifications for one request.
struct PeerProgress {
    peer: Peer<RoleServer>,
    token: ProgressToken,
}

impl ProgressSink for PeerProgress {
    fn report(&self, progress: f64, total: Option<f64>, message: Option<String>) {
        let peer = self.peer.clone();
        let mut param = ProgressNotificationParam::new(self.token.clone(), progress);
        param.total = total;
        param.message = message;
        // Notifications are fire-and-forget; a client that went away is not an error here.
        tokio::spawn(async move {
            let _ = peer.notify_progress(param).await;
        });
    }
}

/// Whether the request is of the stateless revision (2026-07-28 or later).
fn is_stateless(context: &RequestContext<RoleServer>) -> bool {
    context.protocol_version().is_some_and(|v| !v.has_initialize())
}

/// A level's rank: a message goes out at or above the level chosen.
#[allow(deprecated)]
fn rank(level: LoggingLevel) -> u8 {
    level as u8
}

/// Sends one call's log line to the client, as the server's log has it, when its level is at or
/// above `chosen`: a failed call is a warning, any other an info.
#[allow(deprecated)]
async fn log_call(
    context: &RequestContext<RoleServer>,
    chosen: LoggingLevel,
    tool: &str,
    took: std::time::Duration,
    result: &rmcp::model::CallToolResult,
) {
    let failed = result.is_error == Some(true);
    let level = if failed { LoggingLevel::Warning } else { LoggingLevel::Info };
    if rank(level) < rank(chosen) {
        return;
    }
    let error = result.structured_content.as_ref().and_then(|v| v.get("error")).cloned();
    let data = serde_json::json!({
        "tool": tool,
        "duration_ms": took.as_secs_f64() * 1000.0,
        "outcome": if failed { "error" } else { "ok" },
        "error": error,
    });
    let mut message = LoggingMessageNotificationParam::new(level, data);
    message.logger = Some("cks_tool_call".into());
    // Sent before the answer, which ends the request's stream over HTTP. A client that went
    // away is not an error here.
    let _ = context.peer.notify_logging_message(message).await;
}

impl CksServer {
    /// The level this request's log lines go out at, if any: the request's own on 2026-07-28,
    /// the session's before (over HTTP, as the session's record has it: it may have been chosen
    /// on another replica).
    #[allow(deprecated)]
    async fn log_level(&self, context: &RequestContext<RoleServer>) -> Option<LoggingLevel> {
        if is_stateless(context) {
            return context.meta.log_level();
        }
        match sessions::session_of(context) {
            Some(session) => self.records.log_level(&session).await,
            None => self.client().log_level(),
        }
    }
}

impl CksServer {
    /// Runs a call, and while its result waits for the user's approval of a destructive call and
    /// the client can ask its user, asks and continues (`approvals.rs`): in this request before
    /// 2026-07-28, through an `input_required` result and the client's retry from then on.
    async fn call_asking(
        &self,
        request: &CallToolRequestParams,
        options: CallOptions,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = request.arguments.clone().unwrap_or_default();
        let (mut result, mut earlier) = match self.states.resume(request)? {
            Some((waiting, answer)) => match approvals::decision(&answer) {
                Some(decision) => {
                    let next = approvals::continuation(&arguments, &waiting, decision);
                    (CksServer::call_tool(self, &request.name, Some(next), options.clone()).await?, Some(waiting))
                }
                // Dismissed: the turn waits, as it would for a client that cannot ask.
                None => return Ok(self.result_of(waiting).into()),
            },
            None => {
                (CksServer::call_tool(self, &request.name, request.arguments.clone(), options.clone()).await?, None)
            }
        };
        loop {
            if let Some(before) = earlier.take() {
                result =
                    self.result_of(approvals::joined(&before, result.structured_content.take().unwrap_or_default()));
            }
            let Some(pending) = approvals::waiting(&result).cloned() else { break };
            if !approvals::client_asks(context) {
                break;
            }
            let waiting = result.structured_content.clone().unwrap_or_default();
            if is_stateless(context) {
                return Ok(self.states.ask(request, &waiting)?.into());
            }
            let Some(decision) = approvals::ask_client(context, &pending).await.as_ref().and_then(approvals::decision)
            else {
                break;
            };
            let next = approvals::continuation(&arguments, &waiting, decision);
            result = CksServer::call_tool(self, &request.name, Some(next), options.clone()).await?;
            earlier = Some(waiting);
        }
        Ok(result.into())
    }
}

impl CksServer {
    /// Admits a call that no HTTP request admitted (over stdio), counted as a request too when
    /// `a_request`; over a limit, the business error to answer.
    fn admit_here(
        &self,
        tool: &str,
        principal: Option<&cks_tools::Principal>,
        a_request: bool,
    ) -> Result<Arc<Admission>, rmcp::model::CallToolResult> {
        let key = Key::of(principal);
        let counted = if a_request { self.limits.request(&key) } else { Ok(()) };
        let admitted = counted.and_then(|()| self.limits.call(key, tool == CHAT_TOOL));
        admitted.map(Arc::new).map_err(|refusal| {
            let error = ToolError::new(ToolErrorCode::RateLimited, refusal.message())
                .with("limit", refusal.limit.as_str())
                .with("value", refusal.value);
            self.result_of(error.to_value())
        })
    }

    /// The tools the client found beyond its profile (none on the stateless revision, which keeps
    /// nothing between requests).
    async fn found_tools(&self, context: &RequestContext<RoleServer>) -> std::collections::BTreeSet<String> {
        if is_stateless(context) {
            return Default::default();
        }
        match sessions::session_of(context) {
            Some(session) => self.records.found_tools(&session).await,
            None => self.client().found(),
        }
    }

    /// After a `find_tools` call: the tools it found with their schemas join the client's list,
    /// and a client that follows list changes is told, so a host can offer them to its model.
    async fn list_found(&self, tool: &str, result: &rmcp::model::CallToolResult, context: &RequestContext<RoleServer>) {
        if tool != "find_tools" || result.is_error == Some(true) || is_stateless(context) {
            return;
        }
        let names: Vec<String> = result
            .structured_content
            .as_ref()
            .and_then(|found| found["tools"].as_array())
            .into_iter()
            .flatten()
            .filter(|found| found.get("inputSchema").is_some())
            .filter_map(|found| found["name"].as_str())
            .filter(|name| self.unlisted(name))
            .map(str::to_owned)
            .collect();
        if names.is_empty() {
            return;
        }
        let added = match sessions::session_of(context) {
            Some(session) => self.records.add_found_tools(&session, &names).await.unwrap_or(false),
            None => self.client().add_found(&names),
        };
        if added {
            // A client that went away, or ignores the notification, is not an error here.
            let _ = context.peer.notify_tool_list_changed().await;
        }
    }

    /// Adds a resource to the client's subscriptions, or takes it out: in the session's record
    /// over HTTP, for whichever replica holds the session's stream.
    async fn subscribed(
        &self,
        uri: &str,
        subscribed: bool,
        context: &RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        if subscribed {
            if !subscriptions::subscribable(uri) {
                return Err(ErrorData::invalid_params(format!("Resource not found or never changes: {uri}"), None));
            }
            // A session's resources exist while it is open.
            CksServer::read_resource_exists(self, uri, principal_of(context).as_deref()).await?;
        }
        match sessions::session_of(context) {
            Some(session) => {
                self.records
                    .set_subscribed(&session, uri, subscribed)
                    .await
                    .map_err(|e| ErrorData::new(ErrorCode::INTERNAL_ERROR, e.to_string(), None))?;
            }
            None if subscribed => self.client().subscribed.add(uri.to_owned()),
            None => self.client().subscribed.remove(uri),
        }
        Ok(())
    }
}

impl ServerHandler for CksServer {
    fn get_info(&self) -> ServerConfig {
        convert(CksServer::initialize_result(None)).unwrap_or_default()
    }

    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        std::borrow::Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2026_07_28))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        // Typed, not through `newest_shape`: the entries' schemas are shared, not copied per list.
        let found = self.found_tools(&context).await;
        let mut list = ListToolsResult::with_all_items(self.listed_tools(&found));
        if is_stateless(&context) {
            list.ttl_ms = Some(FIXED_LIST_TTL_MS);
            list.cache_scope = Some(CacheScope::Private);
        }
        Ok(list)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let progress = context
            .meta
            .get_progress_token()
            .map(|token| Arc::new(PeerProgress { peer: context.peer.clone(), token }) as Arc<dyn ProgressSink>);
        let principal = principal_of(&context);
        // Over HTTP the request was counted and the call admitted before it got here (`http.rs`);
        // over stdio, each call is a request.
        let parts = context.extensions.get::<axum::http::request::Parts>();
        let admission = match parts.and_then(|parts| parts.extensions.get::<Arc<Admission>>()) {
            Some(admission) => admission.clone(),
            None => match self.admit_here(&request.name, principal.as_deref(), parts.is_none()) {
                Ok(admission) => admission,
                Err(refused) => return Ok(refused.into()),
            },
        };
        let options = CallOptions { progress, cancel: context.ct.clone(), principal };
        let _running = sessions::session_of(&context)
            .map(|session| self.calls.run(session, sessions::request_key(&context.id), context.ct.clone()));
        let headers = context.extensions.get::<axum::http::request::Parts>().map(|parts| &parts.headers);
        let span = crate::server::request_span(
            &sessions::request_key(&context.id),
            sessions::session_of(&context).as_deref(),
            options.principal.as_deref(),
            &request.name,
            crate::telemetry::Carrier { meta: Some(&context.meta), headers },
        );
        if crate::tasks::runs_as_task(&request, &context) {
            // The task's work stays in the call's span (and trace).
            return self.start_task(request, options.principal, admission).instrument(span).await;
        }
        let log_level = self.log_level(&context).await;
        let started = std::time::Instant::now();
        let response = self.call_asking(&request, options, &context).instrument(span.clone()).await?;
        if let CallToolResponse::Complete(result) = &response {
            crate::server::note_outcome(&span, result);
        }
        if let (Some(chosen), CallToolResponse::Complete(result)) = (log_level, &response) {
            log_call(&context, chosen, &request.name, started.elapsed(), result).await;
        }
        if let CallToolResponse::Complete(result) = &response {
            self.list_found(&request.name, result, &context).await;
        }
        Ok(response)
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        CksServer::get_task(self, request, principal_of(&context).as_deref()).await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        CksServer::cancel_task(self, request, principal_of(&context).as_deref()).await
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        CksServer::update_task(self, request, principal_of(&context).as_deref()).await
    }

    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        if is_stateless(&context) {
            return Err(ErrorData::method_not_found::<rmcp::model::SetLevelRequestMethod>());
        }
        match sessions::session_of(&context) {
            // Kept with the session, for the replica that serves its next call.
            Some(session) => {
                self.records
                    .set_log_level(&session, request.level)
                    .await
                    .map_err(|e| ErrorData::new(ErrorCode::INTERNAL_ERROR, e.to_string(), None))?;
            }
            None => self.client().set_log_level(request.level),
        }
        Ok(())
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.subscribed(&request.uri, true, &context).await
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.subscribed(&request.uri, false, &context).await
    }

    fn accepted_subscription_filter(&self, requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        let mut accepted = SubscriptionFilter::new();
        accepted.resource_subscriptions = requested
            .resource_subscriptions
            .as_ref()
            .map(|uris| uris.iter().filter(|uri| subscriptions::subscribable(uri)).cloned().collect());
        Some(accepted)
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let mut events = self.runtime.subscribe();
        loop {
            let event = tokio::select! {
                () = context.cancelled() => return Ok(()),
                event = events.recv() => event,
            };
            match event {
                Ok(event) => {
                    for uri in subscriptions::changes(&event.kind).uris {
                        // The sink keeps to what the subscription accepted.
                        let _ = context.sink().notify_resource_updated(uri).await;
                    }
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return Ok(()),
            }
        }
    }

    async fn on_custom_notification(&self, notification: CustomNotification, context: NotificationContext<RoleServer>) {
        if notification.method == sessions::STREAM_OPENED
            && let Some(session) = sessions::session_in(&context.extensions)
        {
            self.streams.note_peer(&session, &context.peer);
        }
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        completions::answer(&self.runtime, request, principal_of(&context).as_deref()).await
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let templates = serde_json::json!({"resourceTemplates": crate::resources::templates()});
        convert(newest_shape(templates, Some(FIXED_LIST_TTL_MS), &context))
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let mut value = CksServer::list_resources(self, principal_of(&context).as_deref()).await?;
        if let Some(map) = value.as_object_mut() {
            map.remove("resourceTemplates");
        }
        // The session list changes with every new session.
        convert(newest_shape(value, Some(0), &context))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        // A session changes with every commit.
        let result: ReadResourceResult = convert(newest_shape(
            CksServer::read_resource(self, &request.uri, principal_of(&context).as_deref()).await?,
            Some(0),
            &context,
        ))?;
        Ok(result.into())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        convert(newest_shape(CksServer::list_prompts(self), Some(FIXED_LIST_TTL_MS), &context))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let arguments = request.arguments.unwrap_or_default();
        let result: GetPromptResult =
            convert(newest_shape(CksServer::get_prompt(self, &request.name, &arguments)?, None, &context))?;
        Ok(result.into())
    }
}

/// The principal the request's access token named (HTTP with OAuth); `None` otherwise.
fn principal_of(context: &RequestContext<RoleServer>) -> Option<Arc<cks_tools::Principal>> {
    context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Arc<cks_tools::Principal>>())
        .cloned()
}
