//! Embeddings in SQLite: one `embeddings` table keyed by (model, text hash).

use super::*;
use crate::store::EmbeddingRow;

#[async_trait]
impl EmbeddingStore for SqliteStore {
    /// One immediate transaction through one cached statement. The rows go in by hash (a stable
    /// sort, so of one hash given twice the first is still kept): the table's b-tree is in key
    /// order, and inserts in that order touch each page once rather than a random page each.
    async fn save_embeddings(&self, model: &str, rows: &[EmbeddingRow]) -> Result<(), StoreError> {
        if rows.is_empty() {
            return Ok(());
        }
        let model = model.to_owned();
        let mut rows = rows.to_vec();
        rows.sort_by_key(|row| row.text_hash);
        self.run(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(backend)?;
            {
                let mut insert = tx
                    .prepare_cached("INSERT OR IGNORE INTO embeddings (model, text_hash, vector) VALUES (?1, ?2, ?3)")
                    .map_err(backend)?;
                for row in &rows {
                    insert.execute(params![model, row.text_hash, row.vector]).map_err(backend)?;
                }
            }
            tx.commit().map_err(backend)
        })
        .await
    }

    /// On the reading connection, so a large model's rows hold up no write: one range scan of
    /// the model's key prefix.
    async fn load_embeddings(&self, model: &str) -> Result<Vec<EmbeddingRow>, StoreError> {
        let model = model.to_owned();
        self.on_reader(move |conn| {
            let mut select =
                conn.prepare_cached("SELECT text_hash, vector FROM embeddings WHERE model = ?1").map_err(backend)?;
            let rows = select
                .query_map([&model], |r| Ok(EmbeddingRow { text_hash: r.get(0)?, vector: r.get(1)? }))
                .map_err(backend)?;
            rows.collect::<Result<Vec<_>, _>>().map_err(backend)
        })
        .await
    }

    async fn load_embeddings_of(&self, model: &str, text_hashes: &[[u8; 16]]) -> Result<Vec<EmbeddingRow>, StoreError> {
        let (model, hashes) = (model.to_owned(), text_hashes.to_vec());
        self.on_reader(move |conn| {
            let mut select = conn
                .prepare_cached("SELECT vector FROM embeddings WHERE model = ?1 AND text_hash = ?2")
                .map_err(backend)?;
            let mut rows = Vec::with_capacity(hashes.len());
            for text_hash in hashes {
                let vector = select.query_row(params![model, text_hash], |r| r.get(0)).optional().map_err(backend)?;
                rows.extend(vector.map(|vector| EmbeddingRow { text_hash, vector }));
            }
            Ok(rows)
        })
        .await
    }

    async fn embedding_models(&self) -> Result<Vec<(String, u64)>, StoreError> {
        self.run(|conn| {
            let mut select = conn
                .prepare_cached("SELECT model, count(*) FROM embeddings GROUP BY model ORDER BY model")
                .map_err(backend)?;
            let rows = select.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).map_err(backend)?;
            rows.collect::<Result<Vec<_>, _>>().map_err(backend)
        })
        .await
    }

    async fn delete_embeddings(&self, model: &str) -> Result<u64, StoreError> {
        let model = model.to_owned();
        self.run(move |conn| {
            conn.prepare_cached("DELETE FROM embeddings WHERE model = ?1")
                .and_then(|mut s| s.execute([&model]))
                .map(|n| n as u64)
                .map_err(backend)
        })
        .await
    }
}
