//! Reads of the past: a read run on a session's graph as it was at an earlier version, named by
//! its id or by a time.
//!
//! The graph is not rebuilt from snapshot and deltas. The loaded state is rewound in place
//! through the changes the later versions recorded (their before-images, as comparisons use
//! them), read, and put forward again: the cost follows the change since, not the graph's size,
//! and the read sees every index (words, vectors) as they were then. The session's other
//! readers and writers wait while it runs. When a version since recorded no before-images (a
//! revert or merge writes the whole state), the version is rebuilt instead.

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

use time::OffsetDateTime;

use super::*;

impl Runtime {
    /// The last version of a session committed at or before `time`.
    pub async fn version_at(&self, id: &str, time: OffsetDateTime) -> Result<String, RuntimeError> {
        let versions = self.store.list_versions(id).await?;
        if versions.is_empty() && self.store.load_session(id).await?.is_none() {
            return Err(RuntimeError::SessionNotFound(id.to_owned()));
        }
        let committed = |row: &VersionRow| OffsetDateTime::parse(&row.created_at, &Rfc3339).ok();
        match versions.iter().rev().find(|row| committed(row).is_some_and(|t| t <= time)) {
            Some(row) => Ok(row.version_id.clone()),
            None => Err(RuntimeError::NoVersionAt {
                session_id: id.to_owned(),
                detail: match versions.first() {
                    Some(first) => format!(
                        "none was committed at or before {}; the first was at {}",
                        time.format(&Rfc3339).unwrap_or_default(),
                        first.created_at
                    ),
                    None => "it has no versions".to_owned(),
                },
            }),
        }
    }

    /// Runs `f` on a session's graph as it was at `version_id`.
    pub async fn read_at<R>(
        &self,
        id: &str,
        version_id: &str,
        f: impl FnOnce(&KnowledgeStructure) -> R,
    ) -> Result<R, RuntimeError> {
        let mut f = Some(f);
        if version_id != EMPTY_STATE_VERSION_ID
            && let Some((rewind, end_seq, expected_hash)) = self.rewind_to(id, version_id).await?
        {
            let session = self.session(id).await?;
            let mut state = session.state.write().await;
            if self.may_be_stale(&session).await? {
                self.refresh(&session, &mut state).await?;
            }
            // A commit since the deltas were read leaves them short of the head.
            if state.row.head.seq == end_seq {
                let mut log = ChangeSet::default();
                rewind.restore(&mut state.structure, &mut log);
                let read = (state.structure.root_hash().to_hex() == expected_hash).then(|| {
                    let (f, structure) = (f.take().expect("not called yet"), &state.structure);
                    catch_unwind(AssertUnwindSafe(move || f(structure)))
                });
                // Forward again before anything else reads the state, even after a panic.
                state.structure.undo(log);
                match read {
                    Some(Ok(answer)) => return Ok(answer),
                    Some(Err(panic)) => resume_unwind(panic),
                    None => tracing::warn!(session_id = id, version_id, "a rewind missed the version's hash"),
                }
            }
        }
        let past = self.version_state(id, version_id).await?;
        Ok((f.take().expect("not called yet"))(&past))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory::MemoryStore;
    use cks_core::sample::random_graph;
    use serde_json::json;

    #[tokio::test]
    async fn a_read_of_the_past_sees_the_version_and_leaves_the_present_as_it_was() {
        let config = RuntimeConfig { snapshot_interval: 3, ..Default::default() };
        let rt = Arc::new(Runtime::new(Arc::new(MemoryStore::new()), config));
        let id = rt.create_session(random_graph(30, 40, 3), NewSession::default()).await.unwrap().session_id;
        let commit = |ops: serde_json::Value| {
            let (rt, id) = (&rt, id.clone());
            async move {
                let ops = ops::parse_operations(&ops).unwrap();
                rt.commit(&id, CommitRequest::operations(ops)).await.unwrap().version.version_id
            }
        };
        let mut versions = vec![commit(json!([])).await];
        versions.push(
            commit(json!([{"type": "update_object", "object_id": "n1", "structure_patch": {"k": "zebra"}}])).await,
        );
        versions.push(commit(json!([{"type": "remove_object", "object_id": "n2"}])).await);
        versions.push(
            commit(json!([{"type": "add_object", "identity": {"id": "x", "type": "Claim", "name": "quokka"}, "structure": {}}]))
                .await,
        );
        let reverted = rt.revert(&id, &versions[1], Map::new()).await.unwrap().version.version_id;
        versions.push(reverted);
        versions
            .push(commit(json!([{"type": "update_object", "object_id": "n4", "structure_patch": {"k": "yak"}}])).await);
        // The text index exists before the reads, so the reads must rewind it too.
        let present = rt.read(&id, |s, _| (s.root_hash(), s.text_index().rank("zebra quokka yak", 9, 0.0).len())).await;
        let present = present.unwrap();

        for (n, version) in versions.iter().enumerate() {
            let rebuilt = rt.version_state(&id, version).await.unwrap();
            let words = |s: &KnowledgeStructure| -> Vec<String> {
                s.text_index().rank("zebra quokka yak", 9, 0.0).into_iter().map(|(id, _)| id.to_owned()).collect()
            };
            let (hash, found) = rt.read_at(&id, version, |s| (s.root_hash(), words(s))).await.unwrap();
            assert_eq!(hash, rebuilt.root_hash(), "version #{n}");
            let mut expected = words(&rebuilt);
            let mut found = found;
            expected.sort();
            found.sort();
            assert_eq!(found, expected, "version #{n}: the words of then");
            let now = rt.read(&id, |s, _| (s.root_hash(), s.text_index().rank("zebra quokka yak", 9, 0.0).len()));
            assert_eq!(now.await.unwrap(), present, "version #{n}: the present is back");
        }

        let panicked = {
            let (rt, id, version) = (rt.clone(), id.clone(), versions[5].clone());
            tokio::spawn(async move { rt.read_at::<()>(&id, &version, |_| panic!("a bug in a read")).await })
        };
        assert!(panicked.await.unwrap_err().is_panic());
        let now = rt.read(&id, |s, _| (s.root_hash(), s.text_index().rank("zebra quokka yak", 9, 0.0).len()));
        assert_eq!(now.await.unwrap(), present, "a read that panicked still put the present back");

        let unknown = rt.read_at(&id, "no-such-version", |_| ()).await.unwrap_err();
        assert!(matches!(unknown, RuntimeError::VersionNotFound { .. }));
    }

    #[tokio::test]
    async fn a_time_names_the_last_version_committed_by_then() {
        let rt = Runtime::new(Arc::new(MemoryStore::new()), RuntimeConfig::default());
        let id = rt.create_session(random_graph(3, 2, 1), NewSession::default()).await.unwrap().session_id;
        rt.commit(&id, CommitRequest::operations(Vec::new())).await.unwrap();
        let versions = rt.list_versions(&id).await.unwrap();
        let at = |text: &str| OffsetDateTime::parse(text, &Rfc3339).unwrap();
        let last = &versions[versions.len() - 1];
        assert_eq!(rt.version_at(&id, at(&last.created_at)).await.unwrap(), last.version_id);
        let later = at(&last.created_at) + time::Duration::days(1);
        assert_eq!(rt.version_at(&id, later).await.unwrap(), last.version_id);
        let before = at(&versions[0].created_at) - time::Duration::seconds(1);
        let error = rt.version_at(&id, before).await.unwrap_err();
        assert!(matches!(error, RuntimeError::NoVersionAt { .. }), "{error}");
        assert!(error.to_string().contains(&versions[0].created_at), "{error}");
        let missing = rt.version_at("no-such-session", later).await.unwrap_err();
        assert!(matches!(missing, RuntimeError::SessionNotFound(_)));
    }
}
