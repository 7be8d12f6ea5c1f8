//! An access token checked as every OAuth request checks it (`auth/token.rs`): header, key
//! lookup in the cached key set, signature, claims, principal, for a token seen the first time
//! and for one seen before (remembered by its digest). The goal: ≤ 50 µs a call (p50).
//! An API key checked as every request sending one checks it (`auth/api_keys.rs`), among 1,000
//! keys: its digest, found by id, compared. The goal: ≤ 5 µs (p50).
//! A token the built-in issuer signed (`auth/builtin.rs`), checked the same way, first and again.
//! The goal: ≤ 20 µs (p50).
//!
//! Run: `cargo bench -p cks-mcp --bench auth`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use divan::Bencher;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};

use cks_mcp::auth::{AuthSettings, KeySet, OAuth, Validator};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/oauth");

fn main() {
    divan::main();
}

fn settings() -> AuthSettings {
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

/// A token of its own each time (`jti`), so that none was seen before.
fn token(alg: Algorithm, kid: &str, key: &EncodingKey) -> String {
    static MINTED: AtomicU64 = AtomicU64::new(0);
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
    let claims = json!({
        "iss": "https://id.example.com", "sub": "client-1", "aud": "https://kg.example.com/mcp",
        "scope": "cks:read cks:write", "exp": now + 3_600, "iat": now, "groups": ["curators"],
        "jti": MINTED.fetch_add(1, Ordering::Relaxed).to_string(),
    });
    let mut header = Header::new(alg);
    header.kid = Some(kid.into());
    header.typ = Some("at+jwt".into());
    jsonwebtoken::encode(&header, &claims, key).unwrap()
}

fn validator() -> Validator {
    let jwks: Value = serde_json::from_str(&std::fs::read_to_string(format!("{DATA}/jwks.json")).unwrap()).unwrap();
    Validator::new(&settings(), Arc::new(KeySet::fixed(&jwks)))
}

/// A token seen for the first time: the whole check. Minting it is not timed.
fn first(bencher: Bencher, alg: Algorithm, kid: &str, key: EncodingKey) {
    let tokio = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let validator = validator();
    bencher
        .with_inputs(|| token(alg, kid, &key))
        .bench_local_refs(|token| tokio.block_on(validator.validate(token)).unwrap());
}

/// The token a client sends with every call: remembered after its first check.
fn again(bencher: Bencher, alg: Algorithm, kid: &str, key: EncodingKey) {
    let tokio = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let validator = validator();
    let token = token(alg, kid, &key);
    assert!(tokio.block_on(validator.validate(&token)).is_ok());
    bencher.bench_local(|| tokio.block_on(validator.validate(divan::black_box(&token))).unwrap());
}

fn rsa() -> EncodingKey {
    EncodingKey::from_rsa_pem(&std::fs::read(format!("{DATA}/rsa-private.pem")).unwrap()).unwrap()
}

fn ec() -> EncodingKey {
    EncodingKey::from_ec_pem(&std::fs::read(format!("{DATA}/ec-private.pem")).unwrap()).unwrap()
}

#[divan::bench(sample_count = 100)]
fn rs256_first(bencher: Bencher) {
    first(bencher, Algorithm::RS256, "rsa-1", rsa());
}

#[divan::bench(sample_count = 100)]
fn es256_first(bencher: Bencher) {
    first(bencher, Algorithm::ES256, "ec-1", ec());
}

#[divan::bench(sample_count = 200)]
fn rs256_again(bencher: Bencher) {
    again(bencher, Algorithm::RS256, "rsa-1", rsa());
}

#[divan::bench(sample_count = 200)]
fn es256_again(bencher: Bencher) {
    again(bencher, Algorithm::ES256, "ec-1", ec());
}

/// One key among a thousand, checked as a request checks it.
#[divan::bench(sample_count = 200)]
fn api_key(bencher: Bencher) {
    use cks_mcp::auth::api_keys::{KeyRing, REFRESH};
    use cks_runtime::store::memory::MemoryStore;
    use cks_runtime::{Runtime, RuntimeConfig};

    let tokio = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let runtime = Arc::new(Runtime::new(Arc::new(MemoryStore::new()), RuntimeConfig::default()));
    let ctx = cks_tools::ToolContext::new(runtime.clone());
    let registry = cks_tools::Registry::standard();
    let keys: Vec<String> = (0..1_000)
        .map(|i| {
            let made = tokio.block_on(registry.call(
                "create_api_key",
                json!({"subject": format!("client-{i}"), "scope": "cks:write"}),
                &ctx,
            ));
            made.unwrap()["key"].as_str().unwrap().to_owned()
        })
        .collect();
    let ring = tokio.block_on(KeyRing::load(runtime, REFRESH)).unwrap();
    let key = &keys[500];
    assert!(tokio.block_on(ring.check(key)).is_ok());
    bencher.bench_local(|| tokio.block_on(ring.check(divan::black_box(key))).unwrap());
}

/// The built-in issuer on a memory store, and the resource server it issues for.
fn builtin(tokio: &tokio::runtime::Runtime) -> (Arc<cks_mcp::auth::builtin::AuthorizationServer>, Arc<OAuth>) {
    use cks_runtime::store::memory::MemoryStore;
    use cks_runtime::{Runtime, RuntimeConfig};

    let settings = AuthSettings { issuer: "https://kg.example.com".into(), builtin: true, ..settings() };
    let runtime = Arc::new(Runtime::new(Arc::new(MemoryStore::new()), RuntimeConfig::default()));
    let oauth = OAuth::builtin(settings);
    let fetcher = cks_web::fetch::Fetcher::default();
    let start = cks_mcp::auth::builtin::AuthorizationServer::start(runtime, oauth.clone(), 600, fetcher, None);
    (tokio.block_on(start).unwrap(), oauth)
}

/// A token the built-in issuer signs for a person: what its token endpoint answers.
fn builtin_token(issuer: &cks_mcp::auth::builtin::AuthorizationServer) -> String {
    static MINTED: AtomicU64 = AtomicU64::new(0);
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
    let claims = json!({
        "iss": "https://kg.example.com", "sub": "alice", "aud": "https://kg.example.com/mcp",
        "client_id": "a-host", "scope": "cks:read cks:write", "groups": ["curators"], "iat": now,
        "exp": now + 600, "jti": MINTED.fetch_add(1, Ordering::Relaxed).to_string(),
    });
    issuer.keys.sign("at+jwt", &claims).unwrap()
}

#[divan::bench(sample_count = 100)]
fn builtin_first(bencher: Bencher) {
    let tokio = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (issuer, oauth) = builtin(&tokio);
    bencher
        .with_inputs(|| builtin_token(&issuer))
        .bench_local_refs(|token| tokio.block_on(oauth.validator.validate(token)).unwrap());
}

#[divan::bench(sample_count = 200)]
fn builtin_again(bencher: Bencher) {
    let tokio = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (issuer, oauth) = builtin(&tokio);
    let token = builtin_token(&issuer);
    assert!(tokio.block_on(oauth.validator.validate(&token)).is_ok());
    bencher.bench_local(|| tokio.block_on(oauth.validator.validate(divan::black_box(&token))).unwrap());
}
