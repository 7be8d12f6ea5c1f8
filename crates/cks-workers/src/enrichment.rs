//! The Enrichment process: works through the `enrichment_request` tasks `request_enrichment`
//! queues. For each: search the configured sources for the object's name (or the request's query),
//! leave out what is not worth fetching or already linked, score the rest and keep the best few
//! that clear the bar; then, for each page a site's robots.txt allows, read it (`ingest_document`),
//! check it (`verify_source`'s signed record) and commit the page's objects, the record and an
//! `enriched_by` relation from the object — one commit per page, naming the process, the task and
//! the page.
//!
//! Finding nothing worth taking is a settled task, not a failure; so is a page robots.txt
//! disallows or whose address may not be fetched (it never will be). A task fails (and is retried
//! after its backoff) only when every source failed, or every page it chose could not be read or
//! committed. Every id it writes is made from the page's URL and the object, so a retry finds what
//! an earlier attempt committed and adds nothing twice.

mod judging;
mod sources;

pub use judging::SourcePolicy;
pub use sources::Source;

use cks_tools::ErrorCode;
use serde_json::{Map, json};
use std::collections::HashSet;
use std::time::Duration;
use tokio::sync::watch;

use cks_core::KnowledgeStructure;
use cks_core::object::Identity;
use cks_core::ops::Operation;
use cks_runtime::RuntimeError;
use cks_runtime::store::TaskRow;

use super::{Held, Outcome, Pace, Worker};
use cks_tools::ToolContext;
use cks_tools::ToolError;
use cks_tools::services::enrichment::{Payload, TASK_TYPE};
use cks_tools::services::verify;
use cks_tools::services::{Change, commit_operations};
use cks_tools::services::{addition, ingest};
use cks_web::robots::{RobotsCache, Verdict};
use sources::Candidate;

/// The relation from an object to a page found about it.
const ENRICHED_BY: &str = "enriched_by";

/// The Enrichment process's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct EnrichmentConfig {
    /// Run it (`CKS_EMBED_ENRICHMENT_AGENT`, or `CKS_EMBEDDED_AGENTS`).
    pub enabled: bool,
    /// How long it waits, idle, before looking for work again (`CKS_ENRICHMENT_POLL_INTERVAL`).
    pub poll_interval: Duration,
    /// How often it refreshes its liveness record (`CKS_ENRICHMENT_LIVENESS_INTERVAL`).
    pub liveness_interval: Duration,
    /// Where it searches, in order (`CKS_ENRICHMENT_ADAPTERS`, `CKS_ENRICHMENT_WIKIPEDIA_URL`,
    /// `CKS_ENRICHMENT_ARXIV_URL`).
    pub sources: Vec<Source>,
    /// Candidates asked of each source (`CKS_ENRICHMENT_LIMIT_PER_ADAPTER`).
    pub limit_per_source: usize,
    /// The score a candidate needs to be fetched (`CKS_ENRICHMENT_MIN_SCORE`).
    pub min_score: f64,
    /// Pages fetched per task at most, the best first (`CKS_ENRICHMENT_MAX_INGESTS`).
    pub max_ingests: usize,
    /// The operator's allow and block lists.
    pub policy: SourcePolicy,
}

impl Default for EnrichmentConfig {
    fn default() -> Self {
        EnrichmentConfig {
            enabled: false,
            poll_interval: Duration::from_secs(5),
            liveness_interval: Duration::from_secs(30),
            sources: vec![
                Source::Wikipedia { endpoint: Source::WIKIPEDIA.into() },
                Source::Arxiv { endpoint: Source::ARXIV.into() },
            ],
            limit_per_source: 3,
            min_score: 0.5,
            max_ingests: 2,
            policy: SourcePolicy::default(),
        }
    }
}

impl EnrichmentConfig {
    pub(crate) fn pace(&self) -> Pace {
        // It asks no model: nothing to budget.
        Pace { poll_interval: self.poll_interval, liveness_interval: self.liveness_interval, token_budget_per_hour: 0 }
    }
}

pub(super) async fn run(mut worker: Worker, config: EnrichmentConfig, mut stopped: watch::Receiver<bool>) {
    worker.report().await;
    let robots = RobotsCache::default();
    let task_types = [TASK_TYPE.to_owned()];
    while let Some(task) = worker.next_task(&task_types, &mut stopped).await {
        let ctx = worker.task_context(&task);
        match worker.hold(&task, enrich(&ctx, &config, &robots, &task)).await {
            Held::Done(outcome, held) => {
                worker.finish(&task, held, &outcome).await;
            }
            Held::Lost(why) => worker.abandon(why).await,
        }
    }
    worker.stopped().await;
}

/// What became of the pages a task chose.
#[derive(Debug, Default)]
struct Pages {
    linked: Vec<String>,
    /// Disallowed by robots.txt, or at an address that may not be fetched.
    refused: Vec<String>,
    failed: Vec<String>,
}

async fn enrich(ctx: &ToolContext, config: &EnrichmentConfig, robots: &RobotsCache, task: &TaskRow) -> Outcome {
    let Ok(payload) = serde_json::from_str::<Payload>(&task.payload) else {
        return Outcome::Unsettleable(format!("the payload is not {{object_id, query}}: {}", task.payload));
    };
    let object_id = payload.object_id.as_str();
    let looked = ctx.runtime.read(&task.session_id, |s, _| {
        (s.get(object_id).map(|o| o.identity.name.to_string()), linked_urls(s, object_id))
    });
    let (name, linked) = match looked.await {
        Ok(found) => found,
        Err(e @ (RuntimeError::SessionNotFound(_) | RuntimeError::SessionClosed(_))) => {
            return Outcome::Unsettleable(e.to_string());
        }
        Err(e) => return Outcome::Failed(e.to_string()),
    };
    let Some(name) = name else {
        tracing::info!(task = task.task_id, object_id, "the object to enrich is gone: nothing to do");
        return Outcome::Settled;
    };
    let query = payload.query.filter(|q| !q.trim().is_empty()).unwrap_or(if name.is_empty() {
        payload.object_id.clone()
    } else {
        name
    });

    let mut found: Vec<Candidate> = Vec::new();
    let mut source_errors = Vec::new();
    for source in &config.sources {
        match source.search(&ctx.fetcher, &query, config.limit_per_source).await {
            Ok(candidates) => found.extend(candidates),
            Err(e) => source_errors.push(format!("{}: {e}", source.name())),
        }
    }
    if found.is_empty() && !source_errors.is_empty() {
        return Outcome::Failed(format!("every source failed: {}", source_errors.join("; ")));
    }
    let chosen = choose(found, &linked, &query, config);
    let mut pages = Pages::default();
    for (score, candidate) in chosen {
        let url = candidate.url.clone();
        match robots.verdict(&ctx.fetcher, &url).await {
            Verdict::Allowed => {}
            Verdict::Disallowed => {
                pages.refused.push(format!("{url}: disallowed by robots.txt"));
                continue;
            }
            Verdict::Refused(e) => {
                pages.refused.push(format!("{url}: {e}"));
                continue;
            }
            Verdict::Unavailable(why) => {
                pages.failed.push(format!("{url}: {why}"));
                continue;
            }
        }
        match link(ctx, &task.session_id, object_id, &query, score, &candidate).await {
            Ok(()) => pages.linked.push(url),
            Err(e) if e.code == ErrorCode::UnsafeUrl => pages.refused.push(format!("{url}: {}", e.message)),
            Err(e) => pages.failed.push(format!("{url}: {} ({})", e.code, e.message)),
        }
    }
    tracing::info!(task = task.task_id, query, ?pages, ?source_errors, "enrichment request worked");
    if pages.linked.is_empty() && !pages.failed.is_empty() {
        Outcome::Failed(pages.failed.join("; "))
    } else {
        Outcome::Settled
    }
}

/// The URLs of the pages already linked to `object_id`.
fn linked_urls(structure: &KnowledgeStructure, object_id: &str) -> HashSet<String> {
    structure
        .relations_of(object_id)
        .iter()
        .filter_map(|relation| {
            let view = relation.relation()?;
            if view.relation_type != ENRICHED_BY || view.participants.first() != Some(&object_id) {
                return None;
            }
            let page = structure.get(view.participants.get(1)?)?;
            page.structure.get("url")?.as_str().map(str::to_owned)
        })
        .collect()
}

/// The candidates worth fetching, best first: not already linked, allowed by the operator's lists,
/// each URL once, scoring at least the bar, at most `max_ingests`.
fn choose(
    found: Vec<Candidate>,
    linked: &HashSet<String>,
    query: &str,
    config: &EnrichmentConfig,
) -> Vec<(f64, Candidate)> {
    let mut seen = HashSet::new();
    let mut chosen: Vec<(f64, Candidate)> = found
        .into_iter()
        .filter(|c| !linked.contains(&c.url) && config.policy.allows(&c.url) && seen.insert(c.url.clone()))
        .map(|c| (judging::score(&c, query), c))
        .filter(|(score, _)| *score >= config.min_score)
        .collect();
    chosen.sort_by(|(a, _), (b, _)| b.total_cmp(a));
    chosen.truncate(config.max_ingests);
    chosen
}

/// Reads the page and commits what the session lacks of it: its objects, its verification record
/// (for a page new to the session) and the `enriched_by` relation.
async fn link(
    ctx: &ToolContext,
    session_id: &str,
    object_id: &str,
    query: &str,
    score: f64,
    candidate: &Candidate,
) -> Result<(), ToolError> {
    let page = ingest(ctx, &candidate.url).await?;
    let document = page.document_id.clone();
    let relation_id = format!("rel-enrich-{object_id}-{document}");
    let wanted: Vec<String> = page.objects.iter().map(|o| o.id().to_owned()).chain([relation_id.clone()]).collect();
    let present: HashSet<String> =
        ctx.runtime.read(session_id, |s, _| wanted.into_iter().filter(|id| s.get(id).is_some()).collect()).await?;
    let mut operations: Vec<Operation> =
        page.objects.into_iter().filter(|o| !present.contains(o.id())).map(addition).collect();
    if !present.contains(&document) {
        // The record is worth having, not worth losing the page over.
        match verify(ctx, &candidate.url, &document).await {
            Ok(verification) => operations.extend(verification.operations()),
            Err(e) => tracing::info!(url = candidate.url, error = %e, "no verification record for an enriching page"),
        }
    }
    if !present.contains(&relation_id) {
        let mut structure = Map::new();
        structure.insert("query".into(), json!(query));
        structure.insert("score".into(), json!(score));
        structure.insert("source_adapter".into(), json!(candidate.source));
        operations.push(Operation::AddRelation {
            identity: Identity::new(relation_id, "Relation", ENRICHED_BY),
            participants: vec![object_id.to_owned(), document],
            relation_type: ENRICHED_BY.to_owned(),
            structure: structure.into(),
        });
    }
    if operations.is_empty() {
        return Ok(());
    }
    let change = Change { operations, extensions: Vec::new(), return_structure: Some(false) };
    commit_operations(ctx, session_id.to_owned(), change, "enrichment", [("source_url", json!(candidate.url))]).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};
    use std::sync::Arc;
    use std::time::Duration;

    use cks_runtime::store::memory::MemoryStore;
    use cks_runtime::store::{TaskFilter, TaskStatus};
    use cks_runtime::{QueueConfig, Runtime, RuntimeConfig};

    use super::{EnrichmentConfig, Source};
    use crate::{Processes, ProcessesConfig};
    use cks_tools::Registry;
    use cks_tools::ToolContext;
    use cks_tools::services::document_id;
    use cks_tools::testing::{HttpServer, Reply, call, obj, session, structure};
    use cks_web::fetch::{FetchPolicy, Fetcher};

    const ARTICLE: &str = "<html><head><title>Photosynthesis</title></head><body><h1>Photosynthesis</h1>\
        <p>Plants turn light into sugar.</p></body></html>";

    /// A search API and its pages: two good pages, one robots.txt disallows, one on an address the
    /// fetcher may not reach, one off-topic; `/broken/` answers 500.
    async fn sources() -> HttpServer {
        HttpServer::start(|_, path| {
            let (path, query) = path.split_once('?').unwrap_or((path, ""));
            match path {
                "/robots.txt" => Reply::status(200).body("User-agent: *\nDisallow: /private/\n"),
                "/w/api.php" if query.contains("search=Photosynthesis") => Reply::status(200).body(
                    json!(["Photosynthesis",
                        ["Photosynthesis", "Photosynthesis secrets", "Photosynthesis elsewhere", "Bananas"],
                        ["", "", "", ""],
                        ["http://127.0.0.1:{port}/wiki/Photosynthesis", "http://127.0.0.1:{port}/private/Photosynthesis",
                         "http://10.9.9.9/wiki/Photosynthesis", "http://127.0.0.1:{port}/wiki/Bananas"]])
                    .to_string(),
                ),
                "/w/api.php" => Reply::status(200).body(json!(["x", [], [], []]).to_string()),
                "/arxiv" => Reply::status(200).body(
                    "<feed xmlns=\"http://www.w3.org/2005/Atom\"><entry><id>http://127.0.0.1:{port}/abs/photosynthesis</id>\
                     <title>Photosynthesis in leaves</title></entry></feed>",
                ),
                "/wiki/Photosynthesis" | "/abs/photosynthesis" | "/private/Photosynthesis" | "/wiki/Bananas" => {
                    Reply::status(200).header("content-type", "text/html").body(ARTICLE)
                }
                _ => Reply::status(500),
            }
        })
        .await
    }

    fn context(queue: QueueConfig) -> ToolContext {
        let runtime = Runtime::new(Arc::new(MemoryStore::new()), RuntimeConfig { queue, ..RuntimeConfig::default() });
        let mut ctx = ToolContext::new(Arc::new(runtime));
        ctx.registry = Some(Arc::new(Registry::standard()));
        let policy = FetchPolicy { allowed: vec!["127.0.0.1".parse().unwrap()], ..FetchPolicy::default() };
        ctx.fetcher = Arc::new(Fetcher::new(policy));
        ctx
    }

    fn config(base: &str) -> ProcessesConfig {
        ProcessesConfig {
            enrichment: EnrichmentConfig {
                enabled: true,
                poll_interval: Duration::from_millis(20),
                sources: vec![
                    Source::Wikipedia { endpoint: format!("{base}/w/api.php") },
                    Source::Arxiv { endpoint: format!("{base}/arxiv") },
                ],
                limit_per_source: 10,
                max_ingests: 10,
                ..EnrichmentConfig::default()
            },
            ..ProcessesConfig::default()
        }
    }

    async fn settled(ctx: &ToolContext, task: i64) -> Option<cks_runtime::store::TaskRow> {
        for _ in 0..500 {
            match ctx.runtime.tasks().get(task).await.unwrap() {
                Some(row) if row.status == TaskStatus::Pending && row.retry_count == 0 => {}
                Some(row) if row.status == TaskStatus::InProgress => {}
                other => return other,
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("task {task} was not worked");
    }

    #[tokio::test]
    async fn found_pages_are_committed_linked_and_verified_once_and_refused_ones_never_fetched() {
        let server = sources().await;
        let base = format!("http://127.0.0.1:{}", server.addr.port());
        let ctx = context(QueueConfig::default());
        let id = session(&ctx, structure(vec![obj("p", "Process", "Photosynthesis", json!({}))])).await;
        let processes = Processes::start(ctx.clone(), &config(&base));
        let asked = call(&ctx, "request_enrichment", json!({"session_id": id, "object_id": "p"})).await;
        let task = asked["task_id"].as_i64().unwrap();
        assert!(settled(&ctx, task).await.is_none(), "completed");

        let wiki = format!("{base}/wiki/Photosynthesis");
        let arxiv = format!("{base}/abs/photosynthesis");
        let doc = document_id(&wiki);
        let graph = ctx.runtime.read(&id, |s, _| s.clone()).await.unwrap();
        let link = graph.get(&format!("rel-enrich-p-{doc}")).expect("the enriched_by relation");
        assert_eq!(link.structure["participants"], json!(["p", doc]));
        assert_eq!(link.structure["source_adapter"], "wikipedia");
        assert_eq!(
            (link.structure["query"].as_str(), link.structure["score"].as_f64()),
            (Some("Photosynthesis"), Some(0.8))
        );
        assert_eq!(graph.get(&doc).unwrap().structure["url"], json!(wiki));
        assert!(graph.get(&format!("{doc}-section-0")).is_some(), "the page's parts came with it");
        assert!(graph.get(&format!("rel-enrich-p-{}", document_id(&arxiv))).is_some(), "the arXiv page too");
        let records: Vec<_> = graph.objects_of_type("VerificationRecord");
        assert_eq!(records.len(), 2, "one signed record per new page");
        assert!(graph.relations_of(&doc).iter().any(|r| r.structure["relation_type"] == "verified_by"));
        assert!(
            graph.get(&format!("rel-enrich-p-{}", document_id(&format!("{base}/wiki/Bananas")))).is_none(),
            "off topic"
        );

        let paths: Vec<String> = server.requests().iter().map(|r| r.path.clone()).collect();
        assert!(!paths.iter().any(|p| p.starts_with("/private/")), "robots.txt said no: {paths:?}");
        assert_eq!(paths.iter().filter(|p| *p == "/robots.txt").count(), 1, "asked once: {paths:?}");
        let versions = ctx.runtime.list_versions(&id).await.unwrap();
        let made: Vec<_> =
            versions.iter().map(|v| &v.metadata).filter(|m| m.get("tool") == Some(&json!("enrichment"))).collect();
        assert_eq!(made.len(), 2, "one commit per page");
        let named = |m: &&_| {
            let m: &serde_json::Map<String, Value> = m;
            m.get("process") == Some(&json!("enrichment")) && m.get("task_id") == Some(&json!(task))
        };
        assert!(made.iter().all(named), "{made:?}");

        // Asking again (another query) finds both pages linked: nothing more is committed.
        let again =
            call(&ctx, "request_enrichment", json!({"session_id": id, "object_id": "p", "query": "Photosynthesis"}));
        let again = again.await["task_id"].as_i64().unwrap();
        assert!(settled(&ctx, again).await.is_none());
        assert_eq!(ctx.runtime.list_versions(&id).await.unwrap().len(), versions.len());
        let status = call(&ctx, "process_status", json!({"process_kind": "enrichment"})).await;
        assert_eq!((status["tasks_done"].as_u64(), status["status"].as_str()), (Some(2), Some("alive")), "{status}");
        processes.shutdown().await;
    }

    #[tokio::test]
    async fn failing_sources_are_retried_then_dead_lettered_and_a_vanished_object_settles() {
        let server = sources().await;
        let base = format!("http://127.0.0.1:{}", server.addr.port());
        let ctx = context(QueueConfig { max_retries: 1, ..QueueConfig::default() });
        let id = session(&ctx, structure(vec![obj("p", "Process", "Photosynthesis", json!({}))])).await;
        let mut broken = config(&format!("{base}/broken"));
        broken.enrichment.sources = vec![Source::Wikipedia { endpoint: format!("{base}/broken/api.php") }];
        let processes = Processes::start(ctx.clone(), &broken);
        let asked = call(&ctx, "request_enrichment", json!({"session_id": id, "object_id": "p"})).await;
        let task = asked["task_id"].as_i64().unwrap();
        let mut row = None;
        for _ in 0..500 {
            row = ctx.runtime.tasks().get(task).await.unwrap();
            if row.as_ref().is_some_and(|r| r.status == TaskStatus::Dead) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let row = row.unwrap();
        assert_eq!(row.status, TaskStatus::Dead, "{row:?}");
        assert!(row.last_error.unwrap().contains("every source failed: wikipedia: wikipedia answered HTTP 500"));

        // An object removed before its task is worked leaves nothing to do.
        call(
            &ctx,
            "evolve_knowledge",
            json!({"session_id": id, "operations": [{"type": "remove_object", "object_id": "p"}]}),
        )
        .await;
        ctx.runtime.tasks().enqueue("enrichment_request", &id, &json!({"object_id": "p"}), None).await.unwrap();
        let open = TaskFilter { status: Some(TaskStatus::Pending), ..TaskFilter::default() };
        for _ in 0..500 {
            if ctx.runtime.tasks().list(&open).await.unwrap().is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let status = call(&ctx, "process_status", json!({"process_kind": "enrichment"})).await;
        assert_eq!((status["tasks_done"].as_u64(), status["tasks_failed"].as_u64()), (Some(1), Some(2)), "{status}");
        processes.shutdown().await;
    }
}
