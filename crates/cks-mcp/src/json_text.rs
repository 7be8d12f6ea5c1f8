//! JSON string escaping for large texts, without a second copy of them.
//!
//! A whole graph's document travels as a string inside a string: the tool's result text holds it
//! escaped once (`{"serialized": "..."}`), and the JSON-RPC line escapes that text again. Built
//! the ordinary way, the document, its escaped text and the line (each hundreds of megabytes at a
//! million objects) are all in memory at once. Here a result's large string is a [`LargeText`]:
//! over stdio it is left unescaped in the result ([`LargeText::into_block`]) and the transport
//! writes it escaped twice, a slice at a time ([`Escaping::Twice`]); elsewhere the result's text
//! is escaped in the document's own buffer ([`LargeText::into_text`]) and the transport escapes
//! it again as it writes it ([`Escaping::Once`]). The bytes are the ones `serde_json` writes.
//!
//! The other way, a large string argument (a graph's text in `json_data`) is found and decoded
//! from the request's bytes in one pass ([`decode_string`]), where `serde_json` would scan it
//! once to find where it ends, then decode it into a buffer that grows as it goes.

use cks_core::json::escape::{self, EscapeTable, needs_no_escape};
use rmcp::model::{ContentBlock, MetaObject, TextContent};
use serde_json::Value;

/// Strings from this size on are escaped in place and streamed; smaller ones take `serde_json`'s
/// ordinary path.
pub(crate) const LARGE_TEXT_BYTES: usize = 1 << 20;

/// How many times a text is escaped: once as a JSON string, or twice (a document inside a tool
/// result's text inside a JSON-RPC line).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Escaping {
    Once,
    Twice,
}

impl Escaping {
    fn table(self) -> &'static EscapeTable {
        match self {
            Escaping::Once => escape::escaped(1),
            Escaping::Twice => escape::escaped(2),
        }
    }

    /// The length of `bytes` escaped (without the quotes).
    pub(crate) fn len(self, bytes: &[u8]) -> usize {
        let table = self.table();
        bytes.iter().map(|&b| usize::from(table[usize::from(b)].1)).sum()
    }

    /// Appends `bytes` escaped (no quotes). Escaping goes byte by byte and never touches a byte
    /// of a multi-byte character, so any split of a UTF-8 text may be escaped piece by piece.
    pub(crate) fn escape_into(self, bytes: &[u8], out: &mut Vec<u8>) {
        let start = out.len();
        out.resize(start + room_to_escape(bytes.len()), 0);
        let written = self.escape_to(bytes, &mut out[start..]);
        out.truncate(start + written);
    }

    /// Writes `bytes` escaped at the start of `out`, which has [`room_to_escape`] for them;
    /// returns how many bytes it wrote. What lies in `out` past them is left as it was (an
    /// escaped store writes eight bytes at a time), so a buffer reused from piece to piece needs
    /// no clearing.
    pub(crate) fn escape_to(self, bytes: &[u8], out: &mut [u8]) -> usize {
        let table = self.table();
        let mut written = 0;
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            if needs_no_escape(u64::from_le_bytes(word.try_into().expect("eight bytes"))) {
                // Runs of plain text (indents, names, descriptions) go eight bytes at a time.
                out[written..written + 8].copy_from_slice(word);
                written += 8;
            } else {
                for &byte in word {
                    written += store_escaped(table, byte, &mut out[written..]);
                }
            }
        }
        for &byte in words.remainder() {
            written += store_escaped(table, byte, &mut out[written..]);
        }
        written
    }
}

/// Stores a byte's escaped form at the start of `out` (eight bytes, of which the form's length
/// count); returns that length.
fn store_escaped(table: &EscapeTable, byte: u8, out: &mut [u8]) -> usize {
    let (sequence, len) = table[usize::from(byte)];
    out[..8].copy_from_slice(&sequence.to_le_bytes());
    usize::from(len)
}

/// The room [`Escaping::escape_to`] needs for `len` bytes: at most seven bytes for each (escaped
/// twice), and the last eight-byte store.
pub(crate) fn room_to_escape(len: usize) -> usize {
    len * 7 + 8
}

/// `prefix`, `text` as a quoted JSON string, then `suffix`, written in `text`'s own buffer: the
/// buffer grows by what escaping adds, the text moves to its end, and is escaped from there
/// towards the front, writing always more than eight bytes behind reading.
fn escape_in_place(text: String, prefix: &[u8], suffix: &[u8]) -> String {
    const GAP: usize = 9;
    let mut bytes = text.into_bytes();
    let text_len = bytes.len();
    let head = prefix.len() + 1;
    let escaped = Escaping::Once.len(&bytes);
    let total = head + escaped + 1 + suffix.len();
    // Room for the escaped text, and the text itself ahead of it by at least the gap.
    let room = head + escaped + GAP;
    bytes.resize(room.max(total), 0);
    let from = room - text_len;
    bytes.copy_within(..text_len, from);
    // Reading starts at least GAP bytes ahead of writing, and stays so: writing falls behind by
    // what escaping adds and ends where the escaped text does, GAP bytes before the buffer's room
    // ends. An eight-byte store never reaches a byte not yet read.
    let mut write = head;
    for read in from..room {
        let (sequence, len) = escape::escaped(1)[usize::from(bytes[read])];
        bytes[write..write + 8].copy_from_slice(&sequence.to_le_bytes());
        write += usize::from(len);
    }
    debug_assert_eq!(write, head + escaped);
    bytes[..prefix.len()].copy_from_slice(prefix);
    bytes[prefix.len()] = b'"';
    bytes[head + escaped] = b'"';
    bytes[head + escaped + 1..total].copy_from_slice(suffix);
    bytes.truncate(total);
    // Escaping keeps UTF-8 intact (only ASCII bytes are replaced, by ASCII), so this never fails.
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

fn write_json(value: &Value, out: &mut Vec<u8>) {
    serde_json::to_writer(out, value).expect("writing JSON to memory");
}

/// The `_meta` key of a text block whose text is a [`LargeText`]'s string, not yet escaped, and
/// whose value is `[before, after]`: what a server that leaves large texts to its transport
/// hands the transport (see [`LargeText::into_block`]). Such a block never leaves the process.
const UNESCAPED_META_KEY: &str = "cks/unescapedLargeText";

/// A value's JSON text with its one large string not yet escaped: the text is `before`, the
/// string quoted, then `after`.
#[derive(Debug)]
pub(crate) struct LargeText {
    pub(crate) before: String,
    pub(crate) text: String,
    pub(crate) after: String,
}

impl LargeText {
    /// `value` as a large text, when it is a large string or an object with one as a member;
    /// otherwise the value itself, back.
    pub(crate) fn split(value: Value) -> Result<LargeText, Value> {
        let is_large = |v: &Value| v.as_str().is_some_and(|s| s.len() >= LARGE_TEXT_BYTES);
        match value {
            Value::String(text) if text.len() >= LARGE_TEXT_BYTES => {
                Ok(LargeText { before: String::new(), text, after: String::new() })
            }
            Value::Object(map) if map.values().any(is_large) => {
                let (mut before, mut after) = (b"{".to_vec(), Vec::new());
                let mut large = None;
                for (index, (key, member)) in map.into_iter().enumerate() {
                    let out = if large.is_none() { &mut before } else { &mut after };
                    if index > 0 {
                        out.push(b',');
                    }
                    write_json(&Value::String(key), out);
                    out.push(b':');
                    match member {
                        Value::String(text) if large.is_none() && text.len() >= LARGE_TEXT_BYTES => large = Some(text),
                        other => write_json(&other, out),
                    }
                }
                after.push(b'}');
                // serde_json writes UTF-8.
                let text = |bytes: Vec<u8>| String::from_utf8(bytes).unwrap_or_default();
                Ok(LargeText { before: text(before), text: large.unwrap_or_default(), after: text(after) })
            }
            other => Err(other),
        }
    }

    /// The JSON text, written in the large string's own buffer.
    pub(crate) fn into_text(self) -> String {
        escape_in_place(self.text, self.before.as_bytes(), self.after.as_bytes())
    }

    /// A text block that carries this text unescaped, for a transport that writes it escaped as
    /// it sends it (see [`Self::take_from`]): escaping it here first would be a pass over the
    /// whole text, and a larger buffer, for nothing.
    pub(crate) fn into_block(self) -> ContentBlock {
        let around = Value::Array(vec![Value::String(self.before), Value::String(self.after)]);
        let meta = MetaObject(std::iter::once((UNESCAPED_META_KEY.to_owned(), around)).collect());
        ContentBlock::Text(TextContent::new(self.text).with_meta(meta))
    }

    /// The large text of a block made by [`Self::into_block`], taken out of it (its text left
    /// empty, its `_meta` as it was before); `None` for any other block.
    pub(crate) fn take_from(block: &mut TextContent) -> Option<LargeText> {
        let meta = block.meta.as_mut()?;
        let Value::Array(around) = meta.0.remove(UNESCAPED_META_KEY)? else { return None };
        if meta.0.is_empty() {
            block.meta = None;
        }
        let mut around = around.into_iter().map(|part| match part {
            Value::String(text) => text,
            _ => String::new(),
        });
        let (before, after) = (around.next().unwrap_or_default(), around.next().unwrap_or_default());
        Some(LargeText { before, text: std::mem::take(&mut block.text), after })
    }
}

/// Decodes the JSON string whose opening quote is at `start` in `bytes`, as `serde_json` reads a
/// string: the text, and the index just past its closing quote. `None` where no valid string
/// starts there (a control byte, an unknown escape or a lone surrogate, invalid UTF-8, no closing
/// quote). One pass: runs of plain bytes are copied eight at a time, escapes decoded as they
/// come, into a small buffer that, once outgrown, is replaced by one of the most the text can
/// take (the rest of `bytes`: its pages never written are never touched).
pub(crate) fn decode_string(bytes: &[u8], start: usize) -> Option<(String, usize)> {
    decode_string_from(bytes, start, FIRST_ROOM)
}

/// The room a decoded string first gets: a short one never takes more.
const FIRST_ROOM: usize = 64 * 1024;

fn decode_string_from(bytes: &[u8], start: usize, first_room: usize) -> Option<(String, usize)> {
    if bytes.get(start) != Some(&b'"') {
        return None;
    }
    let mut read = start + 1;
    // A decoded text is never longer than its token; eight more bytes take a whole word's copy.
    let most = bytes.len() - read + 8;
    let mut out = vec![0u8; first_room.min(most)];
    let mut written = 0;
    loop {
        // Room for words, and for the character of the escape after them (words stop eight bytes
        // short of the end of the room), or all the room the text can take.
        if out.len() < written + 16 && out.len() < most {
            let mut larger = vec![0u8; most];
            larger[..written].copy_from_slice(&out[..written]);
            out = larger;
        }
        while written + 16 <= out.len() {
            let Some(word) = bytes.get(read..read + 8) else { break };
            out[written..written + 8].copy_from_slice(word);
            let special = escape::special_bytes(u64::from_le_bytes(word.try_into().expect("eight bytes")));
            if special == 0 {
                read += 8;
                written += 8;
            } else {
                // The bytes before the first special one are copied already; what follows it is
                // written over.
                let plain = (special.trailing_zeros() / 8) as usize;
                read += plain;
                written += plain;
                break;
            }
        }
        match *bytes.get(read)? {
            b'"' => {
                out.truncate(written);
                out.shrink_to_fit();
                return String::from_utf8(out).ok().map(|text| (text, read + 1));
            }
            b'\\' => match SHORT_ESCAPES[usize::from(*bytes.get(read + 1)?)] {
                0 => {
                    let (decoded, escape_len) = decode_unicode_escape(&bytes[read..])?;
                    written += decoded.encode_utf8(&mut out[written..]).len();
                    read += escape_len;
                }
                short => {
                    out[written] = short;
                    written += 1;
                    read += 2;
                }
            },
            0..0x20 => return None,
            // One of the last few bytes, too few for a word.
            byte => {
                out[written] = byte;
                written += 1;
                read += 1;
            }
        }
    }
}

/// What each two-byte escape stands for, by the byte after the backslash; 0 for none.
const SHORT_ESCAPES: [u8; 256] = {
    let mut table = [0u8; 256];
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table[b'/' as usize] = b'/';
    table[b'b' as usize] = 0x08;
    table[b'f' as usize] = 0x0c;
    table[b'n' as usize] = b'\n';
    table[b'r' as usize] = b'\r';
    table[b't' as usize] = b'\t';
    table
};

/// The character a `\u` escape at the start of `bytes` stands for (a surrogate pair's two
/// escapes make one), and the escape's length; `None` for any other escape.
fn decode_unicode_escape(bytes: &[u8]) -> Option<(char, usize)> {
    if bytes.get(1) != Some(&b'u') {
        return None;
    }
    let unit = hex4(bytes.get(2..6)?)?;
    if !(0xD800..0xDC00).contains(&unit) {
        return Some((char::from_u32(u32::from(unit))?, 6));
    }
    // A leading surrogate takes the trailing one that must follow it.
    let low = bytes.get(6..12).filter(|e| e.starts_with(b"\\u")).and_then(|e| hex4(&e[2..]))?;
    if !(0xDC00..0xE000).contains(&low) {
        return None;
    }
    let code = 0x10000 + ((u32::from(unit) - 0xD800) << 10) + (u32::from(low) - 0xDC00);
    char::from_u32(code).map(|c| (c, 12))
}

fn hex4(digits: &[u8]) -> Option<u16> {
    let digits = std::str::from_utf8(digits).ok()?;
    // `from_str_radix` would take a sign.
    digits.bytes().all(|b| b.is_ascii_hexdigit()).then(|| u16::from_str_radix(digits, 16).ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// Texts rich in what needs escaping: quotes, backslashes, every control byte, multi-byte
    /// characters.
    fn text() -> impl Strategy<Value = String> {
        proptest::collection::vec(
            prop_oneof![
                Just('"'),
                Just('\\'),
                (0u8..0x20).prop_map(char::from),
                Just('é'),
                Just('😀'),
                Just('\u{7f}'),
                proptest::char::range('a', 'z')
            ],
            0..200,
        )
        .prop_map(|chars| chars.into_iter().collect())
    }

    /// Pieces a token may hold that serde_json never writes: escapes it reads (`\/`, `\u` of a
    /// plain character, a surrogate pair), and ones it refuses (a lone or reversed surrogate, an
    /// unknown escape, a bad hex digit, a raw control byte).
    fn extra() -> impl Strategy<Value = (usize, &'static str)> {
        let piece = prop_oneof![
            Just("\\/"),
            Just("\\u00e9"),
            Just("\\u00E9"),
            Just("\\ud83d\\ude00"),
            Just("\\ud83d"),
            Just("\\ude00\\ud83d"),
            Just("\\ud83d\\u0041"),
            Just("\\q"),
            Just("\\u00g9"),
            Just("\\u+0e9"),
            Just("\u{1}"),
        ];
        (0usize..300, piece)
    }

    /// The JSON text of `value`, a large string written in its own buffer.
    fn into_text(value: Value) -> String {
        match LargeText::split(value) {
            Ok(large) => large.into_text(),
            Err(other) => serde_json::to_string(&other).unwrap(),
        }
    }

    fn escaped(text: &str) -> String {
        let quoted = serde_json::to_string(text).unwrap();
        quoted[1..quoted.len() - 1].to_owned()
    }

    proptest! {
        #[test]
        fn escaping_writes_what_serde_json_writes(text in text(), split in 0usize..200) {
            let expected = escaped(&text);
            prop_assert_eq!(Escaping::Once.len(text.as_bytes()), expected.len());
            // Escaped in two pieces split anywhere, even inside a character.
            let split = split.min(text.len());
            let mut out = Vec::new();
            Escaping::Once.escape_into(&text.as_bytes()[..split], &mut out);
            Escaping::Once.escape_into(&text.as_bytes()[split..], &mut out);
            prop_assert_eq!(String::from_utf8(out).unwrap(), expected.clone());
            // Twice, in one pass: the escaped text escaped again.
            let twice = escaped(&expected);
            prop_assert_eq!(Escaping::Twice.len(text.as_bytes()), twice.len());
            let mut out = Vec::new();
            Escaping::Twice.escape_into(&text.as_bytes()[..split], &mut out);
            Escaping::Twice.escape_into(&text.as_bytes()[split..], &mut out);
            prop_assert_eq!(String::from_utf8(out).unwrap(), twice.clone());
            // Into a reused buffer, over an earlier text's bytes.
            let mut reused = vec![b'x'; room_to_escape(text.len())];
            let written = Escaping::Twice.escape_to(text.as_bytes(), &mut reused);
            prop_assert_eq!(&reused[..written], twice.as_bytes());
            let in_place = escape_in_place(text.clone(), b"{\"k\":", b"}");
            prop_assert_eq!(in_place, format!("{{\"k\":\"{expected}\"}}"));
            // A suffix longer than the gap escaping keeps: the buffer's end is the suffix's.
            let suffix = ",\"session_id\":\"0123456789abcdef\"}";
            let in_place = escape_in_place(text.clone(), b"{\"k\":", suffix.as_bytes());
            prop_assert_eq!(in_place, format!("{{\"k\":\"{expected}\"{suffix}"));
        }

        #[test]
        fn decoding_reads_what_serde_json_reads(text in text(), extra in proptest::collection::vec(extra(), 0..4)) {
            let mut token = serde_json::to_string(&text).unwrap();
            for (at, piece) in extra {
                let mut at = at.min(token.len() - 1).max(1);
                while !token.is_char_boundary(at) || token[..at].ends_with('\\') {
                    at -= 1;
                }
                token.insert_str(at.max(1), piece);
            }
            let expected = serde_json::from_str::<String>(&token).ok();
            // After other text, with more after it.
            let bytes = format!("[1,{token},2]");
            // Into room outgrown anywhere, or never.
            for first_room in [0, 9, 17, 40, FIRST_ROOM] {
                let decoded = decode_string_from(bytes.as_bytes(), 3, first_room);
                prop_assert_eq!(decoded.as_ref().map(|(text, _)| text), expected.as_ref(), "{}", token);
                if let Some((_, end)) = decoded {
                    prop_assert_eq!(&bytes[end..], ",2]");
                }
            }
        }
    }

    #[test]
    fn large_strings_alone_or_in_an_object_become_the_same_text_as_serde_json_writes() {
        let large = "line \"one\"\n\tand \\ two é\u{1}".repeat(LARGE_TEXT_BYTES / 20);
        assert!(large.len() >= LARGE_TEXT_BYTES);
        let values = [
            Value::String(large.clone()),
            json!({"serialized": large, "session_id": "s-1"}),
            json!({"a": [1, "x"], "m": large, "n": large, "z": {"k": null}}),
            json!({"small": "text", "n": 3}),
            json!("small"),
        ];
        for value in values {
            assert_eq!(into_text(value.clone()), serde_json::to_string(&value).unwrap());
        }
    }

    #[test]
    fn a_large_string_is_escaped_in_its_own_buffer() {
        let mut text = String::with_capacity(2 * LARGE_TEXT_BYTES);
        text.push_str(&"x".repeat(LARGE_TEXT_BYTES));
        text.push('"');
        let address = text.as_ptr();
        let escaped = into_text(Value::String(text));
        assert_eq!(escaped.as_ptr(), address, "the text was copied");
        assert!(escaped.ends_with("x\\\"\""));
    }
}
