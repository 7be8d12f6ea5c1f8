//! The live events of a chat turn, for a caller that watches the turn as it runs (`ai_chat`
//! behind a streaming transport: `POST /chat/stream`): the model's text as the provider streams
//! it, and each tool call as it starts and completes. Calls made through a plain `tools/call`
//! have no watcher.

use std::sync::Arc;

use cks_tools::ToolContext;
use serde_json::Value;

/// Receives a watched turn's live events.
pub trait ChatEventSink: Send + Sync {
    fn event(&self, event: ChatEvent);
}

/// One live event of a chat turn.
#[derive(Debug, Clone, PartialEq)]
pub enum ChatEvent {
    /// The next piece of the model's answer text.
    TextDelta { text: String },
    /// A tool call of the turn is about to run: its index in the turn's `tool_calls` and its
    /// arguments as pinned.
    ToolCallStarted { index: usize, name: String, arguments: Value },
    /// That call has a result: a short text of it (the start of its JSON, or an error's code and
    /// message) and whether it is an error.
    ToolCallCompleted { index: usize, name: String, arguments: Value, result_summary: String, is_error: bool },
}

/// Lets `sink` watch the `ai_chat` turn run in `ctx`.
pub fn watch_with(ctx: &mut ToolContext, sink: Arc<dyn ChatEventSink>) {
    ctx.watcher = Some(Arc::new(sink));
}

/// The sink watching the turn run in `ctx`, if any.
pub(crate) fn watching(ctx: &ToolContext) -> Option<Arc<dyn ChatEventSink>> {
    let watcher = ctx.watcher.clone()?;
    watcher.downcast::<Arc<dyn ChatEventSink>>().ok().map(|sink| (*sink).clone())
}
