//! `compare_graphs` of two 20,000-object graphs (10k nodes + 10k relations each, a tenth of the
//! nodes changed on one side), through the registry as a client calls it. The goal: ≤ 100 ms.
//!
//! Run: `cargo bench -p cks-tools --bench gallery`.

use divan::Bencher;
use serde_json::{Value, json};
use std::sync::Arc;

use cks_core::sample::random_graph;
use cks_runtime::store::memory::MemoryStore;
use cks_runtime::{NewSession, Runtime, RuntimeConfig};
use cks_tools::{Registry, ToolContext};

fn main() {
    divan::main();
}

#[divan::bench(sample_count = 20)]
fn compare_graphs_20k(bencher: Bencher) {
    let tokio = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let runtime = Arc::new(Runtime::new(Arc::new(MemoryStore::new()), RuntimeConfig::default()));
    let ctx = ToolContext::new(runtime.clone());
    let registry = Registry::standard();
    let a = random_graph(10_000, 10_000, 7);
    let mut b = a.clone();
    let mut log = Default::default();
    for id in a.objects().filter(|o| !o.is_relation()).map(|o| o.id().to_owned()).step_by(10).collect::<Vec<_>>() {
        let mut changed = cks_core::KnowledgeObject::clone(b.get(&id).unwrap());
        changed.structure.insert("changed", json!(true));
        b.put(changed, &mut log).unwrap();
    }
    let (a, b) = tokio.block_on(async {
        let a = runtime.create_session(a, NewSession::default()).await.unwrap().session_id;
        let b = runtime.create_session(b, NewSession::default()).await.unwrap().session_id;
        (a, b)
    });
    let args = json!({"graph_a_session_id": a, "graph_b_session_id": b});
    bencher.bench_local(|| {
        let result: Value = tokio.block_on(registry.call("compare_graphs", args.clone(), &ctx)).unwrap();
        assert_eq!(result["differences"].as_array().unwrap().len(), 1_000);
        result
    });
}
