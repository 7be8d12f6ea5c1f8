//! The stdio framing decoder (newline-delimited and `Content-Length:` messages on one stream)
//! over arbitrary bytes and arbitrary read sizes: no panic, no endless loop at end of input, and
//! the same messages whatever the read size.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    cks_mcp::fuzzing::stdio_framing(data);
});
