//! The answers to our probes (RTT Echo, TCP Info, Address Echo), kept per connection until the
//! async calls of `ext.rs` (`probe_rtt`, `peer_tcp_info`, `probe_nat`) collect them.
//!
//! The event dispatch (`shared.rs`) hands every core event to [`ProbeAnswers::record`]. Each
//! answer carries the sequence number of its arrival, so a call takes only an answer newer than
//! its own request. The connection IDs come from the peer's frames: only connections that have
//! a socket here are recorded, and their entries go when they close, so the maps never hold more
//! entries than the session has connections (a hostile peer's unsolicited echoes about made-up IDs
//! would otherwise grow them by hundreds of MiB).

use std::collections::HashMap;
use std::net::SocketAddr;

use tcpls_proto::{ConnId, Event};

use crate::tcp_info::TcpInfo;

#[derive(Debug, Default)]
pub(crate) struct ProbeAnswers {
    /// Sequence number of the latest answer recorded.
    seq: u64,
    rtt_us: HashMap<ConnId, (u64, u64)>,
    tcp_info: HashMap<ConnId, (u64, TcpInfo)>,
    addr: HashMap<ConnId, (u64, SocketAddr)>,
}

impl ProbeAnswers {
    /// Keeps `event` if it answers a probe about a connection that `has_socket`; forgets a
    /// closed connection's answers. Returns whether an answer arrived (its waiters are to wake).
    pub(crate) fn record(&mut self, event: &Event, has_socket: impl Fn(ConnId) -> bool) -> bool {
        match event {
            Event::RttMeasured { conn, rtt_us } if has_socket(*conn) => {
                self.seq += 1;
                self.rtt_us.insert(*conn, (self.seq, *rtt_us));
                true
            }
            Event::PeerTcpInfo { conn, info } if has_socket(*conn) => {
                self.seq += 1;
                self.tcp_info.insert(*conn, (self.seq, TcpInfo::from(*info)));
                true
            }
            Event::AddressEchoed { conn, addr } if has_socket(*conn) => {
                self.seq += 1;
                self.addr.insert(*conn, (self.seq, *addr));
                true
            }
            Event::ConnectionClosed { conn, .. } => {
                self.rtt_us.remove(conn);
                self.tcp_info.remove(conn);
                self.addr.remove(conn);
                false
            }
            _ => false,
        }
    }

    /// The sequence number of the latest answer: a request sent now is answered by a later one.
    pub(crate) fn latest(&self) -> u64 {
        self.seq
    }

    /// The latest RTT measured on `conn` (microseconds), with its sequence number.
    pub(crate) fn rtt_us(&self, conn: ConnId) -> Option<(u64, u64)> {
        self.rtt_us.get(&conn).copied()
    }

    /// The latest TCP_INFO the peer sent about `conn`, with its sequence number.
    pub(crate) fn tcp_info(&self, conn: ConnId) -> Option<(u64, TcpInfo)> {
        self.tcp_info.get(&conn).copied()
    }

    /// The latest address the peer saw for our end of `conn`, with its sequence number.
    pub(crate) fn addr(&self, conn: ConnId) -> Option<(u64, SocketAddr)> {
        self.addr.get(&conn).copied()
    }

    /// Entries held over all maps (`Session::danger_probe_answer_entries`).
    #[cfg(feature = "danger")]
    pub(crate) fn entries(&self) -> usize {
        self.rtt_us.len() + self.tcp_info.len() + self.addr.len()
    }
}
