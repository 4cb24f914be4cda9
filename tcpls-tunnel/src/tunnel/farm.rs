//! A client of several concentrators (a farm's nodes, or standbys): the addresses are tried in
//! order until one opens a session; and, behind a load balancer, the session's further
//! connections go to the address its concentrator advertised (New Address), never through the
//! balancer, which could hand them to another node (docs/TUNNEL.md, "Farm").

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use rustls::pki_types::ServerName;
use tcpls::{PathOptions, Session, TcplsConnector};
use tracing::{info, warn};

/// How long a new session waits for its concentrator's New Address (it comes with the first
/// records, with the join tokens) before it joins through the address it dialed.
pub const ADVERTISE_WAIT: Duration = Duration::from_secs(1);

/// Opens a session to the first of `concentrators` that accepts one, in order. Each failure is
/// logged; the error of the last one is returned (with every address tried named).
pub(crate) async fn open_first(
    connector: &TcplsConnector,
    concentrators: &[SocketAddr],
    server_name: &ServerName<'static>,
    connect_timeout: Duration,
) -> io::Result<(Session, SocketAddr)> {
    let mut last = io::Error::new(io::ErrorKind::InvalidInput, "no concentrator address");
    for (i, addr) in concentrators.iter().enumerate() {
        let attempt = tokio::time::timeout(connect_timeout, connector.connect(*addr, server_name.clone()));
        match attempt.await {
            Ok(Ok(session)) => return Ok((session, *addr)),
            Ok(Err(e)) => last = e,
            Err(_) => {
                last = io::Error::new(io::ErrorKind::TimedOut, format!("no handshake within {connect_timeout:?}"))
            }
        }
        if i + 1 < concentrators.len() {
            warn!("tunnel client: concentrator {addr} failed ({last}); trying {}", concentrators[i + 1]);
        }
    }
    if concentrators.len() > 1 {
        let all: Vec<String> = concentrators.iter().map(|a| a.to_string()).collect();
        let kind = last.kind();
        return Err(io::Error::new(kind, format!("every concentrator failed ({}); last: {last}", all.join(", "))));
    }
    Err(last)
}

/// The address further connections of `session` (opened through `dialed`) should join: the
/// first address its concentrator advertised, waited for up to [`ADVERTISE_WAIT`]. Without
/// one, `dialed` (and a warning: joins through a balancer may reach another node).
pub(crate) async fn join_address(session: &Session, dialed: SocketAddr) -> SocketAddr {
    let deadline = tokio::time::Instant::now() + ADVERTISE_WAIT;
    loop {
        if let Some((_, addr)) = session.peer_addresses().into_iter().next() {
            let how = handshake_kind(session);
            info!("tunnel client: served by the concentrator at {addr} (reached through {dialed}; {how})");
            session.rejoin_at_advertised_addresses_only();
            return addr;
        }
        if tokio::time::Instant::now() >= deadline || session.is_closing() {
            warn!("tunnel client: the concentrator reached through {dialed} advertised no address; joining through it");
            return dialed;
        }
        // New Address arrives with the server's first records, a moment after the handshake:
        // no event to await for it, so poll briefly.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// How the session's first handshake went, for the log: a farm client resumes on any node.
pub(crate) fn handshake_kind(session: &Session) -> &'static str {
    match session.handshake_info() {
        Some(h) if h.resumed => "resumed a session ticket",
        _ => "full handshake",
    }
}

/// How a client tells that the node holding its session died, once the session has no usable
/// connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NodeWatch {
    /// Not a farm client: wait [`super::ORPHAN_GRACE`] for the session to rejoin.
    Wait,
    /// Joins at the node's advertised address: a node that refuses connections there is dead.
    Probe,
    /// Joins routed by the balancer: the node cannot be reached apart, so the wait is short
    /// ([`ROUTED_ORPHAN_GRACE`]): a session whose every connection broke is replaced rather
    /// than rejoined (its tunneled connections break either way if the node died).
    ShortWait,
}

/// [`NodeWatch::ShortWait`]'s grace.
pub const ROUTED_ORPHAN_GRACE: Duration = Duration::from_millis(300);

impl NodeWatch {
    pub(crate) fn of(join_advertised: bool, routed_joins: bool) -> Self {
        match (join_advertised, routed_joins) {
            (true, _) => Self::Probe,
            (false, true) => Self::ShortWait,
            (false, false) => Self::Wait,
        }
    }

    pub(crate) fn grace(self) -> Duration {
        match self {
            Self::ShortWait => ROUTED_ORPHAN_GRACE,
            Self::Wait | Self::Probe => super::ORPHAN_GRACE,
        }
    }
}

/// Whether the node serving `session` is down: the first address it advertised refuses TCP
/// connections (nothing listens there any more). Then the session cannot rejoin it, and a new
/// one can be opened through the balancer at once, without waiting for the orphan grace.
pub(crate) async fn node_is_down(session: &Session) -> bool {
    let Some((_, addr)) = session.peer_addresses().into_iter().next() else { return false };
    match tokio::time::timeout(NODE_PROBE_TIMEOUT, tokio::net::TcpStream::connect(addr)).await {
        Ok(Err(e)) => e.kind() == io::ErrorKind::ConnectionRefused,
        // Up (the probe connection is closed at once), or no answer: not known to be down.
        _ => false,
    }
}

/// How long [`node_is_down`] waits for its TCP connection.
const NODE_PROBE_TIMEOUT: Duration = Duration::from_millis(200);

/// `paths` with the ones towards `dialed` (the balancer) sent to `join_at` instead.
pub(crate) fn retarget(
    paths: &[(SocketAddr, PathOptions)],
    dialed: SocketAddr,
    join_at: SocketAddr,
) -> Vec<(SocketAddr, PathOptions)> {
    paths.iter().map(|(remote, local)| (if *remote == dialed { join_at } else { *remote }, local.clone())).collect()
}
