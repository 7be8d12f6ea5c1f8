//! `search_semantic` on a 200,000-object graph (100,000 searchable nodes, 100,000 relations),
//! through the registry as a client calls it, once every object has its vector: `hybrid` (both
//! sides, two rounds) and `lexical`; and `hybrid` over a million nodes (no relations, so that it
//! fits a bench's memory). The goals, the query's embedding included: hybrid ≤ 10 ms at 100k
//! searchable objects, ≤ 25 ms at 1M.
//!
//! The embedder is a stand-in (384 dimensions, as the default model's; pseudo-random from the
//! text), so the ranking is meaningless and only the search's own cost is measured: the model's
//! cost per query is measured apart (`cargo bench -p cks-embed --bench encoder`), and a search
//! by meaning costs both.
//!
//! Run: `cargo bench -p cks-tools --bench search`.

use divan::Bencher;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

use cks_core::sample::random_graph;
use cks_embed::{EmbedError, Embedder};
use cks_runtime::store::memory::MemoryStore;
use cks_runtime::{NewSession, Runtime, RuntimeConfig};
use cks_tools::{Registry, ToolContext};

fn main() {
    divan::main();
}

#[derive(Debug)]
struct StandIn;

#[async_trait::async_trait]
impl Embedder for StandIn {
    fn model(&self) -> &str {
        "stand-in"
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts.iter().map(|t| vector(t)).collect())
    }

    fn batch_size(&self) -> usize {
        1024
    }
}

fn vector(text: &str) -> Vec<f32> {
    let mut state =
        text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)) | 1;
    (0..384)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % 2001) as f32 / 1000.0 - 1.0
        })
        .collect()
}

struct Setup {
    tokio: tokio::runtime::Runtime,
    ctx: ToolContext,
    registry: Registry,
    session: String,
}

fn setup(nodes: usize, relations: usize) -> Setup {
    let tokio = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let runtime = Arc::new(Runtime::new(Arc::new(MemoryStore::new()), RuntimeConfig::default()));
    // The embedding worker is a task of this runtime.
    let embeddings = {
        let _entered = tokio.enter();
        runtime.enable_embeddings(Arc::new(StandIn))
    };
    let ctx = ToolContext::new(runtime.clone());
    let registry = Registry::standard();
    let session = tokio.block_on(async {
        let id = runtime.create_session(random_graph(nodes, relations, 42), NewSession::default()).await.unwrap();
        // The first search queues every text; the worker embeds them all before the timing.
        let args = json!({"session_id": id.session_id, "query": "warm up"});
        let _ = registry.call("search_semantic", args, &ctx).await;
        assert!(embeddings.idle_within(Duration::from_secs(600)).await, "embedding never finished");
        id.session_id
    });
    Setup { tokio, ctx, registry, session }
}

fn search(bencher: Bencher, mode: &str, nodes: usize, relations: usize) {
    let Setup { tokio, ctx, registry, session } = setup(nodes, relations);
    let queries = ["Concept 421 sample", "generated for benchmarks number 77", "t3 Person", "Claim 99999"];
    let mut i = 0;
    bencher.bench_local(|| {
        i += 1;
        let args = json!({"session_id": session, "query": queries[i % queries.len()], "top_k": 10, "depth": 0,
            "mode": mode});
        let result: Value = tokio.block_on(registry.call("search_semantic", args, &ctx)).unwrap();
        assert_eq!(result["status"], "success", "{result}");
        if mode == "hybrid" {
            assert_eq!(result["embeddings"]["pending"], 0, "every object has its vector");
        }
        result
    });
}

#[divan::bench(sample_count = 40)]
fn hybrid_100k(bencher: Bencher) {
    search(bencher, "hybrid", 100_000, 100_000);
}

#[divan::bench(sample_count = 40)]
fn lexical_100k(bencher: Bencher) {
    search(bencher, "lexical", 100_000, 100_000);
}

#[divan::bench(sample_count = 20)]
fn hybrid_1m(bencher: Bencher) {
    search(bencher, "hybrid", 1_000_000, 0);
}
