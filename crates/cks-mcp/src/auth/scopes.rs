//! The scope each request needs, in one place.
//!
//! - `cks:read`: every request, whatever it asks: reading tools (those whose metadata declares no
//!   change), resources, prompts, subscriptions, completions, `/events`.
//! - `cks:write`: a `tools/call` of a tool that changes something (its metadata declares a graph
//!   change, a new session or a destructive effect, or `WRITE_TOOLS` names it), and `/chat/stream`.
//! - `cks:admin`: a `tools/call` of a tool that administers the server (`ADMIN_TOOLS`).
//!
//! Which scope a tool needs is [`Scope::for_tool`]'s table, beside the registry's access check.
//!
//! A test compares every registered tool's scope with the committed table
//! `tests/data/oauth/scopes.txt`, so a new tool is classified on purpose and an administrative
//! tool cannot quietly become a writing one.

use cks_tools::{Registry, Scope};

/// The scope a body's tool calls need (their tools' names, read by `http/body.rs`): the most any
/// of them needs. A call naming no tool, or an unknown one, needs `cks:read`: it is refused anyway.
pub fn for_calls<'a>(registry: &Registry, names: impl IntoIterator<Item = Option<&'a str>>) -> Scope {
    let needs =
        |name: Option<&str>| name.and_then(|n| registry.get(n)).map_or(Scope::Read, |t| Scope::for_tool(t.meta()));
    names.into_iter().map(needs).max().unwrap_or(Scope::Read)
}

/// The scope a request to another route needs (the page and the metadata need no token at all).
pub fn for_route(path: &str) -> Scope {
    match path {
        "/chat/stream" => Scope::Write,
        // What every caller does, counted: the operator's.
        "/metrics" => Scope::Admin,
        _ => Scope::Read,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cks_tools::ToolMeta;
    use std::fmt::Write as _;
    use std::sync::Arc;

    /// The server's registry: the standard tools and `ai_chat`, as `serve` builds it.
    fn registry() -> Registry {
        let mut registry = Registry::standard();
        registry.register(Arc::new(cks_chat::AiChat::default()));
        registry
    }

    #[test]
    fn every_tool_has_the_scope_the_committed_table_gives_it() {
        let registry = registry();
        let mut table = String::from("# Each tool and the scope a call needs (crates/cks-tools/src/principal.rs).\n");
        let mut tools: Vec<&ToolMeta> = registry.iter().map(|tool| tool.meta()).collect();
        tools.sort_by_key(|meta| meta.name);
        for meta in tools {
            let scope = Scope::for_tool(meta);
            let _ = writeln!(table, "{} {scope}", meta.name);
            if !meta.read_only() {
                assert!(scope >= Scope::Write, "{} changes state but needs only {scope}", meta.name);
            }
        }
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/oauth/scopes.txt");
        if std::env::var_os("UPDATE_EXPECT").is_some() {
            std::fs::write(&path, &table).unwrap();
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == table,
            "the tools' scopes differ from {}: classify the new or changed tool in cks-tools' principal.rs (ADMIN_TOOLS, WRITE_TOOLS), \
             then run with UPDATE_EXPECT=1 and review the diff.\nNow:\n{table}",
            path.display()
        );
        for name in cks_tools::principal::ADMIN_TOOLS.iter().chain(cks_tools::principal::WRITE_TOOLS) {
            assert!(registry.get(name).is_some(), "{name} is classified but no such tool is registered");
        }
    }

    #[test]
    fn ai_chat_and_the_storage_tools_need_their_scopes() {
        let registry = registry();
        let scope = |names: &[&str]| for_calls(&registry, names.iter().map(|n| Some(*n)));
        assert_eq!(scope(&["ai_chat"]), Scope::Write);
        assert_eq!(scope(&["list_versions"]), Scope::Read);
        assert_eq!(scope(&["evolve_knowledge"]), Scope::Write);
        assert_eq!(scope(&["export_storage"]), Scope::Admin);
        assert_eq!(scope(&["no_such_tool"]), Scope::Read);
        assert_eq!(scope(&["list_versions", "migrate_storage"]), Scope::Admin, "a batch needs its most");
        assert_eq!(for_calls(&registry, [None]), Scope::Read, "a call naming no tool");
        assert_eq!(for_route("/chat/stream"), Scope::Write);
        assert_eq!(for_route("/events"), Scope::Read);
    }
}
