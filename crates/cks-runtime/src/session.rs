//! A session's in-memory head: its current structure, its stored row, and the bookkeeping that
//! decides when the next version is stored as a snapshot.

use serde_json::{Map, Value};

use cks_core::KnowledgeStructure;

use crate::codec;
use crate::store::{Chain, SessionRow, StoreError, StoredVersion, VersionRow};

/// Public description of a session (no graph content).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct SessionInfo {
    pub session_id: String,
    pub created_at: String,
    pub parent_session_id: Option<String>,
    pub parent_version_id: Option<String>,
    pub closed: bool,
    pub metadata: Map<String, Value>,
    pub version_count: u64,
    pub latest_version_id: Option<String>,
    pub state_hash: String,
    pub object_count: u64,
}

impl SessionInfo {
    pub(crate) fn from_row(row: &SessionRow) -> Self {
        SessionInfo {
            session_id: row.session_id.clone(),
            created_at: row.created_at.clone(),
            parent_session_id: row.parent_session_id.clone(),
            parent_version_id: row.parent_version_id.clone(),
            closed: row.closed,
            metadata: parse_metadata(&row.metadata),
            version_count: row.head.seq,
            latest_version_id: row.head.version_id.clone(),
            state_hash: row.head.state_hash.clone(),
            object_count: row.head.object_count,
        }
    }
}

/// Public description of one version.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct VersionInfo {
    pub version_id: String,
    /// 1-based position in the session's history.
    pub seq: u64,
    pub transaction_id: String,
    pub created_at: String,
    pub state_hash: String,
    pub object_count: u64,
    pub metadata: Map<String, Value>,
    pub is_snapshot: bool,
}

impl VersionInfo {
    pub(crate) fn from_row(row: &VersionRow) -> Self {
        VersionInfo {
            version_id: row.version_id.clone(),
            seq: row.seq,
            transaction_id: row.transaction_id.clone(),
            created_at: row.created_at.clone(),
            state_hash: row.state_hash.clone(),
            object_count: row.object_count,
            metadata: parse_metadata(&row.metadata),
            is_snapshot: row.has_snapshot,
        }
    }
}

pub(crate) fn parse_metadata(text: &str) -> Map<String, Value> {
    match serde_json::from_str(text) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    }
}

/// The mutable in-memory state of a loaded session.
#[derive(Debug)]
pub(crate) struct SessionState {
    pub(crate) row: SessionRow,
    pub(crate) structure: KnowledgeStructure,
    pub(crate) last_snapshot_seq: u64,
    /// Objects changed by the versions since the last snapshot.
    pub(crate) changes_since_snapshot: u64,
}

impl SessionState {
    /// Rebuilds a state from its chain, verifying every version's `state_hash`.
    pub(crate) fn rebuild(row: SessionRow, chain: Chain<KnowledgeStructure>) -> Result<Self, StoreError> {
        Self::rebuild_visiting(row, chain, |_, _| ())
    }

    /// [`Self::rebuild`], handing `visit` the structure at the snapshot and after each version
    /// replayed, with that version's seq (as a kept text index is set where it belongs).
    pub(crate) fn rebuild_visiting(
        row: SessionRow,
        chain: Chain<KnowledgeStructure>,
        mut visit: impl FnMut(u64, &mut KnowledgeStructure),
    ) -> Result<Self, StoreError> {
        let mut state = SessionState {
            structure: chain.snapshot,
            row,
            last_snapshot_seq: chain.snapshot_seq,
            changes_since_snapshot: 0,
        };
        let expected = if chain.snapshot_seq == state.row.head.seq && chain.versions.is_empty() {
            Some(state.row.head.state_hash.clone())
        } else {
            None
        };
        if let Some(expected) = expected.filter(|h| !h.is_empty()) {
            verify(&state.structure, chain.snapshot_seq, &expected)?;
        }
        visit(chain.snapshot_seq, &mut state.structure);
        for version in &chain.versions {
            state.replay(version)?;
            visit(version.row.seq, &mut state.structure);
        }
        Ok(state)
    }

    /// Applies one stored version after the current head.
    pub(crate) fn replay(&mut self, version: &StoredVersion) -> Result<(), StoreError> {
        let delta = version.delta.as_deref().ok_or_else(|| {
            StoreError::Corrupt(format!("version #{} has neither delta nor usable snapshot", version.row.seq))
        })?;
        let delta = codec::decode_delta(delta)?;
        self.structure.apply_delta(&delta).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        verify(&self.structure, version.row.seq, &version.row.state_hash)?;
        self.changes_since_snapshot += delta.len() as u64;
        self.set_head(&version.row);
        Ok(())
    }

    /// Replaces the state with a snapshot stored at `row.seq`.
    pub(crate) fn reset_to_snapshot(&mut self, row: &VersionRow, snapshot: &str) -> Result<(), StoreError> {
        let structure = codec::decode_state(snapshot)?;
        verify(&structure, row.seq, &row.state_hash)?;
        self.structure = structure;
        self.last_snapshot_seq = row.seq;
        self.changes_since_snapshot = 0;
        self.set_head(row);
        Ok(())
    }

    pub(crate) fn set_head(&mut self, row: &VersionRow) {
        self.row.head.seq = row.seq;
        self.row.head.version_id = Some(row.version_id.clone());
        self.row.head.state_hash = row.state_hash.clone();
        self.row.head.object_count = row.object_count;
    }

    pub(crate) fn info(&self) -> SessionInfo {
        SessionInfo::from_row(&self.row)
    }
}

fn verify(structure: &KnowledgeStructure, seq: u64, expected: &str) -> Result<(), StoreError> {
    let actual = structure.root_hash().to_hex();
    if actual != expected {
        return Err(StoreError::Corrupt(format!(
            "state hash mismatch at version #{seq}: stored {expected}, reconstructed {actual}"
        )));
    }
    Ok(())
}
