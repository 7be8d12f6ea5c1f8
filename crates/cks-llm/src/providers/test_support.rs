//! Helpers for the adapter unit tests: fixtures from `tests/data/fixtures`, the request schemas from
//! `tests/data/schemas`, and the weather conversation the fixtures describe.

use std::sync::OnceLock;

use serde_json::{Value, json};

use super::{CallSettings, DecodeCtx, Fault, stream_decoder};
use crate::config::ProviderConfig;
use crate::conversation::{
    ChatRequest, ChatResponse, ContentBlock, Message, ProviderKind, ProviderState, Role, ToolSpec,
};
use crate::stream::Framer;

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data");

pub(crate) fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!("{DATA}/fixtures/{name}")).unwrap()
}

pub(crate) fn fixture_json(name: &str) -> Value {
    serde_json::from_str(&fixture(name)).unwrap()
}

/// The `body` of a fixture wrapped as `{"_http_status", "_headers", "body"}`, as text.
pub(crate) fn fixture_body(name: &str) -> String {
    fixture_json(name)["body"].to_string()
}

pub(crate) fn config(kind: ProviderKind) -> ProviderConfig {
    let base = match kind {
        ProviderKind::Google => "http://provider.test/v1beta",
        ProviderKind::OpenaiCompatible => "http://provider.test/v1",
        _ => "http://provider.test",
    };
    ProviderConfig::new(kind, base, "default-model").with_key(format!("test-key-{kind}"))
}

pub(crate) fn settings(model: &str, max_tokens: u32) -> CallSettings {
    CallSettings { model: model.into(), max_tokens, stream: false }
}

pub(crate) fn weather_tool() -> ToolSpec {
    ToolSpec {
        name: "get_weather".into(),
        description: "Look up current weather for a city.".into(),
        input_schema: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
    }
}

pub(crate) fn weather_turn1() -> ChatRequest {
    ChatRequest {
        messages: vec![Message::user("What's the weather in Oslo?")],
        tools: vec![weather_tool()],
        max_tokens: Some(1024),
        ..ChatRequest::default()
    }
}

/// The assistant message a provider's tool-call fixture decodes to.
pub(crate) fn tool_use_from_fixture(kind: ProviderKind) -> Message {
    let name = match kind {
        ProviderKind::Anthropic => "anthropic_tool_use.json",
        ProviderKind::OpenaiCompatible => "openai_tool_calls.json",
        ProviderKind::Google => "gemini_function_call.json",
        ProviderKind::Ollama => "ollama_tool_calls.json",
    };
    let mut ctx = ctx_for(&weather_turn1(), "m");
    super::decode_chat(kind, fixture(name).as_bytes(), &mut ctx).unwrap().message
}

/// Turn 1, the model's tool call, and the tool's result.
pub(crate) fn weather_turn2(assistant: &Message) -> ChatRequest {
    let id = assistant.tool_calls()[0].id.to_owned();
    let mut req = weather_turn1();
    req.messages.push(assistant.clone());
    req.messages.push(Message {
        role: Role::User,
        content: vec![ContentBlock::ToolResult { tool_use_id: id, content: "4 C, light snow".into(), is_error: false }],
    });
    req
}

pub(crate) fn ctx_for(req: &ChatRequest, model: &str) -> DecodeCtx {
    DecodeCtx::new(req, model)
}

pub(crate) fn google_state(sig: &str) -> ProviderState {
    ProviderState { thought_signature: Some(sig.into()), ..ProviderState::new(ProviderKind::Google) }
}

pub(crate) fn foreign_thinking(kind: ProviderKind) -> ContentBlock {
    ContentBlock::Thinking {
        thinking: "private reasoning".into(),
        signature: None,
        provider_state: Some(ProviderState::new(kind)),
    }
}

/// Feed a whole stream body through the framer and the provider's decoder.
pub(crate) fn decode_stream(kind: ProviderKind, req: &ChatRequest, body: &str) -> Result<ChatResponse, Fault> {
    decode_stream_shown(kind, req, body).1
}

/// [`decode_stream`], with the text each frame added (one entry per frame that added any).
pub(crate) fn decode_stream_shown(
    kind: ProviderKind,
    req: &ChatRequest,
    body: &str,
) -> (Vec<String>, Result<ChatResponse, Fault>) {
    decode_stream_with(kind, ctx_for(req, "m"), body)
}

/// [`decode_stream_shown`] with a decoding context of the caller's (one an encoder filled in).
pub(crate) fn decode_stream_with(
    kind: ProviderKind,
    ctx: DecodeCtx,
    body: &str,
) -> (Vec<String>, Result<ChatResponse, Fault>) {
    let (framing, mut dec) = stream_decoder(kind, ctx);
    let mut framer = Framer::new(framing);
    let mut shown = Vec::new();
    let mut frame = |dec: &mut Box<dyn super::StreamDecoder>, f| {
        let mut text = String::new();
        let result = dec.on_frame(f, &mut text);
        if !text.is_empty() {
            shown.push(text);
        }
        result
    };
    // Feed in small pieces to exercise incremental parsing.
    for chunk in body.as_bytes().chunks(7) {
        for f in framer.push(chunk).unwrap() {
            if let Err(e) = frame(&mut dec, f) {
                return (shown, Err(e));
            }
        }
    }
    for f in framer.finish().unwrap() {
        if let Err(e) = frame(&mut dec, f) {
            return (shown, Err(e));
        }
    }
    let result = dec.finish().map(|mut r| {
        super::normalise(&mut r);
        r
    });
    (shown, result)
}

fn validator(kind: ProviderKind) -> &'static jsonschema::Validator {
    static V: OnceLock<Vec<(ProviderKind, jsonschema::Validator)>> = OnceLock::new();
    let all = V.get_or_init(|| {
        ProviderKind::ALL
            .iter()
            .map(|k| {
                let file = match k {
                    ProviderKind::Anthropic => "anthropic_create_message.json",
                    ProviderKind::OpenaiCompatible => "openai_create_chat_completion.json",
                    ProviderKind::Google => "gemini_generate_content.json",
                    ProviderKind::Ollama => "ollama_chat_request.json",
                };
                let schema: Value =
                    serde_json::from_str(&std::fs::read_to_string(format!("{DATA}/schemas/{file}")).unwrap()).unwrap();
                (*k, jsonschema::validator_for(&schema).unwrap())
            })
            .collect()
    });
    &all.iter().find(|(k, _)| *k == kind).unwrap().1
}

/// Assert that a request body validates against the provider's published request schema.
pub(crate) fn assert_valid(kind: ProviderKind, body: &Value) {
    let errors: Vec<String> =
        validator(kind).iter_errors(body).map(|e| format!("{} at {}", e, e.instance_path())).collect();
    assert!(errors.is_empty(), "{kind} request does not match its schema:\n{}\n{body:#}", errors.join("\n"));
}
