//! `explain_graph`: a Markdown report of a registered graph, section by section as the reference
//! writes it: components, modules and ADRs grouped under the component they relate to, storage
//! backends, sweepers, agents, tools by category, plugins, interfaces, tasks, dangling relations,
//! and a summary. Mechanical: no LLM, nothing written.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use cks_core::validate::pyrepr::{py_str, truthy};
use cks_core::{KnowledgeObject, KnowledgeStructure};

use super::{read_open, required};
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Named, Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The registered name of the graph.
    pub(crate) name: String,
}

#[derive(Debug, Default, Serialize, JsonSchema)]
pub(crate) struct Output {
    /// False for an unknown name.
    found: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    session_id: Option<String>,
    /// The Markdown report.
    #[serde(skip_serializing_if = "Option::is_none")]
    report: Option<String>,
    /// `session_not_available` when the registered session was closed.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

pub(crate) struct ExplainGraph;

#[async_trait::async_trait]
impl Tool for ExplainGraph {
    type Input = Input;
    type Output = Output;
    const NAMED: &'static [(&'static str, Named)] = &[("name", Named::Graph)];
    const TITLE: &'static str = "Report on a graph";
    const META: ToolMeta = ToolMeta {
        name: "explain_graph",
        description: "A Markdown report of a registered graph (read-only, no LLM): its entry, then sections for \
            the object types of a software ecosystem's map — Component (version, description), Module and ADR \
            (grouped under the Component they relate to), StorageBackend, Sweeper (what it 'resolves'), Agent, \
            Tool (by category), Plugin, Interface, Task — relations naming missing objects, and a summary of \
            counts. Returns {found: true, name, session_id, report}; {found: false} for an unknown name.",
        mutates_graph: false,
        creates_session: false,
        destructive: false,
        idempotent: true,
        open_world: false,
        session_fields: &[],
        session_checks: &[],
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        let name = required(&input.name, "name")?.to_owned();
        let Some(entry) = ctx.runtime.graph(&name).await? else {
            return Ok(Output::default());
        };
        let header = Header { name: &name, entry: &entry };
        let report = read_open(ctx, &entry.session_id, |s| render(&header, s)).await;
        let Some(report) = report else {
            return Ok(Output {
                found: true,
                error: Some("session_not_available".into()),
                message: Some(format!("Session '{}' for graph '{name}' is not available.", entry.session_id)),
                session_id: Some(entry.session_id),
                ..Output::default()
            });
        };
        Ok(Output {
            found: true,
            name: Some(name),
            session_id: Some(entry.session_id),
            report: Some(report),
            ..Output::default()
        })
    }
}

struct Header<'a> {
    name: &'a str,
    entry: &'a cks_runtime::gallery::GraphEntry,
}

type Object = Arc<KnowledgeObject>;

fn display_name(object: &KnowledgeObject) -> &str {
    let identity = &object.identity;
    if !identity.name.is_empty() {
        &identity.name
    } else if !identity.id.is_empty() {
        &identity.id
    } else {
        "?"
    }
}

/// A relation here is any object whose structure has both `relation_type` and `participants`.
fn is_relation(object: &KnowledgeObject) -> bool {
    object.structure.contains_key("relation_type") && object.structure.contains_key("participants")
}

fn participants(relation: &KnowledgeObject) -> Vec<&str> {
    match relation.structure.get("participants") {
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

fn relation_type(relation: &KnowledgeObject) -> String {
    let value = relation.structure.get("relation_type");
    if truthy(value) { py_str(value.unwrap_or(&Value::Null)) } else { String::new() }
}

fn sorted(objects: &[Object]) -> Vec<&Object> {
    let mut sorted: Vec<&Object> = objects.iter().collect();
    sorted.sort_by(|a, b| display_name(a).cmp(display_name(b)));
    sorted
}

/// The text of `structure[key]` when it is truthy.
fn field(object: &KnowledgeObject, key: &str) -> Option<String> {
    let value = object.structure.get(key);
    truthy(value).then(|| py_str(value.unwrap_or(&Value::Null)))
}

fn render(header: &Header<'_>, structure: &KnowledgeStructure) -> String {
    let (relations, entities): (Vec<Object>, Vec<Object>) = structure.objects().cloned().partition(|o| is_relation(o));
    let id_to_name: HashMap<&str, &str> = entities.iter().map(|o| (o.id(), display_name(o))).collect();
    // id -> (other id, relation type), both directions, over every relation.
    let mut adjacency: HashMap<&str, Vec<(&str, String)>> = HashMap::new();
    for relation in &relations {
        let ty = relation_type(relation);
        let members = participants(relation);
        for &p in &members {
            let links = adjacency.entry(p).or_default();
            links.extend(members.iter().filter(|&&o| o != p).map(|&o| (o, ty.clone())));
        }
    }
    let mut groups: HashMap<&str, Vec<Object>> = HashMap::new();
    for entity in &entities {
        groups.entry(entity.identity.r#type.as_str()).or_default().push(entity.clone());
    }
    let group = |ty: &str| groups.get(ty).cloned().unwrap_or_default();
    let components = group("Component");

    let sections = [
        render_header(header, entities.len(), relations.len()),
        render_components(&components),
        render_grouped("Modules", "modules", &group("Module"), &components, &adjacency),
        render_storage_backends(&group("StorageBackend")),
        render_sweepers(&group("Sweeper"), &adjacency, &id_to_name),
        render_agents(&group("Agent")),
        render_tools(&group("Tool")),
        render_grouped("ADRs", "ADRs", &group("ADR"), &components, &adjacency),
        render_plugins(&group("Plugin")),
        render_simple("Interfaces", &group("Interface")),
        render_simple("Tasks", &group("Task")),
        render_anomalies(&relations, &id_to_name),
        render_summary(&groups, entities.len(), &relations),
    ];
    sections.iter().filter(|lines| !lines.is_empty()).map(|lines| lines.join("\n")).collect::<Vec<_>>().join("\n\n")
}

fn render_header(header: &Header<'_>, entities: usize, relations: usize) -> Vec<String> {
    vec![
        format!("# Graph: {}", header.name),
        format!("**Description:** {}", header.entry.description),
        format!("**Session ID:** {}", header.entry.session_id),
        format!("**Last Updated:** {}", header.entry.updated_at),
        format!("**Total Objects:** {entities} **Total Relations:** {relations}"),
        String::new(),
        "---".into(),
    ]
}

fn render_components(components: &[Object]) -> Vec<String> {
    if components.is_empty() {
        return Vec::new();
    }
    let mut lines = vec!["## Components".to_owned()];
    for object in sorted(components) {
        let mut bullet = format!("- `{}`", display_name(object));
        if let Some(version) = field(object, "version") {
            bullet += &format!(" (v{version})");
        }
        if let Some(description) = field(object, "description") {
            bullet += &format!(" — {description}");
        }
        lines.push(bullet);
    }
    lines
}

/// `items` listed under each component they share a relation with (of any type), then the rest.
fn render_grouped(
    heading: &str,
    unit: &str,
    items: &[Object],
    components: &[Object],
    adjacency: &HashMap<&str, Vec<(&str, String)>>,
) -> Vec<String> {
    if items.is_empty() {
        return Vec::new();
    }
    let component_ids: BTreeSet<&str> = components.iter().map(|c| c.id()).collect();
    let mut grouped: HashMap<&str, Vec<&Object>> = HashMap::new();
    let mut leftover = Vec::new();
    for item in sorted(items) {
        let linked: BTreeSet<&str> = adjacency
            .get(item.id())
            .into_iter()
            .flatten()
            .map(|(other, _)| *other)
            .filter(|other| component_ids.contains(other))
            .collect();
        if linked.is_empty() {
            leftover.push(item);
        }
        for component in linked {
            grouped.entry(component).or_default().push(item);
        }
    }
    let names =
        |items: &[&Object]| items.iter().map(|i| format!("`{}`", display_name(i))).collect::<Vec<_>>().join(", ");
    let mut lines = vec![format!("## {heading}")];
    for component in sorted(components) {
        let Some(members) = grouped.get(component.id()).filter(|m| !m.is_empty()) else { continue };
        lines.push(format!("### {} ({} {unit})", display_name(component), members.len()));
        lines.push(format!("- {}", names(members)));
    }
    if !leftover.is_empty() {
        lines.push(format!("### Other {heading} ({} {unit})", leftover.len()));
        lines.push(format!("- {}", names(&leftover)));
    }
    lines
}

fn render_storage_backends(backends: &[Object]) -> Vec<String> {
    if backends.is_empty() {
        return Vec::new();
    }
    let parts: Vec<String> = sorted(backends)
        .into_iter()
        .map(|object| {
            let mut part = format!("`{}`", display_name(object));
            if let Some(label) = field(object, "label").or_else(|| field(object, "backend_type")) {
                part += &format!(" ({label})");
            }
            part
        })
        .collect();
    vec!["## Storage Backends".into(), format!("- {}", parts.join(", "))]
}

fn render_sweepers(
    sweepers: &[Object],
    adjacency: &HashMap<&str, Vec<(&str, String)>>,
    id_to_name: &HashMap<&str, &str>,
) -> Vec<String> {
    if sweepers.is_empty() {
        return Vec::new();
    }
    let mut lines = vec![format!("## Sweepers ({})", sweepers.len())];
    for object in sorted(sweepers) {
        let resolves: BTreeSet<&str> = adjacency
            .get(object.id())
            .into_iter()
            .flatten()
            .filter(|(_, ty)| ty == "resolves")
            .map(|(other, _)| id_to_name.get(other).copied().unwrap_or(other))
            .collect();
        let mut bullet = format!("- `{}`", display_name(object));
        if !resolves.is_empty() {
            bullet += &format!(" — resolves: {}", resolves.into_iter().collect::<Vec<_>>().join(", "));
        }
        lines.push(bullet);
    }
    lines
}

fn render_agents(agents: &[Object]) -> Vec<String> {
    if agents.is_empty() {
        return Vec::new();
    }
    let mut lines = vec![format!("## Agents ({})", agents.len())];
    for object in sorted(agents) {
        let mut bullet = format!("- `{}`", display_name(object));
        // The first non-empty of these fields, read as given (concern names, not object ids).
        let annotation = ["handles", "searches", "tools", "resolves"].into_iter().find_map(|key| {
            let value = object.structure.get(key);
            truthy(value).then(|| match value {
                Some(Value::Array(items)) => (key, items.iter().map(py_str).collect::<Vec<_>>().join(", ")),
                other => (key, py_str(other.unwrap_or(&Value::Null))),
            })
        });
        if let Some((key, joined)) = annotation {
            bullet += &format!(" — {key}: {joined}");
        }
        lines.push(bullet);
    }
    lines
}

fn render_tools(tools: &[Object]) -> Vec<String> {
    if tools.is_empty() {
        return Vec::new();
    }
    let mut lines = vec![format!("## Tools ({})", tools.len())];
    let mut by_category: BTreeMap<String, Vec<Object>> = BTreeMap::new();
    for object in tools {
        let category = field(object, "category").unwrap_or_else(|| "Other".into());
        by_category.entry(category).or_default().push(object.clone());
    }
    for (category, members) in &by_category {
        let names: Vec<&str> = sorted(members).into_iter().map(|o| display_name(o)).collect();
        lines.push(format!("- **{category}:** {}", names.join(", ")));
    }
    lines
}

fn render_plugins(plugins: &[Object]) -> Vec<String> {
    if plugins.is_empty() {
        return Vec::new();
    }
    let mut lines = vec!["## Plugins".to_owned()];
    for object in sorted(plugins) {
        let mut bullet = format!("- `{}`", display_name(object));
        if let Some(status) = field(object, "status") {
            bullet += &format!(" ({status})");
        }
        if let Some(description) = field(object, "description") {
            bullet += &format!(" — {description}");
        }
        lines.push(bullet);
    }
    lines
}

fn render_simple(heading: &str, items: &[Object]) -> Vec<String> {
    if items.is_empty() {
        return Vec::new();
    }
    let mut lines = vec![format!("## {heading}")];
    for object in sorted(items) {
        let mut bullet = format!("- `{}`", display_name(object));
        if let Some(description) = field(object, "description") {
            bullet += &format!(" — {description}");
        }
        lines.push(bullet);
    }
    lines
}

/// Relations naming an id that is no entity of the graph (relations count as missing here).
fn render_anomalies(relations: &[Object], id_to_name: &HashMap<&str, &str>) -> Vec<String> {
    let dangling: BTreeSet<String> = relations
        .iter()
        .flat_map(|relation| {
            participants(relation)
                .into_iter()
                .filter(|p| !id_to_name.contains_key(p))
                .map(|p| format!("- Dangling relation `{}`: references missing object `{p}`", relation.id()))
                .collect::<Vec<_>>()
        })
        .collect();
    let mut lines = vec!["## Anomalies".to_owned()];
    if dangling.is_empty() {
        lines.push("None detected".into());
    } else {
        lines.extend(dangling);
    }
    lines
}

fn render_summary(groups: &HashMap<&str, Vec<Object>>, entities: usize, relations: &[Object]) -> Vec<String> {
    let count = |ty: &str| groups.get(ty).map_or(0, Vec::len);
    let contradictions = relations.iter().filter(|r| relation_type(r) == "contradicts").count();
    vec![
        "## Summary".into(),
        format!("- **Components:** {}", count("Component")),
        format!("- **Modules:** {}", count("Module")),
        format!("- **Storage Backends:** {}", count("StorageBackend")),
        format!("- **Sweepers:** {}", count("Sweeper")),
        format!("- **Agents:** {}", count("Agent")),
        format!("- **Tools:** {}", count("Tool")),
        format!("- **ADRs:** {}", count("ADR")),
        format!("- **Plugins:** {}", count("Plugin")),
        format!("- **Total Objects:** {entities}"),
        format!("- **Total Relations:** {}", relations.len()),
        format!("- **Contradictions:** {contradictions}"),
    ]
}
