//! Search by meaning end to end: the real binary over stdio with a small local model this test
//! writes (the real loading code, tiny data), the hybrid ranking a client sees, vectors kept
//! across a restart, and a start-up that names a missing model; the same through a provider's
//! embeddings endpoint (the testkit's scripted Ollama), whose failures never fail a commit.

use serde_json::{Value, json};

mod support;
use support::stdio::Mcp;

fn object(id: &str, name: &str, content: &str) -> Value {
    json!({"identity": {"id": id, "type": "Thing", "name": name}, "structure": {"content": content}})
}

#[tokio::test]
async fn hybrid_search_finds_by_meaning_and_keeps_its_vectors_across_a_restart() {
    let data = tempfile::tempdir().unwrap();
    let model = tempfile::tempdir().unwrap();
    cks_embed::static_model::write_sample(model.path(), "tiny-e2e").unwrap();
    let env = vec![
        ("CKS_EMBEDDING_PROVIDER", "local".to_owned()),
        ("CKS_EMBEDDING_MODEL", model.path().display().to_string()),
        ("CKS_SWEEPERS", "off".to_owned()),
    ];
    let mut mcp = Mcp::start(data.path(), &env).await;
    let graph =
        json!({"objects": [object("auto", "Automobile", "vehicle"), object("fruit", "Banana", "yellow fruit")]});
    let created = mcp.call("validate_knowledge", json!({"json_data": graph.to_string()})).await;
    let session = created["session_id"].as_str().unwrap_or_else(|| panic!("{created}")).to_owned();
    let search = json!({"session_id": session, "query": "car", "top_k": 1, "depth": 0});
    let found = mcp.call("search_semantic", search.clone()).await;
    assert_eq!(found["matched_seeds"], json!(["auto"]), "{found}");
    assert_eq!(found["ranking"], "hybrid");
    assert_eq!(found["embeddings"], json!({"model": "tiny-e2e", "pending": 0}));
    let lexical = mcp.call("search_semantic", json!({"session_id": session, "query": "car", "mode": "lexical"})).await;
    assert_eq!(lexical["error"], "not_found");
    drop(mcp);

    // The vectors are in the store: after a restart, with the model's table gone, the documents
    // still have theirs (only the query would need the table, and a failed query embedding
    // leaves a hybrid search to words).
    std::fs::remove_file(model.path().join("table.f32")).unwrap();
    let mut mcp = Mcp::start(data.path(), &env).await;
    let words = mcp.call("search_semantic", json!({"session_id": session, "query": "yellow", "depth": 0})).await;
    assert_eq!(words["matched_seeds"][0], "fruit", "{words}");
    assert_eq!(words["ranking"], "bm25");
    assert_eq!(words["embeddings"]["pending"], 0, "the stored vectors were read back: {words}");
}

#[test]
fn a_missing_local_model_stops_start_up_and_says_how_to_install_it() {
    let data = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_cks-mcp"))
        .env("CKS_MCP_DATA_DIR", data.path())
        .env("XDG_CACHE_HOME", cache.path())
        .env("CKS_EMBEDDING_PROVIDER", "local")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("CKS_EMBEDDING_PROVIDER=local") && stderr.contains("install-embedding-model"), "{stderr}");
}

/// Search by meaning through a provider (the testkit's scripted Ollama): the provider's first answers
/// are failures, which neither fail nor delay the commit (the runtime embeds in the background and tries
/// again), and once the vectors are in, search ranks by them under the provider's model name.
#[tokio::test]
async fn a_provider_embeds_in_the_background_and_its_failures_never_fail_a_commit() {
    let ollama = cks_testkit::ProviderServer::start().await;
    for _ in 0..3 {
        ollama.push_embedding(cks_testkit::Reply::Overloaded);
    }
    let data = tempfile::tempdir().unwrap();
    let env = vec![
        ("CKS_EMBEDDING_PROVIDER", "ollama".to_owned()),
        ("CKS_OLLAMA_HOST", ollama.base_url()),
        // Each failure reaches the runtime's worker rather than being retried inside one call.
        ("CKS_LLM_MAX_RETRIES", "0".to_owned()),
        ("CKS_SWEEPERS", "off".to_owned()),
    ];
    let mut mcp = Mcp::start(data.path(), &env).await;
    let graph =
        json!({"objects": [object("auto", "Automobile", "vehicle"), object("fruit", "Banana", "yellow fruit")]});
    let created = mcp.call("validate_knowledge", json!({"json_data": graph.to_string()})).await;
    let session = created["session_id"].as_str().unwrap_or_else(|| panic!("the commit failed: {created}")).to_owned();

    // A misspelt word: words alone find nothing, the vectors (character trigrams here) do.
    let search = json!({"session_id": session, "query": "banan", "top_k": 1, "depth": 0});
    let mut found = Value::Null;
    for _ in 0..40 {
        found = mcp.call("search_semantic", search.clone()).await;
        if found["ranking"] == "hybrid" && found["embeddings"]["pending"] == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    assert_eq!(found["ranking"], "hybrid", "{found}");
    assert_eq!(found["embeddings"], json!({"model": "ollama:nomic-embed-text", "pending": 0}), "{found}");
    assert_eq!(found["matched_seeds"], json!(["fruit"]), "{found}");
    let lexical =
        mcp.call("search_semantic", json!({"session_id": session, "query": "banan", "mode": "lexical"})).await;
    assert_eq!(lexical["error"], "not_found", "{lexical}");

    assert_eq!(ollama.pending_embeddings(), 0, "the three failures were met");
    let requests = ollama.requests();
    assert!(requests.len() > 3, "tried again after the failures: {}", requests.len());
    for r in &requests {
        assert_eq!((r.path.as_str(), &r.body["model"]), ("/api/embed", &json!("nomic-embed-text")));
    }
}

#[test]
fn a_provider_needing_a_model_stops_start_up_naming_the_variable() {
    let data = tempfile::tempdir().unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_cks-mcp"))
        .env("CKS_MCP_DATA_DIR", data.path())
        .env("CKS_EMBEDDING_PROVIDER", "google")
        .env("GOOGLE_API_KEY", "AIza-e2e-start-up")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("CKS_EMBEDDING_PROVIDER=google needs CKS_EMBEDDING_MODEL"), "{stderr}");
    assert!(!stderr.contains("AIza-e2e-start-up"), "{stderr}");
}
