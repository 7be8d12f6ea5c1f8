//! The built-in authorization server (`CKS_MCP_AUTH=builtin`): for one binary serving a small
//! team, this server issues the access tokens it checks. Hosts (Claude, ChatGPT, VS Code, Cursor)
//! find it through the protected resource metadata, register (a Client ID Metadata Document, or
//! Dynamic Client Registration), send the person to sign in, and trade the code for tokens.
//!
//! - OAuth 2.1's authorization code grant with PKCE (`S256` only) and refresh tokens that rotate
//!   (`grants.rs`); authorization server metadata (RFC 8414); the `iss` of the response (RFC
//!   9207) against mix-ups; the `resource` indicator (RFC 8707): a token is only for this server.
//! - Clients (`clients.rs`): registered, known by their metadata document's URL, or the chat page.
//! - People: local users (`users.rs`, `cks-mcp users`) sign in on the consent page itself, which
//!   names the client, what it asks for and where it sends them back; or they sign in at an
//!   upstream OpenID Connect issuer (`upstream.rs`) and come back to allow it there.
//! - Access tokens: JWTs (RFC 9068) signed with ES256 keys kept in the store and rotated
//!   (`signing.rs`); the resource server checks them as it checks any issuer's.
//!
//! Between the page and the person's answer, the authorization request travels in a ticket the
//! server signed (HMAC-SHA256 with a key kept in the store): nothing is kept, any replica can
//! take the answer, and a changed request does not verify.
//!
//! Threats and their defences are in docs/authorization.md ("The built-in issuer").

pub mod clients;
pub mod grants;
pub mod signing;
pub mod upstream;
pub mod users;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use rand::RngCore as _;
use ring::hmac;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use subtle::ConstantTimeEq as _;

use cks_runtime::Runtime;
use cks_tools::Scope;

pub use clients::{Client, ClientError, Clients};
pub use grants::{Grant, Grants, Refused};
pub use signing::SigningKeys;
pub use upstream::{Upstream, UpstreamSettings};

use super::OAuth;

/// The client id the chat page signs in as.
pub const PAGE_CLIENT_ID: &str = "cks-mcp-page";
/// The default lifetime of an access token.
pub const ACCESS_TOKEN_SECONDS: u64 = 600;
/// How long a person has to answer the consent page.
const TICKET_SECONDS: u64 = 600;
/// The setting holding the tickets' key.
pub(crate) const TICKET_KEY: &str = "oauth.ticket_key";
/// What a client gets when it asks for no scope: a person's everyday use.
const DEFAULT_SCOPE: &str = "cks:read cks:write";
/// The most a person signed in upstream may do: `cks:admin` is for local users and API keys.
const UPSTREAM_SCOPE: Scope = Scope::Write;
/// How often forgotten codes and tokens are swept.
const SWEEP_EVERY: Duration = Duration::from_secs(3_600);

/// What went wrong inside the issuer (not a refusal of a request).
#[derive(Debug, thiserror::Error)]
pub enum BuiltinError {
    #[error("the store: {0}")]
    Store(#[from] cks_runtime::store::StoreError),
    #[error("no signing key could be made or read")]
    NoSigningKey,
    #[error("{0}")]
    Client(#[from] ClientError),
    #[error("{0}")]
    Users(String),
}

/// A refusal of an OAuth request: the error the RFCs name, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthError {
    pub error: &'static str,
    pub description: String,
}

impl OAuthError {
    pub fn new(error: &'static str, description: impl Into<String>) -> OAuthError {
        OAuthError { error, description: description.into() }
    }

    /// The JSON body of a token or registration error (RFC 6749 §5.2).
    pub fn body(&self) -> Value {
        json!({"error": self.error, "error_description": self.description})
    }
}

/// An authorization request, checked: what the ticket carries to the person's answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Authorization {
    pub client_id: String,
    pub client_name: String,
    pub redirect_uri: String,
    pub state: Option<String>,
    pub code_challenge: String,
    pub scope: String,
    pub resource: String,
    pub issued_at: u64,
    /// Who signed in at the upstream issuer, once they have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub person: Option<Person>,
    /// The upstream leg's PKCE verifier and nonce, while the person signs in there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<(String, String)>,
}

/// Someone signed in: a local user, or a person at the upstream issuer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Person {
    pub subject: String,
    #[serde(default)]
    pub groups: Vec<String>,
    /// The most their tokens may hold (`cks:read`, `cks:write` or `cks:admin`).
    pub scope: String,
    /// The upstream issuer they signed in at; `None` for a local user.
    #[serde(default)]
    pub issuer: Option<String>,
}

impl From<users::User> for Person {
    fn from(user: users::User) -> Person {
        Person { scope: user.scope, subject: user.name, groups: user.groups, issuer: None }
    }
}

/// Where an authorization request goes wrong: before the client and its redirect URI are known
/// (the person is told, never sent anywhere), or after (the client is told, at its redirect URI).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthorizeError {
    Page(OAuthError),
    Redirect(String),
}

/// The parameters of an authorization request.
#[derive(Debug, Default, Deserialize)]
pub struct AuthorizeParams {
    pub response_type: Option<String>,
    pub client_id: Option<String>,
    pub redirect_uri: Option<String>,
    pub state: Option<String>,
    pub scope: Option<String>,
    pub code_challenge: Option<String>,
    pub code_challenge_method: Option<String>,
    pub resource: Option<String>,
}

/// The parameters of a token request (RFC 6749 §4.1.3, §6).
#[derive(Debug, Default, Deserialize)]
pub struct TokenParams {
    pub grant_type: Option<String>,
    pub code: Option<String>,
    pub redirect_uri: Option<String>,
    pub code_verifier: Option<String>,
    pub refresh_token: Option<String>,
    pub client_id: Option<String>,
    pub client_secret: Option<String>,
    pub resource: Option<String>,
    pub scope: Option<String>,
}

/// The built-in authorization server.
#[derive(Debug)]
pub struct AuthorizationServer {
    issuer: String,
    audience: String,
    access_token_seconds: u64,
    runtime: Arc<Runtime>,
    pub keys: SigningKeys,
    clients: Clients,
    grants: Grants,
    ticket_key: hmac::Key,
    pub upstream: Option<Upstream>,
    /// The resource server the tokens are for: it remembers each token signed here.
    resource_server: Arc<OAuth>,
}

impl AuthorizationServer {
    /// The issuer on `runtime`'s store for `resource_server`: its keys read (made on a new store)
    /// into the resource server's key set, and a task that reads them again and sweeps what
    /// expired.
    pub async fn start(
        runtime: Arc<Runtime>,
        resource_server: Arc<OAuth>,
        access_token_seconds: u64,
        fetcher: cks_web::fetch::Fetcher,
        upstream: Option<Upstream>,
    ) -> Result<Arc<AuthorizationServer>, BuiltinError> {
        let settings = &resource_server.settings;
        let keys = SigningKeys::load(runtime.clone(), resource_server.validator.keys().clone()).await?;
        let ticket_key = runtime.store().setting_or_insert(TICKET_KEY, &random_id(32)).await?;
        let server = Arc::new(AuthorizationServer {
            issuer: settings.issuer.clone(),
            audience: settings.audience.clone(),
            access_token_seconds,
            clients: Clients::new(runtime.clone(), fetcher, &settings.public_url),
            grants: Grants::new(runtime.clone()),
            runtime,
            keys,
            ticket_key: hmac::Key::new(hmac::HMAC_SHA256, ticket_key.as_bytes()),
            upstream,
            resource_server,
        });
        let weak = Arc::downgrade(&server);
        tokio::spawn(async move {
            let mut swept: Option<std::time::Instant> = None;
            loop {
                let Some(server) = weak.upgrade() else { return };
                if let Err(e) = server.keys.refresh().await {
                    tracing::warn!(target: "cks_auth", "reading the signing keys again: {e}");
                }
                if swept.is_none_or(|at| at.elapsed() >= SWEEP_EVERY) {
                    swept = Some(std::time::Instant::now());
                    if let Err(e) = server.grants.sweep().await {
                        tracing::warn!(target: "cks_auth", "sweeping expired codes and tokens: {e}");
                    }
                    if let Err(e) = server.clients.sweep().await {
                        tracing::warn!(target: "cks_auth", "sweeping unused registrations: {e}");
                    }
                }
                drop(server);
                tokio::time::sleep(signing::REFRESH).await;
            }
        });
        Ok(server)
    }

    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }

    /// The authorization server metadata (RFC 8414).
    pub fn metadata(&self) -> Value {
        let issuer = &self.issuer;
        json!({
            "issuer": issuer,
            "authorization_endpoint": format!("{issuer}/oauth/authorize"),
            "token_endpoint": format!("{issuer}/oauth/token"),
            "registration_endpoint": format!("{issuer}/oauth/register"),
            "jwks_uri": format!("{issuer}/oauth/jwks"),
            "response_types_supported": ["code"],
            "response_modes_supported": ["query"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": clients::AUTH_METHODS,
            "scopes_supported": Scope::ALL.map(Scope::as_str),
            "client_id_metadata_document_supported": true,
            "authorization_response_iss_parameter_supported": true,
        })
    }

    /// Checks an authorization request: the client and where to send the answer first, then
    /// the rest.
    pub async fn authorize(&self, params: &AuthorizeParams) -> Result<Authorization, AuthorizeError> {
        let page = |error, why: &str| AuthorizeError::Page(OAuthError::new(error, why));
        let client_id = params.client_id.as_deref().filter(|c| !c.is_empty());
        let Some(client_id) = client_id else { return Err(page("invalid_request", "client_id is missing")) };
        let client = self.clients.find(client_id).await.map_err(|e| match e {
            BuiltinError::Client(e) => page(e.code(), &e.to_string()),
            other => page("server_error", &other.to_string()),
        })?;
        let redirect_uri = match params.redirect_uri.as_deref() {
            Some(uri) if client.redirects_to(uri) => uri.to_owned(),
            Some(_) => return Err(page("invalid_request", "redirect_uri is not one the client registered")),
            None if client.redirect_uris.len() == 1 => client.redirect_uris[0].clone(),
            None => return Err(page("invalid_request", "redirect_uri is missing")),
        };
        let state = params.state.clone();
        let refuse = |error: &'static str, why: &str| {
            AuthorizeError::Redirect(self.answer(
                &redirect_uri,
                &[("error", error), ("error_description", why)],
                &state,
            ))
        };
        if params.response_type.as_deref() != Some("code") {
            return Err(refuse("unsupported_response_type", "the only response type is 'code'"));
        }
        if !client.grant_types.iter().any(|g| g == "authorization_code") {
            return Err(refuse("unauthorized_client", "the client did not register the authorization code grant"));
        }
        let Some(code_challenge) = params.code_challenge.as_deref().filter(|c| !c.is_empty()) else {
            return Err(refuse("invalid_request", "code_challenge is missing: PKCE (S256) is required"));
        };
        if params.code_challenge_method.as_deref() != Some("S256") {
            return Err(refuse("invalid_request", "code_challenge_method must be S256"));
        }
        if !is_pkce_value(code_challenge) {
            return Err(refuse("invalid_request", "code_challenge is not a base64url SHA-256"));
        }
        let resource = match params.resource.as_deref() {
            None => self.audience.clone(),
            Some(resource) if resource.trim_end_matches('/') == self.audience => self.audience.clone(),
            Some(_) => return Err(refuse("invalid_target", "this issuer issues tokens only for this server's /mcp")),
        };
        let scope = match requested_scope(params.scope.as_deref()) {
            Ok(scope) => scope,
            Err(unknown) => return Err(refuse("invalid_scope", &format!("the scope '{unknown}' is not known here"))),
        };
        Ok(Authorization {
            client_id: client.client_id.clone(),
            client_name: client.name().to_owned(),
            redirect_uri,
            state,
            code_challenge: code_challenge.to_owned(),
            scope,
            resource,
            issued_at: now(),
            person: None,
            upstream: None,
        })
    }

    /// Whether people may sign in as local users (there is one).
    pub async fn has_local_users(&self) -> bool {
        self.runtime.store().list_settings(users::USER).await.is_ok_and(|users| !users.is_empty())
    }

    /// The upstream leg begins: where the browser goes to sign in there.
    pub fn to_upstream(&self, authorization: &Authorization) -> Option<String> {
        let upstream = self.upstream.as_ref()?;
        let verifier = random_id(32);
        let nonce = random_id(16);
        let challenge = B64.encode(<sha2::Sha256 as sha2::Digest>::digest(verifier.as_bytes()));
        let leg =
            Authorization { upstream: Some((verifier, nonce.clone())), issued_at: now(), ..authorization.clone() };
        Some(upstream.sign_in_url(&self.upstream_callback(), &self.ticket(&leg), &challenge, &nonce))
    }

    /// The upstream leg ends with a code: the authorization with the person who signed in.
    pub async fn from_upstream(&self, ticket: &str, code: &str) -> Result<Authorization, String> {
        let upstream = self.upstream.as_ref().ok_or("no upstream issuer is configured")?;
        let mut authorization =
            self.read_ticket(ticket).ok_or("the sign-in took too long, or its state was changed")?;
        let (verifier, nonce) = authorization.upstream.take().ok_or("the state is not an upstream sign-in's")?;
        let identity = upstream.identity(code, &self.upstream_callback(), &verifier, &nonce).await?;
        authorization.person = Some(Person {
            subject: identity.subject,
            groups: identity.groups,
            scope: UPSTREAM_SCOPE.as_str().to_owned(),
            issuer: Some(upstream.settings.issuer.clone()),
        });
        authorization.issued_at = now();
        Ok(authorization)
    }

    fn upstream_callback(&self) -> String {
        format!("{}{}", self.issuer, upstream::CALLBACK_PATH)
    }

    /// The ticket carrying `authorization` to the person's answer.
    pub fn ticket(&self, authorization: &Authorization) -> String {
        let body = B64.encode(serde_json::to_vec(authorization).expect("authorizations encode"));
        let tag = hmac::sign(&self.ticket_key, body.as_bytes());
        format!("{body}.{}", B64.encode(tag.as_ref()))
    }

    /// The authorization a ticket carries, when this server signed it within the last minutes.
    pub fn read_ticket(&self, ticket: &str) -> Option<Authorization> {
        let (body, tag) = ticket.split_once('.')?;
        hmac::verify(&self.ticket_key, body.as_bytes(), &B64.decode(tag).ok()?).ok()?;
        let authorization: Authorization = serde_json::from_slice(&B64.decode(body).ok()?).ok()?;
        (now().saturating_sub(authorization.issued_at) < TICKET_SECONDS).then_some(authorization)
    }

    /// The person refused: where the browser goes.
    pub fn denied(&self, authorization: &Authorization) -> String {
        let why = [("error", "access_denied"), ("error_description", "the person did not allow it")];
        self.answer(&authorization.redirect_uri, &why, &authorization.state)
    }

    /// `person` signed in and allowed it: a code, and where the browser goes.
    pub async fn allowed(&self, authorization: &Authorization, person: &Person) -> Result<String, BuiltinError> {
        let scope = within(&authorization.scope, &person.scope);
        if scope.is_empty() {
            let why =
                [("error", "invalid_scope"), ("error_description", "the person holds none of the scopes asked for")];
            return Ok(self.answer(&authorization.redirect_uri, &why, &authorization.state));
        }
        let grant = Grant {
            client_id: authorization.client_id.clone(),
            subject: person.subject.clone(),
            groups: person.groups.clone(),
            identity_issuer: person.issuer.clone(),
            scope,
            resource: authorization.resource.clone(),
            family: Grants::family(),
            expires_at: 0,
            redirect_uri: Some(authorization.redirect_uri.clone()),
            code_challenge: Some(authorization.code_challenge.clone()),
        };
        let code = self.grants.issue_code(&grant).await?;
        Ok(self.answer(&authorization.redirect_uri, &[("code", &code)], &authorization.state))
    }

    /// The redirect URI with `pairs`, the state and this issuer (RFC 9207) added to its query.
    fn answer(&self, redirect_uri: &str, pairs: &[(&str, &str)], state: &Option<String>) -> String {
        let mut url = url::Url::parse(redirect_uri).expect("redirect URIs are checked URLs");
        {
            let mut query = url.query_pairs_mut();
            query.extend_pairs(pairs);
            if let Some(state) = state {
                query.append_pair("state", state);
            }
            query.append_pair("iss", &self.issuer);
        }
        url.to_string()
    }

    /// Registers a client (RFC 7591): the response, or the error.
    pub async fn register(&self, metadata: &Value) -> Result<Value, OAuthError> {
        match self.clients.register(metadata).await {
            Ok((client, secret)) => Ok(client.registered(secret.as_deref())),
            Err(BuiltinError::Client(e)) => Err(OAuthError::new(e.code(), e.to_string())),
            Err(e) => Err(OAuthError::new("server_error", e.to_string())),
        }
    }

    /// A token request: the token response, or the error. `basic` is the client id and secret of
    /// an `Authorization: Basic` header.
    pub async fn token(&self, params: &TokenParams, basic: Option<(String, String)>) -> Result<Value, OAuthError> {
        let client = self.client_of(params, basic).await?;
        let grant = match params.grant_type.as_deref() {
            Some("authorization_code") => self.trade_code(params, &client).await?,
            Some("refresh_token") => self.trade_refresh(params, &client).await?,
            Some(other) => {
                return Err(OAuthError::new("unsupported_grant_type", format!("'{other}' is not supported")));
            }
            None => return Err(OAuthError::new("invalid_request", "grant_type is missing")),
        };
        if let Some(resource) = &params.resource
            && resource.trim_end_matches('/') != grant.resource
        {
            return Err(OAuthError::new("invalid_target", "the grant is for another resource"));
        }
        let server_error = |e: BuiltinError| OAuthError::new("server_error", e.to_string());
        let access_token = self.access_token(&grant).map_err(server_error)?;
        let mut answer = json!({
            "access_token": access_token,
            "token_type": "Bearer",
            "expires_in": self.access_token_seconds,
            "scope": grant.scope,
        });
        if client.grant_types.iter().any(|g| g == "refresh_token") {
            answer["refresh_token"] = json!(self.grants.issue_refresh(&grant).await.map_err(server_error)?);
        }
        self.clients.used(&client).await.map_err(server_error)?;
        Ok(answer)
    }

    /// The client a token request comes from, authenticated as it registered.
    async fn client_of(&self, params: &TokenParams, basic: Option<(String, String)>) -> Result<Client, OAuthError> {
        let (client_id, secret) = match (&basic, &params.client_id) {
            (Some((id, secret)), _) => (id.clone(), Some(secret.clone())),
            (None, Some(id)) => (id.clone(), params.client_secret.clone()),
            (None, None) => return Err(OAuthError::new("invalid_client", "client_id is missing")),
        };
        let client =
            self.clients.find(&client_id).await.map_err(|e| OAuthError::new("invalid_client", e.to_string()))?;
        let proven = match (&client.secret_digest, secret) {
            (None, _) => true,
            (Some(expected), Some(given)) => bool::from(digest(&given).as_bytes().ct_eq(expected.as_bytes())),
            (Some(_), None) => false,
        };
        if !proven {
            return Err(OAuthError::new("invalid_client", "the client's secret is missing or wrong"));
        }
        Ok(client)
    }

    async fn trade_code(&self, params: &TokenParams, client: &Client) -> Result<Grant, OAuthError> {
        let Some(code) = params.code.as_deref() else {
            return Err(OAuthError::new("invalid_request", "code is missing"));
        };
        // OAuth 2.1 §4.1.3: a code issued with a challenge needs its verifier.
        let Some(verifier) = params.code_verifier.as_deref() else {
            return Err(OAuthError::new("invalid_request", "code_verifier is missing: PKCE is required"));
        };
        let server_error = |e: BuiltinError| OAuthError::new("server_error", e.to_string());
        let grant = match self.grants.take_code(code).await.map_err(server_error)? {
            Ok(grant) => grant,
            Err(_) => return Err(OAuthError::new("invalid_grant", "the code is unknown, used or expired")),
        };
        if grant.client_id != client.client_id {
            return Err(OAuthError::new("invalid_grant", "the code was issued to another client"));
        }
        if params.redirect_uri.as_deref() != grant.redirect_uri.as_deref() {
            return Err(OAuthError::new("invalid_grant", "redirect_uri is not the authorization request's"));
        }
        let challenge = B64.encode(<sha2::Sha256 as sha2::Digest>::digest(verifier.as_bytes()));
        if !is_pkce_value(verifier) || Some(challenge) != grant.code_challenge {
            return Err(OAuthError::new("invalid_grant", "code_verifier does not match the code_challenge"));
        }
        Ok(grant)
    }

    async fn trade_refresh(&self, params: &TokenParams, client: &Client) -> Result<Grant, OAuthError> {
        let Some(token) = params.refresh_token.as_deref() else {
            return Err(OAuthError::new("invalid_request", "refresh_token is missing"));
        };
        let server_error = |e: BuiltinError| OAuthError::new("server_error", e.to_string());
        let mut grant = match self.grants.take_refresh(token).await.map_err(server_error)? {
            Ok(grant) => grant,
            Err(Refused::Replayed) => {
                return Err(OAuthError::new(
                    "invalid_grant",
                    "the refresh token was used before: its grant is revoked",
                ));
            }
            Err(_) => return Err(OAuthError::new("invalid_grant", "the refresh token is unknown, revoked or expired")),
        };
        if grant.client_id != client.client_id {
            return Err(OAuthError::new("invalid_grant", "the refresh token was issued to another client"));
        }
        // A local user removed, or given a smaller scope, gets no more (or no wider) tokens.
        if grant.identity_issuer.is_none() {
            let user = users::find(&self.runtime, &grant.subject).await.map_err(server_error)?;
            let Some(user) = user else { return Err(OAuthError::new("invalid_grant", "the user no longer exists")) };
            grant.scope = within(&grant.scope, &user.scope);
            if grant.scope.is_empty() {
                return Err(OAuthError::new("invalid_grant", "the user no longer holds the scope"));
            }
        }
        // A narrower scope may be asked for (RFC 6749 §6), never a wider one.
        if let Some(asked) = params.scope.as_deref().filter(|s| !s.trim().is_empty()) {
            if asked.split_whitespace().any(|s| !grant.scope.split(' ').any(|held| held == s)) {
                return Err(OAuthError::new("invalid_scope", "a refresh cannot widen the scope"));
            }
            grant.scope = asked.split_whitespace().collect::<Vec<_>>().join(" ");
        }
        Ok(grant)
    }

    /// An access token for `grant` (RFC 9068).
    fn access_token(&self, grant: &Grant) -> Result<String, BuiltinError> {
        let issued = now();
        let mut claims = json!({
            "iss": self.issuer,
            "sub": grant.subject,
            "aud": grant.resource,
            "client_id": grant.client_id,
            "scope": grant.scope,
            "groups": grant.groups,
            "iat": issued,
            "exp": issued + self.access_token_seconds,
            "jti": random_id(16),
        });
        if let Some(issuer) = &grant.identity_issuer {
            claims[upstream::IDENTITY_ISSUER] = json!(issuer);
        }
        let token = self.keys.sign("at+jwt", &claims)?;
        if let Value::Object(claims) = &claims {
            self.resource_server.validator.remember(&token, claims);
        }
        Ok(token)
    }
}

/// The scope asked for: the words this server knows (OpenID Connect's `openid`,
/// `offline_access`, `profile` and `email` are let through and dropped), [`DEFAULT_SCOPE`] when
/// none; else the unknown word.
fn requested_scope(scope: Option<&str>) -> Result<String, String> {
    let mut kept = Vec::new();
    for word in scope.unwrap_or_default().split_whitespace() {
        if Scope::parse(word).is_some() {
            if !kept.contains(&word) {
                kept.push(word);
            }
        } else if !matches!(word, "openid" | "offline_access" | "profile" | "email") {
            return Err(word.to_owned());
        }
    }
    Ok(if kept.is_empty() { DEFAULT_SCOPE.to_owned() } else { kept.join(" ") })
}

/// The scopes of `asked` (space-separated) that `held` (a scope's name) allows.
fn within(asked: &str, held: &str) -> String {
    let held = Scope::parse(held).unwrap_or(Scope::Read);
    let kept: Vec<&str> = asked.split(' ').filter(|s| Scope::parse(s).is_some_and(|s| s <= held)).collect();
    kept.join(" ")
}

/// A PKCE value: 43 to 128 of `[A-Za-z0-9-._~]` (RFC 7636 §4.1).
fn is_pkce_value(value: &str) -> bool {
    (43..=128).contains(&value.len()) && value.chars().all(|c| c.is_ascii_alphanumeric() || "-._~".contains(c))
}

/// `CKS_MCP_AUTH_ACCESS_TOKEN_SECONDS`, else [`ACCESS_TOKEN_SECONDS`] (its form is checked with
/// the other variables').
pub fn access_token_seconds(env: &std::collections::HashMap<String, String>) -> u64 {
    let value = env.get("CKS_MCP_AUTH_ACCESS_TOKEN_SECONDS").and_then(|v| v.trim().parse().ok());
    value.filter(|s| *s > 0).unwrap_or(ACCESS_TOKEN_SECONDS)
}

/// Seconds since the epoch.
pub(crate) fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// `bytes` random bytes, in base64url.
pub(crate) fn random_id(bytes: usize) -> String {
    let mut buffer = vec![0u8; bytes];
    rand::rng().fill_bytes(&mut buffer);
    B64.encode(buffer)
}

/// The SHA-256 of a secret, in hex: what is kept in its place.
pub(crate) fn digest(secret: &str) -> String {
    cks_tools::api_keys::digest(secret)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scope_asked_for_is_kept_to_what_is_known() {
        assert_eq!(requested_scope(None).unwrap(), "cks:read cks:write");
        assert_eq!(requested_scope(Some("openid cks:admin cks:admin")).unwrap(), "cks:admin");
        assert_eq!(requested_scope(Some("cks:read offline_access")).unwrap(), "cks:read");
        assert_eq!(requested_scope(Some("cks:read payments")).unwrap_err(), "payments");
    }

    #[test]
    fn a_person_gets_the_scopes_they_hold_only() {
        assert_eq!(within("cks:read cks:write cks:admin", "cks:write"), "cks:read cks:write");
        assert_eq!(within("cks:admin", "cks:read"), "");
        assert_eq!(within("cks:read", "nonsense"), "cks:read");
    }

    #[test]
    fn pkce_values_have_the_rfc_form() {
        assert!(is_pkce_value(&"a".repeat(43)) && is_pkce_value(&"Z-._~9".repeat(20)));
        assert!(!is_pkce_value(&"a".repeat(42)) && !is_pkce_value(&"a".repeat(129)) && !is_pkce_value(&"+".repeat(43)));
    }
}
