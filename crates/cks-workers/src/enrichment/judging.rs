//! Which candidates are worth fetching, decided before anything is fetched: pages that are almost
//! never content (sign-in walls, status pages, legal boilerplate, tracking links), the operator's
//! allow and block lists, and a score — how much the publisher is trusted, and how much of the
//! query the candidate's address and title cover.

use reqwest::Url;

use super::sources::Candidate;

/// Path segments of pages that are seldom content.
const LOW_VALUE_SEGMENTS: [&str; 21] = [
    "account",
    "accounts",
    "auth",
    "authorize",
    "callback",
    "contact",
    "cookie",
    "cookies",
    "donate",
    "login",
    "logout",
    "oauth",
    "privacy",
    "signin",
    "signup",
    "status",
    "subscribe",
    "subscription",
    "subscriptions",
    "support",
    "terms",
];
/// Whole paths of a site's front and boilerplate pages.
const LOW_VALUE_PATHS: [&str; 8] =
    ["/", "/about", "/community", "/contact", "/privacy", "/security", "/support", "/terms"];
/// Query parameters of sign-in flows and tracking links.
const LOW_VALUE_PARAMETERS: [&str; 9] = [
    "client_id",
    "redirect_uri",
    "scope",
    "state",
    "utm_campaign",
    "utm_content",
    "utm_medium",
    "utm_source",
    "utm_term",
];
/// Status-page hosts.
const LOW_VALUE_HOSTS: [&str; 3] = ["githubstatus.com", "www.githubstatus.com", "statuspage.io"];

/// Publishers trusted more than an unknown site, with how much.
const AUTHORITIES: [(&str, f64); 7] = [
    ("en.wikipedia.org", 0.90),
    ("wikipedia.org", 0.88),
    ("arxiv.org", 0.92),
    ("export.arxiv.org", 0.92),
    ("docs.python.org", 0.94),
    ("github.com", 0.80),
    ("pypi.org", 0.80),
];

/// The operator's lists (`CKS_ENRICHMENT_ALLOW_DOMAINS`, `CKS_ENRICHMENT_BLOCK_DOMAINS`,
/// `CKS_ENRICHMENT_ALLOW_URL_PREFIXES`, `CKS_ENRICHMENT_BLOCK_URL_PREFIXES`): a domain covers its
/// subdomains; an empty allow list allows everything the block list does not block.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SourcePolicy {
    pub allow_domains: Vec<String>,
    pub block_domains: Vec<String>,
    pub allow_url_prefixes: Vec<String>,
    pub block_url_prefixes: Vec<String>,
}

impl SourcePolicy {
    /// Whether `url` may be fetched at all.
    pub(crate) fn allows(&self, url: &str) -> bool {
        let Some(host) = host(url) else { return false };
        let within = |domains: &[String]| domains.iter().any(|d| host == *d || host.ends_with(&format!(".{d}")));
        let prefixed = |prefixes: &[String]| prefixes.iter().any(|p| url.starts_with(p.as_str()));
        !low_value(url)
            && (self.allow_url_prefixes.is_empty() || prefixed(&self.allow_url_prefixes))
            && !prefixed(&self.block_url_prefixes)
            && (self.allow_domains.is_empty() || within(&self.allow_domains))
            && !within(&self.block_domains)
    }
}

fn host(url: &str) -> Option<String> {
    Url::parse(url).ok()?.host_str().map(str::to_ascii_lowercase)
}

/// Whether `url` is almost never worth fetching for its content, whatever the site.
pub(crate) fn low_value(url: &str) -> bool {
    let Ok(parsed) = Url::parse(url.trim()) else { return true };
    if !matches!(parsed.scheme(), "http" | "https") {
        return true;
    }
    let host = parsed.host_str().unwrap_or("").to_ascii_lowercase();
    let path = parsed.path().trim_end_matches('/').to_ascii_lowercase();
    let path = if path.is_empty() { "/".to_owned() } else { path };
    LOW_VALUE_HOSTS.contains(&host.as_str())
        || host.ends_with(".statuspage.io")
        || LOW_VALUE_PATHS.contains(&path.as_str())
        || path.split('/').any(|segment| LOW_VALUE_SEGMENTS.contains(&segment.trim()))
        || parsed.query_pairs().any(|(key, _)| LOW_VALUE_PARAMETERS.contains(&key.to_ascii_lowercase().as_str()))
}

/// The candidate's worth in [0, 1]: 40 % the publisher's authority, 60 % the share of the query's
/// words found in its address and title (no overlap can outweigh any authority: relevance must be
/// able to veto).
pub(crate) fn score(candidate: &Candidate, query: &str) -> f64 {
    let value = 0.4 * authority(&candidate.url) + 0.6 * relevance(candidate, query);
    (value.clamp(0.0, 1.0) * 10_000.0).round() / 10_000.0
}

fn authority(url: &str) -> f64 {
    let Some(host) = host(url) else { return 0.35 };
    if let Some((_, score)) = AUTHORITIES.iter().find(|(domain, _)| *domain == host) {
        return *score;
    }
    if let Some((_, score)) = AUTHORITIES.iter().find(|(domain, _)| host.ends_with(&format!(".{domain}"))) {
        return (score - 0.05).max(0.5);
    }
    match host.rsplit('.').next() {
        Some("gov") => 0.84,
        Some("edu") => 0.80,
        Some("org") => 0.62,
        _ => 0.50,
    }
}

fn relevance(candidate: &Candidate, query: &str) -> f64 {
    let wanted = words(query);
    if wanted.is_empty() {
        return 0.5;
    }
    let (path, parameters) = match Url::parse(&candidate.url) {
        Ok(url) => (decode(url.path()), url.query().map(decode).unwrap_or_default()),
        Err(_) => (String::new(), String::new()),
    };
    let offered = words(&format!("{path} {parameters} {}", candidate.title));
    wanted.iter().filter(|w| offered.contains(*w)).count() as f64 / wanted.len() as f64
}

/// Percent-decoded, `+` read as a space.
fn decode(text: &str) -> String {
    let spaced = text.replace('+', " ");
    url::form_urlencoded::parse(format!("x={spaced}").as_bytes()).next().map(|(_, v)| v.into_owned()).unwrap_or(spaced)
}

/// The distinct lower-case runs of ASCII letters and digits.
fn words(text: &str) -> std::collections::BTreeSet<String> {
    text.to_ascii_lowercase()
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(url: &str, title: &str) -> Candidate {
        Candidate { url: url.into(), title: title.into(), source: "wikipedia" }
    }

    #[test]
    fn boilerplate_and_tracking_pages_are_left_out() {
        for url in [
            "https://example.org/",
            "https://example.org/login?next=/x",
            "https://example.org/a/Privacy/b",
            "https://example.org/page?utm_source=feed",
            "https://www.githubstatus.com/incidents/1",
            "https://acme.statuspage.io/x",
            "ftp://example.org/file",
            "not a url",
        ] {
            assert!(low_value(url), "{url}");
        }
        assert!(!low_value("https://en.wikipedia.org/wiki/Photosynthesis"));
    }

    #[test]
    fn the_operators_lists_decide_what_may_be_fetched() {
        let policy = SourcePolicy {
            allow_domains: vec!["wikipedia.org".into(), "arxiv.org".into()],
            block_domains: vec!["de.wikipedia.org".into()],
            block_url_prefixes: vec!["https://arxiv.org/pdf/".into()],
            ..SourcePolicy::default()
        };
        assert!(policy.allows("https://en.wikipedia.org/wiki/Light"));
        assert!(!policy.allows("https://de.wikipedia.org/wiki/Licht"));
        assert!(!policy.allows("https://arxiv.org/pdf/2101.00001"));
        assert!(policy.allows("https://arxiv.org/abs/2101.00001"));
        assert!(!policy.allows("https://example.com/wiki/Light"));
        assert!(SourcePolicy::default().allows("https://example.com/wiki/Light"));
    }

    #[test]
    fn relevance_can_veto_authority() {
        let on_topic = candidate("https://en.wikipedia.org/wiki/Photosynthesis", "Photosynthesis");
        let off_topic = candidate("https://en.wikipedia.org/wiki/Banana", "Banana");
        assert_eq!(score(&on_topic, "photosynthesis"), 0.96);
        assert_eq!(score(&off_topic, "photosynthesis"), 0.36, "authority alone stays under 0.5");
        let half = candidate("https://example.com/light", "");
        assert_eq!(score(&half, "light reactions"), 0.5);
        let encoded = candidate("https://example.gov/search?q=calvin+cycle", "");
        assert_eq!(score(&encoded, "Calvin cycle"), 0.936);
        assert_eq!(score(&candidate("https://example.com/x", ""), ""), 0.5, "no query: neutral");
    }
}
