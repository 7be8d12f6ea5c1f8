//! "Why is this believed?": the `InferenceStep` chains behind an object, shared by
//! `explain_knowledge` (`object_id`) and `visualize_graph` (`mode: inference`).
//!
//! An `InferenceStep` is an object of that type whose structure names `premises` (object ids),
//! a `conclusion` (an object id), and optionally `operator`, `confidence`, `justification` and
//! `superseded_by`. A step is *active* when its own `superseded_by` is falsy (as the core's
//! reasoning constraints decide). A premise that names another `InferenceStep` is a citation of
//! that step (meta-reasoning), not a fact to explain further.

use serde_json::{Map, Value, json};
use std::collections::{HashMap, HashSet};

use crate::{KnowledgeObject, KnowledgeStructure};

pub const STEP_TYPE: &str = "InferenceStep";
/// Deepest premise chain an explanation follows before it stubs the rest (`max_depth`).
pub const MAX_DEPTH: usize = 32;
/// Most object entries one explanation holds before it stubs the rest (`max_nodes`).
pub const MAX_NODES: usize = 1_000;

/// Python truthiness, as the reasoning checks read `superseded_by`.
pub use crate::validate::pyrepr::truthy;

pub fn is_step(object: &KnowledgeObject) -> bool {
    object.identity.r#type == STEP_TYPE
}

pub fn is_active(step: &KnowledgeObject) -> bool {
    !truthy(step.structure.get("superseded_by"))
}

/// The premise ids of a step (non-string items are ignored).
pub fn premises(step: &KnowledgeObject) -> Vec<&str> {
    match step.structure.get("premises") {
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

/// The steps of a structure, indexed by the object they conclude (structure order kept).
#[derive(Debug, Default)]
pub struct StepIndex<'a> {
    by_conclusion: HashMap<&'a str, Vec<&'a KnowledgeObject>>,
    /// Distinct conclusions of active steps, in structure order.
    active_conclusions: Vec<&'a str>,
}

impl<'a> StepIndex<'a> {
    pub fn new(structure: &'a KnowledgeStructure) -> Self {
        let mut index = StepIndex::default();
        let mut seen = HashSet::new();
        for object in structure.objects().map(|o| &**o).filter(|o| is_step(o)) {
            let Some(conclusion) = object.structure.get("conclusion").and_then(Value::as_str) else { continue };
            index.by_conclusion.entry(conclusion).or_default().push(object);
            if is_active(object) && !conclusion.is_empty() && seen.insert(conclusion) {
                index.active_conclusions.push(conclusion);
            }
        }
        index
    }

    pub fn active(&self, id: &str) -> impl Iterator<Item = &'a KnowledgeObject> + '_ {
        self.by_conclusion.get(id).into_iter().flatten().copied().filter(|s| is_active(s))
    }

    pub fn superseded(&self, id: &str) -> impl Iterator<Item = &'a KnowledgeObject> + '_ {
        self.by_conclusion.get(id).into_iter().flatten().copied().filter(|s| !is_active(s))
    }

    pub fn active_conclusions(&self) -> &[&'a str] {
        &self.active_conclusions
    }
}

/// Explains why `object_id` is believed. An id the structure lacks gets `exists: false`,
/// `has_inference: false` and nothing else to report (as in the reference).
///
/// The result is a tree rooted at the object:
/// `{object_id, name, type, exists, truncated, has_inference, active_steps, superseded_steps}`
/// (`has_inference`: an active step concludes it; `null` on a truncated stub) where each active
/// step is `{step_id, name, operator, confidence, justification, alternatives_considered,
/// premises}` and each premise is
/// either a citation `{object_id, cites_step: true, exists}` or an object entry of the same shape
/// as the root plus `cites_step: false`. Superseded steps are leaves
/// `{step_id, name, operator, confidence, justification, superseded_by}`.
///
/// `truncated` is `null` for a fully explained entry, else why it was not expanded: `"cycle"` (the
/// object is its own ancestor in this chain), `"already_explained"` (an inferred object expanded
/// earlier in this tree: shared premises are expanded once, which keeps the tree linear in the
/// graph's size; a base fact has nothing to expand and is shown again in full),
/// `"max_depth"` (deeper than [`MAX_DEPTH`]) or `"max_nodes"` (the tree already holds
/// [`MAX_NODES`] entries). The root adds `is_truncated` (a `max_depth` or `max_nodes` stub
/// exists), `base_facts` (the expanded objects no active step concludes: what the belief finally
/// rests on, in discovery order) and `step_count`.
pub fn explain(structure: &KnowledgeStructure, object_id: &str) -> Value {
    let index = StepIndex::new(structure);
    let mut walker = Walker {
        structure,
        index: &index,
        path: Vec::new(),
        expanded: HashSet::new(),
        nodes: 0,
        cut: false,
        base_facts: Vec::new(),
        steps: HashSet::new(),
    };
    let mut root = walker.object(object_id);
    let Value::Object(map) = &mut root else { unreachable!("object entries are maps") };
    map.insert("is_truncated".into(), Value::Bool(walker.cut));
    map.insert("base_facts".into(), json!(walker.base_facts));
    map.insert("step_count".into(), json!(walker.steps.len()));
    root
}

struct Walker<'a, 'i> {
    structure: &'a KnowledgeStructure,
    index: &'i StepIndex<'a>,
    /// Objects on the chain from the root to the current entry.
    path: Vec<&'a str>,
    expanded: HashSet<&'a str>,
    nodes: usize,
    cut: bool,
    base_facts: Vec<&'a str>,
    steps: HashSet<&'a str>,
}

impl<'a> Walker<'a, '_> {
    fn object(&mut self, id: &'a str) -> Value {
        self.nodes += 1;
        let object = self.structure.get(id);
        let mut entry = Map::new();
        entry.insert("object_id".into(), json!(id));
        entry.insert("name".into(), json!(object.map(|o| &o.identity.name)));
        entry.insert("type".into(), json!(object.map(|o| &o.identity.r#type)));
        entry.insert("exists".into(), json!(object.is_some()));
        let truncated = if object.is_none() {
            None
        } else if self.path.contains(&id) {
            Some("cycle")
        } else if self.expanded.contains(id) && self.index.active(id).next().is_some() {
            // A base fact seen before is shown again in full: it is a leaf, so the tree stays
            // linear in the graph's size.
            Some("already_explained")
        } else if self.path.len() >= MAX_DEPTH {
            Some("max_depth")
        } else if self.nodes > MAX_NODES {
            Some("max_nodes")
        } else {
            None
        };
        if matches!(truncated, Some("max_depth" | "max_nodes")) {
            self.cut = true;
        }
        entry.insert("truncated".into(), json!(truncated));
        let expand = object.is_some() && truncated.is_none();
        let mut active = Vec::new();
        let mut superseded = Vec::new();
        if expand {
            let first_time = self.expanded.insert(id);
            self.path.push(id);
            for step in self.index.active(id) {
                active.push(self.step(step));
            }
            for step in self.index.superseded(id) {
                self.steps.insert(step.id());
                superseded.push(json!({
                    "step_id": step.id(),
                    "name": step.identity.name,
                    "operator": step.structure.get("operator"),
                    "confidence": step.structure.get("confidence"),
                    "justification": step.structure.get("justification"),
                    "superseded_by": step.structure.get("superseded_by"),
                }));
            }
            self.path.pop();
            if active.is_empty() && first_time {
                self.base_facts.push(id);
            }
        }
        // Unknown for a stub (its steps were not walked here), else whether any active step
        // concludes it.
        let has_inference = if truncated.is_some() { Value::Null } else { Value::Bool(!active.is_empty()) };
        entry.insert("has_inference".into(), has_inference);
        entry.insert("active_steps".into(), Value::Array(active));
        entry.insert("superseded_steps".into(), Value::Array(superseded));
        Value::Object(entry)
    }

    fn step(&mut self, step: &'a KnowledgeObject) -> Value {
        self.steps.insert(step.id());
        let mut premises_out = Vec::new();
        for premise in premises(step) {
            match self.structure.get(premise) {
                Some(cited) if is_step(cited) => {
                    premises_out.push(json!({"object_id": premise, "cites_step": true, "exists": true}));
                }
                _ => {
                    let mut entry = self.object(premise);
                    entry["cites_step"] = Value::Bool(false);
                    premises_out.push(entry);
                }
            }
        }
        json!({
            "step_id": step.id(),
            "name": step.identity.name,
            "operator": step.structure.get("operator"),
            "confidence": step.structure.get("confidence"),
            "justification": step.structure.get("justification"),
            "alternatives_considered": match step.structure.get("alternatives_considered") {
                Some(Value::Array(alternatives)) => alternatives.clone(),
                _ => Vec::new(),
            },
            "premises": premises_out,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{json_object as obj, json_structure as structure};

    fn step(id: &str, premises: &[&str], conclusion: &str, superseded_by: Option<&str>) -> Value {
        obj(
            id,
            STEP_TYPE,
            id,
            json!({"premises": premises, "conclusion": conclusion, "operator": "deductive", "confidence": 0.9,
                   "superseded_by": superseded_by}),
        )
    }

    #[test]
    fn walks_chains_to_base_facts_and_stops_at_cycles() {
        let s = crate::json::parse_value(structure(vec![
            obj("a", "Fact", "A", json!({})),
            obj("b", "Fact", "B", json!({})),
            obj("c", "Claim", "C", json!({})),
            obj("d", "Claim", "D", json!({})),
            step("s1", &["a", "b"], "c", None),
            step("s2", &["c"], "d", None),
            step("s0", &["a"], "d", Some("s2")),
            // d -> c -> d: a cycle through s3.
            step("s3", &["d", "s1"], "c", None),
        ]))
        .unwrap();
        let e = explain(&s, "d");
        assert_eq!(e["object_id"], "d");
        assert_eq!(e["truncated"], Value::Null);
        assert_eq!(e["is_truncated"], false);
        assert_eq!(e["active_steps"].as_array().unwrap().len(), 1);
        let s2 = &e["active_steps"][0];
        assert_eq!(s2["step_id"], "s2");
        let c = &s2["premises"][0];
        assert_eq!((c["object_id"].as_str(), c["cites_step"].as_bool()), (Some("c"), Some(false)));
        assert_eq!(c["active_steps"][0]["step_id"], "s1");
        assert_eq!(c["active_steps"][1]["step_id"], "s3");
        let s3 = &c["active_steps"][1];
        assert_eq!(s3["premises"][0]["object_id"], "d");
        assert_eq!(s3["premises"][0]["truncated"], "cycle");
        assert_eq!(s3["premises"][1], json!({"object_id": "s1", "cites_step": true, "exists": true}));
        assert_eq!(e["superseded_steps"][0]["step_id"], "s0");
        assert_eq!(e["superseded_steps"][0]["superseded_by"], "s2");
        assert_eq!(e["base_facts"], json!(["a", "b"]));
        assert_eq!(e["step_count"], 4);
        assert_eq!(e["has_inference"], true);
        assert_eq!(c["has_inference"], true);
        assert_eq!(s3["premises"][0]["has_inference"], Value::Null, "a stub");
        assert_eq!(c["active_steps"][0]["premises"][0]["has_inference"], false, "a base fact");
        assert_eq!(s2["alternatives_considered"], json!([]));
        let missing = explain(&s, "missing");
        assert_eq!((missing["exists"].as_bool(), missing["has_inference"].as_bool()), (Some(false), Some(false)));
        assert_eq!(missing["active_steps"], json!([]));
        assert_eq!(missing["base_facts"], json!([]));
    }

    #[test]
    fn a_shared_base_fact_is_shown_in_full_and_a_shared_inference_once() {
        let s = crate::json::parse_value(structure(vec![
            obj("p", "Fact", "P", json!({})),
            obj("m", "Claim", "M", json!({})),
            obj("c", "Claim", "C", json!({})),
            step("sm", &["p"], "m", None),
            step("s1", &["p", "m"], "c", None),
            step("s2", &["p", "m"], "c", None),
        ]))
        .unwrap();
        let e = explain(&s, "c");
        let second = &e["active_steps"][1]["premises"];
        assert_eq!((second[0]["truncated"].clone(), second[0]["has_inference"].clone()), (Value::Null, json!(false)));
        assert_eq!(
            (second[1]["truncated"].clone(), second[1]["has_inference"].clone()),
            (json!("already_explained"), Value::Null)
        );
        assert_eq!(e["base_facts"], json!(["p"]), "listed once");
    }

    #[test]
    fn long_chains_are_cut_at_max_depth() {
        let mut objects = vec![obj("f0", "Fact", "f0", json!({}))];
        for i in 1..=MAX_DEPTH + 5 {
            objects.push(obj(&format!("f{i}"), "Claim", "x", json!({})));
            objects.push(step(&format!("s{i}"), &[&format!("f{}", i - 1)], &format!("f{i}"), None));
        }
        let s = crate::json::parse_value(structure(objects)).unwrap();
        let e = explain(&s, &format!("f{}", MAX_DEPTH + 5));
        assert_eq!(e["is_truncated"], true);
        let mut node = &e;
        let mut depth = 0;
        while let Some(next) = node["active_steps"].get(0) {
            node = &next["premises"][0];
            depth += 1;
        }
        assert_eq!(depth, MAX_DEPTH);
        assert_eq!(node["truncated"], "max_depth");
    }
}
