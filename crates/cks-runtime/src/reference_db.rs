//! Reading the SQLite database of the Python reference server (cks-mcp 1.77 on cks-runtime 1.58)
//! into [`SessionImport`]s, every version's state rebuilt the way the reference rebuilds it.
//!
//! The reference keeps one row per session (`sessions.data`: JSON with the current structure as
//! canonical JSON text, metadata, parent session and version, `closed`) and one row per version
//! (`versions.data`: id, transaction id, ISO timestamp, metadata, its own state hash, and either
//! a full structure or a `patch` of `add_object` / `add_relation` / `remove_object` /
//! `remove_relation` entries against the previous version). A session's history is its versions
//! sorted by timestamp. A patch replays like the reference's: an `add_object` for an id that is
//! already there is dropped, removing an object also removes the relations naming it, anything
//! else that does not apply is damage. Its state hashes are computed over Python's `repr` and are
//! not checked; ours are computed when the import is stored.
//!
//! Sessions the reference archived (moved to `archive_sessions`, no longer served) are imported
//! closed. Versions with no session row anywhere are not part of any history and are counted,
//! not imported. Tables the reference keeps besides these (embeddings, task queue, operation
//! log, graph registry) are not read.

use rusqlite::{Connection, OpenFlags};
use serde_json::{Map, Value};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use cks_core::json::{self, parse_object};
use cks_core::{ChangeSet, KnowledgeObject, KnowledgeStructure};

use crate::import::{SessionImport, VersionImport};

/// Everything importable from one reference database.
#[derive(Debug, Default)]
pub struct ReferenceData {
    /// Sessions in the order they were created (first version's time).
    pub sessions: Vec<SessionImport>,
    /// Version rows with no session row, live or archived (not imported).
    pub orphan_versions: u64,
}

/// Why a reference database cannot be read; each names the file and, for damage, the session
/// and version.
#[derive(Debug, thiserror::Error)]
pub enum ReferenceError {
    #[error("cannot open {path}: {detail}")]
    Open { path: String, detail: String },
    #[error("{path} is not an SQLite database ({detail})")]
    NotSqlite { path: String, detail: String },
    #[error("{path} is not a database of the reference server (cks-mcp 1.77): {detail}")]
    UnknownSchema { path: String, detail: String },
    #[error("{path}: {}: {detail}", place(session_id, version_id.as_deref()))]
    Damaged { path: String, session_id: String, version_id: Option<String>, detail: String },
}

fn place(session_id: &str, version_id: Option<&str>) -> String {
    match version_id {
        Some(version_id) => format!("session '{session_id}', version '{version_id}'"),
        None => format!("session '{session_id}'"),
    }
}

/// Reads and rebuilds every session of the reference database at `path` (opened read-only).
/// `progress(done, total)` is called after each session.
pub fn read_reference_db(path: &Path, progress: &mut dyn FnMut(usize, usize)) -> Result<ReferenceData, ReferenceError> {
    let shown = path.display().to_string();
    if !path.is_file() {
        return Err(ReferenceError::Open { path: shown, detail: "no such file".into() });
    }
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
        .map_err(|e| ReferenceError::Open { path: shown.clone(), detail: e.to_string() })?;
    let reader = Reader { conn, path: shown };
    reader.check_schema()?;
    reader.read(progress)
}

struct Reader {
    conn: Connection,
    path: String,
}

/// A version row as the reference wrote it.
struct RawVersion {
    rowid: i64,
    version_id: String,
    transaction_id: String,
    created_at: String,
    timestamp: OffsetDateTime,
    metadata: Map<String, Value>,
    structure: Option<String>,
    patch: Option<Vec<Value>>,
}

/// A session row as the reference wrote it.
struct RawSession {
    session_id: String,
    current: String,
    metadata: Map<String, Value>,
    parent_session_id: Option<String>,
    parent_version_id: Option<String>,
    closed: bool,
    modified_at: Option<String>,
}

impl Reader {
    fn damaged(&self, session_id: &str, version_id: Option<&str>, detail: impl Into<String>) -> ReferenceError {
        ReferenceError::Damaged {
            path: self.path.clone(),
            session_id: session_id.to_owned(),
            version_id: version_id.map(str::to_owned),
            detail: detail.into(),
        }
    }

    fn sql_error(&self, e: rusqlite::Error) -> ReferenceError {
        match &e {
            rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::NotADatabase => {
                ReferenceError::NotSqlite { path: self.path.clone(), detail: e.to_string() }
            }
            _ => ReferenceError::UnknownSchema { path: self.path.clone(), detail: e.to_string() },
        }
    }

    fn columns(&self, table: &str) -> Result<HashSet<String>, ReferenceError> {
        let mut stmt = self.conn.prepare(&format!("PRAGMA table_info({table})")).map_err(|e| self.sql_error(e))?;
        let names = stmt.query_map([], |r| r.get::<_, String>(1)).map_err(|e| self.sql_error(e))?;
        names.collect::<Result<_, _>>().map_err(|e| self.sql_error(e))
    }

    fn check_schema(&self) -> Result<(), ReferenceError> {
        // Reading the schema is what fails first on a file that is not SQLite.
        let tables: i64 = self
            .conn
            .query_row("SELECT count(*) FROM sqlite_master WHERE type = 'table'", [], |r| r.get(0))
            .map_err(|e| self.sql_error(e))?;
        for (table, needed) in
            [("sessions", &["session_id", "data"][..]), ("versions", &["version_id", "session_id", "data"])]
        {
            let columns = self.columns(table)?;
            if columns.is_empty() {
                return Err(ReferenceError::UnknownSchema {
                    path: self.path.clone(),
                    detail: format!("it has no table '{table}' ({tables} other tables)"),
                });
            }
            if let Some(missing) = needed.iter().find(|c| !columns.contains(**c)) {
                return Err(ReferenceError::UnknownSchema {
                    path: self.path.clone(),
                    detail: format!("table '{table}' has no column '{missing}'"),
                });
            }
        }
        Ok(())
    }

    fn read(&self, progress: &mut dyn FnMut(usize, usize)) -> Result<ReferenceData, ReferenceError> {
        let sessions = self.read_sessions()?;
        let mut versions = self.read_versions()?;
        let mut orphan_versions = 0;
        versions.retain(|session_id, rows| {
            let known = sessions.iter().any(|s| &s.session_id == session_id);
            if !known {
                orphan_versions += rows.len() as u64;
            }
            known
        });

        let total = sessions.len();
        let mut built = Vec::with_capacity(total);
        for (done, session) in sessions.into_iter().enumerate() {
            let mut rows = versions.remove(&session.session_id).unwrap_or_default();
            // The reference's order: by time; rows written at the same instant in row order.
            rows.sort_by(|a, b| a.timestamp.cmp(&b.timestamp).then(a.rowid.cmp(&b.rowid)));
            built.push(self.rebuild(session, rows)?);
            progress(done + 1, total);
        }

        // A branch starts from its parent's state at the fork version (which may be in any session).
        let fork_points: HashSet<String> = built.iter().filter_map(|s| s.parent_version_id.clone()).collect();
        let states: HashMap<String, KnowledgeStructure> = built
            .iter()
            .flat_map(|s| s.versions.iter())
            .filter(|v| fork_points.contains(&v.version_id))
            .map(|v| (v.version_id.clone(), v.state.clone()))
            .collect();
        for session in &mut built {
            if let Some(fork) = session.parent_version_id.as_ref().and_then(|id| states.get(id)) {
                session.initial_state = fork.clone();
            }
        }
        built.sort_by(|a, b| a.created_at.cmp(&b.created_at));
        Ok(ReferenceData { sessions: built, orphan_versions })
    }

    /// The live sessions, then the archived ones (the reference's garbage collector moves a
    /// session's row to `archive_sessions` and leaves its versions; it no longer serves them), which
    /// come over closed.
    fn read_sessions(&self) -> Result<Vec<RawSession>, ReferenceError> {
        let mut sessions = self.read_session_table("sessions")?;
        let archive = self.columns("archive_sessions")?;
        if archive.contains("session_id") && archive.contains("data") {
            let live: HashSet<String> = sessions.iter().map(|s| s.session_id.clone()).collect();
            let archived = self.read_session_table("archive_sessions")?;
            sessions.extend(archived.into_iter().filter(|s| !live.contains(&s.session_id)).map(|mut s| {
                s.closed = true;
                s
            }));
        }
        Ok(sessions)
    }

    fn read_session_table(&self, table: &str) -> Result<Vec<RawSession>, ReferenceError> {
        let modified_at = if self.columns(table)?.contains("modified_at") { "modified_at" } else { "NULL" };
        let sql = format!("SELECT session_id, data, {modified_at} FROM {table} ORDER BY rowid");
        let mut stmt = self.conn.prepare(&sql).map_err(|e| self.sql_error(e))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, Option<String>>(2)?)))
            .map_err(|e| self.sql_error(e))?;
        let mut sessions = Vec::new();
        for row in rows {
            let (session_id, data, modified_at) = row.map_err(|e| self.sql_error(e))?;
            sessions.push(self.parse_session(session_id, &data, modified_at)?);
        }
        Ok(sessions)
    }

    fn parse_session(
        &self,
        session_id: String,
        data: &str,
        modified_at: Option<String>,
    ) -> Result<RawSession, ReferenceError> {
        let bad = |detail: String| self.damaged(&session_id, None, detail);
        let Ok(Value::Object(mut data)) = serde_json::from_str::<Value>(data) else {
            return Err(bad("its row is not a JSON object".into()));
        };
        let current = match data.remove("knowledge_structure") {
            Some(Value::String(text)) => text,
            _ => return Err(bad("its row has no 'knowledge_structure' text".into())),
        };
        let metadata = match data.remove("metadata") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(map)) => map,
            Some(_) => return Err(bad("its 'metadata' is not an object".into())),
        };
        let optional_text = |value: Option<Value>, field: &str| match value {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(text)) => Ok(Some(text)),
            Some(_) => Err(bad(format!("its '{field}' is not a string"))),
        };
        let parent_session_id = optional_text(data.remove("parent_session_id"), "parent_session_id")?;
        let parent_version_id = optional_text(data.remove("parent_version_id"), "parent_version_id")?;
        let closed = match data.remove("closed") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(closed)) => closed,
            Some(_) => return Err(bad("its 'closed' is not true or false".into())),
        };
        Ok(RawSession { session_id, current, metadata, parent_session_id, parent_version_id, closed, modified_at })
    }

    fn read_versions(&self) -> Result<HashMap<String, Vec<RawVersion>>, ReferenceError> {
        let mut stmt = self
            .conn
            .prepare("SELECT rowid, version_id, session_id, data FROM versions ORDER BY rowid")
            .map_err(|e| self.sql_error(e))?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, Option<String>>(2)?,
                    r.get::<_, String>(3)?,
                ))
            })
            .map_err(|e| self.sql_error(e))?;
        let mut by_session: HashMap<String, Vec<RawVersion>> = HashMap::new();
        for row in rows {
            let (rowid, version_id, session_id, data) = row.map_err(|e| self.sql_error(e))?;
            let version = self.parse_version(rowid, version_id, session_id.as_deref(), &data)?;
            by_session.entry(version.0).or_default().push(version.1);
        }
        Ok(by_session)
    }

    fn parse_version(
        &self,
        rowid: i64,
        version_id: String,
        column_session_id: Option<&str>,
        data: &str,
    ) -> Result<(String, RawVersion), ReferenceError> {
        let Ok(Value::Object(mut data)) = serde_json::from_str::<Value>(data) else {
            return Err(self.damaged(
                column_session_id.unwrap_or("?"),
                Some(&version_id),
                "its row is not a JSON object",
            ));
        };
        // The reference finds a session's versions by the column (the JSON copy is for older rows).
        let session_id = match (column_session_id, data.remove("session_id")) {
            (Some(id), _) => id.to_owned(),
            (None, Some(Value::String(id))) => id,
            _ => return Err(self.damaged("?", Some(&version_id), "it names no session")),
        };
        let bad = |detail: String| self.damaged(&session_id, Some(&version_id), detail);
        let text = |value: Option<Value>, field: &str| match value {
            Some(Value::String(text)) => Ok(text),
            None | Some(Value::Null) if field == "transaction_id" => Ok(String::new()),
            _ => Err(bad(format!("its '{field}' is missing or not a string"))),
        };
        let transaction_id = text(data.remove("transaction_id"), "transaction_id")?;
        let created_at = text(data.remove("created_at"), "created_at")?;
        let timestamp = OffsetDateTime::parse(&created_at, &Rfc3339)
            .map_err(|e| bad(format!("its created_at '{created_at}' is not a timestamp: {e}")))?;
        let metadata = match data.remove("metadata") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(map)) => map,
            Some(_) => return Err(bad("its 'metadata' is not an object".into())),
        };
        let structure = match data.remove("knowledge_structure") {
            None | Some(Value::Null) => None,
            Some(Value::String(text)) if text.is_empty() => None,
            Some(Value::String(text)) => Some(text),
            Some(_) => return Err(bad("its 'knowledge_structure' is not text".into())),
        };
        let patch = match data.remove("patch") {
            None | Some(Value::Null) => None,
            Some(Value::Array(items)) => Some(items),
            Some(_) => return Err(bad("its 'patch' is not a list".into())),
        };
        if structure.is_none() && patch.is_none() {
            return Err(bad("it has neither a structure nor a patch".into()));
        }
        let version =
            RawVersion { rowid, version_id, transaction_id, created_at, timestamp, metadata, structure, patch };
        Ok((session_id, version))
    }

    /// Rebuilds one session's history: each version's full state, in order.
    fn rebuild(&self, session: RawSession, rows: Vec<RawVersion>) -> Result<SessionImport, ReferenceError> {
        let id = session.session_id.clone();
        let mut versions: Vec<VersionImport> = Vec::with_capacity(rows.len());
        for row in rows {
            let bad = |detail: String| self.damaged(&id, Some(&row.version_id), detail);
            let state = match (&row.structure, &row.patch, versions.last()) {
                (Some(text), _, _) => {
                    json::parse_str(text).map_err(|e| bad(format!("its structure does not parse: {e}")))?
                }
                (None, Some(patch), Some(previous)) => {
                    let mut state = previous.state.clone();
                    apply_patch(&mut state, patch).map_err(bad)?;
                    state
                }
                (None, _, None) => return Err(bad("the first version has no structure to start from".into())),
                (None, None, Some(_)) => unreachable!("checked when the row was read"),
            };
            versions.push(VersionImport {
                version_id: row.version_id,
                transaction_id: row.transaction_id,
                created_at: row.created_at,
                metadata: row.metadata,
                state,
            });
        }
        let current = json::parse_str(&session.current)
            .map_err(|e| self.damaged(&id, None, format!("its current structure does not parse: {e}")))?;
        match versions.last_mut() {
            // The session row holds the current structure in its live order, which a replay of
            // patches does not always reproduce; the content must be the last version's.
            Some(last) if last.state.same_content(&current) => last.state = current.clone(),
            Some(last) => {
                return Err(self.damaged(
                    &id,
                    Some(&last.version_id),
                    format!(
                        "the session's current structure ({} objects) is not the state of its last version ({} objects)",
                        current.len(),
                        last.state.len()
                    ),
                ));
            }
            None => {}
        }
        let created_at = versions
            .first()
            .map(|v| v.created_at.clone())
            .or_else(|| session.modified_at.as_deref().map(sqlite_time_to_rfc3339))
            .unwrap_or_default();
        let initial_state = versions.first().map_or(current, |v| v.state.clone());
        Ok(SessionImport {
            session_id: id,
            created_at,
            parent_session_id: session.parent_session_id,
            parent_version_id: session.parent_version_id,
            closed: session.closed,
            metadata: session.metadata,
            initial_state,
            versions,
        })
    }
}

/// SQLite's `datetime('now')` ("YYYY-MM-DD HH:MM:SS", UTC) as RFC 3339.
fn sqlite_time_to_rfc3339(text: &str) -> String {
    match text.split_once(' ') {
        Some((date, time)) => format!("{date}T{time}+00:00"),
        None => text.to_owned(),
    }
}

/// One patch entry.
enum PatchOp {
    AddObject(KnowledgeObject),
    AddRelation(KnowledgeObject),
    RemoveObject(String),
    RemoveRelation(String),
}

fn parse_patch_op(index: usize, item: &Value) -> Result<PatchOp, String> {
    let bad = |detail: &str| format!("patch entry #{index} {detail}");
    let Value::Object(item) = item else { return Err(bad("is not an object")) };
    let text = |field: &str| match item.get(field) {
        Some(Value::String(text)) => Ok(text.clone()),
        _ => Err(bad(&format!("has no '{field}'"))),
    };
    let record = |extra: Option<(&Value, &Value)>| {
        let mut structure = match item.get("structure") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(map)) => map.clone(),
            Some(_) => return Err(bad("has a 'structure' that is not an object")),
        };
        if let Some((participants, relation_type)) = extra {
            structure.insert("participants".into(), participants.clone());
            structure.insert("relation_type".into(), relation_type.clone());
        }
        let identity = item.get("identity").cloned().unwrap_or(Value::Null);
        let raw = Value::Object(Map::from_iter([
            ("identity".into(), identity),
            ("structure".into(), Value::Object(structure)),
        ]));
        parse_object(index, raw).map_err(|e| bad(&format!("is malformed: {e}")))
    };
    match item.get("type").and_then(Value::as_str) {
        Some("add_object") => Ok(PatchOp::AddObject(record(None)?)),
        Some("add_relation") => {
            let (Some(participants), Some(relation_type)) = (item.get("participants"), item.get("relation_type"))
            else {
                return Err(bad("(add_relation) has no participants or relation_type"));
            };
            let relation = record(Some((participants, relation_type)))?;
            if !relation.is_relation() {
                return Err(bad("(add_relation) is not a relation"));
            }
            Ok(PatchOp::AddRelation(relation))
        }
        Some("remove_object") => Ok(PatchOp::RemoveObject(text("object_id")?)),
        Some("remove_relation") => Ok(PatchOp::RemoveRelation(text("relation_id")?)),
        Some(other) => Err(bad(&format!("has an unknown type '{other}'"))),
        None => Err(bad("has no type")),
    }
}

/// Applies a reference patch the way the reference replays one (see the module docs).
fn apply_patch(state: &mut KnowledgeStructure, patch: &[Value]) -> Result<(), String> {
    let ops = patch.iter().enumerate().map(|(i, item)| parse_patch_op(i, item)).collect::<Result<Vec<_>, _>>()?;
    // The reference drops an add_object whose id is present when the patch starts or was added
    // by an earlier add_object of the same patch (it tracks only add_object and remove_object).
    let mut present: HashSet<String> = state.ids().map(str::to_owned).collect();
    let mut log = ChangeSet::default();
    for (index, op) in ops.into_iter().enumerate() {
        let fail = |detail: String| format!("patch entry #{index} does not apply: {detail}");
        match op {
            PatchOp::AddObject(object) => {
                if !present.insert(object.id().to_owned()) {
                    continue;
                }
                if state.contains(object.id()) {
                    return Err(fail(format!("object '{}' already exists", object.id())));
                }
                state.put(object, &mut log).map_err(|e| fail(e.to_string()))?;
            }
            PatchOp::AddRelation(relation) => {
                if state.contains(relation.id()) {
                    return Err(fail(format!("relation '{}' already exists", relation.id())));
                }
                let participants = relation.relation().expect("checked when parsed").participants;
                if let Some(missing) = participants.iter().find(|p| !state.contains(p)) {
                    return Err(fail(format!(
                        "participant '{missing}' of relation '{}' does not exist",
                        relation.id()
                    )));
                }
                drop(participants);
                state.put(relation, &mut log).map_err(|e| fail(e.to_string()))?;
            }
            PatchOp::RemoveObject(id) => {
                present.remove(&id);
                if !state.contains(&id) {
                    return Err(fail(format!("object '{id}' does not exist")));
                }
                let naming: Vec<String> = state.relations_of(&id).iter().map(|r| r.identity.id.to_string()).collect();
                state.remove(&id, &mut log);
                for relation in naming {
                    state.remove(&relation, &mut log);
                }
            }
            PatchOp::RemoveRelation(id) => match state.get(&id) {
                None => return Err(fail(format!("relation '{id}' does not exist"))),
                Some(object) if !object.is_relation() => {
                    return Err(fail(format!("'{id}' is an object, not a relation")));
                }
                Some(_) => {
                    state.remove(&id, &mut log);
                }
            },
        }
        // The log only serves `put`/`remove`; nothing here is undone.
        log.changes.clear();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn state(objects: Value) -> KnowledgeStructure {
        json::parse_value(json!({ "objects": objects })).unwrap()
    }

    fn base() -> KnowledgeStructure {
        state(json!([
            {"identity": {"id": "a", "type": "T", "name": "A"}, "structure": {"v": 1}},
            {"identity": {"id": "b", "type": "T", "name": "B"}},
            {"identity": {"id": "c", "type": "T", "name": "C"}},
            {"identity": {"id": "r", "type": "Relation", "name": "x"},
             "structure": {"participants": ["a", "b"], "relation_type": "x"}},
        ]))
    }

    fn add(id: &str, v: i64) -> Value {
        json!({"type": "add_object", "identity": {"id": id, "type": "T", "name": id}, "structure": {"v": v}})
    }

    #[test]
    fn patches_replay_as_the_reference_replays_them() {
        // A change is a removal plus an addition: the object moves to the end with its new content.
        let mut s = base();
        apply_patch(&mut s, &[json!({"type": "remove_object", "object_id": "c"}), add("c", 2)]).unwrap();
        assert_eq!(s.ids().collect::<Vec<_>>(), ["a", "b", "r", "c"]);
        assert_eq!(s.get("c").unwrap().structure["v"], 2);

        // An add_object for an id already there is dropped, the present object kept.
        let mut s = base();
        apply_patch(&mut s, &[add("a", 9), add("d", 1)]).unwrap();
        assert_eq!(s.get("a").unwrap().structure["v"], 1);
        assert!(s.contains("d"));

        // Removing an object removes the relations naming it; relations come back by add_relation.
        let mut s = base();
        apply_patch(
            &mut s,
            &[
                json!({"type": "remove_object", "object_id": "a"}),
                add("a", 3),
                json!({"type": "add_relation", "identity": {"id": "r", "type": "Relation", "name": "x"},
                   "participants": ["a", "b"], "relation_type": "x", "structure": {}}),
            ],
        )
        .unwrap();
        assert_eq!(s.ids().collect::<Vec<_>>(), ["b", "c", "a", "r"]);
        assert!(s.get("r").unwrap().is_relation());
    }

    #[test]
    fn patches_that_do_not_apply_say_which_entry_and_why() {
        for (patch, needle) in [
            (json!([{"type": "remove_object", "object_id": "zz"}]), "#0 does not apply: object 'zz' does not exist"),
            (json!([{"type": "remove_relation", "relation_id": "a"}]), "'a' is an object, not a relation"),
            (
                json!([{"type": "add_relation", "identity": {"id": "s", "type": "R", "name": "s"},
                        "participants": ["a", "zz"], "relation_type": "y"}]),
                "participant 'zz'",
            ),
            (
                json!([{"type": "add_relation", "identity": {"id": "r", "type": "R", "name": "r"},
                     "participants": ["a", "b"], "relation_type": "x"}]),
                "relation 'r' already exists",
            ),
            (json!([{"type": "merge_everything"}]), "unknown type 'merge_everything'"),
            (json!([add("ok", 1), {"type": "add_object", "identity": {"id": 1}}]), "patch entry #1 is malformed"),
        ] {
            let mut s = base();
            let err = apply_patch(&mut s, patch.as_array().unwrap()).unwrap_err();
            assert!(err.contains(needle), "{err}");
        }
    }
}
