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

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;

use cks_tools::{Registry, Scope};

/// The scope a JSON-RPC body posted to `/mcp` needs: the most any of its messages needs.
/// A body that is not JSON-RPC needs `cks:read` (its handler refuses it with a protocol error).
pub fn for_body(registry: &Registry, body: &[u8]) -> Scope {
    #[derive(Deserialize)]
    struct Params<'a> {
        #[serde(borrow)]
        name: Option<Cow<'a, str>>,
    }
    #[derive(Deserialize)]
    struct Message<'a> {
        #[serde(borrow)]
        method: Option<Cow<'a, str>>,
        #[serde(borrow)]
        params: Option<Params<'a>>,
    }
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Body<'a> {
        #[serde(borrow)]
        One(Message<'a>),
        #[serde(borrow)]
        Batch(Vec<Message<'a>>),
    }
    let needs = |method: Option<&str>, name: Option<&str>| -> Scope {
        match (method, name) {
            (Some("tools/call"), Some(name)) => {
                registry.get(name).map_or(Scope::Read, |tool| Scope::for_tool(tool.meta()))
            }
            _ => Scope::Read,
        }
    };
    let of_message = |m: &Message| needs(m.method.as_deref(), m.params.as_ref().and_then(|p| p.name.as_deref()));
    match serde_json::from_slice::<Body>(body) {
        Ok(Body::One(message)) => of_message(&message),
        Ok(Body::Batch(messages)) => messages.iter().map(of_message).max().unwrap_or(Scope::Read),
        // Read as the bare form's handler reads it (where a repeated key's last value counts), so
        // that what this check sees is what runs.
        Err(_) => {
            let of_value = |v: &Value| {
                needs(v.get("method").and_then(Value::as_str), v.pointer("/params/name").and_then(Value::as_str))
            };
            match serde_json::from_slice::<Value>(body) {
                Ok(Value::Array(messages)) => messages.iter().map(of_value).max().unwrap_or(Scope::Read),
                Ok(message) => of_value(&message),
                Err(_) => Scope::Read,
            }
        }
    }
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
        let call = |name: &str| {
            format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"{name}","arguments":{{}}}}}}"#)
        };
        assert_eq!(for_body(&registry, call("ai_chat").as_bytes()), Scope::Write);
        assert_eq!(for_body(&registry, call("list_versions").as_bytes()), Scope::Read);
        assert_eq!(for_body(&registry, call("evolve_knowledge").as_bytes()), Scope::Write);
        assert_eq!(for_body(&registry, call("export_storage").as_bytes()), Scope::Admin);
        assert_eq!(for_body(&registry, call("no_such_tool").as_bytes()), Scope::Read);
        let batch = format!("[{}, {}]", call("list_versions"), call("migrate_storage"));
        assert_eq!(for_body(&registry, batch.as_bytes()), Scope::Admin, "a batch needs its most");
        assert_eq!(for_body(&registry, br#"{"jsonrpc":"2.0","id":1,"method":"resources/read"}"#), Scope::Read);
        assert_eq!(for_body(&registry, b"{not json"), Scope::Read);
        let repeated = br#"{"method":"tools/call","params":{"name":"list_versions","name":"export_storage"}}"#;
        assert_eq!(for_body(&registry, repeated), Scope::Admin, "the last of a repeated key counts, as it runs");
        assert_eq!(for_route("/chat/stream"), Scope::Write);
        assert_eq!(for_route("/events"), Scope::Read);
    }
}
