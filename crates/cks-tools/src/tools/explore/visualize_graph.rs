//! `visualize_graph`: a Mermaid flowchart of a session's graph (`structure` mode) or of the
//! inference chains behind its beliefs (`inference` mode).
//!
//! Node ids are aliases `n0`, `n1`, … in node order, so no object id can break the syntax;
//! labels are quoted with every character Mermaid or its HTML rendering could read as syntax
//! replaced by an entity code (the reference escapes only `"`), and line breaks become `<br/>`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet, VecDeque};

use cks_core::KnowledgeStructure;
use cks_core::subgraph::{SubgraphQuery, query_subgraph};

use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{SessionCheck, Tool, ToolMeta};
use cks_core::inference::{self, StepIndex};

const MODES: [&str; 2] = ["structure", "inference"];

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The session to draw.
    pub(crate) session_id: String,
    #[schemars(
        description = "'structure' (default) or 'inference'.",
        extend("enum" = ["structure", "inference"])
    )]
    pub(crate) mode: Option<String>,
    #[schemars(description = "Structure mode: objects to start from (default: all). Inference mode: objects \
        to explain (default: every conclusion).")]
    pub(crate) seed_ids: Option<Vec<String>>,
    /// Structure mode: hops from the seeds (default 1).
    #[schemars(range(min = 0))]
    pub(crate) depth: Option<u32>,
    /// Most nodes to draw (default 20).
    #[schemars(range(min = 0))]
    pub(crate) max_objects: Option<u32>,
    /// Inference mode: also draw superseded steps.
    #[serde(default)]
    pub(crate) include_superseded: bool,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    /// A Mermaid flowchart (`graph TD ...`).
    mermaid: String,
    /// Nodes that could have been drawn.
    total_found_nodes: usize,
    /// Nodes drawn.
    returned_nodes: usize,
    /// Fewer nodes were drawn than found.
    is_truncated: bool,
}

pub(crate) struct VisualizeGraph;

#[async_trait::async_trait]
impl Tool for VisualizeGraph {
    type Input = Input;
    type Output = Output;
    const TITLE: &'static str = "Draw a graph";
    const META: ToolMeta = ToolMeta {
        name: "visualize_graph",
        description: "Draw a session's graph as a Mermaid flowchart. mode 'structure' (default): objects as \
            boxes joined by relation arrows, from 'seed_ids' expanded 'depth' hops, or every object. mode \
            'inference': the InferenceStep chains behind beliefs, back to base facts. Returns {mermaid, \
            total_found_nodes, returned_nodes, is_truncated}.",
        mutates_graph: false,
        creates_session: false,
        destructive: false,
        idempotent: true,
        open_world: false,
        session_fields: &["session_id"],
        session_checks: &[SessionCheck::exists("session_id")],
        // A diagram is for a screen, not for a model: a chat reads the same part with query_subgraph.
        llm_exposed: true,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        let mode = input.mode.clone().unwrap_or_else(|| "structure".into());
        if !MODES.contains(&mode.as_str()) {
            return Err(ToolError::invalid_parameter(format!(
                "Invalid value '{mode}' for parameter 'mode'. Allowed values: {}.",
                MODES.join(", ")
            ))
            .with("parameter", "mode")
            .with("allowed", json!(MODES)));
        }
        let session_id = input.session_id.clone();
        let diagram = ctx
            .runtime
            .read(&session_id, move |s, _| {
                if mode == "inference" { inference_diagram(s, &input) } else { structure_diagram(s, &input) }
            })
            .await?;
        Ok(diagram.into_result())
    }
}

/// Escapes a label for a double-quoted Mermaid label.
pub(crate) fn escape_label(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => out.push_str("#quot;"),
            '#' => out.push_str("#35;"),
            '<' => out.push_str("#lt;"),
            '>' => out.push_str("#gt;"),
            '&' => out.push_str("#amp;"),
            '[' => out.push_str("#91;"),
            ']' => out.push_str("#93;"),
            '{' => out.push_str("#123;"),
            '}' => out.push_str("#125;"),
            '|' => out.push_str("#124;"),
            '`' => out.push_str("#96;"),
            '\r' => {
                if chars.peek() == Some(&'\n') {
                    chars.next();
                }
                out.push_str("<br/>");
            }
            '\n' => out.push_str("<br/>"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

enum Shape {
    Box,
    Diamond,
}

/// A diagram under construction: nodes in insertion order, deduplicated edges. As in the
/// reference, the objects (boxes) are drawn and aliased `n0`, `n1`, … first, then the steps
/// (diamonds), each group in insertion order.
#[derive(Default)]
struct Diagram {
    nodes: Vec<(String, Shape, String)>,
    alias: HashMap<String, usize>,
    edges: Vec<(usize, usize, String, bool)>,
    edge_keys: HashSet<(usize, usize, String, bool)>,
    total_found: usize,
}

impl Diagram {
    fn add(&mut self, id: &str, shape: Shape, label: String) -> usize {
        if let Some(&i) = self.alias.get(id) {
            return i;
        }
        self.alias.insert(id.to_owned(), self.nodes.len());
        self.nodes.push((id.to_owned(), shape, label));
        self.nodes.len() - 1
    }

    fn edge(&mut self, from: &str, to: &str, label: &str, dashed: bool) {
        let (Some(&a), Some(&b)) = (self.alias.get(from), self.alias.get(to)) else { return };
        let key = (a, b, label.to_owned(), dashed);
        if self.edge_keys.insert(key.clone()) {
            self.edges.push(key);
        }
    }

    fn into_result(self) -> Output {
        if self.nodes.is_empty() {
            return Output {
                mermaid: "graph TD\n    empty[Empty graph]".into(),
                total_found_nodes: self.total_found,
                returned_nodes: 0,
                is_truncated: self.total_found > 0,
            };
        }
        let order: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| matches!(self.nodes[i].1, Shape::Box))
            .chain((0..self.nodes.len()).filter(|&i| matches!(self.nodes[i].1, Shape::Diamond)))
            .collect();
        let mut alias = vec![0; self.nodes.len()];
        for (new, &old) in order.iter().enumerate() {
            alias[old] = new;
        }
        let mut lines = vec!["graph TD".to_owned()];
        for (i, &old) in order.iter().enumerate() {
            let (_, shape, label) = &self.nodes[old];
            let label = escape_label(label);
            lines.push(match shape {
                Shape::Box => format!("    n{i}[\"{label}\"]"),
                Shape::Diamond => format!("    n{i}{{\"{label}\"}}"),
            });
        }
        for (a, b, label, dashed) in &self.edges {
            let arrow = if *dashed { "-.->" } else { "-->" };
            lines.push(format!("    n{} {arrow}|\"{}\"| n{}", alias[*a], escape_label(label), alias[*b]));
        }
        let returned = self.nodes.len();
        Output {
            mermaid: lines.join("\n"),
            total_found_nodes: self.total_found.max(returned),
            returned_nodes: returned,
            is_truncated: self.total_found > returned,
        }
    }
}

fn object_label(structure: &KnowledgeStructure, id: &str) -> String {
    match structure.get(id) {
        Some(o) => format!("{} ({})", o.identity.name, o.identity.r#type),
        None => id.to_owned(),
    }
}

fn structure_diagram(structure: &KnowledgeStructure, input: &Input) -> Diagram {
    let (seeds, depth) = match &input.seed_ids {
        Some(seeds) => (seeds.clone(), input.depth.unwrap_or(1) as usize),
        None => (structure.objects().filter(|o| !o.is_relation()).map(|o| o.id().to_owned()).collect(), 0),
    };
    let max_objects = input.max_objects.unwrap_or(20) as usize;
    // A subgraph query always keeps its seeds, so cut them here to honour max_objects.
    let mut seeds = seeds;
    let seed_overflow = seeds.len().saturating_sub(max_objects);
    seeds.truncate(max_objects);
    let query = SubgraphQuery { seed_ids: seeds, depth, max_objects: Some(max_objects), ..Default::default() };
    let sub = query_subgraph(structure, &query);
    let mut diagram = Diagram { total_found: sub.total_found_nodes + seed_overflow, ..Default::default() };
    for object in sub.structure.objects().filter(|o| !o.is_relation()) {
        diagram.add(object.id(), Shape::Box, object_label(structure, object.id()));
    }
    for object in sub.structure.objects() {
        if let Some(relation) = object.relation()
            && let [source, target, ..] = relation.participants.as_slice()
        {
            diagram.edge(source, target, relation.relation_type, false);
        }
    }
    diagram
}

/// Walks the inference graph breadth-first from the targets: each object's active steps
/// (`concludes`), their premises (`premise`, or a dashed `cites` from a cited step), and with
/// `include_superseded` its superseded steps (dashed `superseded`, and `superseded_by` to their
/// replacement). Every node is visited once, so cycles end; `max_objects` caps the nodes.
fn inference_diagram(structure: &KnowledgeStructure, input: &Input) -> Diagram {
    let index = StepIndex::new(structure);
    let targets: Vec<String> = match &input.seed_ids {
        Some(seeds) => seeds.clone(),
        None => index.active_conclusions().iter().map(|s| (*s).to_owned()).collect(),
    };
    let max_objects = input.max_objects.unwrap_or(20) as usize;
    let mut diagram = Diagram::default();
    let mut found: HashSet<String> = HashSet::new();
    let mut queue: VecDeque<String> = VecDeque::new();
    let mut edges: Vec<(String, String, &str, bool)> = Vec::new();
    // Registers a node: true when it fits the budget (and is drawn).
    let reach = |diagram: &mut Diagram, found: &mut HashSet<String>, id: &str, shape: Shape, label: String| {
        found.insert(id.to_owned());
        if diagram.alias.contains_key(id) {
            return true;
        }
        if diagram.nodes.len() >= max_objects {
            return false;
        }
        diagram.add(id, shape, label);
        true
    };
    for target in &targets {
        if reach(&mut diagram, &mut found, target, Shape::Box, object_label(structure, target)) {
            queue.push_back(target.clone());
        }
        let mut expanded: HashSet<String> = HashSet::new();
        while let Some(id) = queue.pop_front() {
            if !expanded.insert(id.clone()) {
                continue;
            }
            for step in index.active(&id) {
                if !reach(&mut diagram, &mut found, step.id(), Shape::Diamond, step_label(step, false)) {
                    continue;
                }
                edges.push((step.id().to_owned(), id.clone(), "concludes", false));
                for premise in inference::premises(step) {
                    match structure.get(premise) {
                        Some(cited) if inference::is_step(cited) => {
                            if reach(
                                &mut diagram,
                                &mut found,
                                premise,
                                Shape::Diamond,
                                step_label(cited, !inference::is_active(cited)),
                            ) {
                                edges.push((premise.to_owned(), step.id().to_owned(), "cites", true));
                            }
                        }
                        _ => {
                            if reach(&mut diagram, &mut found, premise, Shape::Box, object_label(structure, premise)) {
                                edges.push((premise.to_owned(), step.id().to_owned(), "premise", false));
                                queue.push_back(premise.to_owned());
                            }
                        }
                    }
                }
            }
            if input.include_superseded {
                for step in index.superseded(&id) {
                    if !reach(&mut diagram, &mut found, step.id(), Shape::Diamond, step_label(step, true)) {
                        continue;
                    }
                    edges.push((step.id().to_owned(), id.clone(), "superseded", true));
                    if let Some(by) = step.structure.get("superseded_by").and_then(Value::as_str) {
                        edges.push((step.id().to_owned(), by.to_owned(), "superseded_by", true));
                    }
                }
            }
        }
    }
    for (from, to, label, dashed) in edges {
        diagram.edge(&from, &to, label, dashed);
    }
    diagram.total_found = found.len();
    diagram
}

fn step_label(step: &cks_core::KnowledgeObject, superseded: bool) -> String {
    let mut bits = Vec::new();
    if let Some(operator) = step.structure.get("operator").filter(|v| inference::truthy(Some(v))) {
        bits.push(operator.as_str().map_or_else(|| operator.to_string(), str::to_owned));
    }
    if let Some(confidence) = step.structure.get("confidence").filter(|v| !v.is_null()) {
        bits.push(format!("confidence {confidence}"));
    }
    let mut label = if bits.is_empty() { step.id().to_owned() } else { bits.join(", ") };
    if superseded {
        label.push_str(" (superseded)");
    }
    label
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::escape_label;
    use crate::testing::{call, context, obj, rel, session, structure};

    fn data() -> Value {
        structure(vec![
            obj("earth", "Planet", "Earth \"Blue\" [3rd]", json!({})),
            obj("sun", "Star", "Sun", json!({})),
            obj("moon", "Moon", "Moon\nLuna", json!({})),
            rel("r1", &["earth", "sun"], "orbits"),
            rel("r2", &["moon", "earth"], "orbits"),
            obj("warm", "Claim", "Earth is warm", json!({})),
            obj(
                "s1",
                "InferenceStep",
                "s1",
                json!({"premises": ["sun", "earth"], "conclusion": "warm", "operator": "deductive", "confidence": 0.9}),
            ),
            obj(
                "s0",
                "InferenceStep",
                "s0",
                json!({"premises": ["sun"], "conclusion": "warm", "superseded_by": "s1", "confidence": 0.4}),
            ),
        ])
    }

    #[test]
    fn labels_are_escaped() {
        assert_eq!(
            escape_label("a \"b\" [c] {d} <e> #f |g|\r\nh"),
            "a #quot;b#quot; #91;c#93; #123;d#125; #lt;e#gt; #35;f #124;g#124;<br/>h"
        );
    }

    #[tokio::test]
    async fn draws_the_structure() {
        let ctx = context();
        let id = session(&ctx, data()).await;
        let result = call(&ctx, "visualize_graph", json!({"session_id": id, "seed_ids": ["earth"]})).await;
        assert_eq!(
            result["mermaid"],
            "graph TD\n    n0[\"Earth #quot;Blue#quot; #91;3rd#93; (Planet)\"]\n    n1[\"Sun (Star)\"]\n    n2[\"Moon<br/>Luna (Moon)\"]\n    n0 -->|\"orbits\"| n1\n    n2 -->|\"orbits\"| n0"
        );
        assert_eq!((result["total_found_nodes"].as_u64(), result["returned_nodes"].as_u64()), (Some(3), Some(3)));
        assert_eq!(result["is_truncated"], false);

        // Every object, capped.
        let result = call(&ctx, "visualize_graph", json!({"session_id": id, "max_objects": 2})).await;
        assert_eq!(result["returned_nodes"], 2);
        assert_eq!(result["total_found_nodes"], 6);
        assert_eq!(result["is_truncated"], true);
        assert!(result["mermaid"].as_str().unwrap().ends_with("n0 -->|\"orbits\"| n1"));

        let empty = call(&ctx, "visualize_graph", json!({"session_id": id, "seed_ids": ["nope"]})).await;
        assert_eq!(
            empty,
            json!({"mermaid": "graph TD\n    empty[Empty graph]", "total_found_nodes": 0, "returned_nodes": 0, "is_truncated": false})
        );
    }

    #[tokio::test]
    async fn draws_inference_chains() {
        let ctx = context();
        let id = session(&ctx, data()).await;
        let result =
            call(&ctx, "visualize_graph", json!({"session_id": id, "mode": "inference", "include_superseded": true}))
                .await;
        assert_eq!(
            result["mermaid"],
            // Objects first, then steps, as the reference draws them.
            "graph TD\n    n0[\"Earth is warm (Claim)\"]\n    n1[\"Sun (Star)\"]\n    n2[\"Earth #quot;Blue#quot; #91;3rd#93; (Planet)\"]\n    n3{\"deductive, confidence 0.9\"}\n    n4{\"confidence 0.4 (superseded)\"}\n    n3 -->|\"concludes\"| n0\n    n1 -->|\"premise\"| n3\n    n2 -->|\"premise\"| n3\n    n4 -.->|\"superseded\"| n0\n    n4 -.->|\"superseded_by\"| n3"
        );
        assert_eq!(result["returned_nodes"], 5);
        assert_eq!(result["is_truncated"], false);
        let capped =
            call(&ctx, "visualize_graph", json!({"session_id": id, "mode": "inference", "max_objects": 2})).await;
        assert_eq!((capped["returned_nodes"].as_u64(), capped["total_found_nodes"].as_u64()), (Some(2), Some(4)));
        assert_eq!(capped["is_truncated"], true);
    }

    #[tokio::test]
    async fn rejects_an_unknown_mode() {
        let ctx = context();
        let id = session(&ctx, data()).await;
        let bad = call(&ctx, "visualize_graph", json!({"session_id": id, "mode": "radial"})).await;
        assert_eq!(bad["error"], "invalid_parameter");
        assert_eq!(bad["parameter"], "mode");
        let message = bad["message"].as_str().unwrap();
        assert!(message.contains("structure") && message.contains("inference"), "{message}");
    }
}
