//! Background reasoning on the SQLite store: the task queue's claim → complete round trip, and
//! a sweep — over 10,000 sessions none of which changed, over a 100,000-object session after
//! a one-object commit, and over 1,000 registered graphs none of which changed. Goals: claim → complete ≥ 2,000 tasks/s (≤ 500 µs per task); the idle
//! sweep < 10 ms.
//!
//! Run: `cargo bench -p cks-runtime --bench background`.

use divan::Bencher;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

use cks_core::ops::parse_operations;
use cks_core::sample::random_graph;
use cks_runtime::gallery::{Registration, Visibility};
use cks_runtime::store::TaskRef;
use cks_runtime::store::sqlite::{SqliteOptions, SqliteStore};
use cks_runtime::{CommitRequest, NewSession, Runtime, RuntimeConfig, Sweepers, SweepersConfig};

fn main() {
    divan::main();
}

fn sqlite_runtime() -> (tokio::runtime::Runtime, Arc<Runtime>, tempfile::TempDir) {
    let tokio = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("bench.db"), &SqliteOptions::default()).unwrap();
    (tokio, Arc::new(Runtime::new(Arc::new(store), RuntimeConfig::default())), dir)
}

const STOPPED: SweepersConfig = SweepersConfig {
    interval: Duration::from_secs(3_600),
    start: false,
    provenance_ttl: Duration::from_secs(30 * 24 * 3_600),
};

/// One task claimed and completed, from a queue of a few thousand.
#[divan::bench(sample_count = 2_000, sample_size = 1)]
fn claim_then_complete(bencher: Bencher) {
    let (tokio, runtime, _dir) = sqlite_runtime();
    let queue = runtime.tasks();
    tokio.block_on(async {
        for n in 0..2_500 {
            queue.enqueue("bench", "s", &json!({"n": n}), None).await.unwrap();
        }
    });
    bencher.bench_local(|| {
        tokio.block_on(async {
            let task = queue.claim(Some("bench")).await.unwrap().expect("a task");
            assert!(queue.complete(TaskRef::claimed(&task)).await.unwrap());
        })
    });
}

/// A sweep when none of 10,000 stored sessions changed since the last one.
#[divan::bench(sample_count = 100, sample_size = 1)]
fn sweep_10k_unchanged_sessions(bencher: Bencher) {
    let (tokio, runtime, _dir) = sqlite_runtime();
    let sweepers = tokio.block_on(async {
        for seed in 0..10_000 {
            runtime.create_session(random_graph(1, 0, seed), NewSession::default()).await.unwrap();
        }
        let sweepers = Sweepers::start(runtime.clone(), &STOPPED).await.unwrap();
        // The first pass looks at every session.
        sweepers.run_once("contradiction").await.unwrap().unwrap();
        sweepers
    });
    bencher.bench_local(|| {
        let status = tokio.block_on(sweepers.run_once("contradiction")).unwrap().unwrap();
        assert_eq!(status.last_sessions_checked, Some(0));
    });
}

/// A sweep after a one-object commit to a 100,000-object session (the commit is not timed).
#[divan::bench(args = ["contradiction", "inference_staleness", "temporal_staleness"], sample_count = 20, sample_size = 1)]
fn sweep_after_one_commit_100k(bencher: Bencher, agent_id: &str) {
    let (tokio, runtime, _dir) = sqlite_runtime();
    let (sweepers, id) = tokio.block_on(async {
        let id =
            runtime.create_session(random_graph(50_000, 50_000, 7), NewSession::default()).await.unwrap().session_id;
        let sweepers = Sweepers::start(runtime.clone(), &STOPPED).await.unwrap();
        sweepers.run_once(agent_id).await.unwrap().unwrap();
        (sweepers, id)
    });
    let mut i = 0u64;
    bencher
        .with_inputs(|| {
            i += 1;
            let ops = parse_operations(&json!([
                {"type": "update_object", "object_id": format!("n{}", i % 100), "structure_patch": {"counter": i}}
            ]))
            .unwrap();
            tokio.block_on(async {
                runtime.commit(&id, CommitRequest::operations(ops)).await.unwrap();
                // Let the sweepers hear of the commit.
                tokio::time::sleep(Duration::from_millis(2)).await;
            });
        })
        .bench_local_values(|()| {
            let status = tokio.block_on(sweepers.run_once(agent_id)).unwrap().unwrap();
            assert_eq!(status.last_sessions_checked, Some(1));
        });
}

/// A graph sweep when none of 1,000 registered graphs (one session each) changed since the last.
#[divan::bench(args = ["graph_freshness", "graph_health"], sample_count = 100, sample_size = 1)]
fn sweep_1k_unchanged_graphs(bencher: Bencher, agent_id: &str) {
    let (tokio, runtime, _dir) = sqlite_runtime();
    let sweepers = tokio.block_on(async {
        for seed in 0..1_000 {
            let id =
                runtime.create_session(random_graph(10, 10, seed), NewSession::default()).await.unwrap().session_id;
            let registration = Registration {
                name: format!("graph-{seed}"),
                session_id: id,
                description: String::new(),
                tags: String::new(),
                visibility: Visibility::Public,
                team: None,
                source_graph_name: None,
                lifecycle: None,
            };
            runtime.register_graph(registration).await.unwrap();
        }
        let sweepers = Sweepers::start(runtime.clone(), &STOPPED).await.unwrap();
        sweepers.run_once(agent_id).await.unwrap().unwrap();
        sweepers
    });
    bencher.bench_local(|| {
        let status = tokio.block_on(sweepers.run_once(agent_id)).unwrap().unwrap();
        assert_eq!(status.last_sessions_checked, Some(0));
    });
}
