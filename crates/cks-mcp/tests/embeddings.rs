//! Search by meaning end to end: the real binary over stdio with a small local model this test
//! writes (the real loading code, tiny data), the hybrid ranking a client sees, vectors kept
//! across a restart, and a start-up that names a missing model.

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
