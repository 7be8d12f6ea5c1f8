//! The built-in issuer's signing keys: ES256 (P-256) key pairs kept in the store as one setting,
//! so that every replica signs and checks with the same keys.
//!
//! Rotation: when the newest key is older than [`ROTATE_AFTER`], a new one is made. A key is used
//! to sign only once it has been in the store for [`PUBLISHED_BEFORE_USE`], longer than replicas
//! take to read the keys again ([`REFRESH`]): a token is never signed with a key another replica
//! has not read yet. A key is kept for checking until [`RETIRE_AFTER`], far longer than any access
//! token lives.
//!
//! The private keys are in the store, as the provenance secret is: whoever reads the store's
//! settings can sign tokens. Keys are not part of backups.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use cks_runtime::Runtime;

use super::{BuiltinError, now};
use crate::auth::KeySet;

/// The setting holding the keys.
pub(crate) const SETTING: &str = "oauth.signing_keys";
/// The age at which the newest key is replaced.
pub const ROTATE_AFTER: Duration = Duration::from_secs(30 * 86_400);
/// How long a new key is only published before it signs.
pub const PUBLISHED_BEFORE_USE: Duration = Duration::from_secs(120);
/// How long a key is kept for checking.
pub const RETIRE_AFTER: Duration = Duration::from_secs(60 * 86_400);
/// How often a server reads the keys again (and rotates them when due).
pub const REFRESH: Duration = Duration::from_secs(60);

/// A key as kept: its id, its PKCS#8 document (base64url), when it was made.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Stored {
    kid: String,
    pkcs8: String,
    created_at: u64,
}

struct Loaded {
    kid: String,
    created_at: u64,
    pair: EcdsaKeyPair,
}

/// The keys, read from the store; the resource server's key set follows them.
pub struct SigningKeys {
    runtime: Arc<Runtime>,
    keys: RwLock<Arc<Vec<Loaded>>>,
    checking: Arc<KeySet>,
    rng: SystemRandom,
}

impl std::fmt::Debug for SigningKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kids: Vec<String> = self.read().iter().map(|k| k.kid.clone()).collect();
        f.debug_struct("SigningKeys").field("kids", &kids).finish_non_exhaustive()
    }
}

impl SigningKeys {
    /// The store's keys (made on first use), with `checking` set to their public halves.
    pub async fn load(runtime: Arc<Runtime>, checking: Arc<KeySet>) -> Result<SigningKeys, BuiltinError> {
        let keys = SigningKeys { runtime, keys: RwLock::new(Arc::new(Vec::new())), checking, rng: SystemRandom::new() };
        // Two servers starting on a new store at once keep the same first key.
        let first = serde_json::to_string(&vec![keys.make()?]).expect("keys encode");
        keys.runtime.store().setting_or_insert(SETTING, &first).await?;
        keys.refresh().await?;
        Ok(keys)
    }

    /// Reads the keys again, rotating them when due.
    pub async fn refresh(&self) -> Result<(), BuiltinError> {
        let mut stored = self.stored().await?;
        let newest = stored.iter().map(|k| k.created_at).max().unwrap_or(0);
        if now().saturating_sub(newest) >= ROTATE_AFTER.as_secs() {
            stored.retain(|k| now().saturating_sub(k.created_at) < RETIRE_AFTER.as_secs());
            stored.push(self.make()?);
            let text = serde_json::to_string(&stored).expect("keys encode");
            self.runtime.store().save_setting(SETTING, &text).await?;
            tracing::info!(target: "cks_auth", "the built-in issuer's signing key was rotated");
        }
        let mut loaded = Vec::new();
        for key in stored {
            let Some(pkcs8) = B64.decode(&key.pkcs8).ok() else { continue };
            let Ok(pair) = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &pkcs8, &self.rng) else {
                continue;
            };
            loaded.push(Loaded { kid: key.kid, created_at: key.created_at, pair });
        }
        loaded.sort_by_key(|k| k.created_at);
        let held = |keys: &[Loaded]| keys.iter().map(|k| (k.kid.clone(), k.created_at)).collect::<Vec<_>>();
        if held(&self.read()) != held(&loaded) {
            let loaded = Arc::new(loaded);
            self.checking.replace(&jwks(&loaded));
            *self.keys.write().unwrap_or_else(|e| e.into_inner()) = loaded;
        }
        Ok(())
    }

    /// The public keys, as a key set document (RFC 7517).
    pub fn jwks(&self) -> Value {
        jwks(&self.read())
    }

    /// A JWT of `claims` with the header's `typ`, signed with the key in use: the newest one
    /// published long enough, else the oldest.
    pub fn sign(&self, typ: &str, claims: &Value) -> Result<String, BuiltinError> {
        let keys = self.read();
        let published = |k: &&Loaded| now().saturating_sub(k.created_at) >= PUBLISHED_BEFORE_USE.as_secs();
        let key = keys.iter().rev().find(published).or(keys.first()).ok_or(BuiltinError::NoSigningKey)?;
        let header = json!({"alg": "ES256", "typ": typ, "kid": key.kid});
        let mut token = format!("{}.{}", B64.encode(header.to_string()), B64.encode(claims.to_string()));
        let signature = key.pair.sign(&self.rng, token.as_bytes()).map_err(|_| BuiltinError::NoSigningKey)?;
        token.push('.');
        token.push_str(&B64.encode(signature.as_ref()));
        Ok(token)
    }

    fn read(&self) -> Arc<Vec<Loaded>> {
        self.keys.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    async fn stored(&self) -> Result<Vec<Stored>, BuiltinError> {
        let text = self.runtime.store().load_setting(SETTING).await?.unwrap_or_default();
        Ok(serde_json::from_str(&text).unwrap_or_default())
    }

    fn make(&self) -> Result<Stored, BuiltinError> {
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &self.rng)
            .map_err(|_| BuiltinError::NoSigningKey)?;
        Ok(Stored { kid: super::random_id(8), pkcs8: B64.encode(pkcs8.as_ref()), created_at: now() })
    }
}

fn jwks(keys: &[Loaded]) -> Value {
    let keys: Vec<Value> = keys
        .iter()
        .map(|key| {
            // An uncompressed point: 0x04, then x and y, 32 bytes each.
            let point = key.pair.public_key().as_ref();
            json!({"kty": "EC", "crv": "P-256", "alg": "ES256", "use": "sig", "kid": key.kid,
                   "x": B64.encode(&point[1..33]), "y": B64.encode(&point[33..65])})
        })
        .collect();
    json!({ "keys": keys })
}

#[cfg(test)]
mod tests {
    use super::*;
    use cks_runtime::RuntimeConfig;
    use cks_runtime::store::memory::MemoryStore;

    fn kid_of(token: &str) -> String {
        let header: Value = serde_json::from_slice(&B64.decode(token.split('.').next().unwrap()).unwrap()).unwrap();
        header["kid"].as_str().unwrap().to_owned()
    }

    /// Makes every stored key `seconds` older.
    async fn age(runtime: &Runtime, seconds: u64) {
        let text = runtime.store().load_setting(SETTING).await.unwrap().unwrap();
        let mut stored: Vec<Stored> = serde_json::from_str(&text).unwrap();
        for key in &mut stored {
            key.created_at -= seconds;
        }
        runtime.store().save_setting(SETTING, &serde_json::to_string(&stored).unwrap()).await.unwrap();
    }

    #[tokio::test]
    async fn a_new_key_is_published_before_it_signs_and_the_old_one_still_checks() {
        let runtime = Arc::new(Runtime::new(Arc::new(MemoryStore::new()), RuntimeConfig::default()));
        let checking = Arc::new(KeySet::fixed(&json!({"keys": []})));
        let keys = SigningKeys::load(runtime.clone(), checking.clone()).await.unwrap();
        let first = kid_of(&keys.sign("at+jwt", &json!({"sub": "a"})).unwrap());
        assert_eq!(keys.jwks()["keys"].as_array().unwrap().len(), 1);
        // A second server on the store reads the same key.
        let other = SigningKeys::load(runtime.clone(), Arc::new(KeySet::fixed(&json!({"keys": []})))).await.unwrap();
        assert_eq!(other.jwks(), keys.jwks());

        age(&runtime, ROTATE_AFTER.as_secs()).await;
        keys.refresh().await.unwrap();
        let kids: Vec<String> =
            keys.jwks()["keys"].as_array().unwrap().iter().map(|k| k["kid"].as_str().unwrap().to_owned()).collect();
        assert_eq!(kids.len(), 2, "rotated");
        assert_eq!(kid_of(&keys.sign("at+jwt", &json!({})).unwrap()), first, "the new key is only published yet");
        let generation = checking.generation();
        age(&runtime, PUBLISHED_BEFORE_USE.as_secs()).await;
        keys.refresh().await.unwrap();
        assert_eq!(checking.generation(), generation + 1, "the keys as the store has them");
        keys.refresh().await.unwrap();
        assert_eq!(checking.generation(), generation + 1, "no change, no new generation");
        assert_eq!(kid_of(&keys.sign("at+jwt", &json!({})).unwrap()), kids[1], "then it signs");

        // Past its retirement, the old key is dropped at the next rotation.
        age(&runtime, RETIRE_AFTER.as_secs()).await;
        keys.refresh().await.unwrap();
        let kids_now: Vec<String> =
            keys.jwks()["keys"].as_array().unwrap().iter().map(|k| k["kid"].as_str().unwrap().to_owned()).collect();
        assert!(!kids_now.contains(&first) && kids_now.len() == 1, "{kids_now:?}");
    }
}
