//! The canonical text written directly, without `serde_json`'s serializer: the same bytes it
//! writes, compact or pretty with a two-space indent, at about twice its speed.
//!
//! Whole-graph texts are written on every snapshot (compact, for storage) and every
//! `serialize_knowledge` (pretty, for clients), and a pretty document is dense in structure: a
//! line of a few bytes for each key. `serde_json`'s pretty formatter pays a call for each indent
//! level of each line and goes through its generic serializer state for every key; here a line's
//! indent is one copy and an object's shape is known. Scalars other than strings (numbers,
//! booleans, `null`) are still written by `serde_json`, so every number keeps its exact form.

use serde_json::Value;

use crate::object::{Identity, KnowledgeObject, Structure};

/// How `serde_json` escapes each byte of a string: 0 for none, the letter of a short escape, or
/// `u` for `\u00XX`. Bytes from 0x20 on, other than the quote and the backslash, are written as
/// they are (non-ASCII characters included).
static ESCAPE: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut byte = 0;
    while byte < 0x20 {
        table[byte] = b'u';
        byte += 1;
    }
    table[0x08] = b'b';
    table[0x09] = b't';
    table[0x0a] = b'n';
    table[0x0c] = b'f';
    table[0x0d] = b'r';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table
};

/// A newline and the deepest indent one copy writes; deeper lines take more copies.
const LINE: &[u8; 129] = b"\n                                                                                                                                ";

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

    /// A new line at the current indent (nothing in the compact form).
    fn line(&mut self) {
        if PRETTY {
            let mut spaces = 2 * self.level;
            let first = spaces.min(LINE.len() - 1);
            self.out.extend_from_slice(&LINE[..=first]);
            spaces -= first;
            while spaces > 0 {
                let more = spaces.min(LINE.len() - 1);
                self.out.extend_from_slice(&LINE[1..=more]);
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
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let bytes = text.as_bytes();
        self.out.push(b'"');
        let mut start = 0;
        for (at, &byte) in bytes.iter().enumerate() {
            let escape = ESCAPE[usize::from(byte)];
            if escape == 0 {
                continue;
            }
            self.out.extend_from_slice(&bytes[start..at]);
            if escape == b'u' {
                let hex = [HEX[usize::from(byte >> 4)], HEX[usize::from(byte & 0xf)]];
                self.out.extend_from_slice(&[b'\\', b'u', b'0', b'0', hex[0], hex[1]]);
            } else {
                self.out.extend_from_slice(&[b'\\', escape]);
            }
            start = at + 1;
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
