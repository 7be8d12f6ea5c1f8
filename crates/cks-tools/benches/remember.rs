//! `remember` of a 2,000-character text on a 100,000-object session (50,000 nodes, 50,000
//! relations), through the registry as a client calls it, the model a local scripted server that
//! answers at once: the server's own work (the request, reading the answer, resolving ten
//! entities against the graph, planning and committing) with the model's time left out. Goal:
//! p50 ≤ 20 ms.
//!
//! Each call remembers another text (a text remembered before changes nothing and would cost
//! next to nothing), so the session grows by a few objects a call.
//!
//! Run: `cargo bench -p cks-tools --features testing --bench remember`.

use divan::Bencher;
use serde_json::{Value, json};

use cks_core::sample::random_graph;
use cks_runtime::NewSession;
use cks_testkit::{ProviderServer, Reply};
use cks_tools::Registry;
use cks_tools::testing::{llm_context, llm_env};

fn main() {
    divan::main();
}

/// The model's answer: five entities the graph has (`known`: name and type), five new, and facts
/// between them, two of them single-valued.
fn answer(call: usize, known: &[(String, String)]) -> Value {
    let facts: Vec<Value> = (0..8)
        .map(|i| {
            json!({"subject": format!("Newcomer {call}-{}", i % 5), "predicate": if i < 2 { "works_on" } else { "mentions" },
                   "object": known[i % 5].0, "single_valued": i < 2, "statement": "A sentence of the text."})
        })
        .collect();
    let known: Vec<Value> = known.iter().map(|(name, ty)| json!({"name": name, "type": ty})).collect();
    let new: Vec<Value> = (0..5)
        .map(|i| json!({"name": format!("Newcomer {call}-{i}"), "type": "Person", "attributes": {"role": "analyst"}}))
        .collect();
    json!({"entities": known.into_iter().chain(new).collect::<Vec<_>>(), "facts": facts})
}

fn text(call: usize) -> String {
    let mut text = format!("Note {call}. ");
    while text.len() < 2_000 {
        text.push_str("Newcomers joined and worked on several concepts of the sample graph this week. ");
    }
    text.truncate(2_000);
    text
}

#[divan::bench(sample_count = 40)]
fn remember_2000_chars_100k(bencher: Bencher) {
    let tokio = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let graph = random_graph(50_000, 50_000, 42);
    let known: Vec<(String, String)> = (0..5)
        .map(|i| {
            let object = graph.get(&cks_core::sample::node_id(1000 + i * 4)).unwrap();
            (object.identity.name.to_string(), object.identity.r#type.to_string())
        })
        .collect();
    let (server, ctx, session) = tokio.block_on(async {
        let server = ProviderServer::start().await;
        let ctx = llm_context(&llm_env("openai_compatible", &server.base_url()));
        let created = ctx.runtime.create_session(graph, NewSession::default()).await.unwrap();
        (server, ctx, created.session_id)
    });
    let registry = Registry::standard();
    // The first call builds the session's text index: not a call's time.
    let mut call = 0;
    let remember = |call: usize| {
        server.push(Reply::Json(answer(call, &known)));
        let args = json!({"session_id": session, "text": text(call)});
        let result: Value = tokio.block_on(registry.call("remember", args, &ctx)).unwrap();
        assert!(result.get("error").is_none(), "{result}");
        assert_eq!(result["matched"].as_array().map(Vec::len), Some(5), "{result}");
        result
    };
    remember(call);
    bencher.bench_local(|| {
        call += 1;
        remember(call)
    });
}
