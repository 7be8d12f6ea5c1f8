//! Commits: applying a change to a loaded session and appending its version, with the
//! compare-and-swap on the session head and the retry after a lost race.

use super::*;
use tracing::Instrument as _;

impl Runtime {
    /// Commits a change as a new version, retrying with jittered backoff when another writer
    /// moved the head first.
    pub async fn commit(&self, id: &str, request: CommitRequest) -> Result<Committed, RuntimeError> {
        // For traces only (`cks_trace`): which session, how much was asked and what came of it;
        // never the operations themselves.
        let span = tracing::info_span!(
            target: "cks_trace",
            "commit",
            otel.status_code = tracing::field::Empty,
            "cks.session.id" = id,
            "cks.operations" = match &request.edit {
                Some(Edit::Operations(operations)) => operations.len(),
                Some(Edit::Replace { .. }) | None => 0,
            },
            "cks.replace" = matches!(request.edit, Some(Edit::Replace { .. })),
            "cks.version" = tracing::field::Empty,
            "error.type" = tracing::field::Empty,
        );
        let started = std::time::Instant::now();
        let committed = self.commit_with_retries(id, request).instrument(span.clone()).await;
        self.commit_times.record(started.elapsed());
        match &committed {
            Ok(committed) => span.record("cks.version", committed.version.seq),
            Err(e) => span.record("error.type", e.code()).record("otel.status_code", "error"),
        };
        committed
    }

    async fn commit_with_retries(&self, id: &str, request: CommitRequest) -> Result<Committed, RuntimeError> {
        let session = self.session(id).await?;
        let attempts = self.config.max_commit_attempts.max(1);
        for attempt in 0..attempts {
            if attempt > 0 {
                let cap_ms = (50u64 << attempt.min(10)).min(500);
                let wait = rand::rng().random_range(0..=cap_ms);
                tokio::time::sleep(Duration::from_millis(wait)).await;
            }
            let stale = attempt > 0 || self.may_be_stale(&session).await?;
            let mut state = session.state.write().await;
            if stale {
                self.refresh(&session, &mut state).await?;
            }
            match self.try_commit(&session.id, &session.fresh_as_of, &mut state, &request).await? {
                Attempt::Done(committed) => {
                    // A snapshot written after a search keeps the indexes beside it.
                    self.keep_indexes(&session, &state);
                    return Ok(committed);
                }
                Attempt::Conflict => continue,
            }
        }
        Err(RuntimeError::ConcurrentModification { session_id: id.to_owned(), attempts })
    }

    /// A new version's metadata: the request's, plus the session's `node_id` and the
    /// `version_vector` counting this session's commits under that node id and under the store's
    /// replica id (every version of a session is a commit on it, so version `seq` counts `seq`),
    /// and the principal the call runs as, if any ([`crate::access::PRINCIPAL_KEY`]).
    pub(super) async fn version_metadata(
        &self,
        row: &SessionRow,
        seq: u64,
        requested: &Map<String, Value>,
    ) -> Result<Map<String, Value>, RuntimeError> {
        let replica_id = self.replica_id.get_or_try_init(|| self.store.replica_id()).await?;
        let session_metadata: Map<String, Value> = serde_json::from_str(&row.metadata).unwrap_or_default();
        // Sessions stored before node ids existed count under their session id.
        let node_id = match session_metadata.get(NODE_ID) {
            Some(Value::String(id)) => id.clone(),
            _ => row.session_id.clone(),
        };
        let mut vector = Map::new();
        vector.insert(node_id.clone(), Value::from(seq));
        if let Some(replica_id) = replica_id {
            vector.insert(replica_id.clone(), Value::from(seq));
        }
        let mut metadata = requested.clone();
        metadata.insert(NODE_ID.into(), Value::String(node_id));
        metadata.insert(VERSION_VECTOR.into(), Value::Object(vector));
        if let Some(principal) = crate::access::current_principal() {
            metadata.insert(
                crate::access::PRINCIPAL_KEY.into(),
                serde_json::to_value(principal).expect("principals encode"),
            );
        }
        Ok(metadata)
    }

    /// One commit attempt on a locked, refreshed session. `fresh_as_of` is the session's
    /// freshness mark, cleared when the attempt is abandoned half way (see [`InFlight`]).
    pub(super) async fn try_commit(
        &self,
        id: &str,
        fresh_as_of: &AtomicU64,
        state: &mut SessionState,
        request: &CommitRequest,
    ) -> Result<Attempt, RuntimeError> {
        if state.row.closed {
            return Err(RuntimeError::SessionClosed(id.to_owned()));
        }
        let empty = Edit::Operations(Vec::new());
        let applied = match request.edit.as_ref().unwrap_or(&empty) {
            Edit::Operations(operations) => Applied::Delta(ops::apply(&mut state.structure, operations)?),
            Edit::Replace { if_head: Some(expected), .. } if *expected != state.row.head.seq => {
                return Err(RuntimeError::ConcurrentModification { session_id: id.to_owned(), attempts: 1 });
            }
            Edit::Replace { state: next, .. } => {
                Applied::Replaced(Box::new(std::mem::replace(&mut state.structure, KnowledgeStructure::clone(next))))
            }
        };
        let transaction_id = new_id();

        // Validate: only the change for plain commits, everything when asked for extensions or
        // when the whole state was replaced.
        let diagnostics = match (&applied, request.extensions.is_empty()) {
            (Applied::Delta(changes), true) => validate::check_changes(&state.structure, changes),
            _ => {
                let options = ValidationOptions { extensions: request.extensions.clone(), ..Default::default() };
                validate::validate(&state.structure, &options).diagnostics
            }
        };
        if diagnostics.iter().any(|d| d.severity == Severity::Error) {
            applied.undo(&mut state.structure);
            self.emit(EventKind::TransactionRolledBack {
                session_id: id.to_owned(),
                transaction_id: transaction_id.clone(),
                reason: "validation_failed".into(),
            });
            let codes: std::collections::BTreeSet<&str> =
                diagnostics.iter().filter(|d| d.severity == Severity::Error).map(|d| d.code.as_str()).collect();
            let codes = codes.into_iter().collect::<Vec<_>>().join(", ");
            let message = format!("Validation failed: {codes}");
            self.emit(EventKind::ValidationFailed { session_id: id.to_owned(), transaction_id, message });
            return Err(RuntimeError::ValidationFailed { diagnostics });
        }
        if let Some(key) = &request.provenance {
            let mut unverified = validate::check_provenance(&state.structure, key);
            unverified.retain(|d| d.severity == Severity::Error);
            if !unverified.is_empty() {
                applied.undo(&mut state.structure);
                self.emit(EventKind::TransactionRolledBack {
                    session_id: id.to_owned(),
                    transaction_id,
                    reason: "unverified_provenance".into(),
                });
                return Err(RuntimeError::UnverifiedProvenance { diagnostics: unverified });
            }
        }

        let seq = state.row.head.seq + 1;
        let (delta, changed_ids, changed_count) = match &applied {
            Applied::Delta(changes) => {
                let ids: Vec<String> = changes.net().into_keys().collect();
                (Some(codec::encode_delta(changes)), ids, changes.changes.len() as u64)
            }
            Applied::Replaced(previous) => {
                let ids = changed_ids(previous, &state.structure);
                let count = ids.len() as u64;
                (None, ids, count)
            }
        };
        let changes_since_snapshot = state.changes_since_snapshot + changed_count;
        let snapshot = delta.is_none()
            || (seq - state.last_snapshot_seq >= u64::from(state.row.snapshot_interval)
                && changes_since_snapshot.saturating_mul(8) >= state.structure.len() as u64);
        let row = VersionRow {
            seq,
            version_id: new_id(),
            transaction_id: transaction_id.clone(),
            created_at: now(),
            state_hash: state.structure.root_hash().to_hex(),
            object_count: state.structure.len() as u64,
            metadata: Value::Object(self.version_metadata(&state.row, seq, &request.metadata).await?).to_string(),
            has_snapshot: snapshot,
        };
        let (snapshot_text, locator) = match snapshot {
            true => {
                let (text, locator) = self.encode_snapshot(&state.structure);
                (Some(text), locator)
            }
            false => (None, None),
        };
        let new = NewVersion {
            session_id: id.to_owned(),
            expected_seq: state.row.head.seq,
            row,
            delta,
            snapshot: snapshot_text,
        };
        let in_flight = InFlight { structure: &mut state.structure, applied: Some(applied), fresh_as_of };
        let outcome = self.store.append_version(&new).await;
        let applied = in_flight.settle();
        match outcome {
            Ok(()) => {}
            Err(e) => {
                if let Some(applied) = applied {
                    applied.undo(&mut state.structure);
                }
                let conflict = matches!(e, StoreError::Conflict { .. });
                if matches!(e, StoreError::SessionClosed(_)) {
                    // Closed by another process since this one loaded it.
                    state.row.closed = true;
                }
                self.emit(EventKind::TransactionRolledBack {
                    session_id: id.to_owned(),
                    transaction_id,
                    reason: if conflict { "concurrent_modification".into() } else { e.to_string() },
                });
                return if conflict { Ok(Attempt::Conflict) } else { Err(e.into()) };
            }
        }
        state.set_head(&new.row);
        self.save_locator(id, seq, locator).await;
        if snapshot {
            state.last_snapshot_seq = seq;
            state.changes_since_snapshot = 0;
        } else {
            state.changes_since_snapshot = changes_since_snapshot;
        }
        let version = VersionInfo::from_row(&new.row);
        self.emit(EventKind::VersionCreated {
            session_id: id.to_owned(),
            version_id: version.version_id.clone(),
            transaction_id: transaction_id.clone(),
        });
        self.emit(EventKind::TransactionCommitted { session_id: id.to_owned(), transaction_id });
        let warnings = diagnostics.into_iter().filter(|d| d.severity != Severity::Error).collect();
        Ok(Attempt::Done(Committed { version, warnings, changed_ids }))
    }
}
