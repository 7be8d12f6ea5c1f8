//! Entry points for the fuzz targets (`fuzz/` at the repository root): every way a provider's bytes
//! or a caller's history enter this crate, driven with arbitrary input. Built only with the
//! `fuzzing` feature; not part of the supported API. The properties checked: no input panics, and
//! whatever decodes can be encoded again for every provider (a decoded answer joins the history that
//! the next request, possibly to another provider, carries).

use serde_json::json;

use crate::config::ProviderConfig;
use crate::conversation::{ChatRequest, ChatResponse, Message, ProviderKind, ToolSpec};
use crate::providers::{CallSettings, decode_chat, decode_list_models, encode_chat, parse_error, stream_decoder};
use crate::stream::Framer;

const PROVIDERS: [ProviderKind; 4] =
    [ProviderKind::Anthropic, ProviderKind::OpenaiCompatible, ProviderKind::Google, ProviderKind::Ollama];

fn config(kind: ProviderKind) -> ProviderConfig {
    ProviderConfig::new(kind, "http://127.0.0.1:9/v1", "fuzz-model").with_key("fuzz-key")
}

fn settings() -> CallSettings {
    CallSettings { model: "fuzz-model".into(), max_tokens: 64, stream: false }
}

fn tool() -> ToolSpec {
    ToolSpec {
        name: "query_subgraph".into(),
        description: "Read part of the graph.".into(),
        input_schema: json!({"type": "object", "properties": {"seed_ids": {"type": "array", "items": {"type": "string"}}}}),
    }
}

/// A provider's answer as raw bytes, for every provider: the whole-body decoder, the stream decoder
/// (the first byte chooses where the body is split into two network chunks), the error-body parser
/// and the model-list decoder.
pub fn provider_response(data: &[u8]) {
    let (split, body) = match data.split_first() {
        Some((first, rest)) => (usize::from(*first) % (rest.len() + 1), rest),
        None => (0, data),
    };
    let request = ChatRequest { tools: vec![tool()], ..ChatRequest::from_prompt("fuzz") };
    for kind in PROVIDERS {
        let Ok((_, ctx)) = encode_chat(kind, &request, &config(kind), &settings()) else { continue };
        if let Ok(response) = decode_chat(kind, body, &mut ctx.clone()) {
            send_on(&request, response);
        }
        let (framing, mut decoder) = stream_decoder(kind, ctx);
        let mut framer = Framer::new(framing);
        let mut frames = Vec::new();
        for chunk in [&body[..split], &body[split..]] {
            match framer.push(chunk) {
                Ok(more) => frames.extend(more),
                Err(_) => break,
            }
        }
        frames.extend(framer.finish().unwrap_or_default());
        let mut ended = false;
        for frame in frames {
            match decoder.on_frame(frame, &mut String::new()) {
                Ok(true) => {
                    ended = true;
                    break;
                }
                Ok(false) => {}
                Err(_) => break,
            }
        }
        if ended && let Ok(response) = decoder.finish() {
            send_on(&request, response);
        }
        let _ = parse_error(kind, 400, body);
        let _ = decode_list_models(kind, body);
    }
}

/// A caller-supplied history (`ai_chat`'s `messages`), decoded as the tool decodes it and encoded
/// for every provider.
pub fn history(data: &[u8]) {
    let Ok(messages) = serde_json::from_slice::<Vec<serde_json::Value>>(data) else { return };
    let Ok(messages) = messages.into_iter().map(serde_json::from_value::<Message>).collect::<Result<Vec<_>, _>>()
    else {
        return;
    };
    let request = ChatRequest { messages, tools: vec![tool()], ..ChatRequest::default() };
    for kind in PROVIDERS {
        let _ = encode_chat(kind, &request, &config(kind), &settings());
    }
}

/// A decoded answer appended to the history must be encodable for every provider.
fn send_on(request: &ChatRequest, response: ChatResponse) {
    let mut next = request.clone();
    next.messages.push(response.message);
    for kind in PROVIDERS {
        let _ = encode_chat(kind, &next, &config(kind), &settings());
    }
}
