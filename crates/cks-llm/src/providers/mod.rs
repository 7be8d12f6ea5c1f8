//! The four adapters, and what they share. Adapters only translate: they build an [`HttpCall`] from a
//! [`ChatRequest`] and turn response bytes (or stream frames) back into a [`ChatResponse`]. They never send
//! anything; sending, retrying, timing out and redacting happen once, in [`crate::http`].
//!
//! Dispatch is a `match` on [`ProviderKind`] (no trait objects for encoding), so adding a provider is one
//! file, its variant, and one arm per function here; what else the crate knows of a provider (its
//! name, key and model variables, hints) is the adapter's [`ProviderInfo`].

pub(crate) mod anthropic;
pub(crate) mod google;
pub(crate) mod ollama;
pub(crate) mod openai_compat;
mod schema;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::config::ProviderConfig;
use crate::conversation::{ChatRequest, ChatResponse, ContentBlock, ProviderKind, ProviderState};
use crate::error::{ErrorKind, LlmError};
use crate::stream::{Frame, Framing};

/// What the rest of the crate knows of a provider, each adapter's [`INFO`](anthropic::INFO): only
/// here does anything branch on a provider.
#[derive(Debug)]
pub(crate) struct ProviderInfo {
    /// The name used in `CKS_LLM_PROVIDER` and in serialized data.
    pub(crate) name: &'static str,
    /// Whether a call needs a key.
    pub(crate) key: Key,
    /// The variable(s) that hold the key, for configuration messages.
    pub(crate) key_variable: &'static str,
    /// What to check when the provider refuses the credentials.
    pub(crate) credentials: &'static str,
    /// The variable that sets the model.
    pub(crate) model_variable: &'static str,
    /// What to suggest when the provider cannot be reached, beyond the network and base URL.
    pub(crate) unreachable_hint: Option<&'static str>,
}

/// When a provider needs a key.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Key {
    Required,
    /// Only at this host (the real OpenAI API; local compatible servers accept none).
    AtHost(&'static str),
    None,
}

/// The facts of `kind`.
pub(crate) fn info(kind: ProviderKind) -> &'static ProviderInfo {
    match kind {
        ProviderKind::Anthropic => &anthropic::INFO,
        ProviderKind::OpenaiCompatible => &openai_compat::INFO,
        ProviderKind::Google => &google::INFO,
        ProviderKind::Ollama => &ollama::INFO,
    }
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

/// Context for decoding one answer: the model asked for, the ids already used in the conversation, and
/// the wire-name → tool-name map when a provider needed names changed.
#[derive(Debug, Clone)]
pub(crate) struct DecodeCtx {
    pub(crate) model: String,
    pub(crate) ids: IdAllocator,
    pub(crate) tool_names: HashMap<String, String>,
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
        DecodeCtx { model: model.to_owned(), ids, tool_names: HashMap::new() }
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
    let mut ctx = DecodeCtx::new(request, &settings.model);
    let call = match kind {
        ProviderKind::Anthropic => anthropic::encode(request, config, settings)?,
        ProviderKind::OpenaiCompatible => openai_compat::encode(request, config, settings)?,
        ProviderKind::Google => google::encode(request, config, settings, &mut ctx)?,
        ProviderKind::Ollama => ollama::encode(request, config, settings)?,
    };
    Ok((call, ctx))
}

/// Parse a 2xx chat answer.
pub(crate) fn decode_chat(kind: ProviderKind, body: &[u8], ctx: &mut DecodeCtx) -> Result<ChatResponse, Fault> {
    let mut response = match kind {
        ProviderKind::Anthropic => anthropic::decode(body, ctx),
        ProviderKind::OpenaiCompatible => openai_compat::decode(body, ctx),
        ProviderKind::Google => google::decode(body, ctx),
        ProviderKind::Ollama => ollama::decode(body, ctx),
    }?;
    normalise(&mut response);
    Ok(response)
}

/// The stream decoder for a chat answer.
pub(crate) fn stream_decoder(kind: ProviderKind, ctx: DecodeCtx) -> (Framing, Box<dyn StreamDecoder>) {
    match kind {
        ProviderKind::Anthropic => (Framing::Sse, Box::new(anthropic::Stream::new(ctx))),
        ProviderKind::OpenaiCompatible => (Framing::Sse, Box::new(openai_compat::Stream::new(ctx))),
        ProviderKind::Google => (Framing::Sse, Box::new(google::Stream::new(ctx))),
        ProviderKind::Ollama => (Framing::Ndjson, Box::new(ollama::Stream::new(ctx))),
    }
}

/// Parse an error response body.
pub(crate) fn parse_error(kind: ProviderKind, status: u16, body: &[u8]) -> ErrorInfo {
    let mut info = match kind {
        ProviderKind::Anthropic => anthropic::parse_error(body),
        ProviderKind::OpenaiCompatible => openai_compat::parse_error(body),
        ProviderKind::Google => google::parse_error(body),
        ProviderKind::Ollama => ollama::parse_error(body),
    };
    if info.message.trim().is_empty() {
        // Unknown error shape (a proxy's HTML page, an empty body): show a bounded excerpt.
        let text = String::from_utf8_lossy(body);
        info.message = if text.trim().is_empty() { format!("empty body with HTTP {status}") } else { excerpt(&text) };
    }
    info
}

/// The request listing models.
pub(crate) fn encode_list_models(kind: ProviderKind, config: &ProviderConfig) -> HttpCall {
    match kind {
        ProviderKind::Anthropic => anthropic::encode_list_models(config),
        ProviderKind::OpenaiCompatible => openai_compat::encode_list_models(config),
        ProviderKind::Google => google::encode_list_models(config),
        ProviderKind::Ollama => ollama::encode_list_models(config),
    }
}

/// Parse a model list.
pub(crate) fn decode_list_models(kind: ProviderKind, body: &[u8]) -> Result<Vec<ModelInfo>, Fault> {
    match kind {
        ProviderKind::Anthropic => anthropic::decode_list_models(body),
        ProviderKind::OpenaiCompatible => openai_compat::decode_list_models(body),
        ProviderKind::Google => google::decode_list_models(body),
        ProviderKind::Ollama => ollama::decode_list_models(body),
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
