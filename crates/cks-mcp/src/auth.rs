//! OAuth 2.1 over HTTP: this server as a resource server (MCP authorization; RFC 9728, 9068, 8707).
//!
//! With `CKS_MCP_AUTH_ISSUER` set, every HTTP request but the chat page, its assets and the
//! metadata document needs `Authorization: Bearer <access token>`: a JWT the issuer signed, for
//! this server's audience, unexpired. The token names a [`Principal`] and its scopes, and each
//! request needs a scope (`scopes.rs`). Refusals say how to get a better token: `401` with
//! `WWW-Authenticate: Bearer resource_metadata="…", scope="…"`, `403` with
//! `error="insufficient_scope"`.
//!
//! - `settings.rs`: the configuration, checked at start-up.
//! - `keys.rs`: the issuer's discovery document and signing keys, cached.
//! - `token.rs`: an access token checked and read into a principal.
//! - `signatures.rs`: its signature checked, with `ring`.
//! - `scopes.rs`: the scope each request needs (a tool's is `cks_tools::Scope::for_tool`).
//! - `api_keys.rs`: API keys, the other credential: checked into a principal the same way.
//! - `builtin.rs`: with `CKS_MCP_AUTH=builtin`, this server is its own issuer.
//!
//! The issuer is found and its keys fetched at start-up: a failure there stops start-up with a
//! message naming `CKS_MCP_AUTH_ISSUER`, so a misconfigured server never runs refusing everyone.
//!
//! The chat page signs in itself ([`PageSignIn`]): with `CKS_MCP_AUTH_PAGE_CLIENT_ID` set, `GET
//! /sign-in` tells it the issuer's endpoints and its client id, and the page runs the authorization
//! code flow with PKCE in the browser. The access token it gets is checked like any other.
//!
//! A token's text never appears in a log line, an error or a response: errors say what was wrong
//! with it, never what it was.

pub mod api_keys;
pub mod builtin;
pub mod keys;
pub mod scopes;
pub mod settings;
pub mod signatures;
pub mod token;

use std::sync::Arc;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

pub use cks_tools::{Principal, Scope};
pub use keys::{Discovery, DiscoveryError, KeySet};
pub use settings::AuthSettings;
pub use token::{TokenError, Validator};

/// The path of the protected resource metadata document (RFC 9728).
pub const METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

/// The path where the chat page learns how to sign in.
pub const SIGN_IN_PATH: &str = "/sign-in";

/// What the page asks for: its own calls, never `cks:admin`. `openid` because OpenID Connect
/// issuers refuse an authorization request without it.
const PAGE_SCOPE: &str = "openid cks:read cks:write";

/// What a `401` tells a client to ask for (MCP clients request the challenge's scope, else every
/// scope of the metadata): a person's everyday use, never `cks:admin`, which a `403` names when a
/// call needs it.
const CHALLENGE_SCOPE: &str = "cks:read cks:write";

/// The resource server: its settings, the validator holding the issuer's keys, and how the chat
/// page signs in.
#[derive(Debug)]
pub struct OAuth {
    pub settings: AuthSettings,
    pub validator: Validator,
    pub page: Option<PageSignIn>,
}

/// The issuer's endpoints the chat page signs in through, and the client id it signs in as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageSignIn {
    pub authorization_endpoint: String,
    pub token_endpoint: String,
    pub client_id: String,
}

impl PageSignIn {
    /// The page's sign-in, when `CKS_MCP_AUTH_PAGE_CLIENT_ID` is set: the issuer must name both
    /// endpoints and, when it lists its PKCE methods, accept S256.
    pub fn new(settings: &AuthSettings, discovery: &Discovery) -> Result<Option<PageSignIn>, DiscoveryError> {
        let Some(client_id) = &settings.page_client_id else { return Ok(None) };
        let endpoint = |found: &Option<String>, what: &'static str| match found {
            Some(url) if url.starts_with("https://") || url.starts_with("http://") => Ok(url.clone()),
            _ => Err(DiscoveryError::PageSignIn(what)),
        };
        let authorization_endpoint = endpoint(&discovery.authorization_endpoint, "names no authorization_endpoint")?;
        let token_endpoint = endpoint(&discovery.token_endpoint, "names no token_endpoint")?;
        // Its origin goes into the page's Content-Security-Policy: nothing but an origin may.
        let origin = PageSignIn::origin_of(&token_endpoint);
        let host = origin.split_once("://").map_or("", |(_, host)| host);
        if host.is_empty() || !host.chars().all(|c| c.is_ascii_alphanumeric() || ".-:[]".contains(c)) {
            return Err(DiscoveryError::PageSignIn("names a token_endpoint whose origin is not a plain host"));
        }
        if let Some(methods) = &discovery.code_challenge_methods_supported
            && !methods.iter().any(|m| m == "S256")
        {
            return Err(DiscoveryError::PageSignIn("does not list S256 among its PKCE methods"));
        }
        Ok(Some(PageSignIn { authorization_endpoint, token_endpoint, client_id: client_id.clone() }))
    }

    /// The origin of the token endpoint: the one place besides this server the page connects to.
    pub fn token_origin(&self) -> &str {
        PageSignIn::origin_of(&self.token_endpoint)
    }

    fn origin_of(url: &str) -> &str {
        let after_scheme = url.find("://").map_or(0, |i| i + 3);
        let end = url[after_scheme..].find(['/', '?', '#']).map_or(url.len(), |i| i + after_scheme);
        &url[..end]
    }
}

impl OAuth {
    /// Finds the issuer and fetches its keys (at start-up).
    pub async fn discover(settings: AuthSettings) -> Result<Arc<OAuth>, DiscoveryError> {
        let (keys, discovery) = KeySet::discover(&settings.issuer).await?;
        let page = PageSignIn::new(&settings, &discovery)?;
        Ok(Arc::new(OAuth { validator: Validator::new(&settings, Arc::new(keys)), settings, page }))
    }

    /// The resource server of the built-in issuer, whose keys the issuer puts in place
    /// (`builtin/signing.rs`); the page signs in through it.
    pub fn builtin(settings: AuthSettings) -> Arc<OAuth> {
        let keys = Arc::new(KeySet::fixed(&json!({"keys": []})));
        let page = PageSignIn {
            authorization_endpoint: format!("{}/oauth/authorize", settings.issuer),
            token_endpoint: format!("{}/oauth/token", settings.issuer),
            client_id: builtin::PAGE_CLIENT_ID.into(),
        };
        Arc::new(OAuth { validator: Validator::new(&settings, keys), settings, page: Some(page) })
    }

    /// What `GET /sign-in` answers: everything the page needs for the authorization code flow
    /// with PKCE; `None` when the page has no client id.
    pub fn sign_in(&self) -> Option<serde_json::Value> {
        let page = self.page.as_ref()?;
        Some(json!({
            "issuer": self.settings.issuer,
            "authorization_endpoint": page.authorization_endpoint,
            "token_endpoint": page.token_endpoint,
            "client_id": page.client_id,
            "redirect_uri": format!("{}/", self.settings.public_url),
            "scope": PAGE_SCOPE,
            "resource": self.settings.audience,
        }))
    }

    /// Where the metadata document is: the path-suffixed form for the resource at `/mcp`.
    pub fn metadata_url(&self) -> String {
        format!("{}{METADATA_PATH}/mcp", self.settings.public_url)
    }

    /// The protected resource metadata document (RFC 9728).
    pub fn metadata(&self) -> serde_json::Value {
        json!({
            "resource": self.settings.audience,
            "authorization_servers": [self.settings.issuer],
            "scopes_supported": Scope::ALL.map(Scope::as_str),
            "bearer_methods_supported": ["header"],
            "resource_name": "cks-mcp",
        })
    }

    /// `401`: no token, or one that is not good (`error` then says why, without the token).
    pub fn unauthorized(&self, error: Option<&TokenError>) -> Response {
        match error {
            None => refusal(
                StatusCode::UNAUTHORIZED,
                &format!("Bearer resource_metadata=\"{}\", scope=\"{CHALLENGE_SCOPE}\"", self.metadata_url()),
                "unauthorized",
                "An access token is needed: Authorization: Bearer <token>.",
            ),
            Some(e) => invalid_token(
                &e.to_string(),
                &format!("The access token is not accepted: {e}."),
                Some(&self.metadata_url()),
            ),
        }
    }

    /// `403`: a good token without the scope `needed`; the client may ask for it and retry.
    pub fn insufficient_scope(&self, needed: Scope) -> Response {
        insufficient_scope(needed, Some(&self.metadata_url()))
    }
}

/// `401` for an API key that is not good (`error` says why, without the key); with OAuth, the
/// challenge names the metadata too, so a client can sign in instead.
pub fn key_refused(error: &api_keys::KeyError, metadata_url: Option<&str>) -> Response {
    invalid_token(&error.to_string(), &format!("The API key is not accepted: {error}."), metadata_url)
}

/// `401` with `error="invalid_token"`, `reason` as its description, and `message` in the body;
/// with OAuth, the metadata and the scope to ask for.
fn invalid_token(reason: &str, message: &str, metadata_url: Option<&str>) -> Response {
    let mut challenge = format!("Bearer error=\"invalid_token\", error_description=\"{}\"", quoted(reason));
    if let Some(url) = metadata_url {
        challenge.push_str(&format!(", resource_metadata=\"{url}\", scope=\"{CHALLENGE_SCOPE}\""));
    }
    refusal(StatusCode::UNAUTHORIZED, &challenge, "unauthorized", message)
}

/// `403`: a good credential without the scope `needed`.
pub fn insufficient_scope(needed: Scope, metadata_url: Option<&str>) -> Response {
    let mut challenge = format!("Bearer error=\"insufficient_scope\", scope=\"{needed}\"");
    if let Some(url) = metadata_url {
        challenge.push_str(&format!(", resource_metadata=\"{url}\""));
    }
    refusal(StatusCode::FORBIDDEN, &challenge, "insufficient_scope", &format!("This request needs the scope {needed}."))
}

fn refusal(status: StatusCode, challenge: &str, error: &str, message: &str) -> Response {
    let mut response = (status, axum::Json(json!({"error": error, "message": message}))).into_response();
    if let Ok(value) = HeaderValue::from_str(challenge) {
        response.headers_mut().insert(header::WWW_AUTHENTICATE, value);
    }
    response
}

/// Text fit for a quoted-string of a header: no quotes, backslashes or control characters.
fn quoted(text: &str) -> String {
    text.chars().filter(|c| *c != '"' && *c != '\\' && !c.is_control()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn discovery(methods: Option<&[&str]>) -> Discovery {
        Discovery {
            issuer: "https://id.example.com".into(),
            jwks_uri: "https://id.example.com/jwks".into(),
            authorization_endpoint: Some("https://id.example.com/auth".into()),
            token_endpoint: Some("https://tokens.example.com:8443/oauth/token?x=1".into()),
            code_challenge_methods_supported: methods.map(|m| m.iter().map(|s| s.to_string()).collect()),
        }
    }

    #[test]
    fn the_page_signs_in_only_with_a_client_id_and_an_issuer_that_can_serve_it() {
        let mut settings = AuthSettings::example();
        assert_eq!(PageSignIn::new(&settings, &discovery(None)).unwrap(), None);
        settings.page_client_id = Some("chat-page".into());
        let page = PageSignIn::new(&settings, &discovery(Some(&["plain", "S256"]))).unwrap().unwrap();
        assert_eq!(page.client_id, "chat-page");
        assert_eq!(page.token_origin(), "https://tokens.example.com:8443");
        // An issuer that does not list its methods may still accept S256.
        assert!(PageSignIn::new(&settings, &discovery(None)).unwrap().is_some());

        let refused = |document: Discovery| PageSignIn::new(&settings, &document).unwrap_err().to_string();
        assert!(refused(discovery(Some(&["plain"]))).contains("S256"));
        let mut no_token = discovery(None);
        no_token.token_endpoint = None;
        assert!(refused(no_token).contains("CKS_MCP_AUTH_PAGE_CLIENT_ID"));
        let mut odd = discovery(None);
        odd.authorization_endpoint = Some("javascript:alert(1)".into());
        assert!(refused(odd).contains("authorization_endpoint"));
        let mut injected = discovery(None);
        injected.token_endpoint = Some("https://id.example.com;script-src *".into());
        assert!(refused(injected).contains("plain host"));
    }

    #[test]
    fn a_401_names_the_metadata_and_the_scope_to_ask_for_never_admin() {
        let settings = AuthSettings::example();
        let validator = Validator::new(&settings, Arc::new(KeySet::fixed(&json!({"keys": []}))));
        let oauth = OAuth { settings, validator, page: None };
        let challenge = |response: Response| {
            assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
            response.headers()[header::WWW_AUTHENTICATE].to_str().unwrap().to_owned()
        };
        let metadata = "resource_metadata=\"https://kg.example.com/.well-known/oauth-protected-resource/mcp\"";
        assert_eq!(challenge(oauth.unauthorized(None)), format!("Bearer {metadata}, scope=\"cks:read cks:write\""));
        assert_eq!(
            challenge(oauth.unauthorized(Some(&TokenError::Expired))),
            format!(
                "Bearer error=\"invalid_token\", error_description=\"it has expired\", {metadata}, scope=\"cks:read cks:write\""
            )
        );
        // Every scope it names is one the metadata lists.
        let supported = oauth.metadata()["scopes_supported"].clone();
        for scope in CHALLENGE_SCOPE.split(' ') {
            assert!(supported.as_array().unwrap().iter().any(|s| s == scope), "{scope}");
        }
    }
}
