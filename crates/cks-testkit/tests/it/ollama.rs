//! Ollama /api/chat: answers, NDJSON streams (the default), faults, strict checks and /api/tags.

use cks_testkit::{Provider, ProviderServer, Reply, ToolCall};
use serde_json::{Value, json};

use crate::{Got, get, parse_ndjson, post, try_post};

const PATH: &str = "/api/chat";

fn request(stream: Option<bool>) -> Value {
    let mut body = crate::fixture("ollama_request_turn1");
    match stream {
        Some(s) => body["stream"] = json!(s),
        None => {
            body.as_object_mut().unwrap().remove("stream");
        }
    }
    body
}

async fn call(server: &ProviderServer, stream: Option<bool>) -> Got {
    post(server, PATH, &[], &request(stream)).await
}

#[tokio::test]
async fn text_answer_with_counts() {
    let server = ProviderServer::start().await;
    server.push(Reply::text("It is 4 C.").with_usage(190, 13));
    let got = call(&server, Some(false)).await;
    assert_eq!(got.status, 200);
    let v = got.json();
    assert_eq!(v["model"], "llama3.2");
    assert!(v["created_at"].is_string());
    assert_eq!(v["message"], json!({ "role": "assistant", "content": "It is 4 C." }));
    assert_eq!(v["done"], true);
    assert_eq!(v["done_reason"], "stop");
    assert_eq!(v["prompt_eval_count"], 190);
    assert_eq!(v["eval_count"], 13);
}

#[tokio::test]
async fn tool_calls_have_object_arguments_and_optional_ids() {
    let server = ProviderServer::start().await;
    server.push(Reply::ToolCalls(vec![
        ToolCall::new("get_weather", json!({ "city": "Oslo" })),
        ToolCall::with_id("call_k3j2h1g0", "get_weather", json!({ "city": "Bergen" })),
    ]));
    let v = call(&server, Some(false)).await.json();
    assert_eq!(v["done_reason"], "stop", "stop even with tool calls");
    assert_eq!(v["message"]["content"], "");
    let calls = v["message"]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2);
    assert!(calls[0].get("id").is_none());
    assert_eq!(calls[0]["function"]["name"], "get_weather");
    assert_eq!(calls[0]["function"]["arguments"], json!({ "city": "Oslo" }));
    assert_eq!(calls[1]["id"], "call_k3j2h1g0");
    assert_eq!(calls[1]["function"]["index"], 1);
}

#[tokio::test]
async fn streaming_is_the_default_and_ends_with_done() {
    let server = ProviderServer::start().await;
    server.push_all([
        Reply::TextAndToolCalls("Checking.".into(), vec![ToolCall::new("get_weather", json!({ "city": "Oslo" }))])
            .with_usage(160, 18),
        Reply::text("explicit"),
    ]);
    for stream in [None, Some(true)] {
        let got = call(&server, stream).await;
        assert_eq!(got.status, 200);
        assert_eq!(got.header("content-type"), Some("application/x-ndjson"));
        let lines = parse_ndjson(&got.text);
        assert!(lines.len() >= 2);
        let (last, rest) = lines.split_last().unwrap();
        assert!(rest.iter().all(|l| l["done"] == false));
        assert_eq!(last["done"], true);
        assert_eq!(last["done_reason"], "stop");
        let text: String = lines.iter().filter_map(|l| l["message"]["content"].as_str()).collect();
        if stream.is_none() {
            assert_eq!(text, "Checking.");
            let calls: Vec<&Value> =
                rest.iter().filter_map(|l| l["message"]["tool_calls"].as_array()).flatten().collect();
            assert_eq!(calls.len(), 1);
            assert_eq!(calls[0]["function"]["arguments"], json!({ "city": "Oslo" }));
            assert_eq!(last["prompt_eval_count"], 160);
            assert_eq!(last["eval_count"], 18);
        } else {
            assert_eq!(text, "explicit");
        }
    }
}

#[tokio::test]
async fn faults_in_ollama_shape() {
    let server = ProviderServer::start().await;
    server.push_all([
        Reply::RateLimited { retry_after_secs: Some(3) },
        Reply::Overloaded,
        Reply::ServerError,
        Reply::Garbage,
        Reply::Truncated,
        Reply::ErrorMidStream,
        Reply::ErrorMidStream,
        Reply::DropConnection,
    ]);
    let got = call(&server, Some(false)).await;
    assert_eq!(got.status, 429);
    assert_eq!(got.header("retry-after"), Some("3"));
    assert!(got.json()["error"].is_string());

    let got = call(&server, Some(false)).await;
    assert_eq!(got.status, 503);
    assert!(got.json()["error"].is_string());

    let got = call(&server, Some(false)).await;
    assert_eq!(got.status, 500);
    assert!(got.json()["error"].is_string());

    let got = call(&server, Some(false)).await;
    assert_eq!(got.status, 200);
    assert!(serde_json::from_str::<Value>(&got.text).is_err());

    let got = call(&server, Some(false)).await;
    assert_eq!(got.status, 200);
    assert!(got.text.starts_with("{\"") && serde_json::from_str::<Value>(&got.text).is_err());

    let got = call(&server, None).await;
    assert_eq!(got.status, 200);
    let lines = parse_ndjson(&got.text);
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["done"], false);
    assert!(lines[0]["message"]["content"].as_str().is_some_and(|t| !t.is_empty()));
    assert!(lines[1]["error"].is_string());

    let got = call(&server, Some(false)).await;
    assert_eq!(got.status, 200);
    assert!(got.json()["error"].is_string());

    assert!(try_post(&server, PATH, &[], &request(Some(false))).await.is_err());
}

#[tokio::test]
async fn strict_checks_and_tags() {
    let server = ProviderServer::start().await;
    server.push(Reply::text("kept"));
    let mut b = request(Some(false));
    b.as_object_mut().unwrap().remove("messages");
    let got = post(&server, PATH, &[], &b).await;
    assert_eq!(got.status, 400);
    assert_eq!(got.json(), json!({ "error": "messages is required" }));

    let mut b = crate::fixture("ollama_request_turn2");
    b["messages"][1]["tool_calls"][0]["function"]["arguments"] = json!("{\"city\":\"Oslo\"}");
    let got = post(&server, PATH, &[], &b).await;
    assert_eq!(got.status, 400);
    assert!(got.json()["error"].as_str().unwrap().contains("cannot unmarshal string"));

    let mut b = request(Some(false));
    b.as_object_mut().unwrap().remove("model");
    assert_eq!(post(&server, PATH, &[], &b).await.status, 400);

    assert_eq!(server.pending(), 1);
    let got = post(&server, PATH, &[], &crate::fixture("ollama_request_turn2")).await;
    assert_eq!(got.status, 200, "{}", got.text);
    assert_eq!(got.json()["message"]["content"], "kept");

    let got = get(&server, "/api/tags", &[]).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.json(), crate::fixture("ollama_tags"));
    assert!(server.requests().iter().all(|r| r.provider == Some(Provider::Ollama)));
}

#[tokio::test]
async fn format_is_json_or_a_schema_and_a_json_reply_is_the_content() {
    let server = ProviderServer::start().await;
    server.push_all([Reply::Json(json!({ "a": 1 })), Reply::Json(json!([true]))]);
    let mut b = request(Some(false));
    b["format"] = json!("yaml");
    let got = post(&server, PATH, &[], &b).await;
    assert_eq!(got.status, 400);
    assert!(got.json()["error"].as_str().unwrap().contains("invalid format"));
    b["format"] = json!(["json"]);
    assert_eq!(post(&server, PATH, &[], &b).await.status, 400);
    assert_eq!(server.pending(), 2);

    b["format"] = json!({ "type": "object", "properties": { "a": { "type": "integer" } } });
    let got = post(&server, PATH, &[], &b).await;
    assert_eq!(got.status, 200, "{}", got.text);
    assert_eq!(got.json()["message"]["content"], "{\"a\":1}");
    b["format"] = json!("json");
    let got = post(&server, PATH, &[], &b).await;
    assert_eq!(got.json()["message"]["content"], "[true]");
}
