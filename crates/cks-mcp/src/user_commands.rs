//! `cks-mcp users add|list|remove`: the local users of the built-in authorization server
//! (`CKS_MCP_AUTH=builtin`), kept on the configured store. A password is read from standard
//! input, never from the command line (where `ps` and shell history would show it).

use std::io::BufRead as _;
use std::sync::Arc;

use anyhow::Context as _;

use cks_runtime::{Runtime, RuntimeConfig};
use cks_tools::Scope;

use crate::auth::builtin::users;
use crate::config::Config;

/// Arguments of `cks-mcp users`.
#[derive(Debug, clap::Args)]
pub struct UsersArgs {
    #[command(subcommand)]
    pub action: UsersAction,
}

#[derive(Debug, clap::Subcommand)]
pub enum UsersAction {
    /// Add a user, or give one a new password; the password is read from standard input.
    Add {
        /// The name they sign in with, and their subject in tokens.
        #[arg(value_name = "NAME")]
        name: String,
        /// The most they may do.
        #[arg(long, default_value = "cks:write", value_parser = ["cks:read", "cks:write", "cks:admin"])]
        scope: String,
        /// A group they belong to (repeat for more).
        #[arg(long = "group", value_name = "GROUP")]
        groups: Vec<String>,
    },
    /// List the users (never their passwords).
    List,
    /// Remove a user: they can no longer sign in (tokens already issued live out their minutes).
    Remove {
        #[arg(value_name = "NAME")]
        name: String,
    },
}

/// Runs `cks-mcp users` against the configured store.
pub async fn run(args: &UsersArgs, config: &Config) -> anyhow::Result<()> {
    let runtime = Arc::new(Runtime::new(crate::open_store(config).await?, RuntimeConfig::default()));
    match &args.action {
        UsersAction::Add { name, scope, groups } => {
            let mut password = String::new();
            std::io::stdin().lock().read_line(&mut password).context("reading the password from standard input")?;
            let password = password.trim_end_matches(['\r', '\n']);
            let scope = Scope::parse(scope).unwrap_or(Scope::Write);
            let user = users::add(&runtime, name, password, scope, groups.clone()).await?;
            println!("{}", serde_json::json!({"name": user.name, "scope": user.scope, "groups": user.groups}));
        }
        UsersAction::List => {
            let listed: Vec<_> = users::list(&runtime)
                .await?
                .into_iter()
                .map(|u| serde_json::json!({"name": u.name, "scope": u.scope, "groups": u.groups}))
                .collect();
            println!("{}", serde_json::json!({ "users": listed }));
        }
        UsersAction::Remove { name } => {
            if !users::remove(&runtime, name).await? {
                anyhow::bail!("there is no user '{name}'");
            }
            println!("{}", serde_json::json!({ "removed": name }));
        }
    }
    Ok(())
}
