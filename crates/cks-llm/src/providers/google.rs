//! Google Gemini, native API (`POST {base}/models/{model}:generateContent`, header `x-goog-api-key`).
//!
//! The native API is used because the OpenAI shim drops `thoughtSignature`. What this adapter guarantees:
//! - every model part is sent back as it came, its `thoughtSignature` on the same part (signatures live in
//!   the block's [`ProviderState`]; an empty text part that carried only a signature is kept as an empty
//!   text block), and all calls of one step stay in one `model` content;
//! - one `functionResponse` per call, in one `user` content, named after the matching `tool_use` (found by
//!   id; ids are unique across the conversation) with an object `response` (`{"result": ...}` or
//!   `{"error": ...}` for non-objects and failures), echoing `functionCall.id` only when Gemini gave one;
//! - tool schemas rebuilt from Gemini's allowlist (see `schema.rs`) and function names made valid, mapped
//!   back on the way in;
//! - tool calls of the current turn that Gemini did not produce (history from another provider) get
//!   Google's documented placeholder signature, since thinking models reject unsigned calls there.
//!
//! Structured output: `generationConfig.responseMimeType: "application/json"` with the schema as
//! `responseJsonSchema`, which takes JSON Schema, rather than `responseSchema`, Google's OpenAPI-subset
//! `Schema` (deprecated in the published spec, and lossy: it has no `$ref`, `additionalProperties` or
//! `prefixItems`). Google documents only some JSON Schema keywords as supported there, so the schema is
//! cut down to those on the way out (see `schema.rs`): unsupported keywords are dropped, `const` becomes a
//! one-value `enum`, `allOf` is merged, `definitions` become `$defs`. The answer is the candidate's text.
//!
//! Embeddings: `POST {base}/models/{model}:batchEmbedContents` with one `{model: "models/{model}", content:
//! {parts: [{text}]}}` per text (each request must name the URL's model), at most 100 to a call (the API's
//! limit), answered by `{embeddings: [{values}]}` in the order of the requests.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{
    CallSettings, DecodeCtx, ErrorInfo, Fault, HttpCall, Method, ModelInfo, StreamDecoder, as_object, own_state,
    tool_names_by_id,
};
use super::{Adapter, Auto, EmbeddingEndpoint, Key, Variable};
use crate::config::ProviderConfig;
use crate::conversation::{
    ChatRequest, ChatResponse, ContentBlock, Message, ProviderKind, ProviderState, Role, StopReason, Usage,
};
use crate::error::{ErrorContext, ErrorKind, LlmError};
use crate::retry::parse_proto_duration;
use crate::stream::{Frame, Framing};

/// This provider's entry in the table of providers.
pub(crate) const ADAPTER: Adapter = Adapter {
    name: "google",
    title: "Google Gemini",
    key_variables: &[
        Variable {
            name: "CKS_GOOGLE_API_KEY",
            default: None,
            meaning: "Google Gemini API key (GOOGLE_API_KEY is used when unset)",
        },
        Variable { name: "GOOGLE_API_KEY", default: None, meaning: "Google Gemini API key (fallback)" },
    ],
    key: Key::Required,
    credentials: "CKS_GOOGLE_API_KEY (or GOOGLE_API_KEY)",
    base_url: Variable {
        name: "CKS_GOOGLE_BASE_URL",
        default: Some("https://generativelanguage.googleapis.com/v1beta"),
        meaning: "Gemini API base URL",
    },
    model: Variable { name: "CKS_GOOGLE_MODEL", default: Some("gemini-2.5-flash"), meaning: "Gemini model" },
    model_fallback: None,
    help: "google (CKS_GOOGLE_API_KEY or GOOGLE_API_KEY, CKS_GOOGLE_MODEL, CKS_GOOGLE_BASE_URL)",
    unreachable_hint: None,
    auto: Auto::Never,
    encode: |request, config, settings, ctx| encode(request, config, settings, ctx),
    decode,
    framing: Framing::Sse,
    stream: |ctx| Box::new(Stream::new(ctx)),
    parse_error,
    encode_list_models,
    decode_list_models,
    embeddings: Some(EmbeddingEndpoint {
        batch_size: 100,
        default_model: None,
        example_model: "gemini-embedding-001",
        encode: encode_embed,
        decode: decode_embed,
    }),
};

const KIND: ProviderKind = ProviderKind::Google;

/// Google's documented value for function calls that have no real signature (e.g. a conversation that
/// started with another provider). Used only where a thinking model would otherwise reject the request.
const PLACEHOLDER_SIGNATURE: &str = "skip_thought_signature_validator";

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Request {
    contents: Vec<Content>,
    #[serde(skip_serializing_if = "Option::is_none")]
    system_instruction: Option<Content>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Tool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_config: Option<ToolConfig>,
    generation_config: GenerationConfig,
}

#[derive(Serialize)]
struct Content {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    parts: Vec<Part>,
}

#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct Part {
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thought: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    function_call: Option<FunctionCall>,
    #[serde(skip_serializing_if = "Option::is_none")]
    function_response: Option<FunctionResponse>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thought_signature: Option<String>,
}

#[derive(Serialize)]
struct FunctionCall {
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<String>,
    name: String,
    args: Value,
}

#[derive(Serialize)]
struct FunctionResponse {
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<String>,
    name: String,
    response: Value,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Tool {
    function_declarations: Vec<FunctionDeclaration>,
}

#[derive(Serialize)]
struct FunctionDeclaration {
    name: String,
    description: String,
    parameters: Value,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ToolConfig {
    function_calling_config: FunctionCallingConfig,
}

#[derive(Serialize)]
struct FunctionCallingConfig {
    mode: &'static str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct GenerationConfig {
    max_output_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_mime_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_json_schema: Option<Value>,
}

/// A function name Gemini accepts: starts with a letter or `_`, then letters, digits, `_ . : -`, at most 64.
fn function_name(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-') { c } else { '_' })
        .collect();
    if !out.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
        out.insert(0, '_');
    }
    out.truncate(64);
    out
}

/// The `response` object for a tool result: JSON objects as they are, anything else wrapped.
fn response_object(content: &str, is_error: bool) -> Value {
    let parsed = serde_json::from_str::<Value>(content).unwrap_or_else(|_| Value::String(content.to_owned()));
    match (parsed, is_error) {
        (v @ Value::Object(_), false) => v,
        (v, false) => json!({ "result": v }),
        (v, true) => json!({ "error": v }),
    }
}

/// Build the request. Fills `ctx.tool_names` with the names that had to change.
pub(crate) fn encode(
    request: &ChatRequest,
    config: &ProviderConfig,
    settings: &CallSettings,
    ctx: &mut DecodeCtx,
) -> Result<HttpCall, LlmError> {
    let fail = |m: String| LlmError::BadRequest(ErrorContext::new(KIND, &settings.model, m));
    let names = tool_names_by_id(request);
    let mut call_ids = std::collections::HashMap::new();
    for m in &request.messages {
        for b in &m.content {
            if let ContentBlock::ToolUse { id, provider_state, .. } = b {
                call_ids.insert(id.as_str(), own_state(provider_state.as_ref(), KIND).and_then(|s| s.call_id.clone()));
            }
        }
    }
    let mut wire_name = |name: &str| {
        let w = function_name(name);
        if w != name {
            ctx.tool_names.insert(w.clone(), name.to_owned());
        }
        w
    };

    let mut contents: Vec<Content> = Vec::new();
    for m in &request.messages {
        let mut parts = Vec::new();
        let mut results = Vec::new();
        for b in &m.content {
            match b {
                ContentBlock::Text { text, provider_state } => {
                    let sig = own_state(provider_state.as_ref(), KIND).and_then(|s| s.thought_signature.clone());
                    // Empty text is dropped unless it is the part a signature came on.
                    if !text.is_empty() || sig.is_some() {
                        parts.push(Part { text: Some(text.clone()), thought_signature: sig, ..Part::default() });
                    }
                }
                ContentBlock::Thinking { thinking, provider_state, .. } => {
                    if let Some(s) = own_state(provider_state.as_ref(), KIND) {
                        parts.push(Part {
                            text: Some(thinking.clone()),
                            thought: Some(true),
                            thought_signature: s.thought_signature.clone(),
                            ..Part::default()
                        });
                    }
                }
                ContentBlock::ToolUse { id, name, input, provider_state } => {
                    let state = own_state(provider_state.as_ref(), KIND);
                    parts.push(Part {
                        function_call: Some(FunctionCall {
                            id: call_ids.get(id.as_str()).cloned().flatten(),
                            name: wire_name(name),
                            args: as_object(input),
                        }),
                        thought_signature: state.and_then(|s| s.thought_signature.clone()),
                        ..Part::default()
                    });
                }
                ContentBlock::ToolResult { tool_use_id, content, is_error } => {
                    let Some(name) = names.get(tool_use_id.as_str()) else {
                        return Err(fail(format!(
                            "tool_result {tool_use_id:?} answers no tool_use in the conversation; Gemini needs \
                             the function name"
                        )));
                    };
                    results.push(Part {
                        function_response: Some(FunctionResponse {
                            id: call_ids.get(tool_use_id.as_str()).cloned().flatten(),
                            name: wire_name(name),
                            response: response_object(content, *is_error),
                        }),
                        ..Part::default()
                    });
                }
                ContentBlock::RedactedThinking { .. } => {}
            }
        }
        // Function responses first, then any text the user added.
        results.extend(parts);
        if results.is_empty() {
            continue;
        }
        let role = match m.role {
            Role::User => "user",
            Role::Assistant => "model",
        };
        match contents.last_mut() {
            Some(last) if last.role == Some(role) => last.parts.extend(results),
            _ => contents.push(Content { role: Some(role), parts: results }),
        }
    }
    if contents.is_empty() {
        return Err(fail("the conversation has no non-empty message to send".into()));
    }
    sign_current_turn(&mut contents);

    let tools: Vec<FunctionDeclaration> = request
        .tools
        .iter()
        .map(|t| FunctionDeclaration {
            name: wire_name(&t.name),
            description: t.description.clone(),
            parameters: super::schema::gemini_parameters(&t.input_schema),
        })
        .collect();
    let body = Request {
        contents,
        system_instruction: request
            .system
            .as_deref()
            .filter(|s| !s.is_empty())
            .map(|s| Content { role: None, parts: vec![Part { text: Some(s.to_owned()), ..Part::default() }] }),
        tool_config: (!tools.is_empty())
            .then_some(ToolConfig { function_calling_config: FunctionCallingConfig { mode: "AUTO" } }),
        tools: if tools.is_empty() { Vec::new() } else { vec![Tool { function_declarations: tools }] },
        generation_config: GenerationConfig {
            max_output_tokens: settings.max_tokens,
            temperature: request.temperature.map(super::schema::round_f32),
            response_mime_type: request.output.is_some().then_some("application/json"),
            response_json_schema: request.output.as_ref().map(|o| super::schema::gemini_response_schema(&o.schema)),
        },
    };
    let body = serde_json::to_value(&body).map_err(|e| fail(format!("cannot encode request: {e}")))?;
    let model = path_segment(settings.model.strip_prefix("models/").unwrap_or(&settings.model));
    let url = if settings.stream {
        format!("{}/models/{model}:streamGenerateContent?alt=sse", config.base_url)
    } else {
        format!("{}/models/{model}:generateContent", config.base_url)
    };
    Ok(HttpCall { method: Method::Post, url, headers: headers(config), body: Some(body) })
}

/// `text` as one URL path segment: everything but unreserved characters percent-encoded, so a model name
/// can never add a segment, a query or a fragment to the URL.
fn path_segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// In the current turn (after the last user content with text), a step's first function call must carry
/// a signature on thinking models; calls Gemini did not make get the placeholder.
fn sign_current_turn(contents: &mut [Content]) {
    let start = contents
        .iter()
        .rposition(|c| c.role == Some("user") && c.parts.iter().any(|p| p.function_response.is_none()))
        .map_or(0, |i| i + 1);
    for c in contents[start..].iter_mut().filter(|c| c.role == Some("model")) {
        let signed = c.parts.iter().any(|p| p.thought_signature.is_some());
        if let Some(first) = c.parts.iter_mut().find(|p| p.function_call.is_some())
            && !signed
        {
            first.thought_signature = Some(PLACEHOLDER_SIGNATURE.to_owned());
        }
    }
}

fn headers(config: &ProviderConfig) -> Vec<(&'static str, String)> {
    config.api_key.iter().map(|k| ("x-goog-api-key", k.expose().to_owned())).collect()
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Response {
    #[serde(default)]
    candidates: Vec<Candidate>,
    #[serde(default)]
    usage_metadata: Option<UsageMetadata>,
    #[serde(default)]
    model_version: Option<String>,
    #[serde(default)]
    prompt_feedback: Option<PromptFeedback>,
    #[serde(default)]
    error: Option<GoogleError>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PromptFeedback {
    #[serde(default)]
    block_reason: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Candidate {
    #[serde(default)]
    content: Option<RespContent>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct RespContent {
    #[serde(default)]
    parts: Vec<RespPart>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RespPart {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    thought: Option<bool>,
    #[serde(default)]
    function_call: Option<RespFunctionCall>,
    #[serde(default)]
    thought_signature: Option<String>,
}

#[derive(Deserialize)]
struct RespFunctionCall {
    #[serde(default)]
    id: Option<String>,
    name: String,
    #[serde(default)]
    args: Value,
}

#[derive(Deserialize, Clone, Copy, Default)]
#[serde(rename_all = "camelCase")]
struct UsageMetadata {
    #[serde(default)]
    prompt_token_count: Option<u64>,
    #[serde(default)]
    candidates_token_count: Option<u64>,
    #[serde(default)]
    thoughts_token_count: Option<u64>,
}

impl From<UsageMetadata> for Usage {
    fn from(u: UsageMetadata) -> Self {
        Usage {
            input_tokens: u.prompt_token_count.unwrap_or(0),
            // Thinking tokens are billed as output.
            output_tokens: u.candidates_token_count.unwrap_or(0) + u.thoughts_token_count.unwrap_or(0),
        }
    }
}

fn state(signature: Option<String>, call_id: Option<String>) -> Option<ProviderState> {
    (signature.is_some() || call_id.is_some()).then(|| ProviderState {
        thought_signature: signature,
        call_id,
        ..ProviderState::new(KIND)
    })
}

/// One response part as a block (`None` for part kinds outside our model, e.g. executable code).
fn block(p: RespPart, ctx: &mut DecodeCtx) -> Option<ContentBlock> {
    let sig = p.thought_signature;
    if let Some(fc) = p.function_call {
        return Some(ContentBlock::ToolUse {
            id: ctx.ids.accept(fc.id.as_deref()),
            name: ctx.tool_name(&fc.name),
            input: as_object(&fc.args),
            provider_state: state(sig, fc.id),
        });
    }
    if p.thought == Some(true) {
        return Some(ContentBlock::Thinking {
            thinking: p.text.unwrap_or_default(),
            signature: None,
            provider_state: Some(ProviderState { thought_signature: sig, ..ProviderState::new(KIND) }),
        });
    }
    match (p.text, sig) {
        (None, None) => None,
        (text, sig) => Some(ContentBlock::Text { text: text.unwrap_or_default(), provider_state: state(sig, None) }),
    }
}

fn stop_reason(s: Option<&str>) -> StopReason {
    match s {
        Some("STOP") | None => StopReason::EndTurn,
        Some("MAX_TOKENS") => StopReason::MaxTokens,
        Some("SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII" | "IMAGE_SAFETY") => {
            StopReason::Refusal
        }
        Some(other) => StopReason::Other(other.to_owned()),
    }
}

/// Parse a 2xx answer.
pub(crate) fn decode(body: &[u8], ctx: &mut DecodeCtx) -> Result<ChatResponse, Fault> {
    let r: Response = serde_json::from_slice(body).map_err(|e| Fault::bad_json("Gemini answer", &e))?;
    if let Some(e) = r.error {
        let info = error_info(e);
        return Err(Fault {
            retryable: info.retryable,
            ..Fault::new(info.kind.unwrap_or(ErrorKind::Server), format!("error inside a 200 answer: {}", info.message))
        });
    }
    let Some(candidate) = r.candidates.into_iter().next() else {
        return Err(match r.prompt_feedback.and_then(|f| f.block_reason) {
            Some(reason) => Fault::new(ErrorKind::BadRequest, format!("Gemini blocked the prompt ({reason})")),
            None => Fault::malformed("the answer has no candidates"),
        });
    };
    let parts = candidate.content.map(|c| c.parts).unwrap_or_default();
    let content = parts.into_iter().filter_map(|p| block(p, ctx)).collect();
    Ok(ChatResponse {
        message: Message { role: Role::Assistant, content },
        stop_reason: stop_reason(candidate.finish_reason.as_deref()),
        usage: r.usage_metadata.map(Usage::from).unwrap_or_default(),
        model: r.model_version.unwrap_or_else(|| ctx.model.clone()),
        provider: KIND,
        requests: 1,
    })
}

#[derive(Deserialize)]
struct ErrorEnvelope {
    error: GoogleError,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ErrorBody {
    /// The streaming endpoint without `alt=sse` wraps errors in an array. Tried first: serde would
    /// otherwise read a one-element array as the struct's fields in order.
    Many(Vec<ErrorEnvelope>),
    One(ErrorEnvelope),
}

#[derive(Deserialize)]
struct GoogleError {
    #[serde(default)]
    message: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    details: Vec<Detail>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Detail {
    #[serde(default)]
    retry_delay: Option<String>,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    violations: Vec<Violation>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Violation {
    #[serde(default)]
    quota_id: Option<String>,
}

fn error_info(e: GoogleError) -> ErrorInfo {
    let mut kind = match e.status.as_str() {
        "RESOURCE_EXHAUSTED" => Some(ErrorKind::RateLimited),
        "UNAVAILABLE" => Some(ErrorKind::Overloaded),
        "INVALID_ARGUMENT" | "NOT_FOUND" | "FAILED_PRECONDITION" | "OUT_OF_RANGE" => Some(ErrorKind::BadRequest),
        "PERMISSION_DENIED" | "UNAUTHENTICATED" => Some(ErrorKind::Auth),
        "INTERNAL" | "UNKNOWN" => Some(ErrorKind::Server),
        "DEADLINE_EXCEEDED" => Some(ErrorKind::Timeout),
        _ => None,
    };
    // An invalid key is reported as 400 INVALID_ARGUMENT; it is an auth problem for the operator.
    if e.details.iter().any(|d| d.reason.as_deref() == Some("API_KEY_INVALID")) {
        kind = Some(ErrorKind::Auth);
    }
    let retry_after = e.details.iter().find_map(|d| d.retry_delay.as_deref().and_then(parse_proto_duration));
    // A daily quota does not clear until the day resets: retrying is pointless.
    let daily = e
        .details
        .iter()
        .flat_map(|d| &d.violations)
        .any(|v| v.quota_id.as_deref().is_some_and(|q| q.contains("PerDay")));
    let mut message = if e.status.is_empty() { e.message } else { format!("{}: {}", e.status, e.message) };
    if daily {
        message.push_str(" (daily quota exhausted: it resets at midnight Pacific time)");
    }
    ErrorInfo { message, kind, retry_after, retryable: daily.then_some(false) }
}

/// Parse an error body (Google RPC style, possibly wrapped in an array).
pub(crate) fn parse_error(body: &[u8]) -> ErrorInfo {
    match serde_json::from_slice::<ErrorBody>(body) {
        Ok(ErrorBody::One(e)) => error_info(e.error),
        Ok(ErrorBody::Many(v)) => v.into_iter().next().map(|e| error_info(e.error)).unwrap_or_default(),
        Err(_) => ErrorInfo::default(),
    }
}

/// `GET {base}/models`.
pub(crate) fn encode_list_models(config: &ProviderConfig) -> HttpCall {
    HttpCall {
        method: Method::Get,
        url: format!("{}/models?pageSize=1000", config.base_url),
        headers: headers(config),
        body: None,
    }
}

#[derive(Deserialize)]
struct ModelList {
    #[serde(default)]
    models: Vec<ModelEntry>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ModelEntry {
    name: String,
    #[serde(default)]
    display_name: Option<String>,
    #[serde(default)]
    supported_generation_methods: Option<Vec<String>>,
}

/// Parse the model list, keeping models that can chat.
pub(crate) fn decode_list_models(body: &[u8]) -> Result<Vec<ModelInfo>, Fault> {
    let list: ModelList = serde_json::from_slice(body).map_err(|e| Fault::bad_json("Gemini model list", &e))?;
    Ok(list
        .models
        .into_iter()
        .filter(|m| m.supported_generation_methods.as_ref().is_none_or(|g| g.iter().any(|x| x == "generateContent")))
        .map(|m| ModelInfo {
            id: m.name.strip_prefix("models/").unwrap_or(&m.name).to_owned(),
            display_name: m.display_name,
            provider: KIND,
        })
        .collect())
}

/// `POST {base}/models/{model}:batchEmbedContents` for these texts.
pub(crate) fn encode_embed(texts: &[String], config: &ProviderConfig, model: &str) -> HttpCall {
    let model = model.strip_prefix("models/").unwrap_or(model);
    let name = format!("models/{model}");
    let requests: Vec<Value> =
        texts.iter().map(|text| json!({ "model": name, "content": { "parts": [{ "text": text }] } })).collect();
    HttpCall {
        method: Method::Post,
        url: format!("{}/models/{}:batchEmbedContents", config.base_url, path_segment(model)),
        headers: headers(config),
        body: Some(json!({ "requests": requests })),
    }
}

#[derive(Deserialize)]
struct EmbedResponse {
    #[serde(default)]
    embeddings: Vec<ContentEmbedding>,
}

#[derive(Deserialize)]
struct ContentEmbedding {
    #[serde(default)]
    values: Vec<f32>,
}

/// Parse a `batchEmbedContents` answer: its vectors, in the order of the requests.
pub(crate) fn decode_embed(body: &[u8]) -> Result<Vec<Vec<f32>>, Fault> {
    let response: EmbedResponse =
        serde_json::from_slice(body).map_err(|e| Fault::bad_json("Gemini embeddings answer", &e))?;
    Ok(response.embeddings.into_iter().map(|e| e.values).collect())
}

// ---- streaming -------------------------------------------------------------------------------------------

/// Accumulates `alt=sse` chunks (each a whole `GenerateContentResponse`).
pub(crate) struct Stream {
    ctx: DecodeCtx,
    blocks: Vec<ContentBlock>,
    finish: Option<String>,
    usage: Usage,
    model: Option<String>,
}

impl Stream {
    pub(crate) fn new(ctx: DecodeCtx) -> Self {
        Stream { ctx, blocks: Vec::new(), finish: None, usage: Usage::default(), model: None }
    }

    /// Text continues the previous text part only when neither carries a signature: a signed part is never
    /// merged into another (the signature belongs to exactly the part it came on).
    fn push(&mut self, p: RespPart, shown: &mut String) {
        if let Some(fc) = &p.function_call
            && let Some(id) = fc.id.as_deref()
            && let Some(ContentBlock::ToolUse { input, .. }) = self.blocks.iter_mut().find(|b| {
                matches!(b, ContentBlock::ToolUse { provider_state: Some(s), .. } if s.call_id.as_deref() == Some(id))
            })
        {
            // The same call again (by id): the later arguments win.
            *input = as_object(&fc.args);
            return;
        }
        let Some(new) = block(p, &mut self.ctx) else { return };
        if let ContentBlock::Text { text, .. } = &new {
            shown.push_str(text);
        }
        match (self.blocks.last_mut(), &new) {
            (
                Some(ContentBlock::Text { text, provider_state: None }),
                ContentBlock::Text { text: more, provider_state: None },
            ) => text.push_str(more),
            (
                Some(ContentBlock::Thinking { thinking, provider_state: Some(a), .. }),
                ContentBlock::Thinking { thinking: more, provider_state: Some(b), .. },
            ) if a.thought_signature.is_none() && b.thought_signature.is_none() => thinking.push_str(more),
            _ => self.blocks.push(new),
        }
    }
}

impl StreamDecoder for Stream {
    fn on_frame(&mut self, frame: Frame, shown: &mut String) -> Result<bool, Fault> {
        let Frame::Event { data, .. } = frame else { return Ok(false) };
        let r: Response = serde_json::from_str(&data).map_err(|e| Fault::bad_json("Gemini stream chunk", &e))?;
        if let Some(e) = r.error {
            let info = error_info(e);
            let transient = info.kind.is_none_or(|k| {
                matches!(k, ErrorKind::RateLimited | ErrorKind::Overloaded | ErrorKind::Server | ErrorKind::Timeout)
            });
            return Err(Fault {
                retry_after: info.retry_after,
                retryable: Some(info.retryable.unwrap_or(transient)),
                ..Fault::new(ErrorKind::StreamError, format!("error inside the stream: {}", info.message))
            });
        }
        if let Some(u) = r.usage_metadata {
            self.usage = u.into();
        }
        if r.model_version.is_some() {
            self.model = r.model_version;
        }
        if let Some(c) = r.candidates.into_iter().next() {
            for p in c.content.map(|c| c.parts).unwrap_or_default() {
                self.push(p, shown);
            }
            if c.finish_reason.is_some() {
                self.finish = c.finish_reason;
            }
        }
        // No end marker: the stream simply ends after the chunk with `finishReason`.
        Ok(false)
    }

    fn finish(self: Box<Self>) -> Result<ChatResponse, Fault> {
        let this = *self;
        if this.finish.is_none() {
            return Err(Fault::truncated_stream());
        }
        // A trailing empty, unsigned text part (common in the last chunk) carries nothing.
        let content: Vec<ContentBlock> = this
            .blocks
            .into_iter()
            .filter(|b| !matches!(b, ContentBlock::Text { text, provider_state: None } if text.is_empty()))
            .collect();
        Ok(ChatResponse {
            message: Message { role: Role::Assistant, content },
            stop_reason: stop_reason(this.finish.as_deref()),
            usage: this.usage,
            model: this.model.unwrap_or(this.ctx.model),
            provider: KIND,
            requests: 1,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::test_support::*;
    use crate::providers::{decode_chat, encode_chat};

    fn encode_req(req: &ChatRequest) -> (HttpCall, DecodeCtx) {
        encode_chat(KIND, req, &config(KIND), &settings("gemini-2.5-flash", 1024)).unwrap()
    }

    #[test]
    fn the_model_is_one_escaped_path_segment() {
        let (call, _) = encode_chat(KIND, &weather_turn1(), &config(KIND), &settings("../x?y#", 1024)).unwrap();
        assert_eq!(call.url, "http://provider.test/v1beta/models/..%2Fx%3Fy%23:generateContent");
        let (call, _) = encode_chat(KIND, &weather_turn1(), &config(KIND), &settings("models/tuned:v1", 1024)).unwrap();
        assert_eq!(call.url, "http://provider.test/v1beta/models/tuned%3Av1:generateContent");
    }

    #[test]
    fn encodes_the_fixture_requests() {
        let (call, _) = encode_req(&weather_turn1());
        assert_eq!(call.url, "http://provider.test/v1beta/models/gemini-2.5-flash:generateContent");
        assert_eq!(call.headers, vec![("x-goog-api-key", "test-key-google".to_owned())]);
        let body = call.body.unwrap();
        assert_valid(KIND, &body);
        let expected = fixture_json("gemini_request_turn1.json");
        assert_eq!(body["contents"], expected["contents"]);
        assert_eq!(body["toolConfig"], expected["toolConfig"]);
        // Types are written in the proto's enum spelling.
        assert_eq!(
            body["tools"][0]["functionDeclarations"][0]["parameters"],
            json!({"type": "OBJECT", "properties": {"city": {"type": "STRING"}}, "required": ["city"]})
        );

        let assistant = tool_use_from_fixture(KIND);
        let (call, _) = encode_req(&weather_turn2(&assistant));
        let body = call.body.unwrap();
        assert_valid(KIND, &body);
        // The model turn goes back exactly as it came, signature on the same part; the result is wrapped.
        let expected = fixture_json("gemini_request_turn2.json");
        assert_eq!(body["contents"], expected["contents"]);
    }

    #[test]
    fn decodes_function_call_with_signature_and_generated_id() {
        let mut ctx = ctx_for(&weather_turn1(), "gemini-2.5-flash");
        let r = decode_chat(KIND, fixture("gemini_function_call.json").as_bytes(), &mut ctx).unwrap();
        assert_eq!(r.stop_reason, StopReason::ToolUse, "STOP with a functionCall part is a tool call");
        assert_eq!(r.usage, Usage { input_tokens: 58, output_tokens: 63 });
        let ContentBlock::ToolUse { id, name, input, provider_state } = &r.message.content[0] else { panic!() };
        assert!(id.starts_with("call_"));
        assert_eq!((name.as_str(), input), ("get_weather", &json!({"city": "Oslo"})));
        assert_eq!(
            provider_state.as_ref().unwrap().thought_signature.as_deref(),
            Some("CiQB0e2Kb7xExampleOpaqueSignatureBase64Zz9Q==")
        );
        // A second call in a later turn gets a different id (the reference reused `google_tool_0`).
        let req = weather_turn2(&r.message);
        let mut ctx = ctx_for(&req, "m");
        let r2 = decode_chat(KIND, fixture("gemini_function_call.json").as_bytes(), &mut ctx).unwrap();
        assert_ne!(r2.message.tool_calls()[0].id, id.as_str());
        let r = decode_chat(KIND, fixture("gemini_final_text.json").as_bytes(), &mut ctx).unwrap();
        assert_eq!(r.text(), "It is 4 C with light snow in Oslo.");
    }

    #[test]
    fn parallel_calls_results_ids_and_names() {
        let body = json!({"candidates": [{"content": {"role": "model", "parts": [
            {"functionCall": {"id": "g1", "name": "my_tool_x", "args": {"a": 1}}, "thoughtSignature": "S1"},
            {"functionCall": {"name": "get_weather", "args": {}}}]}, "finishReason": "STOP"}]});
        let mut req = weather_turn1();
        req.tools.push(ToolSpec {
            name: "my tool/x".into(),
            description: "d".into(),
            input_schema: json!({"type": "object"}),
        });
        let (call, mut ctx) = encode_req(&req);
        assert_eq!(call.body.unwrap()["tools"][0]["functionDeclarations"][1]["name"], "my_tool_x");
        let r = decode_chat(KIND, body.to_string().as_bytes(), &mut ctx).unwrap();
        let calls = r.message.tool_calls();
        assert_eq!(calls[0].name, "my tool/x", "mapped back to the declared name");
        assert_eq!(calls[0].id, "g1");
        req.messages.push(r.message.clone());
        req.messages.push(Message::tool_results(vec![
            ToolResult { tool_use_id: calls[0].id.into(), content: "[1,2]".into(), is_error: false },
            ToolResult { tool_use_id: calls[1].id.into(), content: "boom".into(), is_error: true },
        ]));
        let body = encode_req(&req).0.body.unwrap();
        assert_valid(KIND, &body);
        let model = &body["contents"][1];
        assert_eq!(model["parts"].as_array().unwrap().len(), 2, "both calls in one model content");
        assert_eq!(model["parts"][0]["thoughtSignature"], "S1");
        assert!(model["parts"][1].get("thoughtSignature").is_none(), "only the first call is signed");
        assert_eq!(model["parts"][0]["functionCall"]["id"], "g1");
        assert!(model["parts"][1]["functionCall"].get("id").is_none(), "generated ids are never sent");
        let user = &body["contents"][2]["parts"];
        assert_eq!(
            user[0]["functionResponse"],
            json!({"id": "g1", "name": "my_tool_x", "response": {"result": [1, 2]}})
        );
        assert_eq!(user[1]["functionResponse"], json!({"name": "get_weather", "response": {"error": "boom"}}));
    }

    #[test]
    fn foreign_history_is_stripped_and_current_turn_calls_get_the_placeholder() {
        let mut req = weather_turn1();
        req.messages.push(Message {
            role: Role::Assistant,
            content: vec![
                foreign_thinking(ProviderKind::OpenaiCompatible),
                ContentBlock::ToolUse {
                    id: "toolu_1".into(),
                    name: "get_weather".into(),
                    input: json!({"city": "Oslo"}),
                    provider_state: Some(ProviderState {
                        raw_arguments: Some("x".into()),
                        ..ProviderState::new(ProviderKind::OpenaiCompatible)
                    }),
                },
            ],
        });
        req.messages.push(Message::tool_results(vec![ToolResult {
            tool_use_id: "toolu_1".into(),
            content: "{\"t\":4}".into(),
            is_error: false,
        }]));
        let body = encode_req(&req).0.body.unwrap();
        assert_valid(KIND, &body);
        assert_eq!(
            body["contents"][1]["parts"],
            json!([{"functionCall": {"name": "get_weather", "args": {"city": "Oslo"}}, "thoughtSignature": PLACEHOLDER_SIGNATURE}])
        );
        assert_eq!(body["contents"][2]["parts"][0]["functionResponse"]["response"], json!({"t": 4}));
        // Once a new user text starts a new turn, the old call needs no signature.
        req.messages.push(Message::assistant("done"));
        req.messages.push(Message::user("next"));
        let body = encode_req(&req).0.body.unwrap();
        assert!(body["contents"][1]["parts"][0].get("thoughtSignature").is_none());
    }

    #[test]
    fn unknown_tool_result_is_a_local_bad_request() {
        let mut req = weather_turn1();
        req.messages.push(Message::tool_results(vec![ToolResult {
            tool_use_id: "nope".into(),
            content: "x".into(),
            is_error: false,
        }]));
        let e = encode_chat(KIND, &req, &config(KIND), &settings("m", 5)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::BadRequest);
    }

    #[test]
    fn stream_keeps_signature_and_drops_trailing_empty_text() {
        let r = decode_stream(KIND, &weather_turn1(), &fixture("gemini_stream_function_call.sse")).unwrap();
        assert_eq!(r.message.content.len(), 1);
        assert_eq!(
            r.message.content[0].provider_state().unwrap().thought_signature.as_deref(),
            Some("CiQB0e2Kb7xExampleOpaqueSignatureBase64Zz9Q==")
        );
        assert_eq!(r.usage, Usage { input_tokens: 58, output_tokens: 63 });
        // A signature arriving on a later empty text part stays on that part.
        let s = "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"Hel\"}]}}]}\r\n\r\n\
data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"lo\"}]}}]}\r\n\r\n\
data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"\",\"thoughtSignature\":\"S\"}]},\"finishReason\":\"STOP\"}]}\r\n\r\n";
        let r = decode_stream(KIND, &weather_turn1(), s).unwrap();
        assert_eq!(r.message.content.len(), 2);
        assert_eq!(r.text(), "Hello");
        assert_eq!(r.message.content[1].provider_state().unwrap().thought_signature.as_deref(), Some("S"));
        let truncated = "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"Hel\"}]}}]}\n\n";
        assert_eq!(decode_stream(KIND, &weather_turn1(), truncated).unwrap_err(), Fault::truncated_stream());
    }

    #[test]
    fn embeddings_name_the_model_once_in_the_path_and_in_each_request() {
        let cfg = config(KIND);
        for model in ["gemini-embedding-001", "models/gemini-embedding-001"] {
            let call = encode_embed(&["a".into(), "b".into()], &cfg, model);
            assert_eq!(call.url, "http://provider.test/v1beta/models/gemini-embedding-001:batchEmbedContents");
            let body = call.body.unwrap();
            assert_eq!(body["requests"][1], json!({"model": "models/gemini-embedding-001", "content": {"parts": [{"text": "b"}]}}));
        }
        assert_eq!(decode_embed(br#"{"embeddings":[{"values":[0.5,1]},{}]}"#).unwrap(), [vec![0.5, 1.0], vec![]]);
        assert!(decode_embed(b"{\"embeddings\": 1}").is_err());
    }

    #[test]
    fn an_output_schema_is_a_json_response_schema() {
        let schema = json!({"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
                            "properties": {"city": {"type": "string", "minLength": 1}}, "required": ["city"],
                            "additionalProperties": false});
        let mut req = ChatRequest::from_prompt("Which city?");
        req.output = Some(OutputSchema::new("city", schema));
        let body = encode_req(&req).0.body.unwrap();
        assert_valid(KIND, &body);
        assert_eq!(
            body["generationConfig"],
            json!({"maxOutputTokens": 1024, "responseMimeType": "application/json",
                   "responseJsonSchema": {"type": "object", "properties": {"city": {"type": "string"}},
                                          "required": ["city"], "additionalProperties": false}})
        );
        let body = encode_req(&weather_turn1()).0.body.unwrap();
        assert_eq!(body["generationConfig"], json!({"maxOutputTokens": 1024}));
    }

    #[test]
    fn error_bodies() {
        let info = parse_error(fixture_body("gemini_error_rate_limit.json").as_bytes());
        assert_eq!(info.kind, Some(ErrorKind::RateLimited));
        assert_eq!(info.retry_after, Some(std::time::Duration::from_secs(47)));
        assert_eq!(info.retryable, None);
        let info = parse_error(fixture_body("gemini_error_invalid_schema.json").as_bytes());
        assert_eq!(info.kind, Some(ErrorKind::BadRequest));
        let info = parse_error(fixture_body("gemini_error_missing_thought_signature.json").as_bytes());
        assert!(info.message.contains("thought_signature"));
        let arr = format!("[{}]", fixture_body("gemini_error_rate_limit.json"));
        assert_eq!(parse_error(arr.as_bytes()).kind, Some(ErrorKind::RateLimited));
        let daily = br#"{"error":{"code":429,"message":"q","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaId":"GenerateRequestsPerDayPerProjectPerModel-FreeTier"}]}]}}"#;
        assert_eq!(parse_error(daily).retryable, Some(false));
    }

    use crate::conversation::{OutputSchema, ToolResult, ToolSpec};
}
