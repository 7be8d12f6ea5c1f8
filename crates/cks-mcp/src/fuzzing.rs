//! Entry points for the fuzz targets (`fuzz/` at the repository root). Built only with the
//! `fuzzing` feature; not part of the supported API.

use bytes::BytesMut;

use crate::stdio::framing::{Decoded, FrameDecoder};

/// The stdio framing decoder over arbitrary bytes. The first input byte chooses the size limit
/// (small, so over-size messages are common), the second how the rest arrives: in reads of that
/// many bytes. Properties: no input panics, decoding at end of input finishes, and what is decoded
/// does not depend on how the bytes were split into reads.
pub fn stdio_framing(data: &[u8]) {
    let [limit, chunk, input @ ..] = data else { return };
    let limit = 16 + usize::from(*limit) * 8;
    let whole = decode_all(input, limit, input.len().max(1));
    let chunked = decode_all(input, limit, usize::from(*chunk).max(1));
    assert_eq!(whole, chunked, "the decoded messages depend on how the input was split into reads");
}

fn decode_all(input: &[u8], limit: usize, read_size: usize) -> Vec<Decoded> {
    let mut decoder = FrameDecoder::new(limit);
    let mut buffer = BytesMut::new();
    let mut decoded = Vec::new();
    for read in input.chunks(read_size) {
        buffer.extend_from_slice(read);
        while let Some(item) = decoder.decode(&mut buffer, false) {
            decoded.push(item);
        }
    }
    // At end of input every call must make progress: at most one item per remaining byte, plus one.
    for _ in 0..=buffer.len() + 1 {
        match decoder.decode(&mut buffer, true) {
            Some(item) => decoded.push(item),
            None => return decoded,
        }
    }
    panic!("the decoder keeps producing items at end of input");
}
