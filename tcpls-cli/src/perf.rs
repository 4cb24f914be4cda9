//! `tcpls perf`: iperf-style bulk transfer with byte-for-byte verification.
//!
//! The client opens `--streams` streams (twice as many with `--bidir`), each asking the server
//! for one direction (perf_proto.rs), steers them over the session's connections, and runs
//! until the byte count is done, the time is up, or Ctrl-C. An interval sampler prints what
//! happened every `-i` seconds; the report gives iperf3's sender and receiver lines.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use tcpls::{RecvStream, SendStream, Session, SessionConfig, TcplsConnector};
use tcpls_proto::sync::LockExt;
use tokio::sync::watch;

use crate::perf_interval::{Counters, Sampled, Sampler, SenderView, Snapshot, SPREAD};
use crate::perf_proto::{Direction, Request};
use crate::perf_report::{ConnectionReport, DirectionSummary, EndSummary, MigrationReport, Output, PerfReport, HEADER};
use crate::perf_stream::{StreamOutcome, StreamTask};

/// Which way the payload goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Upload,
    Download,
    /// Both at once (`--bidir`): each stream index runs one stream each way.
    Bidir,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Self::Upload => "upload",
            Self::Download => "download",
            Self::Bidir => "bidir",
        }
    }

    fn directions(self) -> &'static [Direction] {
        match self {
            Self::Upload => &[Direction::Upload],
            Self::Download => &[Direction::Download],
            Self::Bidir => &[Direction::Upload, Direction::Download],
        }
    }
}

pub struct PerfOptions {
    /// The server's addresses (several: happy eyeballs picks the first that answers).
    pub addrs: Vec<SocketAddr>,
    /// Extra connections (joined with the server's tokens) towards these addresses, from these
    /// local sides.
    pub paths: Vec<(SocketAddr, tcpls::PathOptions)>,
    /// Keep the paths up with a path manager of this policy (None: join each path once).
    pub path_manager: Option<tcpls::PathPolicy>,
    /// Spread every stream over all connections instead of one connection per stream.
    pub aggregate: bool,
    /// Move every stream to the next connection after this long.
    pub migrate_at: Option<Duration>,
    pub server_name: ServerName<'static>,
    pub tls: rustls::ClientConfig,
    pub settings: SessionConfig,
    pub mode: Mode,
    /// Total over all streams of each direction; None with a time limit.
    pub bytes: Option<u64>,
    /// Run this long (after the omitted warm-up); None with a byte count.
    pub time: Option<Duration>,
    /// Warm-up left out of the summary (`--omit`).
    pub omit: Duration,
    /// Interval lines every this long; None: none.
    pub interval: Option<Duration>,
    pub streams: u32,
    /// Local address (and port) of the first connection (`-B`, `--cport`).
    pub bind: Option<SocketAddr>,
    /// Interface of the first connection (`-B dev:NAME`).
    pub bind_device: Option<String>,
    /// Extension frames to send before the transfer (rate limit, congestion control, timeout).
    pub ext: crate::probe::PerfExt,
    /// 0-RTT: a warm-up session fetches a ticket, then the measured session resumes and sends
    /// its first request as TLS early data (`tls.enable_early_data` must be set).
    pub zero_rtt: bool,
    /// None: print nothing while running (the demo prints its own report).
    pub output: Option<Output>,
}

/// Bytes of stream `i` (the first carries the remainder so the total is exact).
fn stream_bytes(opts: &PerfOptions, i: u32) -> u64 {
    let streams = u64::from(opts.streams.max(1));
    match opts.bytes {
        Some(b) if i == 0 => b / streams + b % streams,
        Some(b) => b / streams,
        None => u64::MAX,
    }
}

/// Runs the measurement; `interrupted` turns true on Ctrl-C, which ends the transfer early.
pub async fn run(opts: PerfOptions, interrupted: watch::Receiver<bool>) -> Result<PerfReport, String> {
    let shown = opts.addrs.first().map(|a| a.to_string()).unwrap_or_default();
    let millis = opts.time.map(|t| (t + opts.omit).as_millis().max(1) as u64).unwrap_or(0);
    let first_direction = opts.mode.directions()[0];
    let first_request = Request { direction: first_direction, seed: 0, bytes: stream_bytes(&opts, 0), millis };
    let (session, early_stream, handshake_ms) = connect(&opts, &first_request).await?;
    if session.is_fallback() {
        session.abort();
        return Err(format!(
            "{shown} does not speak TCPLS (plain TLS only): tcpls perf needs `tcpls serve --mode perf`"
        ));
    }
    let mut conns = vec![0u32];
    match opts.path_manager {
        None => {
            for (remote, local) in &opts.paths {
                let id = session
                    .join_with(*remote, local)
                    .await
                    .map_err(|e| format!("cannot add a connection {local}to {remote}: {e}"))?;
                conns.push(id);
            }
        }
        Some(policy) => conns.extend(start_path_manager(&session, &opts, policy).await?),
    }
    if opts.migrate_at.is_some() && conns.len() < 2 {
        return Err("--migrate-at needs a second connection (--path)".into());
    }
    let sends = matches!(opts.mode, Mode::Upload | Mode::Bidir);
    opts.ext.apply(&session, &conns, sends, opts.mode != Mode::Upload)?;
    let info = session.handshake_info();
    let cipher = info.as_ref().map(|i| i.cipher_suite.clone()).unwrap_or_default();
    if let Some(output) = opts.output.as_ref().filter(|o| !o.json) {
        output.out.line(&format!(
            "Connecting to host {shown}: TCPLS, {cipher}, handshake {handshake_ms:.1} ms, {}, {} stream{}",
            opts.mode.name(),
            opts.streams,
            if opts.streams == 1 { "" } else { "s" }
        ));
        for c in session.connections() {
            let local = c.local.map_or("?".into(), |a| a.to_string());
            let remote = c.remote.map_or("?".into(), |a| a.to_string());
            output.out.line(&format!("[{:>3}] local {local} connected to {remote}", c.id));
        }
        if opts.interval.is_some() {
            output.out.line(HEADER);
        }
    }

    let start = Instant::now();
    let deadline = opts.time.map(|t| start + t + opts.omit);
    // One counter per stream, in the order they are opened below, with its connection.
    let steered = !opts.aggregate || opts.migrate_at.is_some();
    let counters = Arc::new(Counters::new((0..opts.streams).flat_map(|i| {
        let conn = if steered { conns[i as usize % conns.len()] } else { SPREAD };
        opts.mode.directions().iter().map(move |d| (*d == Direction::Upload, conn))
    })));
    let migration = spawn_migration(&opts, &session, &conns, start, counters.clone());
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let sampler = Sampler {
        session: session.clone(),
        counters: counters.clone(),
        start,
        omit: opts.omit,
        interval: opts.interval,
        view: if opts.mode == Mode::Download { SenderView::Peer } else { SenderView::Local },
        live: opts.output.clone().filter(|o| !o.json),
        bidir: opts.mode == Mode::Bidir,
    };
    let sampler = tokio::spawn(sampler.run(async {
        let _ = done_rx.await;
    }));

    let mut early_stream = early_stream;
    let mut tasks = tokio::task::JoinSet::new();
    let mut index = 0;
    for i in 0..opts.streams {
        for &direction in opts.mode.directions() {
            // With --zero-rtt, the first stream exists already and its request went as early data.
            let (early, (send, recv)) = match early_stream.take() {
                Some(pair) => (true, pair),
                None => (false, session.open_stream().map_err(|e| format!("cannot open stream: {e}"))?),
            };
            // Without --aggregate each stream stays on one connection, assigned round-robin.
            if !opts.aggregate || opts.migrate_at.is_some() {
                let conn = conns[i as usize % conns.len()];
                send.steer(Some(conn)).map_err(|e| format!("cannot steer stream: {e}"))?;
                // The server sends a download: ask it to use the same connection.
                recv.request_steer(conn);
            }
            let request = Request { direction, seed: i, bytes: stream_bytes(&opts, i), millis };
            let stream = StreamTask {
                request,
                early,
                deadline,
                interrupted: interrupted.clone(),
                counters: counters.clone(),
                index,
            };
            index += 1;
            tasks.spawn(stream.run(send, recv));
        }
    }
    let mut outcomes = Vec::new();
    let mut failure = None;
    while let Some(joined) = tasks.join_next().await {
        match joined.map_err(|e| format!("stream task failed: {e}")).and_then(|r| r) {
            Ok(outcome) => outcomes.push(outcome),
            Err(e) => {
                failure.get_or_insert(e);
            }
        }
    }
    let _ = done_tx.send(());
    let sampled = sampler.await.map_err(|e| format!("interval sampler failed: {e}"))?;
    if let Some(e) = failure {
        session.abort();
        return Err(e);
    }
    let end = start.elapsed();
    let migration = migration.lock_unpoisoned().take();
    warn_about_migration(&opts, migration.is_some(), end);

    let connections = session
        .connections()
        .into_iter()
        .map(|c| ConnectionReport {
            id: c.id,
            local: c.local.map(|a| a.to_string()),
            remote: c.remote.map(|a| a.to_string()),
            bytes_sent: c.bytes_sent,
            bytes_received: c.bytes_received,
            open: c.usable,
        })
        .collect();
    let stats = session.stats();
    let was_interrupted = *interrupted.borrow();
    close(&session, was_interrupted).await?;

    let (omit_seconds, summary) = summarize(&opts, &outcomes, &sampled, end);
    let received_after_omit: u64 = summary.iter().filter_map(|d| d.receiver.bytes).sum();
    let seconds = summary.first().map_or(0.0, |d| d.receiver.seconds);
    Ok(PerfReport {
        direction: opts.mode.name(),
        streams: opts.streams,
        bytes: outcomes.iter().map(|o| o.received).sum(),
        seconds,
        goodput_bps: if seconds > 0.0 { received_after_omit as f64 * 8.0 / seconds } else { 0.0 },
        verified: outcomes.iter().all(|o| o.verified),
        interrupted: was_interrupted,
        omit_seconds,
        fallback: false,
        cipher,
        failovers: stats.failovers,
        resumed: info.as_ref().is_some_and(|i| i.resumed),
        early_data_accepted: info.as_ref().is_some_and(|i| i.early_data_accepted),
        zero_copy_bytes: stats.zero_copy_bytes,
        copied_bytes: stats.copied_bytes,
        handshake_ms,
        migration,
        summary,
        intervals: sampled.intervals,
        connections,
    })
}

type EarlyStream = Option<(SendStream, RecvStream)>;

/// Connects (with 0-RTT, happy eyeballs or a bound local address as asked); returns the
/// session, the early-data stream with --zero-rtt, and the handshake time in ms.
async fn connect(opts: &PerfOptions, first_request: &Request) -> Result<(Session, EarlyStream, f64), String> {
    let connector = TcplsConnector::new(Arc::new(opts.tls.clone())).with_settings(opts.settings.clone());
    let shown = opts.addrs.first().map(|a| a.to_string()).unwrap_or_default();
    let failed = |e: std::io::Error| format!("cannot connect to {shown}: {}", crate::tlsconf::explain(&e));
    let mut early_stream = None;
    if opts.addrs.len() == 1 && opts.bind.is_none() && opts.bind_device.is_none() && !opts.zero_rtt {
        // The TCP connection is made while the crypto library finishes starting; the handshake
        // time is the TCP connect's plus the TLS handshake's, without that start-up.
        let addr = opts.addrs[0];
        let tcp = async {
            let t = Instant::now();
            (tokio::net::TcpStream::connect(addr).await, t.elapsed())
        };
        let ((tcp, tcp_time), ()) = tokio::join!(tcp, crate::tlsconf::crypto_ready());
        let t1 = Instant::now();
        let session = connector.connect_with(tcp.map_err(failed)?, opts.server_name.clone()).await.map_err(failed)?;
        return Ok((session, None, (tcp_time + t1.elapsed()).as_secs_f64() * 1e3));
    }
    crate::tlsconf::crypto_ready().await;
    let mut t0 = Instant::now();
    let session = if opts.zero_rtt {
        let addr = *opts.addrs.first().ok_or("no address to connect to")?;
        let warm = connector.connect(addr, opts.server_name.clone()).await;
        warm.map_err(failed)?.close().await;
        // The warm-up (closed gracefully) left the server's tickets in the client config: the
        // measured session resumes, and its first request goes as early data.
        t0 = Instant::now();
        connector.connect_with_early_data(addr, opts.server_name.clone(), &first_request.encode()).await.map(
            |(session, send, recv)| {
                early_stream = Some((send, recv));
                session
            },
        )
    } else if opts.bind.is_some() || opts.bind_device.is_some() {
        let addr = match opts.bind {
            Some(local) => *opts
                .addrs
                .iter()
                .find(|a| a.is_ipv4() == local.is_ipv4())
                .ok_or_else(|| format!("{shown} has no address of the family of the local address {local}"))?,
            None => *opts.addrs.first().ok_or("no address to connect to")?,
        };
        t0 = Instant::now();
        connector.with_path(initial_path(opts)).connect(addr, opts.server_name.clone()).await
    } else {
        let options = tcpls::HappyEyeballs { stagger: Duration::from_millis(50), keep_others: false };
        connector.connect_any(&opts.addrs, opts.server_name.clone(), options).await
    }
    .map_err(failed)?;
    Ok((session, early_stream, t0.elapsed().as_secs_f64() * 1e3))
}

/// The local side of the first connection: `-B ADDR|dev:NAME` and `--cport`.
fn initial_path(opts: &PerfOptions) -> tcpls::PathOptions {
    let mut path = tcpls::PathOptions::new();
    if let Some(local) = opts.bind {
        path = path.local_addr(local);
    }
    if let Some(dev) = &opts.bind_device {
        path = path.device(dev.clone());
    }
    path
}

/// At `--migrate-at`, moves every stream from the first connection to the second.
fn spawn_migration(
    opts: &PerfOptions,
    session: &Session,
    conns: &[u32],
    start: Instant,
    counters: Arc<Counters>,
) -> Arc<Mutex<Option<MigrationReport>>> {
    let report = Arc::new(Mutex::new(None));
    let Some(at) = opts.migrate_at else {
        return report;
    };
    let (s, from, to, slot) = (session.clone(), conns[0], conns[1], report.clone());
    let live = opts.output.clone().filter(|o| !o.json);
    tokio::spawn(async move {
        tokio::time::sleep_until((start + at).into()).await;
        let error = s.migrate(from, to).err().map(|e| e.to_string());
        if error.is_none() {
            counters.migrate(from, to);
        }
        let done = MigrationReport { at_seconds: start.elapsed().as_secs_f64(), from, to, error };
        if let Some(output) = live {
            output.out.line(&match &done.error {
                None => format!(
                    "- - migration at {:.2} s: streams moved from connection {from} to connection {to}; \
                     connection {from} closes",
                    done.at_seconds
                ),
                Some(e) => format!("- - migration at {:.2} s failed: {e}", done.at_seconds),
            });
        }
        *slot.lock_unpoisoned() = Some(done);
    });
    report
}

/// Says so on stderr when --migrate-at never happened (the run ended before it).
fn warn_about_migration(opts: &PerfOptions, migrated: bool, end: Duration) {
    if let (Some(at), false) = (opts.migrate_at, migrated) {
        crate::logging::warn(
            "perf",
            &format!(
                "--migrate-at {:.2} s: the transfer ended after {:.2} s, before it: nothing was migrated",
                at.as_secs_f64(),
                end.as_secs_f64()
            ),
        );
    }
}

/// Closes gracefully; after Ctrl-C, gives up after a second (the peer may be gone).
async fn close(session: &Session, interrupted: bool) -> Result<(), String> {
    let error = if interrupted {
        match tokio::time::timeout(Duration::from_secs(1), session.close()).await {
            Ok(e) => e,
            Err(_) => {
                session.abort();
                None
            }
        }
    } else {
        session.close().await
    };
    match error {
        Some(e) => Err(format!("session ended with an error: {e}")),
        None => Ok(()),
    }
}

/// The sender and receiver lines per direction over the measured time (after --omit).
fn summarize(
    opts: &PerfOptions,
    outcomes: &[StreamOutcome],
    sampled: &Sampled,
    end: Duration,
) -> (f64, Vec<DirectionSummary>) {
    let zero = Snapshot::zero();
    // Without the omit mark (the transfer ended during the warm-up) the whole run counts.
    let (omit_seconds, from) = match &sampled.at_omit {
        Some(s) if !opts.omit.is_zero() => (s.at, s.clone()),
        _ => (0.0, zero),
    };
    let seconds = (end.as_secs_f64() - omit_seconds).max(1e-9);
    let rate = |b: u64| b as f64 * 8.0 / seconds;
    let retransmits = match (sampled.at_end.retransmits(), from.retransmits()) {
        (Some(now), Some(then)) if !opts.omit.is_zero() => Some(now.saturating_sub(then)),
        (now, _) => now,
    };
    let summaries = opts
        .mode
        .directions()
        .iter()
        .map(|&direction| {
            let mine: Vec<&StreamOutcome> = outcomes.iter().filter(|o| o.direction == direction).collect();
            let received: u64 = mine.iter().map(|o| o.received).sum();
            let verified = mine.iter().all(|o| o.verified);
            match direction {
                Direction::Upload => {
                    let sent: u64 = mine.iter().filter_map(|o| o.sent).sum();
                    let (sent, received) = (sent.saturating_sub(from.upload), received.saturating_sub(from.upload));
                    DirectionSummary {
                        direction: "upload",
                        sender: EndSummary {
                            bytes: Some(sent),
                            seconds,
                            bits_per_second: Some(rate(sent)),
                            retransmits,
                        },
                        receiver: EndSummary {
                            bytes: Some(received),
                            seconds,
                            bits_per_second: Some(rate(received)),
                            retransmits: None,
                        },
                        verified,
                    }
                }
                Direction::Download => {
                    // What the server sent: the final sizes its streams stated (a stream that
                    // ended without one, e.g. on Ctrl-C, leaves the sender line without bytes).
                    let sent: Option<u64> = mine.iter().map(|o| o.sent).sum();
                    let sent = sent.map(|s| s.saturating_sub(from.download));
                    let received = received.saturating_sub(from.download);
                    DirectionSummary {
                        direction: "download",
                        // Its TCP's retransmissions come with a TCP Info frame.
                        sender: EndSummary {
                            bytes: sent,
                            seconds,
                            bits_per_second: sent.map(rate),
                            retransmits: if opts.mode == Mode::Download { retransmits } else { None },
                        },
                        receiver: EndSummary {
                            bytes: Some(received),
                            seconds,
                            bits_per_second: Some(rate(received)),
                            retransmits: None,
                        },
                        verified,
                    }
                }
            }
        })
        .collect();
    (omit_seconds, summaries)
}

/// Starts the path manager over the --path list and waits (a few seconds at most) for its
/// paths; returns the connections it made. Paths still down keep being retried in the
/// background.
async fn start_path_manager(
    session: &tcpls::Session,
    opts: &PerfOptions,
    policy: tcpls::PathPolicy,
) -> Result<Vec<u32>, String> {
    let initial = initial_path(opts);
    let mut endpoints = vec![tcpls::Endpoint::new(initial.clone())];
    for (_, local) in &opts.paths {
        if !endpoints.iter().any(|e| e.path == *local) {
            endpoints.push(tcpls::Endpoint::new(local.clone()));
        }
    }
    let config = tcpls::PathManagerConfig {
        policy,
        endpoints,
        paths: opts.paths.iter().map(|(r, l)| (*r, tcpls::Endpoint::new(l.clone()))).collect(),
        initial,
        ..Default::default()
    };
    let origin = opts.addrs.first().copied().ok_or("no server address")?;
    let manager = tcpls::PathManager::start(session, origin, config);
    #[cfg(target_os = "linux")]
    if let Err(e) = manager.follow_interfaces() {
        crate::logging::warn("perf", &format!("no interface events (paths are still retried): {e}"));
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let paths = manager.paths();
        if !paths.is_empty() && paths.iter().all(|p| p.conn.is_some()) || tokio::time::Instant::now() >= deadline {
            for p in paths.iter().filter(|p| p.conn.is_none()) {
                let why = p.last_error.as_deref().unwrap_or("not connected yet");
                crate::logging::warn(
                    "perf",
                    &format!("path {}{} is down ({why}); retrying", p.endpoint.path, p.remote),
                );
            }
            return Ok(paths.iter().filter_map(|p| p.conn).filter(|c| *c != 0).collect());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
