//! The clients the built-in issuer knows: ones that registered (Dynamic Client Registration, RFC
//! 7591, kept in the store), ones known by the URL of their metadata document (Client ID Metadata
//! Documents, fetched through the guarded fetcher and kept a few minutes), and the chat page.
//!
//! Registration is open, as hosts need, so registrations nobody uses do not stay: one that never
//! got a token within [`UNUSED_FOR`], or got none for [`IDLE_FOR`], is forgotten by the sweep.
//!
//! Redirect URIs (RFC 8252, OAuth 2.1): `https://` anywhere; `http://` only on a loopback host,
//! where any port matches (a native app picks a free port each time); a private-use scheme of a
//! reverse domain name (`cursor://…`, `com.example.app:/…`). Never a fragment, never
//! `javascript:`, `data:` or `file:`. A redirect URI matches one registered exactly, except for a
//! loopback one's port.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use cks_runtime::Runtime;
use cks_web::fetch::Fetcher;

use super::{BuiltinError, PAGE_CLIENT_ID, now, random_id};

/// Registered clients' settings.
pub(crate) const CLIENT: &str = "oauth.client.";
/// How long a fetched metadata document is used.
const DOCUMENT_TTL: Duration = Duration::from_secs(300);
/// The largest metadata document read (the draft asks for at most 5 KB).
const DOCUMENT_BYTES: usize = 5 * 1024;
/// How long a registered client that never got a token is kept.
pub const UNUSED_FOR: Duration = Duration::from_secs(7 * 86_400);
/// How long a registered client is kept after it last got a token.
pub const IDLE_FOR: Duration = Duration::from_secs(180 * 86_400);
/// Redirect URIs one client may register.
const MAX_REDIRECT_URIS: usize = 10;

/// How a client proves itself at the token endpoint.
pub const AUTH_METHODS: [&str; 3] = ["none", "client_secret_basic", "client_secret_post"];

/// A client.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Client {
    pub client_id: String,
    #[serde(default)]
    pub client_name: Option<String>,
    pub redirect_uris: Vec<String>,
    pub grant_types: Vec<String>,
    pub token_endpoint_auth_method: String,
    /// The SHA-256 of its secret (hex), for a confidential client.
    #[serde(default)]
    pub secret_digest: Option<String>,
    pub created_at: u64,
    /// When it last got a token (to the day), for a registered client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_at: Option<u64>,
}

impl Client {
    /// What the consent page calls it.
    pub fn name(&self) -> &str {
        self.client_name.as_deref().filter(|n| !n.trim().is_empty()).unwrap_or(&self.client_id)
    }

    /// Whether `uri` is one of its redirect URIs.
    pub fn redirects_to(&self, uri: &str) -> bool {
        self.redirect_uris.iter().any(|registered| same_redirect(registered, uri))
    }

    pub fn is_public(&self) -> bool {
        self.token_endpoint_auth_method == "none"
    }

    /// The registration response (RFC 7591 §3.2.1), with the secret shown this once.
    pub fn registered(&self, secret: Option<&str>) -> Value {
        let mut answer = json!({
            "client_id": self.client_id,
            "client_id_issued_at": self.created_at,
            "redirect_uris": self.redirect_uris,
            "grant_types": self.grant_types,
            "response_types": ["code"],
            "token_endpoint_auth_method": self.token_endpoint_auth_method,
        });
        if let Some(name) = &self.client_name {
            answer["client_name"] = json!(name);
        }
        if let Some(secret) = secret {
            answer["client_secret"] = json!(secret);
            answer["client_secret_expires_at"] = json!(0);
        }
        answer
    }
}

/// Why a client is not accepted: the OAuth error and what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// Registration: a redirect URI that is not allowed (RFC 7591 `invalid_redirect_uri`).
    #[error("{0}")]
    RedirectUri(String),
    /// Registration or a metadata document: other metadata not accepted (`invalid_client_metadata`).
    #[error("{0}")]
    Metadata(String),
    /// Authorization: no such client, or its document could not be read (`invalid_client`).
    #[error("{0}")]
    Unknown(String),
}

impl ClientError {
    pub fn code(&self) -> &'static str {
        match self {
            ClientError::RedirectUri(_) => "invalid_redirect_uri",
            ClientError::Metadata(_) => "invalid_client_metadata",
            ClientError::Unknown(_) => "invalid_client",
        }
    }
}

/// The clients: the store's, the documents fetched, the page.
pub struct Clients {
    runtime: Arc<Runtime>,
    fetcher: Fetcher,
    page: Client,
    documents: Mutex<HashMap<String, (Client, Instant)>>,
}

impl std::fmt::Debug for Clients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Clients").finish_non_exhaustive()
    }
}

impl Clients {
    pub fn new(runtime: Arc<Runtime>, fetcher: Fetcher, public_url: &str) -> Clients {
        let page = Client {
            client_id: PAGE_CLIENT_ID.into(),
            client_name: Some("the cks-mcp chat page".into()),
            redirect_uris: vec![format!("{public_url}/")],
            grant_types: vec!["authorization_code".into(), "refresh_token".into()],
            token_endpoint_auth_method: "none".into(),
            secret_digest: None,
            created_at: 0,
            used_at: None,
        };
        Clients { runtime, fetcher, page, documents: Mutex::new(HashMap::new()) }
    }

    /// Registers a client from its metadata (RFC 7591): the client and, for a confidential one,
    /// its secret (kept only as a digest).
    pub async fn register(&self, metadata: &Value) -> Result<(Client, Option<String>), BuiltinError> {
        let mut client = read_metadata(metadata, "client_secret_basic")?;
        client.client_id = random_id(16);
        let secret = (!client.is_public()).then(|| random_id(32));
        client.secret_digest = secret.as_deref().map(super::digest);
        let text = serde_json::to_string(&client).expect("clients encode");
        self.runtime.store().save_setting(&format!("{CLIENT}{}", client.client_id), &text).await?;
        Ok((client, secret))
    }

    /// The client `client_id` names: the page, a registered one, or the one its metadata
    /// document's URL names.
    pub async fn find(&self, client_id: &str) -> Result<Client, BuiltinError> {
        if client_id == PAGE_CLIENT_ID {
            return Ok(self.page.clone());
        }
        if client_id.starts_with("https://") || client_id.starts_with("http://") {
            return self.document(client_id).await;
        }
        let unknown = || BuiltinError::Client(ClientError::Unknown(format!("no client has the id '{client_id}'")));
        if !client_id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            return Err(unknown());
        }
        let text = self.runtime.store().load_setting(&format!("{CLIENT}{client_id}")).await?.ok_or_else(unknown)?;
        serde_json::from_str(&text).map_err(|_| unknown())
    }

    /// Notes that a registered client got a token (at most once a day).
    pub async fn used(&self, client: &Client) -> Result<(), BuiltinError> {
        let registered = client.client_id != PAGE_CLIENT_ID && !client.client_id.contains("://");
        if !registered || client.used_at.is_some_and(|at| now().saturating_sub(at) < 86_400) {
            return Ok(());
        }
        let client = Client { used_at: Some(now()), ..client.clone() };
        let text = serde_json::to_string(&client).expect("clients encode");
        Ok(self.runtime.store().save_setting(&format!("{CLIENT}{}", client.client_id), &text).await?)
    }

    /// Forgets the registrations nobody uses (see the module's documentation); how many.
    pub async fn sweep(&self) -> Result<usize, BuiltinError> {
        let mut forgotten = 0;
        for (key, text) in self.runtime.store().list_settings(CLIENT).await? {
            let Ok(client) = serde_json::from_str::<Client>(&text) else { continue };
            let idle = match client.used_at {
                None => now().saturating_sub(client.created_at) >= UNUSED_FOR.as_secs(),
                Some(at) => now().saturating_sub(at) >= IDLE_FOR.as_secs(),
            };
            if idle && self.runtime.store().delete_setting(&key).await? {
                forgotten += 1;
            }
        }
        Ok(forgotten)
    }

    /// A client known by its metadata document (draft-ietf-oauth-client-id-metadata-document).
    async fn document(&self, url: &str) -> Result<Client, BuiltinError> {
        if let Some((client, at)) = self.documents.lock().unwrap_or_else(|e| e.into_inner()).get(url)
            && at.elapsed() < DOCUMENT_TTL
        {
            return Ok(client.clone());
        }
        let unknown = |why: String| BuiltinError::Client(ClientError::Unknown(why));
        document_url(url)
            .map_err(|why| unknown(format!("the client id '{url}' is not a metadata document's URL: {why}")))?;
        let fetched = self
            .fetcher
            .get(url, DOCUMENT_BYTES)
            .await
            .map_err(|e| unknown(format!("the client's metadata document was not fetched: {e}")))?;
        if fetched.status != 200 || fetched.redirects > 0 {
            return Err(unknown(format!("the client's metadata document answered {} instead", fetched.status)));
        }
        let metadata: Value = serde_json::from_slice(&fetched.body)
            .map_err(|e| unknown(format!("the client's metadata document is not JSON: {e}")))?;
        if metadata.get("client_id").and_then(Value::as_str) != Some(url) {
            return Err(ClientError::Metadata("the metadata document's client_id is not its URL".into()).into());
        }
        if metadata.get("client_secret").is_some() {
            return Err(ClientError::Metadata("a metadata document holds no client_secret".into()).into());
        }
        let mut client = read_metadata(&metadata, "none")?;
        if !client.is_public() {
            return Err(ClientError::Metadata(
                "a client known by its metadata document authenticates with 'none'".into(),
            )
            .into());
        }
        client.client_id = url.to_owned();
        let mut documents = self.documents.lock().unwrap_or_else(|e| e.into_inner());
        if documents.len() > 1_000 {
            documents.retain(|_, (_, at)| at.elapsed() < DOCUMENT_TTL);
        }
        documents.insert(url.to_owned(), (client.clone(), Instant::now()));
        Ok(client)
    }
}

/// A client read from registration metadata or a metadata document; its id is set by the caller.
fn read_metadata(metadata: &Value, default_method: &str) -> Result<Client, ClientError> {
    let bad = |why: &str| ClientError::Metadata(why.to_owned());
    let object = metadata.as_object().ok_or_else(|| bad("client metadata is a JSON object"))?;
    let strings = |name: &str| -> Result<Option<Vec<String>>, ClientError> {
        match object.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(items)) => items
                .iter()
                .map(|item| item.as_str().map(str::to_owned).ok_or_else(|| bad(&format!("{name} holds strings"))))
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(_) => Err(bad(&format!("{name} is an array of strings"))),
        }
    };
    let redirect_uris = strings("redirect_uris")?.unwrap_or_default();
    if redirect_uris.is_empty() {
        return Err(ClientError::RedirectUri("redirect_uris names at least one redirect URI".into()));
    }
    if redirect_uris.len() > MAX_REDIRECT_URIS {
        return Err(ClientError::RedirectUri(format!("at most {MAX_REDIRECT_URIS} redirect URIs")));
    }
    for uri in &redirect_uris {
        redirect_uri(uri).map_err(|why| ClientError::RedirectUri(format!("'{uri}': {why}")))?;
    }
    let grant_types = strings("grant_types")?.unwrap_or_else(|| vec!["authorization_code".into()]);
    if let Some(other) = grant_types.iter().find(|g| !matches!(g.as_str(), "authorization_code" | "refresh_token")) {
        return Err(bad(&format!("the grant type '{other}' is not supported (authorization_code, refresh_token)")));
    }
    if let Some(types) = strings("response_types")?
        && types.iter().any(|t| t != "code")
    {
        return Err(bad("the only response type is 'code'"));
    }
    let method = match object.get("token_endpoint_auth_method") {
        None | Some(Value::Null) => default_method.to_owned(),
        Some(Value::String(method)) if AUTH_METHODS.contains(&method.as_str()) => method.clone(),
        Some(other) => return Err(bad(&format!("token_endpoint_auth_method {other} is not one of {AUTH_METHODS:?}"))),
    };
    let client_name = match object.get("client_name") {
        None | Some(Value::Null) => None,
        Some(Value::String(name)) if name.chars().count() <= 200 => Some(name.clone()),
        Some(_) => return Err(bad("client_name is a string of at most 200 characters")),
    };
    Ok(Client {
        client_id: String::new(),
        client_name,
        redirect_uris,
        grant_types,
        token_endpoint_auth_method: method,
        secret_digest: None,
        created_at: now(),
        used_at: None,
    })
}

/// Whether `uri` may be a redirect URI; why not.
pub fn redirect_uri(uri: &str) -> Result<(), &'static str> {
    let parsed = url::Url::parse(uri).map_err(|_| "not an absolute URI")?;
    if parsed.fragment().is_some() {
        return Err("a redirect URI has no fragment");
    }
    match parsed.scheme() {
        "https" if parsed.host().is_some() => Ok(()),
        "http" if parsed.host_str().is_some_and(is_loopback) => Ok(()),
        "http" => Err("http:// only on a loopback host (127.0.0.1, [::1], localhost); use https://"),
        "javascript" | "data" | "file" | "vbscript" | "blob" | "about" | "https" | "ftp" | "ws" | "wss" => {
            Err("not a scheme a browser may be sent back to")
        }
        // A private-use scheme is a reverse domain name (RFC 8252 §7.1).
        scheme if scheme.contains('.') => Ok(()),
        _ => Err("a private-use scheme is a reverse domain name, such as com.example.app"),
    }
}

/// A metadata document's URL: `https://` with a path (or `http://` on loopback, for a local host
/// or a test), no fragment, no user, no dot segments.
fn document_url(url: &str) -> Result<(), &'static str> {
    let parsed = url::Url::parse(url).map_err(|_| "not a URL")?;
    let loopback = parsed.host_str().is_some_and(is_loopback);
    if parsed.scheme() != "https" && !(parsed.scheme() == "http" && loopback) {
        return Err("it is not https://");
    }
    if parsed.fragment().is_some() || !parsed.username().is_empty() || parsed.password().is_some() {
        return Err("it has a fragment or credentials");
    }
    if parsed.path() == "/" || url.split('/').skip(3).any(|segment| segment == "." || segment == "..") {
        return Err("it has no path, or dot segments");
    }
    Ok(())
}

fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Whether a redirect URI given matches one registered: exactly, or for a loopback URI on any port.
fn same_redirect(registered: &str, given: &str) -> bool {
    if registered == given {
        return true;
    }
    let (Ok(a), Ok(b)) = (url::Url::parse(registered), url::Url::parse(given)) else { return false };
    a.scheme() == "http"
        && a.host_str().is_some_and(is_loopback)
        && a.scheme() == b.scheme()
        && a.host_str() == b.host_str()
        && a.path() == b.path()
        && a.query() == b.query()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirect_uris_follow_the_native_and_web_rules() {
        for good in [
            "https://claude.ai/api/mcp/auth_callback",
            "http://127.0.0.1:33418/callback",
            "http://localhost/cb",
            "http://[::1]:8080/cb",
            "cursor.anysphere://oauth/callback",
            "com.example.app:/oauth2redirect",
        ] {
            assert_eq!(redirect_uri(good), Ok(()), "{good}");
        }
        for bad in [
            "http://evil.example/cb",
            "https://claude.ai/cb#frag",
            "javascript:alert(1)",
            "data:text/html,hi",
            "file:///etc/passwd",
            "myapp://cb",
            "/relative",
        ] {
            assert!(redirect_uri(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_loopback_redirect_matches_on_any_port_and_nothing_else_loosely() {
        let client = Client {
            client_id: "c".into(),
            client_name: None,
            redirect_uris: vec!["http://127.0.0.1:1000/cb".into(), "https://app.example/cb".into()],
            grant_types: vec![],
            token_endpoint_auth_method: "none".into(),
            secret_digest: None,
            created_at: 0,
            used_at: None,
        };
        assert!(client.redirects_to("http://127.0.0.1:5555/cb"));
        assert!(client.redirects_to("https://app.example/cb"));
        for other in [
            "http://127.0.0.1:5555/other",
            "https://app.example/cb/",
            "https://app.example:444/cb",
            "http://localhost:1000/cb",
        ] {
            assert!(!client.redirects_to(other), "{other}");
        }
    }

    #[test]
    fn metadata_is_read_strictly() {
        let ok =
            read_metadata(&json!({"redirect_uris": ["https://a.example/cb"], "client_name": "A"}), "none").unwrap();
        assert_eq!(
            (ok.name(), ok.grant_types.as_slice(), ok.is_public()),
            ("A", &["authorization_code".to_owned()][..], true)
        );
        let error = |metadata: Value| read_metadata(&metadata, "none").unwrap_err().code();
        assert_eq!(error(json!({})), "invalid_redirect_uri");
        assert_eq!(error(json!({"redirect_uris": ["http://a.example/cb"]})), "invalid_redirect_uri");
        assert_eq!(
            error(json!({"redirect_uris": ["https://a.example/cb"], "grant_types": ["password"]})),
            "invalid_client_metadata"
        );
        assert_eq!(
            error(json!({"redirect_uris": ["https://a.example/cb"], "response_types": ["token"]})),
            "invalid_client_metadata"
        );
        assert_eq!(
            error(json!({"redirect_uris": ["https://a.example/cb"], "token_endpoint_auth_method": "private_key_jwt"})),
            "invalid_client_metadata"
        );
    }

    #[tokio::test]
    async fn registrations_nobody_uses_are_forgotten() {
        use cks_runtime::RuntimeConfig;
        use cks_runtime::store::memory::MemoryStore;
        let runtime = Arc::new(Runtime::new(Arc::new(MemoryStore::new()), RuntimeConfig::default()));
        let clients = Clients::new(runtime.clone(), Fetcher::default(), "https://kg.example.com");
        let metadata = json!({"redirect_uris": ["https://a.example/cb"], "token_endpoint_auth_method": "none"});
        let (fresh, _) = clients.register(&metadata).await.unwrap();
        let (used, _) = clients.register(&metadata).await.unwrap();
        let (unused, _) = clients.register(&metadata).await.unwrap();
        let (idle, _) = clients.register(&metadata).await.unwrap();
        let age = |client: &Client, created: u64, used: Option<u64>| {
            let client = Client { created_at: now() - created, used_at: used.map(|u| now() - u), ..client.clone() };
            let runtime = runtime.clone();
            async move {
                let text = serde_json::to_string(&client).unwrap();
                runtime.store().save_setting(&format!("{CLIENT}{}", client.client_id), &text).await.unwrap();
            }
        };
        let week = UNUSED_FOR.as_secs();
        age(&unused, week, None).await;
        age(&used, week, None).await;
        clients.used(&clients.find(&used.client_id).await.unwrap()).await.unwrap();
        age(&idle, IDLE_FOR.as_secs() + week, Some(IDLE_FOR.as_secs())).await;
        assert_eq!(clients.sweep().await.unwrap(), 2);
        for (client, kept) in [(&fresh, true), (&used, true), (&unused, false), (&idle, false)] {
            assert_eq!(clients.find(&client.client_id).await.is_ok(), kept, "{}", client.client_id);
        }
    }

    #[test]
    fn a_document_url_is_https_with_a_path() {
        assert_eq!(document_url("https://host.example/oauth/client.json"), Ok(()));
        assert_eq!(document_url("http://127.0.0.1:9/client.json"), Ok(()));
        for bad in [
            "http://host.example/c.json",
            "https://host.example/",
            "https://u:p@host.example/c",
            "https://host.example/a/../c",
        ] {
            assert!(document_url(bad).is_err(), "{bad}");
        }
    }
}
