//! The concentrator: accepts TCPLS sessions, and on each stream the TLV request; opens the
//! TCP connection asked for and relays.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use rustls::ServerConfig;
use tcpls::{JoinRegistry, RecvStream, SendStream, Session, TcplsListener};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tracing::{debug, info, warn};

use super::order::{ConnectOrder, Turn, MAX_ORDER_WAIT};
use super::relay::{self, Outcome};
use super::tlv::{self, ReadError, Tlv, ERR_CONNECTION_FAILURE};
use super::{Stats, StatsSnapshot, Target, TunnelConfig};

/// Listens on one or more addresses (one TCPLS listener each, sharing a join registry, so a
/// client can add paths to any of them).
pub struct Concentrator {
    listeners: Vec<TcplsListener>,
    cfg: Arc<TunnelConfig>,
    stats: Arc<Stats>,
    on_session_start: Option<Arc<SessionHook>>,
}

/// Sees each new session before it is served; what it returns is dropped when the session is
/// over (metrics keep a session counted as live this way).
pub type SessionHook = dyn Fn(&Session) -> Box<dyn Send> + Send + Sync;

/// One ended session (the concentrator's `--json` line).
#[derive(Debug, Clone)]
pub struct SessionSummary {
    pub peer: SocketAddr,
    pub duration: Duration,
    /// TCP connections the session had at its end (failed ones included).
    pub connections: usize,
    pub stats: StatsSnapshot,
    /// The session's error, if it failed.
    pub error: Option<String>,
}

impl Concentrator {
    /// Binds every address. With two or more specific addresses, clients learn all of them
    /// (New Address) to add paths.
    pub async fn bind(addrs: &[SocketAddr], tls: Arc<ServerConfig>, cfg: TunnelConfig) -> io::Result<Concentrator> {
        if addrs.is_empty() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "no address to listen on"));
        }
        let mut sockets = Vec::new();
        for a in addrs {
            let l = crate::frontend::listen(*a)
                .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {a}: {e}")))?;
            sockets.push(l);
        }
        let mut settings = cfg.session.clone();
        let bound: Vec<SocketAddr> = sockets.iter().filter_map(|l| l.local_addr().ok()).collect();
        let specific: Vec<SocketAddr> = bound.iter().copied().filter(|a| !a.ip().is_unspecified()).collect();
        if specific.len() >= 2 {
            settings.advertise.extend(specific);
        }
        let registry = JoinRegistry::new();
        let listeners = sockets
            .into_iter()
            .map(|l| TcplsListener::from_listener(l, tls.clone(), settings.clone(), registry.clone()))
            .collect();
        Ok(Concentrator { listeners, cfg: Arc::new(cfg), stats: Arc::new(Stats::default()), on_session_start: None })
    }

    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.listeners.iter().map(|l| l.local_addr()).collect()
    }

    /// Counters over all sessions.
    pub fn stats(&self) -> Arc<Stats> {
        self.stats.clone()
    }

    /// The join registry all listeners share (its `listener_stats()`: sessions, joins, refusals).
    pub fn registry(&self) -> Option<JoinRegistry> {
        self.listeners.first().map(|l| l.registry().clone())
    }

    /// Calls `hook` with every new session (see [`SessionHook`]).
    pub fn on_session_start(&mut self, hook: Arc<SessionHook>) {
        self.on_session_start = Some(hook);
    }

    /// Serves sessions until every listener failed; `on_session_end` sees each ended session.
    pub async fn run<F>(self, on_session_end: F) -> io::Result<()>
    where
        F: Fn(SessionSummary) + Send + Sync + 'static,
    {
        let on_end = Arc::new(on_session_end);
        let mut loops = tokio::task::JoinSet::new();
        for l in self.listeners {
            let (cfg, stats, on_end) = (self.cfg.clone(), self.stats.clone(), on_end.clone());
            let on_start = self.on_session_start.clone();
            loops.spawn(async move {
                while let Some((session, peer)) = l.accept().await {
                    let (cfg, stats, on_end) = (cfg.clone(), stats.clone(), on_end.clone());
                    let started = on_start.as_ref().map(|hook| hook(&session));
                    tokio::spawn(async move {
                        let summary = serve_session(session, peer, cfg, stats).await;
                        drop(started);
                        on_end(summary);
                    });
                }
                l.local_addr()
            });
        }
        while let Some(ended) = loops.join_next().await {
            if let Ok(addr) = ended {
                warn!("tunnel concentrator: listener on {addr} failed");
            }
        }
        Err(io::Error::other("every listener failed"))
    }
}

/// Serves one session's streams until the session is over.
pub async fn serve_session(
    session: Session,
    peer: SocketAddr,
    cfg: Arc<TunnelConfig>,
    all: Arc<Stats>,
) -> SessionSummary {
    let started = Instant::now();
    info!("tunnel: session from {peer}");
    let mine = Arc::new(Stats::default());
    let next_path = Arc::new(AtomicUsize::new(0));
    let order = ConnectOrder::new();
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = session.accept_stream() => {
                let Some((send, recv)) = accepted else { break };
                steer_round_robin(&session, &send, &next_path);
                let (cfg, all, mine, turn) = (cfg.clone(), all.clone(), mine.clone(), order.ticket());
                tasks.spawn(async move { serve_stream(send, recv, turn, &cfg, &[&all, &mine], peer).await });
            }
            // Reap finished stream tasks so a long session does not accumulate them.
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
    while tasks.join_next().await.is_some() {}
    let error = session.closed().await.map(|e| e.to_string());
    let summary = SessionSummary {
        peer,
        duration: started.elapsed(),
        connections: session.connections().len(),
        stats: mine.snapshot(),
        error,
    };
    info!(
        "tunnel: session from {peer} ended after {:.1} s: {}{}",
        summary.duration.as_secs_f64(),
        summary.stats,
        summary.error.as_ref().map(|e| format!(", error: {e}")).unwrap_or_default()
    );
    summary
}

/// Spreads the streams' data over the session's connections, one connection per stream (a
/// stream whose connection dies is re-scheduled on the others by the session).
pub(crate) fn steer_round_robin(session: &Session, send: &SendStream, next: &AtomicUsize) {
    let conns = session.usable_connections();
    if conns.len() > 1 {
        let i = next.fetch_add(1, Ordering::Relaxed) % conns.len();
        let _ = send.steer(Some(conns[i]));
    }
}

fn each(stats: &[&Arc<Stats>], f: impl Fn(&Stats)) {
    for s in stats {
        f(s);
    }
}

async fn serve_stream(
    mut send: SendStream,
    mut recv: RecvStream,
    turn: Turn,
    cfg: &TunnelConfig,
    stats: &[&Arc<Stats>],
    peer: SocketAddr,
) {
    each(stats, Stats::stream);
    let id = send.id();
    let target = match tokio::time::timeout(cfg.handshake_timeout, tlv::read_request(&mut recv)).await {
        Ok(Ok(t)) => t,
        Ok(Err(ReadError::Bad(e))) => {
            // Hostile or broken request: answer why, end this stream only.
            debug!("tunnel: {peer} stream {id}: {e}: refused");
            each(stats, Stats::rejected);
            answer_and_finish(&mut send, e.code()).await;
            return;
        }
        Ok(Err(ReadError::Io(e))) => {
            debug!("tunnel: {peer} stream {id}: request not read: {e}");
            each(stats, Stats::rejected);
            let _ = send.reset(tlv::RESET_CODE);
            return;
        }
        Err(_) => {
            debug!("tunnel: {peer} stream {id}: no request within {:?}", cfg.handshake_timeout);
            each(stats, Stats::rejected);
            answer_and_finish(&mut send, tlv::ERR_PROTOCOL_VIOLATION).await;
            return;
        }
    };
    let tcp = match connect(&target, cfg.connect_timeout, turn).await {
        Ok(s) => s,
        Err(e) => {
            debug!("tunnel: {peer} stream {id} -> {target}: {e}");
            each(stats, Stats::connect_failed);
            answer_and_finish(&mut send, ERR_CONNECTION_FAILURE).await;
            return;
        }
    };
    let _ = tcp.set_nodelay(true);
    if send.write_all(&tlv::encode_all(&[Tlv::ConnectOk, Tlv::End])).await.is_err() {
        each(stats, Stats::rejected);
        relay::reset_tcp(tcp);
        return;
    }
    debug!("tunnel: {peer} stream {id} -> {target}: connected");
    each(stats, |s| {
        s.connected();
        s.relay_started();
    });
    let report = relay::relay(tcp, send, recv).await;
    each(stats, |s| s.relay_ended(&report, false));
    match report.outcome {
        Outcome::Closed => debug!(
            "tunnel: {peer} stream {id} -> {target}: closed ({} bytes up, {} down)",
            report.received, report.sent
        ),
        o => {
            debug!("tunnel: {peer} stream {id} -> {target}: {o:?} ({} bytes up, {} down)", report.received, report.sent)
        }
    }
}

/// Error and End, then FIN: the stream's reading half was already dropped or is dropped by the
/// caller (what else the client sends is discarded).
async fn answer_and_finish(send: &mut SendStream, code: u16) {
    let _ = send.write_all(&tlv::encode_all(&[Tlv::Error(code), Tlv::End])).await;
    let _ = send.finish();
}

/// Connects to the target (a name: each of its addresses in turn), within `timeout` overall.
/// The first connection attempt starts in stream order (`turn`, see [`super::order`]).
async fn connect(target: &Target, timeout: Duration, turn: Turn) -> io::Result<TcpStream> {
    let attempt = async {
        let addrs: Vec<SocketAddr> = match target {
            Target::Addr(a) => vec![*a],
            Target::Name(host, port) => tokio::net::lookup_host((host.as_str(), *port)).await?.collect(),
        };
        turn.wait(MAX_ORDER_WAIT).await;
        let mut turn = Some(turn);
        let mut last = io::Error::new(io::ErrorKind::NotFound, format!("{target} has no address"));
        for a in addrs {
            let mut connecting = std::pin::pin!(TcpStream::connect(a));
            // The first poll sends the SYN; the next stream may start its own after that.
            let first = std::future::poll_fn(|cx| Poll::Ready(connecting.as_mut().poll(cx))).await;
            drop(turn.take());
            let connected = match first {
                Poll::Ready(r) => r,
                Poll::Pending => connecting.await,
            };
            match connected {
                Ok(s) => return Ok(s),
                Err(e) => last = e,
            }
        }
        Err(last)
    };
    tokio::time::timeout(timeout, attempt)
        .await
        .unwrap_or_else(|_| Err(io::Error::new(io::ErrorKind::TimedOut, "connection timed out")))
}
