//! Anthropic Messages API (`POST {base}/v1/messages`). The conversation model is already Anthropic-shaped,
//! so this adapter mostly filters: it drops other providers' state and reasoning, empty text blocks (the
//! API rejects them), and merges consecutive same-role messages with tool results first (every `tool_use`
//! must be answered at the start of the very next user message).
//!
//! Structured output: the Messages API has no response format, so an output schema becomes one tool named
//! after it, its `input_schema` the schema, and `tool_choice` forcing that tool. Tool inputs are objects:
//! a schema that does not describe an object (`"type": "object"`) is wrapped as the one required property
//! `value` (its `$defs`/`definitions` moved to the wrapper, where its references point). The tool's call comes
//! back as the answer's text: the input (or its `value`) as JSON in one text block, so callers never see that
//! tool. Any text beside the call (a forced tool gets none in practice) is dropped, so the text is the JSON
//! alone; reasoning blocks stay. When streaming, text is held back until the answer is complete, and then
//! shown as the answer has it (the JSON, or the text of a model that did not call the tool).

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Adapter, Auto, Key, Variable};
use super::{
    AnswerTool, CallSettings, DecodeCtx, ErrorInfo, Fault, HttpCall, Method, ModelInfo, StreamDecoder, as_object,
};
use crate::config::ProviderConfig;
use crate::conversation::{
    ChatRequest, ChatResponse, ContentBlock, Message, OutputSchema, ProviderKind, Role, StopReason, Usage,
};
use crate::error::{ErrorContext, ErrorKind, LlmError};
use crate::stream::{Frame, Framing};

/// This provider's entry in the table of providers.
pub(crate) const ADAPTER: Adapter = Adapter {
    name: "anthropic",
    title: "Anthropic",
    key_variables: &[Variable { name: "ANTHROPIC_API_KEY", default: None, meaning: "Anthropic API key" }],
    key: Key::Required,
    credentials: "ANTHROPIC_API_KEY",
    base_url: Variable {
        name: "ANTHROPIC_BASE_URL",
        default: Some("https://api.anthropic.com"),
        meaning: "Anthropic API base URL",
    },
    model: Variable { name: "CKS_ANTHROPIC_MODEL", default: Some("claude-sonnet-4-5"), meaning: "Anthropic model" },
    // The reference's name for the model of its single-shot calls (construct_knowledge, the
    // arbiter, ingest_document), which are Anthropic's there.
    model_fallback: Some(Variable {
        name: "CKS_LLM_MODEL",
        default: None,
        meaning: "Anthropic model when CKS_ANTHROPIC_MODEL is unset",
    }),
    help: "anthropic (ANTHROPIC_API_KEY, CKS_ANTHROPIC_MODEL or CKS_LLM_MODEL, ANTHROPIC_BASE_URL)",
    unreachable_hint: None,
    auto: Auto::WhenKeyed,
    encode: |request, config, settings, ctx| encode(request, config, settings, ctx),
    decode,
    framing: Framing::Sse,
    stream: |ctx| Box::new(Stream::new(ctx)),
    parse_error,
    encode_list_models,
    decode_list_models,
    // The Messages API has no embeddings endpoint.
    embeddings: None,
};

const KIND: ProviderKind = ProviderKind::Anthropic;
const VERSION: &str = "2023-06-01";

#[derive(Serialize)]
struct Request<'a> {
    model: &'a str,
    max_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<&'a str>,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<ToolChoice<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    stream: bool,
}

#[derive(Serialize)]
struct ToolChoice<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
}

#[derive(Serialize)]
struct WireTool<'a> {
    name: &'a str,
    description: &'a str,
    input_schema: Cow<'a, Value>,
}

/// What the forced answer tool tells the model.
const ANSWER_TOOL_DESCRIPTION: &str =
    "Give your answer by calling this tool once: its input is the answer, as the schema describes it.";

/// The tool carrying an output schema's answer, and how to read its call back.
fn answer_tool(output: &OutputSchema) -> (WireTool<'_>, AnswerTool) {
    let is_object = output.schema.get("type").and_then(Value::as_str) == Some("object");
    let input_schema = if is_object {
        Cow::Borrowed(&output.schema)
    } else {
        let mut inner = output.schema.clone();
        let mut wrapper = serde_json::json!({"type": "object", "required": ["value"]});
        // References are resolved from the document's root, which is now the wrapper.
        for key in ["$defs", "definitions"] {
            if let Some(defs) = inner.as_object_mut().and_then(|m| m.remove(key)) {
                wrapper[key] = defs;
            }
        }
        wrapper["properties"] = serde_json::json!({ "value": inner });
        Cow::Owned(wrapper)
    };
    let tool = WireTool { name: &output.name, description: ANSWER_TOOL_DESCRIPTION, input_schema };
    (tool, AnswerTool { name: output.name.clone(), wrapped: !is_object })
}

/// The answer a call of the answer tool carries, as JSON text.
fn answer_text(input: &Value, tool: &AnswerTool) -> String {
    let answer = if tool.wrapped { input.get("value").unwrap_or(input) } else { input };
    answer.to_string()
}

/// The answer tool's call turned into the answer's text (see the module doc); other content as it is when
/// the model did not call it.
fn answer_from_tool(content: Vec<ContentBlock>, tool: Option<&AnswerTool>) -> Vec<ContentBlock> {
    let Some(tool) = tool else { return content };
    let called = |b: &ContentBlock| matches!(b, ContentBlock::ToolUse { name, .. } if *name == tool.name);
    if !content.iter().any(called) {
        return content;
    }
    let mut answered = false;
    content
        .into_iter()
        .filter_map(|b| match b {
            ContentBlock::ToolUse { name, input, .. } if name == tool.name && !answered => {
                answered = true;
                Some(ContentBlock::text(answer_text(&input, tool)))
            }
            ContentBlock::Text { .. } => None,
            // A second call of the answer tool answers nothing more.
            ContentBlock::ToolUse { ref name, .. } if *name == tool.name => None,
            other => Some(other),
        })
        .collect()
}

#[derive(Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    content: Vec<WireBlock<'a>>,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireBlock<'a> {
    Text { text: &'a str },
    ToolUse { id: &'a str, name: &'a str, input: Value },
    ToolResult { tool_use_id: &'a str, content: &'a str, is_error: bool },
    Thinking { thinking: &'a str, signature: &'a str },
    RedactedThinking { data: &'a str },
}

impl WireBlock<'_> {
    fn is_tool_result(&self) -> bool {
        matches!(self, WireBlock::ToolResult { .. })
    }
}

/// Build the request. An output schema becomes the forced answer tool, which `ctx` learns.
pub(crate) fn encode(
    request: &ChatRequest,
    config: &ProviderConfig,
    settings: &CallSettings,
    ctx: &mut DecodeCtx,
) -> Result<HttpCall, LlmError> {
    let mut messages: Vec<WireMessage<'_>> = Vec::new();
    for m in &request.messages {
        let blocks: Vec<WireBlock<'_>> = m.content.iter().filter_map(wire_block).collect();
        if blocks.is_empty() {
            continue; // An all-empty message (e.g. an empty answer) would be rejected; it carries nothing.
        }
        let role = role_name(m);
        match messages.last_mut() {
            Some(last) if last.role == role => last.content.extend(blocks),
            _ => messages.push(WireMessage { role, content: blocks }),
        }
    }
    for m in &mut messages {
        // Stable: tool results first, in call order, then anything else.
        m.content.sort_by_key(|b| !b.is_tool_result());
    }
    if messages.is_empty() {
        return Err(LlmError::BadRequest(ErrorContext::new(
            KIND,
            &settings.model,
            "the conversation has no non-empty message to send",
        )));
    }
    let mut tools: Vec<WireTool<'_>> = request
        .tools
        .iter()
        .map(|t| WireTool { name: &t.name, description: &t.description, input_schema: Cow::Borrowed(&t.input_schema) })
        .collect();
    let tool_choice = match &request.output {
        Some(output) => {
            let (tool, answer) = answer_tool(output);
            tools.push(tool);
            ctx.answer_tool = Some(answer);
            Some(ToolChoice { kind: "tool", name: Some(&output.name) })
        }
        None => (!tools.is_empty()).then_some(ToolChoice { kind: "auto", name: None }),
    };
    let body = Request {
        model: &settings.model,
        max_tokens: settings.max_tokens,
        system: request.system.as_deref().filter(|s| !s.is_empty()),
        messages,
        tools,
        tool_choice,
        temperature: request.temperature.map(super::schema::round_f32),
        stream: settings.stream,
    };
    let body = serde_json::to_value(&body).map_err(|e| {
        LlmError::BadRequest(ErrorContext::new(KIND, &settings.model, format!("cannot encode request: {e}")))
    })?;
    Ok(HttpCall {
        method: Method::Post,
        url: format!("{}/v1/messages", config.base_url),
        headers: headers(config),
        body: Some(body),
    })
}

fn headers(config: &ProviderConfig) -> Vec<(&'static str, String)> {
    let mut h = vec![("anthropic-version", VERSION.to_owned())];
    if let Some(k) = &config.api_key {
        h.push(("x-api-key", k.expose().to_owned()));
    }
    h
}

fn role_name(m: &Message) -> &'static str {
    match m.role {
        Role::User => "user",
        Role::Assistant => "assistant",
    }
}

fn wire_block(b: &ContentBlock) -> Option<WireBlock<'_>> {
    match b {
        ContentBlock::Text { text, .. } => (!text.is_empty()).then_some(WireBlock::Text { text }),
        ContentBlock::ToolUse { id, name, input, .. } => Some(WireBlock::ToolUse { id, name, input: as_object(input) }),
        ContentBlock::ToolResult { tool_use_id, content, is_error } => {
            Some(WireBlock::ToolResult { tool_use_id, content, is_error: *is_error })
        }
        // Thinking is sent back only when it is Anthropic's own (signed, no foreign state).
        ContentBlock::Thinking { thinking, signature: Some(signature), provider_state }
            if provider_state.as_ref().is_none_or(|s| s.provider == KIND) =>
        {
            Some(WireBlock::Thinking { thinking, signature })
        }
        ContentBlock::Thinking { .. } => None,
        ContentBlock::RedactedThinking { data } => Some(WireBlock::RedactedThinking { data }),
    }
}

#[derive(Deserialize)]
struct Response {
    /// Set (with `type: "error"`) when a proxy or the API reports an error inside a 200.
    #[serde(default)]
    error: Option<ErrorBody>,
    #[serde(default)]
    content: Vec<RespBlock>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    usage: WireUsage,
    #[serde(default)]
    model: Option<String>,
}

#[derive(Deserialize, Default, Clone, Copy)]
struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum RespBlock {
    Text {
        text: String,
    },
    ToolUse {
        #[serde(default)]
        id: Option<String>,
        name: String,
        #[serde(default)]
        input: Value,
    },
    Thinking {
        thinking: String,
        #[serde(default)]
        signature: Option<String>,
    },
    RedactedThinking {
        data: String,
    },
    /// Server tools, citations and anything newer: not part of our conversation model.
    #[serde(other)]
    Other,
}

fn block_from_wire(b: RespBlock, ctx: &mut DecodeCtx) -> Option<ContentBlock> {
    Some(match b {
        RespBlock::Text { text } => ContentBlock::text(text),
        RespBlock::ToolUse { id, name, input } => ContentBlock::ToolUse {
            id: ctx.ids.accept(id.as_deref()),
            name,
            input: as_object(&input),
            provider_state: None,
        },
        RespBlock::Thinking { thinking, signature } => {
            ContentBlock::Thinking { thinking, signature, provider_state: None }
        }
        RespBlock::RedactedThinking { data } => ContentBlock::RedactedThinking { data },
        RespBlock::Other => return None,
    })
}

fn stop_reason(s: Option<&str>) -> StopReason {
    match s {
        Some("end_turn") | None => StopReason::EndTurn,
        Some("tool_use") => StopReason::ToolUse,
        Some("max_tokens") => StopReason::MaxTokens,
        Some("stop_sequence") => StopReason::StopSequence,
        Some("refusal") => StopReason::Refusal,
        Some(other) => StopReason::Other(other.to_owned()),
    }
}

/// Parse a 2xx answer.
pub(crate) fn decode(body: &[u8], ctx: &mut DecodeCtx) -> Result<ChatResponse, Fault> {
    let r: Response = serde_json::from_slice(body).map_err(|e| Fault::bad_json("Anthropic answer", &e))?;
    if let Some(e) = r.error {
        let info = error_info(e);
        return Err(Fault {
            retryable: info.retryable,
            ..Fault::new(info.kind.unwrap_or(ErrorKind::Server), format!("error inside a 200 answer: {}", info.message))
        });
    }
    let content = r.content.into_iter().filter_map(|b| block_from_wire(b, ctx)).collect();
    let content = answer_from_tool(content, ctx.answer_tool.as_ref());
    Ok(ChatResponse {
        message: Message { role: Role::Assistant, content },
        stop_reason: stop_reason(r.stop_reason.as_deref()),
        usage: Usage {
            input_tokens: r.usage.input_tokens.unwrap_or(0),
            output_tokens: r.usage.output_tokens.unwrap_or(0),
        },
        model: r.model.unwrap_or_else(|| ctx.model.clone()),
        provider: KIND,
        requests: 1,
    })
}

#[derive(Deserialize)]
struct ErrorEnvelope {
    error: ErrorBody,
}

#[derive(Deserialize)]
struct ErrorBody {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    message: String,
}

fn error_info(e: ErrorBody) -> ErrorInfo {
    let kind = match e.kind.as_str() {
        "overloaded_error" => Some(ErrorKind::Overloaded),
        "rate_limit_error" => Some(ErrorKind::RateLimited),
        "authentication_error" | "permission_error" => Some(ErrorKind::Auth),
        "invalid_request_error" | "not_found_error" | "request_too_large" => Some(ErrorKind::BadRequest),
        "api_error" => Some(ErrorKind::Server),
        "timeout_error" => Some(ErrorKind::Timeout),
        _ => None,
    };
    ErrorInfo { message: format!("{}: {}", e.kind, e.message), kind, ..ErrorInfo::default() }
}

/// Parse an error body (`{"type":"error","error":{"type","message"}}`).
pub(crate) fn parse_error(body: &[u8]) -> ErrorInfo {
    serde_json::from_slice::<ErrorEnvelope>(body).map(|e| error_info(e.error)).unwrap_or_default()
}

/// `GET {base}/v1/models`.
pub(crate) fn encode_list_models(config: &ProviderConfig) -> HttpCall {
    HttpCall {
        method: Method::Get,
        url: format!("{}/v1/models?limit=1000", config.base_url),
        headers: headers(config),
        body: None,
    }
}

#[derive(Deserialize)]
struct ModelList {
    data: Vec<ModelEntry>,
}

#[derive(Deserialize)]
struct ModelEntry {
    id: String,
    #[serde(default)]
    display_name: Option<String>,
}

/// Parse the model list.
pub(crate) fn decode_list_models(body: &[u8]) -> Result<Vec<ModelInfo>, Fault> {
    let list: ModelList = serde_json::from_slice(body).map_err(|e| Fault::bad_json("Anthropic model list", &e))?;
    Ok(list.data.into_iter().map(|m| ModelInfo { id: m.id, display_name: m.display_name, provider: KIND }).collect())
}

// ---- streaming -------------------------------------------------------------------------------------------

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Event {
    MessageStart {
        message: StartMessage,
    },
    ContentBlockStart {
        index: usize,
        content_block: RespBlock,
    },
    ContentBlockDelta {
        index: usize,
        delta: BlockDelta,
    },
    /// Tool input is parsed in `finish`, so the stop carries nothing we need.
    ContentBlockStop {},
    MessageDelta {
        #[serde(default)]
        delta: MessageDeltaBody,
        #[serde(default)]
        usage: WireUsage,
    },
    MessageStop,
    Ping,
    Error {
        error: ErrorBody,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct StartMessage {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    usage: WireUsage,
}

#[derive(Deserialize, Default)]
struct MessageDeltaBody {
    #[serde(default)]
    stop_reason: Option<String>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockDelta {
    TextDelta {
        text: String,
    },
    InputJsonDelta {
        partial_json: String,
    },
    ThinkingDelta {
        thinking: String,
    },
    SignatureDelta {
        signature: String,
    },
    #[serde(other)]
    Other,
}

enum Partial {
    Text(String),
    ToolUse { id: Option<String>, name: String, json: String, placeholder: Value },
    Thinking { thinking: String, signature: Option<String> },
    Redacted(String),
    Other,
}

/// Accumulates named SSE events (`message_start`, `content_block_*`, `message_delta`, `message_stop`).
pub(crate) struct Stream {
    ctx: DecodeCtx,
    blocks: BTreeMap<usize, Partial>,
    model: Option<String>,
    stop: Option<String>,
    usage: Usage,
    done: bool,
}

impl Stream {
    pub(crate) fn new(ctx: DecodeCtx) -> Self {
        Stream { ctx, blocks: BTreeMap::new(), model: None, stop: None, usage: Usage::default(), done: false }
    }
}

/// A streamed tool input: its fragments parsed once, at the end; none (or only empty ones) means `{}`.
fn streamed_input(json: &str, placeholder: &Value) -> Result<Value, Fault> {
    let input = if json.trim().is_empty() {
        as_object(placeholder)
    } else {
        serde_json::from_str::<Value>(json)
            .map_err(|e| Fault::malformed(format!("tool input fragments are not JSON ({e})")))?
    };
    Ok(as_object(&input))
}

impl Stream {
    /// Whether text is held back until the answer is complete: with an answer tool, whether any text
    /// belongs to the answer is known only at the end (its call's JSON replaces text beside it).
    fn holds_text(&self) -> bool {
        self.ctx.answer_tool.is_some()
    }

    /// Shows, once the answer is complete, the text held back: the JSON of the answer tool's call, or the
    /// text of an answer that did not call it; the same text [`answer_from_tool`] leaves.
    fn show_held_text(&self, shown: &mut String) {
        let Some(tool) = &self.ctx.answer_tool else { return };
        let call = self.blocks.values().find_map(|p| match p {
            Partial::ToolUse { name, json, placeholder, .. } if *name == tool.name => Some((json, placeholder)),
            _ => None,
        });
        match call {
            Some((json, placeholder)) => {
                if let Ok(input) = streamed_input(json, placeholder) {
                    shown.push_str(&answer_text(&input, tool));
                }
            }
            None => {
                for p in self.blocks.values() {
                    if let Partial::Text(text) = p {
                        shown.push_str(text);
                    }
                }
            }
        }
    }
}

impl StreamDecoder for Stream {
    fn on_frame(&mut self, frame: Frame, shown: &mut String) -> Result<bool, Fault> {
        let Frame::Event { data, .. } = frame else { return Ok(false) };
        // The `event:` name repeats the JSON `type`; the JSON is authoritative.
        let event: Event = serde_json::from_str(&data).map_err(|e| Fault::bad_json("Anthropic stream event", &e))?;
        match event {
            Event::MessageStart { message } => {
                self.model = message.model;
                self.usage.input_tokens = message.usage.input_tokens.unwrap_or(0);
                self.usage.output_tokens = message.usage.output_tokens.unwrap_or(0);
            }
            Event::ContentBlockStart { index, content_block } => {
                let partial = match content_block {
                    RespBlock::Text { text } => {
                        if !self.holds_text() {
                            shown.push_str(&text);
                        }
                        Partial::Text(text)
                    }
                    RespBlock::ToolUse { id, name, input } => {
                        Partial::ToolUse { id, name, json: String::new(), placeholder: input }
                    }
                    RespBlock::Thinking { thinking, signature } => Partial::Thinking { thinking, signature },
                    RespBlock::RedactedThinking { data } => Partial::Redacted(data),
                    RespBlock::Other => Partial::Other,
                };
                self.blocks.insert(index, partial);
            }
            Event::ContentBlockDelta { index, delta } => match (self.blocks.get_mut(&index), delta) {
                (Some(Partial::Text(t)), BlockDelta::TextDelta { text }) => {
                    // `holds_text`, read through the field: `self.blocks` is borrowed.
                    if self.ctx.answer_tool.is_none() {
                        shown.push_str(&text);
                    }
                    t.push_str(&text);
                }
                (Some(Partial::ToolUse { json, .. }), BlockDelta::InputJsonDelta { partial_json }) => {
                    json.push_str(&partial_json)
                }
                (Some(Partial::Thinking { thinking, .. }), BlockDelta::ThinkingDelta { thinking: t }) => {
                    thinking.push_str(&t)
                }
                (Some(Partial::Thinking { signature, .. }), BlockDelta::SignatureDelta { signature: s }) => {
                    signature.get_or_insert_with(String::new).push_str(&s)
                }
                (None, _) => return Err(Fault::malformed(format!("delta for unknown content block {index}"))),
                _ => {} // citations and future delta types
            },
            Event::ContentBlockStop {} | Event::Ping | Event::Other => {}
            Event::MessageDelta { delta, usage } => {
                if delta.stop_reason.is_some() {
                    self.stop = delta.stop_reason;
                }
                // Cumulative, so it replaces rather than adds.
                if let Some(o) = usage.output_tokens {
                    self.usage.output_tokens = o;
                }
                if let Some(i) = usage.input_tokens {
                    self.usage.input_tokens = i;
                }
            }
            Event::MessageStop => {
                self.done = true;
                self.show_held_text(shown);
                return Ok(true);
            }
            Event::Error { error } => {
                let info = error_info(error);
                let transient = info.kind.is_some_and(|k| {
                    matches!(k, ErrorKind::Overloaded | ErrorKind::RateLimited | ErrorKind::Server | ErrorKind::Timeout)
                });
                return Err(Fault {
                    retryable: Some(transient),
                    ..Fault::new(ErrorKind::StreamError, format!("error event inside the stream: {}", info.message))
                });
            }
        }
        Ok(false)
    }

    fn finish(self: Box<Self>) -> Result<ChatResponse, Fault> {
        let mut this = *self;
        if !this.done {
            return Err(Fault::truncated_stream());
        }
        let mut content = Vec::new();
        for (_, p) in std::mem::take(&mut this.blocks) {
            match p {
                Partial::Text(text) => content.push(ContentBlock::text(text)),
                Partial::ToolUse { id, name, json, placeholder } => {
                    let input = streamed_input(&json, &placeholder)?;
                    content.push(ContentBlock::ToolUse {
                        id: this.ctx.ids.accept(id.as_deref()),
                        name,
                        input,
                        provider_state: None,
                    });
                }
                Partial::Thinking { thinking, signature } => {
                    content.push(ContentBlock::Thinking { thinking, signature, provider_state: None })
                }
                Partial::Redacted(data) => content.push(ContentBlock::RedactedThinking { data }),
                Partial::Other => {}
            }
        }
        let content = answer_from_tool(content, this.ctx.answer_tool.as_ref());
        Ok(ChatResponse {
            message: Message { role: Role::Assistant, content },
            stop_reason: stop_reason(this.stop.as_deref()),
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
    use serde_json::json;

    #[test]
    fn encodes_the_fixture_requests() {
        let cfg = config(KIND);
        let req = weather_turn1();
        let call = encode(&req, &cfg, &settings("claude-sonnet-4-5", 1024), &mut ctx_for(&req, "m")).unwrap();
        assert_eq!(call.url, "http://provider.test/v1/messages");
        assert!(call.headers.contains(&("anthropic-version", "2023-06-01".into())));
        assert!(call.headers.contains(&("x-api-key", "test-key-anthropic".into())));
        let body = call.body.unwrap();
        assert_valid(KIND, &body);
        let mut expected = fixture_json("anthropic_request_turn1.json");
        // We always send blocks (equivalent to the fixture's string shorthand).
        expected["messages"][0]["content"] = json!([{"type": "text", "text": "What's the weather in Oslo?"}]);
        assert_eq!(body, expected);

        let req = weather_turn2(&tool_use_from_fixture(KIND));
        let body = encode(&req, &cfg, &settings("claude-sonnet-4-5", 1024), &mut ctx_for(&req, "m")).unwrap().body.unwrap();
        assert_valid(KIND, &body);
        let expected = fixture_json("anthropic_request_turn2.json");
        assert_eq!(body["messages"][1], expected["messages"][1]);
        assert_eq!(body["messages"][2], expected["messages"][2]);
    }

    #[test]
    fn decodes_tool_use_and_final_text() {
        let mut ctx = ctx_for(&weather_turn1(), "claude-sonnet-4-5");
        let r = crate::providers::decode_chat(KIND, fixture("anthropic_tool_use.json").as_bytes(), &mut ctx).unwrap();
        assert_eq!(r.stop_reason, StopReason::ToolUse);
        assert_eq!(r.usage, Usage { input_tokens: 412, output_tokens: 58 });
        assert_eq!(r.text(), "Let me check that for you.");
        let calls = r.message.tool_calls();
        assert_eq!(calls.len(), 1);
        assert_eq!(
            (calls[0].id, calls[0].name, calls[0].input),
            ("toolu_01XyZaBcDeFgHiJkLmNoPqRs", "get_weather", &json!({"city": "Oslo"}))
        );

        let r = crate::providers::decode_chat(KIND, fixture("anthropic_final_text.json").as_bytes(), &mut ctx).unwrap();
        assert_eq!(r.stop_reason, StopReason::EndTurn);
        assert_eq!(r.text(), "It is 4 C with light snow in Oslo.");
    }

    #[test]
    fn strips_foreign_state_and_reasoning_and_empty_text() {
        let history = vec![
            Message::user("hi"),
            Message {
                role: Role::Assistant,
                content: vec![
                    foreign_thinking(ProviderKind::Google),
                    ContentBlock::Text { text: String::new(), provider_state: Some(google_state("sig-a")) },
                    ContentBlock::ToolUse {
                        id: "call_a".into(),
                        name: "get_weather".into(),
                        input: json!({"city": "Oslo"}),
                        provider_state: Some(google_state("sig-b")),
                    },
                ],
            },
            Message {
                role: Role::User,
                content: vec![
                    ContentBlock::text("and also"),
                    ContentBlock::ToolResult { tool_use_id: "call_a".into(), content: "4 C".into(), is_error: true },
                ],
            },
        ];
        let req = ChatRequest { messages: history, tools: vec![weather_tool()], ..ChatRequest::default() };
        let body = encode(&req, &config(KIND), &settings("m", 10), &mut ctx_for(&req, "m")).unwrap().body.unwrap();
        assert_valid(KIND, &body);
        let text = body.to_string();
        assert!(!text.contains("provider_state") && !text.contains("sig-") && !text.contains("thinking"), "{text}");
        assert_eq!(body["messages"][1]["content"].as_array().unwrap().len(), 1);
        // Tool results first in the user message.
        assert_eq!(body["messages"][2]["content"][0]["type"], "tool_result");
        assert_eq!(body["messages"][2]["content"][0]["is_error"], true);
    }

    #[test]
    fn stream_with_input_json_delta_and_ping() {
        let r = decode_stream(KIND, &weather_turn1(), &fixture("anthropic_stream_tool_use.sse")).unwrap();
        assert_eq!(r.text(), "Let me check that for you.");
        assert_eq!(r.message.tool_calls()[0].input, &json!({"city": "Oslo"}));
        assert_eq!(r.usage, Usage { input_tokens: 412, output_tokens: 58 });
        assert_eq!(r.stop_reason, StopReason::ToolUse);
    }

    #[test]
    fn stream_error_event_is_a_transient_stream_error() {
        let f = decode_stream(KIND, &weather_turn1(), &fixture("anthropic_stream_error_midstream.sse")).unwrap_err();
        assert_eq!(f.kind, ErrorKind::StreamError);
        assert_eq!(f.retryable, Some(true));
        assert!(f.message.contains("overloaded_error"));
    }

    fn weather_report() -> OutputSchema {
        OutputSchema::new(
            "weather_report",
            json!({"type": "object", "properties": {"city": {"type": "string"}, "temp": {"type": "number"}},
                   "required": ["city", "temp"]}),
        )
    }

    #[test]
    fn an_output_schema_is_a_forced_tool() {
        let mut req = ChatRequest::from_prompt("Weather in Oslo as JSON");
        req.output = Some(weather_report());
        let mut ctx = ctx_for(&req, "m");
        let body = encode(&req, &config(KIND), &settings("m", 100), &mut ctx).unwrap().body.unwrap();
        assert_valid(KIND, &body);
        assert_eq!(
            body["tools"],
            json!([{"name": "weather_report", "description": ANSWER_TOOL_DESCRIPTION,
                    "input_schema": weather_report().schema}])
        );
        assert_eq!(body["tool_choice"], json!({"type": "tool", "name": "weather_report"}));
        assert_eq!(ctx.answer_tool, Some(AnswerTool { name: "weather_report".into(), wrapped: false }));

        // A schema of something other than an object is wrapped, its definitions moved to the wrapper.
        req.output = Some(OutputSchema::new(
            "cities",
            json!({"type": "array", "items": {"$ref": "#/$defs/City"}, "$defs": {"City": {"type": "string"}}}),
        ));
        let mut ctx = ctx_for(&req, "m");
        let body = encode(&req, &config(KIND), &settings("m", 100), &mut ctx).unwrap().body.unwrap();
        assert_valid(KIND, &body);
        assert_eq!(
            body["tools"][0]["input_schema"],
            json!({"type": "object", "required": ["value"], "$defs": {"City": {"type": "string"}},
                   "properties": {"value": {"type": "array", "items": {"$ref": "#/$defs/City"}}}})
        );
        assert!(ctx.answer_tool.unwrap().wrapped);
    }

    #[test]
    fn the_answer_tool_call_comes_back_as_the_text() {
        let mut req = ChatRequest::from_prompt("Weather in Oslo as JSON");
        req.output = Some(weather_report());
        let mut ctx = ctx_for(&req, "m");
        encode(&req, &config(KIND), &settings("m", 100), &mut ctx).unwrap();
        let answer = json!({"content": [
            {"type": "thinking", "thinking": "t", "signature": "s"},
            {"type": "text", "text": "Here it is:"},
            {"type": "tool_use", "id": "toolu_1", "name": "weather_report", "input": {"city": "Oslo", "temp": 4}}],
            "stop_reason": "tool_use", "usage": {"input_tokens": 1, "output_tokens": 2}});
        let r = crate::providers::decode_chat(KIND, answer.to_string().as_bytes(), &mut ctx.clone()).unwrap();
        assert_eq!(r.text(), r#"{"city":"Oslo","temp":4}"#);
        assert!(!r.has_tool_calls());
        assert_eq!(r.stop_reason, StopReason::EndTurn);
        assert!(matches!(r.message.content[0], ContentBlock::Thinking { .. }), "reasoning stays");
        assert_eq!(r.message.content.len(), 2);

        // A wrapped answer is unwrapped.
        let mut wrapped = ctx.clone();
        wrapped.answer_tool = Some(AnswerTool { name: "weather_report".into(), wrapped: true });
        let answer = json!({"content": [{"type": "tool_use", "id": "toolu_1", "name": "weather_report",
                                         "input": {"value": [1, "two"]}}], "stop_reason": "tool_use"});
        let r = crate::providers::decode_chat(KIND, answer.to_string().as_bytes(), &mut wrapped).unwrap();
        assert_eq!(r.text(), r#"[1,"two"]"#);

        // A server that ignored the forced tool answered text: it stays text.
        let answer = json!({"content": [{"type": "text", "text": "{\"city\": \"Oslo\"}"}], "stop_reason": "end_turn"});
        let r = crate::providers::decode_chat(KIND, answer.to_string().as_bytes(), &mut ctx.clone()).unwrap();
        assert_eq!(r.text(), "{\"city\": \"Oslo\"}");

        // Without an output schema a call of that name is a tool call like any other.
        let answer = json!({"content": [{"type": "tool_use", "id": "toolu_1", "name": "weather_report", "input": {}}]});
        let r = crate::providers::decode_chat(KIND, answer.to_string().as_bytes(), &mut ctx_for(&req, "m")).unwrap();
        assert!(r.has_tool_calls());
    }

    #[test]
    fn a_streamed_answer_tool_call_is_shown_and_returned_as_the_text() {
        let mut req = ChatRequest::from_prompt("Weather in Oslo as JSON");
        req.output = Some(weather_report());
        let stream = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"m\",\"usage\":{}}}\n\n\
            event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"weather_report\",\"input\":{}}}\n\n\
            event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"city\\\": \\\"Os\"}}\n\n\
            event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"lo\\\", \\\"temp\\\": 4}\"}}\n\n\
            event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
            event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":9}}\n\n\
            event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
        let mut ctx = ctx_for(&req, "m");
        encode(&req, &config(KIND), &settings("m", 100), &mut ctx).unwrap();
        let (shown, r) = decode_stream_with(KIND, ctx.clone(), stream);
        let r = r.unwrap();
        assert_eq!(r.text(), r#"{"city":"Oslo","temp":4}"#);
        assert_eq!(shown, [r.text()], "shown once, when complete");
        assert!(!r.has_tool_calls());

        // Text beside the call is never shown; the text of a model that did not call the tool is, at the end.
        let text = "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n\
            event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"Done.\"}}\n\n";
        let (start, rest) = stream.split_at(stream.find("event: message_delta").unwrap());
        let (shown, r) = decode_stream_with(KIND, ctx.clone(), &format!("{start}{text}{rest}"));
        assert_eq!(r.unwrap().text(), r#"{"city":"Oslo","temp":4}"#);
        assert_eq!(shown.concat(), r#"{"city":"Oslo","temp":4}"#);
        let only_text = format!("{}{text}{rest}", &start[..start.find("event: content_block_start").unwrap()]);
        let (shown, r) = decode_stream_with(KIND, ctx, &only_text);
        assert_eq!((shown, r.unwrap().text()), (vec!["Done.".to_owned()], "Done.".to_owned()));
    }

    #[test]
    fn error_bodies() {
        let info = parse_error(fixture_body("anthropic_error_overloaded.json").as_bytes());
        assert_eq!(info.kind, Some(ErrorKind::Overloaded));
        let info = parse_error(fixture_body("anthropic_error_rate_limit.json").as_bytes());
        assert_eq!(info.kind, Some(ErrorKind::RateLimited));
        assert!(info.message.contains("per-minute"));
    }
}
