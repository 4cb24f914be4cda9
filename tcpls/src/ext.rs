//! The thesis extensions on tokio: RTT probes, the peer's TCP_INFO view, NAT detection, rate
//! limits, user timeout and congestion control (PROTOCOL.md §7, frames 0x13..=0x1B).
//!
//! The driver's event dispatch calls [`observe`] with every core event: answers to our probes are
//! kept per connection (the async calls below wait for them), and the peer's socket-option
//! requests are applied to the connection's socket, each outcome reported as
//! [`Event::SocketOptionApplied`].

use std::collections::HashMap;
use std::future::poll_fn;
use std::io;
use std::net::SocketAddr;
use std::task::Poll;
use std::time::{Duration, Instant};

/// User timeouts a peer may ask us to apply (TCP_USER_TIMEOUT, milliseconds).
pub const PEER_USER_TIMEOUT_MS: std::ops::RangeInclusive<u32> = 100..=600_000;

use tcpls_proto::{ConnId, Event};

use crate::session::Session;
use crate::shared::Inner;
use crate::tcp_info::TcpInfo;

/// How long the probes wait for the peer's answer.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Most events kept for the application (as in `shared.rs`).
const MAX_APP_EVENTS: usize = 1024;

/// Answers to our probes, per connection, each with the sequence number of its arrival. The
/// connection IDs come from the peer's frames: only connections that have a socket here are
/// recorded, and their entries go when they close, so the maps never hold more entries than
/// the session has connections (issue #14: unsolicited echoes about made-up IDs grew them by
/// hundreds of MiB).
#[derive(Debug, Default)]
pub(crate) struct ExtResults {
    seq: u64,
    rtt: HashMap<ConnId, (u64, u64)>,
    tcp_info: HashMap<ConnId, (u64, TcpInfo)>,
    addr: HashMap<ConnId, (u64, SocketAddr)>,
}

impl ExtResults {
    /// Connection `conn` ended: its answers go.
    fn forget(&mut self, conn: ConnId) {
        self.rtt.remove(&conn);
        self.tcp_info.remove(&conn);
        self.addr.remove(&conn);
    }

    /// Entries held over all maps (for `Session::danger_probe_answer_entries`).
    #[cfg(feature = "danger")]
    pub(crate) fn entries(&self) -> usize {
        self.rtt.len() + self.tcp_info.len() + self.addr.len()
    }
}

/// The result of [`Session::probe_nat`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NatReport {
    /// Our socket's local address.
    pub local: Option<SocketAddr>,
    /// The address and port the peer sees for our end of the connection (Address Echo).
    pub seen_by_peer: SocketAddr,
    /// They differ: a NAT (or a proxy) rewrote the address or the port.
    pub nat_detected: bool,
}

/// Called by the event dispatch for every core event, before it is routed.
pub(crate) fn observe(inner: &mut Inner, event: &Event) {
    let mut wake = true;
    match event {
        Event::RttMeasured { conn, rtt_us } if inner.fds.contains_key(conn) => {
            inner.ext.seq += 1;
            inner.ext.rtt.insert(*conn, (inner.ext.seq, *rtt_us));
        }
        Event::PeerTcpInfo { conn, info } if inner.fds.contains_key(conn) => {
            inner.ext.seq += 1;
            inner.ext.tcp_info.insert(*conn, (inner.ext.seq, TcpInfo::from(*info)));
        }
        Event::AddressEchoed { conn, addr } if inner.fds.contains_key(conn) => {
            inner.ext.seq += 1;
            inner.ext.addr.insert(*conn, (inner.ext.seq, *addr));
        }
        Event::ConnectionClosed { conn, .. } => {
            inner.ext.forget(*conn);
            // The dispatch wakes the waiters of this event itself.
            wake = false;
        }
        Event::UserTimeoutRequested { conn, timeout_ms } => {
            let result = if *timeout_ms != 0 && !PEER_USER_TIMEOUT_MS.contains(timeout_ms) {
                // A peer may tune failure detection, not make our sockets fail at the slightest
                // delay nor hang for hours. 0 restores the system default.
                Err(format!("{timeout_ms} ms is outside the accepted range {PEER_USER_TIMEOUT_MS:?} ms"))
            } else {
                match inner.fds.get(conn) {
                    Some(fd) => crate::sockopt::set_user_timeout(*fd, *timeout_ms).map_err(|e| e.to_string()),
                    None => Err(format!("no open socket for connection {conn}")),
                }
            };
            push(
                inner,
                Event::SocketOptionApplied {
                    conn: *conn,
                    option: "user_timeout",
                    value: timeout_ms.to_string(),
                    result,
                },
            );
        }
        Event::CongestionControlRequested { conn, name } => {
            let result = if !inner.proto.congestion_control_allowed(name) {
                Err(format!("congestion control {name:?} is not allowed by our policy"))
            } else {
                match inner.fds.get(conn) {
                    Some(fd) => crate::sockopt::set_congestion(*fd, name).map_err(|e| e.to_string()),
                    None => Err(format!("no open socket for connection {conn}")),
                }
            };
            push(
                inner,
                Event::SocketOptionApplied { conn: *conn, option: "congestion_control", value: name.clone(), result },
            );
        }
        _ => wake = false,
    }
    if wake {
        for w in inner.state_waiters.drain(..) {
            w.wake();
        }
    }
}

fn push(inner: &mut Inner, event: Event) {
    if inner.app_events.len() == MAX_APP_EVENTS {
        inner.app_events.pop_front();
    }
    inner.app_events.push_back(event);
}

fn no_conn(conn: ConnId) -> impl FnOnce(tcpls_proto::Error) -> io::Error {
    move |e| io::Error::new(io::ErrorKind::NotConnected, format!("connection {conn}: {e}"))
}

fn timed_out(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, format!("no {what} from the peer within {PROBE_TIMEOUT:?}"))
}

impl Session {
    /// Waits for an answer recorded after sequence number `after`, picked by `pick`.
    async fn wait_answer<T>(
        &self,
        what: &str,
        after: u64,
        pick: impl Fn(&ExtResults) -> Option<(u64, T)>,
    ) -> io::Result<T> {
        let wait = poll_fn(|cx| {
            let mut inner = self.shared.lock();
            if let Some((seq, value)) = pick(&inner.ext) {
                if seq > after {
                    return Poll::Ready(Ok(value));
                }
            }
            if inner.driver_done {
                return Poll::Ready(Err(io::Error::new(io::ErrorKind::NotConnected, "session is over")));
            }
            inner.state_waiters.push(cx.waker().clone());
            Poll::Pending
        });
        tokio::time::timeout(PROBE_TIMEOUT, wait).await.map_err(|_| timed_out(what))?
    }

    /// Round-trip time of connection `conn` measured at the application level (RTT Probe, echoed
    /// by the peer on the same connection: includes both TCPLS stacks, not only the network).
    pub async fn probe_rtt(&self, conn: ConnId) -> io::Result<Duration> {
        let after = {
            let mut inner = self.shared.lock();
            inner.proto.probe_rtt(conn, Instant::now()).map_err(no_conn(conn))?;
            inner.wake_driver();
            inner.ext.seq
        };
        let us = self.wait_answer("RTT Echo", after, |r| r.rtt.get(&conn).copied()).await?;
        Ok(Duration::from_micros(us))
    }

    /// The peer's kernel view (TCP_INFO) of connection `conn`.
    pub async fn peer_tcp_info(&self, conn: ConnId) -> io::Result<TcpInfo> {
        let after = {
            let mut inner = self.shared.lock();
            if !inner.proto.is_connection_usable(conn) {
                return Err(io::Error::new(io::ErrorKind::NotConnected, format!("connection {conn} is not usable")));
            }
            inner.proto.request_tcp_info(conn);
            inner.wake_driver();
            inner.ext.seq
        };
        self.wait_answer("TCP Info", after, |r| r.tcp_info.get(&conn).copied()).await
    }

    /// Our own kernel view (TCP_INFO) of connection `conn`, while its socket is open.
    pub fn local_tcp_info(&self, conn: ConnId) -> Option<TcpInfo> {
        self.shared.lock().tcp_info(conn)
    }

    /// NAT detection: asks the peer which address and port it sees for our end of `conn` and
    /// compares them with our socket's local address.
    pub async fn probe_nat(&self, conn: ConnId) -> io::Result<NatReport> {
        let (after, local) = {
            let mut inner = self.shared.lock();
            inner.proto.probe_address(conn).map_err(no_conn(conn))?;
            inner.wake_driver();
            (inner.ext.seq, inner.proto.addresses(conn).0)
        };
        let seen_by_peer = self.wait_answer("Address Echo", after, |r| r.addr.get(&conn).copied()).await?;
        Ok(NatReport { local, seen_by_peer, nat_detected: local != Some(seen_by_peer) })
    }

    /// Caps the rate at which the peer sends to us on `conn` (Rate Limit frame), in bytes per
    /// second; 0 removes the cap. The peer paces: its writes just go slower.
    pub fn set_peer_rate_limit(&self, conn: ConnId, bytes_per_second: u64) -> io::Result<()> {
        let mut inner = self.shared.lock();
        inner.proto.set_rate_limit(conn, bytes_per_second).map_err(no_conn(conn))?;
        inner.wake_driver();
        Ok(())
    }

    /// Caps our own sending rate on `conn` (bytes per second, 0 removes the cap), the same
    /// pacing a peer's Rate Limit installs.
    pub fn set_send_rate_limit(&self, conn: ConnId, bytes_per_second: u64) {
        let mut inner = self.shared.lock();
        inner.proto.limit_send_rate(conn, bytes_per_second, Instant::now());
        inner.wake_driver();
    }

    /// TCP user timeout on both ends of `conn`: our socket's TCP_USER_TIMEOUT now, and a User
    /// Timeout frame asking the peer to do the same. Unacknowledged data older than that fails
    /// the connection (reported as `ConnectionClosed`; the session continues on the others).
    pub fn set_user_timeout(&self, conn: ConnId, timeout: Duration) -> io::Result<()> {
        let ms = u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX);
        let mut inner = self.shared.lock();
        let fd = *inner.fds.get(&conn).ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotConnected, format!("no open socket for connection {conn}"))
        })?;
        crate::sockopt::set_user_timeout(fd, ms)?;
        inner.proto.request_user_timeout(conn, ms).map_err(no_conn(conn))?;
        inner.wake_driver();
        Ok(())
    }

    /// Asks the peer to switch its socket of `conn` to TCP congestion control `name`; the peer
    /// applies it if its policy allows (the outcome is reported on its side as
    /// [`Event::SocketOptionApplied`]).
    pub fn request_peer_congestion_control(&self, conn: ConnId, name: &str) -> io::Result<()> {
        let mut inner = self.shared.lock();
        inner
            .proto
            .request_congestion_control(conn, name)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        inner.wake_driver();
        Ok(())
    }

    /// Our socket's TCP congestion control on `conn` (Linux `TCP_CONGESTION`).
    pub fn congestion_control(&self, conn: ConnId) -> io::Result<String> {
        let inner = self.shared.lock();
        let fd = inner.fds.get(&conn).ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotConnected, format!("no open socket for connection {conn}"))
        })?;
        crate::sockopt::congestion(*fd)
    }

    /// Switches our own socket of `conn` to congestion control `name`.
    pub fn set_congestion_control(&self, conn: ConnId, name: &str) -> io::Result<()> {
        let inner = self.shared.lock();
        let fd = inner.fds.get(&conn).ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotConnected, format!("no open socket for connection {conn}"))
        })?;
        crate::sockopt::set_congestion(*fd, name)
    }

    /// Our socket's TCP_USER_TIMEOUT on `conn`, in milliseconds.
    pub fn user_timeout(&self, conn: ConnId) -> io::Result<u32> {
        let inner = self.shared.lock();
        let fd = inner.fds.get(&conn).ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotConnected, format!("no open socket for connection {conn}"))
        })?;
        crate::sockopt::user_timeout(*fd)
    }
}
