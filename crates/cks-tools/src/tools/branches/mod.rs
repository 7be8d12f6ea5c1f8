//! Sessions, branches and merges: create, merge (sessions or raw JSON), close, share, sandbox forks.

mod close_session;
mod create_branch;
mod fork_sandbox;
pub(crate) mod merge_branch;
mod merge_knowledge;
mod share_session;

pub(crate) use create_branch::branch_failed;

use cks_core::merge::{Conflict, MergeError, Resolutions, parse_resolutions};
use cks_runtime::RuntimeError;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::ToolError;
use crate::tool::{Listed, listed};
use crate::tools::versions::field_level_diff;

pub(crate) fn tools() -> Vec<Listed> {
    vec![
        listed(create_branch::CreateBranch),
        listed(merge_branch::MergeBranch),
        listed(merge_knowledge::MergeKnowledge),
        listed(close_session::CloseSession),
        listed(fork_sandbox::ForkSandbox),
        listed(share_session::ShareSession),
    ]
}

/// Parses the `resolutions` argument (absent: none).
pub(crate) fn resolutions(value: Option<&Value>) -> Result<Resolutions, ToolError> {
    match value {
        None => Ok(Resolutions::new()),
        Some(value) => parse_resolutions(value).map_err(|e| {
            ToolError::invalid_parameter(format!("Invalid 'resolutions' entry: {e}")).with("parameter", "resolutions")
        }),
    }
}

/// One object both sides changed differently.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ConflictEntry {
    object_id: String,
    /// What the target (branch A) did to it since the base: `{action: added|deleted|modified|
    /// unchanged, type, name, structure | changes}`.
    target_diff: Map<String, Value>,
    /// What the source (branch B) did to it since the base, in the same shape.
    source_diff: Map<String, Value>,
}

/// Conflicts as `{object_id, target_diff, source_diff}`: branch A is the target, B the source.
pub(crate) fn conflicts(conflicts: &[Conflict]) -> Vec<ConflictEntry> {
    let object = |value: Value| match value {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    conflicts
        .iter()
        .map(|c| ConflictEntry {
            object_id: c.object_id.clone(),
            target_diff: object(field_level_diff(c.base.as_deref(), c.branch_a.as_deref())),
            source_diff: object(field_level_diff(c.base.as_deref(), c.branch_b.as_deref())),
        })
        .collect()
}

/// A merge that could not run (not a conflict): `merge_failed`, or `invalid_parameter` for a
/// resolution the merge rejected.
pub(crate) fn merge_error(e: MergeError) -> ToolError {
    match e {
        MergeError::InvalidResolution { .. } | MergeError::ResolutionsNotAnObject => {
            ToolError::invalid_parameter(format!("Invalid 'resolutions' entry: {e}")).with("parameter", "resolutions")
        }
        other => ToolError::from(RuntimeError::Merge(other)),
    }
}
