//! The inline view of the MCP Apps extension (`io.modelcontextprotocol/ui`): one HTML page,
//! [`URI`], that a host speaking the extension loads in a sandboxed frame next to the result of
//! `query_subgraph`, `search_semantic` or `compare_versions`, and sends that result over
//! `postMessage`. The page draws the objects as named nodes and the relations as edges (a diff:
//! the added, removed and changed objects in colour).
//!
//! What the server says of it: the resource in `resources/list` and its text in `resources/read`
//! (mime type [`MIME_TYPE`], `_meta.ui` with a policy that allows no other origin), the tools that
//! name it (`_meta.ui.resourceUri`, and the older flat `ui/resourceUri` the extension's own server
//! helper still writes), and the extension in the `initialize` capabilities. A host without the
//! extension ignores all of it and shows the result's text.
//!
//! The page is one self-contained file (`assets/graph-view.html`): inline script and style, no
//! address of anything outside it, so the host's strictest default policy is enough. It speaks the
//! view's side of the exchange itself (a few JSON-RPC messages) rather than bundling the
//! extension's SDK, which with its dependencies would be many times its size.

use serde_json::{Map, Value, json};

/// The extension's identifier, under `capabilities.extensions`.
pub(crate) const EXTENSION_ID: &str = "io.modelcontextprotocol/ui";

/// The view's resource.
pub(crate) const URI: &str = "ui://cks/graph";

/// The mime type the extension gives an HTML view.
pub(crate) const MIME_TYPE: &str = "text/html;profile=mcp-app";

/// The tools whose results the view draws.
pub(crate) const TOOLS: [&str; 3] = ["query_subgraph", "search_semantic", "compare_versions"];

const HTML: &str = include_str!("../assets/graph-view.html");

/// The `initialize` capability: the extension, with the mime type the server's views have.
pub(crate) fn capability() -> Value {
    json!({"mimeTypes": [MIME_TYPE]})
}

/// The resource's `_meta`: no origin to connect to or load from (the page needs none) and a border
/// around the frame.
fn meta() -> Value {
    json!({"ui": {"csp": {"connectDomains": [], "resourceDomains": []}, "prefersBorder": true}})
}

/// The `resources/list` entry.
pub(crate) fn resource() -> Value {
    json!({
        "uri": URI,
        "name": "Knowledge graph view",
        "description": "An interactive picture of a subgraph, a search's matches or a diff between versions, \
            shown inline by hosts that support MCP Apps.",
        "mimeType": MIME_TYPE,
        "_meta": meta(),
    })
}

/// `resources/read` of the view; `None` for any other URI.
pub(crate) fn read(uri: &str) -> Option<Value> {
    (uri == URI).then(|| json!({"contents": [{"uri": URI, "mimeType": MIME_TYPE, "text": HTML, "_meta": meta()}]}))
}

/// Names the view in the `_meta` of a `tools/list` entry whose results it draws.
pub(crate) fn annotate(entry: &mut rmcp::model::Tool) {
    if !TOOLS.contains(&entry.name.as_ref()) {
        return;
    }
    let meta = entry.meta.get_or_insert_with(Default::default);
    let ui = meta.0.entry("ui").or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(ui) = ui {
        ui.insert("resourceUri".into(), URI.into());
    }
    meta.0.insert("ui/resourceUri".into(), URI.into());
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use cks_runtime::store::memory::MemoryStore;
    use cks_runtime::{Runtime, RuntimeConfig};

    use super::*;

    #[tokio::test]
    async fn the_view_is_listed_and_read_with_its_mime_type_and_policy() {
        let runtime = Runtime::new(Arc::new(MemoryStore::new()), RuntimeConfig::default());
        let listed = crate::resources::list(&runtime, None).await.unwrap();
        let entry = listed["resources"].as_array().unwrap().iter().find(|r| r["uri"] == URI).expect("listed");
        assert_eq!(entry["mimeType"], MIME_TYPE);
        assert_eq!(entry["_meta"]["ui"]["csp"], json!({"connectDomains": [], "resourceDomains": []}));

        let read = crate::resources::read(&runtime, URI, None).await.unwrap();
        let contents = &read["contents"][0];
        assert_eq!((&contents["uri"], &contents["mimeType"]), (&json!(URI), &json!(MIME_TYPE)));
        assert_eq!(contents["_meta"], entry["_meta"]);
        let html = contents["text"].as_str().unwrap();
        assert!(html.starts_with("<!doctype html>"), "{}", &html[..40]);
        assert!(crate::resources::read(&runtime, "ui://cks/other", None).await.is_err());
    }

    #[test]
    fn the_page_is_small_and_names_nothing_outside_it() {
        assert!(HTML.len() <= 150 * 1024, "{} bytes", HTML.len());
        let lower = HTML.to_ascii_lowercase();
        for outside in ["http://", "https://", "//cdn", "<link", "src=", "@import", "url("] {
            assert!(!lower.contains(outside), "the page holds {outside:?}");
        }
        assert!(lower.contains("<script>") && lower.contains("<style>"), "inline script and style");
    }

    #[test]
    fn the_three_tools_name_the_view_and_others_do_not() {
        let registry = cks_tools::Registry::standard();
        let server = crate::server::CksServer::new(
            Arc::new(Runtime::new(Arc::new(MemoryStore::new()), RuntimeConfig::default())),
            Arc::new(registry),
            cks_tools::LlmAccess::Absent,
        );
        let mut naming = Vec::new();
        for tool in server.tools() {
            let entry = serde_json::to_value(tool).unwrap();
            let uri = &entry["_meta"]["ui"]["resourceUri"];
            if uri.is_null() {
                assert!(entry["_meta"].get("ui/resourceUri").is_none(), "{entry}");
                continue;
            }
            assert_eq!((uri, &entry["_meta"]["ui/resourceUri"]), (&json!(URI), &json!(URI)), "{entry}");
            naming.push(entry["name"].as_str().unwrap().to_owned());
        }
        naming.sort();
        assert_eq!(naming, ["compare_versions", "query_subgraph", "search_semantic"]);
    }

    #[test]
    fn initialize_names_the_extension() {
        let result = crate::server::CksServer::initialize_result(None);
        assert_eq!(result["capabilities"]["extensions"][EXTENSION_ID], json!({"mimeTypes": [MIME_TYPE]}));
    }
}
