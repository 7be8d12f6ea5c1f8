//! Settings in PostgreSQL: one `cks_settings` table of keys and values.

use crate::*;
use cks_runtime::store::prelude::*;

#[async_trait]
impl SettingStore for PostgresStore {
    /// One id for the database, shared by every replica on it: they are one server.
    async fn replica_id(&self) -> Result<Option<String>, StoreError> {
        let client = self.client().await?;
        let fresh = uuid::Uuid::new_v4().to_string();
        client
            .execute(
                "INSERT INTO cks_meta (key, value) VALUES ('replica_id', $1) ON CONFLICT (key) DO NOTHING",
                &[&fresh],
            )
            .await
            .map_err(db_error)?;
        let row =
            client.query_one("SELECT value FROM cks_meta WHERE key = 'replica_id'", &[]).await.map_err(db_error)?;
        Ok(Some(row.get(0)))
    }

    async fn load_setting(&self, key: &str) -> Result<Option<String>, StoreError> {
        let client = self.client().await?;
        let key = format!("setting.{key}");
        let row = client.query_opt("SELECT value FROM cks_meta WHERE key = $1", &[&key]).await.map_err(db_error)?;
        Ok(row.map(|r| r.get(0)))
    }

    async fn save_setting(&self, key: &str, value: &str) -> Result<(), StoreError> {
        let client = self.client().await?;
        let key = format!("setting.{key}");
        client
            .execute(
                "INSERT INTO cks_meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                &[&key, &value],
            )
            .await
            .map_err(db_error)?;
        Ok(())
    }

    async fn list_settings(&self, prefix: &str) -> Result<Vec<(String, String)>, StoreError> {
        let client = self.client().await?;
        let prefix = format!("setting.{prefix}");
        let rows = client
            .query(
                "SELECT key, value FROM cks_meta WHERE left(key, length($1)) = $1 ORDER BY key COLLATE \"C\"",
                &[&prefix],
            )
            .await
            .map_err(db_error)?;
        Ok(rows.iter().map(|r| (r.get::<_, String>(0)["setting.".len()..].to_owned(), r.get(1))).collect())
    }

    async fn setting_or_insert(&self, key: &str, value: &str) -> Result<String, StoreError> {
        let client = self.client().await?;
        let key = format!("setting.{key}");
        client
            .execute("INSERT INTO cks_meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING", &[&key, &value])
            .await
            .map_err(db_error)?;
        let row = client.query_one("SELECT value FROM cks_meta WHERE key = $1", &[&key]).await.map_err(db_error)?;
        Ok(row.get(0))
    }

    async fn delete_setting(&self, key: &str) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let key = format!("setting.{key}");
        Ok(client.execute("DELETE FROM cks_meta WHERE key = $1", &[&key]).await.map_err(db_error)? > 0)
    }
}
