//! Settings in SQLite: one `settings` table of keys and values.

use super::*;

#[async_trait]
impl SettingStore for SqliteStore {
    async fn replica_id(&self) -> Result<Option<String>, StoreError> {
        let fresh = uuid::Uuid::new_v4().to_string();
        self.run(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(backend)?;
            tx.execute("INSERT OR IGNORE INTO store_meta (key, value) VALUES ('replica_id', ?1)", [&fresh])
                .map_err(backend)?;
            let id: String = tx
                .query_row("SELECT value FROM store_meta WHERE key = 'replica_id'", [], |r| r.get(0))
                .map_err(backend)?;
            tx.commit().map_err(backend)?;
            Ok(Some(id))
        })
        .await
    }

    async fn load_setting(&self, key: &str) -> Result<Option<String>, StoreError> {
        let key = format!("setting.{key}");
        self.run(move |conn| {
            conn.prepare_cached("SELECT value FROM store_meta WHERE key = ?1")
                .and_then(|mut s| s.query_row([&key], |r| r.get(0)).optional())
                .map_err(backend)
        })
        .await
    }

    async fn save_setting(&self, key: &str, value: &str) -> Result<(), StoreError> {
        let (key, value) = (format!("setting.{key}"), value.to_owned());
        self.run(move |conn| {
            conn.prepare_cached("INSERT OR REPLACE INTO store_meta (key, value) VALUES (?1, ?2)")
                .and_then(|mut s| s.execute([&key, &value]))
                .map(drop)
                .map_err(backend)
        })
        .await
    }

    async fn setting_or_insert(&self, key: &str, value: &str) -> Result<String, StoreError> {
        let (key, value) = (format!("setting.{key}"), value.to_owned());
        self.run(move |conn| {
            conn.prepare_cached("INSERT OR IGNORE INTO store_meta (key, value) VALUES (?1, ?2)")
                .and_then(|mut s| s.execute([&key, &value]))
                .and_then(|_| {
                    conn.prepare_cached("SELECT value FROM store_meta WHERE key = ?1")?
                        .query_row([&key], |row| row.get(0))
                })
                .map_err(backend)
        })
        .await
    }

    async fn list_settings(&self, prefix: &str) -> Result<Vec<(String, String)>, StoreError> {
        let prefix = format!("setting.{prefix}");
        self.run(move |conn| {
            let mut statement = conn
                .prepare_cached("SELECT key, value FROM store_meta WHERE substr(key, 1, length(?1)) = ?1 ORDER BY key")
                .map_err(backend)?;
            let rows = statement
                .query_map([&prefix], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
                .and_then(Iterator::collect::<Result<Vec<_>, _>>)
                .map_err(backend)?;
            Ok(rows.into_iter().map(|(k, v)| (k["setting.".len()..].to_owned(), v)).collect())
        })
        .await
    }

    async fn delete_setting(&self, key: &str) -> Result<bool, StoreError> {
        let key = format!("setting.{key}");
        self.run(move |conn| {
            conn.prepare_cached("DELETE FROM store_meta WHERE key = ?1")
                .and_then(|mut s| s.execute([&key]))
                .map(|n| n > 0)
                .map_err(backend)
        })
        .await
    }
}
