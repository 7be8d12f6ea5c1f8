//! The graph registry's rows: names that point at sessions (the gallery). Stores keep the rows;
//! what a visibility or lifecycle state means is decided above them (`crate::gallery`).
//!
//! Invariant: [`GraphRow::name`] is unique. Writing a row under a taken name replaces the entry
//! (last write wins) but keeps its `created_at`, and keeps its `source_graph_name` and
//! `lifecycle_state` when the new row leaves them unset, so that editing an entry never erases
//! its lineage or its lifecycle. Removing an entry never touches its session.

/// One registry entry as stored.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GraphRow {
    pub name: String,
    pub session_id: String,
    pub description: String,
    /// Comma-separated, as given.
    pub tags: String,
    pub created_at: String,
    pub updated_at: String,
    /// The registered name this graph was cloned from.
    pub source_graph_name: Option<String>,
    /// `private`, `team` or `public`.
    pub visibility: String,
    pub team: Option<String>,
    /// Unset until a lifecycle transition (or a registration) sets it.
    pub lifecycle_state: Option<String>,
}

impl GraphRow {
    /// `self` written over `existing` under the registry's rules (see the module docs).
    pub fn over(self, existing: Option<&GraphRow>) -> GraphRow {
        match existing {
            None => self,
            Some(old) => GraphRow {
                created_at: old.created_at.clone(),
                source_graph_name: self.source_graph_name.or_else(|| old.source_graph_name.clone()),
                lifecycle_state: self.lifecycle_state.or_else(|| old.lifecycle_state.clone()),
                ..self
            },
        }
    }
}

/// Most recently updated first; the name breaks ties, so the order is stable.
pub fn sort_newest_first(rows: &mut [GraphRow]) {
    rows.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then_with(|| a.name.cmp(&b.name)));
}
