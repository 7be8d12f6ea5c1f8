//! Ollama native API: `POST /api/chat`, `POST /api/embed`, `GET /api/tags`, `GET /api/version`.
//!
//! Answers: `{"model","created_at","message":{"role":"assistant","content","tool_calls":[{"function":{"index",
//! "name","arguments":<object>}}]},"done":true,"done_reason":"stop",...,"prompt_eval_count","eval_count"}`.
//! `tool_calls[].id` is present only when the script gives one; `done_reason` stays `"stop"` with tool calls, as
//! the real server. Streaming is Ollama's **default**: unless the body says `"stream": false`, the answer is NDJSON
//! (`application/x-ndjson`): text chunks with `done: false`, one line with all the tool calls, then a
//! `done: true` line with `done_reason` and the counts.
//!
//! `GET /api/tags` serves `src/data/ollama_tags.json`, a sample `/api/tags` answer.
//!
//! Errors: `{"error": "<message>"}`. Faults: 429 (+ `retry-after`), 503 "server busy", 500; mid-stream: a text
//! line then an `{"error": ...}` line, with status 200.
//!
//! Strict checks (400 `{"error": ...}`):
//! 1. body is a JSON object with a string `model` ("model is required");
//! 2. `messages` is an array ("messages is required");
//! 3. every message has a `role` among `system`, `user`, `assistant`, `tool`;
//! 4. assistant `tool_calls[].function.arguments` are JSON objects (the Go server cannot unmarshal a string into
//!    its arguments map);
//! 5. `format`, when present, is `"json"` or a JSON schema (an object).
//!
//! Embeddings (`POST /api/embed`): `{"model","embeddings":[[f32]],"total_duration","load_duration",
//! "prompt_eval_count"}`, one vector per input in input order ([`super::embedding`], in `dimensions` dimensions
//! when the request asks). Checks (400 `{"error": ...}`): a JSON object with a string `model` ("model is
//! required") and an `input` that is a string or an array of strings ("invalid input type"; the spec's
//! `EmbedRequest` requires it, where the Go server would answer a missing one with no vectors); `truncate` a
//! boolean, `dimensions` a positive integer; and no top-level field outside `EmbedRequest` (`model`, `input`,
//! `truncate`, `dimensions`, `keep_alive`, `options`): the Go server ignores unknown fields, so a misspelt one
//! would silently do nothing.

use serde_json::{Value, json};

use super::{
    Ctx, EMBEDDING_DIMS, Mode, Rendered, args_object, embedding, has_text, requested_dims, split_str, unreachable_fault,
};
use crate::script::{Answer, Fault};

const TAGS: &str = include_str!("../data/ollama_tags.json");
const CREATED_AT: &str = "2026-01-01T00:00:00.000000Z";

/// An Ollama error response.
pub(crate) fn error(status: u16, message: &str) -> Rendered {
    Rendered::json(status, &json!({ "error": message }))
}

pub(crate) fn validate(ctx: &Ctx<'_>) -> Result<(), Rendered> {
    let Some(body) = ctx.body.as_object() else {
        return Err(error(400, "invalid character in request body: the body must be a JSON object"));
    };
    if !body.get("model").is_some_and(Value::is_string) {
        return Err(error(400, "model is required"));
    }
    let Some(messages) = body.get("messages").and_then(Value::as_array) else {
        return Err(error(400, "messages is required"));
    };
    match body.get("format") {
        None | Some(Value::Object(_)) => {}
        Some(Value::String(f)) if f == "json" => {}
        Some(other) => return Err(error(400, &format!("invalid format: {other}: expected \"json\" or a JSON schema"))),
    }
    for (i, m) in messages.iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        if !["system", "user", "assistant", "tool"].contains(&role) {
            return Err(error(400, &format!("invalid role {role:?} in messages[{i}]")));
        }
        for c in m.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
            let args = &c["function"]["arguments"];
            if !args.is_object() {
                let ty = if args.is_string() { "string" } else { "non-object value" };
                return Err(error(
                    400,
                    &format!(
                        "json: cannot unmarshal {ty} into Go struct field ToolCallFunction.messages.tool_calls.function.\
                         arguments of type api.ToolCallFunctionArguments"
                    ),
                ));
            }
        }
    }
    Ok(())
}

fn tool_calls(a: &Answer) -> Vec<Value> {
    a.calls
        .iter()
        .enumerate()
        .map(|(index, c)| {
            let mut v =
                json!({ "function": { "index": index, "name": c.name, "arguments": args_object(&c.arguments) } });
            if let Some(id) = &c.id {
                v["id"] = json!(id);
            }
            v
        })
        .collect()
}

fn final_line(ctx: &Ctx<'_>, a: &Answer, message: Value) -> Value {
    json!({
        "model": ctx.model, "created_at": CREATED_AT, "message": message,
        "done": true, "done_reason": "stop",
        "total_duration": 912_000_000u64, "load_duration": 20_000_000u64,
        "prompt_eval_count": a.input_tokens, "prompt_eval_duration": 60_000_000u64,
        "eval_count": a.output_tokens, "eval_duration": 90_000_000u64,
    })
}

fn partial_line(ctx: &Ctx<'_>, message: Value) -> String {
    format!("{}\n", json!({ "model": ctx.model, "created_at": CREATED_AT, "message": message, "done": false }))
}

fn ndjson(lines: Vec<String>) -> Rendered {
    Rendered::raw(200, "application/x-ndjson", lines)
}

pub(crate) fn answer(ctx: &Ctx<'_>, a: &Answer) -> Rendered {
    let calls = tool_calls(a);
    if ctx.mode == Mode::Json {
        let mut message = json!({ "role": "assistant", "content": a.text.clone().unwrap_or_default() });
        if !calls.is_empty() {
            message["tool_calls"] = Value::Array(calls);
        }
        return Rendered::json(200, &final_line(ctx, a, message));
    }
    let mut lines = Vec::new();
    if has_text(a) {
        for piece in split_str(a.text.as_deref().unwrap_or(""), 2) {
            lines.push(partial_line(ctx, json!({ "role": "assistant", "content": piece })));
        }
    }
    if !calls.is_empty() {
        lines.push(partial_line(ctx, json!({ "role": "assistant", "content": "", "tool_calls": calls })));
    }
    lines.push(format!("{}\n", final_line(ctx, a, json!({ "role": "assistant", "content": "" }))));
    ndjson(lines)
}

pub(crate) fn fault(ctx: &Ctx<'_>, f: &Fault) -> Rendered {
    match f {
        Fault::RateLimited { retry_after_secs } => {
            super::retry_after(error(429, "too many requests, please retry later"), *retry_after_secs)
        }
        Fault::Overloaded => error(503, "server busy, please try again.  maximum pending requests exceeded"),
        Fault::ServerError => error(500, "an error was encountered while running the model"),
        Fault::Garbage if ctx.streaming() => ndjson(vec!["<html>502 Bad Gateway</html>\n".into()]),
        Fault::Garbage => {
            Rendered::raw(200, "application/json", vec!["<html><body>502 Bad Gateway</body></html>".into()])
        }
        Fault::Truncated => answer(ctx, &Answer::canned("This answer is cut short by the test server.")).truncated(),
        Fault::ErrorMidStream if ctx.streaming() => ndjson(vec![
            partial_line(ctx, json!({ "role": "assistant", "content": "Partial answer" })),
            format!("{}\n", json!({ "error": "an error was encountered while running the model" })),
        ]),
        Fault::ErrorMidStream => {
            Rendered::json(200, &json!({ "error": "an error was encountered while running the model" }))
        }
        Fault::Status { .. } | Fault::DropConnection => unreachable_fault(f),
    }
}

/// `GET /api/tags`.
pub(crate) fn tags() -> Rendered {
    Rendered::raw(200, "application/json; charset=utf-8", vec![TAGS.to_owned()])
}

/// The top-level fields of the spec's `EmbedRequest`.
const EMBED_FIELDS: &[&str] = &["model", "input", "truncate", "dimensions", "keep_alive", "options"];

/// The texts of an `/api/embed` request: its string `input`, or each string of its array.
fn embed_inputs(body: &Value) -> Option<Vec<&str>> {
    match body.get("input")? {
        Value::String(text) => Some(vec![text.as_str()]),
        Value::Array(items) => items.iter().map(Value::as_str).collect(),
        _ => None,
    }
}

pub(crate) fn validate_embed(ctx: &Ctx<'_>) -> Result<(), Rendered> {
    let Some(body) = ctx.body.as_object() else {
        return Err(error(400, "invalid character in request body: the body must be a JSON object"));
    };
    if let Some(unknown) = body.keys().find(|k| !EMBED_FIELDS.contains(&k.as_str())) {
        return Err(error(400, &format!("unknown field {unknown:?} (cks-testkit is stricter than the server here)")));
    }
    if !body.get("model").is_some_and(Value::is_string) {
        return Err(error(400, "model is required"));
    }
    if embed_inputs(ctx.body).is_none() {
        return Err(error(400, "invalid input type"));
    }
    if body.get("truncate").is_some_and(|t| !t.is_boolean()) {
        return Err(error(400, "json: cannot unmarshal into Go struct field EmbedRequest.truncate of type bool"));
    }
    requested_dims(ctx.body, "dimensions").map_err(|m| error(400, &m))?;
    Ok(())
}

pub(crate) fn embed_answer(ctx: &Ctx<'_>) -> Rendered {
    let dims = requested_dims(ctx.body, "dimensions").ok().flatten().unwrap_or(EMBEDDING_DIMS);
    let inputs = embed_inputs(ctx.body).unwrap_or_default();
    let embeddings: Vec<Vec<f32>> = inputs.iter().map(|text| embedding(text, dims)).collect();
    let tokens: usize = inputs.iter().map(|text| text.split_whitespace().count()).sum();
    Rendered::json(
        200,
        &json!({
            "model": ctx.model, "embeddings": embeddings,
            "total_duration": 14_143_917u64, "load_duration": 1_019_500u64, "prompt_eval_count": tokens,
        }),
    )
}
