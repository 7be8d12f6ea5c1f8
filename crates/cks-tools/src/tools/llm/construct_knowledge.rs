//! `construct_knowledge`: free text → one LLM call → the JSON in its answer → parse → validate → a
//! new session. Nothing is committed unless the structure parses and passes the always-on rules.
//!
//! Models wrap JSON in fences, talk before and after it, or run out of tokens half-way; the
//! extraction ([`extract_json`]) takes a ```json block first, then any fenced block, then the
//! largest balanced top-level JSON value in the answer, and tells a truncated answer apart from one
//! that holds no JSON at all.

use crate::ErrorCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use cks_core::json::parse_value;
use cks_core::validate::{Severity, ValidationOptions, validate};
use cks_llm::{ChatRequest, StopReason};
use cks_runtime::NewSession;

use crate::context::ToolContext;
use crate::convert::diagnostics_brief;
use crate::error::ToolError;
use crate::tool::{Tool, ToolMeta};

/// Characters of the model's answer echoed back in extraction errors.
const RAW_OUTPUT_CHARS: usize = 1000;
/// Characters of the extracted JSON echoed back in parse and validation errors.
const RAW_JSON_CHARS: usize = 2000;

pub(crate) const SYSTEM_PROMPT: &str = r#"You turn text into a Canonical Knowledge Structure (CKS): a knowledge graph written as JSON.

Answer with exactly one JSON object and nothing else: no explanation, no markdown fences. Its shape:
{"version": "1.0", "objects": [ ...object records... ]}

Each object record is:
  {"identity": {"id": "<unique id>", "type": "<TypeName>", "name": "<readable label>"},
   "structure": { ...any key-value facts about the object... }}

A relation is an object record whose "structure" holds:
  "participants": ["<object id>", "<object id>", ...]   (two or more ids of objects in the same "objects" array)
  "relation_type": "<verb or predicate>"                 (for example "causes", "part_of", "located_in")

Rules:
- Ids are unique lowercase kebab-case slugs, for example "photosynthesis" or "rel-sun-feeds-plants".
- Every participant must be the id of an object you declared; declare an object before relating it.
- Identity has exactly the three keys id, type and name, all strings. No other keys beside identity and structure.
- Use the relation_type "derives" only for binary, acyclic derivations.
- Keep it faithful to the text: no invented facts.

Example:
{"version": "1.0", "objects": [
  {"identity": {"id": "sun", "type": "Star", "name": "Sun"}, "structure": {"description": "The star at the centre of the Solar System"}},
  {"identity": {"id": "earth", "type": "Planet", "name": "Earth"}, "structure": {"order_from_sun": 3}},
  {"identity": {"id": "rel-earth-orbits-sun", "type": "Relation", "name": "Earth orbits Sun"}, "structure": {"participants": ["earth", "sun"], "relation_type": "orbits"}}
]}"#;

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct Input {
    /// The text to turn into a knowledge structure.
    pub(crate) text: String,
    /// What to concentrate on, e.g. "causal links between diseases and symptoms".
    pub(crate) hint: Option<String>,
    /// Model of the configured provider (default: its configured one).
    pub(crate) model: Option<String>,
    /// Answer token limit (default: CKS_LLM_MAX_TOKENS, else 4096).
    #[schemars(range(min = 1))]
    pub(crate) max_tokens: Option<u32>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Output {
    /// Always true.
    constructed: bool,
    /// The new session holding the structure.
    session_id: String,
    version_id: Option<String>,
    /// The structure as canonical JSON.
    serialized: String,
    /// Non-relation objects.
    objects_count: usize,
    relations_count: usize,
    /// The model that answered.
    model_used: String,
    /// The provider that answered.
    provider: String,
    /// Warnings of the stored structure, when there are any.
    #[serde(skip_serializing_if = "Option::is_none")]
    diagnostics: Option<Vec<Value>>,
}

pub(crate) struct ConstructKnowledge;

#[async_trait::async_trait]
impl Tool for ConstructKnowledge {
    type Input = Input;
    type Output = Output;
    const TITLE: &'static str = "Build knowledge from text";
    const META: ToolMeta = ToolMeta {
        name: "construct_knowledge",
        description: "Turn free-form text into a knowledge structure with one call to the configured LLM \
            and store a valid one as a new session. Returns {constructed, session_id, version_id, serialized, \
            objects_count, relations_count}. An unusable answer stores nothing and the error says why \
            (llm_output_parse_error, construct_knowledge_failed when cut off, validation_failed with \
            'diagnostics'); no usable provider is internal_error ('LLM call failed').",
        mutates_graph: false,
        creates_session: true,
        destructive: false,
        idempotent: false,
        open_world: true,
        session_fields: &[],
        session_checks: &[],
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, input: Input) -> Result<Output, ToolError> {
        let text = input.text.trim();
        if text.is_empty() {
            return Err(ToolError::missing_parameter("text"));
        }
        let constructed =
            construct(ctx, text, input.hint.as_deref(), input.model, input.max_tokens).await.map_err(unavailable)?;
        let Constructed { structure, notes, provider, model_used } = constructed;
        let objects_count = structure.objects().filter(|o| !o.is_relation()).count();
        let relations_count = structure.relations().count();
        let serialized = crate::convert::client_document(&structure);
        let metadata = ctx.version_metadata(
            Self::META.name,
            [("provider", json!(provider)), ("model", json!(model_used)), ("operation", json!("construct"))],
        );
        let info = ctx
            .runtime
            .create_session(structure, NewSession { first_version: Some(metadata), ..Default::default() })
            .await?;
        let diagnostics = match diagnostics_brief(&notes) {
            Value::Array(items) if !items.is_empty() => Some(items),
            _ => None,
        };
        Ok(Output {
            constructed: true,
            session_id: info.session_id,
            version_id: info.latest_version_id,
            serialized,
            objects_count,
            relations_count,
            model_used,
            provider,
            diagnostics,
        })
    }
}

/// A structure a model made of a text, valid, not yet stored anywhere.
pub(crate) struct Constructed {
    pub(crate) structure: cks_core::KnowledgeStructure,
    /// Its warnings (never errors).
    pub(crate) notes: Vec<cks_core::validate::Diagnostic>,
    pub(crate) provider: String,
    /// The model that answered (redacted).
    pub(crate) model_used: String,
}

/// Asks the configured model to turn `text` into a structure and checks what it answers. A
/// provider failure keeps its code (`llm_provider_unavailable`, `llm_call_failed`): callers choose
/// how to report it.
pub(crate) async fn construct(
    ctx: &ToolContext,
    text: &str,
    hint: Option<&str>,
    model: Option<String>,
    max_tokens: Option<u32>,
) -> Result<Constructed, ToolError> {
    let client = ctx.llm.client()?;
    let redactor = &client.config().redactor;
    let mut prompt = format!("Extract a Canonical Knowledge Structure from the following text:\n\n{text}");
    if let Some(hint) = hint.map(str::trim).filter(|h| !h.is_empty()) {
        prompt.push_str(&format!("\n\nFocus especially on: {hint}"));
    }
    let request = ChatRequest {
        model: model.filter(|m| !m.trim().is_empty()),
        system: Some(SYSTEM_PROMPT.to_owned()),
        max_tokens,
        ..ChatRequest::from_prompt(prompt)
    };
    let response = tokio::select! {
        response = client.chat(request) => response.map_err(|e| super::llm_error(&e))?,
        () = ctx.cancel.cancelled() => {
            return Err(ToolError::new(ErrorCode::Cancelled, "construct_knowledge was cancelled before the model answered."));
        }
    };
    let raw = response.text();
    let hit_limit = response.stop_reason == StopReason::MaxTokens;
    let raw_output = || redactor.redact(&prefix(&raw, RAW_OUTPUT_CHARS));

    let (json_text, value) = match extract_json(&raw) {
        Ok(found) => found,
        Err(Extraction::Truncated) => {
            let why = if hit_limit { " (the model stopped at its output token limit)" } else { "" };
            return Err(ToolError::new(
                ErrorCode::ConstructKnowledgeFailed,
                format!(
                    "The model's answer is truncated: it ends inside an unfinished JSON value{why}. Retry with a \
                     larger 'max_tokens' or a shorter 'text'."
                ),
            )
            .with("reason", "truncated_output")
            .with("raw_output", raw_output()));
        }
        Err(Extraction::NoJson) if hit_limit => {
            return Err(ToolError::new(
                ErrorCode::ConstructKnowledgeFailed,
                "The model stopped at its output token limit before writing any JSON. Retry with a larger \
                 'max_tokens'.",
            )
            .with("reason", "truncated_output")
            .with("raw_output", raw_output()));
        }
        Err(Extraction::NoJson) => {
            return Err(ToolError::new(ErrorCode::LlmOutputParseError, "No JSON object found in the model's answer.")
                .with("raw_output", raw_output()));
        }
        Err(Extraction::NotJson(detail)) => {
            return Err(ToolError::new(
                ErrorCode::LlmOutputParseError,
                format!("The model's answer contains no well-formed JSON object: {detail}"),
            )
            .with("raw_output", raw_output()));
        }
    };
    let raw_json = || redactor.redact(&prefix(&json_text, RAW_JSON_CHARS));
    let structure = parse_value(value)
        .map_err(|e| ToolError::new(ErrorCode::CksParseError, e.to_string()).with("raw_json", raw_json()))?;
    if structure.is_empty() {
        return Err(ToolError::new(
            ErrorCode::ConstructKnowledgeFailed,
            "The model's answer is a structure without objects; nothing was stored.",
        )
        .with("reason", "empty_structure")
        .with("raw_json", raw_json()));
    }
    let report = validate(&structure, &ValidationOptions::default());
    if !report.is_valid() {
        return Err(ToolError::new(ErrorCode::ValidationFailed, "LLM-generated structure failed CKS validation.")
            .with("raw_json", raw_json())
            .with("diagnostics", diagnostics_brief(&report.diagnostics)));
    }
    let notes: Vec<_> = report.diagnostics.into_iter().filter(|d| d.severity != Severity::Error).collect();
    Ok(Constructed {
        structure,
        notes,
        provider: response.provider.as_str().to_owned(),
        model_used: redactor.redact(&response.model),
    })
}

/// The first `chars` characters of `text`.
pub(crate) fn prefix(text: &str, chars: usize) -> String {
    text.chars().take(chars).collect()
}

/// Why no JSON could be taken from an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Extraction {
    /// Nothing that looks like JSON.
    NoJson,
    /// The answer ends inside an unfinished JSON value.
    Truncated,
    /// Braces were found, but what they enclose is not JSON (the first parser error).
    NotJson(String),
}

/// What scanning one piece of text found.
#[derive(Debug, Default)]
struct Scan {
    /// Parsed top-level values: (text, value).
    values: Vec<(String, Value)>,
    /// The text ends inside an unclosed `{` or `[`.
    unclosed: bool,
    /// The first parser error of a balanced span.
    error: Option<String>,
}

/// How many times a scan restarts after an opener that never closes (a stray `{` in prose).
const MAX_RESTARTS: usize = 8;

/// The JSON of a model's answer, as (its text, its value); a bare array of objects is wrapped as
/// `{"objects": [...]}`.
///
/// Candidates, in order: ```json fenced blocks, other fenced blocks, the whole answer. In each, the
/// trimmed text itself, else every balanced top-level `{...}` or `[...]` span. The first candidate
/// holding something shaped like a structure (an object with `objects`, or an array of objects)
/// wins, the largest such value in it; failing that, the largest JSON object anywhere.
pub(crate) fn extract_json(raw: &str) -> Result<(String, Value), Extraction> {
    let blocks = fenced_blocks(raw);
    let json_blocks = blocks.iter().filter(|b| b.json).map(|b| b.body);
    let other_blocks = blocks.iter().filter(|b| !b.json).map(|b| b.body);
    let mut fallback: Option<(String, Value)> = None;
    let mut unclosed = false;
    let mut error = None;
    for candidate in json_blocks.chain(other_blocks).chain(std::iter::once(raw)) {
        let scan = scan(candidate);
        unclosed |= scan.unclosed;
        if error.is_none() {
            error = scan.error;
        }
        let structure = scan.values.iter().filter(|(_, v)| looks_like_structure(v)).max_by_key(|(t, _)| t.len());
        if let Some((text, value)) = structure {
            return Ok((text.clone(), wrap(value.clone())));
        }
        for (text, value) in scan.values {
            if value.is_object() && fallback.as_ref().is_none_or(|(t, _)| text.len() > t.len()) {
                fallback = Some((text, value));
            }
        }
    }
    match (fallback, unclosed, error) {
        (_, true, _) => Err(Extraction::Truncated),
        (Some(found), false, _) => Ok(found),
        (None, false, Some(error)) => Err(Extraction::NotJson(error)),
        (None, false, None) => Err(Extraction::NoJson),
    }
}

/// The first JSON object (or, with `array`, the first JSON array) of a model's answer: in a
/// ```json fenced block, another fenced block, or the answer itself, in that order. For tools
/// whose answer is one small decision rather than a structure.
pub(crate) fn first_json(raw: &str, array: bool) -> Result<Value, Extraction> {
    let blocks = fenced_blocks(raw);
    let json_blocks = blocks.iter().filter(|b| b.json).map(|b| b.body);
    let other_blocks = blocks.iter().filter(|b| !b.json).map(|b| b.body);
    let (mut unclosed, mut error) = (false, None);
    for candidate in json_blocks.chain(other_blocks).chain(std::iter::once(raw)) {
        let scan = scan(candidate);
        if let Some((_, value)) = scan.values.into_iter().find(|(_, v)| v.is_array() == array) {
            return Ok(value);
        }
        unclosed |= scan.unclosed;
        error = error.or(scan.error);
    }
    Err(match (unclosed, error) {
        (true, _) => Extraction::Truncated,
        (false, Some(error)) => Extraction::NotJson(error),
        (false, None) => Extraction::NoJson,
    })
}

fn looks_like_structure(value: &Value) -> bool {
    match value {
        Value::Object(map) => map.contains_key("objects"),
        Value::Array(items) => !items.is_empty() && items.iter().all(Value::is_object),
        _ => false,
    }
}

fn wrap(value: Value) -> Value {
    match value {
        Value::Array(items) => json!({"objects": items}),
        other => other,
    }
}

struct Fenced<'a> {
    json: bool,
    body: &'a str,
}

/// Markdown fenced blocks (```lang ... ```); an unclosed last fence runs to the end.
fn fenced_blocks(raw: &str) -> Vec<Fenced<'_>> {
    let mut blocks = Vec::new();
    let mut rest = raw;
    while let Some(open) = rest.find("```") {
        let after = &rest[open + 3..];
        let (info, body_start) = match after.find('\n') {
            Some(nl) => (&after[..nl], nl + 1),
            None => (after, after.len()),
        };
        let info = info.trim();
        // An info string is one word (```json); anything else means the fence holds JSON on its first line.
        let (json, body_start) = if info.contains(['{', '[']) {
            (false, 0)
        } else {
            (info.eq_ignore_ascii_case("json") || info.eq_ignore_ascii_case("jsonc"), body_start)
        };
        let body_all = &after[body_start..];
        match body_all.find("```") {
            Some(close) => {
                blocks.push(Fenced { json, body: &body_all[..close] });
                rest = &body_all[close + 3..];
            }
            None => {
                blocks.push(Fenced { json, body: body_all });
                break;
            }
        }
    }
    blocks
}

/// Balanced top-level JSON values in `text`.
fn scan(text: &str) -> Scan {
    let trimmed = text.trim();
    if let Ok(value @ (Value::Object(_) | Value::Array(_))) = serde_json::from_str::<Value>(trimmed) {
        return Scan { values: vec![(trimmed.to_owned(), value)], ..Scan::default() };
    }
    let mut out = Scan::default();
    let bytes = text.as_bytes();
    let mut from = 0;
    let mut restarts = 0;
    'outer: while from < bytes.len() {
        let mut depth = 0usize;
        let mut start = 0;
        let mut in_string = false;
        let mut escaped = false;
        for (i, &c) in bytes.iter().enumerate().skip(from) {
            if depth == 0 {
                if c == b'{' || c == b'[' {
                    depth = 1;
                    start = i;
                    in_string = false;
                    escaped = false;
                }
                continue;
            }
            if in_string {
                match c {
                    _ if escaped => escaped = false,
                    b'\\' => escaped = true,
                    b'"' => in_string = false,
                    _ => {}
                }
                continue;
            }
            match c {
                b'"' => in_string = true,
                b'{' | b'[' => depth += 1,
                b'}' | b']' => {
                    depth -= 1;
                    if depth == 0 {
                        // `{`, `[`, `}` and `]` are ASCII, so these are char boundaries.
                        let span = &text[start..=i];
                        match serde_json::from_str::<Value>(span) {
                            Ok(value) => out.values.push((span.to_owned(), value)),
                            Err(e) => {
                                out.error.get_or_insert_with(|| e.to_string());
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        if depth == 0 {
            break 'outer;
        }
        // The text ends inside the span opened at `start`: look for complete values inside it.
        out.unclosed = true;
        restarts += 1;
        if restarts > MAX_RESTARTS {
            break;
        }
        from = start + 1;
    }
    // A value found after an unclosed opener means the opener was stray prose, not a cut answer,
    // unless the value is only a fragment of the cut one (then it is not shaped like a structure).
    if out.values.iter().any(|(_, v)| looks_like_structure(v)) {
        out.unclosed = false;
    }
    out
}

/// An LLM failure (no usable provider, or a provider that failed to answer) is `internal_error`
/// ("LLM call failed: ..."), as the reference reports it; `error_kind` tells them apart.
fn unavailable(mut error: ToolError) -> ToolError {
    if matches!(error.code, ErrorCode::LlmProviderUnavailable | ErrorCode::LlmCallFailed) {
        error.code = ErrorCode::InternalError;
        error.message = format!("Internal error: LLM call failed: {}", error.message);
    }
    error
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{TEST_KEY, call, context, llm_context, llm_env, obj, rel, structure};
    use cks_testkit::{Provider, ProviderServer, Reply};

    fn graph() -> Value {
        structure(vec![
            obj("sun", "Star", "Sun", json!({"description": "The star at the centre"})),
            obj("earth", "Planet", "Earth", json!({"order_from_sun": 3})),
            rel("rel-earth-orbits-sun", &["earth", "sun"], "orbits"),
        ])
    }

    fn extracted(raw: &str) -> Value {
        extract_json(raw).expect("JSON is found").1
    }

    #[test]
    fn extraction_handles_fences_prose_and_arrays() {
        let g = graph();
        let text = serde_json::to_string_pretty(&g).unwrap();
        assert_eq!(extracted(&text), g, "bare JSON");
        assert_eq!(extracted(&format!("```json\n{text}\n```")), g, "json fence");
        assert_eq!(extracted(&format!("Here:\n```JSON\n{text}\n```\nDone.")), g, "fence with prose");
        assert_eq!(extracted(&format!("```\n{text}\n```")), g, "plain fence");
        assert_eq!(extracted(&format!("```{text}```")), g, "fence without newline");
        assert_eq!(extracted(&format!("Sure! {text} Hope that helps {{:)}}")), g, "prose around");
        assert_eq!(
            extracted(&format!("Example of the format: {{\"a\": 1}}. Result: {text}")),
            g,
            "the structure-shaped value wins over a smaller object"
        );
        assert_eq!(
            extracted(&format!("```python\nx = {{'a': 1}}\n```\n```json\n{text}\n```")),
            g,
            "a json fence is preferred"
        );
        assert_eq!(
            extracted(&format!("Use {{ braces like this. Then: {text}")),
            g,
            "a stray opener in prose is skipped"
        );
        let objects = serde_json::to_string(&g["objects"]).unwrap();
        assert_eq!(extracted(&format!("Objects:\n{objects}")), json!({"objects": g["objects"]}), "bare array");
        assert_eq!(extracted(r#"{"note": "a } in a string", "objects": []}"#)["note"], "a } in a string");
        assert_eq!(extracted(r#"Answer: {"id": "x"} end"#), json!({"id": "x"}), "a plain object as fallback");
    }

    #[test]
    fn extraction_reports_truncation_and_missing_json() {
        let text = serde_json::to_string_pretty(&graph()).unwrap();
        let cut = &text[..text.len() / 2];
        assert_eq!(extract_json(cut), Err(Extraction::Truncated));
        assert_eq!(extract_json(&format!("```json\n{cut}")), Err(Extraction::Truncated), "unclosed fence");
        assert_eq!(extract_json(&format!("Example: {{\"a\": 1}}. Result: {cut}")), Err(Extraction::Truncated));
        assert_eq!(extract_json("I cannot help with that."), Err(Extraction::NoJson));
        assert_eq!(extract_json("see [1]"), Err(Extraction::NoJson));
        assert!(matches!(extract_json("{not json at all}"), Err(Extraction::NotJson(_))));
        assert!(matches!(extract_json(""), Err(Extraction::NoJson)));
    }

    async fn sessions(ctx: &ToolContext) -> usize {
        ctx.runtime.list_sessions().await.unwrap().len()
    }

    #[tokio::test]
    async fn fenced_json_becomes_a_session() {
        let server = ProviderServer::start().await;
        let ctx = llm_context(&llm_env("anthropic", &server.base_url()));
        let answer = format!("Here is the structure:\n```json\n{}\n```\nAnything else?", graph());
        server.push(Reply::Text(answer));
        let args = json!({"text": "The Earth orbits the Sun.", "hint": "astronomy", "model": "claude-test", "max_tokens": 900});
        let result = call(&ctx, "construct_knowledge", args).await;
        let session_id = result["session_id"].as_str().expect("a session").to_owned();
        let info = ctx.runtime.info(&session_id).await.unwrap();
        let mut result = result;
        let document: Value = serde_json::from_str(result["serialized"].as_str().unwrap()).unwrap();
        let expected: Value =
            serde_json::from_str(&cks_core::json::to_canonical_string(&parse_value(graph()).unwrap())).unwrap();
        assert_eq!(document["objects"], expected["objects"]);
        assert_eq!(document["_cks_format_version"], "1.0", "a document for clients, as the reference writes it");
        result.as_object_mut().unwrap().remove("serialized");
        assert_eq!(
            result,
            json!({
                "constructed": true,
                "session_id": session_id,
                "version_id": info.latest_version_id,
                "objects_count": 2,
                "relations_count": 1,
                "model_used": "claude-test",
                "provider": "anthropic",
            })
        );
        assert_eq!(info.version_count, 1);
        let versions = ctx.runtime.list_versions(&session_id).await.unwrap();
        let metadata = &versions[0].metadata;
        assert_eq!(metadata["tool"], "construct_knowledge");
        assert_eq!(metadata["provider"], "anthropic");
        assert_eq!(metadata["model"], "claude-test");

        let requests = server.requests();
        assert_eq!(requests.len(), 1);
        let body = &requests[0].body;
        assert_eq!(requests[0].provider, Some(Provider::Anthropic));
        assert_eq!(body["model"], "claude-test");
        assert_eq!(body["max_tokens"], 900);
        let system = match &body["system"] {
            Value::String(text) => text.clone(),
            blocks => blocks[0]["text"].as_str().unwrap_or_default().to_owned(),
        };
        assert_eq!(system, SYSTEM_PROMPT);
        let user = body["messages"][0]["content"].to_string();
        assert!(user.contains("The Earth orbits the Sun.") && user.contains("Focus especially on: astronomy"));
    }

    #[tokio::test]
    async fn prose_around_json_works_with_an_openai_compatible_provider() {
        let server = ProviderServer::start().await;
        let ctx = llm_context(&llm_env("openai_compatible", &server.base_url()));
        server.push(Reply::Text(format!("Sure! Here you go: {} Let me know if you need more.", graph())));
        let result = call(&ctx, "construct_knowledge", json!({"text": "The Earth orbits the Sun."})).await;
        assert_eq!(result["constructed"], true, "{result}");
        assert_eq!(result["provider"], "openai_compatible");
        assert_eq!((result["objects_count"].as_u64(), result["relations_count"].as_u64()), (Some(2), Some(1)));
        assert_eq!(server.requests()[0].provider, Some(Provider::OpenAi));
        assert_eq!(sessions(&ctx).await, 1);
    }

    #[tokio::test]
    async fn a_bare_array_is_wrapped() {
        let server = ProviderServer::start().await;
        let ctx = llm_context(&llm_env("ollama", &server.base_url()));
        server.push(Reply::Text(format!("Objects:\n{}", graph()["objects"])));
        let result = call(&ctx, "construct_knowledge", json!({"text": "The Earth orbits the Sun."})).await;
        assert_eq!(result["constructed"], true, "{result}");
        assert_eq!(result["provider"], "ollama");
    }

    #[tokio::test]
    async fn a_truncated_answer_stores_nothing() {
        let server = ProviderServer::start().await;
        let ctx = llm_context(&llm_env("anthropic", &server.base_url()));
        let text = graph().to_string();
        let cut = format!("```json\n{}", &text[..text.len() - 40]);
        server.push(Reply::Text(cut.clone()));
        let result = call(&ctx, "construct_knowledge", json!({"text": "The Earth orbits the Sun."})).await;
        assert_eq!(
            result,
            json!({
                "error": "construct_knowledge_failed",
                "message": "The model's answer is truncated: it ends inside an unfinished JSON value. Retry with a \
                    larger 'max_tokens' or a shorter 'text'.",
                "reason": "truncated_output",
                "raw_output": cut,
            })
        );
        assert_eq!(sessions(&ctx).await, 0);
    }

    #[tokio::test]
    async fn an_answer_cut_at_the_token_limit_says_so() {
        let server = ProviderServer::start().await;
        let ctx = llm_context(&llm_env("anthropic", &server.base_url()));
        let cut = r#"{"objects": [{"identity": {"id": "sun", "type": "Star", "na"#;
        let body = json!({
            "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-test",
            "content": [{"type": "text", "text": cut}],
            "stop_reason": "max_tokens", "stop_sequence": null,
            "usage": {"input_tokens": 10, "output_tokens": 16},
        });
        server.push(Reply::Status {
            status: 200,
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.to_string(),
        });
        let result = call(&ctx, "construct_knowledge", json!({"text": "The Sun.", "max_tokens": 16})).await;
        assert_eq!(result["error"], "construct_knowledge_failed", "{result}");
        assert_eq!(
            result["message"],
            "The model's answer is truncated: it ends inside an unfinished JSON value (the model stopped at its \
             output token limit). Retry with a larger 'max_tokens' or a shorter 'text'."
        );
        assert_eq!(result["raw_output"], cut);
        assert_eq!(sessions(&ctx).await, 0);
    }

    #[tokio::test]
    async fn answers_without_usable_json_store_nothing() {
        let server = ProviderServer::start().await;
        let ctx = llm_context(&llm_env("anthropic", &server.base_url()));
        server.push(Reply::text("I'm sorry, I can't do that."));
        let result = call(&ctx, "construct_knowledge", json!({"text": "x"})).await;
        assert_eq!(
            result,
            json!({
                "error": "llm_output_parse_error",
                "message": "No JSON object found in the model's answer.",
                "raw_output": "I'm sorry, I can't do that.",
            })
        );
        server.push(Reply::text(r#"{"objects": [{"identity": {"id": "a", "type": "T"}}]}"#));
        let result = call(&ctx, "construct_knowledge", json!({"text": "x"})).await;
        assert_eq!(
            result,
            json!({
                "error": "cks_parse_error",
                "message": "Object #0: Missing identity field 'name'.",
                "raw_json": r#"{"objects": [{"identity": {"id": "a", "type": "T"}}]}"#,
            })
        );
        server.push(Reply::text(r#"{"objects": []}"#));
        let result = call(&ctx, "construct_knowledge", json!({"text": "x"})).await;
        assert_eq!(result["error"], "construct_knowledge_failed");
        assert_eq!(result["reason"], "empty_structure");
        assert_eq!(sessions(&ctx).await, 0);
    }

    #[tokio::test]
    async fn an_invalid_structure_returns_diagnostics_and_stores_nothing() {
        let server = ProviderServer::start().await;
        let ctx = llm_context(&llm_env("google", &server.base_url()));
        let dangling = structure(vec![obj("a", "T", "A", json!({})), rel("r", &["a", "ghost"], "knows")]);
        server.push(Reply::Text(dangling.to_string()));
        let result = call(&ctx, "construct_knowledge", json!({"text": "A knows a ghost."})).await;
        assert_eq!(
            result,
            json!({
                "error": "validation_failed",
                "message": "LLM-generated structure failed CKS validation.",
                "raw_json": dangling.to_string(),
                "diagnostics": [{
                    "code": "CKS-STRUCT-DANGLING-REF",
                    "severity": "error",
                    "message": result["diagnostics"][0]["message"],
                    "location": "r",
                }],
            })
        );
        assert!(result["diagnostics"][0]["message"].as_str().unwrap().contains("ghost"));
        assert_eq!(server.requests()[0].provider, Some(Provider::Gemini));
        assert_eq!(sessions(&ctx).await, 0);
    }

    #[tokio::test]
    async fn provider_failures_are_internal_errors_without_the_key() {
        let server = ProviderServer::start().await;
        let ctx = llm_context(&llm_env("anthropic", &server.base_url()));
        server.set_default(Some(Reply::ServerError));
        let result = call(&ctx, "construct_knowledge", json!({"text": "The Earth orbits the Sun."})).await;
        assert_eq!(result["error"], "internal_error", "{result}");
        assert_eq!(result["error_kind"], "server");
        assert!(result["message"].as_str().unwrap().starts_with("Internal error: LLM call failed: "), "{result}");
        assert_eq!(result["provider"], "anthropic");
        assert_eq!(server.requests().len(), 2, "one retry as configured");
        assert!(!result.to_string().contains(TEST_KEY));
        assert_eq!(sessions(&ctx).await, 0);

        // A garbled 200 is not retried and is reported the same way.
        server.set_default(None);
        server.push(Reply::Truncated);
        let result = call(&ctx, "construct_knowledge", json!({"text": "x"})).await;
        assert_eq!(result["error"], "internal_error", "{result}");
        assert_eq!(result["error_kind"], "malformed_response");
        assert!(!result.to_string().contains(TEST_KEY));
    }

    #[tokio::test]
    async fn no_provider_is_an_internal_error_as_in_the_reference() {
        let result = call(&context(), "construct_knowledge", json!({"text": "x"})).await;
        assert_eq!(
            result,
            json!({"error": "internal_error", "message": "Internal error: LLM call failed: No LLM client is configured."})
        );

        // Anthropic chosen without its key: the client refuses before any request.
        let server = ProviderServer::start().await;
        let env: Vec<_> =
            llm_env("anthropic", &server.base_url()).into_iter().filter(|(k, _)| k != "ANTHROPIC_API_KEY").collect();
        let ctx = llm_context(&env);
        let result = call(&ctx, "construct_knowledge", json!({"text": "x"})).await;
        assert_eq!(result["error"], "internal_error", "{result}");
        assert_eq!(result["error_kind"], "not_configured");
        assert!(result["message"].as_str().unwrap().starts_with("Internal error: LLM call failed: "));
        assert!(result["message"].as_str().unwrap().contains("ANTHROPIC_API_KEY"));
        assert!(server.requests().is_empty());
        assert_eq!(sessions(&ctx).await, 0);
    }

    #[tokio::test]
    async fn blank_text_is_a_missing_parameter() {
        let ctx = context();
        assert_eq!(call(&ctx, "construct_knowledge", json!({})).await["error"], "missing_parameter");
        let result = call(&ctx, "construct_knowledge", json!({"text": "  \n"})).await;
        assert_eq!(result, json!({"error": "missing_parameter", "message": "Missing required parameter: 'text'."}));
    }
}
