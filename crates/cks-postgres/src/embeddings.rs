//! Embeddings in PostgreSQL: one `cks_embeddings` table keyed by (model, text hash).

use futures::TryStreamExt;

use crate::*;
use cks_runtime::store::EmbeddingRow;
use cks_runtime::store::prelude::*;

/// Rows sent in one statement: a save of tens of thousands is a few round trips, and no one
/// message carries more than a few megabytes of vectors.
const ROWS_PER_STATEMENT: usize = 5_000;

#[async_trait]
impl EmbeddingStore for PostgresStore {
    /// One transaction; each statement inserts a chunk of rows from two `bytea` arrays unnested
    /// side by side, skipping a (model, hash) already kept. The rows go in by hash (a stable sort,
    /// so of one hash given twice the first is still kept): replicas saving the same texts at once
    /// take the keys' locks in one order, and never deadlock.
    async fn save_embeddings(&self, model: &str, rows: &[EmbeddingRow]) -> Result<(), StoreError> {
        if rows.is_empty() {
            return Ok(());
        }
        let mut sorted: Vec<&EmbeddingRow> = rows.iter().collect();
        sorted.sort_by_key(|row| row.text_hash);
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        let insert = tx
            .prepare_cached(
                "INSERT INTO cks_embeddings (model, text_hash, vector) \
                 SELECT $1, hash, vector FROM unnest($2::bytea[], $3::bytea[]) WITH ORDINALITY AS r(hash, vector, n) \
                 ORDER BY n ON CONFLICT (model, text_hash) DO NOTHING",
            )
            .await
            .map_err(db_error)?;
        for chunk in sorted.chunks(ROWS_PER_STATEMENT) {
            let hashes: Vec<&[u8]> = chunk.iter().map(|row| &row.text_hash[..]).collect();
            let vectors: Vec<&[u8]> = chunk.iter().map(|row| row.vector.as_slice()).collect();
            tx.execute(&insert, &[&model, &hashes, &vectors]).await.map_err(db_error)?;
        }
        tx.commit().await.map_err(db_error)
    }

    /// The rows are converted as they arrive, never all held twice.
    async fn load_embeddings(&self, model: &str) -> Result<Vec<EmbeddingRow>, StoreError> {
        let client = self.client().await?;
        let select = client
            .prepare_cached("SELECT text_hash, vector FROM cks_embeddings WHERE model = $1")
            .await
            .map_err(db_error)?;
        let stream = client.query_raw(&select, [model]).await.map_err(db_error)?;
        let mut stream = std::pin::pin!(stream);
        let mut rows = Vec::new();
        while let Some(row) = stream.try_next().await.map_err(db_error)? {
            let text_hash = row.get::<_, &[u8]>(0).try_into().map_err(|_| {
                StoreError::Corrupt(format!("an embedding of model '{model}' has a text hash that is not 16 bytes"))
            })?;
            rows.push(EmbeddingRow { text_hash, vector: row.get(1) });
        }
        Ok(rows)
    }

    async fn load_embeddings_of(&self, model: &str, text_hashes: &[[u8; 16]]) -> Result<Vec<EmbeddingRow>, StoreError> {
        let client = self.client().await?;
        let select = client
            .prepare_cached("SELECT text_hash, vector FROM cks_embeddings WHERE model = $1 AND text_hash = ANY($2)")
            .await
            .map_err(db_error)?;
        let hashes: Vec<&[u8]> = text_hashes.iter().map(|hash| hash.as_slice()).collect();
        let found = client.query(&select, &[&model, &hashes]).await.map_err(db_error)?;
        found
            .into_iter()
            .map(|row| {
                let text_hash = row.get::<_, &[u8]>(0).try_into().map_err(|_| {
                    StoreError::Corrupt(format!("an embedding of model '{model}' has a text hash that is not 16 bytes"))
                })?;
                Ok(EmbeddingRow { text_hash, vector: row.get(1) })
            })
            .collect()
    }

    async fn embedding_models(&self) -> Result<Vec<(String, u64)>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query("SELECT model, count(*) FROM cks_embeddings GROUP BY model ORDER BY model COLLATE \"C\"", &[])
            .await
            .map_err(db_error)?;
        Ok(rows.iter().map(|r| (r.get(0), uint(r.get(1)))).collect())
    }

    async fn delete_embeddings(&self, model: &str) -> Result<u64, StoreError> {
        let client = self.client().await?;
        client.execute("DELETE FROM cks_embeddings WHERE model = $1", &[&model]).await.map_err(db_error)
    }
}
