//! Importing whole session histories written elsewhere (the reference server's database, a
//! session bundle): every version is stored under its given id, transaction id, timestamp and
//! metadata, with our own state hash, as the deltas and snapshots our runtime would have written.
//!
//! The caller hands over each version's full state; [`Runtime::import_sessions`] encodes it. A
//! version is stored as a delta when replaying one reproduces the state exactly, object order
//! included, and as a snapshot when due (as for commits) or when no delta reproduces the order.
//! The snapshot a large session's head is rebuilt from gets its locator, as a created session's
//! does, so that a first query after a restart reads only what it needs
//! ([`crate::locator::locate_imported`]).

use serde_json::{Map, Value};
use std::collections::HashSet;

use cks_core::validate::{self, ValidationOptions};
use cks_core::{ChangeSet, DeltaOp, KnowledgeStructure};

use crate::codec;
use crate::error::RuntimeError;
use crate::locator;
use crate::runtime::Runtime;
use crate::store::{Head, ImportedSession, ImportedVersion, SessionRow, VersionRow};

/// One session to import.
#[derive(Clone, Debug)]
pub struct SessionImport {
    pub session_id: String,
    pub created_at: String,
    pub parent_session_id: Option<String>,
    pub parent_version_id: Option<String>,
    pub closed: bool,
    pub metadata: Map<String, Value>,
    /// The state before the first version (a branch's fork point; otherwise usually the first
    /// version's state).
    pub initial_state: KnowledgeStructure,
    /// The history, oldest first; the last one is the session's current state.
    pub versions: Vec<VersionImport>,
}

/// One version to import, with its full state.
#[derive(Clone, Debug)]
pub struct VersionImport {
    pub version_id: String,
    pub transaction_id: String,
    pub created_at: String,
    pub metadata: Map<String, Value>,
    pub state: KnowledgeStructure,
}

/// What an import did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImportReport {
    /// Sessions written.
    pub imported: Vec<String>,
    /// Sessions already stored, left alone.
    pub skipped: Vec<String>,
    /// Versions written (those of the imported sessions).
    pub versions: u64,
}

impl Runtime {
    /// Stores whole sessions with their histories in one store call: all or nothing (see
    /// [`crate::store::HistoryStore::import_sessions`]); sessions whose id is already stored are skipped,
    /// so a repeated import writes nothing. Each session's current state must pass the always-on
    /// checks, as every head committed here does.
    pub async fn import_sessions(&self, sessions: Vec<SessionImport>) -> Result<ImportReport, RuntimeError> {
        let mut seen = HashSet::new();
        let mut encoded = Vec::with_capacity(sessions.len());
        for session in &sessions {
            if !seen.insert(session.session_id.as_str()) {
                return Err(invalid(&session.session_id, "the session appears twice in the import".into()));
            }
            encoded.push(self.encode_import(session)?);
        }
        let outcome = self.store().import_sessions(&encoded).await.map_err(RuntimeError::Store)?;
        locator::locate_imported(self.store().as_ref(), &encoded, &outcome.imported).await;
        let imported: HashSet<&str> = outcome.imported.iter().map(String::as_str).collect();
        let versions =
            sessions.iter().filter(|s| imported.contains(s.session_id.as_str())).map(|s| s.versions.len() as u64).sum();
        // Nothing of these sessions can be cached (they did not exist), but an id that was stored
        // by another process meanwhile may be: drop them so the next read sees the store.
        self.forget_loaded_sessions();
        Ok(ImportReport { imported: outcome.imported, skipped: outcome.skipped, versions })
    }

    fn encode_import(&self, session: &SessionImport) -> Result<ImportedSession, RuntimeError> {
        let id = &session.session_id;
        let head_state = session.versions.last().map_or(&session.initial_state, |v| &v.state);
        let report = validate::validate(head_state, &ValidationOptions::default());
        if !report.is_valid() {
            let errors: Vec<String> = report
                .diagnostics
                .iter()
                .filter(|d| d.severity == validate::Severity::Error)
                .map(|d| format!("{} {}", d.code, d.message))
                .collect();
            return Err(invalid(id, format!("its current state is invalid: {}", errors.join("; "))));
        }
        let interval = self.config().snapshot_interval.max(1);
        let mut previous = session.initial_state.clone();
        let (mut last_snapshot_seq, mut changes_since_snapshot) = (0u64, 0u64);
        let mut versions = Vec::with_capacity(session.versions.len());
        for (seq, version) in (1u64..).zip(&session.versions) {
            let state = &version.state;
            let delta = delta_between(&previous, state);
            let changed = delta.as_ref().map_or(state.len() as u64, |d| d.changes.len() as u64);
            changes_since_snapshot += changed;
            let snapshot = delta.is_none()
                || (seq - last_snapshot_seq >= u64::from(interval)
                    && changes_since_snapshot.saturating_mul(8) >= state.len() as u64);
            if snapshot {
                last_snapshot_seq = seq;
                changes_since_snapshot = 0;
            }
            versions.push(ImportedVersion {
                row: VersionRow {
                    seq,
                    version_id: version.version_id.clone(),
                    transaction_id: version.transaction_id.clone(),
                    created_at: version.created_at.clone(),
                    state_hash: state.root_hash().to_hex(),
                    object_count: state.len() as u64,
                    metadata: Value::Object(version.metadata.clone()).to_string(),
                    has_snapshot: snapshot,
                },
                delta: delta.map(|d| codec::encode_delta(&d)),
                snapshot: snapshot.then(|| codec::encode_state(state)),
            });
            previous = state.clone();
        }
        let head = Head {
            seq: versions.len() as u64,
            version_id: versions.last().map(|v| v.row.version_id.clone()),
            state_hash: head_state.root_hash().to_hex(),
            object_count: head_state.len() as u64,
        };
        // An import by a principal is theirs, whatever owner the imported metadata names.
        let mut metadata = session.metadata.clone();
        crate::access::stamp(&mut metadata);
        Ok(ImportedSession {
            row: SessionRow {
                session_id: id.clone(),
                created_at: session.created_at.clone(),
                parent_session_id: session.parent_session_id.clone(),
                parent_version_id: session.parent_version_id.clone(),
                closed: session.closed,
                metadata: Value::Object(metadata).to_string(),
                snapshot_interval: interval,
                head,
            },
            initial_state: codec::encode_state(&session.initial_state),
            versions,
        })
    }
}

fn invalid(session_id: &str, detail: String) -> RuntimeError {
    RuntimeError::Corrupt { session_id: session_id.to_owned(), detail }
}

/// The changes that turn `from` into exactly `to` (content and object order), if simple ones do:
/// removals, then puts of the new and changed objects in `to`'s order, changed objects either
/// replaced in place or moved to the end.
fn delta_between(from: &KnowledgeStructure, to: &KnowledgeStructure) -> Option<ChangeSet> {
    let removed = from.ids().filter(|id| !to.contains(id)).map(|id| DeltaOp::Remove(id.to_owned()));
    let removed: Vec<DeltaOp> = removed.collect();
    let changed: Vec<&str> = to
        .entries()
        .filter(|e| from.entry(e.object.id()).is_some_and(|f| f.hash != e.hash))
        .map(|e| e.object.id())
        .collect();
    let puts = || {
        to.entries()
            .filter(|e| from.entry(e.object.id()).map(|f| f.hash) != Some(e.hash))
            .map(|e| DeltaOp::Put(e.object.clone()))
    };
    let in_place: Vec<DeltaOp> = removed.iter().cloned().chain(puts()).collect();
    let moved: Vec<DeltaOp> = removed
        .iter()
        .cloned()
        .chain(changed.iter().map(|id| DeltaOp::Remove((*id).to_owned())))
        .chain(puts())
        .collect();
    [in_place, moved].into_iter().find_map(|delta| reproduce(from, &delta, to))
}

/// The changes `delta` makes to `from`, if they lead to exactly `to`.
fn reproduce(from: &KnowledgeStructure, delta: &[DeltaOp], to: &KnowledgeStructure) -> Option<ChangeSet> {
    let mut replayed = from.clone();
    let changes = replayed.apply_delta(delta).ok()?;
    (replayed.ids().eq(to.ids()) && replayed.same_content(to)).then_some(changes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cks_core::{Identity, KnowledgeObject};

    fn structure(objects: &[(&str, i64)]) -> KnowledgeStructure {
        let mut s = KnowledgeStructure::new();
        let mut log = ChangeSet::default();
        for (id, v) in objects {
            let mut fields = Map::new();
            fields.insert("v".into(), Value::from(*v));
            s.put(
                KnowledgeObject::new(Identity::new(*id, "T", *id), fields.into_iter().collect::<cks_core::Structure>()),
                &mut log,
            )
            .unwrap();
        }
        s
    }

    #[test]
    fn deltas_reproduce_order_or_there_is_none() {
        let from = structure(&[("a", 1), ("b", 1), ("c", 1)]);
        for to in [
            structure(&[("a", 1), ("b", 2), ("c", 1), ("d", 1)]), // changed in place, added
            structure(&[("a", 1), ("c", 1), ("b", 2)]),           // changed and moved to the end
            structure(&[("c", 1)]),                               // removed
            structure(&[("a", 1), ("b", 1), ("c", 1)]),           // unchanged
        ] {
            let delta = delta_between(&from, &to).expect("a delta");
            let mut replayed = from.clone();
            replayed.apply_delta(&delta.to_delta()).unwrap();
            assert!(replayed.ids().eq(to.ids()) && replayed.same_content(&to));
        }
        // An unchanged object moved: no put/remove delta of changed objects reproduces it.
        assert!(delta_between(&from, &structure(&[("b", 1), ("a", 1), ("c", 1)])).is_none());
    }
}
