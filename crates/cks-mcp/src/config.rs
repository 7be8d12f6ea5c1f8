//! Configuration: command-line flags and the reference's environment variables, resolved once at
//! start-up into a [`Config`].
//!
//! `<data dir>/.env` is read after the real environment and never overrides it. The data directory
//! itself, the database path and the HTTP token are read from the real environment first, so (as
//! with the reference) those three cannot come from the `.env` file of the directory they choose.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand};

/// The help text's list of environment variables; kept beside the parser so they cannot drift.
pub const ENVIRONMENT_HELP: &str = "\
ENVIRONMENT (a `.env` file in the data directory is also read; it never overrides the real environment):
  Storage and server
    CKS_MCP_DATA_DIR            Data directory [~/.cks-mcp]
    CKS_MCP_DB_PATH             SQLite database file [<data dir>/cks_mcp.db]; ':memory:' keeps nothing
    CKS_MCP_HTTP_PORT           Also serve HTTP on 127.0.0.1:<port> (same as --http 127.0.0.1:<port>)
    CKS_MCP_HTTP_TOKEN          Bearer token required on every HTTP request; mandatory for non-loopback binds
    CKS_MCP_ALLOWED_ORIGINS     Extra browser origins allowed over HTTP, comma-separated (loopback origins always are)
    CKS_MCP_MAX_MESSAGE_BYTES   Largest request or stdio message accepted [67108864]
    CKS_MCP_SECRET              Key of VerificationRecord signatures: base64:<data>, hex, or text
                                [random, kept in <data dir>/.cks_provenance_secret]
    CKS_MCP_LOG                 Log filter for stderr (tracing syntax) [warn,cks_tool_call=info]
  LLM providers (used by ai_chat and construct_knowledge)
    CKS_LLM_PROVIDER            auto | ollama | anthropic | google | openai_compatible [auto]
    CKS_OLLAMA_HOST             Ollama base URL [http://localhost:11434]
    CKS_OLLAMA_MODEL            Ollama model [llama3.2]
    ANTHROPIC_API_KEY           Anthropic API key
    ANTHROPIC_BASE_URL          Anthropic API base URL [https://api.anthropic.com]
    CKS_ANTHROPIC_MODEL         Anthropic model
    CKS_GOOGLE_API_KEY          Google Gemini API key (GOOGLE_API_KEY is used when unset)
    GOOGLE_API_KEY              Google Gemini API key (fallback)
    CKS_GOOGLE_BASE_URL         Gemini API base URL [https://generativelanguage.googleapis.com/v1beta]
    CKS_GOOGLE_MODEL            Gemini model [gemini-2.5-flash]
    CKS_OPENAI_API_KEY          OpenAI-compatible API key
    CKS_OPENAI_BASE_URL         OpenAI-compatible base URL [https://api.openai.com/v1]
    CKS_OPENAI_MODEL            OpenAI-compatible model [gpt-4o]
    CKS_LLM_MAX_TOKENS          Output token limit of single-shot calls [4096]
    CKS_LLM_MODELS_TTL_SECONDS  Cache lifetime of list_llm_models [300]
  ai_chat
    CKS_AI_CHAT_MAX_ITERATIONS  LLM round trips per turn [8]
    CKS_AI_CHAT_TIMEOUT_SECONDS Deadline of one turn [300]
    CKS_AI_CHAT_MAX_TOKENS      Optional token budget of one turn
    CKS_AI_CHAT_TOOL_RESULT_MAX_BYTES  Tool results longer than this are truncated for the LLM [16384]";

/// cks-mcp: an MCP server for the Canonical Knowledge Structure, a versioned knowledge graph.
#[derive(Debug, Parser)]
#[command(name = "cks-mcp", version, about, after_help = ENVIRONMENT_HELP)]
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

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve MCP over stdio (the default) and, with --http, over HTTP.
    Serve,
}

/// Where the data lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Storage {
    Sqlite(PathBuf),
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
    pub allowed_origins: Vec<String>,
    pub max_message_bytes: usize,
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
            Some(path) if path.starts_with("postgres://") || path.starts_with("postgresql://") => {
                anyhow::bail!(
                    "CKS_MCP_DB_PATH names a PostgreSQL database, which this build does not support yet; use a SQLite file path"
                )
            }
            Some(path) => Storage::Sqlite(PathBuf::from(path)),
            None => Storage::Sqlite(data_dir.join("cks_mcp.db")),
        };
        let http_token = env.get("CKS_MCP_HTTP_TOKEN").filter(|v| !v.is_empty()).cloned();
        let env = merge_dotenv(env, &data_dir.join(".env"));
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
        if cli.no_stdio && http.is_none() {
            anyhow::bail!("--no-stdio needs --http ADDR or CKS_MCP_HTTP_PORT: there would be nothing to serve");
        }
        if let Some(addr) = http
            && !addr.ip().is_loopback()
            && http_token.is_none()
        {
            anyhow::bail!(
                "refusing to serve HTTP on {addr} without a token: set CKS_MCP_HTTP_TOKEN to bind a non-loopback address"
            );
        }
        let allowed_origins = env
            .get("CKS_MCP_ALLOWED_ORIGINS")
            .map(|v| v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect())
            .unwrap_or_default();
        let max_message_bytes = match env.get("CKS_MCP_MAX_MESSAGE_BYTES") {
            Some(v) => v
                .parse()
                .map_err(|_| anyhow::anyhow!("CKS_MCP_MAX_MESSAGE_BYTES must be a number of bytes, got '{v}'"))?,
            None => 64 * 1024 * 1024,
        };
        Ok(Config {
            data_dir,
            storage,
            http,
            stdio: !cli.no_stdio,
            http_token,
            allowed_origins,
            max_message_bytes,
            env,
        })
    }
}

/// Adds the `KEY=VALUE` lines of a `.env` file for keys the environment does not have.
fn merge_dotenv(mut env: HashMap<String, String>, path: &Path) -> HashMap<String, String> {
    let Ok(text) = std::fs::read_to_string(path) else { return env };
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
        env.entry(key.trim().to_owned()).or_insert_with(|| value.to_owned());
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cli(args: &[&str]) -> Cli {
        Cli::parse_from(std::iter::once("cks-mcp").chain(args.iter().copied()))
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
    fn non_loopback_needs_a_token() {
        let err = Config::resolve(&cli(&["--http", "0.0.0.0:8000"]), env(&[])).unwrap_err().to_string();
        assert!(err.contains("CKS_MCP_HTTP_TOKEN"), "{err}");
        assert!(Config::resolve(&cli(&["--http", "0.0.0.0:8000"]), env(&[("CKS_MCP_HTTP_TOKEN", "t")])).is_ok());
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
}
