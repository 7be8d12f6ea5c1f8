//! Enrichment: `request_enrichment` queues a search of external sources for an object, which the
//! Enrichment process (`cks-workers`) works through. What both sides share lives here: the
//! task type and its payload.

mod request_enrichment;

use serde::{Deserialize, Serialize};
use std::sync::Arc;

use crate::tool::DynTool;

pub(crate) fn tools() -> Vec<Arc<dyn DynTool>> {
    vec![Arc::new(request_enrichment::RequestEnrichment)]
}

/// The queue enrichment requests wait in.
pub const TASK_TYPE: &str = "enrichment_request";

/// An enrichment task's payload, as the reference writes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Payload {
    /// The object to find more about.
    pub object_id: String,
    /// What to search for instead of the object's name.
    #[serde(default)]
    pub query: Option<String>,
}
