//! Shared test harness: a scripted chat model, a registry with `ai_chat`, and a runtime in memory.

#![allow(dead_code, unreachable_pub)]

use async_trait::async_trait;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use cks_chat::{AiChat, AiChatConfig, ChatModel};
use cks_llm::{ChatRequest, ChatResponse, ContentBlock, LlmError, Message, ProviderKind, Role, StopReason, Usage};
use cks_runtime::store::memory::MemoryStore;
use cks_runtime::{Runtime, RuntimeConfig};
use cks_tools::{Registry, ToolContext};

/// One scripted answer.
#[derive(Debug)]
pub enum Answer {
    Text(String),
    Tools(Vec<(String, Value)>),
    Fail(LlmError),
}

/// A chat model that plays answers in order, records requests, and then keeps answering
/// `fallback` (tool calls forever, or a text).
pub struct Scripted {
    queue: Mutex<VecDeque<Answer>>,
    pub requests: Mutex<Vec<ChatRequest>>,
    fallback: Box<dyn Fn() -> Answer + Send + Sync>,
    ids: AtomicUsize,
    calls: AtomicUsize,
    /// Keep every request (off for long property runs, where histories would pile up).
    record: bool,
}

impl Scripted {
    pub fn new(answers: Vec<Answer>) -> Arc<Self> {
        Self::with_fallback(answers, || Answer::Text("done".into()))
    }

    pub fn with_fallback(answers: Vec<Answer>, fallback: impl Fn() -> Answer + Send + Sync + 'static) -> Arc<Self> {
        Arc::new(Scripted {
            queue: Mutex::new(answers.into()),
            requests: Mutex::new(Vec::new()),
            fallback: Box::new(fallback),
            ids: AtomicUsize::new(0),
            calls: AtomicUsize::new(0),
            record: true,
        })
    }

    /// Like [`Scripted::with_fallback`], counting requests without keeping them.
    pub fn unrecorded(fallback: impl Fn() -> Answer + Send + Sync + 'static) -> Arc<Self> {
        Arc::new(Scripted {
            queue: Mutex::new(VecDeque::new()),
            requests: Mutex::new(Vec::new()),
            fallback: Box::new(fallback),
            ids: AtomicUsize::new(0),
            calls: AtomicUsize::new(0),
            record: false,
        })
    }

    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    pub fn request(&self, i: usize) -> ChatRequest {
        self.requests.lock().unwrap()[i].clone()
    }
}

#[async_trait]
impl ChatModel for Scripted {
    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, LlmError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.record {
            self.requests.lock().unwrap().push(request);
        }
        let answer = self.queue.lock().unwrap().pop_front().unwrap_or_else(|| (self.fallback)());
        let content = match answer {
            Answer::Text(text) => vec![ContentBlock::text(text)],
            Answer::Tools(calls) => calls
                .into_iter()
                .map(|(name, input)| ContentBlock::ToolUse {
                    id: format!("call_{}", self.ids.fetch_add(1, Ordering::Relaxed)),
                    name,
                    input,
                    provider_state: None,
                })
                .collect(),
            Answer::Fail(error) => return Err(error),
        };
        Ok(ChatResponse {
            message: Message { role: Role::Assistant, content },
            stop_reason: StopReason::EndTurn,
            usage: Usage { input_tokens: 100, output_tokens: 10 },
            model: "scripted-model".into(),
            provider: ProviderKind::Anthropic,
            requests: 1,
        })
    }
}

pub struct Harness {
    pub registry: Arc<Registry>,
    pub ctx: ToolContext,
}

impl Harness {
    pub fn new(model: Arc<Scripted>) -> Self {
        Self::with_config(model, AiChatConfig::default(), |_| {})
    }

    pub fn with_config(model: Arc<Scripted>, config: AiChatConfig, extra: impl FnOnce(&mut Registry)) -> Self {
        Self::build(model, config, Registry::standard(), extra)
    }

    /// Any chat model (e.g. the real LLM client) over `registry` plus `ai_chat`.
    pub fn build(
        model: Arc<dyn ChatModel>,
        config: AiChatConfig,
        mut registry: Registry,
        extra: impl FnOnce(&mut Registry),
    ) -> Self {
        let runtime = Arc::new(Runtime::new(Arc::new(MemoryStore::new()), RuntimeConfig::default()));
        registry.register(Arc::new(AiChat::with_model(config, model)));
        extra(&mut registry);
        let registry = Arc::new(registry);
        let mut ctx = ToolContext::new(runtime);
        ctx.registry = Some(registry.clone());
        Harness { registry, ctx }
    }

    pub async fn session(&self, graph: Value) -> String {
        let structure = cks_core::json::parse_value(graph).unwrap();
        self.ctx.runtime.create_session(structure, Default::default()).await.unwrap().session_id
    }

    pub async fn chat(&self, args: Value) -> Value {
        self.registry.call("ai_chat", args, &self.ctx).await.unwrap()
    }

    pub async fn state(&self, session: &str) -> (String, usize) {
        let hash = self.ctx.runtime.read(session, |s, _| s.root_hash().to_hex()).await.unwrap();
        (hash, self.ctx.runtime.list_versions(session).await.unwrap().len())
    }
}

pub fn graph(prefix: &str) -> Value {
    json!({"objects": [
        {"identity": {"id": format!("{prefix}-a"), "type": "Claim", "name": format!("{prefix} alpha")}, "structure": {"note": "ünïcode ✓"}},
        {"identity": {"id": format!("{prefix}-b"), "type": "Claim", "name": format!("{prefix} beta")}},
        {"identity": {"id": format!("{prefix}-r"), "type": "Relation", "name": "a supports b"},
         "structure": {"participants": [format!("{prefix}-a"), format!("{prefix}-b")], "relation_type": "supports"}}
    ]})
}

pub fn add_object(id: &str) -> Value {
    json!({"operations": [{"type": "add_object", "identity": {"id": id, "type": "Note", "name": id}}]})
}

pub fn llm_error(message: &str) -> LlmError {
    LlmError::Server(cks_llm::ErrorContext::new(ProviderKind::Anthropic, "scripted-model", message))
}
