//! The observers of a turn: progress notifications and a watching caller's live events.

use super::*;

pub(crate) struct Progress {
    pub(crate) sink: Arc<dyn ProgressSink>,
    pub(crate) step: std::sync::atomic::AtomicU64,
}

impl Progress {
    fn report(&self, message: String) {
        let step = self.step.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        self.sink.report(step as f64, None, Some(message));
    }
}

/// What the caller watches of a turn: progress notifications (MCP) and live events (streamed
/// chats), each when asked for.
pub(crate) struct Watchers {
    pub(crate) progress: Option<Progress>,
    pub(crate) events: Option<Arc<dyn ChatEventSink>>,
}

impl TurnObserver for Watchers {
    fn llm_call(&self, iteration: usize) {
        if let Some(progress) = &self.progress {
            progress.report(format!("LLM round trip {}", iteration + 1));
        }
    }

    fn tool_call(&self, name: &str) {
        if let Some(progress) = &self.progress {
            progress.report(format!("tool {name}"));
        }
    }

    fn wants_text(&self) -> bool {
        self.events.is_some()
    }

    fn text_delta(&self, text: &str) {
        if let Some(events) = &self.events {
            events.event(ChatEvent::TextDelta { text: text.to_owned() });
        }
    }

    fn tool_call_started(&self, index: usize, name: &str, arguments: &Value) {
        if let Some(events) = &self.events {
            events.event(ChatEvent::ToolCallStarted { index, name: name.to_owned(), arguments: arguments.clone() });
        }
    }

    fn tool_call_completed(&self, index: usize, name: &str, arguments: &Value, result: &Value, is_error: bool) {
        if let Some(events) = &self.events {
            events.event(ChatEvent::ToolCallCompleted {
                index,
                name: name.to_owned(),
                arguments: arguments.clone(),
                result_summary: result_summary(result, is_error),
                is_error,
            });
        }
    }
}
