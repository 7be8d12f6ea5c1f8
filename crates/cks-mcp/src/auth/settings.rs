//! The OAuth settings, read from the environment's variables (`config/variables.rs` lists them).
//!
//! `CKS_MCP_AUTH_ISSUER` turns OAuth on and needs `CKS_MCP_PUBLIC_URL`, the base URL clients
//! reach this server at: the audience tokens must name is `<public URL>/mcp` unless
//! `CKS_MCP_AUTH_AUDIENCE` says otherwise. OAuth and the static `CKS_MCP_HTTP_TOKEN` are two
//! ways of letting callers in; both at once is refused, so no one wonders which one holds.
//! `CKS_MCP_AUTH_PAGE_CLIENT_ID` names the public client the chat page signs in as.
//!
//! `CKS_MCP_AUTH=builtin` makes this server its own issuer (`builtin.rs`): the issuer is the public
//! URL, and the page signs in as the built-in page client.

/// The resource server's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthSettings {
    /// The authorization server's issuer URL, exactly as its tokens' `iss` spells it.
    pub issuer: String,
    /// What tokens' `aud` must contain: this server's canonical URL (RFC 8707).
    pub audience: String,
    /// The base URL clients reach this server at, without a trailing slash.
    pub public_url: String,
    /// The claim holding the token's scopes (a space-separated string, or an array).
    pub scope_claim: String,
    /// The claim holding the caller's groups (an array of strings, or one string).
    pub groups_claim: String,
    /// The client id the chat page signs in as (authorization code with PKCE); without one the
    /// page cannot sign in.
    pub page_client_id: Option<String>,
    /// Whether this server is the issuer (`CKS_MCP_AUTH=builtin`).
    pub builtin: bool,
}

/// The variables that fine-tune how an issuer's tokens are read: only with `CKS_MCP_AUTH_ISSUER`.
const ISSUER_ONLY: [&str; 4] =
    ["CKS_MCP_AUTH_AUDIENCE", "CKS_MCP_AUTH_SCOPE_CLAIM", "CKS_MCP_AUTH_GROUPS_CLAIM", "CKS_MCP_AUTH_PAGE_CLIENT_ID"];

/// A setting that cannot be used; the message names the variable.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SettingsError {
    #[error("CKS_MCP_AUTH_ISSUER is set, so CKS_MCP_PUBLIC_URL must be too: the base URL clients reach this server at")]
    NoPublicUrl,
    #[error(
        "CKS_MCP_AUTH_ISSUER and CKS_MCP_HTTP_TOKEN are both set: choose OAuth (the issuer) or one static token, not both"
    )]
    Both,
    #[error("CKS_MCP_AUTH=builtin makes this server the issuer: unset CKS_MCP_AUTH_ISSUER")]
    BuiltinAndIssuer,
    #[error("CKS_MCP_AUTH=builtin and CKS_MCP_HTTP_TOKEN are both set: choose the built-in issuer or one static token")]
    BuiltinAndToken,
    #[error("CKS_MCP_AUTH=builtin needs CKS_MCP_PUBLIC_URL: the base URL clients reach this server at, its issuer")]
    BuiltinWithoutPublicUrl,
    #[error("{0} is set without CKS_MCP_AUTH_ISSUER, which turns OAuth on")]
    WithoutIssuer(&'static str),
    #[error("{name}='{value}' is not accepted: {problem}")]
    Bad { name: &'static str, value: String, problem: &'static str },
}

impl AuthSettings {
    /// Settings for the unit tests: issuer `https://id.example.com`, this server at
    /// `https://kg.example.com` (audience `…/mcp`), the default claim names.
    #[cfg(test)]
    pub(crate) fn example() -> AuthSettings {
        AuthSettings {
            issuer: "https://id.example.com".into(),
            audience: "https://kg.example.com/mcp".into(),
            public_url: "https://kg.example.com".into(),
            scope_claim: "scope".into(),
            groups_claim: "groups".into(),
            page_client_id: None,
            builtin: false,
        }
    }

    /// The settings from the variables `get` returns (trimmed, empty as unset); `None` when OAuth
    /// is off. `static_token` is whether `CKS_MCP_HTTP_TOKEN` is set.
    pub fn from_env<'a>(
        get: impl Fn(&str) -> Option<&'a str>,
        static_token: bool,
    ) -> Result<Option<AuthSettings>, SettingsError> {
        if get("CKS_MCP_AUTH").is_some_and(|v| v.eq_ignore_ascii_case("builtin")) {
            return Self::builtin(get, static_token).map(Some);
        }
        let Some(issuer) = get("CKS_MCP_AUTH_ISSUER") else {
            if let Some(name) = ISSUER_ONLY.into_iter().find(|name| get(name).is_some()) {
                return Err(SettingsError::WithoutIssuer(name));
            }
            return Ok(None);
        };
        if static_token {
            return Err(SettingsError::Both);
        }
        let issuer = url("CKS_MCP_AUTH_ISSUER", issuer)?;
        let public_url = public_url(get("CKS_MCP_PUBLIC_URL").ok_or(SettingsError::NoPublicUrl)?)?;
        let audience = match get("CKS_MCP_AUTH_AUDIENCE") {
            Some(audience) => url("CKS_MCP_AUTH_AUDIENCE", audience)?,
            None => format!("{public_url}/mcp"),
        };
        let claim = |name: &'static str, default: &str| match get(name) {
            None => Ok(default.to_owned()),
            Some(value) if value.chars().all(|c| c.is_ascii_graphic()) => Ok(value.to_owned()),
            Some(value) => Err(bad(name, value, "a claim name has no spaces")),
        };
        let page_client_id = match get("CKS_MCP_AUTH_PAGE_CLIENT_ID") {
            None => None,
            Some(value) if value.chars().all(|c| c.is_ascii_graphic()) => Some(value.to_owned()),
            Some(value) => return Err(bad("CKS_MCP_AUTH_PAGE_CLIENT_ID", value, "a client id has no spaces")),
        };
        Ok(Some(AuthSettings {
            issuer,
            audience,
            public_url,
            scope_claim: claim("CKS_MCP_AUTH_SCOPE_CLAIM", "scope")?,
            groups_claim: claim("CKS_MCP_AUTH_GROUPS_CLAIM", "groups")?,
            page_client_id,
            builtin: false,
        }))
    }

    /// The settings of `CKS_MCP_AUTH=builtin`: this server issues the tokens it checks, for
    /// itself, with the claim names it writes.
    fn builtin<'a>(get: impl Fn(&str) -> Option<&'a str>, static_token: bool) -> Result<AuthSettings, SettingsError> {
        if get("CKS_MCP_AUTH_ISSUER").is_some() {
            return Err(SettingsError::BuiltinAndIssuer);
        }
        if static_token {
            return Err(SettingsError::BuiltinAndToken);
        }
        if let Some((name, value)) = ISSUER_ONLY.into_iter().find_map(|name| Some((name, get(name)?))) {
            return Err(bad(name, value, "the built-in issuer decides it"));
        }
        let public_url = public_url(get("CKS_MCP_PUBLIC_URL").ok_or(SettingsError::BuiltinWithoutPublicUrl)?)?;
        Ok(AuthSettings {
            issuer: public_url.clone(),
            audience: format!("{public_url}/mcp"),
            scope_claim: "scope".into(),
            groups_claim: "groups".into(),
            page_client_id: Some(super::builtin::PAGE_CLIENT_ID.into()),
            public_url,
            builtin: true,
        })
    }
}

/// `CKS_MCP_PUBLIC_URL`, without a trailing slash.
fn public_url(value: &str) -> Result<String, SettingsError> {
    let public_url = url("CKS_MCP_PUBLIC_URL", value)?.trim_end_matches('/').to_owned();
    if public_url.contains(['?', '#']) {
        return Err(bad("CKS_MCP_PUBLIC_URL", &public_url, "a base URL has no query or fragment"));
    }
    Ok(public_url)
}

fn bad(name: &'static str, value: &str, problem: &'static str) -> SettingsError {
    SettingsError::Bad { name, value: value.to_owned(), problem }
}

/// An `https://` URL, or an `http://` one on a loopback host (tests, a local issuer).
fn url(name: &'static str, value: &str) -> Result<String, SettingsError> {
    let rest = if let Some(rest) = value.strip_prefix("https://") {
        rest
    } else if let Some(rest) = value.strip_prefix("http://") {
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        let host = authority.rsplit_once(':').map_or(authority, |(host, _)| host);
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let loopback =
            host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
        if !loopback {
            return Err(bad(name, value, "http:// is accepted only for loopback hosts; use https://"));
        }
        rest
    } else {
        return Err(bad(name, value, "not an https:// URL"));
    };
    if rest.split(['/', '?', '#']).next().is_none_or(str::is_empty) || value.contains(char::is_whitespace) {
        return Err(bad(name, value, "has no host name"));
    }
    Ok(value.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn settings(pairs: &[(&str, &str)], token: bool) -> Result<Option<AuthSettings>, SettingsError> {
        let env: HashMap<&str, &str> = pairs.iter().copied().collect();
        AuthSettings::from_env(|name| env.get(name).copied(), token)
    }

    #[test]
    fn the_issuer_turns_oauth_on_with_the_public_url_as_audience() {
        assert_eq!(settings(&[], false), Ok(None));
        let on = settings(
            &[("CKS_MCP_AUTH_ISSUER", "https://id.example.com"), ("CKS_MCP_PUBLIC_URL", "https://kg.example.com/")],
            false,
        )
        .unwrap()
        .unwrap();
        assert_eq!(on.audience, "https://kg.example.com/mcp");
        assert_eq!(on.public_url, "https://kg.example.com");
        assert_eq!((on.scope_claim.as_str(), on.groups_claim.as_str()), ("scope", "groups"));
        assert_eq!(on.page_client_id, None);
    }

    #[test]
    fn bad_settings_name_their_variable() {
        let issuer = ("CKS_MCP_AUTH_ISSUER", "https://id.example.com");
        let public = ("CKS_MCP_PUBLIC_URL", "https://kg.example.com");
        let message = |pairs: &[(&str, &str)], token| settings(pairs, token).unwrap_err().to_string();
        assert!(message(&[issuer], false).contains("CKS_MCP_PUBLIC_URL"));
        assert!(message(&[issuer, public], true).contains("CKS_MCP_HTTP_TOKEN"));
        assert!(message(&[("CKS_MCP_AUTH_ISSUER", "http://id.example.com"), public], false).contains("loopback"));
        assert!(message(&[issuer, ("CKS_MCP_PUBLIC_URL", "kg.example.com")], false).contains("CKS_MCP_PUBLIC_URL"));
        assert!(
            message(&[issuer, public, ("CKS_MCP_AUTH_AUDIENCE", "urn:x")], false).contains("CKS_MCP_AUTH_AUDIENCE")
        );
        assert!(message(&[issuer, public, ("CKS_MCP_AUTH_SCOPE_CLAIM", "a b")], false).contains("SCOPE_CLAIM"));
        assert!(message(&[("CKS_MCP_AUTH_AUDIENCE", "https://x")], false).contains("without CKS_MCP_AUTH_ISSUER"));
        assert!(message(&[("CKS_MCP_AUTH_PAGE_CLIENT_ID", "page")], false).contains("without CKS_MCP_AUTH_ISSUER"));
        assert!(message(&[issuer, public, ("CKS_MCP_AUTH_PAGE_CLIENT_ID", "a b")], false).contains("PAGE_CLIENT_ID"));
        assert!(settings(&[("CKS_MCP_AUTH_ISSUER", "http://127.0.0.1:9000"), public], false).is_ok());
    }

    #[test]
    fn the_builtin_issuer_is_the_public_url_and_excludes_the_other_ways() {
        let builtin = ("CKS_MCP_AUTH", "builtin");
        let public = ("CKS_MCP_PUBLIC_URL", "https://kg.example.com/");
        let on = settings(&[builtin, public], false).unwrap().unwrap();
        assert!(on.builtin);
        assert_eq!(
            (on.issuer.as_str(), on.audience.as_str()),
            ("https://kg.example.com", "https://kg.example.com/mcp")
        );
        assert_eq!(on.page_client_id.as_deref(), Some(crate::auth::builtin::PAGE_CLIENT_ID));
        let message = |pairs: &[(&str, &str)], token| settings(pairs, token).unwrap_err();
        assert_eq!(message(&[builtin], false), SettingsError::BuiltinWithoutPublicUrl);
        assert_eq!(message(&[builtin, public], true), SettingsError::BuiltinAndToken);
        assert_eq!(
            message(&[builtin, public, ("CKS_MCP_AUTH_ISSUER", "https://id.example.com")], false),
            SettingsError::BuiltinAndIssuer
        );
        assert!(
            message(&[builtin, public, ("CKS_MCP_AUTH_AUDIENCE", "https://x")], false).to_string().contains("AUDIENCE")
        );
        assert_eq!(settings(&[("CKS_MCP_AUTH", "keys")], false), Ok(None));
    }
}
