//! The provider-neutral conversation model: Anthropic-shaped messages made of content blocks.
//!
//! This is the only shape the rest of the product sees. `ai_chat` receives a history in this shape from its
//! caller, appends the provider's answers (normalised to blocks by the adapters) and returns it; the caller
//! sends it back unchanged on the next turn, possibly to a different provider.
//!
//! Provider-private data that must come back on the next turn (Gemini `thoughtSignature`, reasoning text a
//! provider requires echoed) travels inside the block it belongs to, in the one reserved field
//! [`ProviderState`] (serialized as `provider_state`). Adapters send it back only to the provider that
//! produced it and strip it for every other provider, so no bookkeeping key ever reaches a provider that
//! would reject it.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

pub use crate::providers::ProviderKind;

impl ProviderKind {
    /// The name used in `CKS_LLM_PROVIDER` and in serialized data.
    pub fn as_str(self) -> &'static str {
        crate::providers::adapter(self).name
    }

    /// The provider a name (`CKS_LLM_PROVIDER`, serialized data) stands for.
    pub fn from_name(name: &str) -> Option<ProviderKind> {
        ProviderKind::ALL.into_iter().find(|kind| kind.as_str() == name)
    }
}

impl fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who wrote a message. There is no system role: the system prompt is [`ChatRequest::system`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The human, or tool results sent on the model's behalf.
    User,
    /// The model.
    Assistant,
}

/// One message of a conversation.
///
/// `content` deserializes from a string (shorthand for one text block, as in the Anthropic API) or from a
/// list of blocks, and always serializes as a list of blocks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Author.
    pub role: Role,
    /// Content blocks, in order.
    #[serde(deserialize_with = "content_from_string_or_blocks")]
    pub content: Vec<ContentBlock>,
}

impl Message {
    /// A user message holding one text block.
    pub fn user(text: impl Into<String>) -> Self {
        Message { role: Role::User, content: vec![ContentBlock::text(text)] }
    }

    /// An assistant message holding one text block.
    pub fn assistant(text: impl Into<String>) -> Self {
        Message { role: Role::Assistant, content: vec![ContentBlock::text(text)] }
    }

    /// A user message carrying tool results (one block per call, as every provider expects them together).
    pub fn tool_results(results: Vec<ToolResult>) -> Self {
        Message { role: Role::User, content: results.into_iter().map(ContentBlock::from).collect() }
    }

    /// The text blocks joined, thinking excluded.
    pub fn text(&self) -> String {
        self.content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Text { text, .. } => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }

    /// The tool calls this message asks for, in order.
    pub fn tool_calls(&self) -> Vec<ToolCall<'_>> {
        self.content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::ToolUse { id, name, input, .. } => Some(ToolCall { id, name, input }),
                _ => None,
            })
            .collect()
    }
}

fn content_from_string_or_blocks<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<ContentBlock>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Content {
        Text(String),
        Blocks(Vec<ContentBlock>),
    }
    Ok(match Content::deserialize(d)? {
        Content::Text(text) => vec![ContentBlock::text(text)],
        Content::Blocks(blocks) => blocks,
    })
}

/// A borrowed view of one tool call in an assistant message.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ToolCall<'a> {
    /// Call id, unique across the conversation.
    pub id: &'a str,
    /// Tool name.
    pub name: &'a str,
    /// Arguments (an object).
    pub input: &'a Value,
}

/// The result of one tool call, to be sent back with [`Message::tool_results`].
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    /// The id of the `tool_use` block this answers.
    pub tool_use_id: String,
    /// The result as text (JSON text for structured results).
    pub content: String,
    /// Whether the tool failed; `content` then holds the error.
    pub is_error: bool,
}

impl From<ToolResult> for ContentBlock {
    fn from(r: ToolResult) -> Self {
        ContentBlock::ToolResult { tool_use_id: r.tool_use_id, content: r.content, is_error: r.is_error }
    }
}

/// One block of message content (Anthropic block types).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    /// Text.
    Text {
        /// The text; may be empty (an empty answer is normalised to one empty text block).
        text: String,
        /// Provider bookkeeping (e.g. a Gemini signature on a text part).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        provider_state: Option<ProviderState>,
    },
    /// A tool call made by the model.
    ToolUse {
        /// Call id, unique across the whole conversation (generated when the provider gives none).
        id: String,
        /// Tool name as declared in [`ToolSpec::name`].
        name: String,
        /// Arguments; always a JSON object.
        input: Value,
        /// Provider bookkeeping (Gemini signature and native call id; raw arguments that were not JSON).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        provider_state: Option<ProviderState>,
    },
    /// The result of a tool call, sent in a user message.
    ToolResult {
        /// The id of the `tool_use` block this answers.
        tool_use_id: String,
        /// The result as text.
        #[serde(deserialize_with = "tool_result_content")]
        content: String,
        /// Whether the tool failed.
        #[serde(default)]
        is_error: bool,
    },
    /// Model reasoning. Anthropic thinking carries its `signature`; reasoning from other providers carries
    /// a [`ProviderState`] naming the provider. Sent back only to the provider that produced it.
    Thinking {
        /// The reasoning text.
        thinking: String,
        /// Anthropic's signature over the thinking block.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
        /// Which provider produced this reasoning, when it is not Anthropic.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        provider_state: Option<ProviderState>,
    },
    /// Anthropic's encrypted thinking; sent back to Anthropic only.
    RedactedThinking {
        /// Opaque data.
        data: String,
    },
}

impl ContentBlock {
    /// A text block without provider state.
    pub fn text(text: impl Into<String>) -> Self {
        ContentBlock::Text { text: text.into(), provider_state: None }
    }

    /// The provider state carried by this block, if any.
    pub fn provider_state(&self) -> Option<&ProviderState> {
        match self {
            ContentBlock::Text { provider_state, .. }
            | ContentBlock::ToolUse { provider_state, .. }
            | ContentBlock::Thinking { provider_state, .. } => provider_state.as_ref(),
            ContentBlock::ToolResult { .. } | ContentBlock::RedactedThinking { .. } => None,
        }
    }
}

/// Anthropic allows `tool_result.content` as a string or a list of text blocks; callers may send either.
/// We keep a string (the text blocks joined) because every other provider takes a string.
fn tool_result_content<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    struct Part {
        #[serde(default)]
        text: String,
    }
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Content {
        Text(String),
        Parts(Vec<Part>),
    }
    Ok(match Content::deserialize(d)? {
        Content::Text(text) => text,
        Content::Parts(parts) => parts.into_iter().map(|p| p.text).collect::<Vec<_>>().join("\n"),
    })
}

/// Provider-private data that must travel with a block and come back on the next turn.
///
/// Serialized as the block's `provider_state` field, e.g.
/// `{"provider": "google", "thought_signature": "CiQB..."}`. Callers must treat it as opaque and return it
/// unchanged. Adapters use it only when talking to `provider`; for any other provider the field is dropped
/// (and the block may be dropped too, e.g. foreign reasoning).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderState {
    /// The provider that produced the data; the only one it is ever sent back to.
    pub provider: ProviderKind,
    /// Gemini: the `thoughtSignature` that came on this exact part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thought_signature: Option<String>,
    /// Gemini: the `functionCall.id` the provider gave, echoed in `functionCall` and `functionResponse`.
    /// Absent when Gemini gave none (the block id was then generated locally and is never sent to Gemini).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// OpenAI-compatible: `arguments` exactly as received when they were not a JSON object (the block's
    /// `input` is then `{}`), so the provider sees its own call again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_arguments: Option<String>,
}

impl ProviderState {
    /// Empty state for `provider`.
    pub fn new(provider: ProviderKind) -> Self {
        ProviderState { provider, thought_signature: None, call_id: None, raw_arguments: None }
    }
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Name (`^[a-zA-Z0-9_-]{1,64}$` is safe everywhere; adapters map other names where a provider needs).
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// JSON Schema of the arguments (an object schema). Adapters adapt it per provider on the way out only.
    pub input_schema: Value,
}

/// One request to a model.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ChatRequest {
    /// Per-call model override; never changes which provider answers.
    #[serde(default)]
    pub model: Option<String>,
    /// System prompt.
    #[serde(default)]
    pub system: Option<String>,
    /// The conversation so far.
    pub messages: Vec<Message>,
    /// Tools offered to the model.
    #[serde(default)]
    pub tools: Vec<ToolSpec>,
    /// Output token limit; the configured default (`CKS_LLM_MAX_TOKENS`, 4096) when absent.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// Sampling temperature.
    #[serde(default)]
    pub temperature: Option<f32>,
    /// Ask the model for one JSON value matching this JSON Schema. The answer's text
    /// ([`ChatResponse::text`]) is then that JSON, whichever provider answers. A request may not both offer
    /// `tools` and ask for an output schema: the client refuses it before sending anything (on Anthropic
    /// the schema travels as a forced tool, which would shut the offered tools out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<OutputSchema>,
}

impl ChatRequest {
    /// A request with one user message and nothing else set.
    pub fn from_prompt(prompt: impl Into<String>) -> Self {
        ChatRequest { messages: vec![Message::user(prompt)], ..ChatRequest::default() }
    }

    /// What is wrong with this request before any provider sees it: an output schema beside tools, or an
    /// output schema whose name or schema no provider would take.
    pub(crate) fn check(&self) -> Result<(), String> {
        let Some(output) = &self.output else { return Ok(()) };
        if !self.tools.is_empty() {
            return Err(format!(
                "the request offers {} tool(s) and asks for the output schema {:?}; a request may do one or the \
                 other: send the tools without `output`, or ask for the JSON without tools",
                self.tools.len(),
                output.name
            ));
        }
        output.check()
    }
}

/// The shape of the answer a request asks for ([`ChatRequest::output`]): one JSON value matching `schema`.
///
/// Providers that follow the schema answer exactly that JSON as the answer's text. One that ignores it still
/// answers text, so a caller should parse the text (and may still have to find the JSON inside it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputSchema {
    /// The schema's name (`^[a-zA-Z0-9_-]{1,64}$`, which every provider accepts), e.g. `knowledge_structure`;
    /// providers show it to the model.
    pub name: String,
    /// The JSON Schema (an object) the answer must match. Adapters adapt it per provider on the way out only.
    pub schema: Value,
}

impl OutputSchema {
    /// An output schema named `name`.
    pub fn new(name: impl Into<String>, schema: Value) -> Self {
        OutputSchema { name: name.into(), schema }
    }

    fn check(&self) -> Result<(), String> {
        let name_ok = (1..=64).contains(&self.name.len())
            && self.name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !name_ok {
            return Err(format!(
                "the output schema's name {:?} must be 1 to 64 ASCII letters, digits, '_' or '-'",
                self.name
            ));
        }
        if !self.schema.is_object() {
            return Err(format!("the output schema {:?} must be a JSON Schema object", self.name));
        }
        Ok(())
    }
}

/// Why the model stopped, normalised across providers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// A final answer.
    EndTurn,
    /// The answer contains tool calls. Derived from the content, never from the provider's stop reason
    /// (Gemini and Ollama report a plain "stop" for tool calls).
    ToolUse,
    /// The output token limit was reached.
    MaxTokens,
    /// A stop sequence matched.
    StopSequence,
    /// The provider refused or filtered the answer.
    Refusal,
    /// Anything else, as the provider spelled it.
    Other(String),
}

/// Token counts for one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Generated tokens (reasoning included where the provider counts it separately).
    pub output_tokens: u64,
}

/// A model's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatResponse {
    /// The assistant message, normalised to blocks (at least one block; an empty answer is one empty text).
    pub message: Message,
    /// Why generation stopped.
    pub stop_reason: StopReason,
    /// Token counts.
    pub usage: Usage,
    /// The model that answered, as the provider reports it (else the requested one).
    pub model: String,
    /// The provider that answered.
    pub provider: ProviderKind,
    /// HTTP requests sent for this answer: 1, plus one per retry.
    #[serde(default = "one_request")]
    pub requests: u32,
}

fn one_request() -> u32 {
    1
}

impl ChatResponse {
    /// The answer's text.
    pub fn text(&self) -> String {
        self.message.text()
    }

    /// Whether the model asked for tool calls.
    pub fn has_tool_calls(&self) -> bool {
        self.message.content.iter().any(|b| matches!(b, ContentBlock::ToolUse { .. }))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_provider_is_found_by_its_name_and_no_other() {
        for kind in ProviderKind::ALL {
            assert_eq!(ProviderKind::from_name(kind.as_str()), Some(kind));
        }
        assert_eq!(ProviderKind::from_name("openai"), None);
        assert_eq!(ProviderKind::from_name("Anthropic"), None);
    }

    use super::*;
    use serde_json::json;

    #[test]
    fn content_accepts_string_and_blocks_and_serializes_blocks() {
        let m: Message = serde_json::from_value(json!({"role": "user", "content": "hi"})).unwrap();
        assert_eq!(m, Message::user("hi"));
        assert_eq!(
            serde_json::to_value(&m).unwrap(),
            json!({"role": "user", "content": [{"type": "text", "text": "hi"}]})
        );
    }

    #[test]
    fn provider_state_round_trips_inside_the_block() {
        let v = json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": "call_1", "name": "f", "input": {"a": 1},
             "provider_state": {"provider": "google", "thought_signature": "sig"}}]});
        let m: Message = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(serde_json::to_value(&m).unwrap(), v);
    }

    #[test]
    fn an_output_schema_is_optional_in_json_and_checked_before_sending() {
        let plain: ChatRequest = serde_json::from_value(json!({"messages": []})).unwrap();
        assert_eq!(plain.output, None);
        assert!(serde_json::to_value(&plain).unwrap().get("output").is_none());
        let mut req = ChatRequest::from_prompt("hi");
        req.output = Some(OutputSchema::new("answer_1", json!({"type": "object"})));
        let back: ChatRequest = serde_json::from_value(serde_json::to_value(&req).unwrap()).unwrap();
        assert_eq!(back, req);
        assert_eq!(req.check(), Ok(()));
        for name in ["", "a b", "ä", &"x".repeat(65)] {
            let mut bad = req.clone();
            bad.output.as_mut().unwrap().name = name.to_owned();
            assert!(bad.check().unwrap_err().contains("name"), "{name:?}");
        }
        let mut bad = req.clone();
        bad.output.as_mut().unwrap().schema = json!(true);
        assert!(bad.check().unwrap_err().contains("JSON Schema object"));
        let mut both = req.clone();
        both.tools.push(ToolSpec { name: "f".into(), description: String::new(), input_schema: json!({}) });
        let why = both.check().unwrap_err();
        assert!(why.contains("1 tool(s)") && why.contains("answer_1"), "{why}");
    }

    #[test]
    fn tool_result_content_accepts_text_blocks() {
        let v = json!({"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]});
        let b: ContentBlock = serde_json::from_value(v).unwrap();
        assert_eq!(b, ContentBlock::ToolResult { tool_use_id: "t".into(), content: "a\nb".into(), is_error: false });
    }
}
