//! How much the session's streams may hold queued (written, not yet acknowledged): what its
//! connections can carry, not a fixed amount (ARCHITECTURE.md, "The send budget follows the
//! path").
//!
//! Every byte a stream holds waits for a TCPLS acknowledgement, so to keep a path busy the
//! streams must hold what the path has in flight (delivery rate × RTT, or what TCP has in flight
//! now if more, as during slow start), plus what the receiver gathers before it acknowledges.
//! Twice that leaves the congestion window room to double before the next update, as Linux's
//! own send-buffer autotuning does (two congestion windows). More is worse: on a fast, short
//! path (loopback, a LAN) a fixed 16 MiB budget is only a queue that the send rings cycle
//! through, evicting the cache; the floor keeps such paths at a size that still fills them.

use std::time::Duration;

use crate::config::SessionConfig;

/// Least budget while it follows the paths (1 MiB): a loopback or LAN path is filled by far
/// less, and more than this there only cycles the send rings through the cache.
pub const SEND_BUDGET_FLOOR: usize = 1 << 20;

/// Most the floor grows to with many streams holding data ([`SendBudgetRule::target`]).
const MANY_STREAMS_FLOOR: usize = 4 << 20;

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
    /// The path's RTT: the least seen lately (a queue or a busy host inflates the smoothed
    /// one; the in-flight term covers what a longer RTT needs).
    pub(super) rtt: Duration,
    /// What TCP has in flight now, bytes (unacknowledged segments × MSS). Not the congestion
    /// window: on loopback that grows without bound (nothing is ever lost) and would make a
    /// 16 MiB budget of a path that needs far less.
    pub(super) in_flight: u64,
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
    /// `SessionConfig::stream_quantum`: what the round robin seals of one stream per turn.
    quantum: usize,
}

impl SendBudgetRule {
    pub(super) fn new(config: &SessionConfig) -> Self {
        Self {
            max: config.send_budget,
            floor: SEND_BUDGET_FLOOR.min(config.send_budget),
            ack_batch: (config.ack_every_records as u64).saturating_mul(config.record_size as u64),
            ack_delay: config.ack_delay,
            autotune: config.send_autotune,
            quantum: config.stream_quantum,
        }
    }

    /// Follows the paths (`SessionConfig::send_autotune`).
    pub(super) fn autotuned(&self) -> bool {
        self.autotune
    }

    /// The budget before any path has reported anything: the floor (TCP starts slowly: the
    /// reports of the first round trips come long before a path needs more), or the configured
    /// budget when it does not follow the paths. Starting at the most instead let a bulk
    /// writer queue 16 MiB before the first report. An IO layer that cannot report
    /// (`Session::set_path`) turns `send_autotune` off.
    pub(super) fn initial(&self) -> usize {
        if self.autotune {
            self.floor
        } else {
            self.max
        }
    }

    /// The budget for connections carrying `paths` while `active` streams hold data: twice
    /// their sum of (what is in flight + what the receiver gathers before it acknowledges),
    /// between the floor and the maximum. `None` when no connection has reported yet (keep the
    /// budget as it is).
    pub(super) fn target(&self, paths: impl IntoIterator<Item = PathCarry>, active: usize) -> Option<usize> {
        let mut carried: Option<u64> = None;
        for p in paths {
            let in_flight = bytes_in(p.rate, p.rtt).max(p.in_flight);
            let before_ack = bytes_in(p.rate, self.ack_delay).min(self.ack_batch);
            let sum = carried.unwrap_or(0).saturating_add(in_flight).saturating_add(before_ack);
            carried = Some(sum);
        }
        let want = carried?.saturating_mul(HEADROOM);
        Some(usize::try_from(want).unwrap_or(usize::MAX).clamp(self.floor_for(active), self.max))
    }

    /// The floor while `active` streams hold data: enough for each to fill a round robin turn
    /// (`stream_quantum`), up to [`MANY_STREAMS_FLOOR`]. With 1 MiB over 64 streams each held
    /// one record, the round robin changed stream at every record, and the receiver's guess of
    /// where the next record goes (Stream Change) missed for 60 % of the bytes, which then took
    /// the copying receive path (16.3 against 21.1 Gbit/s with the fixed 16 MiB budget).
    fn floor_for(&self, active: usize) -> usize {
        active.saturating_mul(self.quantum).clamp(self.floor, MANY_STREAMS_FLOOR.max(self.floor)).min(self.max)
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
        PathCarry { rate: mbit * 1_000_000 / 8, rtt: Duration::from_millis(rtt_ms), in_flight: 0 }
    }

    #[test]
    fn a_short_fast_path_gets_the_floor() {
        // Loopback: 16 Gbit/s at 50 µs is 100 KB in flight, plus a 256 KiB acknowledgement batch.
        let loopback = PathCarry { rate: 2_000_000_000, rtt: Duration::from_micros(50), in_flight: 0 };
        assert_eq!(rule(16 << 20).target([loopback], 1), Some(SEND_BUDGET_FLOOR));
    }

    #[test]
    fn a_long_fat_path_gets_twice_its_bandwidth_delay_product() {
        // 100 Mbit/s, 100 ms: 1.25 MB in flight; 25 ms of it (312.5 KB) is more than the
        // 16-record batch (262 144 B), so the batch counts.
        let want = 2 * (1_250_000 + 16 * 16384);
        assert_eq!(rule(64 << 20).target([path(100, 100)], 1), Some(want));
    }

    #[test]
    fn the_configured_budget_is_the_most() {
        assert_eq!(rule(16 << 20).target([path(1000, 100)], 1), Some(16 << 20));
        // A budget configured below the floor is the floor too.
        assert_eq!(rule(64 << 10).target([path(1, 1)], 1), Some(64 << 10));
    }

    #[test]
    fn what_is_in_flight_counts_when_it_is_larger() {
        // Slow start: the window grew before the rate samples show it.
        let p = PathCarry { in_flight: 4 << 20, ..path(10, 100) };
        assert!(rule(64 << 20).target([p], 1).is_some_and(|b| b >= 8 << 20));
    }

    #[test]
    fn connections_add_up() {
        let one = rule(64 << 20).target([path(100, 100)], 1).unwrap_or(0);
        let two = rule(64 << 20).target([path(100, 100), path(100, 100)], 1).unwrap_or(0);
        assert_eq!(two, 2 * one);
    }

    #[test]
    fn many_streams_get_a_round_robin_turn_each_up_to_4_mib() {
        let loopback = PathCarry { rate: 2_000_000_000, rtt: Duration::from_micros(50), in_flight: 0 };
        // 32 streams x 64 KiB quantum = 2 MiB; 64 or 1000 streams: 4 MiB at most.
        assert_eq!(rule(32 << 20).target([loopback], 32), Some(2 << 20));
        assert_eq!(rule(32 << 20).target([loopback], 64), Some(4 << 20));
        assert_eq!(rule(32 << 20).target([loopback], 1000), Some(4 << 20));
        // Never past the configured budget.
        assert_eq!(rule(2 << 20).target([loopback], 1000), Some(2 << 20));
    }

    #[test]
    fn without_reports_the_budget_stays() {
        assert_eq!(rule(16 << 20).target([], 1), None);
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
