//! The one guarded outbound HTTP client: every URL the server fetches because someone named it —
//! a source `verify_source` and `refresh_verification` check with [`Fetcher::head`], a page or a
//! `robots.txt` a background worker downloads with [`Fetcher::get`] under a body size limit —
//! goes through here, so all of them get the same protection against being pointed at the
//! server's own network (server-side request forgery).
//!
//! For the URL and again for every redirect:
//! - only `http` and `https`; a user name or password in the URL is dropped, never sent;
//! - the host is resolved once and every address it resolves to must be public (see
//!   [`is_public`]) unless the policy allows its range ([`FetchPolicy::allowed`]); the connection
//!   is made to exactly those checked addresses (the name is pinned to them), so a second DNS
//!   answer cannot swap in an internal one;
//! - redirects are followed here, not by the HTTP library, each location checked as the first URL
//!   was, at most [`FetchPolicy::max_redirects`] (3);
//! - one deadline ([`FetchPolicy::timeout`], 5 s) covers the whole fetch: resolution, redirects
//!   and the body;
//! - no proxy from the environment, no cookies, no `Referer`, no retries.
//!
//! A new HTTP client is built for each hop, because the pinned addresses are a client setting;
//! that costs little next to a round trip over the network.

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;
use std::time::Duration;

use cks_core::error_chain;
use reqwest::Url;
use reqwest::header::{CONTENT_TYPE, LOCATION};
use reqwest::redirect::Policy;
use url::Host;

/// What the fetcher may do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FetchPolicy {
    /// Address ranges that may be fetched although they are not public (an intranet's documents,
    /// a test server on 127.0.0.1). Empty by default.
    pub allowed: Vec<AddressRange>,
    /// The deadline of one fetch, redirects included.
    pub timeout: Duration,
    /// Redirects followed before giving up.
    pub max_redirects: usize,
    /// The `User-Agent` sent (some sites refuse anonymous clients).
    pub user_agent: String,
}

impl Default for FetchPolicy {
    fn default() -> Self {
        FetchPolicy {
            allowed: Vec::new(),
            timeout: Duration::from_secs(5),
            max_redirects: 3,
            user_agent: concat!("cks-mcp/", env!("CARGO_PKG_VERSION")).to_owned(),
        }
    }
}

/// An IPv4 or IPv6 network, written `address/prefix` (or a bare address: that address alone).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddressRange {
    network: IpAddr,
    prefix: u8,
}

impl AddressRange {
    /// Whether `ip` (or the IPv4 address an IPv4-mapped IPv6 address stands for) is in the range.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let within = |network: u128, address: u128, bits: u32| {
            let host_bits = bits - u32::from(self.prefix);
            host_bits >= bits || (network >> host_bits) == (address >> host_bits)
        };
        match (self.network, ip.to_canonical()) {
            (IpAddr::V4(n), IpAddr::V4(a)) => within(u32::from(n).into(), u32::from(a).into(), 32),
            (IpAddr::V6(n), IpAddr::V6(a)) => within(u128::from(n), u128::from(a), 128),
            (IpAddr::V6(n), IpAddr::V4(a)) => within(u128::from(n), u128::from(a.to_ipv6_mapped()), 128),
            (IpAddr::V4(_), IpAddr::V6(_)) => false,
        }
    }
}

impl FromStr for AddressRange {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let (address, prefix) = match text.split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (text, None),
        };
        let network: IpAddr = address.parse().map_err(|_| format!("'{address}' is not an IP address"))?;
        let bits = if network.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => bits,
            Some(p) => p.parse::<u8>().ok().filter(|p| *p <= bits).ok_or_else(|| {
                format!("'{p}' is not a prefix length for {} (0 to {bits})", if bits == 32 { "IPv4" } else { "IPv6" })
            })?,
        };
        Ok(AddressRange { network, prefix })
    }
}

impl fmt::Display for AddressRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

/// Whether `ip` is an address of the public internet. Not public: IPv4 `0.0.0.0/8`, private
/// (`10/8`, `172.16/12`, `192.168/16`), shared (CGNAT, `100.64/10`), loopback (`127/8`),
/// link-local (`169.254/16`), IETF protocol assignments (`192.0.0.0/24`), documentation and
/// benchmarking ranges, multicast, reserved (`240/4`) and broadcast; IPv6 outside global unicast
/// (`2000::/3`: so loopback, unspecified, unique-local `fc00::/7`, link-local, site-local and
/// multicast), and within it the IETF protocol assignments (`2001::/23`, Teredo included),
/// documentation (`2001:db8::/32`, `3fff::/20`) and 6to4 (`2002::/16`); an IPv4-mapped IPv6 address
/// is judged as the IPv4 address it stands for.
pub fn is_public(ip: IpAddr) -> bool {
    match ip.to_canonical() {
        IpAddr::V4(ip) => is_public_v4(ip),
        IpAddr::V6(ip) => is_public_v6(ip),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(a == 0
        || a == 10
        || a == 127
        || a >= 224
        || (a == 100 && (64..128).contains(&b))
        || (a == 169 && b == 254)
        || (a == 172 && (16..32).contains(&b))
        || (a == 192 && b == 168)
        || (a == 192 && b == 0 && (c == 0 || c == 2))
        || (a == 198 && (b == 18 || b == 19))
        || (a == 198 && b == 51 && c == 100)
        || (a == 203 && b == 0 && c == 113))
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let [first, second, ..] = ip.segments();
    let global_unicast = first & 0xe000 == 0x2000;
    global_unicast
        && !(first == 0x2001 && second < 0x0200)
        && !(first == 0x2001 && second == 0x0db8)
        && first != 0x2002
        && first & 0xfff0 != 0x3ff0
}

/// Why a URL may not be fetched; the sentences are the reference server's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UnsafeReason {
    /// Not `http` or `https` (the scheme as written, lower-cased; empty when there is none).
    Scheme(String),
    NoHost,
    /// Not a URL at all.
    Unparseable(String),
    Unresolvable {
        host: String,
        detail: String,
    },
    /// Resolves to no address, or to one that is not public and not allowed (all it resolves to).
    NonPublic {
        host: String,
        addresses: Vec<IpAddr>,
    },
}

impl fmt::Display for UnsafeReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UnsafeReason::Scheme(scheme) => {
                write!(f, "Unsupported URL scheme '{scheme}'. Only http/https are allowed.")
            }
            UnsafeReason::NoHost => f.write_str("URL has no hostname."),
            UnsafeReason::Unparseable(detail) => write!(f, "URL cannot be parsed: {detail}."),
            UnsafeReason::Unresolvable { host, detail } => write!(f, "Could not resolve host '{host}': {detail}"),
            UnsafeReason::NonPublic { host, addresses } => {
                let mut shown: Vec<String> = addresses.iter().map(IpAddr::to_string).collect();
                shown.sort();
                write!(
                    f,
                    "URL host '{host}' resolves to a non-public address ({}); refusing to fetch.",
                    shown.join(", ")
                )
            }
        }
    }
}

/// Why a fetch gave no response. `hop` counts redirects: 0 is the URL asked for.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    #[error("{reason}")]
    UnsafeUrl { url: String, hop: usize, reason: UnsafeReason },
    #[error("could not fetch '{url}': {detail}")]
    Unreachable { url: String, hop: usize, detail: String },
    #[error("'{url}' still redirects after {limit} redirects")]
    TooManyRedirects { url: String, limit: usize },
    #[error("the body of '{url}' is larger than {limit} bytes")]
    TooLarge { url: String, limit: usize },
    #[error("fetching '{url}' took longer than {after:?}")]
    Timeout { url: String, after: Duration },
}

impl FetchError {
    /// The error code a tool reports.
    pub fn code(&self) -> &'static str {
        match self {
            FetchError::UnsafeUrl { .. } => "unsafe_url",
            FetchError::Unreachable { .. } => "unreachable",
            FetchError::TooManyRedirects { .. } => "too_many_redirects",
            FetchError::TooLarge { .. } => "too_large",
            FetchError::Timeout { .. } => "timeout",
        }
    }

    /// Whether the URL asked for was itself refused (not a redirect's location).
    pub fn refused_at_once(&self) -> bool {
        matches!(self, FetchError::UnsafeUrl { hop: 0, .. })
    }
}

/// A response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fetched {
    pub status: u16,
    /// Where the response came from, after redirects (without credentials or fragment).
    pub url: Url,
    pub redirects: usize,
    pub content_type: Option<String>,
    /// The body (empty for HEAD).
    pub body: Vec<u8>,
}

#[derive(Clone, Copy)]
enum Method {
    Head,
    Get { limit: usize },
}

/// The guarded client. Cheap to clone; holds no connections.
#[derive(Clone, Debug, Default)]
pub struct Fetcher {
    policy: FetchPolicy,
    /// Names answered from this table instead of DNS.
    hosts: HashMap<String, Vec<IpAddr>>,
}

impl Fetcher {
    pub fn new(policy: FetchPolicy) -> Self {
        Fetcher { policy, hosts: HashMap::new() }
    }

    /// Answers `name` with `addresses` instead of asking DNS (an entry of a hosts file; tests use
    /// it for names no DNS knows). The addresses are checked like resolved ones.
    pub fn with_host(mut self, name: &str, addresses: &[IpAddr]) -> Self {
        self.hosts.insert(name.to_ascii_lowercase(), addresses.to_vec());
        self
    }

    pub fn policy(&self) -> &FetchPolicy {
        &self.policy
    }

    /// A HEAD request: the status, no body.
    pub async fn head(&self, url: &str) -> Result<Fetched, FetchError> {
        self.fetch(url, Method::Head).await
    }

    /// A GET request whose body may be at most `max_body_bytes` long (else [`FetchError::TooLarge`]).
    pub async fn get(&self, url: &str, max_body_bytes: usize) -> Result<Fetched, FetchError> {
        self.fetch(url, Method::Get { limit: max_body_bytes }).await
    }

    async fn fetch(&self, url: &str, method: Method) -> Result<Fetched, FetchError> {
        let after = self.policy.timeout;
        tokio::time::timeout(after, self.follow(url, method))
            .await
            .unwrap_or_else(|_| Err(FetchError::Timeout { url: url.to_owned(), after }))
    }

    async fn follow(&self, first: &str, method: Method) -> Result<Fetched, FetchError> {
        let mut url = checked_url(first, 0)?;
        let mut hop = 0;
        loop {
            let addresses = self.addresses(&url, hop).await?;
            let response = self.send(&url, &addresses, method, hop).await?;
            let status = response.status();
            let location = response.headers().get(LOCATION).and_then(|l| l.to_str().ok()).map(str::to_owned);
            // The redirects Python's `requests` follows (not 300, 304 or 305).
            let redirect = matches!(status.as_u16(), 301 | 302 | 303 | 307 | 308);
            if let (true, Some(location)) = (redirect, location) {
                if hop == self.policy.max_redirects {
                    return Err(FetchError::TooManyRedirects { url: url.to_string(), limit: hop });
                }
                hop += 1;
                let next = url.join(&location).map_err(|e| FetchError::UnsafeUrl {
                    url: location.clone(),
                    hop,
                    reason: UnsafeReason::Unparseable(e.to_string()),
                })?;
                url = checked_url(next.as_str(), hop)?;
                continue;
            }
            let content_type = response.headers().get(CONTENT_TYPE).and_then(|c| c.to_str().ok()).map(str::to_owned);
            let body = read_body(response, method, &url, hop).await?;
            return Ok(Fetched { status: status.as_u16(), url, redirects: hop, content_type, body });
        }
    }

    /// Every address the URL's host resolves to, IPv4 first, once each — all of them allowed.
    async fn addresses(&self, url: &Url, hop: usize) -> Result<Vec<IpAddr>, FetchError> {
        let refuse = |reason| FetchError::UnsafeUrl { url: url.to_string(), hop, reason };
        let (host, found) = match url.host() {
            Some(Host::Ipv4(ip)) => (ip.to_string(), vec![IpAddr::V4(ip)]),
            Some(Host::Ipv6(ip)) => (ip.to_string(), vec![IpAddr::V6(ip)]),
            Some(Host::Domain(name)) => {
                let found = match self.hosts.get(&name.to_ascii_lowercase()) {
                    Some(addresses) => addresses.clone(),
                    None => tokio::net::lookup_host((name, 0))
                        .await
                        .map_err(|e| {
                            refuse(UnsafeReason::Unresolvable { host: name.to_owned(), detail: e.to_string() })
                        })?
                        .map(|a| a.ip())
                        .collect(),
                };
                (name.to_owned(), found)
            }
            None => return Err(refuse(UnsafeReason::NoHost)),
        };
        let mut addresses: Vec<IpAddr> = Vec::with_capacity(found.len());
        for ip in found {
            if !addresses.contains(&ip) {
                addresses.push(ip);
            }
        }
        addresses.sort_by_key(|ip| !ip.is_ipv4());
        if addresses.is_empty() || !addresses.iter().all(|ip| self.permitted(*ip)) {
            return Err(refuse(UnsafeReason::NonPublic { host, addresses }));
        }
        Ok(addresses)
    }

    fn permitted(&self, ip: IpAddr) -> bool {
        is_public(ip) || self.policy.allowed.iter().any(|range| range.contains(ip))
    }

    /// One request, connected to `addresses` only.
    async fn send(
        &self,
        url: &Url,
        addresses: &[IpAddr],
        method: Method,
        hop: usize,
    ) -> Result<reqwest::Response, FetchError> {
        let unreachable = |detail: String| FetchError::Unreachable { url: url.to_string(), hop, detail };
        // reqwest is built without a default crypto provider; the first to install one wins.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut builder = reqwest::Client::builder()
            .redirect(Policy::none())
            .no_proxy()
            .referer(false)
            .retry(reqwest::retry::never())
            .user_agent(self.policy.user_agent.as_str());
        if let Some(Host::Domain(name)) = url.host() {
            // Port 0: the URL's port (or the scheme's) is used.
            let pinned: Vec<SocketAddr> = addresses.iter().map(|ip| SocketAddr::new(*ip, 0)).collect();
            builder = builder.resolve_to_addrs(name, &pinned);
        }
        let client = builder.build().map_err(|e| unreachable(error_chain(&e)))?;
        let request = match method {
            Method::Head => client.head(url.clone()),
            Method::Get { .. } => client.get(url.clone()),
        };
        request.send().await.map_err(|e| unreachable(error_chain(&e)))
    }
}

/// `text` as a URL that may be fetched as far as its form goes, without credentials or fragment.
fn checked_url(text: &str, hop: usize) -> Result<Url, FetchError> {
    let refuse = |reason| FetchError::UnsafeUrl { url: text.to_owned(), hop, reason };
    let mut url = Url::parse(text).map_err(|e| {
        let scheme = written_scheme(text);
        refuse(if scheme != "http" && scheme != "https" {
            UnsafeReason::Scheme(scheme)
        } else if e == url::ParseError::EmptyHost {
            UnsafeReason::NoHost
        } else {
            UnsafeReason::Unparseable(e.to_string())
        })
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(refuse(UnsafeReason::Scheme(url.scheme().to_owned())));
    }
    if url.host().is_none() {
        return Err(refuse(UnsafeReason::NoHost));
    }
    // Never sent: a user name and password (HTTP libraries turn them into an Authorization
    // header), and the fragment (never part of a request).
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.set_fragment(None);
    Ok(url)
}

/// The scheme of a text that is not a URL, read as Python's `urlsplit` reads it: the letters
/// before the first `:`, lower-cased, when they can be a scheme; otherwise empty.
fn written_scheme(text: &str) -> String {
    let text = text.trim_start_matches(|c: char| c <= ' ');
    match text.split_once(':') {
        Some((scheme, _))
            if scheme.starts_with(|c: char| c.is_ascii_alphabetic())
                && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) =>
        {
            scheme.to_ascii_lowercase()
        }
        _ => String::new(),
    }
}

async fn read_body(
    mut response: reqwest::Response,
    method: Method,
    url: &Url,
    hop: usize,
) -> Result<Vec<u8>, FetchError> {
    let Method::Get { limit } = method else { return Ok(Vec::new()) };
    let too_large = || FetchError::TooLarge { url: url.to_string(), limit };
    if response.content_length().is_some_and(|length| length > limit as u64) {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| FetchError::Unreachable {
        url: url.to_string(),
        hop,
        detail: error_chain(&e),
    })? {
        if body.len() + chunk.len() > limit {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;
    use std::time::Duration;

    use super::*;
    use cks_testkit::web::{HttpServer, Reply};

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    /// A fetcher that may reach 127.0.0.1 (the test servers) and nothing else non-public.
    fn local() -> Fetcher {
        Fetcher::new(FetchPolicy { allowed: vec!["127.0.0.1".parse().unwrap()], ..FetchPolicy::default() })
    }

    #[test]
    fn public_and_non_public_addresses() {
        for public in [
            "8.8.8.8",
            "1.1.1.1",
            "100.63.255.255",
            "100.128.0.1",
            "172.32.0.1",
            "192.0.1.1",
            "198.20.0.1",
            "2606:4700::1111",
            "2a00:1450::1",
            "::ffff:8.8.8.8",
            "2001:4860::8888",
        ] {
            assert!(is_public(ip(public)), "{public} is public");
        }
        for internal in [
            "0.0.0.0",
            "10.1.2.3",
            "100.64.0.1",
            "100.127.255.254",
            "127.0.0.1",
            "127.255.0.1",
            "169.254.169.254",
            "172.16.0.1",
            "172.31.255.255",
            "192.0.0.8",
            "192.0.0.170",
            "192.0.2.1",
            "192.168.1.1",
            "198.18.0.1",
            "198.51.100.7",
            "203.0.113.9",
            "224.0.0.1",
            "239.255.255.250",
            "240.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "fec0::1",
            "ff02::1",
            "2001:db8::1",
            "2001::1",
            "2002:7f00:1::",
            "3fff::1",
            "64:ff9b::7f00:1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
        ] {
            assert!(!is_public(ip(internal)), "{internal} is not public");
        }
    }

    #[test]
    fn address_ranges() {
        let range: AddressRange = "10.0.0.0/8".parse().unwrap();
        assert!(range.contains(ip("10.200.0.1")) && range.contains(ip("::ffff:10.0.0.1")));
        assert!(!range.contains(ip("11.0.0.1")) && !range.contains(ip("fd00::1")));
        let one: AddressRange = "127.0.0.1".parse().unwrap();
        assert!(one.contains(ip("127.0.0.1")) && !one.contains(ip("127.0.0.2")));
        assert_eq!(one.to_string(), "127.0.0.1/32");
        let ula: AddressRange = "fd00::/8".parse().unwrap();
        assert!(ula.contains(ip("fd12::1")) && !ula.contains(ip("fe80::1")));
        let everything: AddressRange = "0.0.0.0/0".parse().unwrap();
        assert!(everything.contains(ip("1.2.3.4")));
        for bad in ["10.0.0.0/33", "fd00::/129", "example.org", "10.0.0/8", ""] {
            assert!(bad.parse::<AddressRange>().is_err(), "{bad}");
        }
    }

    async fn refused(fetcher: &Fetcher, url: &str) -> (usize, String) {
        match fetcher.head(url).await {
            Err(FetchError::UnsafeUrl { hop, reason, .. }) => (hop, reason.to_string()),
            other => panic!("{url}: {other:?}"),
        }
    }

    #[tokio::test]
    async fn unsafe_urls_are_refused_before_any_request() {
        let server = HttpServer::start(|_, _| Reply::status(200)).await;
        let port = server.addr.port();
        let fetcher = Fetcher::default()
            .with_host("internal.test", &[ip("10.0.0.7")])
            .with_host("mixed.test", &[ip("93.184.216.34"), ip("192.168.0.1")])
            .with_host("nowhere.test", &[]);
        for (url, reason) in [
            ("ftp://example.org/file", "Unsupported URL scheme 'ftp'. Only http/https are allowed."),
            ("file:///etc/passwd", "Unsupported URL scheme 'file'. Only http/https are allowed."),
            ("not a url", "Unsupported URL scheme ''. Only http/https are allowed."),
            ("http://", "URL has no hostname."),
            (
                &format!("http://127.0.0.1:{port}/"),
                "URL host '127.0.0.1' resolves to a non-public address (127.0.0.1); refusing to fetch.",
            ),
            ("http://[::1]/", "URL host '::1' resolves to a non-public address (::1); refusing to fetch."),
            (
                "http://[::ffff:169.254.169.254]/",
                "URL host '::ffff:169.254.169.254' resolves to a non-public address (::ffff:169.254.169.254); refusing to fetch.",
            ),
            (
                "http://2130706433/",
                "URL host '127.0.0.1' resolves to a non-public address (127.0.0.1); refusing to fetch.",
            ),
            (
                "http://internal.test/",
                "URL host 'internal.test' resolves to a non-public address (10.0.0.7); refusing to fetch.",
            ),
            (
                "https://MIXED.test/",
                "URL host 'mixed.test' resolves to a non-public address (192.168.0.1, 93.184.216.34); refusing to fetch.",
            ),
            ("http://nowhere.test/", "URL host 'nowhere.test' resolves to a non-public address (); refusing to fetch."),
        ] {
            assert_eq!(refused(&fetcher, url).await, (0, reason.to_owned()), "{url}");
        }
        assert!(server.requests().is_empty(), "nothing was sent");
        let error = fetcher.head("http://10.0.0.1/").await.unwrap_err();
        assert_eq!((error.code(), error.refused_at_once()), ("unsafe_url", true));
    }

    #[tokio::test]
    async fn head_and_get_reach_an_allowed_address_without_credentials() {
        let server = HttpServer::start(|_, path| match path {
            "/page" => Reply::status(200).header("Content-Type", "text/plain").body("hello"),
            _ => Reply::status(404),
        })
        .await;
        let base = format!("http://user:secret@127.0.0.1:{}", server.addr.port());
        let head = local().head(&format!("{base}/page#part")).await.unwrap();
        assert_eq!((head.status, head.body.len(), head.redirects), (200, 0, 0));
        assert_eq!(head.url.as_str(), format!("http://127.0.0.1:{}/page", server.addr.port()));
        let get = local().get(&format!("{base}/page"), 100).await.unwrap();
        assert_eq!(
            (get.status, get.body.as_slice(), get.content_type.as_deref()),
            (200, &b"hello"[..], Some("text/plain"))
        );
        assert_eq!(local().head(&format!("{base}/missing")).await.unwrap().status, 404);
        let requests = server.requests();
        assert_eq!(
            requests.iter().map(|r| (r.method.as_str(), r.path.as_str())).collect::<Vec<_>>(),
            [("HEAD", "/page"), ("GET", "/page"), ("HEAD", "/missing")]
        );
        for request in &requests {
            assert!(request.header("authorization").is_none() && request.header("cookie").is_none(), "{request:?}");
            assert!(request.header("user-agent").unwrap().starts_with("cks-mcp/"));
        }
    }

    #[tokio::test]
    async fn a_name_connects_to_the_addresses_that_were_checked() {
        // No DNS knows this name: the request reaches the server only through the checked address.
        let server = HttpServer::start(|_, _| Reply::status(204)).await;
        let fetcher = local().with_host("pinned.test", &[ip("127.0.0.1")]);
        let fetched = fetcher.head(&format!("http://pinned.test:{}/x", server.addr.port())).await.unwrap();
        assert_eq!(fetched.status, 204);
        assert_eq!(server.requests()[0].header("host"), Some(format!("pinned.test:{}", server.addr.port()).as_str()));
        // The same name resolving to an address that is not allowed is refused.
        let fetcher = local().with_host("pinned.test", &[ip("127.0.0.2")]);
        assert_eq!(refused(&fetcher, "http://pinned.test/").await.0, 0);
    }

    #[tokio::test]
    async fn redirects_are_followed_and_each_location_checked() {
        let server = HttpServer::start(|_, path| match path {
            "/a" => Reply::redirect(301, "/b"),
            "/b" => Reply::redirect(302, "c"),
            "/c" => Reply::redirect(307, "http://pinned.test:{port}/d"),
            "/d" => Reply::status(200).body("done"),
            "/internal" => Reply::redirect(302, "http://169.254.169.254/latest/meta-data"),
            "/loop" => Reply::redirect(308, "/loop"),
            "/not-modified" => Reply::status(304).header("Location", "/elsewhere"),
            _ => Reply::status(404),
        })
        .await;
        let port = server.addr.port();
        let fetcher = local().with_host("pinned.test", &[ip("127.0.0.1")]);
        let base = format!("http://127.0.0.1:{port}");
        let fetched = fetcher.get(&format!("{base}/a"), 10).await.unwrap();
        assert_eq!((fetched.status, fetched.redirects, fetched.body.as_slice()), (200, 3, &b"done"[..]));
        assert_eq!(fetched.url.as_str(), format!("http://pinned.test:{port}/d"));

        match fetcher.head(&format!("{base}/internal")).await {
            Err(error @ FetchError::UnsafeUrl { hop: 1, .. }) => {
                assert!(!error.refused_at_once());
                assert!(error.to_string().contains("'169.254.169.254'"), "{error}");
            }
            other => panic!("{other:?}"),
        }
        let looped = fetcher.head(&format!("{base}/loop")).await.unwrap_err();
        assert_eq!(looped, FetchError::TooManyRedirects { url: format!("{base}/loop"), limit: 3 });
        assert_eq!(fetcher.head(&format!("{base}/not-modified")).await.unwrap().status, 304);
        let hops = server.requests().iter().filter(|r| r.path == "/loop").count();
        assert_eq!(hops, 4, "the URL and three redirects");
        let strict = Fetcher::new(FetchPolicy { max_redirects: 0, ..local().policy().clone() });
        assert!(matches!(strict.head(&format!("{base}/a")).await, Err(FetchError::TooManyRedirects { limit: 0, .. })));
    }

    #[tokio::test]
    async fn bodies_over_the_limit_slow_servers_and_closed_ports() {
        let server = HttpServer::start(|_, path| match path {
            "/big" => Reply::status(200).body("x".repeat(100)),
            "/big-unannounced" => Reply::status(200).body("x".repeat(100)).without_length(),
            "/slow" => Reply::status(200).after(Duration::from_secs(5)),
            _ => Reply::status(200).body("x".repeat(10)).without_length(),
        })
        .await;
        let base = format!("http://127.0.0.1:{}", server.addr.port());
        let fetcher = local();
        for path in ["/big", "/big-unannounced"] {
            let error = fetcher.get(&format!("{base}{path}"), 50).await.unwrap_err();
            assert_eq!(error.code(), "too_large", "{path}: {error}");
        }
        assert_eq!(fetcher.get(&format!("{base}/fits"), 10).await.unwrap().body.len(), 10);
        assert_eq!(fetcher.head(&format!("{base}/big")).await.unwrap().status, 200, "HEAD reads no body");

        let impatient = Fetcher::new(FetchPolicy { timeout: Duration::from_millis(200), ..fetcher.policy().clone() });
        let started = std::time::Instant::now();
        let error = impatient.head(&format!("{base}/slow")).await.unwrap_err();
        assert_eq!(error.code(), "timeout");
        assert!(started.elapsed() < Duration::from_secs(3));

        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let error = fetcher.head(&format!("http://{closed}/")).await.unwrap_err();
        assert!(matches!(error, FetchError::Unreachable { hop: 0, .. }), "{error:?}");
    }
}
