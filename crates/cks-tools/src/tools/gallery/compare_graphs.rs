//! `compare_graphs`: which object ids two graphs share, which only one has, and how shared objects
//! differ. Each side is a registered name or a session id.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeSet;

use super::resolve_side;
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Coercion, Named, SessionCheck, Tool, ToolMeta};
use crate::tools::versions::field_level_diff;

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
    /// Compare relations too, not only plain objects (default true).
    #[serde(default = "yes")]
    pub(crate) include_relations: bool,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    /// Side A's registered name, or its session id when given by id.
    graph_a: String,
    graph_b: String,
    graph_a_session_id: String,
    graph_b_session_id: String,
    shared_object_count: usize,
    only_in_a_count: usize,
    only_in_b_count: usize,
    /// Sorted.
    shared_object_ids: Vec<String>,
    only_in_a: Vec<String>,
    only_in_b: Vec<String>,
    /// Shared ids whose content differs: {id, action: "modified", type, name, changes}.
    differences: Vec<Map<String, Value>>,
}

pub(crate) struct CompareGraphs;

#[async_trait::async_trait]
impl Tool for CompareGraphs {
    type Input = Input;
    type Output = Output;
    const ARGUMENT_COERCIONS: &'static [(&'static str, Coercion)] = &[("include_relations", Coercion::Truthy)];
    const NAMED: &'static [(&'static str, Named)] = &[("graph_a_name", Named::Graph), ("graph_b_name", Named::Graph)];
    const TITLE: &'static str = "Compare two graphs";
    const META: ToolMeta = ToolMeta {
        name: "compare_graphs",
        description: "Compare two graphs (read-only): the object ids both have, those only one has, and for \
            shared ids whose content differs the field-level changes from A to B. Each side is given by \
            registered name ('graph_a_name', 'graph_b_name') or by session id ('graph_a_session_id', \
            'graph_b_session_id', which win over the names). 'include_relations' false compares plain objects \
            only. Returns {graph_a, graph_b, graph_a_session_id, graph_b_session_id, shared_object_count, \
            only_in_a_count, only_in_b_count, shared_object_ids, only_in_a, only_in_b, differences}.",
        mutates_graph: false,
        creates_session: false,
        destructive: false,
        idempotent: true,
        open_world: false,
        session_fields: &["graph_a_session_id", "graph_b_session_id"],
        session_checks: &[
            SessionCheck::exists("graph_a_session_id").if_given(),
            SessionCheck::exists("graph_b_session_id").if_given(),
        ],
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        let a = resolve_side(ctx, input.graph_a_name, input.graph_a_session_id, "graph_a_name (or graph_a_session_id)")
            .await?;
        let b = resolve_side(ctx, input.graph_b_name, input.graph_b_session_id, "graph_b_name (or graph_b_session_id)")
            .await?;
        // Side A is copied out (objects are shared, so this is cheap); B is read in place.
        let structure_a = ctx.runtime.read(&a.session_id, |s, _| s.clone()).await?;
        let include_relations = input.include_relations;
        let (shared, only_in_a, only_in_b, differences) = ctx
            .runtime
            .read(&b.session_id, |structure_b, _| {
                let ids = |s: &cks_core::KnowledgeStructure| -> BTreeSet<String> {
                    s.objects().filter(|o| include_relations || !o.is_relation()).map(|o| o.id().to_owned()).collect()
                };
                let (ids_a, ids_b) = (ids(&structure_a), ids(structure_b));
                let shared: Vec<String> = ids_a.intersection(&ids_b).cloned().collect();
                let differences = shared
                    .iter()
                    .filter_map(|id| {
                        let diff = field_level_diff(
                            structure_a.get(id).map(|o| o.as_ref()),
                            structure_b.get(id).map(|o| o.as_ref()),
                        );
                        let Value::Object(diff) = diff else { return None };
                        (diff.get("action").and_then(Value::as_str) == Some("modified")).then(|| {
                            let mut entry = Map::from_iter([("id".to_owned(), Value::String(id.clone()))]);
                            entry.extend(diff);
                            entry
                        })
                    })
                    .collect::<Vec<_>>();
                let only_in_a: Vec<String> = ids_a.difference(&ids_b).cloned().collect();
                let only_in_b: Vec<String> = ids_b.difference(&ids_a).cloned().collect();
                (shared, only_in_a, only_in_b, differences)
            })
            .await?;
        Ok(Output {
            graph_a: a.label(),
            graph_b: b.label(),
            graph_a_session_id: a.session_id,
            graph_b_session_id: b.session_id,
            shared_object_count: shared.len(),
            only_in_a_count: only_in_a.len(),
            only_in_b_count: only_in_b.len(),
            shared_object_ids: shared,
            only_in_a,
            only_in_b,
            differences,
        })
    }
}
