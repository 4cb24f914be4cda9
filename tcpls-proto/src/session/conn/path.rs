//! Where a connection goes: its addresses, its role (regular or backup) and what the IO layer
//! tells of its path (TCP_INFO), for the scheduler.

use std::net::SocketAddr;

use crate::session::sched::PathInfo;
use crate::session::send_budget::{PathCarry, PeakRate};

#[derive(Debug, Default)]
pub(in crate::session) struct ConnPath {
    pub(in crate::session) local: Option<SocketAddr>,
    pub(in crate::session) remote: Option<SocketAddr>,
    /// Path information from the IO layer (TCP_INFO), for the scheduler.
    pub(in crate::session) tcp: PathInfo,
    /// The peak of the recent delivery rates in `tcp` (the send budget's measure of the path).
    pub(in crate::session) peak_rate: PeakRate,
    /// A backup path (Path Priority, PROTOCOL.md §3): no unsteered stream data while a regular
    /// connection can carry it.
    pub(in crate::session) backup: bool,
}

impl ConnPath {
    /// The IO layer's latest report (TCP_INFO).
    pub(in crate::session) fn report(&mut self, info: PathInfo) {
        self.tcp = info;
        if let Some(rate) = info.delivery_rate {
            self.peak_rate.record(rate);
        }
    }

    /// What the path carries, for the send budget, once the IO layer has reported its RTT.
    pub(in crate::session) fn carry(&self) -> Option<PathCarry> {
        let rtt_us = self.tcp.rtt_us?;
        let cwnd_bytes = match (self.tcp.cwnd, self.tcp.mss) {
            (Some(cwnd), Some(mss)) => u64::from(cwnd).saturating_mul(u64::from(mss)),
            _ => 0,
        };
        Some(PathCarry {
            rate: self.peak_rate.get(),
            rtt: std::time::Duration::from_micros(u64::from(rtt_us)),
            cwnd_bytes,
        })
    }
}
