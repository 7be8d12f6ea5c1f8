//! Every environment variable the server reads, in one table: its accepted form, default and
//! meaning. `--help` is printed from it, and start-up checks every set variable against it, so a
//! bad value stops the server with a message naming the variable, what is wrong and what is
//! accepted, whichever crate reads the value later. A test checks that every variable named in
//! the sources is in this table and every row is still read somewhere.

use std::fmt::Write as _;
use std::sync::LazyLock;

/// What a variable's value must look like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// Any text (names, keys, paths).
    Text,
    /// A TCP port number.
    Port,
    /// A whole number in `min..=max`, counted in `unit`.
    Whole { min: u64, max: u64, unit: &'static str },
    /// A number of at least 0, decimals allowed, counted in `unit`.
    Decimal { unit: &'static str },
    /// One of these words (case-insensitive).
    OneOf(&'static [&'static str]),
    /// An `http://` or `https://` URL.
    Url,
    /// Comma-separated `http(s)://host[:port]` origins.
    Origins,
    /// A `tracing` filter directive list, such as `warn,cks_tool_call=info`.
    LogFilter,
    /// Comma-separated IP address ranges (`10.0.0.0/8`, `fd00::/8`, or one address).
    Networks,
}

/// One environment variable.
#[derive(Debug, Clone, Copy)]
pub struct Variable {
    pub name: &'static str,
    pub form: Form,
    /// Shown in `--help` as `[default]`.
    pub default: Option<&'static str>,
    pub meaning: &'static str,
}

/// A group of variables under one heading of `--help`.
#[derive(Debug, Clone, Copy)]
pub struct Group {
    pub heading: &'static str,
    pub variables: &'static [Variable],
}

const fn var(name: &'static str, form: Form, default: Option<&'static str>, meaning: &'static str) -> Variable {
    Variable { name, form, default, meaning }
}

const fn whole(min: u64, max: u64, unit: &'static str) -> Form {
    Form::Whole { min, max, unit }
}

use Form::{LogFilter, Networks, Origins, Port, Text, Url};

/// The synchronous modes offered for the SQLite store.
pub const SYNCHRONOUS_MODES: &[&str] = &["normal", "full"];
/// The log formats (`CKS_MCP_LOG_FORMAT`).
pub const LOG_FORMATS: &[&str] = &["json", "text"];
/// The values of an on/off switch.
pub const SWITCH: &[&str] = &["on", "off"];
/// The words the reference reads as yes or no.
pub const BOOLEAN: &[&str] = &["true", "false", "1", "0", "yes", "no", "on", "off"];
/// The values of `CKS_LLM_PROVIDER`: `auto` and each provider's name.
pub fn providers() -> &'static [&'static str] {
    static NAMES: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
        std::iter::once("auto").chain(cks_llm::ProviderKind::ALL.iter().map(|kind| kind.as_str())).collect()
    });
    &NAMES
}

/// The values of `CKS_EMBEDDING_PROVIDER`: `local`, `none` and each provider with an embeddings endpoint.
pub fn embedding_providers() -> &'static [&'static str] {
    static NAMES: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
        ["local", "none"].into_iter().chain(cks_llm::embedding_providers().map(|kind| kind.as_str())).collect()
    });
    &NAMES
}

/// Search by meaning's group (its providers come from the LLM client's table).
fn search_by_meaning() -> Group {
    let variables = vec![
        var(
            "CKS_EMBEDDING_PROVIDER",
            Form::OneOf(embedding_providers()),
            Some("local when installed"),
            "local: the local embedding model (scripts/install-embedding-model installs it); none: search ranks by \
             words alone; a provider's name: its embeddings endpoint, at the base URL and with the key its chat \
             calls use",
        ),
        var(
            "CKS_EMBEDDING_MODEL",
            Text,
            Some("<cache>/cks-mcp/models/minilm-l6"),
            "local: the model's directory (<cache> is XDG_CACHE_HOME, or ~/.cache); a provider: its embedding \
             model (needed for openai_compatible and google; ollama's default is nomic-embed-text)",
        ),
    ];
    Group { heading: "Search by meaning", variables: variables.leak() }
}

/// Every variable read, grouped as `--help` shows them: [`FIXED`], with the LLM providers' group
/// (built from the LLM client's table of providers) before the LLM calls' group, and search by
/// meaning's before the task queue's.
pub fn groups() -> &'static [Group] {
    static GROUPS: LazyLock<Vec<Group>> = LazyLock::new(|| {
        let mut variables =
            vec![var("CKS_LLM_PROVIDER", Form::OneOf(providers()), Some("auto"), "Which provider answers LLM calls")];
        variables.extend(cks_llm::config::provider_variables().map(|(setting, v)| {
            let form = if setting == cks_llm::config::Setting::BaseUrl { Url } else { Text };
            var(v.name, form, v.default, v.meaning)
        }));
        let providers =
            Group { heading: "LLM providers (used by ai_chat and construct_knowledge)", variables: variables.leak() };
        let mut groups = FIXED.to_vec();
        let calls = groups.iter().position(|g| g.heading.starts_with("LLM calls")).unwrap_or(groups.len());
        groups.insert(calls, providers);
        let queue = groups.iter().position(|g| g.heading.starts_with("Task queue")).unwrap_or(groups.len());
        groups.insert(queue, search_by_meaning());
        groups
    });
    &GROUPS
}

/// The variables the server itself names, grouped as `--help` shows them.
const FIXED: &[Group] = &[
    Group {
        heading: "Storage and server",
        variables: &[
            var("CKS_MCP_DATA_DIR", Text, Some("~/.cks-mcp"), "Data directory"),
            var(
                "CKS_SESSION_CACHE_SESSIONS",
                whole(1, 1_000_000, "sessions"),
                Some("64"),
                "Sessions kept loaded in memory (the least recently used are unloaded first)",
            ),
            var(
                "CKS_SESSION_CACHE_OBJECTS",
                whole(1, u64::MAX, "objects"),
                Some("2000000"),
                "Objects the loaded sessions may hold together; memory follows this, whatever the number of \
                 sessions (the session in use always stays loaded)",
            ),
            var(
                "CKS_MCP_DB_PATH",
                Text,
                Some("<data dir>/cks_mcp.db"),
                "SQLite database file, or a PostgreSQL URL (postgres://USER:PASSWORD@HOST:PORT/DATABASE) \
                 that several replicas share; ':memory:' keeps nothing",
            ),
            var(
                "CKS_MCP_PG_POOL_SIZE",
                whole(1, 1_000, "connections"),
                Some("16"),
                "PostgreSQL: the most connections one process opens (one more listens for other replicas' events)",
            ),
            var(
                "CKS_MCP_SQLITE_SYNCHRONOUS",
                Form::OneOf(SYNCHRONOUS_MODES),
                Some("normal"),
                "normal: commits survive a killed process; full: they also survive power loss (slower)",
            ),
            var(
                "CKS_MCP_HTTP_PORT",
                Port,
                None,
                "Also serve HTTP on 127.0.0.1:<port> (same as --http 127.0.0.1:<port>)",
            ),
            var(
                "CKS_MCP_HTTP_TOKEN",
                Text,
                None,
                "Bearer token required on every HTTP request; mandatory for non-loopback binds",
            ),
            var(
                "CKS_MCP_AUTH",
                Form::OneOf(&["keys", "builtin"]),
                None,
                "keys: every HTTP request needs an API key (create_api_key, cks-mcp keys create), or \
                 CKS_MCP_HTTP_TOKEN when set. builtin: this server is also the OAuth authorization server \
                 (needs CKS_MCP_PUBLIC_URL; people sign in as users of `cks-mcp users`, or through \
                 CKS_MCP_AUTH_UPSTREAM_ISSUER). API keys are accepted with every way",
            ),
            var(
                "CKS_MCP_AUTH_ISSUER",
                Url,
                None,
                "OAuth over HTTP: the authorization server's issuer URL; every HTTP request then needs an access \
                 token (a JWT) it issued for this server (docs/authorization.md). Not with CKS_MCP_HTTP_TOKEN",
            ),
            var(
                "CKS_MCP_PUBLIC_URL",
                Url,
                None,
                "The base URL clients reach this server at (https://kg.example.com); needed with CKS_MCP_AUTH_ISSUER \
                 and CKS_MCP_AUTH=builtin",
            ),
            var(
                "CKS_MCP_AUTH_AUDIENCE",
                Url,
                Some("<CKS_MCP_PUBLIC_URL>/mcp"),
                "What an access token's aud must contain: this server's resource identifier",
            ),
            var(
                "CKS_MCP_AUTH_SCOPE_CLAIM",
                Text,
                Some("scope"),
                "The access token claim holding its scopes (cks:read, cks:write, cks:admin): a space-separated \
                 string or an array (scp is read when it is absent)",
            ),
            var(
                "CKS_MCP_AUTH_GROUPS_CLAIM",
                Text,
                Some("groups"),
                "The access token claim holding the caller's groups (an array of strings)",
            ),
            var(
                "CKS_MCP_AUTH_PAGE_CLIENT_ID",
                Text,
                None,
                "OAuth: the public client the chat page signs in as (authorization code with PKCE, redirect URI \
                 <CKS_MCP_PUBLIC_URL>/); without it the page cannot sign in",
            ),
            var(
                "CKS_MCP_AUTH_ACCESS_TOKEN_SECONDS",
                whole(1, 86_400, "seconds"),
                Some("600"),
                "CKS_MCP_AUTH=builtin: how long an access token it issues lives (refresh tokens rotate)",
            ),
            var(
                "CKS_MCP_AUTH_UPSTREAM_ISSUER",
                Url,
                None,
                "CKS_MCP_AUTH=builtin: people sign in through this OpenID Connect issuer (the organisation's \
                 Google, Microsoft or Keycloak); needs CKS_MCP_AUTH_UPSTREAM_CLIENT_ID",
            ),
            var(
                "CKS_MCP_AUTH_UPSTREAM_CLIENT_ID",
                Text,
                None,
                "The client id this server has at CKS_MCP_AUTH_UPSTREAM_ISSUER (redirect URI \
                 <CKS_MCP_PUBLIC_URL>/oauth/upstream)",
            ),
            var(
                "CKS_MCP_AUTH_UPSTREAM_CLIENT_SECRET",
                Text,
                None,
                "Its client secret, when the upstream issuer gave one",
            ),
            var(
                "CKS_MCP_ALLOWED_ORIGINS",
                Origins,
                None,
                "Extra browser origins allowed over HTTP, comma-separated (loopback origins always are)",
            ),
            var(
                "CKS_MCP_MAX_MESSAGE_BYTES",
                whole(1024, u64::MAX, "bytes"),
                Some("67108864"),
                "Largest request or stdio message accepted (either framing)",
            ),
            var(
                "CKS_MCP_SECRET",
                Text,
                None,
                "Key of VerificationRecord signatures: base64:<data>, hex, or text [random, kept in \
                 <data dir>/.cks_provenance_secret; on PostgreSQL, kept in the database for every replica]",
            ),
            var(
                "CKS_FETCH_ALLOWED_NETWORKS",
                Networks,
                None,
                "Address ranges verify_source and refresh_verification may fetch from although they are not public \
                 (an intranet's documents); every other private, loopback or link-local address is refused",
            ),
            var("CKS_MCP_LOG", LogFilter, Some("warn,cks_tool_call=info"), "Log filter for stderr (tracing syntax)"),
            var(
                "CKS_MCP_LOG_FORMAT",
                Form::OneOf(LOG_FORMATS),
                Some("json"),
                "json: one JSON object per log line (with the request's ids, and its trace's when traced); text: \
                 lines for a person to read",
            ),
            var(
                "CKS_MCP_TOOLS",
                Text,
                Some("core"),
                "The tools a client's list offers: core (the everyday ones), all (every tool, as the reference \
                 lists them), or tool names and groups, comma-separated. Every tool stays callable by name; \
                 find_tools finds the rest",
            ),
        ],
    },
    Group {
        heading: "Limits per caller (each OAuth principal; the local caller only when set; 0: no limit)",
        variables: &[
            var(
                "CKS_MCP_LIMIT_CONCURRENT_CALLS",
                whole(0, 1_000_000, "calls"),
                Some("8"),
                "Tool calls one caller may have in flight; one more gets HTTP 429 (over stdio: the business \
                 error rate_limited)",
            ),
            var(
                "CKS_MCP_LIMIT_CHAT_TURNS",
                whole(0, 1_000_000, "turns"),
                Some("2"),
                "ai_chat turns one caller may have in flight (each also counts as a tool call)",
            ),
            var(
                "CKS_MCP_LIMIT_REQUESTS_PER_MINUTE",
                whole(0, 1_000_000_000, "requests"),
                Some("600"),
                "HTTP requests (over stdio: tool calls) one caller may make a minute, a sixth of them at once",
            ),
        ],
    },
    Group {
        heading: "Traces (OpenTelemetry over OTLP/HTTP; off unless an endpoint is set)",
        variables: &[
            var(
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                Url,
                None,
                "The OTLP/HTTP receiver (an OpenTelemetry Collector) traces go to, at <endpoint>/v1/traces",
            ),
            var(
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                Url,
                None,
                "The receiver's traces URL itself, used as it is (wins over OTEL_EXPORTER_OTLP_ENDPOINT)",
            ),
            var(
                "OTEL_EXPORTER_OTLP_HEADERS",
                Text,
                None,
                "Headers sent with each export, as key=value pairs separated by commas (a receiver's API key)",
            ),
            var("OTEL_SERVICE_NAME", Text, Some("cks-mcp"), "The service name the spans carry"),
        ],
    },
    Group {
        heading: "Task queue and sweepers (conflicts and other background work)",
        variables: &[
            var(
                "CKS_SWEEPERS",
                Form::OneOf(SWITCH),
                Some("on"),
                "on: the sweepers (see the list_agents tool) run from start-up, first after one interval; off: \
                 only once start_agent starts them",
            ),
            var(
                "CKS_SWEEP_INTERVAL_SECONDS",
                whole(1, 604_800, "seconds"),
                Some("3600"),
                "Time between two sweeps of a sweeper (each looks only at the sessions changed since the last)",
            ),
            var(
                "CKS_PROVENANCE_TTL_SECONDS",
                whole(1, 3_153_600_000, "seconds"),
                Some("2592000"),
                "How long a source check stays fresh: a subject whose newest VerificationRecord is older is queued \
                 as provenance_conflict (30 days)",
            ),
            var(
                "CKS_TASK_LEASE_SECONDS",
                whole(1, 86_400, "seconds"),
                Some("300"),
                "How long a claimed task is held without news before another worker may claim it",
            ),
            var(
                "CKS_TASK_MAX_RETRIES",
                whole(0, 1_000, "retries"),
                Some("5"),
                "Failed attempts retried (after 2^n seconds, at most an hour) before a task is dead-lettered",
            ),
        ],
    },
    Group {
        heading: "Autonomous processes (workers that settle queued tasks; see the list_processes tool)",
        variables: &[
            var(
                "CKS_EMBEDDED_AGENTS",
                Form::OneOf(BOOLEAN),
                Some("false"),
                "Run every autonomous process in this server (here: the Critic, the pipeline and Enrichment)",
            ),
            var(
                "CKS_EMBED_CRITIC_AGENT",
                Form::OneOf(BOOLEAN),
                None,
                "Run the Critic, which settles conflict tasks through the resolving tools (default: CKS_EMBEDDED_AGENTS)",
            ),
            var(
                "CKS_CRITIC_TASK_TYPES",
                Text,
                Some("gossip_conflict,inference_conflict,provenance_conflict,temporal_conflict,contradiction_detected"),
                "Task types the Critic claims, comma-separated",
            ),
            var(
                "CKS_CRITIC_POLL_INTERVAL",
                whole(1, 3_600, "seconds"),
                Some("5"),
                "How long the idle Critic waits before looking for tasks again",
            ),
            var(
                "CKS_CRITIC_LIVENESS_INTERVAL",
                whole(1, 3_600, "seconds"),
                Some("30"),
                "How often the Critic refreshes its liveness record (it counts as stopped after three missed)",
            ),
            var(
                "CKS_CRITIC_TOKEN_BUDGET_PER_HOUR",
                whole(0, u64::MAX, "tokens"),
                Some("100000"),
                "LLM tokens the Critic may spend in any hour; over it, it pauses (0: no limit)",
            ),
            var(
                "CKS_EMBED_PIPELINE_AGENT",
                Form::OneOf(BOOLEAN),
                None,
                "Run the pipeline, which works through the runs start_pipeline queues (default: CKS_EMBEDDED_AGENTS)",
            ),
            var(
                "CKS_PIPELINE_POLL_INTERVAL",
                whole(1, 3_600, "seconds"),
                Some("5"),
                "How long the idle pipeline waits before looking for tasks again",
            ),
            var(
                "CKS_PIPELINE_LIVENESS_INTERVAL",
                whole(1, 3_600, "seconds"),
                Some("30"),
                "How often the pipeline refreshes its liveness record (it counts as stopped after three missed)",
            ),
            var(
                "CKS_PIPELINE_TOKEN_BUDGET_PER_HOUR",
                whole(0, u64::MAX, "tokens"),
                Some("100000"),
                "LLM tokens the pipeline may spend in any hour; over it, it pauses (0: no limit)",
            ),
            var(
                "CKS_PIPELINE_MAX_TOKENS",
                whole(1, u64::MAX, "tokens"),
                Some("100000"),
                "LLM tokens one pipeline run may spend; its remaining steps fail once it has",
            ),
            var(
                "CKS_PIPELINE_MAX_COST_USD",
                Form::Decimal { unit: "US dollars" },
                Some("0.50"),
                "The same cap for one run in dollars, at $0.000003 a token",
            ),
            var(
                "CKS_PIPELINE_RESEARCHER_MAX_TOKENS",
                whole(1, 1_000_000, "tokens"),
                Some("512"),
                "Output tokens of one Researcher call (a finding about one object)",
            ),
            var(
                "CKS_PIPELINE_REVIEWER_MAX_TOKENS",
                whole(1, 1_000_000, "tokens"),
                Some("256"),
                "Output tokens of one Reviewer call (a verdict on one finding)",
            ),
            var(
                "CKS_PIPELINE_SYNTHESIZER_MAX_TOKENS",
                whole(1, 1_000_000, "tokens"),
                Some("1024"),
                "Output tokens of one Synthesizer call (a run's approved findings as new objects)",
            ),
            var(
                "CKS_PIPELINE_SYNTHESIZER_QUERY_DEPTH",
                whole(0, 5, "relation hops"),
                Some("1"),
                "How far around the synthesized objects the Synthesizer sees the graph",
            ),
            var(
                "CKS_PIPELINE_ARBITER_MAX_TOKENS",
                whole(1, 1_000_000, "tokens"),
                Some("512"),
                "Output tokens of one Arbiter call (a run's contradictions settled)",
            ),
            var(
                "CKS_PIPELINE_ARBITER_QUERY_DEPTH",
                whole(0, 5, "relation hops"),
                Some("1"),
                "How far around the contended relations the Arbiter sees the graph",
            ),
            var(
                "CKS_EMBED_ENRICHMENT_AGENT",
                Form::OneOf(BOOLEAN),
                None,
                "Run Enrichment, which searches external sources for the objects request_enrichment names \
                 (default: CKS_EMBEDDED_AGENTS)",
            ),
            var(
                "CKS_ENRICHMENT_POLL_INTERVAL",
                whole(1, 3_600, "seconds"),
                Some("5"),
                "How long idle Enrichment waits before looking for tasks again",
            ),
            var(
                "CKS_ENRICHMENT_LIVENESS_INTERVAL",
                whole(1, 3_600, "seconds"),
                Some("30"),
                "How often Enrichment refreshes its liveness record (it counts as stopped after three missed)",
            ),
            var(
                "CKS_ENRICHMENT_ADAPTERS",
                Text,
                Some("wikipedia,arxiv"),
                "The sources Enrichment searches, comma-separated, among wikipedia and arxiv",
            ),
            var(
                "CKS_ENRICHMENT_WIKIPEDIA_URL",
                Url,
                Some("https://en.wikipedia.org/w/api.php"),
                "The MediaWiki API the wikipedia source asks (action=opensearch)",
            ),
            var(
                "CKS_ENRICHMENT_ARXIV_URL",
                Url,
                Some("https://export.arxiv.org/api/query"),
                "The arXiv query API the arxiv source asks (Atom)",
            ),
            var(
                "CKS_ENRICHMENT_LIMIT_PER_ADAPTER",
                whole(1, 50, "candidates"),
                Some("3"),
                "Candidate pages asked of each source per request",
            ),
            var(
                "CKS_ENRICHMENT_MIN_SCORE",
                Form::Decimal { unit: "points between 0 and 1" },
                Some("0.5"),
                "The score (publisher authority and relevance to the query) a page needs to be fetched",
            ),
            var(
                "CKS_ENRICHMENT_MAX_INGESTS",
                whole(1, 20, "pages"),
                Some("2"),
                "Pages fetched and committed per request at most, the best first",
            ),
            var(
                "CKS_ENRICHMENT_ALLOW_DOMAINS",
                Text,
                None,
                "Only these domains (and their subdomains) are fetched, comma-separated",
            ),
            var(
                "CKS_ENRICHMENT_BLOCK_DOMAINS",
                Text,
                None,
                "These domains (and their subdomains) are never fetched, comma-separated",
            ),
            var(
                "CKS_ENRICHMENT_ALLOW_URL_PREFIXES",
                Text,
                None,
                "Only URLs starting with one of these are fetched, comma-separated",
            ),
            var(
                "CKS_ENRICHMENT_BLOCK_URL_PREFIXES",
                Text,
                None,
                "URLs starting with one of these are never fetched, comma-separated",
            ),
            var(
                "CKS_EMBEDDED_AGENTS_SHUTDOWN_TIMEOUT",
                whole(0, 600, "seconds"),
                Some("10"),
                "How long shutdown waits for a process to finish its task",
            ),
        ],
    },
    Group {
        heading: "LLM calls (used by ai_chat and construct_knowledge)",
        variables: &[
            var(
                "CKS_LLM_MAX_TOKENS",
                whole(1, u32::MAX as u64, "tokens"),
                Some("4096"),
                "Output token limit of single-shot calls",
            ),
            var(
                "CKS_LLM_TIMEOUT_SECONDS",
                whole(1, 86_400, "seconds"),
                Some("120"),
                "Time limit of one LLM request attempt, answer included",
            ),
            var(
                "CKS_LLM_MAX_RETRIES",
                whole(0, 10, "retries"),
                Some("3"),
                "Retries of a failed LLM request after the first attempt",
            ),
            var(
                "CKS_ARBITER_MODEL",
                Text,
                None,
                "Model arbitrate_inference_conflict asks for (default: the provider's model)",
            ),
            var(
                "CKS_ARBITER_MAX_TOKENS",
                whole(1, u32::MAX as u64, "tokens"),
                Some("1024"),
                "Output token limit of arbitrate_inference_conflict's decision",
            ),
            var(
                "CKS_LLM_MODELS_TTL_SECONDS",
                whole(0, u64::MAX, "seconds"),
                Some("300"),
                "Cache lifetime of list_llm_models (0 disables the cache)",
            ),
        ],
    },
    Group {
        heading: "ai_chat",
        variables: &[
            var("CKS_AI_CHAT_MAX_ITERATIONS", whole(1, u64::MAX, "round trips"), Some("8"), "LLM round trips per turn"),
            var("CKS_AI_CHAT_TIMEOUT_SECONDS", whole(1, u64::MAX, "seconds"), Some("300"), "Deadline of one turn"),
            var("CKS_AI_CHAT_MAX_TOKENS", whole(1, u64::MAX, "tokens"), None, "Optional token budget of one turn"),
            var(
                "CKS_AI_CHAT_TOOL_RESULT_MAX_BYTES",
                whole(1, u64::MAX, "bytes"),
                Some("16384"),
                "Tool results longer than this are truncated for the LLM",
            ),
            var(
                "CKS_AI_CHAT_MAX_OUTPUT_TOKENS",
                whole(1, u64::MAX, "tokens"),
                Some("2048"),
                "Output tokens per LLM call of a turn",
            ),
            var(
                "CKS_AI_CHAT_MAX_TOOL_CALLS",
                whole(1, u64::MAX, "tool calls"),
                Some("16"),
                "Tool calls run per LLM answer; the rest are refused",
            ),
            var(
                "CKS_AI_CHAT_RESULT_MAX_BYTES",
                whole(1, u64::MAX, "bytes"),
                Some("1048576"),
                "Bytes of one turn's recorded tool calls; then results are cut",
            ),
        ],
    },
];

/// Variables the Python reference reads that this server does not, each with what to use instead
/// where there is an equivalent. A name ending in `_` stands for every name it begins.
pub const NOT_READ: &[(&str, Option<&str>)] = &[
    ("CKS_GOSSIP_", Some("replicas sharing one PostgreSQL database (CKS_MCP_DB_PATH)")),
    ("CKS_RUNTIME_DATA_DIR", Some("CKS_MCP_DATA_DIR")),
    ("CKS_EMBEDDING_CACHE_DIR", Some("CKS_EMBEDDING_MODEL")),
    ("CKS_EMBEDDING_DIMENSION", None),
    ("CKS_EMBED_FORK_RESOLUTION_AGENT", None),
    ("CKS_FORK_AGENT_", None),
    ("CKS_CRITIC_HEARTBEAT_INTERVAL", Some("CKS_TASK_LEASE_SECONDS")),
    ("CKS_ENRICHMENT_HEARTBEAT_INTERVAL", Some("CKS_TASK_LEASE_SECONDS")),
    ("CKS_CRITIC_MAX_RETRIES", Some("CKS_TASK_MAX_RETRIES")),
    ("CKS_ENRICHMENT_MAX_RETRIES", Some("CKS_TASK_MAX_RETRIES")),
    ("CKS_CRITIC_LLM_BREAKER_THRESHOLD", None),
    ("CKS_CRITIC_LLM_BREAKER_COOLDOWN", None),
    ("CKS_STORAGE_BACKEND", Some("CKS_MCP_DB_PATH")),
    ("CKS_DB_PATH", Some("CKS_MCP_DB_PATH")),
    ("CKS_POSTGRES_DSN", Some("CKS_MCP_DB_PATH")),
    ("CKS_HTTP_TOKEN", Some("CKS_MCP_HTTP_TOKEN")),
];

/// The one start-up warning about `CKS_*` variables that are set but not read: the reference's
/// that this server does without (with what to use instead, where there is an equivalent) and
/// unknown ones (a typo is otherwise silently ignored). `None` when there are none.
pub fn not_read_warning<'a>(names: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let mut names: Vec<&str> =
        names.into_iter().filter(|n| n.starts_with("CKS_") && !all().any(|v| v.name == *n)).collect();
    names.sort_unstable();
    names.dedup();
    let described: Vec<String> = names
        .iter()
        .map(|name| {
            let known = NOT_READ.iter().find(|(not_read, _)| match not_read.strip_suffix('_') {
                Some(_) => name.starts_with(not_read),
                None => name == not_read,
            });
            match known {
                Some((_, Some(instead))) => format!("{name} (the reference's; here: {instead})"),
                Some((_, None)) => format!("{name} (the reference's; not offered here)"),
                None => format!("{name} (unknown)"),
            }
        })
        .collect();
    (!described.is_empty()).then(|| format!("these variables are not read: {}", described.join(", ")))
}

/// Every variable, in `--help` order.
pub fn all() -> impl Iterator<Item = &'static Variable> {
    groups().iter().flat_map(|g| g.variables.iter())
}

/// The `--help` section listing every variable.
pub fn help() -> String {
    let width = all().map(|v| v.name.len()).max().unwrap_or(0) + 2;
    let mut text = String::from(
        "ENVIRONMENT (a `.env` file in the data directory is also read; it never overrides the real environment.\n\
         An empty value counts as unset; any other value that is not accepted stops start-up):\n",
    );
    for group in groups() {
        let _ = writeln!(text, "  {}", group.heading);
        for v in group.variables {
            let _ = write!(text, "    {:width$}{}", v.name, v.meaning);
            if let Some(default) = v.default {
                let _ = write!(text, " [{default}]");
            }
            if let Some(form) = short_form(v.form) {
                let _ = write!(text, " ({form})");
            }
            text.push('\n');
        }
    }
    text.truncate(text.trim_end().len());
    text
}

/// The accepted form in a few words, for `--help` (plain text needs none).
fn short_form(form: Form) -> Option<String> {
    match form {
        Form::Text | Form::Url | Form::Origins | Form::LogFilter | Form::Networks => None,
        other => Some(accepted(other)),
    }
}

/// What a form accepts, for messages.
pub fn accepted(form: Form) -> String {
    match form {
        Form::Text => "any text".into(),
        Form::Port => "a port number, 0 to 65535".into(),
        Form::Whole { min, max: u64::MAX, unit } => format!("a whole number of {unit}, at least {min}"),
        Form::Whole { min, max, unit } => format!("a whole number of {unit}, {min} to {max}"),
        Form::Decimal { unit } => format!("a number of {unit}, at least 0"),
        Form::OneOf(words) => format!("one of {}", words.join(", ")),
        Form::Url => "an http:// or https:// URL".into(),
        Form::Origins => "comma-separated origins such as https://studio.example.com or http://localhost:5173".into(),
        Form::LogFilter => "a tracing filter such as warn,cks_tool_call=info".into(),
        Form::Networks => "comma-separated IP address ranges such as 10.0.0.0/8, fd00::/8 or 192.168.1.20".into(),
    }
}

/// Checks one value (already known to be non-empty); the error says what is wrong with it.
pub fn check(form: Form, value: &str) -> Result<(), String> {
    let value = value.trim();
    match form {
        Form::Text => Ok(()),
        Form::Port => value.parse::<u16>().map(drop).map_err(|_| "not a port number".into()),
        Form::Whole { min, max, .. } => match value.parse::<u64>() {
            Ok(n) if n < min => Err(format!("{n} is below {min}")),
            Ok(n) if n > max => Err(format!("{n} is above {max}")),
            Ok(_) => Ok(()),
            Err(_) => Err("not a whole number".into()),
        },
        Form::Decimal { .. } => match value.parse::<f64>() {
            Ok(n) if !n.is_finite() => Err(format!("{value} is not a finite number")),
            Ok(n) if n < 0.0 => Err(format!("{n} is below 0")),
            Ok(_) => Ok(()),
            Err(_) => Err("not a number".into()),
        },
        Form::OneOf(words) => {
            words.iter().any(|w| w.eq_ignore_ascii_case(value)).then_some(()).ok_or_else(|| "not a known choice".into())
        }
        Form::Url => check_url(value),
        Form::Origins => value
            .split(',')
            .map(str::trim)
            .filter(|o| !o.is_empty())
            .try_for_each(|origin| check_url(origin).map_err(|problem| format!("'{origin}': {problem}"))),
        Form::LogFilter => {
            tracing_subscriber::EnvFilter::try_new(value).map(drop).map_err(|e| format!("not a valid filter ({e})"))
        }
        Form::Networks => networks(value).map(drop),
    }
}

/// The address ranges of a [`Form::Networks`] value.
pub fn networks(value: &str) -> Result<Vec<cks_web::fetch::AddressRange>, String> {
    value.split(',').map(str::trim).filter(|r| !r.is_empty()).map(str::parse).collect()
}

fn check_url(value: &str) -> Result<(), String> {
    let rest = value
        .strip_prefix("http://")
        .or_else(|| value.strip_prefix("https://"))
        .ok_or_else(|| "does not start with http:// or https://".to_owned())?;
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if host.is_empty() || host.contains(char::is_whitespace) {
        return Err("has no host name".into());
    }
    Ok(())
}

/// Checks every variable that is set and non-empty; the first bad one is the error.
pub fn check_all(lookup: impl Fn(&str) -> Option<String>) -> Result<(), String> {
    for v in all() {
        let Some(value) = lookup(v.name).filter(|value| !value.trim().is_empty()) else { continue };
        if let Err(problem) = check(v.form, &value) {
            return Err(format!("{}='{}' is not accepted: {problem}; expected {}", v.name, value, accepted(v.form)));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn the_provider_names_are_the_llm_clients() {
        let names: Vec<&str> = cks_llm::ProviderKind::ALL.iter().map(|kind| kind.as_str()).collect();
        assert_eq!(providers()[0], "auto");
        assert_eq!(&providers()[1..], names.as_slice());
        let help = help();
        for name in ["CKS_OLLAMA_HOST", "ANTHROPIC_API_KEY", "GOOGLE_API_KEY", "CKS_OPENAI_MODEL"] {
            assert!(all().any(|v| v.name == name), "{name}");
            assert!(help.contains(name), "{name}");
        }
        assert!(help.find("CKS_LLM_PROVIDER") < help.find("CKS_LLM_MAX_TOKENS"));
    }

    #[test]
    fn the_embedding_providers_are_those_with_an_endpoint() {
        assert_eq!(embedding_providers(), ["local", "none", "ollama", "google", "openai_compatible"]);
        assert!(bad("CKS_EMBEDDING_PROVIDER", "anthropic").contains("one of local, none, ollama"));
        assert!(ok("CKS_EMBEDDING_PROVIDER", "Google"));
        let headings: Vec<&str> = groups().iter().map(|g| g.heading).collect();
        let at = |prefix: &str| headings.iter().position(|h| h.starts_with(prefix)).unwrap();
        assert_eq!(at("Search by meaning") + 1, at("Task queue"), "{headings:?}");
    }

    fn bad(name: &str, value: &str) -> String {
        let env: HashMap<&str, &str> = HashMap::from([(name, value)]);
        check_all(|n| env.get(n).map(|v| v.to_string())).unwrap_err()
    }

    fn ok(name: &str, value: &str) -> bool {
        let env: HashMap<&str, &str> = HashMap::from([(name, value)]);
        check_all(|n| env.get(n).map(|v| v.to_string())).is_ok()
    }

    #[test]
    fn a_bad_value_names_the_variable_the_problem_and_the_form() {
        let message = bad("CKS_LLM_TIMEOUT_SECONDS", "soon");
        assert!(message.contains("CKS_LLM_TIMEOUT_SECONDS='soon'"), "{message}");
        assert!(message.contains("not a whole number"), "{message}");
        assert!(message.contains("whole number of seconds, 1 to 86400"), "{message}");
        let message = bad("CKS_LLM_PROVIDER", "openai");
        assert!(message.contains("one of auto, ollama, anthropic, google, openai_compatible"), "{message}");
        assert!(bad("CKS_LLM_MAX_RETRIES", "11").contains("11 is above 10"));
        assert!(bad("CKS_AI_CHAT_MAX_ITERATIONS", "0").contains("0 is below 1"));
        assert!(bad("CKS_MCP_HTTP_PORT", "70000").contains("not a port number"));
        assert!(bad("CKS_OLLAMA_HOST", "localhost:11434").contains("http://"));
        assert!(bad("CKS_MCP_ALLOWED_ORIGINS", "https://a.example, b.example").contains("'b.example'"));
        assert!(bad("CKS_MCP_LOG", "warn,=[").contains("CKS_MCP_LOG"));
        assert!(bad("CKS_MCP_SQLITE_SYNCHRONOUS", "extra").contains("one of normal, full"));
        assert!(bad("CKS_MCP_LOG_FORMAT", "xml").contains("one of json, text"));
        assert!(bad("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318").contains("http://"));
    }

    #[test]
    fn variables_not_read_are_named_with_what_to_use_instead() {
        let warning = not_read_warning(["CKS_GOSSIP_PEERS", "CKS_LLM_MODEL", "CKS_LLM_MODLE", "CKS_DB_PATH", "HOME"]);
        assert_eq!(
            warning.as_deref(),
            Some(
                "these variables are not read: CKS_DB_PATH (the reference's; here: CKS_MCP_DB_PATH), \
                 CKS_GOSSIP_PEERS (the reference's; here: replicas sharing one PostgreSQL database (CKS_MCP_DB_PATH)), \
                 CKS_LLM_MODLE (unknown)"
            )
        );
        assert!(not_read_warning(["CKS_FORK_AGENT_USE_LCA"]).unwrap().contains("not offered here"));
        assert_eq!(not_read_warning(["CKS_MCP_DB_PATH", "CKS_OLLAMA_MODEL", "PATH"]), None);
        for (name, instead) in NOT_READ {
            assert!(!all().any(|v| v.name == *name), "{name} is read");
            if let Some(instead) = instead.and_then(|i| i.split(['(', ')']).find(|w| w.starts_with("CKS_"))) {
                assert!(all().any(|v| v.name == instead), "{instead} is not a variable");
            }
        }
    }

    #[test]
    fn good_and_empty_values_pass() {
        assert!(ok("CKS_LLM_TIMEOUT_SECONDS", "30"));
        assert!(ok("CKS_LLM_PROVIDER", "OpenAI_Compatible"));
        assert!(ok("CKS_LLM_MODELS_TTL_SECONDS", "0"));
        assert!(ok("CKS_OLLAMA_HOST", "http://127.0.0.1:11434/"));
        assert!(ok("CKS_MCP_ALLOWED_ORIGINS", "https://a.example, http://localhost:5173"));
        assert!(ok("CKS_MCP_LOG", "info,cks_tool_call=debug"));
        assert!(ok("CKS_MCP_MAX_MESSAGE_BYTES", "  "));
        assert!(ok("CKS_MCP_SQLITE_SYNCHRONOUS", "FULL"));
    }

    #[test]
    fn help_shows_every_variable_once() {
        let help = help();
        for v in all() {
            let lines = help.lines().filter(|l| l.split_whitespace().next() == Some(v.name)).count();
            assert_eq!(lines, 1, "{} in --help", v.name);
        }
    }
}
