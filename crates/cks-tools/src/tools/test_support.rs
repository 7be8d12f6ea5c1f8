//! Helpers shared by the tool unit tests: a runtime on the in-memory store, sessions made from
//! JSON, and calls through the standard registry (so argument and session checks run too).

use serde_json::Value;
use std::sync::Arc;

use cks_runtime::store::memory::MemoryStore;
use cks_runtime::{NewSession, Runtime, RuntimeConfig};

use crate::{Registry, ToolContext};

pub(crate) fn context() -> ToolContext {
    ToolContext::new(Arc::new(Runtime::new(Arc::new(MemoryStore::new()), RuntimeConfig::default())))
}

/// A new session holding `structure` (canonical CKS JSON) with one first version.
pub(crate) async fn session(ctx: &ToolContext, structure: Value) -> String {
    let structure = cks_core::json::parse_value(structure).expect("test structure parses");
    let options = NewSession { first_version: Some(Default::default()), ..Default::default() };
    ctx.runtime.create_session(structure, options).await.expect("session is created").session_id
}

/// Calls a tool of the standard registry.
pub(crate) async fn call(ctx: &ToolContext, name: &str, args: Value) -> Value {
    Registry::standard().call(name, args, ctx).await.expect("the tool is registered")
}

/// An object in canonical JSON.
pub(crate) fn obj(id: &str, ty: &str, name: &str, structure: Value) -> Value {
    serde_json::json!({"identity": {"id": id, "type": ty, "name": name}, "structure": structure})
}

/// A relation in canonical JSON.
pub(crate) fn rel(id: &str, participants: &[&str], relation_type: &str) -> Value {
    obj(id, "Relation", id, serde_json::json!({"participants": participants, "relation_type": relation_type}))
}

/// A structure in canonical JSON.
pub(crate) fn structure(objects: Vec<Value>) -> Value {
    serde_json::json!({"version": "1.0", "objects": objects})
}
