//! The graph registry in PostgreSQL: one `cks_graphs` table, each write one statement.

use crate::*;
use cks_runtime::store::prelude::*;

#[async_trait]
impl GalleryStore for PostgresStore {
    /// Read, merge and write under a row lock on the name's entry (or the session's row when the
    /// name is new), so two writers of one name serialise.
    async fn put_graph(&self, row: GraphRow) -> Result<GraphRow, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        // Writers of any registry entry queue on one advisory lock for the length of the
        // transaction: a new name has no row to lock yet.
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&schema::REGISTRY_LOCK]).await.map_err(db_error)?;
        if !session_exists(&tx, &row.session_id).await? {
            return Err(StoreError::SessionNotFound(row.session_id));
        }
        let existing = tx
            .query_opt(&format!("SELECT {GRAPH_COLUMNS} FROM cks_graph_registry WHERE name = $1"), &[&row.name])
            .await
            .map_err(db_error)?
            .as_ref()
            .map(graph_row);
        let stored = row.over(existing.as_ref());
        tx.execute(
            &format!(
                "INSERT INTO cks_graph_registry ({GRAPH_COLUMNS}) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10) \
                 ON CONFLICT (name) DO UPDATE SET session_id = EXCLUDED.session_id, \
                 description = EXCLUDED.description, tags = EXCLUDED.tags, created_at = EXCLUDED.created_at, \
                 updated_at = EXCLUDED.updated_at, source_graph_name = EXCLUDED.source_graph_name, \
                 visibility = EXCLUDED.visibility, team = EXCLUDED.team, lifecycle_state = EXCLUDED.lifecycle_state"
            ),
            &[
                &stored.name,
                &stored.session_id,
                &stored.description,
                &stored.tags,
                &stored.created_at,
                &stored.updated_at,
                &stored.source_graph_name,
                &stored.visibility,
                &stored.team,
                &stored.lifecycle_state,
            ],
        )
        .await
        .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        Ok(stored)
    }

    async fn get_graph(&self, name: &str) -> Result<Option<GraphRow>, StoreError> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached(&format!("SELECT {GRAPH_COLUMNS} FROM cks_graph_registry WHERE name = $1"))
            .await
            .map_err(db_error)?;
        Ok(client.query_opt(&statement, &[&name]).await.map_err(db_error)?.as_ref().map(graph_row))
    }

    async fn delete_graph(&self, name: &str) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let deleted =
            client.execute("DELETE FROM cks_graph_registry WHERE name = $1", &[&name]).await.map_err(db_error)?;
        Ok(deleted > 0)
    }

    async fn list_graphs(&self) -> Result<Vec<GraphRow>, StoreError> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached(&format!(
                "SELECT {GRAPH_COLUMNS} FROM cks_graph_registry ORDER BY updated_at COLLATE \"C\" DESC, name COLLATE \"C\""
            ))
            .await
            .map_err(db_error)?;
        Ok(client.query(&statement, &[]).await.map_err(db_error)?.iter().map(graph_row).collect())
    }
}
