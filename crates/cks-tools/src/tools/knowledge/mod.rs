//! Knowledge lifecycle: validate, serialize, explain, evolve, suggest, verify a source, and read a web
//! page.

pub(crate) mod evolve_knowledge;
mod explain_knowledge;
pub(crate) mod ingest_document;
mod serialize_knowledge;
mod suggest_evolution;
mod validate_knowledge;
pub(crate) mod verify_source;

use std::sync::Arc;

use crate::tool::DynTool;

pub(crate) fn tools() -> Vec<Arc<dyn DynTool>> {
    vec![
        Arc::new(validate_knowledge::ValidateKnowledge),
        Arc::new(serialize_knowledge::SerializeKnowledge),
        Arc::new(explain_knowledge::ExplainKnowledge),
        Arc::new(evolve_knowledge::EvolveKnowledge),
        Arc::new(suggest_evolution::SuggestEvolution),
        Arc::new(verify_source::VerifySource),
        Arc::new(ingest_document::IngestDocument),
    ]
}
