//! The chat page at `/`: its assets compiled into the binary, their content types, the
//! Content-Security-Policy and cache headers, unknown assets, and the same security as the API —
//! the page loads without the token (it holds no data), every call it makes needs it.

use reqwest::header;
use serde_json::json;

mod support;
use support::{TestServer, start};

/// The page's asset URLs (`/assets/…?v=…`), in the order the page names them.
fn asset_urls(page: &str) -> Vec<String> {
    page.match_indices("\"/assets/").map(|(i, _)| page[i + 1..].split('"').next().unwrap().to_owned()).collect()
}

async fn get(s: &TestServer, path: &str) -> reqwest::Response {
    s.client.get(format!("{}{path}", s.base)).send().await.unwrap()
}

#[tokio::test]
async fn the_page_and_its_assets_have_their_types_policy_and_cache_headers() {
    let s = start(None, 1 << 20).await;
    let response = get(&s, "/").await;
    assert_eq!(response.status(), 200);
    let headers = response.headers().clone();
    assert_eq!(headers[header::CONTENT_TYPE], "text/html; charset=utf-8");
    let policy = headers[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
    for directive in
        ["default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"]
    {
        assert!(policy.contains(directive), "{directive} in {policy}");
    }
    assert!(!policy.contains("unsafe-inline") && !policy.contains("unsafe-eval"), "{policy}");
    assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
    assert_eq!(headers[header::CACHE_CONTROL], "no-cache", "the page is revalidated on every load");
    let etag = headers[header::ETAG].to_str().unwrap().to_owned();
    let page = response.text().await.unwrap();
    assert!(page.starts_with("<!doctype html>"));

    let urls = asset_urls(&page);
    assert_eq!(urls.len(), 2, "one style sheet and one script: {urls:?}");
    let mut total = page.len();
    for url in &urls {
        let response = get(&s, url).await;
        assert_eq!(response.status(), 200, "{url}");
        let expected = if url.contains(".js?") { "text/javascript; charset=utf-8" } else { "text/css; charset=utf-8" };
        assert_eq!(response.headers()[header::CONTENT_TYPE], expected, "{url}");
        assert_eq!(response.headers()[header::CACHE_CONTROL], "public, max-age=31536000, immutable", "{url}");
        assert!(response.headers().contains_key(header::CONTENT_SECURITY_POLICY), "{url}");
        total += response.bytes().await.unwrap().len();
        // Without its version (or with an old one) an asset is revalidated, never kept for good.
        let bare = url.split('?').next().unwrap();
        let response = get(&s, &format!("{bare}?v=0000")).await;
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()[header::CACHE_CONTROL], "no-cache", "{bare}");
    }
    assert!(total <= 200 * 1024, "the first load is {total} bytes");
    println!("page and assets: {total} bytes");

    let unchanged = s.client.get(format!("{}/", s.base)).header(header::IF_NONE_MATCH, &etag).send().await.unwrap();
    assert_eq!(unchanged.status(), 304);
    let head = s.client.head(format!("{}/", s.base)).send().await.unwrap();
    assert_eq!(head.status(), 200);

    for missing in ["/assets/nope.js", "/assets/app.js.map", "/assets/..%2Fapp.js"] {
        let response = get(&s, missing).await;
        assert_eq!(response.status(), 404, "{missing}");
        assert!(response.headers().contains_key(header::CONTENT_SECURITY_POLICY), "{missing}");
    }
    assert_eq!(get(&s, "/index.html").await.status(), 404);
}

#[tokio::test]
async fn with_a_token_the_page_loads_but_every_call_needs_the_token() {
    let s = start(Some("s3cret"), 1 << 20).await;
    let response = get(&s, "/").await;
    assert_eq!(response.status(), 200, "the page itself needs no token: it asks for it");
    let page = response.text().await.unwrap();
    for url in asset_urls(&page) {
        assert_eq!(get(&s, &url).await.status(), 200, "{url}");
    }
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    assert_eq!(s.post(&ping).send().await.unwrap().status(), 401);
    assert_eq!(s.post(&ping).bearer_auth("s3cret").send().await.unwrap().status(), 200);
    assert_eq!(get(&s, "/health").await.status(), 401);
    assert_eq!(get(&s, "/events/some-session").await.status(), 401);
    let chat = s.client.post(format!("{}/chat/stream", s.base)).json(&json!({})).send().await.unwrap();
    assert_eq!(chat.status(), 401, "the chat stream is behind the token like every call");
    let post = s.client.post(format!("{}/", s.base)).send().await.unwrap();
    assert_eq!(post.status(), 401, "only GET and HEAD of the page go without the token");
}

#[tokio::test]
async fn the_page_is_behind_the_same_host_and_origin_checks() {
    let s = start(None, 1 << 20).await;
    let url = format!("{}/", s.base);
    let rebound = s.client.get(&url).header(header::HOST, "attacker.example.com").send().await.unwrap();
    assert_eq!(rebound.status(), 403, "DNS rebinding: foreign Host names are refused");
    let evil = s.client.get(&url).header(header::ORIGIN, "https://evil.example.com").send().await.unwrap();
    assert_eq!(evil.status(), 403);
    let script = format!("{}/assets/app.js", s.base);
    let evil = s.client.get(&script).header(header::ORIGIN, "https://evil.example.com").send().await.unwrap();
    assert_eq!(evil.status(), 403);
    let local = s.client.get(&script).header(header::ORIGIN, s.base.as_str()).send().await.unwrap();
    assert_eq!(local.status(), 200);
    assert_eq!(local.headers()[header::ACCESS_CONTROL_ALLOW_ORIGIN], s.base.as_str());
}
