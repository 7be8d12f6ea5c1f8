//! `clone_graph`: copy a graph (by registered name or session id) into a new session, optionally
//! registered under a name, or add what an existing session lacks. The source is only read.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use cks_core::ops::Operation;
use cks_runtime::gallery::{Registration, Visibility};
use cks_runtime::{CommitRequest, NewSession};

use super::{given, resolve_side};
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Coercion, Named, SessionCheck, Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The source by registered name (or give source_session_id).
    pub(crate) graph_name: Option<String>,
    /// The source by session id (wins over graph_name).
    pub(crate) source_session_id: Option<String>,
    /// Add the objects this session lacks (by id) instead of creating a new session.
    pub(crate) target_session_id: Option<String>,
    /// Register the new session under this name (not with target_session_id).
    pub(crate) copy_name: Option<String>,
    /// The copy's gallery description (with copy_name; default "Clone of <source>.").
    pub(crate) description: Option<String>,
    /// The copy's comma-separated tags (with copy_name).
    pub(crate) tags: Option<String>,
    /// Register the copy as public (with copy_name; default false).
    #[serde(default)]
    pub(crate) public: bool,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    /// The new session, or the target session.
    session_id: String,
    /// The version holding the copy (null when the target already had everything).
    version_id: Option<String>,
    source_session_id: String,
    /// Plain objects copied.
    imported_objects: usize,
    /// Relations copied.
    imported_relations: usize,
    /// The registered name the source was given by.
    #[serde(skip_serializing_if = "Option::is_none")]
    source_graph_name: Option<String>,
    /// The name the new session was registered under.
    #[serde(skip_serializing_if = "Option::is_none")]
    registered_as: Option<String>,
    /// Why nothing was imported.
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

pub(crate) struct CloneGraph;

#[async_trait::async_trait]
impl Tool for CloneGraph {
    type Input = Input;
    type Output = Output;
    const ARGUMENT_COERCIONS: &'static [(&'static str, Coercion)] = &[("public", Coercion::Truthy)];
    const NAMED: &'static [(&'static str, Named)] = &[("graph_name", Named::GraphSource), ("copy_name", Named::Graph)];
    const TITLE: &'static str = "Clone a graph";
    const META: ToolMeta = ToolMeta {
        name: "clone_graph",
        description: "Copy a graph into a new session (its first version holds the copy), given by registered \
            name ('graph_name') or session id ('source_session_id', which wins); 'copy_name' also registers the \
            copy in the gallery (with 'description', 'tags', 'public'; its lineage names the source). With \
            'target_session_id', instead add to that session, as one new version, every object and relation it \
            lacks (by id); objects it has are left as they are. The source is never changed. Returns \
            {session_id, version_id, source_session_id, imported_objects, imported_relations, \
            source_graph_name?, registered_as?}.",
        mutates_graph: true,
        creates_session: true,
        destructive: false,
        idempotent: false,
        open_world: false,
        session_fields: &["source_session_id", "target_session_id"],
        session_checks: &[
            SessionCheck::exists("source_session_id").if_given(),
            SessionCheck::open("target_session_id").if_given(),
        ],
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        let source =
            resolve_side(ctx, input.graph_name, input.source_session_id, "graph_name (or source_session_id)").await?;
        let source_graph_name = source.name.clone();
        let source_state = ctx.runtime.read(&source.session_id, |s, _| s.clone()).await?;
        let count = |objects: &mut dyn Iterator<Item = bool>| {
            objects.fold((0, 0), |(o, r), is_relation| if is_relation { (o, r + 1) } else { (o + 1, r) })
        };

        if let Some(target) = given(input.target_session_id) {
            let missing: Vec<_> = ctx
                .runtime
                .read(&target, |t, _| source_state.objects().filter(|o| !t.contains(o.id())).cloned().collect())
                .await?;
            let (imported_objects, imported_relations) = count(&mut missing.iter().map(|o| o.is_relation()));
            let mut output = Output {
                session_id: target.clone(),
                version_id: None,
                source_session_id: source.session_id.clone(),
                imported_objects,
                imported_relations,
                source_graph_name,
                registered_as: None,
                message: None,
            };
            if missing.is_empty() {
                output.message = Some(
                    "Target session already contains every object/relation from the source graph; nothing to \
                     import."
                        .into(),
                );
                return Ok(output);
            }
            // Added in the source's order, so a relation follows the objects it names.
            let operations = missing
                .into_iter()
                .map(|o| Operation::AddObject { identity: o.identity.clone(), structure: o.structure.clone() })
                .collect();
            let metadata = ctx.version_metadata(
                Self::META.name,
                [("operation", json!("clone")), ("source_session_id", json!(source.session_id))],
            );
            let request = CommitRequest::operations(operations)
                .with_metadata(metadata)
                .with_provenance((*ctx.provenance).clone());
            output.version_id = Some(ctx.runtime.commit(&target, request).await?.version.version_id);
            return Ok(output);
        }

        let (imported_objects, imported_relations) = count(&mut source_state.objects().map(|o| o.is_relation()));
        let first_version = ctx.version_metadata(
            Self::META.name,
            [("operation", json!("clone")), ("source_session_id", json!(source.session_id))],
        );
        let info = ctx
            .runtime
            .create_session(source_state, NewSession { first_version: Some(first_version), ..Default::default() })
            .await?;
        let registered_as = match given(input.copy_name) {
            None => None,
            Some(copy_name) => {
                let origin = source_graph_name.as_deref().unwrap_or(&source.session_id);
                let entry = ctx
                    .runtime
                    .register_graph(Registration {
                        name: copy_name,
                        session_id: info.session_id.clone(),
                        description: given(input.description).unwrap_or_else(|| format!("Clone of {origin}.")),
                        tags: input.tags.unwrap_or_default(),
                        visibility: if input.public { Visibility::Public } else { Visibility::Private },
                        team: None,
                        source_graph_name: source_graph_name.clone(),
                        lifecycle: None,
                    })
                    .await?;
                Some(entry.name)
            }
        };
        Ok(Output {
            session_id: info.session_id,
            version_id: info.latest_version_id,
            source_session_id: source.session_id,
            imported_objects,
            imported_relations,
            source_graph_name,
            registered_as,
            message: None,
        })
    }
}
