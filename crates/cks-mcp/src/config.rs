//! Configuration: command-line flags and the reference's environment variables, resolved once at
//! start-up into a [`Config`].
//!
//! `<data dir>/.env` is read after the real environment and never overrides it. The data directory
//! and the database path are read from the real environment only (they choose where the `.env`
//! file is); a `.env` file that sets them differently gets a warning. Every variable, from either
//! source, is checked against [`variables`] before anything starts.

pub mod variables;

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand};

/// cks-mcp: an MCP server for the Canonical Knowledge Structure, a versioned knowledge graph.
#[derive(Debug, Parser)]
#[command(name = "cks-mcp", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Also serve MCP over HTTP at this address (e.g. 127.0.0.1:8765).
    #[arg(long, value_name = "ADDR", global = true)]
    pub http: Option<SocketAddr>,
    /// Serve HTTP only: do not read MCP from stdin.
    #[arg(long, global = true)]
    pub no_stdio: bool,
}

impl Cli {
    /// The command line of this process; `--help` ends with every environment variable (that
    /// text is written only when help is asked for, not at every start).
    pub fn from_args() -> Cli {
        Cli::from_command_line(std::env::args_os())
    }

    /// [`Cli::from_args`] for the given arguments (the first is the program's name); exits
    /// with clap's message on a bad command line.
    pub fn from_command_line<I: Into<std::ffi::OsString> + Clone>(args: impl IntoIterator<Item = I>) -> Cli {
        use clap::{CommandFactory as _, FromArgMatches as _};
        let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
        let wants_help = args.iter().skip(1).any(|a| a == "-h" || a == "--help" || a == "help");
        let mut command = Cli::command();
        if wants_help {
            command = command.after_help(variables::help());
        }
        let matches = command.get_matches_from(args);
        Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve MCP over stdio (the default) and, with --http, over HTTP.
    Serve,
    /// Import the Python reference server's SQLite database: every session with its history.
    ImportReference(crate::import_reference::ImportReferenceArgs),
    /// Write a backup of everything stored (sessions with their history, the graph registry).
    ExportStorage(crate::storage_commands::ExportArgs),
    /// Restore a backup written by export-storage.
    ImportStorage(crate::storage_commands::ImportArgs),
    /// Copy everything stored into a new SQLite file or an empty PostgreSQL database.
    MigrateStorage(crate::storage_commands::MigrateArgs),
    /// Create, list or revoke API keys for headless clients.
    Keys(crate::key_commands::KeysArgs),
    /// Add, list or remove the built-in authorization server's users (CKS_MCP_AUTH=builtin).
    Users(crate::user_commands::UsersArgs),
    /// Run the autonomous workers (all, or those named) against the configured store, serving no
    /// client, until SIGTERM or Ctrl-C.
    Worker(crate::worker::WorkerArgs),
}

/// Where the data lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Storage {
    Sqlite(PathBuf),
    /// A PostgreSQL URL (it may hold a password: never print it).
    Postgres(String),
    Memory,
}

/// The resolved configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub data_dir: PathBuf,
    pub storage: Storage,
    pub http: Option<SocketAddr>,
    pub stdio: bool,
    pub http_token: Option<String>,
    /// `CKS_MCP_AUTH=keys`: HTTP needs an API key (or the static token, when set).
    pub keys_only: bool,
    /// OAuth over HTTP (`CKS_MCP_AUTH_ISSUER` and the variables beside it); `None` when off.
    pub auth: Option<crate::auth::AuthSettings>,
    /// `PRAGMA synchronous=FULL` for the SQLite store (`CKS_MCP_SQLITE_SYNCHRONOUS=full`).
    pub sqlite_synchronous_full: bool,
    /// The PostgreSQL store's pool size (`CKS_MCP_PG_POOL_SIZE`).
    pub pg_pool_size: usize,
    /// The task queue's lease and retry limit (`CKS_TASK_LEASE_SECONDS`, `CKS_TASK_MAX_RETRIES`).
    pub queue: cks_runtime::QueueConfig,
    /// Sessions kept loaded, and the objects they may hold together (`CKS_SESSION_CACHE_SESSIONS`,
    /// `CKS_SESSION_CACHE_OBJECTS`).
    pub cache_sessions: usize,
    pub cache_objects: usize,
    /// What the guarded fetcher may reach (`CKS_FETCH_ALLOWED_NETWORKS`).
    pub fetch: cks_web::fetch::FetchPolicy,
    /// Whether the sweepers run, how often, and how long a source check stays fresh (`CKS_SWEEPERS`,
    /// `CKS_SWEEP_INTERVAL_SECONDS`, `CKS_PROVENANCE_TTL_SECONDS`).
    pub sweepers: cks_runtime::SweepersConfig,
    /// Which autonomous processes run (`CKS_EMBEDDED_AGENTS`, `CKS_EMBED_CRITIC_AGENT`, `CKS_CRITIC_*`,
    /// `CKS_EMBED_PIPELINE_AGENT`, `CKS_PIPELINE_*`).
    pub processes: cks_workers::ProcessesConfig,
    pub allowed_origins: Vec<String>,
    pub max_message_bytes: usize,
    /// What one caller may hold (`CKS_MCP_LIMIT_*`, `limits.rs`).
    pub limits: crate::limits::Settings,
    /// The merged environment (real variables win over `.env`), for the crates that read their own.
    pub env: HashMap<String, String>,
}

impl Config {
    /// Resolves flags and environment. `env` is the process environment.
    pub fn resolve(cli: &Cli, env: HashMap<String, String>) -> anyhow::Result<Config> {
        let home = env.get("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
        let data_dir = env
            .get("CKS_MCP_DATA_DIR")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| home.join(".cks-mcp"));
        let storage = match env.get("CKS_MCP_DB_PATH").filter(|v| !v.is_empty()) {
            Some(path) if path == ":memory:" => Storage::Memory,
            Some(url) if cks_postgres::is_postgres_url(url) => Storage::Postgres(url.trim().to_owned()),
            Some(path) => Storage::Sqlite(PathBuf::from(path)),
            None => Storage::Sqlite(data_dir.join("cks_mcp.db")),
        };
        let dotenv_path = data_dir.join(".env");
        variables::check_all(|name| env.get(name).cloned()).map_err(anyhow::Error::msg)?;
        let (env, from_file) = merge_dotenv(env, &dotenv_path);
        variables::check_all(|name| from_file.get(name).and(env.get(name)).cloned())
            .map_err(|e| anyhow::anyhow!("{e} (set in {})", dotenv_path.display()))?;
        if let Some(warning) = variables::not_read_warning(env.keys().map(String::as_str)) {
            eprintln!("cks-mcp: warning: {warning}");
        }
        for name in ["CKS_MCP_DATA_DIR", "CKS_MCP_DB_PATH"] {
            if from_file.contains(name) {
                eprintln!(
                    "cks-mcp: warning: {name} in {} is not used: it can only be set in the environment",
                    dotenv_path.display()
                );
            }
        }
        let get = |name: &str| env.get(name).map(|v| v.trim()).filter(|v| !v.is_empty());
        let http_token = get("CKS_MCP_HTTP_TOKEN").map(str::to_owned);
        // Checked above: the one accepted value.
        let keys_only = get("CKS_MCP_AUTH").is_some_and(|v| v.eq_ignore_ascii_case("keys"));
        let auth = crate::auth::AuthSettings::from_env(get, http_token.is_some())?;
        let sqlite_synchronous_full = get("CKS_MCP_SQLITE_SYNCHRONOUS").is_some_and(|v| v.eq_ignore_ascii_case("full"));
        // Checked above.
        let pg_pool_size = get("CKS_MCP_PG_POOL_SIZE").and_then(|v| v.parse().ok()).unwrap_or(16);
        let defaults = cks_runtime::QueueConfig::default();
        let queue = cks_runtime::QueueConfig {
            lease: get("CKS_TASK_LEASE_SECONDS")
                .and_then(|v| v.parse().ok())
                .map_or(defaults.lease, std::time::Duration::from_secs),
            max_retries: get("CKS_TASK_MAX_RETRIES").and_then(|v| v.parse().ok()).unwrap_or(defaults.max_retries),
        };
        let runtime_defaults = cks_runtime::RuntimeConfig::default();
        let cache_sessions =
            get("CKS_SESSION_CACHE_SESSIONS").and_then(|v| v.parse().ok()).unwrap_or(runtime_defaults.cache_capacity);
        let cache_objects =
            get("CKS_SESSION_CACHE_OBJECTS").and_then(|v| v.parse().ok()).unwrap_or(runtime_defaults.cache_objects);
        let defaults = cks_runtime::SweepersConfig::default();
        let sweepers = cks_runtime::SweepersConfig {
            interval: get("CKS_SWEEP_INTERVAL_SECONDS")
                .and_then(|v| v.parse().ok())
                .map_or(defaults.interval, std::time::Duration::from_secs),
            start: get("CKS_SWEEPERS").is_none_or(|v| v.eq_ignore_ascii_case("on")),
            provenance_ttl: get("CKS_PROVENANCE_TTL_SECONDS")
                .and_then(|v| v.parse().ok())
                .map_or(defaults.provenance_ttl, std::time::Duration::from_secs),
        };
        let fetch = cks_web::fetch::FetchPolicy {
            // Checked above.
            allowed: get("CKS_FETCH_ALLOWED_NETWORKS")
                .map(variables::networks)
                .and_then(Result::ok)
                .unwrap_or_default(),
            ..Default::default()
        };
        let processes = processes_config(&get)?;
        let http = match (cli.http, env.get("CKS_MCP_HTTP_PORT").filter(|v| !v.is_empty())) {
            (Some(addr), _) => Some(addr),
            (None, Some(port)) => {
                let port: u16 = port
                    .parse()
                    .map_err(|_| anyhow::anyhow!("CKS_MCP_HTTP_PORT must be a port number, got '{port}'"))?;
                Some(SocketAddr::from(([127, 0, 0, 1], port)))
            }
            (None, None) => None,
        };
        let worker = matches!(cli.command, Some(Command::Worker(_)));
        if worker && cli.http.is_some() {
            anyhow::bail!("cks-mcp worker serves no client: run a server for --http");
        }
        // A worker ignores CKS_MCP_HTTP_PORT, which a shared environment may set for the servers.
        let http = if worker { None } else { http };
        if cli.no_stdio && http.is_none() && !worker {
            anyhow::bail!("--no-stdio needs --http ADDR or CKS_MCP_HTTP_PORT: there would be nothing to serve");
        }
        if let Some(addr) = http
            && !addr.ip().is_loopback()
            && http_token.is_none()
            && auth.is_none()
            && !keys_only
        {
            anyhow::bail!(
                "refusing to serve HTTP on {addr} without a token: set CKS_MCP_HTTP_TOKEN (or OAuth's \
                 CKS_MCP_AUTH_ISSUER, or CKS_MCP_AUTH=keys) to bind a non-loopback address"
            );
        }
        let allowed_origins = env
            .get("CKS_MCP_ALLOWED_ORIGINS")
            .map(|v| v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect())
            .unwrap_or_default();
        let max_message_bytes = match get("CKS_MCP_MAX_MESSAGE_BYTES") {
            // Checked above; a value beyond this machine's address space means "no limit".
            Some(v) => v.parse().unwrap_or(usize::MAX),
            None => 64 * 1024 * 1024,
        };
        let limits = crate::limits::Settings::from_env(get);
        Ok(Config {
            data_dir,
            storage,
            http,
            stdio: !cli.no_stdio && !worker,
            http_token,
            auth,
            keys_only,
            sqlite_synchronous_full,
            pg_pool_size,
            queue,
            cache_sessions,
            cache_objects,
            sweepers,
            processes,
            fetch,
            allowed_origins,
            max_message_bytes,
            limits,
            env,
        })
    }
}

/// Adds the `KEY=VALUE` lines of a `.env` file for keys the environment does not have; also
/// returns which keys the file set (and the environment did not).
fn merge_dotenv(mut env: HashMap<String, String>, path: &Path) -> (HashMap<String, String>, HashSet<String>) {
    let mut from_file = HashSet::new();
    let Ok(text) = std::fs::read_to_string(path) else { return (env, from_file) };
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let Some((key, value)) = line.split_once('=') else { continue };
        let value = value.trim();
        let value = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
            .unwrap_or(value);
        let key = key.trim();
        if !env.contains_key(key) {
            env.insert(key.to_owned(), value.to_owned());
            from_file.insert(key.to_owned());
        }
    }
    (env, from_file)
}

/// The autonomous processes' settings (the values were checked against their forms already).
fn processes_config<'a>(get: &impl Fn(&str) -> Option<&'a str>) -> anyhow::Result<cks_workers::ProcessesConfig> {
    use cks_workers::{CRITIC_TASK_TYPES, EnrichmentConfig, PipelineConfig, ProcessesConfig, Source, SourcePolicy};
    let yes = |name: &str| get(name).map(|v| matches!(v.to_ascii_lowercase().as_str(), "true" | "1" | "yes" | "on"));
    let seconds = |name: &str, default: std::time::Duration| {
        get(name).and_then(|v| v.parse().ok()).map_or(default, std::time::Duration::from_secs)
    };
    let defaults = ProcessesConfig::default();
    let critic_task_types = match get("CKS_CRITIC_TASK_TYPES") {
        None => defaults.critic_task_types.clone(),
        Some(list) => {
            let types: Vec<String> = list.split(',').map(|t| t.trim().to_owned()).filter(|t| !t.is_empty()).collect();
            let unknown: Vec<&String> = types.iter().filter(|t| !CRITIC_TASK_TYPES.contains(&t.as_str())).collect();
            if !unknown.is_empty() || types.is_empty() {
                anyhow::bail!(
                    "CKS_CRITIC_TASK_TYPES={list:?} is not accepted: expected task types among {}",
                    CRITIC_TASK_TYPES.join(", ")
                );
            }
            types
        }
    };
    let number = |name: &str| get(name).and_then(|v| v.parse::<u64>().ok());
    let tokens = |name: &str, default: u32| number(name).map_or(default, |n| u32::try_from(n).unwrap_or(u32::MAX));
    let hops = |name: &str, default: u32| number(name).map_or(default, |n| n as u32);
    let pipeline_defaults = PipelineConfig::default();
    let pipeline = PipelineConfig {
        enabled: yes("CKS_EMBED_PIPELINE_AGENT").or_else(|| yes("CKS_EMBEDDED_AGENTS")).unwrap_or(false),
        poll_interval: seconds("CKS_PIPELINE_POLL_INTERVAL", pipeline_defaults.poll_interval),
        liveness_interval: seconds("CKS_PIPELINE_LIVENESS_INTERVAL", pipeline_defaults.liveness_interval),
        token_budget_per_hour: number("CKS_PIPELINE_TOKEN_BUDGET_PER_HOUR")
            .unwrap_or(pipeline_defaults.token_budget_per_hour),
        researcher_max_tokens: tokens("CKS_PIPELINE_RESEARCHER_MAX_TOKENS", pipeline_defaults.researcher_max_tokens),
        reviewer_max_tokens: tokens("CKS_PIPELINE_REVIEWER_MAX_TOKENS", pipeline_defaults.reviewer_max_tokens),
        synthesizer_max_tokens: tokens("CKS_PIPELINE_SYNTHESIZER_MAX_TOKENS", pipeline_defaults.synthesizer_max_tokens),
        arbiter_max_tokens: tokens("CKS_PIPELINE_ARBITER_MAX_TOKENS", pipeline_defaults.arbiter_max_tokens),
        synthesizer_query_depth: hops(
            "CKS_PIPELINE_SYNTHESIZER_QUERY_DEPTH",
            pipeline_defaults.synthesizer_query_depth,
        ),
        arbiter_query_depth: hops("CKS_PIPELINE_ARBITER_QUERY_DEPTH", pipeline_defaults.arbiter_query_depth),
        run_max_tokens: number("CKS_PIPELINE_MAX_TOKENS").unwrap_or(pipeline_defaults.run_max_tokens),
        run_max_cost_usd: get("CKS_PIPELINE_MAX_COST_USD")
            .and_then(|v| v.parse().ok())
            .unwrap_or(pipeline_defaults.run_max_cost_usd),
    };
    let enrichment_defaults = EnrichmentConfig::default();
    let list = |name: &str| -> Vec<String> {
        get(name)
            .map_or_else(Vec::new, |v| v.split(',').map(|p| p.trim().to_owned()).filter(|p| !p.is_empty()).collect())
    };
    let lower = |items: Vec<String>| items.into_iter().map(|i| i.to_ascii_lowercase()).collect::<Vec<_>>();
    let endpoint =
        |name: &str, default: &str| -> String { get(name).map_or_else(|| default.to_owned(), |v| v.to_owned()) };
    let names = match lower(list("CKS_ENRICHMENT_ADAPTERS")) {
        names if names.is_empty() => Source::NAMES.map(str::to_owned).to_vec(),
        names => names,
    };
    let sources = names
        .iter()
        .map(|name| match name.as_str() {
            "wikipedia" => {
                Ok(Source::Wikipedia { endpoint: endpoint("CKS_ENRICHMENT_WIKIPEDIA_URL", Source::WIKIPEDIA) })
            }
            "arxiv" => Ok(Source::Arxiv { endpoint: endpoint("CKS_ENRICHMENT_ARXIV_URL", Source::ARXIV) }),
            other => Err(anyhow::anyhow!(
                "CKS_ENRICHMENT_ADAPTERS names '{other}', which is not a source: expected some of {}",
                Source::NAMES.join(", ")
            )),
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let enrichment = EnrichmentConfig {
        enabled: yes("CKS_EMBED_ENRICHMENT_AGENT").or_else(|| yes("CKS_EMBEDDED_AGENTS")).unwrap_or(false),
        poll_interval: seconds("CKS_ENRICHMENT_POLL_INTERVAL", enrichment_defaults.poll_interval),
        liveness_interval: seconds("CKS_ENRICHMENT_LIVENESS_INTERVAL", enrichment_defaults.liveness_interval),
        sources,
        limit_per_source: number("CKS_ENRICHMENT_LIMIT_PER_ADAPTER")
            .map_or(enrichment_defaults.limit_per_source, |n| n as usize),
        min_score: get("CKS_ENRICHMENT_MIN_SCORE")
            .and_then(|v| v.parse().ok())
            .unwrap_or(enrichment_defaults.min_score),
        max_ingests: number("CKS_ENRICHMENT_MAX_INGESTS").map_or(enrichment_defaults.max_ingests, |n| n as usize),
        policy: SourcePolicy {
            allow_domains: lower(list("CKS_ENRICHMENT_ALLOW_DOMAINS")),
            block_domains: lower(list("CKS_ENRICHMENT_BLOCK_DOMAINS")),
            allow_url_prefixes: list("CKS_ENRICHMENT_ALLOW_URL_PREFIXES"),
            block_url_prefixes: list("CKS_ENRICHMENT_BLOCK_URL_PREFIXES"),
        },
    };
    Ok(ProcessesConfig {
        critic: yes("CKS_EMBED_CRITIC_AGENT").or_else(|| yes("CKS_EMBEDDED_AGENTS")).unwrap_or(false),
        critic_task_types,
        poll_interval: seconds("CKS_CRITIC_POLL_INTERVAL", defaults.poll_interval),
        liveness_interval: seconds("CKS_CRITIC_LIVENESS_INTERVAL", defaults.liveness_interval),
        shutdown_timeout: seconds("CKS_EMBEDDED_AGENTS_SHUTDOWN_TIMEOUT", defaults.shutdown_timeout),
        token_budget_per_hour: get("CKS_CRITIC_TOKEN_BUDGET_PER_HOUR")
            .and_then(|v| v.parse().ok())
            .unwrap_or(defaults.token_budget_per_hour),
        pipeline,
        enrichment,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cli(args: &[&str]) -> Cli {
        Cli::from_command_line(std::iter::once("cks-mcp").chain(args.iter().copied()))
    }

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn defaults_follow_the_reference() {
        let config = Config::resolve(&cli(&[]), env(&[("HOME", "/home/u")])).unwrap();
        assert_eq!(config.data_dir, PathBuf::from("/home/u/.cks-mcp"));
        assert_eq!(config.storage, Storage::Sqlite(PathBuf::from("/home/u/.cks-mcp/cks_mcp.db")));
        assert_eq!(config.http, None);
        let config =
            Config::resolve(&cli(&[]), env(&[("CKS_MCP_DATA_DIR", "/d"), ("CKS_MCP_HTTP_PORT", "9000")])).unwrap();
        assert_eq!(config.storage, Storage::Sqlite(PathBuf::from("/d/cks_mcp.db")));
        assert_eq!(config.http, Some("127.0.0.1:9000".parse().unwrap()));
    }

    #[test]
    fn the_critic_runs_when_embedded_unless_turned_off_and_claims_known_types() {
        let resolve = |vars: &[(&str, &str)]| Config::resolve(&cli(&[]), env(vars));
        assert!(!resolve(&[]).unwrap().processes.critic, "off by default");
        assert!(resolve(&[("CKS_EMBEDDED_AGENTS", "true")]).unwrap().processes.critic);
        assert!(
            !resolve(&[("CKS_EMBEDDED_AGENTS", "yes"), ("CKS_EMBED_CRITIC_AGENT", "false")]).unwrap().processes.critic
        );
        let config = resolve(&[
            ("CKS_EMBED_CRITIC_AGENT", "ON"),
            ("CKS_CRITIC_TASK_TYPES", "temporal_conflict, contradiction_detected"),
            ("CKS_CRITIC_POLL_INTERVAL", "2"),
        ])
        .unwrap();
        assert!(config.processes.critic);
        assert_eq!(config.processes.critic_task_types, ["temporal_conflict", "contradiction_detected"]);
        assert_eq!(config.processes.poll_interval, std::time::Duration::from_secs(2));
        let err = resolve(&[("CKS_CRITIC_TASK_TYPES", "temporal_conflict,crdt_fork")]).unwrap_err().to_string();
        assert!(err.contains("CKS_CRITIC_TASK_TYPES") && err.contains("contradiction_detected"), "{err}");
        assert!(resolve(&[("CKS_EMBEDDED_AGENTS", "maybe")]).is_err());
    }

    #[test]
    fn enrichment_runs_when_embedded_searching_the_configured_sources() {
        use cks_workers::{EnrichmentConfig, Source};
        let resolve = |vars: &[(&str, &str)]| Config::resolve(&cli(&[]), env(vars)).map(|c| c.processes.enrichment);
        assert_eq!(resolve(&[]).unwrap(), EnrichmentConfig::default(), "off by default");
        assert!(resolve(&[("CKS_EMBEDDED_AGENTS", "true")]).unwrap().enabled);
        let config = resolve(&[
            ("CKS_EMBED_ENRICHMENT_AGENT", "true"),
            ("CKS_ENRICHMENT_ADAPTERS", " Arxiv ,"),
            ("CKS_ENRICHMENT_ARXIV_URL", "http://127.0.0.1:9/query"),
            ("CKS_ENRICHMENT_MIN_SCORE", "0.7"),
            ("CKS_ENRICHMENT_MAX_INGESTS", "4"),
            ("CKS_ENRICHMENT_BLOCK_DOMAINS", "Example.COM, ,"),
            ("CKS_ENRICHMENT_ALLOW_URL_PREFIXES", "https://x.org/Wiki/"),
        ])
        .unwrap();
        assert!(config.enabled);
        assert_eq!(config.sources, [Source::Arxiv { endpoint: "http://127.0.0.1:9/query".into() }]);
        assert_eq!((config.min_score, config.max_ingests), (0.7, 4));
        assert_eq!(config.policy.block_domains, ["example.com"]);
        assert_eq!(config.policy.allow_url_prefixes, ["https://x.org/Wiki/"], "a path keeps its case");
        let defaults = resolve(&[("CKS_ENRICHMENT_WIKIPEDIA_URL", "http://127.0.0.1:9/w/api.php")]).unwrap();
        assert_eq!(defaults.sources[0], Source::Wikipedia { endpoint: "http://127.0.0.1:9/w/api.php".into() });
        assert_eq!(defaults.sources[1], Source::Arxiv { endpoint: Source::ARXIV.into() });
        let err = resolve(&[("CKS_ENRICHMENT_ADAPTERS", "wikipedia,pubmed")]).unwrap_err().to_string();
        assert!(err.contains("pubmed") && err.contains("wikipedia, arxiv"), "{err}");
        assert!(resolve(&[("CKS_ENRICHMENT_ARXIV_URL", "ftp://x")]).is_err());
    }

    #[test]
    fn the_pipeline_runs_when_embedded_with_the_references_step_limits() {
        use cks_workers::PipelineConfig;
        let resolve = |vars: &[(&str, &str)]| Config::resolve(&cli(&[]), env(vars)).map(|c| c.processes.pipeline);
        assert_eq!(resolve(&[]).unwrap(), PipelineConfig::default(), "off by default");
        let defaults = PipelineConfig::default();
        assert_eq!(
            (defaults.researcher_max_tokens, defaults.reviewer_max_tokens),
            (512, 256),
            "the reference's defaults"
        );
        assert_eq!((defaults.synthesizer_max_tokens, defaults.arbiter_max_tokens), (1024, 512));
        assert_eq!((defaults.run_max_tokens, defaults.run_max_cost_usd), (100_000, 0.5));
        let embedded = Config::resolve(&cli(&[]), env(&[("CKS_EMBEDDED_AGENTS", "1")])).unwrap().processes;
        assert!(embedded.pipeline.enabled && embedded.critic, "CKS_EMBEDDED_AGENTS runs both");
        let only = resolve(&[("CKS_EMBEDDED_AGENTS", "true"), ("CKS_EMBED_PIPELINE_AGENT", "false")]).unwrap();
        assert!(!only.enabled);
        let tuned = resolve(&[
            ("CKS_EMBED_PIPELINE_AGENT", "yes"),
            ("CKS_PIPELINE_POLL_INTERVAL", "2"),
            ("CKS_PIPELINE_LIVENESS_INTERVAL", "3"),
            ("CKS_PIPELINE_TOKEN_BUDGET_PER_HOUR", "0"),
            ("CKS_PIPELINE_RESEARCHER_MAX_TOKENS", "100"),
            ("CKS_PIPELINE_REVIEWER_MAX_TOKENS", "101"),
            ("CKS_PIPELINE_SYNTHESIZER_MAX_TOKENS", "102"),
            ("CKS_PIPELINE_ARBITER_MAX_TOKENS", "103"),
            ("CKS_PIPELINE_SYNTHESIZER_QUERY_DEPTH", "2"),
            ("CKS_PIPELINE_ARBITER_QUERY_DEPTH", "0"),
            ("CKS_PIPELINE_MAX_TOKENS", "5000"),
            ("CKS_PIPELINE_MAX_COST_USD", "1.25"),
        ])
        .unwrap();
        assert_eq!(
            tuned,
            PipelineConfig {
                enabled: true,
                poll_interval: std::time::Duration::from_secs(2),
                liveness_interval: std::time::Duration::from_secs(3),
                token_budget_per_hour: 0,
                researcher_max_tokens: 100,
                reviewer_max_tokens: 101,
                synthesizer_max_tokens: 102,
                arbiter_max_tokens: 103,
                synthesizer_query_depth: 2,
                arbiter_query_depth: 0,
                run_max_tokens: 5000,
                run_max_cost_usd: 1.25,
            }
        );
        for (name, value) in [
            ("CKS_PIPELINE_MAX_COST_USD", "-1"),
            ("CKS_PIPELINE_MAX_COST_USD", "lots"),
            ("CKS_PIPELINE_MAX_TOKENS", "0"),
            ("CKS_PIPELINE_ARBITER_QUERY_DEPTH", "9"),
        ] {
            let err = resolve(&[(name, value)]).unwrap_err().to_string();
            assert!(err.contains(name), "{err}");
        }
    }

    #[test]
    fn a_worker_serves_no_client() {
        let config = Config::resolve(&cli(&["worker", "--critic"]), env(&[("CKS_MCP_HTTP_PORT", "9000")])).unwrap();
        assert_eq!((config.http, config.stdio), (None, false));
        assert!(Config::resolve(&cli(&["worker", "--no-stdio"]), env(&[])).is_ok());
        let err = Config::resolve(&cli(&["worker", "--http", "127.0.0.1:9000"]), env(&[])).unwrap_err().to_string();
        assert!(err.contains("serves no client"), "{err}");
    }

    #[test]
    fn non_loopback_needs_a_token() {
        let err = Config::resolve(&cli(&["--http", "0.0.0.0:8000"]), env(&[])).unwrap_err().to_string();
        assert!(err.contains("CKS_MCP_HTTP_TOKEN"), "{err}");
        assert!(Config::resolve(&cli(&["--http", "0.0.0.0:8000"]), env(&[("CKS_MCP_HTTP_TOKEN", "t")])).is_ok());
    }

    #[test]
    fn oauth_protects_a_non_loopback_bind_and_excludes_the_static_token() {
        let oauth =
            [("CKS_MCP_AUTH_ISSUER", "https://id.example.com"), ("CKS_MCP_PUBLIC_URL", "https://kg.example.com")];
        let config = Config::resolve(&cli(&["--http", "0.0.0.0:8000"]), env(&oauth)).unwrap();
        assert_eq!(config.auth.unwrap().audience, "https://kg.example.com/mcp");
        let both = [oauth[0], oauth[1], ("CKS_MCP_HTTP_TOKEN", "t")];
        let err = Config::resolve(&cli(&[]), env(&both)).unwrap_err().to_string();
        assert!(err.contains("CKS_MCP_AUTH_ISSUER") && err.contains("CKS_MCP_HTTP_TOKEN"), "{err}");
        let err = Config::resolve(&cli(&[]), env(&oauth[..1])).unwrap_err().to_string();
        assert!(err.contains("CKS_MCP_PUBLIC_URL"), "{err}");
    }

    #[test]
    fn dotenv_never_overrides_the_environment() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(".env"), "A=from-file\nB=\"quoted\"\n# comment\nexport C=c\n").unwrap();
        let d = dir.path().to_str().unwrap();
        let config = Config::resolve(&cli(&[]), env(&[("CKS_MCP_DATA_DIR", d), ("A", "real")])).unwrap();
        assert_eq!(config.env["A"], "real");
        assert_eq!(config.env["B"], "quoted");
        assert_eq!(config.env["C"], "c");
    }

    #[test]
    fn a_token_in_the_dotenv_file_is_honoured() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(".env"), "CKS_MCP_HTTP_TOKEN=from-file\n").unwrap();
        let d = dir.path().to_str().unwrap();
        let config = Config::resolve(&cli(&["--http", "0.0.0.0:8000"]), env(&[("CKS_MCP_DATA_DIR", d)])).unwrap();
        assert_eq!(config.http_token.as_deref(), Some("from-file"));
        let config =
            Config::resolve(&cli(&[]), env(&[("CKS_MCP_DATA_DIR", d), ("CKS_MCP_HTTP_TOKEN", "real")])).unwrap();
        assert_eq!(config.http_token.as_deref(), Some("real"));
    }

    #[test]
    fn bad_values_stop_start_up_naming_where_they_came_from() {
        let err = Config::resolve(&cli(&[]), env(&[("CKS_LLM_TIMEOUT_SECONDS", "2m")])).unwrap_err().to_string();
        assert!(err.contains("CKS_LLM_TIMEOUT_SECONDS='2m'") && err.contains("whole number of seconds"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(".env"), "CKS_AI_CHAT_MAX_ITERATIONS=many\n").unwrap();
        let d = dir.path().to_str().unwrap();
        let err = Config::resolve(&cli(&[]), env(&[("CKS_MCP_DATA_DIR", d)])).unwrap_err().to_string();
        assert!(err.contains("CKS_AI_CHAT_MAX_ITERATIONS='many'") && err.contains(".env"), "{err}");
        // The environment wins over the file, so a bad value it hides is never used.
        let config = Config::resolve(&cli(&[]), env(&[("CKS_MCP_DATA_DIR", d), ("CKS_AI_CHAT_MAX_ITERATIONS", "3")]));
        assert!(config.is_ok());
        let err = Config::resolve(&cli(&[]), env(&[("CKS_MCP_MAX_MESSAGE_BYTES", "64MB")])).unwrap_err().to_string();
        assert!(err.contains("CKS_MCP_MAX_MESSAGE_BYTES"), "{err}");
    }

    #[test]
    fn the_provenance_ttl_is_configurable() {
        let config = Config::resolve(&cli(&[]), env(&[])).unwrap();
        assert_eq!(config.sweepers.provenance_ttl, std::time::Duration::from_secs(30 * 24 * 3_600));
        let config = Config::resolve(&cli(&[]), env(&[("CKS_PROVENANCE_TTL_SECONDS", "60")])).unwrap();
        assert_eq!(config.sweepers.provenance_ttl, std::time::Duration::from_secs(60));
        assert!(Config::resolve(&cli(&[]), env(&[("CKS_PROVENANCE_TTL_SECONDS", "0")])).is_err());
    }

    #[test]
    fn the_fetchers_networks_are_configurable() {
        assert!(Config::resolve(&cli(&[]), env(&[])).unwrap().fetch.allowed.is_empty());
        let config =
            Config::resolve(&cli(&[]), env(&[("CKS_FETCH_ALLOWED_NETWORKS", "10.0.0.0/8, fd00::/8,")])).unwrap();
        let allowed: Vec<String> = config.fetch.allowed.iter().map(ToString::to_string).collect();
        assert_eq!(allowed, ["10.0.0.0/8", "fd00::/8"]);
        let err = Config::resolve(&cli(&[]), env(&[("CKS_FETCH_ALLOWED_NETWORKS", "10.0.0.0/33")])).unwrap_err();
        assert!(err.to_string().contains("CKS_FETCH_ALLOWED_NETWORKS"), "{err}");
    }

    #[test]
    fn synchronous_full_is_configurable() {
        assert!(!Config::resolve(&cli(&[]), env(&[])).unwrap().sqlite_synchronous_full);
        let config = Config::resolve(&cli(&[]), env(&[("CKS_MCP_SQLITE_SYNCHRONOUS", "full")])).unwrap();
        assert!(config.sqlite_synchronous_full);
    }
}
