//! Embeddings through each provider's endpoint against `cks-testkit`: requests the API accepts (its
//! checks and its published schema), vectors in the order of the texts across batches, transient faults
//! retried by the HTTP layer and then reported as retryable, answers of the wrong size refused, and no
//! key in any error or log line.

mod common;

use cks_embed::{EmbedError, Embedder};
use cks_llm::{ProviderEmbedder, ProviderKind};
use cks_testkit::{EMBEDDING_DIMS, ProviderServer, Reply, embedding};
use common::*;

/// The providers with an embeddings endpoint, each with the model its test names (`None`: the default).
const PROVIDERS: [(ProviderKind, Option<&str>); 3] = [
    (ProviderKind::Ollama, None),
    (ProviderKind::OpenaiCompatible, Some("text-embedding-3-small")),
    (ProviderKind::Google, Some("gemini-embedding-001")),
];

fn embedder(kind: ProviderKind, model: Option<&str>, server: &ProviderServer) -> ProviderEmbedder {
    ProviderEmbedder::new(&config_for(kind, &server.base_url()), kind, model).unwrap()
}

fn texts(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("text number {i} about topic {}", i % 7)).collect()
}

fn status(status: u16, body: &str) -> Reply {
    Reply::Status { status, headers: Vec::new(), body: body.to_owned() }
}

/// A 200 answer carrying these vectors, in the provider's shape.
fn answer(kind: ProviderKind, vectors: &[Vec<f32>]) -> Reply {
    let body = match kind {
        ProviderKind::Ollama => serde_json::json!({ "model": "m", "embeddings": vectors }),
        ProviderKind::OpenaiCompatible => serde_json::json!({
            "object": "list", "model": "m", "usage": { "prompt_tokens": 1, "total_tokens": 1 },
            "data": vectors.iter().enumerate()
                .map(|(index, v)| serde_json::json!({ "object": "embedding", "index": index, "embedding": v }))
                .collect::<Vec<_>>(),
        }),
        ProviderKind::Google => serde_json::json!({
            "embeddings": vectors.iter().map(|v| serde_json::json!({ "values": v })).collect::<Vec<_>>(),
        }),
        ProviderKind::Anthropic => unreachable!("no embeddings endpoint"),
    };
    status(200, &body.to_string())
}

fn assert_close(got: &[f32], expected: &[f32], what: &str) {
    assert_eq!(got.len(), expected.len(), "{what}");
    assert!(got.iter().zip(expected).all(|(a, b)| (a - b).abs() < 1e-6), "{what}: {got:?} vs {expected:?}");
}

#[tokio::test]
async fn vectors_come_back_in_the_order_of_the_texts_from_requests_the_api_accepts() {
    for (kind, model) in PROVIDERS {
        let server = ProviderServer::start().await;
        let embedder = embedder(kind, model, &server);
        let mut texts = texts(150);
        texts[3] = "  ".into();
        let vectors = embedder.embed(&texts).await.unwrap_or_else(|e| panic!("{kind}: {e}"));
        assert_eq!(vectors.len(), texts.len(), "{kind}");
        for (i, (text, vector)) in texts.iter().zip(&vectors).enumerate() {
            let expected = if i == 3 { vec![0.0; EMBEDDING_DIMS] } else { embedding(text, EMBEDDING_DIMS) };
            assert_close(vector, &expected, &format!("{kind}, text {i}"));
        }
        // The blank text was not sent; the rest went in the provider's batches.
        let requests = chat_requests(&server);
        let batch = embedder.batch_size();
        assert_eq!(requests.len(), 149usize.div_ceil(batch), "{kind}: batches of {batch}");
        assert_eq!(assert_requests_valid(&server), requests.len(), "{kind}: every request fits the published schema");
        assert!(requests.iter().all(|r| !r.raw_body.contains("\"  \"")), "{kind}: the blank text is not sent");
        let first = &requests[0];
        match kind {
            ProviderKind::Ollama => {
                assert_eq!(first.path, "/api/embed");
                assert_eq!(first.body["model"], "nomic-embed-text", "the default embedding model");
                assert_eq!(embedder.model(), "ollama:nomic-embed-text");
            }
            ProviderKind::OpenaiCompatible => {
                assert_eq!(first.path, "/v1/embeddings");
                let bearer = format!("Bearer {}", secret("CKS_OPENAI_API_KEY"));
                assert_eq!(first.header("authorization"), Some(bearer.as_str()));
                assert_eq!(embedder.model(), "openai_compatible:text-embedding-3-small");
            }
            ProviderKind::Google => {
                assert_eq!(first.path, "/v1beta/models/gemini-embedding-001:batchEmbedContents");
                assert_eq!(first.header("x-goog-api-key"), Some(secret("CKS_GOOGLE_API_KEY")));
                assert_eq!(first.body["requests"][0]["model"], "models/gemini-embedding-001");
                assert_eq!(embedder.model(), "google:gemini-embedding-001");
            }
            ProviderKind::Anthropic => unreachable!(),
        }
        assert_eq!(embedder.embed(&[" ".into()]).await.unwrap(), [Vec::<f32>::new()], "{kind}: nothing to send");
    }
}

#[tokio::test]
async fn transient_faults_are_retried_by_the_http_layer() {
    for (kind, model) in PROVIDERS {
        let server = ProviderServer::start().await;
        server.push_embedding(Reply::Overloaded);
        server.push_embedding(Reply::RateLimited { retry_after_secs: None });
        server.push_embedding(Reply::DropConnection);
        let vectors = embedder(kind, model, &server).embed(&["red".into()]).await;
        assert_eq!(vectors.unwrap_or_else(|e| panic!("{kind}: {e}")).len(), 1);
        assert_eq!(chat_requests(&server).len(), 4, "{kind}: three faults, then the answer");
    }
}

#[tokio::test]
async fn a_fault_that_persists_is_a_retryable_provider_error_and_a_refusal_a_model_error_without_keys() {
    let logs = capture_logs();
    for (kind, model) in PROVIDERS {
        let server = ProviderServer::start().await;
        for _ in 0..4 {
            server.push_embedding(Reply::Overloaded);
        }
        let error = embedder(kind, model, &server).embed(&["red".into()]).await.unwrap_err();
        let EmbedError::Provider(message) = &error else { panic!("{kind}: {error:?}") };
        assert!(message.contains("overloaded") && message.contains("4 attempts"), "{kind}: {message}");
        assert_eq!(chat_requests(&server).len(), 4, "{kind}");

        // A refused key, echoed back by the provider: not worth retrying as is, and redacted.
        let echoed = [secret("CKS_OPENAI_API_KEY"), secret("CKS_GOOGLE_API_KEY")].join(" ");
        let body = match kind {
            ProviderKind::Ollama => serde_json::json!({ "error": format!("unauthorized: {echoed}") }),
            ProviderKind::OpenaiCompatible => serde_json::json!({ "error": {
                "message": format!("Incorrect API key provided: {echoed}"), "type": "invalid_request_error",
                "param": null, "code": "invalid_api_key" } }),
            _ => serde_json::json!({ "error": {
                "code": 401, "message": format!("API key not valid: {echoed}"), "status": "UNAUTHENTICATED" } }),
        };
        server.push_embedding(status(401, &body.to_string()));
        let error = embedder(kind, model, &server).embed(&["red".into()]).await.unwrap_err();
        let EmbedError::Model(message) = &error else { panic!("{kind}: {error:?}") };
        assert!(message.contains("authentication failed") && message.contains("[REDACTED]"), "{kind}: {message}");
        assert_no_secret(&format!("{kind} error"), message);
    }
    assert_no_secret("the log", &logs.text());
}

#[tokio::test]
async fn an_answer_of_the_wrong_size_is_refused() {
    for (kind, model) in PROVIDERS {
        let server = ProviderServer::start().await;
        let embedder = embedder(kind, model, &server);
        let two: Vec<String> = vec!["red".into(), "blue".into()];
        server.push_embedding(answer(kind, &[vec![1.0, 0.0]]));
        let error = embedder.embed(&two).await.unwrap_err();
        let EmbedError::Provider(message) = &error else { panic!("{kind}: {error:?}") };
        assert!(message.contains("1 vectors came back for 2 texts"), "{kind}: {message}");

        server.push_embedding(answer(kind, &[vec![1.0, 0.0], vec![1.0, 0.0, 0.0]]));
        let error = embedder.embed(&two).await.unwrap_err();
        assert!(error.to_string().contains("vectors of 2 and of 3 dimensions"), "{kind}: {error}");

        server.push_embedding(answer(kind, &[vec![], vec![]]));
        let error = embedder.embed(&two).await.unwrap_err();
        assert!(error.to_string().contains("vectors are empty"), "{kind}: {error}");

        server.push_embedding(status(200, "<html>502 Bad Gateway</html>"));
        let error = embedder.embed(&two).await.unwrap_err();
        assert!(matches!(error, EmbedError::Provider(_)) && error.to_string().contains("malformed"), "{kind}: {error}");
    }
}

#[tokio::test]
async fn openai_vectors_are_put_in_order_by_their_index() {
    let server = ProviderServer::start().await;
    let embedder = embedder(ProviderKind::OpenaiCompatible, Some("m"), &server);
    let entry =
        |index: usize, v: [f32; 2]| serde_json::json!({ "object": "embedding", "index": index, "embedding": v });
    let body = |data: Vec<serde_json::Value>| {
        serde_json::json!({ "object": "list", "model": "m", "data": data,
                            "usage": { "prompt_tokens": 2, "total_tokens": 2 } })
        .to_string()
    };
    server.push_embedding(status(200, &body(vec![entry(1, [0.0, 1.0]), entry(0, [1.0, 0.0])])));
    let vectors = embedder.embed(&["first".into(), "second".into()]).await.unwrap();
    assert_eq!(vectors, [vec![1.0, 0.0], vec![0.0, 1.0]]);
    server.push_embedding(status(200, &body(vec![entry(0, [0.0, 1.0]), entry(0, [1.0, 0.0])])));
    let error = embedder.embed(&["first".into(), "second".into()]).await.unwrap_err();
    assert!(error.to_string().contains("numbers its 2 vectors wrongly"), "{error}");
}

#[tokio::test]
async fn a_model_the_provider_does_not_have_is_a_model_error() {
    let server = ProviderServer::start().await;
    server.push_embedding(status(404, r#"{"error":"model \"nomic-embed-text\" not found, try pulling it first"}"#));
    let error = embedder(ProviderKind::Ollama, None, &server).embed(&["red".into()]).await.unwrap_err();
    let EmbedError::Model(message) = &error else { panic!("{error:?}") };
    assert!(message.contains("not found, try pulling it first"), "{message}");
    assert_eq!(chat_requests(&server).len(), 1, "not retried");
}
