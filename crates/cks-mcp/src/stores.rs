//! The one place a configured location becomes a store: SQLite from `cks-runtime`, PostgreSQL from
//! `cks-postgres`. The server opens its live store here, and hands the same opener to the tools
//! (`migrate_storage` opens its target through it).

use std::sync::Arc;

use async_trait::async_trait;
use cks_postgres::{PostgresOptions, PostgresStore};
use cks_runtime::store::sqlite::{SqliteOptions, SqliteStore};
use cks_runtime::store::{OpenError, Store, StoreLocation, StoreOpener};

/// Opens SQLite files and PostgreSQL databases with the given options.
#[derive(Debug, Default)]
pub struct Stores {
    pub sqlite: SqliteOptions,
    pub postgres: PostgresOptions,
}

#[async_trait]
impl StoreOpener for Stores {
    async fn open(&self, location: &StoreLocation) -> Result<Arc<dyn Store>, OpenError> {
        Ok(match location {
            StoreLocation::Sqlite(path) => Arc::new(SqliteStore::open(path, &self.sqlite)?),
            StoreLocation::Postgres(url) => Arc::new(PostgresStore::connect(url, &self.postgres).await?),
        })
    }

    fn opens_postgres(&self) -> bool {
        true
    }
}
