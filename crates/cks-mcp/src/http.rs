//! HTTP: MCP streamable HTTP at `/mcp` (rmcp), the reference's bare JSON-RPC form on the same path,
//! runtime events as Server-Sent Events at `/events` and `/events/{session_id}`, one `ai_chat` turn
//! watched as it runs at `POST /chat/stream` (Server-Sent Events; see `http/chat.rs`), a liveness
//! answer at `/health`, and the chat page at `/` with its assets under `/assets/` (`page.rs`).
//! MCP sessions are kept in the store, so any replica can serve any of their requests
//! (`sessions.rs`).
//! Accepted connections have Nagle's algorithm off (see [`serve`]).
//!
//! Security, checked before anything else on every request:
//! - `Host` must name this server (loopback names, or the non-loopback address it was bound to):
//!   a DNS-rebinding page cannot reach it under another name;
//! - a present `Origin` must be allowed (loopback origins and `CKS_MCP_ALLOWED_ORIGINS`), else 403;
//!   CORS headers are sent only to allowed origins; preflights are answered without a token;
//! - with `CKS_MCP_HTTP_TOKEN`, `Authorization: Bearer <token>` (or `?token=` for EventSource) is
//!   required, compared in constant time, else 401 — except for the page and its assets, which
//!   hold no data: the page asks for the token and sends it with every call it makes;
//! - with OAuth (`CKS_MCP_AUTH_ISSUER`), an access token in `Authorization` is required on the same
//!   routes, and each request needs a scope (`auth.rs`); the principal the token names travels
//!   with the request to the tool calls it makes. The metadata document
//!   (`/.well-known/oauth-protected-resource[/mcp]`) and the page's `/sign-in` need no token;
//! - an API key in `Authorization` (`auth/api_keys.rs`) is accepted wherever a token is needed,
//!   and with `CKS_MCP_AUTH=keys` one is needed; its principal travels as an access token's does;
//! - request bodies above the configured limit get 413 (with a JSON-RPC error naming the limit);
//! - once the caller is known, its limits (`limits.rs`): a request over its rate, or a tool call
//!   (`tools/call` at `/mcp`, `POST /chat/stream`) over the calls or chat turns it may have in
//!   flight, gets 429 with `Retry-After`. A call is counted until its answer is sent or the client
//!   goes away; a session's `GET` stream and `/events` count only as one request each.

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::serve::ListenerExt;
use futures::StreamExt as _;
use futures::stream::Stream;
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::HashSet;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use subtle::ConstantTimeEq;
use tokio::sync::broadcast::error::RecvError;
use tower::ServiceExt;

use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use crate::auth::api_keys::{KeyError, KeyRing};
use crate::auth::builtin::AuthorizationServer;
use crate::auth::{OAuth, Principal, Scope, scopes};
use crate::config::Config;
use crate::limits::{Admission, Key, Refusal};
use crate::server::CksServer;
use cks_tools::ErrorCode;

mod authorization;
mod bare;
mod body;
mod chat;
mod coalesce;
mod page;

/// HTTP settings taken from the configuration.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    pub token: Option<String>,
    pub allowed_origins: Vec<String>,
    pub bind: Option<SocketAddr>,
    pub max_body_bytes: usize,
    /// OAuth, found at start-up (`auth.rs`); `None`: the static token, or none.
    pub oauth: Option<Arc<OAuth>>,
    /// API keys (`auth/api_keys.rs`): accepted wherever a credential is needed.
    pub keys: Option<Arc<KeyRing>>,
    /// `CKS_MCP_AUTH=keys`: a credential is needed even without a static token or OAuth.
    pub keys_only: bool,
    /// `CKS_MCP_AUTH=builtin`: this server's own authorization server (`auth/builtin.rs`).
    pub issuer: Option<Arc<AuthorizationServer>>,
}

impl From<&Config> for HttpConfig {
    fn from(config: &Config) -> Self {
        HttpConfig {
            token: config.http_token.clone(),
            allowed_origins: config.allowed_origins.clone(),
            bind: config.http,
            max_body_bytes: config.max_message_bytes,
            oauth: None,
            keys: None,
            keys_only: config.keys_only,
            issuer: None,
        }
    }
}

#[derive(Clone)]
struct AppState {
    server: CksServer,
    config: Arc<HttpConfig>,
    mcp: StreamableHttpService<CksServer, LocalSessionManager>,
    /// rmcp's sessions in this process (also `mcp`'s).
    sessions: Arc<LocalSessionManager>,
}

/// Serves HTTP on `listener` until the process ends.
pub async fn serve(listener: tokio::net::TcpListener, server: CksServer, config: HttpConfig) -> anyhow::Result<()> {
    axum::serve(without_nagle(listener), router(server, config)).await?;
    Ok(())
}

/// Accepted connections send small writes at once. With Nagle's algorithm on, the last small
/// write of an answer (an SSE frame after the headers) waits for the ACK of the previous one,
/// which the client delays by up to 40 ms: every second sequential call stalled that long.
fn without_nagle(
    listener: tokio::net::TcpListener,
) -> impl axum::serve::Listener<Io = tokio::net::TcpStream, Addr = SocketAddr> {
    listener.tap_io(|stream| {
        if let Err(e) = stream.set_nodelay(true) {
            tracing::warn!("could not set TCP_NODELAY on an accepted connection: {e}");
        }
    })
}

/// The application, also used by tests.
pub fn router(server: CksServer, config: HttpConfig) -> Router {
    let factory_server = server.clone();
    let sessions = Arc::new(LocalSessionManager::default());
    // Subscribed before the task starts, so no event sent meanwhile is missed.
    tokio::spawn(crate::sessions::follow(
        server.runtime.subscribe(),
        server.records.clone(),
        server.calls.clone(),
        server.streams.clone(),
        sessions.clone(),
    ));
    let mut mcp_config = StreamableHttpServerConfig::default()
        .disable_allowed_hosts() // checked by our own middleware, with the same rules for every route
        // A stateless (2026-07-28) request whose handler sends nothing before its answer is
        // answered as one JSON body; one that reports progress is answered as a stream.
        .with_json_response(true)
        .with_max_request_body_bytes(config.max_body_bytes);
    // Any replica on the store (or this server after a restart) can serve a session's next request.
    mcp_config.session_store = Some(Arc::new(server.records.clone()));
    let mcp = StreamableHttpService::new(move || Ok(factory_server.clone()), sessions.clone(), mcp_config);
    let state = AppState { server, config: Arc::new(config.clone()), mcp, sessions };
    Router::new()
        .route("/mcp", any(mcp_endpoint))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route("/chat/stream", post(chat::chat_stream))
        .route("/events", get(events))
        .route("/events/{session_id}", get(events_for_session))
        .route("/", get(page::index))
        .route("/assets/{name}", get(page::asset))
        .route(crate::auth::SIGN_IN_PATH, get(page::sign_in))
        .route(crate::auth::METADATA_PATH, get(resource_metadata))
        .route(&format!("{}/mcp", crate::auth::METADATA_PATH), get(resource_metadata))
        .route(authorization::METADATA_PATH, get(authorization::metadata))
        .route("/oauth/authorize", get(authorization::authorize).post(authorization::answer))
        .route("/oauth/token", post(authorization::token))
        .route("/oauth/register", post(authorization::register))
        .route("/oauth/jwks", get(authorization::jwks))
        .route(crate::auth::builtin::upstream::CALLBACK_PATH, get(authorization::from_upstream))
        .layer(DefaultBodyLimit::max(config.max_body_bytes))
        // Inside `guard`: it runs once the request's principal is known.
        .layer(middleware::from_fn_with_state(state.clone(), rate))
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .with_state(state)
}

// ----- security -----

fn host_name(authority: &str) -> &str {
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split(']').next().unwrap_or_default();
    }
    authority
        .rsplit_once(':')
        .map_or(authority, |(host, port)| if port.chars().all(|c| c.is_ascii_digit()) { host } else { authority })
}

fn is_loopback_name(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

fn host_allowed(config: &HttpConfig, host: &str) -> bool {
    let name = host_name(host);
    if is_loopback_name(name) {
        return true;
    }
    let bound = config.bind.map(|a| a.ip().to_string());
    bound.is_some_and(|b| b == name || (b == "0.0.0.0" || b == "::"))
        || config.allowed_origins.iter().any(|o| origin_host(o).is_some_and(|h| h.eq_ignore_ascii_case(name)))
        || public_host(config).is_some_and(|h| h.eq_ignore_ascii_case(name))
}

/// With OAuth, the host of the public URL: the name a proxy in front passes on.
fn public_host(config: &HttpConfig) -> Option<&str> {
    origin_host(&config.oauth.as_ref()?.settings.public_url)
}

fn origin_host(origin: &str) -> Option<&str> {
    let rest = origin.split_once("://")?.1;
    Some(host_name(rest.split('/').next().unwrap_or(rest)))
}

fn origin_allowed(config: &HttpConfig, origin: &str) -> bool {
    let origin = origin.trim_end_matches('/');
    let scheme_ok = origin.starts_with("http://") || origin.starts_with("https://");
    (scheme_ok && origin_host(origin).is_some_and(is_loopback_name))
        || config.allowed_origins.iter().any(|allowed| allowed.trim_end_matches('/').eq_ignore_ascii_case(origin))
        || config.oauth.as_ref().is_some_and(|oauth| same_origin(&oauth.settings.public_url, origin))
}

/// Whether `url` is at `origin` (scheme, host and port).
fn same_origin(url: &str, origin: &str) -> bool {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    let end = url[after_scheme..].find('/').map_or(url.len(), |i| i + after_scheme);
    url[..end].eq_ignore_ascii_case(origin)
}

fn token_ok(config: &HttpConfig, headers: &HeaderMap, query: Option<&str>) -> bool {
    let Some(expected) = &config.token else { return !config.keys_only };
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim);
    let from_query = query.and_then(|q| q.split('&').find_map(|pair| pair.strip_prefix("token=")).map(percent_decode));
    let given = bearer.map(str::to_owned).or(from_query);
    given.is_some_and(|g| same_secret(&g, expected))
}

/// Whether two secrets are equal, in a time that tells nothing of either: their digests (of one
/// length whatever the secrets') are compared in constant time.
fn same_secret(given: &str, expected: &str) -> bool {
    use sha2::Digest as _;
    bool::from(sha2::Sha256::digest(given.as_bytes()).ct_eq(&sha2::Sha256::digest(expected.as_bytes())))
}

/// The access token of an `Authorization: Bearer` header (OAuth takes it from nowhere else:
/// a token in a URL ends up in logs).
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim()).filter(|t| !t.is_empty())
}

/// OAuth's check of a request: its token names a principal with the route's scope; the
/// principal goes on with the request. The scope of a body's calls is checked in `/mcp`.
async fn authenticate(oauth: &OAuth, mut request: Request, next: Next) -> Response {
    let Some(token) = bearer(request.headers()) else { return oauth.unauthorized(None) };
    let principal = match oauth.validator.validate(token).await {
        Ok(principal) => principal,
        Err(e) => {
            tracing::info!(target: "cks_auth", reason = %e, "access token refused");
            return oauth.unauthorized(Some(&e));
        }
    };
    let needed = scopes::for_route(request.uri().path());
    if !principal.allows(needed) {
        return oauth.insufficient_scope(needed);
    }
    request.extensions_mut().insert(principal);
    next.run(request).await
}

/// An API key's check of a request: the key names a principal with the route's scope; the
/// principal goes on with the request, as an access token's does. Refusals name the key's id,
/// never the key.
async fn admit_key(config: &HttpConfig, ring: &KeyRing, key: &str, mut request: Request, next: Next) -> Response {
    let principal = match ring.check(key).await {
        Ok(principal) => principal,
        Err(e) => {
            let id = cks_tools::api_keys::id_of(key).unwrap_or_default();
            tracing::info!(target: "cks_auth", key_id = id, reason = %e, "API key refused");
            if e == KeyError::Unavailable {
                let mut response = error_response(StatusCode::SERVICE_UNAVAILABLE, "unavailable", &e.to_string());
                response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                return response;
            }
            return crate::auth::key_refused(&e, config.oauth.as_ref().map(|o| o.metadata_url()).as_deref());
        }
    };
    let needed = scopes::for_route(request.uri().path());
    if !principal.allows(needed) {
        return insufficient_scope(config, needed);
    }
    request.extensions_mut().insert(principal);
    next.run(request).await
}

/// `403` for a principal without the scope `needed`.
fn insufficient_scope(config: &HttpConfig, needed: Scope) -> Response {
    crate::auth::insufficient_scope(needed, config.oauth.as_ref().map(|o| o.metadata_url()).as_deref())
}

/// The API key a request's `Authorization` header holds, when keys are checked here.
fn api_key<'c>(config: &'c HttpConfig, headers: &HeaderMap) -> Option<(&'c KeyRing, String)> {
    let ring = config.keys.as_deref()?;
    let key = bearer(headers).filter(|token| cks_tools::api_keys::id_of(token).is_some())?;
    Some((ring, key.to_owned()))
}

/// The protected resource metadata (RFC 9728); not found without OAuth.
async fn resource_metadata(State(state): State<AppState>) -> Response {
    match &state.config.oauth {
        Some(oauth) => axum::Json(oauth.metadata()).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

pub(crate) fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                match u8::from_str_radix(std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("zz"), 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 3;
                    }
                    Err(_) => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn error_response(status: StatusCode, error: &str, message: &str) -> Response {
    (status, axum::Json(json!({"error": error, "message": message}))).into_response()
}

/// Whether a route needs no token: the page, its assets, the metadata documents, the built-in
/// authorization server's endpoints.
fn is_open(request: &Request) -> bool {
    let path = request.uri().path();
    page::is_page_request(request)
        || path.starts_with(crate::auth::METADATA_PATH)
        || path == authorization::METADATA_PATH
        || authorization::PATHS.contains(&path)
}

/// Whether any origin may call the route: the authorization server's endpoints a browser-based
/// client calls itself (OAuth's are made for it: no cookie is read there).
fn is_cross_origin(request: &Request) -> bool {
    let path = request.uri().path();
    path.starts_with(crate::auth::METADATA_PATH)
        || path == authorization::METADATA_PATH
        || matches!(path, "/oauth/token" | "/oauth/register" | "/oauth/jwks")
}

async fn guard(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let config = &state.config;
    let headers = request.headers();
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or_default();
    if !host.is_empty() && !host_allowed(config, host) {
        return error_response(
            StatusCode::FORBIDDEN,
            "forbidden_host",
            "This server does not answer to that Host name.",
        );
    }
    let origin = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()).map(str::to_owned);
    if let Some(origin) = &origin
        && !origin_allowed(config, origin)
        && !is_cross_origin(&request)
    {
        return error_response(StatusCode::FORBIDDEN, "forbidden_origin", "Requests from this Origin are not allowed.");
    }
    let open = is_open(&request);
    let key = api_key(config, headers);
    let mut response = if request.method() == Method::OPTIONS {
        StatusCode::NO_CONTENT.into_response()
    } else if let (Some((ring, key)), false) = (key, open) {
        admit_key(config, ring, &key, request, next).await
    } else if let (Some(oauth), false) = (&config.oauth, open) {
        authenticate(oauth, request, next).await
    } else if !open && !token_ok(config, headers, request.uri().query()) {
        (StatusCode::UNAUTHORIZED, axum::Json(json!({"error": "Unauthorized"}))).into_response()
    } else {
        next.run(request).await
    };
    if let Some(origin) = origin {
        let h = response.headers_mut();
        if let Ok(value) = HeaderValue::from_str(&origin) {
            h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, value);
        }
        h.insert(header::VARY, HeaderValue::from_static("Origin"));
        h.insert(header::ACCESS_CONTROL_ALLOW_METHODS, HeaderValue::from_static("GET, POST, DELETE, OPTIONS"));
        h.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static(
                "content-type, authorization, accept, mcp-session-id, mcp-protocol-version, mcp-method, mcp-name, \
                 last-event-id",
            ),
        );
        h.insert(header::ACCESS_CONTROL_EXPOSE_HEADERS, HeaderValue::from_static("mcp-session-id, www-authenticate"));
    }
    response
}

// ----- limits -----

/// Counts a request against its caller's rate (`limits.rs`). The page, its assets and the
/// metadata, which need no token, hold no data and cost nothing, are not counted.
async fn rate(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if !is_open(&request) {
        let principal = request.extensions().get::<Arc<Principal>>();
        if let Err(refusal) = state.server.limits.request(&Key::of(principal.map(AsRef::as_ref))) {
            return too_many(&refusal);
        }
    }
    next.run(request).await
}

/// Admits a tool call of the request's caller: its admission, held until it is dropped.
fn admit(state: &AppState, principal: Option<&Principal>, chat: bool) -> Result<Arc<Admission>, Refusal> {
    state.server.limits.call(Key::of(principal), chat).map(Arc::new)
}

/// 429 with `Retry-After` and a JSON body naming the limit.
fn too_many(refusal: &Refusal) -> Response {
    let body = json!({
        "error": ErrorCode::RateLimited.as_str(),
        "message": refusal.message(),
        "limit": refusal.limit.as_str(),
        "value": refusal.value,
    });
    let mut response = (StatusCode::TOO_MANY_REQUESTS, axum::Json(body)).into_response();
    response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(refusal.retry_after));
    response
}

/// The response, its body holding `admission` until it is sent or the client goes away. A body
/// already whole (a call answered) needs no holding, and keeps its length.
fn holding(response: Response, admission: Option<Arc<Admission>>) -> Response {
    use axum::body::HttpBody as _;
    let Some(admission) = admission else { return response };
    if response.body().size_hint().exact().is_some() {
        return response;
    }
    let (parts, body) = response.into_parts();
    let stream = body.into_data_stream().map(move |chunk| {
        let _ = &admission;
        chunk
    });
    Response::from_parts(parts, Body::from_stream(stream))
}

// ----- /health -----

/// A liveness answer for connection tests (cks-studio's Settings → Test Connection). It sits
/// behind the same checks as every route, so a wrong token shows up here too.
async fn health() -> Response {
    axum::Json(json!({"status": "ok", "server": "cks-mcp", "version": env!("CARGO_PKG_VERSION")})).into_response()
}

// ----- /metrics -----

/// The server's metrics for a Prometheus scrape (`metrics.rs`); with OAuth, for the admin scope.
async fn metrics(State(state): State<AppState>) -> Response {
    ([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], crate::metrics::render(&state.server)).into_response()
}

// ----- /mcp -----

async fn mcp_endpoint(State(state): State<AppState>, request: Request) -> Response {
    let (mut parts, body) = request.into_parts();
    if parts.method == Method::DELETE {
        let mut response = forward(&state, Request::from_parts(parts, body)).await;
        // rmcp says 202 Accepted to a session's end; clients expect 200 or 204 (the Python SDK
        // logs anything else as a failed termination).
        if response.status() == StatusCode::ACCEPTED {
            *response.status_mut() = StatusCode::NO_CONTENT;
            *response.body_mut() = Body::empty();
        }
        return response;
    }
    if parts.method == Method::GET
        && let Some(session) = parts.headers.get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_owned)
    {
        return session_stream(&state, session, parts, body).await;
    }
    if parts.method != Method::POST {
        return forward(&state, Request::from_parts(parts, body)).await;
    }
    let bytes = match body::read(body, state.config.max_body_bytes).await {
        Ok(bytes) => bytes,
        Err(answer) => return answer,
    };
    let principal = parts.extensions.get::<Arc<Principal>>().cloned();
    let calls = body::tool_calls(&bytes);
    if let Some(principal) = &principal {
        // The one place a body's calls meet their scope: the tool a `tools/call` names is known here.
        let names = calls.iter().flat_map(|calls| calls.names.iter().map(Option::as_deref));
        let needed = scopes::for_calls(&state.server.registry, names);
        if !principal.allows(needed) {
            return insufficient_scope(&state.config, needed);
        }
    }
    let admission = match calls {
        Some(calls) => match admit(&state, principal.as_deref(), calls.chat()) {
            Ok(admission) => {
                // Also in the request's extensions: a call that goes on as an MCP task keeps it.
                parts.extensions.insert(admission.clone());
                Some(admission)
            }
            Err(refusal) => return too_many(&refusal),
        },
        None => None,
    };
    holding(answer_body(&state, parts, bytes, principal).await, admission)
}

/// A POST's body at `/mcp`, read and admitted: checked, then answered here or by rmcp.
async fn answer_body(
    state: &AppState,
    parts: axum::http::request::Parts,
    bytes: axum::body::Bytes,
    principal: Option<Arc<Principal>>,
) -> Response {
    if let Some(session) = parts.headers.get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_owned) {
        if let Some(answer) = body::check_message(&bytes) {
            return answer;
        }
        let cancelled = body::cancelled_request(&bytes);
        let response =
            coalesce::first_event_held(forward(state, Request::from_parts(parts, Body::from(bytes))).await).await;
        if let Some(request) = cancelled {
            // The call may run on another replica: every replica on the store hears of it.
            state.server.runtime.cancel_call(&session, &request);
        }
        return response;
    }
    if body::is_stateless_revision(&parts.headers, &bytes) {
        // A self-contained request of the stateless revision.
        if let Some(answer) = body::check_message(&bytes) {
            return answer;
        }
        return forward(state, Request::from_parts(parts, Body::from(bytes))).await;
    }
    let wants_stream = parts
        .headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("text/event-stream"));
    if wants_stream && bare::is_initialize(&bytes) {
        // A streamable-HTTP client opening a session: rmcp owns the session from here on.
        return forward(state, Request::from_parts(parts, Body::from(bytes))).await;
    }
    let (status, reply) = bare::handle(&state.server, &bytes, principal, &parts.headers).await;
    (status, [(header::CONTENT_TYPE, "application/json")], reply.unwrap_or_else(|| "{}".into())).into_response()
}

/// A session's `GET` stream, where its own notifications go (its subscriptions' among them):
/// noted open in [`crate::sessions::Streams`] while the client reads it. The first time, the
/// server sends itself a notification in the session, to learn the session's peer.
async fn session_stream(state: &AppState, session: String, parts: axum::http::request::Parts, body: Body) -> Response {
    let (open, peer_known) = state.server.streams.opened(&session);
    let extensions_source = parts.clone();
    let response = forward(state, Request::from_parts(parts, body)).await;
    if response.status() != StatusCode::OK {
        return response;
    }
    if !peer_known {
        use rmcp::model::{ClientJsonRpcMessage, ClientNotification, CustomNotification};
        use rmcp::transport::streamable_http_server::session::SessionManager as _;
        let mut message = ClientJsonRpcMessage::notification(ClientNotification::CustomNotification(
            CustomNotification::new(crate::sessions::STREAM_OPENED, None),
        ));
        message.insert_extension(extensions_source);
        let _ = state.sessions.accept_message(&Arc::from(session.as_str()), message).await;
    }
    let (parts, body) = response.into_parts();
    let stream = body.into_data_stream().map(move |chunk| {
        // Held for as long as the client reads the stream.
        let _ = &open;
        chunk
    });
    Response::from_parts(parts, Body::from_stream(stream))
}

async fn forward(state: &AppState, request: Request) -> Response {
    match state.mcp.clone().oneshot(request).await {
        Ok(response) => response.map(Body::new),
        Err(never) => match never {},
    }
}

// ----- /events -----

#[derive(Debug, Deserialize)]
struct EventFilter {
    session_id: Option<String>,
    event_types: Option<String>,
}

/// The principal a request's access token named, if any.
type Caller = Option<axum::Extension<Arc<Principal>>>;

async fn events(State(state): State<AppState>, caller: Caller, Query(filter): Query<EventFilter>) -> impl IntoResponse {
    event_stream(&state, filter.session_id, filter.event_types, caller.map(|c| c.0))
}

async fn events_for_session(
    State(state): State<AppState>,
    caller: Caller,
    Path(session_id): Path<String>,
    Query(filter): Query<EventFilter>,
) -> impl IntoResponse {
    event_stream(&state, Some(session_id), filter.event_types, caller.map(|c| c.0))
}

/// The events of the sessions the caller may reach (all of them without a principal).
fn event_stream(
    state: &AppState,
    session_id: Option<String>,
    event_types: Option<String>,
    principal: Option<Arc<Principal>>,
) -> Response {
    let types: Option<HashSet<String>> =
        event_types.map(|t| t.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect());
    let receiver = state.server.runtime.subscribe();
    let reach = principal.map(|principal| (state.server.runtime.clone(), principal));
    let stream = sse_frames(receiver, session_id, types, reach);
    let mut response = Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)).text("keep-alive"))
        .into_response();
    response.headers_mut().insert("x-accel-buffering", HeaderValue::from_static("no"));
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

fn sse_frames(
    receiver: tokio::sync::broadcast::Receiver<cks_runtime::events::Event>,
    session_id: Option<String>,
    types: Option<HashSet<String>>,
    reach: Option<(Arc<cks_runtime::Runtime>, Arc<Principal>)>,
) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    futures::stream::unfold((receiver, 0u64), move |(mut receiver, mut counter)| {
        let (session_id, types, reach) = (session_id.clone(), types.clone(), reach.clone());
        async move {
            loop {
                match receiver.recv().await {
                    Ok(event) => {
                        let kind = &event.kind;
                        if !kind.concerns_a_session() || session_id.as_deref().is_some_and(|s| s != kind.session_id()) {
                            continue;
                        }
                        if types.as_ref().is_some_and(|t| !t.contains(kind.event_type())) {
                            continue;
                        }
                        if let Some((runtime, principal)) = &reach
                            && !cks_tools::principal::reaches(runtime, Some(principal), kind.session_id())
                                .await
                                .unwrap_or(false)
                        {
                            continue;
                        }
                        counter += 1;
                        let detail = serde_json::to_value(kind).unwrap_or(Value::Null);
                        let frame = json!({
                            "event": kind.event_type(),
                            "session_id": kind.session_id(),
                            "timestamp": event.created_at,
                            "detail": detail,
                        });
                        let sse = SseEvent::default().id(counter.to_string()).data(frame.to_string());
                        return Some((Ok(sse), (receiver, counter)));
                    }
                    // A slow client misses the oldest events; it keeps the newest ones.
                    Err(RecvError::Lagged(_)) => continue,
                    Err(RecvError::Closed) => return None,
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(token: Option<&str>, origins: &[&str]) -> HttpConfig {
        HttpConfig {
            token: token.map(str::to_owned),
            allowed_origins: origins.iter().map(|s| s.to_string()).collect(),
            bind: Some("127.0.0.1:8765".parse().unwrap()),
            max_body_bytes: 1024,
            oauth: None,
            keys: None,
            keys_only: false,
            issuer: None,
        }
    }

    #[test]
    fn hosts_and_origins() {
        let c = config(None, &["https://studio.example.com"]);
        assert!(host_allowed(&c, "127.0.0.1:8765"));
        assert!(host_allowed(&c, "localhost"));
        assert!(host_allowed(&c, "[::1]:8765"));
        assert!(!host_allowed(&c, "evil.example.com:8765"));
        assert!(host_allowed(&c, "studio.example.com"));
        assert!(origin_allowed(&c, "http://localhost:5173"));
        assert!(origin_allowed(&c, "http://127.0.0.1:3000"));
        assert!(origin_allowed(&c, "https://studio.example.com"));
        assert!(!origin_allowed(&c, "https://evil.example.com"));
        assert!(!origin_allowed(&c, "null"));
        assert!(!origin_allowed(&c, "http://localhost.evil.com"));
    }

    #[tokio::test]
    async fn accepted_connections_send_without_delay() {
        use axum::serve::Listener;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut listener = without_nagle(listener);
        let client = tokio::spawn(tokio::net::TcpStream::connect(addr));
        let (stream, _) = listener.accept().await;
        assert!(stream.nodelay().unwrap());
        drop(client.await.unwrap().unwrap());
    }

    #[test]
    fn tokens() {
        let c = config(Some("s3cret+x"), &[]);
        let mut headers = HeaderMap::new();
        assert!(!token_ok(&c, &headers, None));
        assert!(token_ok(&c, &headers, Some("a=1&token=s3cret%2Bx")));
        assert!(!token_ok(&c, &headers, Some("token=wrong")));
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer s3cret+x"));
        assert!(token_ok(&c, &headers, None));
        assert!(token_ok(&config(None, &[]), &HeaderMap::new(), None));
        assert!(same_secret("s3cret+x", "s3cret+x") && !same_secret("s3cret", "s3cret+x") && !same_secret("", "x"));
    }

    #[test]
    fn with_oauth_the_public_urls_host_names_this_server() {
        use crate::auth::{AuthSettings, KeySet, Validator};
        let settings = AuthSettings::example();
        let validator = Validator::new(&settings, Arc::new(KeySet::fixed(&json!({"keys": []}))));
        let mut c = config(None, &[]);
        assert!(!host_allowed(&c, "kg.example.com"));
        c.oauth = Some(Arc::new(OAuth { settings, validator, page: None }));
        assert!(host_allowed(&c, "kg.example.com:443") && !host_allowed(&c, "evil.example.com"));
    }

    #[test]
    fn bearer_tokens_come_from_the_authorization_header() {
        let mut headers = HeaderMap::new();
        assert_eq!(bearer(&headers), None);
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("bearer  abc.def.ghi "));
        assert_eq!(bearer(&headers), Some("abc.def.ghi"));
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic dXNlcjpwYXNz"));
        assert_eq!(bearer(&headers), None);
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer "));
        assert_eq!(bearer(&headers), None);
    }

    #[tokio::test]
    async fn a_principal_is_sent_only_the_events_of_sessions_it_reaches() {
        use cks_runtime::access::as_principal;
        use cks_runtime::store::memory::MemoryStore;
        let runtime = Arc::new(cks_runtime::Runtime::new(Arc::new(MemoryStore::new()), Default::default()));
        let who = |subject: &str| {
            Arc::new(Principal {
                issuer: "https://id.example".into(),
                subject: subject.into(),
                scope: Some(cks_tools::Scope::Read),
                groups: Vec::new(),
            })
        };
        let b = who("b");
        let stream = sse_frames(runtime.subscribe(), None, None, Some((runtime.clone(), b.clone())));
        let create = |owner: Arc<Principal>| {
            let runtime = runtime.clone();
            async move {
                let made = runtime.create_session(Default::default(), Default::default());
                as_principal(Some(owner.id()), made).await.unwrap().session_id
            }
        };
        let of_a = create(who("a")).await;
        let of_b = create(b).await;
        futures::pin_mut!(stream);
        let first = format!("{:?}", stream.next().await.unwrap().unwrap());
        assert!(first.contains(&of_b) && !first.contains(&of_a), "{first}");
    }
}
