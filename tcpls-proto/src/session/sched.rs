//! Which connection carries the next record of a stream that is not steered to one.
//!
//! Spreading one stream's records over several connections is bandwidth aggregation
//! (PROTOCOL.md §4); the receiver reorders by offset. The scheduler only sees connections that
//! can take a record now (their transmit buffer has room), so a slower path naturally gets
//! fewer records; the policies below refine that choice.

use std::collections::HashMap;

use crate::event::{ConnId, StreamId};

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
}

/// A policy for unsteered stream records. Return one of `paths[i].conn`, or None to send nothing
/// now.
pub trait Scheduler: Send {
    fn pick(&mut self, stream: StreamId, paths: &[PathView]) -> Option<ConnId>;
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
        PathView { conn, rtt_us: rtt, cwnd: None, queued, bytes_sent: sent }
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
