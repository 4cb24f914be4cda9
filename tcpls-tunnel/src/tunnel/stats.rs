//! Counters of a tunnel end (all sessions, or one session of the concentrator), and of a TM3
//! proxy session (the same type: only the counters TM3 has move).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::relay::{Outcome, Report};

/// Live counters; [`Stats::snapshot`] reads them.
#[derive(Debug, Default)]
pub struct Stats {
    streams: AtomicU64,
    active: AtomicU64,
    connected: AtomicU64,
    connect_failed: AtomicU64,
    rejected: AtomicU64,
    refused_dest: AtomicU64,
    sessions_refused: AtomicU64,
    closed: AtomicU64,
    local_resets: AtomicU64,
    peer_resets: AtomicU64,
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
    pipes_dropped: AtomicU64,
}

/// The counters at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// Tunneled connections attempted (streams opened or accepted; TM3: connections opened).
    pub streams: u64,
    /// Being relayed now.
    pub active: u64,
    /// Destination connected (Connect OK).
    pub connected: u64,
    /// Destination connection failed (Error 0x2).
    pub connect_failed: u64,
    /// Bad TLVs, handshake timeouts, refused SOCKS requests (TM3: connection protocol errors).
    pub rejected: u64,
    /// Refused by the concentrator's destination policy (Error 0x3; TM3: the remote proxy's,
    /// reset with FIN 0x99): nothing was connected.
    pub refused_dest: u64,
    /// Concentrator totals only: sessions closed right after their handshake because
    /// `max_sessions` were being served, or refused by the per-client policy (unknown client,
    /// its `max-sessions` reached).
    pub sessions_refused: u64,
    /// Ended with FIN both ways.
    pub closed: u64,
    /// Ended by a TCP RST on this side (sent on as Stream Reset 0x2).
    pub local_resets: u64,
    /// Ended by a Stream Reset from the other end or a broken session (sent on as TCP RST).
    pub peer_resets: u64,
    /// Bytes from the client side towards destinations.
    pub bytes_up: u64,
    /// Bytes from destinations towards the client side.
    pub bytes_down: u64,
    /// TM3 only: pipes lost (their connections are reset); always 0 for the TCPLS tunnel.
    pub pipes_dropped: u64,
}

/// For log lines: `3 connections (2 connected, 1 failed, 0 rejected), 1.2 MB up, 5.0 MB down`.
impl std::fmt::Display for StatsSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} connection{} ({} connected, {} failed, {} refused by policy, {} rejected, {} closed, {} reset here, \
             {} reset by the peer), {} bytes up, {} bytes down",
            self.streams,
            if self.streams == 1 { "" } else { "s" },
            self.connected,
            self.connect_failed,
            self.refused_dest,
            self.rejected,
            self.closed,
            self.local_resets,
            self.peer_resets,
            self.bytes_up,
            self.bytes_down
        )
    }
}

impl Stats {
    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            streams: self.streams.load(Relaxed),
            active: self.active.load(Relaxed),
            connected: self.connected.load(Relaxed),
            connect_failed: self.connect_failed.load(Relaxed),
            rejected: self.rejected.load(Relaxed),
            refused_dest: self.refused_dest.load(Relaxed),
            sessions_refused: self.sessions_refused.load(Relaxed),
            closed: self.closed.load(Relaxed),
            local_resets: self.local_resets.load(Relaxed),
            peer_resets: self.peer_resets.load(Relaxed),
            bytes_up: self.bytes_up.load(Relaxed),
            bytes_down: self.bytes_down.load(Relaxed),
            pipes_dropped: self.pipes_dropped.load(Relaxed),
        }
    }

    pub(crate) fn stream(&self) {
        self.streams.fetch_add(1, Relaxed);
    }

    pub(crate) fn connect_failed(&self) {
        self.connect_failed.fetch_add(1, Relaxed);
    }

    pub(crate) fn rejected(&self) {
        self.rejected.fetch_add(1, Relaxed);
    }

    pub(crate) fn refused_dest(&self) {
        self.refused_dest.fetch_add(1, Relaxed);
    }

    pub(crate) fn session_refused(&self) {
        self.sessions_refused.fetch_add(1, Relaxed);
    }

    pub(crate) fn pipe_dropped(&self) {
        self.pipes_dropped.fetch_add(1, Relaxed);
    }

    pub(crate) fn connected(&self) {
        self.connected.fetch_add(1, Relaxed);
    }

    pub(crate) fn relay_started(&self) {
        self.active.fetch_add(1, Relaxed);
    }

    /// `client_side`: this side's TCP connections are the application's (client) rather than
    /// the destinations (concentrator).
    pub(crate) fn relay_ended(&self, r: &Report, client_side: bool) {
        self.active.fetch_sub(1, Relaxed);
        let (up, down) = if client_side { (r.sent, r.received) } else { (r.received, r.sent) };
        self.bytes_up.fetch_add(up, Relaxed);
        self.bytes_down.fetch_add(down, Relaxed);
        match r.outcome {
            Outcome::Closed => &self.closed,
            Outcome::LocalReset => &self.local_resets,
            Outcome::PeerReset => &self.peer_resets,
            Outcome::Refused(super::tlv::ERR_CONNECTION_FAILURE) => &self.connect_failed,
            Outcome::Refused(super::tlv::ERR_DESTINATION_REFUSED) => &self.refused_dest,
            Outcome::Refused(_) | Outcome::NoAnswer => &self.rejected,
        }
        .fetch_add(1, Relaxed);
    }
}
