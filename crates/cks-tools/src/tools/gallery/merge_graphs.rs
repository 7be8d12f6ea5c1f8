//! `merge_graphs`: three-way merge of two graphs (by registered name or session id) into a new
//! session, optionally registered. Neither side is changed.

use crate::ErrorCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use cks_core::KnowledgeStructure;
use cks_core::merge::{MergeError, merge, parse_resolutions};
use cks_runtime::NewSession;
use cks_runtime::gallery::{Registration, Visibility};

use super::{given, resolve_side};
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{ArgumentCode, Named, SessionCheck, Tool, ToolMeta};
use crate::tools::branches::{ConflictEntry, conflicts, merge_error};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// Side A by registered name (or give graph_a_session_id).
    pub(crate) graph_a_name: Option<String>,
    /// Side A by session id (wins over graph_a_name).
    pub(crate) graph_a_session_id: Option<String>,
    /// Side B by registered name (or give graph_b_session_id).
    pub(crate) graph_b_name: Option<String>,
    /// Side B by session id (wins over graph_b_name).
    pub(crate) graph_b_session_id: Option<String>,
    /// The common ancestor by registered name (default: an empty graph).
    pub(crate) base_graph_name: Option<String>,
    /// The common ancestor by session id (wins over base_graph_name).
    pub(crate) base_session_id: Option<String>,
    /// Per conflicting id: "branch_a", "branch_b", null (drop it) or a complete object.
    #[serde(default)]
    #[schemars(schema_with = "crate::schema::object")]
    pub(crate) resolutions: Option<Value>,
    /// Register the merged session under this name.
    pub(crate) register_as: Option<String>,
}

#[derive(Debug, Default, Serialize, JsonSchema)]
pub(crate) struct Output {
    /// False when the sides conflict (nothing is created).
    merged: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    session_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    version_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    graph_a_session_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    graph_b_session_id: Option<String>,
    /// Objects in the merged graph.
    #[serde(skip_serializing_if = "Option::is_none")]
    object_count: Option<usize>,
    /// Relations dropped because an object they named was deleted.
    #[serde(skip_serializing_if = "Option::is_none")]
    dropped_relations: Option<Vec<String>>,
    /// The name the merged session was registered under.
    #[serde(skip_serializing_if = "Option::is_none")]
    registered_as: Option<String>,
    /// How to settle the conflicts.
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    /// Ids both sides changed differently: {object_id, target_diff (A), source_diff (B)}.
    #[serde(skip_serializing_if = "Option::is_none")]
    conflicts: Option<Vec<ConflictEntry>>,
}

const CONFLICT_GUIDANCE: &str = "Merge conflict detected. For each entry in 'conflicts', inspect \
    'target_diff'/'source_diff' and retry merge_graphs with a 'resolutions' argument mapping each object_id to \
    'branch_a' (keep graph A's version), 'branch_b' (keep graph B's version), null (drop it), or a complete object \
    definition.";

pub(crate) struct MergeGraphs;

#[async_trait::async_trait]
impl Tool for MergeGraphs {
    type Input = Input;
    type Output = Output;
    const ARGUMENT_CODES: &'static [ArgumentCode] =
        &[ArgumentCode::malformed("resolutions", ErrorCode::InvalidResolutions)];
    const NAMED: &'static [(&'static str, Named)] = &[
        ("graph_a_name", Named::GraphSource),
        ("graph_b_name", Named::GraphSource),
        ("base_graph_name", Named::GraphSource),
        ("register_as", Named::Graph),
    ];
    const TITLE: &'static str = "Merge two graphs";
    const META: ToolMeta = ToolMeta {
        name: "merge_graphs",
        description: "Three-way merge of two graphs into a new session (neither side is changed). Each side and \
            the optional common ancestor are given by registered name or by session id (which wins): \
            'graph_a_name'/'graph_a_session_id', 'graph_b_name'/'graph_b_session_id', \
            'base_graph_name'/'base_session_id'. Without a base, the ancestor is an empty graph, so an id both \
            sides hold with different content is a conflict. Conflicts create nothing and return {merged: false, \
            message, conflicts}; retry with 'resolutions'. 'register_as' registers the merged session. Returns \
            {merged: true, session_id, version_id, graph_a_session_id, graph_b_session_id, object_count, \
            dropped_relations?, registered_as?}.",
        mutates_graph: true,
        creates_session: true,
        destructive: false,
        idempotent: false,
        open_world: false,
        session_fields: &["graph_a_session_id", "graph_b_session_id", "base_session_id"],
        session_checks: &[
            SessionCheck::exists("graph_a_session_id").if_given(),
            SessionCheck::exists("graph_b_session_id").if_given(),
            SessionCheck::exists("base_session_id").if_given(),
        ],
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        let a = resolve_side(ctx, input.graph_a_name, input.graph_a_session_id, "graph_a_name (or graph_a_session_id)")
            .await?;
        let b = resolve_side(ctx, input.graph_b_name, input.graph_b_session_id, "graph_b_name (or graph_b_session_id)")
            .await?;
        let base = match (given(input.base_graph_name), given(input.base_session_id)) {
            (None, None) => KnowledgeStructure::new(),
            (name, session_id) => {
                let base = resolve_side(ctx, name, session_id, "base_graph_name (or base_session_id)").await?;
                ctx.runtime.read(&base.session_id, |s, _| s.clone()).await?
            }
        };
        let resolutions = match &input.resolutions {
            None => Default::default(),
            Some(value) => parse_resolutions(value).map_err(|e| {
                ToolError::new(ErrorCode::InvalidResolutions, format!("Invalid 'resolutions' entry: {e}"))
            })?,
        };
        let structure_a = ctx.runtime.read(&a.session_id, |s, _| s.clone()).await?;
        let structure_b = ctx.runtime.read(&b.session_id, |s, _| s.clone()).await?;
        let outcome = match merge(&base, &structure_a, &structure_b, &resolutions) {
            Ok(outcome) => outcome,
            Err(MergeError::Conflicts(list)) => {
                return Ok(Output {
                    merged: false,
                    message: Some(CONFLICT_GUIDANCE.to_owned()),
                    conflicts: Some(conflicts(&list)),
                    ..Output::default()
                });
            }
            Err(e) => return Err(merge_error(e)),
        };
        let unverified = crate::provenance::blocking(ctx, &outcome.structure);
        if !unverified.is_empty() {
            return Err(ToolError::new(
                ErrorCode::UnverifiedProvenance,
                "Cannot merge: merged result contains a VerificationRecord with invalid or missing provenance.",
            )
            .with("merged", false)
            .with("details", crate::provenance::details(&unverified)));
        }
        let object_count = outcome.structure.len();
        let first_version = ctx.version_metadata(
            Self::META.name,
            [
                ("operation", json!("merge")),
                ("graph_a_session_id", json!(a.session_id)),
                ("graph_b_session_id", json!(b.session_id)),
            ],
        );
        let info = ctx
            .runtime
            .create_session(outcome.structure, NewSession { first_version: Some(first_version), ..Default::default() })
            .await?;
        let registered_as = match given(input.register_as) {
            None => None,
            Some(name) => {
                let description = format!("Merge of {} and {}.", a.label(), b.label());
                let registration = Registration {
                    name,
                    session_id: info.session_id.clone(),
                    description,
                    tags: String::new(),
                    visibility: Visibility::Private,
                    team: None,
                    source_graph_name: None,
                    lifecycle: None,
                };
                Some(ctx.runtime.register_graph(registration).await?.name)
            }
        };
        Ok(Output {
            merged: true,
            session_id: Some(info.session_id),
            version_id: info.latest_version_id,
            graph_a_session_id: Some(a.session_id),
            graph_b_session_id: Some(b.session_id),
            object_count: Some(object_count),
            dropped_relations: Some(outcome.dropped_relations).filter(|d| !d.is_empty()),
            registered_as,
            ..Output::default()
        })
    }
}
