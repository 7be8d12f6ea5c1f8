//! `explain_diff`: what changed between a historical version and the current state, in plain
//! English plus per-object field-level details.
//!
//! Classification comes from object hashes (so nothing that changed is missed), not from the diff
//! operations: the reference classified ids by comparing structures only, so an object whose only
//! change was its name or type came out "unchanged" and was silently left out.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeSet;

use cks_core::ops::Operation;
use cks_core::{Base, KnowledgeObject, KnowledgeStructure, diff_from, summarize_from};

use super::field_level_diff;
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{SessionCheck, Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The session whose current state is explained.
    pub(crate) session_id: String,
    /// The historical version to compare the current state against (from list_versions).
    pub(crate) target_version_id: String,
    /// Most `details` entries to return, all lists together (0: all; default: as many as fit 48 KB).
    pub(crate) limit: Option<u64>,
    /// Entries to skip, counted across the lists in their order (a `next_offset`).
    #[serde(default)]
    pub(crate) offset: u64,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    session_id: String,
    /// The historical version compared from (`target_version_id`).
    base_version_id: String,
    /// What changed, in plain English ("No changes detected." when nothing did).
    summary: String,
    details: Details,
    /// True when `details` entries were left out (the summary's counts are whole; its lists of
    /// names are then cut short).
    #[serde(skip_serializing_if = "Option::is_none")]
    truncated: Option<bool>,
    /// The `offset` that continues the entries.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_offset: Option<u64>,
}

/// Per-id entries `{id, action, type, name, structure | changes}` (`changes` maps each differing
/// key, `identity.name` and `identity.type` included, to `{from, to}`).
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Details {
    added_objects: Vec<Value>,
    removed_objects: Vec<Value>,
    /// Objects whose structure or type changed (a rename alone is only in `renamed_objects`).
    modified_objects: Vec<Value>,
    added_relations: Vec<Value>,
    removed_relations: Vec<Value>,
    modified_relations: Vec<Value>,
    /// Relations the diff removes and re-adds only because a participant was replaced.
    relinked_relations: Vec<Value>,
    /// `{id, new_name}`.
    renamed_objects: Vec<Value>,
    /// Added InferenceSteps: `{id, premises, conclusion, operator, confidence, justification}`.
    added_inference_steps: Vec<Value>,
}

pub(crate) struct ExplainDiff;

#[async_trait::async_trait]
impl Tool for ExplainDiff {
    type Input = Input;
    type Output = Output;
    const TITLE: &'static str = "Explain what changed";
    const META: ToolMeta = ToolMeta {
        name: "explain_diff",
        description: "Explain in plain English what changed between a historical version of a session \
            ('target_version_id') and its current state: objects and relations added, removed, modified (with \
            field-level from/to values), objects renamed, and inference steps recorded. Name-only and type-only \
            changes are reported (the reference server silently skipped them). Returns {session_id, \
            base_version_id, summary (text), details: {added_objects, removed_objects, modified_objects, \
            added_relations, removed_relations, modified_relations, relinked_relations, renamed_objects, \
            added_inference_steps}}.",
        mutates_graph: false,
        creates_session: false,
        destructive: false,
        idempotent: true,
        open_world: false,
        session_fields: &["session_id"],
        session_checks: &[SessionCheck::exists("session_id")],
        // compare_versions gives a chat the same change as data, which the model puts in words itself.
        llm_exposed: true,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        let (offset, limit) = (input.offset, input.limit);
        let (summary, details, next_offset) = ctx
            .runtime
            .read_against(&input.session_id, &input.target_version_id, move |base, current, _| {
                explain(base, current, offset, limit)
            })
            .await?;
        Ok(Output {
            session_id: input.session_id,
            base_version_id: input.target_version_id,
            summary,
            details,
            truncated: next_offset.map(|_| true),
            next_offset,
        })
    }
}

/// Names a cut summary lists per kind of change.
const NAMES_WHEN_CUT: usize = 20;

/// The summary text, the details object (the page of its entries from `offset`) and the offset
/// that continues them.
fn explain(
    base: Base<'_>,
    current: &KnowledgeStructure,
    offset: u64,
    limit: Option<u64>,
) -> (String, Details, Option<u64>) {
    let changed = summarize_from(base, current);
    let entries = |ids: &[String]| -> Vec<Value> {
        let sorted: BTreeSet<&str> = ids.iter().map(String::as_str).collect();
        sorted
            .into_iter()
            .map(|id| {
                let mut entry = json!({"id": id});
                if let Value::Object(fields) =
                    field_level_diff(base.get(current, id).map(|o| &**o), object(current, id))
                {
                    entry.as_object_mut().expect("an object").extend(fields);
                }
                entry
            })
            .collect()
    };

    // A modified object whose only change is its name is reported as renamed, not modified.
    let renamed_only =
        |entry: &Value| entry["changes"].as_object().is_some_and(|c| c.len() == 1 && c.contains_key("identity.name"));
    let mut renamed_objects = Vec::new();
    let mut modified_objects = Vec::new();
    for entry in entries(&changed.modified_objects) {
        if entry["changes"].get("identity.name").is_some() {
            renamed_objects.push(json!({"id": entry["id"], "new_name": entry["name"]}));
        }
        if !renamed_only(&entry) {
            modified_objects.push(entry);
        }
    }
    let added_objects = entries(&changed.added_objects);
    let removed_objects = entries(&changed.removed_objects);
    let added_relations = entries(&changed.added_relations);
    let removed_relations = entries(&changed.removed_relations);
    let modified_relations = entries(&changed.modified_relations);
    // Relations the diff removes and re-adds only because a participant changed.
    let listed: BTreeSet<&str> = changed
        .added_relations
        .iter()
        .chain(&changed.removed_relations)
        .chain(&changed.modified_relations)
        .map(String::as_str)
        .collect();
    let relinked: Vec<String> = diff_from(base, current)
        .iter()
        .filter_map(|op| match op {
            Operation::RemoveRelation { relation_id } => Some(relation_id.as_str()),
            _ => None,
        })
        .filter(|id| !listed.contains(id) && current.contains(id))
        .map(str::to_owned)
        .collect();
    let relinked_relations = entries(&relinked);
    let added_inference_steps: Vec<Value> = added_objects
        .iter()
        .filter(|o| o["type"] == "InferenceStep")
        .map(|o| {
            let s = &o["structure"];
            let premises = match s.get("premises") {
                Some(p) if truthy(p) => p.clone(),
                _ => json!([]),
            };
            json!({"id": o["id"], "premises": premises, "conclusion": s.get("conclusion"), "operator": s.get("operator"),
                   "confidence": s.get("confidence"), "justification": s.get("justification")})
        })
        .collect();

    let lists = [
        added_objects,
        removed_objects,
        modified_objects,
        added_relations,
        removed_relations,
        modified_relations,
        relinked_relations,
        renamed_objects,
        added_inference_steps,
    ];
    let tagged: Vec<(usize, &Value)> =
        lists.iter().enumerate().flat_map(|(i, list)| list.iter().map(move |e| (i, e))).collect();
    let page = crate::bounds::page_by(tagged, offset, limit, |(_, e)| crate::bounds::json_size(e));
    let cut = page.next_offset.is_some() || offset > 0;
    let mut paged: [Vec<Value>; 9] = Default::default();
    for (i, entry) in page.items {
        paged[i].push(entry.clone());
    }
    let next_offset = page.next_offset;
    // The summary below reads the whole lists; the answer carries the page.
    let [
        added_objects,
        removed_objects,
        modified_objects,
        added_relations,
        removed_relations,
        modified_relations,
        relinked_relations,
        renamed_objects,
        added_inference_steps,
    ] = &lists;

    let mut parts: Vec<String> = Vec::new();
    // A cut answer names at most NAMES_WHEN_CUT per kind, and counts the rest.
    let shown = |entries: &[Value], each: &dyn Fn(&Value) -> String, separator: &str| {
        let names = if cut { &entries[..entries.len().min(NAMES_WHEN_CUT)] } else { entries };
        let mut listed = names.iter().map(each).collect::<Vec<_>>().join(separator);
        if names.len() < entries.len() {
            listed.push_str(&format!("{separator}… ({} more)", entries.len() - names.len()));
        }
        listed
    };
    let listing = |entries: &[Value]| shown(entries, &|e| format!("{} ({})", text(&e["name"]), text(&e["type"])), ", ");
    if !added_objects.is_empty() {
        parts.push(format!("Added {} object(s): {}", added_objects.len(), listing(added_objects)));
    }
    if !removed_objects.is_empty() {
        parts.push(format!("Removed {} object(s): {}", removed_objects.len(), listing(removed_objects)));
    }
    if !modified_objects.is_empty() {
        parts.push(format!("Modified {} object(s): {}", modified_objects.len(), listing(modified_objects)));
    }
    for (list, verb) in [(added_relations, "Added"), (removed_relations, "Removed"), (modified_relations, "Modified")] {
        if !list.is_empty() {
            parts.push(format!("{verb} {} relation(s)", list.len()));
        }
    }
    if !relinked_relations.is_empty() {
        parts.push(format!(
            "Re-linked {} relation(s) with no actual change (one of their participants was replaced elsewhere in \
             this diff)",
            relinked_relations.len()
        ));
    }
    if !renamed_objects.is_empty() {
        let renames = shown(renamed_objects, &|r| format!("{} → {}", text(&r["id"]), text(&r["new_name"])), ", ");
        parts.push(format!("Renamed {} object(s): {}", renamed_objects.len(), renames));
    }
    if !added_inference_steps.is_empty() {
        let steps = shown(added_inference_steps, &describe_inference, "; ");
        parts.push(format!("Recorded {} inference(s): {}", added_inference_steps.len(), steps));
    }
    if parts.is_empty() {
        parts.push("No changes detected.".into());
    }

    let [
        added_objects,
        removed_objects,
        modified_objects,
        added_relations,
        removed_relations,
        modified_relations,
        relinked_relations,
        renamed_objects,
        added_inference_steps,
    ] = paged;
    let details = Details {
        added_objects,
        removed_objects,
        modified_objects,
        added_relations,
        removed_relations,
        modified_relations,
        relinked_relations,
        renamed_objects,
        added_inference_steps,
    };
    (parts.join(" "), details, next_offset)
}

fn object<'s>(structure: &'s KnowledgeStructure, id: &str) -> Option<&'s KnowledgeObject> {
    structure.get(id).map(|o| &**o)
}

/// "'step' concludes 'c' (deductive, confidence 0.9) from premises ['a', 'b']".
fn describe_inference(step: &Value) -> String {
    let mut bits = vec![format!("'{}'", text(&step["id"]))];
    if truthy(&step["conclusion"]) {
        bits.push(format!("concludes '{}'", text(&step["conclusion"])));
    }
    let mut qualifier = Vec::new();
    if truthy(&step["operator"]) {
        qualifier.push(text(&step["operator"]));
    }
    if !step["confidence"].is_null() {
        qualifier.push(format!("confidence {}", text(&step["confidence"])));
    }
    if !qualifier.is_empty() {
        bits.push(format!("({})", qualifier.join(", ")));
    }
    if truthy(&step["premises"]) {
        bits.push(format!("from premises {}", python_repr(&step["premises"])));
    }
    bits.join(" ")
}

/// A value as text: strings bare, anything else as JSON.
fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Python truthiness (the reference's summary rules are written in it).
fn truthy(value: &Value) -> bool {
    match value {
        Value::Null | Value::Bool(false) => false,
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::Bool(true) => true,
    }
}

/// Python's `repr` of a JSON value, as the reference prints premise lists: `['a', 'b']`.
fn python_repr(value: &Value) -> String {
    match value {
        Value::Null => "None".into(),
        Value::Bool(b) => if *b { "True" } else { "False" }.into(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'")),
        Value::Array(items) => format!("[{}]", items.iter().map(python_repr).collect::<Vec<_>>().join(", ")),
        Value::Object(map) => format!(
            "{{{}}}",
            map.iter().map(|(k, v)| format!("'{k}': {}", python_repr(v))).collect::<Vec<_>>().join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::tools::versions::testing::{call, context, evolve, keys, node, relation, session};

    fn id(value: &serde_json::Value) -> Vec<&str> {
        value.as_array().unwrap().iter().map(|e| e["id"].as_str().unwrap()).collect()
    }

    #[tokio::test]
    async fn explains_every_kind_of_change() {
        let ctx = context();
        let (sid, first) = session(
            &ctx,
            json!([
                node("a", "Claim", "Alpha", json!({"v": 1})),
                node("b", "Claim", "Beta", json!({"v": 2})),
                node("t", "Claim", "Typed", json!({})),
                node("gone", "Claim", "Gone", json!({})),
                relation("r", &["a", "b"], "supports"),
                relation("rg", &["gone", "t"], "supports"),
            ]),
        )
        .await;
        evolve(
            &ctx,
            &sid,
            json!([
                {"type": "rename_object", "object_id": "a", "new_name": "Alpha2"},
                {"type": "update_object", "object_id": "b", "structure_patch": {"v": 3, "w": true}},
                {"type": "remove_object", "object_id": "gone"},
                {"type": "add_object", "identity": {"id": "c", "type": "Evidence", "name": "Gamma"}, "structure": {"k": 1}},
                {"type": "add_relation", "identity": {"id": "r2", "type": "Relation", "name": "r2"},
                 "participants": ["b", "c"], "relation_type": "supports"},
                {"type": "record_inference", "identity": {"id": "s1", "type": "InferenceStep", "name": "Step"},
                 "structure": {"premises": ["a", "b"], "conclusion": "c", "operator": "deductive", "confidence": 0.9}},
            ]),
        )
        .await;

        let result = call(&ctx, "explain_diff", json!({"session_id": sid, "target_version_id": first})).await;
        assert_eq!(keys(&result), ["base_version_id", "details", "session_id", "summary"]);
        assert_eq!(result["session_id"], sid);
        assert_eq!(result["base_version_id"], first);
        let d = &result["details"];
        assert_eq!(
            keys(d),
            [
                "added_inference_steps",
                "added_objects",
                "added_relations",
                "modified_objects",
                "modified_relations",
                "relinked_relations",
                "removed_objects",
                "removed_relations",
                "renamed_objects"
            ]
        );
        assert_eq!(id(&d["added_objects"]), ["c", "s1"]);
        assert_eq!(
            d["added_objects"][0],
            json!({"id": "c", "action": "added", "type": "Evidence", "name": "Gamma", "structure": {"k": 1}})
        );
        assert_eq!(d["removed_objects"], json!([{"id": "gone", "action": "deleted", "type": "Claim", "name": "Gone"}]));
        assert_eq!(
            d["modified_objects"],
            json!([{"id": "b", "action": "modified", "type": "Claim", "name": "Beta",
                    "changes": {"v": {"from": 2, "to": 3}, "w": {"from": null, "to": true}}}])
        );
        assert_eq!(d["renamed_objects"], json!([{"id": "a", "new_name": "Alpha2"}]));
        assert_eq!(id(&d["added_relations"]), ["r2"]);
        assert_eq!(id(&d["removed_relations"]), ["rg"]);
        assert_eq!(d["modified_relations"], json!([]));
        assert_eq!(
            d["relinked_relations"],
            json!([{"id": "r", "action": "unchanged", "type": "Relation", "name": "r", "changes": {}}])
        );
        assert_eq!(
            d["added_inference_steps"],
            json!([{"id": "s1", "premises": ["a", "b"], "conclusion": "c", "operator": "deductive",
                    "confidence": 0.9, "justification": null}])
        );
        assert_eq!(
            result["summary"],
            "Added 2 object(s): Gamma (Evidence), Step (InferenceStep) Removed 1 object(s): Gone (Claim) \
             Modified 1 object(s): Beta (Claim) Added 1 relation(s) Removed 1 relation(s) Re-linked 1 relation(s) \
             with no actual change (one of their participants was replaced elsewhere in this diff) Renamed 1 \
             object(s): a → Alpha2 Recorded 1 inference(s): 's1' concludes 'c' (deductive, confidence 0.9) from \
             premises ['a', 'b']"
        );
    }

    #[tokio::test]
    async fn type_only_changes_are_not_skipped() {
        let ctx = context();
        let (sid, first) = session(&ctx, json!([node("a", "Claim", "A", json!({"v": 1}))])).await;
        evolve(
            &ctx,
            &sid,
            json!([
                {"type": "remove_object", "object_id": "a"},
                {"type": "add_object", "identity": {"id": "a", "type": "Evidence", "name": "A"}, "structure": {"v": 1}},
            ]),
        )
        .await;
        let result = call(&ctx, "explain_diff", json!({"session_id": sid, "target_version_id": first})).await;
        assert_eq!(
            result["details"]["modified_objects"],
            json!([{"id": "a", "action": "modified", "type": "Evidence", "name": "A",
                    "changes": {"identity.type": {"from": "Claim", "to": "Evidence"}}}])
        );
        assert_eq!(result["summary"], "Modified 1 object(s): A (Evidence)");
    }

    #[tokio::test]
    async fn no_changes_and_errors() {
        let ctx = context();
        let (sid, first) = session(&ctx, json!([node("a", "Claim", "A", json!({}))])).await;
        let same = call(&ctx, "explain_diff", json!({"session_id": sid, "target_version_id": first})).await;
        assert_eq!(same["summary"], "No changes detected.");
        assert!(same["details"].as_object().unwrap().values().all(|v| v == &json!([])));

        let missing = call(&ctx, "explain_diff", json!({"target_version_id": first})).await;
        assert_eq!(missing["error"], "missing_parameter");
        assert_eq!(missing["message"], "Missing required parameter: 'session_id'.");
        let unknown = call(&ctx, "explain_diff", json!({"session_id": sid, "target_version_id": "v9"})).await;
        assert_eq!(unknown["error"], "version_not_found");
        let no_session = call(&ctx, "explain_diff", json!({"session_id": "nope", "target_version_id": first})).await;
        assert_eq!(no_session["error"], "session_not_found");
    }

    #[tokio::test]
    async fn a_large_diff_is_cut_by_default_and_continues_from_next_offset() {
        let ctx = context();
        let (sid, first) = session(&ctx, json!([node("a", "Claim", "A", json!({}))])).await;
        let added: Vec<_> = (0..600)
            .map(|i| {
                json!({"type": "add_object", "identity": {"id": format!("n{i:03}"), "type": "Claim", "name": "N"},
                            "structure": {"text": "x".repeat(100)}})
            })
            .collect();
        evolve(&ctx, &sid, json!(added)).await;
        let args = |extra: serde_json::Value| {
            let mut args = json!({"session_id": sid, "target_version_id": first});
            args.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            args
        };
        let all = call(&ctx, "explain_diff", args(json!({"limit": 0}))).await;
        assert_eq!(id(&all["details"]["added_objects"]).len(), 600);
        assert!(all.get("truncated").is_none() && all.get("next_offset").is_none());
        assert!(!all["summary"].as_str().unwrap().contains("more)"));
        let mut collected = Vec::new();
        let mut offset = json!(0);
        while !offset.is_null() {
            let page = call(&ctx, "explain_diff", args(json!({"offset": offset}))).await;
            assert!(serde_json::to_string(&page).unwrap().len() < crate::bounds::ANSWER_BUDGET + 4096);
            let summary = page["summary"].as_str().unwrap();
            assert!(summary.starts_with("Added 600 object(s)") && summary.ends_with("… (580 more)"), "{summary}");
            assert_eq!(page.get("truncated").is_some(), page.get("next_offset").is_some());
            collected.extend(page["details"]["added_objects"].as_array().unwrap().clone());
            offset = page.get("next_offset").cloned().unwrap_or_default();
        }
        assert!(collected.len() == 600 && collected == *all["details"]["added_objects"].as_array().unwrap());
        let first_page = call(&ctx, "explain_diff", args(json!({}))).await;
        assert_eq!(first_page["truncated"], true);
    }
}
