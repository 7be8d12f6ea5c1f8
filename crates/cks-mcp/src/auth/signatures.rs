//! Access tokens' signatures checked with `ring`, the library rustls already links for TLS.
//!
//! `jsonwebtoken` reads tokens, keys and claims; which library checks a signature is its
//! `CryptoProvider`. Its pure-Rust provider (RustCrypto) takes about 80 µs for an RS256 signature
//! on a small machine, `ring` a fraction of that (BENCHMARKS.md). Signing stays with RustCrypto:
//! only tests and benchmarks sign.
//!
//! HMAC algorithms get no verifier: a token must be signed with one of the issuer's public keys,
//! so a shared secret (or a public key misused as one) never verifies anything here.

use std::sync::LazyLock;

use jsonwebtoken::crypto::{CryptoProvider, JwtVerifier, rust_crypto};
use jsonwebtoken::errors::{Error, ErrorKind};
use jsonwebtoken::signature::{self, Verifier};
use jsonwebtoken::{Algorithm, AlgorithmFamily, DecodingKey, DecodingKeyKind};
use ring::signature as ring_sig;

static PROVIDER: LazyLock<CryptoProvider> = LazyLock::new(|| CryptoProvider {
    signer_factory: rust_crypto::DEFAULT_PROVIDER.signer_factory,
    verifier_factory: verifier,
    key_utils: rust_crypto::DEFAULT_PROVIDER.key_utils.clone(),
});

/// Makes this module the process's provider, before any token is read. When something else was
/// installed first, that one stays (it checks signatures too, only more slowly).
pub fn install() {
    let _ = CryptoProvider::install_default(&PROVIDER);
}

/// How one algorithm's signatures are checked.
#[derive(Clone, Copy)]
enum Check {
    Rsa(&'static ring_sig::RsaParameters),
    Ecdsa(&'static ring_sig::EcdsaVerificationAlgorithm),
    Ed25519,
}

struct RingVerifier {
    algorithm: Algorithm,
    check: Check,
    key: DecodingKey,
}

fn verifier(algorithm: &Algorithm, key: &DecodingKey) -> Result<Box<dyn JwtVerifier>, Error> {
    let (check, family) = match algorithm {
        Algorithm::RS256 => (Check::Rsa(&ring_sig::RSA_PKCS1_2048_8192_SHA256), AlgorithmFamily::Rsa),
        Algorithm::RS384 => (Check::Rsa(&ring_sig::RSA_PKCS1_2048_8192_SHA384), AlgorithmFamily::Rsa),
        Algorithm::RS512 => (Check::Rsa(&ring_sig::RSA_PKCS1_2048_8192_SHA512), AlgorithmFamily::Rsa),
        Algorithm::PS256 => (Check::Rsa(&ring_sig::RSA_PSS_2048_8192_SHA256), AlgorithmFamily::Rsa),
        Algorithm::PS384 => (Check::Rsa(&ring_sig::RSA_PSS_2048_8192_SHA384), AlgorithmFamily::Rsa),
        Algorithm::PS512 => (Check::Rsa(&ring_sig::RSA_PSS_2048_8192_SHA512), AlgorithmFamily::Rsa),
        Algorithm::ES256 => (Check::Ecdsa(&ring_sig::ECDSA_P256_SHA256_FIXED), AlgorithmFamily::Ec),
        Algorithm::ES384 => (Check::Ecdsa(&ring_sig::ECDSA_P384_SHA384_FIXED), AlgorithmFamily::Ec),
        Algorithm::EdDSA => (Check::Ed25519, AlgorithmFamily::Ed),
        // HS256, HS384, HS512, and whatever a later version adds.
        _ => return Err(ErrorKind::InvalidAlgorithm.into()),
    };
    if key.family() != family {
        return Err(ErrorKind::InvalidKeyFormat.into());
    }
    Ok(Box::new(RingVerifier { algorithm: *algorithm, check, key: key.clone() }))
}

impl Verifier<Vec<u8>> for RingVerifier {
    fn verify(&self, message: &[u8], signature: &Vec<u8>) -> Result<(), signature::Error> {
        let checked = match (self.check, self.key.kind()) {
            (Check::Rsa(parameters), DecodingKeyKind::RsaModulusExponent { n, e }) => {
                ring_sig::RsaPublicKeyComponents { n, e }.verify(parameters, message, signature)
            }
            (Check::Rsa(parameters), DecodingKeyKind::SecretOrDer(der)) => {
                ring_sig::UnparsedPublicKey::new(parameters, der).verify(message, signature)
            }
            // An EC key is its uncompressed point; an Ed25519 key its 32 bytes.
            (Check::Ecdsa(algorithm), DecodingKeyKind::SecretOrDer(point)) => {
                ring_sig::UnparsedPublicKey::new(algorithm, point).verify(message, signature)
            }
            (Check::Ed25519, DecodingKeyKind::SecretOrDer(bytes)) => {
                ring_sig::UnparsedPublicKey::new(&ring_sig::ED25519, bytes).verify(message, signature)
            }
            _ => return Err(signature::Error::new()),
        };
        checked.map_err(|_| signature::Error::new())
    }
}

impl JwtVerifier for RingVerifier {
    fn algorithm(&self) -> Algorithm {
        self.algorithm
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::jwk::JwkSet;
    use jsonwebtoken::{EncodingKey, Header};

    const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/oauth");

    fn public_key(kid: &str) -> DecodingKey {
        let set: JwkSet = serde_json::from_str(&std::fs::read_to_string(format!("{DATA}/jwks.json")).unwrap()).unwrap();
        DecodingKey::from_jwk(set.find(kid).unwrap()).unwrap()
    }

    /// The signing input and signature of a token signed with `key`.
    fn signed(alg: Algorithm, key: &EncodingKey) -> (Vec<u8>, Vec<u8>) {
        install();
        let token = jsonwebtoken::encode(&Header::new(alg), &serde_json::json!({"sub": "alice"}), key).unwrap();
        let (input, signature) = token.rsplit_once('.').unwrap();
        (input.as_bytes().to_vec(), unbase64url(signature))
    }

    fn unbase64url(text: &str) -> Vec<u8> {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let (mut bits, mut count, mut out) = (0u32, 0, Vec::new());
        for c in text.bytes() {
            bits = (bits << 6) | ALPHABET.iter().position(|&a| a == c).unwrap() as u32;
            count += 6;
            if count >= 8 {
                count -= 8;
                out.push((bits >> count) as u8);
            }
        }
        out
    }

    #[test]
    fn ring_verifies_what_the_key_signed_and_nothing_else() {
        let rsa = EncodingKey::from_rsa_pem(&std::fs::read(format!("{DATA}/rsa-private.pem")).unwrap()).unwrap();
        let ec = EncodingKey::from_ec_pem(&std::fs::read(format!("{DATA}/ec-private.pem")).unwrap()).unwrap();
        for (alg, key, kid) in
            [(Algorithm::RS256, &rsa, "rsa-1"), (Algorithm::PS256, &rsa, "rsa-1"), (Algorithm::ES256, &ec, "ec-1")]
        {
            let (input, mut signature) = signed(alg, key);
            let check = verifier(&alg, &public_key(kid)).unwrap();
            assert!(check.verify(&input, &signature).is_ok(), "{alg:?}");
            let mut other = input.clone();
            other[0] ^= 1;
            assert!(check.verify(&other, &signature).is_err(), "{alg:?}: another message");
            signature[5] ^= 1;
            assert!(check.verify(&input, &signature).is_err(), "{alg:?}: a changed signature");
        }
        // A key of the wrong family, and HMAC with anything, get no verifier.
        assert!(verifier(&Algorithm::ES256, &public_key("rsa-1")).is_err());
        assert!(verifier(&Algorithm::HS256, &DecodingKey::from_secret(b"public key as a secret").unwrap()).is_err());
    }
}
