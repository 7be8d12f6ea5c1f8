//! Which tools a client is offered in its list of tools: a profile (`CKS_MCP_TOOLS`). Every tool
//! stays callable by name whatever the profile, with the same access rules: a profile only decides
//! what a host puts before its model, where each listed tool costs context and choice.
//!
//! `core` is the everyday work of a knowledge graph ([`CORE`]); `all` is every tool, as the
//! reference lists them; otherwise a list of tool names, group names (the folders of `tools/`) and
//! `core`, which add up.

use std::collections::BTreeSet;

use crate::registry::Registry;

/// The `core` profile: what people do with a knowledge graph day to day, in the order they
/// reach for it. Everything else is one `find_tools` call away.
pub const CORE: &[&str] = &[
    // Make a graph, check it, read it, change it.
    "validate_knowledge",
    "serialize_knowledge",
    "explain_knowledge",
    "evolve_knowledge",
    // Find things in it and look at them.
    "search_semantic",
    "query_subgraph",
    "visualize_graph",
    "detect_contradictions",
    // Its history: what changed, and undoing it.
    "list_versions",
    "compare_versions",
    "revert_version",
    "create_branch",
    "merge_branch",
    // Memory from text and the web, and a model working on the graph.
    "remember",
    "ingest_document",
    "ai_chat",
    // Out, and across graphs.
    "export_knowledge",
    "list_graphs",
    // The rest.
    "find_tools",
];

/// The tools a client's list offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolProfile {
    /// Every registered tool.
    All,
    /// These tools only.
    Only(BTreeSet<String>),
}

/// A profile naming what the registry does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown in the tool profile: {}; give core, all, tool names or groups ({})", .unknown.join(", "), .groups.join(", "))]
pub struct UnknownInProfile {
    pub unknown: Vec<String>,
    pub groups: Vec<&'static str>,
}

impl ToolProfile {
    /// The `core` profile over `registry` (a core tool it lacks is left out).
    pub fn core(registry: &Registry) -> ToolProfile {
        ToolProfile::Only(
            CORE.iter().filter(|name| registry.get(name).is_some()).map(|name| name.to_string()).collect(),
        )
    }

    /// A profile from its text: `core`, `all`, or names and groups separated by commas or spaces.
    /// Empty text is `core`.
    pub fn parse(text: &str, registry: &Registry) -> Result<ToolProfile, UnknownInProfile> {
        let entries: Vec<&str> = text.split([',', ' ', '\t', '\n']).filter(|e| !e.is_empty()).collect();
        if entries.is_empty() {
            return Ok(ToolProfile::core(registry));
        }
        if entries.contains(&"all") {
            return Ok(ToolProfile::All);
        }
        let mut names = BTreeSet::new();
        let mut unknown = Vec::new();
        for entry in entries {
            if entry == "core" {
                names.extend(CORE.iter().filter(|name| registry.get(name).is_some()).map(|name| name.to_string()));
                continue;
            }
            let mut known = false;
            for tool in registry.iter().filter(|tool| tool.meta().name == entry || tool.group() == entry) {
                names.insert(tool.meta().name.to_owned());
                known = true;
            }
            if !known {
                unknown.push(entry.to_owned());
            }
        }
        if unknown.is_empty() {
            return Ok(ToolProfile::Only(names));
        }
        let mut groups: Vec<&'static str> = Vec::new();
        for group in registry.iter().map(|tool| tool.group()).filter(|g| !g.is_empty()) {
            if !groups.contains(&group) {
                groups.push(group);
            }
        }
        Err(UnknownInProfile { unknown, groups })
    }

    /// Whether the list offers `name`.
    pub fn offers(&self, name: &str) -> bool {
        match self {
            ToolProfile::All => true,
            ToolProfile::Only(names) => names.contains(name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{CORE, ToolProfile};
    use crate::Registry;

    #[test]
    fn core_is_small_and_every_standard_core_tool_exists() {
        let registry = Registry::standard();
        assert!(CORE.len() <= 25);
        // ai_chat is registered by the server; the rest are standard tools.
        for name in CORE.iter().filter(|name| **name != "ai_chat") {
            assert!(registry.get(name).is_some(), "{name} is in core but not a tool");
        }
        let core = ToolProfile::parse("", &registry).unwrap();
        assert_eq!(core, ToolProfile::core(&registry));
        assert!(core.offers("search_semantic") && !core.offers("claim_conflict_task"));
    }

    #[test]
    fn names_groups_and_core_add_up() {
        let registry = Registry::standard();
        let chosen = ToolProfile::parse("core, conflicts list_agents", &registry).unwrap();
        assert!(chosen.offers("evolve_knowledge"), "from core");
        assert!(chosen.offers("claim_conflict_task") && chosen.offers("resolve_duplicate"), "the group");
        assert!(chosen.offers("list_agents") && !chosen.offers("start_agent"), "one name");
        let only = ToolProfile::parse("versions", &registry).unwrap();
        assert!(only.offers("list_versions") && !only.offers("evolve_knowledge"));
        assert_eq!(ToolProfile::parse("core,all", &registry).unwrap(), ToolProfile::All);
        assert!(ToolProfile::All.offers("migrate_storage"));
    }

    #[test]
    fn an_unknown_entry_is_refused_with_what_is_accepted() {
        let registry = Registry::standard();
        let error = ToolProfile::parse("core, serch_semantic, gallery, nothing", &registry).unwrap_err();
        assert_eq!(error.unknown, vec!["serch_semantic", "nothing"]);
        let message = error.to_string();
        assert!(message.contains("serch_semantic, nothing"), "{message}");
        assert!(message.contains("knowledge, versions, branches"), "{message}");
    }
}
