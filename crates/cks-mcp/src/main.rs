//! The `cks-mcp` command.

/// jemalloc rather than glibc's malloc: under a long mixed load glibc's per-thread arenas kept
/// freed memory (68 → 78 MB held for 19–27 MB in use within minutes), so resident memory crept up
/// with the hours, not with the data. (mimalloc, tried too, held even more.)
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> anyhow::Result<()> {
    // Purge freed pages on jemalloc's own thread, also while the server is idle after a burst
    // (otherwise purging happens only as allocations go on).
    let _ = tikv_jemalloc_ctl::background_thread::write(true);
    cks_mcp::run()
}
