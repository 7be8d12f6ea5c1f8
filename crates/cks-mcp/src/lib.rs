//! The cks-mcp server: configuration, logging, the runtime on its store, and the transports
//! (MCP over stdio and HTTP). The `cks-mcp` binary is a thin `main` over [`run`].
//!
//! Invariant: this is the only crate that knows MCP, HTTP serving or OpenTelemetry.

mod approvals;
mod apps;
pub mod auth;
mod completions;
pub mod config;
pub mod embedding;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod http;
pub mod import_reference;
mod json_text;
pub mod key_commands;
pub mod limits;
mod mcp;
mod metrics;
mod prompts;
mod resources;
pub mod secret;
pub mod server;
mod sessions;
mod stdio;
pub mod storage_commands;
pub mod stores;
mod subscriptions;
mod tasks;
pub mod telemetry;
pub mod user_commands;
pub mod worker;

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::Context;

use cks_chat::{AiChat, AiChatConfig};
use cks_runtime::store::memory::MemoryStore;
use cks_runtime::store::sqlite::SqliteOptions;
use cks_runtime::store::{Store, StoreLocation, StoreOpener};
use cks_runtime::{Runtime, RuntimeConfig, Sweepers};
use cks_tools::{LlmAccess, Registry, ToolProfile};

use crate::config::{Cli, Command, Config, Storage};
use crate::server::CksServer;

/// Parses the command line and environment, then serves until stdin closes (or forever, HTTP only).
pub fn run() -> anyhow::Result<()> {
    let cli = Cli::from_args();
    let env: HashMap<String, String> = std::env::vars().collect();
    let config = Config::resolve(&cli, env)?;
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the async runtime")?;
    let telemetry = telemetry::init(&config, runtime.handle())?;
    let ran = match &cli.command {
        Some(Command::ImportReference(args)) => runtime.block_on(import_reference::run(args, &config)),
        Some(Command::ExportStorage(args)) => runtime.block_on(storage_commands::run(args, &config)),
        Some(Command::ImportStorage(args)) => runtime.block_on(storage_commands::run(args, &config)),
        Some(Command::MigrateStorage(args)) => runtime.block_on(storage_commands::run(args, &config)),
        Some(Command::Keys(args)) => runtime.block_on(storage_commands::run(args, &config)),
        Some(Command::Users(args)) => runtime.block_on(user_commands::run(args, &config)),
        Some(Command::Worker(args)) => runtime.block_on(worker::run(args, &config)),
        Some(Command::Serve) | None => runtime.block_on(serve(config)),
    };
    // The last spans leave while the runtime that sends them still runs.
    telemetry.finish();
    ran
}

/// Opens the configured store (creating or migrating its schema).
pub async fn open_store(config: &Config) -> anyhow::Result<Arc<dyn Store>> {
    let stores = stores::Stores {
        sqlite: SqliteOptions { synchronous_full: config.sqlite_synchronous_full, ..SqliteOptions::default() },
        postgres: cks_postgres::PostgresOptions { pool_size: config.pg_pool_size, ..Default::default() },
    };
    Ok(match &config.storage {
        Storage::Sqlite(path) => stores
            .open(&StoreLocation::Sqlite(path.clone()))
            .await
            .map_err(anyhow::Error::from_boxed)
            .with_context(|| format!("opening the database at {}", path.display()))?,
        Storage::Postgres(url) => stores
            .open(&StoreLocation::Postgres(url.clone()))
            .await
            .map_err(anyhow::Error::from_boxed)
            .context("CKS_MCP_DB_PATH")?,
        Storage::Memory => Arc::new(MemoryStore::new()),
    })
}

/// Where the data is, in words (never a PostgreSQL URL: it may hold a password).
pub fn describe_storage(config: &Config) -> String {
    match &config.storage {
        Storage::Sqlite(path) => {
            format!("data in {} (data directory {})", path.display(), config.data_dir.display())
        }
        Storage::Postgres(_) => "data in PostgreSQL (CKS_MCP_DB_PATH)".into(),
        Storage::Memory => "in-memory store, nothing is kept".into(),
    }
}

/// The server on the configured store, before its sweepers, processes and transports start: what
/// serving and `cks-mcp worker` share.
pub async fn open_server(config: &Config) -> anyhow::Result<CksServer> {
    // First what the configuration alone decides, so that a mistake there opens no store.
    let mut registry = Registry::standard();
    registry.register_in("chats", Arc::new(AiChat::new(AiChatConfig::from_env(&config.env)?)));
    let profile = config.env.get(TOOLS_VAR).map_or("", String::as_str);
    let profile = ToolProfile::parse(profile, &registry).map_err(|e| anyhow::anyhow!("{TOOLS_VAR}: {e}"))?;
    let registry = Arc::new(registry);
    let store = open_store(config).await?;
    eprintln!("cks-mcp {}: {}", env!("CARGO_PKG_VERSION"), describe_storage(config));
    let secret = config.env.get(secret::SECRET_VAR).map(String::as_str);
    let key = match config.storage {
        Storage::Postgres(_) => secret::load_shared(secret, &config.data_dir, store.as_ref()).await?,
        Storage::Sqlite(_) | Storage::Memory => secret::load(secret, &config.data_dir)?,
    };
    let runtime_config = RuntimeConfig {
        queue: config.queue.clone(),
        cache_capacity: config.cache_sessions,
        cache_objects: config.cache_objects,
        ..RuntimeConfig::default()
    };
    let runtime = Arc::new(Runtime::new(store, runtime_config));
    if let Some(embedder) = embedding::open(&config.env)? {
        runtime.enable_embeddings(embedder);
    }
    let llm = match cks_llm::LlmClient::from_env(|name| config.env.get(name).cloned()) {
        Ok(client) => LlmAccess::Ready(client),
        Err(e) => LlmAccess::Misconfigured(e.to_string()),
    };
    Ok(CksServer::new(runtime, registry, llm)
        .with_profile(profile)
        .with_provenance(key)
        .with_fetch_policy(config.fetch.clone())
        .with_limits(config.limits))
}

/// The variable naming the tools `tools/list` offers.
const TOOLS_VAR: &str = "CKS_MCP_TOOLS";

/// Serves with a resolved configuration.
pub async fn serve(config: Config) -> anyhow::Result<()> {
    let server = open_server(&config).await?;
    let runtime = server.runtime.clone();
    // graph_auto_update reads the versions components publish through the same guarded fetcher
    // the tools use.
    let versions = cks_tools::services::WebVersions::new(Arc::new(cks_web::fetch::Fetcher::new(config.fetch.clone())));
    let sweepers =
        Sweepers::start_reading_versions(server.runtime.clone(), &config.sweepers, Some(Arc::new(versions))).await?;
    let server = server.with_sweepers(sweepers.clone());
    let processes = cks_workers::Processes::start(server.context(), &config.processes);

    let http = match config.http {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("binding {addr}"))?;
            let local = listener.local_addr()?;
            eprintln!(
                "cks-mcp: MCP over HTTP at http://{local}/mcp, events at http://{local}/events, streamed chat \
                 turns at http://{local}/chat/stream"
            );
            let mut http_config = http::HttpConfig::from(&config);
            match &config.auth {
                Some(settings) if settings.builtin => {
                    let upstream =
                        match auth::builtin::UpstreamSettings::from_env(&config.env).map_err(anyhow::Error::msg)? {
                            Some(settings) => {
                                Some(auth::builtin::Upstream::discover(settings).await.map_err(anyhow::Error::msg)?)
                            }
                            None => None,
                        };
                    let oauth = auth::OAuth::builtin(settings.clone());
                    let issuer = auth::builtin::AuthorizationServer::start(
                        server.runtime.clone(),
                        oauth.clone(),
                        auth::builtin::access_token_seconds(&config.env),
                        cks_web::fetch::Fetcher::new(config.fetch.clone()),
                        upstream,
                    )
                    .await
                    .context("starting the built-in authorization server")?;
                    http_config.issuer = Some(issuer);
                    http_config.oauth = Some(oauth);
                    eprintln!("cks-mcp: OAuth: this server issues access tokens as {}", settings.issuer);
                }
                Some(settings) => {
                    http_config.oauth = Some(auth::OAuth::discover(settings.clone()).await?);
                    eprintln!("cks-mcp: OAuth: access tokens from {} for {}", settings.issuer, settings.audience);
                }
                None => {}
            }
            // Keys count where a credential is needed; an open server has no use for them.
            if config.keys_only || http_config.token.is_some() || http_config.oauth.is_some() {
                let ring = auth::api_keys::KeyRing::load(server.runtime.clone(), auth::api_keys::REFRESH).await;
                http_config.keys = Some(ring.context("reading the API keys")?);
            }
            Some(tokio::spawn(http::serve(listener, server.clone(), http_config)))
        }
        None => None,
    };
    let served = if config.stdio {
        eprintln!("cks-mcp: MCP over stdio");
        serve_stdio(server, config.max_message_bytes).await
    } else if let Some(http) = http {
        http.await.context("HTTP server task").and_then(|served| served)
    } else {
        Ok(())
    };
    // Each process finishes its task (or is abandoned at the timeout: the task's lease ends and it is
    // claimed again); each sweeper finishes the sweep it is in.
    processes.shutdown().await;
    sweepers.shutdown().await;
    // The search indexes kept after the last searches land, so the next start reads them.
    if !runtime.finish_saving(SAVING_WAIT).await {
        tracing::warn!("search indexes still being kept at exit; they are built again when next searched");
    }
    served
}

/// How long a stopping server waits for the search indexes it is keeping (at a million objects,
/// a vector index is about 300 MB to write).
const SAVING_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

/// The buffer asked of the kernel for each stdio pipe: its usual limit for an unprivileged
/// process (`/proc/sys/fs/pipe-max-size`).
#[cfg(target_os = "linux")]
const PIPE_BYTES: usize = 1 << 20;

/// Widens stdin's and stdout's pipes from the default 64 KiB, so that a large answer (or
/// request) crosses in a few turns of the two processes instead of one per 64 KiB: a 20,000-object
/// document reached its client about 10 ms sooner (BENCHMARKS.md). Best effort: a stream that is
/// no pipe, or a kernel that refuses, keeps its buffer.
fn widen_stdio_pipes() {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsFd as _;
        let _ = rustix::pipe::fcntl_setpipe_size(std::io::stdin().as_fd(), PIPE_BYTES);
        let _ = rustix::pipe::fcntl_setpipe_size(std::io::stdout().as_fd(), PIPE_BYTES);
    }
}

async fn serve_stdio(server: CksServer, max_message_bytes: usize) -> anyhow::Result<()> {
    use rmcp::ServiceExt;
    widen_stdio_pipes();
    // Pipes (how MCP clients start servers) are driven by the IO reactor instead of tokio's
    // blocking pool, saving a thread hand-off per message; other streams fall back to blocking.
    let (stdin, stdout) = rmcp::transport::stdio_pipes();
    let transport = stdio::StdioTransport::new(stdin, stdout, max_message_bytes);
    // Taken before the first request can commit, so no commit goes unheard by a subscriber.
    let events = server.runtime.subscribe();
    let subscribed = server.client().subscribed.clone();
    let service = server
        .leaving_large_texts_to_the_transport()
        .serve(transport)
        .await
        .context("starting the stdio MCP session")?;
    tokio::spawn(subscriptions::follow_stdio(events, service.peer().clone(), subscribed));
    service.waiting().await.context("stdio MCP session")?;
    Ok(())
}
