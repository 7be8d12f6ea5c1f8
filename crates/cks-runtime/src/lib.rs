//! The CKS runtime: sessions, transactions, immutable versions and branches over a pluggable
//! [`Store`](store::Store) (in-memory, embedded SQLite).
//!
//! The [`Runtime`] is the only entry point; it owns a bounded cache of loaded sessions, commits
//! versions atomically with compare-and-swap, and publishes [`events::Event`]s.

pub mod access;
pub mod api_keys;
pub mod backup;
pub mod chats;
pub mod codec;
#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
pub mod embeddings;
pub mod error;
pub mod events;
pub mod gallery;
pub mod health;
pub mod histogram;
pub mod import;
pub mod locator;
pub mod pipeline_runs;
pub mod processes;
pub mod reference_db;
pub mod runtime;
pub mod session;
pub mod store;
pub mod sweepers;
pub mod tasks;
pub mod transport_sessions;
pub mod versions;

pub use error::RuntimeError;
pub use import::{ImportReport, SessionImport, VersionImport};
pub use runtime::{
    CommitRequest, Committed, EMPTY_STATE_VERSION_ID, Edit, MergeReport, NewSession, Runtime, RuntimeConfig,
};
pub use session::{SessionInfo, VersionInfo};
pub use sweepers::{InboxRecord, SweeperStatus, Sweepers, SweepersConfig};
pub use tasks::{QueueConfig, TaskQueue};
