//! Gemini generateContent / streamGenerateContent: answers, thought signatures, streams, faults and strict checks.

use cks_testkit::{Provider, ProviderServer, Reply, ToolCall};
use serde_json::{Value, json};

use crate::{Got, parse_sse, post, try_post};

const PATH: &str = "/v1beta/models/gemini-2.5-flash:generateContent";
const STREAM_PATH: &str = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse";
const AUTH: &[(&str, &str)] = &[("x-goog-api-key", "test-key")];

async fn call(server: &ProviderServer, path: &str) -> Got {
    post(server, path, AUTH, &crate::fixture("gemini_request_turn1")).await
}

fn parts(v: &Value) -> Vec<Value> {
    v["candidates"][0]["content"]["parts"].as_array().unwrap().clone()
}

#[tokio::test]
async fn text_answer_with_and_without_v1beta_prefix() {
    let server = ProviderServer::start().await;
    server.push_all([Reply::text("It is 4 C.").with_usage(96, 12), Reply::text("bare")]);
    let got = call(&server, PATH).await;
    assert_eq!(got.status, 200);
    let v = got.json();
    assert_eq!(v["candidates"][0]["content"]["role"], "model");
    assert_eq!(parts(&v), [json!({ "text": "It is 4 C." })]);
    assert_eq!(v["candidates"][0]["finishReason"], "STOP");
    assert_eq!(v["usageMetadata"]["promptTokenCount"], 96);
    assert_eq!(v["usageMetadata"]["candidatesTokenCount"], 12);
    assert_eq!(v["usageMetadata"]["totalTokenCount"], 108);
    assert_eq!(v["modelVersion"], "gemini-2.5-flash");

    let got = call(&server, "/models/gemini-2.5-pro:generateContent").await;
    assert_eq!(parts(&got.json()), [json!({ "text": "bare" })]);
    assert_eq!(got.json()["modelVersion"], "gemini-2.5-pro");
}

#[tokio::test]
async fn function_calls_signature_on_first_part_only() {
    let server = ProviderServer::start().await;
    server.push(Reply::TextAndToolCalls(
        "Checking.".into(),
        vec![
            ToolCall::new("get_weather", json!({ "city": "Oslo" })),
            ToolCall::with_id("fc-2", "get_weather", json!({ "city": "Bergen" })),
        ],
    ));
    let v = call(&server, PATH).await.json();
    assert_eq!(v["candidates"][0]["finishReason"], "STOP", "STOP even with tool calls");
    let p = parts(&v);
    assert_eq!(p.len(), 3);
    assert_eq!(p[0], json!({ "text": "Checking." }));
    assert_eq!(p[1]["functionCall"], json!({ "name": "get_weather", "args": { "city": "Oslo" } }), "no id");
    assert!(p[1]["thoughtSignature"].as_str().is_some_and(|s| !s.is_empty()));
    assert_eq!(p[2]["functionCall"]["id"], "fc-2");
    assert!(p[2].get("thoughtSignature").is_none());
}

#[tokio::test]
async fn sse_stream_uses_crlf_and_no_done() {
    let server = ProviderServer::start().await;
    server.push(
        Reply::TextAndToolCalls("Let me see.".into(), vec![ToolCall::new("get_weather", json!({ "city": "Oslo" }))])
            .with_usage(58, 15),
    );
    let got = call(&server, STREAM_PATH).await;
    assert_eq!(got.status, 200);
    assert!(got.header("content-type").unwrap().starts_with("text/event-stream"));
    assert!(got.text.contains("\r\n\r\n"));
    assert!(!got.text.replace("\r\n", "").contains('\n'), "only CRLF line endings");
    assert!(!got.text.contains("[DONE]"));
    let chunks: Vec<Value> = parse_sse(&got.text).iter().map(|e| e.json()).collect();
    assert!(chunks.len() >= 3);
    let all_parts: Vec<Value> = chunks.iter().flat_map(parts).collect();
    let text: String = all_parts.iter().filter_map(|p| p["text"].as_str()).collect();
    assert_eq!(text, "Let me see.");
    let calls: Vec<&Value> = all_parts.iter().filter(|p| p.get("functionCall").is_some()).collect();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["functionCall"]["args"], json!({ "city": "Oslo" }));
    assert!(calls[0]["thoughtSignature"].is_string());
    let last = chunks.last().unwrap();
    assert_eq!(last["candidates"][0]["finishReason"], "STOP");
    assert_eq!(last["usageMetadata"]["totalTokenCount"], 73);
    assert!(chunks[..chunks.len() - 1].iter().all(|c| c["candidates"][0].get("finishReason").is_none()));
}

#[tokio::test]
async fn stream_without_alt_sse_is_a_json_array() {
    let server = ProviderServer::start().await;
    server.push(Reply::text("array"));
    let got = call(&server, "/v1beta/models/gemini-2.5-flash:streamGenerateContent").await;
    let v = got.json();
    let arr = v.as_array().expect("a JSON array");
    let text: String = arr.iter().flat_map(parts).filter_map(|p| p["text"].as_str().map(str::to_owned)).collect();
    assert_eq!(text, "array");
    assert_eq!(arr.last().unwrap()["candidates"][0]["finishReason"], "STOP");
}

#[tokio::test]
async fn faults_in_google_rpc_shape() {
    let server = ProviderServer::start().await;
    server.push_all([
        Reply::RateLimited { retry_after_secs: Some(47) },
        Reply::RateLimited { retry_after_secs: None },
        Reply::Overloaded,
        Reply::ServerError,
        Reply::Garbage,
        Reply::Truncated,
        Reply::DropConnection,
    ]);
    let got = call(&server, PATH).await;
    assert_eq!(got.status, 429);
    assert_eq!(got.header("retry-after"), Some("47"));
    let e = &got.json()["error"];
    assert_eq!(e["code"], 429);
    assert_eq!(e["status"], "RESOURCE_EXHAUSTED");
    let retry =
        e["details"].as_array().unwrap().iter().find(|d| d["@type"] == "type.googleapis.com/google.rpc.RetryInfo");
    assert_eq!(retry.unwrap()["retryDelay"], "47s");

    let got = call(&server, PATH).await;
    assert_eq!(got.status, 429);
    assert_eq!(got.header("retry-after"), None);
    assert!(!got.text.contains("RetryInfo"));

    let got = call(&server, PATH).await;
    assert_eq!(got.status, 503);
    assert_eq!(got.json()["error"]["status"], "UNAVAILABLE");

    let got = call(&server, PATH).await;
    assert_eq!(got.status, 500);
    assert_eq!(got.json()["error"]["status"], "INTERNAL");

    let got = call(&server, PATH).await;
    assert_eq!(got.status, 200);
    assert!(serde_json::from_str::<Value>(&got.text).is_err());

    let got = call(&server, PATH).await;
    assert_eq!(got.status, 200);
    assert!(got.text.starts_with("{\"") && serde_json::from_str::<Value>(&got.text).is_err());

    assert!(try_post(&server, PATH, AUTH, &crate::fixture("gemini_request_turn1")).await.is_err());
}

#[tokio::test]
async fn error_mid_stream_sse_and_array() {
    let server = ProviderServer::start().await;
    server.push_all([Reply::ErrorMidStream, Reply::ErrorMidStream, Reply::ErrorMidStream]);
    let got = call(&server, STREAM_PATH).await;
    assert_eq!(got.status, 200);
    let chunks: Vec<Value> = parse_sse(&got.text).iter().map(|e| e.json()).collect();
    assert!(chunks.len() >= 2);
    assert!(chunks[0]["candidates"][0]["content"]["parts"][0]["text"].is_string(), "some content first");
    let last = chunks.last().unwrap();
    assert_eq!(last["error"]["status"], "UNAVAILABLE");
    assert_eq!(last["error"]["code"], 503);

    let got = call(&server, "/v1beta/models/gemini-2.5-flash:streamGenerateContent").await;
    let v = got.json();
    assert_eq!(v.as_array().unwrap().last().unwrap()["error"]["code"], 503);

    let got = call(&server, PATH).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.json()["error"]["status"], "UNAVAILABLE");
}

async fn rejected(server: &ProviderServer, body: &Value) -> String {
    let got = post(server, PATH, AUTH, body).await;
    assert_eq!(got.status, 400, "{}", got.text);
    let e = &got.json()["error"];
    assert_eq!(e["code"], 400);
    assert_eq!(e["status"], "INVALID_ARGUMENT");
    e["message"].as_str().unwrap().to_owned()
}

fn with_params(params: Value) -> Value {
    let mut b = crate::fixture("gemini_request_turn1");
    b["tools"][0]["functionDeclarations"][0]["parameters"] = params;
    b
}

#[tokio::test]
async fn schema_keywords_gemini_rejects() {
    let server = ProviderServer::start().await;
    server.push(Reply::text("kept"));
    let city = json!({ "type": "string" });
    for (kw, params) in [
        (
            "additionalProperties",
            json!({ "type": "object", "properties": { "city": city }, "additionalProperties": false }),
        ),
        ("$schema", json!({ "$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object" })),
        ("$ref", json!({ "type": "object", "properties": { "c": { "$ref": "#/$defs/c" } } })),
        (
            "additionalProperties",
            json!({ "type": "object", "properties": { "l": { "type": "array", "items": { "type": "object", "additionalProperties": {} } } } }),
        ),
        ("const", json!({ "type": "object", "properties": { "c": { "anyOf": [{ "const": "x" }] } } })),
        ("oneOf", json!({ "type": "object", "oneOf": [] })),
    ] {
        let msg = rejected(&server, &with_params(params)).await;
        assert!(msg.contains(&format!("Unknown name \"{kw}\"")) && msg.contains("Cannot find field"), "{msg}");
    }
    let msg = rejected(
        &server,
        &with_params(json!({ "type": "object", "properties": { "c": { "type": ["string", "null"] } } })),
    )
    .await;
    assert!(msg.contains("cannot start list"), "{msg}");
    let msg =
        rejected(&server, &with_params(json!({ "type": "object", "properties": { "l": { "type": "array" } } }))).await;
    assert!(msg.contains("items"), "{msg}");
    let mut b = crate::fixture("gemini_request_turn1");
    b["tools"][0]["functionDeclarations"][0]["name"] = json!("get weather!");
    assert!(rejected(&server, &b).await.contains("Invalid function name"));

    // Property *names* are not keywords, and the accepted keywords pass.
    let ok = with_params(json!({
        "type": "object", "nullable": false, "required": ["additionalProperties"],
        "properties": { "additionalProperties": { "type": "string", "enum": ["a"], "description": "d" },
                        "n": { "type": "integer", "minimum": 0, "maximum": 9 },
                        "l": { "type": "array", "items": { "type": "string" }, "minItems": 1 } }
    }));
    assert_eq!(server.pending(), 1);
    let got = post(&server, PATH, AUTH, &ok).await;
    assert_eq!(got.status, 200, "{}", got.text);
}

#[tokio::test]
async fn thought_signatures_must_come_back_on_their_part() {
    let server = ProviderServer::start().await;
    server.push_all([
        Reply::ToolCalls(vec![
            ToolCall::new("get_weather", json!({ "city": "Oslo" })),
            ToolCall::new("get_weather", json!({ "city": "Bergen" })),
        ]),
        Reply::text("done"),
    ]);
    let answer = call(&server, PATH).await.json();
    let model_content = answer["candidates"][0]["content"].clone();
    let turn2 = |model: Value| {
        let mut b = crate::fixture("gemini_request_turn2");
        b["contents"][1] = model;
        b["contents"][2]["parts"] = json!([
            { "functionResponse": { "name": "get_weather", "response": { "result": "4 C" } } },
            { "functionResponse": { "name": "get_weather", "response": { "result": "6 C" } } }
        ]);
        b
    };

    // Signature dropped.
    let mut stripped = model_content.clone();
    stripped["parts"][0].as_object_mut().unwrap().remove("thoughtSignature");
    let msg = rejected(&server, &turn2(stripped)).await;
    assert!(msg.contains("missing a thought_signature") && msg.contains("get_weather"), "{msg}");

    // Signature moved to the second call.
    let mut moved = model_content.clone();
    let sig = moved["parts"][0].as_object_mut().unwrap().remove("thoughtSignature").unwrap();
    moved["parts"][1]["thoughtSignature"] = sig.clone();
    rejected(&server, &turn2(moved)).await;

    // Calls split into separate model contents: the second loses its place.
    let mut split = turn2(model_content.clone());
    let second = json!({ "role": "model", "parts": [model_content["parts"][1].clone()] });
    split["contents"][1]["parts"].as_array_mut().unwrap().truncate(1);
    split["contents"].as_array_mut().unwrap().insert(2, second);
    rejected(&server, &split).await;

    // Too few function responses.
    let mut short = turn2(model_content.clone());
    short["contents"][2]["parts"].as_array_mut().unwrap().pop();
    assert!(rejected(&server, &short).await.contains("number of function response parts"));

    // Unchanged: accepted.
    let got = post(&server, PATH, AUTH, &turn2(model_content)).await;
    assert_eq!(got.status, 200, "{}", got.text);
    assert_eq!(parts(&got.json()), [json!({ "text": "done" })]);
}

#[tokio::test]
async fn function_response_must_be_an_object_and_key_is_required() {
    let server = ProviderServer::start().await;
    server.push(Reply::text("kept"));
    let mut b = crate::fixture("gemini_request_turn2");
    b["contents"][2]["parts"][0]["functionResponse"]["response"] = json!("4 C, light snow");
    assert!(rejected(&server, &b).await.contains("function_response.response"));
    b["contents"][2]["parts"][0]["functionResponse"]["response"] = json!(["4 C"]);
    assert!(rejected(&server, &b).await.contains("cannot start list"));

    let got = post(&server, PATH, &[], &crate::fixture("gemini_request_turn1")).await;
    assert_eq!(got.status, 403);
    assert_eq!(got.json()["error"]["status"], "PERMISSION_DENIED");
    // `?key=` works instead of the header.
    let got = post(&server, &format!("{PATH}?key=k"), &[], &crate::fixture("gemini_request_turn2")).await;
    assert_eq!(got.status, 200, "{}", got.text);
    assert_eq!(parts(&got.json()), [json!({ "text": "kept" })]);
    let reqs = server.requests();
    assert!(reqs.iter().all(|r| r.provider == Some(Provider::Gemini)));
    assert_eq!(reqs.last().unwrap().query.as_deref(), Some("key=k"));
}

fn with_output(config: Value) -> Value {
    let mut b = crate::fixture("gemini_request_turn1");
    b.as_object_mut().unwrap().remove("tools");
    b.as_object_mut().unwrap().remove("toolConfig");
    b["generationConfig"] = config;
    b
}

#[tokio::test]
async fn output_schemas_need_the_json_mime_type_and_supported_keywords() {
    let server = ProviderServer::start().await;
    let value = json!({ "city": "Oslo" });
    server.push(Reply::Json(value.clone()));
    let schema = json!({ "type": "object", "properties": { "city": { "type": "string" } }, "required": ["city"],
                         "additionalProperties": false });
    let json_mime = |key: &str, schema: Value| json!({ "responseMimeType": "application/json", key: schema });

    let msg = rejected(&server, &with_output(json!({ "responseJsonSchema": schema }))).await;
    assert!(msg.contains("response_mime_type"), "{msg}");
    let mut both = json_mime("responseJsonSchema", schema.clone());
    both["responseSchema"] = json!({ "type": "OBJECT" });
    assert!(rejected(&server, &with_output(both)).await.contains("response_schema must be omitted"));
    // responseSchema is Google's Schema: additionalProperties is no field of it.
    let msg = rejected(&server, &with_output(json_mime("responseSchema", schema.clone()))).await;
    assert!(msg.contains("Unknown name \"additionalProperties\""), "{msg}");
    for (kw, bad) in [
        ("$schema", json!({ "$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object" })),
        ("const", json!({ "type": "object", "properties": { "c": { "const": "x" } } })),
        ("pattern", json!({ "type": "array", "items": { "type": "string", "pattern": "^a" } })),
        ("description", json!({ "anyOf": [{ "$ref": "#/$defs/a", "description": "d" }], "$defs": { "a": {} } })),
    ] {
        let msg = rejected(&server, &with_output(json_mime("responseJsonSchema", bad))).await;
        assert!(msg.contains(&format!("\"{kw}\"")), "{kw}: {msg}");
    }
    assert_eq!(server.pending(), 1);

    // Property names are no keywords; the documented keywords pass.
    let ok = json!({ "type": "object", "$defs": { "d": { "type": "integer", "minimum": 0 } },
                     "properties": { "pattern": { "$ref": "#/$defs/d" }, "city": { "type": ["string", "null"] },
                                     "l": { "type": "array", "prefixItems": [true], "items": { "enum": [1, 2] } } },
                     "additionalProperties": { "type": "string" }, "required": ["city"] });
    let got = post(&server, PATH, AUTH, &with_output(json_mime("responseJsonSchema", ok))).await;
    assert_eq!(got.status, 200, "{}", got.text);
    let text = parts(&got.json())[0]["text"].as_str().unwrap().to_owned();
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), value);
}
