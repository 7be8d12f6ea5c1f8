//! Signing people in through an upstream OpenID Connect issuer (`CKS_MCP_AUTH_UPSTREAM_ISSUER`):
//! the organisation's Google, Microsoft or Keycloak. The built-in issuer is then that issuer's
//! client: it sends the person there (authorization code with PKCE, a nonce), takes the code back
//! at `/oauth/upstream`, trades it, and checks the ID token (signature with the issuer's keys,
//! issuer, audience, lifetime, nonce). The person is then asked to allow the host on the consent
//! page.
//!
//! The person keeps the principal they have at that issuer (its `iss` and `sub`): tokens the
//! built-in issuer signs for them carry the upstream issuer in the claim [`IDENTITY_ISSUER`], and
//! the resource server reads it for tokens it signed itself only. Their sessions are the same as
//! when the server trusted that issuer's tokens directly.

use std::sync::Arc;

use jsonwebtoken::Validation;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::auth::{Discovery, KeySet};

/// The claim naming the issuer a person signed in at, when it is not the built-in one.
pub const IDENTITY_ISSUER: &str = "cks_identity_issuer";
/// The path the upstream issuer sends the browser back to.
pub const CALLBACK_PATH: &str = "/oauth/upstream";

/// The upstream issuer's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamSettings {
    pub issuer: String,
    pub client_id: String,
    pub client_secret: Option<String>,
}

impl UpstreamSettings {
    /// From `CKS_MCP_AUTH_UPSTREAM_*`; `None` when no issuer is set.
    pub fn from_env(env: &std::collections::HashMap<String, String>) -> Result<Option<UpstreamSettings>, String> {
        let get = |name: &str| env.get(name).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        let Some(issuer) = get("CKS_MCP_AUTH_UPSTREAM_ISSUER") else {
            if get("CKS_MCP_AUTH_UPSTREAM_CLIENT_ID").is_some() {
                return Err("CKS_MCP_AUTH_UPSTREAM_CLIENT_ID is set without CKS_MCP_AUTH_UPSTREAM_ISSUER".into());
            }
            return Ok(None);
        };
        let client_id = get("CKS_MCP_AUTH_UPSTREAM_CLIENT_ID").ok_or(
            "CKS_MCP_AUTH_UPSTREAM_ISSUER needs CKS_MCP_AUTH_UPSTREAM_CLIENT_ID: this server's client id there",
        )?;
        Ok(Some(UpstreamSettings { issuer, client_id, client_secret: get("CKS_MCP_AUTH_UPSTREAM_CLIENT_SECRET") }))
    }
}

/// Who signed in upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub subject: String,
    pub groups: Vec<String>,
}

/// The upstream issuer, found at start-up.
pub struct Upstream {
    pub settings: UpstreamSettings,
    authorization_endpoint: String,
    token_endpoint: String,
    keys: Arc<KeySet>,
    client: reqwest::Client,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream").field("issuer", &self.settings.issuer).finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct TokenAnswer {
    id_token: Option<String>,
}

impl Upstream {
    /// Reads the issuer's discovery document and keys.
    pub async fn discover(settings: UpstreamSettings) -> Result<Upstream, String> {
        let (keys, discovery): (KeySet, Discovery) = KeySet::discover(&settings.issuer)
            .await
            .map_err(|e| e.to_string().replace("CKS_MCP_AUTH_ISSUER", "CKS_MCP_AUTH_UPSTREAM_ISSUER"))?;
        let endpoint = |found: Option<String>, what: &str| {
            found
                .filter(|url| url::Url::parse(url).is_ok())
                .ok_or_else(|| format!("CKS_MCP_AUTH_UPSTREAM_ISSUER: its discovery document names no {what} URL"))
        };
        Ok(Upstream {
            authorization_endpoint: endpoint(discovery.authorization_endpoint, "authorization_endpoint")?,
            token_endpoint: endpoint(discovery.token_endpoint, "token_endpoint")?,
            keys: Arc::new(keys),
            client: reqwest::Client::builder()
                .timeout(std::time::Duration::from_secs(10))
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap_or_default(),
            settings,
        })
    }

    /// Where the browser is sent to sign in.
    pub fn sign_in_url(&self, redirect_uri: &str, state: &str, challenge: &str, nonce: &str) -> String {
        let mut url = url::Url::parse(&self.authorization_endpoint).expect("checked when the issuer was discovered");
        url.query_pairs_mut()
            .append_pair("response_type", "code")
            .append_pair("client_id", &self.settings.client_id)
            .append_pair("redirect_uri", redirect_uri)
            .append_pair("scope", "openid")
            .append_pair("state", state)
            .append_pair("nonce", nonce)
            .append_pair("code_challenge", challenge)
            .append_pair("code_challenge_method", "S256");
        url.to_string()
    }

    /// Trades the code for an ID token and reads who signed in.
    pub async fn identity(
        &self,
        code: &str,
        redirect_uri: &str,
        verifier: &str,
        nonce: &str,
    ) -> Result<Identity, String> {
        let mut form = vec![
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", redirect_uri),
            ("code_verifier", verifier),
            ("client_id", &self.settings.client_id),
        ];
        if let Some(secret) = &self.settings.client_secret {
            form.push(("client_secret", secret));
        }
        let body = url::form_urlencoded::Serializer::new(String::new()).extend_pairs(&form).finish();
        let response = self
            .client
            .post(&self.token_endpoint)
            .header(reqwest::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .map_err(|e| format!("the upstream issuer's token endpoint did not answer: {e}"))?;
        let status = response.status();
        if !status.is_success() {
            return Err(format!("the upstream issuer refused the code ({status})"));
        }
        let answer: TokenAnswer =
            response.json().await.map_err(|e| format!("the upstream issuer's answer is not JSON: {e}"))?;
        let id_token = answer.id_token.ok_or("the upstream issuer answered no ID token")?;
        let claims = self.check(&id_token).await?;
        if claims.get("nonce").and_then(Value::as_str) != Some(nonce) {
            return Err("the ID token's nonce is not the one sent".into());
        }
        let subject =
            claims.get("sub").and_then(Value::as_str).filter(|s| !s.is_empty()).ok_or("the ID token has no sub")?;
        let groups = match claims.get("groups") {
            Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
            Some(Value::String(text)) => text.split_whitespace().map(str::to_owned).collect(),
            _ => Vec::new(),
        };
        Ok(Identity { subject: subject.to_owned(), groups })
    }

    /// The ID token's claims, once its signature, issuer, audience and lifetime check out.
    async fn check(&self, id_token: &str) -> Result<Map<String, Value>, String> {
        let header = jsonwebtoken::decode_header(id_token).map_err(|_| "the ID token is not a JWT")?;
        if !crate::auth::token::ACCEPTED.contains(&header.alg) {
            return Err("the ID token's algorithm is not accepted".into());
        }
        let mut validation = Validation::new(header.alg);
        validation.leeway = crate::auth::token::LEEWAY_SECONDS;
        validation.set_issuer(&[&self.settings.issuer]);
        validation.set_audience(&[&self.settings.client_id]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        for key in self.keys.find(header.kid.as_deref(), header.alg).await {
            if let Ok(data) = jsonwebtoken::decode::<Map<String, Value>>(id_token, &key.decoding, &validation) {
                return Ok(data.claims);
            }
        }
        Err("the ID token does not verify with the upstream issuer's keys".into())
    }
}
