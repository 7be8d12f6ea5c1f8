//! `update_registered_graph`: bring a registered graph up to date with the code it describes, as
//! the reference does. The components are checked first (`check_component_versions`); for each
//! outdated one the configured model turns a short account of the release into objects, which
//! are added to the graph with the component's `version` set to the published one, and the name
//! is registered again.
//!
//! Unlike the reference, nothing is committed until every outdated component has its objects:
//! the whole update is one version, or nothing (the reference commits component by component and
//! can stop half-way). Objects the model proposes under ids the graph already holds are left out
//! rather than overwriting what is there. Nothing is cloned or run: the model reads only the
//! account of the change.

use std::collections::HashSet;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use cks_core::ops::{Operation, PatchMode};
use cks_core::{KnowledgeStructure, Structure};
use cks_runtime::gallery::Registration;
use cks_runtime::versions::ComponentCheck;

use super::check_component_versions::{Checked, check};
use super::required;
use crate::ErrorCode;
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Named, Tool, ToolMeta};
use crate::tools::knowledge::evolve_knowledge::{Change, commit_operations};
use crate::tools::llm::construct_knowledge::construct;

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The graph's registered name, e.g. 'cks-ecosystem'.
    pub(crate) name: String,
}

#[derive(Debug, Default, Serialize, JsonSchema)]
pub(crate) struct Output {
    /// False when no graph is registered under the name.
    #[serde(skip_serializing_if = "Option::is_none")]
    found: Option<bool>,
    /// True when the graph was updated; false when every component was already current.
    #[serde(skip_serializing_if = "Option::is_none")]
    updated: Option<bool>,
    /// 'already current' when nothing was outdated.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    /// The components brought up to date.
    #[serde(skip_serializing_if = "Option::is_none")]
    components_updated: Option<Vec<String>>,
    /// The graph's session.
    #[serde(skip_serializing_if = "Option::is_none")]
    session_id: Option<String>,
    /// The version the update created.
    #[serde(skip_serializing_if = "Option::is_none")]
    version_id: Option<String>,
    /// Ids the model proposed that the graph already held, left as they were.
    #[serde(skip_serializing_if = "Option::is_none")]
    kept_existing: Option<Vec<String>>,
    /// `session_not_available` when the registered session was closed or is gone.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

/// The account of a release the model turns into objects (the reference's wording, in substance).
fn account(check: &ComponentCheck) -> String {
    let name = &check.component;
    let new = check.actual_version.as_deref().unwrap_or("unknown");
    let old = match &check.graph_version {
        serde_json::Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    format!(
        "The component '{name}' was updated from version {old} to version {new}. Describe this release as a \
         knowledge object for '{name}' capturing its new version."
    )
}

/// The operations that add what the model made, leaving out ids already taken (in the graph, or
/// by an earlier component's objects); the ids left out are pushed to `kept`.
fn additions(made: &KnowledgeStructure, taken: &mut HashSet<String>, kept: &mut Vec<String>) -> Vec<Operation> {
    let mut operations = Vec::new();
    for object in made.objects() {
        if !taken.insert(object.id().to_owned()) {
            kept.push(object.id().to_owned());
            continue;
        }
        let mut structure = object.structure.clone();
        match object.relation() {
            Some(relation) => {
                let participants = relation.participants.iter().map(|p| (*p).to_owned()).collect();
                let relation_type = relation.relation_type.to_owned();
                structure.remove("participants");
                structure.remove("relation_type");
                operations.push(Operation::AddRelation {
                    identity: object.identity.clone(),
                    participants,
                    relation_type,
                    structure,
                });
            }
            None => operations.push(Operation::AddObject { identity: object.identity.clone(), structure }),
        }
    }
    operations
}

pub(crate) struct UpdateRegisteredGraph;

#[async_trait::async_trait]
impl Tool for UpdateRegisteredGraph {
    type Input = Input;
    type Output = Output;
    const NAMED: &'static [(&'static str, Named)] = &[("name", Named::Graph)];
    const TITLE: &'static str = "Update a graph from its code";
    const META: ToolMeta = ToolMeta {
        name: "update_registered_graph",
        description: "Bring a registered graph back in line with its code: for each component \
            check_component_versions finds outdated, the configured LLM turns its release into objects, added with \
            the new 'version' in one version. Returns {updated, components_updated, session_id, version_id}; \
            updated: false when already current, found: false for an unknown name. Needs an LLM (else \
            llm_provider_unavailable); an unusable answer is construct_knowledge_failed and changes nothing.",
        mutates_graph: true,
        creates_session: false,
        destructive: false,
        idempotent: false,
        open_world: true,
        session_fields: &[],
        session_checks: &[],
        // It names a registered graph, not the chat's session, so a chat could change another
        // graph; it also reads the network at URLs the graph's content chooses.
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        let name = required(&input.name, "name")?.to_owned();
        let (entry, record) = match check(ctx, &name).await? {
            Checked::Unknown => return Ok(Output { found: Some(false), ..Output::default() }),
            Checked::Unavailable { session_id, message } => {
                return Ok(Output {
                    found: Some(true),
                    session_id: Some(session_id),
                    error: Some("session_not_available".into()),
                    message: Some(message),
                    ..Output::default()
                });
            }
            Checked::Done { entry, record } => (*entry, record),
        };
        let outdated: Vec<&ComponentCheck> = record.outdated().collect();
        if outdated.is_empty() {
            return Ok(Output { updated: Some(false), reason: Some("already current".into()), ..Output::default() });
        }
        let components = ctx.runtime.graph_components(&entry.session_id).await?.unwrap_or_default();
        let mut taken: HashSet<String> =
            ctx.runtime.read(&entry.session_id, |s, _| s.objects().map(|o| o.id().to_owned()).collect()).await?;
        let mut operations = Vec::new();
        let mut kept = Vec::new();
        let mut updated = Vec::new();
        for check in outdated {
            let hint = format!("new release of component '{}'", check.component);
            let made = match construct(ctx, &account(check), Some(&hint), None, None).await {
                Ok(made) => made,
                // The reference's answer is the sentence 'LLM provider required' in `error`; ours is
                // the code, with the sentence in the message.
                Err(e) if e.code == ErrorCode::LlmProviderUnavailable => {
                    return Err(ToolError::new(
                        ErrorCode::LlmProviderUnavailable,
                        format!("LLM provider required: {} Nothing was changed.", e.message),
                    ));
                }
                Err(e) => {
                    return Err(ToolError::new(
                        ErrorCode::ConstructKnowledgeFailed,
                        format!(
                            "The model's description of '{}' could not be used; nothing was changed.",
                            check.component
                        ),
                    )
                    .with("component", check.component.as_str())
                    .with("details", e.to_value()));
                }
            };
            operations.extend(additions(&made.structure, &mut taken, &mut kept));
            if let (Some(component), Some(version)) =
                (components.iter().find(|c| c.name == check.component), check.actual_version.as_deref())
            {
                let mut patch = Structure::new();
                patch.insert("version", json!(version));
                operations.push(Operation::UpdateObject {
                    object_id: component.object_id.clone(),
                    structure_patch: patch,
                    mode: PatchMode::Merge,
                });
            }
            updated.push(check.component.clone());
        }
        let change = Change { operations, extensions: Vec::new(), return_structure: Some(false) };
        let metadata = [("graph_name", json!(name)), ("components_updated", json!(updated))];
        let committed =
            commit_operations(ctx, entry.session_id.clone(), change, Self::META.name, metadata).await.map_err(|e| {
                ToolError::new(
                    ErrorCode::EvolveFailed,
                    format!("The update of '{name}' could not be committed; nothing was changed."),
                )
                .with("details", e.to_value())
            })?;
        // Registered again as it was (lineage and lifecycle kept), so its entry shows the update.
        ctx.runtime
            .register_graph(Registration {
                name,
                session_id: entry.session_id.clone(),
                description: entry.description,
                tags: entry.tags,
                visibility: entry.visibility,
                team: entry.team,
                source_graph_name: None,
                lifecycle: None,
            })
            .await?;
        Ok(Output {
            updated: Some(true),
            components_updated: Some(updated),
            session_id: Some(entry.session_id),
            version_id: Some(committed.version_id),
            kept_existing: (!kept.is_empty()).then_some(kept),
            ..Output::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use cks_testkit::{ProviderServer, Reply};

    use crate::testing::{call, llm_context, llm_env, obj, rel, session, structure};
    use crate::tools::gallery::check_component_versions::tests::{ecosystem, published};
    use crate::tools::knowledge::verify_source::tests::local_context;

    async fn versions(ctx: &crate::ToolContext, sid: &str) -> usize {
        call(ctx, "list_versions", json!({"session_id": sid})).await["versions"].as_array().unwrap().len()
    }

    #[tokio::test]
    async fn nothing_outdated_unknown_names_and_no_model() {
        let (_server, base) = published().await;
        let ctx = local_context();
        assert_eq!(call(&ctx, "update_registered_graph", json!({"name": "nope"})).await, json!({"found": false}));
        assert_eq!(call(&ctx, "update_registered_graph", json!({})).await["error"], "missing_parameter");

        let current = obj(
            "web",
            "Component",
            "web",
            json!({"version": "2.0.0", "version_url": format!("{base}/web/package.json")}),
        );
        let sid = session(&ctx, structure(vec![current])).await;
        call(&ctx, "register_graph", json!({"name": "fine", "session_id": sid})).await;
        assert_eq!(
            call(&ctx, "update_registered_graph", json!({"name": "fine"})).await,
            json!({"updated": false, "reason": "already current"})
        );

        let sid = ecosystem(&ctx, &base).await;
        let before = versions(&ctx, &sid).await;
        let refused = call(&ctx, "update_registered_graph", json!({"name": "eco"})).await;
        assert_eq!(refused["error"], "llm_provider_unavailable", "{refused}");
        assert!(refused["message"].as_str().unwrap().starts_with("LLM provider required"));
        assert_eq!(versions(&ctx, &sid).await, before, "nothing changed");
    }

    #[tokio::test]
    async fn outdated_components_are_described_added_and_set_in_one_version() {
        let (_server, base) = published().await;
        let llm = ProviderServer::start().await;
        let mut ctx = llm_context(&llm_env("anthropic", &llm.base_url()));
        ctx.fetcher = local_context().fetcher;
        let sid = ecosystem(&ctx, &base).await;
        let entry = ctx.runtime.graph("eco").await.unwrap().unwrap();
        let before = versions(&ctx, &sid).await;

        // The model's answer reuses the component's own id, which the graph keeps as it is.
        let answer = structure(vec![
            obj("core", "Component", "core", json!({"version": "1.2.0", "overwritten": true})),
            obj("core-1-2-0", "Release", "core 1.2.0", json!({"version": "1.2.0"})),
            rel("rel-core-release", &["core-1-2-0", "core"], "release_of"),
        ]);
        llm.push(Reply::Text(answer.to_string()));
        let result = call(&ctx, "update_registered_graph", json!({"name": "eco"})).await;
        assert_eq!(result["updated"], true, "{result}");
        assert_eq!(result["components_updated"], json!(["core"]));
        assert_eq!(result["kept_existing"], json!(["core"]));
        assert_eq!(result["session_id"], json!(sid));
        assert_eq!(versions(&ctx, &sid).await, before + 1, "one version");

        let document = call(&ctx, "serialize_knowledge", json!({"session_id": sid})).await;
        let document: Value = serde_json::from_str(document["serialized"].as_str().unwrap()).unwrap();
        let find =
            |id: &str| document["objects"].as_array().unwrap().iter().find(|o| o["identity"]["id"] == id).cloned();
        let core = find("core").unwrap();
        assert_eq!(core["structure"]["version"], "1.2.0");
        assert_eq!(core["structure"].get("overwritten"), None, "the graph's object is kept, only its version set");
        assert!(find("core-1-2-0").is_some() && find("rel-core-release").is_some());
        let again = ctx.runtime.graph("eco").await.unwrap().unwrap();
        assert!(again.updated_at >= entry.updated_at);
        assert_eq!((again.description, again.visibility), (entry.description, entry.visibility));

        // Now current: nothing more to do.
        assert_eq!(call(&ctx, "update_registered_graph", json!({"name": "eco"})).await["reason"], "already current");
    }

    #[tokio::test]
    async fn an_unusable_answer_changes_nothing() {
        let (_server, base) = published().await;
        let llm = ProviderServer::start().await;
        let mut ctx = llm_context(&llm_env("anthropic", &llm.base_url()));
        ctx.fetcher = local_context().fetcher;
        let sid = ecosystem(&ctx, &base).await;
        let before = versions(&ctx, &sid).await;
        llm.push(Reply::Text("I would rather not.".into()));
        let result = call(&ctx, "update_registered_graph", json!({"name": "eco"})).await;
        assert_eq!(result["error"], "construct_knowledge_failed", "{result}");
        assert_eq!(result["component"], "core");
        assert_eq!(result["details"]["error"], "llm_output_parse_error");
        assert_eq!(versions(&ctx, &sid).await, before);
    }
}
