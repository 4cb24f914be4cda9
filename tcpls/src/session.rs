//! The application's handle on a TCPLS session.

use std::future::poll_fn;
use std::io;
use std::net::SocketAddr;
use std::task::Poll;

use tcpls_proto::{ConnId, Event, HandshakeInfo, SessionStats};

use crate::events::SocketOptionApplied;
use crate::path::PathOptions;
use crate::shared::Shared;
use crate::stream::{stream_error, RecvStream, SendStream};

/// A TCPLS session: many streams over TCP connections secured by TLS 1.3.
///
/// Cheap to clone; every clone refers to the same session. The session lives until it is
/// closed by both sides or fails, even when all handles are dropped (like a spawned task).
///
/// ```no_run
/// # async fn demo(session: tcpls::Session) -> std::io::Result<()> {
/// use tokio::io::{AsyncReadExt, AsyncWriteExt};
/// let (mut send, mut recv) = session.open_stream()?;
/// send.write_all(b"ping").await?;
/// send.shutdown().await?; // FIN
/// let mut reply = Vec::new();
/// recv.read_to_end(&mut reply).await?;
/// session.close().await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Session {
    pub(crate) shared: Shared,
}

/// Ends a joining connection that [`Session::join`] gave up on.
struct JoinGuard<'a> {
    shared: &'a Shared,
    id: ConnId,
    armed: bool,
}

impl Drop for JoinGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            let mut inner = self.shared.lock();
            inner.proto.handle_io_error(self.id, "join abandoned", std::time::Instant::now());
            inner.wake_driver();
        }
    }
}

/// First and longest pause between rounds of rejoin attempts.
const REJOIN_FIRST_BACKOFF: std::time::Duration = std::time::Duration::from_millis(100);
const REJOIN_MAX_BACKOFF: std::time::Duration = std::time::Duration::from_secs(2);

/// `d` ± 25%, from the clock's low bits (spreading clients apart needs no cryptographic
/// randomness).
pub(crate) fn jittered(d: std::time::Duration) -> std::time::Duration {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |t| t.subsec_nanos());
    let permille = 750 + u64::from(nanos % 501);
    d * u32::try_from(permille).unwrap_or(1000) / 1000
}

/// How long a join waits for the server's tokens.
const TOKEN_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// One TCP connection of a session, as reported by [`Session::connections`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionInfo {
    pub id: ConnId,
    pub local: Option<SocketAddr>,
    pub remote: Option<SocketAddr>,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// Can carry data now (handshake done, not closing, not failed).
    pub usable: bool,
    /// Suspect of silence: its records went unacknowledged past their deadline, so it takes no
    /// new data until it acknowledges again (PROTOCOL.md §5, "Silent paths"); still `usable`.
    pub suspect: bool,
    /// The kernel's view of the TCP connection (Linux TCP_INFO), while its socket is open.
    pub tcp_info: Option<crate::tcp_info::TcpInfo>,
}

impl Session {
    pub(crate) fn new(shared: Shared) -> Self {
        Self { shared }
    }

    /// Opens a bidirectional stream. The peer sees it when the first byte (or FIN) arrives.
    pub fn open_stream(&self) -> io::Result<(SendStream, RecvStream)> {
        let mut inner = self.shared.lock();
        let id = inner.proto.open_stream().map_err(stream_error)?;
        inner.trace_stream(id, "opened", None);
        drop(inner);
        Ok(self.stream_pair(id))
    }

    fn stream_pair(&self, id: u32) -> (SendStream, RecvStream) {
        (SendStream::new(self.shared.clone(), id), RecvStream::new(self.shared.clone(), id))
    }

    /// Waits for a stream opened by the peer; `None` once the session is over.
    pub async fn accept_stream(&self) -> Option<(SendStream, RecvStream)> {
        let id = poll_fn(|cx| {
            let mut inner = self.shared.lock();
            if let Some(id) = inner.proto.accept_stream() {
                return Poll::Ready(Some(id));
            }
            if inner.proto.is_closed() || inner.proto.peer_closed() || inner.driver_done {
                return Poll::Ready(None);
            }
            inner.wait_state(cx);
            Poll::Pending
        })
        .await?;
        Some(self.stream_pair(id))
    }

    /// The peer does not speak TCPLS; the session is one plain TLS byte stream (stream 0).
    pub fn is_fallback(&self) -> bool {
        self.shared.lock().proto.is_fallback()
    }

    /// Negotiated ALPN, cipher suite and whether the handshake resumed a session.
    pub fn handshake_info(&self) -> Option<HandshakeInfo> {
        self.shared.lock().proto.handshake_info().cloned()
    }

    /// Client: the server accepted our 0-RTT data ([`crate::TcplsConnector::connect_with_early_data`]).
    /// Server: the client's first bytes arrived as early data, before the handshake completed;
    /// they may be a replay (RESUMPTION.md): act only on idempotent requests until
    /// [`is_established`](Self::is_established).
    pub fn early_data_accepted(&self) -> bool {
        self.shared.lock().proto.early_data_accepted()
    }

    /// The handshake is complete (a server session handed out on 0-RTT data may not be yet).
    pub fn is_established(&self) -> bool {
        self.shared.lock().proto.is_established()
    }

    pub fn stats(&self) -> SessionStats {
        self.shared.lock().proto.stats()
    }

    /// The session's TCP connections with their addresses and byte counts.
    pub fn connections(&self) -> Vec<ConnectionInfo> {
        let inner = self.shared.lock();
        inner
            .proto
            .connection_ids()
            .into_iter()
            .map(|id| {
                let (local, remote) = inner.proto.addresses(id);
                let stats = inner.proto.connection_stats(id).unwrap_or_default();
                ConnectionInfo {
                    id,
                    local,
                    remote,
                    bytes_sent: stats.bytes_sent,
                    bytes_received: stats.bytes_received,
                    usable: inner.proto.is_connection_usable(id),
                    suspect: inner.proto.is_connection_suspect(id),
                    tcp_info: inner.tcp_info(id),
                }
            })
            .collect()
    }

    /// Join tokens received from the server (client side).
    pub fn token_count(&self) -> usize {
        self.shared.lock().proto.tokens().len()
    }

    /// Events beyond stream readiness, oldest first: `Established { fallback }` (whether the session
    /// runs TCPLS or fell back to plain TLS), tokens, connections, peer addresses, extension frames.
    /// At most 1024 are kept for an application that does not poll (the oldest go first).
    pub fn poll_events(&self) -> Vec<Event> {
        self.shared.lock().take_events()
    }

    /// What became of the peer's requests to change our sockets' options (congestion control,
    /// user timeout; see [`request_peer_congestion_control`](Self::request_peer_congestion_control)
    /// and [`set_user_timeout`](Self::set_user_timeout) on the peer's side), oldest first, at most
    /// 1024 kept. These outcomes come from this IO layer, not from the protocol core, hence a
    /// queue of their own beside [`poll_events`](Self::poll_events).
    pub fn poll_socket_options(&self) -> Vec<SocketOptionApplied> {
        self.shared.lock().take_socket_options()
    }

    /// Graceful close: every queued byte is sent, then close_notify; waits until the peer closed
    /// too and the sockets are shut. Returns the session's error, if it failed.
    pub async fn close(&self) -> Option<tcpls_proto::Error> {
        {
            let mut inner = self.shared.lock();
            inner.proto.close();
            inner.wake_driver();
        }
        self.closed().await
    }

    /// Waits until the session is over; returns its error, if it failed.
    pub async fn closed(&self) -> Option<tcpls_proto::Error> {
        poll_fn(|cx| {
            let mut inner = self.shared.lock();
            if inner.driver_done {
                return Poll::Ready(inner.proto.error().cloned());
            }
            inner.wait_state(cx);
            Poll::Pending
        })
        .await
    }

    /// Traces this session's events from now on into `sink` (docs/OBSERVABILITY.md §4); a
    /// server calls it on the sessions it accepts, a client may use
    /// [`TcplsConnector::with_trace`](crate::TcplsConnector::with_trace) to trace the handshake too.
    pub fn set_trace(&self, sink: std::sync::Arc<dyn crate::trace::TraceSink>) {
        self.shared.lock().set_trace(sink);
    }

    /// Memory the session holds against its budget (receive credit, buffers, unacknowledged
    /// records): what `tcpls serve --metrics` exports. O(streams + connections).
    pub fn memory_use(&self) -> tcpls_proto::MemoryUse {
        self.shared.lock().proto.memory_use()
    }

    /// Whether `other` is a handle to the same session.
    pub fn is_same(&self, other: &Session) -> bool {
        self.shared.same(&other.shared)
    }

    /// Hands a path manager decision to the session's trace, if it is traced.
    pub(crate) fn trace_path(&self, event: impl FnOnce() -> crate::trace::PathEvent) {
        self.shared.lock().trace_path(event);
    }

    /// Ends the session at once: queued data is dropped.
    pub fn abort(&self) {
        let mut inner = self.shared.lock();
        inner.proto.abort(std::time::Instant::now());
        inner.wake_driver();
    }

    /// Adds a TCP connection to `addr` (any address of the server, e.g. one it advertised) and
    /// joins it to this session with one of the server's tokens. Returns its connection ID once
    /// its handshake is done.
    pub async fn join(&self, addr: SocketAddr) -> io::Result<ConnId> {
        self.join_with(addr, &PathOptions::new()).await
    }

    /// [`join`](Self::join) with a deadline for the TCP connection and for the join handshake
    /// (each): a path whose middlebox swallows the join (paper §5.2) costs at most that long.
    /// On failure the joining connection is cancelled (it leaves a `ConnectionClosed` event) and
    /// the error names the address; the session goes on over its other connections.
    pub async fn join_within(&self, addr: SocketAddr, timeout: std::time::Duration) -> io::Result<ConnId> {
        self.join_with(addr, &PathOptions::new().timeout(timeout)).await
    }

    /// [`join`](Self::join) over a chosen path: from a local address or interface, with a
    /// deadline ([`PathOptions`]). A token is taken only once the TCP connection is up, so a
    /// path that cannot connect (an interface going down, a refused or unreachable network)
    /// costs no token, however often it is tried.
    pub async fn join_with(&self, addr: SocketAddr, path: &PathOptions) -> io::Result<ConnId> {
        let stream = path.connect(addr).await?;
        self.join_connected(addr, stream, path.timeout_or_default()).await
    }

    /// The second half of [`join_with`](Self::join_with): joins a TCP connection to `addr`
    /// that is up already (a token is taken now), waiting at most `timeout` for the server.
    pub(crate) async fn join_connected(
        &self,
        addr: SocketAddr,
        stream: tokio::net::TcpStream,
        timeout: std::time::Duration,
    ) -> io::Result<ConnId> {
        let id = self.take_token_for_join().await?;
        // From here on, an early return (an error, a timeout, or the caller dropping this
        // future) must end the half-made connection, or the session could never close.
        let mut guard = JoinGuard { shared: &self.shared, id, armed: true };
        crate::socket::configure(&stream)?;
        {
            let mut inner = self.shared.lock();
            inner.proto.set_addresses(id, stream.local_addr().ok(), stream.peer_addr().ok());
            let _ = inner.add_socket(id, stream);
        }
        // Done when the server answered on the new connection (it accepted the token).
        let wait = poll_fn(|cx| {
            let mut inner = self.shared.lock();
            if inner.proto.is_connection_usable(id) {
                return Poll::Ready(Ok(id));
            }
            if inner.driver_done || inner.proto.is_closed() || inner.proto.is_connection_finished(id) {
                let why = inner
                    .proto
                    .connection_error(id)
                    .map(|e| e.to_string())
                    .unwrap_or_else(|| "connection closed".into());
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::ConnectionRefused,
                    format!("join failed: {why}"),
                )));
            }
            inner.wait_state(cx);
            Poll::Pending
        });
        let result = tokio::time::timeout(timeout, wait).await.unwrap_or_else(|_| {
            Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("join to {addr} got no answer within {timeout:?}: cancelled"),
            ))
        });
        if result.is_ok() {
            guard.armed = false;
        }
        result
    }

    /// Break-before-make: every connection of this client session was lost; join a new one with
    /// a spare token, trying the server's advertised addresses first, then the original one,
    /// until one works or the session gives up (its rejoin deadline).
    ///
    /// Attempts back off exponentially (100 ms doubling up to 2 s, with ±25% jitter so that
    /// many clients cut off together do not return in step); failed TCP connects cost no token.
    pub(crate) async fn rejoin(&self, origin: Option<SocketAddr>) {
        let mut backoff = REJOIN_FIRST_BACKOFF;
        loop {
            let candidates: Vec<SocketAddr> = {
                let inner = self.shared.lock();
                if !inner.proto.is_orphaned() || inner.proto.is_closed() || inner.driver_done {
                    return;
                }
                let mut list: Vec<SocketAddr> = inner.proto.peer_addresses().iter().map(|(_, a)| *a).collect();
                if list.is_empty() || !inner.rejoin_advertised_only {
                    list.extend(origin);
                }
                list
            };
            for addr in candidates {
                if self.join(addr).await.is_ok() {
                    return;
                }
            }
            tokio::time::sleep(jittered(backoff)).await;
            backoff = (backoff * 2).min(REJOIN_MAX_BACKOFF);
        }
    }

    /// Starts a joining connection in the core. Tokens come with the server's first record,
    /// half a round trip after the handshake, so a join right after `connect` waits for them
    /// (a little while, not for a server that has none to give).
    async fn take_token_for_join(&self) -> io::Result<ConnId> {
        let attempt = poll_fn(|cx| {
            let mut inner = self.shared.lock();
            if inner.driver_done || inner.proto.is_closed() {
                return Poll::Ready(Err(io::Error::new(io::ErrorKind::NotConnected, "the session is over")));
            }
            match inner.proto.add_connection() {
                Ok(id) => Poll::Ready(Ok(id)),
                Err(tcpls_proto::Error::NoToken) if !inner.driver_done => {
                    inner.wait_state(cx);
                    Poll::Pending
                }
                Err(e) => Poll::Ready(Err(io::Error::other(e))),
            }
        });
        match tokio::time::timeout(TOKEN_WAIT, attempt).await {
            Ok(result) => result,
            Err(_) => Err(io::Error::other(tcpls_proto::Error::NoToken)),
        }
    }

    /// How long this session waits for a rejoin once every connection is lost, from now on
    /// ([`tcpls_proto::SessionConfig::rejoin_timeout`], default 10 s; a [`PathManager`](crate::PathManager)
    /// sets its outage tolerance). On a server, how long an orphaned session is kept for its
    /// client to come back.
    pub fn set_rejoin_timeout(&self, timeout: std::time::Duration) {
        let mut inner = self.shared.lock();
        inner.proto.set_rejoin_timeout(timeout);
        inner.wake_driver();
    }

    /// Since when every connection of this session has been lost (it waits for a rejoin), if so.
    pub fn orphaned_since(&self) -> Option<std::time::Instant> {
        self.shared.lock().proto.orphaned_since()
    }

    /// A path manager takes over (or gives back, `false`) the rejoin after an outage.
    pub(crate) fn set_managed(&self, managed: bool) {
        let mut inner = self.shared.lock();
        inner.managed = managed;
        inner.wake_driver();
    }

    /// A [`PathManager`](crate::PathManager) rejoins this session over its paths after an
    /// outage (for its outage tolerance), rather than the session's own rejoin.
    pub fn is_managed(&self) -> bool {
        self.shared.lock().managed
    }

    /// Ends a session that waits for a rejoin, with `ConnectionLost(why)`.
    pub(crate) fn end_orphaned(&self, why: String) {
        let mut inner = self.shared.lock();
        inner.proto.end_orphaned(tcpls_proto::Error::ConnectionLost(why));
        inner.wake_driver();
    }

    /// Recorded for the session's final error, should no rejoin come in time.
    pub(crate) fn set_rejoin_note(&self, note: String) {
        self.shared.lock().proto.set_rejoin_note(note);
    }

    /// Moves every stream steered to connection `from` to `to` and closes `from` gracefully
    /// (application-level migration: nothing is lost, the receiver reorders by offset).
    pub fn migrate(&self, from: ConnId, to: ConnId) -> io::Result<()> {
        let mut inner = self.shared.lock();
        inner.proto.migrate(from, to).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        inner.wake_driver();
        Ok(())
    }

    /// Client of a server farm behind a load balancer: rejoin (after every connection was
    /// lost) only at the addresses the server advertised, not at the address the session was
    /// opened to, which may lead to another server of the farm, which would refuse the join.
    /// Without an advertised address the origin is still tried.
    pub fn rejoin_at_advertised_addresses_only(&self) {
        self.shared.lock().rejoin_advertised_only = true;
    }

    /// The addresses the server advertised (New Address) and has not withdrawn.
    pub fn peer_addresses(&self) -> Vec<(u8, SocketAddr)> {
        self.shared.lock().proto.peer_addresses().to_vec()
    }

    /// The session is closing or over: a path manager starts no new connection for it.
    pub fn is_closing(&self) -> bool {
        let inner = self.shared.lock();
        inner.driver_done || inner.proto.is_closing()
    }

    /// The session is over (closed, failed, or its driver ended).
    pub fn is_closed(&self) -> bool {
        let inner = self.shared.lock();
        inner.driver_done || inner.proto.is_closed()
    }

    /// Drops one connection at once, as if it had failed (`reason` says why): its socket is
    /// closed and its unacknowledged records are sent again on the other connections, without
    /// waiting for a timeout. For a path known to be dead, e.g. its interface went down.
    pub fn abandon_connection(&self, conn: ConnId, reason: &str) {
        let mut inner = self.shared.lock();
        inner.proto.handle_io_error(conn, reason, std::time::Instant::now());
        inner.wake_driver();
    }

    /// Marks a connection as a backup path, or a regular one again (`false`), on both sides
    /// (Path Priority, PROTOCOL.md §3): while a regular connection is usable, neither side
    /// sends unsteered stream data on a backup one; when none is, backups carry everything.
    pub fn set_backup(&self, conn: ConnId, backup: bool) -> io::Result<()> {
        let mut inner = self.shared.lock();
        inner.proto.set_connection_backup(conn, backup).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        inner.wake_driver();
        Ok(())
    }

    /// Whether `conn` is a backup path (marked by either side).
    pub fn is_backup(&self, conn: ConnId) -> bool {
        self.shared.lock().proto.is_connection_backup(conn)
    }

    /// Gives up a connection suspect of silence (`ConnectionInfo::suspect`), e.g. once a new
    /// connection over the same path is up: its unacknowledged records go out on the others and
    /// the peer is told (Connection Reset). Returns false if it was not suspect.
    pub fn give_up_silent_connection(&self, conn: ConnId) -> bool {
        let mut inner = self.shared.lock();
        let given_up = inner.proto.give_up_silent_connection(conn);
        inner.wake_driver();
        given_up
    }

    /// Whether a connection is suspect of silence (PROTOCOL.md §5, "Silent paths").
    pub fn is_connection_suspect(&self, conn: ConnId) -> bool {
        self.shared.lock().proto.is_connection_suspect(conn)
    }

    /// Closes one TCP connection gracefully; the session continues on the others.
    pub fn close_connection(&self, conn: ConnId) -> io::Result<()> {
        let mut inner = self.shared.lock();
        inner.proto.close_connection(conn).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        inner.wake_driver();
        Ok(())
    }

    /// Sets the policy that spreads unsteered streams over connections (default: lowest RTT,
    /// or the least queued connection when RTTs are unknown).
    pub fn set_scheduler(&self, scheduler: Box<dyn tcpls_proto::Scheduler>) {
        self.shared.lock().proto.set_scheduler(scheduler);
    }

    /// Asks the peer for its kernel's view of connection `conn` (TCP Info Request); the answer
    /// arrives as [`Event::PeerTcpInfo`] in [`Session::poll_events`].
    pub fn request_peer_tcp_info(&self, conn: ConnId) {
        let mut inner = self.shared.lock();
        inner.proto.request_tcp_info(conn);
        inner.wake_driver();
    }

    /// Sets TCP_NOTSENT_LOWAT to `bytes` on every TCP connection open now (Linux) and returns
    /// how many it was set on. It keeps the kernel's unsent queue small, so what is sent next is
    /// decided late, by the session's scheduler (no head-of-line blocking of a small stream
    /// behind bulk data already handed to the kernel). Opt-in: connections joined later need
    /// another call; pair it with a small [`tcpls_proto::SessionConfig::transmit_high_water`].
    pub fn set_notsent_lowat(&self, bytes: u32) -> io::Result<usize> {
        let inner = self.shared.lock();
        let mut set = 0;
        for (_, fd) in inner.fds() {
            crate::sockopt::set_notsent_lowat(fd, bytes)?;
            set += 1;
        }
        Ok(set)
    }

    /// Connections that can carry data now.
    pub fn usable_connections(&self) -> Vec<ConnId> {
        let inner = self.shared.lock();
        inner.proto.connection_ids().into_iter().filter(|id| inner.proto.is_connection_usable(*id)).collect()
    }

    /// Waits for the first handshake to finish (used by connector and listener).
    pub(crate) async fn established(&self) -> Result<(), tcpls_proto::Error> {
        poll_fn(|cx| {
            let mut inner = self.shared.lock();
            if inner.proto.is_established() {
                return Poll::Ready(Ok(()));
            }
            if inner.proto.is_closed() || inner.driver_done {
                let e = inner.proto.error().cloned().unwrap_or(tcpls_proto::Error::SessionClosed);
                return Poll::Ready(Err(e));
            }
            inner.wait_state(cx);
            Poll::Pending
        })
        .await
    }
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Session").field(&self.shared.lock().proto).finish()
    }
}
