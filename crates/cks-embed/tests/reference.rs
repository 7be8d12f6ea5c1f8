//! The local encoder against the model's own implementation: token ids and vectors of fixed
//! sentences, as sentence-transformers made them (`tests/data/minilm-l6-reference.json`, made by
//! `scripts/make-encoder-reference.py`). Needs the installed model
//! (`scripts/install-embedding-model`), or `CKS_TEST_ENCODER` naming its directory.

use std::path::PathBuf;

use cks_embed::Transformer;

fn model_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CKS_TEST_ENCODER") {
        return dir.into();
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache"));
    cache.join("cks-mcp/models/minilm-l6")
}

#[test]
fn vectors_match_sentence_transformers() {
    let dir = model_dir();
    let model = Transformer::check(&dir)
        .unwrap_or_else(|e| panic!("{e} (install the model with scripts/install-embedding-model)"));
    let reference: serde_json::Value =
        serde_json::from_str(include_str!("data/minilm-l6-reference.json")).expect("the reference file");
    let sentences = reference["sentences"].as_array().expect("sentences");
    assert!(sentences.len() >= 5);
    let texts: Vec<&str> = sentences.iter().map(|s| s["text"].as_str().expect("text")).collect();
    let vectors = model.encode(&texts).expect("vectors");
    for ((sentence, text), vector) in sentences.iter().zip(&texts).zip(&vectors) {
        let expected: Vec<f32> = sentence["vector"]
            .as_array()
            .expect("vector")
            .iter()
            .map(|v| v.as_f64().expect("a number") as f32)
            .collect();
        assert_eq!(vector.len(), expected.len(), "{text:?}");
        let cosine: f32 = vector.iter().zip(&expected).map(|(a, b)| a * b).sum();
        assert!(cosine >= 0.99, "{text:?}: cosine {cosine}");
        let largest = vector.iter().zip(&expected).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(largest < 1e-3, "{text:?}: a component {largest} away");
    }
    // Unlike sentences stay apart: the check above is not met by any vector.
    let cosine: f32 = vectors[0].iter().zip(&vectors[1]).map(|(a, b)| a * b).sum();
    assert!(cosine < 0.5, "two unrelated sentences: {cosine}");
}
