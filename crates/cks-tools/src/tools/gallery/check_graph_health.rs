//! `check_graph_health`: one 0.0–1.0 score for a registered graph from read-only checks —
//! component versions, entry freshness, contradictions, verification coverage, dead-lettered
//! conflict tasks — with each part shown, weighted as the reference weighs them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use cks_core::KnowledgeStructure;

use super::check_graph_freshness::is_fresh;
use super::{read_open, required};
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::tool::{Tool, ToolMeta};
use crate::tools::explore::detect_contradictions::contradiction_count;

/// A VerificationRecord checked longer ago than this no longer counts as coverage.
const COVERAGE_TTL_SECONDS: i64 = 30 * 24 * 3600;

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The registered name of the graph.
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
    /// Components whose recorded version was confirmed current.
    up_to_date: usize,
    /// `Component` objects in the graph.
    total: usize,
    score: f64,
    /// Why components count as not confirmed.
    note: &'static str,
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
    note: &'static str,
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
    const META: ToolMeta = ToolMeta {
        name: "check_graph_health",
        description: "Score a registered graph's health from 0.0 to 1.0 (read-only, no LLM, no network): 0.3 × \
            component versions confirmed current (this server does not fetch them, so a graph with Component \
            objects scores 0 there), 0.1 × entry updated within 7 days, 0.3 × no contradictions, 0.2 × share of \
            VerificationRecords checked within 30 days (1 when there are none), 0.1 × no dead-lettered \
            conflict tasks (this server has no conflict queue yet: always 1). Returns {name, session_id, \
            health_score, metrics: {version_freshness, ttl_freshness, contradictions, verification_coverage, \
            dead_letter, graph_size}, timestamp}; {found: false} for an unknown name.",
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
        let measured = read_open(ctx, &entry.session_id, |s| measure(s, now)).await;
        let Some((version_freshness, contradictions, verification_coverage, graph_size)) = measured else {
            return Ok(Output {
                found: Some(true),
                error: Some("session_not_available".into()),
                message: Some(format!("Session '{}' for graph '{name}' is not available.", entry.session_id)),
                name: Some(name),
                session_id: Some(entry.session_id),
                ..Output::default()
            });
        };
        let fresh = is_fresh(&entry.updated_at, now);
        let ttl_freshness = TtlFreshness { fresh, score: if fresh == Some(true) { 1.0 } else { 0.0 } };
        let dead_letter = DeadLetter {
            count: 0,
            score: 1.0,
            note: "this server keeps no conflict queue yet; nothing is dead-lettered",
        };
        // Summed in the reference's order, so equal inputs give the same float.
        let health_score = 0.3 * version_freshness.score
            + 0.1 * ttl_freshness.score
            + 0.3 * contradictions.score
            + 0.2 * verification_coverage.score
            + 0.1 * dead_letter.score;
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

/// The parts read from the graph itself.
fn measure(
    structure: &KnowledgeStructure,
    now: OffsetDateTime,
) -> (VersionFreshness, Contradictions, Coverage, GraphSize) {
    let of_type = |ty: &'static str| structure.objects().filter(move |o| o.identity.r#type == ty);
    let components = of_type("Component").count();
    let version_freshness = VersionFreshness {
        up_to_date: 0,
        total: components,
        score: if components == 0 { 1.0 } else { 0.0 },
        note: "component versions are not fetched by this server, so none is confirmed current",
    };
    let count = contradiction_count(structure);
    let contradictions = Contradictions { count, score: if count == 0 { 1.0 } else { 0.0 } };
    let records: Vec<_> = of_type("VerificationRecord").collect();
    // A time without an offset is UTC, as the reference reads it.
    let checked_recently = |checked_at: &str| {
        OffsetDateTime::parse(checked_at, &Rfc3339)
            .or_else(|_| OffsetDateTime::parse(&format!("{checked_at}Z"), &Rfc3339))
            .is_ok_and(|at| (now - at).whole_seconds() <= COVERAGE_TTL_SECONDS)
    };
    let fresh = records
        .iter()
        .filter(|r| r.structure.get("checked_at").and_then(|v| v.as_str()).is_some_and(checked_recently))
        .count();
    let verification_coverage = Coverage {
        fresh,
        total: records.len(),
        score: if records.is_empty() { 1.0 } else { fresh as f64 / records.len() as f64 },
    };
    let graph_size = GraphSize { objects: structure.len(), relations: structure.relations().count() };
    (version_freshness, contradictions, verification_coverage, graph_size)
}
