//! The issuer's signing keys: found through its discovery document, fetched from its `jwks_uri`,
//! kept in memory.
//!
//! A request never waits for a fetch, except when its token names a key id the cache lacks (the
//! issuer rotated its keys) or the cache is older than [`MAX_AGE`] (a removed key stops being
//! trusted). Such a refresh happens at most once per [`MIN_REFRESH`], whatever the requests ask,
//! and one at a time: a stream of tokens with made-up key ids costs one fetch per interval.
//!
//! These fetches use a plain HTTP client, not `cks-web`'s guarded fetcher: the issuer's URL is the
//! operator's configuration, not a URL a caller or a worker named, and an issuer on a private
//! network or on loopback (a local identity provider, the tests) is legitimate here.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, DecodingKey};
use serde::Deserialize;
use serde_json::Value;

/// The least time between two fetches of the key set.
pub const MIN_REFRESH: Duration = Duration::from_secs(30);
/// How long a fetched key set is used before it is fetched again.
pub const MAX_AGE: Duration = Duration::from_secs(15 * 60);
/// The time limit of one fetch.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest document accepted from the issuer.
const MAX_DOCUMENT_BYTES: usize = 1 << 20;

/// Why the issuer or its keys could not be read.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    #[error("CKS_MCP_AUTH_ISSUER: no discovery document at {tried}: {problem}")]
    NoDocument { tried: String, problem: String },
    #[error("CKS_MCP_AUTH_ISSUER: the discovery document names the issuer '{found}', not '{configured}'")]
    OtherIssuer { found: String, configured: String },
    #[error("CKS_MCP_AUTH_ISSUER: the issuer's key set at {url} could not be read: {problem}")]
    Keys { url: String, problem: String },
    #[error("CKS_MCP_AUTH_ISSUER: the issuer's key set at {url} holds no signing key this server accepts")]
    NoKeys { url: String },
    #[error(
        "CKS_MCP_AUTH_PAGE_CLIENT_ID is set, but the issuer's discovery document {0}: the chat page cannot sign in"
    )]
    PageSignIn(&'static str),
}

/// One signing key of the issuer.
pub struct Key {
    pub kid: Option<String>,
    /// The algorithms it verifies (one when the key set names its `alg`).
    algorithms: Vec<Algorithm>,
    pub decoding: DecodingKey,
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Key").field("kid", &self.kid).field("algorithms", &self.algorithms).finish_non_exhaustive()
    }
}

impl Key {
    pub fn verifies(&self, alg: Algorithm) -> bool {
        self.algorithms.contains(&alg)
    }
}

/// The issuer's keys, cached and refreshed as the module says.
#[derive(Debug)]
pub struct KeySet {
    /// Where the keys come from; `None` for a fixed set.
    jwks_uri: Option<String>,
    client: reqwest::Client,
    cached: RwLock<Cached>,
    /// Held while a refresh runs, so that only one does.
    refreshing: tokio::sync::Mutex<()>,
    /// Counts the refreshes: what was checked with the keys before is checked again.
    generation: AtomicU64,
}

#[derive(Debug)]
struct Cached {
    keys: Vec<Arc<Key>>,
    fetched: Instant,
    last_try: Instant,
}

/// What this server reads of the issuer's discovery document.
#[derive(Debug, Clone, Deserialize)]
pub struct Discovery {
    pub issuer: String,
    pub jwks_uri: String,
    /// Where a browser is sent to sign in (the chat page's authorization code flow).
    #[serde(default)]
    pub authorization_endpoint: Option<String>,
    /// Where the page trades its authorization code for an access token.
    #[serde(default)]
    pub token_endpoint: Option<String>,
    /// The PKCE methods the issuer accepts, when it says.
    #[serde(default)]
    pub code_challenge_methods_supported: Option<Vec<String>>,
}

impl KeySet {
    /// Reads the issuer's discovery document (OAuth's, RFC 8414, else OpenID Connect's) and
    /// fetches its keys.
    pub async fn discover(issuer: &str) -> Result<(KeySet, Discovery), DiscoveryError> {
        let client = client();
        let mut problems = Vec::new();
        let mut found = None;
        for url in discovery_urls(issuer) {
            match get_json::<Discovery>(&client, &url).await {
                Ok(document) => {
                    found = Some(document);
                    break;
                }
                Err(problem) => problems.push(format!("{url} ({problem})")),
            }
        }
        let Some(document) = found else {
            return Err(DiscoveryError::NoDocument { tried: problems.join(", "), problem: "none answered".into() });
        };
        if document.issuer != issuer {
            return Err(DiscoveryError::OtherIssuer { found: document.issuer, configured: issuer.to_owned() });
        }
        Ok((KeySet::at(document.jwks_uri.clone(), client).await?, document))
    }

    /// The key set at `jwks_uri`, fetched now.
    pub async fn at(jwks_uri: String, client: reqwest::Client) -> Result<KeySet, DiscoveryError> {
        let keys = fetch_keys(&client, &jwks_uri).await?;
        if keys.is_empty() {
            return Err(DiscoveryError::NoKeys { url: jwks_uri });
        }
        Ok(KeySet::new(Some(jwks_uri), client, keys))
    }

    /// The keys of a key set document, never refreshed (for measurements and tests).
    pub fn fixed(jwks: &Value) -> KeySet {
        let keys = jwks.get("keys").and_then(Value::as_array).into_iter().flatten().filter_map(key).map(Arc::new);
        KeySet::new(None, client(), keys.collect())
    }

    /// Puts the keys of a key set document in place of the ones held (the built-in issuer's,
    /// after a rotation): tokens checked before are checked again.
    pub fn replace(&self, jwks: &Value) {
        let keys = jwks.get("keys").and_then(Value::as_array).into_iter().flatten().filter_map(key).map(Arc::new);
        let mut cached = self.cached.write().unwrap_or_else(|e| e.into_inner());
        cached.keys = keys.collect();
        cached.fetched = Instant::now();
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    fn new(jwks_uri: Option<String>, client: reqwest::Client, keys: Vec<Arc<Key>>) -> KeySet {
        let now = Instant::now();
        KeySet {
            jwks_uri,
            client,
            cached: RwLock::new(Cached { keys, fetched: now, last_try: now }),
            refreshing: tokio::sync::Mutex::new(()),
            generation: AtomicU64::new(0),
        }
    }

    /// Which fetch of the key set is in use; it changes with every refresh.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The keys that may have signed a token with this key id and algorithm; refreshed first when
    /// there are none or the set is old, within the limits the module describes.
    pub async fn find(&self, kid: Option<&str>, alg: Algorithm) -> Vec<Arc<Key>> {
        let (found, stale, may_refresh) = self.look(kid, alg);
        let Some(jwks_uri) = &self.jwks_uri else { return found };
        if (!found.is_empty() && !stale) || !may_refresh {
            return found;
        }
        let _one_at_a_time = self.refreshing.lock().await;
        // Another request may have refreshed while this one waited.
        let (found, stale, may_refresh) = self.look(kid, alg);
        if (!found.is_empty() && !stale) || !may_refresh {
            return found;
        }
        self.cached.write().unwrap_or_else(|e| e.into_inner()).last_try = Instant::now();
        match fetch_keys(&self.client, jwks_uri).await {
            Ok(keys) if !keys.is_empty() => {
                let mut cached = self.cached.write().unwrap_or_else(|e| e.into_inner());
                self.generation.fetch_add(1, Ordering::AcqRel);
                cached.keys = keys;
                cached.fetched = Instant::now();
            }
            Ok(_) => tracing::warn!(url = %jwks_uri, "the issuer's key set holds no usable key; the old one is kept"),
            Err(e) => tracing::warn!("{e}; the keys fetched before are kept"),
        }
        self.look(kid, alg).0
    }

    /// The matching keys, whether the set is stale, and whether a refresh may run now.
    fn look(&self, kid: Option<&str>, alg: Algorithm) -> (Vec<Arc<Key>>, bool, bool) {
        let cached = self.cached.read().unwrap_or_else(|e| e.into_inner());
        let found = cached
            .keys
            .iter()
            .filter(|key| key.verifies(alg) && (kid.is_none() || key.kid.as_deref() == kid))
            .cloned()
            .collect();
        (found, cached.fetched.elapsed() > MAX_AGE, cached.last_try.elapsed() >= MIN_REFRESH)
    }
}

/// Where the discovery document may be: RFC 8414's place (the well-known path before the
/// issuer's path), then OpenID Connect's (after it).
fn discovery_urls(issuer: &str) -> Vec<String> {
    let issuer = issuer.trim_end_matches('/');
    let (scheme, rest) = issuer.split_once("://").unwrap_or(("https", issuer));
    let (authority, path) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
    let oauth = if path.is_empty() {
        format!("{scheme}://{authority}/.well-known/oauth-authorization-server")
    } else {
        format!("{scheme}://{authority}/.well-known/oauth-authorization-server/{path}")
    };
    vec![oauth, format!("{issuer}/.well-known/openid-configuration")]
}

fn client() -> reqwest::Client {
    // reqwest is built without a default crypto provider; a second install fails harmlessly.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .timeout(FETCH_TIMEOUT)
        .user_agent(concat!("cks-mcp/", env!("CARGO_PKG_VERSION")))
        .build()
        .unwrap_or_default()
}

async fn get_json<T: serde::de::DeserializeOwned>(client: &reqwest::Client, url: &str) -> Result<T, String> {
    let mut response = client
        .get(url)
        .header(reqwest::header::ACCEPT, "application/json")
        .send()
        .await
        .map_err(|e| cks_core::error_chain(&e))?;
    if !response.status().is_success() {
        return Err(format!("HTTP {}", response.status().as_u16()));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| cks_core::error_chain(&e))? {
        body.extend_from_slice(&chunk);
        if body.len() > MAX_DOCUMENT_BYTES {
            return Err(format!("larger than {MAX_DOCUMENT_BYTES} bytes"));
        }
    }
    serde_json::from_slice(&body).map_err(|e| format!("not the expected JSON ({e})"))
}

async fn fetch_keys(client: &reqwest::Client, url: &str) -> Result<Vec<Arc<Key>>, DiscoveryError> {
    #[derive(Deserialize)]
    struct Set {
        keys: Vec<Value>,
    }
    let set: Set =
        get_json(client, url).await.map_err(|problem| DiscoveryError::Keys { url: url.to_owned(), problem })?;
    Ok(set.keys.iter().filter_map(key).map(Arc::new).collect())
}

/// A signing key of an algorithm we accept; `None` for anything else (encryption keys, shared
/// secrets, curves we do not verify), so one odd key does not spoil the set.
fn key(jwk: &Value) -> Option<Key> {
    let text = |name: &str| jwk.get(name).and_then(Value::as_str);
    if text("use").is_some_and(|u| u != "sig") {
        return None;
    }
    let mut algorithms: Vec<Algorithm> = match (text("kty")?, text("crv")) {
        ("RSA", _) => super::token::RSA.to_vec(),
        ("EC", Some("P-256")) => vec![Algorithm::ES256],
        ("EC", Some("P-384")) => vec![Algorithm::ES384],
        ("OKP", Some("Ed25519")) => vec![Algorithm::EdDSA],
        _ => return None,
    };
    if let Some(alg) = text("alg") {
        let alg: Algorithm = alg.parse().ok()?;
        if !algorithms.contains(&alg) {
            return None;
        }
        algorithms = vec![alg];
    }
    let parsed: Jwk = serde_json::from_value(jwk.clone()).ok()?;
    let decoding = DecodingKey::from_jwk(&parsed).ok()?;
    Some(Key { kid: text("kid").map(str::to_owned), algorithms, decoding })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn discovery_looks_where_both_specifications_say() {
        assert_eq!(
            discovery_urls("https://id.example.com"),
            [
                "https://id.example.com/.well-known/oauth-authorization-server",
                "https://id.example.com/.well-known/openid-configuration"
            ]
        );
        assert_eq!(
            discovery_urls("https://id.example.com/realms/kg"),
            [
                "https://id.example.com/.well-known/oauth-authorization-server/realms/kg",
                "https://id.example.com/realms/kg/.well-known/openid-configuration"
            ]
        );
    }

    #[test]
    fn only_signing_keys_of_accepted_algorithms_are_kept() {
        let jwks: Value = serde_json::from_str(include_str!("../../tests/data/oauth/jwks.json")).unwrap();
        let rsa = &jwks["keys"][0];
        let ec = &jwks["keys"][1];
        assert_eq!(key(rsa).unwrap().algorithms, [Algorithm::RS256]);
        assert_eq!(key(ec).unwrap().algorithms, [Algorithm::ES256]);
        let mut any_rsa = rsa.clone();
        any_rsa.as_object_mut().unwrap().remove("alg");
        assert!(key(&any_rsa).unwrap().verifies(Algorithm::PS256));
        let mut encryption = rsa.clone();
        encryption["use"] = json!("enc");
        assert!(key(&encryption).is_none());
        let mut mislabelled = ec.clone();
        mislabelled["alg"] = json!("RS256");
        assert!(key(&mislabelled).is_none(), "an EC key never verifies RS256");
        assert!(key(&json!({"kty": "oct", "k": "c2VjcmV0"})).is_none(), "shared secrets are not keys here");
        assert!(key(&json!({"kty": "RSA", "alg": "HS256", "n": rsa["n"], "e": "AQAB"})).is_none());
    }
}
