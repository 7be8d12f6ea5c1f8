//! The four adapters, and what they share. Adapters only translate: they build an [`HttpCall`] from a
//! [`ChatRequest`] (or from texts to embed) and turn response bytes (or stream frames) back into a
//! [`ChatResponse`] (or vectors). They never send anything; sending, retrying, timing out and redacting
//! happen once, in [`crate::http`].
//!
//! Adding a provider is its adapter file, which exports an [`Adapter`] named `ADAPTER`, and one line
//! in [`providers!`]'s list below. Everything else the crate knows of a provider (its name, variables,
//! defaults, key rule, its part in `auto`, its encoders and decoders, its embeddings endpoint) is read
//! from that table; nothing else branches on a provider.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::ProviderConfig;
use crate::conversation::{ChatRequest, ChatResponse, ContentBlock, ProviderState};
use crate::error::{ErrorContext, ErrorKind, LlmError};
use crate::stream::{Frame, Framing};

/// Declares the adapter modules, [`ProviderKind`] with one variant per provider, and the lookup of
/// each one's [`Adapter`]. The order of the list is the order of listings and of `auto`'s choice.
macro_rules! providers {
    ($($(#[$doc:meta])* $variant:ident => $module:ident,)+) => {
        $(pub(crate) mod $module;)+

        /// The provider families this crate speaks.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum ProviderKind {
            $($(#[$doc])* $variant,)+
        }

        impl ProviderKind {
            /// Every provider, in the order used for listings.
            pub const ALL: [ProviderKind; [$(stringify!($variant)),+].len()] = [$(ProviderKind::$variant,)+];
        }

        /// The table entry of `kind`.
        pub(crate) fn adapter(kind: ProviderKind) -> &'static Adapter {
            match kind {
                $(ProviderKind::$variant => &$module::ADAPTER,)+
            }
        }
    };
}

providers! {
    /// Ollama native `/api/chat`.
    Ollama => ollama,
    /// Anthropic Messages API.
    Anthropic => anthropic,
    /// Google Gemini, native `generateContent` API.
    Google => google,
    /// OpenAI chat completions and the servers that imitate it (vLLM, LM Studio, Groq, DeepSeek, ...).
    OpenaiCompatible => openai_compat,
}

mod schema;

/// One provider's entry in the table: its facts and its translators.
pub(crate) struct Adapter {
    /// The name used in `CKS_LLM_PROVIDER` and in serialized data (the variant in snake case).
    pub(crate) name: &'static str,
    /// The name people use, in messages.
    pub(crate) title: &'static str,
    /// The variables that may hold the key, the first one set wins (empty: the provider takes none).
    pub(crate) key_variables: &'static [Variable],
    /// Whether a call needs a key.
    pub(crate) key: Key,
    /// What to check when the provider refuses the credentials.
    pub(crate) credentials: &'static str,
    /// The variable and default of the base URL.
    pub(crate) base_url: Variable,
    /// The variable and default of the model.
    pub(crate) model: Variable,
    /// A variable read for the model when `model` is unset (no default of its own).
    pub(crate) model_fallback: Option<Variable>,
    /// How `CKS_LLM_PROVIDER` is told about it: the name and the variables to set, for messages.
    pub(crate) help: &'static str,
    /// What to suggest when the provider cannot be reached, beyond the network and base URL.
    pub(crate) unreachable_hint: Option<&'static str>,
    /// Whether and how `auto` may choose it.
    pub(crate) auto: Auto,
    /// Builds a chat request (the context learns any tool names changed on the wire).
    pub(crate) encode: fn(&ChatRequest, &ProviderConfig, &CallSettings, &mut DecodeCtx) -> Result<HttpCall, LlmError>,
    /// Parses a 2xx chat answer.
    pub(crate) decode: fn(&[u8], &mut DecodeCtx) -> Result<ChatResponse, Fault>,
    /// How a streamed answer is framed.
    pub(crate) framing: Framing,
    /// A decoder for a streamed answer.
    pub(crate) stream: fn(DecodeCtx) -> Box<dyn StreamDecoder>,
    /// Reads an error body.
    pub(crate) parse_error: fn(&[u8]) -> ErrorInfo,
    /// Builds the request listing models (also the reachability probe).
    pub(crate) encode_list_models: fn(&ProviderConfig) -> HttpCall,
    /// Parses a model list.
    pub(crate) decode_list_models: fn(&[u8]) -> Result<Vec<ModelInfo>, Fault>,
    /// The embeddings endpoint, when the provider has one.
    pub(crate) embeddings: Option<EmbeddingEndpoint>,
}

/// A provider's embeddings endpoint: its facts and its translators.
pub(crate) struct EmbeddingEndpoint {
    /// Texts sent in one request at most (the provider's limit, or a size that keeps a request small).
    pub(crate) batch_size: usize,
    /// The model used when none is named; `None`: one must be named.
    pub(crate) default_model: Option<&'static str>,
    /// A model to suggest in messages.
    pub(crate) example_model: &'static str,
    /// Builds the request embedding these texts (none blank) with this model.
    pub(crate) encode: fn(&[String], &ProviderConfig, &str) -> HttpCall,
    /// Parses a 2xx answer: one vector per text, in the order of the texts.
    pub(crate) decode: fn(&[u8]) -> Result<Vectors, Fault>,
}

/// One vector per embedded text.
pub(crate) type Vectors = Vec<Vec<f32>>;

/// An environment variable the provider reads, as `--help` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Variable {
    /// Its name.
    pub name: &'static str,
    /// Its default, when it has one.
    pub default: Option<&'static str>,
    /// What it means, in a few words.
    pub meaning: &'static str,
}

/// When a provider needs a key.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Key {
    Required,
    /// Only at this host (the real OpenAI API; local compatible servers accept none).
    AtHost(&'static str),
    None,
}

/// A provider's part in `CKS_LLM_PROVIDER=auto`, tried in the table's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Auto {
    /// Chosen when it answers its model-list request within the probe timeout.
    WhenReachable,
    /// Chosen when its key is set.
    WhenKeyed,
    /// Never chosen: its key, model and base URL cannot be guessed safely.
    Never,
}

/// What a provider's variable sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    /// The API key.
    Key,
    /// The base URL (an `http://` or `https://` URL).
    BaseUrl,
    /// The model a call uses when it names none.
    Model,
}

/// The variables every provider reads (keys, base URL, model), in the table's order.
pub fn variables() -> impl Iterator<Item = (Setting, &'static Variable)> {
    ProviderKind::ALL.iter().flat_map(|&kind| {
        let a = adapter(kind);
        let keys = a.key_variables.iter().map(|v| (Setting::Key, v));
        let fallback = a.model_fallback.iter().map(|v| (Setting::Model, v));
        keys.chain([(Setting::BaseUrl, &a.base_url), (Setting::Model, &a.model)]).chain(fallback)
    })
}

/// An HTTP request as an adapter describes it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HttpCall {
    pub(crate) method: Method,
    pub(crate) url: String,
    /// Header values may hold keys: never log them.
    pub(crate) headers: Vec<(&'static str, String)>,
    pub(crate) body: Option<Value>,
}

/// The two methods we use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Method {
    Get,
    Post,
}

/// Per-call settings resolved by the client.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CallSettings {
    pub(crate) model: String,
    pub(crate) max_tokens: u32,
    pub(crate) stream: bool,
}

/// A failure found while decoding, before it gets its provider/model/status context.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Fault {
    pub(crate) kind: ErrorKind,
    pub(crate) message: String,
    /// The wait the provider asked for.
    pub(crate) retry_after: Option<Duration>,
    /// Overrides the class's default retry decision (e.g. a daily quota is never retried).
    pub(crate) retryable: Option<bool>,
}

impl Fault {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Fault { kind, message: message.into(), retry_after: None, retryable: None }
    }

    pub(crate) fn malformed(message: impl Into<String>) -> Self {
        Fault::new(ErrorKind::MalformedResponse, message)
    }

    /// A body that is not the JSON we expect; the serde error says where.
    pub(crate) fn bad_json(what: &str, e: &serde_json::Error) -> Self {
        Fault::malformed(format!("the {what} is not the expected JSON ({e})"))
    }

    /// A stream that ended before its end marker: the connection was cut; another attempt may succeed.
    pub(crate) fn truncated_stream() -> Self {
        Fault {
            retryable: Some(true),
            ..Fault::new(ErrorKind::StreamError, "the stream ended before the answer was complete")
        }
    }
}

/// What an error response says, as parsed by an adapter. The HTTP layer turns it into an [`LlmError`].
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct ErrorInfo {
    /// The provider's message (and error type/code when it has one).
    pub(crate) message: String,
    /// A class the body names explicitly (e.g. Anthropic `overloaded_error`), overriding the status.
    pub(crate) kind: Option<ErrorKind>,
    /// Wait asked for in the body (Gemini `RetryInfo`).
    pub(crate) retry_after: Option<Duration>,
    /// Retry override (OpenAI `insufficient_quota`, Gemini daily quota: never; Groq `tool_use_failed`: yes).
    pub(crate) retryable: Option<bool>,
}

/// Turns stream frames into one response.
pub(crate) trait StreamDecoder: Send {
    /// Consume one frame, appending to `text` the answer text the frame adds (what a caller watching the
    /// answer arrive is shown: text parts only, never reasoning or tool arguments). `Ok(true)` when the
    /// provider has signalled the end of the answer.
    fn on_frame(&mut self, frame: Frame, text: &mut String) -> Result<bool, Fault>;
    /// The response, once the stream has ended.
    fn finish(self: Box<Self>) -> Result<ChatResponse, Fault>;
}

/// A model as listed by a provider.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModelInfo {
    /// The id to pass as `model`.
    pub id: String,
    /// A human name, when the provider gives one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// Which provider lists it.
    pub provider: ProviderKind,
}

/// Context for decoding one answer: the model asked for, the ids already used in the conversation, the
/// wire-name → tool-name map when a provider needed names changed, and the tool carrying a structured
/// answer when an adapter had to make one up.
#[derive(Debug, Clone)]
pub(crate) struct DecodeCtx {
    pub(crate) model: String,
    pub(crate) ids: IdAllocator,
    pub(crate) tool_names: HashMap<String, String>,
    pub(crate) answer_tool: Option<AnswerTool>,
}

/// A tool an adapter forced on the model to carry the answer an output schema asks for (where the provider
/// has no other way to ask for one). Its call comes back to the caller as the answer's text, never as a call.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AnswerTool {
    /// The tool's name.
    pub(crate) name: String,
    /// Whether the answer sits in the input's `value` property (tool inputs are objects; other answers are
    /// wrapped).
    pub(crate) wrapped: bool,
}

impl DecodeCtx {
    pub(crate) fn new(request: &ChatRequest, model: &str) -> Self {
        let mut ids = IdAllocator::default();
        for m in &request.messages {
            for b in &m.content {
                if let ContentBlock::ToolUse { id, .. } = b {
                    ids.seen.insert(id.clone());
                }
            }
        }
        DecodeCtx { model: model.to_owned(), ids, tool_names: HashMap::new(), answer_tool: None }
    }

    /// The declared name for a name the provider used.
    pub(crate) fn tool_name(&self, wire: &str) -> String {
        self.tool_names.get(wire).cloned().unwrap_or_else(|| wire.to_owned())
    }
}

/// Hands out tool-call ids that are unique across the conversation and valid for every provider.
#[derive(Debug, Clone, Default)]
pub(crate) struct IdAllocator {
    seen: HashSet<String>,
}

impl IdAllocator {
    /// The provider's id when it is usable, else a fresh `call_<uuid>`.
    ///
    /// Usable means: present, not used before in this conversation, and valid for every provider the
    /// history may later be sent to (Anthropic: `^[a-zA-Z0-9_-]+$`; OpenAI: at most 40 characters).
    pub(crate) fn accept(&mut self, candidate: Option<&str>) -> String {
        if let Some(c) = candidate
            && is_portable_id(c)
            && !self.seen.contains(c)
        {
            self.seen.insert(c.to_owned());
            return c.to_owned();
        }
        loop {
            let id = format!("call_{}", uuid::Uuid::new_v4().simple());
            if self.seen.insert(id.clone()) {
                return id;
            }
        }
    }
}

fn is_portable_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 40 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Tool-use id → tool name over the whole conversation (ids are unique, see [`IdAllocator`]). Gemini's
/// `functionResponse` and Ollama's `tool_name` need the name, which a `tool_result` does not carry.
pub(crate) fn tool_names_by_id(request: &ChatRequest) -> HashMap<&str, &str> {
    let mut map = HashMap::new();
    for m in &request.messages {
        for b in &m.content {
            if let ContentBlock::ToolUse { id, name, .. } = b {
                map.insert(id.as_str(), name.as_str());
            }
        }
    }
    map
}

/// The state to use when talking to `kind`: only state that `kind` produced.
pub(crate) fn own_state(state: Option<&ProviderState>, kind: ProviderKind) -> Option<&ProviderState> {
    state.filter(|s| s.provider == kind)
}

/// Tool arguments as an object: providers require one, and some send strings or scalars.
pub(crate) fn as_object(v: &Value) -> Value {
    match v {
        Value::Object(_) => v.clone(),
        Value::Null => Value::Object(serde_json::Map::new()),
        other => serde_json::json!({ "value": other }),
    }
}

/// Build the request for a chat call.
pub(crate) fn encode_chat(
    kind: ProviderKind,
    request: &ChatRequest,
    config: &ProviderConfig,
    settings: &CallSettings,
) -> Result<(HttpCall, DecodeCtx), LlmError> {
    request.check().map_err(|why| LlmError::BadRequest(ErrorContext::new(kind, &settings.model, why)))?;
    let mut ctx = DecodeCtx::new(request, &settings.model);
    let call = (adapter(kind).encode)(request, config, settings, &mut ctx)?;
    Ok((call, ctx))
}

/// Parse a 2xx chat answer.
pub(crate) fn decode_chat(kind: ProviderKind, body: &[u8], ctx: &mut DecodeCtx) -> Result<ChatResponse, Fault> {
    let mut response = (adapter(kind).decode)(body, ctx)?;
    normalise(&mut response);
    Ok(response)
}

/// The stream decoder for a chat answer.
pub(crate) fn stream_decoder(kind: ProviderKind, ctx: DecodeCtx) -> (Framing, Box<dyn StreamDecoder>) {
    let adapter = adapter(kind);
    (adapter.framing, (adapter.stream)(ctx))
}

/// Parse an error response body.
pub(crate) fn parse_error(kind: ProviderKind, status: u16, body: &[u8]) -> ErrorInfo {
    let mut info = (adapter(kind).parse_error)(body);
    if info.message.trim().is_empty() {
        // Unknown error shape (a proxy's HTML page, an empty body): show a bounded excerpt.
        let text = String::from_utf8_lossy(body);
        info.message = if text.trim().is_empty() { format!("empty body with HTTP {status}") } else { excerpt(&text) };
    }
    info
}

/// The request listing models.
pub(crate) fn encode_list_models(kind: ProviderKind, config: &ProviderConfig) -> HttpCall {
    (adapter(kind).encode_list_models)(config)
}

/// Parse a model list.
pub(crate) fn decode_list_models(kind: ProviderKind, body: &[u8]) -> Result<Vec<ModelInfo>, Fault> {
    (adapter(kind).decode_list_models)(body)
}

/// Parse a 2xx embeddings answer (only asked of a provider whose table entry has an endpoint).
pub(crate) fn decode_embeddings(kind: ProviderKind, body: &[u8]) -> Result<Vec<Vec<f32>>, Fault> {
    match &adapter(kind).embeddings {
        Some(endpoint) => (endpoint.decode)(body),
        None => Err(Fault::malformed(format!("{kind} has no embeddings endpoint"))),
    }
}

/// Post-decoding rules common to all providers: at least one block (an empty answer is one empty text
/// block, which callers treat as a final empty reply), and the stop reason derived from the content.
pub(crate) fn normalise(response: &mut ChatResponse) {
    if response.message.content.is_empty() {
        response.message.content.push(ContentBlock::text(""));
    }
    if response.has_tool_calls() {
        response.stop_reason = crate::conversation::StopReason::ToolUse;
    } else if response.stop_reason == crate::conversation::StopReason::ToolUse {
        // A provider claiming tool use without any call: it is a final answer as far as callers go.
        response.stop_reason = crate::conversation::StopReason::EndTurn;
    }
}

/// At most 500 characters of provider text in a message.
pub(crate) fn excerpt(s: &str) -> String {
    const MAX: usize = 500;
    let s = s.trim();
    match s.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

/// Parse JSON arguments that a provider sent as a string. Not-JSON or non-object text keeps the raw
/// string in provider state (so the same provider sees its own call again) and yields `{}`.
pub(crate) fn arguments_from_string(raw: &str, kind: ProviderKind) -> (Value, Option<ProviderState>) {
    if raw.trim().is_empty() {
        return (Value::Object(serde_json::Map::new()), None);
    }
    match serde_json::from_str::<Value>(raw) {
        Ok(Value::Object(map)) => (Value::Object(map), None),
        _ => {
            let mut state = ProviderState::new(kind);
            state.raw_arguments = Some(raw.to_owned());
            (Value::Object(serde_json::Map::new()), Some(state))
        }
    }
}

#[cfg(test)]
pub(crate) mod test_support;

#[cfg(test)]
mod tests {
    use super::test_support::{decode_stream_shown, fixture, weather_turn1};
    use super::*;

    /// Every provider's stream fixture: the text the decoder shows, frame by frame, joins to exactly the
    /// answer's text; reasoning and tool arguments are never shown.
    #[test]
    fn streamed_text_is_shown_as_it_arrives() {
        for (kind, file, text) in [
            (ProviderKind::Anthropic, "anthropic_stream_tool_use.sse", "Let me check that for you."),
            (ProviderKind::OpenaiCompatible, "openai_stream_tool_calls.sse", ""),
            (ProviderKind::Google, "gemini_stream_function_call.sse", ""),
            (ProviderKind::Ollama, "ollama_stream_tool_calls.ndjson", ""),
        ] {
            let (shown, response) = decode_stream_shown(kind, &weather_turn1(), &fixture(file));
            let response = response.unwrap();
            assert_eq!(shown.concat(), response.text(), "{kind}");
            assert_eq!(response.text(), text, "{kind}");
            assert!(response.has_tool_calls(), "{kind}");
        }
        // Text that arrives over several frames is shown frame by frame; reasoning is not shown.
        let openai = "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"reasoning_content\":\"hmm\"}}]}\n\n\
            data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n\
            data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"},\"finish_reason\":\"stop\"}]}\n\n\
            data: [DONE]\n\n";
        let ollama = "{\"message\":{\"role\":\"assistant\",\"content\":\"\",\"thinking\":\"hmm\"},\"done\":false}\n\
            {\"message\":{\"role\":\"assistant\",\"content\":\"Hel\"},\"done\":false}\n\
            {\"message\":{\"role\":\"assistant\",\"content\":\"lo\"},\"done\":true,\"done_reason\":\"stop\"}\n";
        let gemini = "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"hmm\",\"thought\":true}]}}]}\r\n\r\n\
            data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"Hel\"}]}}]}\r\n\r\n\
            data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"lo\"}]},\"finishReason\":\"STOP\"}]}\r\n\r\n";
        let anthropic = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"m\",\"usage\":{}}}\n\n\
            event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\"}}\n\n\
            event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"hmm\"}}\n\n\
            event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n\
            event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hel\"}}\n\n\
            event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"lo\"}}\n\n\
            event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
        for (kind, body) in [
            (ProviderKind::OpenaiCompatible, openai),
            (ProviderKind::Ollama, ollama),
            (ProviderKind::Google, gemini),
            (ProviderKind::Anthropic, anthropic),
        ] {
            let (shown, response) = decode_stream_shown(kind, &weather_turn1(), body);
            let response = response.unwrap();
            assert_eq!(shown, ["Hel", "lo"], "{kind}");
            assert_eq!(response.text(), "Hello", "{kind}");
        }
    }

    #[test]
    fn each_adapter_is_named_as_its_variant_serializes() {
        for &kind in &ProviderKind::ALL {
            assert_eq!(serde_json::to_value(kind).unwrap(), adapter(kind).name);
            assert_eq!(ProviderKind::from_name(adapter(kind).name), Some(kind));
        }
    }

    #[test]
    fn ids_are_unique_and_portable() {
        let mut a = IdAllocator::default();
        assert_eq!(a.accept(Some("toolu_1")), "toolu_1");
        let dup = a.accept(Some("toolu_1"));
        assert_ne!(dup, "toolu_1");
        assert!(dup.starts_with("call_") && dup.len() <= 40);
        assert_ne!(a.accept(Some("bad id:with.chars")), "bad id:with.chars");
        assert_ne!(a.accept(None), a.accept(None));
        assert_ne!(a.accept(Some("")), "");
    }
}
