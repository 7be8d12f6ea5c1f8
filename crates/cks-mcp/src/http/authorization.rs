//! The built-in authorization server's endpoints (`auth/builtin.rs` decides; this file speaks
//! HTTP): its metadata, keys, registration, the consent page and the token endpoint. None needs
//! a token. Token and registration answers are JSON and never cached; the consent page may not be
//! framed (clickjacking) and runs no script.

use std::sync::Arc;

use axum::Form;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde::Deserialize;
use serde_json::Value;

use super::AppState;
use crate::auth::builtin::{
    Authorization, AuthorizationServer, AuthorizeError, AuthorizeParams, OAuthError, Person, TokenParams, users,
};

/// The paths served here; none needs a token.
pub(super) const PATHS: [&str; 5] = [
    "/oauth/authorize",
    "/oauth/token",
    "/oauth/register",
    "/oauth/jwks",
    crate::auth::builtin::upstream::CALLBACK_PATH,
];
/// The authorization server metadata's path (RFC 8414).
pub(super) const METADATA_PATH: &str = "/.well-known/oauth-authorization-server";

const PAGE_POLICY: &str =
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; frame-ancestors 'none'";

fn issuer(state: &AppState) -> Option<&Arc<AuthorizationServer>> {
    state.config.issuer.as_ref()
}

/// `GET /.well-known/oauth-authorization-server`.
pub(super) async fn metadata(State(state): State<AppState>) -> Response {
    match issuer(&state) {
        Some(issuer) => axum::Json(issuer.metadata()).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// `GET /oauth/jwks`: the public keys tokens are signed with.
pub(super) async fn jwks(State(state): State<AppState>) -> Response {
    match issuer(&state) {
        Some(issuer) => axum::Json(issuer.keys.jwks()).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// `POST /oauth/register` (RFC 7591).
pub(super) async fn register(State(state): State<AppState>, body: axum::body::Bytes) -> Response {
    let Some(issuer) = issuer(&state) else { return StatusCode::NOT_FOUND.into_response() };
    let metadata: Value = match serde_json::from_slice(&body) {
        Ok(metadata) => metadata,
        Err(e) => return oauth_error(&OAuthError::new("invalid_client_metadata", format!("not JSON: {e}"))),
    };
    match issuer.register(&metadata).await {
        Ok(client) => {
            let id = client["client_id"].as_str().unwrap_or_default();
            tracing::info!(target: "cks_auth", client_id = id, "a client registered");
            no_store((StatusCode::CREATED, axum::Json(client)).into_response())
        }
        Err(e) => oauth_error(&e),
    }
}

/// `POST /oauth/token`.
pub(super) async fn token(
    State(state): State<AppState>,
    headers: HeaderMap,
    Form(params): Form<TokenParams>,
) -> Response {
    let Some(issuer) = issuer(&state) else { return StatusCode::NOT_FOUND.into_response() };
    match issuer.token(&params, basic_credentials(&headers)).await {
        Ok(answer) => no_store(axum::Json(answer).into_response()),
        Err(e) => {
            tracing::info!(target: "cks_auth", error = e.error, reason = %e.description, "token request refused");
            oauth_error(&e)
        }
    }
}

/// `GET /oauth/authorize`: the consent page, or the request's error.
pub(super) async fn authorize(State(state): State<AppState>, Query(params): Query<AuthorizeParams>) -> Response {
    let Some(issuer) = issuer(&state) else { return StatusCode::NOT_FOUND.into_response() };
    match issuer.authorize(&params).await {
        Ok(authorization) => consent_page(issuer, &authorization, None).await,
        Err(e) => refused(e),
    }
}

/// What the upstream issuer sends the browser back with.
#[derive(Debug, Deserialize)]
pub(super) struct UpstreamAnswer {
    state: Option<String>,
    code: Option<String>,
    error: Option<String>,
}

/// `GET /oauth/upstream`: back from the upstream issuer; the consent page for the person.
pub(super) async fn from_upstream(State(state): State<AppState>, Query(answer): Query<UpstreamAnswer>) -> Response {
    let Some(issuer) = issuer(&state) else { return StatusCode::NOT_FOUND.into_response() };
    let page_error = |why: String| refused(AuthorizeError::Page(OAuthError::new("access_denied", why)));
    let (Some(ticket), Some(code)) = (answer.state, answer.code) else {
        let why = answer.error.unwrap_or_else(|| "no code".into());
        return page_error(format!("The sign-in at the upstream issuer did not finish: {}.", why));
    };
    match issuer.from_upstream(&ticket, &code).await {
        Ok(authorization) => consent_page(issuer, &authorization, None).await,
        Err(why) => {
            tracing::info!(target: "cks_auth", reason = %why, "an upstream sign-in failed");
            page_error(format!("The sign-in at the upstream issuer failed: {why}."))
        }
    }
}

/// The consent page's form.
#[derive(Debug, Deserialize)]
pub(super) struct Answer {
    ticket: String,
    decision: String,
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
}

/// `POST /oauth/authorize`: the person's answer.
pub(super) async fn answer(State(state): State<AppState>, Form(answer): Form<Answer>) -> Response {
    let Some(issuer) = issuer(&state) else { return StatusCode::NOT_FOUND.into_response() };
    let Some(authorization) = issuer.read_ticket(&answer.ticket) else {
        let why = "The sign-in page expired or was changed. Go back to the application and connect again.";
        return refused(AuthorizeError::Page(OAuthError::new("invalid_request", why)));
    };
    match answer.decision.as_str() {
        "allow" => {}
        "upstream" if authorization.person.is_none() => {
            return issuer
                .to_upstream(&authorization)
                .map_or_else(|| StatusCode::NOT_FOUND.into_response(), |to| redirect(&to));
        }
        _ => return redirect(&issuer.denied(&authorization)),
    }
    let person = match &authorization.person {
        // Signed in upstream already (the ticket says so, and only this server signs tickets).
        Some(person) => person.clone(),
        None => match users::sign_in(issuer.runtime().clone(), answer.username.trim(), &answer.password).await {
            Ok(Some(user)) => Person::from(user),
            Ok(None) => {
                tracing::info!(target: "cks_auth", client_id = %authorization.client_id, "a sign-in failed");
                let problem = "That name and password do not match.";
                return consent_page(issuer, &authorization, Some(problem)).await;
            }
            Err(e) => return server_error(&e.to_string()),
        },
    };
    match issuer.allowed(&authorization, &person).await {
        Ok(location) => {
            tracing::info!(target: "cks_auth", client_id = %authorization.client_id, subject = %person.subject, "authorized");
            redirect(&location)
        }
        Err(e) => server_error(&e.to_string()),
    }
}

fn refused(error: AuthorizeError) -> Response {
    match error {
        AuthorizeError::Redirect(location) => redirect(&location),
        AuthorizeError::Page(e) => {
            let body = format!(
                "<h1>This sign-in cannot go on</h1><p id=\"error\">{}</p><p>{}</p>",
                escape(e.error),
                escape(&e.description)
            );
            page(StatusCode::BAD_REQUEST, "Sign-in refused", &body)
        }
    }
}

async fn consent_page(issuer: &AuthorizationServer, authorization: &Authorization, problem: Option<&str>) -> Response {
    let back_to = url::Url::parse(&authorization.redirect_uri)
        .map(|u| match u.host_str() {
            Some(host) => format!("{}://{host}", u.scheme()),
            None => u.scheme().to_owned(),
        })
        .unwrap_or_default();
    let scopes: String = authorization
        .scope
        .split(' ')
        .map(|scope| format!("<li><code>{}</code>: {}</li>", escape(scope), scope_meaning(scope)))
        .collect();
    let problem = problem.map_or(String::new(), |p| format!("<p id=\"problem\" role=\"alert\">{}</p>", escape(p)));
    // Signed in upstream already: only the question remains. Else a local user's name and
    // password, and the upstream issuer's button when there is one.
    let sign_in = match (&authorization.person, &issuer.upstream) {
        (Some(person), _) => format!(
            "<p>Signed in as <strong id=\"person\">{}</strong> at {}.</p>",
            escape(&person.subject),
            escape(person.issuer.as_deref().unwrap_or_default())
        ),
        (None, upstream) => {
            let local = if upstream.is_none() || issuer.has_local_users().await {
                "<label>Name <input name=\"username\" autocomplete=\"username\"></label>\
                 <label>Password <input name=\"password\" type=\"password\" autocomplete=\"current-password\"></label>"
            } else {
                ""
            };
            let upstream = upstream.as_ref().map_or(String::new(), |u| {
                format!(
                    "<p><button id=\"upstream\" name=\"decision\" value=\"upstream\">Sign in at {}</button></p>",
                    escape(&u.settings.issuer)
                )
            });
            format!("{local}{upstream}")
        }
    };
    let id = if authorization.person.is_some() { "consent" } else { "sign-in" };
    let body = format!(
        "<h1>Sign in to cks-mcp</h1>\
         <p><strong id=\"client\">{client}</strong> asks to use this knowledge graph server as you. It may:</p>\
         <ul id=\"scopes\">{scopes}</ul>\
         <p>You are sent back to <code id=\"redirect\">{back_to}</code>.</p>{problem}\
         <form id=\"{id}\" method=\"post\" action=\"/oauth/authorize\">\
         <input type=\"hidden\" name=\"ticket\" value=\"{ticket}\">{sign_in}\
         <p><button name=\"decision\" value=\"allow\">Allow</button> \
         <button name=\"decision\" value=\"deny\">Deny</button></p></form>",
        client = escape(&authorization.client_name),
        back_to = escape(&back_to),
        ticket = escape(&issuer.ticket(authorization)),
    );
    page(StatusCode::OK, "Sign in to cks-mcp", &body)
}

fn scope_meaning(scope: &str) -> &'static str {
    match scope {
        "cks:read" => "read the sessions you can read",
        "cks:write" => "read and change the sessions you can change",
        "cks:admin" => "manage the server: storage, keys, every session",
        _ => "",
    }
}

fn page(status: StatusCode, title: &str, body: &str) -> Response {
    let html = format!(
        "<!doctype html><html lang=\"en\"><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\">\
         <link rel=\"icon\" href=\"data:,\">\
         <title>{}</title><style>body{{font:16px system-ui,sans-serif;max-width:32rem;margin:3rem auto;padding:0 1rem}}\
         label{{display:block;margin:.5rem 0}}input{{display:block;width:100%}}#problem{{color:#a00}}</style>\
         <body>{body}</body></html>",
        escape(title)
    );
    let mut response = (status, html).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(PAGE_POLICY));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    // Not `no-referrer`: with it a browser sends the form's answer with `Origin: null`. Nothing of
    // the page's address leaves for another origin either way.
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    no_store(response)
}

fn redirect(location: &str) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    if let Ok(value) = HeaderValue::from_str(location) {
        response.headers_mut().insert(header::LOCATION, value);
    }
    no_store(response)
}

/// An OAuth error as JSON: `401` for a client that did not prove itself, else `400`.
fn oauth_error(error: &OAuthError) -> Response {
    let status = if error.error == "invalid_client" { StatusCode::UNAUTHORIZED } else { StatusCode::BAD_REQUEST };
    let status = if error.error == "server_error" { StatusCode::INTERNAL_SERVER_ERROR } else { status };
    no_store((status, axum::Json(error.body())).into_response())
}

fn server_error(message: &str) -> Response {
    tracing::warn!(target: "cks_auth", "the authorization server failed: {message}");
    oauth_error(&OAuthError::new("server_error", "the server could not answer; try again"))
}

fn no_store(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
    response
}

/// The client id and secret of `Authorization: Basic` (RFC 6749 §2.3.1: each form-encoded).
fn basic_credentials(headers: &HeaderMap) -> Option<(String, String)> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, encoded) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD.decode(encoded.trim()).ok()?;
    let (id, secret) = std::str::from_utf8(&decoded).ok()?.split_once(':')?;
    Some((super::percent_decode(id), super::percent_decode(secret)))
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;").replace('\'', "&#39;")
}
