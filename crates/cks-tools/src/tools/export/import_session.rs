//! `import_session`: recreates a session from an `export_session` bundle, ours or the reference
//! server's, under the bundle's session id, with its version ids, transaction ids, timestamps,
//! metadata, parent session and version, and closed flag.
//!
//! A bundle made with `include_structures` carries every version's structure and imports with
//! its whole history. Otherwise (and in the reference's bundles, which embed only the versions it
//! stored as snapshots) the versions without a structure cannot be rebuilt: they are left out and
//! listed in `versions_without_structure`, and the last version always imports, holding the
//! bundle's current structure. The reference server has no import for its bundles (its own docs
//! suggest re-validating `current_structure.cks_json`), so this tool is ours alone.

use crate::ErrorCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use cks_core::KnowledgeStructure;
use cks_core::json::parse_str;
use cks_runtime::{SessionImport, VersionImport};

use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The bundle as JSON text: export_session's `bundle_json` (or its whole result).
    pub(crate) bundle_json: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    imported: bool,
    session_id: String,
    versions_imported: usize,
    /// Versions the bundle lists without their structure (a lean bundle): listed, not stored.
    versions_without_structure: Vec<String>,
    closed: bool,
    /// Objects in the imported session's current state.
    object_count: usize,
}

pub(crate) struct ImportSession;

fn invalid_bundle(message: impl Into<String>) -> ToolError {
    ToolError::new(ErrorCode::InvalidBundle, message)
}

#[async_trait::async_trait]
impl Tool for ImportSession {
    type Input = Input;
    type Output = Output;
    const TITLE: &'static str = "Import a session";
    const META: ToolMeta = ToolMeta {
        name: "import_session",
        description: "Recreate a session from an export_session bundle (from this server or the reference server), \
            under the bundle's session id, keeping version ids, timestamps, metadata, lineage and the closed flag. \
            Versions whose structure the bundle does not embed (export without include_structures) are left out \
            and listed; the last version always imports with the current structure. Returns {imported, \
            session_id, versions_imported, versions_without_structure, closed, object_count}. Fails with \
            session_exists when that session id is already here.",
        mutates_graph: false,
        creates_session: true,
        destructive: false,
        idempotent: false,
        open_world: false,
        session_fields: &[],
        session_checks: &[],
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        let parsed: Value = serde_json::from_str(&input.bundle_json)
            .map_err(|e| invalid_bundle(format!("bundle_json is not JSON: {e}")))?;
        // The whole export_session result is accepted too.
        let bundle = match parsed.get("bundle") {
            Some(inner @ Value::Object(_)) => inner,
            _ => &parsed,
        };
        if bundle["cks_mcp_export"] != true {
            return Err(invalid_bundle("not an export_session bundle (no \"cks_mcp_export\": true)"));
        }
        let schema = bundle["schema_version"].as_str().unwrap_or_default();
        if schema.split('.').next() != Some("1") {
            return Err(invalid_bundle(format!(
                "unsupported bundle schema_version '{schema}' (this server reads 1.x)"
            )));
        }
        let session = &bundle["session"];
        let session_id = text(session, "session_id")?.ok_or_else(|| invalid_bundle("session.session_id is missing"))?;
        let current_text = text(&bundle["current_structure"], "cks_json")?
            .ok_or_else(|| invalid_bundle("current_structure.cks_json is missing"))?;
        let current = parse_str(&current_text).map_err(|e| invalid_bundle(format!("current_structure: {e}")))?;

        let entries = match &bundle["version_history"]["versions"] {
            Value::Array(entries) => entries.as_slice(),
            Value::Null => &[],
            _ => return Err(invalid_bundle("version_history.versions is not a list")),
        };
        let mut versions = Vec::new();
        let mut without_structure = Vec::new();
        for (index, entry) in entries.iter().enumerate() {
            let version_id = text(entry, "version_id")?
                .ok_or_else(|| invalid_bundle(format!("version #{index} has no version_id")))?;
            let state = match text(entry, "cks_json")? {
                Some(cks_json) => {
                    parse_str(&cks_json).map_err(|e| invalid_bundle(format!("version '{version_id}': {e}")))?
                }
                None if index + 1 == entries.len() => current.clone(),
                None => {
                    without_structure.push(version_id);
                    continue;
                }
            };
            versions.push(VersionImport {
                version_id,
                transaction_id: text(entry, "transaction_id")?.unwrap_or_default(),
                created_at: text(entry, "created_at")?.unwrap_or_default(),
                metadata: object(entry, "metadata")?,
                state,
            });
        }
        if let Some(last) = versions.last()
            && !last.state.same_content(&current)
        {
            return Err(invalid_bundle(format!(
                "the last version '{}' does not hold current_structure",
                last.version_id
            )));
        }
        let initial_state: KnowledgeStructure = versions.first().map_or_else(|| current.clone(), |v| v.state.clone());
        let created_at =
            text(session, "created_at")?.or_else(|| versions.first().map(|v| v.created_at.clone())).unwrap_or_default();
        let closed = session["closed"].as_bool().unwrap_or(false);
        let import = SessionImport {
            session_id: session_id.clone(),
            created_at,
            parent_session_id: text(session, "parent_session_id")?,
            parent_version_id: text(session, "parent_version_id")?,
            closed,
            metadata: object(session, "metadata")?,
            initial_state,
            versions,
        };
        let imported_versions = import.versions.len();
        let report = ctx.runtime.import_sessions(vec![import]).await?;
        if report.imported.is_empty() {
            return Err(ToolError::new(
                ErrorCode::SessionExists,
                format!("Session '{session_id}' already exists here; nothing was imported."),
            )
            .with("session_id", json!(session_id)));
        }
        Ok(Output {
            imported: true,
            session_id,
            versions_imported: imported_versions,
            versions_without_structure: without_structure,
            closed,
            object_count: current.len(),
        })
    }
}

/// An optional string field (`null` counts as absent).
fn text(parent: &Value, field: &str) -> Result<Option<String>, ToolError> {
    match parent.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(_) => Err(invalid_bundle(format!("'{field}' is not a string"))),
    }
}

/// An optional object field (`null` counts as empty).
fn object(parent: &Value, field: &str) -> Result<Map<String, Value>, ToolError> {
    match parent.get(field) {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(map)) => Ok(map.clone()),
        Some(_) => Err(invalid_bundle(format!("'{field}' is not an object"))),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::testing::{call, context, document, obj, rel, session, structure};

    fn data() -> Value {
        structure(vec![obj("a", "T", "Ä", json!({})), obj("b", "T", "B", json!({})), rel("r", &["a", "b"], "x")])
    }

    #[tokio::test]
    async fn a_full_bundle_imports_with_its_whole_history() {
        let from = context();
        let id = session(&from, data()).await;
        for i in 0..12 {
            let op = json!([{"type": "add_object", "identity": {"id": format!("o{i}"), "type": "T", "name": "o"}}]);
            call(&from, "evolve_knowledge", json!({"session_id": id, "operations": op})).await;
        }
        let exported = call(&from, "export_session", json!({"session_id": id, "include_structures": true})).await;

        let to = context();
        let result = call(&to, "import_session", json!({"bundle_json": exported["bundle_json"]})).await;
        assert_eq!(result["imported"], true, "{result}");
        assert_eq!(result["session_id"], json!(id));
        assert_eq!(result["versions_imported"], 13);
        assert_eq!(result["versions_without_structure"], json!([]));
        assert_eq!(result["closed"], false);

        let again = call(&to, "export_session", json!({"session_id": id, "include_structures": true})).await;
        // Documents are stamped when serialized; everything else must be the same.
        let unstamped = |bundle: &Value| {
            let mut bundle = bundle.clone();
            let current = document(&bundle["current_structure"]["cks_json"]);
            bundle["current_structure"]["cks_json"] = current;
            for version in bundle["version_history"]["versions"].as_array_mut().unwrap() {
                let state = document(&version["cks_json"]);
                version["cks_json"] = state;
            }
            bundle
        };
        let (before, after) = (unstamped(&exported["bundle"]), unstamped(&again["bundle"]));
        assert_eq!(after["session"], before["session"], "session row kept");
        assert_eq!(after["current_structure"], before["current_structure"]);
        assert_eq!(after["version_history"], before["version_history"], "every version kept, states included");

        let twice = call(&to, "import_session", json!({"bundle_json": exported["bundle_json"]})).await;
        assert_eq!(twice["error"], "session_exists");
    }

    #[tokio::test]
    async fn a_lean_bundle_keeps_the_versions_it_can() {
        let from = context();
        let id = session(&from, data()).await;
        let op = json!([{"type": "remove_object", "object_id": "b"}]);
        call(&from, "evolve_knowledge", json!({"session_id": id, "operations": op})).await;
        let exported = call(&from, "export_session", json!({"session_id": id})).await;
        let versions = exported["bundle"]["version_history"]["versions"].as_array().unwrap().clone();

        let to = context();
        // The whole export_session result is accepted as well as its bundle_json.
        let result = call(&to, "import_session", json!({"bundle_json": exported.to_string()})).await;
        assert_eq!(result["versions_imported"], 1, "{result}");
        assert_eq!(result["versions_without_structure"], json!([versions[0]["version_id"]]));
        let listed = call(&to, "list_versions", json!({"session_id": id})).await;
        assert_eq!(listed["versions"][0]["version_id"], versions[1]["version_id"]);
        assert_eq!(listed["versions"][0]["created_at"], versions[1]["created_at"]);
        let serialized = call(&to, "serialize_knowledge", json!({"session_id": id})).await;
        assert_eq!(document(&serialized["serialized"]), document(&exported["bundle"]["current_structure"]["cks_json"]));
    }

    #[tokio::test]
    async fn malformed_bundles_are_refused() {
        let ctx = context();
        for (bundle, needle) in [
            ("{not json".to_owned(), "not JSON"),
            (json!({"objects": []}).to_string(), "cks_mcp_export"),
            (json!({"cks_mcp_export": true, "schema_version": "2.0"}).to_string(), "schema_version"),
            (json!({"cks_mcp_export": true, "schema_version": "1.0", "session": {}}).to_string(), "session_id"),
            (
                json!({"cks_mcp_export": true, "schema_version": "1.0", "session": {"session_id": "s"},
                       "current_structure": {"cks_json": "{\"objects\": 3}"}})
                .to_string(),
                "current_structure",
            ),
        ] {
            let result = call(&ctx, "import_session", json!({"bundle_json": bundle})).await;
            assert_eq!(result["error"], "invalid_bundle", "{bundle}");
            assert!(result["message"].as_str().unwrap().contains(needle), "{result}");
        }
        assert!(ctx.runtime.list_sessions().await.unwrap().is_empty());
    }
}
