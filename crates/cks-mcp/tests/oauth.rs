//! OAuth over HTTP against the real binary: a local issuer (discovery document and key set, signed
//! with the test-only keys in `tests/data/oauth/`) and `cks-mcp --http` configured for it.
//! Bad tokens are refused with the right status and challenge and change nothing; each scope lets
//! through what it allows; no token's text reaches a response or the log; a session belongs to
//! the principal who made it until it is shared.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::routing::get;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};

mod support;
use support::{text_result, tool_call};

use cks_mcp::auth::{AuthSettings, KeySet, OAuth, Validator};
use cks_tools::{Tool, ToolContext, ToolError, ToolMeta};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/oauth");

/// A local authorization server's public face: its discovery document and key set. Counts the
/// key set's fetches.
struct Issuer {
    url: String,
    jwks_fetches: Arc<AtomicUsize>,
}

impl Issuer {
    async fn start() -> Issuer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let jwks: Value = serde_json::from_str(&std::fs::read_to_string(format!("{DATA}/jwks.json")).unwrap()).unwrap();
        let jwks_fetches = Arc::new(AtomicUsize::new(0));
        let counter = jwks_fetches.clone();
        let document = json!({
            "issuer": url,
            "jwks_uri": format!("{url}/jwks"),
            "authorization_endpoint": format!("{url}/auth"),
            "token_endpoint": format!("{url}/token"),
            "code_challenge_methods_supported": ["S256"],
        });
        // Only OpenID Connect's document: the server tries OAuth's place first, then this one.
        let app = axum::Router::new()
            .route("/.well-known/openid-configuration", get(move || async move { axum::Json(document) }))
            .route(
                "/jwks",
                get(move || async move {
                    counter.fetch_add(1, Ordering::SeqCst);
                    axum::Json(jwks)
                }),
            );
        tokio::spawn(async move { axum::serve(listener, app).await });
        Issuer { url, jwks_fetches }
    }
}

/// `cks-mcp --http` with OAuth, on a free loopback port; its stderr goes to a file.
struct Server {
    child: Child,
    base: String,
    client: reqwest::Client,
    data: tempfile::TempDir,
}

impl Server {
    async fn start(issuer: &Issuer) -> Server {
        Server::start_with(issuer, &[]).await
    }

    /// The same, with more variables set.
    async fn start_with(issuer: &Issuer, variables: &[(&str, &str)]) -> Server {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let base = format!("http://127.0.0.1:{port}");
        let data = tempfile::tempdir().unwrap();
        let child = command(&data, port)
            .env("CKS_MCP_AUTH_ISSUER", &issuer.url)
            .env("CKS_MCP_PUBLIC_URL", &base)
            .envs(variables.iter().copied())
            .stderr(std::fs::File::create(data.path().join("stderr.log")).unwrap())
            .spawn()
            .unwrap();
        let server = Server { child, base, client: reqwest::Client::new(), data };
        let deadline = Instant::now() + Duration::from_secs(30);
        // Any answer will do: /health needs a token too.
        while server.client.get(format!("{}/health", server.base)).send().await.is_err() {
            assert!(Instant::now() < deadline, "the server did not come up: {}", server.stderr());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        server
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.data.path().join("stderr.log")).unwrap_or_default()
    }

    /// A bare JSON-RPC request to `/mcp` with `token`.
    async fn post(&self, token: Option<&str>, body: &Value) -> reqwest::Response {
        let mut request = self.client.post(format!("{}/mcp", self.base)).json(body);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request.send().await.unwrap()
    }

    /// A tool call that must succeed; its result.
    async fn call(&self, token: &str, name: &str, arguments: Value) -> Value {
        let response = self.post(Some(token), &tool_call(name, arguments)).await;
        assert_eq!(response.status(), 200, "{name}");
        let reply: Value = response.json().await.unwrap();
        let result = text_result(&reply);
        assert!(result.get("error").is_none(), "{name}: {result}");
        result
    }

    fn metadata_url(&self) -> String {
        format!("{}/.well-known/oauth-protected-resource/mcp", self.base)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn command(data: &tempfile::TempDir, port: u16) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_cks-mcp"));
    command
        .args(["--http", &format!("127.0.0.1:{port}"), "--no-stdio"])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", data.path())
        .env("CKS_MCP_DATA_DIR", data.path())
        .env("CKS_MCP_DB_PATH", ":memory:")
        .env("CKS_SWEEPERS", "off")
        .env("CKS_EMBEDDING_PROVIDER", "none")
        // Refusals are logged at info: the log must still hold no token.
        .env("CKS_MCP_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    command
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

/// What a test token says; each test changes what it checks.
struct Claims {
    issuer: String,
    audience: Value,
    scope: &'static str,
    expires: u64,
    not_before: Option<u64>,
}

impl Claims {
    fn new(issuer: &Issuer, server: &Server, scope: &'static str) -> Claims {
        Claims {
            issuer: issuer.url.clone(),
            audience: json!(format!("{}/mcp", server.base)),
            scope,
            expires: now() + 300,
            not_before: None,
        }
    }

    fn json(&self) -> Value {
        let mut claims = json!({
            "iss": self.issuer, "sub": "client-1", "aud": self.audience, "scope": self.scope,
            "exp": self.expires, "iat": now(), "client_id": "client-1", "jti": rand_id().to_string(),
            "groups": ["curators"],
        });
        if let Some(nbf) = self.not_before {
            claims["nbf"] = json!(nbf);
        }
        claims
    }

    fn signed_rsa(&self) -> String {
        sign(Algorithm::RS256, Some("rsa-1"), &self.json())
    }
}

fn rand_id() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().subsec_nanos() as u64
}

fn sign(alg: Algorithm, kid: Option<&str>, claims: &Value) -> String {
    let mut header = Header::new(alg);
    header.kid = kid.map(str::to_owned);
    header.typ = Some("at+jwt".into());
    let key = match alg {
        Algorithm::ES256 => {
            EncodingKey::from_ec_pem(&std::fs::read(format!("{DATA}/ec-private.pem")).unwrap()).unwrap()
        }
        _ => EncodingKey::from_rsa_pem(&std::fs::read(format!("{DATA}/rsa-private.pem")).unwrap()).unwrap(),
    };
    jsonwebtoken::encode(&header, claims, &key).unwrap()
}

/// Unpadded base64url, as JWTs use.
fn b64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |acc, (i, b)| acc | (*b as u32) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

/// A token with `alg: none` and no signature.
fn unsigned(claims: &Value) -> String {
    let header = b64(br#"{"alg":"none","typ":"at+jwt","kid":"rsa-1"}"#);
    format!("{header}.{}.", b64(claims.to_string().as_bytes()))
}

/// A token signed with HMAC, the issuer's public key (as published) as the secret.
fn hmac_with_public_key(claims: &Value) -> String {
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some("rsa-1".into());
    let secret = std::fs::read(format!("{DATA}/rsa-public.pem")).unwrap();
    jsonwebtoken::encode(&header, claims, &EncodingKey::from_secret(&secret).unwrap()).unwrap()
}

/// Every version of the session, as a token with `cks:read` sees them.
async fn versions(server: &Server, token: &str, session: &str) -> usize {
    let listed = server.call(token, "list_versions", json!({"session_id": session})).await;
    listed["versions"].as_array().map_or(0, Vec::len)
}

fn challenge(response: &reqwest::Response) -> String {
    response.headers().get("www-authenticate").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default()
}

#[tokio::test]
async fn bad_tokens_are_refused_with_a_challenge_and_change_nothing() {
    let issuer = Issuer::start().await;
    let server = Server::start(&issuer).await;
    let admin = Claims::new(&issuer, &server, "cks:admin").signed_rsa();
    let reader = Claims::new(&issuer, &server, "openid cks:read").signed_rsa();
    let graph = json!({"objects": [{"identity": {"id": "a", "type": "T", "name": "A"}}]}).to_string();
    let created = server.call(&admin, "validate_knowledge", json!({"json_data": graph})).await;
    let session = created["session_id"].as_str().unwrap().to_owned();
    let before = versions(&server, &reader, &session).await;
    let ops = json!([{"type": "add_object", "identity": {"id": "b", "type": "T", "name": "B"}}]);
    let write = tool_call("evolve_knowledge", json!({"session_id": session, "operations": ops}));

    // No token: where to learn how to get one.
    let response = server.post(None, &write).await;
    assert_eq!(response.status(), 401);
    assert_eq!(
        challenge(&response),
        format!("Bearer resource_metadata=\"{}\", scope=\"cks:read cks:write\"", server.metadata_url())
    );

    let good = || Claims::new(&issuer, &server, "cks:write");
    let mut expired = good();
    expired.expires = now() - 120;
    let mut early = good();
    early.not_before = Some(now() + 600);
    let mut elsewhere = good();
    elsewhere.audience = json!(["https://other.example.com/mcp"]);
    let mut other_issuer = good();
    other_issuer.issuer = "https://id.example.com".into();
    let mut tampered = good().signed_rsa();
    let last = tampered.pop().unwrap();
    tampered.push(if last == 'A' { 'B' } else { 'A' });
    let mut payload_changed = good().signed_rsa().split('.').map(str::to_owned).collect::<Vec<_>>();
    let mut claims = good().json();
    claims["scope"] = json!("cks:admin");
    payload_changed[1] = b64(claims.to_string().as_bytes());
    let wrong_kid = sign(Algorithm::RS256, Some("rotated-away"), &good().json());
    let bad = [
        ("expired", expired.signed_rsa()),
        ("not yet valid", early.signed_rsa()),
        ("other audience", elsewhere.signed_rsa()),
        ("other issuer", other_issuer.signed_rsa()),
        ("tampered signature", tampered),
        ("changed payload", payload_changed.join(".")),
        ("alg none", unsigned(&good().json())),
        ("HS256 with the public key", hmac_with_public_key(&good().json())),
        ("unknown key id", wrong_kid.clone()),
        ("not a JWT", "opaque-token-0123456789".to_owned()),
    ];
    for (what, token) in &bad {
        let response = server.post(Some(token), &write).await;
        assert_eq!(response.status(), 401, "{what}");
        let header = challenge(&response);
        assert!(header.starts_with("Bearer error=\"invalid_token\""), "{what}: {header}");
        assert!(header.contains(&format!("resource_metadata=\"{}\"", server.metadata_url())), "{what}: {header}");
        let body = response.text().await.unwrap();
        assert!(!body.contains(token.as_str()) && !header.contains(token.as_str()), "{what}: the token came back");
    }

    // A stream of unknown key ids costs at most one fetch of the key set.
    let fetches = issuer.jwks_fetches.load(Ordering::SeqCst);
    for _ in 0..20 {
        assert_eq!(server.post(Some(&wrong_kid), &write).await.status(), 401);
    }
    assert!(issuer.jwks_fetches.load(Ordering::SeqCst) <= fetches + 1, "the key set was fetched per request");

    // Too little scope: a 403 naming the scope to ask for.
    let response = server.post(Some(&reader), &write).await;
    assert_eq!(response.status(), 403);
    assert_eq!(
        challenge(&response),
        format!(
            "Bearer error=\"insufficient_scope\", scope=\"cks:write\", resource_metadata=\"{}\"",
            server.metadata_url()
        )
    );
    let writer = good().signed_rsa();
    let export = tool_call("export_storage", json!({"output_path": server.data.path().join("b.json")}));
    let response = server.post(Some(&writer), &export).await;
    assert_eq!(response.status(), 403);
    assert!(challenge(&response).contains("scope=\"cks:admin\""));
    assert!(!server.data.path().join("b.json").exists());
    let chat = server.client.post(format!("{}/chat/stream", server.base)).bearer_auth(&reader).json(&json!({}));
    let response = chat.send().await.unwrap();
    assert_eq!(response.status(), 403, "a chat turn needs cks:write");

    assert_eq!(versions(&server, &reader, &session).await, before, "a refused call changed the graph");
    let log = server.stderr();
    for (what, token) in &bad {
        assert!(!log.contains(token.as_str()), "{what}: the token is in the log");
    }
    assert!(!log.contains(&reader) && !log.contains(&admin));
    assert!(log.contains("access token refused"), "refusals are logged (without the token): {log}");
}

#[tokio::test]
async fn each_scope_lets_through_what_it_allows() {
    let issuer = Issuer::start().await;
    let server = Server::start(&issuer).await;

    // The metadata needs no token.
    for path in ["/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"] {
        let metadata: Value =
            server.client.get(format!("{}{path}", server.base)).send().await.unwrap().json().await.unwrap();
        assert_eq!(metadata["resource"], json!(format!("{}/mcp", server.base)), "{path}");
        assert_eq!(metadata["authorization_servers"], json!([issuer.url]));
        assert_eq!(metadata["scopes_supported"], json!(["cks:read", "cks:write", "cks:admin"]));
        assert_eq!(metadata["bearer_methods_supported"], json!(["header"]));
    }

    // cks:read (as an `scp` array, signed with the EC key): list the tools, call a reading tool.
    let mut claims = Claims::new(&issuer, &server, "").json();
    claims.as_object_mut().unwrap().remove("scope");
    claims["scp"] = json!(["cks:read"]);
    let reader = sign(Algorithm::ES256, Some("ec-1"), &claims);
    let listed: Value = server
        .post(Some(&reader), &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .await
        .json()
        .await
        .unwrap();
    let names: Vec<&str> =
        listed["result"]["tools"].as_array().into_iter().flatten().filter_map(|tool| tool["name"].as_str()).collect();
    assert!(names.contains(&"query_subgraph") && names.contains(&"find_tools"), "{listed}");
    let health = server.client.get(format!("{}/health", server.base)).bearer_auth(&reader).send().await.unwrap();
    assert_eq!(health.status(), 200);
    let events = server.client.get(format!("{}/events", server.base)).bearer_auth(&reader).send().await.unwrap();
    assert_eq!(events.status(), 200);
    drop(events);

    // cks:write changes a graph; a token within the clock skew still counts.
    let mut writer = Claims::new(&issuer, &server, "cks:write");
    writer.expires = now() - 20;
    let writer = writer.signed_rsa();
    let graph = json!({"objects": [{"identity": {"id": "a", "type": "T", "name": "A"}}]}).to_string();
    let session = server.call(&writer, "validate_knowledge", json!({"json_data": graph})).await["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let ops = json!([{"type": "add_object", "identity": {"id": "b", "type": "T", "name": "B"}}]);
    server.call(&writer, "evolve_knowledge", json!({"session_id": session, "operations": ops})).await;
    let read = server.call(&reader, "query_subgraph", json!({"session_id": session, "seed_ids": ["b"]})).await;
    assert!(read["subgraph"].as_str().is_some_and(|graph| graph.contains("\"name\": \"B\"")), "{read}");

    // cks:admin reaches the storage tools.
    let admin = Claims::new(&issuer, &server, "cks:admin").signed_rsa();
    let file = server.data.path().join("backup.json");
    let exported = server.call(&admin, "export_storage", json!({"output_path": file})).await;
    assert_eq!(exported["summary"]["sessions"], 1, "{exported}");
    assert!(file.exists());

    // The metrics are the operator's: a reader is refused, the admin scrapes them.
    let metrics = |token: &str| server.client.get(format!("{}/metrics", server.base)).bearer_auth(token).send();
    let refused = metrics(&reader).await.unwrap();
    assert_eq!(refused.status(), 403);
    assert!(challenge(&refused).contains("scope=\"cks:admin\""));
    let scraped = metrics(&admin).await.unwrap();
    assert_eq!(scraped.status(), 200);
    assert!(scraped.text().await.unwrap().contains("cks_tool_calls_total{tool=\"export_storage\",outcome=\"ok\"} 1"));

    // The streamable HTTP transport: a session opened with a read token, a write refused in it.
    let mcp = |token: &str, body: Value, session: Option<&str>| {
        let mut request = server
            .client
            .post(format!("{}/mcp", server.base))
            .bearer_auth(token)
            .header("accept", "application/json, text/event-stream")
            .json(&body);
        if let Some(session) = session {
            request = request.header("mcp-session-id", session).header("mcp-protocol-version", "2025-11-25");
        }
        request.send()
    };
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let opened = mcp(&reader, init, None).await.unwrap();
    assert_eq!(opened.status(), 200);
    let id = opened.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    let call = tool_call("evolve_knowledge", json!({"session_id": session, "operations": ops}));
    assert_eq!(mcp(&reader, call, Some(&id)).await.unwrap().status(), 403);
}

#[tokio::test]
async fn start_up_stops_with_a_clear_message_when_the_issuer_cannot_be_found() {
    let data = tempfile::tempdir().unwrap();
    let unused = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let output = command(&data, 0)
        .env("CKS_MCP_AUTH_ISSUER", format!("http://127.0.0.1:{unused}"))
        .env("CKS_MCP_PUBLIC_URL", "http://127.0.0.1:8080")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("CKS_MCP_AUTH_ISSUER") && stderr.contains("discovery document"), "{stderr}");

    let output = command(&data, 0)
        .env("CKS_MCP_AUTH_ISSUER", "https://id.example.com")
        .env("CKS_MCP_PUBLIC_URL", "https://kg.example.com")
        .env("CKS_MCP_HTTP_TOKEN", "static")
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("CKS_MCP_HTTP_TOKEN"));
}

#[tokio::test]
async fn the_page_learns_how_to_sign_in_and_may_reach_the_token_endpoint() {
    let issuer = Issuer::start().await;
    let page_policy = |server: &Server| {
        let url = format!("{}/", server.base);
        let client = server.client.clone();
        async move {
            let response = client.get(url).send().await.unwrap();
            assert_eq!(response.status(), 200, "the page needs no token");
            response.headers()["content-security-policy"].to_str().unwrap().to_owned()
        }
    };

    // Without a client id for the page there is no sign-in, and the page connects only home.
    let server = Server::start(&issuer).await;
    let missing = server.client.get(format!("{}/sign-in", server.base)).send().await.unwrap();
    assert_eq!(missing.status(), 404);
    let body: Value = missing.json().await.unwrap();
    assert!(body["message"].as_str().unwrap().contains("CKS_MCP_AUTH_PAGE_CLIENT_ID"), "{body}");
    assert!(page_policy(&server).await.contains("connect-src 'self';"));
    drop(server);

    let server = Server::start_with(&issuer, &[("CKS_MCP_AUTH_PAGE_CLIENT_ID", "chat-page")]).await;
    let response = server.client.get(format!("{}/sign-in", server.base)).send().await.unwrap();
    assert_eq!(response.status(), 200, "no token needed");
    assert_eq!(response.headers()["cache-control"], "no-store");
    let sign_in: Value = response.json().await.unwrap();
    assert_eq!(
        sign_in,
        json!({
            "issuer": issuer.url,
            "authorization_endpoint": format!("{}/auth", issuer.url),
            "token_endpoint": format!("{}/token", issuer.url),
            "client_id": "chat-page",
            "redirect_uri": format!("{}/", server.base),
            "scope": "openid cks:read cks:write",
            "resource": format!("{}/mcp", server.base),
        })
    );
    let policy = page_policy(&server).await;
    assert!(policy.contains(&format!("connect-src 'self' {};", issuer.url)), "{policy}");
}

/// Reports the principal a call runs for.
struct WhoAmI;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Nothing {}

#[derive(serde::Serialize, schemars::JsonSchema)]
struct Who {
    issuer: Option<String>,
    subject: Option<String>,
    scope: Option<String>,
    groups: Vec<String>,
}

#[async_trait::async_trait]
impl Tool for WhoAmI {
    type Input = Nothing;
    type Output = Who;
    const META: ToolMeta = ToolMeta {
        name: "who_am_i",
        description: "The principal this call runs for.",
        mutates_graph: false,
        creates_session: false,
        destructive: false,
        idempotent: true,
        open_world: false,
        session_fields: &[],
        session_checks: &[],
        llm_exposed: false,
    };

    async fn run(&self, ctx: &ToolContext, _: Nothing) -> Result<Who, ToolError> {
        let principal = ctx.principal.as_deref();
        Ok(Who {
            issuer: principal.map(|p| p.issuer.clone()),
            subject: principal.map(|p| p.subject.clone()),
            scope: principal.and_then(|p| p.scope).map(|s| s.to_string()),
            groups: principal.map(|p| p.groups.clone()).unwrap_or_default(),
        })
    }
}

#[tokio::test]
async fn the_principal_reaches_the_tool_call_on_both_http_forms() {
    use cks_mcp::http::{HttpConfig, router};
    let _ = rustls::crypto::ring::default_provider().install_default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let base = format!("http://{addr}");
    let settings = AuthSettings {
        issuer: "https://id.example.com".into(),
        audience: format!("{base}/mcp"),
        public_url: base.clone(),
        scope_claim: "scope".into(),
        groups_claim: "groups".into(),
        page_client_id: None,
        builtin: false,
    };
    let jwks: Value = serde_json::from_str(&std::fs::read_to_string(format!("{DATA}/jwks.json")).unwrap()).unwrap();
    let validator = Validator::new(&settings, Arc::new(KeySet::fixed(&jwks)));
    let oauth = Arc::new(OAuth { settings, validator, page: None });
    let runtime = Arc::new(cks_runtime::Runtime::new(
        Arc::new(cks_runtime::store::memory::MemoryStore::new()),
        cks_runtime::RuntimeConfig::default(),
    ));
    let mut registry = cks_tools::Registry::standard();
    registry.register(Arc::new(WhoAmI));
    let server = cks_mcp::server::CksServer::new(runtime, Arc::new(registry), cks_tools::LlmAccess::Absent);
    let config = HttpConfig {
        token: None,
        allowed_origins: vec![],
        bind: Some(addr),
        max_body_bytes: 1 << 20,
        oauth: Some(oauth),
        keys: None,
        keys_only: false,
        issuer: None,
    };
    tokio::spawn(async move { axum::serve(listener, router(server, config)).await });

    let claims = json!({
        "iss": "https://id.example.com", "sub": "alice", "aud": format!("{base}/mcp"), "scope": "cks:write",
        "exp": now() + 300, "groups": ["curators", "editors"],
    });
    let token = sign(Algorithm::RS256, Some("rsa-1"), &claims);
    let client = reqwest::Client::new();
    let expected = json!({"issuer": "https://id.example.com", "subject": "alice", "scope": "cks:write",
        "groups": ["curators", "editors"]});

    // The bare JSON-RPC form.
    let reply: Value = client
        .post(format!("{base}/mcp"))
        .bearer_auth(&token)
        .json(&tool_call("who_am_i", json!({})))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(text_result(&reply), expected);

    // The stateless revision, through rmcp's handler.
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "oauth", "version": "1"},
    });
    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "who_am_i", "arguments": {}, "_meta": meta}});
    let response = client
        .post(format!("{base}/mcp"))
        .bearer_auth(&token)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "who_am_i")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let reply: Value = response.json().await.unwrap();
    assert_eq!(reply["result"]["structuredContent"], expected, "{reply}");
}

/// A tool call's result, error or not.
async fn try_call(server: &Server, token: &str, name: &str, arguments: Value) -> Value {
    let reply: Value = server.post(Some(token), &tool_call(name, arguments)).await.json().await.unwrap();
    text_result(&reply)
}

/// A `cks:write` token for `subject`, in `groups`.
fn token_for(issuer: &Issuer, server: &Server, subject: &str, groups: &[&str]) -> String {
    let mut claims = Claims::new(issuer, server, "cks:write").json();
    claims["sub"] = json!(subject);
    claims["groups"] = json!(groups);
    sign(Algorithm::RS256, Some("rsa-1"), &claims)
}

#[tokio::test]
async fn a_session_belongs_to_its_principal_until_shared() {
    let issuer = Issuer::start().await;
    let server = Server::start(&issuer).await;
    let alice = token_for(&issuer, &server, "alice", &[]);
    let bob = token_for(&issuer, &server, "bob", &["lab"]);
    let carol = token_for(&issuer, &server, "carol", &["lab"]);
    let add = json!({"type": "add_object", "identity": {"id": "e", "type": "Planet", "name": "Earth"}});
    let made =
        server.call(&alice, "evolve_knowledge", json!({"json_data": "{\"objects\": []}", "operations": [add]})).await;
    let session = made["session_id"].as_str().unwrap().to_owned();

    let refused = try_call(&server, &bob, "serialize_knowledge", json!({"session_id": session})).await;
    assert_eq!(refused["error"], "session_not_found", "{refused}");
    let refused = try_call(&server, &bob, "share_session", json!({"session_id": session, "principals": ["bob"]})).await;
    assert_eq!(refused["error"], "session_not_found");
    let listed: Value = server
        .post(Some(&bob), &json!({"jsonrpc": "2.0", "id": 1, "method": "resources/list"}))
        .await
        .json()
        .await
        .unwrap();
    assert!(!listed.to_string().contains(&session), "{listed}");

    // Nor through the chat page's stream.
    let streamed = server
        .client
        .post(format!("{}/chat/stream", server.base))
        .bearer_auth(&bob)
        .json(&json!({"session_id": session, "prompt": "hi"}))
        .send()
        .await
        .unwrap();
    let streamed = streamed.text().await.unwrap();
    assert!(streamed.contains("session_not_found") && !streamed.contains("Earth"), "{streamed}");

    let shared = server.call(&alice, "share_session", json!({"session_id": session, "groups": ["lab"]})).await;
    assert_eq!(shared["groups"], json!(["lab"]));
    assert!(server.call(&carol, "serialize_knowledge", json!({"session_id": session})).await.get("error").is_none());
    let rename = json!({"type": "rename_object", "object_id": "e", "new_name": "Terra"});
    server.call(&bob, "evolve_knowledge", json!({"session_id": session, "operations": [rename]})).await;
    let history = server.call(&alice, "list_versions", json!({"session_id": session})).await;
    assert!(history.to_string().contains("\"bob\""), "the version names who made it: {history}");

    // Each call's log line names its request and the principal who made it, never a token.
    let log = server.stderr();
    let calls: Vec<Value> = log
        .lines()
        .filter(|line| line.starts_with('{'))
        .map(|line| serde_json::from_str::<Value>(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .filter(|line| line["target"] == "cks_tool_call")
        .collect();
    let by = |who: &str, tool: &str| {
        calls.iter().any(|l| {
            l["span"]["principal"] == who && l["fields"]["tool"] == tool && l["span"]["request_id"].is_string()
        })
    };
    assert!(
        by("alice", "share_session") && by("bob", "evolve_knowledge") && by("carol", "serialize_knowledge"),
        "{log}"
    );
    for token in [&alice, &bob, &carol] {
        assert!(!log.contains(token.as_str()));
    }
}
