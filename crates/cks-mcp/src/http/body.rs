//! Request bodies at `/mcp`: read under the size limit (an over-size body is refused with a
//! JSON-RPC error naming the limit and, when it can be read from the part received, the request's
//! id), and checked to be a JSON-RPC message before rmcp sees them, so a client always gets a
//! JSON-RPC error answer rather than a bare status line.

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::BytesMut;
use futures::StreamExt;
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::{Value, json};

use crate::stdio::framing::IdScanner;

/// JSON-RPC: the text is not JSON.
const PARSE_ERROR: i64 = -32700;
/// JSON-RPC: JSON, but not a usable message (also: over the size limit).
const INVALID_REQUEST: i64 = -32600;

/// A JSON-RPC error answer with an HTTP status.
pub(super) fn error_response(status: StatusCode, id: Option<Value>, code: i64, message: &str) -> Response {
    let body = json!({"jsonrpc": "2.0", "id": id.unwrap_or(Value::Null), "error": {"code": code, "message": message}});
    (status, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

/// Reads the whole body if it is at most `limit` bytes; otherwise the answer to send.
pub(super) async fn read(body: Body, limit: usize) -> Result<Bytes, Response> {
    let mut stream = body.into_data_stream();
    let mut buf = BytesMut::new();
    while let Some(chunk) = stream.next().await {
        let Ok(chunk) = chunk else {
            return Err(error_response(
                StatusCode::BAD_REQUEST,
                None,
                PARSE_ERROR,
                "Parse error: the body could not be read",
            ));
        };
        if buf.len() + chunk.len() > limit {
            // The id usually comes first; what arrived is enough to name most requests.
            let mut scanner = IdScanner::default();
            scanner.feed(&buf);
            scanner.feed(&chunk);
            let message = format!("Message too large: the limit is {limit} bytes (CKS_MCP_MAX_MESSAGE_BYTES)");
            return Err(error_response(StatusCode::PAYLOAD_TOO_LARGE, scanner.id(), INVALID_REQUEST, &message));
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}

/// The first revision without sessions: its requests carry their own protocol version.
const FIRST_STATELESS_REVISION: &str = "2026-07-28";

/// What tells a request of the stateless revision apart; everything else is skipped.
#[derive(Deserialize)]
struct Revision {
    method: Option<String>,
    params: Option<RevisionParams>,
}

#[derive(Deserialize)]
struct RevisionParams {
    #[serde(rename = "_meta")]
    meta: Option<RevisionMeta>,
}

#[derive(Deserialize)]
struct RevisionMeta {
    #[serde(rename = "io.modelcontextprotocol/protocolVersion")]
    protocol_version: Option<IgnoredAny>,
}

/// Whether a POST without a session speaks the stateless revision (2026-07-28 or newer): a
/// `server/discover`, a request naming its revision in `_meta`, or a `MCP-Protocol-Version`
/// header of that revision or later. rmcp answers those; a body that is none of them is the
/// reference's bare form, or a handshake.
pub(super) fn is_stateless_revision(headers: &HeaderMap, body: &[u8]) -> bool {
    let header = headers.get("mcp-protocol-version").and_then(|v| v.to_str().ok());
    // Revisions are dates: they order as text.
    if header.is_some_and(|version| version >= FIRST_STATELESS_REVISION) {
        return true;
    }
    serde_json::from_slice::<Revision>(body).is_ok_and(|request| {
        request.method.as_deref() == Some("server/discover")
            || request.params.and_then(|p| p.meta).is_some_and(|meta| meta.protocol_version.is_some())
    })
}

/// What a `notifications/cancelled` says; everything else is skipped.
#[derive(Deserialize)]
struct Cancelled {
    method: Option<String>,
    params: Option<CancelledParams>,
}

#[derive(Deserialize)]
struct CancelledParams {
    #[serde(rename = "requestId")]
    request_id: Option<rmcp::model::RequestId>,
}

/// The request a `notifications/cancelled` names (as [`crate::sessions::request_key`] writes
/// it), when the body is one.
pub(super) fn cancelled_request(body: &[u8]) -> Option<String> {
    // Most bodies are not: they are told apart without being parsed.
    memchr::memmem::find(body, b"notifications/cancelled")?;
    let message: Cancelled = serde_json::from_slice(body).ok()?;
    if message.method.as_deref() != Some("notifications/cancelled") {
        return None;
    }
    message.params?.request_id.as_ref().map(crate::sessions::request_key)
}

/// The fields that make a JSON-RPC message; everything else is skipped without being built.
#[derive(Deserialize)]
struct Envelope {
    jsonrpc: Option<String>,
    id: Option<Value>,
    method: Option<String>,
    result: Option<IgnoredAny>,
    error: Option<IgnoredAny>,
}

/// `None` when `body` is one JSON-RPC message; otherwise the error answer.
pub(super) fn check_message(body: &[u8]) -> Option<Response> {
    let envelope = match serde_json::from_slice::<Envelope>(body) {
        Ok(envelope) => envelope,
        Err(e) if e.is_syntax() || e.is_eof() => {
            return Some(error_response(StatusCode::BAD_REQUEST, None, PARSE_ERROR, &format!("Parse error: {e}")));
        }
        Err(e) => {
            let message = format!("Invalid Request: {e}");
            return Some(error_response(StatusCode::BAD_REQUEST, None, INVALID_REQUEST, &message));
        }
    };
    // serde would also read the fields from an array; a session takes one message, never a batch.
    if body.trim_ascii_start().first() != Some(&b'{') {
        let message = "Invalid Request: expected one JSON-RPC message object";
        return Some(error_response(StatusCode::BAD_REQUEST, None, INVALID_REQUEST, message));
    }
    let id = envelope.id.filter(|id| id.is_string() || id.is_number());
    let problem = if envelope.jsonrpc.as_deref() != Some("2.0") {
        Some("'jsonrpc' must be \"2.0\"")
    } else if envelope.method.is_none() && (id.is_none() || (envelope.result.is_none() && envelope.error.is_none())) {
        Some("no 'method' (nor a result or error answering an id)")
    } else {
        None
    };
    problem.map(|p| error_response(StatusCode::BAD_REQUEST, id, INVALID_REQUEST, &format!("Invalid Request: {p}")))
}

/// The tool calls a body makes: what their scope (`auth/scopes.rs`) and the caller's limits
/// (`limits.rs`) are judged by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ToolCalls {
    /// Each call's tool; `None` for a call naming none.
    pub(super) names: Vec<Option<String>>,
}

impl ToolCalls {
    /// Whether one of them is an `ai_chat` turn.
    pub(super) fn chat(&self) -> bool {
        self.names.iter().any(|name| name.as_deref() == Some(crate::limits::CHAT_TOOL))
    }
}

/// What tells a `tools/call` and its tool apart; everything else is skipped.
#[derive(Deserialize)]
struct Call<'a> {
    #[serde(borrow)]
    method: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow)]
    params: Option<CallParams<'a>>,
}

#[derive(Deserialize)]
struct CallParams<'a> {
    #[serde(borrow)]
    name: Option<std::borrow::Cow<'a, str>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Calls<'a> {
    #[serde(borrow)]
    One(Call<'a>),
    #[serde(borrow)]
    Batch(Vec<Call<'a>>),
}

/// The tool calls in a body (one message or a batch, whose calls run one after another: they
/// count as one call in flight); `None` when it makes none, or is not JSON-RPC (its handler
/// refuses it).
pub(super) fn tool_calls(body: &[u8]) -> Option<ToolCalls> {
    // Most bodies make none: they are told apart without being parsed. (A name spelled with
    // escapes needs a backslash.)
    if memchr::memmem::find(body, b"tools/call").is_none() && memchr::memchr(b'\\', body).is_none() {
        return None;
    }
    let names: Vec<Option<String>> = match serde_json::from_slice::<Calls>(body) {
        Ok(Calls::One(call)) => vec![call_name(call.method.as_deref(), call.params.and_then(|p| p.name).as_deref())?],
        Ok(Calls::Batch(calls)) => calls
            .iter()
            .filter_map(|c| call_name(c.method.as_deref(), c.params.as_ref().and_then(|p| p.name.as_deref())))
            .collect(),
        // Read as the handlers read it (a repeated key's last value counts), so what counts is what runs.
        Err(_) => {
            let of = |v: &Value| call_name(v["method"].as_str(), v.pointer("/params/name").and_then(Value::as_str));
            match serde_json::from_slice::<Value>(body).ok()? {
                Value::Array(batch) => batch.iter().filter_map(of).collect(),
                one => vec![of(&one)?],
            }
        }
    };
    (!names.is_empty()).then_some(ToolCalls { names })
}

/// A `tools/call`'s tool name (`Some(None)` when it names none); `None` for any other message.
fn call_name(method: Option<&str>, name: Option<&str>) -> Option<Option<String>> {
    (method == Some("tools/call")).then(|| name.map(str::to_owned))
}

#[cfg(test)]
mod tests {
    use super::tool_calls;

    #[test]
    fn tool_calls_are_found_in_one_message_and_in_batches() {
        let call =
            |name: &str| format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"{name}"}}}}"#);
        let names = |body: &[u8]| tool_calls(body).map(|calls| calls.names);
        let named = |names: &[&str]| Some(names.iter().map(|n| Some(n.to_string())).collect::<Vec<_>>());
        assert_eq!(names(call("list_versions").as_bytes()), named(&["list_versions"]));
        assert!(!tool_calls(call("list_versions").as_bytes()).unwrap().chat());
        assert!(tool_calls(call("ai_chat").as_bytes()).unwrap().chat());
        let batch = format!(r#"[{}, {{"jsonrpc":"2.0","id":2,"method":"ping"}}, {}]"#, call("a"), call("ai_chat"));
        assert_eq!(names(batch.as_bytes()), named(&["a", "ai_chat"]), "a batch's calls, and only them");
        assert_eq!(names(br#"{"method":"tools/call","params":{}}"#), Some(vec![None]), "a call naming no tool");
        assert_eq!(tool_calls(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#), None);
        assert_eq!(tool_calls(br#"{"method":"ping","params":{"name":"tools/call"}}"#), None);
        assert_eq!(tool_calls(b"{tools/call"), None);
        let repeated = br#"{"method":"tools/call","params":{"name":"list_versions","name":"ai_chat"}}"#;
        assert_eq!(names(repeated), named(&["ai_chat"]), "the last of a repeated key counts, as it runs");
        let escaped = br#"{"method":"tools\/call","params":{"name":"ai_\u0063hat"}}"#;
        assert_eq!(names(escaped), named(&["ai_chat"]), "escapes hide nothing");
    }
}
