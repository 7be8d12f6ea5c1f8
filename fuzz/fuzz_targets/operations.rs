//! The evolution-operations decoder and applier over arbitrary JSON, on a small valid graph: no
//! input panics; a failing batch changes nothing; a successful one keeps the incremental root hash
//! equal to a from-scratch one, its incremental check agrees with full validation, and undoing it
//! restores the graph.
#![no_main]

use std::sync::LazyLock;

use cks_core::ops::{apply, parse_operations};
use cks_core::sample::random_graph;
use cks_core::structure::KnowledgeStructure;
use cks_core::validate::{ValidationOptions, check_changes, validate};
use libfuzzer_sys::fuzz_target;

/// Nodes `n0`…`n11` and a few relations, so fuzzed operations can name existing ids.
static BASE: LazyLock<KnowledgeStructure> = LazyLock::new(|| random_graph(12, 10, 7));

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice(data) else { return };
    let Ok(operations) = parse_operations(&value) else { return };
    let base = &*BASE;
    let mut structure = base.clone();
    match apply(&mut structure, &operations) {
        Err(_) => {
            assert!(structure.same_content(base), "a failed batch changed the graph");
        }
        Ok(changes) => {
            assert_eq!(structure.root_hash(), structure.root_hash_from_scratch());
            let incremental_errors = !check_changes(&structure, &changes).is_empty();
            let full_errors = !validate(&structure, &ValidationOptions::default()).is_valid();
            assert_eq!(incremental_errors, full_errors, "incremental check disagrees with full validation");
            structure.undo(changes);
            assert!(structure.same_content(base), "undo did not restore the graph");
            assert_eq!(structure.root_hash(), base.root_hash());
        }
    }
});
