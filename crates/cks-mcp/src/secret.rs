//! The provenance signing secret: where it comes from and how it is kept.
//!
//! In order: `CKS_MCP_SECRET` (`base64:<data>`, else hex, else the text's UTF-8 bytes), else the
//! bytes of `<data dir>/.cks_provenance_secret`, else 32 fresh random bytes written to that file
//! (mode 0600) so that records signed before a restart still verify after it. This is the
//! reference server's scheme, so its file or variable can be brought along with imported data.
//!
//! Servers sharing a PostgreSQL database each have a data directory of their own, yet must sign
//! alike: a record one signed has to verify on every other. Without `CKS_MCP_SECRET` they use the
//! secret the database keeps, which the first of them to start put there ([`load_shared`]).

use std::io::Write;
use std::path::Path;

use anyhow::Context;

use cks_core::validate::ProvenanceKey;

/// The variable that overrides the stored secret.
pub const SECRET_VAR: &str = "CKS_MCP_SECRET";
/// The file holding the secret, in the data directory.
pub const SECRET_FILE: &str = ".cks_provenance_secret";

/// The server's key: from `secret` (the variable's value) or the data directory's file,
/// creating the file when there is neither.
pub fn load(secret: Option<&str>, data_dir: &Path) -> anyhow::Result<ProvenanceKey> {
    if let Some(text) = secret.filter(|s| !s.is_empty()) {
        return decode(text).map(ProvenanceKey::new);
    }
    let path = data_dir.join(SECRET_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => return Ok(ProvenanceKey::new(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    }
    let fresh: [u8; 32] = rand::random();
    create_private(&path, &fresh)?;
    // Another process may have won the race to create it: its secret is the one to use.
    Ok(ProvenanceKey::new(std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?))
}

/// The setting holding the secret of servers sharing a database (never exported with the data).
pub const SHARED_SETTING: &str = "provenance_secret";

/// The key of servers sharing `store`: `CKS_MCP_SECRET` when set (then it must be the same on every
/// server), else the one the store keeps — the first server to ask offers its data directory's
/// secret (so records it signed before keep verifying), or fresh random bytes.
pub async fn load_shared(
    secret: Option<&str>,
    data_dir: &Path,
    store: &dyn cks_runtime::store::Store,
) -> anyhow::Result<ProvenanceKey> {
    if let Some(text) = secret.filter(|s| !s.is_empty()) {
        return decode(text).map(ProvenanceKey::new);
    }
    let path = data_dir.join(SECRET_FILE);
    let offered = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => rand::random::<[u8; 32]>().to_vec(),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let offered: String = offered.iter().map(|b| format!("{b:02x}")).collect();
    let kept = store.setting_or_insert(SHARED_SETTING, &offered).await.context("reading the database's secret")?;
    hex_decode(&kept).map(ProvenanceKey::new).context("the database's provenance secret is not hex")
}

/// Writes a new file readable by its owner only; an existing file is left alone.
fn create_private(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.open(path) {
        Ok(mut file) => file.write_all(bytes).with_context(|| format!("writing {}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e).with_context(|| format!("creating {}", path.display())),
    }
}

/// `base64:<standard base64>`, else an even-length hex string, else the text itself.
fn decode(text: &str) -> anyhow::Result<Vec<u8>> {
    if let Some(encoded) = text.strip_prefix("base64:") {
        return base64_decode(encoded)
            .with_context(|| format!("{SECRET_VAR} has a 'base64:' prefix but is not base64"));
    }
    Ok(hex_decode(text).unwrap_or_else(|| text.as_bytes().to_vec()))
}

pub(crate) fn hex_decode(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| text.get(i..i + 2).and_then(|pair| u8::from_str_radix(pair, 16).ok())).collect()
}

fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let digits = text.trim_end_matches('=').as_bytes();
    if digits.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    for chunk in digits.chunks(4) {
        let mut acc = 0u32;
        for &c in chunk {
            acc = (acc << 6) | value(c)?;
        }
        acc <<= 6 * (4 - chunk.len() as u32);
        let bytes = acc.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Signs a record with `key` and reports whether `other` verifies it.
    fn verifies_under(key: &ProvenanceKey, other: &ProvenanceKey) -> bool {
        let record = json!({"checked_at": "2024-01-01T00:00:00Z", "checked_via": "manual_review"});
        let mut record: cks_core::Structure = serde_json::from_value(record).unwrap();
        let signature = cks_core::validate::provenance::sign(key, "r", "s", &record);
        record.insert("_cks_mcp_signature", json!(signature));
        cks_core::validate::provenance::verify(other, "r", "s", &record)
    }

    #[test]
    fn the_variable_is_base64_hex_or_text() {
        assert_eq!(decode("base64:aGVsbG8=").unwrap(), b"hello");
        assert_eq!(decode("base64:aGVsbG8").unwrap(), b"hello", "padding optional");
        assert_eq!(decode("base64:aGk=").unwrap(), b"hi");
        assert!(decode("base64:*").is_err());
        assert_eq!(decode("00ff10").unwrap(), [0x00, 0xff, 0x10]);
        assert_eq!(decode("not hex").unwrap(), b"not hex");
        assert_eq!(decode("abc").unwrap(), b"abc", "odd length is text");
    }

    #[test]
    fn a_generated_secret_is_kept_private_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let first = load(None, dir.path()).unwrap();
        let path = dir.path().join(SECRET_FILE);
        let stored = std::fs::read(&path).unwrap();
        assert_eq!(stored.len(), 32);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        }
        let second = load(None, dir.path()).unwrap();
        assert_eq!(first, second, "a restart keeps the secret");
        assert!(verifies_under(&first, &second));

        let other_dir = tempfile::tempdir().unwrap();
        assert!(!verifies_under(&first, &load(None, other_dir.path()).unwrap()), "another server's secret");
    }

    #[test]
    fn the_variable_wins_and_matches_the_file_it_came_from() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(SECRET_FILE), b"\x01\x02\x03").unwrap();
        let from_file = load(None, dir.path()).unwrap();
        let from_hex = load(Some("010203"), tempfile::tempdir().unwrap().path()).unwrap();
        assert_eq!(from_file, from_hex, "the file's bytes, given as hex, are the same secret");
        assert_ne!(load(Some("other"), dir.path()).unwrap(), from_file);
    }

    #[tokio::test]
    async fn servers_sharing_a_store_sign_alike_with_the_first_ones_secret() {
        let store = cks_runtime::store::memory::MemoryStore::new();
        let with_file = tempfile::tempdir().unwrap();
        std::fs::write(with_file.path().join(SECRET_FILE), b"\x01\x02\x03").unwrap();
        let first = load_shared(None, with_file.path(), &store).await.unwrap();
        assert_eq!(first, load(None, with_file.path()).unwrap(), "its earlier records still verify");
        let fresh = tempfile::tempdir().unwrap();
        let second = load_shared(None, fresh.path(), &store).await.unwrap();
        assert!(verifies_under(&first, &second), "another server on the store verifies the first's records");
        assert!(!fresh.path().join(SECRET_FILE).exists(), "no file of its own");
        assert_eq!(load_shared(Some("010203"), fresh.path(), &store).await.unwrap(), first, "the variable wins");
        let empty = cks_runtime::store::memory::MemoryStore::new();
        let random = load_shared(None, fresh.path(), &empty).await.unwrap();
        assert_eq!(load_shared(None, with_file.path(), &empty).await.unwrap(), random, "whoever came first");
    }
}
