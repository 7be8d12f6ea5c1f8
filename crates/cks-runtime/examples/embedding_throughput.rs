//! How fast a new session is embedded in the background, and how long a restarted server takes
//! to read the vectors back and settle the session's index.
//!
//! Run: `cargo run --release -p cks-runtime --example embedding_throughput -- MODEL_DIR [OBJECTS]`
//! (MODEL_DIR: a static model, e.g. `~/.cache/cks-mcp/models/minilm-l6-static`; OBJECTS:
//! searchable objects, default 100,000). The session is a sample graph on SQLite in a temporary
//! directory.

use std::sync::Arc;
use std::time::{Duration, Instant};

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
    drop(embeddings);
    drop(runtime);

    // A restart: the vectors are read from the store and the session's index settled.
    let store = Arc::new(SqliteStore::open(&path, &SqliteOptions::default()).unwrap());
    let runtime = Arc::new(Runtime::new(store, RuntimeConfig::default()));
    let started = Instant::now();
    let embeddings = runtime.enable_embeddings(model);
    embeddings.load().await.unwrap();
    let loaded = started.elapsed();
    runtime.read(&session, |_, _| ()).await.unwrap();
    let session_loaded = started.elapsed();
    let pending = runtime.read(&session, |s, _| embeddings.settle(s, |_, synced| synced.pending)).await.unwrap();
    let settled = started.elapsed();
    println!(
        "restart: vectors read in {:.0} ms, session loaded by {:.0} ms, index settled by {:.0} ms ({pending} pending)",
        loaded.as_secs_f64() * 1e3,
        session_loaded.as_secs_f64() * 1e3,
        settled.as_secs_f64() * 1e3
    );
}
