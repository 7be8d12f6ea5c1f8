//! Opening a store other than the live one (the target of `migrate_storage`): the binary hands
//! the tools an opener that knows every store crate, so no tool depends on one.

use std::fmt::Debug;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;

use super::Store;
use super::sqlite::{SqliteOptions, SqliteStore};

/// Where a store is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreLocation {
    /// A SQLite database file.
    Sqlite(PathBuf),
    /// A PostgreSQL database, by URL (it may hold a password: never shown).
    Postgres(String),
}

/// Why a store could not be opened, in words for the caller (never with a password).
pub type OpenError = Box<dyn std::error::Error + Send + Sync>;

/// Opens stores by location.
#[async_trait]
pub trait StoreOpener: Send + Sync + Debug {
    async fn open(&self, location: &StoreLocation) -> Result<Arc<dyn Store>, OpenError>;

    /// Whether it can open a PostgreSQL database (what `list_plugins` reports).
    fn opens_postgres(&self) -> bool {
        false
    }
}

/// The opener of a runtime with no store crate beside it: SQLite files only.
#[derive(Debug, Default)]
pub struct SqliteOnly;

#[async_trait]
impl StoreOpener for SqliteOnly {
    async fn open(&self, location: &StoreLocation) -> Result<Arc<dyn Store>, OpenError> {
        match location {
            StoreLocation::Sqlite(path) => Ok(Arc::new(SqliteStore::open(path, &SqliteOptions::default())?)),
            StoreLocation::Postgres(_) => Err("this server was built without PostgreSQL".into()),
        }
    }
}
