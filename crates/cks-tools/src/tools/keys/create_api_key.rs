//! `create_api_key`: a new key for a headless client, shown once.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use cks_runtime::api_keys::ApiKeyRecord;

use super::KeyView;
use crate::api_keys;
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::principal::Scope;
use crate::tool::{Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Input {
    /// Who the key acts as (e.g. 'nightly-import', or a person's id at the issuer).
    pub(crate) subject: String,
    /// What it may do.
    pub(crate) scope: KeyScope,
    /// Groups it belongs to, as a token's groups claim: sessions shared with them are reachable.
    #[serde(default)]
    pub(crate) groups: Vec<String>,
    /// The principal's issuer (default 'urn:cks-mcp:api-key'). The OAuth issuer's URL makes the
    /// key act as that issuer's `subject`, owning what that person owns.
    pub(crate) issuer: Option<String>,
    /// Days until it stops working (default: never).
    pub(crate) expires_in_days: Option<u32>,
    /// What it is for (shown in lists).
    pub(crate) label: Option<String>,
}

/// A key's scope, as tokens name it.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
pub(crate) enum KeyScope {
    #[serde(rename = "cks:read")]
    Read,
    #[serde(rename = "cks:write")]
    Write,
    #[serde(rename = "cks:admin")]
    Admin,
}

impl From<KeyScope> for Scope {
    fn from(scope: KeyScope) -> Scope {
        match scope {
            KeyScope::Read => Scope::Read,
            KeyScope::Write => Scope::Write,
            KeyScope::Admin => Scope::Admin,
        }
    }
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    /// The key: send it as `Authorization: Bearer <key>`. Shown this once; only its digest is kept.
    key: String,
    #[serde(flatten)]
    record: KeyView,
    note: &'static str,
}

/// The longest a name (subject, group, issuer, label) may be.
const MAX_NAME: usize = 256;
/// The longest life a key may be given: a hundred years is "never" said differently.
const MAX_DAYS: u32 = 36_500;

pub(crate) struct CreateApiKey;

#[async_trait::async_trait]
impl Tool for CreateApiKey {
    type Input = Input;
    type Output = Output;
    const TITLE: &'static str = "Create an API key";
    const CHANGES_SERVER: bool = true;
    const META: ToolMeta = ToolMeta {
        name: "create_api_key",
        description: "Create an API key for a headless client (a script, a CI job): it acts as 'subject' with \
            'scope' (cks:read, cks:write or cks:admin) and optional 'groups', until revoked or 'expires_in_days' \
            pass. Sent as Authorization: Bearer <key> over HTTP. Returns {key, id, subject, scope, expires_at, ...}: \
            the key is shown this once and only its digest is kept.",
        mutates_graph: false,
        creates_session: false,
        destructive: false,
        idempotent: false,
        open_world: false,
        session_fields: &[],
        session_checks: &[],
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        name("subject", &input.subject)?;
        for group in &input.groups {
            name("groups", group)?;
        }
        if let Some(issuer) = &input.issuer {
            name("issuer", issuer)?;
        }
        if let Some(label) = &input.label {
            name("label", label)?;
        }
        let now = OffsetDateTime::now_utc();
        let expires_at = match input.expires_in_days {
            None => None,
            Some(days @ 1..=MAX_DAYS) => Some(rfc3339(now + time::Duration::days(i64::from(days)))),
            Some(_) => {
                return Err(ToolError::invalid_parameter(format!(
                    "'expires_in_days' must be from 1 to {MAX_DAYS} (leave it out for a key that does not expire)."
                )));
            }
        };
        let (key, id) = api_keys::generate();
        let record = ApiKeyRecord {
            id,
            issuer: input.issuer.unwrap_or_else(|| api_keys::ISSUER.to_owned()),
            subject: input.subject,
            scope: Scope::from(input.scope).as_str().to_owned(),
            groups: input.groups,
            label: input.label,
            digest: api_keys::digest(&key),
            created_at: rfc3339(now),
            expires_at,
            revoked_at: None,
        };
        ctx.runtime.save_api_key(&record).await?;
        Ok(Output {
            key,
            record: KeyView::new(record, now),
            note: "Keep the key now: it is not shown again. Revoke it with revoke_api_key and its id.",
        })
    }
}

/// A name fit to keep and show: not empty, not too long, no control characters.
fn name(field: &str, value: &str) -> Result<(), ToolError> {
    if value.trim().is_empty() || value.len() > MAX_NAME || value.chars().any(char::is_control) {
        return Err(ToolError::invalid_parameter(format!(
            "'{field}' must be 1 to {MAX_NAME} characters without control characters."
        )));
    }
    Ok(())
}

fn rfc3339(at: OffsetDateTime) -> String {
    at.format(&Rfc3339).unwrap_or_default()
}
