//! How fast a new session is embedded in the background, and how long a restarted server takes
//! to read the vectors back and settle the session's index; then, after a second restart, a
//! first hybrid search end to end, taken as `search_semantic` takes it (the vectors and keys
//! read, the query embedded, the session loaded with the text index kept when it was first
//! searched, its vector index settled, both rankings fused).
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
use cks_runtime::store::HistoryStore;
use cks_runtime::store::sqlite::{SqliteOptions, SqliteStore};

/// The server's allocator (see the `cks-mcp` command), so the times are the server's.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

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
    let runtime = Arc::new(Runtime::new(store.clone(), RuntimeConfig::default()));
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
    // Searched once, as a client would before the restart: the text index is kept.
    runtime.read(&session, |s, _| s.text_index().rank("sample", 1, 0.0).len()).await.unwrap();
    while store.load_text_index(&session).await.unwrap().is_none() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(embeddings);
    drop(runtime);
    drop(store);

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

    // Another restart, then a first hybrid search as `search_semantic` makes it: the session
    // loads while the vectors are read (from the start, in the background) and the query is
    // embedded; then the vector index settles and both sides rank.
    let store = Arc::new(SqliteStore::open(&path, &SqliteOptions::default()).unwrap());
    let runtime = Arc::new(Runtime::new(store, RuntimeConfig::default()));
    let started = Instant::now();
    let embeddings = runtime.enable_embeddings(model);
    let query = "generated for benchmarks number 77";
    let embedded = async {
        embeddings.load().await.unwrap();
        let vector = embeddings.embed_query(query).await.unwrap().expect("the query has known words");
        (vector, started.elapsed())
    };
    let loaded = async {
        runtime.read(&session, |_, _| ()).await.unwrap();
        started.elapsed()
    };
    let ((vector, embedded), loaded) = tokio::join!(embedded, loaded);
    let ready = started.elapsed();
    let (found, settle, text) = runtime
        .read(&session, |s, _| {
            let settling = Instant::now();
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
                (fused.len(), settled - settling, text)
            })
        })
        .await
        .unwrap();
    let took = started.elapsed();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "restart → first hybrid search: {:.0} ms ({found} found): vectors, keys and the query by {:.0} ms, session \
         loaded (text index read) by {:.0} ms, vector index settled {:.0} ms, text index ready {:.1} ms, both \
         ranked and fused {:.0} ms",
        ms(took),
        ms(embedded),
        ms(loaded),
        ms(settle),
        ms(text),
        ms(took - ready - settle - text),
    );
}
