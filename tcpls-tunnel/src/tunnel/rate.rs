//! A token bucket shared by every relay of one client (the concentrator's per-client `rate`,
//! docs/TUNNEL.md "Per-client policy"): both directions of all its tunneled connections take
//! from it. TCP relays wait for their bytes ([`RateLimiter::acquire`]: backpressure, the relay
//! reads nothing more meanwhile, so TCP flow control slows the sender); UDP flows drop what
//! exceeds it ([`RateLimiter::try_acquire`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tcpls_proto::sync::LockExt;
use tokio::time::Instant;

/// Smallest burst: one relay read of the smallest buffer goes through without waiting.
const MIN_BURST: f64 = 16.0 * 1024.0;

#[derive(Debug)]
pub struct RateLimiter {
    /// Bytes per second; 0: unlimited. Changed on reload ([`RateLimiter::set_rate`]).
    rate: AtomicU64,
    bucket: Mutex<Bucket>,
}

#[derive(Debug)]
struct Bucket {
    /// Negative: debt that the next callers wait out.
    tokens: f64,
    last: Instant,
}

impl RateLimiter {
    /// `rate` bytes per second (0: unlimited).
    pub fn new(rate: u64) -> RateLimiter {
        RateLimiter { rate: AtomicU64::new(rate), bucket: Mutex::new(Bucket { tokens: 0.0, last: Instant::now() }) }
    }

    pub fn rate(&self) -> u64 {
        self.rate.load(Ordering::Relaxed)
    }

    /// A new rate for the bytes from now on (0: unlimited).
    pub fn set_rate(&self, rate: u64) {
        self.rate.store(rate, Ordering::Relaxed);
    }

    /// At most an eighth of a second of traffic (and at least 16 KiB) in one go.
    fn burst(rate: f64) -> f64 {
        (rate / 8.0).max(MIN_BURST)
    }

    /// Takes `n` bytes; returns how long the caller must wait for them (debt is allowed, so a
    /// large read is never stuck, it waits in proportion).
    fn take(&self, n: usize, may_owe: bool) -> Option<Duration> {
        let rate = self.rate() as f64;
        if rate <= 0.0 {
            return Some(Duration::ZERO);
        }
        let mut b = self.bucket.lock_unpoisoned();
        let now = Instant::now();
        let refill = now.saturating_duration_since(b.last).as_secs_f64() * rate;
        b.tokens = (b.tokens + refill).min(Self::burst(rate));
        b.last = now;
        let n = n as f64;
        if !may_owe && b.tokens < n {
            return None;
        }
        b.tokens -= n;
        Some(if b.tokens >= 0.0 { Duration::ZERO } else { Duration::from_secs_f64(-b.tokens / rate) })
    }

    /// Waits until `n` bytes fit the rate (TCP: backpressure).
    pub async fn acquire(&self, n: usize) {
        if let Some(wait) = self.take(n, true).filter(|w| !w.is_zero()) {
            tokio::time::sleep(wait).await;
        }
    }

    /// Whether `n` bytes fit the rate now (UDP: a datagram that does not is dropped).
    pub fn try_acquire(&self, n: usize) -> bool {
        self.take(n, false).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn waits_in_proportion_and_unlimited_never_waits() {
        let l = RateLimiter::new(1_000_000);
        let start = Instant::now();
        for _ in 0..40 {
            l.acquire(100_000).await;
        }
        // 4 MB at 1 MB/s: about 4 s (less the initial burst, which starts empty here).
        let took = start.elapsed().as_secs_f64();
        assert!((3.8..=4.2).contains(&took), "{took}");
        l.set_rate(0);
        let start = Instant::now();
        l.acquire(100_000_000).await;
        assert!(start.elapsed() < Duration::from_millis(1));
    }

    #[tokio::test(start_paused = true)]
    async fn datagrams_beyond_the_rate_are_refused() {
        let l = RateLimiter::new(100_000);
        tokio::time::sleep(Duration::from_secs(1)).await;
        // Burst: 16 KiB (the minimum); then nothing until it refills.
        let passed = (0..100).filter(|_| l.try_acquire(1000)).count();
        assert_eq!(passed, 16);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!((0..100).filter(|_| l.try_acquire(1000)).count(), 10);
    }
}
