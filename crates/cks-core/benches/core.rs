//! Micro-benchmarks of the hot paths of `cks-core` at 1k, 10k and 50k objects (searches also at
//! 200k and at a million nodes; half nodes, half relations: a "50k" graph holds 25,000 of each).
//!
//! Run: `cargo bench -p cks-core --bench core`.

use divan::{Bencher, black_box};
use std::sync::OnceLock;

use cks_core::KnowledgeStructure;
use cks_core::json::{parse_str, to_canonical_string};
use cks_core::ops::{apply, parse_operations};
use cks_core::sample::random_graph;
use cks_core::subgraph::{SubgraphQuery, query_subgraph};
use cks_core::validate::{Extension, ValidationOptions, validate};

const SIZES: [usize; 3] = [1_000, 10_000, 50_000];
/// Searches also at 200,000 objects: 100,000 searchable entities.
const SEARCH_SIZES: [usize; 4] = [1_000, 10_000, 50_000, 200_000];

fn main() {
    divan::main();
}

fn graph(n: usize) -> &'static KnowledgeStructure {
    // Built once per size on first use (and kept for the run), half nodes and half relations.
    static GRAPHS: OnceLock<std::sync::Mutex<Vec<(usize, &'static KnowledgeStructure)>>> = OnceLock::new();
    let mut graphs = GRAPHS.get_or_init(Default::default).lock().unwrap();
    if let Some((_, g)) = graphs.iter().find(|(size, _)| *size == n) {
        return g;
    }
    let g: &'static KnowledgeStructure = Box::leak(Box::new(random_graph(n / 2, n / 2, 42)));
    graphs.push((n, g));
    g
}

#[divan::bench(args = SIZES, sample_count = 10)]
fn parse(bencher: Bencher, n: usize) {
    let text = to_canonical_string(graph(n));
    bencher.bench(|| parse_str(black_box(&text)).unwrap());
}

#[divan::bench(args = SIZES, sample_count = 10)]
fn serialize(bencher: Bencher, n: usize) {
    let g = graph(n);
    bencher.bench(|| to_canonical_string(black_box(g)));
}

#[divan::bench(args = SIZES, sample_count = 10)]
fn validate_always_on(bencher: Bencher, n: usize) {
    let g = graph(n);
    bencher.bench(|| validate(black_box(g), &ValidationOptions::default()));
}

#[divan::bench(args = SIZES, sample_count = 10)]
fn validate_all_extensions(bencher: Bencher, n: usize) {
    let g = graph(n);
    let options = ValidationOptions { extensions: Extension::ALL.to_vec(), ..Default::default() };
    bencher.bench(|| validate(black_box(g), &options));
}

/// Applying a one-object change in memory and undoing it: the core part of a commit.
#[divan::bench(args = SIZES)]
fn one_object_change_and_check(bencher: Bencher, n: usize) {
    let mut g = graph(n).clone();
    let ops = parse_operations(&serde_json::json!([
        {"type": "update_object", "object_id": "n7", "structure_patch": {"confidence": 0.5}}
    ]))
    .unwrap();
    bencher.bench_local(|| {
        let changes = apply(&mut g, &ops).unwrap();
        let diagnostics = cks_core::validate::check_changes(&g, &changes);
        let hash = g.root_hash();
        g.undo(changes);
        (diagnostics, hash)
    });
}

#[divan::bench(args = SIZES)]
fn query_subgraph_depth2_max50(bencher: Bencher, n: usize) {
    let g = graph(n);
    let query = SubgraphQuery { seed_ids: vec!["n1".into()], depth: 2, max_objects: Some(50), ..Default::default() };
    bencher.bench(|| query_subgraph(black_box(g), &query));
}

/// A search over the text index once it exists: a rare term (one object's number) alone, and with
/// a word every sample node holds (its posting list is the whole graph).
#[divan::bench(args = SEARCH_SIZES, consts = [false, true])]
fn text_search<const COMMON_WORD: bool>(bencher: Bencher, n: usize) {
    let g = graph(n);
    g.text_index();
    let query = if COMMON_WORD { "sample 421" } else { "421" };
    bencher.bench(|| g.text_index().rank(black_box(query), 3, 0.0));
}

/// The text search at a million searchable objects (nodes only, so that the graph fits in a
/// bench's memory): `sample 421` as above, and four words each held by a tenth to a fifth of the
/// objects (two types, two tags), as real text's common words are; the best 100, as the hybrid
/// search asks of the word side.
#[divan::bench(args = ["sample 421", "claim person t3 t7"], sample_count = 20)]
fn text_search_million(bencher: Bencher, query: &str) {
    static MILLION: OnceLock<KnowledgeStructure> = OnceLock::new();
    let g = MILLION.get_or_init(|| random_graph(1_000_000, 0, 42));
    g.text_index();
    bencher.bench(|| g.text_index().rank(black_box(query), 100, 0.0));
}

/// A stand-in model's unit vector for a text key: 256 dimensions, pseudo-random from the key.
fn vector_of(key: &cks_core::vectors::TextKey) -> cks_core::vectors::Vector {
    let mut state = u64::from_le_bytes(key[..8].try_into().unwrap()) | 1;
    let values: Vec<f32> = (0..256)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % 2001) as f32 / 1000.0 - 1.0
        })
        .collect();
    cks_core::vectors::Vector::quantize(&values).unwrap()
}

/// The vector side of a hybrid search once every object has its vector: the best 100 of the
/// searchable objects by cosine (what `search_semantic` takes as the vector side's candidates).
#[divan::bench(args = SEARCH_SIZES)]
fn vector_search(bencher: Bencher, n: usize) {
    use cks_core::vectors::{embedding_text, text_key};
    let g = graph(n);
    let known: std::collections::HashMap<_, _> =
        g.objects().filter_map(|o| embedding_text(o)).map(|t| text_key(&t)).map(|k| (k, vector_of(&k))).collect();
    let mut index = g.vector_index().lock().unwrap();
    index.sync(g, "bench", 0, |k: &cks_core::vectors::TextKey| known.get(k));
    let query = vector_of(&text_key("a query"));
    bencher.bench(|| index.rank(black_box(&query), 100));
}

/// The vector side at a million searchable objects (nodes only, so that the graph fits in a
/// bench's memory): past `EXACT_ROWS` the sign bits shortlist the rows that are ranked.
#[divan::bench(args = [1_000_000], sample_count = 20)]
fn vector_search_million(bencher: Bencher, n: usize) {
    use cks_core::vectors::{embedding_text, text_key};
    let g = cks_core::sample::random_graph(n, 0, 42);
    let known: std::collections::HashMap<_, _> =
        g.objects().filter_map(|o| embedding_text(o)).map(|t| text_key(&t)).map(|k| (k, vector_of(&k))).collect();
    let mut index = g.vector_index().lock().unwrap();
    index.sync(&g, "bench", 0, |k: &cks_core::vectors::TextKey| known.get(k));
    drop(known);
    let query = vector_of(&text_key("a query"));
    bencher.bench(|| index.rank(black_box(&query), 100));
}

/// Settling a structure's vector index for the first time (the first hybrid search of a loaded
/// session): each searchable object's text and key, and its vector looked up.
#[divan::bench(args = SIZES, sample_count = 10)]
fn vector_index_first_sync(bencher: Bencher, n: usize) {
    use cks_core::vectors::{embedding_text, text_key};
    let g = graph(n);
    let known: std::collections::HashMap<_, _> =
        g.objects().filter_map(|o| embedding_text(o)).map(|t| text_key(&t)).map(|k| (k, vector_of(&k))).collect();
    bencher.with_inputs(|| g.clone()).bench_values(|copy| {
        copy.vector_index()
            .lock()
            .unwrap()
            .sync(&copy, "bench", 0, |k: &cks_core::vectors::TextKey| known.get(k))
            .pending
    });
}

/// Building the text index of a structure (the first search of a session).
#[divan::bench(args = SIZES, sample_count = 10)]
fn text_index_build(bencher: Bencher, n: usize) {
    let g = graph(n);
    bencher.bench(|| cks_core::text::TextIndex::build(black_box(g)));
}

/// Reading back a text index kept as bytes (what a restart does instead of a build), and
/// setting it on the structure.
#[divan::bench(args = SIZES, sample_count = 10)]
fn text_index_read(bencher: Bencher, n: usize) {
    let g = graph(n);
    g.text_index();
    let bytes = g.text_index_bytes().unwrap();
    bencher.with_inputs(|| g.clone()).bench_local_values(|mut structure| {
        let (root, index) = cks_core::text::TextIndex::from_bytes(black_box(&bytes)).unwrap();
        structure.set_text_index(index, root).unwrap();
        structure
    });
}

/// `one_object_change_and_check` on a structure that has been searched: the change also updates
/// the text index, twice (applied and undone).
#[divan::bench(args = SIZES)]
fn one_object_change_with_text_index(bencher: Bencher, n: usize) {
    let mut g = graph(n).clone();
    g.text_index();
    let ops = parse_operations(&serde_json::json!([
        {"type": "update_object", "object_id": "n7", "structure_patch": {"description": "changed words"}}
    ]))
    .unwrap();
    bencher.bench_local(|| {
        let changes = apply(&mut g, &ops).unwrap();
        let hash = g.root_hash();
        g.undo(changes);
        hash
    });
}

/// The pretty client document (`serialize_knowledge`'s answer).
#[divan::bench(args = SIZES, sample_count = 10)]
fn serialize_document(bencher: Bencher, n: usize) {
    let g = graph(n);
    bencher.bench(|| cks_core::json::to_document_string(black_box(g), "2026-01-01T00:00:00.000000+00:00"));
}
