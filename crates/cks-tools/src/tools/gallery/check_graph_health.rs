//! `check_graph_health`: one 0.0–1.0 score for a registered graph from read-only checks —
//! component versions, entry freshness, contradictions, verification coverage, dead-lettered
//! conflict tasks — with each part shown, weighted as the reference weighs them.
//!
//! The reference fetches every component's version on each call; this tool fetches nothing and
//! scores versions from the graph's last recorded check (`check_component_versions`, or the
//! `graph_auto_update` sweeper), so a score costs no network and a sweep of many graphs no
//! requests.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use cks_runtime::health::{GraphContent, GraphHealth, is_fresh};
use cks_runtime::store::{TaskFilter, TaskStatus};

use super::{read_open, required};
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Named, Tool, ToolMeta};
use crate::tools::conflicts::store_error;

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The graph's registered name.
    pub(crate) name: String,
}

#[derive(Debug, Default, Serialize, JsonSchema)]
pub(crate) struct Output {
    /// Present only when the name is unknown (false) or its session is gone (true).
    #[serde(skip_serializing_if = "Option::is_none")]
    found: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    session_id: Option<String>,
    /// 0.3 × version freshness + 0.1 × entry freshness + 0.3 × no contradictions + 0.2 ×
    /// verification coverage + 0.1 × no dead-lettered tasks.
    #[serde(skip_serializing_if = "Option::is_none")]
    health_score: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    metrics: Option<Metrics>,
    #[serde(skip_serializing_if = "Option::is_none")]
    timestamp: Option<String>,
    /// `session_not_available` when the registered session was closed.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

#[derive(Debug, Default, Serialize, JsonSchema)]
pub(crate) struct Metrics {
    version_freshness: VersionFreshness,
    ttl_freshness: TtlFreshness,
    contradictions: Contradictions,
    verification_coverage: Coverage,
    dead_letter: DeadLetter,
    graph_size: GraphSize,
}

#[derive(Debug, Default, Serialize, JsonSchema)]
struct VersionFreshness {
    /// Components that record the version their code was last found to publish.
    up_to_date: usize,
    /// `Component` objects in the graph that record a version.
    total: usize,
    score: f64,
    /// When the components were last checked; null when never (then none counts as current).
    checked_at: Option<String>,
}

#[derive(Debug, Default, Serialize, JsonSchema)]
struct TtlFreshness {
    /// Updated within 7 days (null: the entry's time cannot be read).
    fresh: Option<bool>,
    score: f64,
}

#[derive(Debug, Default, Serialize, JsonSchema)]
struct Contradictions {
    count: usize,
    score: f64,
}

#[derive(Debug, Default, Serialize, JsonSchema)]
struct Coverage {
    /// VerificationRecords checked within 30 days.
    fresh: usize,
    total: usize,
    score: f64,
}

#[derive(Debug, Default, Serialize, JsonSchema)]
struct DeadLetter {
    count: usize,
    score: f64,
}

#[derive(Debug, Default, Serialize, JsonSchema)]
struct GraphSize {
    /// Every object, relations included (as the reference counts).
    objects: usize,
    relations: usize,
}

pub(crate) struct CheckGraphHealth;

#[async_trait::async_trait]
impl Tool for CheckGraphHealth {
    type Input = Input;
    type Output = Output;
    const NAMED: &'static [(&'static str, Named)] = &[("name", Named::Graph)];
    const TITLE: &'static str = "Score a graph's health";
    const META: ToolMeta = ToolMeta {
        name: "check_graph_health",
        description: "Score a registered graph's health from 0.0 to 1.0 (read-only, no LLM, no network): 0.3 × \
            component versions current at the last check_component_versions, 0.1 × updated within 7 days, 0.3 × no \
            contradictions, 0.2 × VerificationRecords checked within 30 days, 0.1 × no dead-lettered tasks. Returns \
            {name, session_id, health_score, metrics}; {found: false} for an unknown name.",
        mutates_graph: false,
        creates_session: false,
        destructive: false,
        idempotent: true,
        open_world: false,
        session_fields: &[],
        session_checks: &[],
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        let name = required(&input.name, "name")?.to_owned();
        let Some(entry) = ctx.runtime.graph(&name).await? else {
            return Ok(Output { found: Some(false), ..Output::default() });
        };
        let now = OffsetDateTime::now_utc();
        let versions = ctx.runtime.recorded_versions(&name).await?;
        let measure = |s: &cks_core::KnowledgeStructure| GraphContent::measure(s, now, versions.as_ref());
        let Some(content) = read_open(ctx, &entry.session_id, measure).await else {
            return Ok(Output {
                found: Some(true),
                error: Some("session_not_available".into()),
                message: Some(format!("Session '{}' for graph '{name}' is not available.", entry.session_id)),
                name: Some(name),
                session_id: Some(entry.session_id),
                ..Output::default()
            });
        };
        let dead =
            TaskFilter { status: Some(TaskStatus::Dead), session_id: Some(entry.session_id.clone()), task_type: None };
        let dead_letters = ctx.runtime.tasks().list(&dead).await.map_err(store_error)?.len();
        let health = GraphHealth { content, fresh: is_fresh(&entry.updated_at, now), dead_letters };
        let content = &health.content;
        let version_freshness = VersionFreshness {
            up_to_date: content.components_current,
            total: content.components,
            score: health.version_score(),
            checked_at: versions.map(|record| record.checked_at),
        };
        let ttl_freshness = TtlFreshness { fresh: health.fresh, score: health.freshness_score() };
        let contradictions = Contradictions { count: content.contradictions, score: health.contradiction_score() };
        let verification_coverage =
            Coverage { fresh: content.records_fresh, total: content.records, score: health.coverage_score() };
        let dead_letter = DeadLetter { count: dead_letters, score: health.dead_letter_score() };
        let graph_size = GraphSize { objects: content.objects, relations: content.relations };
        let health_score = health.score();
        Ok(Output {
            name: Some(name),
            session_id: Some(entry.session_id),
            health_score: Some(health_score),
            metrics: Some(Metrics {
                version_freshness,
                ttl_freshness,
                contradictions,
                verification_coverage,
                dead_letter,
                graph_size,
            }),
            timestamp: now.format(&Rfc3339).ok(),
            ..Output::default()
        })
    }
}
