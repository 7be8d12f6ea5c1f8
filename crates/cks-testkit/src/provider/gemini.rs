//! Google Gemini (v1beta): `POST /v1beta/models/{model}:generateContent`, `…:streamGenerateContent`, the same
//! without the `/v1beta` prefix, and the model list `GET /v1beta/models`.
//!
//! Answers: `candidates[0].content` (`role: "model"`) with a `text` part (when there is text) and one
//! `functionCall {name, args}` part per call (`id` only when the script gives one), `finishReason: "STOP"` (also
//! with tool calls, as the real API), `usageMetadata`, `modelVersion`, `responseId`. The **first** `functionCall`
//! part of every answer carries a made-up `thoughtSignature`, which the server remembers (see the checks).
//! Streaming (`:streamGenerateContent?alt=sse`): `data:` lines with CRLF line endings and no `[DONE]`: text
//! chunks, one chunk with all the calls, a last chunk with an empty text part, `finishReason` and the final
//! `usageMetadata`. Without `alt=sse` the same chunks come as one JSON array.
//!
//! Errors use the google.rpc shape `{"error":{"code","message","status","details"}}`. Faults: 429
//! `RESOURCE_EXHAUSTED` with a `QuotaFailure` detail and, when `retry_after_secs` is set, a
//! `google.rpc.RetryInfo` detail with `retryDelay: "<n>s"` (plus a `retry-after` header); 503 `UNAVAILABLE`;
//! 500 `INTERNAL`; mid-stream: a text chunk then a `data:` line holding the error object (an array element
//! without `alt=sse`).
//!
//! Strict checks (400 `INVALID_ARGUMENT` unless noted):
//! 1. an API key is sent (`x-goog-api-key` header or `key=` query parameter), else **403 `PERMISSION_DENIED`**
//!    (as the real API);
//! 2. body is a JSON object with a non-empty `contents` array; every content's `role` is `user` or `model` (or
//!    absent) and it has a `parts` array;
//! 3. `tools[].functionDeclarations[]`: the name matches `^[a-zA-Z_][a-zA-Z0-9_.:-]{0,127}$` ("Invalid function
//!    name") and `parameters` uses only the keywords of Google's `Schema` (`type`, `format`, `title`,
//!    `description`, `nullable`, `enum`, `properties`, `required`, `items`, `anyOf`, `propertyOrdering`,
//!    `default`, `example`, `minimum`, `maximum`, `minItems`, `maxItems`, `minLength`, `maxLength`,
//!    `minProperties`, `maxProperties`, `pattern`), checked at every depth (`properties` values, `items`, `anyOf`).
//!    (`parametersJsonSchema` takes real JSON Schema and is not checked.) So `additionalProperties`, `$schema`, `$ref`, `$defs`, `const`, `oneOf`, ... are rejected with "Unknown name
//!    … Cannot find field." (fixture `gemini_error_invalid_schema.json`); an array-valued `type` is rejected with
//!    "Proto field is not repeating, cannot start list"; an `array` schema without `items` with "missing field";
//! 4. thought signatures (the server remembers each signature it issued with all the calls of that answer; calls
//!    are matched by name and args): a `functionCall` part matching the signed (first) call of an answer must
//!    carry a `thoughtSignature`, and so must the first `functionCall` part of a `model` content that holds any
//!    call of an answer with a signature (splitting parallel calls over several contents makes each "the first
//!    call of a step"): "Function call is missing a thought_signature …" (fixture
//!    `gemini_error_missing_thought_signature.json`). A signature this server issued must sit on the part it was
//!    issued with, else "Corrupted thought signature.". Signatures the server never issued are not checked
//!    (conversations from elsewhere, `skip_thought_signature_validator`);
//! 5. every `functionResponse.response` is a JSON object (a string or array is rejected, as the protobuf `Struct`
//!    it is);
//! 6. a `user` turn holding `functionResponse` parts right after a `model` turn holding `functionCall` parts has as
//!    many responses as there were calls;
//! 7. structured output (`generationConfig`): `responseSchema` and `responseJsonSchema` are not both set; either
//!    one needs `responseMimeType` `application/json` (`text/x.enum` also goes with `responseSchema`), as the
//!    spec says; `responseSchema` is Google's `Schema` and checked as `parameters` are (3.); `responseJsonSchema`
//!    is JSON Schema of which Google documents only some keywords as supported (`$id`, `$defs`, `$ref`,
//!    `$anchor`, `type`, `format`, `title`, `description`, `enum`, `items`, `prefixItems`, `minItems`,
//!    `maxItems`, `minimum`, `maximum`, `anyOf`, `oneOf`, `properties`, `additionalProperties`, `required`,
//!    `propertyOrdering`) and, beside `$ref`, only keywords starting with `$`: this server rejects anything else at
//!    every depth, stricter than the API is known to be, so that a client cannot come to rely on a keyword
//!    Gemini does not apply.
//!
//! Embeddings (`POST …/models/{model}:batchEmbedContents`): `{"embeddings":[{"values":[f32]}]}`, one per request
//! in request order ([`super::embedding`] of the request's text parts joined by newlines, in
//! `outputDimensionality` dimensions when a request asks). Checks: the API key as above (403); then 400
//! `INVALID_ARGUMENT`: unknown fields at the top level and in each request ("Unknown name … Cannot find
//! field."; the API is protobuf-backed); `requests` a non-empty array of at most 100 ("at most 100 requests
//! can be in one batch"); each request's `model` present and equal to `models/{model}` of the URL (the spec:
//! "The model in each of these requests must match the model specified"); a `content` with a non-empty
//! `parts` array of parts holding a non-empty `text` (an empty text is an unset `data` oneof to the API);
//! `outputDimensionality` a positive integer.

use serde_json::{Map, Value, json};

use super::{
    Ctx, EMBEDDING_DIMS, Mode, Rendered, args_object, embedding, has_text, requested_dims, split_str, sse_event,
    unreachable_fault,
};
use crate::script::{Answer, Fault};

const SCHEMA_KEYS: &[&str] = &[
    "type",
    "format",
    "title",
    "description",
    "nullable",
    "enum",
    "properties",
    "required",
    "items",
    "anyOf",
    "propertyOrdering",
    "default",
    "example",
    "minimum",
    "maximum",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "minProperties",
    "maxProperties",
    "pattern",
];

fn status_name(code: u16) -> &'static str {
    match code {
        400 => "INVALID_ARGUMENT",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        429 => "RESOURCE_EXHAUSTED",
        503 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        _ => "INTERNAL",
    }
}

fn error_body(code: u16, status: &str, message: &str, details: Option<Value>) -> Value {
    let mut e = json!({ "code": code, "message": message, "status": status });
    if let Some(d) = details {
        e["details"] = d;
    }
    json!({ "error": e })
}

/// A Gemini error response.
pub(crate) fn error(code: u16, status: &str, message: &str) -> Rendered {
    Rendered::json(code, &error_body(code, status, message, None))
}

fn bad(message: impl AsRef<str>) -> Rendered {
    error(400, status_name(400), message.as_ref())
}

fn bad_field(field: &str, message: String) -> Rendered {
    let details = json!([{ "@type": "type.googleapis.com/google.rpc.BadRequest",
                           "fieldViolations": [{ "field": field, "description": message }] }]);
    Rendered::json(400, &error_body(400, "INVALID_ARGUMENT", &message, Some(details)))
}

/// An API key is sent, in the header or the query; else the real API's 403.
fn require_key(ctx: &Ctx<'_>) -> Result<(), Rendered> {
    let key_in_query = ctx.query.is_some_and(|q| q.split('&').any(|kv| kv.starts_with("key=") && kv.len() > 4));
    if ctx.header("x-goog-api-key").is_none() && !key_in_query {
        return Err(error(
            403,
            "PERMISSION_DENIED",
            "Method doesn't allow unregistered callers (callers without established identity). Please use API Key \
             or other form of API consumer identity to call this API.",
        ));
    }
    Ok(())
}

pub(crate) fn validate(ctx: &Ctx<'_>) -> Result<(), Rendered> {
    require_key(ctx)?;
    let Some(body) = ctx.body.as_object() else {
        return Err(bad("Invalid JSON payload received. Expected an object."));
    };
    let contents = match body.get("contents").and_then(Value::as_array) {
        Some(c) if !c.is_empty() => c,
        _ => return Err(bad("* GenerateContentRequest.contents: contents is not specified")),
    };
    check_tools(body)?;
    check_output_schema(body)?;
    for (i, c) in contents.iter().enumerate() {
        match c.get("role").map(|r| r.as_str()) {
            None | Some(Some("user" | "model")) => {}
            Some(r) => {
                return Err(bad(format!(
                    "Please use a valid role: user, model. (got {} at contents[{i}])",
                    r.unwrap_or("a non-string")
                )));
            }
        }
        let Some(parts) = c.get("parts").and_then(Value::as_array) else {
            return Err(bad(format!(
                "* GenerateContentRequest.contents[{i}].parts: contents.parts must not be empty."
            )));
        };
        for (j, p) in parts.iter().enumerate() {
            if let Some(fr) = p.get("functionResponse") {
                let field = format!("contents[{i}].parts[{j}].function_response");
                match fr.get("response") {
                    Some(Value::Object(_)) | None => {}
                    Some(Value::Array(_)) => {
                        return Err(bad(format!(
                            "Invalid JSON payload received. Unknown name \"response\" at '{field}': Proto field is \
                             not repeating, cannot start list."
                        )));
                    }
                    Some(other) => {
                        return Err(bad(format!(
                            "Invalid value at '{field}.response' (type.googleapis.com/google.protobuf.Struct), {other}"
                        )));
                    }
                }
            }
        }
    }
    check_signatures(ctx, contents)?;
    // As many function responses as calls in the model turn just before.
    for w in contents.windows(2) {
        let count = |c: &Value, key: &str| {
            c["parts"].as_array().map(|ps| ps.iter().filter(|p| p.get(key).is_some()).count()).unwrap_or(0)
        };
        let (calls, responses) = (count(&w[0], "functionCall"), count(&w[1], "functionResponse"));
        if w[0]["role"] == "model" && calls > 0 && responses > 0 && calls != responses {
            return Err(bad(
                "Please ensure that the number of function response parts is equal to the number of function call \
                 parts of the function call turn.",
            ));
        }
    }
    Ok(())
}

fn check_tools(body: &Map<String, Value>) -> Result<(), Rendered> {
    let Some(tools) = body.get("tools").and_then(Value::as_array) else { return Ok(()) };
    for (i, t) in tools.iter().enumerate() {
        let Some(decls) = t.get("functionDeclarations").and_then(Value::as_array) else { continue };
        for (j, d) in decls.iter().enumerate() {
            let field = format!("tools[{i}].function_declarations[{j}]");
            let name = d.get("name").and_then(Value::as_str).unwrap_or("");
            if !valid_function_name(name) {
                return Err(bad_field(
                    &format!("{field}.name"),
                    format!(
                        "Invalid function name. Must start with a letter or an underscore. Must be a-z, A-Z, 0-9, or \
                         contain underscores, dots, colons and dashes, with a maximum length of 128. (got {name:?})"
                    ),
                ));
            }
            if let Some(params) = d.get("parameters") {
                check_schema(params, &format!("{field}.parameters"))?;
            }
        }
    }
    Ok(())
}

/// The keywords Google documents as supported in `generationConfig.responseJsonSchema`. Written out
/// here from Google's reference, not taken from the client: the server checks the client.
const JSON_SCHEMA_KEYS: &[&str] = &[
    "$id",
    "$defs",
    "$ref",
    "$anchor",
    "type",
    "format",
    "title",
    "description",
    "enum",
    "items",
    "prefixItems",
    "minItems",
    "maxItems",
    "minimum",
    "maximum",
    "anyOf",
    "oneOf",
    "properties",
    "additionalProperties",
    "required",
    "propertyOrdering",
];

fn check_output_schema(body: &Map<String, Value>) -> Result<(), Rendered> {
    let Some(config) = body.get("generationConfig").and_then(Value::as_object) else { return Ok(()) };
    let mime = config.get("responseMimeType").and_then(Value::as_str);
    match (config.get("responseSchema"), config.get("responseJsonSchema")) {
        (Some(_), Some(_)) => Err(bad(
            "* GenerateContentRequest.generation_config.response_json_schema: response_schema must be omitted when \
             response_json_schema is set.",
        )),
        (Some(schema), None) => {
            if !matches!(mime, Some("application/json" | "text/x.enum")) {
                return Err(bad("* GenerateContentRequest.generation_config.response_mime_type: a compatible \
                     response_mime_type (application/json or text/x.enum) must be set with response_schema."));
            }
            check_schema(schema, "generation_config.response_schema")
        }
        (None, Some(schema)) => {
            if mime != Some("application/json") {
                return Err(bad("* GenerateContentRequest.generation_config.response_mime_type: response_mime_type \
                     application/json is required with response_json_schema."));
            }
            check_json_schema(schema, "generation_config.response_json_schema")
        }
        (None, None) => Ok(()),
    }
}

/// A `responseJsonSchema` and its sub-schemas use only the documented keywords (boolean schemas pass).
fn check_json_schema(schema: &Value, field: &str) -> Result<(), Rendered> {
    let obj = match schema {
        Value::Bool(_) => return Ok(()),
        Value::Object(obj) => obj,
        _ => return Err(bad_field(field, format!("{field}: a schema must be an object or a boolean."))),
    };
    if let Some(k) = obj.keys().find(|k| !JSON_SCHEMA_KEYS.contains(&k.as_str())) {
        return Err(bad_field(
            field,
            format!(
                "{field}: \"{k}\" is not among the JSON Schema keywords Gemini supports in response_json_schema \
                 (cks-testkit rejects it; the API documents it as unsupported)."
            ),
        ));
    }
    if obj.contains_key("$ref")
        && let Some(k) = obj.keys().find(|k| !k.starts_with('$'))
    {
        return Err(bad_field(
            field,
            format!("{field}: \"{k}\" beside \"$ref\": if $ref is set, only properties starting with $ may be set."),
        ));
    }
    for key in ["properties", "$defs"] {
        if let Some(map) = obj.get(key).and_then(Value::as_object) {
            for (name, sub) in map {
                check_json_schema(sub, &format!("{field}.{key}[{name}]"))?;
            }
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(sub) = obj.get(key) {
            check_json_schema(sub, &format!("{field}.{key}"))?;
        }
    }
    for key in ["prefixItems", "anyOf", "oneOf"] {
        if let Some(list) = obj.get(key).and_then(Value::as_array) {
            for (k, sub) in list.iter().enumerate() {
                check_json_schema(sub, &format!("{field}.{key}[{k}]"))?;
            }
        }
    }
    Ok(())
}

fn valid_function_name(name: &str) -> bool {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    first_ok && name.len() <= 128 && chars.all(|c| c.is_ascii_alphanumeric() || "_.:-".contains(c))
}

fn check_schema(schema: &Value, field: &str) -> Result<(), Rendered> {
    let Some(obj) = schema.as_object() else {
        return Err(bad_field(field, format!("Invalid JSON payload received. Expected an object at '{field}'.")));
    };
    if let Some(k) = obj.keys().find(|k| !SCHEMA_KEYS.contains(&k.as_str())) {
        return Err(bad_field(
            field,
            format!("Invalid JSON payload received. Unknown name \"{k}\" at '{field}': Cannot find field."),
        ));
    }
    match obj.get("type") {
        Some(Value::Array(_)) => {
            return Err(bad_field(
                field,
                format!(
                    "Invalid JSON payload received. Unknown name \"type\" at '{field}': Proto field is not repeating, \
                     cannot start list."
                ),
            ));
        }
        Some(Value::String(t)) if t.eq_ignore_ascii_case("array") && !obj.contains_key("items") => {
            return Err(bad_field(&format!("{field}.items"), format!("* {field}.items: missing field.")));
        }
        _ => {}
    }
    if let Some(props) = obj.get("properties").and_then(Value::as_object) {
        for (name, sub) in props {
            check_schema(sub, &format!("{field}.properties[{name}].value"))?;
        }
    }
    if let Some(items) = obj.get("items") {
        check_schema(items, &format!("{field}.items"))?;
    }
    if let Some(any) = obj.get("anyOf").and_then(Value::as_array) {
        for (k, sub) in any.iter().enumerate() {
            check_schema(sub, &format!("{field}.any_of[{k}]"))?;
        }
    }
    Ok(())
}

fn check_signatures(ctx: &Ctx<'_>, contents: &[Value]) -> Result<(), Rendered> {
    let issued = ctx.shared.issued_signatures();
    if issued.is_empty() {
        return Ok(());
    }
    for (i, c) in contents.iter().enumerate() {
        if c["role"] != "model" {
            continue;
        }
        let Some(parts) = c["parts"].as_array() else { continue };
        let first_call = parts.iter().position(|p| p.get("functionCall").is_some());
        for (j, p) in parts.iter().enumerate() {
            let call = p.get("functionCall");
            let name = call.and_then(|f| f.get("name")).and_then(Value::as_str).unwrap_or("");
            let args = call.map(|f| args_object(f.get("args").unwrap_or(&Value::Null))).unwrap_or(Value::Null);
            let is = |(n, a): &(String, Value)| n == name && *a == args;
            let sig = p.get("thoughtSignature").and_then(Value::as_str);
            if let Some(s) = sig
                && let Some(iss) = issued.iter().find(|x| x.signature == s)
                && (call.is_none() || !is(&iss.calls[0]))
            {
                return Err(bad(format!(
                    "Corrupted thought signature. (contents[{i}].parts[{j}] carries the signature issued for a \
                     functionCall `{}`)",
                    iss.calls[0].0
                )));
            }
            if call.is_none() || sig.is_some() {
                continue;
            }
            // The signed call of an answer, or the first call of a model content holding a call this server
            // issued (calls split over several contents each become "the first call of a step").
            let signed_call = issued.iter().any(|x| is(&x.calls[0]));
            let first_of_step = first_call == Some(j) && issued.iter().any(|x| x.calls.iter().any(is));
            if signed_call || first_of_step {
                return Err(bad(format!(
                    "Function call is missing a thought_signature in functionCall parts. This is required for tools \
                     to work correctly, and missing thought_signature may lead to degraded model performance. \
                     Additional data, function call `default_api:{name}`, position {}. Please refer to \
                     https://ai.google.dev/gemini-api/docs/thought-signatures for more details.",
                    i + 1
                )));
            }
        }
    }
    Ok(())
}

fn parts(ctx: &Ctx<'_>, a: &Answer) -> (Vec<Value>, Vec<Value>) {
    let mut text_parts = Vec::new();
    if let Some(t) = &a.text
        && (has_text(a) || a.calls.is_empty())
    {
        text_parts.push(json!({ "text": t }));
    }
    let calls: Vec<(String, Value)> = a.calls.iter().map(|c| (c.name.clone(), args_object(&c.arguments))).collect();
    let mut call_parts = Vec::new();
    for (k, c) in a.calls.iter().enumerate() {
        let mut fc = json!({ "name": c.name, "args": calls[k].1 });
        if let Some(id) = &c.id {
            fc["id"] = json!(id);
        }
        let mut part = json!({ "functionCall": fc });
        if k == 0 {
            part["thoughtSignature"] = json!(ctx.shared.issue_signature(calls.clone()));
        }
        call_parts.push(part);
    }
    (text_parts, call_parts)
}

fn usage(a: &Answer) -> Value {
    json!({ "promptTokenCount": a.input_tokens, "candidatesTokenCount": a.output_tokens,
            "totalTokenCount": a.input_tokens + a.output_tokens })
}

fn response_id(ctx: &Ctx<'_>) -> String {
    format!("testkitResponse{:06}", ctx.shared.next_id())
}

fn chunk(ctx: &Ctx<'_>, id: &str, parts: Vec<Value>, last: Option<&Answer>) -> Value {
    let mut cand = json!({ "content": { "role": "model", "parts": parts }, "index": 0 });
    let mut v = json!({ "candidates": [], "modelVersion": ctx.model, "responseId": id });
    if let Some(a) = last {
        cand["finishReason"] = json!("STOP");
        v["usageMetadata"] = usage(a);
    }
    v["candidates"] = json!([cand]);
    v
}

fn stream_chunks(ctx: &Ctx<'_>, a: &Answer) -> Vec<Value> {
    let (_, call_parts) = parts(ctx, a);
    let id = response_id(ctx);
    let mut chunks = Vec::new();
    if has_text(a) {
        for piece in split_str(a.text.as_deref().unwrap_or(""), 2) {
            chunks.push(chunk(ctx, &id, vec![json!({ "text": piece })], None));
        }
    }
    if !call_parts.is_empty() {
        chunks.push(chunk(ctx, &id, call_parts, None));
    }
    chunks.push(chunk(ctx, &id, vec![json!({ "text": "" })], Some(a)));
    chunks
}

fn render_stream(ctx: &Ctx<'_>, chunks: Vec<Value>) -> Rendered {
    if ctx.mode == Mode::JsonArray {
        return Rendered::json(200, &Value::Array(chunks));
    }
    Rendered::sse(chunks.iter().map(|c| sse_event(None, &c.to_string(), true)).collect())
}

pub(crate) fn answer(ctx: &Ctx<'_>, a: &Answer) -> Rendered {
    if ctx.streaming() {
        let chunks = stream_chunks(ctx, a);
        return render_stream(ctx, chunks);
    }
    let (mut all, call_parts) = parts(ctx, a);
    all.extend(call_parts);
    let id = response_id(ctx);
    Rendered::json(200, &chunk(ctx, &id, all, Some(a)))
}

fn rate_limit_details(retry_after_secs: Option<u64>) -> Value {
    let mut d = vec![json!({
        "@type": "type.googleapis.com/google.rpc.QuotaFailure",
        "violations": [{ "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
                         "quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier" }]
    })];
    if let Some(s) = retry_after_secs {
        d.push(json!({ "@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": format!("{s}s") }));
    }
    Value::Array(d)
}

pub(crate) fn fault(ctx: &Ctx<'_>, f: &Fault) -> Rendered {
    let overloaded = || error_body(503, "UNAVAILABLE", "The model is overloaded. Please try again later.", None);
    match f {
        Fault::RateLimited { retry_after_secs } => {
            let body = error_body(
                429,
                "RESOURCE_EXHAUSTED",
                "You exceeded your current quota, please check your plan and billing details.",
                Some(rate_limit_details(*retry_after_secs)),
            );
            super::retry_after(Rendered::json(429, &body), *retry_after_secs)
        }
        Fault::Overloaded => Rendered::json(503, &overloaded()),
        Fault::ServerError => error(500, "INTERNAL", "An internal error has occurred. Please retry or report it."),
        Fault::Garbage if ctx.mode == Mode::Stream => {
            Rendered::sse(vec!["data: <html>502 Bad Gateway</html>\r\n\r\n".into()])
        }
        Fault::Garbage => {
            Rendered::raw(200, "application/json", vec!["<html><body>502 Bad Gateway</body></html>".into()])
        }
        Fault::Truncated => answer(ctx, &Answer::canned("This answer is cut short by the test server.")).truncated(),
        Fault::ErrorMidStream if ctx.streaming() => {
            let id = response_id(ctx);
            let chunks = vec![chunk(ctx, &id, vec![json!({ "text": "Partial answer" })], None), overloaded()];
            render_stream(ctx, chunks)
        }
        Fault::ErrorMidStream => Rendered::json(200, &overloaded()),
        Fault::Status { .. } | Fault::DropConnection => unreachable_fault(f),
    }
}

/// The Gemini model list.
pub(crate) fn models() -> Rendered {
    let model = |name: &str, display: &str| {
        json!({ "name": format!("models/{name}"), "version": "001", "displayName": display,
                "inputTokenLimit": 1_048_576, "outputTokenLimit": 65_536,
                "supportedGenerationMethods": ["generateContent", "countTokens"] })
    };
    Rendered::json(
        200,
        &json!({ "models": [model("gemini-2.5-flash", "Gemini 2.5 Flash"), model("gemini-2.5-pro", "Gemini 2.5 Pro")] }),
    )
}

/// The fields of `BatchEmbedContentsRequest` and of each `EmbedContentRequest` in it.
const BATCH_FIELDS: &[&str] = &["requests"];
const EMBED_REQUEST_FIELDS: &[&str] =
    &["model", "content", "taskType", "title", "outputDimensionality", "embedContentConfig"];

/// The most requests one batch may carry.
const MAX_BATCH: usize = 100;

fn unknown_name(prefix: &str, object: &Map<String, Value>, known: &[&str]) -> Result<(), Rendered> {
    match object.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => Err(bad(format!("Invalid JSON payload received. Unknown name \"{k}\"{prefix}: Cannot find field."))),
        None => Ok(()),
    }
}

/// The text a request embeds: its text parts, joined by newlines.
fn embed_text(request: &Value) -> String {
    let parts = request["content"]["parts"].as_array().map(Vec::as_slice).unwrap_or_default();
    parts.iter().filter_map(|p| p["text"].as_str()).collect::<Vec<_>>().join("\n")
}

pub(crate) fn validate_embed(ctx: &Ctx<'_>) -> Result<(), Rendered> {
    require_key(ctx)?;
    let Some(body) = ctx.body.as_object() else {
        return Err(bad("Invalid JSON payload received. Expected an object."));
    };
    unknown_name("", body, BATCH_FIELDS)?;
    let requests = match body.get("requests").and_then(Value::as_array) {
        Some(r) if !r.is_empty() => r,
        _ => return Err(bad("* BatchEmbedContentsRequest.requests: requests is not specified")),
    };
    if requests.len() > MAX_BATCH {
        return Err(bad(format!(
            "* BatchEmbedContentsRequest.requests: at most {MAX_BATCH} requests can be in one batch (got {})",
            requests.len()
        )));
    }
    let expected = format!("models/{}", ctx.model);
    for (i, request) in requests.iter().enumerate() {
        let field = format!("requests[{i}]");
        let Some(object) = request.as_object() else {
            return Err(bad(format!("Invalid value at '{field}': expected an EmbedContentRequest object")));
        };
        unknown_name(&format!(" at '{field}'"), object, EMBED_REQUEST_FIELDS)?;
        match object.get("model").and_then(Value::as_str) {
            None => {
                return Err(bad_field(
                    &format!("{field}.model"),
                    format!("* BatchEmbedContentsRequest.{field}.model: model is not specified"),
                ));
            }
            Some(model) if model != expected => {
                return Err(bad_field(
                    &format!("{field}.model"),
                    format!(
                        "* BatchEmbedContentsRequest.{field}.model: the model {model:?} of a request must be the batch's model {expected:?}"
                    ),
                ));
            }
            Some(_) => {}
        }
        let parts = match request["content"]["parts"].as_array() {
            Some(p) if !p.is_empty() => p,
            _ => {
                return Err(bad(format!(
                    "* BatchEmbedContentsRequest.{field}.content.parts: contents.parts must not be empty."
                )));
            }
        };
        for (j, part) in parts.iter().enumerate() {
            if part["text"].as_str().is_none_or(str::is_empty) {
                return Err(bad(format!(
                    "* BatchEmbedContentsRequest.{field}.content.parts[{j}].data: required oneof field 'data' must have one initialized field"
                )));
            }
        }
        requested_dims(request, "outputDimensionality")
            .map_err(|m| bad(format!("* BatchEmbedContentsRequest.{field}.{m}")))?;
    }
    Ok(())
}

pub(crate) fn embed_answer(ctx: &Ctx<'_>) -> Rendered {
    let requests = ctx.body["requests"].as_array().map(Vec::as_slice).unwrap_or_default();
    let embeddings: Vec<Value> = requests
        .iter()
        .map(|request| {
            let dims = requested_dims(request, "outputDimensionality").ok().flatten().unwrap_or(EMBEDDING_DIMS);
            json!({ "values": embedding(&embed_text(request), dims) })
        })
        .collect();
    Rendered::json(200, &json!({ "embeddings": embeddings }))
}
