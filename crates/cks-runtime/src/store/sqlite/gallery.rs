//! The graph registry in SQLite: one `graphs` table, each write one statement.

use super::*;

#[async_trait]
impl GalleryStore for SqliteStore {
    /// Read, merge and write in one immediate transaction, so two writers of one name serialise.
    async fn put_graph(&self, row: GraphRow) -> Result<GraphRow, StoreError> {
        self.run(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(backend)?;
            let session_exists = tx
                .prepare_cached("SELECT 1 FROM sessions WHERE session_id = ?1")
                .and_then(|mut s| s.exists([&row.session_id]))
                .map_err(backend)?;
            if !session_exists {
                return Err(StoreError::SessionNotFound(row.session_id));
            }
            let existing = graph_by_name(&tx, &row.name)?;
            let stored = row.over(existing.as_ref());
            tx.prepare_cached(&format!(
                "INSERT OR REPLACE INTO graph_registry ({GRAPH_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"
            ))
            .and_then(|mut s| {
                s.execute(params![
                    stored.name,
                    stored.session_id,
                    stored.description,
                    stored.tags,
                    stored.created_at,
                    stored.updated_at,
                    stored.source_graph_name,
                    stored.visibility,
                    stored.team,
                    stored.lifecycle_state
                ])
            })
            .map_err(backend)?;
            tx.commit().map_err(backend)?;
            Ok(stored)
        })
        .await
    }

    async fn get_graph(&self, name: &str) -> Result<Option<GraphRow>, StoreError> {
        let name = name.to_owned();
        self.run(move |conn| graph_by_name(conn, &name)).await
    }

    async fn delete_graph(&self, name: &str) -> Result<bool, StoreError> {
        let name = name.to_owned();
        self.run(move |conn| {
            conn.execute("DELETE FROM graph_registry WHERE name = ?1", [name]).map(|n| n > 0).map_err(backend)
        })
        .await
    }

    async fn list_graphs(&self) -> Result<Vec<GraphRow>, StoreError> {
        self.run(|conn| {
            let mut stmt = conn
                .prepare_cached(&format!("SELECT {GRAPH_COLUMNS} FROM graph_registry ORDER BY updated_at DESC, name"))
                .map_err(backend)?;
            let rows = stmt.query_map([], graph_row).map_err(backend)?;
            rows.collect::<Result<_, _>>().map_err(backend)
        })
        .await
    }
}
