//! Helpers for tests of tools and of what calls them (the `testing` feature): a runtime on the in-memory store, sessions made from
//! JSON, and calls through the standard registry (so argument and session checks run too).

use serde_json::{Value, json};
use std::sync::Arc;

use cks_runtime::store::memory::MemoryStore;
use cks_runtime::{NewSession, Runtime, RuntimeConfig};

use crate::{Registry, ToolContext};

pub fn context() -> ToolContext {
    ToolContext::new(Arc::new(Runtime::new(Arc::new(MemoryStore::new()), RuntimeConfig::default())))
}

/// A new session holding `structure` (canonical CKS JSON) with one first version.
pub async fn session(ctx: &ToolContext, structure: Value) -> String {
    let structure = cks_core::json::parse_value(structure).expect("test structure parses");
    let options = NewSession { first_version: Some(Default::default()), ..Default::default() };
    ctx.runtime.create_session(structure, options).await.expect("session is created").session_id
}

/// Calls a tool of the standard registry.
pub async fn call(ctx: &ToolContext, name: &str, args: Value) -> Value {
    Registry::standard().call(name, args, ctx).await.expect("the tool is registered")
}

/// An object in canonical JSON.
pub fn obj(id: &str, ty: &str, name: &str, structure: Value) -> Value {
    serde_json::json!({"identity": {"id": id, "type": ty, "name": name}, "structure": structure})
}

/// A relation in canonical JSON.
pub fn rel(id: &str, participants: &[&str], relation_type: &str) -> Value {
    obj(id, "Relation", id, serde_json::json!({"participants": participants, "relation_type": relation_type}))
}

/// A structure in canonical JSON.
pub fn structure(objects: Vec<Value>) -> Value {
    serde_json::json!({"version": "1.0", "objects": objects})
}

/// The API key configured in LLM test contexts; it must never appear in a result.
pub const TEST_KEY: &str = "sk-test-SECRET-7f3a9c";

/// Installs the rustls crypto provider reqwest needs (once per test binary).
pub fn install_crypto() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// The environment of an LLM client for `provider` whose every base URL points at `base` (a testkit
/// server), with keys for every provider, one quick retry and no model-list cache.
pub fn llm_env(provider: &str, base: &str) -> Vec<(String, String)> {
    [
        ("CKS_LLM_PROVIDER", provider.to_owned()),
        ("ANTHROPIC_API_KEY", TEST_KEY.to_owned()),
        ("ANTHROPIC_BASE_URL", base.to_owned()),
        ("CKS_OPENAI_API_KEY", TEST_KEY.to_owned()),
        ("CKS_OPENAI_BASE_URL", format!("{base}/v1")),
        ("CKS_GOOGLE_API_KEY", TEST_KEY.to_owned()),
        ("CKS_GOOGLE_BASE_URL", format!("{base}/v1beta")),
        ("CKS_OLLAMA_HOST", base.to_owned()),
        ("CKS_LLM_MAX_RETRIES", "1".to_owned()),
        ("CKS_LLM_MODELS_TTL_SECONDS", "0".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// A context whose LLM client is configured from `env` (see [`llm_env`]).
pub fn llm_context(env: &[(String, String)]) -> ToolContext {
    install_crypto();
    let client = cks_llm::LlmClient::from_env(|name| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
        .expect("the test LLM configuration is valid");
    let mut ctx = context();
    ctx.llm = crate::LlmAccess::Ready(client);
    ctx
}

/// A serialized document (a JSON string value) parsed, without the per-call `_cks_metadata`
/// stamp, so two serializations of the same structure compare equal.
pub fn document(text: &Value) -> Value {
    let mut document: Value = serde_json::from_str(text.as_str().expect("a serialized document")).unwrap();
    if let Value::Object(map) = &mut document {
        map.remove("_cks_metadata");
    }
    document
}

pub use cks_testkit::web::{HttpServer, Reply};

/// Queues a task of `task_type` on `session_id` and returns its id.
pub async fn queue(ctx: &ToolContext, task_type: &str, session_id: &str, payload: Value) -> i64 {
    ctx.runtime.tasks().enqueue(task_type, session_id, &payload, None).await.unwrap().unwrap()
}

/// A session where a MutualExclusionRule forbids relations s1 (supports) and c1 (contradicts)
/// between e and t, which it holds, plus `more`.
pub async fn contradicted_session(ctx: &ToolContext, more: Vec<Value>) -> String {
    let rule = json!({"relation_type_a": "supports", "relation_type_b": "contradicts"});
    let mut objects = vec![
        obj("rule", "MutualExclusionRule", "rule", rule),
        obj("e", "Planet", "Earth", json!({})),
        obj("t", "Claim", "Theory", json!({})),
        rel("s1", &["e", "t"], "supports"),
        rel("c1", &["e", "t"], "contradicts"),
    ];
    objects.extend(more);
    session(ctx, structure(objects)).await
}

/// Claims the next inference conflict through the tool and returns the task.
pub async fn claim(ctx: &ToolContext) -> Value {
    call(ctx, "claim_conflict_task", json!({"task_type": "inference_conflict"})).await["task"].clone()
}

/// A stored chat of `session` whose title and one message are `text`.
pub fn chat(chat_id: &str, session: &str, text: &str) -> cks_runtime::store::ChatRow {
    cks_runtime::store::ChatRow {
        chat_id: chat_id.into(),
        session_id: session.into(),
        title: text.into(),
        messages: serde_json::json!([{"role": "user", "content": text}]).to_string(),
        message_count: 1,
        tool_calls: "[]".into(),
        created_at: "2026-01-01T00:00:00Z".into(),
        updated_at: "2026-01-01T00:00:00Z".into(),
        revision: 1,
    }
}
