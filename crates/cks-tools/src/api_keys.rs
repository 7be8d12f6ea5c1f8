//! What an API key looks like, and how one is made and checked. The records are the runtime's
//! (`cks_runtime::api_keys`); the tools that create, list and revoke keys are in
//! `tools/keys/`; the HTTP server checks the keys it is sent (`cks-mcp`'s `auth/api_keys.rs`).
//!
//! A key is `cks_<id>_<secret>`: `id` is 12 hex digits that name the key (found by it, logged by
//! it), `secret` 64 hex digits (256 random bits). Only the key's SHA-256 is kept. A slow,
//! memory-hard hash is for passwords people choose; a key of 256 random bits cannot be guessed
//! from its digest, and a fast digest keeps the check of every request in microseconds.

use sha2::{Digest as _, Sha256};

use cks_runtime::api_keys::ApiKeyRecord;

use crate::principal::{Principal, Scope};

/// What every key starts with: a scanner can tell a leaked key, and a server tells a key from a
/// JWT (which starts `eyJ`).
pub const PREFIX: &str = "cks_";

/// The issuer a key's principal has unless the operator names another.
pub const ISSUER: &str = "urn:cks-mcp:api-key";

const ID_BYTES: usize = 6;
const SECRET_BYTES: usize = 32;

/// A new key's text and id.
pub fn generate() -> (String, String) {
    let id = hex(&rand::random::<[u8; ID_BYTES]>());
    let secret = hex(&rand::random::<[u8; SECRET_BYTES]>());
    (format!("{PREFIX}{id}_{secret}"), id)
}

/// The id a text names, when it has a key's shape.
pub fn id_of(text: &str) -> Option<&str> {
    let rest = text.strip_prefix(PREFIX)?;
    let (id, secret) = rest.split_once('_')?;
    let hex_of = |part: &str, bytes: usize| part.len() == 2 * bytes && part.bytes().all(|b| b.is_ascii_hexdigit());
    (hex_of(id, ID_BYTES) && hex_of(secret, SECRET_BYTES)).then_some(id)
}

/// The digest a record keeps of a key: SHA-256 in hex.
pub fn digest(text: &str) -> String {
    hex(&Sha256::digest(text.as_bytes()))
}

/// The principal a key acts as. `None` when its record names no scope of ours.
pub fn principal(record: &ApiKeyRecord) -> Option<Principal> {
    Some(Principal {
        issuer: record.issuer.clone(),
        subject: record.subject.clone(),
        scope: Some(Scope::parse(&record.scope)?),
        groups: record.groups.clone(),
    })
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_key_names_its_id_and_nothing_else_does() {
        let (key, id) = generate();
        assert_eq!(key.len(), PREFIX.len() + 12 + 1 + 64);
        assert_eq!(id_of(&key), Some(id.as_str()));
        let (other, other_id) = generate();
        assert_ne!((&key, &id), (&other, &other_id), "keys are random");
        assert_eq!(digest(&key).len(), 64);
        assert_ne!(digest(&key), digest(&other));

        assert_eq!(id_of("eyJhbGciOiJSUzI1NiJ9.e30.sig"), None, "a JWT");
        assert_eq!(id_of(&key[..key.len() - 1]), None, "cut short");
        assert_eq!(id_of(&format!("{key}0")), None, "too long");
        assert_eq!(id_of(&key.replace('_', "-")), None);
        let mut odd = key.clone();
        odd.replace_range(key.len() - 1.., "g");
        assert_eq!(id_of(&odd), None, "not hex");
    }

    #[test]
    fn a_key_acts_as_its_record_says() {
        let record = ApiKeyRecord {
            id: "0123456789ab".into(),
            issuer: ISSUER.into(),
            subject: "nightly-import".into(),
            scope: "cks:write".into(),
            groups: vec!["curators".into()],
            label: None,
            digest: String::new(),
            created_at: "2026-01-01T00:00:00Z".into(),
            expires_at: None,
            revoked_at: None,
        };
        let principal = principal(&record).unwrap();
        assert_eq!((principal.issuer.as_str(), principal.subject.as_str()), (ISSUER, "nightly-import"));
        assert!(principal.allows(Scope::Write) && !principal.allows(Scope::Admin));
        assert!(principal.in_team("curators"));
        assert_eq!(super::principal(&ApiKeyRecord { scope: "root".into(), ..record }), None);
    }
}
