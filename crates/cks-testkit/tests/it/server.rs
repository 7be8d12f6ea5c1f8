//! What all endpoints share: the queue, the default reply, recording, raw replies, model lists, routing, shutdown.

use cks_testkit::{Provider, ProviderServer, Reply};
use serde_json::{Value, json};

use crate::{client, fresh_client, get, post};

const ANTHROPIC: &[(&str, &str)] = &[("x-api-key", "k"), ("anthropic-version", "2023-06-01")];

#[tokio::test]
async fn one_fifo_queue_for_all_endpoints() {
    let server = ProviderServer::start().await;
    server.push_all(["first", "second", "third"].map(Reply::from));
    let a = post(&server, "/v1/messages", ANTHROPIC, &crate::fixture("anthropic_request_turn1")).await;
    let o = post(&server, "/api/chat", &[], &crate::fixture("ollama_request_turn1")).await;
    let g = post(
        &server,
        "/v1beta/models/gemini-2.5-flash:generateContent",
        &[("x-goog-api-key", "k")],
        &crate::fixture("gemini_request_turn1"),
    )
    .await;
    assert_eq!(a.json()["content"][0]["text"], "first");
    assert_eq!(o.json()["message"]["content"], "second");
    assert_eq!(g.json()["candidates"][0]["content"]["parts"][0]["text"], "third");
    assert_eq!(server.pending(), 0);
    let providers: Vec<Option<Provider>> = server.requests().iter().map(|r| r.provider).collect();
    assert_eq!(providers, [Some(Provider::Anthropic), Some(Provider::Ollama), Some(Provider::Gemini)]);
}

#[tokio::test]
async fn empty_queue_without_default_is_a_clear_500_and_default_repeats() {
    let server = ProviderServer::start().await;
    let body = crate::fixture("openai_request_turn1");
    let got = post(&server, "/v1/chat/completions", &[], &body).await;
    assert_eq!(got.status, 500);
    assert!(got.text.contains("no scripted reply"), "{}", got.text);
    assert!(got.json()["error"]["message"].is_string(), "in the provider's error shape");

    server.set_default(Some(Reply::text("default")));
    server.push(Reply::text("queued"));
    let texts: Vec<Value> = futures_texts(&server, &body, 3).await;
    assert_eq!(texts, [json!("queued"), json!("default"), json!("default")]);

    server.set_default(None);
    assert_eq!(post(&server, "/v1/chat/completions", &[], &body).await.status, 500);
}

async fn futures_texts(server: &ProviderServer, body: &Value, n: usize) -> Vec<Value> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(
            post(server, "/v1/chat/completions", &[], body).await.json()["choices"][0]["message"]["content"].clone(),
        );
    }
    out
}

#[tokio::test]
async fn requests_are_recorded_in_full_and_can_be_cleared() {
    let server = ProviderServer::start().await;
    server.push(Reply::text("ok"));
    let body = crate::fixture("gemini_request_turn1");
    post(
        &server,
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
        &[("X-Goog-Api-Key", "secret"), ("X-Custom", "Value")],
        &body,
    )
    .await;
    // A non-JSON body on an unknown route.
    let resp = client().post(format!("{}/nowhere?x=1", server.base_url())).body("plain text").send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 404);
    assert!(resp.text().await.unwrap().contains("/nowhere"));

    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    let r = &reqs[0];
    assert_eq!(r.method, "POST");
    assert_eq!(r.path, "/v1beta/models/gemini-2.5-flash:streamGenerateContent");
    assert_eq!(r.query.as_deref(), Some("alt=sse"));
    assert_eq!(r.header("x-goog-api-key"), Some("secret"));
    assert!(r.headers.contains(&("x-custom".to_owned(), "Value".to_owned())), "names lowercased: {:?}", r.headers);
    assert!(r.headers.iter().all(|(n, _)| *n == n.to_ascii_lowercase()));
    assert_eq!(r.body, body);
    assert_eq!(serde_json::from_str::<Value>(&r.raw_body).unwrap(), body);
    assert_eq!(r.provider, Some(Provider::Gemini));

    let r = &reqs[1];
    assert_eq!(r.path, "/nowhere");
    assert_eq!(r.query.as_deref(), Some("x=1"));
    assert_eq!(r.body, Value::Null);
    assert_eq!(r.raw_body, "plain text");
    assert_eq!(r.provider, None);

    server.clear_requests();
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn raw_status_reply_is_served_verbatim_everywhere() {
    let server = ProviderServer::start().await;
    let raw = || Reply::Status {
        status: 418,
        headers: vec![("X-Why".into(), "teapot".into()), ("content-type".into(), "text/plain".into())],
        body: "short and stout".into(),
    };
    server.push_all([raw(), raw()]);
    for (path, headers, body) in [
        ("/v1/messages", ANTHROPIC, crate::fixture("anthropic_request_turn1")),
        ("/api/chat", &[][..], crate::fixture("ollama_request_turn1")),
    ] {
        let got = post(&server, path, headers, &body).await;
        assert_eq!(got.status, 418);
        assert_eq!(got.header("x-why"), Some("teapot"));
        assert_eq!(got.header("content-type"), Some("text/plain"));
        assert_eq!(got.text, "short and stout");
    }
}

#[tokio::test]
async fn model_lists_in_each_shape() {
    let server = ProviderServer::start().await;
    for path in ["/v1/models", "/models"] {
        let v = get(&server, path, &[("authorization", "Bearer k")]).await.json();
        assert_eq!(v["object"], "list");
        assert!(v["data"].as_array().unwrap().iter().all(|m| m["id"].is_string() && m["object"] == "model"));

        let v = get(&server, path, &[("x-api-key", "k"), ("anthropic-version", "2023-06-01")]).await.json();
        assert_eq!(v["has_more"], false);
        let first = &v["data"][0];
        assert_eq!(first["type"], "model");
        assert!(first["id"].is_string() && first["display_name"].is_string());
    }
    let v = get(&server, "/v1beta/models", &[("x-goog-api-key", "k")]).await.json();
    assert!(v["models"].as_array().unwrap().iter().any(|m| m["name"] == "models/gemini-2.5-flash"));
    let providers: Vec<Option<Provider>> = server.requests().iter().map(|r| r.provider).collect();
    assert_eq!(
        providers,
        [
            Some(Provider::OpenAi),
            Some(Provider::Anthropic),
            Some(Provider::OpenAi),
            Some(Provider::Anthropic),
            Some(Provider::Gemini)
        ]
    );
    assert_eq!(server.pending(), 0);
}

#[tokio::test]
async fn drop_shuts_the_server_down() {
    let server = ProviderServer::start().await;
    let url = format!("{}/api/tags", server.base_url());
    assert_eq!(client().get(&url).send().await.unwrap().status().as_u16(), 200);
    drop(server);
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    // A fresh client, so no pooled connection is reused.
    let err = fresh_client().get(&url).send().await.expect_err("server is gone");
    assert!(err.is_connect() || err.is_request(), "{err:?}");
}

#[tokio::test]
async fn concurrent_requests_each_get_one_reply() {
    let server = ProviderServer::start().await;
    server.push_all((0..8).map(|i| Reply::text(format!("r{i}"))));
    let body = crate::fixture("ollama_request_turn1");
    let mut handles = Vec::new();
    for _ in 0..8 {
        let url = format!("{}/api/chat", server.base_url());
        let body = body.clone();
        handles.push(tokio::spawn(async move {
            let v: Value = client().post(url).json(&body).send().await.unwrap().json().await.unwrap();
            v["message"]["content"].as_str().unwrap().to_owned()
        }));
    }
    let mut got = Vec::new();
    for h in handles {
        got.push(h.await.unwrap());
    }
    got.sort();
    assert_eq!(got, (0..8).map(|i| format!("r{i}")).collect::<Vec<_>>());
}

#[tokio::test]
async fn each_request_records_when_it_arrived_and_when_its_answer_was_ready() {
    let server = ProviderServer::start().await;
    let delay = std::time::Duration::from_millis(80);
    server.push(Reply::Delay(delay, Box::new(Reply::text("slow"))));
    server.push(Reply::text("fast"));
    let body = crate::fixture("openai_request_turn1");
    let before = std::time::Instant::now();
    post(&server, "/v1/chat/completions", &[], &body).await;
    post(&server, "/v1/chat/completions", &[], &body).await;
    let after = std::time::Instant::now();
    let requests = server.requests();
    let handled: Vec<std::time::Duration> = requests
        .iter()
        .map(|r| {
            assert!(before <= r.received_at, "received after the client started");
            let answered = r.answered_at.expect("answered");
            assert!(answered <= after, "answered before the client got it");
            answered - r.received_at
        })
        .collect();
    assert!(handled[0] >= delay, "the scripted delay is the server's own time: {handled:?}");
    assert!(handled[1] < delay, "an immediate answer takes less: {handled:?}");
    assert!(requests[0].answered_at.unwrap() <= requests[1].received_at, "sequential requests do not overlap");
}

/// `Reply::NotStreamed`: a streamed request gets the body a non-streamed one would, labelled JSON, in
/// every wire format; a request that did not ask to stream is answered as without it.
#[tokio::test]
async fn a_not_streamed_reply_answers_a_streamed_request_with_the_whole_json_body() {
    let server = ProviderServer::start().await;
    let call =
        || Reply::ToolCalls(vec![cks_testkit::ToolCall::with_id("call_1", "get_weather", json!({"city": "Oslo"}))]);
    let mut anthropic = crate::fixture("anthropic_request_turn1");
    anthropic["stream"] = json!(true);
    let mut openai = crate::fixture("openai_request_turn1");
    openai["stream"] = json!(true);
    let mut ollama = crate::fixture("ollama_request_turn1");
    ollama.as_object_mut().unwrap().remove("stream");
    let gemini = crate::fixture("gemini_request_turn1");
    let gemini_path = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse";
    type Headers<'a> = &'a [(&'a str, &'a str)];
    let cases: [(&str, Headers<'_>, &Value); 4] = [
        ("/v1/messages", ANTHROPIC, &anthropic),
        ("/v1/chat/completions", &[], &openai),
        ("/api/chat", &[], &ollama),
        (gemini_path, &[("x-goog-api-key", "k")], &gemini),
    ];
    for (path, headers, body) in cases {
        server.push(Reply::TextAndToolCalls("Checking.".into(), vec![]).not_streamed());
        let got = post(&server, path, headers, body).await;
        assert_eq!(got.status, 200, "{path}: {}", got.text);
        assert!(got.header("content-type").unwrap().starts_with("application/json"), "{path}");
        let whole = got.json();
        let text = whole["content"][0]["text"]
            .as_str()
            .or_else(|| whole["choices"][0]["message"]["content"].as_str())
            .or_else(|| whole["message"]["content"].as_str())
            .or_else(|| whole["candidates"][0]["content"]["parts"][0]["text"].as_str());
        assert_eq!(text, Some("Checking."), "{path}: {whole}");

        // Tool calls come in the endpoint's non-streamed shape too.
        server.push(call().not_streamed());
        let whole = post(&server, path, headers, body).await.json();
        let name = whole["content"][0]["name"]
            .as_str()
            .or_else(|| whole["choices"][0]["message"]["tool_calls"][0]["function"]["name"].as_str())
            .or_else(|| whole["message"]["tool_calls"][0]["function"]["name"].as_str())
            .or_else(|| whole["candidates"][0]["content"]["parts"][0]["functionCall"]["name"].as_str());
        assert_eq!(name, Some("get_weather"), "{path}: {whole}");
    }
    // Without it, the same streamed request is streamed.
    server.push(Reply::text("streamed"));
    let got = post(&server, "/v1/chat/completions", &[], &openai).await;
    assert!(got.header("content-type").unwrap().starts_with("text/event-stream"));
    assert_eq!(server.pending(), 0);
}
