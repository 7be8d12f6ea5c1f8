//! A large text (a whole graph's document) handed to the server already escaped for the messages
//! that carry it.
//!
//! A server sends a document inside its tool result's text, a JSON string, and over stdio that
//! text inside a JSON-RPC line, another. Escaped after it is written, a document costs another
//! pass over all of it (at 20,000 objects, a quarter of the server's time for
//! `serialize_knowledge`) and, at a million objects, hundreds of megabytes more. So a server may
//! offer a [`LargeTextSlot`] with the call it answers (`ToolContext::large_text`): a tool that
//! writes a document writes it escaped as many times as the slot says, leaves it in the slot, and
//! puts the slot's marker in its result where the document belongs. The server puts the text back
//! in the marker's place as it sends the result.
//!
//! Only the call the server answers is offered the slot (`Registry::answer`); calls a tool makes
//! to other tools (`Registry::call`) never are, so a document always reaches a tool as plain text.

use std::sync::{Mutex, PoisonError};

/// Where a tool leaves the one large text of its result, escaped for the server's messages.
#[derive(Debug)]
pub struct LargeTextSlot {
    marker: String,
    escapes: usize,
    text: Mutex<Option<String>>,
}

impl LargeTextSlot {
    /// A slot for a text escaped `escapes` times (1 or 2), stood for in the result by `marker`: a
    /// string no result holds otherwise (the server makes it random). Offered only with tools
    /// whose result travels as text alone (no `structuredContent` beside it).
    pub fn new(marker: String, escapes: usize) -> Self {
        LargeTextSlot { marker, escapes, text: Mutex::new(None) }
    }

    /// How many times the text left here must be escaped.
    pub fn escapes(&self) -> usize {
        self.escapes
    }

    /// The string that stands for the text in the result.
    pub fn marker(&self) -> &str {
        &self.marker
    }

    /// Leaves `text`, escaped [`Self::escapes`] times; returns the marker to put in the result in
    /// its place.
    pub fn put(&self, text: String) -> String {
        *self.text.lock().unwrap_or_else(PoisonError::into_inner) = Some(text);
        self.marker.clone()
    }

    /// The text left here, if any.
    pub fn take(&self) -> Option<String> {
        self.text.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}
