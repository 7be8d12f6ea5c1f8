//! Heap bytes a knowledge structure holds at rest, per object, as jemalloc counts them: the
//! objects alone, then the whole structure with its indexes, then with the index by type a
//! session's first commit builds, then with the text index a search builds. The sample graph is `cks_core::sample::random_graph`, half nodes and half relations.
//!
//! `cargo run --release -p cks-core --example structure_memory -- 100000`

use cks_core::{json, sample};
use tikv_jemalloc_ctl::{epoch, stats};

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Bytes the program holds allocated now.
fn live() -> isize {
    epoch::advance().expect("jemalloc statistics");
    stats::allocated::read().expect("jemalloc statistics") as isize
}

fn main() {
    let size: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let text = json::to_compact_string(&sample::random_graph(size / 2, size / 2, 42));
    let per_object = |bytes: isize| bytes as f64 / size as f64;

    let before = live();
    let objects: Vec<_> = json::parse_str(&text).expect("sample parses").objects().map(|o| (**o).clone()).collect();
    let objects_bytes = live() - before;
    drop(objects);

    let before = live();
    let structure = json::parse_str(&text).expect("sample parses");
    let structure_bytes = live() - before;
    let _ = structure.objects_of_type("Concept");
    let kinds_bytes = live() - before;
    let _ = structure.text_index();
    let searched_bytes = live() - before;

    println!(
        "{size} objects ({} bytes of canonical text, {:.0} per object)",
        text.len(),
        per_object(text.len() as isize)
    );
    println!("objects alone:            {:>12} bytes, {:>7.0} per object", objects_bytes, per_object(objects_bytes));
    println!(
        "structure with indexes:   {:>12} bytes, {:>7.0} per object",
        structure_bytes,
        per_object(structure_bytes)
    );
    println!("and with the type index:  {:>12} bytes, {:>7.0} per object", kinds_bytes, per_object(kinds_bytes));
    println!("and with the text index:  {:>12} bytes, {:>7.0} per object", searched_bytes, per_object(searched_bytes));
}
