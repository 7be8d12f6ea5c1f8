//! How fast a new session is embedded in the background, and how long a restarted server takes
//! to read the vectors back and settle the session's index; then, after a second restart, a
//! first hybrid search end to end, taken as `search_semantic` takes it (the vectors and keys
//! read, the query embedded, the session loaded, its vector index settled, its text index built,
//! both rankings fused).
//!
//! Run: `cargo run --release -p cks-runtime --example embedding_throughput -- MODEL_DIR [OBJECTS]`
//! (MODEL_DIR: a static model, e.g. `~/.cache/cks-mcp/models/minilm-l6-static`; OBJECTS:
//! searchable objects, default 100,000). The session is a sample graph on SQLite in a temporary
//! directory.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cks_core::fusion;
use cks_embed::StaticModel;
use cks_runtime::runtime::{NewSession, Runtime, RuntimeConfig};
use cks_runtime::store::sqlite::{SqliteOptions, SqliteStore};

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let model_dir = args.next().expect("usage: embedding_throughput MODEL_DIR [OBJECTS]");
    let objects: usize = args.next().map_or(100_000, |n| n.parse().expect("OBJECTS is a number"));
    let model = Arc::new(StaticModel::load(std::path::Path::new(&model_dir)).expect("a static model"));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bench.db");
    let graph = cks_core::sample::random_graph(objects, 0, 42);

    let store = Arc::new(SqliteStore::open(&path, &SqliteOptions::default()).unwrap());
    let runtime = Arc::new(Runtime::new(store, RuntimeConfig::default()));
    let embeddings = runtime.enable_embeddings(model.clone());
    let session = runtime.create_session(graph, NewSession::default()).await.unwrap().session_id;
    let started = Instant::now();
    loop {
        let pending = runtime.read(&session, |s, _| embeddings.settle(s, |_, synced| synced.pending)).await.unwrap();
        if pending == 0 {
            break;
        }
        embeddings.idle_within(Duration::from_millis(50)).await;
    }
    let took = started.elapsed();
    println!(
        "embedded {objects} objects in the background in {:.2} s: {:.0} objects/s ({} embedded, model {})",
        took.as_secs_f64(),
        objects as f64 / took.as_secs_f64(),
        embeddings.status().embedded,
        embeddings.model()
    );
    // The text keys are kept in the background too: a restart reads them.
    assert!(embeddings.idle_within(Duration::from_secs(60)).await);
    drop(embeddings);
    drop(runtime);

    // A restart: the vectors are read from the store and the session's index settled.
    let store = Arc::new(SqliteStore::open(&path, &SqliteOptions::default()).unwrap());
    let runtime = Arc::new(Runtime::new(store, RuntimeConfig::default()));
    let started = Instant::now();
    let embeddings = runtime.enable_embeddings(model.clone());
    embeddings.load().await.unwrap();
    let loaded = started.elapsed();
    runtime.read(&session, |_, _| ()).await.unwrap();
    let session_loaded = started.elapsed();
    let pending = runtime.read(&session, |s, _| embeddings.settle(s, |_, synced| synced.pending)).await.unwrap();
    let settled = started.elapsed();
    println!(
        "restart: vectors and keys read in {:.0} ms, session loaded by {:.0} ms, index settled by {:.0} ms ({pending} \
         pending, {} keys made)",
        loaded.as_secs_f64() * 1e3,
        session_loaded.as_secs_f64() * 1e3,
        settled.as_secs_f64() * 1e3,
        embeddings.status().keys_made,
    );
    drop(embeddings);
    drop(runtime);

    // Another restart, then a first hybrid search.
    let store = Arc::new(SqliteStore::open(&path, &SqliteOptions::default()).unwrap());
    let runtime = Arc::new(Runtime::new(store, RuntimeConfig::default()));
    let started = Instant::now();
    let embeddings = runtime.enable_embeddings(model);
    embeddings.load().await.unwrap();
    let query = "generated for benchmarks number 77";
    let vector = embeddings.embed_query(query).await.unwrap().expect("the query has known words");
    let read = Instant::now();
    let (found, settle, text) = runtime
        .read(&session, |s, _| {
            let loaded = Instant::now();
            embeddings.settle(s, |index, _| {
                let settled = Instant::now();
                let by_words = s.text_index().rank(query, 100, 0.0);
                let text = settled.elapsed();
                let by_meaning = index.rank(&vector, 100);
                let mut candidates: BTreeMap<&str, (Option<f64>, Option<f64>)> = BTreeMap::new();
                for (id, score) in by_words {
                    candidates.entry(id).or_default().0 = Some(score);
                }
                for (id, cosine) in by_meaning {
                    candidates.entry(id).or_default().1 = Some(f64::from(cosine));
                }
                let fused = fusion::fuse(candidates.into_iter().map(|(id, (b, c))| (id, b, c)), 0.5, 10);
                (fused.len(), settled - loaded, text)
            })
        })
        .await
        .unwrap();
    let took = started.elapsed();
    let session = read.elapsed() - settle - text;
    println!(
        "restart → first hybrid search: {:.0} ms ({found} found): vectors, keys and the query {:.0} ms, session \
         loaded and ranked {:.0} ms, index settled {:.0} ms, text index built {:.0} ms",
        took.as_secs_f64() * 1e3,
        (took - read.elapsed()).as_secs_f64() * 1e3,
        session.as_secs_f64() * 1e3,
        settle.as_secs_f64() * 1e3,
        text.as_secs_f64() * 1e3,
    );
}
