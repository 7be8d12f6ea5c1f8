//! The canonical JSON parser over arbitrary text: no input panics, and whatever parses survives
//! its own canonical text unchanged (same objects, same root hash).
#![no_main]

use cks_core::json::{parse_str, to_canonical_string, to_compact_string};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(structure) = parse_str(text) else { return };
    for written in [to_canonical_string(&structure), to_compact_string(&structure)] {
        let again = parse_str(&written).expect("canonical text parses again");
        assert!(again.same_content(&structure), "round trip changed the structure");
        assert_eq!(again.root_hash(), structure.root_hash());
    }
    assert_eq!(structure.root_hash(), structure.root_hash_from_scratch());
});
