//! `link_graphs`: a relation between an object of graph A and an object of graph B, written to
//! both graphs (each also gets a copy of the other side's object, so that the relation resolves
//! locally). Both writes are checked before either is made.

use crate::ErrorCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::sync::Arc;

use cks_core::ops::Operation;
use cks_core::validate::{Severity, check_changes};
use cks_core::{Identity, KnowledgeObject, KnowledgeStructure, ops};
use cks_runtime::CommitRequest;

use super::{Side, resolve_side};
use crate::context::ToolContext;
use crate::convert::full_diagnostics;
use crate::error::ToolError;
use crate::tool::{Named, SessionCheck, Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// Graph A by registered name (or give graph_a_session_id).
    pub(crate) graph_a_name: Option<String>,
    /// Graph A by session id (wins over graph_a_name).
    pub(crate) graph_a_session_id: Option<String>,
    /// Graph B by registered name (or give graph_b_session_id).
    pub(crate) graph_b_name: Option<String>,
    /// Graph B by session id (wins over graph_b_name).
    pub(crate) graph_b_session_id: Option<String>,
    /// The object in graph A.
    #[serde(default)]
    pub(crate) object_a_id: String,
    /// The object in graph B.
    #[serde(default)]
    pub(crate) object_b_id: String,
    /// The relation's type, e.g. "same_as".
    #[serde(default)]
    pub(crate) relation_type: String,
    /// The relation's name (default "<type>: <a> -> <b>").
    pub(crate) relation_name: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    /// Always true.
    linked: bool,
    /// `cross-link:<graph A>:<object A>:<graph B>:<object B>:<type>`, the same in both graphs.
    relation_id: String,
    /// The version of graph A holding the link.
    graph_a_version: String,
    /// The version of graph B holding the link.
    graph_b_version: String,
}

pub(crate) struct LinkGraphs;

#[async_trait::async_trait]
impl Tool for LinkGraphs {
    type Input = Input;
    type Output = Output;
    const NAMED: &'static [(&'static str, Named)] = &[("graph_a_name", Named::Graph), ("graph_b_name", Named::Graph)];
    const TITLE: &'static str = "Link two graphs";
    const META: ToolMeta = ToolMeta {
        name: "link_graphs",
        description: "Relate an object of graph A ('object_a_id') to an object of graph B ('object_b_id') with a \
            relation of 'relation_type', written to both graphs as a new version of each; each graph also gets \
            a copy of the other graph's object (object ids must mean the same object in both). Each graph is \
            given by registered name or session id (which wins). Errors: object_not_found, \
            relation_already_exists (the relation id is derived from both objects and the type), \
            duplicate_object_conflict (the other object's id exists here with other content), \
            validation_failed. Both writes are checked before either is made. Returns {linked: true, \
            relation_id, graph_a_version, graph_b_version}.",
        mutates_graph: true,
        creates_session: false,
        destructive: false,
        // A second call is relation_already_exists and writes nothing.
        idempotent: true,
        open_world: false,
        session_fields: &["graph_a_session_id", "graph_b_session_id"],
        session_checks: &[
            SessionCheck::open("graph_a_session_id").if_given(),
            SessionCheck::open("graph_b_session_id").if_given(),
        ],
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        for (value, name) in [
            (&input.object_a_id, "object_a_id"),
            (&input.object_b_id, "object_b_id"),
            (&input.relation_type, "relation_type"),
        ] {
            if value.is_empty() {
                return Err(ToolError::missing_parameter(name));
            }
        }
        let a = resolve_side(ctx, input.graph_a_name, input.graph_a_session_id, "graph_a_name (or graph_a_session_id)")
            .await?;
        let b = resolve_side(ctx, input.graph_b_name, input.graph_b_session_id, "graph_b_name (or graph_b_session_id)")
            .await?;
        let state_a = ctx.runtime.read(&a.session_id, |s, _| s.clone()).await?;
        let state_b = ctx.runtime.read(&b.session_id, |s, _| s.clone()).await?;
        let object_a = find(&state_a, &input.object_a_id, "A", &a)?;
        let object_b = find(&state_b, &input.object_b_id, "B", &b)?;

        let relation_id = format!(
            "cross-link:{}:{}:{}:{}:{}",
            a.label(),
            input.object_a_id,
            b.label(),
            input.object_b_id,
            input.relation_type
        );
        if state_a.contains(&relation_id) || state_b.contains(&relation_id) {
            return Err(ToolError::new(
                ErrorCode::RelationAlreadyExists,
                format!(
                    "A relation with id '{relation_id}' already exists in one of the two graphs. link_graphs \
                     derives a deterministic id from both object ids and relation_type, so this link has already \
                     been created."
                ),
            ));
        }
        let name = input
            .relation_name
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| format!("{}: {} -> {}", input.relation_type, input.object_a_id, input.object_b_id));
        let mut structure = Map::new();
        structure.insert("participants".into(), json!([input.object_a_id, input.object_b_id]));
        structure.insert("relation_type".into(), json!(input.relation_type));
        let relation = Operation::AddObject {
            identity: Identity::new(&relation_id, "Relation", &name),
            structure: structure.into(),
        };

        // Check both writes before making either, so that a refusal changes neither graph.
        let ops_a = link_operations(&state_a, &a, object_b, &relation)?;
        let ops_b = link_operations(&state_b, &b, object_a, &relation)?;
        check(state_a, &ops_a, &a)?;
        check(state_b, &ops_b, &b)?;

        let graph_a_version = commit(ctx, &a, ops_a, &relation_id).await?;
        let graph_b_version = commit(ctx, &b, ops_b, &relation_id).await.map_err(|e| {
            // Only a concurrent change of graph B can get here after the checks above.
            let message = format!(
                "{} (graph A / {} was already updated before this failure; only graph B / {} failed to write).",
                e.message,
                a.label(),
                b.label()
            );
            ToolError::new(e.code, message).with("partial_failure", true)
        })?;
        Ok(Output { linked: true, relation_id, graph_a_version, graph_b_version })
    }
}

fn find<'a>(
    structure: &'a KnowledgeStructure,
    id: &str,
    side: &str,
    graph: &Side,
) -> Result<&'a Arc<KnowledgeObject>, ToolError> {
    structure.get(id).ok_or_else(|| {
        ToolError::new(
            ErrorCode::ObjectNotFound,
            format!("Object '{id}' was not found in graph {side} ({}).", graph.label()),
        )
    })
}

/// The operations that write the link into one graph: a copy of the other graph's object unless
/// an identical one is already there, then the relation.
fn link_operations(
    local: &KnowledgeStructure,
    graph: &Side,
    remote: &KnowledgeObject,
    relation: &Operation,
) -> Result<Vec<Operation>, ToolError> {
    let mut operations = Vec::new();
    match local.get(remote.id()) {
        None => operations
            .push(Operation::AddObject { identity: remote.identity.clone(), structure: remote.structure.clone() }),
        Some(existing) if existing.structure != remote.structure => {
            return Err(ToolError::new(
                ErrorCode::DuplicateObjectConflict,
                format!(
                    "Object '{}' already exists in {} with different content than in the other graph -- object \
                     ids must be globally unique across linked graphs.",
                    remote.id(),
                    graph.label()
                ),
            ));
        }
        Some(_) => {}
    }
    operations.push(relation.clone());
    Ok(operations)
}

/// Applies `operations` to a copy of the graph and refuses what would not commit.
fn check(mut structure: KnowledgeStructure, operations: &[Operation], graph: &Side) -> Result<(), ToolError> {
    let changes = ops::apply(&mut structure, operations)
        .map_err(|e| ToolError::new(ErrorCode::InvalidOperations, format!("Linking {} failed: {e}", graph.label())))?;
    let errors: Vec<_> =
        check_changes(&structure, &changes).into_iter().filter(|d| d.severity == Severity::Error).collect();
    if errors.is_empty() {
        return Ok(());
    }
    Err(ToolError::new(
        ErrorCode::ValidationFailed,
        format!("Linking would produce an invalid structure in {}.", graph.label()),
    )
    .with("diagnostics", serde_json::to_value(full_diagnostics(&errors)).unwrap_or(Value::Null)))
}

async fn commit(
    ctx: &ToolContext,
    graph: &Side,
    operations: Vec<Operation>,
    relation_id: &str,
) -> Result<String, ToolError> {
    let metadata = ctx
        .version_metadata(LinkGraphs::META.name, [("operation", json!("link")), ("relation_id", json!(relation_id))]);
    let request =
        CommitRequest::operations(operations).with_metadata(metadata).with_provenance((*ctx.provenance).clone());
    Ok(ctx.runtime.commit(&graph.session_id, request).await?.version.version_id)
}
