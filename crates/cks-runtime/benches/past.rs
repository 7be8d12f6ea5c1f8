//! Reads of the past on the SQLite store: a one-hop subgraph query on a 20k-object graph as it
//! was 30 versions back (`Runtime::read_at`, which rewinds the loaded state through those
//! versions' changes), against the same query on the version rebuilt from snapshot and deltas.
//! The goal: the read of the past within 20 ms.
//!
//! Run: `cargo bench -p cks-runtime --bench past`.

use divan::Bencher;
use serde_json::json;
use std::sync::Arc;

use cks_core::ops::parse_operations;
use cks_core::sample::random_graph;
use cks_core::subgraph::{SubgraphQuery, query_subgraph};
use cks_runtime::store::sqlite::{SqliteOptions, SqliteStore};
use cks_runtime::{CommitRequest, NewSession, Runtime, RuntimeConfig};

fn main() {
    divan::main();
}

const BACK: usize = 30;

/// A 20k-object session with 40 one-object commits after the version read.
fn session() -> (tokio::runtime::Runtime, Runtime, String, String, tempfile::TempDir) {
    let tokio = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("bench.db"), &SqliteOptions::default()).unwrap();
    let rt = Runtime::new(Arc::new(store), RuntimeConfig::default());
    let id =
        tokio.block_on(rt.create_session(random_graph(10_000, 10_000, 42), NewSession::default())).unwrap().session_id;
    let mut versions = Vec::new();
    for i in 0..=BACK {
        let ops = parse_operations(&json!([
            {"type": "update_object", "object_id": format!("n{i}"), "structure_patch": {"counter": i}}
        ]))
        .unwrap();
        versions.push(tokio.block_on(rt.commit(&id, CommitRequest::operations(ops))).unwrap().version.version_id);
    }
    let back = versions[0].clone();
    (tokio, rt, id, back, dir)
}

fn query() -> SubgraphQuery {
    SubgraphQuery { seed_ids: vec!["n1".into(), "n2".into()], depth: 1, ..Default::default() }
}

#[divan::bench(sample_count = 50, sample_size = 1)]
fn subgraph_30_versions_back(bencher: Bencher) {
    let (tokio, rt, id, back, _dir) = session();
    bencher.bench_local(|| {
        tokio.block_on(rt.read_at(&id, &back, |structure| query_subgraph(structure, &query()).returned_nodes)).unwrap()
    });
}

#[divan::bench(sample_count = 10, sample_size = 1)]
fn subgraph_30_versions_back_rebuilt(bencher: Bencher) {
    let (tokio, rt, id, back, _dir) = session();
    bencher.bench_local(|| {
        let rebuilt = tokio.block_on(rt.version_state(&id, &back)).unwrap();
        query_subgraph(&rebuilt, &query()).returned_nodes
    });
}
