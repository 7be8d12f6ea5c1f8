//! Version history: list, revert, compare, explain; plus the diff shapes the branch tools share.

mod compare_versions;
mod explain_diff;
mod list_versions;
mod revert_version;

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Map, Value, json};

use cks_core::ops::Operation;
use cks_core::{Base, KnowledgeObject, KnowledgeStructure, diff_from, summarize_from};

use crate::tool::{Listed, listed};

pub(crate) fn tools() -> Vec<Listed> {
    vec![
        listed(list_versions::ListVersions),
        listed(revert_version::RevertVersion),
        listed(compare_versions::CompareVersions),
        listed(explain_diff::ExplainDiff),
    ]
}

/// Operations in wire form.
pub(crate) fn wire_operations(operations: &[Operation]) -> Value {
    operations.iter().map(Operation::to_value).collect()
}

/// The diff from `base` to `current` in the shape compare_versions and fork_sandbox return:
/// `{summary: {counts}, operations: [wire ops]}`.
pub(crate) fn diff_report(base: Base<'_>, current: &KnowledgeStructure) -> (ChangeCounts, Value) {
    let operations = diff_from(base, current);
    (ChangeCounts::of(base, current, &operations), wire_operations(&operations))
}

/// A diff's operations counted by kind, as the reference counts them: a changed object or relation
/// is one removal plus one addition (that is what the diff does to it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, JsonSchema)]
pub(crate) struct ChangeCounts {
    /// `add_object` operations: new objects plus changed ones.
    pub(crate) added_objects: u64,
    /// `remove_object` operations: deleted objects plus changed ones.
    pub(crate) removed_objects: u64,
    /// `add_relation` operations: new relations, changed ones, and ones re-added because a
    /// participant was replaced.
    pub(crate) added_relations: u64,
    /// `remove_relation` operations, counted like `added_relations`.
    pub(crate) removed_relations: u64,
    /// Objects present on both sides whose name differs (the reference always reported 0).
    pub(crate) renamed_objects: u64,
}

impl ChangeCounts {
    fn of(base: Base<'_>, current: &KnowledgeStructure, operations: &[Operation]) -> Self {
        let mut counts = ChangeCounts::default();
        for operation in operations {
            match operation {
                Operation::AddObject { .. } => counts.added_objects += 1,
                Operation::RemoveObject { .. } => counts.removed_objects += 1,
                Operation::AddRelation { .. } => counts.added_relations += 1,
                Operation::RemoveRelation { .. } => counts.removed_relations += 1,
                _ => {}
            }
        }
        // The diff writes a rename as a removal plus an addition; count the renames themselves.
        counts.renamed_objects = summarize_from(base, current)
            .modified_objects
            .iter()
            .filter(|id| match (base.get(current, id), current.get(id)) {
                (Some(before), Some(after)) => before.identity.name != after.identity.name,
                _ => false,
            })
            .count() as u64;
        counts
    }
}

/// What happened to one id between two points: `{action: added|deleted|modified|unchanged, type,
/// name, structure | changes}`, `{}` when it is absent from both.
///
/// `changes` maps each differing structure key to `{from, to}`; identity changes appear under
/// `identity.name` and `identity.type` (the reference compared the structure only, so a rename
/// read as "unchanged").
pub(crate) fn field_level_diff(base: Option<&KnowledgeObject>, target: Option<&KnowledgeObject>) -> Value {
    match (base, target) {
        (None, None) => json!({}),
        (None, Some(added)) => json!({
            "action": "added",
            "type": added.identity.r#type,
            "name": added.identity.name,
            "structure": added.structure,
        }),
        (Some(deleted), None) => json!({
            "action": "deleted",
            "type": deleted.identity.r#type,
            "name": deleted.identity.name,
        }),
        (Some(before), Some(after)) => {
            let mut changes = Map::new();
            let mut identity_change = |key: &str, from: &str, to: &str| {
                if from != to {
                    changes.insert(key.to_owned(), json!({"from": from, "to": to}));
                }
            };
            identity_change("identity.name", &before.identity.name, &after.identity.name);
            identity_change("identity.type", &before.identity.r#type, &after.identity.r#type);
            let keys: std::collections::BTreeSet<&str> =
                before.structure.keys().chain(after.structure.keys()).collect();
            for key in keys {
                let (from, to) = (before.structure.get(key), after.structure.get(key));
                if from != to {
                    changes.insert(key.to_owned(), json!({"from": from, "to": to}));
                }
            }
            json!({
                "action": if changes.is_empty() { "unchanged" } else { "modified" },
                "type": after.identity.r#type,
                "name": after.identity.name,
                "changes": changes,
            })
        }
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! Helpers for the tool tests: an in-memory runtime and calls through the standard registry.

    use serde_json::{Value, json};
    use std::sync::Arc;

    use cks_runtime::store::memory::MemoryStore;
    use cks_runtime::{Runtime, RuntimeConfig};

    use crate::{Registry, ToolContext};

    pub(crate) fn context() -> ToolContext {
        ToolContext::new(Arc::new(Runtime::new(Arc::new(MemoryStore::new()), RuntimeConfig::default())))
    }

    /// Calls a tool through the standard registry (schema and session checks included).
    pub(crate) async fn call(ctx: &ToolContext, name: &str, args: Value) -> Value {
        Registry::standard().call(name, args, ctx).await.expect("a registered tool")
    }

    pub(crate) fn node(id: &str, kind: &str, name: &str, structure: Value) -> Value {
        json!({"identity": {"id": id, "type": kind, "name": name}, "structure": structure})
    }

    pub(crate) fn relation(id: &str, participants: &[&str], relation_type: &str) -> Value {
        json!({"identity": {"id": id, "type": "Relation", "name": id},
               "structure": {"participants": participants, "relation_type": relation_type}})
    }

    /// A session holding `objects`, with one first version; returns (session id, version id).
    pub(crate) async fn session(ctx: &ToolContext, objects: Value) -> (String, String) {
        let structure = cks_core::json::parse_value(json!({"version": "1.0", "objects": objects})).unwrap();
        let options = cks_runtime::NewSession { first_version: Some(Default::default()), ..Default::default() };
        let info = ctx.runtime.create_session(structure, options).await.unwrap();
        (info.session_id, info.latest_version_id.unwrap())
    }

    /// Applies wire operations to a session through evolve_knowledge; returns the new version id.
    pub(crate) async fn evolve(ctx: &ToolContext, session_id: &str, operations: Value) -> String {
        let result = call(ctx, "evolve_knowledge", json!({"session_id": session_id, "operations": operations})).await;
        result["version_id"].as_str().unwrap_or_else(|| panic!("evolve failed: {result}")).to_owned()
    }

    /// The keys of a result object, sorted.
    pub(crate) fn keys(value: &Value) -> Vec<&str> {
        let mut keys: Vec<&str> = value.as_object().expect("an object").keys().map(String::as_str).collect();
        keys.sort_unstable();
        keys
    }

    /// The ids of a session's current state, in order.
    pub(crate) async fn ids(ctx: &ToolContext, session_id: &str) -> Vec<String> {
        ctx.runtime.read(session_id, |s, _| s.ids().map(str::to_owned).collect()).await.unwrap()
    }
}
