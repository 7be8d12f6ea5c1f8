//! Export: a session's knowledge as linked data, or a whole session as a migration bundle (and
//! that bundle imported back).

mod export_knowledge;
mod export_session;
mod import_session;

use std::sync::Arc;

use crate::tool::DynTool;

pub(crate) fn tools() -> Vec<Arc<dyn DynTool>> {
    vec![
        Arc::new(export_knowledge::ExportKnowledge),
        Arc::new(export_session::ExportSession),
        Arc::new(import_session::ImportSession),
    ]
}
