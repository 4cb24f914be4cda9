//! The local end: one TCPLS session to the concentrator (plus extra paths), and a front-end
//! (SOCKS5, fixed forward, transparent) that turns accepted TCP connections into streams.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;
use rustls::ClientConfig;
use tcpls::{PathOptions, RecvStream, SendStream, Session, TcplsConnector};
use tokio::io::AsyncReadExt;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::watch;
use tracing::{debug, error, info, warn};

use super::reconnect::{self, Backoff};
use super::redundant::FlowStreams;
use super::relay::{self, Outcome, Report};
use super::reverse;
use super::server::steer_round_robin;
use super::tlv::{self, ReadError, Tlv, Transport, ERR_CONNECTION_FAILURE, ERR_DESTINATION_REFUSED};
use super::udp::{Flows, Opener, Wrap};
use super::{Stats, Target, TunnelConfig};
use crate::frontend::{
    command, original_dst, reply, socks5_address, socks5_reply, socks5_reply_bound, socks5_request_for,
    socks5_udp_header, Frontend,
};
use crate::http_proxy;

/// Opening a tunneled connection failed.
#[derive(Debug)]
pub enum OpenError {
    /// The concentrator answered Error with this code (0x2: the destination connection failed).
    Refused(u16),
    /// The stream or session failed, or the answer was not valid.
    Failed(String),
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenError::Refused(ERR_CONNECTION_FAILURE) => f.write_str("the concentrator could not connect"),
            OpenError::Refused(ERR_DESTINATION_REFUSED) => {
                f.write_str("the concentrator's destination policy refuses this destination")
            }
            OpenError::Refused(tlv::ERR_CLIENT_SESSIONS) => f.write_str(
                "the concentrator refuses this session: this client (certificate name) already has as many \
                 sessions as its max-sessions allows; close another one or ask the operator to raise it",
            ),
            OpenError::Refused(tlv::ERR_CLIENT_UNKNOWN) => f.write_str(
                "the concentrator refuses this client: its per-client policy has no entry for this \
                 certificate's name (CN) and refuses unknown clients",
            ),
            OpenError::Refused(c) => write!(f, "the concentrator refused the request (error {c:#06x})"),
            OpenError::Failed(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for OpenError {}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

struct Inner {
    /// The latest session and whether it is usable (false while reconnecting).
    current: watch::Sender<Current>,
    /// How to open a new session (reconnection).
    dial: Dial,
    /// Whether a reconnection task keeps the session ([`TunnelClient::keep_connected`]): the
    /// front ends then keep serving when a session ends.
    reconnecting: AtomicBool,
    cfg: TunnelConfig,
    stats: Arc<Stats>,
    next_path: AtomicUsize,
    /// The concentrator refused the redundant mode (an older version): flows go on one stream.
    redundant_refused: AtomicBool,
    /// Flow IDs of redundant UDP flows (unique within a session, which is all they need).
    next_flow_id: std::sync::atomic::AtomicU64,
}

#[derive(Clone)]
struct Current {
    session: Session,
    up: bool,
    /// Why the client gave up (the concentrator refused it): the front ends stop.
    fatal: Option<String>,
    /// [`TunnelClient::shutdown`] was called: the session is being closed, never replaced.
    stopping: bool,
}

struct Dial {
    connector: TcplsConnector,
    /// Tried in order (the first, then `TunnelConfig::other_concentrators`).
    concentrators: Vec<SocketAddr>,
    /// `TunnelConfig::join_advertised`.
    join_advertised: bool,
    handshake_timeout: Duration,
    server_name: ServerName<'static>,
    /// Extra connections: a concentrator address and the local side to leave from.
    paths: Vec<(SocketAddr, PathOptions)>,
    /// The first connection's local side and the path manager's policy (TunnelConfig).
    bind: PathOptions,
    path_manager: Option<tcpls::PathPolicy>,
}

impl Dial {
    /// Opens the session and joins one more TCP connection per path.
    async fn session(&self) -> io::Result<Session> {
        let opened =
            super::farm::open_first(&self.connector, &self.concentrators, &self.server_name, self.handshake_timeout);
        let (session, dialed) = opened.await.map_err(|e| {
            let what = format!("cannot open a TCPLS session to {}", self.describe());
            io::Error::new(e.kind(), WithContext { what, source: e })
        })?;
        if session.is_fallback() {
            session.abort();
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("{dialed} speaks plain TLS, not TCPLS: is it a `tcpls tunnel server`?"),
            ));
        }
        // Bonded streams are not steered: this scheduler spreads their uploads (see `bond`).
        session.set_scheduler(super::bond::scheduler());
        if !self.join_advertised && self.connector.settings().join_server_name.is_some() {
            // Joins routed by their server name (farm, mode b): the node is not known here.
            let how = super::farm::handshake_kind(&session);
            info!("tunnel client: session opened through {dialed} ({how}); joins are routed by their server name");
        }
        let (concentrator, paths) = if self.join_advertised {
            let join_at = super::farm::join_address(&session, dialed).await;
            (join_at, super::farm::retarget(&self.paths, dialed, join_at))
        } else {
            (dialed, self.paths.clone())
        };
        if let Some(policy) = self.path_manager {
            // The manager lives as long as the session; paths down now keep being retried.
            let config = tcpls::PathManagerConfig::from_paths(policy, self.bind.clone(), &paths);
            let manager = tcpls::PathManager::start(&session, concentrator, config);
            #[cfg(target_os = "linux")]
            if let Err(e) = manager.follow_interfaces() {
                tracing::warn!("tunnel: no interface events (paths are still retried): {e}");
            }
            for p in manager.wait_for_paths(Duration::from_secs(3)).await.iter().filter(|p| p.conn.is_none()) {
                let why = p.last_error.as_deref().unwrap_or("not connected yet");
                tracing::warn!("tunnel: path {}{} is down ({why}); retrying", p.endpoint.path, p.remote);
            }
            return Ok(session);
        }
        for (p, local) in &paths {
            match session.join_with(*p, local).await {
                Ok(id) => debug!("tunnel: path {local}to {p} joined as connection {id}"),
                Err(e) => {
                    session.abort();
                    return Err(io::Error::new(e.kind(), format!("path {local}to {p}: {e}")));
                }
            }
        }
        Ok(session)
    }

    /// The concentrator addresses, for messages.
    fn describe(&self) -> String {
        let all: Vec<String> = self.concentrators.iter().map(|a| a.to_string()).collect();
        all.join(" or ")
    }
}

/// An error with what was being done, the original kept as its source: a caller can still find
/// the TLS error inside (to advise on an untrusted certificate, say).
#[derive(Debug)]
struct WithContext {
    what: String,
    source: io::Error,
}

impl fmt::Display for WithContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.what, self.source)
    }
}

impl std::error::Error for WithContext {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// Whether `session` is open and has a usable connection.
fn is_usable(session: &Session) -> bool {
    !session.usable_connections().is_empty()
}

/// Waits until `session` is closed or has had no usable connection for [`ORPHAN_GRACE`](super::ORPHAN_GRACE);
/// returns why, and whether the concentrator refused this client ([`reconnect::is_refusal`]).
/// Polled: the session has no event for "orphaned" that can be awaited.
/// `watch` says how a farm client tells that its node died ([`super::farm::NodeWatch`]).
async fn trouble(session: &Session, watch: super::farm::NodeWatch) -> (String, bool) {
    let grace = watch.grace();
    let orphaned = async {
        let mut since = None;
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if is_usable(session) || session.is_managed() {
                // A path manager rejoins for its outage tolerance, and ends the session at once
                // if the concentrator no longer knows it.
                since = None;
            } else if since.get_or_insert_with(tokio::time::Instant::now).elapsed() >= grace {
                return (format!("no usable connection for {grace:?}"), false);
            } else if watch == super::farm::NodeWatch::Probe && super::farm::node_is_down(session).await {
                return ("no usable connection, and its node refuses connections".to_string(), false);
            }
        }
    };
    tokio::select! {
        e = session.closed() => match e {
            Some(e) => (e.to_string(), reconnect::is_refusal(&e)),
            None => ("closed".into(), false),
        },
        why = orphaned => why,
    }
}

/// The tunnel's local proxy. Cheap to clone.
#[derive(Clone)]
pub struct TunnelClient {
    inner: Arc<Inner>,
    /// Tunneled TCP connections are bonded: spread over every usable path ([`super::bond`])
    /// rather than steered to one. Starts as [`TunnelConfig::bond`]; see [`TunnelClient::bonded`].
    bond: bool,
    /// UDP flows are redundant: each datagram on every usable path ([`super::redundant`]).
    /// Starts as [`TunnelConfig::redundant`]; see [`TunnelClient::with_redundant`].
    redundant: bool,
}

impl TunnelClient {
    /// Opens the session to the concentrator and joins one more TCP connection per `paths`
    /// address (any address of the concentrator). Without [`TunnelClient::keep_connected`] the
    /// client is over when this session is.
    pub async fn connect(
        concentrator: SocketAddr,
        server_name: ServerName<'static>,
        tls: Arc<ClientConfig>,
        paths: &[SocketAddr],
        cfg: TunnelConfig,
    ) -> io::Result<TunnelClient> {
        let paths: Vec<(SocketAddr, PathOptions)> = paths.iter().map(|p| (*p, PathOptions::new())).collect();
        Self::connect_paths(concentrator, server_name, tls, &paths, cfg).await
    }

    /// [`connect`](Self::connect) with extra paths that may leave from a chosen local address
    /// or interface ([`PathOptions`]), e.g. a second uplink towards a one-address concentrator.
    pub async fn connect_paths(
        concentrator: SocketAddr,
        server_name: ServerName<'static>,
        tls: Arc<ClientConfig>,
        paths: &[(SocketAddr, PathOptions)],
        cfg: TunnelConfig,
    ) -> io::Result<TunnelClient> {
        let mut cfg = cfg;
        if cfg.bond {
            cfg.session.stream_receive_window = cfg.session.stream_receive_window.max(super::BOND_RECEIVE_WINDOW);
            cfg.session.receive_autotune = false;
        }
        // The connector keeps the TLS configuration and with it rustls' ticket store: a new
        // session to the same concentrator process resumes (PSK) rather than a full handshake.
        let connector = TcplsConnector::new(tls).with_settings(cfg.session.clone()).with_path(cfg.bind.clone());
        let mut concentrators = vec![concentrator];
        concentrators.extend(cfg.other_concentrators.iter().filter(|a| **a != concentrator));
        let dial = Dial {
            connector,
            concentrators,
            join_advertised: cfg.join_advertised,
            handshake_timeout: cfg.handshake_timeout,
            server_name,
            paths: paths.to_vec(),
            bind: cfg.bind.clone(),
            path_manager: cfg.path_manager,
        };
        let session = dial.session().await?;
        let (current, _) = watch::channel(Current { session, up: true, fatal: None, stopping: false });
        let (bond, redundant) = (cfg.bond, cfg.redundant);
        let inner = Inner {
            current,
            dial,
            reconnecting: AtomicBool::new(false),
            cfg,
            stats: Arc::new(Stats::default()),
            next_path: AtomicUsize::new(0),
            redundant_refused: AtomicBool::new(false),
            next_flow_id: std::sync::atomic::AtomicU64::new(1),
        };
        Ok(TunnelClient { inner: Arc::new(inner), bond, redundant })
    }

    /// The same client (same session), whose tunneled TCP connections are bonded or not: the
    /// per-forward setting (`--forward LISTEN=TARGET,bond`).
    pub fn bonded(&self, bond: bool) -> TunnelClient {
        TunnelClient { inner: self.inner.clone(), bond, redundant: self.redundant }
    }

    /// The same client (same session), whose UDP flows are redundant or not: the per-forward
    /// setting (`--forward-udp LISTEN=TARGET,redundant`).
    pub fn with_redundant(&self, redundant: bool) -> TunnelClient {
        TunnelClient { inner: self.inner.clone(), bond: self.bond, redundant }
    }

    /// Whether this client's UDP flows are redundant.
    pub fn is_redundant(&self) -> bool {
        self.redundant
    }

    /// Whether this client's tunneled TCP connections are bonded.
    pub fn is_bonded(&self) -> bool {
        self.bond
    }

    /// Steers a new stream to one path (round robin), unless it is bonded (then the session's
    /// scheduler spreads it).
    fn place(&self, session: &Session, (send, recv): (&SendStream, &RecvStream), transport: Transport) {
        if self.bond && transport == Transport::Tcp {
            super::bond::answer_on_fastest_path(session, recv);
        } else {
            steer_round_robin(session, send, &self.inner.next_path);
        }
    }

    /// The current session (or the last one, while reconnecting).
    pub fn session(&self) -> Session {
        self.inner.current.borrow().session.clone()
    }

    /// Whether the session is up (false while reconnecting).
    pub fn is_up(&self) -> bool {
        self.inner.current.borrow().up
    }

    /// Stops the client for good (Ctrl-C, SIGTERM): the reconnection task ends without
    /// opening another session or logging an outage, and the session is closed with
    /// close_notify, so the concentrator ends it at once rather than keeping it for a rejoin.
    /// After `grace` without the close completing, the session is aborted.
    pub async fn shutdown(&self, grace: Duration) {
        // Under the watch's lock: a reconnection that completes now sees `stopping` and closes
        // its new session instead of installing it, so the session read below is the last one.
        self.inner.current.send_modify(|c| {
            c.stopping = true;
            c.up = false;
        });
        let session = self.session();
        if tokio::time::timeout(grace, session.close()).await.is_err() {
            session.abort();
        }
    }

    /// Re-establishes the session whenever it ends, with `backoff` between attempts, for as
    /// long as the returned task runs (it stops when the last clone of the client is dropped).
    /// Meanwhile new connections wait up to `cfg.reconnect_wait` for the new session.
    ///
    /// A session that lost every connection first tries to rejoin by itself (its streams then
    /// survive, PROTOCOL.md §5); but a restarted concentrator no longer knows it, and would
    /// refuse its joins until the rejoin timeout. So once a session has been without a usable
    /// connection for `ORPHAN_GRACE` (1 s), a new session is opened alongside: if it succeeds while
    /// the old one still has no connection, the old one is aborted (its tunneled connections
    /// are reset) and the new one takes over.
    pub fn keep_connected(&self, backoff: Backoff) -> tokio::task::JoinHandle<()> {
        self.inner.reconnecting.store(true, Ordering::SeqCst);
        let weak = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            let mut failures = 0u32;
            loop {
                let Some((old, mut stop, watch)) = weak.upgrade().map(|i| {
                    let routed = i.dial.connector.settings().join_server_name.is_some();
                    let watch = super::farm::NodeWatch::of(i.dial.join_advertised, routed);
                    (i.current.borrow().session.clone(), i.current.subscribe(), watch)
                }) else {
                    return;
                };
                let since = tokio::time::Instant::now();
                let (why, refused) = tokio::select! {
                    biased;
                    _ = stop.wait_for(|c| c.stopping) => return,
                    t = trouble(&old, watch) => t,
                };
                let Some(inner) = weak.upgrade() else { return };
                if inner.current.borrow().stopping {
                    // The session ended because the client is stopping: nothing was lost.
                    return;
                }
                if refused {
                    error!("tunnel client: the concentrator refused this client ({why}): not reconnecting");
                    inner.current.send_modify(|c| {
                        c.up = false;
                        c.fatal = Some(why);
                    });
                    return;
                }
                inner.current.send_modify(|c| c.up = false);
                let carried = if since.elapsed() < reconnect::STABLE { failures + 1 } else { 0 };
                let what = format!("session to {}", inner.dial.describe());
                let timeout = inner.cfg.handshake_timeout;
                let retried = reconnect::retry(backoff, carried, &what, &why, || async {
                    if is_usable(&old) {
                        return Ok(None);
                    }
                    let new = tokio::time::timeout(timeout, inner.dial.session())
                        .await
                        .unwrap_or_else(|_| Err(io::Error::new(io::ErrorKind::TimedOut, "handshake timed out")))?;
                    if is_usable(&old) {
                        // The old session rejoined meanwhile: keep it, and its connections.
                        new.abort();
                        return Ok(None);
                    }
                    Ok::<_, io::Error>(Some(new))
                });
                let (new, counted) = tokio::select! {
                    biased;
                    _ = stop.wait_for(|c| c.stopping) => return,
                    r = retried => r,
                };
                failures = counted;
                match new {
                    Some(session) => {
                        let installed = inner.current.send_if_modified(|c| {
                            if c.stopping {
                                return false;
                            }
                            *c = Current { session: session.clone(), up: true, fatal: None, stopping: false };
                            true
                        });
                        if !installed {
                            // Stopped while this session was being opened: it is not used.
                            session.close().await;
                            return;
                        }
                        // `abort` leaves an orphaned session waiting for a rejoin until its
                        // deadline (its streams with it); `close` ends an orphaned one at once.
                        old.abort();
                        tokio::spawn(async move { old.close().await });
                    }
                    None => inner.current.send_modify(|c| c.up = !c.stopping),
                }
            }
        })
    }

    /// The session to open streams on: the current one if it has a usable connection, or,
    /// while it rejoins or is being replaced, the next usable one within `cfg.reconnect_wait`
    /// (a stream opened on a session about to be replaced would be reset with it).
    async fn live_session(&self) -> Result<Session, OpenError> {
        let wait = self.inner.cfg.reconnect_wait;
        let mut rx = self.inner.current.subscribe();
        let usable = async {
            loop {
                let current = rx.borrow_and_update().clone();
                if current.up && is_usable(&current.session) {
                    return current.session;
                }
                // Woken by a new session, or polled for a rejoin of this one.
                let _ = tokio::time::timeout(Duration::from_millis(50), rx.changed()).await;
            }
        };
        tokio::time::timeout(wait, usable)
            .await
            .map_err(|_| OpenError::Failed(format!("no session to the concentrator within {wait:?} (reconnecting)")))
    }

    pub fn stats(&self) -> Arc<Stats> {
        self.inner.stats.clone()
    }

    /// Opens a stream to `target` and waits for the concentrator's answer; the stream then
    /// carries the connection's bytes.
    pub async fn open(&self, target: &Target) -> Result<(SendStream, RecvStream), OpenError> {
        self.open_as(target, Transport::Tcp).await
    }

    /// Opens a UDP flow's stream to `target` ([`super::udp`]) and waits for the answer.
    pub async fn open_udp(&self, target: &Target) -> Result<(SendStream, RecvStream), OpenError> {
        self.open_as(target, Transport::Udp).await
    }

    /// Opens a UDP flow for [`Flows`]: its copies, one per usable path (at most
    /// [`super::redundant::MAX_COPIES`]) in redundant mode, else one stream.
    pub async fn open_udp_flow(&self, target: &Target) -> Result<FlowStreams, OpenError> {
        if !self.redundant || self.inner.redundant_refused.load(Ordering::Relaxed) {
            let single = self.open_udp(target).await?;
            return Ok(FlowStreams { copies: vec![single], sequenced: false });
        }
        check_host_name(target)?;
        let session = self.live_session().await?;
        let mut paths: Vec<_> = session.usable_connections().into_iter().map(Some).collect();
        paths.truncate(super::redundant::MAX_COPIES);
        if paths.is_empty() {
            paths.push(None);
        }
        let flow = self.inner.next_flow_id.fetch_add(1, Ordering::Relaxed);
        let request = tlv::encode_all(&[Tlv::request(target, Transport::Udp), Tlv::RedundantFlow(flow), Tlv::End]);
        let mut copies = Vec::new();
        for (i, path) in paths.into_iter().enumerate() {
            let (mut send, recv) = session.open_stream().map_err(|e| OpenError::Failed(e.to_string()))?;
            // This copy leaves on its path, and the concentrator answers on it too.
            if let Some(conn) = path {
                let _ = send.steer(Some(conn));
                recv.request_steer(conn);
            }
            if let Err(e) = send.write_all(&request).await {
                return Err(OpenError::Failed(format!("stream: {e}")));
            }
            match self.answer(send, recv, Transport::Udp).await {
                Ok(copy) => copies.push(copy),
                Err(OpenError::Refused(tlv::ERR_MALFORMED_TLV)) if i == 0 => {
                    if !self.inner.redundant_refused.swap(true, Ordering::Relaxed) {
                        warn!(
                            "tunnel: the concentrator does not support the redundant mode (an older version): \
                             UDP flows go on one path each; upgrade it for --redundant"
                        );
                    }
                    let single = self.open_udp(target).await?;
                    return Ok(FlowStreams { copies: vec![single], sequenced: false });
                }
                Err(e) if i == 0 => return Err(e),
                // The first copy carries the flow; a path that failed to open one just misses it.
                Err(e) => debug!("tunnel: UDP flow to {target}: copy {i} not opened: {e}"),
            }
        }
        Ok(FlowStreams { copies, sequenced: true })
    }

    async fn open_as(&self, target: &Target, transport: Transport) -> Result<(SendStream, RecvStream), OpenError> {
        let (send, recv) = self.request_as(target, transport).await?;
        self.answer(send, recv, transport).await
    }

    /// Waits for the concentrator's answer to a stream's request.
    async fn answer(
        &self,
        mut send: SendStream,
        mut recv: RecvStream,
        transport: Transport,
    ) -> Result<(SendStream, RecvStream), OpenError> {
        match tokio::time::timeout(self.inner.cfg.handshake_timeout, tlv::read_response(&mut recv)).await {
            Ok(Ok(Ok(()))) => {
                if self.bond && transport == Transport::Tcp {
                    super::bond::spread_download(&recv);
                }
                Ok((send, recv))
            }
            Ok(Ok(Err(code))) => {
                let _ = send.finish();
                Err(OpenError::Refused(code))
            }
            Ok(Err(e)) => {
                let _ = send.reset(tlv::RESET_CODE);
                Err(OpenError::Failed(match e {
                    ReadError::Io(e) => format!("no answer from the concentrator: {e}"),
                    ReadError::Bad(e) => format!("bad answer from the concentrator: {e}"),
                }))
            }
            Err(_) => {
                let _ = send.reset(tlv::RESET_CODE);
                Err(OpenError::Failed("no answer from the concentrator in time".into()))
            }
        }
    }

    async fn request_as(&self, target: &Target, transport: Transport) -> Result<(SendStream, RecvStream), OpenError> {
        let (send, recv) = self.open_stream(target, transport).await?;
        self.send_request(send, recv, target, transport).await
    }

    /// Opens a stream for `target` once a session is up, without sending the request yet.
    async fn open_stream(&self, target: &Target, transport: Transport) -> Result<(SendStream, RecvStream), OpenError> {
        check_host_name(target)?;
        let session = self.live_session().await?;
        let (send, recv) = session.open_stream().map_err(|e| OpenError::Failed(e.to_string()))?;
        self.place(&session, (&send, &recv), transport);
        Ok((send, recv))
    }

    /// Opens the stream for a TCP connection to `target` now, without waiting, if the session
    /// is up (None otherwise: the connection then waits for one in its task). The accept loop
    /// uses it so that streams are opened in the order the application connected (see
    /// `order.rs`: the concentrator connects in stream order).
    fn open_stream_now(&self, target: &Target) -> Option<Result<(SendStream, RecvStream), OpenError>> {
        let current = self.inner.current.borrow().session.clone();
        if !(self.inner.current.borrow().up && is_usable(&current)) {
            return None;
        }
        if let Err(e) = check_host_name(target) {
            return Some(Err(e));
        }
        let opened = current.open_stream().map_err(|e| OpenError::Failed(e.to_string()));
        if let Ok((send, recv)) = &opened {
            self.place(&current, (send, recv), Transport::Tcp);
        }
        Some(opened)
    }

    /// Writes the request (TCP Connect, UDP Associate..., then End) on a new stream.
    async fn send_request(
        &self,
        mut send: SendStream,
        recv: RecvStream,
        target: &Target,
        transport: Transport,
    ) -> Result<(SendStream, RecvStream), OpenError> {
        let request = tlv::encode_all(&[Tlv::request(target, transport), Tlv::End]);
        if let Err(e) = send.write_all(&request).await {
            return Err(OpenError::Failed(format!("stream: {e}")));
        }
        Ok((send, recv))
    }

    /// Tunnels an accepted connection to `target`. Pipelined: the application's first bytes
    /// follow the request at once (one round trip saved); they reach the destination once it is
    /// connected. If the concentrator answers Error (or nothing valid), the connection is reset.
    pub async fn tunnel(&self, tcp: TcpStream, target: &Target) -> Result<Report, OpenError> {
        self.tunnel_on(tcp, target, None).await
    }

    /// [`tunnel`](Self::tunnel) on a stream opened beforehand (`open_stream_now`), if any.
    async fn tunnel_on(
        &self,
        tcp: TcpStream,
        target: &Target,
        opened: Option<Result<(SendStream, RecvStream), OpenError>>,
    ) -> Result<Report, OpenError> {
        let stats = &self.inner.stats;
        stats.stream();
        let opened = match opened {
            Some(opened) => opened,
            None => self.open_stream(target, Transport::Tcp).await,
        };
        let (send, recv) = match opened {
            Ok(x) => x,
            Err(e) => {
                self.count_failure(&e);
                relay::reset_tcp(tcp);
                return Err(e);
            }
        };
        let _ = tcp.set_nodelay(true);
        stats.relay_started();
        // The relay sends the request, together with what the application has sent already.
        let request = tlv::encode_all(&[Tlv::request(target, Transport::Tcp), Tlv::End]);
        let timeout = self.inner.cfg.handshake_timeout;
        let report = relay::relay_opening(tcp, (send, recv), request, timeout, self.bond).await;
        if report.answered {
            stats.connected();
        }
        stats.relay_ended(&report, true);
        match report.outcome {
            Outcome::Refused(code) => Err(OpenError::Refused(code)),
            Outcome::NoAnswer => Err(OpenError::Failed("no valid answer from the concentrator in time".into())),
            _ => Ok(report),
        }
    }

    /// Relays a connection whose stream was answered Connect OK.
    async fn relay(&self, tcp: TcpStream, send: SendStream, recv: RecvStream) -> Report {
        let _ = tcp.set_nodelay(true);
        self.inner.stats.connected();
        self.inner.stats.relay_started();
        let report = relay::relay(tcp, send, recv).await;
        self.inner.stats.relay_ended(&report, true);
        report
    }

    fn count_failure(&self, e: &OpenError) {
        match e {
            OpenError::Refused(ERR_CONNECTION_FAILURE) => self.inner.stats.connect_failed(),
            OpenError::Refused(ERR_DESTINATION_REFUSED) => self.inner.stats.refused_dest(),
            _ => self.inner.stats.rejected(),
        }
    }

    /// Accepts connections on `listener` and tunnels them until the session is over (then
    /// returns an error); with [`TunnelClient::keep_connected`], until the listener fails.
    pub async fn serve(&self, listener: TcpListener, frontend: Frontend) -> io::Result<()> {
        // Watched by a task of its own: polling `closed()` again at every accepted connection
        // would leave a waker behind each time.
        let (ended_tx, mut ended) = tokio::sync::oneshot::channel();
        let session = self.session();
        let reconnecting = self.inner.reconnecting.load(Ordering::SeqCst);
        let mut current = self.inner.current.subscribe();
        let watcher = tokio::spawn(async move {
            let why = if reconnecting {
                // Only a refusal by the concentrator ends a reconnecting client.
                match current.wait_for(|c| c.fatal.is_some()).await {
                    Ok(c) => c.fatal.clone(),
                    Err(_) => None,
                }
            } else {
                session.closed().await.map(|e| e.to_string())
            };
            let _ = ended_tx.send(why);
        });
        let _stop_watcher = AbortOnDrop(watcher);
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                e = &mut ended => {
                    let why = e.ok().flatten().unwrap_or_else(|| "closed".into());
                    return Err(io::Error::other(format!("the session to the concentrator ended: {why}")));
                }
            };
            let (tcp, peer) = match accepted {
                Ok(x) => x,
                Err(e) => {
                    // EMFILE and friends are transient: keep serving.
                    warn!("tunnel client: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            // A forwarded connection's stream is opened here, in accept order, not in its task:
            // the concentrator connects to destinations in stream order, and applications such
            // as iperf3 tell their connections apart by the order in which they arrive.
            let opened = match &frontend {
                Frontend::Forward(t) => self.open_stream_now(t),
                _ => None,
            };
            let (me, frontend) = (self.clone(), frontend.clone());
            tokio::spawn(async move {
                match me.handle(tcp, &frontend, opened).await {
                    Ok((target, r)) => {
                        debug!("tunnel: {peer} -> {target}: {:?} ({} bytes up, {} down)", r.outcome, r.sent, r.received)
                    }
                    Err(e) => info!("tunnel: connection from {peer}: {e}"),
                }
            });
        }
    }

    async fn handle(
        &self,
        tcp: TcpStream,
        frontend: &Frontend,
        opened: Option<Result<(SendStream, RecvStream), OpenError>>,
    ) -> Result<(Target, Report), String> {
        let target = match frontend {
            Frontend::Forward(t) => t.clone(),
            Frontend::Transparent => match original_dst(&tcp) {
                Ok(a) => Target::Addr(a),
                Err(e) => {
                    relay::reset_tcp(tcp);
                    return Err(e.to_string());
                }
            },
            Frontend::Socks => return self.handle_socks(tcp).await,
            Frontend::Http => return self.handle_http(tcp).await,
        };
        debug!("tunnel: -> {target}");
        let r = self.tunnel_on(tcp, &target, opened).await.map_err(|e| format!("{target}: {e}"))?;
        Ok((target, r))
    }

    async fn handle_http(&self, mut tcp: TcpStream) -> Result<(Target, Report), String> {
        let timeout = self.inner.cfg.handshake_timeout;
        let req = match tokio::time::timeout(timeout, http_proxy::read_request(&mut tcp)).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                let _ = http_proxy::respond(&mut tcp, e.status).await;
                return Err(format!("HTTP proxy: {e}"));
            }
            Err(_) => {
                let _ = http_proxy::respond(&mut tcp, 408).await;
                return Err(format!("HTTP proxy: no complete request head within {timeout:?}"));
            }
        };
        let target = req.target.clone();
        self.inner.stats.stream();
        debug!("tunnel: HTTP {} {target}", if req.connect { "CONNECT" } else { "request to" });
        let (mut send, recv) = match self.open(&target).await {
            Ok(x) => x,
            Err(e) => {
                self.count_failure(&e);
                let status = match e {
                    OpenError::Refused(
                        ERR_DESTINATION_REFUSED | tlv::ERR_CLIENT_SESSIONS | tlv::ERR_CLIENT_UNKNOWN,
                    ) => 403,
                    OpenError::Refused(_) => 502,
                    OpenError::Failed(_) => 503,
                };
                let _ = http_proxy::respond(&mut tcp, status).await;
                return Err(format!("{target}: {e} (HTTP {status})"));
            }
        };
        let first = if req.connect {
            if let Err(e) = http_proxy::respond(&mut tcp, 200).await {
                let _ = send.reset(tlv::RESET_CODE);
                return Err(format!("HTTP reply: {e}"));
            }
            req.rest
        } else {
            let mut head = req.head;
            head.extend_from_slice(&req.rest);
            head
        };
        if !first.is_empty() && send.write_all(&first).await.is_err() {
            relay::reset_tcp(tcp);
            return Err(format!("{target}: the stream failed"));
        }
        Ok((target, self.relay(tcp, send, recv).await))
    }

    /// Reverse forwards (`remote` address of the concentrator → `local` target): binds each on
    /// the concentrator and serves the connections it sends, on every session (binds again
    /// after a reconnection). Returns when the session ends without reconnection.
    pub async fn serve_reverse(&self, forwards: Vec<(SocketAddr, Target)>) -> io::Result<()> {
        let forwards = Arc::new(forwards);
        let mut current = self.inner.current.subscribe();
        loop {
            let session = match self.live_session().await {
                Ok(s) => s,
                Err(_) if self.inner.reconnecting.load(Ordering::SeqCst) => continue,
                Err(e) => return Err(io::Error::other(e.to_string())),
            };
            let timeout = self.inner.cfg.handshake_timeout;
            let mut controls = Vec::new();
            for (remote, local) in forwards.iter() {
                match reverse::bind(&session, *remote, timeout).await {
                    Ok(c) => {
                        info!("tunnel: reverse forward {remote} (on the concentrator) -> {local}: listening");
                        controls.push(c);
                    }
                    Err(e) => warn!("tunnel: reverse forward {remote} -> {local}: {e}"),
                }
            }
            current.borrow_and_update();
            loop {
                tokio::select! {
                    s = session.accept_stream() => match s {
                        Some((send, recv)) => {
                            let forwards = forwards.clone();
                            tokio::spawn(async move { reverse::serve_connection(send, recv, &forwards, timeout).await });
                        }
                        None => break,
                    },
                    changed = current.changed() => {
                        if changed.is_err() || !current.borrow().up {
                            break;
                        }
                    }
                }
            }
            drop(controls);
            if !self.inner.reconnecting.load(Ordering::SeqCst) {
                return Err(io::Error::other("the session to the concentrator ended"));
            }
            // Wait for the next session (or the end of a rejoin of this one).
            let _ = current.wait_for(|c| c.up).await;
        }
    }

    /// A flow opener for [`Flows`]: this client's UDP streams.
    fn opener(&self) -> Opener {
        let me = self.clone();
        Arc::new(move |target: Target| {
            let me = me.clone();
            Box::pin(async move { me.open_udp_flow(&target).await.map_err(|e| e.to_string()) })
        })
    }

    /// Relays the datagrams `socket` receives to `target`, one flow (stream) per source
    /// address, answers back to each source; until the socket fails.
    pub async fn serve_udp(&self, socket: UdpSocket, target: Target) -> io::Result<()> {
        let socket = Arc::new(socket);
        let wrap: Wrap = Arc::new(|_: &Target, payload: &[u8]| payload.to_vec());
        let cfg = &self.inner.cfg;
        let flows = Flows::new(socket.clone(), self.opener(), wrap, cfg.udp_idle_timeout, cfg.max_udp_flows);
        let mut buf = vec![0u8; super::udp::MAX_DATAGRAM];
        loop {
            let (n, src) = socket.recv_from(&mut buf).await?;
            flows.dispatch(src, target.clone(), &buf[..n]);
        }
    }

    /// SOCKS5 UDP ASSOCIATE (RFC 1928 §7): a UDP socket on the control connection's local
    /// address takes datagrams from the client's address only (and its `hint` port, unless 0);
    /// each destination gets its flow; the association ends with the control connection.
    async fn handle_socks_udp(&self, mut tcp: TcpStream, hint: Target) -> Result<(Target, Report), String> {
        let (local, peer) = match (tcp.local_addr(), tcp.peer_addr()) {
            (Ok(l), Ok(p)) => (l, p),
            _ => return Err("SOCKS5 UDP ASSOCIATE: control connection gone".into()),
        };
        let socket = match UdpSocket::bind(SocketAddr::new(local.ip(), 0)).await.and_then(|s| Ok((s.local_addr()?, s)))
        {
            Ok(x) => x,
            Err(e) => {
                let _ = socks5_reply(&mut tcp, reply::GENERAL_FAILURE).await;
                return Err(format!("SOCKS5 UDP ASSOCIATE: cannot bind a UDP socket: {e}"));
            }
        };
        let (bound, socket) = (socket.0, Arc::new(socket.1));
        socks5_reply_bound(&mut tcp, bound).await.map_err(|e| format!("SOCKS5 reply: {e}"))?;
        debug!("tunnel: SOCKS5 UDP ASSOCIATE from {peer}: datagrams to {bound}");
        let wrap: Wrap =
            Arc::new(|from: &Target, payload: &[u8]| [&[0, 0, 0][..], &socks5_address(from), payload].concat());
        let cfg = &self.inner.cfg;
        let flows = Flows::new(socket.clone(), self.opener(), wrap, cfg.udp_idle_timeout, cfg.max_udp_flows);
        let hint_port = hint.port();
        let control = async {
            let mut b = [0u8; 512];
            while let Ok(n) = tcp.read(&mut b).await {
                if n == 0 {
                    break;
                }
            }
        };
        let datagrams = async {
            let mut buf = vec![0u8; super::udp::MAX_DATAGRAM];
            loop {
                let Ok((n, src)) = socket.recv_from(&mut buf).await else { continue };
                if src.ip() != peer.ip() || (hint_port != 0 && src.port() != hint_port) {
                    continue;
                }
                match socks5_udp_header(&buf[..n]) {
                    Some((target, at)) => flows.dispatch(src, target, &buf[at..n]),
                    None => debug!("tunnel: SOCKS5 UDP datagram from {src} dropped: bad header or fragment"),
                }
            }
        };
        tokio::select! {
            _ = control => {}
            _ = datagrams => {}
        }
        flows.stop();
        let report = Report { sent: 0, received: 0, outcome: Outcome::Closed, answered: true };
        Ok((hint, report))
    }

    async fn handle_socks(&self, mut tcp: TcpStream) -> Result<(Target, Report), String> {
        let timeout = self.inner.cfg.handshake_timeout;
        let commands = [command::CONNECT, command::UDP_ASSOCIATE];
        let target = match tokio::time::timeout(timeout, socks5_request_for(&mut tcp, &commands)).await {
            Ok(Ok((command::UDP_ASSOCIATE, hint))) => return self.handle_socks_udp(tcp, hint).await,
            Ok(Ok((_, t))) => t,
            Ok(Err(e)) => return Err(format!("SOCKS5: {e}")),
            Err(_) => return Err("SOCKS5 request timed out".into()),
        };
        self.inner.stats.stream();
        debug!("tunnel: SOCKS5 CONNECT {target}");
        match self.open(&target).await {
            Ok((send, recv)) => {
                if let Err(e) = socks5_reply(&mut tcp, reply::SUCCEEDED).await {
                    let mut send = send;
                    let _ = send.reset(tlv::RESET_CODE);
                    return Err(format!("SOCKS5 reply: {e}"));
                }
                Ok((target.clone(), self.relay(tcp, send, recv).await))
            }
            Err(e) => {
                self.count_failure(&e);
                let code = match e {
                    OpenError::Refused(ERR_CONNECTION_FAILURE) => reply::CONNECTION_REFUSED,
                    OpenError::Refused(
                        ERR_DESTINATION_REFUSED | tlv::ERR_CLIENT_SESSIONS | tlv::ERR_CLIENT_UNKNOWN,
                    ) => reply::NOT_ALLOWED,
                    _ => reply::GENERAL_FAILURE,
                };
                let _ = socks5_reply(&mut tcp, code).await;
                Err(format!("{target}: {e} (SOCKS5 reply {code:#04x})"))
            }
        }
    }
}

/// A host name the concentrator would refuse anyway is refused here.
fn check_host_name(target: &Target) -> Result<(), OpenError> {
    match target {
        Target::Name(h, _) if !tlv::valid_host_name(h) => Err(OpenError::Failed(format!("'{h}' is not a host name"))),
        _ => Ok(()),
    }
}
