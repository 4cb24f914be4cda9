//! `tcpls serve`: a TCPLS server (also serving plain TLS clients) in perf, echo or discard mode.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use tcpls::{RecvStream, SendStream, Session, SessionConfig, TcplsListener};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Semaphore;

use crate::args::resolve;
use crate::perf::protocol::{decode_ask, encode_report, Ask, Direction, NOT_A_PERF_REQUEST, REQUEST_LEN};
use crate::transfer::{deadline, receive_pattern, send_pattern, until, Gaps, Received, StallMeter};
use crate::{server_tls, Ended, ServeArgs};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// Answer `tcpls perf` requests.
    Perf,
    /// Send every stream's bytes back on the same stream.
    Echo,
    /// Read every stream and drop the bytes.
    Discard,
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Perf => "perf",
            Self::Echo => "echo",
            Self::Discard => "discard",
        })
    }
}

/// `tcpls serve`: binds the listeners asked for and serves until `--sessions` sessions have
/// ended or Ctrl-C.
pub(crate) async fn command(a: ServeArgs) -> Result<Ended, String> {
    let mut tls = server_tls("serve", a.cert.as_deref(), a.key.as_deref(), &a.alpn, None)?;
    // 0-RTT only where a replayed request does no harm: a perf request only asks for test
    // data (RESUMPTION.md); echo and the other modes refuse early data.
    if a.mode == Mode::Perf {
        tls.max_early_data_size = tcpls::proto::MAX_EARLY_DATA as u32;
    }
    let tickets = match &a.ticket_keys {
        Some(path) => Some(crate::farm_keys::install(&mut tls, path)?),
        None => None,
    };
    let mut listen = Vec::new();
    for l in &a.listen {
        listen.extend(resolve(l)?.into_iter().take(1));
    }
    // Clients learn every address they may join: the specific --listen addresses (not wildcard
    // ones, which name no reachable address) and the --advertise ones.
    let mut advertise: Vec<SocketAddr> = listen.iter().copied().filter(|a| !a.ip().is_unspecified()).collect();
    if advertise.len() < 2 {
        advertise.clear();
    }
    for l in &a.advertise {
        advertise.extend(resolve(l)?.into_iter().take(1));
    }
    advertise.dedup();
    let idle_timeout = (a.idle_timeout > 0).then(|| std::time::Duration::from_secs(a.idle_timeout));
    let rejoin_timeout = std::time::Duration::from_secs(a.rejoin_timeout);
    let settings = SessionConfig {
        tokens: a.tokens,
        advertise,
        idle_timeout,
        rejoin_timeout,
        receive_budget: a.receive_budget,
        send_budget: a.send_budget,
        send_autotune: !a.no_autotune,
        receive_autotune: !a.no_autotune,
        ..SessionConfig::default()
    };
    let settings = crate::probe::serve_settings(settings, &a.allow_cc);
    // One registry for every listener (and core): a client may join through any of them.
    let registry = tcpls::JoinRegistry::new();
    let metrics = match &a.metrics {
        Some(addr) => Some(crate::metrics::start(addr, registry.clone(), "tcpls serve").await?),
        None => None,
    };
    if let Some(t) = tickets {
        if let Some(m) = &metrics {
            m.with_ticketer(t.clone());
        }
        if let Some(path) = a.ticket_keys.clone() {
            crate::farm_keys::reload_on_sighup(t, path)?;
        }
    }
    let opts = ServeOptions {
        mode: a.mode,
        max_sessions: a.max_sessions,
        json: a.json,
        quiet: false,
        sessions_limit: a.sessions,
        metrics,
        interrupt: Some(crate::interrupt::listen()),
    };
    let interrupted = match a.runtime {
        ServerRuntime::PerCore => {
            let builder =
                tcpls::ServerBuilder::new(Arc::new(tls)).settings(settings).cores(a.threads).registry(registry);
            run_per_core(&listen, builder, opts).await?
        }
        ServerRuntime::WorkStealing => {
            let listeners = bind_with_registry(&listen, tls, settings, registry).await?;
            for l in &listeners {
                crate::logging::info("serve", &format!("listening on {} (mode {})", l.local_addr(), a.mode));
            }
            run(listeners, opts).await?
        }
    };
    Ok(if interrupted { Ended::Interrupted } else { Ended::Done })
}

/// How a server spreads its sessions over threads (`--runtime`, the tunnel's key `runtime`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ServerRuntime {
    /// One listener (SO_REUSEPORT) and one single-threaded runtime per core; each session, its
    /// joined connections and its streams stay on the core that accepted it.
    PerCore,
    /// One multi-thread runtime whose worker threads share every session (tokio's work
    /// stealing).
    WorkStealing,
}

impl std::fmt::Display for ServerRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::PerCore => "per-core",
            Self::WorkStealing => "work-stealing",
        })
    }
}

pub struct ServeOptions {
    pub mode: Mode,
    pub max_sessions: usize,
    pub json: bool,
    /// No per-session lines (the demo prints its own report).
    pub quiet: bool,
    /// Stop after this many sessions (tests and demos).
    pub sessions_limit: Option<u64>,
    /// `--metrics`: count sessions and refusals there.
    pub metrics: Option<crate::metrics::ServerMetrics>,
    /// Stop on Ctrl-C (None: only by the session limit, as in the demo).
    pub interrupt: Option<crate::interrupt::Interrupt>,
}

#[derive(Serialize)]
struct SessionReport {
    event: &'static str,
    peer: String,
    fallback: bool,
    cipher: String,
    streams: u64,
    bytes_received: u64,
    bytes_sent: u64,
    seconds: f64,
    error: Option<String>,
}

/// Binds every `--listen` address.
pub async fn bind(
    listen: &[SocketAddr],
    tls: rustls::ServerConfig,
    settings: SessionConfig,
) -> Result<Vec<TcplsListener>, String> {
    // One registry for all listeners: a client may join its session through any address.
    bind_with_registry(listen, tls, settings, tcpls::JoinRegistry::new()).await
}

/// [`bind`] with the join registry the listeners share.
async fn bind_with_registry(
    listen: &[SocketAddr],
    tls: rustls::ServerConfig,
    settings: SessionConfig,
    registry: tcpls::JoinRegistry,
) -> Result<Vec<TcplsListener>, String> {
    let tls = Arc::new(tls);
    let mut listeners = Vec::new();
    for addr in listen {
        let l = TcplsListener::bind_with_registry(*addr, tls.clone(), settings.clone(), registry.clone())
            .await
            .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        listeners.push(l);
    }
    Ok(listeners)
}

/// Serves until interrupted (returns true) or `sessions_limit` sessions have ended, on the
/// listeners of this (work-stealing) runtime.
pub async fn run(listeners: Vec<TcplsListener>, mut opts: ServeOptions) -> Result<bool, String> {
    let interrupt = opts.interrupt.take();
    let (sessions, done_rx) = Sessions::new(&opts);
    let mut accepts = tokio::task::JoinSet::new();
    for listener in listeners {
        let sessions = sessions.clone();
        accepts.spawn(async move {
            while let Some((session, peer)) = listener.accept().await {
                if let Some(task) = sessions.start(session, peer) {
                    tokio::spawn(task);
                }
            }
        });
    }
    drop(sessions);
    Ok(wait(done_rx, interrupt, opts.sessions_limit).await)
}

/// Like [`run`], served per core (`tcpls::ServerBuilder`: a listener and a current-thread
/// runtime per core, each session kept on its core).
pub async fn run_per_core(
    listen: &[SocketAddr],
    builder: tcpls::ServerBuilder,
    mut opts: ServeOptions,
) -> Result<bool, String> {
    let interrupt = opts.interrupt.take();
    let (sessions, done_rx) = Sessions::new(&opts);
    let server = builder
        .serve(listen, move |session, peer| {
            let task = sessions.start(session, peer);
            async move {
                if let Some(task) = task {
                    task.await;
                }
            }
        })
        .map_err(|e| e.to_string())?;
    for addr in server.local_addrs() {
        crate::logging::info("serve", &format!("listening on {addr} (mode {}, {} cores)", opts.mode, server.cores()));
    }
    let interrupted = wait(done_rx, interrupt, opts.sessions_limit).await;
    // Joins the cores' threads: off this runtime's worker.
    let _ = tokio::task::spawn_blocking(move || server.shutdown()).await;
    Ok(interrupted)
}

/// What every session of a server shares: the --max-sessions limit, the count of ended
/// sessions, the metrics.
#[derive(Clone)]
struct Sessions {
    limit: Arc<Semaphore>,
    done_tx: tokio::sync::mpsc::UnboundedSender<()>,
    metrics: Option<crate::metrics::ServerMetrics>,
    mode: Mode,
    json: bool,
    quiet: bool,
}

impl Sessions {
    fn new(opts: &ServeOptions) -> (Self, tokio::sync::mpsc::UnboundedReceiver<()>) {
        let (done_tx, done_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
        let limit = Arc::new(Semaphore::new(opts.max_sessions.max(1)));
        let sessions =
            Self { limit, done_tx, metrics: opts.metrics.clone(), mode: opts.mode, json: opts.json, quiet: opts.quiet };
        (sessions, done_rx)
    }

    /// The task serving a new session, or None when --max-sessions are served already (the
    /// session is then refused).
    fn start(
        &self,
        session: Session,
        peer: SocketAddr,
    ) -> Option<impl std::future::Future<Output = ()> + Send + 'static> {
        let Ok(permit) = self.limit.clone().try_acquire_owned() else {
            eprintln!("tcpls serve: refusing session from {peer}: --max-sessions reached");
            session.abort();
            if let Some(m) = &self.metrics {
                m.refused_max_sessions();
            }
            return None;
        };
        let done_tx = self.done_tx.clone();
        let tracked = self.metrics.as_ref().map(|m| m.track(&session));
        let (mode, json, quiet) = (self.mode, self.json, self.quiet);
        Some(async move {
            serve_session(session, peer, mode, json, quiet).await;
            drop(tracked);
            drop(permit);
            let _ = done_tx.send(());
        })
    }
}

/// Waits until `limit` sessions have ended (or every listener is gone), or Ctrl-C (true).
async fn wait(
    mut done_rx: tokio::sync::mpsc::UnboundedReceiver<()>,
    mut interrupt: Option<crate::interrupt::Interrupt>,
    limit: Option<u64>,
) -> bool {
    let ctrl_c = async move {
        match &mut interrupt {
            Some(i) => i.recv().await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(ctrl_c);
    let mut ended = 0u64;
    loop {
        tokio::select! {
            r = done_rx.recv() => {
                if r.is_none() { return false; }
                ended += 1;
                if limit.is_some_and(|n| ended >= n) { return false; }
            }
            () = &mut ctrl_c => {
                crate::logging::info("serve", "interrupted (Ctrl-C): stopping");
                return true;
            }
        }
    }
}

async fn serve_session(session: Session, peer: SocketAddr, mode: Mode, json: bool, quiet: bool) {
    let start = Instant::now();
    let mut streams = 0u64;
    let mut tasks = tokio::task::JoinSet::new();
    let watch = crate::probe::watch_socket_options(session.clone(), quiet);
    // When the client's uploads delivered payload, for its stats requests.
    let stalls = Arc::new(StallMeter::default());
    // Stats requests are not transfers: the report counts the streams without them.
    let stats_asked = Arc::new(AtomicU64::new(0));
    while let Some((send, recv)) = session.accept_stream().await {
        streams += 1;
        let (session, stalls, stats_asked) = (session.clone(), stalls.clone(), stats_asked.clone());
        tasks.spawn(async move {
            let r = match mode {
                Mode::Perf => perf_stream(send, recv, &session, &stalls, &stats_asked).await,
                Mode::Echo => echo_stream(send, recv).await,
                Mode::Discard => discard_stream(send, recv).await,
            };
            if let Err(e) = r {
                eprintln!("tcpls serve: stream error: {e}");
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    streams = streams.saturating_sub(stats_asked.load(std::sync::atomic::Ordering::Relaxed));
    let error = session.close().await.map(|e| e.to_string());
    watch.abort();
    crate::probe::log_socket_options(&session, quiet);
    let conns = session.connections();
    let report = SessionReport {
        event: "session_closed",
        peer: peer.to_string(),
        fallback: session.is_fallback(),
        cipher: session.handshake_info().map(|i| i.cipher_suite).unwrap_or_default(),
        streams,
        bytes_received: conns.iter().map(|c| c.bytes_received).sum(),
        bytes_sent: conns.iter().map(|c| c.bytes_sent).sum(),
        seconds: start.elapsed().as_secs_f64(),
        error,
    };
    if json {
        println!("{}", serde_json::to_string(&report).unwrap_or_default());
    } else if !quiet {
        eprintln!(
            "tcpls serve: session from {} ended after {:.2} s: {} stream{}, {} bytes in, {} bytes out{}{}",
            report.peer,
            report.seconds,
            report.streams,
            if report.streams == 1 { "" } else { "s" },
            report.bytes_received,
            report.bytes_sent,
            if report.fallback { ", plain TLS (fallback)" } else { "" },
            report.error.as_deref().map(|e| format!(", error: {e}")).unwrap_or_default()
        );
    }
}

async fn perf_stream(
    mut send: SendStream,
    mut recv: RecvStream,
    session: &Session,
    stalls: &StallMeter,
    stats_asked: &AtomicU64,
) -> std::io::Result<()> {
    let mut header = [0u8; REQUEST_LEN];
    let ask = match recv.read_exact(&mut header).await {
        Ok(_) => decode_ask(&header),
        Err(e) => Err(format!("no perf request ({e})")),
    };
    let request = match ask {
        Ok(Ask::Transfer(r)) => r,
        Ok(Ask::Stats) => {
            stats_asked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            // A fixed-size answer, whatever follows the request (which is not read).
            send.write_all(&path_stats(session, stalls).encode()).await?;
            return send.shutdown().await;
        }
        Err(e) => {
            // Tell the client why (`tcpls connect` explains NOT_A_PERF_REQUEST).
            let _ = send.reset(NOT_A_PERF_REQUEST);
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{e}: this server runs in perf mode, for `tcpls perf`"),
            ));
        }
    };
    let counter = AtomicU64::new(0);
    // The pattern position counts payload bytes only, so the client's header does not shift it.
    match request.direction {
        Direction::Download => {
            // The client keeps its side open while it reads; it resets it to stop the transfer
            // early (Ctrl-C), and FIN (or nothing) means "go on".
            let cancelled = async {
                let mut rest = [0u8; 64];
                loop {
                    match recv.read(&mut rest).await {
                        Ok(0) => std::future::pending::<()>().await,
                        Ok(_) => continue,
                        Err(_) => return,
                    }
                }
            };
            let stop = async {
                tokio::select! {
                    () = until(deadline(request.millis)) => {}
                    () = cancelled => {}
                }
            };
            send_pattern(&mut send, request.seed.into(), request.bytes, stop, &counter).await?;
        }
        Direction::Upload => {
            let forever = std::future::pending();
            let corrupt = AtomicBool::new(false);
            let gaps = Gaps::default();
            let progress = Received { bytes: &counter, corrupt: &corrupt, stalls, gaps: &gaps };
            let (received, verified, _) = receive_pattern(&mut recv, request.seed.into(), forever, &progress).await?;
            send.write_all(&encode_report(received, verified)).await?;
            send.shutdown().await?;
        }
    }
    Ok(())
}

/// This end's answer to a stats request: the session's path events and the longest stall of
/// the uploads it received.
fn path_stats(session: &Session, stalls: &StallMeter) -> crate::perf::protocol::PathStats {
    crate::perf::report::path_stats(&session.stats(), stalls)
}

async fn echo_stream(mut send: SendStream, mut recv: RecvStream) -> std::io::Result<()> {
    tokio::io::copy(&mut recv, &mut send).await?;
    send.shutdown().await
}

async fn discard_stream(mut send: SendStream, mut recv: RecvStream) -> std::io::Result<()> {
    let sink = AtomicU64::new(0);
    loop {
        let n = recv.read_chunk_with(|c| c.len()).await?;
        if n == 0 {
            break;
        }
        sink.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
    }
    send.shutdown().await
}
