//! Per-principal limits over HTTP (the router with OAuth, tokens signed with the test-only keys)
//! and over stdio (the real binary): a call over its principal's calls in flight, or a request
//! over its rate, gets 429 with `Retry-After` and a JSON body naming the limit; another principal
//! is admitted meanwhile; a call ended frees its place; over stdio the refusal is a business error.

use std::sync::{Arc, LazyLock};
use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use cks_mcp::auth::{AuthSettings, KeySet, OAuth, Validator};
use cks_mcp::limits::{Caps, Settings};
use cks_tools::{Tool, ToolContext, ToolError, ToolMeta};

mod support;
use support::{text_result, tool_call};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/oauth");
const ISSUER: &str = "https://id.example.com";

/// Permits the `hold` calls wait for: each call takes one, so the test ends them one by one.
static RELEASE: LazyLock<Semaphore> = LazyLock::new(|| Semaphore::new(0));
/// One permit per `hold` call that has started: the test waits for its calls to be in flight.
static STARTED: LazyLock<Semaphore> = LazyLock::new(|| Semaphore::new(0));

/// A call that stays in flight until the test releases it.
struct Hold;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Nothing {}

#[derive(serde::Serialize, schemars::JsonSchema)]
struct Held {
    held: bool,
}

#[async_trait::async_trait]
impl Tool for Hold {
    type Input = Nothing;
    type Output = Held;
    const META: ToolMeta = ToolMeta {
        name: "hold",
        description: "Stays in flight until the test releases it.",
        mutates_graph: false,
        creates_session: false,
        destructive: false,
        idempotent: true,
        open_world: false,
        session_fields: &[],
        session_checks: &[],
        llm_exposed: false,
    };

    async fn run(&self, _: &ToolContext, _: Nothing) -> Result<Held, ToolError> {
        STARTED.add_permits(1);
        RELEASE.acquire().await.map_err(|e| ToolError::internal(e.to_string()))?.forget();
        Ok(Held { held: true })
    }
}

/// The router with OAuth and `settings`, on a free loopback port; its base URL.
async fn serve(settings: Settings) -> String {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let base = format!("http://{addr}");
    let auth = AuthSettings {
        issuer: ISSUER.into(),
        audience: format!("{base}/mcp"),
        public_url: base.clone(),
        scope_claim: "scope".into(),
        groups_claim: "groups".into(),
        page_client_id: None,
        builtin: false,
    };
    let jwks: Value = serde_json::from_str(&std::fs::read_to_string(format!("{DATA}/jwks.json")).unwrap()).unwrap();
    let validator = Validator::new(&auth, Arc::new(KeySet::fixed(&jwks)));
    let oauth = Arc::new(OAuth { settings: auth, validator, page: None });
    let runtime = Arc::new(cks_runtime::Runtime::new(
        Arc::new(cks_runtime::store::memory::MemoryStore::new()),
        cks_runtime::RuntimeConfig::default(),
    ));
    let mut registry = cks_tools::Registry::standard();
    registry.register(Arc::new(Hold));
    let server = cks_mcp::server::CksServer::new(runtime, Arc::new(registry), cks_tools::LlmAccess::Absent)
        .with_limits(settings);
    let config = cks_mcp::http::HttpConfig {
        token: None,
        allowed_origins: vec![],
        bind: Some(addr),
        max_body_bytes: 1 << 20,
        oauth: Some(oauth),
        keys: None,
        keys_only: false,
        issuer: None,
    };
    tokio::spawn(async move { axum::serve(listener, cks_mcp::http::router(server, config)).await });
    base
}

/// A `cks:write` token for `subject`.
fn token(base: &str, subject: &str) -> String {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
    let claims = json!({"iss": ISSUER, "sub": subject, "aud": format!("{base}/mcp"), "scope": "cks:write",
        "exp": now + 300});
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some("rsa-1".into());
    let key = EncodingKey::from_rsa_pem(&std::fs::read(format!("{DATA}/rsa-private.pem")).unwrap()).unwrap();
    jsonwebtoken::encode(&header, &claims, &key).unwrap()
}

/// A bare JSON-RPC tool call.
async fn call(base: &str, token: &str, name: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{base}/mcp"))
        .bearer_auth(token)
        .json(&tool_call(name, json!({})))
        .send()
        .await
        .unwrap()
}

/// Asserts a 429 naming `limit`; its `Retry-After` in seconds.
async fn refused(response: reqwest::Response, limit: &str) -> u64 {
    assert_eq!(response.status(), 429);
    let retry_after = response.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    let body: Value = response.json().await.unwrap();
    assert_eq!((body["error"].as_str(), body["limit"].as_str()), (Some("rate_limited"), Some(limit)), "{body}");
    assert!(body["message"].as_str().unwrap().contains(&body["value"].to_string()), "{body}");
    retry_after
}

#[tokio::test]
async fn a_principal_over_its_calls_in_flight_is_refused_and_another_is_not() {
    let base = serve(Settings { principals: Caps { concurrent_calls: 2, ..Caps::NONE }, local: Caps::NONE }).await;
    let (alice, bob) = (token(&base, "alice"), token(&base, "bob"));
    let held: Vec<_> = (0..2)
        .map(|_| {
            let (base, alice) = (base.clone(), alice.clone());
            tokio::spawn(async move { call(&base, &alice, "hold").await })
        })
        .collect();
    STARTED.acquire_many(2).await.unwrap().forget();

    assert_eq!(refused(call(&base, &alice, "hold").await, "concurrent_calls").await, 1);
    // A chat turn is a call too.
    let chat = reqwest::Client::new().post(format!("{base}/chat/stream")).bearer_auth(&alice).json(&json!({}));
    refused(chat.send().await.unwrap(), "concurrent_calls").await;
    // Bob is not held back by Alice's calls.
    let reply: Value = call(&base, &bob, "list_graphs").await.json().await.unwrap();
    assert!(text_result(&reply).get("error").is_none(), "{reply}");

    // One of Alice's calls ends: her next one is admitted.
    RELEASE.add_permits(1);
    let first = futures::future::select_all(held).await.0.unwrap();
    assert_eq!(text_result(&first.json().await.unwrap()), json!({"held": true}));
    let reply: Value = call(&base, &alice, "list_graphs").await.json().await.unwrap();
    assert!(text_result(&reply).get("error").is_none(), "{reply}");
    RELEASE.add_permits(1);
}

#[tokio::test]
async fn a_principal_over_its_rate_is_told_when_to_come_back() {
    // One request a minute, one in the bucket.
    let base = serve(Settings { principals: Caps { requests_per_minute: 1, ..Caps::NONE }, local: Caps::NONE }).await;
    let (alice, bob) = (token(&base, "alice"), token(&base, "bob"));
    assert_eq!(call(&base, &alice, "list_graphs").await.status(), 200);
    let retry_after = refused(call(&base, &alice, "list_graphs").await, "requests_per_minute").await;
    // A whole minute less the moment since the first request, rounded up.
    assert!((59..=60).contains(&retry_after), "{retry_after}");
    let health = reqwest::Client::new().get(format!("{base}/health")).bearer_auth(&alice).send().await.unwrap();
    refused(health, "requests_per_minute").await;
    assert_eq!(call(&base, &bob, "list_graphs").await.status(), 200, "Bob has a bucket of his own");
}

#[tokio::test]
async fn over_stdio_a_call_over_a_limit_is_a_business_error() {
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("CKS_MCP_DB_PATH", ":memory:".to_owned()),
        ("CKS_SWEEPERS", "off".to_owned()),
        ("CKS_EMBEDDING_PROVIDER", "none".to_owned()),
        ("CKS_MCP_LIMIT_REQUESTS_PER_MINUTE", "1".to_owned()),
    ];
    let mut mcp = support::stdio::Mcp::start(dir.path(), &env).await;
    assert!(mcp.call("list_graphs", json!({})).await.get("error").is_none());
    let reply = mcp.request("tools/call", json!({"name": "list_graphs", "arguments": {}})).await;
    assert_eq!(reply["result"]["isError"], true, "{reply}");
    let result = &reply["result"]["structuredContent"];
    assert_eq!(
        (result["error"].as_str(), result["limit"].as_str()),
        (Some("rate_limited"), Some("requests_per_minute"))
    );
    assert!(result["message"].as_str().unwrap().contains("CKS_MCP_LIMIT_REQUESTS_PER_MINUTE=1"), "{result}");
    // Other requests are not tool calls: they go through.
    assert!(mcp.request("tools/list", json!({})).await["result"]["tools"].is_array());
}
