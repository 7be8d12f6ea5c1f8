//! OAuth 2.1 over HTTP: this server as a resource server (MCP authorization; RFC 9728, 9068, 8707).
//!
//! With `CKS_MCP_AUTH_ISSUER` set, every HTTP request but the chat page, its assets and the
//! metadata document needs `Authorization: Bearer <access token>`: a JWT the issuer signed, for
//! this server's audience, unexpired. The token names a [`Principal`] and its scopes, and each
//! request needs a scope (`scopes.rs`). Refusals say how to get a better token: `401` with
//! `WWW-Authenticate: Bearer resource_metadata="…"`, `403` with `error="insufficient_scope"`.
//!
//! - `settings.rs`: the configuration, checked at start-up.
//! - `keys.rs`: the issuer's discovery document and signing keys, cached.
//! - `token.rs`: an access token checked and read into a principal.
//! - `scopes.rs`: the scope each request needs (a tool's is `cks_tools::Scope::for_tool`).
//!
//! The issuer is found and its keys fetched at start-up: a failure there stops start-up with a
//! message naming `CKS_MCP_AUTH_ISSUER`, so a misconfigured server never runs refusing everyone.
//!
//! A token's text never appears in a log line, an error or a response: errors say what was wrong
//! with it, never what it was.

pub mod keys;
pub mod scopes;
pub mod settings;
pub mod token;

use std::sync::Arc;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

pub use cks_tools::{Principal, Scope};
pub use keys::{DiscoveryError, KeySet};
pub use settings::AuthSettings;
pub use token::{TokenError, Validator};

/// The path of the protected resource metadata document (RFC 9728).
pub const METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

/// The resource server: its settings, and the validator holding the issuer's keys.
#[derive(Debug)]
pub struct OAuth {
    pub settings: AuthSettings,
    pub validator: Validator,
}

impl OAuth {
    /// Finds the issuer and fetches its keys (at start-up).
    pub async fn discover(settings: AuthSettings) -> Result<Arc<OAuth>, DiscoveryError> {
        let keys = KeySet::discover(&settings.issuer).await?;
        Ok(Arc::new(OAuth { validator: Validator::new(&settings, Arc::new(keys)), settings }))
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
        let challenge = match error {
            None => format!("Bearer resource_metadata=\"{}\"", self.metadata_url()),
            Some(e) => format!(
                "Bearer error=\"invalid_token\", error_description=\"{}\", resource_metadata=\"{}\"",
                quoted(&e.to_string()),
                self.metadata_url()
            ),
        };
        let message = match error {
            None => "An access token is needed: Authorization: Bearer <token>.".to_owned(),
            Some(e) => format!("The access token is not accepted: {e}."),
        };
        refusal(StatusCode::UNAUTHORIZED, &challenge, "unauthorized", &message)
    }

    /// `403`: a good token without the scope `needed`; the client may ask for it and retry.
    pub fn insufficient_scope(&self, needed: Scope) -> Response {
        let challenge = format!(
            "Bearer error=\"insufficient_scope\", scope=\"{needed}\", resource_metadata=\"{}\"",
            self.metadata_url()
        );
        refusal(
            StatusCode::FORBIDDEN,
            &challenge,
            "insufficient_scope",
            &format!("This request needs the scope {needed}."),
        )
    }
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
