//! The gallery at 10,000 registered graphs on the SQLite store: listing what a caller may discover
//! and searching it. The goal: each at most 5 ms.
//!
//! Run: `cargo bench -p cks-runtime --bench gallery`.

use divan::Bencher;
use std::sync::Arc;

use cks_runtime::gallery::{GraphFilter, Registration, Visibility};
use cks_runtime::store::sqlite::{SqliteOptions, SqliteStore};
use cks_runtime::{NewSession, Runtime, RuntimeConfig};

const GRAPHS: usize = 10_000;

fn main() {
    divan::main();
}

/// A runtime with 10,000 registered graphs over 100 sessions: a third each private, team, public.
fn gallery() -> (tokio::runtime::Runtime, Runtime, tempfile::TempDir) {
    let tokio = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("bench.db"), &SqliteOptions::default()).unwrap();
    let rt = Runtime::new(Arc::new(store), RuntimeConfig::default());
    tokio.block_on(async {
        let mut sessions = Vec::new();
        for _ in 0..100 {
            sessions.push(rt.create_session(Default::default(), NewSession::default()).await.unwrap().session_id);
        }
        for i in 0..GRAPHS {
            let visibility = [Visibility::Private, Visibility::Team, Visibility::Public][i % 3];
            rt.register_graph(Registration {
                name: format!("graph {i}"),
                session_id: sessions[i % sessions.len()].clone(),
                description: format!("A graph about topic {} and more", i % 97),
                tags: format!("tag{},shared", i % 13),
                visibility,
                team: (visibility == Visibility::Team).then(|| format!("team{}", i % 5)),
                source_graph_name: None,
                lifecycle: None,
            })
            .await
            .unwrap();
        }
    });
    (tokio, rt, dir)
}

#[divan::bench(sample_count = 50)]
fn list_graphs_10k(bencher: Bencher) {
    let (tokio, rt, _dir) = gallery();
    let filter = GraphFilter { team: Some("team1".into()), ..Default::default() };
    bencher.bench_local(|| tokio.block_on(rt.graphs(&filter)).unwrap().len());
}

#[divan::bench(sample_count = 50)]
fn search_graphs_10k(bencher: Bencher) {
    let (tokio, rt, _dir) = gallery();
    let filter = GraphFilter { query: Some("TOPIC 42".into()), ..Default::default() };
    bencher.bench_local(|| tokio.block_on(rt.graphs(&filter)).unwrap().len());
}
