//! Parsing a document read in pieces ([`super::parse_read`]): a stored state is decoded from the
//! store's own reader, a piece at a time, so its whole text is never held beside the structure
//! being built (for 1,000,000 objects, 170 MB).
//!
//! A document in the compact form this crate writes — `{"objects":[` first, then the object
//! records — is read record by record: each record is decoded from the bytes read so far, and
//! when they end inside it, more are read and it is decoded again. What follows the `objects`
//! array (the version keys, a few bytes) is read whole and checked as the one-pass reader checks
//! it. A document in any other form is read whole and handed to [`super::parse_str`].

use std::io::Read;

use serde_json::{Map, Value};

use super::streaming::{Record, Threads};
use super::{
    KnowledgeStructure, MIN_READER_KEY, ParseError, check_reader_version, check_version, parse_str, parse_value,
};

/// How a compact document starts.
const OBJECTS_START: &[u8] = br#"{"objects":["#;

/// How much is read at once. A record longer than a piece is read in as many pieces as it
/// needs, each as long as what is held (so a long record is decoded a few times, not once per
/// piece).
pub(super) const PIECE_BYTES: usize = 1 << 20;

pub(super) fn parse(reader: &mut dyn Read, piece_bytes: usize) -> Result<KnowledgeStructure, ParseError> {
    let mut pieces = Pieces { reader, piece_bytes, held: Vec::new(), start: 0, ended: false, records: 0 };
    while pieces.held.len() < OBJECTS_START.len() && pieces.read_more()? {}
    if !pieces.held.starts_with(OBJECTS_START) {
        return parse_str(&pieces.into_text()?);
    }
    pieces.start = OBJECTS_START.len();
    // A document longer than a piece is built on a second thread, as `parse_str` builds one.
    let threads = if pieces.held.len() >= piece_bytes { Threads::TWO } else { Threads::One };
    let objects = threads.build(|| pieces.next_record())?;
    let rest = pieces.into_text()?;
    finish(objects, &rest)
}

/// The outcome once the `objects` array is read; `rest` is what follows it, the end of the root
/// object. As in the one-pass reader, a syntax error anywhere wins, then the version checks,
/// and a later `objects` key replaces this one.
fn finish(
    objects: Result<KnowledgeStructure, Option<ParseError>>,
    rest: &str,
) -> Result<KnowledgeStructure, ParseError> {
    let syntax = |e: serde_json::Error| ParseError::InvalidJson(format!("{e} (after the objects array)"));
    let rest = rest.trim_start_matches(JSON_WHITESPACE);
    // The keys after the array, as a map of their own: `,"version":"1.0"}` reads as `{"version":"1.0"}`.
    let keys = match rest.strip_prefix(',') {
        Some(keys) if !keys.trim_start_matches(JSON_WHITESPACE).starts_with('}') => keys,
        Some(_) => return Err(ParseError::InvalidJson("trailing comma after the objects array".into())),
        None => rest,
    };
    let root: Map<String, Value> = serde_json::from_str(&format!("{{{keys}")).map_err(syntax)?;
    if root.contains_key("objects") {
        return parse_value(Value::Object(root));
    }
    check_version(root.get("version"))?;
    check_reader_version(root.get(MIN_READER_KEY))?;
    objects.map_err(|failure| failure.unwrap_or(ParseError::ObjectsNotArray))
}

const JSON_WHITESPACE: [char; 4] = [' ', '\t', '\n', '\r'];

struct Pieces<'r> {
    reader: &'r mut dyn Read,
    piece_bytes: usize,
    /// What was read and not yet decoded starts at `start`.
    held: Vec<u8>,
    start: usize,
    ended: bool,
    /// Records decoded so far.
    records: usize,
}

impl Pieces<'_> {
    /// Reads the next piece after what is held; false at the end of the input.
    fn read_more(&mut self) -> Result<bool, ParseError> {
        if self.ended {
            return Ok(false);
        }
        self.held.drain(..self.start);
        self.start = 0;
        let want = self.piece_bytes.max(self.held.len());
        self.held.reserve(want);
        let read = (&mut *self.reader)
            .take(want as u64)
            .read_to_end(&mut self.held)
            .map_err(|e| ParseError::InvalidJson(format!("the document could not be read: {e}")))?;
        self.ended = read == 0;
        Ok(!self.ended)
    }

    fn unread(&self) -> &[u8] {
        &self.held[self.start..]
    }

    /// Skips whitespace, reading more as needed; the next byte, `None` at the end of the input.
    fn peek(&mut self) -> Result<Option<u8>, ParseError> {
        loop {
            let blank = self.unread().iter().take_while(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r')).count();
            self.start += blank;
            if let Some(&byte) = self.unread().first() {
                return Ok(Some(byte));
            }
            if !self.read_more()? {
                return Ok(None);
            }
        }
    }

    /// The next record of the `objects` array, `None` after its `]`.
    fn next_record(&mut self) -> Result<Option<Record>, ParseError> {
        let eof = || ParseError::InvalidJson("EOF while parsing the objects array".into());
        let next = self.peek()?.ok_or_else(eof)?;
        // First a record or the end; after a record, the end or a comma and the next record
        // (anything else there, `]` included, is left to the record's decoder to refuse).
        match next {
            b']' => {
                self.start += 1;
                return Ok(None);
            }
            b',' if self.records > 0 => self.start += 1,
            _ if self.records > 0 => {
                return Err(ParseError::InvalidJson("expected `,` or `]` in the objects array".into()));
            }
            _ => {}
        }
        loop {
            let mut records = serde_json::Deserializer::from_slice(self.unread()).into_iter::<Record>();
            let decoded = records.next();
            let used = records.byte_offset();
            let at_end = used == self.unread().len();
            match decoded {
                // A record that ends where the bytes read end may go on (a number's digits):
                // decoded again once more is read.
                Some(Ok(_)) if at_end && self.read_more()? => {}
                Some(Ok(record)) => {
                    self.start += used;
                    self.records += 1;
                    return Ok(Some(record));
                }
                Some(Err(e)) if e.is_eof() && self.read_more()? => {}
                Some(Err(e)) => return Err(ParseError::InvalidJson(e.to_string())),
                None if self.read_more()? => {}
                None => return Err(eof()),
            }
        }
    }

    /// What is left of the input, read whole.
    fn into_text(mut self) -> Result<String, ParseError> {
        while self.read_more()? {}
        self.held.drain(..self.start);
        String::from_utf8(self.held).map_err(|e| ParseError::InvalidJson(format!("the document is not UTF-8: {e}")))
    }
}
