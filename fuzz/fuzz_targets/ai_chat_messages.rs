//! `ai_chat`'s `messages` argument, arbitrary JSON: through the registry into a turn against a
//! scripted model on a session in memory, and the decoded history encoded for every provider.
//! No input panics; every answer is a result object (a reply or a business error), and the turn
//! never touches another session.
#![no_main]

use std::sync::{Arc, LazyLock};

use async_trait::async_trait;
use cks_chat::{AiChat, AiChatConfig, ChatModel};
use cks_llm::{ChatRequest, ChatResponse, ContentBlock, LlmError, Message, ProviderKind, Role, StopReason, Usage};
use cks_runtime::store::memory::MemoryStore;
use cks_runtime::{Runtime, RuntimeConfig};
use cks_tools::{Registry, ToolContext};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

/// Answers every request with a short text, so each turn is one round trip.
struct Echo;

#[async_trait]
impl ChatModel for Echo {
    async fn chat(&self, request: ChatRequest) -> Result<ChatResponse, LlmError> {
        Ok(ChatResponse {
            message: Message { role: Role::Assistant, content: vec![ContentBlock::text(format!("{} messages", request.messages.len()))] },
            stop_reason: StopReason::EndTurn,
            usage: Usage::default(),
            model: "echo".into(),
            provider: ProviderKind::Anthropic,
            requests: 1,
        })
    }
}

struct World {
    tokio: tokio::runtime::Runtime,
    registry: Arc<Registry>,
    ctx: ToolContext,
    session: String,
    bystander: String,
    bystander_versions: usize,
}

static WORLD: LazyLock<World> = LazyLock::new(|| {
    let tokio = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let runtime = Arc::new(Runtime::new(Arc::new(MemoryStore::new()), RuntimeConfig::default()));
    let mut registry = Registry::standard();
    registry.register(Arc::new(AiChat::with_model(AiChatConfig::default(), Arc::new(Echo))));
    let registry = Arc::new(registry);
    let mut ctx = ToolContext::new(runtime.clone());
    ctx.registry = Some(registry.clone());
    let (session, bystander) = tokio.block_on(async {
        let a = runtime.create_session(Default::default(), Default::default()).await.unwrap().session_id;
        let b = runtime.create_session(Default::default(), Default::default()).await.unwrap().session_id;
        (a, b)
    });
    let bystander_versions = tokio.block_on(runtime.list_versions(&bystander)).unwrap().len();
    World { tokio, registry, ctx, session, bystander, bystander_versions }
});

fuzz_target!(|data: &[u8]| {
    cks_llm::fuzzing::history(data);
    let Ok(messages) = serde_json::from_slice::<Value>(data) else { return };
    let world = &*WORLD;
    let args = json!({"session_id": world.session, "messages": messages});
    let result = world.tokio.block_on(world.registry.call("ai_chat", args, &world.ctx)).unwrap();
    assert!(result.get("reply").is_some() || result.get("error").is_some(), "neither reply nor error: {result}");
    let bystander_versions = world.tokio.block_on(world.ctx.runtime.list_versions(&world.bystander)).unwrap();
    assert_eq!(bystander_versions.len(), world.bystander_versions, "another session changed");
});
