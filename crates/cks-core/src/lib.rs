//! The Canonical Knowledge Structure (CKS): a versionable knowledge graph of objects and n-ary
//! relations, with canonical JSON, validation, evolution operations, diff, three-way merge,
//! budgeted subgraph queries and content hashing.
//!
//! Invariant: this crate does no IO and has no async code; every function is deterministic.

pub mod diff;
mod error_chain;
mod fields;
pub mod fusion;
pub mod hash;
pub mod inference;
pub mod json;
mod kinds;
pub mod linked_data;
pub mod matching;
pub mod merge;
pub mod nearby;
pub mod neighbourhood;
pub mod object;
pub mod ops;
pub mod rewind;
pub mod sample;
mod stored;
pub mod structure;
pub mod subgraph;
#[cfg(test)]
pub(crate) mod testing;
pub mod text;
pub mod validate;
pub mod vectors;

pub use diff::{DiffSummary, diff, diff_from, summarize, summarize_from};
pub use error_chain::error_chain;
pub use hash::{ContentHash, object_hash};
pub use merge::{Conflict, MergeError, MergeOutcome, Resolution, Resolutions, merge, parse_resolutions};
pub use object::{Identity, KnowledgeObject, RelationView, Structure};
pub use rewind::{Base, Rewind};
pub use structure::{Change, ChangeSet, DeltaOp, Entry, KnowledgeStructure, NetChange, StructureError};
pub use subgraph::{SubgraphQuery, SubgraphResult, estimate_tokens, query_subgraph};
pub use validate::{
    Diagnostic, Extension, Severity, Stage, UnknownExtension, ValidationOptions, ValidationReport, check_changes,
    validate,
};

/// How many threads `work` items are worth: one below `parallel_from` (a thread costs more than
/// the work), else one a core.
pub(crate) fn threads_for(work: usize, parallel_from: usize) -> usize {
    if work < parallel_from { 1 } else { std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get) }
}
