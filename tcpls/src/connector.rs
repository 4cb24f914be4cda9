//! Client side: connect a TCP socket, run the handshake, hand out a [`Session`].

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use rustls::pki_types::ServerName;
use rustls::ClientConfig;
use tokio::net::TcpStream;

use crate::driver::Driver;
use crate::fallback::{blocked_reason, ConnectOutcome, FallbackMemory, FallbackRetry};
use crate::handshake::{handshake_error, HANDSHAKE_TIMEOUT};
use crate::path::PathOptions;
use crate::session::Session;
use crate::shared::Shared;
use crate::socket::configure;
use crate::stream::{RecvStream, SendStream};
use tcpls_proto::SessionConfig;

/// Opens TCPLS sessions, like `tokio_rustls::TlsConnector`.
///
/// ```no_run
/// # async fn demo(tls: rustls::ClientConfig) -> std::io::Result<()> {
/// use std::sync::Arc;
/// let connector = tcpls::TcplsConnector::new(Arc::new(tls));
/// let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
/// let session = connector.connect("127.0.0.1:4443".parse().unwrap(), name).await?;
/// if session.is_fallback() {
///     eprintln!("server speaks plain TLS only: one byte stream");
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct TcplsConnector {
    config: Arc<ClientConfig>,
    settings: SessionConfig,
    /// Explicit fallback to plain TLS (see `fallback.rs`); off by default.
    fallback: Option<FallbackRetry>,
    /// TCP Fast Open on new connections (RESUMPTION.md); off by default.
    fast_open: bool,
    /// Event traces of the sessions made (docs/OBSERVABILITY.md §4); off by default.
    trace: Option<Arc<dyn crate::trace::TraceSink>>,
    /// The local side of the first connection (default route by default).
    path: PathOptions,
}

impl TcplsConnector {
    /// `tcpls/1` is put first in the ALPN list (the config's own protocols follow, for servers
    /// that only speak plain TLS) and secret extraction is enabled.
    pub fn new(config: Arc<ClientConfig>) -> Self {
        Self {
            config: Arc::new(tcpls_proto::tcpls_client_config(&config)),
            settings: SessionConfig::default(),
            fallback: None,
            fast_open: false,
            trace: None,
            path: PathOptions::new(),
        }
    }

    /// Traces every session this connector makes, from its handshake on, into `sink`.
    pub fn with_trace(mut self, sink: Arc<dyn crate::trace::TraceSink>) -> Self {
        self.trace = Some(sink);
        self
    }

    /// The local side of the first connection (local address, interface) and its TCP connect
    /// deadline; joins choose theirs with [`Session::join_with`].
    pub fn with_path(mut self, path: PathOptions) -> Self {
        self.path = path;
        self
    }

    /// TCP Fast Open (Linux `TCP_FASTOPEN_CONNECT`): once the kernel holds a Fast Open cookie
    /// for the server (from an earlier connection), the ClientHello, and the early data of
    /// [`connect_with_early_data`](Self::connect_with_early_data), travel in the SYN: one round
    /// trip less. The cookie lets the server link this connection to earlier ones from this
    /// host (RESUMPTION.md, privacy); `net.ipv4.tcp_fastopen` must enable clients (bit 1).
    pub fn with_fast_open(mut self, on: bool) -> Self {
        self.fast_open = on;
        self
    }

    /// Explicit fallback (paper §5.2): when the TCP connection is made but the TCPLS ClientHello
    /// is reset, cut off or unanswered within `timeout`, retry once on a new TCP connection with
    /// a plain TLS ClientHello (no `tcpls/1` ALPN), and remember the server address for
    /// [`DEFAULT_REMEMBER_FOR`](crate::fallback::DEFAULT_REMEMBER_FOR) (see
    /// [`with_fallback_memory`](Self::with_fallback_memory)): later connections to it offer plain
    /// TLS directly. [`connect_detailed`](Self::connect_detailed) says which way it went.
    ///
    /// ```no_run
    /// # async fn demo(tls: std::sync::Arc<rustls::ClientConfig>) -> std::io::Result<()> {
    /// use std::time::Duration;
    /// let connector = tcpls::TcplsConnector::new(tls).with_fallback_retry(Duration::from_secs(2));
    /// let name = tcpls::server_name_for("localhost")?;
    /// let (session, outcome) = connector.connect_detailed("10.1.2.2:4443".parse().unwrap(), name).await?;
    /// if outcome.is_fallback() {
    ///     eprintln!("{outcome}"); // e.g. "plain TLS after a retry (the TCPLS ClientHello was reset ...)"
    /// }
    /// # let _ = session; Ok(()) }
    /// ```
    pub fn with_fallback_retry(mut self, timeout: std::time::Duration) -> Self {
        let memory = self.fallback.take().map(|f| (f.memory, f.remember_for));
        let mut retry = FallbackRetry::new(&self.config, timeout);
        if let Some((memory, remember_for)) = memory {
            retry.memory = memory;
            retry.remember_for = remember_for;
        }
        self.fallback = Some(retry);
        self
    }

    /// How long a server that needed a plain-TLS retry is remembered (with
    /// [`with_fallback_retry`](Self::with_fallback_retry); zero: not at all).
    pub fn with_fallback_memory(mut self, remember_for: std::time::Duration) -> Self {
        if let Some(f) = &mut self.fallback {
            f.remember_for = remember_for;
        }
        self
    }

    /// The servers remembered as blocking TCPLS (shared by this connector's clones); `None`
    /// without [`with_fallback_retry`](Self::with_fallback_retry).
    pub fn fallback_memory(&self) -> Option<&FallbackMemory> {
        self.fallback.as_ref().map(|f| &f.memory)
    }

    pub fn with_settings(mut self, settings: SessionConfig) -> Self {
        self.settings = settings;
        self
    }

    pub fn settings(&self) -> &SessionConfig {
        &self.settings
    }

    /// Connects and completes the handshake. An error says what failed (TCP, TLS, protocol).
    pub async fn connect(&self, addr: SocketAddr, server_name: ServerName<'static>) -> io::Result<Session> {
        if self.fallback.is_some() {
            return self.connect_detailed(addr, server_name).await.map(|(session, _)| session);
        }
        let stream = self.tcp_connect(addr).await?;
        self.connect_with(stream, server_name).await
    }

    /// A TCP connection from the configured side of the path, with Fast Open if enabled.
    async fn tcp_connect(&self, addr: SocketAddr) -> io::Result<TcpStream> {
        if self.fast_open {
            crate::socket::connect_fast_open(addr, &self.path).await
        } else {
            self.path.connect(addr).await
        }
    }

    /// Connects with 0-RTT: `data` is written on stream 0 and its first record (up to
    /// [`tcpls_proto::MAX_EARLY_STREAM_BYTES`]) goes as TLS early data with the ClientHello,
    /// when the client config has `enable_early_data` and a ticket from this server allows it.
    /// Otherwise, or if the server rejects it, the bytes are sent after the handshake as usual.
    /// Returns once the handshake is done (the answer may already be there: a TCPLS server
    /// answers early data at half-RTT); [`Session::early_data_accepted`] says which way it went.
    ///
    /// Early data can be replayed by an attacker: send only idempotent requests this way
    /// (RESUMPTION.md).
    pub async fn connect_with_early_data(
        &self,
        addr: SocketAddr,
        server_name: ServerName<'static>,
        data: &[u8],
    ) -> io::Result<(Session, SendStream, RecvStream)> {
        let stream = self.tcp_connect(addr).await?;
        configure(&stream)?;
        let (proto, taken) =
            tcpls_proto::Session::client_with_early_data(self.config.clone(), server_name, self.settings.clone(), data)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let session = self.start(stream, proto, HANDSHAKE_TIMEOUT).await?;
        let (mut send, recv) = (SendStream::new(session.shared.clone(), 0), RecvStream::new(session.shared.clone(), 0));
        if taken < data.len() {
            tokio::io::AsyncWriteExt::write_all(&mut send, &data[taken..]).await?;
        }
        Ok((session, send, recv))
    }

    /// Runs the handshake over an already connected TCP stream.
    pub async fn connect_with(&self, stream: TcpStream, server_name: ServerName<'static>) -> io::Result<Session> {
        self.handshake(stream, server_name, self.config.clone(), HANDSHAKE_TIMEOUT).await
    }

    /// Like [`connect`](Self::connect), and says whether TCPLS was negotiated, the server chose
    /// plain TLS, or (with [`with_fallback_retry`](Self::with_fallback_retry)) a plain TLS retry
    /// was needed or remembered.
    pub async fn connect_detailed(
        &self,
        addr: SocketAddr,
        server_name: ServerName<'static>,
    ) -> io::Result<(Session, ConnectOutcome)> {
        let by_server = |s: Session| {
            let outcome = if s.is_fallback() { ConnectOutcome::ServerPlainTls } else { ConnectOutcome::Tcpls };
            (s, outcome)
        };
        let Some(retry) = &self.fallback else {
            let stream = self.path.connect(addr).await?;
            return self.connect_with(stream, server_name).await.map(by_server);
        };
        if let Some(known) = retry.memory.get(addr) {
            let stream = self.path.connect(addr).await?;
            let session = self.handshake(stream, server_name, retry.plain.clone(), HANDSHAKE_TIMEOUT).await?;
            return Ok((session, ConnectOutcome::RememberedPlain { reason: known.reason }));
        }
        // A TCP failure is not the ClientHello's fault: a plain one would fail the same way.
        let stream = self.path.connect(addr).await?;
        let first = self.handshake(stream, server_name.clone(), self.config.clone(), retry.timeout).await;
        let reason = match first {
            Ok(session) => return Ok(by_server(session)),
            Err(e) => blocked_reason(&e, retry.timeout).ok_or(e)?,
        };
        let plain = async {
            let stream = self.path.connect(addr).await?;
            self.handshake(stream, server_name, retry.plain.clone(), HANDSHAKE_TIMEOUT).await
        };
        let session = plain.await.map_err(|e| {
            io::Error::new(e.kind(), format!("the TCPLS ClientHello {reason}, and the plain TLS retry failed: {e}"))
        })?;
        if !retry.remember_for.is_zero() {
            retry.memory.remember(addr, reason.clone(), retry.remember_for);
        }
        Ok((session, ConnectOutcome::RetriedPlain { reason }))
    }

    /// Runs the handshake with `config` over a connected stream, within `timeout`.
    async fn handshake(
        &self,
        stream: TcpStream,
        server_name: ServerName<'static>,
        config: Arc<ClientConfig>,
        timeout: std::time::Duration,
    ) -> io::Result<Session> {
        configure(&stream)?;
        let proto = tcpls_proto::Session::client(config, server_name, self.settings.clone())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        self.start(stream, proto, timeout).await
    }

    /// Starts the driver of a client session on its first connection and waits, within
    /// `timeout`, for the handshake.
    async fn start(
        &self,
        stream: TcpStream,
        mut proto: tcpls_proto::Session,
        timeout: std::time::Duration,
    ) -> io::Result<Session> {
        let origin = stream.peer_addr().ok();
        proto.set_addresses(0, stream.local_addr().ok(), origin);
        let shared = Shared::new(proto);
        shared.lock().origin = origin;
        if let Some(sink) = self.trace.clone() {
            shared.lock().set_trace(sink);
        }
        // The handshake is driven from this task (the driver polled inline), as a TLS client
        // drives its own: when it completes, the caller goes on at once instead of waiting to
        // be woken by a driver task. The driver gets its own task after the handshake.
        let mut driver = Some(Driver::new(shared.clone(), 0, stream));
        // If this future is dropped (a lost happy-eyeballs race) or fails, the half-made
        // session is aborted rather than left running without a handle (the driver, not yet
        // spawned, is dropped with it and closes the socket).
        let guard = AbortOnDrop(Some(Session::new(shared.clone())));
        let handshake = std::future::poll_fn(|cx| {
            if let Some(d) = driver.as_mut() {
                if std::pin::Pin::new(d).poll(cx).is_ready() {
                    driver = None;
                }
            }
            let inner = shared.lock();
            if inner.proto.is_established() {
                return std::task::Poll::Ready(Ok(()));
            }
            if inner.proto.is_closed() || inner.driver_done || driver.is_none() {
                let e = inner.proto.error().cloned().unwrap_or(tcpls_proto::Error::SessionClosed);
                return std::task::Poll::Ready(Err(e));
            }
            std::task::Poll::Pending
        });
        match tokio::time::timeout(timeout, handshake).await {
            Ok(result) => result.map_err(handshake_error)?,
            Err(_) => {
                return Err(io::Error::new(io::ErrorKind::TimedOut, format!("TLS handshake timed out ({timeout:?})")))
            }
        }
        if let Some(driver) = driver {
            tokio::spawn(driver);
        }
        Ok(guard.defuse())
    }
}

struct AbortOnDrop(Option<Session>);

impl AbortOnDrop {
    /// The guard is built with a session and defused once, so the session is always there.
    fn defuse(mut self) -> Session {
        let session = self.0.take();
        session.unwrap_or_else(|| unreachable!("AbortOnDrop is defused once"))
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(s) = self.0.take() {
            s.abort();
        }
    }
}

/// Options of [`TcplsConnector::connect_any`] (RFC 8305 "happy eyeballs").
#[derive(Debug, Clone, Copy)]
pub struct HappyEyeballs {
    /// Delay between starting one attempt and the next (RFC 8305 recommends 250 ms; 50 ms
    /// suits low-latency networks).
    pub stagger: std::time::Duration,
    /// Instead of abandoning the other addresses, join them to the winning session as extra
    /// connections (in the background, best effort).
    pub keep_others: bool,
}

impl Default for HappyEyeballs {
    fn default() -> Self {
        Self { stagger: std::time::Duration::from_millis(250), keep_others: false }
    }
}

impl TcplsConnector {
    /// Races connections to several addresses of one server: attempts start `stagger` apart,
    /// alternating address families (IPv6 first), and the first completed TCPLS handshake
    /// wins; the other attempts are cancelled. Fails only when every address failed.
    pub async fn connect_any(
        &self,
        addrs: &[SocketAddr],
        server_name: ServerName<'static>,
        options: HappyEyeballs,
    ) -> io::Result<Session> {
        let paths: Vec<(SocketAddr, PathOptions)> = addrs.iter().map(|a| (*a, self.path.clone())).collect();
        self.connect_any_path(&paths, server_name, options).await
    }

    /// [`connect_any`](Self::connect_any) over paths that may also differ by their local side:
    /// e.g. the same server address from the Wi-Fi and from the LTE interface, the first to
    /// complete its handshake wins (and with `keep_others` the rest join it).
    ///
    /// ```no_run
    /// # async fn demo(connector: tcpls::TcplsConnector) -> std::io::Result<()> {
    /// use tcpls::{HappyEyeballs, PathOptions};
    /// let server = "203.0.113.5:4443".parse().unwrap();
    /// let paths = [(server, PathOptions::new().device("wlan0")), (server, PathOptions::new().device("wwan0"))];
    /// let name = tcpls::server_name_for("example.org")?;
    /// let session = connector
    ///     .connect_any_path(&paths, name, HappyEyeballs { keep_others: true, ..Default::default() })
    ///     .await?;
    /// # let _ = session; Ok(()) }
    /// ```
    pub async fn connect_any_path(
        &self,
        paths: &[(SocketAddr, PathOptions)],
        server_name: ServerName<'static>,
        options: HappyEyeballs,
    ) -> io::Result<Session> {
        if paths.is_empty() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "no address to connect to"));
        }
        let order = interleave_families(paths);
        let mut attempts = tokio::task::JoinSet::new();
        let mut last_error = None;
        let mut next = 0;
        let mut winner = None;
        loop {
            if next < order.len() {
                let (addr, path) = order[next].clone();
                let (connector, name) = (self.clone().with_path(path.clone()), server_name.clone());
                attempts.spawn(async move { ((addr, path), connector.connect(addr, name).await) });
                next += 1;
            }
            let stagger = tokio::time::sleep(options.stagger);
            tokio::pin!(stagger);
            // Wait for a result, or for the next attempt's turn.
            let done = loop {
                tokio::select! {
                    joined = attempts.join_next(), if !attempts.is_empty() => match joined {
                        Some(Ok((path, Ok(session)))) => break Some((path, session)),
                        Some(Ok(((addr, path), Err(e)))) => {
                            last_error = Some(io::Error::new(e.kind(), format!("{path}{addr}: {e}")));
                            // A failure starts the next attempt at once (RFC 8305 §5).
                            if next < order.len() { break None; }
                        }
                        Some(Err(e)) => last_error = Some(io::Error::other(e)),
                        None => break None,
                    },
                    _ = &mut stagger, if next < order.len() => break None,
                    else => break None,
                }
            };
            if let Some(w) = done {
                winner = Some(w);
                break;
            }
            if next >= order.len() && attempts.is_empty() {
                break;
            }
        }
        attempts.abort_all();
        // Attempts that completed anyway hold sessions nobody will use: end them.
        while let Some(joined) = attempts.join_next().await {
            if let Ok((_, Ok(session))) = joined {
                session.abort();
            }
        }
        let Some((won, session)) = winner else {
            return Err(
                last_error.unwrap_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "no address answered"))
            );
        };
        if options.keep_others {
            let others: Vec<(SocketAddr, PathOptions)> = order.into_iter().filter(|p| *p != won).collect();
            let s = session.clone();
            tokio::spawn(async move {
                // Tokens arrive with the server's first record, half a round trip after ours.
                for _ in 0..100 {
                    if s.token_count() > 0 {
                        break;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
                for (addr, path) in others {
                    let _ = s.join_with(addr, &path).await;
                }
            });
        }
        Ok(session)
    }
}

/// IPv6 first, then alternating families (RFC 8305 §4).
fn interleave_families<T: Clone>(paths: &[(SocketAddr, T)]) -> Vec<(SocketAddr, T)> {
    let (mut v6, mut v4): (std::collections::VecDeque<_>, std::collections::VecDeque<_>) =
        paths.iter().cloned().partition(|(a, _)| a.is_ipv6());
    let mut out = Vec::with_capacity(paths.len());
    while !v6.is_empty() || !v4.is_empty() {
        out.extend(v6.pop_front());
        out.extend(v4.pop_front());
    }
    out
}

/// Address and name helpers for command-line style targets.
pub fn server_name_for(host: &str) -> io::Result<ServerName<'static>> {
    ServerName::try_from(host.trim_start_matches('[').trim_end_matches(']').to_string())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("invalid server name {host:?}: {e}")))
}
