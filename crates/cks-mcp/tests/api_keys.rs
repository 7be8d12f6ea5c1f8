//! API keys against the real binary: made by the operator's command (`cks-mcp keys`) and the admin
//! tools, sent as `Authorization: Bearer`, each acting as its principal with its scope; a revoked
//! key is refused, also when another process revoked it; no key's text reaches a response or the
//! log.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod support;
use support::{text_result, tool_call};

/// `cks-mcp --http` with `CKS_MCP_AUTH=keys` on a SQLite file, on a free loopback port.
struct Server {
    child: Child,
    base: String,
    client: reqwest::Client,
    data: tempfile::TempDir,
}

fn command(data: &std::path::Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_cks-mcp"));
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", data)
        .env("CKS_MCP_DATA_DIR", data)
        .env("CKS_MCP_DB_PATH", data.join("cks.db"))
        .env("CKS_SWEEPERS", "off")
        .env("CKS_EMBEDDING_PROVIDER", "none")
        .env("CKS_MCP_AUTH", "keys")
        // Refusals are logged at info: the log must still hold no key.
        .env("CKS_MCP_LOG", "info")
        .stdin(Stdio::null());
    command
}

impl Server {
    async fn start(data: tempfile::TempDir) -> Server {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = command(data.path())
            .args(["--http", &format!("127.0.0.1:{port}"), "--no-stdio"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(data.path().join("stderr.log")).unwrap())
            .spawn()
            .unwrap();
        let server = Server { child, base: format!("http://127.0.0.1:{port}"), client: reqwest::Client::new(), data };
        let deadline = Instant::now() + Duration::from_secs(30);
        while server.client.get(format!("{}/health", server.base)).send().await.is_err() {
            assert!(Instant::now() < deadline, "the server did not come up: {}", server.stderr());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        server
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.data.path().join("stderr.log")).unwrap_or_default()
    }

    async fn post(&self, key: Option<&str>, name: &str, arguments: Value) -> reqwest::Response {
        let mut request = self.client.post(format!("{}/mcp", self.base)).json(&tool_call(name, arguments));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        request.send().await.unwrap()
    }

    /// A tool call that must get through; its result (which may be a business error).
    async fn call(&self, key: &str, name: &str, arguments: Value) -> Value {
        let response = self.post(Some(key), name, arguments).await;
        assert_eq!(response.status(), 200, "{name}");
        text_result(&response.json().await.unwrap())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `cks-mcp keys …` on the server's store; its stdout as JSON.
fn keys(data: &std::path::Path, args: &[&str]) -> Value {
    let output = command(data).arg("keys").args(args).output().unwrap();
    assert!(output.status.success(), "keys {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).unwrap()
}

fn challenge(response: &reqwest::Response) -> String {
    response.headers().get("www-authenticate").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned()
}

#[tokio::test]
async fn keys_act_as_their_principals_with_their_scopes_until_revoked() {
    let data = tempfile::tempdir().unwrap();
    // The operator's first key, made before the server starts.
    let admin = keys(data.path(), &["create", "--subject", "ops", "--scope", "cks:admin", "--label", "bootstrap"]);
    let admin_key = admin["key"].as_str().unwrap().to_owned();
    let server = Server::start(data).await;

    // No key, or a made-up one: 401 with a challenge.
    let response = server.post(None, "list_graphs", json!({})).await;
    assert_eq!(response.status(), 401);
    let made_up = format!("cks_{}_{}", "0".repeat(12), "0".repeat(64));
    let response = server.post(Some(&made_up), "list_graphs", json!({})).await;
    assert_eq!(response.status(), 401);
    assert!(challenge(&response).contains("error=\"invalid_token\""), "{}", challenge(&response));

    // The admin key makes keys over HTTP; a reader and two writers.
    let make = |subject: &str, scope: &str| json!({"subject": subject, "scope": scope});
    let reader = server.call(&admin_key, "create_api_key", make("dashboard", "cks:read")).await;
    let alice = server.call(&admin_key, "create_api_key", make("alice", "cks:write")).await;
    let bob = server.call(&admin_key, "create_api_key", make("bob", "cks:write")).await;
    let key = |made: &Value| made["key"].as_str().unwrap().to_owned();
    let (reader_key, alice_key, bob_key) = (key(&reader), key(&alice), key(&bob));

    // A reader reads, and is refused a write with the scope it lacks.
    assert!(server.call(&reader_key, "list_graphs", json!({})).await.get("error").is_none());
    let add = json!({"type": "add_object", "identity": {"id": "e", "type": "Planet", "name": "Earth"}});
    let write = json!({"json_data": "{\"objects\": []}", "operations": [add]});
    let response = server.post(Some(&reader_key), "evolve_knowledge", write.clone()).await;
    assert_eq!(response.status(), 403);
    assert!(challenge(&response).contains("scope=\"cks:write\""), "{}", challenge(&response));
    // A writer cannot manage keys.
    assert_eq!(server.post(Some(&alice_key), "list_api_keys", json!({})).await.status(), 403);

    // A session belongs to the key's principal.
    let made = server.call(&alice_key, "evolve_knowledge", write).await;
    let session = made["session_id"].as_str().unwrap().to_owned();
    let refused = server.call(&bob_key, "serialize_knowledge", json!({"session_id": session})).await;
    assert_eq!(refused["error"], "session_not_found", "{refused}");
    assert!(server.call(&alice_key, "serialize_knowledge", json!({"session_id": session})).await["error"].is_null());

    // Revoked over HTTP: refused at once, saying why.
    server.call(&admin_key, "revoke_api_key", json!({"id": alice["id"]})).await;
    let response = wait_refused(&server, &alice_key).await;
    assert!(challenge(&response).contains("revoked"), "{}", challenge(&response));

    // Revoked by the operator's command, a process of its own: refused within the refresh interval.
    keys(server.data.path(), &["revoke", bob["id"].as_str().unwrap()]);
    wait_refused(&server, &bob_key).await;

    // The list shows ids and states, never a key.
    let listed = keys(server.data.path(), &["list", "--all"]);
    assert_eq!(listed["key_count"], 4, "{listed}");
    let states: Vec<&str> = listed["keys"].as_array().unwrap().iter().map(|k| k["state"].as_str().unwrap()).collect();
    assert_eq!(states, ["active", "active", "revoked", "revoked"]);
    let log = server.stderr();
    for key in [&admin_key, &reader_key, &alice_key, &bob_key] {
        assert!(!listed.to_string().contains(key.as_str()));
        assert!(!log.contains(key.as_str()), "a key is in the log");
    }
    assert!(log.contains("API key refused") && log.contains(alice["id"].as_str().unwrap()), "{log}");
}

/// Polls with `key` until it is refused (401), for at most five seconds; the refusal.
async fn wait_refused(server: &Server, key: &str) -> reqwest::Response {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let response = server.post(Some(key), "list_graphs", json!({})).await;
        if response.status() == 401 {
            return response;
        }
        assert_eq!(response.status(), 200);
        assert!(Instant::now() < deadline, "the key is still accepted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_non_loopback_bind_without_a_credential_names_keys_as_one_way() {
    let data = tempfile::tempdir().unwrap();
    let output = command(data.path())
        .env_remove("CKS_MCP_AUTH")
        .args(["--http", "0.0.0.0:0", "--no-stdio"])
        .stdout(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success() && stderr.contains("CKS_MCP_AUTH=keys"), "{stderr}");
}
