//! Every provider's response decoders over arbitrary bytes: whole answers, streams (split at
//! every chunk boundary the input chooses), error bodies and model lists. No input panics, and a
//! decoded answer can be sent on to every provider.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    cks_llm::fuzzing::provider_response(data);
});
