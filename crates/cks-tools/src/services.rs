//! What the tools crate offers on purpose to the code that works through tools without being one
//! (the background workers of `cks-workers`): committing operations as a tool would, asking a
//! model for a small answer, reading and verifying a page, reading the versions components
//! publish (for the `graph_auto_update` sweeper), and the task payloads that tools and workers
//! share. Everything else about a tool is private to its file.

pub use crate::tools::conflicts::review::{propose, settled};
pub use crate::tools::gallery::component_versions::WebVersions;
pub use crate::tools::knowledge::evolve_knowledge::{Change, Output as Committed, commit_operations};
pub use crate::tools::knowledge::ingest_document::{Ingested, addition, document_id, ingest};
pub use crate::tools::knowledge::verify_source::{Verification, VerificationView, verify};
pub use crate::tools::llm::json_answer::{TextAnswer, ask_text, parse_json};

/// The pipeline's steps and the payload of each step's task (queued by `start_pipeline`).
pub mod pipeline {
    pub use crate::tools::pipeline::{Payload, Step, enqueue};
}

/// The task `request_enrichment` queues.
pub mod enrichment {
    pub use crate::tools::enrichment::{Payload, TASK_TYPE};
}
