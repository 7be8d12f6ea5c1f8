//! The canonical text written directly, without `serde_json`'s serializer: the same bytes it
//! writes, compact or pretty with a two-space indent, at about twice its speed.
//!
//! Whole-graph texts are written on every snapshot (compact, for storage) and every
//! `serialize_knowledge` (pretty, for clients), and a pretty document is dense in structure: a
//! line of a few bytes for each key. `serde_json`'s pretty formatter pays a call for each indent
//! level of each line and goes through its generic serializer state for every key; here a line's
//! indent is one copy and an object's shape is known. Scalars other than strings (numbers,
//! booleans, `null`) are still written by `serde_json`, so every number keeps its exact form (and
//! none holds a byte that escaping changes).

use serde_json::Value;

use super::escape::{self, needs_no_escape};
use crate::object::{Identity, KnowledgeObject, Structure};

/// The deepest indent one copy writes; deeper lines take more copies.
const SPACES: &[u8; 128] = &[b' '; 128];

/// Writes canonical JSON text into a buffer. `PRETTY` chooses `serde_json`'s pretty form (a
/// two-space indent, `": "` between a key and its value) over its compact one.
pub(crate) struct Writer<const PRETTY: bool> {
    pub(crate) out: Vec<u8>,
    /// How many containers are open.
    level: usize,
}

impl<const PRETTY: bool> Writer<PRETTY> {
    pub(crate) fn with_capacity(bytes: usize) -> Self {
        Writer { out: Vec::with_capacity(bytes), level: 0 }
    }

    /// A writer for text that will follow this one's, at its indent.
    pub(crate) fn beside(&self, bytes: usize) -> Self {
        Writer { out: Vec::with_capacity(bytes), level: self.level }
    }

    /// A new line at the current indent (nothing in the compact form).
    fn line(&mut self) {
        if PRETTY {
            self.out.push(b'\n');
            let mut spaces = 2 * self.level;
            while spaces > 0 {
                let more = spaces.min(SPACES.len());
                self.out.extend_from_slice(&SPACES[..more]);
                spaces -= more;
            }
        }
    }

    /// Opens an object or an array (`{` or `[`).
    pub(crate) fn open(&mut self, bracket: u8) {
        self.out.push(bracket);
        self.level += 1;
    }

    /// Closes an object or an array (`}` or `]`); `empty` when it got no member (`{}`, `[]`).
    pub(crate) fn close(&mut self, bracket: u8, empty: bool) {
        self.level -= 1;
        if !empty {
            self.line();
        }
        self.out.push(bracket);
    }

    /// Starts an array's element: the separator and the line.
    pub(crate) fn element(&mut self, first: bool) {
        if !first {
            self.out.push(b',');
        }
        self.line();
    }

    /// Starts an object's member: the separator, the line, the key and the colon.
    pub(crate) fn key(&mut self, first: bool, key: &str) {
        self.element(first);
        self.string(key);
        if PRETTY {
            self.out.extend_from_slice(b": ");
        } else {
            self.out.push(b':');
        }
    }

    /// A member whose value is a string.
    pub(crate) fn string_member(&mut self, first: bool, key: &str, value: &str) {
        self.key(first, key);
        self.string(value);
    }

    /// A quoted, escaped string.
    pub(crate) fn string(&mut self, text: &str) {
        let table = escape::escaped(1);
        let bytes = text.as_bytes();
        self.out.push(b'"');
        // Plain runs are copied whole, found eight bytes at a time.
        let (mut start, mut at) = (0, 0);
        while at < bytes.len() {
            if let Some(word) = bytes.get(at..at + 8)
                && needs_no_escape(u64::from_le_bytes(word.try_into().expect("eight bytes")))
            {
                at += 8;
                continue;
            }
            let byte = bytes[at];
            if table[usize::from(byte)].1 != 1 {
                self.out.extend_from_slice(&bytes[start..at]);
                let (sequence, len) = table[usize::from(byte)];
                self.out.extend_from_slice(&sequence.to_le_bytes()[..usize::from(len)]);
                start = at + 1;
            }
            at += 1;
        }
        self.out.extend_from_slice(&bytes[start..]);
        self.out.push(b'"');
    }

    pub(crate) fn value(&mut self, value: &Value) {
        match value {
            Value::String(text) => self.string(text),
            Value::Array(items) => {
                self.open(b'[');
                for (index, item) in items.iter().enumerate() {
                    self.element(index == 0);
                    self.value(item);
                }
                self.close(b']', items.is_empty());
            }
            Value::Object(members) => {
                self.open(b'{');
                for (index, (key, member)) in members.iter().enumerate() {
                    self.key(index == 0, key);
                    self.value(member);
                }
                self.close(b'}', members.is_empty());
            }
            scalar => serde_json::to_writer(&mut self.out, scalar).expect("writing to memory"),
        }
    }

    /// `{"identity": {"id", "name", "type"}, "structure": {...}}`.
    pub(crate) fn object(&mut self, object: &KnowledgeObject) {
        self.open(b'{');
        self.key(true, "identity");
        self.identity(&object.identity);
        self.key(false, "structure");
        self.structure(&object.structure);
        self.close(b'}', false);
    }

    fn identity(&mut self, identity: &Identity) {
        self.open(b'{');
        self.string_member(true, "id", &identity.id);
        self.string_member(false, "name", &identity.name);
        self.string_member(false, "type", &identity.r#type);
        self.close(b'}', false);
    }

    fn structure(&mut self, structure: &Structure) {
        self.open(b'{');
        for (index, (key, value)) in structure.iter().enumerate() {
            self.key(index == 0, key);
            self.value(value);
        }
        self.close(b'}', structure.is_empty());
    }

    /// The text; `serde_json` would write the same UTF-8, and so does this writer: it copies
    /// strings whole or between ASCII bytes, and adds only ASCII.
    pub(crate) fn into_string(self) -> String {
        String::from_utf8(self.out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
    }
}
