//! Ollama native chat (`POST {CKS_OLLAMA_HOST}/api/chat`), `stream: false` unless streaming is asked for
//! (Ollama streams by default). Tools are OpenAI-style functions; `arguments` are objects both ways (a
//! string is parsed if a server sends one). Tool calls are detected from `message.tool_calls`, never from
//! `done_reason` (always `"stop"`). Each result is its own `tool` message with `tool_name`, the documented
//! field every version reads. Ollama's `thinking` text travels back only to Ollama.
//!
//! Structured output: the schema as the request's `format` (Ollama constrains the answer to it); the answer
//! is the message's `content` as for any text.
//!
//! Embeddings: `POST {CKS_OLLAMA_HOST}/api/embed` with `{model, input: [texts]}`, answered by
//! `{model, embeddings: [[f32]]}` in the order of the inputs. `truncate` is left at its default (true):
//! a text longer than the model's context is embedded by its beginning rather than refused.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{
    CallSettings, DecodeCtx, ErrorInfo, Fault, HttpCall, Method, ModelInfo, StreamDecoder, arguments_from_string,
    as_object, tool_names_by_id,
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
    name: "ollama",
    title: "Ollama",
    key_variables: &[],
    key: Key::None,
    credentials: "the Ollama server's credentials",
    base_url: Variable { name: "CKS_OLLAMA_HOST", default: Some("http://localhost:11434"), meaning: "Ollama base URL" },
    model: Variable { name: "CKS_OLLAMA_MODEL", default: Some("llama3.2"), meaning: "Ollama model" },
    model_fallback: None,
    help: "ollama (CKS_OLLAMA_HOST, CKS_OLLAMA_MODEL)",
    unreachable_hint: Some("Is Ollama running (`ollama serve`) at CKS_OLLAMA_HOST?"),
    auto: Auto::WhenReachable,
    encode: |request, config, settings, _| encode(request, config, settings),
    decode,
    framing: Framing::Ndjson,
    stream: |ctx| Box::new(Stream::new(ctx)),
    parse_error,
    encode_list_models,
    decode_list_models,
    embeddings: Some(EmbeddingEndpoint {
        batch_size: 64,
        default_model: Some("nomic-embed-text"),
        example_model: "nomic-embed-text",
        encode: encode_embed,
        decode: decode_embed,
    }),
};

const KIND: ProviderKind = ProviderKind::Ollama;

#[derive(Serialize)]
struct Request<'a> {
    model: &'a str,
    messages: Vec<WireMessage>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    stream: bool,
    options: Options,
    #[serde(skip_serializing_if = "Option::is_none")]
    format: Option<&'a Value>,
}

#[derive(Serialize)]
struct Options {
    num_predict: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
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
struct WireMessage {
    role: &'static str,
    content: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<WireToolCall>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking: Option<String>,
}

impl WireMessage {
    fn new(role: &'static str, content: String) -> Self {
        WireMessage { role, content, tool_calls: Vec::new(), tool_name: None, thinking: None }
    }
}

#[derive(Serialize)]
struct WireToolCall {
    function: WireCall,
}

#[derive(Serialize)]
struct WireCall {
    name: String,
    arguments: Value,
}

/// Build the request.
pub(crate) fn encode(
    request: &ChatRequest,
    config: &ProviderConfig,
    settings: &CallSettings,
) -> Result<HttpCall, LlmError> {
    let fail = |m: String| LlmError::BadRequest(ErrorContext::new(KIND, &settings.model, m));
    let names = tool_names_by_id(request);
    let mut messages = Vec::new();
    if let Some(system) = request.system.as_deref().filter(|s| !s.is_empty()) {
        messages.push(WireMessage::new("system", system.to_owned()));
    }
    for m in &request.messages {
        match m.role {
            Role::User => {
                let mut has_results = false;
                for b in &m.content {
                    if let ContentBlock::ToolResult { tool_use_id, content, is_error } = b {
                        has_results = true;
                        let name = names.get(tool_use_id.as_str()).ok_or_else(|| {
                            fail(format!("tool_result {tool_use_id:?} answers no tool_use in the conversation"))
                        })?;
                        let content = if *is_error { format!("Error: {content}") } else { content.clone() };
                        let mut msg = WireMessage::new("tool", content);
                        msg.tool_name = Some((*name).to_owned());
                        messages.push(msg);
                    }
                }
                let text = m.text();
                if !text.is_empty() || !has_results {
                    messages.push(WireMessage::new("user", text));
                }
            }
            Role::Assistant => {
                let mut msg = WireMessage::new("assistant", m.text());
                for b in &m.content {
                    match b {
                        ContentBlock::ToolUse { name, input, .. } => msg.tool_calls.push(WireToolCall {
                            function: WireCall { name: name.clone(), arguments: as_object(input) },
                        }),
                        ContentBlock::Thinking { thinking, provider_state: Some(s), .. } if s.provider == KIND => {
                            msg.thinking.get_or_insert_with(String::new).push_str(thinking);
                        }
                        _ => {}
                    }
                }
                if msg.content.is_empty() && msg.tool_calls.is_empty() {
                    continue; // an empty answer carries nothing
                }
                messages.push(msg);
            }
        }
    }
    if messages.is_empty() {
        return Err(fail("the conversation has no message to send".into()));
    }
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
        stream: settings.stream,
        options: Options {
            num_predict: settings.max_tokens,
            temperature: request.temperature.map(super::schema::round_f32),
        },
        format: request.output.as_ref().map(|o| &o.schema),
    };
    let body = serde_json::to_value(&body).map_err(|e| fail(format!("cannot encode request: {e}")))?;
    Ok(HttpCall {
        method: Method::Post,
        url: format!("{}/api/chat", config.base_url),
        headers: headers(config),
        body: Some(body),
    })
}

/// A local Ollama needs no key; ollama.com and authenticating proxies take a bearer token.
fn headers(config: &ProviderConfig) -> Vec<(&'static str, String)> {
    config.api_key.iter().map(|k| ("authorization", format!("Bearer {}", k.expose()))).collect()
}

#[derive(Deserialize)]
struct Response {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    message: Option<RespMessage>,
    #[serde(default)]
    done: bool,
    #[serde(default)]
    done_reason: Option<String>,
    #[serde(default)]
    prompt_eval_count: Option<u64>,
    #[serde(default)]
    eval_count: Option<u64>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
struct RespMessage {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    thinking: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<RespToolCall>>,
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
    arguments: Option<Value>,
}

fn tool_use(call: RespToolCall, ctx: &mut DecodeCtx) -> ContentBlock {
    let (input, provider_state) = match call.function.arguments {
        Some(Value::String(raw)) => arguments_from_string(&raw, KIND),
        Some(v) => (as_object(&v), None),
        None => (Value::Object(serde_json::Map::new()), None),
    };
    ContentBlock::ToolUse { id: ctx.ids.accept(call.id.as_deref()), name: call.function.name, input, provider_state }
}

fn thinking_block(text: String) -> ContentBlock {
    ContentBlock::Thinking { thinking: text, signature: None, provider_state: Some(ProviderState::new(KIND)) }
}

fn stop_reason(s: Option<&str>) -> StopReason {
    match s {
        Some("stop") | None => StopReason::EndTurn,
        Some("length") => StopReason::MaxTokens,
        Some(other) => StopReason::Other(other.to_owned()),
    }
}

fn usage(r: &Response) -> Usage {
    Usage { input_tokens: r.prompt_eval_count.unwrap_or(0), output_tokens: r.eval_count.unwrap_or(0) }
}

/// Parse a 2xx answer.
pub(crate) fn decode(body: &[u8], ctx: &mut DecodeCtx) -> Result<ChatResponse, Fault> {
    let r: Response = serde_json::from_slice(body).map_err(|e| Fault::bad_json("Ollama answer", &e))?;
    if let Some(e) = r.error {
        return Err(Fault::new(ErrorKind::Server, format!("error inside a 200 answer: {e}")));
    }
    let u = usage(&r);
    let Some(message) = r.message else {
        return Err(Fault::malformed("the answer has no message"));
    };
    let mut content = Vec::new();
    if let Some(t) = message.thinking.filter(|t| !t.is_empty()) {
        content.push(thinking_block(t));
    }
    if let Some(t) = message.content.filter(|t| !t.is_empty()) {
        content.push(ContentBlock::text(t));
    }
    for call in message.tool_calls.unwrap_or_default() {
        content.push(tool_use(call, ctx));
    }
    Ok(ChatResponse {
        message: Message { role: Role::Assistant, content },
        stop_reason: stop_reason(r.done_reason.as_deref()),
        usage: u,
        model: r.model.unwrap_or_else(|| ctx.model.clone()),
        provider: KIND,
        requests: 1,
    })
}

#[derive(Deserialize)]
struct ErrorBody {
    error: String,
}

/// Parse an error body (`{"error": "..."}`).
pub(crate) fn parse_error(body: &[u8]) -> ErrorInfo {
    let Ok(e) = serde_json::from_slice::<ErrorBody>(body) else { return ErrorInfo::default() };
    let mut info = ErrorInfo { message: e.error, ..ErrorInfo::default() };
    if info.message.contains("does not support tools") {
        info.message.push_str(" (choose a model with tool support via CKS_OLLAMA_MODEL, e.g. llama3.2 or qwen2.5)");
    } else if info.message.contains("not found") {
        info.message.push_str(" (pull it with `ollama pull <model>` or set CKS_OLLAMA_MODEL)");
    }
    info
}

/// `GET /api/tags` (also the reachability probe).
pub(crate) fn encode_list_models(config: &ProviderConfig) -> HttpCall {
    HttpCall { method: Method::Get, url: format!("{}/api/tags", config.base_url), headers: headers(config), body: None }
}

#[derive(Deserialize)]
struct Tags {
    #[serde(default)]
    models: Vec<Tag>,
}

#[derive(Deserialize)]
struct Tag {
    name: String,
}

/// Parse `/api/tags`.
pub(crate) fn decode_list_models(body: &[u8]) -> Result<Vec<ModelInfo>, Fault> {
    let tags: Tags = serde_json::from_slice(body).map_err(|e| Fault::bad_json("Ollama model list", &e))?;
    Ok(tags.models.into_iter().map(|m| ModelInfo { id: m.name, display_name: None, provider: KIND }).collect())
}

// ---- streaming -------------------------------------------------------------------------------------------

/// Accumulates NDJSON lines until `done: true`.
pub(crate) struct Stream {
    ctx: DecodeCtx,
    text: String,
    thinking: String,
    calls: Vec<ContentBlock>,
    done: Option<(Option<String>, Usage, Option<String>)>,
}

impl Stream {
    pub(crate) fn new(ctx: DecodeCtx) -> Self {
        Stream { ctx, text: String::new(), thinking: String::new(), calls: Vec::new(), done: None }
    }
}

impl StreamDecoder for Stream {
    fn on_frame(&mut self, frame: Frame, shown: &mut String) -> Result<bool, Fault> {
        let Frame::Line(line) = frame else { return Ok(false) };
        let r: Response = serde_json::from_str(&line).map_err(|e| Fault::bad_json("Ollama stream line", &e))?;
        if let Some(e) = r.error {
            // The status stays 200; the model failed while generating. Another attempt may succeed.
            return Err(Fault {
                retryable: Some(true),
                ..Fault::new(ErrorKind::StreamError, format!("error inside the stream: {e}"))
            });
        }
        let u = usage(&r);
        if let Some(m) = r.message {
            if let Some(t) = m.content {
                shown.push_str(&t);
                self.text.push_str(&t);
            }
            if let Some(t) = m.thinking {
                self.thinking.push_str(&t);
            }
            for call in m.tool_calls.unwrap_or_default() {
                let block = tool_use(call, &mut self.ctx);
                self.calls.push(block);
            }
        }
        if r.done {
            self.done = Some((r.done_reason, u, r.model));
            return Ok(true);
        }
        Ok(false)
    }

    fn finish(self: Box<Self>) -> Result<ChatResponse, Fault> {
        let this = *self;
        let Some((reason, usage, model)) = this.done else { return Err(Fault::truncated_stream()) };
        let mut content = Vec::new();
        if !this.thinking.is_empty() {
            content.push(thinking_block(this.thinking));
        }
        if !this.text.is_empty() {
            content.push(ContentBlock::text(this.text));
        }
        content.extend(this.calls);
        Ok(ChatResponse {
            message: Message { role: Role::Assistant, content },
            stop_reason: stop_reason(reason.as_deref()),
            usage,
            model: model.unwrap_or(this.ctx.model),
            provider: KIND,
            requests: 1,
        })
    }
}

/// `POST {host}/api/embed` for these texts.
pub(crate) fn encode_embed(texts: &[String], config: &ProviderConfig, model: &str) -> HttpCall {
    let body = serde_json::json!({ "model": model, "input": texts });
    HttpCall { method: Method::Post, url: format!("{}/api/embed", config.base_url), headers: Vec::new(), body: Some(body) }
}

#[derive(Deserialize)]
struct EmbedResponse {
    embeddings: Vec<Vec<f32>>,
}

/// Parse an `/api/embed` answer: its vectors, in the order of the inputs.
pub(crate) fn decode_embed(body: &[u8]) -> Result<Vec<Vec<f32>>, Fault> {
    let response: EmbedResponse =
        serde_json::from_slice(body).map_err(|e| Fault::bad_json("Ollama embeddings answer", &e))?;
    Ok(response.embeddings)
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
        let call = encode(&weather_turn1(), &cfg, &settings("llama3.2", 1024)).unwrap();
        assert_eq!(call.url, "http://provider.test/api/chat");
        let body = call.body.unwrap();
        assert_valid(KIND, &body);
        let expected = fixture_json("ollama_request_turn1.json");
        for key in ["model", "messages", "tools", "stream"] {
            assert_eq!(body[key], expected[key], "{key}");
        }
        assert_eq!(body["options"]["num_predict"], 1024);

        let req = weather_turn2(&tool_use_from_fixture(KIND));
        let body = encode(&req, &cfg, &settings("llama3.2", 1024)).unwrap().body.unwrap();
        assert_valid(KIND, &body);
        assert_eq!(body["messages"], fixture_json("ollama_request_turn2.json")["messages"]);
    }

    #[test]
    fn decodes_tool_calls_from_content_not_done_reason() {
        let mut ctx = ctx_for(&weather_turn1(), "m");
        let r = crate::providers::decode_chat(KIND, fixture("ollama_tool_calls.json").as_bytes(), &mut ctx).unwrap();
        assert_eq!(r.stop_reason, StopReason::ToolUse);
        assert_eq!(r.usage, Usage { input_tokens: 160, output_tokens: 18 });
        let calls = r.message.tool_calls();
        assert_eq!((calls[0].id, calls[0].input), ("call_k3j2h1g0", &json!({"city": "Oslo"})));
        let r = crate::providers::decode_chat(KIND, fixture("ollama_final_text.json").as_bytes(), &mut ctx).unwrap();
        assert_eq!(r.text(), "It is 4 C with light snow in Oslo.");
        assert_eq!(r.stop_reason, StopReason::EndTurn);
    }

    #[test]
    fn string_arguments_and_missing_ids() {
        let body = json!({"model": "m", "message": {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "f", "arguments": "{\"a\":1}"}}, {"function": {"name": "f", "arguments": {"b": 2}}}]}, "done": true});
        let mut ctx = ctx_for(&weather_turn1(), "m");
        let r = crate::providers::decode_chat(KIND, body.to_string().as_bytes(), &mut ctx).unwrap();
        let calls = r.message.tool_calls();
        assert_eq!(calls[0].input, &json!({"a": 1}));
        assert_ne!(calls[0].id, calls[1].id);
    }

    #[test]
    fn streams() {
        let r = decode_stream(KIND, &weather_turn1(), &fixture("ollama_stream_tool_calls.ndjson")).unwrap();
        assert_eq!(r.message.tool_calls()[0].input, &json!({"city": "Oslo"}));
        assert_eq!(r.usage, Usage { input_tokens: 160, output_tokens: 18 });
        let f = decode_stream(KIND, &weather_turn1(), &fixture("ollama_stream_error_midstream.ndjson")).unwrap_err();
        assert_eq!(f.kind, ErrorKind::StreamError);
        assert!(f.message.contains("an error was encountered while running the model"));
    }

    #[test]
    fn an_output_schema_is_the_format() {
        let schema = json!({"type": "array", "items": {"type": "string"}});
        let mut req = ChatRequest::from_prompt("Three cities");
        req.output = Some(OutputSchema::new("cities", schema.clone()));
        let body = encode(&req, &config(KIND), &settings("m", 5)).unwrap().body.unwrap();
        assert_valid(KIND, &body);
        assert_eq!(body["format"], schema);
        let body = encode(&weather_turn1(), &config(KIND), &settings("m", 5)).unwrap().body.unwrap();
        assert!(body.get("format").is_none());
    }

    #[test]
    fn error_bodies_and_tags() {
        let info = parse_error(fixture_body("ollama_error_no_tools.json").as_bytes());
        assert!(info.message.contains("does not support tools") && info.message.contains("CKS_OLLAMA_MODEL"));
        let models = decode_list_models(fixture("ollama_tags.json").as_bytes()).unwrap();
        assert_eq!(models[0].id, "llama3.2:latest");
    }
}
