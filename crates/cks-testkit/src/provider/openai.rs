//! OpenAI-compatible chat completions: `POST /v1/chat/completions`, `POST /chat/completions`; embeddings:
//! `POST /v1/embeddings`, `POST /embeddings` (and the OpenAI-shaped model list).
//!
//! Answers: a `chat.completion` whose `choices[0].message` has `content` (text or `null`) and `tool_calls`
//! (`{id: "call_testkit_N" unless scripted, type: "function", function: {name, arguments: <JSON string>}}`),
//! `finish_reason` `tool_calls` or `stop`, and `usage`. With `"stream": true`: `data:` chunks
//! (`chat.completion.chunk`): a first chunk with the role, text deltas, per tool call a first delta with `index`,
//! `id`, `type`, `name` and empty `arguments` followed by deltas carrying only `index` and a fragment of the
//! arguments, a chunk with `finish_reason`, a usage chunk with `choices: []` when `stream_options.include_usage`
//! is true, then `data: [DONE]`.
//!
//! Quirk mode ([`crate::ProviderServer::openai_quirks`]): `arguments` is a JSON object and ids are `""` (fixture
//! `openai_compat_quirk_arguments_object.json`); streamed calls arrive whole in one delta, and streams begin with an
//! SSE comment line `: OPENROUTER PROCESSING`.
//!
//! Errors: `{"error":{"message","type","param","code"}}`. Faults: 429 `rate_limit_exceeded` (+ `retry-after`
//! and `x-ratelimit-*` headers), 503 `server_error` for overload, 500 `server_error`; mid-stream
//! `data: {"error":{...}}` with no `[DONE]` after it.
//!
//! No auth header is required (OpenAI-compatible servers such as Ollama's `/v1` need none); it is recorded.
//!
//! Strict checks (400 `invalid_request_error`):
//! 1. body is a JSON object with a string `model` and a non-empty `messages` array;
//! 2. every message has a `role` among `system`, `developer`, `user`, `assistant`, `tool`, `function`;
//! 3. assistant `tool_calls[].function.arguments` are strings (the real API rejects objects);
//! 4. every `tool` message has a string `tool_call_id` that answers an id of the `tool_calls` of the assistant
//!    message just before the run of tool messages it belongs to;
//! 5. every assistant `tool_calls` id is answered by one of the `tool` messages that follow it;
//! 6. `response_format`, when present, has a `type` among `text`, `json_object`, `json_schema`; `json_schema`
//!    needs a `json_schema` object with a `name` matching `^[a-zA-Z0-9_-]{1,64}$`, an object `schema` when it
//!    has one, and a boolean or null `strict`.
//!
//! Embeddings: `{"object":"list","data":[{"object":"embedding","index","embedding"}],"model","usage"}`, one
//! entry per input in input order ([`super::embedding`], in `dimensions` dimensions when the request asks;
//! base64 of the little-endian `f32`s with `encoding_format: "base64"`). Checks (400 `invalid_request_error`),
//! after the spec's `CreateEmbeddingRequest`: no top-level field outside it ("Unrecognized request argument
//! supplied"; the schema says `additionalProperties: false`); a string `model`; an `input` that is a non-empty
//! string, or an array of 1 to 2048 non-empty strings (or of token arrays); `encoding_format` `float` or
//! `base64`; `dimensions` a positive integer.

use serde_json::{Value, json};

use super::{
    Ctx, EMBEDDING_DIMS, Mode, Rendered, embedding, has_text, requested_dims, split_str, sse_event, unreachable_fault,
};
use crate::script::{Answer, Fault};

const ROLES: &[&str] = &["system", "developer", "user", "assistant", "tool", "function"];

/// An OpenAI error response.
pub(crate) fn error(status: u16, ty: &str, code: Option<&str>, message: &str) -> Rendered {
    Rendered::json(status, &error_body(ty, code, None, message))
}

fn error_body(ty: &str, code: Option<&str>, param: Option<&str>, message: &str) -> Value {
    json!({ "error": { "message": message, "type": ty, "param": param, "code": code } })
}

fn bad(param: Option<&str>, message: impl AsRef<str>) -> Rendered {
    Rendered::json(400, &error_body("invalid_request_error", None, param, message.as_ref()))
}

pub(crate) fn validate(ctx: &Ctx<'_>) -> Result<(), Rendered> {
    let Some(body) = ctx.body.as_object() else {
        return Err(bad(None, "We could not parse the JSON body of your request."));
    };
    if !body.get("model").is_some_and(Value::is_string) {
        return Err(bad(Some("model"), "you must provide a model parameter"));
    }
    let messages = match body.get("messages").and_then(Value::as_array) {
        Some(m) if !m.is_empty() => m,
        _ => return Err(bad(Some("messages"), "Missing required parameter: 'messages'.")),
    };
    for (i, m) in messages.iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        if !ROLES.contains(&role) {
            return Err(bad(
                Some(&format!("messages[{i}].role")),
                format!("Invalid value: '{role}'. Supported values are: {}.", ROLES.join(", ")),
            ));
        }
        if let Some(calls) = m.get("tool_calls").and_then(Value::as_array) {
            for (j, c) in calls.iter().enumerate() {
                let args = &c["function"]["arguments"];
                if !args.is_string() {
                    let got = match args {
                        Value::Object(_) => "an object",
                        Value::Array(_) => "an array",
                        Value::Null => "null",
                        _ => "a non-string value",
                    };
                    return Err(bad(
                        Some(&format!("messages[{i}].tool_calls[{j}].function.arguments")),
                        format!(
                            "Invalid type for 'messages[{i}].tool_calls[{j}].function.arguments': expected a string, \
                             but got {got} instead."
                        ),
                    ));
                }
            }
        }
    }
    check_response_format(body)?;
    // Tool messages answer the assistant message before their run; that message's calls are all answered.
    let ids = |m: &Value| -> Vec<String> {
        m.get("tool_calls")
            .and_then(Value::as_array)
            .map(|cs| cs.iter().filter_map(|c| c.get("id").and_then(Value::as_str).map(str::to_owned)).collect())
            .unwrap_or_default()
    };
    let mut i = 0;
    while i < messages.len() {
        let m = &messages[i];
        let role = m["role"].as_str().unwrap_or("");
        if role == "tool" {
            return Err(bad(
                Some(&format!("messages.[{i}].role")),
                "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with \
                 'tool_calls'.",
            ));
        }
        let calls = if role == "assistant" { ids(m) } else { Vec::new() };
        i += 1;
        if calls.is_empty() {
            continue;
        }
        let mut answered = Vec::new();
        while i < messages.len() && messages[i]["role"] == "tool" {
            let Some(id) = messages[i].get("tool_call_id").and_then(Value::as_str) else {
                return Err(bad(
                    Some(&format!("messages.[{i}].tool_call_id")),
                    format!(
                        "Missing parameter 'tool_call_id': messages with role 'tool' must have a 'tool_call_id'. (messages[{i}])"
                    ),
                ));
            };
            if !calls.iter().any(|c| c == id) {
                return Err(bad(
                    Some(&format!("messages.[{i}].tool_call_id")),
                    format!(
                        "Invalid parameter: 'tool_call_id' of '{id}' not found in 'tool_calls' of previous message."
                    ),
                ));
            }
            answered.push(id.to_owned());
            i += 1;
        }
        let missing: Vec<&str> = calls.iter().filter(|c| !answered.contains(c)).map(String::as_str).collect();
        if !missing.is_empty() {
            return Err(bad(
                Some("messages"),
                format!(
                    "An assistant message with 'tool_calls' must be followed by tool messages responding to each \
                     'tool_call_id'. The following tool_call_ids did not have response messages: {}",
                    missing.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

fn check_response_format(body: &serde_json::Map<String, Value>) -> Result<(), Rendered> {
    let Some(format) = body.get("response_format") else { return Ok(()) };
    let ty = format.get("type").and_then(Value::as_str).unwrap_or("");
    if !["text", "json_object", "json_schema"].contains(&ty) {
        return Err(bad(
            Some("response_format.type"),
            format!("Invalid value: '{ty}'. Supported values are: 'json_object', 'json_schema', and 'text'."),
        ));
    }
    if ty != "json_schema" {
        return Ok(());
    }
    let Some(spec) = format.get("json_schema").and_then(Value::as_object) else {
        return Err(bad(
            Some("response_format.json_schema"),
            "Missing required parameter: 'response_format.json_schema'.",
        ));
    };
    let name = spec.get("name").and_then(Value::as_str).unwrap_or("");
    let name_ok =
        (1..=64).contains(&name.len()) && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !name_ok {
        return Err(bad(
            Some("response_format.json_schema.name"),
            "Invalid 'response_format.json_schema.name': string does not match pattern. Expected a string that \
             matches the pattern '^[a-zA-Z0-9_-]+$' of at most 64 characters.",
        ));
    }
    if spec.get("schema").is_some_and(|v| !v.is_object()) {
        return Err(bad(
            Some("response_format.json_schema.schema"),
            "Invalid type for 'response_format.json_schema.schema': expected an object.",
        ));
    }
    if spec.get("strict").is_some_and(|v| !v.is_boolean() && !v.is_null()) {
        return Err(bad(
            Some("response_format.json_schema.strict"),
            "Invalid type for 'response_format.json_schema.strict': expected a boolean.",
        ));
    }
    Ok(())
}

struct Call {
    id: String,
    name: String,
    args: Value,
}

fn calls(ctx: &Ctx<'_>, a: &Answer, quirks: bool) -> Vec<Call> {
    a.calls
        .iter()
        .map(|c| Call {
            id: if quirks {
                String::new()
            } else {
                c.id.clone().unwrap_or_else(|| format!("call_testkit_{:04}", ctx.shared.next_id()))
            },
            name: c.name.clone(),
            args: c.arguments.clone(),
        })
        .collect()
}

/// The arguments as sent: a JSON string holding the object (a scripted string is sent verbatim, so tests can
/// script malformed arguments), or the object itself in quirk mode.
fn args_wire(args: &Value, quirks: bool) -> Value {
    match args {
        _ if quirks => args.clone(),
        Value::String(_) => args.clone(),
        _ => Value::String(args.to_string()),
    }
}

fn completion_id(ctx: &Ctx<'_>) -> String {
    format!("chatcmpl-testkit-{:04}", ctx.shared.next_id())
}

fn usage(a: &Answer) -> Value {
    json!({ "prompt_tokens": a.input_tokens, "completion_tokens": a.output_tokens,
            "total_tokens": a.input_tokens + a.output_tokens })
}

pub(crate) fn answer(ctx: &Ctx<'_>, a: &Answer) -> Rendered {
    let quirks = ctx.shared.openai_quirks();
    let calls = calls(ctx, a, quirks);
    let finish = if calls.is_empty() { "stop" } else { "tool_calls" };
    let id = completion_id(ctx);
    let created = super::unix_now();
    if ctx.mode == Mode::Json {
        let mut message = json!({ "role": "assistant", "content": a.text, "refusal": null });
        if !calls.is_empty() {
            message["tool_calls"] = calls
                .iter()
                .map(|c| {
                    json!({ "id": c.id, "type": "function",
                                 "function": { "name": c.name, "arguments": args_wire(&c.args, quirks) } })
                })
                .collect();
        }
        let body = json!({
            "id": id, "object": "chat.completion", "created": created, "model": ctx.model,
            "choices": [{ "index": 0, "message": message, "logprobs": null, "finish_reason": finish }],
            "usage": usage(a),
        });
        return Rendered::json(200, &body).header("x-request-id", id);
    }
    let chunk = |choices: Value| {
        let v = json!({ "id": id, "object": "chat.completion.chunk", "created": created, "model": ctx.model,
                        "choices": choices });
        sse_event(None, &v.to_string(), false)
    };
    let delta = |d: Value, finish: Option<&str>| {
        chunk(json!([{ "index": 0, "delta": d, "logprobs": null, "finish_reason": finish }]))
    };
    let mut out = Vec::new();
    if quirks {
        out.push(": OPENROUTER PROCESSING\n\n".to_owned());
    }
    out.push(delta(json!({ "role": "assistant", "content": "" }), None));
    if has_text(a) {
        for piece in split_str(a.text.as_deref().unwrap_or(""), 2) {
            out.push(delta(json!({ "content": piece }), None));
        }
    }
    for (index, c) in calls.iter().enumerate() {
        if quirks {
            out.push(delta(
                json!({ "tool_calls": [{ "index": index, "id": c.id, "type": "function",
                                         "function": { "name": c.name, "arguments": c.args } }] }),
                None,
            ));
            continue;
        }
        out.push(delta(
            json!({ "tool_calls": [{ "index": index, "id": c.id, "type": "function",
                                     "function": { "name": c.name, "arguments": "" } }] }),
            None,
        ));
        let text = args_wire(&c.args, false);
        for piece in split_str(text.as_str().unwrap_or_default(), 3) {
            out.push(delta(json!({ "tool_calls": [{ "index": index, "function": { "arguments": piece } }] }), None));
        }
    }
    out.push(delta(json!({}), Some(finish)));
    if ctx.body["stream_options"]["include_usage"] == Value::Bool(true) {
        let v = json!({ "id": id, "object": "chat.completion.chunk", "created": created, "model": ctx.model,
                        "choices": [], "usage": usage(a) });
        out.push(sse_event(None, &v.to_string(), false));
    }
    out.push(sse_event(None, "[DONE]", false));
    Rendered::sse(out).header("x-request-id", id)
}

pub(crate) fn fault(ctx: &Ctx<'_>, f: &Fault) -> Rendered {
    match f {
        Fault::RateLimited { retry_after_secs } => super::retry_after(
            Rendered::json(
                429,
                &error_body(
                    "requests",
                    Some("rate_limit_exceeded"),
                    None,
                    "Rate limit reached for requests per min (RPM). Please try again later.",
                ),
            )
            .header("x-ratelimit-limit-requests", "500")
            .header("x-ratelimit-remaining-requests", "0")
            .header("x-ratelimit-reset-requests", format!("{}s", retry_after_secs.unwrap_or(1))),
            *retry_after_secs,
        ),
        Fault::Overloaded => {
            error(503, "server_error", None, "The server is overloaded or not ready yet. Please try again later.")
        }
        Fault::ServerError => {
            error(500, "server_error", None, "The server had an error while processing your request. Sorry about that!")
        }
        Fault::Garbage if ctx.streaming() => Rendered::sse(vec!["data: <html>502 Bad Gateway</html>\n\n".into()]),
        Fault::Garbage => {
            Rendered::raw(200, "application/json", vec!["<html><body>502 Bad Gateway</body></html>".into()])
        }
        Fault::Truncated => answer(ctx, &Answer::canned("This answer is cut short by the test server.")).truncated(),
        Fault::ErrorMidStream => {
            let err = error_body(
                "server_error",
                None,
                None,
                "The server had an error while processing your request. Sorry about that!",
            );
            if !ctx.streaming() {
                return Rendered::json(200, &err);
            }
            let full = answer(ctx, &Answer::canned("Partial answer"));
            // Keep the role chunk and the text deltas, then the error instead of finish / [DONE].
            let mut chunks: Vec<String> = full
                .chunks
                .into_iter()
                .filter(|c| !c.contains("finish_reason\":\"") && !c.contains("[DONE]"))
                .collect();
            chunks.retain(|c| !c.contains("\"choices\":[]"));
            chunks.push(sse_event(None, &err.to_string(), false));
            Rendered::sse(chunks)
        }
        Fault::Status { .. } | Fault::DropConnection => unreachable_fault(f),
    }
}

/// The OpenAI-shaped model list.
pub(crate) fn models() -> Rendered {
    let model =
        |id: &str| json!({ "id": id, "object": "model", "created": 1_767_225_600u64, "owned_by": "cks-testkit" });
    Rendered::json(200, &json!({ "object": "list", "data": [model("gpt-4o-mini"), model("gpt-4o")] }))
}

/// The top-level fields of the spec's `CreateEmbeddingRequest`.
const EMBED_FIELDS: &[&str] = &["input", "model", "encoding_format", "dimensions", "user"];

/// The most inputs one request may carry.
const MAX_EMBED_INPUTS: usize = 2048;

/// The texts of an embeddings request (a token array stands for its numbers, written out); `None` when the
/// `input` is none of the accepted forms.
fn embed_inputs(body: &Value) -> Option<Vec<String>> {
    let tokens = |v: &Value| -> Option<String> {
        let items = v.as_array().filter(|a| !a.is_empty())?;
        items.iter().map(|t| t.as_u64().map(|n| n.to_string())).collect::<Option<Vec<_>>>().map(|t| t.join(" "))
    };
    match body.get("input")? {
        Value::String(text) if !text.is_empty() => Some(vec![text.clone()]),
        Value::Array(items) if (1..=MAX_EMBED_INPUTS).contains(&items.len()) => {
            if items.iter().all(Value::is_u64) {
                return tokens(body.get("input")?).map(|t| vec![t]);
            }
            items
                .iter()
                .map(|item| match item {
                    Value::String(text) if !text.is_empty() => Some(text.clone()),
                    Value::Array(_) => tokens(item),
                    _ => None,
                })
                .collect()
        }
        _ => None,
    }
}

pub(crate) fn validate_embed(ctx: &Ctx<'_>) -> Result<(), Rendered> {
    let Some(body) = ctx.body.as_object() else {
        return Err(bad(None, "We could not parse the JSON body of your request."));
    };
    if let Some(unknown) = body.keys().find(|k| !EMBED_FIELDS.contains(&k.as_str())) {
        return Err(bad(None, format!("Unrecognized request argument supplied: {unknown}")));
    }
    if !body.get("model").is_some_and(Value::is_string) {
        return Err(bad(Some("model"), "you must provide a model parameter"));
    }
    if !body.contains_key("input") {
        return Err(bad(Some("input"), "Missing required parameter: 'input'."));
    }
    if embed_inputs(ctx.body).is_none() {
        return Err(bad(
            None,
            "'$.input' is invalid. Please check the API reference: https://platform.openai.com/docs/api-reference.",
        ));
    }
    match body.get("encoding_format") {
        None => {}
        Some(f) if f == "float" || f == "base64" => {}
        Some(other) => {
            return Err(bad(
                Some("encoding_format"),
                format!("Invalid value: {other}. Supported values are: 'float' and 'base64'."),
            ));
        }
    }
    requested_dims(ctx.body, "dimensions").map_err(|m| bad(Some("dimensions"), m))?;
    Ok(())
}

pub(crate) fn embed_answer(ctx: &Ctx<'_>) -> Rendered {
    let dims = requested_dims(ctx.body, "dimensions").ok().flatten().unwrap_or(EMBEDDING_DIMS);
    let base64 = ctx.body.get("encoding_format").is_some_and(|f| f == "base64");
    let inputs = embed_inputs(ctx.body).unwrap_or_default();
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(index, text)| {
            let vector = embedding(text, dims);
            let wire = if base64 { json!(base64_floats(&vector)) } else { json!(vector) };
            json!({ "object": "embedding", "index": index, "embedding": wire })
        })
        .collect();
    let tokens: usize = inputs.iter().map(|text| text.split_whitespace().count()).sum();
    Rendered::json(
        200,
        &json!({ "object": "list", "data": data, "model": ctx.model,
                 "usage": { "prompt_tokens": tokens, "total_tokens": tokens } }),
    )
}

/// Standard base64 (with padding) of the little-endian bytes of `values`, as the API's `base64` format.
fn base64_floats(values: &[f32]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}
