//! Anthropic Messages endpoint: answers, streams, faults and strict checks.

use std::time::Duration;

use cks_testkit::{Provider, ProviderServer, Reply, ToolCall};
use serde_json::{Value, json};

use crate::{Got, parse_sse, post, try_post};

const PATH: &str = "/v1/messages";
const AUTH: &[(&str, &str)] = &[("x-api-key", "test-key"), ("anthropic-version", "2023-06-01")];

fn request(stream: bool) -> Value {
    let mut body = crate::fixture("anthropic_request_turn1");
    if stream {
        body["stream"] = json!(true);
    }
    body
}

async fn call(server: &ProviderServer, stream: bool) -> Got {
    post(server, PATH, AUTH, &request(stream)).await
}

#[tokio::test]
async fn text_answer_with_usage() {
    let server = ProviderServer::start().await;
    server.push(Reply::text("It is 4 C with light snow in Oslo.").with_usage(498, 17));
    let got = call(&server, false).await;
    assert_eq!(got.status, 200);
    assert!(got.header("request-id").is_some_and(|v| v.starts_with("req_")));
    let v = got.json();
    assert_eq!(v["type"], "message");
    assert_eq!(v["role"], "assistant");
    assert_eq!(v["model"], "claude-sonnet-4-5");
    assert!(v["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(v["content"], json!([{ "type": "text", "text": "It is 4 C with light snow in Oslo." }]));
    assert_eq!(v["stop_reason"], "end_turn");
    assert_eq!(v["stop_sequence"], Value::Null);
    assert_eq!(v["usage"], json!({ "input_tokens": 498, "output_tokens": 17 }));
}

#[tokio::test]
async fn tool_calls_get_ids_and_stop_reason_tool_use() {
    let server = ProviderServer::start().await;
    server.push(Reply::TextAndToolCalls(
        "Let me check.".into(),
        vec![
            ToolCall::new("get_weather", json!({ "city": "Oslo" })),
            ToolCall::new("get_weather", json!({ "city": "Bergen" })),
            ToolCall::with_id("toolu_fixed", "get_time", json!({})),
        ],
    ));
    let v = call(&server, false).await.json();
    assert_eq!(v["stop_reason"], "tool_use");
    let content = v["content"].as_array().unwrap();
    assert_eq!(content.len(), 4);
    assert_eq!(content[0], json!({ "type": "text", "text": "Let me check." }));
    let ids: Vec<&str> = content[1..].iter().map(|b| b["id"].as_str().unwrap()).collect();
    assert!(ids[0].starts_with("toolu_") && ids[1].starts_with("toolu_"));
    assert_ne!(ids[0], ids[1]);
    assert_eq!(ids[2], "toolu_fixed");
    assert_eq!(content[1]["type"], "tool_use");
    assert_eq!(content[1]["name"], "get_weather");
    assert_eq!(content[1]["input"], json!({ "city": "Oslo" }));
    assert_eq!(content[2]["input"], json!({ "city": "Bergen" }));
    assert_eq!(content[3]["input"], json!({}));
}

#[tokio::test]
async fn stream_matches_fixture_event_sequence_and_rebuilds_input() {
    let server = ProviderServer::start().await;
    server.push(
        Reply::TextAndToolCalls(
            "Let me check that for you.".into(),
            vec![ToolCall::new("get_weather", json!({ "city": "Oslo" }))],
        )
        .with_usage(412, 58),
    );
    let got = call(&server, true).await;
    assert_eq!(got.status, 200);
    assert!(got.header("content-type").unwrap().starts_with("text/event-stream"));
    let events = parse_sse(&got.text);
    // Every event's data is JSON whose `type` is the event name.
    for e in &events {
        assert_eq!(e.json()["type"].as_str(), e.event.as_deref(), "{e:?}");
    }
    let names: Vec<String> = events.iter().map(|e| e.event.clone().unwrap()).collect();
    let fixture_names: Vec<String> = parse_sse(include_str!("../data/anthropic_stream_tool_use.sse"))
        .into_iter()
        .map(|e| e.event.unwrap())
        .collect();
    // Same layout as the fixture, apart from how many deltas carry the pieces.
    let dedup = |v: &[String]| {
        let mut v = v.to_vec();
        v.dedup();
        v
    };
    assert_eq!(dedup(&names), dedup(&fixture_names));

    let start = events[0].json();
    assert_eq!(start["message"]["content"], json!([]));
    assert_eq!(start["message"]["usage"]["input_tokens"], 412);

    let mut text = String::new();
    let mut partial = String::new();
    let mut fragments = 0;
    let mut tool_start = None;
    for e in events.iter().map(|e| e.json()) {
        match (e["type"].as_str().unwrap(), e["delta"]["type"].as_str()) {
            ("content_block_delta", Some("text_delta")) => text.push_str(e["delta"]["text"].as_str().unwrap()),
            ("content_block_delta", Some("input_json_delta")) => {
                assert_eq!(e["index"], 1);
                let piece = e["delta"]["partial_json"].as_str().unwrap();
                if !piece.is_empty() {
                    fragments += 1;
                }
                partial.push_str(piece);
            }
            ("content_block_start", _) if e["content_block"]["type"] == "tool_use" => {
                tool_start = Some(e["content_block"].clone())
            }
            _ => {}
        }
    }
    assert_eq!(text, "Let me check that for you.");
    assert!(fragments >= 2, "the input is split over several fragments");
    assert_eq!(serde_json::from_str::<Value>(&partial).unwrap(), json!({ "city": "Oslo" }));
    let tool_start = tool_start.unwrap();
    assert!(tool_start["id"].as_str().unwrap().starts_with("toolu_"));
    assert_eq!(tool_start["input"], json!({}));
    let delta = events.iter().find(|e| e.event.as_deref() == Some("message_delta")).unwrap().json();
    assert_eq!(delta["delta"]["stop_reason"], "tool_use");
    assert_eq!(delta["usage"]["output_tokens"], 58);
}

#[tokio::test]
async fn faults_in_anthropic_shape() {
    let server = ProviderServer::start().await;
    server.push_all([
        Reply::RateLimited { retry_after_secs: Some(20) },
        Reply::RateLimited { retry_after_secs: None },
        Reply::Overloaded,
        Reply::ServerError,
    ]);
    let got = call(&server, false).await;
    assert_eq!(got.status, 429);
    assert_eq!(got.header("retry-after"), Some("20"));
    let v = got.json();
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "rate_limit_error");
    assert!(v["error"]["message"].is_string());

    let got = call(&server, false).await;
    assert_eq!(got.status, 429);
    assert_eq!(got.header("retry-after"), None);

    let got = call(&server, false).await;
    assert_eq!(got.status, 529);
    assert_eq!(got.json()["error"]["type"], "overloaded_error");

    let got = call(&server, false).await;
    assert_eq!(got.status, 500);
    assert_eq!(got.json()["error"]["type"], "api_error");
}

#[tokio::test]
async fn garbage_and_truncated_bodies_are_not_json() {
    let server = ProviderServer::start().await;
    server.push_all([Reply::Garbage, Reply::Truncated, Reply::Truncated]);
    let got = call(&server, false).await;
    assert_eq!(got.status, 200);
    assert!(serde_json::from_str::<Value>(&got.text).is_err());

    let got = call(&server, false).await;
    assert_eq!(got.status, 200);
    assert!(got.text.starts_with("{\""), "the start of a real answer: {}", got.text);
    assert!(serde_json::from_str::<Value>(&got.text).is_err());

    // Streaming: the stream is cut, so no message_stop arrives.
    let got = call(&server, true).await;
    assert_eq!(got.status, 200);
    assert!(got.text.contains("event: message_start"));
    assert!(!got.text.contains("message_stop"));
}

#[tokio::test]
async fn error_mid_stream_is_an_error_event_after_200() {
    let server = ProviderServer::start().await;
    server.push_all([Reply::ErrorMidStream, Reply::ErrorMidStream]);
    let got = call(&server, true).await;
    assert_eq!(got.status, 200);
    let events = parse_sse(&got.text);
    assert_eq!(events[0].event.as_deref(), Some("message_start"));
    assert!(events.iter().any(|e| e.event.as_deref() == Some("content_block_delta")), "some chunks first");
    let last = events.last().unwrap();
    assert_eq!(last.event.as_deref(), Some("error"));
    assert_eq!(
        last.json(),
        json!({ "type": "error", "error": { "type": "overloaded_error", "message": "Overloaded" } })
    );
    assert!(!events.iter().any(|e| e.event.as_deref() == Some("message_stop")));

    let got = call(&server, false).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.json()["type"], "error");
    assert_eq!(got.json()["error"]["type"], "overloaded_error");
}

#[tokio::test]
async fn dropped_connection_is_a_transport_error() {
    let server = ProviderServer::start().await;
    server.push_all([Reply::DropConnection, Reply::text("after")]);
    let err = try_post(&server, PATH, AUTH, &request(false)).await.expect_err("no response");
    assert!(!err.is_status() && !err.is_decode(), "{err:?}");
    // The server keeps serving.
    assert_eq!(call(&server, false).await.json()["content"][0]["text"], "after");
}

#[tokio::test]
async fn delay_holds_the_answer_back() {
    let server = ProviderServer::start().await;
    server.push(Reply::text("late").delayed(Duration::from_millis(300)));
    let t0 = std::time::Instant::now();
    let got = call(&server, false).await;
    assert!(t0.elapsed() >= Duration::from_millis(300));
    assert_eq!(got.json()["content"][0]["text"], "late");
}

/// Posts `body` with `headers` and expects the given status and `error.type`; returns the message.
async fn rejected(server: &ProviderServer, headers: &[(&str, &str)], body: &Value, status: u16, ty: &str) -> String {
    let got = post(server, PATH, headers, body).await;
    assert_eq!(got.status, status, "{}", got.text);
    let v = got.json();
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], ty);
    v["error"]["message"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn strict_checks_reject_bad_requests_without_consuming_the_script() {
    let server = ProviderServer::start().await;
    server.push(Reply::text("kept"));
    let ok = request(false);

    let msg = rejected(&server, &[("x-api-key", "k")], &ok, 400, "invalid_request_error").await;
    assert!(msg.contains("anthropic-version"), "{msg}");
    let msg = rejected(&server, &[("anthropic-version", "2023-06-01")], &ok, 401, "authentication_error").await;
    assert!(msg.contains("x-api-key"), "{msg}");

    let mut b = ok.clone();
    b.as_object_mut().unwrap().remove("max_tokens");
    assert!(rejected(&server, AUTH, &b, 400, "invalid_request_error").await.contains("max_tokens"));

    let mut b = ok.clone();
    b.as_object_mut().unwrap().remove("model");
    assert!(rejected(&server, AUTH, &b, 400, "invalid_request_error").await.contains("model"));

    let mut b = ok.clone();
    b["provider_options"] = json!({});
    let msg = rejected(&server, AUTH, &b, 400, "invalid_request_error").await;
    assert!(msg.contains("provider_options") && msg.contains("Extra inputs"), "{msg}");

    // A private bookkeeping key leaking into a content block.
    let mut b = crate::fixture("anthropic_request_turn2");
    b["messages"][1]["content"][1]["_cks_call_index"] = json!(0);
    let msg = rejected(&server, AUTH, &b, 400, "invalid_request_error").await;
    assert!(msg.contains("messages.1.content.1") && msg.contains("_cks_call_index"), "{msg}");

    // A tool_result answering an id that the previous assistant turn never used.
    let mut b = crate::fixture("anthropic_request_turn2");
    b["messages"][2]["content"][0]["tool_use_id"] = json!("toolu_other");
    let msg = rejected(&server, AUTH, &b, 400, "invalid_request_error").await;
    assert!(msg.contains("unexpected `tool_use_id`") && msg.contains("toolu_other"), "{msg}");

    // A tool_use left unanswered by the next message.
    let mut b = crate::fixture("anthropic_request_turn2");
    b["messages"][2]["content"] = json!("never mind");
    let msg = rejected(&server, AUTH, &b, 400, "invalid_request_error").await;
    assert!(msg.contains("without `tool_result`") && msg.contains("toolu_01XyZaBcDeFgHiJkLmNoPqRs"), "{msg}");

    // The answer is in the wrong message (not immediately after).
    let mut b = crate::fixture("anthropic_request_turn2");
    let results = b["messages"][2].clone();
    b["messages"][2] = json!({ "role": "user", "content": "wait" });
    b["messages"].as_array_mut().unwrap().extend([json!({ "role": "assistant", "content": "ok" }), results]);
    rejected(&server, AUTH, &b, 400, "invalid_request_error").await;

    // A system role in messages, an unknown block type.
    let mut b = ok.clone();
    b["messages"] = json!([{ "role": "system", "content": "x" }]);
    rejected(&server, AUTH, &b, 400, "invalid_request_error").await;
    let mut b = ok.clone();
    b["messages"] = json!([{ "role": "user", "content": [{ "type": "tool_call", "text": "x" }] }]);
    rejected(&server, AUTH, &b, 400, "invalid_request_error").await;

    assert_eq!(server.pending(), 1, "rejections leave the script alone");
    // The fixture's valid second turn passes and gets the scripted reply.
    let got = post(&server, PATH, AUTH, &crate::fixture("anthropic_request_turn2")).await;
    assert_eq!(got.status, 200, "{}", got.text);
    assert_eq!(got.json()["content"][0]["text"], "kept");
    assert!(server.requests().iter().all(|r| r.provider == Some(Provider::Anthropic)));
}

#[tokio::test]
async fn string_arguments_stream_verbatim_as_partial_json() {
    let server = ProviderServer::start().await;
    server.push(Reply::ToolCalls(vec![ToolCall::new("get_weather", json!("{\"city\": \"Os"))]));
    let events = parse_sse(&call(&server, true).await.text);
    let partial: String = events
        .iter()
        .map(|e| e.json())
        .filter(|e| e["delta"]["type"] == "input_json_delta")
        .map(|e| e["delta"]["partial_json"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(partial, "{\"city\": \"Os");
}

/// The fixture's first turn, its weather tool forced.
fn forcing(stream: bool) -> Value {
    let mut body = request(stream);
    body["tool_choice"] = json!({ "type": "tool", "name": "get_weather" });
    body
}

#[tokio::test]
async fn json_reply_answers_a_forced_tool_with_its_call() {
    let server = ProviderServer::start().await;
    let value = json!({ "city": "Oslo", "days": [1, 2] });
    server.push_all([Reply::Json(value.clone()), Reply::Json(value.clone()), Reply::Json(json!([1, 2]))]);
    let v = post(&server, PATH, AUTH, &forcing(false)).await.json();
    assert_eq!(v["stop_reason"], "tool_use");
    let content = v["content"].as_array().unwrap();
    assert_eq!(content.len(), 1, "a forced tool's call comes alone: {v}");
    assert_eq!(content[0]["type"], "tool_use");
    assert_eq!(content[0]["name"], "get_weather");
    assert_eq!(content[0]["input"], value);
    assert!(content[0]["id"].as_str().unwrap().starts_with("toolu_"));

    let events = parse_sse(&post(&server, PATH, AUTH, &forcing(true)).await.text);
    let start = events.iter().map(|e| e.json()).find(|e| e["type"] == "content_block_start").unwrap();
    assert_eq!(start["content_block"]["name"], "get_weather");
    let partial: String = events
        .iter()
        .map(|e| e.json())
        .filter(|e| e["delta"]["type"] == "input_json_delta")
        .map(|e| e["delta"]["partial_json"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(serde_json::from_str::<Value>(&partial).unwrap(), value);
    let delta = events.iter().map(|e| e.json()).find(|e| e["type"] == "message_delta").unwrap();
    assert_eq!(delta["delta"]["stop_reason"], "tool_use");

    // Without a forced tool the value is plain text.
    let v = call(&server, false).await.json();
    assert_eq!(v["content"], json!([{ "type": "text", "text": "[1,2]" }]));
    assert_eq!(v["stop_reason"], "end_turn");
}

#[tokio::test]
async fn tool_choice_must_name_an_offered_tool() {
    let server = ProviderServer::start().await;
    server.push(Reply::text("kept"));
    let mut b = forcing(false);
    b["tool_choice"]["name"] = json!("get_time");
    let msg = rejected(&server, AUTH, &b, 400, "invalid_request_error").await;
    assert!(msg.contains("get_time") && msg.contains("not found"), "{msg}");
    let mut b = forcing(false);
    b["tool_choice"].as_object_mut().unwrap().remove("name");
    assert!(rejected(&server, AUTH, &b, 400, "invalid_request_error").await.contains("name"));
    let mut b = forcing(false);
    b.as_object_mut().unwrap().remove("tools");
    let msg = rejected(&server, AUTH, &b, 400, "invalid_request_error").await;
    assert!(msg.contains("only be specified while providing tools"), "{msg}");
    let mut b = forcing(false);
    b["tool_choice"] = json!({ "type": "required" });
    assert!(rejected(&server, AUTH, &b, 400, "invalid_request_error").await.contains("'required'"));
    assert_eq!(server.pending(), 1);
    let got = post(&server, PATH, AUTH, &forcing(false)).await;
    assert_eq!(got.status, 200, "{}", got.text);
}
