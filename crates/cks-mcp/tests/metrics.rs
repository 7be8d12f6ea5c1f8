//! `GET /metrics` against the real binary: a tool call, a business error and an LLM call (a
//! scripted provider's) are counted with their labels, and a scrape holds no secret, no session
//! and none of what was said.

use serde_json::json;
use std::time::{Duration, Instant};

use cks_testkit::{ProviderServer, Reply};

mod support;
use support::provider_env;
use support::stdio::Mcp;

/// The value of the sample written exactly as `series` (name and labels), if any.
fn sample(scrape: &str, series: &str) -> Option<f64> {
    scrape.lines().find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test]
async fn a_scrape_counts_tool_calls_errors_and_llm_calls() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let provider = ProviderServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let args = vec!["--http".to_owned(), format!("127.0.0.1:{port}")];
    let env = provider_env("anthropic", &provider.base_url());
    let mut mcp = Mcp::start_with_args(dir.path(), &env, &args).await;
    let http = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while http.get(format!("{base}/health")).send().await.is_err() {
        assert!(Instant::now() < deadline, "HTTP did not come up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let graph = json!({"objects": [{"identity": {"id": "a", "type": "Claim", "name": "Sky is green"}}]});
    let created = mcp.call("validate_knowledge", json!({"json_data": graph.to_string()})).await;
    let session = created["session_id"].as_str().unwrap().to_owned();
    let update = json!([{"type": "update_object", "object_id": "a", "structure_patch": {"checked": true}}]);
    let evolved = mcp.call("evolve_knowledge", json!({"session_id": session, "operations": update})).await;
    assert!(evolved["version_id"].is_string(), "{evolved}");
    let missing = mcp.call("list_versions", json!({"session_id": "no-such-session"})).await;
    assert_eq!(missing["error"], "session_not_found", "{missing}");
    provider.push(Reply::text("The sky is said to be green.").with_usage(11, 7));
    let chat = mcp.call("ai_chat", json!({"session_id": session, "prompt": "What colour is the sky?"})).await;
    assert!(chat["reply"].as_str().is_some_and(|r| r.contains("green")), "{chat}");

    let response = http.get(format!("{base}/metrics")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(content_type.starts_with("application/openmetrics-text"), "{content_type}");
    let scrape = response.text().await.unwrap();
    let calls = |tool: &str, outcome: &str| {
        sample(&scrape, &format!("cks_tool_calls_total{{tool=\"{tool}\",outcome=\"{outcome}\"}}"))
    };
    assert_eq!(calls("validate_knowledge", "ok"), Some(1.0), "{scrape}");
    assert_eq!(calls("list_versions", "error"), Some(1.0), "{scrape}");
    let code = "cks_tool_errors_total{tool=\"list_versions\",code=\"session_not_found\"}";
    assert_eq!(sample(&scrape, code), Some(1.0), "{scrape}");
    let count = "cks_tool_call_duration_seconds_count{tool=\"ai_chat\"}";
    assert_eq!(sample(&scrape, count), Some(1.0), "{scrape}");
    let llm = "cks_llm_calls_total{provider=\"anthropic\",outcome=\"ok\"}";
    assert_eq!(sample(&scrape, llm), Some(1.0), "{scrape}");
    let tokens = |direction: &str| {
        sample(&scrape, &format!("cks_llm_tokens_total{{provider=\"anthropic\",direction=\"{direction}\"}}"))
    };
    assert_eq!((tokens("input"), tokens("output")), (Some(11.0), Some(7.0)), "{scrape}");
    let commits = sample(&scrape, "cks_commit_duration_seconds_count");
    assert_eq!(sample(&scrape, "cks_commit_duration_seconds_bucket{le=\"+Inf\"}"), commits, "{scrape}");
    assert!(commits.is_some_and(|n| n >= 1.0), "the evolve_knowledge commit: {scrape}");
    assert!(sample(&scrape, "cks_commit_duration_seconds_sum").is_some_and(|s| s > 0.0), "{scrape}");
    assert_eq!(sample(&scrape, "cks_objects_loaded"), Some(1.0), "the one session's one object: {scrape}");
    assert!(!scrape.contains("cks_store_connections"), "SQLite pools no connections: {scrape}");
    assert!(scrape.ends_with("# EOF\n"));
    for secret in ["sk-ant-e2e-secret", session.as_str(), "green", "no-such-session"] {
        assert!(!scrape.contains(secret), "the scrape holds {secret}");
    }
}
