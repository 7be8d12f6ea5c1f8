//! Knowledge lifecycle: validate, serialize, explain, evolve, suggest, verify a source, and read a web
//! page.

pub(crate) mod evolve_knowledge;
mod explain_knowledge;
pub(crate) mod ingest_document;
mod serialize_knowledge;
mod suggest_evolution;
mod validate_knowledge;
pub(crate) mod verify_source;

use crate::tool::{Listed, listed};

pub(crate) fn tools() -> Vec<Listed> {
    vec![
        listed(validate_knowledge::ValidateKnowledge),
        listed(serialize_knowledge::SerializeKnowledge),
        listed(explain_knowledge::ExplainKnowledge),
        listed(evolve_knowledge::EvolveKnowledge),
        listed(suggest_evolution::SuggestEvolution),
        listed(verify_source::VerifySource),
        listed(ingest_document::IngestDocument),
    ]
}
