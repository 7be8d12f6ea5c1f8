//! OpenAI-compatible chat completions: answers, streams, quirks, faults and strict checks.

use std::collections::BTreeMap;

use cks_testkit::{Provider, ProviderServer, Reply, ToolCall};
use serde_json::{Value, json};

use crate::{Got, parse_sse, post, try_post};

const PATH: &str = "/v1/chat/completions";
const AUTH: &[(&str, &str)] = &[("authorization", "Bearer test-key")];

fn request(stream: bool) -> Value {
    let mut body = crate::fixture("openai_request_turn1");
    body["stream"] = json!(stream);
    body
}

async fn call(server: &ProviderServer, stream: bool) -> Got {
    post(server, PATH, AUTH, &request(stream)).await
}

/// Rebuilds the streamed tool calls: index -> (id, name, concatenated arguments, fragment count).
fn rebuild_calls(chunks: &[Value]) -> BTreeMap<u64, (String, String, String, usize)> {
    let mut calls: BTreeMap<u64, (String, String, String, usize)> = BTreeMap::new();
    for c in chunks {
        for tc in c["choices"][0]["delta"]["tool_calls"].as_array().into_iter().flatten() {
            let entry = calls.entry(tc["index"].as_u64().expect("index on every delta")).or_default();
            if let Some(id) = tc["id"].as_str() {
                entry.0 = id.to_owned();
            }
            if let Some(n) = tc["function"]["name"].as_str() {
                entry.1 = n.to_owned();
            }
            if let Some(a) = tc["function"]["arguments"].as_str()
                && !a.is_empty()
            {
                entry.2.push_str(a);
                entry.3 += 1;
            }
        }
    }
    calls
}

#[tokio::test]
async fn text_answer_on_both_paths() {
    let server = ProviderServer::start().await;
    server.push_all([Reply::text("It is 4 C.").with_usage(102, 12), Reply::text("again")]);
    let got = call(&server, false).await;
    assert_eq!(got.status, 200);
    let v = got.json();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "gpt-4o-mini");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["choices"][0]["message"]["content"], "It is 4 C.");
    assert!(v["choices"][0]["message"].get("tool_calls").is_none());
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(v["usage"], json!({ "prompt_tokens": 102, "completion_tokens": 12, "total_tokens": 114 }));

    let got = post(&server, "/chat/completions", AUTH, &request(false)).await;
    assert_eq!(got.json()["choices"][0]["message"]["content"], "again");
    let paths: Vec<String> = server.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(paths, ["/v1/chat/completions", "/chat/completions"]);
}

#[tokio::test]
async fn tool_calls_have_ids_and_string_arguments() {
    let server = ProviderServer::start().await;
    server.push(Reply::ToolCalls(vec![
        ToolCall::new("get_weather", json!({ "city": "Oslo" })),
        ToolCall::with_id("call_fixed", "get_weather", json!({ "city": "Bergen" })),
    ]));
    let v = call(&server, false).await.json();
    let choice = &v["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert_eq!(choice["message"]["content"], Value::Null);
    let calls = choice["message"]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2);
    let id0 = calls[0]["id"].as_str().unwrap();
    assert!(id0.starts_with("call_") && id0.len() > 5);
    assert_eq!(calls[1]["id"], "call_fixed");
    assert_eq!(calls[0]["type"], "function");
    assert_eq!(calls[0]["function"]["name"], "get_weather");
    let args = calls[0]["function"]["arguments"].as_str().expect("arguments is a JSON string");
    assert_eq!(serde_json::from_str::<Value>(args).unwrap(), json!({ "city": "Oslo" }));
}

#[tokio::test]
async fn stream_has_indexed_deltas_usage_and_done() {
    let server = ProviderServer::start().await;
    server.push(
        Reply::TextAndToolCalls(
            "Checking.".into(),
            vec![
                ToolCall::new("get_weather", json!({ "city": "Oslo" })),
                ToolCall::new("get_time", json!({ "tz": "Europe/Oslo" })),
            ],
        )
        .with_usage(71, 16),
    );
    let mut body = request(true);
    body["stream_options"] = json!({ "include_usage": true });
    let got = post(&server, PATH, AUTH, &body).await;
    assert_eq!(got.status, 200);
    assert!(got.header("content-type").unwrap().starts_with("text/event-stream"));
    let events = parse_sse(&got.text);
    assert!(events.iter().all(|e| e.event.is_none()), "no event names");
    assert_eq!(events.last().unwrap().data, "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|e| e.json()).collect();
    assert!(chunks.iter().all(|c| c["object"] == "chat.completion.chunk"));
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");

    let text: String =
        chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect::<Vec<_>>().concat();
    assert_eq!(text, "Checking.");

    let calls = rebuild_calls(&chunks);
    assert_eq!(calls.len(), 2);
    let (id0, name0, args0, frags0) = &calls[&0];
    assert!(id0.starts_with("call_"));
    assert_eq!(name0, "get_weather");
    assert!(*frags0 >= 2, "arguments split across chunks");
    assert_eq!(serde_json::from_str::<Value>(args0).unwrap(), json!({ "city": "Oslo" }));
    assert_eq!(serde_json::from_str::<Value>(&calls[&1].2).unwrap(), json!({ "tz": "Europe/Oslo" }));
    assert_ne!(calls[&0].0, calls[&1].0);

    let finish: Vec<&str> = chunks.iter().filter_map(|c| c["choices"][0]["finish_reason"].as_str()).collect();
    assert_eq!(finish, ["tool_calls"]);
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"], json!([]));
    assert_eq!(last["usage"]["total_tokens"], 87);
}

#[tokio::test]
async fn stream_without_include_usage_has_no_usage_chunk() {
    let server = ProviderServer::start().await;
    server.push(Reply::text("hi"));
    let events = parse_sse(&call(&server, true).await.text);
    assert_eq!(events.last().unwrap().data, "[DONE]");
    assert!(events[..events.len() - 1].iter().all(|e| e.json().get("usage").is_none()));
}

#[tokio::test]
async fn quirk_mode_sends_object_arguments_and_empty_ids() {
    let server = ProviderServer::start().await;
    server.openai_quirks(true);
    server.push_all([
        Reply::ToolCalls(vec![ToolCall::new("get_weather", json!({ "city": "Oslo" }))]),
        Reply::ToolCalls(vec![ToolCall::new("get_weather", json!({ "city": "Oslo" }))]),
    ]);
    let v = call(&server, false).await.json();
    let tc = &v["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(tc["id"], "");
    assert_eq!(tc["function"]["arguments"], json!({ "city": "Oslo" }));

    let got = call(&server, true).await;
    assert!(got.text.starts_with(": "), "an SSE comment line first: {}", got.text);
    let events = parse_sse(&got.text);
    let tc = events.iter().find_map(|e| {
        let v: Value = serde_json::from_str(&e.data).ok()?;
        v["choices"][0]["delta"]["tool_calls"].get(0).cloned()
    });
    let tc = tc.unwrap();
    assert_eq!(tc["id"], "");
    assert_eq!(tc["function"]["arguments"], json!({ "city": "Oslo" }));

    server.openai_quirks(false);
    server.push(Reply::ToolCalls(vec![ToolCall::new("f", json!({}))]));
    let v = call(&server, false).await.json();
    assert!(v["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"].is_string());
}

#[tokio::test]
async fn faults_in_openai_shape() {
    let server = ProviderServer::start().await;
    server.push_all([
        Reply::RateLimited { retry_after_secs: Some(2) },
        Reply::Overloaded,
        Reply::ServerError,
        Reply::Garbage,
        Reply::Truncated,
        Reply::DropConnection,
    ]);
    let got = call(&server, false).await;
    assert_eq!(got.status, 429);
    assert_eq!(got.header("retry-after"), Some("2"));
    assert_eq!(got.header("x-ratelimit-remaining-requests"), Some("0"));
    let v = got.json();
    assert_eq!(v["error"]["code"], "rate_limit_exceeded");
    assert!(v["error"]["message"].is_string());
    assert!(v["error"].get("param").is_some());

    let got = call(&server, false).await;
    assert_eq!(got.status, 503);
    assert!(got.json()["error"]["message"].is_string());

    let got = call(&server, false).await;
    assert_eq!(got.status, 500);
    assert_eq!(got.json()["error"]["type"], "server_error");

    let got = call(&server, false).await;
    assert_eq!(got.status, 200);
    assert!(serde_json::from_str::<Value>(&got.text).is_err());

    let got = call(&server, false).await;
    assert_eq!(got.status, 200);
    assert!(got.text.starts_with("{\"") && serde_json::from_str::<Value>(&got.text).is_err());

    assert!(try_post(&server, PATH, AUTH, &request(false)).await.is_err());
}

#[tokio::test]
async fn error_mid_stream_is_a_data_error_without_done() {
    let server = ProviderServer::start().await;
    server.push_all([Reply::ErrorMidStream, Reply::ErrorMidStream]);
    let got = call(&server, true).await;
    assert_eq!(got.status, 200);
    let events = parse_sse(&got.text);
    assert!(events.len() >= 2);
    assert!(events.iter().all(|e| e.data != "[DONE]"));
    let text: String = events[..events.len() - 1]
        .iter()
        .filter_map(|e| e.json()["choices"][0]["delta"]["content"].as_str().map(str::to_owned))
        .collect();
    assert!(!text.is_empty(), "some content first");
    let last = events.last().unwrap().json();
    assert!(last["error"]["message"].is_string(), "{last}");

    let got = call(&server, false).await;
    assert_eq!(got.status, 200);
    assert!(got.json()["error"]["message"].is_string());
}

async fn rejected(server: &ProviderServer, body: &Value) -> String {
    let got = post(server, PATH, AUTH, body).await;
    assert_eq!(got.status, 400, "{}", got.text);
    let v = got.json();
    assert_eq!(v["error"]["type"], "invalid_request_error");
    v["error"]["message"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn strict_checks_on_tool_messages() {
    let server = ProviderServer::start().await;
    server.push(Reply::text("kept"));
    let turn2 = crate::fixture("openai_request_turn2");

    let mut b = turn2.clone();
    b["messages"][2].as_object_mut().unwrap().remove("tool_call_id");
    assert!(rejected(&server, &b).await.contains("tool_call_id"));

    let mut b = turn2.clone();
    b["messages"][2]["tool_call_id"] = json!("call_unknown");
    assert!(rejected(&server, &b).await.contains("call_unknown"));

    // A tool message with no assistant tool_calls before it.
    let mut b = turn2.clone();
    b["messages"].as_array_mut().unwrap().remove(1);
    assert!(rejected(&server, &b).await.contains("role 'tool'"));

    // An assistant tool call that nobody answers.
    let mut b = turn2.clone();
    b["messages"][2] = json!({ "role": "user", "content": "never mind" });
    assert!(rejected(&server, &b).await.contains("call_Qm3xT7pLk2Vn8Rw1"));

    // Arguments sent back as an object.
    let mut b = turn2.clone();
    b["messages"][1]["tool_calls"][0]["function"]["arguments"] = json!({ "city": "Oslo" });
    assert!(rejected(&server, &b).await.contains("expected a string"));

    let mut b = turn2.clone();
    b.as_object_mut().unwrap().remove("messages");
    rejected(&server, &b).await;
    let mut b = turn2.clone();
    b.as_object_mut().unwrap().remove("model");
    rejected(&server, &b).await;

    assert_eq!(server.pending(), 1);
    let got = post(&server, PATH, AUTH, &turn2).await;
    assert_eq!(got.status, 200, "{}", got.text);
    assert_eq!(got.json()["choices"][0]["message"]["content"], "kept");
    assert!(server.requests().iter().all(|r| r.provider == Some(Provider::OpenAi)));
}

#[tokio::test]
async fn string_arguments_are_sent_verbatim_to_script_malformed_json() {
    let server = ProviderServer::start().await;
    let broken = || Reply::ToolCalls(vec![ToolCall::new("get_weather", json!("{\"city\": \"Os"))]);
    server.push_all([broken(), broken()]);
    let v = call(&server, false).await.json();
    assert_eq!(v["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"], "{\"city\": \"Os");

    let events = parse_sse(&call(&server, true).await.text);
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|e| e.json()).collect();
    assert_eq!(rebuild_calls(&chunks)[&0].2, "{\"city\": \"Os");
}

#[tokio::test]
async fn response_format_is_checked_and_a_json_reply_is_the_content() {
    let server = ProviderServer::start().await;
    let value = json!({ "city": "Oslo", "temp": 4 });
    server.push(Reply::Json(value.clone()));
    let format = json!({ "type": "json_schema",
                         "json_schema": { "name": "weather", "schema": { "type": "object" }, "strict": false } });
    let with = |format: Value| {
        let mut b = request(false);
        b["response_format"] = format;
        b
    };
    let mut f = format.clone();
    f["type"] = json!("json");
    assert!(rejected(&server, &with(f)).await.contains("'json_schema'"));
    let mut f = format.clone();
    f.as_object_mut().unwrap().remove("json_schema");
    assert!(rejected(&server, &with(f)).await.contains("response_format.json_schema"));
    let mut f = format.clone();
    f["json_schema"]["name"] = json!("the weather");
    assert!(rejected(&server, &with(f)).await.contains("name"));
    let mut f = format.clone();
    f["json_schema"]["schema"] = json!("object");
    assert!(rejected(&server, &with(f)).await.contains("expected an object"));
    let mut f = format.clone();
    f["json_schema"]["strict"] = json!("no");
    assert!(rejected(&server, &with(f)).await.contains("strict"));
    assert_eq!(server.pending(), 1);

    let got = post(&server, PATH, AUTH, &with(format)).await;
    assert_eq!(got.status, 200, "{}", got.text);
    let content = got.json()["choices"][0]["message"]["content"].as_str().unwrap().to_owned();
    assert_eq!(serde_json::from_str::<Value>(&content).unwrap(), value);
}
