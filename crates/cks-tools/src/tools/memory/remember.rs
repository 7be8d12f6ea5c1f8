//! `remember`: a text into an existing session's graph in one commit. The configured model
//! extracts entities and facts (`memory::extract`), the matcher resolves them against the graph,
//! facts that replace current ones end them, and everything is linked to the text's `Episode`
//! (`memory::plan`). Entities the matcher cannot tell apart from an object are created and left
//! to a person as `duplicate_candidate` tasks. The same text remembered twice changes nothing.
//!
//! A long text (a document) is split into parts at paragraph ends, each extracted and committed
//! in turn (progress reported after each; a client that speaks MCP Tasks follows it as a task).
//! The episode records how many parts are in: a call that fails part-way says so, keeps what is
//! committed, and the same text sent again goes on from the next part.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::{Digest, Sha256};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use cks_runtime::CommitRequest;

use crate::ErrorCode;
use crate::context::ToolContext;
use crate::error::ToolError;
use crate::memory::plan::{self, Episode, Report};
use crate::memory::{self, extraction::Extraction};
use crate::tool::{SessionCheck, Tool, ToolMeta};

/// The longest text one call takes, in characters.
pub(crate) const MAX_TEXT_CHARS: usize = 200_000;

/// The most characters of a text one extraction reads.
pub(crate) const PART_CHARS: usize = 6_000;

/// The characters of the text an episode's name shows.
const NAME_CHARS: usize = 60;

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The session whose graph learns the text.
    pub(crate) session_id: String,
    /// What to remember: a note, a message, a document (at most 200,000 characters; a long one is
    /// remembered part by part).
    pub(crate) text: String,
    /// Where the text comes from (a URL, a conversation, a person).
    pub(crate) source: Option<String>,
    /// When the text was said or written (RFC 3339, or a date YYYY-MM-DD); default now. Facts it
    /// replaces end at this time.
    pub(crate) observed_at: Option<String>,
    /// Model of the configured provider (default: its configured one).
    pub(crate) model: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    session_id: String,
    /// The Episode object the text became.
    episode_id: String,
    /// The version committed; absent when the text was remembered before.
    #[serde(skip_serializing_if = "Option::is_none")]
    version_id: Option<String>,
    /// True when this text was remembered before: nothing changed.
    already_remembered: bool,
    /// The parts a long text was remembered in (absent for a text of one part).
    #[serde(skip_serializing_if = "Option::is_none")]
    parts: Option<usize>,
    /// What changed: created, matched, updated, facts_added, facts_confirmed, superseded, review
    /// (new objects left to a person with their candidates), dropped (parts of the answer not
    /// stored, and why).
    #[serde(flatten)]
    #[schemars(with = "serde_json::Map<String, serde_json::Value>")]
    report: Report,
    /// The `duplicate_candidate` tasks queued for the review list.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    review_task_ids: Vec<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    model_used: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    provider: Option<String>,
}

pub(crate) struct Remember;

#[async_trait::async_trait]
impl Tool for Remember {
    type Input = Input;
    type Output = Output;
    const TITLE: &'static str = "Remember text";
    const META: ToolMeta = ToolMeta {
        name: "remember",
        description: "Remember a text in a session's graph, in one commit: the configured LLM extracts entities and \
            facts; each entity is matched to an object (name, aliases) or created; a fact that replaces a current one \
            ends it (valid_until); all is linked to an Episode for the text. Returns {episode_id, version_id, \
            created, matched, updated, facts_added, superseded, review}. forget_episode undoes it.",
        mutates_graph: true,
        creates_session: false,
        destructive: false,
        idempotent: true,
        open_world: true,
        session_fields: &["session_id"],
        session_checks: &[SessionCheck::exists("session_id")],
        llm_exposed: true,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        let text = input.text.trim();
        if text.is_empty() {
            return Err(ToolError::missing_parameter("text"));
        }
        let length = text.chars().count();
        if length > MAX_TEXT_CHARS {
            return Err(ToolError::invalid_parameter(format!(
                "text is {length} characters; remember takes at most {MAX_TEXT_CHARS} in one call: split it."
            )));
        }
        let observed_at = observed_at(input.observed_at.as_deref())?;
        let parts = split(text, PART_CHARS);
        let mut episode = episode(text, input.source.filter(|s| !s.trim().is_empty()), observed_at);
        let session_id = input.session_id;
        let known = ctx.runtime.read(&session_id, |s, _| plan::episode_with_hash(s, &episode.content_hash)).await?;
        let first = match &known {
            Some(known) if known.complete => {
                return Ok(Output {
                    session_id,
                    episode_id: known.id.clone(),
                    version_id: None,
                    already_remembered: true,
                    parts: (parts.len() > 1).then_some(parts.len()),
                    report: Report::default(),
                    review_task_ids: Vec::new(),
                    model_used: None,
                    provider: None,
                });
            }
            Some(known) => known.parts_done,
            None => 0,
        };
        let mut report = Report::default();
        let mut version_id = None;
        let mut answered = None;
        let mut review_task_ids = Vec::new();
        for (index, part) in parts.iter().enumerate().skip(first) {
            episode.part = (index, parts.len());
            let done = async {
                let extracted = memory::extract(ctx, part, input.model.clone(), Self::META.name).await?;
                let (version, part_report) =
                    commit(ctx, &session_id, &episode, &extracted.extraction, extracted.dropped).await?;
                Ok::<_, ToolError>((version, part_report, extracted.model, extracted.provider))
            }
            .await;
            let (version, part_report, model, provider) = done.map_err(|error| {
                if parts.len() == 1 {
                    return error;
                }
                let message = format!(
                    "{} Parts 1 to {index} of {} are remembered; the same text sent again goes on from part {}.",
                    error.message,
                    parts.len(),
                    index + 1
                );
                ToolError { message, ..error }
                    .with("episode_id", episode.id.as_str())
                    .with("parts", parts.len())
                    .with("parts_done", index)
            })?;
            let pairs: Vec<(String, String)> = part_report
                .review
                .iter()
                .flat_map(|r| r.candidates.iter().map(|c| (r.id.clone(), c.clone())))
                .collect();
            review_task_ids.extend(cks_runtime::sweepers::queue_pairs(&ctx.runtime, &session_id, &pairs).await?);
            report.extend(part_report);
            version_id = Some(version);
            answered = Some((model, provider));
            if let Some(progress) = &ctx.progress {
                progress.report(
                    (index + 1) as f64,
                    Some(parts.len() as f64),
                    Some(format!("part {} of {} remembered", index + 1, parts.len())),
                );
            }
        }
        let (model, provider) = answered.unzip();
        Ok(Output {
            session_id,
            episode_id: episode.id,
            version_id,
            already_remembered: false,
            parts: (parts.len() > 1).then_some(parts.len()),
            report,
            review_task_ids,
            model_used: model,
            provider: provider.map(str::to_owned),
        })
    }
}

/// `text` in parts of at most `limit` characters, cut after a paragraph where one ends in time,
/// else after a sentence, else at a space, else anywhere.
pub(crate) fn split(text: &str, limit: usize) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut rest = text.trim();
    while rest.chars().count() > limit {
        let end = rest.char_indices().nth(limit).map_or(rest.len(), |(i, _)| i);
        let window = &rest[..end];
        let cut = ["\n\n", ". ", "\n", " "]
            .iter()
            .find_map(|mark| window.rfind(mark).filter(|&i| i > 0).map(|i| i + mark.len()))
            .unwrap_or(end);
        parts.push(rest[..cut].trim());
        rest = rest[cut..].trim_start();
    }
    if !rest.is_empty() {
        parts.push(rest);
    }
    parts
}

/// Plans on the session as it is and commits; planned again once when a concurrent commit made
/// the plan stale (an id taken, an object gone).
async fn commit(
    ctx: &ToolContext,
    session_id: &str,
    episode: &Episode,
    extraction: &Extraction,
    dropped: Vec<memory::extraction::Dropped>,
) -> Result<(String, Report), ToolError> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let planned = ctx.runtime.read(session_id, |s, _| plan::plan(s, episode, extraction)).await?;
        let metadata = ctx.version_metadata("remember", [("episode_id", json!(episode.id))]);
        let request = CommitRequest::operations(planned.operations).with_metadata(metadata);
        match ctx.runtime.commit(session_id, request).await {
            Ok(committed) => {
                let mut report = planned.report;
                report.dropped.extend(dropped.into_iter().map(Into::into));
                return Ok((committed.version.version_id, report));
            }
            Err(e) => {
                let error = ToolError::from(e);
                if attempt == 1 && error.code == ErrorCode::InvalidOperations {
                    continue;
                }
                return Err(error);
            }
        }
    }
}

/// When the text was observed: RFC 3339, or a date (midnight UTC); now when not given.
fn observed_at(given: Option<&str>) -> Result<String, ToolError> {
    let Some(given) = given.map(str::trim).filter(|g| !g.is_empty()) else {
        let now = OffsetDateTime::now_utc().replace_nanosecond(0).unwrap_or_else(|_| OffsetDateTime::now_utc());
        return Ok(now.format(&Rfc3339).unwrap_or_default());
    };
    if let Ok(at) = OffsetDateTime::parse(given, &Rfc3339) {
        return Ok(at.format(&Rfc3339).unwrap_or_default());
    }
    match OffsetDateTime::parse(&format!("{given}T00:00:00Z"), &Rfc3339) {
        Ok(midnight) => Ok(midnight.format(&Rfc3339).unwrap_or_default()),
        Err(_) => Err(ToolError::new(
            ErrorCode::InvalidParameter,
            format!("observed_at {given:?} is neither RFC 3339 (2026-05-01T12:00:00Z) nor a date (2026-05-01)."),
        )),
    }
}

/// The episode `text` becomes.
fn episode(text: &str, source: Option<String>, observed_at: String) -> Episode {
    let content_hash: String = Sha256::digest(text.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    let mut name: String = text.chars().take(NAME_CHARS).collect();
    if text.chars().count() > NAME_CHARS {
        name.push('…');
    }
    Episode {
        id: format!("episode-{}", &content_hash[..12]),
        name: source.clone().unwrap_or(name),
        text: text.to_owned(),
        source,
        observed_at,
        content_hash,
        part: (0, 1),
    }
}

#[cfg(test)]
mod tests;
