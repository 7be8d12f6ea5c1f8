//! Reads of the past, as the read-only tools that offer them take them: a `version_id`, or an
//! `as_of` time (RFC 3339) that names the last version committed by then. The graph of that
//! version is read by rewinding the present ([`cks_runtime::Runtime::read_at`]).

use cks_core::KnowledgeStructure;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::context::ToolContext;
use crate::error::ToolError;

/// The version to read, if the arguments ask for one.
pub(crate) async fn version(
    ctx: &ToolContext,
    session_id: &str,
    version_id: Option<&str>,
    as_of: Option<&str>,
) -> Result<Option<String>, ToolError> {
    let (version_id, as_of) = (version_id.filter(|v| !v.is_empty()), as_of.filter(|t| !t.is_empty()));
    match (version_id, as_of) {
        (Some(_), Some(_)) => Err(ToolError::invalid_parameter("Give 'version_id' or 'as_of', not both.")),
        (Some(version_id), None) => Ok(Some(version_id.to_owned())),
        (None, Some(as_of)) => {
            let time = OffsetDateTime::parse(as_of, &Rfc3339).map_err(|e| {
                ToolError::invalid_parameter(format!(
                    "'as_of' must be an RFC 3339 time such as 2026-01-31T12:00:00Z ('{as_of}': {e})."
                ))
            })?;
            Ok(Some(ctx.runtime.version_at(session_id, time).await?))
        }
        (None, None) => Ok(None),
    }
}

/// Runs `f` on the session's graph: at `version` when given, as it is now otherwise.
pub(crate) async fn read<R>(
    ctx: &ToolContext,
    session_id: &str,
    version: Option<&str>,
    f: impl FnOnce(&KnowledgeStructure) -> R,
) -> Result<R, ToolError> {
    Ok(match version {
        Some(version) => ctx.runtime.read_at(session_id, version, f).await?,
        None => ctx.runtime.read(session_id, |structure, _| f(structure)).await?,
    })
}
