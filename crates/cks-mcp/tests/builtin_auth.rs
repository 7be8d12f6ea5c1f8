//! The built-in authorization server against the real binary (`CKS_MCP_AUTH=builtin`): a client
//! registers, a local user made with `cks-mcp users` signs in on the consent page, the code is
//! traded with PKCE for tokens the server accepts as that user; refresh tokens rotate and a
//! replay revokes the family. Each defence of docs/authorization.md's threat model is tried and
//! refused with the error its RFC names. No token, code or password reaches the log.

use std::io::Write as _;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};

mod support;
use support::{text_result, tool_call};

const PASSWORD: &str = "correct horse battery";
const CALLBACK: &str = "http://127.0.0.1:9/callback";
const VERIFIER: &str = "a-verifier-of-forty-three-characters-or-more-0123";

struct Server {
    child: Child,
    base: String,
    client: reqwest::Client,
    data: std::sync::Arc<tempfile::TempDir>,
}

fn command(data: &std::path::Path, base: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_cks-mcp"));
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", data)
        .env("CKS_MCP_DATA_DIR", data)
        .env("CKS_MCP_DB_PATH", data.join("cks.db"))
        .env("CKS_SWEEPERS", "off")
        .env("CKS_EMBEDDING_PROVIDER", "none")
        .env("CKS_MCP_AUTH", "builtin")
        .env("CKS_MCP_PUBLIC_URL", base)
        .env("CKS_MCP_LOG", "info");
    command
}

impl Server {
    /// The server on a new store, with alice (cks:write, group team) as a local user.
    async fn start() -> Server {
        let data = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let base = format!("http://127.0.0.1:{port}");
        let mut add = command(data.path(), &base)
            .args(["users", "add", "alice", "--scope", "cks:write", "--group", "team"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        add.stdin.take().unwrap().write_all(format!("{PASSWORD}\n").as_bytes()).unwrap();
        let added = add.wait_with_output().unwrap();
        assert!(added.status.success());
        let added: Value = serde_json::from_slice(&added.stdout).unwrap();
        assert_eq!(added, json!({"name": "alice", "scope": "cks:write", "groups": ["team"]}));
        Server::serve(std::sync::Arc::new(data), port, &base).await
    }

    /// A server on the store in `data`, at `port`, reached at the public URL `public`.
    async fn serve(data: std::sync::Arc<tempfile::TempDir>, port: u16, public: &str) -> Server {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let base = format!("http://127.0.0.1:{port}");
        let log = data.path().join(format!("stderr-{port}.log"));
        let child = command(data.path(), public)
            .args(["--http", &format!("127.0.0.1:{port}"), "--no-stdio"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap();
        let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
        let server = Server { child, base, client, data };
        let deadline = Instant::now() + Duration::from_secs(30);
        while server.client.get(format!("{}/oauth/jwks", server.base)).send().await.is_err() {
            assert!(Instant::now() < deadline, "the server did not come up: {}", server.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        server
    }

    fn log(&self) -> String {
        let port = self.base.rsplit(':').next().unwrap();
        std::fs::read_to_string(self.data.path().join(format!("stderr-{port}.log"))).unwrap_or_default()
    }

    async fn get_json(&self, path: &str) -> Value {
        let response = self.client.get(format!("{}{path}", self.base)).send().await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
        response.json().await.unwrap()
    }

    /// Registers a public client coming back to [`CALLBACK`]; its id.
    async fn register(&self) -> String {
        let metadata = json!({"client_name": "A <b>host</b>", "redirect_uris": [CALLBACK],
            "grant_types": ["authorization_code", "refresh_token"], "token_endpoint_auth_method": "none"});
        let response = self.client.post(format!("{}/oauth/register", self.base)).json(&metadata).send().await.unwrap();
        assert_eq!(response.status(), 201);
        let registered: Value = response.json().await.unwrap();
        assert!(registered.get("client_secret").is_none(), "a public client has no secret");
        registered["client_id"].as_str().unwrap().to_owned()
    }

    async fn post_form(&self, path: &str, pairs: &[(&str, &str)]) -> reqwest::Response {
        let body = url::form_urlencoded::Serializer::new(String::new()).extend_pairs(pairs).finish();
        let url = format!("{}{path}", self.base);
        let request = self.client.post(url).header("content-type", "application/x-www-form-urlencoded");
        request.body(body).send().await.unwrap()
    }

    async fn authorize(&self, params: &[(&str, &str)]) -> reqwest::Response {
        let mut url = url::Url::parse(&format!("{}/oauth/authorize", self.base)).unwrap();
        url.query_pairs_mut().extend_pairs(params);
        self.client.get(url).send().await.unwrap()
    }

    async fn token(&self, form: &[(&str, &str)]) -> (u16, Value) {
        let response = self.post_form("/oauth/token", form).await;
        assert_eq!(response.headers()["cache-control"], "no-store");
        (response.status().as_u16(), response.json().await.unwrap())
    }

    /// A tool call with an access token: the status and the result.
    async fn call(&self, token: &str, name: &str, arguments: Value) -> (u16, Value) {
        let response = self
            .client
            .post(format!("{}/mcp", self.base))
            .bearer_auth(token)
            .json(&tool_call(name, arguments))
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, if status == 200 { text_result(&response.json().await.unwrap()) } else { Value::Null })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn challenge() -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(<sha2::Sha256 as sha2::Digest>::digest(VERIFIER))
}

/// An authorization request's parameters for `client_id`, with `changes` made.
fn request<'a>(client_id: &'a str, challenge: &'a str, changes: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut params = vec![
        ("response_type", "code"),
        ("client_id", client_id),
        ("redirect_uri", CALLBACK),
        ("code_challenge", challenge),
        ("code_challenge_method", "S256"),
        ("scope", "cks:read cks:write"),
        ("state", "the-state"),
    ];
    for (name, value) in changes {
        params.retain(|(n, _)| n != name);
        if !value.is_empty() {
            params.push((name, value));
        }
    }
    params
}

/// A token request trading `code` for `client_id`, with the right verifier and redirect URI.
fn code_trade<'a>(code: &'a str, client_id: &'a str) -> [(&'static str, &'a str); 5] {
    [
        ("grant_type", "authorization_code"),
        ("code", code),
        ("redirect_uri", CALLBACK),
        ("code_verifier", VERIFIER),
        ("client_id", client_id),
    ]
}

/// The query of a redirect's `Location`.
fn location(response: &reqwest::Response) -> std::collections::HashMap<String, String> {
    assert_eq!(response.status(), 303, "a redirect");
    let location = response.headers()["location"].to_str().unwrap();
    assert!(location.starts_with(CALLBACK), "{location}");
    url::Url::parse(location).unwrap().query_pairs().into_owned().collect()
}

/// The ticket in a consent page.
async fn ticket(response: reqwest::Response) -> String {
    assert_eq!(response.status(), 200);
    let html = response.text().await.unwrap();
    let at = html.find("name=\"ticket\" value=\"").unwrap() + "name=\"ticket\" value=\"".len();
    html[at..].split('"').next().unwrap().to_owned()
}

impl Server {
    /// Alice answers the consent page: the redirect.
    async fn answer(&self, ticket: &str, password: &str, decision: &str) -> reqwest::Response {
        let form = [("ticket", ticket), ("username", "alice"), ("password", password), ("decision", decision)];
        self.post_form("/oauth/authorize", &form).await
    }

    /// The whole sign-in for `client_id`: an authorization code.
    async fn code(&self, client_id: &str) -> String {
        let challenge = challenge();
        let ticket = ticket(self.authorize(&request(client_id, &challenge, &[])).await).await;
        location(&self.answer(&ticket, PASSWORD, "allow").await)["code"].clone()
    }
}

#[tokio::test]
async fn a_person_signs_in_and_the_client_calls_tools_as_them() {
    let server = Server::start().await;
    let base = server.base.clone();
    let metadata = server.get_json("/.well-known/oauth-authorization-server").await;
    assert_eq!(metadata["issuer"], base);
    assert_eq!(metadata["token_endpoint"], format!("{base}/oauth/token"));
    assert_eq!(metadata["code_challenge_methods_supported"], json!(["S256"]));
    assert_eq!(metadata["client_id_metadata_document_supported"], true);
    let resource = server.get_json("/.well-known/oauth-protected-resource/mcp").await;
    assert_eq!(resource["authorization_servers"], json!([base]));

    let client_id = server.register().await;
    let challenge = challenge();
    let page = server.authorize(&request(&client_id, &challenge, &[])).await;
    assert_eq!(page.headers()["x-frame-options"], "DENY");
    assert!(page.headers()["content-security-policy"].to_str().unwrap().contains("frame-ancestors 'none'"));
    let html = page.text().await.unwrap();
    assert!(html.contains("<strong id=\"client\">A &lt;b&gt;host&lt;/b&gt;</strong>"), "the client is named, escaped");
    assert!(html.contains("<code id=\"redirect\">http://127.0.0.1</code>"), "and where it sends the person back");
    let ticket = ticket(server.authorize(&request(&client_id, &challenge, &[])).await).await;

    // A wrong password shows the page again; nothing is sent to the client.
    let wrong = server.answer(&ticket, "wrong horse battery", "allow").await;
    assert_eq!(wrong.status(), 200);
    assert!(wrong.text().await.unwrap().contains("id=\"problem\""));
    let denied = location(&server.answer(&ticket, "", "deny").await);
    assert_eq!((denied["error"].as_str(), denied["state"].as_str()), ("access_denied", "the-state"));

    let answer = location(&server.answer(&ticket, PASSWORD, "allow").await);
    assert_eq!((answer["state"].as_str(), answer["iss"].as_str()), ("the-state", base.as_str()));
    let first_code = &answer["code"];
    let resource = format!("{base}/mcp");
    let trade = [
        ("grant_type", "authorization_code"),
        ("code", first_code),
        ("redirect_uri", CALLBACK),
        ("code_verifier", VERIFIER),
        ("client_id", &client_id),
        ("resource", &resource),
    ];
    let (status, tokens) = server.token(&trade).await;
    assert_eq!(status, 200, "{tokens}");
    assert_eq!(tokens["token_type"], "Bearer");
    assert_eq!(tokens["scope"], "cks:read cks:write");
    let access = tokens["access_token"].as_str().unwrap();
    let claims: Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(access.split('.').nth(1).unwrap()).unwrap(),
    )
    .unwrap();
    assert_eq!((claims["iss"].as_str(), claims["sub"].as_str()), (Some(base.as_str()), Some("alice")));
    assert_eq!(
        (claims["aud"].as_str(), claims["client_id"].as_str()),
        (Some(resource.as_str()), Some(client_id.as_str()))
    );
    assert_eq!(claims["groups"], json!(["team"]));
    assert_eq!(claims["exp"].as_u64().unwrap() - claims["iat"].as_u64().unwrap(), 600);
    // The code is used once.
    assert_eq!(
        server.token(&trade).await,
        (
            400,
            json!({"error": "invalid_grant",
        "error_description": "the code is unknown, used or expired"})
        )
    );

    // The token acts as alice.
    let graph = json!({"objects": [{"identity": {"id": "a", "type": "Note", "name": "a"}}]}).to_string();
    let (status, made) = server.call(access, "validate_knowledge", json!({"json_data": graph})).await;
    assert_eq!(status, 200);
    let session = made["session_id"].as_str().unwrap();
    let (_, versions) = server.call(access, "list_versions", json!({"session_id": session})).await;
    assert_eq!(versions["versions"][0]["metadata"]["principal"], json!({"issuer": base, "subject": "alice"}));
    // cks:admin was not granted.
    let (status, _) = server.call(access, "list_api_keys", json!({})).await;
    assert_eq!(status, 403);

    // The refresh token rotates; the spent one used again revokes the family.
    let first = tokens["refresh_token"].as_str().unwrap();
    let refresh = |token: &str| {
        [("grant_type", "refresh_token"), ("refresh_token", token), ("client_id", &client_id)]
            .map(|(k, v)| (k, v.to_owned()))
    };
    let form = |pairs: &[(&'static str, String)]| pairs.iter().map(|(k, v)| (*k, v.clone())).collect::<Vec<_>>();
    let post = |pairs: Vec<(&'static str, String)>| {
        let server = &server;
        async move {
            let pairs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
            server.token(&pairs).await
        }
    };
    let (status, renewed) = post(form(&refresh(first))).await;
    assert_eq!(status, 200, "{renewed}");
    let second = renewed["refresh_token"].as_str().unwrap().to_owned();
    assert_ne!(second, first);
    let (status, replayed) = post(form(&refresh(first))).await;
    assert_eq!((status, replayed["error"].as_str()), (400, Some("invalid_grant")));
    let (status, revoked) = post(form(&refresh(&second))).await;
    assert_eq!((status, revoked["error"].as_str()), (400, Some("invalid_grant")), "the family is revoked");

    // A user removed gets no more tokens: their refresh token is refused.
    let code = server.code(&client_id).await;
    let trade = code_trade(&code, &client_id);
    let (status, tokens) = server.token(&trade).await;
    assert_eq!(status, 200, "{tokens}");
    let removed = command(server.data.path(), &base).args(["users", "remove", "alice"]).output().unwrap();
    assert!(removed.status.success());
    let (status, refused) = post(form(&refresh(tokens["refresh_token"].as_str().unwrap()))).await;
    assert_eq!((status, refused["error_description"].as_str()), (400, Some("the user no longer exists")));

    let log = server.log();
    for secret in [access, first, second.as_str(), first_code, code.as_str(), PASSWORD, ticket.as_str()] {
        assert!(!log.contains(secret), "a secret in the log");
    }
}

#[tokio::test]
async fn each_defence_refuses_with_the_error_its_rfc_names() {
    let server = Server::start().await;
    let client_id = server.register().await;
    let challenge = challenge();
    let page_error = |response: reqwest::Response| async move {
        assert_eq!(response.status(), 400);
        assert!(response.headers().get("location").is_none(), "never a redirect");
        let html = response.text().await.unwrap();
        let at = html.find("<p id=\"error\">").unwrap() + "<p id=\"error\">".len();
        (html[at..].split('<').next().unwrap().to_owned(), html)
    };

    // A redirect URI the client did not register: the person is told; nobody is sent anywhere.
    let other = request(&client_id, &challenge, &[("redirect_uri", "http://127.0.0.1:9/elsewhere")]);
    assert_eq!(page_error(server.authorize(&other).await).await.0, "invalid_request");
    let evil = request(&client_id, &challenge, &[("redirect_uri", "https://evil.example/callback")]);
    assert_eq!(page_error(server.authorize(&evil).await).await.0, "invalid_request");
    // An unknown client.
    assert_eq!(page_error(server.authorize(&request("nobody", &challenge, &[])).await).await.0, "invalid_client");
    // A client metadata document on a private address is not fetched.
    for document in ["https://10.0.0.7/client.json", "http://127.0.0.1:9/client.json"] {
        let (error, html) = page_error(server.authorize(&request(document, &challenge, &[])).await).await;
        assert_eq!(error, "invalid_client", "{document}");
        assert!(html.contains("non-public address"), "{html}");
    }
    // Registration refuses redirect URIs a browser must not be sent to.
    for uri in ["http://evil.example/cb", "javascript:alert(1)", "https://a.example/cb#x"] {
        let metadata = json!({"redirect_uris": [uri]});
        let response =
            server.client.post(format!("{}/oauth/register", server.base)).json(&metadata).send().await.unwrap();
        assert_eq!(response.status(), 400, "{uri}");
        assert_eq!(response.json::<Value>().await.unwrap()["error"], "invalid_redirect_uri");
    }

    // Past the client's checks, errors go back to its redirect URI, with the state and the issuer.
    let no_pkce = location(&server.authorize(&request(&client_id, "", &[])).await);
    assert_eq!((no_pkce["error"].as_str(), no_pkce["state"].as_str()), ("invalid_request", "the-state"));
    assert_eq!(no_pkce["iss"], server.base);
    let plain =
        location(&server.authorize(&request(&client_id, &challenge, &[("code_challenge_method", "plain")])).await);
    assert_eq!(plain["error"], "invalid_request");
    let elsewhere = request(&client_id, &challenge, &[("resource", "https://other.example/mcp")]);
    assert_eq!(location(&server.authorize(&elsewhere).await)["error"], "invalid_target");
    let unknown_scope = request(&client_id, &challenge, &[("scope", "payments")]);
    assert_eq!(location(&server.authorize(&unknown_scope).await)["error"], "invalid_scope");

    // A changed ticket does not verify.
    let ticket = ticket(server.authorize(&request(&client_id, &challenge, &[])).await).await;
    let forged = format!("x{ticket}");
    let response = server.answer(&forged, PASSWORD, "allow").await;
    assert_eq!(response.status(), 400);

    // At the token endpoint: no verifier, a wrong one, another resource, another client.
    let trade = |code: &str, verifier: Option<&str>, resource: Option<&str>, client: &str| {
        let mut form = vec![
            ("grant_type", "authorization_code".to_owned()),
            ("code", code.to_owned()),
            ("redirect_uri", CALLBACK.to_owned()),
            ("client_id", client.to_owned()),
        ];
        form.extend(verifier.map(|v| ("code_verifier", v.to_owned())));
        form.extend(resource.map(|r| ("resource", r.to_owned())));
        form
    };
    let post = |form: Vec<(&'static str, String)>| {
        let server = &server;
        async move {
            let form: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
            server.token(&form).await
        }
    };
    let code = server.code(&client_id).await;
    assert_eq!(post(trade(&code, None, None, &client_id)).await.1["error"], "invalid_request");
    let code = server.code(&client_id).await;
    let wrong = "b".repeat(43);
    assert_eq!(post(trade(&code, Some(&wrong), None, &client_id)).await.1["error"], "invalid_grant");
    let code = server.code(&client_id).await;
    let (status, refused) = post(trade(&code, Some(VERIFIER), Some("https://other.example/mcp"), &client_id)).await;
    assert_eq!((status, refused["error"].as_str()), (400, Some("invalid_target")));
    let code = server.code(&client_id).await;
    let another = server.register().await;
    assert_eq!(post(trade(&code, Some(VERIFIER), None, &another)).await.1["error"], "invalid_grant");
    let (status, unknown) = post(trade("made-up", Some(VERIFIER), None, "nobody")).await;
    assert_eq!((status, unknown["error"].as_str()), (401, Some("invalid_client")));

    // A token this server did not sign is refused at /mcp.
    let (status, _) = server.call("eyJhbGciOiJFUzI1NiJ9.e30.AAAA", "find_tools", json!({})).await;
    assert_eq!(status, 401);
}

#[tokio::test]
async fn two_servers_on_one_store_answer_each_others_steps() {
    let first = Server::start().await;
    // Another server on the store, under the same public URL: replicas behind a load balancer.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let second = Server::serve(first.data.clone(), port, &first.base).await;
    assert_eq!(first.get_json("/oauth/jwks").await, second.get_json("/oauth/jwks").await, "one key set");

    // Registered on one, signed in on the other, the code traded on the first.
    let client_id = first.register().await;
    let challenge = challenge();
    let page = second.authorize(&request(&client_id, &challenge, &[])).await;
    assert_eq!(page.status(), 200, "the second knows the client");
    let ticket = ticket(page).await;
    let code = location(&first.answer(&ticket, PASSWORD, "allow").await)["code"].clone();
    let trade = code_trade(&code, &client_id);
    let (status, tokens) = second.token(&trade).await;
    assert_eq!(status, 200, "{tokens}");
    assert_eq!(first.token(&trade).await.0, 400, "and only once");
    // The token the second signed works on the first.
    let access = tokens["access_token"].as_str().unwrap();
    let (status, found) = first.call(access, "find_tools", json!({"need": "versions"})).await;
    assert_eq!(status, 200);
    assert!(found.to_string().contains("list_versions"), "{found}");
}
