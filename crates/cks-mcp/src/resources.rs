//! MCP resources: the session list, a session's canonical JSON, its versions, and one version's
//! reconstructed structure; and the MCP Apps view (`apps.rs`), which holds no data. Closed
//! sessions are not listed and cannot be read; with a principal, neither can sessions it may not
//! reach (as for the tools: they are not found), and no resource names one: a parent it may not
//! reach is null, as is such a session in a version's metadata.

use rmcp::model::{ErrorCode, ErrorData};
use serde_json::{Value, json};

use cks_runtime::{Runtime, RuntimeError};
use cks_tools::Principal;
use cks_tools::convert::client_document;
use cks_tools::principal::{hide_unreachable_sessions, reachable_id, reaches};

fn invalid(message: String) -> ErrorData {
    ErrorData::new(ErrorCode::INVALID_PARAMS, message, None)
}

fn internal(e: RuntimeError) -> ErrorData {
    ErrorData::new(ErrorCode::INTERNAL_ERROR, e.to_string(), None)
}

/// `resources/list`: the session list, the MCP Apps view, then for each open session its
/// structure, its version list and each of its versions.
pub(crate) async fn list(runtime: &Runtime, principal: Option<&Principal>) -> Result<Value, ErrorData> {
    let failed =
        |e: RuntimeError| ErrorData::new(ErrorCode::INTERNAL_ERROR, format!("Failed to list resources: {e}"), None);
    let sessions = runtime.list_sessions().await.map_err(failed)?;
    let mut resources = vec![json!({
        "uri": "cks://sessions",
        "name": "CKS Sessions",
        "description": "All open knowledge sessions with their version counts.",
        "mimeType": "application/json",
    })];
    resources.push(crate::apps::resource());
    for s in sessions.iter().filter(|s| !s.closed) {
        let sid = &s.session_id;
        if !reaches(runtime, principal, sid).await.map_err(failed)? {
            continue;
        }
        resources.push(json!({
            "uri": format!("cks://sessions/{sid}"),
            "name": format!("Session {}…", short(sid)),
            "description": format!("Knowledge structure of session {sid} ({} objects, {} versions).", s.object_count, s.version_count),
            "mimeType": "application/json",
        }));
        resources.push(json!({
            "uri": format!("cks://sessions/{sid}/versions"),
            "name": format!("Versions of {}…", short(sid)),
            "description": format!("Version history of session {sid}."),
            "mimeType": "application/json",
        }));
        let versions = match runtime.list_versions(sid).await {
            Ok(versions) => versions,
            // Closed or removed since the session list was read.
            Err(RuntimeError::SessionNotFound(_)) => continue,
            Err(e) => return Err(failed(e)),
        };
        for v in versions {
            resources.push(json!({
                "uri": format!("cks://sessions/{sid}/versions/{}", v.version_id),
                "name": format!("Version {}…", short(&v.version_id)),
                "description": format!("Snapshot of session {sid} at version {}.", v.version_id),
                "mimeType": "application/json",
            }));
        }
    }
    Ok(json!({
        "resources": resources,
        "resourceTemplates": [],
    }))
}

/// The resource templates: a session, its version list, one of its versions.
const TEMPLATES: [(&str, &str, &str); 3] = [
    ("cks://sessions/{session_id}", "Session", "The knowledge structure of a session."),
    ("cks://sessions/{session_id}/versions", "Session versions", "The version history of a session."),
    ("cks://sessions/{session_id}/versions/{version_id}", "Session version", "A session's structure at one version."),
];

/// `resources/templates/list` entries.
pub(crate) fn templates() -> Vec<Value> {
    TEMPLATES
        .iter()
        .map(|(uri, name, description)| {
            json!({"uriTemplate": uri, "name": name, "description": description, "mimeType": "application/json"})
        })
        .collect()
}

/// Whether the template `uri` has the variable `variable`.
pub(crate) fn has_variable(uri: &str, variable: &str) -> bool {
    TEMPLATES.iter().any(|(template, _, _)| *template == uri && template.contains(&format!("{{{variable}}}")))
}

/// The first 8 characters of an id, for display names.
fn short(id: &str) -> &str {
    id.char_indices().nth(8).map_or(id, |(i, _)| &id[..i])
}

fn not_found(uri: &str) -> ErrorData {
    invalid(format!("Resource not found: {uri}"))
}

/// The path of a `cks://sessions` URI, part by part, once the session it names (if any) is known
/// to be open.
async fn locate<'u>(runtime: &Runtime, uri: &'u str, principal: Option<&Principal>) -> Result<Vec<&'u str>, ErrorData> {
    let path = uri.strip_prefix("cks://sessions").ok_or_else(|| not_found(uri))?;
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    // A closed session is gone, as it is for the tools.
    if let [id, ..] = parts.as_slice()
        && (runtime.info(id).await.map_err(|e| map_err(uri, e))?.closed
            || !reaches(runtime, principal, id).await.map_err(internal)?)
    {
        return Err(not_found(uri));
    }
    Ok(parts)
}

fn map_err(uri: &str, e: RuntimeError) -> ErrorData {
    match e {
        RuntimeError::SessionNotFound(_) | RuntimeError::VersionNotFound { .. } => not_found(uri),
        other => internal(other),
    }
}

/// `Ok` when `uri` names the session list or an open session's resource.
pub(crate) async fn exists(runtime: &Runtime, uri: &str, principal: Option<&Principal>) -> Result<(), ErrorData> {
    locate(runtime, uri, principal).await.map(drop)
}

/// `resources/read`.
pub(crate) async fn read(runtime: &Runtime, uri: &str, principal: Option<&Principal>) -> Result<Value, ErrorData> {
    if let Some(view) = crate::apps::read(uri) {
        return Ok(view);
    }
    let parts = locate(runtime, uri, principal).await?;
    let map_err = |e| map_err(uri, e);
    let text = match parts.as_slice() {
        [] => {
            let mut sessions = runtime.list_sessions().await.map_err(internal)?;
            sessions.retain(|s| !s.closed);
            let mut reached = Vec::with_capacity(sessions.len());
            for mut s in sessions {
                if reaches(runtime, principal, &s.session_id).await.map_err(internal)? {
                    s.parent_session_id =
                        reachable_id(runtime, principal, s.parent_session_id).await.map_err(internal)?;
                    reached.push(s);
                }
            }
            let list: Vec<Value> = reached
                .iter()
                .map(|s| json!({"session_id": s.session_id, "created": s.created_at, "version_count": s.version_count, "parent_session_id": s.parent_session_id}))
                .collect();
            serde_json::to_string_pretty(&list).unwrap_or_default()
        }
        [id] => runtime.read(id, |s, _| client_document(s)).await.map_err(map_err)?,
        [id, "versions"] => {
            let mut versions = runtime.list_versions(id).await.map_err(map_err)?;
            for version in &mut versions {
                hide_unreachable_sessions(runtime, principal, &mut version.metadata).await.map_err(internal)?;
            }
            serde_json::to_string_pretty(&versions).unwrap_or_default()
        }
        [id, "versions", version_id] => {
            let state = runtime.version_state(id, version_id).await.map_err(map_err)?;
            client_document(&state)
        }
        _ => return Err(not_found(uri)),
    };
    Ok(json!({"contents": [{"uri": uri, "mimeType": "application/json", "text": text}]}))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use cks_core::KnowledgeStructure;
    use cks_runtime::store::memory::MemoryStore;
    use cks_runtime::{NewSession, Runtime, RuntimeConfig};

    use super::*;

    #[tokio::test]
    async fn lists_each_open_session_with_its_versions_and_hides_closed_ones() {
        let runtime = Runtime::new(Arc::new(MemoryStore::new()), RuntimeConfig::default());
        let with_version = NewSession { first_version: Some(Default::default()), ..Default::default() };
        let open = runtime.create_session(KnowledgeStructure::new(), with_version).await.unwrap();
        let closed = runtime.create_session(KnowledgeStructure::new(), NewSession::default()).await.unwrap();
        runtime.close(&closed.session_id).await.unwrap();

        let listed = list(&runtime, None).await.unwrap();
        let uris: Vec<&str> =
            listed["resources"].as_array().unwrap().iter().map(|r| r["uri"].as_str().unwrap()).collect();
        let sid = &open.session_id;
        let version = open.latest_version_id.as_deref().unwrap();
        assert_eq!(
            uris,
            [
                "cks://sessions".to_owned(),
                crate::apps::URI.to_owned(),
                format!("cks://sessions/{sid}"),
                format!("cks://sessions/{sid}/versions"),
                format!("cks://sessions/{sid}/versions/{version}"),
            ]
        );
        assert_eq!(listed["resources"][2]["name"], format!("Session {}…", &sid[..8]));

        let sessions = read(&runtime, "cks://sessions", None).await.unwrap();
        let text = sessions["contents"][0]["text"].as_str().unwrap();
        let entries: Vec<Value> = serde_json::from_str(text).unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0]["session_id"], json!(sid));
        assert_eq!(entries[0]["version_count"], 1);
        assert!(
            read(&runtime, &format!("cks://sessions/{}", closed.session_id), None).await.is_err(),
            "a closed session is gone"
        );
        assert!(read(&runtime, &format!("cks://sessions/{sid}/versions/{version}"), None).await.is_ok());
    }

    /// A principal with `cks:write` at a test issuer.
    fn writer(subject: &str) -> Principal {
        Principal {
            issuer: "https://id.example".into(),
            subject: subject.into(),
            scope: Some(cks_tools::Scope::Write),
            groups: Vec::new(),
        }
    }

    #[tokio::test]
    async fn another_principal_neither_lists_nor_reads_a_session() {
        use cks_runtime::access::as_principal;
        let runtime = Runtime::new(Arc::new(MemoryStore::new()), RuntimeConfig::default());
        let (a, b) = (writer("a"), writer("b"));
        let made = as_principal(Some(a.id()), runtime.create_session(KnowledgeStructure::new(), NewSession::default()));
        let sid = made.await.unwrap().session_id;
        let uri = format!("cks://sessions/{sid}");
        assert!(read(&runtime, &uri, Some(&a)).await.is_ok());
        assert!(read(&runtime, &uri, Some(&b)).await.is_err());
        assert!(exists(&runtime, &format!("{uri}/versions"), Some(&b)).await.is_err());
        let listed = list(&runtime, Some(&b)).await.unwrap();
        assert_eq!(listed["resources"].as_array().unwrap().len(), 2, "only the session list and the view");
        let sessions = read(&runtime, "cks://sessions", Some(&b)).await.unwrap();
        assert_eq!(sessions["contents"][0]["text"], "[]");
    }

    /// A session shared with B names neither A's parent nor A's merged branch to B.
    #[tokio::test]
    async fn a_shared_session_names_no_session_of_a_to_b() {
        use cks_runtime::access::{SessionAccess, as_principal};
        let runtime = Runtime::new(Arc::new(MemoryStore::new()), RuntimeConfig::default());
        let (a, b) = (writer("a"), writer("b"));
        let with_version = || NewSession { first_version: Some(Default::default()), ..Default::default() };
        let (parent, shared, merged) = as_principal(Some(a.id()), async {
            let parent = runtime.create_session(KnowledgeStructure::new(), with_version()).await.unwrap().session_id;
            let shared = runtime.create_branch(&parent, None, Default::default()).await.unwrap().session_id;
            let merged = runtime.create_branch(&shared, None, Default::default()).await.unwrap().session_id;
            let ops = cks_core::ops::parse_operations(
                &json!([{"type": "add_object", "identity": {"id": "m", "type": "Moon", "name": "Moon"}}]),
            )
            .unwrap();
            runtime.commit(&merged, cks_runtime::CommitRequest::operations(ops)).await.unwrap();
            runtime.merge_branch(&shared, &merged, None, &Default::default(), Default::default()).await.unwrap();
            (parent, shared, merged)
        })
        .await;
        let access = SessionAccess { principals: vec![b.id()], ..SessionAccess::owned_by(a.id()) };
        runtime.set_access(&shared, &access).await.unwrap();

        let text = |principal: &Principal, uri: String| {
            let runtime = &runtime;
            let principal = principal.clone();
            async move {
                let read = read(runtime, &uri, Some(&principal)).await.unwrap();
                read["contents"][0]["text"].as_str().unwrap().to_owned()
            }
        };
        let listed = text(&b, "cks://sessions".into()).await;
        let entries: Vec<Value> = serde_json::from_str(&listed).unwrap();
        assert_eq!((entries.len(), &entries[0]["parent_session_id"]), (1, &Value::Null), "{listed}");
        let versions = text(&b, format!("cks://sessions/{shared}/versions")).await;
        assert!(!versions.contains(&merged) && !versions.contains(&parent), "{versions}");
        assert!(versions.contains("source_session_id"), "the key stays, with null: {versions}");
        // A reaches both.
        assert!(text(&a, "cks://sessions".into()).await.contains(&parent));
        assert!(text(&a, format!("cks://sessions/{shared}/versions")).await.contains(&merged));
    }
}
