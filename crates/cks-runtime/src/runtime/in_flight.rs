//! Background saves in flight (the search indexes kept after a read or a commit), so a server
//! that is stopping can let them land: an index not kept is built again after the restart, at
//! the cost the kept index is there to save.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

#[derive(Debug, Default)]
pub(crate) struct InFlight {
    count: AtomicUsize,
    done: Notify,
}

impl InFlight {
    /// Runs `work` in the background, counted until it ends.
    pub(crate) fn spawn(self: &Arc<Self>, work: impl Future<Output = ()> + Send + 'static) {
        self.count.fetch_add(1, Ordering::AcqRel);
        let this = Arc::clone(self);
        tokio::spawn(async move {
            work.await;
            if this.count.fetch_sub(1, Ordering::AcqRel) == 1 {
                this.done.notify_waiters();
            }
        });
    }

    /// Waits until nothing is in flight, or `within` passed; true when nothing is.
    pub(crate) async fn wait(&self, within: Duration) -> bool {
        let idle = async {
            loop {
                let done = self.done.notified();
                if self.count.load(Ordering::Acquire) == 0 {
                    return;
                }
                done.await;
            }
        };
        tokio::time::timeout(within, idle).await.is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn waits_for_the_work_in_flight_and_no_longer_than_asked() {
        let in_flight = Arc::new(InFlight::default());
        assert!(in_flight.wait(Duration::ZERO).await, "nothing in flight");
        in_flight.spawn(tokio::time::sleep(Duration::from_secs(3)));
        in_flight.spawn(tokio::time::sleep(Duration::from_secs(1)));
        assert!(!in_flight.wait(Duration::from_secs(2)).await, "one still in flight after 2 s");
        let started = tokio::time::Instant::now();
        assert!(in_flight.wait(Duration::from_secs(10)).await);
        assert_eq!(started.elapsed(), Duration::from_secs(1), "done when the last one ended");
    }
}
