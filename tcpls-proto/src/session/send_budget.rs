//! How much the session's streams may hold queued (written, not yet acknowledged): what its
//! connections can carry, not a fixed amount (ARCHITECTURE.md, "The send budget follows the
//! path").
//!
//! Every byte a stream holds waits for a TCPLS acknowledgement, so to keep a path busy the
//! streams must hold what the path has in flight (delivery rate × RTT, or the congestion window
//! if larger, as during slow start), plus what the receiver gathers before it acknowledges.
//! Twice that leaves the congestion window room to double before the next update, as Linux's
//! own send-buffer autotuning does (two congestion windows). More is worse: on a fast, short
//! path (loopback, a LAN) a fixed 16 MiB budget is only a queue that the send rings cycle
//! through, evicting the cache; the floor keeps such paths at a size that still fills them.

use std::time::Duration;

use crate::config::SessionConfig;

/// Least budget while it follows the paths (1 MiB): a loopback or LAN path is filled by far
/// less, and more than this there only cycles the send rings through the cache.
pub const SEND_BUDGET_FLOOR: usize = 1 << 20;

/// The budget is this many times what the paths carry.
const HEADROOM: u64 = 2;

/// Delivery-rate samples per half of the peak's window ([`PeakRate`]): with the IO layer's
/// 100 ms updates, the peak is that of the last 0.5 to 1 s.
const PEAK_HALF_WINDOW: u8 = 5;

/// What one connection carries, as its IO layer reports it (TCP_INFO).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct PathCarry {
    /// Recent peak delivery rate, bytes per second.
    pub(super) rate: u64,
    /// Smoothed RTT.
    pub(super) rtt: Duration,
    /// Congestion window in bytes (segments × MSS).
    pub(super) cwnd_bytes: u64,
}

/// The rule that turns what the connections carry into a budget, from the session's settings.
#[derive(Debug, Clone, Copy)]
pub(super) struct SendBudgetRule {
    /// `SessionConfig::send_budget`: the most it may be.
    max: usize,
    /// The least it may be.
    floor: usize,
    /// What the receiver gathers before it acknowledges: `ack_every_records` full records...
    ack_batch: u64,
    /// ...or what arrives in `ack_delay`, whichever is less.
    ack_delay: Duration,
    autotune: bool,
}

impl SendBudgetRule {
    pub(super) fn new(config: &SessionConfig) -> Self {
        Self {
            max: config.send_budget,
            floor: SEND_BUDGET_FLOOR.min(config.send_budget),
            ack_batch: (config.ack_every_records as u64).saturating_mul(config.record_size as u64),
            ack_delay: config.ack_delay,
            autotune: config.send_autotune,
        }
    }

    /// Follows the paths (`SessionConfig::send_autotune`).
    pub(super) fn autotuned(&self) -> bool {
        self.autotune
    }

    /// The budget before any path has reported anything: the configured one. An IO layer that
    /// never reports (no TCP_INFO) keeps it; ours reports as soon as a session's driver starts.
    pub(super) fn initial(&self) -> usize {
        self.max
    }

    /// The budget for connections carrying `paths`: twice their sum of (what is in flight +
    /// what the receiver gathers before it acknowledges), between the floor and the maximum.
    /// `None` when no connection has reported yet (keep the budget as it is).
    pub(super) fn target(&self, paths: impl IntoIterator<Item = PathCarry>) -> Option<usize> {
        let mut carried: Option<u64> = None;
        for p in paths {
            let in_flight = bytes_in(p.rate, p.rtt).max(p.cwnd_bytes);
            let before_ack = bytes_in(p.rate, self.ack_delay).min(self.ack_batch);
            let sum = carried.unwrap_or(0).saturating_add(in_flight).saturating_add(before_ack);
            carried = Some(sum);
        }
        let want = carried?.saturating_mul(HEADROOM);
        Some(usize::try_from(want).unwrap_or(usize::MAX).clamp(self.floor, self.max))
    }
}

/// Bytes delivered in `time` at `rate` bytes per second.
fn bytes_in(rate: u64, time: Duration) -> u64 {
    let bytes = u128::from(rate).saturating_mul(time.as_micros()) / 1_000_000;
    u64::try_from(bytes).unwrap_or(u64::MAX)
}

/// The most of a connection's recent delivery-rate samples. One sample is noisy (the rate of
/// the latest acknowledged data), and a sender held back by its budget delivers less than its
/// path could: the peak of the last second is what the path has shown it carries.
#[derive(Debug, Clone, Copy, Default)]
pub(in crate::session) struct PeakRate {
    current: u64,
    previous: u64,
    samples: u8,
}

impl PeakRate {
    pub(in crate::session) fn record(&mut self, rate: u64) {
        if self.samples >= PEAK_HALF_WINDOW {
            self.previous = self.current;
            self.current = 0;
            self.samples = 0;
        }
        self.current = self.current.max(rate);
        self.samples += 1;
    }

    pub(in crate::session) fn get(&self) -> u64 {
        self.current.max(self.previous)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(max: usize) -> SendBudgetRule {
        SendBudgetRule::new(&SessionConfig { send_budget: max, ..SessionConfig::default() })
    }

    fn path(mbit: u64, rtt_ms: u64) -> PathCarry {
        PathCarry { rate: mbit * 1_000_000 / 8, rtt: Duration::from_millis(rtt_ms), cwnd_bytes: 0 }
    }

    #[test]
    fn a_short_fast_path_gets_the_floor() {
        // Loopback: 16 Gbit/s at 50 µs is 100 KB in flight, plus a 256 KiB acknowledgement batch.
        let loopback = PathCarry { rate: 2_000_000_000, rtt: Duration::from_micros(50), cwnd_bytes: 0 };
        assert_eq!(rule(16 << 20).target([loopback]), Some(SEND_BUDGET_FLOOR));
    }

    #[test]
    fn a_long_fat_path_gets_twice_its_bandwidth_delay_product() {
        // 100 Mbit/s, 100 ms: 1.25 MB in flight; 25 ms of it (312.5 KB) is more than the
        // 16-record batch (262 144 B), so the batch counts.
        let want = 2 * (1_250_000 + 16 * 16384);
        assert_eq!(rule(64 << 20).target([path(100, 100)]), Some(want));
    }

    #[test]
    fn the_configured_budget_is_the_most() {
        assert_eq!(rule(16 << 20).target([path(1000, 100)]), Some(16 << 20));
        // A budget configured below the floor is the floor too.
        assert_eq!(rule(64 << 10).target([path(1, 1)]), Some(64 << 10));
    }

    #[test]
    fn the_congestion_window_counts_when_it_is_larger() {
        // Slow start: the window grew before the rate samples show it.
        let p = PathCarry { cwnd_bytes: 4 << 20, ..path(10, 100) };
        assert!(rule(64 << 20).target([p]).is_some_and(|b| b >= 8 << 20));
    }

    #[test]
    fn connections_add_up() {
        let one = rule(64 << 20).target([path(100, 100)]).unwrap_or(0);
        let two = rule(64 << 20).target([path(100, 100), path(100, 100)]).unwrap_or(0);
        assert_eq!(two, 2 * one);
    }

    #[test]
    fn without_reports_the_budget_stays() {
        assert_eq!(rule(16 << 20).target([]), None);
    }

    #[test]
    fn the_peak_is_that_of_the_last_samples() {
        let mut peak = PeakRate::default();
        peak.record(100);
        for _ in 0..4 {
            peak.record(10);
        }
        assert_eq!(peak.get(), 100);
        // Five more samples: the 100 is in the previous half, still counted.
        for _ in 0..5 {
            peak.record(10);
        }
        assert_eq!(peak.get(), 100);
        // Five more: it has left the window.
        for _ in 0..5 {
            peak.record(10);
        }
        assert_eq!(peak.get(), 10);
    }
}
