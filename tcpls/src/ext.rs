//! The thesis extensions on tokio, as methods of [`Session`]: RTT probes, the peer's TCP_INFO
//! view, NAT detection, rate limits, user timeout and congestion control (PROTOCOL.md §7,
//! frames 0x13..=0x1B).
//!
//! The probes send a request through the core and wait for the answer that the event dispatch
//! (`shared.rs`) keeps in [`ProbeAnswers`]; the peer's socket-option requests are applied by the
//! dispatch itself (`peer_requests.rs`), their outcomes read with
//! [`Session::poll_socket_options`].

use std::future::poll_fn;
use std::io;
use std::net::SocketAddr;
use std::task::Poll;
use std::time::{Duration, Instant};

use tcpls_proto::ConnId;

use crate::probe_answers::ProbeAnswers;
use crate::session::Session;
use crate::sockopt;
use crate::tcp_info::TcpInfo;

/// How long the probes wait for the peer's answer.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

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

fn no_conn(conn: ConnId) -> impl FnOnce(tcpls_proto::Error) -> io::Error {
    move |e| io::Error::new(io::ErrorKind::NotConnected, format!("connection {conn}: {e}"))
}

/// The descriptor of `conn`'s socket, or why there is none.
fn socket_of(inner: &crate::shared::SessionState, conn: ConnId) -> io::Result<std::os::fd::RawFd> {
    inner
        .fd(conn)
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, format!("no open socket for connection {conn}")))
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
        pick: impl Fn(&ProbeAnswers) -> Option<(u64, T)>,
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
            inner.wait_state(cx);
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
            inner.ext.latest()
        };
        let us = self.wait_answer("RTT Echo", after, |r| r.rtt_us(conn)).await?;
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
            inner.ext.latest()
        };
        self.wait_answer("TCP Info", after, |r| r.tcp_info(conn)).await
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
            (inner.ext.latest(), inner.proto.addresses(conn).0)
        };
        let seen_by_peer = self.wait_answer("Address Echo", after, |r| r.addr(conn)).await?;
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
        sockopt::set_user_timeout(socket_of(&inner, conn)?, ms)?;
        inner.proto.request_user_timeout(conn, ms).map_err(no_conn(conn))?;
        inner.wake_driver();
        Ok(())
    }

    /// Asks the peer to switch its socket of `conn` to TCP congestion control `name`; the peer
    /// applies it if its policy allows (the outcome is reported on its side by
    /// [`Session::poll_socket_options`]).
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
        sockopt::congestion(socket_of(&inner, conn)?)
    }

    /// Switches our own socket of `conn` to congestion control `name`.
    pub fn set_congestion_control(&self, conn: ConnId, name: &str) -> io::Result<()> {
        let inner = self.shared.lock();
        sockopt::set_congestion(socket_of(&inner, conn)?, name)
    }

    /// Our socket's TCP_USER_TIMEOUT on `conn`, in milliseconds.
    pub fn user_timeout(&self, conn: ConnId) -> io::Result<u32> {
        let inner = self.shared.lock();
        sockopt::user_timeout(socket_of(&inner, conn)?)
    }
}
