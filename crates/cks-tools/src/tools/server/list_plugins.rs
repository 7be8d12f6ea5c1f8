//! `list_plugins`: the reference lists its optional plugins (an embedding provider, gossip) and
//! whether each could run. This server has no plugins to install; it lists its optional parts in
//! the same shape, each `available` as the running server finds it: search by meaning, the
//! PostgreSQL store, the LLM provider, the sweepers, the autonomous processes, and gossip (never).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use cks_llm::ProviderKind;

use crate::context::{LlmAccess, ToolContext};
use crate::error::ToolError;
use crate::tool::{Tool, ToolMeta};

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Input {}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    plugins: Vec<Plugin>,
    available_count: usize,
    total_count: usize,
}

/// One optional part of the server.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Plugin {
    name: &'static str,
    /// What it does, and its state now.
    description: String,
    /// Whether it works in this server now.
    available: bool,
}

/// The autonomous processes, by kind.
const PROCESS_KINDS: [(&str, &str); 3] = [
    ("critic", "settles queued conflict tasks"),
    ("pipeline", "runs research pipelines (start_pipeline)"),
    ("enrichment", "adds what a model finds about objects (request_enrichment)"),
];

pub(crate) struct ListPlugins;

#[async_trait::async_trait]
impl Tool for ListPlugins {
    type Input = Input;
    type Output = Output;
    const TITLE: &'static str = "List optional parts";
    const META: ToolMeta = ToolMeta {
        name: "list_plugins",
        description: "List this server's optional parts and whether each works now: 'embeddings' (search by \
            meaning for search_semantic), 'postgresql' (the shared store for several replicas), 'llm' (the \
            configured model provider, checked with one model-list request), 'sweepers' (background checks), \
            'critic', 'pipeline' and 'enrichment' (autonomous processes, alive in any server on the same store), \
            and 'gossip' (peer-to-peer replication, which this server does not have). Returns {plugins: [{name, \
            description, available}], available_count, total_count}.",
        mutates_graph: false,
        creates_session: false,
        destructive: false,
        idempotent: true,
        open_world: true,
        session_fields: &[],
        session_checks: &[],
        // Server management, denied to ai_chat as in the reference.
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, _input: Input) -> Result<Output, ToolError> {
        let mut plugins = Vec::new();

        plugins.push(match ctx.runtime.embeddings() {
            Some(embeddings) => Plugin {
                name: "embeddings",
                description: format!(
                    "Search by meaning (search_semantic, fused with text ranking), with the embedding model '{}'.",
                    embeddings.model()
                ),
                available: true,
            },
            None => Plugin {
                name: "embeddings",
                description: "Search by meaning (search_semantic). No embedding model is configured: search ranks \
                    by text only. Install one with scripts/install-embedding-model, or name a provider's \
                    embeddings endpoint."
                    .into(),
                available: false,
            },
        });

        let store = ctx.runtime.store().kind();
        let postgres = ctx.stores.opens_postgres();
        plugins.push(Plugin {
            name: "postgresql",
            description: format!(
                "A PostgreSQL store shared by several server replicas (CKS_MCP_DB_PATH=postgres://...); {}. The \
                 store in use is {store}.",
                if postgres { "this server can open one" } else { "this build cannot open one" }
            ),
            available: postgres,
        });

        plugins.push(llm(ctx).await);

        plugins.push(match &ctx.sweepers {
            Some(sweepers) => {
                let statuses = sweepers.statuses();
                let running: Vec<&str> = statuses.iter().filter(|s| s.running).map(|s| s.agent_id).collect();
                Plugin {
                    name: "sweepers",
                    description: format!(
                        "Background checks that queue what they find (list_agents); running: {}.",
                        if running.is_empty() { "none".to_owned() } else { running.join(", ") }
                    ),
                    available: true,
                }
            }
            None => Plugin {
                name: "sweepers",
                description: "Background checks that queue what they find (list_agents); not run by this server."
                    .into(),
                available: false,
            },
        });

        let now = OffsetDateTime::now_utc();
        let records = ctx.runtime.processes().await?;
        for (kind, does) in PROCESS_KINDS {
            let alive = records.iter().filter(|r| r.process_kind == kind && r.status(now) == "alive").count();
            plugins.push(Plugin {
                name: kind,
                description: format!(
                    "An autonomous process that {does}; {alive} alive on this store (list_processes)."
                ),
                available: alive > 0,
            });
        }

        plugins.push(Plugin {
            name: "gossip",
            description: "Peer-to-peer replication of sessions. Not part of this server: replicas share one \
                PostgreSQL store instead."
                .into(),
            available: false,
        });

        let available_count = plugins.iter().filter(|p| p.available).count();
        let total_count = plugins.len();
        Ok(Output { plugins, available_count, total_count })
    }
}

/// The LLM provider as the client finds it now (one cheap reachability request, never a chat).
async fn llm(ctx: &ToolContext) -> Plugin {
    let what = "The model behind ai_chat, construct_knowledge, update_registered_graph and the processes";
    match &ctx.llm {
        LlmAccess::Ready(client) => {
            let status = client.status().await;
            let redact = |text: &str| client.config().redactor.redact(text);
            let provider = status.provider.map_or("none", ProviderKind::as_str);
            let model = status.model.as_deref().map(redact).unwrap_or_default();
            let available = status.configured && status.reachable;
            let state = match (&status.message, available) {
                (_, true) => format!("{provider}, model '{model}', reachable"),
                (Some(message), false) => format!("{provider}: {}", redact(message)),
                (None, false) => format!("{provider}: not reachable"),
            };
            Plugin {
                name: "llm",
                description: format!("{what} (CKS_LLM_PROVIDER={}): {state}.", status.selection),
                available,
            }
        }
        LlmAccess::Misconfigured(message) => {
            Plugin { name: "llm", description: format!("{what}: misconfigured: {message}"), available: false }
        }
        LlmAccess::Absent => {
            Plugin { name: "llm", description: format!("{what}: none is configured."), available: false }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};
    use std::time::Duration;

    use cks_runtime::{Sweepers, SweepersConfig};

    use crate::testing::{call, context};

    fn availability(result: &Value) -> Vec<(String, bool)> {
        result["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p["name"].as_str().unwrap().to_owned(), p["available"].as_bool().unwrap()))
            .collect()
    }

    #[tokio::test]
    async fn each_part_says_whether_it_works_now() {
        let mut ctx = context();
        let bare = call(&ctx, "list_plugins", json!({})).await;
        let names = ["embeddings", "postgresql", "llm", "sweepers", "critic", "pipeline", "enrichment", "gossip"];
        let expected: Vec<(String, bool)> = names.iter().map(|n| ((*n).to_owned(), false)).collect();
        assert_eq!(availability(&bare), expected, "{bare}");
        assert_eq!((bare["available_count"].clone(), bare["total_count"].clone()), (json!(0), json!(8)));
        assert!(bare["plugins"][1]["description"].as_str().unwrap().contains("The store in use is memory"));

        let config = SweepersConfig { interval: Duration::from_secs(3_600), start: false, ..SweepersConfig::default() };
        let sweepers = Sweepers::start(ctx.runtime.clone(), &config).await.unwrap();
        sweepers.start_agent("contradiction").await.unwrap();
        ctx.sweepers = Some(sweepers);
        let with_sweepers = call(&ctx, "list_plugins", json!({})).await;
        assert_eq!(with_sweepers["plugins"][3]["available"], true);
        assert!(with_sweepers["plugins"][3]["description"].as_str().unwrap().contains("running: contradiction."));
        assert_eq!(with_sweepers["available_count"], 1);
        assert_eq!(call(&ctx, "list_plugins", json!({"x": 1})).await["error"], "invalid_parameter");
    }
}
