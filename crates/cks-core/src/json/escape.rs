//! JSON string escaping by table, once or twice: how each byte reads inside one or two nested JSON
//! strings.
//!
//! A whole graph's document travels nested: inside a tool result's text (a JSON string), which a
//! JSON-RPC line carries as another. Escaping is byte by byte — only ASCII bytes change, into
//! ASCII — so a text escaped twice is each of its bytes escaped twice, one after the other, and
//! any split of a text may be escaped piece by piece.

/// Each byte's escaped form as `serde_json` writes it, little-endian in a `u64`, and its length.
/// Escaping stores all eight bytes of an entry and moves on by its length: one lookup and no
/// branch per byte, which matters in a pretty document, dense in quotes and newlines. The longest
/// form, a control byte without a short escape escaped twice (`\\u0001`), takes seven bytes.
pub type EscapeTable = [(u64, u8); 256];

/// Escaped once (`serde_json`'s string escaping) and twice.
pub static ESCAPED: [EscapeTable; 2] = [escape_table(1), escape_table(2)];

/// The table of a byte escaped `times` times (1 or 2).
pub fn escaped(times: usize) -> &'static EscapeTable {
    &ESCAPED[times - 1]
}

const fn escape_table(times: usize) -> EscapeTable {
    let mut table = [(0u64, 0u8); 256];
    let mut byte = 0;
    while byte < 256 {
        let mut sequence = [byte as u8, 0, 0, 0, 0, 0, 0, 0];
        let mut len = 1;
        let mut round = 0;
        while round < times {
            let mut next = [0u8; 8];
            let mut written = 0;
            let mut read = 0;
            while read < len {
                let (part, part_len) = escape_once(sequence[read]);
                let mut i = 0;
                while i < part_len {
                    next[written] = part[i];
                    written += 1;
                    i += 1;
                }
                read += 1;
            }
            sequence = next;
            len = written;
            round += 1;
        }
        table[byte] = (u64::from_le_bytes(sequence), len as u8);
        byte += 1;
    }
    table
}

/// One byte escaped once, as `serde_json` escapes it: a short escape where JSON has one, `\u00XX`
/// for the other control bytes, itself otherwise (non-ASCII bytes and DEL included).
const fn escape_once(byte: u8) -> ([u8; 6], usize) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let short = match byte {
        0x08 => b'b',
        0x0c => b'f',
        b'\n' => b'n',
        b'\r' => b'r',
        b'\t' => b't',
        b'"' => b'"',
        b'\\' => b'\\',
        _ => 0,
    };
    if short != 0 {
        ([b'\\', short, 0, 0, 0, 0], 2)
    } else if byte < 0x20 {
        ([b'\\', b'u', b'0', b'0', HEX[(byte >> 4) as usize], HEX[(byte & 0xf) as usize]], 6)
    } else {
        ([byte, 0, 0, 0, 0, 0], 1)
    }
}

/// Whether none of eight bytes (a little-endian word) needs escaping: no quote, no backslash, no
/// control byte.
pub fn needs_no_escape(word: u64) -> bool {
    special_bytes(word) == 0
}

/// The quotes, backslashes and control bytes among eight bytes (a little-endian word): the high
/// bit of each such byte set. Each test sets a byte's high bit where the byte matches, and can
/// also set it above a matching byte, never where no byte matches: the lowest bit set marks the
/// first special byte.
pub fn special_bytes(word: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let below = |limit: u8| word.wrapping_sub(ONES * u64::from(limit)) & !word;
    let equal = |byte: u8| {
        let zero_where_equal = word ^ (ONES * u64::from(byte));
        zero_where_equal.wrapping_sub(ONES) & !zero_where_equal
    };
    (below(0x20) | equal(b'"') | equal(b'\\')) & HIGH
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `text` escaped by `serde_json`, without the quotes.
    fn serde_escaped(text: &str) -> String {
        let quoted = serde_json::to_string(text).unwrap();
        quoted[1..quoted.len() - 1].to_owned()
    }

    fn entry(byte: u8, times: usize) -> Vec<u8> {
        let (sequence, len) = escaped(times)[usize::from(byte)];
        sequence.to_le_bytes()[..usize::from(len)].to_vec()
    }

    #[test]
    fn each_table_is_serde_json_escaping_repeated() {
        for byte in 0..0x80u8 {
            let mut expected = char::from(byte).to_string();
            for times in 1..=2 {
                expected = serde_escaped(&expected);
                assert_eq!(entry(byte, times), expected.as_bytes(), "{byte:#x} escaped {times} times");
            }
        }
        for byte in 0x80..=u8::MAX {
            for times in 1..=2 {
                assert_eq!(entry(byte, times), [byte], "non-ASCII bytes are never escaped");
            }
        }
    }

    #[test]
    fn a_word_needs_escaping_exactly_when_one_of_its_bytes_does() {
        for byte in 0..=u8::MAX {
            for at in 0..8 {
                let mut word = *b"abcdefgh";
                word[at] = byte;
                let plain = escaped(1)[usize::from(byte)].1 == 1;
                assert_eq!(needs_no_escape(u64::from_le_bytes(word)), plain, "{byte:#x} at {at}");
            }
        }
    }

    #[test]
    fn the_lowest_bit_of_the_special_bytes_marks_the_first_of_them() {
        for byte in (0..=u8::MAX).filter(|&b| escaped(1)[usize::from(b)].1 > 1) {
            for at in 0..8 {
                // Plain bytes before it, special ones (and plain ones) after it.
                for after in [b'"', b'\\', 0, 0x1f, b'a', 0xff] {
                    let mut word = *b"abcdefgh";
                    word[at] = byte;
                    word[at + 1..].fill(after);
                    let special = special_bytes(u64::from_le_bytes(word));
                    assert_eq!(special.trailing_zeros() / 8, at as u32, "{byte:#x} at {at}, then {after:#x}");
                }
            }
        }
    }
}
