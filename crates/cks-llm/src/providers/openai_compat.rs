//! OpenAI chat completions (`POST {base}/chat/completions`) and compatible servers.
//!
//! Tolerant on input, conservative on output: `arguments` are accepted as a JSON string or an object
//! (llama.cpp builds) and always sent as a string; missing, empty or repeated call ids are replaced by
//! unique generated ones (Gemini's compat endpoint sends `""`); stream deltas without `index` are matched
//! by id or to the last open call; assistant messages with tool calls carry `content: ""`, never null
//! (Groq); `tool_choice` is left out, which means `auto` whenever tools are present and avoids the 400s
//! of vLLM (needs a server flag for an explicit `auto`), LM Studio and Ollama's shim. One `tool` message
//! per result, right after the assistant message. DeepSeek's `reasoning_content` travels back in a
//! thinking block and, once a conversation has any, is sent on every assistant message (DeepSeek requires it).
//!
//! Structured output: `response_format: {type: "json_schema", json_schema: {name, schema, strict: false}}`.
//! Not strict, because strict mode accepts only a subset of JSON Schema (every property required,
//! `additionalProperties: false` everywhere, some keywords refused) and answers any other schema with a 400,
//! while a caller's schema is arbitrary; without it the schema still shapes the answer, which is the
//! message's `content` as for any text.
//!
//! Embeddings: `POST {base}/embeddings` with `{model, input: [texts], encoding_format: "float"}` (the format
//! named, as the official SDK always names one, so a server whose default differs still answers floats),
//! answered by `{data: [{index, embedding}]}`, put in order by `index`.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{
    CallSettings, DecodeCtx, ErrorInfo, Fault, HttpCall, Method, ModelInfo, StreamDecoder, arguments_from_string,
    as_object, own_state,
};
use super::{Adapter, Auto, EmbeddingEndpoint, Key, Variable};
use crate::config::ProviderConfig;
use crate::conversation::{
    ChatRequest, ChatResponse, ContentBlock, Message, ProviderKind, ProviderState, Role, StopReason, Usage,
};
use crate::error::{ErrorContext, ErrorKind, LlmError};
use crate::stream::{Frame, Framing};

/// This provider's entry in the table of providers.
pub(crate) const ADAPTER: Adapter = Adapter {
    name: "openai_compatible",
    title: "OpenAI-compatible",
    key_variables: &[Variable { name: "CKS_OPENAI_API_KEY", default: None, meaning: "OpenAI-compatible API key" }],
    key: Key::AtHost("api.openai.com"),
    credentials: "CKS_OPENAI_API_KEY",
    base_url: Variable {
        name: "CKS_OPENAI_BASE_URL",
        default: Some("https://api.openai.com/v1"),
        meaning: "OpenAI-compatible base URL",
    },
    model: Variable { name: "CKS_OPENAI_MODEL", default: Some("gpt-4o"), meaning: "OpenAI-compatible model" },
    model_fallback: None,
    help: "openai_compatible (CKS_OPENAI_API_KEY, CKS_OPENAI_BASE_URL, CKS_OPENAI_MODEL)",
    unreachable_hint: None,
    auto: Auto::Never,
    encode: |request, config, settings, _| encode(request, config, settings),
    decode,
    framing: Framing::Sse,
    stream: |ctx| Box::new(Stream::new(ctx)),
    parse_error,
    encode_list_models,
    decode_list_models,
    embeddings: Some(EmbeddingEndpoint {
        // The API takes up to 2048 inputs, but also caps the tokens of one request; 64 texts stay far below.
        batch_size: 64,
        default_model: None,
        example_model: "text-embedding-3-small",
        encode: encode_embed,
        decode: decode_embed,
    }),
};

const KIND: ProviderKind = ProviderKind::OpenaiCompatible;

#[derive(Serialize)]
struct Request<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<ResponseFormat<'a>>,
}

#[derive(Serialize)]
struct ResponseFormat<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    json_schema: JsonSchemaFormat<'a>,
}

#[derive(Serialize)]
struct JsonSchemaFormat<'a> {
    name: &'a str,
    schema: &'a Value,
    strict: bool,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunction<'a>,
}

#[derive(Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

#[derive(Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
enum WireMessage<'a> {
    System {
        content: &'a str,
    },
    User {
        content: String,
    },
    Assistant {
        content: String,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<WireToolCall<'a>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        reasoning_content: Option<String>,
    },
    Tool {
        tool_call_id: &'a str,
        content: String,
    },
}

#[derive(Serialize)]
struct WireToolCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireCall<'a>,
}

#[derive(Serialize)]
struct WireCall<'a> {
    name: &'a str,
    arguments: String,
}

/// Build the request.
pub(crate) fn encode(
    request: &ChatRequest,
    config: &ProviderConfig,
    settings: &CallSettings,
) -> Result<HttpCall, LlmError> {
    let fail = |m: String| LlmError::BadRequest(ErrorContext::new(KIND, &settings.model, m));
    let mut messages = Vec::new();
    if let Some(system) = request.system.as_deref().filter(|s| !s.is_empty()) {
        messages.push(WireMessage::System { content: system });
    }
    let reasoning_in_use = request
        .messages
        .iter()
        .flat_map(|m| &m.content)
        .any(|b| matches!(b, ContentBlock::Thinking { provider_state: Some(s), .. } if s.provider == KIND));
    for m in &request.messages {
        match m.role {
            Role::User => {
                for b in &m.content {
                    if let ContentBlock::ToolResult { tool_use_id, content, is_error } = b {
                        // No is_error field in this API: the model learns of the failure from the text.
                        let content = if *is_error { format!("Error: {content}") } else { content.clone() };
                        messages.push(WireMessage::Tool { tool_call_id: tool_use_id, content });
                    }
                }
                // Text beside tool results follows them as a user message; a message of results alone
                // adds none.
                let text = m.text();
                let has_results = m.content.iter().any(|b| matches!(b, ContentBlock::ToolResult { .. }));
                if !text.is_empty() || !has_results {
                    messages.push(WireMessage::User { content: text });
                }
            }
            Role::Assistant => {
                let mut tool_calls = Vec::new();
                let mut reasoning: Option<String> = None;
                for b in &m.content {
                    match b {
                        ContentBlock::ToolUse { id, name, input, provider_state } => {
                            let raw = own_state(provider_state.as_ref(), KIND).and_then(|s| s.raw_arguments.clone());
                            let arguments = match raw {
                                Some(raw) => raw,
                                None => serde_json::to_string(&as_object(input))
                                    .map_err(|e| fail(format!("cannot encode tool arguments: {e}")))?,
                            };
                            tool_calls.push(WireToolCall {
                                id,
                                kind: "function",
                                function: WireCall { name, arguments },
                            });
                        }
                        ContentBlock::Thinking { thinking, provider_state: Some(s), .. } if s.provider == KIND => {
                            reasoning.get_or_insert_with(String::new).push_str(thinking);
                        }
                        _ => {}
                    }
                }
                let text = m.text();
                if text.is_empty() && tool_calls.is_empty() {
                    continue; // An empty answer carries nothing; some servers reject empty assistant turns.
                }
                if reasoning_in_use && reasoning.is_none() {
                    reasoning = Some(String::new());
                }
                messages.push(WireMessage::Assistant { content: text, tool_calls, reasoning_content: reasoning });
            }
        }
    }
    if messages.is_empty() {
        return Err(fail("the conversation has no message to send".into()));
    }
    // OpenAI's own reasoning models reject `max_tokens`; compatible servers often know only `max_tokens`.
    let official = config.base_url.contains("api.openai.com");
    let body = Request {
        model: &settings.model,
        messages,
        tools: request
            .tools
            .iter()
            .map(|t| WireTool {
                kind: "function",
                function: WireFunction { name: &t.name, description: &t.description, parameters: &t.input_schema },
            })
            .collect(),
        max_tokens: (!official).then_some(settings.max_tokens),
        max_completion_tokens: official.then_some(settings.max_tokens),
        temperature: request.temperature.map(super::schema::round_f32),
        stream: settings.stream,
        stream_options: settings.stream.then_some(StreamOptions { include_usage: true }),
        response_format: request.output.as_ref().map(|o| ResponseFormat {
            kind: "json_schema",
            json_schema: JsonSchemaFormat { name: &o.name, schema: &o.schema, strict: false },
        }),
    };
    let body = serde_json::to_value(&body).map_err(|e| fail(format!("cannot encode request: {e}")))?;
    Ok(HttpCall {
        method: Method::Post,
        url: format!("{}/chat/completions", config.base_url),
        headers: headers(config),
        body: Some(body),
    })
}

fn headers(config: &ProviderConfig) -> Vec<(&'static str, String)> {
    config.api_key.iter().map(|k| ("authorization", format!("Bearer {}", k.expose()))).collect()
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Arguments {
    Text(String),
    Object(Value),
}

#[derive(Deserialize)]
struct Response {
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    model: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Body {
    Ok(Response),
    Error(ErrorEnvelope),
}

#[derive(Deserialize, Clone, Copy)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
}

impl From<WireUsage> for Usage {
    fn from(u: WireUsage) -> Self {
        Usage { input_tokens: u.prompt_tokens.unwrap_or(0), output_tokens: u.completion_tokens.unwrap_or(0) }
    }
}

#[derive(Deserialize)]
struct Choice {
    message: RespMessage,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct RespMessage {
    #[serde(default)]
    content: Option<RespContent>,
    #[serde(default)]
    tool_calls: Option<Vec<RespToolCall>>,
    #[serde(default)]
    reasoning_content: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RespContent {
    Text(String),
    Parts(Vec<RespPart>),
}

#[derive(Deserialize)]
struct RespPart {
    #[serde(default)]
    text: Option<String>,
}

impl RespContent {
    fn into_text(self) -> String {
        match self {
            RespContent::Text(t) => t,
            RespContent::Parts(p) => p.into_iter().filter_map(|p| p.text).collect(),
        }
    }
}

#[derive(Deserialize)]
struct RespToolCall {
    #[serde(default)]
    id: Option<String>,
    function: RespFunction,
}

#[derive(Deserialize)]
struct RespFunction {
    name: String,
    #[serde(default)]
    arguments: Option<Arguments>,
}

fn tool_use(id: Option<&str>, name: String, arguments: Option<Arguments>, ctx: &mut DecodeCtx) -> ContentBlock {
    let (input, provider_state) = match arguments {
        None => (Value::Object(serde_json::Map::new()), None),
        Some(Arguments::Text(raw)) => arguments_from_string(&raw, KIND),
        Some(Arguments::Object(v)) => (as_object(&v), None),
    };
    ContentBlock::ToolUse { id: ctx.ids.accept(id), name, input, provider_state }
}

fn reasoning_block(text: String) -> ContentBlock {
    ContentBlock::Thinking { thinking: text, signature: None, provider_state: Some(ProviderState::new(KIND)) }
}

fn stop_reason(s: Option<&str>) -> StopReason {
    match s {
        Some("stop") | None => StopReason::EndTurn,
        Some("tool_calls" | "function_call") => StopReason::ToolUse,
        Some("length") => StopReason::MaxTokens,
        Some("content_filter") => StopReason::Refusal,
        Some(other) => StopReason::Other(other.to_owned()),
    }
}

/// Parse a 2xx answer.
pub(crate) fn decode(body: &[u8], ctx: &mut DecodeCtx) -> Result<ChatResponse, Fault> {
    let r = match serde_json::from_slice::<Body>(body) {
        Ok(Body::Ok(r)) => r,
        Ok(Body::Error(e)) => {
            // OpenRouter and some proxies report failures inside a 200.
            let info = error_info(e.error);
            return Err(Fault {
                retryable: info.retryable,
                ..Fault::new(
                    info.kind.unwrap_or(ErrorKind::Server),
                    format!("error inside a 200 answer: {}", info.message),
                )
            });
        }
        Err(_) => {
            return Err(serde_json::from_slice::<Response>(body).err().map_or_else(
                || Fault::malformed("unexpected answer"),
                |e| Fault::bad_json("OpenAI-compatible answer", &e),
            ));
        }
    };
    let Some(choice) = r.choices.into_iter().next() else {
        return Err(Fault::malformed("the answer has no choices"));
    };
    let mut content = Vec::new();
    if let Some(reasoning) = choice.message.reasoning_content.filter(|r| !r.is_empty()) {
        content.push(reasoning_block(reasoning));
    }
    let text = choice.message.content.map(RespContent::into_text).unwrap_or_default();
    if !text.is_empty() {
        content.push(ContentBlock::text(text));
    }
    for call in choice.message.tool_calls.unwrap_or_default() {
        content.push(tool_use(call.id.as_deref(), call.function.name, call.function.arguments, ctx));
    }
    Ok(ChatResponse {
        message: Message { role: Role::Assistant, content },
        stop_reason: stop_reason(choice.finish_reason.as_deref()),
        usage: r.usage.map(Usage::from).unwrap_or_default(),
        model: r.model.unwrap_or_else(|| ctx.model.clone()),
        provider: KIND,
        requests: 1,
    })
}

#[derive(Deserialize)]
struct ErrorEnvelope {
    error: ErrorField,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ErrorField {
    Object(ErrorObject),
    Text(String),
}

#[derive(Deserialize)]
struct ErrorObject {
    #[serde(default)]
    message: Option<String>,
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default)]
    code: Option<Value>,
}

fn error_info(e: ErrorField) -> ErrorInfo {
    let e = match e {
        ErrorField::Text(message) => return ErrorInfo { message, ..ErrorInfo::default() },
        ErrorField::Object(o) => o,
    };
    let code = match &e.code {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => String::new(),
    };
    let mut info = ErrorInfo::default();
    let label = [e.kind.as_deref().unwrap_or(""), code.as_str()]
        .iter()
        .filter(|s| !s.is_empty())
        .copied()
        .collect::<Vec<_>>()
        .join("/");
    let message = e.message.unwrap_or_default();
    info.message = if label.is_empty() { message } else { format!("{label}: {message}") };
    match code.as_str() {
        "insufficient_quota" => {
            // A billing problem: waiting does not help.
            info.kind = Some(ErrorKind::RateLimited);
            info.retryable = Some(false);
            info.message.push_str(" (quota exhausted: check the account's plan and billing)");
        }
        "rate_limit_exceeded" => info.kind = Some(ErrorKind::RateLimited),
        // Groq: the model produced a malformed call; one more try often succeeds.
        "tool_use_failed" => info.retryable = Some(true),
        "invalid_api_key" => info.kind = Some(ErrorKind::Auth),
        _ => {}
    }
    info
}

/// Parse an error body (`{"error":{"message","type","code"}}`, or `{"error":"..."}` from some servers).
pub(crate) fn parse_error(body: &[u8]) -> ErrorInfo {
    serde_json::from_slice::<ErrorEnvelope>(body).map(|e| error_info(e.error)).unwrap_or_default()
}

/// `GET {base}/models`.
pub(crate) fn encode_list_models(config: &ProviderConfig) -> HttpCall {
    HttpCall { method: Method::Get, url: format!("{}/models", config.base_url), headers: headers(config), body: None }
}

#[derive(Deserialize)]
struct ModelList {
    data: Vec<ModelEntry>,
}

#[derive(Deserialize)]
struct ModelEntry {
    id: String,
}

/// Parse the model list.
pub(crate) fn decode_list_models(body: &[u8]) -> Result<Vec<ModelInfo>, Fault> {
    let list: ModelList = serde_json::from_slice(body).map_err(|e| Fault::bad_json("model list", &e))?;
    Ok(list.data.into_iter().map(|m| ModelInfo { id: m.id, display_name: None, provider: KIND }).collect())
}

/// `POST {base}/embeddings` for these texts.
pub(crate) fn encode_embed(texts: &[String], config: &ProviderConfig, model: &str) -> HttpCall {
    let body = serde_json::json!({ "model": model, "input": texts, "encoding_format": "float" });
    HttpCall {
        method: Method::Post,
        url: format!("{}/embeddings", config.base_url),
        headers: headers(config),
        body: Some(body),
    }
}

#[derive(Deserialize)]
struct EmbeddingList {
    data: Vec<EmbeddingEntry>,
}

#[derive(Deserialize)]
struct EmbeddingEntry {
    index: usize,
    embedding: Vec<f32>,
}

/// Parse an embeddings answer: its vectors in the order of their `index`, which must number them 0, 1, ...
pub(crate) fn decode_embed(body: &[u8]) -> Result<Vec<Vec<f32>>, Fault> {
    let list: EmbeddingList = serde_json::from_slice(body).map_err(|e| Fault::bad_json("embeddings answer", &e))?;
    let mut data = list.data;
    data.sort_by_key(|e| e.index);
    if let Some((position, entry)) = data.iter().enumerate().find(|(position, e)| e.index != *position) {
        return Err(Fault::malformed(format!(
            "the embeddings answer numbers its {} vectors wrongly: index {} where {position} was due",
            data.len(),
            entry.index
        )));
    }
    Ok(data.into_iter().map(|e| e.embedding).collect())
}

// ---- streaming -------------------------------------------------------------------------------------------

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Vec<ChunkChoice>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    error: Option<ErrorField>,
}

#[derive(Deserialize)]
struct ChunkChoice {
    #[serde(default)]
    delta: Option<Delta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<ToolCallDelta>>,
}

#[derive(Deserialize)]
struct ToolCallDelta {
    #[serde(default)]
    index: Option<usize>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FunctionDelta>,
}

#[derive(Deserialize)]
struct FunctionDelta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<Arguments>,
}

#[derive(Default)]
struct PartialCall {
    id: Option<String>,
    name: String,
    arguments: String,
    object: Option<Value>,
}

/// Accumulates `data:` chunks until `[DONE]`.
pub(crate) struct Stream {
    ctx: DecodeCtx,
    text: String,
    reasoning: String,
    calls: Vec<PartialCall>,
    by_index: HashMap<usize, usize>,
    finish: Option<String>,
    usage: Usage,
    model: Option<String>,
    done: bool,
}

impl Stream {
    pub(crate) fn new(ctx: DecodeCtx) -> Self {
        Stream {
            ctx,
            text: String::new(),
            reasoning: String::new(),
            calls: Vec::new(),
            by_index: HashMap::new(),
            finish: None,
            usage: Usage::default(),
            model: None,
            done: false,
        }
    }

    /// Which partial call a delta continues: by `index`; else by `id`; else the last open call.
    fn slot(&mut self, d: &ToolCallDelta) -> usize {
        if let Some(i) = d.index {
            if let Some(&slot) = self.by_index.get(&i) {
                return slot;
            }
            self.calls.push(PartialCall::default());
            let slot = self.calls.len() - 1;
            self.by_index.insert(i, slot);
            return slot;
        }
        if let Some(id) = d.id.as_deref().filter(|id| !id.is_empty()) {
            if let Some(slot) = self.calls.iter().position(|c| c.id.as_deref() == Some(id)) {
                return slot;
            }
            self.calls.push(PartialCall::default());
            return self.calls.len() - 1;
        }
        if self.calls.is_empty() {
            self.calls.push(PartialCall::default());
        }
        self.calls.len() - 1
    }
}

impl StreamDecoder for Stream {
    fn on_frame(&mut self, frame: Frame, shown: &mut String) -> Result<bool, Fault> {
        let Frame::Event { data, .. } = frame else { return Ok(false) };
        if data.trim() == "[DONE]" {
            self.done = true;
            return Ok(true);
        }
        let chunk: Chunk = serde_json::from_str(&data).map_err(|e| Fault::bad_json("stream chunk", &e))?;
        if let Some(e) = chunk.error {
            let info = error_info(e);
            let transient = info
                .kind
                .is_none_or(|k| matches!(k, ErrorKind::RateLimited | ErrorKind::Overloaded | ErrorKind::Server));
            return Err(Fault {
                retryable: Some(info.retryable.unwrap_or(transient)),
                ..Fault::new(ErrorKind::StreamError, format!("error inside the stream: {}", info.message))
            });
        }
        if chunk.model.is_some() {
            self.model = chunk.model;
        }
        if let Some(u) = chunk.usage {
            self.usage = u.into();
        }
        for choice in chunk.choices {
            if let Some(f) = choice.finish_reason {
                self.finish = Some(f);
            }
            let Some(delta) = choice.delta else { continue };
            if let Some(t) = delta.content {
                shown.push_str(&t);
                self.text.push_str(&t);
            }
            if let Some(r) = delta.reasoning_content {
                self.reasoning.push_str(&r);
            }
            for d in delta.tool_calls.unwrap_or_default() {
                let slot = self.slot(&d);
                let call = &mut self.calls[slot];
                if let Some(id) = d.id.filter(|id| !id.is_empty()) {
                    call.id = Some(id);
                }
                if let Some(f) = d.function {
                    if let Some(n) = f.name {
                        call.name.push_str(&n);
                    }
                    match f.arguments {
                        Some(Arguments::Text(t)) => call.arguments.push_str(&t),
                        Some(Arguments::Object(v)) => call.object = Some(v),
                        None => {}
                    }
                }
            }
        }
        Ok(false)
    }

    fn finish(self: Box<Self>) -> Result<ChatResponse, Fault> {
        let mut this = *self;
        // Some compatible servers omit `[DONE]`; a finish reason is as good an end marker.
        if !this.done && this.finish.is_none() {
            return Err(Fault::truncated_stream());
        }
        let mut content = Vec::new();
        if !this.reasoning.is_empty() {
            content.push(reasoning_block(std::mem::take(&mut this.reasoning)));
        }
        if !this.text.is_empty() {
            content.push(ContentBlock::text(std::mem::take(&mut this.text)));
        }
        for call in std::mem::take(&mut this.calls) {
            let args = match call.object {
                Some(v) => Some(Arguments::Object(v)),
                None => Some(Arguments::Text(call.arguments)),
            };
            content.push(tool_use(call.id.as_deref(), call.name, args, &mut this.ctx));
        }
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
    use crate::conversation::OutputSchema;
    use crate::providers::test_support::*;
    use serde_json::json;

    #[test]
    fn encodes_the_fixture_requests() {
        let cfg = config(KIND);
        let call = encode(&weather_turn1(), &cfg, &settings("gpt-4o-mini", 1024)).unwrap();
        assert_eq!(call.url, "http://provider.test/v1/chat/completions");
        assert!(call.headers.contains(&("authorization", "Bearer test-key-openai_compatible".into())));
        let body = call.body.unwrap();
        assert_valid(KIND, &body);
        let expected = fixture_json("openai_request_turn1.json");
        assert_eq!(body["messages"], expected["messages"]);
        assert_eq!(body["tools"], expected["tools"]);
        assert_eq!(body["stream"], false);
        assert_eq!(body["max_tokens"], 1024);

        let req = weather_turn2(&tool_use_from_fixture(KIND));
        let body = encode(&req, &cfg, &settings("gpt-4o-mini", 1024)).unwrap().body.unwrap();
        assert_valid(KIND, &body);
        let mut expected = fixture_json("openai_request_turn2.json");
        expected["messages"][1]["content"] = json!(""); // never null: Groq rejects it
        assert_eq!(body["messages"], expected["messages"]);
    }

    #[test]
    fn decodes_tool_calls_and_final_text() {
        let mut ctx = ctx_for(&weather_turn1(), "m");
        let r = crate::providers::decode_chat(KIND, fixture("openai_tool_calls.json").as_bytes(), &mut ctx).unwrap();
        assert_eq!(r.stop_reason, StopReason::ToolUse);
        assert_eq!(r.usage, Usage { input_tokens: 71, output_tokens: 16 });
        let calls = r.message.tool_calls();
        assert_eq!((calls[0].id, calls[0].input), ("call_Qm3xT7pLk2Vn8Rw1", &json!({"city": "Oslo"})));
        let r = crate::providers::decode_chat(KIND, fixture("openai_final_text.json").as_bytes(), &mut ctx).unwrap();
        assert_eq!(r.text(), "It is 4 C with light snow in Oslo.");
        assert_eq!(r.model, "gpt-4o-mini-2024-07-18");
    }

    #[test]
    fn tolerates_object_arguments_and_empty_ids() {
        let mut ctx = ctx_for(&weather_turn1(), "m");
        let body = fixture_body("openai_compat_quirk_arguments_object.json");
        let r = crate::providers::decode_chat(KIND, body.as_bytes(), &mut ctx).unwrap();
        let calls = r.message.tool_calls();
        assert!(calls[0].id.starts_with("call_") && calls[0].id.len() > 5);
        assert_eq!(calls[0].input, &json!({"city": "Oslo"}));
        assert_eq!(r.stop_reason, StopReason::ToolUse);
        // And it goes back as a string.
        let req = weather_turn2(&r.message);
        let body = encode(&req, &config(KIND), &settings("m", 5)).unwrap().body.unwrap();
        assert_valid(KIND, &body);
        assert_eq!(body["messages"][1]["tool_calls"][0]["function"]["arguments"], json!("{\"city\":\"Oslo\"}"));
    }

    #[test]
    fn ids_stay_unique_across_turns_and_invalid_arguments_round_trip() {
        let body = json!({"choices": [{"message": {"content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}},
            {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "not json"}}]},
            "finish_reason": "stop"}]});
        let mut req = weather_turn1();
        req.messages.push(Message {
            role: Role::Assistant,
            content: vec![ContentBlock::ToolUse {
                id: "call_1".into(),
                name: "f".into(),
                input: json!({}),
                provider_state: None,
            }],
        });
        let mut ctx = ctx_for(&req, "m");
        let r = crate::providers::decode_chat(KIND, body.to_string().as_bytes(), &mut ctx).unwrap();
        let calls = r.message.tool_calls();
        assert_ne!(calls[0].id, "call_1");
        assert_ne!(calls[0].id, calls[1].id);
        assert_eq!(calls[1].input, &json!({}));
        assert_eq!(r.stop_reason, StopReason::ToolUse, "detected from content, not finish_reason");
        let mut req2 = weather_turn1();
        req2.messages.push(r.message.clone());
        let wire = encode(&req2, &config(KIND), &settings("m", 5)).unwrap().body.unwrap();
        assert_eq!(wire["messages"][1]["tool_calls"][1]["function"]["arguments"], "not json");
        assert!(!wire.to_string().contains("provider_state"));
    }

    #[test]
    fn stream_with_indices_usage_and_done() {
        let r = decode_stream(KIND, &weather_turn1(), &fixture("openai_stream_tool_calls.sse")).unwrap();
        let calls = r.message.tool_calls();
        assert_eq!((calls[0].id, calls[0].input), ("call_Qm3xT7pLk2Vn8Rw1", &json!({"city": "Oslo"})));
        assert_eq!(r.usage, Usage { input_tokens: 71, output_tokens: 16 });
    }

    #[test]
    fn stream_without_index_comments_and_error() {
        let s = ": OPENROUTER PROCESSING\n\n\
data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"id\":\"\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\"\"}}]}}]}\n\n\
data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"function\":{\"arguments\":\":1}\"}}]}}]}\n\n\
data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n";
        let r = decode_stream(KIND, &weather_turn1(), s).unwrap();
        assert_eq!(r.message.tool_calls()[0].input, &json!({"a": 1}));
        let s = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: {\"error\":{\"message\":\"upstream\",\"code\":502}}\n\n";
        let f = decode_stream(KIND, &weather_turn1(), s).unwrap_err();
        assert_eq!(f.kind, ErrorKind::StreamError);
        let s = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n";
        assert_eq!(decode_stream(KIND, &weather_turn1(), s).unwrap_err(), Fault::truncated_stream());
    }

    #[test]
    fn an_output_schema_is_a_json_schema_response_format() {
        let schema = json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]});
        let mut req = ChatRequest::from_prompt("Which city?");
        req.output = Some(OutputSchema::new("city", schema.clone()));
        let body = encode(&req, &config(KIND), &settings("m", 5)).unwrap().body.unwrap();
        assert_valid(KIND, &body);
        assert_eq!(
            body["response_format"],
            json!({"type": "json_schema", "json_schema": {"name": "city", "schema": schema, "strict": false}})
        );
        let body = encode(&weather_turn1(), &config(KIND), &settings("m", 5)).unwrap().body.unwrap();
        assert!(body.get("response_format").is_none());
    }

    #[test]
    fn error_bodies() {
        let info = parse_error(fixture_body("openai_error_rate_limit.json").as_bytes());
        assert_eq!(info.kind, Some(ErrorKind::RateLimited));
        assert_eq!(info.retryable, None);
        let info =
            parse_error(br#"{"error":{"message":"no money","type":"insufficient_quota","code":"insufficient_quota"}}"#);
        assert_eq!(info.retryable, Some(false));
        let info =
            parse_error(br#"{"error":{"message":"bad call","type":"invalid_request_error","code":"tool_use_failed"}}"#);
        assert_eq!(info.retryable, Some(true));
    }
}
