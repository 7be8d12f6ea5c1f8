//! The reference's simple HTTP form: a JSON-RPC request (or batch) POSTed to `/mcp` without a
//! session or `initialize`, answered with plain JSON. This is how cks-studio calls tools.

use serde_json::{Map, Value, json};
use std::sync::Arc;
use tracing::Instrument as _;

use cks_tools::Principal;

use axum::http::{HeaderMap, StatusCode};
use rmcp::model::ErrorData;

use crate::server::{CallOptions, CksServer};

/// Whether the body is a single `initialize` request.
pub(super) fn is_initialize(body: &[u8]) -> bool {
    serde_json::from_slice::<Value>(body).is_ok_and(|v| v.get("method").and_then(Value::as_str) == Some("initialize"))
}

/// Answers a body; `None` when it held only notifications. A body that is not JSON is answered
/// with status 400, as the reference does; everything else with 200. Tool calls run for
/// `principal`, when a token named one.
pub(super) async fn handle(
    server: &CksServer,
    body: &[u8],
    principal: Option<Arc<Principal>>,
    headers: &HeaderMap,
) -> (StatusCode, Option<String>) {
    let message: Value = match serde_json::from_slice(body) {
        Ok(message) => message,
        Err(_) => return (StatusCode::BAD_REQUEST, Some(error(Value::Null, -32700, "Parse error").to_string())),
    };
    (StatusCode::OK, answer(server, message, principal, headers).await)
}

async fn answer(
    server: &CksServer,
    message: Value,
    principal: Option<Arc<Principal>>,
    headers: &HeaderMap,
) -> Option<String> {
    match message {
        Value::Array(batch) if batch.is_empty() => {
            Some(error(Value::Null, -32600, "Invalid Request: empty batch").to_string())
        }
        Value::Array(batch) => {
            let mut replies = Vec::new();
            for message in batch {
                if let Some(reply) = dispatch(server, message, principal.clone(), headers).await {
                    replies.push(reply);
                }
            }
            (!replies.is_empty()).then(|| Value::Array(replies).to_string())
        }
        message => dispatch(server, message, principal, headers).await.map(|r| r.to_string()),
    }
}

fn error(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

fn from_error_data(id: Value, e: ErrorData) -> Value {
    let mut body = json!({"code": e.code.0, "message": e.message});
    if let Some(data) = e.data {
        body["data"] = data;
    }
    json!({"jsonrpc": "2.0", "id": id, "error": body})
}

async fn dispatch(
    server: &CksServer,
    message: Value,
    principal: Option<Arc<Principal>>,
    headers: &HeaderMap,
) -> Option<Value> {
    let Value::Object(mut request) = message else { return Some(error(Value::Null, -32600, "Invalid Request")) };
    let Some(Value::String(method)) = request.remove("method") else {
        // A response from the client, or garbage: neither needs an answer here.
        return request.contains_key("id").then(|| error(request["id"].clone(), -32600, "Invalid Request: no method"));
    };
    let id = request.remove("id")?; // none: a notification, which gets no answer
    let params = match request.remove("params") {
        Some(Value::Object(params)) => params,
        None | Some(Value::Null) => Map::new(),
        Some(_) => return Some(error(id, -32602, "Invalid params: expected an object")),
    };
    let result = match method.as_str() {
        "initialize" => Ok(CksServer::initialize_result(params.get("protocolVersion").and_then(Value::as_str))),
        "ping" => Ok(json!({})),
        "tools/list" => Ok(json!({"tools": server.listed_tools(&Default::default())})),
        "tools/call" => {
            let Some(name) = params.get("name").and_then(Value::as_str) else {
                return Some(error(id, -32602, "Invalid params: missing tool name"));
            };
            let arguments = match params.get("arguments") {
                Some(Value::Object(args)) => Some(args.clone()),
                None | Some(Value::Null) => None,
                Some(_) => return Some(error(id, -32602, "Invalid params: 'arguments' must be an object")),
            };
            let meta = params.get("_meta").and_then(Value::as_object);
            let carrier = crate::telemetry::Carrier { meta, headers: Some(headers) };
            let span = crate::server::request_span(&id.to_string(), None, principal.as_deref(), name, carrier);
            server
                .call_tool(name, arguments, CallOptions { principal, ..CallOptions::default() })
                .instrument(span.clone())
                .await
                .map(|result| {
                    crate::server::note_outcome(&span, &result);
                    serde_json::to_value(result).unwrap_or(Value::Null)
                })
        }
        "resources/list" => server.list_resources(principal.as_deref()).await,
        "resources/templates/list" => Ok(json!({"resourceTemplates": crate::resources::templates()})),
        "completion/complete" => match serde_json::from_value(Value::Object(params)) {
            Ok(request) => crate::completions::answer(&server.runtime, request, principal.as_deref())
                .await
                .map(|result| serde_json::to_value(result).unwrap_or(Value::Null)),
            Err(e) => return Some(error(id, -32602, &format!("Invalid params: {e}"))),
        },
        // Accepted; plain JSON answers carry no log messages.
        "logging/setLevel" => Ok(json!({})),
        "resources/read" => match params.get("uri").and_then(Value::as_str) {
            Some(uri) => server.read_resource(uri, principal.as_deref()).await,
            None => return Some(error(id, -32602, "Missing required parameter: uri")),
        },
        "prompts/list" => Ok(server.list_prompts()),
        "prompts/get" => match params.get("name").and_then(Value::as_str) {
            Some(name) => {
                let arguments = params.get("arguments").and_then(Value::as_object).cloned().unwrap_or_default();
                server.get_prompt(name, &arguments)
            }
            None => return Some(error(id, -32602, "Missing required parameter: name")),
        },
        other => return Some(error(id, -32601, &format!("Method not found: {other}"))),
    };
    Some(match result {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(e) => from_error_data(id, e),
    })
}
