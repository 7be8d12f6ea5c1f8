//! CKS documents in and out: the canonical JSON parser's errors in the reference's words, and
//! the canonical text written with the format-versioning keys and the time it was written.

use cks_core::KnowledgeStructure;
use cks_core::json::{self, ParseError};
use time::OffsetDateTime;

/// Parses a canonical document; the error is the reference parser's sentence.
pub(crate) fn parse(text: &str) -> Result<KnowledgeStructure, String> {
    json::parse_str(text).map_err(|e| message(&e))
}

/// Parses an already decoded document (see [`parse`]).
pub(crate) fn parse_value(value: serde_json::Value) -> Result<KnowledgeStructure, String> {
    json::parse_value(value).map_err(|e| message(&e))
}

/// The reference's wording of a parse error: the core's sentence without the object's position
/// (which the reference does not give), and the reader-version refusal as the command line says it.
pub(crate) fn message(error: &ParseError) -> String {
    if let ParseError::ReaderTooOld { required } = error {
        return format!(
            "This file requires cks-core >= {required}, but the installed version is {}. \
             Upgrade cks-core or use 'cks migrate' to downgrade the file.",
            json::READER_VERSION
        );
    }
    let text = error.to_string();
    match text.strip_prefix("Object #").and_then(|rest| rest.split_once(": ")) {
        Some((index, sentence)) if index.bytes().all(|b| b.is_ascii_digit()) => sentence.to_owned(),
        _ => text,
    }
}

/// The canonical document of `structure`, as the reference's `serialize` writes it: sorted keys,
/// two-space indent, the versioning keys, and `serialized_at` now (Python's `isoformat`).
pub(crate) fn serialize(structure: &KnowledgeStructure) -> String {
    json::to_document_string(structure, &now_isoformat())
}

fn now_isoformat() -> String {
    let now = OffsetDateTime::now_utc();
    let micros = now.microsecond();
    let fraction = if micros == 0 { String::new() } else { format!(".{micros:06}") };
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}{fraction}+00:00",
        now.year(),
        u8::from(now.month()),
        now.day(),
        now.hour(),
        now.minute(),
        now.second()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_drop_the_object_position() {
        let error = parse(r#"{"objects": [{"structure": {}}]}"#).unwrap_err();
        assert_eq!(error, "Missing object identity.");
        let error = parse(r#"{"objects": [], "_cks_min_reader_version": "99.0.0"}"#).unwrap_err();
        assert!(error.starts_with("This file requires cks-core >= 99.0.0"), "{error}");
    }

    #[test]
    fn the_time_reads_as_python_isoformat() {
        let text = now_isoformat();
        assert!(text.ends_with("+00:00") && text.as_bytes()[10] == b'T', "{text}");
    }
}
