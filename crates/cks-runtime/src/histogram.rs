//! A latency histogram cheap enough for every commit: fixed buckets of atomic counters, read by a
//! metrics scrape.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the latency buckets, in seconds: from a read of a small graph to a chat turn
/// with a slow model. Slower ones are counted in none (they are in the total).
pub const LATENCY_BUCKETS: [f64; 14] =
    [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0];

/// Durations counted by bucket of [`LATENCY_BUCKETS`], with their count and sum.
#[derive(Debug, Default)]
pub struct Histogram {
    buckets: [AtomicU64; LATENCY_BUCKETS.len()],
    count: AtomicU64,
    nanos: AtomicU64,
}

/// What a [`Histogram`] holds at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramCounts {
    pub count: u64,
    pub seconds: f64,
    /// Durations of at most each bound of [`LATENCY_BUCKETS`] (cumulative, as histograms count).
    pub at_most: [u64; LATENCY_BUCKETS.len()],
}

impl Histogram {
    pub fn record(&self, took: Duration) {
        let seconds = took.as_secs_f64();
        if let Some(bucket) = LATENCY_BUCKETS.iter().position(|bound| seconds <= *bound) {
            self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.nanos.fetch_add(u64::try_from(took.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    pub fn counts(&self) -> HistogramCounts {
        let mut at_most = [0; LATENCY_BUCKETS.len()];
        let mut sum = 0;
        for (slot, bucket) in at_most.iter_mut().zip(&self.buckets) {
            sum += bucket.load(Ordering::Relaxed);
            *slot = sum;
        }
        #[allow(clippy::cast_precision_loss)] // a sum of nanoseconds stays far below 2^52 s of error
        let seconds = self.nanos.load(Ordering::Relaxed) as f64 / 1e9;
        HistogramCounts { count: self.count.load(Ordering::Relaxed), seconds, at_most }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_fall_in_the_first_bucket_that_holds_them() {
        let histogram = Histogram::default();
        for micros in [100, 700, 3_000, 3_000, 90_000_000] {
            histogram.record(Duration::from_micros(micros));
        }
        let counts = histogram.counts();
        assert_eq!(counts.count, 5);
        assert!((counts.seconds - 90.0068).abs() < 1e-9, "{}", counts.seconds);
        // ≤0.5 ms, ≤1 ms, ≤2.5 ms, ≤5 ms, …; the 90 s one is in none.
        assert_eq!(&counts.at_most[..5], &[1, 2, 2, 4, 4]);
        assert_eq!(counts.at_most[LATENCY_BUCKETS.len() - 1], 4);
    }
}
