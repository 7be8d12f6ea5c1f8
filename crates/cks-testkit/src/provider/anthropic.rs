//! Anthropic Messages API: `POST /v1/messages` (and the Anthropic-shaped model list).
//!
//! Answers: a `message` with `text` and `tool_use` content blocks (ids `toolu_testkit_N` unless the script gives
//! one), `stop_reason` `tool_use` or `end_turn`, and `usage`. With `"stream": true`: named SSE events
//! `message_start`, then per block `content_block_start` / `content_block_delta` (`text_delta`, or
//! `input_json_delta` with the input split over several `partial_json` fragments, the first one empty) /
//! `content_block_stop`, a `ping` after the first block start, then `message_delta` (stop reason, cumulative
//! `output_tokens`) and `message_stop`, as in the fixture `anthropic_stream_tool_use.sse`.
//!
//! Errors use `{"type":"error","error":{"type","message"},"request_id"}` and every response has a `request-id`
//! header. Faults: rate limit 429 `rate_limit_error` (+ `retry-after`), overload 529 `overloaded_error`, server
//! error 500 `api_error`, mid-stream `event: error` with `overloaded_error`.
//!
//! Strict checks, in this order (all 400 `invalid_request_error` unless noted):
//! 1. `x-api-key` header present, else **401 `authentication_error`** (as the real API);
//! 2. `anthropic-version` header present;
//! 3. body is a JSON object;
//! 4. `model` is a string, `max_tokens` a positive integer, `messages` an array;
//! 5. no top-level field outside the `CreateMessageParams` schema (`model`, `messages`, `max_tokens`, `system`,
//!    `tools`, `tool_choice`, `stream`, `temperature`, `top_p`, `top_k`, `stop_sequences`, `metadata`, `thinking`,
//!    `service_tier`, `container`, `cache_control`, `inference_geo`, `output_config`): "Extra inputs are not
//!    permitted";
//! 6. every message has role `user` or `assistant` and content that is a string or an array of blocks;
//! 7. every content block (and every block nested in a `tool_result`'s content) has a known `type` and only the
//!    keys its request schema allows (so private bookkeeping keys leaking into blocks are caught);
//! 8. `tool_use` blocks have an `id` matching `^[a-zA-Z0-9_-]+$`, a `name` and an object `input`;
//! 9. every `tool_result` answers a `tool_use` id of the immediately preceding assistant message, and every
//!    `tool_use` of an assistant message that is followed by another message is answered by a `tool_result` in
//!    that next message (the real API's two messages);
//! 10. every `tools[]` entry that has an `input_schema` has a name matching `^[a-zA-Z0-9_-]{1,128}$` and an
//!     object-typed schema;
//! 11. `tool_choice`, when present, is an object whose `type` is `auto`, `any`, `tool` or `none`, comes with a
//!     non-empty `tools` list, and with `type: "tool"` has a `name` naming one of those tools.
//!
//! A [`crate::Reply::Json`] answers a request that forces a tool (`tool_choice` of type `tool`) as the real API
//! does: one `tool_use` block calling that tool, its input the scripted value, stop reason `tool_use`.

use serde_json::{Map, Value, json};

use super::{Ctx, Mode, Rendered, args_object, has_text, split_str, sse_event, unreachable_fault};
use crate::script::{Answer, Fault};

const TOP_LEVEL: &[&str] = &[
    "model",
    "messages",
    "max_tokens",
    "system",
    "tools",
    "tool_choice",
    "stream",
    "temperature",
    "top_p",
    "top_k",
    "stop_sequences",
    "metadata",
    "thinking",
    "service_tier",
    "container",
    "cache_control",
    "inference_geo",
    "output_config",
];

/// Allowed keys per request content block type (from the spec's `Request*Block` schemas).
fn block_keys(ty: &str) -> Option<&'static [&'static str]> {
    Some(match ty {
        "text" => &["type", "text", "cache_control", "citations"],
        "image" => &["type", "source", "cache_control"],
        "document" => &["type", "source", "title", "context", "citations", "cache_control"],
        "search_result" => &["type", "source", "title", "content", "citations", "cache_control"],
        "tool_use" | "server_tool_use" => &["type", "id", "name", "input", "cache_control", "caller"],
        "tool_result" => &["type", "tool_use_id", "content", "is_error", "cache_control"],
        "thinking" => &["type", "thinking", "signature"],
        "redacted_thinking" => &["type", "data"],
        "tool_reference" => &["type", "tool_name", "cache_control"],
        "container_upload" => &["type", "file_id", "cache_control"],
        "web_search_tool_result" | "web_fetch_tool_result" => {
            &["type", "tool_use_id", "content", "cache_control", "caller"]
        }
        _ => return None,
    })
}

/// An Anthropic error response.
pub(crate) fn error(status: u16, ty: &str, message: &str) -> Rendered {
    let id = request_id();
    Rendered::json(status, &error_body(ty, message, Some(&id))).header("request-id", id)
}

fn error_body(ty: &str, message: &str, request_id: Option<&str>) -> Value {
    let mut v = json!({ "type": "error", "error": { "type": ty, "message": message } });
    if let Some(id) = request_id {
        v["request_id"] = json!(id);
    }
    v
}

fn request_id() -> String {
    format!("req_testkit_{:016x}", super::unix_now() ^ 0x5eed_cafe)
}

fn bad(message: impl AsRef<str>) -> Rendered {
    error(400, "invalid_request_error", message.as_ref())
}

fn valid_tool_use_id(id: &str) -> bool {
    !id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

pub(crate) fn validate(ctx: &Ctx<'_>) -> Result<(), Rendered> {
    if ctx.header("x-api-key").is_none() {
        return Err(error(401, "authentication_error", "x-api-key header is required"));
    }
    if ctx.header("anthropic-version").is_none() {
        return Err(bad("anthropic-version: header is required"));
    }
    let Some(body) = ctx.body.as_object() else {
        return Err(bad("There was an error parsing the body of your request: the body must be a JSON object"));
    };
    if !body.get("model").is_some_and(Value::is_string) {
        return Err(bad("model: Field required"));
    }
    match body.get("max_tokens") {
        None => return Err(bad("max_tokens: Field required")),
        Some(v) if v.as_u64().is_none_or(|n| n == 0) => {
            return Err(bad("max_tokens: Input should be a valid positive integer"));
        }
        Some(_) => {}
    }
    let Some(messages) = body.get("messages").and_then(Value::as_array) else {
        return Err(bad("messages: Field required (an array of messages)"));
    };
    if let Some(extra) = body.keys().find(|k| !TOP_LEVEL.contains(&k.as_str())) {
        return Err(bad(format!("{extra}: Extra inputs are not permitted")));
    }
    check_tools(body)?;
    check_tool_choice(body)?;

    // Per message: role, content shape, blocks.
    let mut blocks_per_msg: Vec<Vec<&Map<String, Value>>> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        if role != "user" && role != "assistant" {
            return Err(bad(format!(
                "messages.{i}.role: Input should be 'user' or 'assistant' (there is no system role; use the top-level \
                 `system` field)"
            )));
        }
        if let Some(extra) = m.as_object().and_then(|o| o.keys().find(|k| *k != "role" && *k != "content")) {
            return Err(bad(format!("messages.{i}.{extra}: Extra inputs are not permitted")));
        }
        let mut blocks = Vec::new();
        match m.get("content") {
            Some(Value::String(_)) => {}
            Some(Value::Array(items)) => {
                for (j, b) in items.iter().enumerate() {
                    let path = format!("messages.{i}.content.{j}");
                    let b = check_block(b, &path)?;
                    if let Some(Value::Array(inner)) = b.get("content")
                        && b.get("type").and_then(Value::as_str) == Some("tool_result")
                    {
                        for (k, ib) in inner.iter().enumerate() {
                            check_block(ib, &format!("{path}.content.{k}"))?;
                        }
                    }
                    blocks.push(b);
                }
            }
            _ => return Err(bad(format!("messages.{i}.content: Field required (a string or an array of blocks)"))),
        }
        blocks_per_msg.push(blocks);
    }

    // tool_use / tool_result pairing.
    let ids_of = |blocks: &[&Map<String, Value>], ty: &str, key: &str| -> Vec<String> {
        blocks
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some(ty))
            .filter_map(|b| b.get(key).and_then(Value::as_str).map(str::to_owned))
            .collect()
    };
    for (i, blocks) in blocks_per_msg.iter().enumerate() {
        let role = messages[i]["role"].as_str().unwrap_or("");
        let results = ids_of(blocks, "tool_result", "tool_use_id");
        if !results.is_empty() {
            let prev_uses = match i.checked_sub(1) {
                Some(p) if messages[p]["role"] == "assistant" => ids_of(&blocks_per_msg[p], "tool_use", "id"),
                _ => Vec::new(),
            };
            if role != "user" {
                return Err(bad(format!("messages.{i}: `tool_result` blocks are only allowed in user messages")));
            }
            let unexpected = blocks.iter().enumerate().find_map(|(j, b)| {
                let id = b.get("tool_use_id").and_then(Value::as_str)?;
                (b.get("type").and_then(Value::as_str) == Some("tool_result") && !prev_uses.iter().any(|u| u == id))
                    .then_some((j, id))
            });
            if let Some((j, id)) = unexpected {
                return Err(bad(format!(
                    "messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: {id}. Each \
                     `tool_result` block must have a corresponding `tool_use` block in the previous message."
                )));
            }
        }
        // The assistant message before this one has all its tool_use ids answered here.
        if let Some(p) = i.checked_sub(1)
            && messages[p]["role"] == "assistant"
        {
            let uses = ids_of(&blocks_per_msg[p], "tool_use", "id");
            let missing: Vec<&str> = uses.iter().filter(|id| !results.contains(id)).map(String::as_str).collect();
            if !missing.is_empty() {
                return Err(bad(format!(
                    "messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: {}. \
                     Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
                    missing.join(", ")
                )));
            }
        }
    }
    Ok(())
}

fn check_block<'a>(b: &'a Value, path: &str) -> Result<&'a Map<String, Value>, Rendered> {
    let Some(obj) = b.as_object() else {
        return Err(bad(format!("{path}: Input should be a valid content block object")));
    };
    let ty = obj.get("type").and_then(Value::as_str).unwrap_or("");
    let Some(allowed) = block_keys(ty) else {
        return Err(bad(format!(
            "{path}: Input tag '{ty}' found using 'type' does not match any of the expected tags"
        )));
    };
    if let Some(extra) = obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(bad(format!("{path}.{ty}.{extra}: Extra inputs are not permitted")));
    }
    match ty {
        "text" if !obj.get("text").is_some_and(Value::is_string) => {
            return Err(bad(format!("{path}.text.text: Field required")));
        }
        "tool_use" => {
            let id = obj.get("id").and_then(Value::as_str).unwrap_or("");
            if !valid_tool_use_id(id) {
                return Err(bad(format!("{path}.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'")));
            }
            if !obj.get("name").is_some_and(Value::is_string) {
                return Err(bad(format!("{path}.tool_use.name: Field required")));
            }
            if !obj.get("input").is_some_and(Value::is_object) {
                return Err(bad(format!("{path}.tool_use.input: Input should be a valid dictionary")));
            }
        }
        "tool_result" if !obj.get("tool_use_id").is_some_and(Value::is_string) => {
            return Err(bad(format!("{path}.tool_result.tool_use_id: Field required")));
        }
        _ => {}
    }
    Ok(obj)
}

fn check_tools(body: &Map<String, Value>) -> Result<(), Rendered> {
    let Some(tools) = body.get("tools") else { return Ok(()) };
    let Some(tools) = tools.as_array() else { return Err(bad("tools: Input should be a valid list")) };
    for (i, t) in tools.iter().enumerate() {
        // Server tools (web search, ...) have a `type` and no `input_schema`; only custom tools are checked.
        let Some(schema) = t.get("input_schema") else { continue };
        let name = t.get("name").and_then(Value::as_str).unwrap_or("");
        let name_ok =
            (1..=128).contains(&name.len()) && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !name_ok {
            return Err(bad(format!("tools.{i}.custom.name: String should match pattern '^[a-zA-Z0-9_-]{{1,128}}$'")));
        }
        if schema.get("type").and_then(Value::as_str) != Some("object") {
            return Err(bad(format!("tools.{i}.custom.input_schema.type: Input should be 'object'")));
        }
    }
    Ok(())
}

fn check_tool_choice(body: &Map<String, Value>) -> Result<(), Rendered> {
    let Some(choice) = body.get("tool_choice") else { return Ok(()) };
    let ty = choice.get("type").and_then(Value::as_str).unwrap_or("");
    if !["auto", "any", "tool", "none"].contains(&ty) {
        return Err(bad(format!(
            "tool_choice: Input tag '{ty}' found using 'type' does not match any of the expected tags: 'auto', \
             'any', 'tool', 'none'"
        )));
    }
    let names: Vec<&str> = body
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| t.get("name").and_then(Value::as_str))
        .collect();
    if names.is_empty() {
        return Err(bad("tool_choice: tool_choice may only be specified while providing tools"));
    }
    if ty == "tool" {
        let Some(name) = choice.get("name").and_then(Value::as_str) else {
            return Err(bad("tool_choice.tool.name: Field required"));
        };
        if !names.contains(&name) {
            return Err(bad(format!("tool_choice.tool.name: Tool '{name}' not found in provided tools")));
        }
    }
    Ok(())
}

/// The tool a request forces (`tool_choice: {"type": "tool", "name": …}`).
fn forced_tool<'a>(ctx: &'a Ctx<'_>) -> Option<&'a str> {
    let choice = ctx.body.get("tool_choice")?;
    (choice.get("type")? == "tool").then_some(())?;
    choice.get("name")?.as_str()
}

enum Block {
    Text(String),
    /// `raw`: the scripted arguments were a JSON string, streamed verbatim as the `partial_json` fragments.
    ToolUse {
        id: String,
        name: String,
        input: Value,
        raw: Option<String>,
    },
}

fn blocks(ctx: &Ctx<'_>, a: &Answer) -> Vec<Block> {
    if let (Some(value), Some(name)) = (&a.json, forced_tool(ctx)) {
        // A forced tool is answered by its call alone: no text beside it.
        let id = format!("toolu_testkit_{:04}", ctx.shared.next_id());
        return vec![Block::ToolUse { id, name: name.to_owned(), input: args_object(value), raw: None }];
    }
    let mut out = Vec::new();
    if let Some(t) = &a.text
        && (has_text(a) || a.calls.is_empty())
    {
        out.push(Block::Text(t.clone()));
    }
    for c in &a.calls {
        let id = c.id.clone().unwrap_or_else(|| format!("toolu_testkit_{:04}", ctx.shared.next_id()));
        let raw = c.arguments.as_str().map(str::to_owned);
        out.push(Block::ToolUse { id, name: c.name.clone(), input: args_object(&c.arguments), raw });
    }
    out
}

fn message_id(ctx: &Ctx<'_>) -> String {
    format!("msg_testkit_{:04}", ctx.shared.next_id())
}

pub(crate) fn answer(ctx: &Ctx<'_>, a: &Answer) -> Rendered {
    let blocks = blocks(ctx, a);
    let stop_reason = if blocks.iter().any(|b| matches!(b, Block::ToolUse { .. })) { "tool_use" } else { "end_turn" };
    let id = message_id(ctx);
    if ctx.mode == Mode::Json {
        let content: Vec<Value> = blocks
            .iter()
            .map(|b| match b {
                Block::Text(t) => json!({ "type": "text", "text": t }),
                Block::ToolUse { id, name, input, .. } => {
                    json!({ "type": "tool_use", "id": id, "name": name, "input": input })
                }
            })
            .collect();
        let body = json!({
            "id": id, "type": "message", "role": "assistant", "model": ctx.model,
            "content": content, "stop_reason": stop_reason, "stop_sequence": null,
            "usage": { "input_tokens": a.input_tokens, "output_tokens": a.output_tokens },
        });
        return Rendered::json(200, &body).header("request-id", request_id());
    }
    let mut events = vec![message_start(ctx, &id, a)];
    events.extend(block_events(&blocks));
    events.push(ev(
        "message_delta",
        json!({ "type": "message_delta", "delta": { "stop_reason": stop_reason, "stop_sequence": null },
                "usage": { "output_tokens": a.output_tokens } }),
    ));
    events.push(ev("message_stop", json!({ "type": "message_stop" })));
    Rendered::sse(events).header("request-id", request_id())
}

fn ev(name: &str, data: Value) -> String {
    sse_event(Some(name), &data.to_string(), false)
}

fn message_start(ctx: &Ctx<'_>, id: &str, a: &Answer) -> String {
    ev(
        "message_start",
        json!({ "type": "message_start", "message": {
            "id": id, "type": "message", "role": "assistant", "model": ctx.model, "content": [],
            "stop_reason": null, "stop_sequence": null,
            "usage": { "input_tokens": a.input_tokens, "output_tokens": 1 } } }),
    )
}

fn block_events(blocks: &[Block]) -> Vec<String> {
    let mut events = Vec::new();
    for (index, b) in blocks.iter().enumerate() {
        match b {
            Block::Text(t) => {
                events.push(ev(
                    "content_block_start",
                    json!({ "type": "content_block_start", "index": index, "content_block": { "type": "text", "text": "" } }),
                ));
                if index == 0 {
                    events.push(ev("ping", json!({ "type": "ping" })));
                }
                if !t.is_empty() {
                    for piece in split_str(t, 2) {
                        events.push(ev(
                            "content_block_delta",
                            json!({ "type": "content_block_delta", "index": index,
                                    "delta": { "type": "text_delta", "text": piece } }),
                        ));
                    }
                }
            }
            Block::ToolUse { id, name, input, raw } => {
                events.push(ev(
                    "content_block_start",
                    json!({ "type": "content_block_start", "index": index,
                            "content_block": { "type": "tool_use", "id": id, "name": name, "input": {} } }),
                ));
                if index == 0 {
                    events.push(ev("ping", json!({ "type": "ping" })));
                }
                let mut pieces = vec![String::new()];
                pieces.extend(split_str(&raw.clone().unwrap_or_else(|| input.to_string()), 3));
                for piece in pieces {
                    events.push(ev(
                        "content_block_delta",
                        json!({ "type": "content_block_delta", "index": index,
                                "delta": { "type": "input_json_delta", "partial_json": piece } }),
                    ));
                }
            }
        }
        events.push(ev("content_block_stop", json!({ "type": "content_block_stop", "index": index })));
    }
    events
}

pub(crate) fn fault(ctx: &Ctx<'_>, f: &Fault) -> Rendered {
    match f {
        Fault::RateLimited { retry_after_secs } => super::retry_after(
            error(429, "rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit."),
            *retry_after_secs,
        ),
        Fault::Overloaded => error(529, "overloaded_error", "Overloaded"),
        Fault::ServerError => error(500, "api_error", "Internal server error"),
        Fault::Garbage if ctx.streaming() => {
            Rendered::sse(vec!["event: message_start\ndata: <html>502 Bad Gateway</html>\n\n".into()])
        }
        Fault::Garbage => {
            Rendered::raw(200, "application/json", vec!["<html><body>502 Bad Gateway</body></html>".into()])
        }
        Fault::Truncated => answer(ctx, &Answer::canned("This answer is cut short by the test server.")).truncated(),
        Fault::ErrorMidStream if ctx.streaming() => {
            let partial = Answer::canned("Partial answer");
            let mut events = vec![message_start(ctx, &message_id(ctx), &partial)];
            let mut blocks = block_events(&[Block::Text("Partial answer".into())]);
            blocks.pop(); // no content_block_stop: the error cuts the block short
            events.extend(blocks);
            events.push(ev("error", error_body("overloaded_error", "Overloaded", None)));
            Rendered::sse(events).header("request-id", request_id())
        }
        Fault::ErrorMidStream => {
            Rendered::json(200, &error_body("overloaded_error", "Overloaded", Some(&request_id())))
        }
        Fault::Status { .. } | Fault::DropConnection => unreachable_fault(f),
    }
}

/// The Anthropic-shaped model list.
pub(crate) fn models() -> Rendered {
    Rendered::json(
        200,
        &json!({
            "data": [
                { "type": "model", "id": "claude-sonnet-4-5", "display_name": "Claude Sonnet 4.5",
                  "created_at": "2025-09-29T00:00:00Z" },
                { "type": "model", "id": "claude-haiku-4-5", "display_name": "Claude Haiku 4.5",
                  "created_at": "2025-10-01T00:00:00Z" }
            ],
            "has_more": false, "first_id": "claude-sonnet-4-5", "last_id": "claude-haiku-4-5"
        }),
    )
}
