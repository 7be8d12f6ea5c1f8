//! The write-ahead log's checkpoints, run beside the writer instead of inside its commits.
//!
//! SQLite's automatic checkpoint runs in the commit that takes the log past its threshold: that
//! commit's caller waits while the log is copied into the database file and the file is synced
//! (about a second after a 200 MB snapshot, as long again as writing it). Here the writer's
//! commits only report the log's size, and once it passes the same threshold a thread of the
//! store's own runs a passive checkpoint on a connection of its own. A passive checkpoint neither
//! waits for nor blocks writers and readers: a commit made meanwhile is in the log, where every
//! reader finds it, as before. Durability is unchanged, since a commit is in the log either way.

use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

/// The log's size, in pages, from which a checkpoint is due: SQLite's own default.
pub(super) const CHECKPOINT_PAGES: i32 = 1000;

/// The thread that checkpoints one database, and the signal that wakes it. Dropping it stops the
/// thread and waits for it, so the store's last connection is closed when the store is.
#[derive(Debug)]
pub(super) struct Checkpointer {
    signal: Arc<Signal>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Debug, Default)]
struct Signal {
    state: Mutex<State>,
    wake: Condvar,
}

#[derive(Debug, Default)]
struct State {
    due: bool,
    closing: bool,
}

impl Signal {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Checkpointer {
    /// Starts the thread and hands `writer`'s commits to it. `None` (with `writer` left to
    /// SQLite's automatic checkpoints) when the thread or the hook cannot be set up.
    pub(super) fn install(writer: &mut Connection, path: &Path, busy_timeout: Duration) -> Option<Checkpointer> {
        let signal = Arc::new(Signal::default());
        let thread = std::thread::Builder::new()
            .name("cks-sqlite-checkpoint".into())
            .spawn({
                let (signal, path) = (signal.clone(), path.to_path_buf());
                move || checkpoint_when_due(&signal, &path, busy_timeout)
            })
            .map_err(|e| tracing::warn!(error = %e, "no checkpoint thread; commits will checkpoint the log themselves"))
            .ok()?;
        let mut checkpointer = Checkpointer { signal: signal.clone(), thread: Some(thread) };
        // Replaces SQLite's automatic checkpoint, which is a hook of the same kind.
        let hooked = writer.wal_hook(Some(move |_: &mut rusqlite::hooks::Wal, pages: i32| {
            if pages >= CHECKPOINT_PAGES {
                signal.lock().due = true;
                signal.wake.notify_one();
            }
            Ok(())
        }));
        if let Err(e) = hooked {
            tracing::warn!(error = %e, "no checkpoint hook; commits will checkpoint the log themselves");
            checkpointer.stop();
            return None;
        }
        Some(checkpointer)
    }

    fn stop(&mut self) {
        self.signal.lock().closing = true;
        self.signal.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn checkpoint_when_due(signal: &Signal, path: &Path, busy_timeout: Duration) {
    let mut connection: Option<Connection> = None;
    loop {
        {
            let mut state = signal.lock();
            while !state.due && !state.closing {
                state = signal.wake.wait(state).unwrap_or_else(|p| p.into_inner());
            }
            // What is still in the log when the store closes is checkpointed by its last close.
            if state.closing {
                return;
            }
            state.due = false;
        }
        if connection.is_none() {
            // Never created here: a database removed meanwhile stays removed.
            match Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX)
                .and_then(|c| c.busy_timeout(busy_timeout).map(|()| c))
            {
                Ok(opened) => connection = Some(opened),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot open the database to checkpoint its log");
                    continue;
                }
            }
        }
        let conn = connection.as_ref().expect("opened above");
        // Busy when another connection (another process) is checkpointing: that one does the work.
        if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            tracing::debug!(error = %e, "log checkpoint not done");
        }
    }
}
