//! An access token checked and read (RFC 9068): a JWT signed by one of the issuer's keys with an
//! asymmetric algorithm, from the configured issuer, for this server's audience, within its
//! lifetime (60 s of clock skew allowed; none for the built-in issuer's, signed by this clock). Its subject, scopes and groups make the [`Principal`].
//!
//! Only the algorithms in [`ACCEPTED`] are tried: never `none`, never an HMAC one (a token signed
//! with the issuer's public key as an HMAC secret is refused before any key is looked at).
//!
//! A client sends the same token with every call until it expires, and a signature check costs
//! a hundred microseconds or more. So a token that passed is remembered by its SHA-256 digest with
//! its principal and lifetime ([`Validator::remembered`]): later calls check only the lifetime.
//! The memory is bounded, and forgotten whenever the issuer's keys are fetched again (a key the
//! issuer withdrew stops counting).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, Validation};
use serde_json::{Map, Value};

use cks_tools::{Principal, Scope};

use super::keys::KeySet;
use super::settings::AuthSettings;

/// The RSA algorithms accepted.
pub const RSA: [Algorithm; 6] =
    [Algorithm::RS256, Algorithm::RS384, Algorithm::RS512, Algorithm::PS256, Algorithm::PS384, Algorithm::PS512];
/// Every algorithm accepted: asymmetric ones only.
pub const ACCEPTED: [Algorithm; 9] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];
/// Clock skew allowed on `exp` and `nbf`, in seconds.
pub const LEEWAY_SECONDS: u64 = 60;
/// Tokens remembered at most; past it the memory starts again.
const REMEMBERED: usize = 10_000;

/// Why a token is refused. The text goes to the client and the log: it never holds the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("it is not a signed JWT")]
    Malformed,
    #[error("its algorithm is not accepted (asymmetric signatures only)")]
    Algorithm,
    #[error("its type is not an access token's")]
    Type,
    #[error("no key of the issuer has its key id")]
    UnknownKey,
    #[error("its signature does not verify")]
    Signature,
    #[error("it has expired")]
    Expired,
    #[error("it is not valid yet")]
    NotYetValid,
    #[error("another issuer issued it")]
    Issuer,
    #[error("it is meant for another audience")]
    Audience,
    #[error("it lacks the claim '{0}'")]
    Missing(String),
}

/// Checks tokens against the issuer's keys and the settings.
#[derive(Debug)]
pub struct Validator {
    keys: Arc<KeySet>,
    issuer: String,
    scope_claim: String,
    groups_claim: String,
    /// Clock skew allowed on `exp` and `nbf`, in seconds.
    leeway: u64,
    /// Whether this server signed the tokens (`CKS_MCP_AUTH=builtin`): then a token may name the
    /// upstream issuer its person signed in at (`builtin/upstream.rs`).
    builtin: bool,
    /// One per accepted algorithm, in [`ACCEPTED`]'s order.
    validations: Vec<Validation>,
    /// Tokens that passed, by digest (see the module's documentation).
    passed: Mutex<HashMap<[u8; 32], Passed>>,
}

#[derive(Debug)]
struct Passed {
    principal: Arc<Principal>,
    /// The seconds since the epoch it is good from and until, clock skew included.
    from: u64,
    until: u64,
    /// The key set's generation it was checked with.
    generation: u64,
}

impl Validator {
    pub fn new(settings: &AuthSettings, keys: Arc<KeySet>) -> Self {
        super::signatures::install();
        let leeway = if settings.builtin { 0 } else { LEEWAY_SECONDS };
        let validations = ACCEPTED
            .iter()
            .map(|alg| {
                let mut validation = Validation::new(*alg);
                validation.leeway = leeway;
                validation.validate_nbf = true;
                validation.set_issuer(&[&settings.issuer]);
                validation.set_audience(&[&settings.audience]);
                validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
                validation
            })
            .collect();
        Validator {
            keys,
            issuer: settings.issuer.clone(),
            scope_claim: settings.scope_claim.clone(),
            groups_claim: settings.groups_claim.clone(),
            leeway,
            builtin: settings.builtin,
            validations,
            passed: Mutex::new(HashMap::new()),
        }
    }

    /// The keys tokens are checked with.
    pub fn keys(&self) -> &Arc<KeySet> {
        &self.keys
    }

    /// The principal a good token names: remembered, or checked now.
    pub async fn validate(&self, token: &str) -> Result<Arc<Principal>, TokenError> {
        let digest: [u8; 32] = <sha2::Sha256 as sha2::Digest>::digest(token.as_bytes()).into();
        if let Some(principal) = self.remembered(&digest) {
            return Ok(principal);
        }
        let generation = self.keys.generation();
        let (principal, claims) = self.check(token).await?;
        Ok(self.keep(digest, principal, &claims, generation))
    }

    /// Remembers a token this server just signed (the built-in issuer), as if it had passed: the
    /// client's first call with it costs no signature check on this replica.
    pub fn remember(&self, token: &str, claims: &Map<String, Value>) {
        let digest: [u8; 32] = <sha2::Sha256 as sha2::Digest>::digest(token.as_bytes()).into();
        if let Ok(principal) = self.principal(claims) {
            self.keep(digest, principal, claims, self.keys.generation());
        }
    }

    /// Keeps a good token's principal for its lifetime.
    fn keep(
        &self,
        digest: [u8; 32],
        principal: Principal,
        claims: &Map<String, Value>,
        generation: u64,
    ) -> Arc<Principal> {
        let principal = Arc::new(principal);
        let seconds = |name: &str| claims.get(name).and_then(Value::as_f64).map(|s| s.max(0.0) as u64);
        let passed = Passed {
            principal: principal.clone(),
            from: seconds("nbf").unwrap_or(0).saturating_sub(self.leeway),
            until: seconds("exp").unwrap_or(0).saturating_add(self.leeway),
            generation,
        };
        let mut remembered = self.passed.lock().unwrap_or_else(|e| e.into_inner());
        if remembered.len() >= REMEMBERED {
            remembered.retain(|_, p| p.until > jsonwebtoken::get_current_timestamp());
            if remembered.len() >= REMEMBERED {
                remembered.clear();
            }
        }
        remembered.insert(digest, passed);
        principal
    }

    /// The principal of a token that passed before, while it is still within its lifetime and the
    /// keys it was checked with are still the issuer's.
    fn remembered(&self, digest: &[u8; 32]) -> Option<Arc<Principal>> {
        let mut remembered = self.passed.lock().unwrap_or_else(|e| e.into_inner());
        let passed = remembered.get(digest)?;
        let now = jsonwebtoken::get_current_timestamp();
        if passed.generation == self.keys.generation() && passed.from <= now && now < passed.until {
            return Some(passed.principal.clone());
        }
        remembered.remove(digest);
        None
    }

    /// The principal a good token names, and its claims, checked now.
    async fn check(&self, token: &str) -> Result<(Principal, Map<String, Value>), TokenError> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| TokenError::Malformed)?;
        let Some(at) = ACCEPTED.iter().position(|alg| *alg == header.alg) else { return Err(TokenError::Algorithm) };
        // RFC 9068 types access tokens `at+jwt`; many issuers still write `JWT` or nothing.
        if let Some(typ) = header.typ.as_deref() {
            let typ = typ.to_ascii_lowercase();
            if !matches!(typ.as_str(), "jwt" | "at+jwt" | "application/at+jwt") {
                return Err(TokenError::Type);
            }
        }
        let keys = self.keys.find(header.kid.as_deref(), header.alg).await;
        if keys.is_empty() {
            return Err(TokenError::UnknownKey);
        }
        let mut error = TokenError::Signature;
        for key in keys {
            match jsonwebtoken::decode::<Map<String, Value>>(token, &key.decoding, &self.validations[at]) {
                Ok(data) => return Ok((self.principal(&data.claims)?, data.claims)),
                Err(e) => {
                    error = match e.kind() {
                        ErrorKind::InvalidSignature
                        | ErrorKind::InvalidEcdsaKey
                        | ErrorKind::InvalidRsaKey(_)
                        | ErrorKind::InvalidKeyFormat => TokenError::Signature,
                        ErrorKind::ExpiredSignature => TokenError::Expired,
                        ErrorKind::ImmatureSignature => TokenError::NotYetValid,
                        ErrorKind::InvalidIssuer => TokenError::Issuer,
                        ErrorKind::InvalidAudience => TokenError::Audience,
                        ErrorKind::MissingRequiredClaim(claim) => TokenError::Missing(claim.clone()),
                        ErrorKind::InvalidAlgorithm | ErrorKind::MissingAlgorithm => TokenError::Algorithm,
                        _ => TokenError::Malformed,
                    };
                    // Another key with the same id (or none) may still verify it.
                    if error != TokenError::Signature {
                        return Err(error);
                    }
                }
            }
        }
        Err(error)
    }

    fn principal(&self, claims: &Map<String, Value>) -> Result<Principal, TokenError> {
        let subject = match claims.get("sub") {
            Some(Value::String(sub)) if !sub.is_empty() => sub.clone(),
            _ => return Err(TokenError::Missing("sub".into())),
        };
        let scopes = claims.get(&self.scope_claim).or_else(|| claims.get("scp"));
        let scope = strings(scopes).iter().filter_map(|name| Scope::parse(name)).max();
        let groups = strings(claims.get(&self.groups_claim));
        let identity_issuer = claims.get(super::builtin::upstream::IDENTITY_ISSUER).and_then(Value::as_str);
        let issuer = identity_issuer.filter(|_| self.builtin).unwrap_or(&self.issuer).to_owned();
        Ok(Principal { issuer, subject, scope, groups })
    }
}

/// A claim's strings: the words of a string, or an array's strings.
fn strings(claim: Option<&Value>) -> Vec<String> {
    match claim {
        Some(Value::String(text)) => text.split_whitespace().map(str::to_owned).collect(),
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn scopes_come_from_a_string_or_an_array() {
        assert_eq!(strings(Some(&json!("openid cks:read  cks:write"))), ["openid", "cks:read", "cks:write"]);
        assert_eq!(strings(Some(&json!(["cks:admin", 3]))), ["cks:admin"]);
        assert!(strings(Some(&json!(7))).is_empty() && strings(None).is_empty());
    }

    fn validator() -> Validator {
        let settings = AuthSettings::example();
        let jwks: Value = serde_json::from_str(include_str!("../../tests/data/oauth/jwks.json")).unwrap();
        Validator::new(&settings, Arc::new(KeySet::fixed(&jwks)))
    }

    fn token(claims: &Value) -> String {
        let key = jsonwebtoken::EncodingKey::from_ec_pem(include_bytes!("../../tests/data/oauth/ec-private.pem"));
        let mut header = jsonwebtoken::Header::new(Algorithm::ES256);
        header.kid = Some("ec-1".into());
        jsonwebtoken::encode(&header, claims, &key.unwrap()).unwrap()
    }

    #[tokio::test]
    async fn a_token_that_passed_is_remembered_for_its_lifetime_only() {
        let validator = validator();
        let now = jsonwebtoken::get_current_timestamp();
        let claims = json!({"iss": "https://id.example.com", "sub": "s", "aud": "https://kg.example.com/mcp",
            "exp": now + 300, "scope": "cks:read"});
        let first = validator.validate(&token(&claims)).await.unwrap();
        let again = validator.validate(&token(&claims)).await.unwrap();
        assert!(Arc::ptr_eq(&first, &again), "checked once");
        assert_eq!((first.subject.as_str(), first.scope), ("s", Some(Scope::Read)));
        // Past its lifetime, a remembered token is checked again, and refused.
        let digest: [u8; 32] = <sha2::Sha256 as sha2::Digest>::digest(token(&claims).as_bytes()).into();
        validator.passed.lock().unwrap().get_mut(&digest).unwrap().until = now - 1;
        assert!(validator.remembered(&digest).is_none());
        let expired = json!({"iss": "https://id.example.com", "sub": "s", "aud": "https://kg.example.com/mcp",
            "exp": now - 61});
        assert_eq!(validator.validate(&token(&expired)).await.unwrap_err(), TokenError::Expired);
        assert!(validator.passed.lock().unwrap().len() <= 1, "refusals are not remembered");
    }

    #[tokio::test]
    async fn a_token_signed_here_is_remembered_before_its_first_use() {
        let validator = validator();
        let now = jsonwebtoken::get_current_timestamp();
        let claims = json!({"iss": "https://id.example.com", "sub": "s", "aud": "https://kg.example.com/mcp",
            "exp": now + 300, "scope": "cks:write"});
        // Not signed by any key the validator holds: only the memory can let it through.
        let token = format!("{}x", token(&claims));
        validator.remember(&token, claims.as_object().unwrap());
        let principal = validator.validate(&token).await.unwrap();
        assert_eq!((principal.subject.as_str(), principal.scope), ("s", Some(Scope::Write)));
        assert_eq!(validator.validate(&format!("{token}y")).await.unwrap_err(), TokenError::Signature);
    }

    #[test]
    fn no_symmetric_algorithm_is_accepted() {
        for alg in [Algorithm::HS256, Algorithm::HS384, Algorithm::HS512] {
            assert!(!ACCEPTED.contains(&alg));
        }
        assert!(RSA.iter().all(|alg| ACCEPTED.contains(alg)));
    }
}
