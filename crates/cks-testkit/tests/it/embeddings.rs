//! The embeddings endpoints of Ollama, OpenAI and Gemini: deterministic vectors in input order, each API's
//! request checks, and scripted faults from the embeddings queue (apart from the chat queue).

use cks_testkit::{EMBEDDING_DIMS, Provider, ProviderServer, Reply, embedding};
use serde_json::{Value, json};

use crate::post;

const GEMINI: &str = "/v1beta/models/gemini-embedding-001:batchEmbedContents";
const GEMINI_KEY: &[(&str, &str)] = &[("x-goog-api-key", "test-key")];

fn vectors(values: &Value) -> Vec<Vec<f32>> {
    serde_json::from_value(values.clone()).unwrap()
}

fn vector(values: &Value) -> Vec<f32> {
    serde_json::from_value(values.clone()).unwrap()
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn gemini_request(model: &str, text: &str) -> Value {
    json!({ "model": model, "content": { "parts": [{ "text": text }] } })
}

#[test]
fn vectors_are_unit_length_the_same_each_time_and_close_for_shared_words() {
    let banana = embedding("Banana yellow fruit", EMBEDDING_DIMS);
    assert_eq!(banana, embedding("banana, YELLOW fruit", EMBEDDING_DIMS), "case and punctuation do not count");
    assert_eq!(banana.len(), EMBEDDING_DIMS);
    assert!((cosine(&banana, &banana) - 1.0).abs() < 1e-5);
    let near = cosine(&banana, &embedding("banan", EMBEDDING_DIMS));
    let far = cosine(&banana, &embedding("automobile vehicle", EMBEDDING_DIMS));
    assert!(near > far + 0.2, "a misspelt word is nearer than an unrelated text: {near} vs {far}");
    assert_eq!(embedding("", 3), [1.0, 0.0, 0.0], "a text without words");
}

#[tokio::test]
async fn ollama_embeds_each_input_in_order() {
    let server = ProviderServer::start().await;
    let got = post(&server, "/api/embed", &[], &json!({ "model": "nomic-embed-text", "input": ["red", "blue"] })).await;
    assert_eq!(got.status, 200, "{}", got.text);
    let v = got.json();
    assert_eq!(v["model"], "nomic-embed-text");
    assert_eq!(vectors(&v["embeddings"]), [embedding("red", EMBEDDING_DIMS), embedding("blue", EMBEDDING_DIMS)]);
    let one = post(&server, "/api/embed", &[], &json!({ "model": "m", "input": "red", "dimensions": 8 })).await;
    assert_eq!(vectors(&one.json()["embeddings"]), [embedding("red", 8)], "a string input, 8 dimensions");
    assert_eq!(server.requests()[0].provider, Some(Provider::Ollama));
}

#[tokio::test]
async fn ollama_checks_its_requests() {
    let server = ProviderServer::start().await;
    for (body, message) in [
        (json!({ "input": ["x"] }), "model is required"),
        (json!({ "model": "m" }), "invalid input type"),
        (json!({ "model": "m", "input": [1, 2] }), "invalid input type"),
        (json!({ "model": "m", "input": ["x"], "inputs": ["y"] }), "unknown field \"inputs\""),
        (json!({ "model": "m", "input": ["x"], "dimensions": 0 }), "dimensions must be a positive integer"),
    ] {
        let got = post(&server, "/api/embed", &[], &body).await;
        assert_eq!(got.status, 400, "{body}");
        assert!(got.json()["error"].as_str().unwrap().contains(message), "{body}: {}", got.text);
    }
}

#[tokio::test]
async fn openai_embeds_each_input_with_its_index() {
    let server = ProviderServer::start().await;
    let body = json!({ "model": "text-embedding-3-small", "input": ["red", "blue"], "encoding_format": "float" });
    let got = post(&server, "/v1/embeddings", &[("authorization", "Bearer k")], &body).await;
    assert_eq!(got.status, 200, "{}", got.text);
    let v = got.json();
    assert_eq!((v["object"].as_str(), v["model"].as_str()), (Some("list"), Some("text-embedding-3-small")));
    assert_eq!(v["data"][1]["index"], 1);
    assert_eq!(v["data"][1]["object"], "embedding");
    assert_eq!(vector(&v["data"][1]["embedding"]), embedding("blue", EMBEDDING_DIMS));
    assert!(v["usage"]["prompt_tokens"].is_u64() && v["usage"]["total_tokens"].is_u64());
    let base64 = json!({ "model": "m", "input": "red", "encoding_format": "base64", "dimensions": 2 });
    let got = post(&server, "/embeddings", &[], &base64).await.json();
    let expected: Vec<u8> = embedding("red", 2).iter().flat_map(|f| f.to_le_bytes()).collect();
    assert_eq!(got["data"][0]["embedding"].as_str().unwrap().len(), 12, "8 bytes as base64");
    assert_eq!(decode_base64(got["data"][0]["embedding"].as_str().unwrap()), expected);
}

fn decode_base64(text: &str) -> Vec<u8> {
    const ALPHABET: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let sextets: Vec<u32> = text.trim_end_matches('=').chars().map(|c| ALPHABET.find(c).unwrap() as u32).collect();
    let mut out = Vec::new();
    for chunk in sextets.chunks(4) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, s)| n | s << (18 - 6 * i));
        out.extend(n.to_be_bytes()[1..chunk.len()].iter());
    }
    out
}

#[tokio::test]
async fn openai_checks_its_requests() {
    let server = ProviderServer::start().await;
    for (body, message) in [
        (json!({ "input": ["x"] }), "you must provide a model parameter"),
        (json!({ "model": "m" }), "Missing required parameter: 'input'."),
        (json!({ "model": "m", "input": "" }), "'$.input' is invalid"),
        (json!({ "model": "m", "input": ["x", ""] }), "'$.input' is invalid"),
        (json!({ "model": "m", "input": [] }), "'$.input' is invalid"),
        (json!({ "model": "m", "input": ["x"], "task": "search" }), "Unrecognized request argument supplied: task"),
        (json!({ "model": "m", "input": ["x"], "encoding_format": "int8" }), "Invalid value"),
    ] {
        let got = post(&server, "/v1/embeddings", &[], &body).await;
        assert_eq!(got.status, 400, "{body}");
        assert_eq!(got.json()["error"]["type"], "invalid_request_error");
        assert!(got.json()["error"]["message"].as_str().unwrap().contains(message), "{body}: {}", got.text);
    }
    let too_many = json!({ "model": "m", "input": vec!["x"; 2049] });
    assert_eq!(post(&server, "/v1/embeddings", &[], &too_many).await.status, 400);
}

#[tokio::test]
async fn gemini_embeds_each_request_in_order() {
    let server = ProviderServer::start().await;
    let model = "models/gemini-embedding-001";
    let body = json!({ "requests": [gemini_request(model, "red"), gemini_request(model, "blue")] });
    let got = post(&server, GEMINI, GEMINI_KEY, &body).await;
    assert_eq!(got.status, 200, "{}", got.text);
    let v = got.json();
    let values: Vec<Vec<f32>> = v["embeddings"].as_array().unwrap().iter().map(|e| vector(&e["values"])).collect();
    assert_eq!(values, [embedding("red", EMBEDDING_DIMS), embedding("blue", EMBEDDING_DIMS)]);
    let bare = post(&server, "/models/gemini-embedding-001:batchEmbedContents", GEMINI_KEY, &body).await;
    assert_eq!(bare.status, 200, "without the /v1beta prefix too");
}

#[tokio::test]
async fn gemini_checks_its_requests() {
    let server = ProviderServer::start().await;
    let model = "models/gemini-embedding-001";
    let ok = json!({ "requests": [gemini_request(model, "x")] });
    let got = post(&server, GEMINI, &[], &ok).await;
    assert_eq!((got.status, got.json()["error"]["status"].as_str()), (403, Some("PERMISSION_DENIED")));
    let mut extra_field = gemini_request(model, "x");
    extra_field["text"] = json!("x");
    for (body, message) in [
        (json!({ "requests": [] }), "requests is not specified"),
        (json!({ "requests": vec![gemini_request(model, "x"); 101] }), "at most 100 requests can be in one batch"),
        (json!({ "requests": [gemini_request("models/other", "x")] }), "must be the batch's model"),
        (json!({ "requests": [{ "content": { "parts": [{ "text": "x" }] } }] }), "model is not specified"),
        (json!({ "requests": [gemini_request(model, "")] }), "required oneof field 'data'"),
        (json!({ "requests": [extra_field] }), "Unknown name \"text\" at 'requests[0]'"),
        (json!({ "requests": [gemini_request(model, "x")], "model": model }), "Unknown name \"model\""),
    ] {
        let got = post(&server, GEMINI, GEMINI_KEY, &body).await;
        assert_eq!(got.status, 400, "{body}");
        assert_eq!(got.json()["error"]["status"], "INVALID_ARGUMENT");
        assert!(got.json()["error"]["message"].as_str().unwrap().contains(message), "{message}: {}", got.text);
    }
    let exactly_100 = json!({ "requests": vec![gemini_request(model, "x"); 100] });
    assert_eq!(post(&server, GEMINI, GEMINI_KEY, &exactly_100).await.status, 200);
}

#[tokio::test]
async fn scripted_faults_come_from_the_embeddings_queue_only() {
    let server = ProviderServer::start().await;
    server.push(Reply::text("for chat"));
    server.push_embedding(Reply::Overloaded);
    server.push_embedding(Reply::RateLimited { retry_after_secs: Some(2) });
    server.push_embedding(Reply::text("stands for the vectors"));
    server.push_embedding(Reply::Truncated);
    let body = json!({ "model": "m", "input": ["x"] });
    let got = post(&server, "/api/embed", &[], &body).await;
    assert_eq!(got.status, 503, "{}", got.text);
    assert!(got.json()["error"].is_string(), "Ollama's error shape");
    let got = post(&server, "/v1/embeddings", &[], &body).await;
    assert_eq!((got.status, got.header("retry-after")), (429, Some("2")));
    assert_eq!(got.json()["error"]["code"], "rate_limit_exceeded", "OpenAI's error shape");
    let got = post(&server, "/api/embed", &[], &body).await;
    assert_eq!(vectors(&got.json()["embeddings"]), [embedding("x", EMBEDDING_DIMS)]);
    let got = post(&server, "/api/embed", &[], &body).await;
    assert!(serde_json::from_str::<Value>(&got.text).is_err(), "cut short: {}", got.text);
    assert_eq!(server.pending_embeddings(), 0);
    assert_eq!(server.pending(), 1, "the chat queue is untouched");
    let rejected = post(&server, "/api/embed", &[], &json!({ "input": ["x"] })).await;
    assert_eq!(rejected.status, 400);
}
