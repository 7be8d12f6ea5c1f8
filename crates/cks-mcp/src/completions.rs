//! `completion/complete`: what a client may offer while a user types a prompt argument or a
//! resource-template variable. Suggestions depend on the argument's name, not on the prompt or
//! template naming it: session ids (newest first), a session's version ids (newest first) and
//! object ids, and registered graph names. Each begins with what was typed so far. With a
//! principal, only sessions it may reach are suggested or looked into.

use rmcp::model::{CompleteRequestParams, CompleteResult, CompletionInfo, ErrorCode, ErrorData, Reference};
use serde_json::{Map, Value};

use cks_runtime::gallery::GraphFilter;
use cks_runtime::{Runtime, RuntimeError};
use cks_tools::Principal;

/// The most values one answer carries (MCP's limit); `total` says how many matched.
const MAX_VALUES: usize = 100;

/// The answer to a `completion/complete` request. An argument the prompt or template does not
/// have gets no values, as does one with nothing to suggest.
pub(crate) async fn answer(
    runtime: &Runtime,
    request: CompleteRequestParams,
    principal: Option<&Principal>,
) -> Result<CompleteResult, ErrorData> {
    let known = match &request.r#ref {
        Reference::Prompt(prompt) => crate::prompts::has_argument(&prompt.name, &request.argument.name),
        Reference::Resource(template) => crate::resources::has_variable(&template.uri, &request.argument.name),
        _ => false,
    };
    let context: Map<String, Value> = request
        .context
        .and_then(|c| c.arguments)
        .unwrap_or_default()
        .into_iter()
        .map(|(name, value)| (name, Value::String(value)))
        .collect();
    let values = if known {
        complete(runtime, &request.argument.name, &request.argument.value, &context, principal)
            .await
            .map_err(|e| ErrorData::new(ErrorCode::INTERNAL_ERROR, e.to_string(), None))?
    } else {
        Vec::new()
    };
    let total = values.len();
    let mut completion = CompletionInfo::new(values.into_iter().take(MAX_VALUES).collect()).unwrap_or_default();
    completion.total = u32::try_from(total).ok();
    completion.has_more = Some(total > MAX_VALUES);
    Ok(CompleteResult::new(completion))
}

/// The values that complete `typed` for the argument `name`, all of them (the answer keeps the
/// first [`MAX_VALUES`]). `context` holds the arguments already given, for values that depend on
/// a session. An argument with nothing to suggest, or a session that cannot be read, gets none.
async fn complete(
    runtime: &Runtime,
    name: &str,
    typed: &str,
    context: &Map<String, Value>,
    principal: Option<&Principal>,
) -> Result<Vec<String>, RuntimeError> {
    let mut session = context.get("session_id").and_then(Value::as_str).filter(|s| !s.is_empty());
    if let Some(id) = session
        && !cks_tools::principal::reaches(runtime, principal, id).await?
    {
        session = None;
    }
    let session = || session;
    let candidates = match name {
        "session_id" => {
            let mut sessions = runtime.list_sessions().await?;
            sessions.retain(|s| !s.closed);
            let mut reached = Vec::with_capacity(sessions.len());
            for s in sessions {
                if cks_tools::principal::reaches(runtime, principal, &s.session_id).await? {
                    reached.push(s);
                }
            }
            let mut sessions = reached;
            // Timestamps are RFC 3339 in UTC: they order as text.
            sessions.sort_by(|a, b| b.created_at.cmp(&a.created_at));
            sessions.into_iter().map(|s| s.session_id).collect()
        }
        "version_id" => match session() {
            Some(id) => or_none(runtime.list_versions(id).await)?.into_iter().rev().map(|v| v.version_id).collect(),
            None => Vec::new(),
        },
        "seed_id" | "object_id" => match session() {
            Some(id) => {
                let mut ids: Vec<String> =
                    or_none(runtime.read(id, |s, _| s.ids().map(str::to_owned).collect()).await)?;
                ids.sort();
                ids
            }
            None => Vec::new(),
        },
        "graph_name" => runtime.graphs(&GraphFilter::default()).await?.into_iter().map(|g| g.name).collect(),
        _ => Vec::new(),
    };
    Ok(candidates.into_iter().filter(|c: &String| c.starts_with(typed)).collect())
}

/// A session that is not there has nothing to complete; any other failure is one.
fn or_none<T: Default>(result: Result<T, RuntimeError>) -> Result<T, RuntimeError> {
    match result {
        Err(RuntimeError::SessionNotFound(_)) => Ok(T::default()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use cks_core::KnowledgeStructure;
    use cks_runtime::store::memory::MemoryStore;
    use cks_runtime::{NewSession, RuntimeConfig};
    use serde_json::json;

    use super::*;

    #[tokio::test]
    async fn suggestions_follow_the_argument_and_what_was_typed() {
        let runtime = Runtime::new(Arc::new(MemoryStore::new()), RuntimeConfig::default());
        let graph = cks_core::json::parse_value(json!({"objects": [
            {"identity": {"id": "sun", "type": "Star", "name": "Sun"}},
            {"identity": {"id": "saturn", "type": "Planet", "name": "Saturn"}},
            {"identity": {"id": "earth", "type": "Planet", "name": "Earth"}},
        ]}))
        .unwrap();
        let with_version = || NewSession { first_version: Some(Default::default()), ..Default::default() };
        let first = runtime.create_session(graph, with_version()).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        let second = runtime.create_session(KnowledgeStructure::new(), with_version()).await.unwrap();
        let closed = runtime.create_session(KnowledgeStructure::new(), NewSession::default()).await.unwrap();
        runtime.close(&closed.session_id).await.unwrap();

        let none = Map::new();
        let sessions = complete(&runtime, "session_id", "", &none, None).await.unwrap();
        assert_eq!(sessions, [second.session_id.clone(), first.session_id.clone()], "newest first, none closed");
        let prefix = &first.session_id[..6];
        let typed = complete(&runtime, "session_id", prefix, &none, None).await.unwrap();
        assert!(typed.contains(&first.session_id) && typed.iter().all(|s| s.starts_with(prefix)));

        let in_first = json!({"session_id": first.session_id}).as_object().cloned().unwrap();
        assert_eq!(complete(&runtime, "seed_id", "s", &in_first, None).await.unwrap(), ["saturn", "sun"]);
        let versions = complete(&runtime, "version_id", "", &in_first, None).await.unwrap();
        assert_eq!(versions, [first.latest_version_id.clone().unwrap()]);
        assert!(complete(&runtime, "seed_id", "", &none, None).await.unwrap().is_empty(), "no session given");
        let elsewhere = json!({"session_id": "no-such"}).as_object().cloned().unwrap();
        assert!(complete(&runtime, "seed_id", "", &elsewhere, None).await.unwrap().is_empty());
        assert!(complete(&runtime, "topic", "", &none, None).await.unwrap().is_empty());

        // Another principal is offered neither the session nor what it holds.
        let who = |subject: &str| Principal {
            issuer: "https://id.example".into(),
            subject: subject.into(),
            scope: Some(cks_tools::Scope::Read),
            groups: Vec::new(),
        };
        let owned = cks_runtime::access::as_principal(
            Some(who("a").id()),
            runtime.create_session(
                cks_core::json::parse_value(
                    json!({"objects": [{"identity": {"id": "moon", "type": "Moon", "name": "Moon"}}]}),
                )
                .unwrap(),
                NewSession::default(),
            ),
        );
        let owned = owned.await.unwrap().session_id;
        let in_owned = json!({"session_id": owned}).as_object().cloned().unwrap();
        let (a, b) = (who("a"), who("b"));
        assert!(complete(&runtime, "session_id", "", &none, Some(&a)).await.unwrap().contains(&owned));
        assert!(!complete(&runtime, "session_id", "", &none, Some(&b)).await.unwrap().contains(&owned));
        assert_eq!(complete(&runtime, "seed_id", "", &in_owned, Some(&a)).await.unwrap(), ["moon"]);
        assert!(complete(&runtime, "seed_id", "", &in_owned, Some(&b)).await.unwrap().is_empty());
    }
}
