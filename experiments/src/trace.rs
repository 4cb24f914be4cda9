//! What a receiver saw: every read, timestamped. Goodput time series and recovery times are
//! computed from this log afterwards, so the measurement adds nothing to the data path but a
//! push under an uncontended mutex.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use tcpls::proto::sync::LockExt;

/// Shared receive log of one transfer (cheap to clone; one writer, read at the end).
#[derive(Clone, Debug, Default)]
pub struct Meter(Arc<Mutex<Vec<(Instant, u64)>>>);

impl Meter {
    pub fn new() -> Meter {
        Meter::default()
    }

    /// Records `n` bytes delivered to the application now.
    pub fn add(&self, n: usize) {
        self.0.lock_unpoisoned().push((Instant::now(), n as u64));
    }

    /// Bytes delivered so far.
    pub fn total(&self) -> u64 {
        self.0.lock_unpoisoned().iter().map(|(_, n)| n).sum()
    }

    /// The reads, as (seconds since `t0`, bytes).
    pub fn reads_since(&self, t0: Instant) -> Vec<(f64, u64)> {
        let log = self.0.lock_unpoisoned();
        log.iter().map(|(t, n)| (secs_between(t0, *t), *n)).collect()
    }
}

/// `t - t0` in seconds (negative if `t` is earlier).
pub fn secs_between(t0: Instant, t: Instant) -> f64 {
    if t >= t0 {
        (t - t0).as_secs_f64()
    } else {
        -(t0 - t).as_secs_f64()
    }
}

/// Goodput per `bin` seconds (Mbit/s, points at the end of each bin) from 0 to `until` (later
/// reads are left out).
pub fn goodput_series(reads: &[(f64, u64)], bin: f64, until: f64) -> Vec<(f64, f64)> {
    let bins = (until / bin).ceil().max(1.0) as usize;
    let mut bytes = vec![0u64; bins];
    for (t, n) in reads {
        let i = (t / bin).floor();
        if i >= 0.0 && (i as usize) < bins {
            bytes[i as usize] += n;
        }
    }
    bytes.iter().enumerate().map(|(i, b)| ((i + 1) as f64 * bin, *b as f64 * 8.0 / bin / 1e6)).collect()
}

/// Mean goodput in Mbit/s of the bytes read in `[from, to)`.
pub fn mean_mbps(reads: &[(f64, u64)], from: f64, to: f64) -> f64 {
    if to <= from {
        return 0.0;
    }
    let bytes: u64 = reads.iter().filter(|(t, _)| *t >= from && *t < to).map(|(_, n)| n).sum();
    bytes as f64 * 8.0 / (to - from) / 1e6
}

/// Time of the last read.
pub fn last_read(reads: &[(f64, u64)]) -> f64 {
    reads.last().map_or(0.0, |(t, _)| *t)
}

/// Longest time after an outage at which the pause it caused may begin: deliveries of data that
/// was already in the receiver's buffers end within milliseconds, and later pauses (e.g. a BBR
/// ProbeRTT dip seconds after the outage) have other causes.
pub const PAUSE_START_WINDOW: f64 = 0.5;

/// Recovery after an outage at `event` (seconds): how long after it the data flow resumed, i.e.
/// the end of the longest pause between reads that begins within [`PAUSE_START_WINDOW`] after
/// the event (the event itself counts as a read, so a flow that stops right at it is measured
/// from it; data already in flight that trickles in just after the event does not hide the real
/// pause). `None` if nothing was read after the event.
pub fn recovery_after(reads: &[(f64, u64)], event: f64) -> Option<f64> {
    recovery_between(reads, event, f64::INFINITY)
}

/// [`recovery_after`] looking only at reads before `until` (e.g. the next outage).
pub fn recovery_between(reads: &[(f64, u64)], event: f64, until: f64) -> Option<f64> {
    let mut prev = event;
    let mut best: Option<(f64, f64)> = None; // (gap, end)
    for (t, _) in reads.iter().filter(|(t, _)| *t > event && *t < until) {
        let gap = t - prev;
        if prev <= event + PAUSE_START_WINDOW && best.is_none_or(|(g, _)| gap > g) {
            best = Some((gap, *t));
        }
        prev = *t;
    }
    // A silence from the last read up to `until` that is longer still never ended: no recovery
    // within the window.
    let silence = until - prev;
    if until.is_finite() && prev <= event + PAUSE_START_WINDOW && best.is_none_or(|(g, _)| silence > g) {
        return None;
    }
    best.map(|(_, end)| end - event)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovery_is_the_end_of_the_longest_pause_after_the_event() {
        // Steady reads every 10 ms, the outage at 1.0 s, two late in-flight reads, then a
        // 400 ms pause.
        let mut reads: Vec<(f64, u64)> = (0..100).map(|i| (i as f64 * 0.01, 1000)).collect();
        reads.push((1.002, 1000));
        reads.push((1.004, 1000));
        reads.extend((0..50).map(|i| (1.404 + i as f64 * 0.01, 1000)));
        let r = recovery_after(&reads, 1.0).unwrap();
        assert!((r - 0.404).abs() < 1e-9, "{r}");
        // A longer pause seconds later (another cause) does not count.
        let mut later = reads.clone();
        later.push((3.0, 1000));
        assert!((recovery_after(&later, 1.0).unwrap() - 0.404).abs() < 1e-9);
        // A read just after the event, then silence until the window's end: not recovered.
        assert_eq!(recovery_between(&[(1.0001, 10)], 1.0, 2.0), None);
        assert!(recovery_between(&reads, 1.0, 2.0).is_some());
        assert_eq!(recovery_after(&reads, 5.0), None);
    }

    #[test]
    fn goodput_bins_and_mean() {
        let reads = vec![(0.05, 125_000), (0.15, 125_000), (0.25, 250_000)];
        let s = goodput_series(&reads, 0.1, 0.3);
        assert_eq!(s.len(), 3);
        assert!((s[0].1 - 10.0).abs() < 1e-9 && (s[2].1 - 20.0).abs() < 1e-9, "{s:?}");
        assert!((mean_mbps(&reads, 0.0, 0.3) - 500_000.0 * 8.0 / 0.3 / 1e6).abs() < 1e-9);
    }
}
