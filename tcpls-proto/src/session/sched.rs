//! Which connection carries the next record of a stream that is not steered to one.
//!
//! Spreading one stream's records over several connections is bandwidth aggregation
//! (PROTOCOL.md §4); the receiver reorders by offset. A scheduler's [`Scheduler::pick`] sees
//! only connections that can take a record now (their transmit buffer has room), so a slower
//! path naturally gets fewer records; [`Scheduler::pick_any`] sees them all, for policies that
//! would rather wait for a fast path than send on a slow one ([`EarliestArrival`]).

use std::collections::HashMap;

use crate::event::{ConnId, StreamId};

/// What the IO layer reports of a connection's path (TCP_INFO), for the scheduler.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PathInfo {
    /// Smoothed RTT (`tcpi_rtt`), microseconds.
    pub rtt_us: Option<u32>,
    /// Congestion window (`tcpi_snd_cwnd`), segments.
    pub cwnd: Option<u32>,
    /// Delivery rate estimate (`tcpi_delivery_rate`), bytes per second.
    pub delivery_rate: Option<u64>,
    /// Bytes written to the socket that the kernel has not sent yet (`tcpi_notsent_bytes`).
    pub kernel_unsent: Option<u32>,
    /// Largest segment the connection sends (`tcpi_snd_mss`), bytes: with `cwnd`, what TCP
    /// may have in flight.
    pub mss: Option<u32>,
}

/// What a scheduler knows about each candidate connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathView {
    pub conn: ConnId,
    /// Smoothed RTT reported by the IO layer (TCP_INFO), if known.
    pub rtt_us: Option<u32>,
    /// Congestion window in segments, if known.
    pub cwnd: Option<u32>,
    /// Sealed bytes not yet written to the socket.
    pub queued: usize,
    /// Bytes written to this connection so far.
    pub bytes_sent: u64,
    /// It can take a record now (always true in [`Scheduler::pick`]).
    pub room: bool,
    /// Delivery rate reported by the IO layer (TCP_INFO), bytes per second, if known.
    pub delivery_rate: Option<u64>,
    /// Bytes the kernel holds unsent on this connection (TCP_INFO), if known.
    pub kernel_unsent: Option<u32>,
    /// Bytes of the stream being scheduled that wait to be sent, this record's included (the
    /// same in every view of one decision; 0 when unknown): what [`EarliestArrival`] weighs
    /// against waiting for a fast path.
    pub stream_backlog: u64,
}

/// A policy for unsteered stream records. Return one of `paths[i].conn`, or None to send nothing
/// now.
pub trait Scheduler: Send {
    /// Picks among the connections that can take a record now.
    fn pick(&mut self, stream: StreamId, paths: &[PathView]) -> Option<ConnId>;

    /// Whether the session should call [`Scheduler::pick_any`] (with every carrier) rather
    /// than [`Scheduler::pick`] (with those that have room).
    fn waits_for_paths(&self) -> bool {
        false
    }

    /// Picks among every connection that may carry the stream, those without room included
    /// (`room` false): a policy may return one of those to wait for it (nothing is sent now,
    /// the stream waits for the next round). Called when [`Scheduler::waits_for_paths`]; the
    /// default asks [`Scheduler::pick`] about the connections with room.
    fn pick_any(&mut self, stream: StreamId, paths: &[PathView]) -> Option<ConnId> {
        if paths.iter().all(|p| p.room) {
            return self.pick(stream, paths);
        }
        let with_room: Vec<PathView> = paths.iter().filter(|p| p.room).copied().collect();
        if with_room.is_empty() {
            return None;
        }
        self.pick(stream, &with_room)
    }
}

/// Each connection in turn.
#[derive(Debug, Default)]
pub struct RoundRobin {
    last: Option<ConnId>,
}

impl Scheduler for RoundRobin {
    fn pick(&mut self, _stream: StreamId, paths: &[PathView]) -> Option<ConnId> {
        let next = match self.last {
            Some(last) => paths.iter().find(|p| p.conn > last).or_else(|| paths.first()),
            None => paths.first(),
        }?;
        self.last = Some(next.conn);
        Some(next.conn)
    }
}

/// The MPTCP default: the lowest RTT among connections with room; without RTT information, the
/// one with the least queued bytes (the one draining fastest).
#[derive(Debug, Default)]
pub struct LowestRtt;

impl Scheduler for LowestRtt {
    fn pick(&mut self, _stream: StreamId, paths: &[PathView]) -> Option<ConnId> {
        paths.iter().min_by_key(|p| (p.rtt_us.unwrap_or(u32::MAX), p.queued, p.conn)).map(|p| p.conn)
    }
}

/// Shares in proportion to weights (e.g. link rates): picks the connection furthest below its
/// share. Connections without a weight get weight 1.
#[derive(Debug, Default)]
pub struct Weighted {
    pub weights: HashMap<ConnId, u32>,
}

impl Scheduler for Weighted {
    fn pick(&mut self, _stream: StreamId, paths: &[PathView]) -> Option<ConnId> {
        paths
            .iter()
            .min_by(|a, b| {
                let wa = f64::from(self.weights.get(&a.conn).copied().unwrap_or(1).max(1));
                let wb = f64::from(self.weights.get(&b.conn).copied().unwrap_or(1).max(1));
                (a.bytes_sent as f64 / wa).total_cmp(&(b.bytes_sent as f64 / wb))
            })
            .map(|p| p.conn)
    }
}

/// Earliest arrival: the connection on which a record given now would reach the peer first,
/// waiting for it when it has no room rather than sending on a slower path, unless the stream
/// has so much waiting that the slower path delivers the record before the earliest one could
/// deliver the stream's backlog (ECF's rule: then the slower path only adds capacity, it delays
/// nothing). For unequal paths
/// (Wi-Fi and LTE, 40 and 10 Mbit/s), where sending on the slow path whatever the fast one could
/// carry sooner fills the receiver's window with data that arrives late (head-of-line blocking):
/// the rule of ECF (Lim et al., "ECF: An MPTCP Path Scheduler to Manage Heterogeneous Paths",
/// CoNEXT 2017) and of STTF (Hurtig et al., IEEE/ACM ToN 2019), with the queue ahead of the
/// record counted on each path: a record given to path p arrives after about
/// (bytes queued ahead of it, ours and the kernel's) / (p's delivery rate) + p's RTT / 2.
/// Paths without RTT or rate yet are tried by the least queued, as [`LowestRtt`] does.
#[derive(Debug, Default)]
pub struct EarliestArrival;

impl EarliestArrival {
    /// Estimated arrival, microseconds from now, of a record given to `p`; None without enough
    /// information.
    pub fn arrival_us(p: &PathView) -> Option<u64> {
        let rtt = u64::from(p.rtt_us?);
        let rate = Self::rate(p)?;
        let ahead = p.queued as u64 + u64::from(p.kernel_unsent.unwrap_or(0));
        Some((ahead.saturating_mul(1_000_000) / rate.max(1)).saturating_add(rtt / 2))
    }

    /// Bytes per second `p` delivers: TCP_INFO's delivery rate, or without one yet a window
    /// per RTT.
    fn rate(p: &PathView) -> Option<u64> {
        let window = p.cwnd.zip(p.rtt_us).map(|(c, r)| u64::from(c) * 1448 * 1_000_000 / u64::from(r).max(1));
        match (p.delivery_rate.filter(|r| *r > 0), window) {
            // A path the scheduler used little reports the little it delivered (app-limited):
            // its window per RTT says what it could carry.
            (Some(rate), Some(window)) => Some(rate.max(window)),
            (rate, window) => rate.or(window),
        }
    }

    /// When the stream's backlog would be delivered through `p` alone, microseconds from now.
    fn drained_us(p: &PathView) -> Option<u64> {
        let rate = Self::rate(p)?.max(1);
        Some(Self::arrival_us(p)?.saturating_add(p.stream_backlog.saturating_mul(1_000_000) / rate))
    }
}

impl Scheduler for EarliestArrival {
    fn pick(&mut self, stream: StreamId, paths: &[PathView]) -> Option<ConnId> {
        self.pick_any(stream, paths)
    }

    fn waits_for_paths(&self) -> bool {
        true
    }

    fn pick_any(&mut self, _stream: StreamId, paths: &[PathView]) -> Option<ConnId> {
        // A path not measured yet gets records (that is how it gets measured), least queued
        // first.
        if let Some(p) = paths.iter().filter(|p| p.room && Self::arrival_us(p).is_none()).min_by_key(|p| p.queued) {
            return Some(p.conn);
        }
        let best = paths.iter().filter_map(|p| Some((Self::arrival_us(p)?, !p.room, p.conn, p.room))).min()?;
        if best.3 {
            return Some(best.2);
        }
        // The earliest path has no room. A later one with room takes the record if it delivers
        // it before the earliest could deliver the stream's backlog: a bulk transfer then uses
        // every path, while a short message (a small backlog) waits for the fast path rather
        // than arriving late on the slow one.
        let drained = paths.iter().find(|p| p.conn == best.2).and_then(Self::drained_us)?;
        let later = paths.iter().filter(|p| p.room).filter_map(|p| Some((Self::arrival_us(p)?, p.conn))).min()?;
        (later.0 <= drained).then_some(later.1)
    }
}

/// An application-defined policy.
pub struct FnScheduler<F>(pub F);

impl<F: FnMut(StreamId, &[PathView]) -> Option<ConnId> + Send> Scheduler for FnScheduler<F> {
    fn pick(&mut self, stream: StreamId, paths: &[PathView]) -> Option<ConnId> {
        (self.0)(stream, paths)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(conn: ConnId, rtt: Option<u32>, queued: usize, sent: u64) -> PathView {
        PathView {
            conn,
            rtt_us: rtt,
            cwnd: None,
            queued,
            bytes_sent: sent,
            room: true,
            delivery_rate: None,
            kernel_unsent: None,
            stream_backlog: 0,
        }
    }

    /// A measured path: RTT in ms, rate in Mbit/s, bytes queued (ours), room.
    fn measured(conn: ConnId, rtt_ms: u32, mbit: u64, queued: usize, room: bool) -> PathView {
        PathView {
            rtt_us: Some(rtt_ms * 1000),
            delivery_rate: Some(mbit * 1_000_000 / 8),
            room,
            ..path(conn, None, queued, 0)
        }
    }

    #[test]
    fn earliest_arrival_waits_for_the_fast_path_rather_than_sending_late_on_the_slow_one() {
        let mut s = EarliestArrival;
        // Wi-Fi 40 Mbit/s 20 ms RTT, LTE 10 Mbit/s 80 ms RTT, both empty: Wi-Fi.
        let wifi = |q, room| measured(0, 20, 40, q, room);
        let lte = |q, room| measured(1, 80, 10, q, room);
        assert_eq!(s.pick_any(0, &[wifi(0, true), lte(0, true)]), Some(0));
        // Wi-Fi has 100 KB queued (20 ms + 10 ms = 30 ms) < LTE's 40 ms: still Wi-Fi, and when it
        // has no room the record waits for it.
        assert_eq!(s.pick_any(0, &[wifi(100_000, true), lte(0, true)]), Some(0));
        assert_eq!(s.pick_any(0, &[wifi(100_000, false), lte(0, true)]), None);
        // Wi-Fi's queue is 500 KB deep (100 ms + 10 ms): LTE delivers first, so it carries.
        assert_eq!(s.pick_any(0, &[wifi(500_000, false), lte(0, true)]), Some(1));
        // The kernel's unsent bytes count as queue too.
        let mut deep = wifi(0, true);
        deep.kernel_unsent = Some(500_000);
        assert_eq!(s.pick_any(0, &[deep, lte(0, true)]), Some(1));
        // An unmeasured path with room is tried first; without room nothing is sent.
        assert_eq!(s.pick_any(0, &[wifi(0, true), path(7, None, 0, 0)]), Some(7));
        assert_eq!(s.pick_any(0, &[wifi(0, false), lte(0, false)]), None);
        assert_eq!(s.pick_any(0, &[]), None);
        // A bulk stream (1 MB waiting: 200 ms through Wi-Fi alone) uses LTE while Wi-Fi is full,
        // since LTE delivers in 40 ms; a 100 KB message (Wi-Fi: 30 ms) waits for Wi-Fi.
        let backlog = |mut p: PathView, b| {
            p.stream_backlog = b;
            p
        };
        assert_eq!(
            s.pick_any(0, &[backlog(wifi(100_000, false), 1_000_000), backlog(lte(0, true), 1_000_000)]),
            Some(1)
        );
        assert_eq!(s.pick_any(0, &[backlog(wifi(100_000, false), 20_000), backlog(lte(0, true), 20_000)]), None);
        // Without a rate, a window per RTT: 10 segments per 10 ms ≈ 11.6 Mbit/s.
        let mut p = path(3, Some(10_000), 14_480, 0);
        p.cwnd = Some(10);
        assert_eq!(EarliestArrival::arrival_us(&p), Some(10_000 + 5_000));
    }

    #[test]
    fn pick_any_defaults_to_pick_over_the_paths_with_room() {
        let mut rr = RoundRobin::default();
        let mut full = path(0, Some(10), 0, 0);
        full.room = false;
        assert_eq!(rr.pick_any(0, &[full, path(2, None, 0, 0)]), Some(2));
        assert_eq!(LowestRtt.pick_any(0, &[full]), None);
    }

    #[test]
    fn policies() {
        let paths = [path(0, Some(900), 10, 300), path(2, Some(100), 50, 100), path(5, None, 0, 0)];
        let mut rr = RoundRobin::default();
        let picks: Vec<_> = (0..4).filter_map(|_| rr.pick(0, &paths)).collect();
        assert_eq!(picks, [0, 2, 5, 0]);
        assert_eq!(LowestRtt.pick(0, &paths), Some(2));
        assert_eq!(LowestRtt.pick(0, &[path(1, None, 9, 0), path(3, None, 2, 0)]), Some(3));
        let mut w = Weighted { weights: HashMap::from([(0, 3), (2, 1)]) };
        // 300/3 = 100, 100/1 = 100, 0/1 = 0 -> conn 5 is furthest below its share.
        assert_eq!(w.pick(0, &paths), Some(5));
        let mut f = FnScheduler(|_s: StreamId, p: &[PathView]| p.last().map(|p| p.conn));
        assert_eq!(f.pick(0, &paths), Some(5));
        assert_eq!(LowestRtt.pick(0, &[]), None);
    }
}
