//! Enrichment: `request_enrichment` queues a search of external sources for an object, which the
//! Enrichment process (`cks-workers`) works through. What both sides share lives here: the
//! task type and its payload.

mod request_enrichment;

use crate::tool::{Listed, listed};
use serde::{Deserialize, Serialize};

pub(crate) fn tools() -> Vec<Listed> {
    vec![listed(request_enrichment::RequestEnrichment)]
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
