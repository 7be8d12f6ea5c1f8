//! An access token checked as every OAuth request checks it (`auth/token.rs`): header, key
//! lookup in the cached key set, signature, claims, principal. The goal: ≤ 50 µs a call (p50).
//!
//! Run: `cargo bench -p cks-mcp --bench auth`.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use divan::Bencher;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};

use cks_mcp::auth::{AuthSettings, KeySet, Validator};

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
    }
}

fn token(alg: Algorithm, kid: &str, key: &EncodingKey) -> String {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
    let claims = json!({
        "iss": "https://id.example.com", "sub": "client-1", "aud": "https://kg.example.com/mcp",
        "scope": "cks:read cks:write", "exp": now + 3_600, "iat": now, "groups": ["curators"],
    });
    let mut header = Header::new(alg);
    header.kid = Some(kid.into());
    header.typ = Some("at+jwt".into());
    jsonwebtoken::encode(&header, &claims, key).unwrap()
}

fn check(bencher: Bencher, alg: Algorithm, kid: &str, key: EncodingKey) {
    let tokio = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let jwks: Value = serde_json::from_str(&std::fs::read_to_string(format!("{DATA}/jwks.json")).unwrap()).unwrap();
    let validator = Validator::new(&settings(), Arc::new(KeySet::fixed(&jwks)));
    let token = token(alg, kid, &key);
    assert!(tokio.block_on(validator.validate(&token)).is_ok());
    bencher.bench_local(|| tokio.block_on(validator.validate(divan::black_box(&token))).unwrap());
}

#[divan::bench(sample_count = 200)]
fn rs256(bencher: Bencher) {
    let pem = std::fs::read(format!("{DATA}/rsa-private.pem")).unwrap();
    check(bencher, Algorithm::RS256, "rsa-1", EncodingKey::from_rsa_pem(&pem).unwrap());
}

#[divan::bench(sample_count = 200)]
fn es256(bencher: Bencher) {
    let pem = std::fs::read(format!("{DATA}/ec-private.pem")).unwrap();
    check(bencher, Algorithm::ES256, "ec-1", EncodingKey::from_ec_pem(&pem).unwrap());
}
