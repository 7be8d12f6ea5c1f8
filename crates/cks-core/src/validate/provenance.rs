//! Provenance signatures of `VerificationRecord` objects (`CKS-MCP-*` codes).
//!
//! A record is trusted only when its `_cks_mcp_signature` is the HMAC-SHA256 of
//! `"{record_id}|{subject_id}|{checked_at}|{checked_via}|{http_status}"` under the server's
//! secret, where the subject is the first participant of the record's `verified_by` relation and
//! each field is written the way Python's `str()` writes it (a missing `checked_at` or
//! `checked_via` is the empty string, a missing or null `http_status` is `None`). The secret is
//! passed in by the caller: this crate never reads it from anywhere.
//!
//! For each `VerificationRecord` (location = the record id):
//! - linked to two different subjects through `verified_by`: `CKS-MCP-AMBIGUOUS-VERIFICATION-REFERENCE`
//!   (error);
//! - linked to no subject: `CKS-MCP-UNLINKED-VERIFICATION-RECORD` (warning: it is simply not trusted);
//! - otherwise a missing or wrong signature: `CKS-MCP-UNVERIFIED-PROVENANCE` (error).

use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};
use std::fmt;

use super::pyrepr::py_str;
use super::{Diagnostic, Severity, Stage, binary};
use crate::object::Structure;
use crate::structure::KnowledgeStructure;

/// The structure key holding a record's signature.
pub const SIGNATURE_KEY: &str = "_cks_mcp_signature";
/// A record whose signature does not verify.
pub const UNVERIFIED: &str = "CKS-MCP-UNVERIFIED-PROVENANCE";
/// A record linked to more than one subject.
pub const AMBIGUOUS: &str = "CKS-MCP-AMBIGUOUS-VERIFICATION-REFERENCE";
/// A record linked to no subject.
pub const UNLINKED: &str = "CKS-MCP-UNLINKED-VERIFICATION-RECORD";

const RECORD_TYPE: &str = "VerificationRecord";
const VERIFIED_BY: &str = "verified_by";
const HMAC_BLOCK: usize = 64;

/// The server's signing secret. Its `Debug` form never shows the bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct ProvenanceKey(Vec<u8>);

impl ProvenanceKey {
    pub fn new(secret: impl Into<Vec<u8>>) -> Self {
        ProvenanceKey(secret.into())
    }

    /// A key for another purpose, derived from this secret (its HMAC of the purpose's name), so
    /// that servers sharing the secret share the derived key too.
    pub fn derived(&self, purpose: &str) -> [u8; 32] {
        self.mac(purpose.as_bytes()).into()
    }

    /// HMAC-SHA256 (RFC 2104) of `message`, as lower-case hex.
    fn mac_hex(&self, message: &[u8]) -> String {
        hex::encode(self.mac(message))
    }

    /// HMAC-SHA256 (RFC 2104) of `message`.
    fn mac(&self, message: &[u8]) -> sha2::digest::Output<Sha256> {
        let mut block = [0u8; HMAC_BLOCK];
        if self.0.len() > HMAC_BLOCK {
            block[..32].copy_from_slice(&Sha256::digest(&self.0));
        } else {
            block[..self.0.len()].copy_from_slice(&self.0);
        }
        let pad = |byte: u8| block.map(|b| b ^ byte);
        let inner = Sha256::new().chain_update(pad(0x36)).chain_update(message).finalize();
        Sha256::new().chain_update(pad(0x5c)).chain_update(inner).finalize()
    }
}

impl fmt::Debug for ProvenanceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ProvenanceKey(<redacted>)")
    }
}

/// The signature of a record with this id, verifying this subject, with this structure.
pub fn sign(key: &ProvenanceKey, record_id: &str, subject_id: &str, record: &Structure) -> String {
    let field = |name: &str, absent: &str| match record.get(name) {
        None | Some(Value::Null) => absent.to_owned(),
        Some(value) => py_str(value),
    };
    // A null `checked_at` or `checked_via` is Python's `None`, like an absent `http_status`.
    let text = |name: &str| match record.get(name) {
        None => String::new(),
        Some(Value::Null) => "None".to_owned(),
        Some(value) => py_str(value),
    };
    let payload = format!(
        "{record_id}|{subject_id}|{}|{}|{}",
        text("checked_at"),
        text("checked_via"),
        field("http_status", "None")
    );
    key.mac_hex(payload.as_bytes())
}

/// Whether `signature` is the record's signature (compared in constant time).
pub fn verify(key: &ProvenanceKey, record_id: &str, subject_id: &str, record: &Structure) -> bool {
    let Some(Value::String(given)) = record.get(SIGNATURE_KEY) else { return false };
    if given.is_empty() {
        return false;
    }
    let expected = sign(key, record_id, subject_id, record);
    expected.len() == given.len() && expected.bytes().zip(given.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

/// Checks every `VerificationRecord` of the structure; diagnostics in object order.
pub fn check_provenance(structure: &KnowledgeStructure, key: &ProvenanceKey) -> Vec<Diagnostic> {
    let mut subject_of: HashMap<&str, &str> = HashMap::new();
    let mut ambiguous: HashSet<&str> = HashSet::new();
    // Through the kind index: a commit's check costs what the session's records and their links
    // cost, not the whole graph.
    for object in structure.relations_of_type(VERIFIED_BY) {
        let Some(relation) = object.relation() else { continue };
        if let Some((subject, record)) = binary(&relation) {
            match subject_of.get(record) {
                None => {
                    subject_of.insert(record, subject);
                }
                Some(first) if *first != subject => {
                    ambiguous.insert(record);
                }
                Some(_) => {}
            }
        }
    }

    let mut out = Vec::new();
    for object in structure.objects_of_type(RECORD_TYPE) {
        let id = object.id();
        let finding = if ambiguous.contains(id) {
            Some((
                AMBIGUOUS,
                Severity::Error,
                format!(
                    "VerificationRecord '{id}' is referenced by multiple subjects through '{VERIFIED_BY}'. This \
                     relationship is ambiguous and must be resolved."
                ),
            ))
        } else if let Some(subject) = subject_of.get(id) {
            (!verify(key, id, subject, &object.structure)).then(|| {
                (
                    UNVERIFIED,
                    Severity::Error,
                    format!(
                        "VerificationRecord '{id}' does not carry a valid provenance signature. It must be produced \
                         by calling verify_source, not authored directly."
                    ),
                )
            })
        } else {
            Some((
                UNLINKED,
                Severity::Warning,
                format!(
                    "VerificationRecord '{id}' has no {VERIFIED_BY} relation. It will not be treated as a trusted \
                     provenance record."
                ),
            ))
        };
        if let Some((code, severity, message)) = finding {
            out.push(Diagnostic::new(code, severity, Stage::Semantic, message, Some(id)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::parse_value;
    use serde_json::json;

    fn structure(record: Value, subjects: &[&str]) -> KnowledgeStructure {
        let mut objects = vec![
            json!({"identity": {"id": "claim", "type": "Claim", "name": "c"}, "structure": {}}),
            json!({"identity": {"id": "other", "type": "Claim", "name": "o"}, "structure": {}}),
            json!({"identity": {"id": "record", "type": "VerificationRecord", "name": "r"}, "structure": record}),
        ];
        for (i, subject) in subjects.iter().enumerate() {
            objects.push(json!({"identity": {"id": format!("v{i}"), "type": "Relation", "name": "v"},
                "structure": {"participants": [subject, "record"], "relation_type": "verified_by"}}));
        }
        parse_value(json!({"objects": objects})).unwrap()
    }

    fn record() -> Structure {
        serde_json::from_value(
            json!({"checked_at": "2024-01-02T03:04:05Z", "checked_via": "automated_http_check", "http_status": 200}),
        )
        .unwrap()
    }

    fn signed(key: &ProvenanceKey, subject: &str) -> Value {
        let mut data = record();
        let signature = sign(key, "record", subject, &data);
        data.insert(SIGNATURE_KEY, Value::String(signature));
        Value::from(data)
    }

    fn codes(diagnostics: &[Diagnostic]) -> Vec<&str> {
        diagnostics.iter().map(|d| d.code.as_str()).collect()
    }

    #[test]
    fn hmac_matches_the_rfc_4231_vectors() {
        // Test case 2 (short key) and test case 6 (key longer than a block).
        let key = ProvenanceKey::new(*b"Jefe");
        assert_eq!(
            key.mac_hex(b"what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        let long = ProvenanceKey::new(vec![0xaa; 131]);
        assert_eq!(
            long.mac_hex(b"Test Using Larger Than Block-Size Key - Hash Key First"),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    #[test]
    fn the_payload_is_written_as_python_would() {
        let key = ProvenanceKey::new(*b"secret");
        let expected = key.mac_hex(b"record|claim|2024-01-02T03:04:05Z|automated_http_check|200");
        assert_eq!(sign(&key, "record", "claim", &record()), expected);
        let bare = Structure::new();
        assert_eq!(sign(&key, "record", "claim", &bare), key.mac_hex(b"record|claim|||None"));
    }

    #[test]
    fn a_correctly_signed_record_passes() {
        let key = ProvenanceKey::new(*b"secret");
        assert!(check_provenance(&structure(signed(&key, "claim"), &["claim"]), &key).is_empty());
    }

    #[test]
    fn forged_unsigned_and_foreign_records_fail() {
        let key = ProvenanceKey::new(*b"secret");
        let unsigned = check_provenance(&structure(Value::from(record()), &["claim"]), &key);
        assert_eq!(codes(&unsigned), [UNVERIFIED]);
        assert_eq!(unsigned[0].location.as_deref(), Some("record"));
        assert_eq!(unsigned[0].severity, Severity::Error);

        let mut forged = record();
        forged.insert(SIGNATURE_KEY, json!("0".repeat(64)));
        assert_eq!(codes(&check_provenance(&structure(Value::from(forged), &["claim"]), &key)), [UNVERIFIED]);

        let other_key = ProvenanceKey::new(*b"another secret");
        let foreign = structure(signed(&other_key, "claim"), &["claim"]);
        assert_eq!(codes(&check_provenance(&foreign, &key)), [UNVERIFIED], "signed under another secret");

        let moved = structure(signed(&key, "claim"), &["other"]);
        assert_eq!(codes(&check_provenance(&moved, &key)), [UNVERIFIED], "signature bound to its subject");

        let mut tampered = signed(&key, "claim");
        tampered["http_status"] = json!(404);
        assert_eq!(codes(&check_provenance(&structure(tampered, &["claim"]), &key)), [UNVERIFIED]);
    }

    #[test]
    fn links_decide_before_signatures() {
        let key = ProvenanceKey::new(*b"secret");
        let unlinked = check_provenance(&structure(signed(&key, "claim"), &[]), &key);
        assert_eq!(codes(&unlinked), [UNLINKED]);
        assert_eq!(unlinked[0].severity, Severity::Warning);
        let ambiguous = check_provenance(&structure(signed(&key, "claim"), &["claim", "other"]), &key);
        assert_eq!(codes(&ambiguous), [AMBIGUOUS]);
        let repeated = check_provenance(&structure(signed(&key, "claim"), &["claim", "claim"]), &key);
        assert!(repeated.is_empty(), "the same subject twice is not ambiguous");
    }
}
