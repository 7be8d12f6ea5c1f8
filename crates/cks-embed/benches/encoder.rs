//! The local transformer's cost: one query (its tokens, on the calling thread), and batches of
//! texts of 20, 100 and 300 words as the background embeds them (texts per second). Reads the
//! installed model (`scripts/install-embedding-model`), or `CKS_BENCH_ENCODER`'s directory.
//!
//! Run: `cargo bench -p cks-embed --bench encoder`.

use std::path::PathBuf;
use std::sync::OnceLock;

use cks_embed::Transformer;
use divan::Bencher;
use divan::counter::ItemsCount;

fn main() {
    divan::main();
}

fn model() -> &'static Transformer {
    static MODEL: OnceLock<Transformer> = OnceLock::new();
    MODEL.get_or_init(|| {
        let dir = std::env::var_os("CKS_BENCH_ENCODER").map(PathBuf::from).unwrap_or_else(|| {
            let cache = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache"));
            cache.join("cks-mcp/models/minilm-l6")
        });
        let model = Transformer::check(&dir).unwrap_or_else(|e| panic!("{e} (run scripts/install-embedding-model)"));
        model.load().expect("the weights");
        model
    })
}

/// `words` words of plain English, different for each `seed`.
fn text(words: usize, seed: usize) -> String {
    const WORDS: [&str; 24] = [
        "the",
        "team",
        "moved",
        "to",
        "a",
        "new",
        "city",
        "last",
        "spring",
        "and",
        "she",
        "plans",
        "trips",
        "with",
        "her",
        "sister",
        "every",
        "summer",
        "because",
        "they",
        "love",
        "mountains",
        "near",
        "water",
    ];
    (0..words).map(|i| WORDS[(i * 7 + seed * 13 + i / 5) % WORDS.len()]).collect::<Vec<_>>().join(" ")
}

/// A question as a client asks it: eleven words.
#[divan::bench]
fn query(bencher: Bencher) {
    let model = model();
    let query = "When did Caroline go to the support group with her sister?";
    bencher.bench(|| model.encode(&[query]).expect("a vector"));
}

/// Thirty-two texts of `words` words, as one background batch.
#[divan::bench(args = [20, 100, 300], sample_count = 5, sample_size = 1)]
fn batch(bencher: Bencher, words: usize) {
    let model = model();
    let texts: Vec<String> = (0..32).map(|seed| text(words, seed)).collect();
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    bencher.counter(ItemsCount::new(texts.len())).bench(|| model.encode(&texts).expect("vectors"));
}
