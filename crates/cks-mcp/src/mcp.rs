//! The rmcp adapter: MCP over stdio and streamable HTTP, backed by [`CksServer`].
//!
//! Progress: when a `tools/call` carries a `progressToken`, tool progress reports become
//! `notifications/progress`. Cancellation: rmcp cancels the request's token on
//! `notifications/cancelled`; tools watch it through their context.

use serde::de::DeserializeOwned;
use serde_json::Value;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ErrorCode, ErrorData, GetPromptRequestParams, GetPromptResponse,
    GetPromptResult, ListPromptsResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ProgressToken, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    ServerConfig,
};
use rmcp::service::{Peer, RequestContext};
use rmcp::{RoleServer, ServerHandler};

use cks_tools::ProgressSink;

use crate::server::{CallOptions, CksServer};

fn convert<T: DeserializeOwned>(value: Value) -> Result<T, ErrorData> {
    serde_json::from_value(value).map_err(|e| ErrorData::new(ErrorCode::INTERNAL_ERROR, e.to_string(), None))
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

impl ServerHandler for CksServer {
    fn get_info(&self) -> ServerConfig {
        convert(CksServer::initialize_result(None)).unwrap_or_default()
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        convert(serde_json::json!({"tools": self.tools()}))
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
        let options = CallOptions { progress, cancel: context.ct.clone() };
        let result = CksServer::call_tool(self, &request.name, request.arguments, options).await?;
        Ok(result.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let mut value = CksServer::list_resources(self).await?;
        if let Some(map) = value.as_object_mut() {
            map.remove("resourceTemplates");
        }
        convert(value)
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let result: ReadResourceResult = convert(CksServer::read_resource(self, &request.uri).await?)?;
        Ok(result.into())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        convert(CksServer::list_prompts(self))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let arguments = request.arguments.unwrap_or_default();
        let result: GetPromptResult = convert(CksServer::get_prompt(self, &request.name, &arguments)?)?;
        Ok(result.into())
    }
}
