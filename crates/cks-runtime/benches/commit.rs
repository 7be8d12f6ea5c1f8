//! One-object commits on the SQLite store at 1k, 10k and 50k objects: the end-to-end cost of
//! `Runtime::commit` (apply, incremental validation, delta encoding, one SQLite transaction).
//! The goal: the 50k commit within 2× of the 1k commit.
//!
//! Run: `cargo bench -p cks-runtime --bench commit`.

use divan::Bencher;
use serde_json::json;
use std::sync::Arc;

use cks_core::ops::parse_operations;
use cks_core::sample::random_graph;
use cks_runtime::store::sqlite::{SqliteOptions, SqliteStore};
use cks_runtime::{CommitRequest, NewSession, Runtime, RuntimeConfig};

fn main() {
    divan::main();
}

#[divan::bench(args = [1_000, 10_000, 50_000], sample_count = 200, sample_size = 1)]
fn one_object_commit_sqlite(bencher: Bencher, n: usize) {
    let tokio = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("bench.db"), &SqliteOptions::default()).unwrap();
    let rt = Runtime::new(Arc::new(store), RuntimeConfig::default());
    let id =
        tokio.block_on(rt.create_session(random_graph(n / 2, n / 2, 42), NewSession::default())).unwrap().session_id;
    let mut i = 0u64;
    bencher.bench_local(|| {
        i += 1;
        let ops = parse_operations(&json!([
            {"type": "update_object", "object_id": format!("n{}", i % 100), "structure_patch": {"counter": i}}
        ]))
        .unwrap();
        tokio.block_on(rt.commit(&id, CommitRequest::operations(ops))).unwrap()
    });
}
