//! Client side: connect a TCP socket, run the handshake, hand out a [`Session`].

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use rustls::pki_types::ServerName;
use rustls::ClientConfig;
use tokio::net::TcpStream;

use crate::driver::Driver;
use crate::session::Session;
use crate::shared::Shared;
use crate::socket::configure;
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
}

impl TcplsConnector {
    /// `tcpls/1` is put first in the ALPN list (the config's own protocols follow, for servers
    /// that only speak plain TLS) and secret extraction is enabled.
    pub fn new(config: Arc<ClientConfig>) -> Self {
        Self { config: Arc::new(tcpls_proto::tcpls_client_config(&config)), settings: SessionConfig::default() }
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
        let stream = TcpStream::connect(addr).await?;
        self.connect_with(stream, server_name).await
    }

    /// Runs the handshake over an already connected TCP stream.
    pub async fn connect_with(&self, stream: TcpStream, server_name: ServerName<'static>) -> io::Result<Session> {
        configure(&stream)?;
        let mut proto = tcpls_proto::Session::client(self.config.clone(), server_name, self.settings.clone())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        proto.set_addresses(0, stream.local_addr().ok(), stream.peer_addr().ok());
        let origin = stream.peer_addr().ok();
        let shared = Shared::new(proto);
        shared.lock().origin = origin;
        tokio::spawn(Driver::new(shared.clone(), 0, stream));
        // If this future is dropped (a lost happy-eyeballs race) or fails, the half-made
        // session is aborted rather than left running without a handle.
        let guard = AbortOnDrop(Some(Session::new(shared)));
        let session = guard.0.as_ref().ok_or_else(|| io::Error::other("session vanished"))?;
        match tokio::time::timeout(crate::HANDSHAKE_TIMEOUT, session.established()).await {
            Ok(result) => result.map_err(handshake_error)?,
            Err(_) => return Err(io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out")),
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
        if addrs.is_empty() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "no address to connect to"));
        }
        let order = interleave_families(addrs);
        let mut attempts = tokio::task::JoinSet::new();
        let mut last_error = None;
        let mut next = 0;
        let mut winner = None;
        loop {
            if next < order.len() {
                let (connector, addr, name) = (self.clone(), order[next], server_name.clone());
                attempts.spawn(async move { (addr, connector.connect(addr, name).await) });
                next += 1;
            }
            let stagger = tokio::time::sleep(options.stagger);
            tokio::pin!(stagger);
            // Wait for a result, or for the next attempt's turn.
            let done = loop {
                tokio::select! {
                    joined = attempts.join_next(), if !attempts.is_empty() => match joined {
                        Some(Ok((addr, Ok(session)))) => break Some((addr, session)),
                        Some(Ok((addr, Err(e)))) => {
                            last_error = Some(io::Error::new(e.kind(), format!("{addr}: {e}")));
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
            let others: Vec<SocketAddr> = order.into_iter().filter(|a| *a != won).collect();
            let s = session.clone();
            tokio::spawn(async move {
                // Tokens arrive with the server's first record, half a round trip after ours.
                for _ in 0..100 {
                    if s.token_count() > 0 {
                        break;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
                for addr in others {
                    let _ = s.join(addr).await;
                }
            });
        }
        Ok(session)
    }
}

/// IPv6 first, then alternating families (RFC 8305 §4).
fn interleave_families(addrs: &[SocketAddr]) -> Vec<SocketAddr> {
    let (mut v6, mut v4): (std::collections::VecDeque<_>, std::collections::VecDeque<_>) = (
        addrs.iter().copied().filter(SocketAddr::is_ipv6).collect(),
        addrs.iter().copied().filter(SocketAddr::is_ipv4).collect(),
    );
    let mut out = Vec::with_capacity(addrs.len());
    while !v6.is_empty() || !v4.is_empty() {
        out.extend(v6.pop_front());
        out.extend(v4.pop_front());
    }
    out
}

pub(crate) fn handshake_error(e: tcpls_proto::Error) -> io::Error {
    let kind = match &e {
        tcpls_proto::Error::ConnectionLost(_) => io::ErrorKind::ConnectionAborted,
        _ => io::ErrorKind::InvalidData,
    };
    io::Error::new(kind, e)
}

/// Address and name helpers for command-line style targets.
pub fn server_name_for(host: &str) -> io::Result<ServerName<'static>> {
    ServerName::try_from(host.trim_start_matches('[').trim_end_matches(']').to_string())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("invalid server name {host:?}: {e}")))
}
