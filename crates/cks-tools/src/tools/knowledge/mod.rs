//! Knowledge lifecycle: validate, evolve.

mod evolve_knowledge;
mod validate_knowledge;

use std::sync::Arc;

use crate::tool::DynTool;

pub(crate) fn tools() -> Vec<Arc<dyn DynTool>> {
    vec![Arc::new(validate_knowledge::ValidateKnowledge), Arc::new(evolve_knowledge::EvolveKnowledge)]
}
