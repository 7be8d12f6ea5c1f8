//! Export: a session's knowledge as linked data, or a whole session as a migration bundle (and
//! that bundle imported back).

mod export_knowledge;
mod export_session;
mod import_session;

use crate::tool::{Listed, listed};

pub(crate) fn tools() -> Vec<Listed> {
    vec![
        listed(export_knowledge::ExportKnowledge),
        listed(export_session::ExportSession),
        listed(import_session::ImportSession),
    ]
}
