//! `cks-mcp keys create|list|revoke`: API keys made, listed and revoked by an operator on the
//! configured store, without serving. Each runs the admin tool of the same name
//! (`create_api_key`, `list_api_keys`, `revoke_api_key`), so the command and the tool cannot drift
//! apart. A server on the store sees the change at once (PostgreSQL) or within its refresh
//! interval (`auth/api_keys.rs`).

use serde_json::{Value, json};

use crate::config::Config;
use crate::storage_commands::OperatorCommand;

/// Arguments of `cks-mcp keys`.
#[derive(Debug, clap::Args)]
pub struct KeysArgs {
    #[command(subcommand)]
    pub action: KeysAction,
}

#[derive(Debug, clap::Subcommand)]
pub enum KeysAction {
    /// Create a key and print it (once: only its digest is kept).
    Create {
        /// Who the key acts as (e.g. nightly-import, or a person's id at the OAuth issuer).
        #[arg(long)]
        subject: String,
        /// What it may do.
        #[arg(long, value_parser = ["cks:read", "cks:write", "cks:admin"])]
        scope: String,
        /// A group it belongs to (repeat for more).
        #[arg(long = "group", value_name = "GROUP")]
        groups: Vec<String>,
        /// The principal's issuer (default urn:cks-mcp:api-key); the OAuth issuer's URL makes the
        /// key act as that issuer's subject.
        #[arg(long)]
        issuer: Option<String>,
        /// Days until it stops working (default: never).
        #[arg(long, value_name = "DAYS")]
        expires_in_days: Option<u32>,
        /// What it is for.
        #[arg(long)]
        label: Option<String>,
    },
    /// List the keys that work (with --all, revoked and expired ones too).
    List {
        #[arg(long)]
        all: bool,
    },
    /// Revoke a key by its id (or the key itself).
    Revoke {
        #[arg(value_name = "ID")]
        id: String,
    },
}

impl OperatorCommand for KeysArgs {
    fn tool_call(&self, _: &Config) -> anyhow::Result<(&'static str, Value)> {
        Ok(match &self.action {
            KeysAction::Create { subject, scope, groups, issuer, expires_in_days, label } => (
                "create_api_key",
                json!({"subject": subject, "scope": scope, "groups": groups, "issuer": issuer,
                       "expires_in_days": expires_in_days, "label": label}),
            ),
            KeysAction::List { all } => ("list_api_keys", json!({"all": all, "limit": 0})),
            KeysAction::Revoke { id } => ("revoke_api_key", json!({"id": id})),
        })
    }
}
