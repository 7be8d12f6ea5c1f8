//! The chat page: one HTML document, one script and one style sheet, compiled into the binary and
//! served at `/` and `/assets/…` wherever the API is served, under the same `Host` and `Origin`
//! checks. The page and its assets need no token (they hold no data); everything the page shows
//! comes from `/mcp`, `/events` and `/chat/stream`, which do.
//!
//! Every answer carries a strict Content-Security-Policy (scripts and styles from this server
//! only, nothing inline; connections to this server only, and to the issuer's token endpoint when
//! the page signs in with OAuth; no framing). `GET /sign-in` tells the page how to sign in
//! (`auth.rs`). The assets are named in the page with a version taken from their contents, so
//! they are cached for good, while the page itself is revalidated on every load (an `ETag`
//! answered with 304 when unchanged).

use axum::extract::{Path, RawQuery, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use std::sync::LazyLock;

const INDEX_HTML: &str = include_str!("../../assets/index.html");
const APP_JS: &str = include_str!("../../assets/app.js");
const APP_CSS: &str = include_str!("../../assets/app.css");

/// What every page answer carries. `connect-src 'self'` covers `/mcp`, `/events` and
/// `/chat/stream` (the page's answer adds the token endpoint it signs in through); `img-src data:`
/// the canvas export a browser may offer.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const HTML: &str = "text/html; charset=utf-8";
const JAVASCRIPT: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

/// The page revalidates every time; an asset named with its version never changes.
const REVALIDATE: &str = "no-cache";
const IMMUTABLE: &str = "public, max-age=31536000, immutable";

/// 64-bit FNV-1a: a version for each asset, computed when the binary is built.
const fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        hash ^= bytes[i] as u64;
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        i += 1;
    }
    hash
}

struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static str,
    version: String,
}

static ASSETS: LazyLock<[Asset; 2]> = LazyLock::new(|| {
    [
        Asset {
            name: "app.js",
            content_type: JAVASCRIPT,
            body: APP_JS,
            version: format!("{:016x}", fnv1a(APP_JS.as_bytes())),
        },
        Asset {
            name: "app.css",
            content_type: CSS,
            body: APP_CSS,
            version: format!("{:016x}", fnv1a(APP_CSS.as_bytes())),
        },
    ]
});

/// The page with each asset's version filled in (`{{app.js}}` in the template).
static PAGE: LazyLock<(String, String)> = LazyLock::new(|| {
    let mut page = INDEX_HTML.to_owned();
    for asset in ASSETS.iter() {
        page = page.replace(&format!("{{{{{}}}}}", asset.name), &asset.version);
    }
    let etag = format!("\"{:016x}\"", fnv1a(page.as_bytes()));
    (page, etag)
});

/// Whether a request is for the page or one of its assets: these are answered without a token.
pub(crate) fn is_page_request(request: &Request) -> bool {
    let method = request.method();
    (method == Method::GET || method == Method::HEAD) && {
        let path = request.uri().path();
        path == "/" || path.starts_with("/assets/") || path == crate::auth::SIGN_IN_PATH
    }
}

/// `GET /`.
pub(crate) async fn index(State(state): State<super::AppState>, headers: HeaderMap) -> Response {
    let (page, etag) = &*PAGE;
    let mut response = answer(&headers, HTML, page, etag, REVALIDATE);
    let token_origin = state.config.oauth.as_ref().and_then(|o| o.page.as_ref()).map(|p| p.token_origin());
    if let Some(origin) = token_origin
        && let Ok(policy) = HeaderValue::from_str(
            &CONTENT_SECURITY_POLICY.replace("connect-src 'self'", &format!("connect-src 'self' {origin}")),
        )
    {
        response.headers_mut().insert(header::CONTENT_SECURITY_POLICY, policy);
    }
    response
}

/// `GET /sign-in`: how the page signs in; not found when the server has no sign-in for it.
pub(crate) async fn sign_in(State(state): State<super::AppState>) -> Response {
    let mut response = match state.config.oauth.as_ref().and_then(|o| o.sign_in()) {
        Some(document) => axum::Json(document).into_response(),
        None => super::error_response(
            StatusCode::NOT_FOUND,
            "not_found",
            "The chat page cannot sign in here: that needs CKS_MCP_AUTH_ISSUER and CKS_MCP_AUTH_PAGE_CLIENT_ID.",
        ),
    };
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    secure(response.headers_mut());
    response
}

/// `GET /assets/{name}`; with `?v=` naming the current version the answer may be kept for good.
pub(crate) async fn asset(Path(name): Path<String>, RawQuery(query): RawQuery, headers: HeaderMap) -> Response {
    let Some(asset) = ASSETS.iter().find(|a| a.name == name) else {
        let mut response =
            (StatusCode::NOT_FOUND, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], "Not found").into_response();
        secure(response.headers_mut());
        return response;
    };
    let current = query
        .as_deref()
        .and_then(|q| q.split('&').find_map(|pair| pair.strip_prefix("v=")))
        .is_some_and(|v| v == asset.version);
    let etag = format!("\"{}\"", asset.version);
    answer(&headers, asset.content_type, asset.body, &etag, if current { IMMUTABLE } else { REVALIDATE })
}

fn answer(request: &HeaderMap, content_type: &'static str, body: &str, etag: &str, cache: &'static str) -> Response {
    let unchanged = request
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|given| given.split(',').any(|tag| tag.trim().trim_start_matches("W/") == etag));
    let mut response =
        if unchanged { StatusCode::NOT_MODIFIED.into_response() } else { body.to_owned().into_response() };
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    if let Ok(etag) = HeaderValue::from_str(etag) {
        h.insert(header::ETAG, etag);
    }
    secure(h);
    response
}

/// The security headers of every page answer.
fn secure(h: &mut HeaderMap) {
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert("cross-origin-opener-policy", HeaderValue::from_static("same-origin"));
    h.insert("cross-origin-resource-policy", HeaderValue::from_static("same-origin"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_names_each_asset_with_its_version() {
        let (page, etag) = &*PAGE;
        for asset in ASSETS.iter() {
            assert!(page.contains(&format!("/assets/{}?v={}", asset.name, asset.version)), "{}", asset.name);
        }
        assert!(!page.contains("{{"), "every placeholder is filled");
        assert!(etag.starts_with('"') && etag.len() == 18);
    }

    #[test]
    fn the_page_has_no_inline_script_or_style() {
        let (page, _) = &*PAGE;
        for (i, _) in page.match_indices("<script") {
            let tag = &page[i..i + page[i..].find('>').unwrap()];
            assert!(tag.contains(" src=\"/assets/"), "inline script: {tag}");
        }
        assert!(!page.contains("<style"), "inline style");
        assert!(!page.contains(" style=\""), "inline style attribute");
        // No event handler attributes (onclick=…, onload=…).
        let handler = page.split(" on").skip(1).any(|rest| {
            let name: String = rest.chars().take_while(char::is_ascii_lowercase).collect();
            !name.is_empty() && rest[name.len()..].starts_with('=')
        });
        assert!(!handler, "inline event handler");
    }
}
