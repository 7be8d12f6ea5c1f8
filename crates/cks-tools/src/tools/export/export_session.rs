//! `export_session`: a whole session as one self-contained JSON document (`bundle`: current
//! structure, version history, session metadata and lineage), or just its current structure
//! (`cks`).
//!
//! Differences from the reference: with `include_structures` every version's structure is
//! reconstructed and embedded (the reference silently skips the versions stored as deltas, i.e.
//! most of them); `current_structure` adds `relations_count` and `total_objects` beside the
//! reference's `objects_count` (every object, relations included); each version also carries its
//! metadata, sequence number and object count; the bundle adds `lineage`. Every key of the
//! reference's bundle is present, so tools written for its bundles read ours; `import_session`
//! reads both back.
//!
//! With a principal, the bundle names no session the caller cannot reach: a parent it cannot reach
//! is null (with its fork point), `lineage` stops before the nearest ancestor it cannot reach, and
//! a version's metadata naming such a session (a merge's source) names null.

use crate::ErrorCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::collections::HashSet;

use cks_runtime::RuntimeError;

use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Coercion, SessionCheck, Tool, ToolMeta};

const BUNDLE_SCHEMA_VERSION: &str = "1.0";
/// Longest parent chain followed for `lineage`.
const MAX_LINEAGE: usize = 256;

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The session to export.
    pub(crate) session_id: String,
    /// 'bundle' (default) or 'cks'.
    pub(crate) format: Option<String>,
    /// Bundle only: embed every version's structure (can be large; default false).
    #[serde(default)]
    pub(crate) include_structures: bool,
}

pub(crate) struct ExportSession;

#[async_trait::async_trait]
impl Tool for ExportSession {
    type Input = Input;
    type Output = Output;
    const ARGUMENT_COERCIONS: &'static [(&'static str, Coercion)] = &[("include_structures", Coercion::Truthy)];
    const TITLE: &'static str = "Export a session";
    const META: ToolMeta = ToolMeta {
        name: "export_session",
        description: "Export a session for migration or archiving. 'bundle' (default): {bundle, bundle_json}: the \
            session, its lineage, current structure and version history, which import_session recreates. 'cks': \
            {cks_json}, the current structure only.",
        mutates_graph: false,
        creates_session: false,
        destructive: false,
        idempotent: true,
        open_world: false,
        session_fields: &["session_id"],
        session_checks: &[SessionCheck::exists("session_id")],
        llm_exposed: true,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        let requested = input.format.unwrap_or_else(|| "bundle".into());
        let format = requested.trim().to_lowercase();
        if format != "bundle" && format != "cks" {
            return Err(ToolError::new(
                ErrorCode::UnsupportedFormat,
                format!("Format '{requested}' is not supported. Use 'bundle' (default) or 'cks'."),
            )
            .with("supported", json!(["bundle", "cks"])));
        }
        let id = input.session_id;
        let (info, current_structure) = ctx
            .runtime
            .read(&id, |s, info| {
                let relations = s.relations().count();
                let current = CurrentStructure {
                    root_hash: s.root_hash().to_hex(),
                    objects_count: s.len(),
                    relations_count: relations,
                    total_objects: s.len(),
                    cks_json: crate::convert::client_document(s),
                };
                (info.clone(), current)
            })
            .await?;
        if format == "cks" {
            return Ok(Output::Cks { format: "cks", session_id: id, cks_json: current_structure.cks_json });
        }

        let mut versions = Vec::new();
        for mut version in ctx.runtime.list_versions(&id).await? {
            ctx.hide_unreachable_sessions(&mut version.metadata).await?;
            let cks_json = if input.include_structures {
                let state = ctx.runtime.version_state(&id, &version.version_id).await?;
                Some(crate::convert::client_document(&state))
            } else {
                None
            };
            versions.push(VersionEntry {
                version_id: version.version_id,
                seq: version.seq,
                transaction_id: version.transaction_id,
                created_at: version.created_at,
                state_hash: version.state_hash,
                object_count: version.object_count,
                metadata: version.metadata,
                cks_json,
            });
        }
        // The session's metadata with the head version's vector, as stored (for an imported
        // session, the vector it was imported with).
        let mut session_metadata = ctx.runtime.info(&id).await?.metadata;
        if let Some(vector) = versions.last().and_then(|v| v.metadata.get("version_vector")) {
            session_metadata.insert("version_vector".into(), vector.clone());
        }
        ctx.hide_unreachable_sessions(&mut session_metadata).await?;
        // A parent the caller cannot reach is not named, nor its version (the fork point).
        let parent_session_id = ctx.reachable_id(info.parent_session_id.clone()).await?;
        let parent_version_id = if parent_session_id.is_some() { info.parent_version_id.clone() } else { None };

        let bundle = Bundle {
            cks_mcp_export: true,
            schema_version: BUNDLE_SCHEMA_VERSION,
            lineage: lineage(ctx, &info).await?,
            session: SessionEntry {
                session_id: info.session_id,
                parent_session_id,
                parent_version_id,
                closed: info.closed,
                created_at: info.created_at,
                metadata: session_metadata,
            },
            current_structure,
            version_history: VersionHistory {
                count: versions.len(),
                include_structures: input.include_structures,
                versions,
            },
        };
        let bundle_json = serde_json::to_string(&bundle).map_err(|e| ToolError::internal(e.to_string()))?;
        Ok(Output::Bundle { format: "bundle", session_id: id, bundle: Box::new(bundle), bundle_json })
    }
}

/// The result: the bundle (default), or the session's current structure alone (`format: "cks"`).
#[derive(Debug, Serialize, JsonSchema)]
#[serde(untagged)]
pub(crate) enum Output {
    Bundle {
        format: &'static str,
        session_id: String,
        bundle: Box<Bundle>,
        /// The same bundle as JSON text, ready to store or to pass to `import_session`.
        bundle_json: String,
    },
    Cks {
        format: &'static str,
        session_id: String,
        cks_json: String,
    },
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Bundle {
    cks_mcp_export: bool,
    schema_version: &'static str,
    session: SessionEntry,
    /// The session's ancestors, nearest first.
    lineage: Vec<LineageEntry>,
    current_structure: CurrentStructure,
    version_history: VersionHistory,
}

#[derive(Debug, Serialize, JsonSchema)]
struct SessionEntry {
    session_id: String,
    parent_session_id: Option<String>,
    parent_version_id: Option<String>,
    closed: bool,
    created_at: String,
    metadata: Map<String, Value>,
}

#[derive(Debug, Serialize, JsonSchema)]
struct LineageEntry {
    session_id: String,
    /// The fork point in that ancestor.
    parent_version_id: Option<String>,
    /// Whether the ancestor is still stored here.
    exists: bool,
}

#[derive(Debug, Serialize, JsonSchema)]
struct CurrentStructure {
    root_hash: String,
    /// Every object, relations included (as the reference counts).
    objects_count: usize,
    relations_count: usize,
    total_objects: usize,
    cks_json: String,
}

#[derive(Debug, Serialize, JsonSchema)]
struct VersionHistory {
    count: usize,
    include_structures: bool,
    versions: Vec<VersionEntry>,
}

#[derive(Debug, Serialize, JsonSchema)]
struct VersionEntry {
    version_id: String,
    seq: u64,
    transaction_id: String,
    created_at: String,
    state_hash: String,
    object_count: u64,
    metadata: Map<String, Value>,
    /// The version's structure, with `include_structures`.
    #[serde(skip_serializing_if = "Option::is_none")]
    cks_json: Option<String>,
}

/// The session's ancestors, nearest first: `{session_id, parent_version_id (the fork point in
/// that ancestor), exists}`. Stops at a root, at a missing ancestor, at a repeat, after
/// [`MAX_LINEAGE`] steps, or before an ancestor the caller cannot reach (nothing past it is named:
/// its own parent would tell what it was branched from).
async fn lineage(ctx: &ToolContext, info: &cks_runtime::SessionInfo) -> Result<Vec<LineageEntry>, ToolError> {
    let mut out = Vec::new();
    let mut seen: HashSet<String> = HashSet::from([info.session_id.clone()]);
    let mut next = info.parent_session_id.clone().map(|p| (p, info.parent_version_id.clone()));
    while let Some((parent, fork_version)) = next.take() {
        if out.len() >= MAX_LINEAGE || !seen.insert(parent.clone()) || !ctx.reaches(&parent).await? {
            break;
        }
        match ctx.runtime.info(&parent).await {
            Ok(parent_info) => {
                out.push(LineageEntry { session_id: parent, parent_version_id: fork_version, exists: true });
                next = parent_info.parent_session_id.clone().map(|p| (p, parent_info.parent_version_id.clone()));
            }
            Err(RuntimeError::SessionNotFound(_)) => {
                out.push(LineageEntry { session_id: parent, parent_version_id: fork_version, exists: false });
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::testing::{call, context, document, obj, rel, session, structure};

    fn data() -> Value {
        structure(vec![obj("a", "T", "A", json!({})), obj("b", "T", "B", json!({})), rel("r", &["a", "b"], "x")])
    }

    #[tokio::test]
    async fn bundles_every_version() {
        let ctx = context();
        let id = session(&ctx, data()).await;
        // Twelve more versions: most are stored as deltas.
        for i in 0..12 {
            let op = json!([{"type": "add_object", "identity": {"id": format!("o{i}"), "type": "T", "name": "o"}}]);
            let result = call(&ctx, "evolve_knowledge", json!({"session_id": id, "operations": op})).await;
            assert_eq!(result["evolved"], true, "{result}");
        }
        let result = call(&ctx, "export_session", json!({"session_id": id, "include_structures": true})).await;
        assert_eq!(result["format"], "bundle");
        assert_eq!(result["session_id"], json!(id));
        let bundle = &result["bundle"];
        assert_eq!(serde_json::from_str::<Value>(result["bundle_json"].as_str().unwrap()).unwrap(), *bundle);
        assert_eq!(bundle["cks_mcp_export"], true);
        assert_eq!(bundle["schema_version"], "1.0");
        assert_eq!(bundle["session"]["session_id"], json!(id));
        assert_eq!(bundle["session"]["closed"], false);
        assert_eq!(bundle["lineage"], json!([]));
        let current = &bundle["current_structure"];
        assert_eq!((current["objects_count"].as_u64(), current["relations_count"].as_u64()), (Some(15), Some(1)));
        assert_eq!(current["total_objects"], 15);
        let history = &bundle["version_history"];
        assert_eq!(history["count"], 13);
        assert_eq!(history["include_structures"], true);
        let versions = history["versions"].as_array().unwrap();
        for (i, version) in versions.iter().enumerate() {
            let state =
                cks_core::json::parse_str(version["cks_json"].as_str().expect("every version has its structure"))
                    .unwrap();
            assert_eq!(state.len(), 3 + i, "version {i}");
            assert_eq!(version["seq"], i as u64 + 1);
            assert_eq!(version["object_count"], 3 + i as u64);
        }
        assert_eq!(versions[5]["metadata"]["tool"], "evolve_knowledge");
        assert_eq!(document(&versions.last().unwrap()["cks_json"]), document(&current["cks_json"]));

        let lean = call(&ctx, "export_session", json!({"session_id": id})).await;
        assert!(lean["bundle"]["version_history"]["versions"][0].get("cks_json").is_none());
    }

    #[tokio::test]
    async fn lineage_follows_parents() {
        let ctx = context();
        let root = session(&ctx, data()).await;
        let version = ctx.runtime.info(&root).await.unwrap().latest_version_id.unwrap();
        let child = ctx.runtime.create_branch(&root, Some(&version), Default::default()).await.unwrap().session_id;
        let grandchild = ctx.runtime.create_branch(&child, None, Default::default()).await.unwrap().session_id;
        let result = call(&ctx, "export_session", json!({"session_id": grandchild})).await;
        let lineage = result["bundle"]["lineage"].as_array().unwrap();
        assert_eq!(lineage.len(), 2);
        assert_eq!(lineage[0]["session_id"], json!(child));
        assert_eq!(lineage[1], json!({"session_id": root, "parent_version_id": version, "exists": true}));
        assert_eq!(result["bundle"]["session"]["parent_session_id"], json!(child));
    }

    #[tokio::test]
    async fn cks_format_and_errors() {
        let ctx = context();
        let id = session(&ctx, data()).await;
        let result = call(&ctx, "export_session", json!({"session_id": id, "format": "CKS"})).await;
        let expected = cks_core::json::to_canonical_string(&cks_core::json::parse_value(data()).unwrap());
        let mut expected = document(&json!(expected));
        expected["_cks_format_version"] = json!("1.0");
        expected["_cks_min_reader_version"] = json!("1.13.0");
        assert_eq!(document(&result["cks_json"]), expected, "the reference's document keys");
        assert_eq!((&result["format"], &result["session_id"]), (&json!("cks"), &json!(id)));
        let bad = call(&ctx, "export_session", json!({"session_id": id, "format": "zip"})).await;
        assert_eq!(bad["error"], "unsupported_format");
        assert_eq!(bad["message"], "Format 'zip' is not supported. Use 'bundle' (default) or 'cks'.");
        assert_eq!(call(&ctx, "export_session", json!({})).await["error"], "missing_parameter");
        assert_eq!(call(&ctx, "export_session", json!({"session_id": "x"})).await["error"], "session_not_found");
    }
}
