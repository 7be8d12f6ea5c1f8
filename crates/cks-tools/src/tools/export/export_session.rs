//! `export_session`: a whole session as one self-contained JSON document (`bundle`: current
//! structure, version history, session metadata and lineage), or just its current structure
//! (`cks`).
//!
//! Differences from the reference: with `include_structures` every version's structure is
//! reconstructed and embedded (the reference silently skips the versions stored as deltas, i.e.
//! most of them); `current_structure.objects_count` counts non-relation objects (the reference
//! counted relations too) and `total_objects` counts both; each version also carries its
//! metadata, sequence number and object count; the bundle adds `lineage`.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::HashSet;

use cks_core::json::to_canonical_string;
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
    /// 'bundle' (default): the full migration document; 'cks': the current structure only.
    pub(crate) format: Option<String>,
    /// Bundle only: embed every version's reconstructed structure (can be large). Default false.
    #[serde(default)]
    pub(crate) include_structures: bool,
}

pub(crate) struct ExportSession;

#[async_trait::async_trait]
impl Tool for ExportSession {
    type Input = Input;
    type Output = Value;
    const ARGUMENT_COERCIONS: &'static [(&'static str, Coercion)] = &[("include_structures", Coercion::Truthy)];
    const META: ToolMeta = ToolMeta {
        name: "export_session",
        description: "Export a session for migration or archiving. format 'bundle' (default): {format, session_id, \
            bundle, bundle_json (the bundle as one JSON string)} where bundle = {cks_mcp_export, schema_version, \
            session {session_id, parent_session_id, parent_version_id, closed, created_at, metadata}, lineage \
            [ancestors, nearest first], current_structure {root_hash, objects_count, relations_count, \
            total_objects, cks_json}, version_history {count, include_structures, versions [{version_id, seq, \
            transaction_id, created_at, state_hash, object_count, metadata, cks_json?}]}}. 'include_structures' \
            embeds every version's structure (the reference server skipped most). format 'cks': {format, \
            session_id, cks_json}.",
        mutates_graph: false,
        creates_session: false,
        destructive: false,
        idempotent: true,
        open_world: false,
        session_fields: &["session_id"],
        session_checks: &[SessionCheck::exists("session_id")],
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Value, ToolError> {
        let requested = input.format.unwrap_or_else(|| "bundle".into());
        let format = requested.trim().to_lowercase();
        if format != "bundle" && format != "cks" {
            return Err(ToolError::new(
                "unsupported_format",
                format!("Format '{requested}' is not supported. Use 'bundle' (default) or 'cks'."),
            )
            .with("supported", json!(["bundle", "cks"])));
        }
        let id = input.session_id;
        let (info, cks_json, root_hash, nodes, relations, total) = ctx
            .runtime
            .read(&id, |s, info| {
                let relations = s.relations().count();
                (info.clone(), to_canonical_string(s), s.root_hash().to_hex(), s.len() - relations, relations, s.len())
            })
            .await?;
        if format == "cks" {
            return Ok(json!({"format": "cks", "session_id": id, "cks_json": cks_json}));
        }

        let mut versions = Vec::new();
        for version in ctx.runtime.list_versions(&id).await? {
            let mut entry = json!({
                "version_id": version.version_id,
                "seq": version.seq,
                "transaction_id": version.transaction_id,
                "created_at": version.created_at,
                "state_hash": version.state_hash,
                "object_count": version.object_count,
                "metadata": version.metadata,
            });
            if input.include_structures {
                let state = ctx.runtime.version_state(&id, &version.version_id).await?;
                entry["cks_json"] = json!(to_canonical_string(&state));
            }
            versions.push(entry);
        }
        // The session's metadata as `Runtime::info` describes it (with the head's version vector).
        let session_metadata = ctx.runtime.info(&id).await?.metadata;

        let bundle = json!({
            "cks_mcp_export": true,
            "schema_version": BUNDLE_SCHEMA_VERSION,
            "session": {
                "session_id": info.session_id,
                "parent_session_id": info.parent_session_id,
                "parent_version_id": info.parent_version_id,
                "closed": info.closed,
                "created_at": info.created_at,
                "metadata": session_metadata,
            },
            "lineage": lineage(ctx, &info).await?,
            "current_structure": {
                "root_hash": root_hash,
                "objects_count": nodes,
                "relations_count": relations,
                "total_objects": total,
                "cks_json": cks_json,
            },
            "version_history": {
                "count": versions.len(),
                "include_structures": input.include_structures,
                "versions": versions,
            },
        });
        let bundle_json = serde_json::to_string(&bundle).map_err(|e| ToolError::internal(e.to_string()))?;
        Ok(json!({"format": "bundle", "session_id": id, "bundle": bundle, "bundle_json": bundle_json}))
    }
}

/// The session's ancestors, nearest first: `{session_id, parent_version_id (the fork point in
/// that ancestor), exists}`. Stops at a root, at a missing ancestor, at a repeat, or after
/// [`MAX_LINEAGE`] steps.
async fn lineage(ctx: &ToolContext, info: &cks_runtime::SessionInfo) -> Result<Vec<Value>, ToolError> {
    let mut out = Vec::new();
    let mut seen: HashSet<String> = HashSet::from([info.session_id.clone()]);
    let mut next = info.parent_session_id.clone().map(|p| (p, info.parent_version_id.clone()));
    while let Some((parent, fork_version)) = next.take() {
        if out.len() >= MAX_LINEAGE || !seen.insert(parent.clone()) {
            break;
        }
        match ctx.runtime.info(&parent).await {
            Ok(parent_info) => {
                out.push(json!({"session_id": parent, "parent_version_id": fork_version, "exists": true}));
                next = parent_info.parent_session_id.clone().map(|p| (p, parent_info.parent_version_id.clone()));
            }
            Err(RuntimeError::SessionNotFound(_)) => {
                out.push(json!({"session_id": parent, "parent_version_id": fork_version, "exists": false}));
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::tools::test_support::{call, context, obj, rel, session, structure};

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
        assert_eq!((current["objects_count"].as_u64(), current["relations_count"].as_u64()), (Some(14), Some(1)));
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
        assert_eq!(versions.last().unwrap()["cks_json"], current["cks_json"]);

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
        assert_eq!(result, json!({"format": "cks", "session_id": id, "cks_json": expected}));
        let bad = call(&ctx, "export_session", json!({"session_id": id, "format": "zip"})).await;
        assert_eq!(bad["error"], "unsupported_format");
        assert_eq!(bad["message"], "Format 'zip' is not supported. Use 'bundle' (default) or 'cks'.");
        assert_eq!(call(&ctx, "export_session", json!({})).await["error"], "missing_parameter");
        assert_eq!(call(&ctx, "export_session", json!({"session_id": "x"})).await["error"], "session_not_found");
    }
}
