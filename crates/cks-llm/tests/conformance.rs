//! One conformance suite over all four providers, against `cks-testkit`'s scripted provider server.
//!
//! Each scenario runs for every provider, non-streamed and streamed. The server applies the real APIs'
//! strict checks (unknown keys, tool_result pairing, Gemini signatures and schema keywords, ...), and every
//! request body we sent is validated afterwards against the provider's published request schema.

mod common;

use std::sync::Mutex;

use cks_llm::{
    ChatOptions, ChatRequest, ChatResponse, ContentBlock, ErrorKind, LlmClient, Message, OutputSchema, ProviderKind,
    Role, StopReason, ToolResult, Usage,
};
use cks_testkit::{ProviderServer, Reply, ToolCall};
use common::*;
use serde_json::{Value, json};

const MODES: [bool; 2] = [false, true];

async fn chat(client: &LlmClient, messages: &[Message], stream: bool) -> ChatResponse {
    client.chat_with(request(messages.to_vec()), ChatOptions { stream, ..ChatOptions::default() }).await.unwrap()
}

/// What a stateless caller like `ai_chat` does between turns: serialize the history and read it back.
fn round_trip(history: &[Message]) -> Vec<Message> {
    let text = serde_json::to_string(history).unwrap();
    let back: Vec<Message> = serde_json::from_str(&text).unwrap();
    assert_eq!(back, history);
    back
}

fn results_for(response: &ChatResponse, content: impl Fn(&str) -> String, is_error: bool) -> Message {
    Message::tool_results(
        response
            .message
            .tool_calls()
            .iter()
            .map(|c| ToolResult { tool_use_id: c.id.to_owned(), content: content(c.name), is_error })
            .collect(),
    )
}

#[tokio::test]
async fn single_text_answer() {
    for kind in ProviderKind::ALL {
        for stream in MODES {
            let server = ProviderServer::start().await;
            server.push(Reply::text("Hello there.").with_usage(21, 3));
            let r = chat(&client(kind, &server), &[Message::user("Say hello")], stream).await;
            assert_eq!(r.text(), "Hello there.", "{kind} stream={stream}");
            assert_eq!(r.stop_reason, StopReason::EndTurn);
            assert_eq!(r.usage, Usage { input_tokens: 21, output_tokens: 3 }, "{kind} stream={stream}");
            assert_eq!(r.provider, kind);
            assert_eq!(r.message.role, Role::Assistant);
            assert_eq!(assert_requests_valid(&server), 1);
        }
    }
}

#[tokio::test]
async fn one_tool_call_then_answer() {
    for kind in ProviderKind::ALL {
        for stream in MODES {
            let server = ProviderServer::start().await;
            server.push(Reply::ToolCalls(vec![ToolCall::new("get_weather", json!({"city": "Oslo"}))]));
            server.push(Reply::text("It is 4 C with light snow in Oslo."));
            let client = client(kind, &server);
            let mut history = vec![Message::user("What's the weather in Oslo?")];
            let r = chat(&client, &history, stream).await;
            assert!(r.has_tool_calls(), "{kind} stream={stream}");
            assert_eq!(r.stop_reason, StopReason::ToolUse, "tool calls come from the content ({kind})");
            let calls = r.message.tool_calls();
            assert_eq!(calls.len(), 1);
            assert_eq!((calls[0].name, calls[0].input), ("get_weather", &json!({"city": "Oslo"})));
            assert!(!calls[0].id.is_empty());
            history.push(r.message.clone());
            history.push(results_for(&r, |_| "4 C, light snow".into(), false));
            let r = chat(&client, &round_trip(&history), stream).await;
            assert_eq!(r.text(), "It is 4 C with light snow in Oslo.", "{kind} stream={stream}");
            assert_eq!(assert_requests_valid(&server), 2);
        }
    }
}

#[tokio::test]
async fn two_tool_calls_in_one_turn() {
    for kind in ProviderKind::ALL {
        for stream in MODES {
            let server = ProviderServer::start().await;
            server.push(Reply::TextAndToolCalls(
                "Checking both.".into(),
                vec![
                    ToolCall::new("get_weather", json!({"city": "Oslo"})),
                    ToolCall::new("get_weather", json!({"city": "Bergen"})),
                ],
            ));
            server.push(Reply::text("Oslo 4 C, Bergen 7 C."));
            let client = client(kind, &server);
            let mut history = vec![Message::user("Weather in Oslo and Bergen?")];
            let r = chat(&client, &history, stream).await;
            let calls = r.message.tool_calls();
            assert_eq!(calls.len(), 2, "{kind} stream={stream}");
            assert_ne!(calls[0].id, calls[1].id);
            assert_eq!(calls[1].input, &json!({"city": "Bergen"}));
            assert_eq!(r.text(), "Checking both.");
            history.push(r.message.clone());
            history.push(results_for(&r, |_| "ok".into(), false));
            let r = chat(&client, &round_trip(&history), stream).await;
            assert_eq!(r.text(), "Oslo 4 C, Bergen 7 C.");
            // One result per call, in the message shape each provider expects.
            let sent = &chat_requests(&server)[1].body;
            match kind {
                ProviderKind::Anthropic => {
                    let last = &sent["messages"][2]["content"];
                    assert_eq!(last.as_array().unwrap().len(), 2);
                    assert!(last.as_array().unwrap().iter().all(|b| b["type"] == "tool_result"));
                }
                ProviderKind::OpenaiCompatible | ProviderKind::Ollama => {
                    let tools: Vec<&Value> =
                        sent["messages"].as_array().unwrap().iter().filter(|m| m["role"] == "tool").collect();
                    assert_eq!(tools.len(), 2);
                }
                ProviderKind::Google => {
                    let last = &sent["contents"][2];
                    assert_eq!(last["role"], "user");
                    assert_eq!(last["parts"].as_array().unwrap().len(), 2);
                    assert!(
                        last["parts"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .all(|p| p["functionResponse"]["name"] == "get_weather")
                    );
                }
            }
            assert_eq!(assert_requests_valid(&server), 2);
        }
    }
}

#[tokio::test]
async fn tool_error_fed_back() {
    for kind in ProviderKind::ALL {
        let server = ProviderServer::start().await;
        server.push(Reply::ToolCalls(vec![ToolCall::new("get_weather", json!({"city": "Atlantis"}))]));
        server.push(Reply::text("That city does not exist."));
        let client = client(kind, &server);
        let mut history = vec![Message::user("Weather in Atlantis?")];
        let r = chat(&client, &history, false).await;
        history.push(r.message.clone());
        history.push(results_for(&r, |_| "unknown city: Atlantis".into(), true));
        let r = chat(&client, &round_trip(&history), false).await;
        assert_eq!(r.text(), "That city does not exist.");
        let sent = &chat_requests(&server)[1].body;
        let text = sent.to_string();
        assert!(text.contains("unknown city: Atlantis"), "{kind}: {text}");
        match kind {
            ProviderKind::Anthropic => assert_eq!(sent["messages"][2]["content"][0]["is_error"], true),
            ProviderKind::Google => {
                assert_eq!(
                    sent["contents"][2]["parts"][0]["functionResponse"]["response"],
                    json!({"error": "unknown city: Atlantis"})
                )
            }
            _ => assert!(text.contains("Error: unknown city: Atlantis"), "{kind}"),
        }
        assert_requests_valid(&server);
    }
}

#[tokio::test]
async fn three_turns_with_history_sent_back_unchanged() {
    for kind in ProviderKind::ALL {
        for stream in MODES {
            let server = ProviderServer::start().await;
            server.push_all([
                Reply::ToolCalls(vec![ToolCall::new("get_weather", json!({"city": "Oslo"}))]),
                Reply::text("Oslo: 4 C."),
                Reply::text("You asked about Oslo."),
                Reply::ToolCalls(vec![ToolCall::new("get_weather", json!({"city": "Oslo"}))]),
                Reply::text("Still 4 C."),
            ]);
            let client = client(kind, &server);
            let mut history = vec![Message::user("Weather in Oslo?")];
            let mut ids = Vec::new();
            for (turn, prompt) in [None, Some("Which city did I ask about?"), Some("And now?")].into_iter().enumerate()
            {
                if let Some(p) = prompt {
                    history.push(Message::user(p));
                }
                loop {
                    let r = chat(&client, &round_trip(&history), stream).await;
                    history.push(r.message.clone());
                    if !r.has_tool_calls() {
                        break;
                    }
                    ids.extend(r.message.tool_calls().iter().map(|c| c.id.to_owned()));
                    history.push(results_for(&r, |_| "4 C".into(), false));
                }
                assert!(history.last().unwrap().role == Role::Assistant, "{kind} turn {turn}");
            }
            assert_eq!(history.last().unwrap().text(), "Still 4 C.");
            assert_eq!(ids.len(), 2);
            assert_ne!(ids[0], ids[1], "{kind}: tool-call ids are unique across the conversation");
            // The last request carried the whole history, provider bookkeeping only to its producer.
            assert_eq!(assert_requests_valid(&server), 5);
            let last = chat_requests(&server).pop().unwrap();
            assert!(!last.raw_body.contains("provider_state"), "{kind}: bookkeeping leaked");
        }
    }
}

#[tokio::test]
async fn non_ascii_text() {
    let text = "Zürich – 東京 – Ελλάδα 🌧️ «ok»";
    for kind in ProviderKind::ALL {
        for stream in MODES {
            let server = ProviderServer::start().await;
            server.push(Reply::text(text));
            server.push(Reply::ToolCalls(vec![ToolCall::new("get_weather", json!({"city": "Zürich 東京"}))]));
            let client = client(kind, &server);
            let r = chat(&client, &[Message::user(text)], stream).await;
            assert_eq!(r.text(), text, "{kind} stream={stream}");
            let r = chat(&client, &[Message::user(text)], stream).await;
            assert_eq!(r.message.tool_calls()[0].input, &json!({"city": "Zürich 東京"}));
            assert!(chat_requests(&server)[0].raw_body.contains("東京"));
            assert_requests_valid(&server);
        }
    }
}

#[tokio::test]
async fn empty_content() {
    for kind in ProviderKind::ALL {
        for stream in MODES {
            let server = ProviderServer::start().await;
            server.push(Reply::text(""));
            server.push(Reply::text("Sorry, here is an answer."));
            let client = client(kind, &server);
            let mut history = vec![Message::user("Say nothing.")];
            let r = chat(&client, &history, stream).await;
            // An empty answer is one empty text block: a final, empty reply.
            assert_eq!(r.message.content, vec![ContentBlock::text("")], "{kind} stream={stream}");
            assert!(!r.has_tool_calls());
            history.push(r.message);
            history.push(Message::user("Now say something."));
            let r = chat(&client, &round_trip(&history), stream).await;
            assert_eq!(r.text(), "Sorry, here is an answer.");
            assert_requests_valid(&server);
        }
    }
}

/// A tool-call turn on one provider, finished on another: the history must be accepted as it is.
#[tokio::test]
async fn switching_provider_between_turns() {
    for from in ProviderKind::ALL {
        for to in ProviderKind::ALL {
            if from == to {
                continue;
            }
            let server = ProviderServer::start().await;
            server.push(Reply::TextAndToolCalls(
                "Let me check.".into(),
                vec![
                    ToolCall::new("get_weather", json!({"city": "Oslo"})),
                    ToolCall::new("get_weather", json!({"city": "Rome"})),
                ],
            ));
            server.push(Reply::text("Oslo 4 C, Rome 15 C."));
            server.push(Reply::text("Back again."));
            let mut history = vec![Message::user("Weather in Oslo and Rome?")];
            let r = chat(&client(from, &server), &history, false).await;
            history.push(r.message.clone());
            history.push(results_for(&r, |_| "{\"temp\": 4}".into(), false));
            let r = chat(&client(to, &server), &round_trip(&history), false).await;
            assert_eq!(r.text(), "Oslo 4 C, Rome 15 C.", "{from} -> {to}");
            history.push(r.message);
            history.push(Message::user("Thanks"));
            // And back to the first provider, with the mixed history.
            let r = chat(&client(from, &server), &round_trip(&history), false).await;
            assert_eq!(r.text(), "Back again.", "{from} -> {to} -> {from}");
            let reqs = chat_requests(&server);
            assert!(!reqs[1].raw_body.contains("provider_state"), "{from} -> {to}");
            if from == ProviderKind::Google {
                assert!(!reqs[1].raw_body.contains("Q0tTdGVzdGtpdFNpZ25hdHVyZQ"), "Gemini signature leaked to {to}");
                // Back on Gemini, the signature is on its part again.
                assert!(reqs[2].raw_body.contains("Q0tTdGVzdGtpdFNpZ25hdHVyZQ"));
            }
            assert_eq!(assert_requests_valid(&server), 3);
        }
    }
}

#[tokio::test]
async fn openai_compatible_quirks() {
    for stream in MODES {
        let server = ProviderServer::start().await;
        server.openai_quirks(true);
        server.push(Reply::ToolCalls(vec![
            ToolCall::new("get_weather", json!({"city": "Oslo"})),
            ToolCall::new("get_weather", json!({"city": "Rome"})),
        ]));
        server.push(Reply::text("done"));
        let client = client(ProviderKind::OpenaiCompatible, &server);
        let mut history = vec![Message::user("Weather?")];
        let r = chat(&client, &history, stream).await;
        let calls = r.message.tool_calls();
        assert_eq!(calls.len(), 2, "stream={stream}");
        assert!(calls.iter().all(|c| c.id.starts_with("call_")));
        assert_ne!(calls[0].id, calls[1].id);
        assert_eq!(calls[1].input, &json!({"city": "Rome"}));
        history.push(r.message.clone());
        history.push(results_for(&r, |_| "x".into(), false));
        assert_eq!(chat(&client, &history, stream).await.text(), "done");
        assert_requests_valid(&server);
    }
}

#[tokio::test]
async fn status_list_models_and_auto_selection() {
    let server = ProviderServer::start().await;
    for kind in ProviderKind::ALL {
        let client = client(kind, &server);
        let status = client.status().await;
        assert_eq!(status.provider, Some(kind));
        assert!(status.configured && status.reachable, "{kind}: {status:?}");
        let models = client.list_models().await.unwrap();
        assert!(!models.is_empty(), "{kind}");
        let before = server.requests().len();
        client.list_models().await.unwrap();
        assert_eq!(server.requests().len(), before, "{kind}: model list is cached");
    }
    // auto: Ollama answers /api/tags, so it is chosen even with an Anthropic key.
    let env = env_for(ProviderKind::Anthropic, &server.base_url());
    let client =
        LlmClient::from_env(|k| if k == "CKS_LLM_PROVIDER" { Some("auto".into()) } else { env.get(k).cloned() })
            .unwrap();
    assert_eq!(client.provider().await.unwrap(), ProviderKind::Ollama);
    // Per-call model override never changes the provider.
    server.push(Reply::text("hi"));
    let mut req = request(vec![Message::user("hi")]);
    req.model = Some("my-model:7b".into());
    let r = client.chat(req).await.unwrap();
    assert_eq!(r.provider, ProviderKind::Ollama);
    assert_eq!(chat_requests(&server).last().unwrap().body["model"], "my-model:7b");
}

/// A request for a JSON answer matching `schema`, without tools.
fn structured(messages: Vec<Message>, name: &str, schema: &Value) -> ChatRequest {
    ChatRequest {
        system: Some("You are terse.".into()),
        messages,
        max_tokens: Some(256),
        output: Some(OutputSchema::new(name, schema.clone())),
        ..ChatRequest::default()
    }
}

/// One call, streamed with a text sink when `stream`: the answer and the text the sink was shown.
async fn chat_shown(client: &LlmClient, request: ChatRequest, stream: bool) -> (ChatResponse, String) {
    let shown = Mutex::new(String::new());
    let sink = |delta: &str| shown.lock().unwrap().push_str(delta);
    let options = ChatOptions { deltas: stream.then_some(&sink as &dyn cks_llm::DeltaSink), ..ChatOptions::default() };
    let r = client.chat_with(request, options).await.unwrap();
    (r, shown.into_inner().unwrap())
}

/// The output schema travels where each provider expects it, the request validates against the provider's
/// published schema, and the answer's text is the JSON the server returned (on Anthropic, the forced tool's
/// input), which the next turn sends back as plain text.
#[tokio::test]
async fn structured_output_through_each_wire_format() {
    let schema = json!({
        "type": "object",
        "properties": {"city": {"type": "string"}, "temp": {"type": "number"},
                       "tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["city", "temp"],
        "additionalProperties": false
    });
    let answer = json!({"city": "Oslo", "temp": 4.5, "tags": ["snow", "wind"]});
    for kind in ProviderKind::ALL {
        for stream in MODES {
            let server = ProviderServer::start().await;
            server.push(Reply::Json(answer.clone()));
            server.push(Reply::text("You are welcome."));
            let client = client(kind, &server);
            let mut history = vec![Message::user("Weather in Oslo, as a report")];
            let request = structured(history.clone(), "weather_report", &schema);
            let (r, shown) = chat_shown(&client, request, stream).await;
            assert_eq!(serde_json::from_str::<Value>(&r.text()).unwrap(), answer, "{kind} stream={stream}");
            assert_eq!(r.message.content, vec![ContentBlock::text(answer.to_string())], "{kind} stream={stream}");
            assert!(!r.has_tool_calls(), "{kind}: the answer tool never reaches the caller");
            assert_eq!(r.stop_reason, StopReason::EndTurn, "{kind} stream={stream}");
            if stream {
                assert_eq!(shown, r.text(), "{kind}: the text shown while streaming is the answer's");
            }
            let sent = &chat_requests(&server)[0].body;
            match kind {
                ProviderKind::Anthropic => {
                    assert_eq!(sent["tool_choice"], json!({"type": "tool", "name": "weather_report"}));
                    let tools = sent["tools"].as_array().unwrap();
                    assert_eq!(tools.len(), 1);
                    assert_eq!((&tools[0]["name"], &tools[0]["input_schema"]), (&json!("weather_report"), &schema));
                }
                ProviderKind::OpenaiCompatible => assert_eq!(
                    sent["response_format"],
                    json!({"type": "json_schema",
                           "json_schema": {"name": "weather_report", "schema": schema, "strict": false}})
                ),
                ProviderKind::Google => {
                    assert_eq!(sent["generationConfig"]["responseMimeType"], "application/json");
                    assert_eq!(sent["generationConfig"]["responseJsonSchema"], schema);
                    assert!(sent["generationConfig"].get("responseSchema").is_none());
                }
                ProviderKind::Ollama => assert_eq!(sent["format"], schema),
            }
            history.push(r.message);
            history.push(Message::user("Thanks"));
            let r = chat(&client, &round_trip(&history), stream).await;
            assert_eq!(r.text(), "You are welcome.", "{kind} stream={stream}");
            assert_eq!(assert_requests_valid(&server), 2, "{kind} stream={stream}");
        }
    }
}

/// An answer that is not an object: Anthropic's forced tool takes an object, so the schema is wrapped there
/// and the answer unwrapped; the others carry the schema as it is.
#[tokio::test]
async fn structured_output_of_a_list() {
    let schema = json!({"type": "array", "items": {"$ref": "#/$defs/City"},
                        "$defs": {"City": {"type": "string", "minLength": 1}}});
    let answer = json!(["Oslo", "Bergen"]);
    for kind in ProviderKind::ALL {
        for stream in MODES {
            let server = ProviderServer::start().await;
            server.push(Reply::Json(answer.clone()));
            let request = structured(vec![Message::user("Two cities")], "cities", &schema);
            let (r, _) = chat_shown(&client(kind, &server), request, stream).await;
            assert_eq!(r.text(), r#"["Oslo","Bergen"]"#, "{kind} stream={stream}");
            let sent = &chat_requests(&server)[0].body;
            if kind == ProviderKind::Anthropic {
                assert_eq!(sent["tools"][0]["input_schema"]["properties"]["value"]["type"], "array");
                assert_eq!(sent["tools"][0]["input_schema"]["$defs"], schema["$defs"]);
            }
            if kind == ProviderKind::Google {
                // Gemini does not document `minLength` for response schemas: it is left out.
                assert_eq!(sent["generationConfig"]["responseJsonSchema"]["$defs"]["City"], json!({"type": "string"}));
            }
            assert_eq!(assert_requests_valid(&server), 1);
        }
    }
}

/// A server that ignores the schema answers text, which reaches the caller unchanged.
#[tokio::test]
async fn structured_output_ignored_by_the_server_is_plain_text() {
    let text = "Sure! {\"city\": \"Oslo\", \"temp\": 4}";
    for kind in ProviderKind::ALL {
        let server = ProviderServer::start().await;
        server.push(Reply::text(text));
        let request = structured(vec![Message::user("Weather")], "weather", &json!({"type": "object"}));
        let r = client(kind, &server).chat(request).await.unwrap();
        assert_eq!(r.text(), text, "{kind}");
        assert_requests_valid(&server);
    }
}

/// Tools and an output schema in one request are refused before anything is sent.
#[tokio::test]
async fn tools_beside_an_output_schema_are_refused() {
    for kind in ProviderKind::ALL {
        let server = ProviderServer::start().await;
        let mut req = request(vec![Message::user("Weather in Oslo?")]);
        req.output = Some(OutputSchema::new("weather", json!({"type": "object"})));
        let e = client(kind, &server).chat(req).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::BadRequest, "{kind}: {e}");
        let message = e.to_string();
        assert!(message.contains("tool") && message.contains("\"weather\""), "{kind}: {message}");
        // A bad name is refused the same way.
        let req = structured(vec![Message::user("x")], "the weather", &json!({"type": "object"}));
        let e = client(kind, &server).chat(req).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::BadRequest, "{kind}: {e}");
        assert!(chat_requests(&server).is_empty(), "{kind}: nothing was sent");
    }
}
