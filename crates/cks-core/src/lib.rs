//! The Canonical Knowledge Structure (CKS): a versionable knowledge graph of objects and n-ary
//! relations, with canonical JSON, validation, evolution operations, diff, three-way merge,
//! budgeted subgraph queries and content hashing.
//!
//! Invariant: this crate does no IO and has no async code; every function is deterministic.

pub mod hash;
pub mod object;
pub mod structure;
pub mod validate;

pub use hash::{object_hash, ContentHash};
pub use object::{Identity, KnowledgeObject, RelationView, Structure};
pub use structure::{Change, ChangeSet, DeltaOp, Entry, KnowledgeStructure, NetChange, StructureError};
pub use validate::{
    Diagnostic, Extension, Severity, Stage, UnknownExtension, ValidationOptions, ValidationReport,
    check_changes, validate,
};
