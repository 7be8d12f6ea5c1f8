//! The `cks-mcp` command.

use tikv_jemalloc_ctl::{Access as _, AsName as _};

/// jemalloc rather than glibc's malloc: under a long mixed load glibc's per-thread arenas kept
/// freed memory (68 → 78 MB held for 19–27 MB in use within minutes), so resident memory crept up
/// with the hours, not with the data. (mimalloc, tried too, held even more.)
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// How long freed pages stay resident before they go back to the system. jemalloc keeps them
/// 10 s by default, so the few megabytes of a large answer stayed in RSS long after it was sent;
/// a second keeps the reuse that matters (one burst of requests) and lets RSS follow the data.
const DIRTY_DECAY_MS: isize = 1_000;

fn main() -> anyhow::Result<()> {
    tune_allocator();
    cks_mcp::run()
}

/// Purging on jemalloc's own thread (also while the server is idle after a burst) with a short
/// decay. Best effort: a failure only leaves jemalloc's defaults.
fn tune_allocator() {
    let _ = tikv_jemalloc_ctl::background_thread::write(true);
    // The default for arenas created from now on (one per worker thread, lazily) …
    let _ = b"arenas.dirty_decay_ms\0".name().write(DIRTY_DECAY_MS);
    let _ = b"arenas.muzzy_decay_ms\0".name().write(0isize);
    // … and the arenas that already exist.
    let arenas: u32 = tikv_jemalloc_ctl::arenas::narenas::read().unwrap_or(0);
    for arena in 0..arenas {
        let _ = format!("arena.{arena}.dirty_decay_ms\0").as_bytes().name().write(DIRTY_DECAY_MS);
        let _ = format!("arena.{arena}.muzzy_decay_ms\0").as_bytes().name().write(0isize);
    }
}
