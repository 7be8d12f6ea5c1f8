//! MCP resources: the session list, a session's canonical JSON, its versions, and one version's
//! reconstructed structure.

use rmcp::model::{ErrorCode, ErrorData};
use serde_json::{Value, json};

use cks_core::json::to_canonical_string;
use cks_runtime::{Runtime, RuntimeError};

fn invalid(message: String) -> ErrorData {
    ErrorData::new(ErrorCode::INVALID_PARAMS, message, None)
}

fn internal(e: RuntimeError) -> ErrorData {
    ErrorData::new(ErrorCode::INTERNAL_ERROR, e.to_string(), None)
}

/// `resources/list`: the session list plus one entry per session.
pub(crate) async fn list(runtime: &Runtime) -> Result<Value, ErrorData> {
    let sessions = runtime
        .list_sessions()
        .await
        .map_err(|e| ErrorData::new(ErrorCode::INTERNAL_ERROR, format!("Failed to list resources: {e}"), None))?;
    let mut resources = vec![json!({
        "uri": "cks://sessions",
        "name": "sessions",
        "description": "All knowledge sessions with their version counts.",
        "mimeType": "application/json",
    })];
    for s in &sessions {
        resources.push(json!({
            "uri": format!("cks://sessions/{}", s.session_id),
            "name": format!("session {}", s.session_id),
            "description": format!("Current knowledge structure ({} objects, {} versions{}).", s.object_count, s.version_count, if s.closed { ", closed" } else { "" }),
            "mimeType": "application/json",
        }));
    }
    Ok(json!({
        "resources": resources,
        "resourceTemplates": [],
    }))
}

/// `resources/read`.
pub(crate) async fn read(runtime: &Runtime, uri: &str) -> Result<Value, ErrorData> {
    let not_found = || invalid(format!("Resource not found: {uri}"));
    let path = uri.strip_prefix("cks://sessions").ok_or_else(not_found)?;
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let map_err = |e: RuntimeError| match e {
        RuntimeError::SessionNotFound(_) | RuntimeError::VersionNotFound { .. } => not_found(),
        other => internal(other),
    };
    let text = match parts.as_slice() {
        [] => {
            let sessions = runtime.list_sessions().await.map_err(internal)?;
            let list: Vec<Value> = sessions
                .iter()
                .map(|s| json!({"session_id": s.session_id, "created": s.created_at, "version_count": s.version_count, "closed": s.closed, "parent_session_id": s.parent_session_id}))
                .collect();
            serde_json::to_string_pretty(&list).unwrap_or_default()
        }
        [id] => runtime.read(id, |s, _| to_canonical_string(s)).await.map_err(map_err)?,
        [id, "versions"] => {
            let versions = runtime.list_versions(id).await.map_err(map_err)?;
            serde_json::to_string_pretty(&versions).unwrap_or_default()
        }
        [id, "versions", version_id] => {
            let state = runtime.version_state(id, version_id).await.map_err(map_err)?;
            to_canonical_string(&state)
        }
        _ => return Err(not_found()),
    };
    Ok(json!({"contents": [{"uri": uri, "mimeType": "application/json", "text": text}]}))
}
