//! A session's history: its versions, the state at one of them, reverting, comparing against an
//! older state, and branches with their merges.

use super::*;

impl Runtime {
    /// The session's versions, oldest first.
    pub async fn list_versions(&self, id: &str) -> Result<Vec<VersionInfo>, RuntimeError> {
        let rows = self.store.list_versions(id).await?;
        Ok(rows.iter().map(VersionInfo::from_row).collect())
    }

    /// Reconstructs the state of a version of this session (snapshot + deltas, every step's
    /// `state_hash` verified). [`EMPTY_STATE_VERSION_ID`] is the empty structure.
    pub async fn version_state(&self, id: &str, version_id: &str) -> Result<KnowledgeStructure, RuntimeError> {
        if version_id == EMPTY_STATE_VERSION_ID {
            return Ok(KnowledgeStructure::new());
        }
        let not_found =
            || RuntimeError::VersionNotFound { session_id: id.to_owned(), version_id: version_id.to_owned() };
        let (owner, seq) = self.store.find_version(version_id).await?.ok_or_else(not_found)?;
        if owner != id {
            return Err(not_found());
        }
        self.state_at(id, seq).await
    }

    /// The state after `seq` versions (0: the session's starting state).
    pub(super) async fn state_at(&self, id: &str, seq: u64) -> Result<KnowledgeStructure, RuntimeError> {
        let row = self.store.load_session(id).await?.ok_or_else(|| RuntimeError::SessionNotFound(id.to_owned()))?;
        let chain = self.load_chain(id, seq).await?;
        let mut row = row;
        row.head.seq = chain.snapshot_seq;
        row.head.state_hash = String::new();
        let state = SessionState::rebuild(row, chain).map_err(|e| corrupt(id, e))?;
        Ok(state.structure)
    }

    /// Commits the state of an earlier version as a new version (history only grows).
    pub async fn revert(
        &self,
        id: &str,
        version_id: &str,
        metadata: Map<String, Value>,
    ) -> Result<Committed, RuntimeError> {
        let target = self.version_state(id, version_id).await?;
        let mut metadata = metadata;
        metadata.entry("operation").or_insert_with(|| Value::String("revert".into()));
        metadata.insert("reverted_to".into(), Value::String(version_id.to_owned()));
        self.commit(id, CommitRequest::replace(target).with_metadata(metadata)).await
    }

    /// Runs `f` on a version's state (the base) and the session's current state, as the two sides
    /// of a comparison. When every version since the base recorded what it changed (deltas with
    /// before-images), the base is the current state rewound through them: no old state is
    /// rebuilt, and the cost follows the change. Otherwise (a revert or merge since, or deltas
    /// written before before-images were kept) the base is rebuilt from snapshot and deltas.
    pub async fn read_against<R>(
        &self,
        id: &str,
        version_id: &str,
        f: impl FnOnce(Base<'_>, &KnowledgeStructure, &SessionInfo) -> R,
    ) -> Result<R, RuntimeError> {
        if version_id != EMPTY_STATE_VERSION_ID
            && let Some((rewind, end_seq, expected_hash)) = self.rewind_to(id, version_id).await?
        {
            let mut f = Some(f);
            let compared = self
                .read(id, |current, info| {
                    // A commit since the deltas were read, or a rewind that does not land on the
                    // base's stored hash: rebuild instead.
                    let lands = info.version_count == end_seq && rewind.root_hash(current).to_hex() == expected_hash;
                    lands.then(|| (f.take().expect("called once"))(Base::Rewound(&rewind), current, info))
                })
                .await?;
            return match compared {
                Some(compared) => Ok(compared),
                None => self.read_against_rebuilt(id, version_id, f.expect("not called")).await,
            };
        }
        self.read_against_rebuilt(id, version_id, f).await
    }

    pub(super) async fn read_against_rebuilt<R>(
        &self,
        id: &str,
        version_id: &str,
        f: impl FnOnce(Base<'_>, &KnowledgeStructure, &SessionInfo) -> R,
    ) -> Result<R, RuntimeError> {
        let base = self.version_state(id, version_id).await?;
        self.read(id, |current, info| f(Base::Whole(&base), current, info)).await
    }

    /// What the versions after `version_id` changed, with the head they lead to and the stored
    /// hash of `version_id`'s state; `None` when some version since did not record it.
    pub(super) async fn rewind_to(
        &self,
        id: &str,
        version_id: &str,
    ) -> Result<Option<(Rewind, u64, String)>, RuntimeError> {
        let not_found =
            || RuntimeError::VersionNotFound { session_id: id.to_owned(), version_id: version_id.to_owned() };
        let (owner, seq) = self.store.find_version(version_id).await?.ok_or_else(not_found)?;
        if owner != id {
            return Err(not_found());
        }
        let versions = self.store.load_versions_after(id, seq.saturating_sub(1)).await?;
        let Some((base, since)) = versions.split_first().filter(|(base, _)| base.row.seq == seq) else {
            return Ok(None);
        };
        let mut rewind = Rewind::default();
        // Oldest first: an id's first change says what it was at the base.
        for version in since {
            let Some(delta) = &version.delta else { return Ok(None) };
            if !codec::rewind_delta(delta, &mut rewind).map_err(|e| corrupt(id, e))? {
                return Ok(None);
            }
        }
        let end_seq = since.last().map_or(seq, |v| v.row.seq);
        Ok(Some((rewind, end_seq, base.row.state_hash.clone())))
    }

    // ----- branches -----

    /// Creates a branch of a session at a version (default: its current state).
    pub async fn create_branch(
        &self,
        id: &str,
        version_id: Option<&str>,
        metadata: Map<String, Value>,
    ) -> Result<SessionInfo, RuntimeError> {
        let (state, parent_version_id) = match version_id {
            Some(version_id) => (self.version_state(id, version_id).await?, Some(version_id.to_owned())),
            None => self.read(id, |s, info| (s.clone(), info.latest_version_id.clone())).await?,
        };
        let options = NewSession { metadata, first_version: None };
        self.create_session_with_parent(checked(state)?, options, Some(id.to_owned()), parent_version_id).await
    }

    /// Three-way merges `source_id` into `target_id`. The base is `base_version_id` when given,
    /// else the point where the source branched off the target.
    pub async fn merge_branch(
        &self,
        target_id: &str,
        source_id: &str,
        base_version_id: Option<&str>,
        resolutions: &Resolutions,
        metadata: Map<String, Value>,
    ) -> Result<MergeReport, RuntimeError> {
        let (source, source_info) = self.read(source_id, |s, info| (s.clone(), info.clone())).await?;
        let base = match (base_version_id, &source_info.parent_session_id) {
            (Some(version_id), _) => {
                if version_id == EMPTY_STATE_VERSION_ID {
                    KnowledgeStructure::new()
                } else {
                    let (owner, seq) =
                        self.store.find_version(version_id).await?.ok_or_else(|| RuntimeError::VersionNotFound {
                            session_id: target_id.to_owned(),
                            version_id: version_id.to_owned(),
                        })?;
                    self.state_at(&owner, seq).await?
                }
            }
            (None, Some(parent)) if parent == target_id => match &source_info.parent_version_id {
                Some(version_id) => self.version_state(target_id, version_id).await?,
                None => self.state_at(target_id, 0).await?,
            },
            // A session merged into itself is its own base: the merge changes nothing.
            (None, _) if source_id == target_id => source.clone(),
            (None, _) => {
                return Err(RuntimeError::NoMergeBase {
                    target_session_id: target_id.to_owned(),
                    source_session_id: source_id.to_owned(),
                });
            }
        };
        let session = self.session(target_id).await?;
        let mut state = session.state.write().await;
        self.refresh(&session, &mut state).await?;
        if state.row.closed {
            return Err(RuntimeError::SessionClosed(target_id.to_owned()));
        }
        let outcome = match merge::merge(&base, &state.structure, &source, resolutions) {
            Ok(outcome) => outcome,
            Err(merge::MergeError::Conflicts(conflicts)) => return Ok(MergeReport::Conflicts(conflicts)),
            Err(e) => return Err(e.into()),
        };
        // Like the reference, every merge is recorded as a version, also one that changes nothing.
        let changed = !outcome.structure.same_content(&state.structure);
        let mut metadata = metadata;
        metadata.entry("operation").or_insert_with(|| Value::String("merge".into()));
        metadata.insert("source_session_id".into(), Value::String(source_id.to_owned()));
        let head = state.row.head.seq;
        let edit = if changed {
            Edit::Replace { state: Box::new(outcome.structure), if_head: Some(head) }
        } else {
            // No change: an empty delta, so that no snapshot of the whole state is written.
            Edit::Operations(Vec::new())
        };
        let request = CommitRequest { edit: Some(edit), metadata, extensions: Vec::new(), provenance: None };
        let committed = match self.try_commit(target_id, &session.fresh_as_of, &mut state, &request).await? {
            Attempt::Done(committed) => Box::new(committed),
            Attempt::Conflict => {
                return Err(RuntimeError::ConcurrentModification { session_id: target_id.to_owned(), attempts: 1 });
            }
        };
        Ok(MergeReport::Merged {
            committed,
            changed,
            dropped_relations: outcome.dropped_relations,
            resolved: outcome.conflicts_resolved,
        })
    }
}
