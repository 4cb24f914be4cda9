//! `tcpls perf`: iperf-style bulk transfer with byte-for-byte verification.
//!
//! The client opens `--streams` streams (twice as many with `--bidir`), each asking the server
//! for one direction (protocol.rs), steers them over the session's connections, and runs
//! until the byte count is done, the time is up, or Ctrl-C/SIGTERM. An interval sampler prints
//! what happened every `-i` seconds; the report gives iperf3's sender and receiver lines, and
//! what each end saw of the paths (the server's asked on a stats stream at the end).
//!
//! A timed run always ends: at `--time` the senders reset their streams, and
//! [`DEADLINE_GRACE`] later whatever is still missing (a report that never came, a download
//! whose end never arrived, e.g. over a path gone silent) is given up and reported as not
//! delivered. A `--bytes` run has no deadline: it ends when its bytes are delivered, when the
//! session fails (its own failure detection: a silent path is given up after
//! `SessionConfig::silence_timeout`), or after [`NO_PROGRESS_LIMIT`] without any byte moving.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use tcpls::{RecvStream, SendStream, Session, SessionConfig, TcplsConnector};
use tcpls_proto::sync::LockExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

use super::interval::{Counters, Sampled, Sampler, SenderView, Snapshot, SPREAD};
use super::protocol::{encode_stats_request, Direction, PathStats, Request, MAX_STATS_LEN};
use super::report::{ConnectionReport, DirectionSummary, EndSummary, MigrationReport, Output, PerfReport, HEADER};
use super::stream::{StreamOutcome, StreamTask};
use crate::interrupt::Stop;
use crate::transfer::until;

/// How long after `--time` (and `--omit`) a timed run waits for its streams' last words: the
/// end-of-run resets, the server's upload reports, a download's end. Then it gives up on what
/// is missing; asking for the server's stats and closing take at most [`LAST_WORDS`] more.
pub const DEADLINE_GRACE: Duration = Duration::from_millis(1200);
/// The longest the stats request and the close may take after the hard deadline.
const LAST_WORDS: Duration = Duration::from_millis(400);
/// Without a deadline: the stats request's and the close's own limits.
const STATS_WAIT: Duration = Duration::from_secs(2);
const CLOSE_WAIT: Duration = Duration::from_secs(5);
/// A `--bytes` run ends with an error after this long with no byte written or read on any
/// connection and no payload moved (the path manager's outage tolerance: it would have
/// given up by then).
pub const NO_PROGRESS_LIMIT: Duration = Duration::from_secs(60);

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
    /// The scheduler of this end's aggregated streams (`--scheduler`, [`crate::args::SCHEDULERS`]);
    /// None: the session's default.
    pub scheduler: Option<String>,
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

/// Runs the measurement; `interrupted` turns to the signal on Ctrl-C or SIGTERM, which ends the
/// transfer early. A failure after the transfer started still gives a report (its `error` set).
pub async fn run(opts: PerfOptions, interrupted: watch::Receiver<Option<Stop>>) -> Result<PerfReport, String> {
    let millis = opts.time.map(|t| (t + opts.omit).as_millis().max(1) as u64).unwrap_or(0);
    let first_direction = opts.mode.directions()[0];
    let first_request = Request { direction: first_direction, seed: 0, bytes: stream_bytes(&opts, 0), millis };
    let Setup { session, early_stream, handshake_ms, conns, ext_follower } = set_up(&opts, &first_request).await?;
    let info = session.handshake_info();
    let cipher = info.as_ref().map(|i| i.cipher_suite.clone()).unwrap_or_default();
    print_banner(&opts, &session, &cipher, handshake_ms);

    let start = Instant::now();
    let start_unix_seconds =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
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
    let plan = StreamPlan { millis, deadline, interrupted: &interrupted, counters: &counters };
    let (tasks, streams) = open_streams(&opts, &session, &conns, early_stream, plan)?;
    let hard_deadline = deadline.map(|d| d + DEADLINE_GRACE);
    let Collected { outcomes, mut failure, ended_at_deadline } =
        collect(tasks, &session, &counters, &opts, hard_deadline, &interrupted).await;
    let _ = done_tx.send(());
    let sampled = sampler.await.map_err(|e| format!("interval sampler failed: {e}"))?;
    let end = start.elapsed();
    let undelivered = undelivered(&streams, &outcomes, &counters, end);
    let migration = migration.lock_unpoisoned().take();
    warn_about_migration(&opts, migration.is_some(), end);
    let connections = connection_reports(&session);
    if let Some(f) = ext_follower {
        f.abort();
    }
    // Before the stats stream, whose answer is not payload.
    let payload_stats = session.stats();
    let ended = end_session(&session, &counters, hard_deadline, &interrupted, &mut failure).await;

    // Streams given up at the deadline count what their counters say.
    let outcomes = with_given_up(outcomes, &streams, &counters);
    let (omit_seconds, summary) = summarize(&opts, &outcomes, &sampled, end);
    let received_after_omit: u64 = summary.iter().filter_map(|d| d.receiver.bytes).sum();
    let seconds = summary.first().map_or(0.0, |d| d.receiver.seconds);
    let (server_stats, server_stats_error) = match ended.server_stats {
        Ok(s) => (Some(s), None),
        Err(e) => (None, Some(e)),
    };
    Ok(PerfReport {
        direction: opts.mode.name(),
        streams: opts.streams,
        bytes: outcomes.iter().map(|o| o.received).sum(),
        seconds,
        goodput_bps: if seconds > 0.0 { received_after_omit as f64 * 8.0 / seconds } else { 0.0 },
        verified: outcomes.iter().all(|o| o.verified),
        interrupted: ended.stop.is_some(),
        signal: ended.stop.map(Stop::name),
        ended_at_deadline,
        undelivered,
        error: failure,
        client_stats: ended.client_stats,
        server_stats,
        server_stats_error,
        omit_seconds,
        start_unix_seconds,
        fallback: false,
        cipher,
        failovers: ended.failovers,
        resumed: info.as_ref().is_some_and(|i| i.resumed),
        early_data_accepted: info.as_ref().is_some_and(|i| i.early_data_accepted),
        zero_copy_bytes: payload_stats.zero_copy_bytes,
        copied_bytes: payload_stats.copied_bytes,
        handshake_ms,
        migration,
        summary,
        intervals: sampled.intervals,
        connections,
    })
}

/// The session, ready for the streams.
struct Setup {
    session: Session,
    /// With --zero-rtt: the first stream, whose request went as early data.
    early_stream: EarlyStream,
    handshake_ms: f64,
    /// Its connections: the first, then those joined.
    conns: Vec<u32>,
    /// Applies the extension frames to the path manager's later joins.
    ext_follower: Option<tokio::task::JoinHandle<()>>,
}

/// Connects, adds the --path connections (or starts the path manager) and applies the
/// extension frames. A timed run ends even when the server never answers: the handshake and
/// the joins get the run's time (then it fails, saying so).
async fn set_up(opts: &PerfOptions, first_request: &Request) -> Result<Setup, String> {
    let shown = opts.addrs.first().map(|a| a.to_string()).unwrap_or_default();
    let setup_limit = opts.time.map(|t| t + opts.omit + DEADLINE_GRACE);
    let setup_deadline = setup_limit.map(|l| Instant::now() + l);
    let too_slow = |what: &str| {
        format!(
            "{what} did not complete within {:.1} s (the run's --time and its grace): the server or the path \
             does not answer",
            setup_limit.unwrap_or_default().as_secs_f64()
        )
    };
    let (session, early_stream, handshake_ms) = within(setup_deadline, connect(opts, first_request))
        .await
        .ok_or_else(|| too_slow(&format!("the TCPLS handshake with {shown}")))??;
    if session.is_fallback() {
        session.abort();
        return Err(format!(
            "{shown} does not speak TCPLS (plain TLS only): tcpls perf needs `tcpls serve --mode perf`"
        ));
    }
    if let Some(name) = &opts.scheduler {
        session.set_scheduler(crate::args::scheduler(name)?);
    }
    let mut conns = vec![0u32];
    match opts.path_manager {
        None => {
            for (remote, local) in &opts.paths {
                let id = within(setup_deadline, session.join_with(*remote, local))
                    .await
                    .ok_or_else(|| too_slow(&format!("adding a connection {local}to {remote}")))?
                    .map_err(|e| format!("cannot add a connection {local}to {remote}: {e}"))?;
                conns.push(id);
            }
        }
        Some(policy) => conns.extend(start_path_manager(&session, opts, policy).await?),
    }
    if opts.migrate_at.is_some() && conns.len() < 2 {
        return Err("--migrate-at needs a second connection (--path)".into());
    }
    let sends = matches!(opts.mode, Mode::Upload | Mode::Bidir);
    opts.ext.apply(&session, &conns, sends, opts.mode != Mode::Upload)?;
    // The path manager's later joins get them too (a path that comes back is not unpaced).
    let ext_follower = (opts.path_manager.is_some() && !opts.ext.is_empty())
        .then(|| opts.ext.clone().follow(session.clone(), conns.clone(), sends, opts.mode != Mode::Upload));
    Ok(Setup { session, early_stream, handshake_ms, conns, ext_follower })
}

/// The human output's first lines: the session, its connections, the interval header.
fn print_banner(opts: &PerfOptions, session: &Session, cipher: &str, handshake_ms: f64) {
    let Some(output) = opts.output.as_ref().filter(|o| !o.json) else { return };
    let shown = opts.addrs.first().map(|a| a.to_string()).unwrap_or_default();
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

/// What every stream task shares.
struct StreamPlan<'a> {
    /// The run's time limit, in the requests (0: none).
    millis: u64,
    deadline: Option<Instant>,
    interrupted: &'a watch::Receiver<Option<Stop>>,
    counters: &'a Arc<Counters>,
}

type StreamTasks = tokio::task::JoinSet<Result<StreamOutcome, String>>;

/// Opens the streams (one per direction and stream number), steers them, and starts a task
/// for each. Returns the tasks and (stream number, direction) of each counter, in order.
fn open_streams(
    opts: &PerfOptions,
    session: &Session,
    conns: &[u32],
    mut early_stream: EarlyStream,
    plan: StreamPlan<'_>,
) -> Result<(StreamTasks, Vec<(u32, Direction)>), String> {
    let mut tasks = tokio::task::JoinSet::new();
    let mut streams = Vec::new();
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
            let request = Request { direction, seed: i, bytes: stream_bytes(opts, i), millis: plan.millis };
            let stream = StreamTask {
                request,
                early,
                deadline: plan.deadline,
                interrupted: plan.interrupted.clone(),
                counters: plan.counters.clone(),
                index,
            };
            streams.push((i, direction));
            index += 1;
            tasks.spawn(stream.run(send, recv));
        }
    }
    Ok((tasks, streams))
}

/// How the stream tasks ended.
struct Collected {
    outcomes: Vec<StreamOutcome>,
    failure: Option<String>,
    ended_at_deadline: bool,
}

/// Waits for the stream tasks until they are all done, the hard deadline, the grace after
/// Ctrl-C or SIGTERM, or no progress; then gives up on those still running.
async fn collect(
    mut tasks: StreamTasks,
    session: &Session,
    counters: &Counters,
    opts: &PerfOptions,
    hard_deadline: Option<Instant>,
    interrupted: &watch::Receiver<Option<Stop>>,
) -> Collected {
    let mut outcomes = Vec::new();
    let mut failure = None;
    let mut ended_at_deadline = false;
    let stalled = no_progress(session, counters, opts.time.is_none());
    // After Ctrl-C or SIGTERM the streams get the same grace as at a deadline.
    let mut stop = interrupted.clone();
    let stopped = async move {
        let _ = stop.wait_for(Option::is_some).await;
        tokio::time::sleep(DEADLINE_GRACE).await;
    };
    tokio::pin!(stalled, stopped);
    loop {
        let joined = tokio::select! {
            j = tasks.join_next() => j,
            () = until(hard_deadline) => {
                ended_at_deadline = true;
                None
            }
            () = &mut stopped => None,
            why = &mut stalled => {
                failure.get_or_insert(why);
                None
            }
        };
        let Some(joined) = joined else { break };
        match joined.map_err(|e| format!("stream task failed: {e}")).and_then(|r| r) {
            Ok(outcome) => outcomes.push(outcome),
            Err(e) => {
                failure.get_or_insert(e);
            }
        }
    }
    // Streams still running past the deadline (or after a failure) are given up: their last
    // gap counts up to now.
    tasks.abort_all();
    for (index, c) in counters.streams.iter().enumerate() {
        if !c.upload && !outcomes.iter().any(|o: &StreamOutcome| o.index == index) {
            counters.stalls.stream_ended(&c.gaps);
        }
    }
    Collected { outcomes, failure, ended_at_deadline }
}

/// What each connection carried.
fn connection_reports(session: &Session) -> Vec<ConnectionReport> {
    session
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
        .collect()
}

/// What the end of the session gave.
struct SessionEnd {
    server_stats: Result<PathStats, String>,
    client_stats: PathStats,
    failovers: u64,
    /// The signal that stopped the run, if any.
    stop: Option<Stop>,
}

/// The last words: the server's stats, then the close, within the deadline's allowance. A
/// failed close is the run's failure unless it had one.
async fn end_session(
    session: &Session,
    counters: &Counters,
    hard_deadline: Option<Instant>,
    interrupted: &watch::Receiver<Option<Stop>>,
    failure: &mut Option<String>,
) -> SessionEnd {
    let last_words = match (hard_deadline, *interrupted.borrow()) {
        (Some(d), _) => Some(d.max(Instant::now()) + LAST_WORDS),
        (None, Some(_)) => Some(Instant::now() + LAST_WORDS),
        (None, None) => None,
    };
    let server_stats = if failure.is_some() {
        Err("the run failed before it could ask".to_string())
    } else {
        let wait = last_words.map_or(STATS_WAIT, |d| d.saturating_duration_since(Instant::now()) * 2 / 3);
        ask_server_stats(session, wait).await
    };
    let stats = session.stats();
    let client_stats = super::report::path_stats(&stats, &counters.stalls);
    let stop = *interrupted.borrow();
    let close_wait = match (stop, last_words) {
        (Some(_), _) => Duration::from_secs(1),
        (None, Some(d)) => d.saturating_duration_since(Instant::now()),
        (None, None) => CLOSE_WAIT,
    };
    if failure.is_some() {
        session.abort();
    } else if let Err(e) = close(session, close_wait).await {
        failure.get_or_insert(e);
    }
    SessionEnd { server_stats, client_stats, failovers: stats.failovers, stop }
}

/// Completes (with the reason) when nothing moved for [`NO_PROGRESS_LIMIT`]: no payload
/// counted and no byte written or read on any connection. Never when `armed` is false (a timed
/// run has its deadline).
async fn no_progress(session: &Session, counters: &Counters, armed: bool) -> String {
    if !armed {
        return std::future::pending().await;
    }
    let moved = || -> u64 {
        let payload: u64 = counters.streams.iter().map(|s| s.bytes.load(std::sync::atomic::Ordering::Relaxed)).sum();
        let wire: u64 = session.connections().iter().map(|c| c.bytes_sent + c.bytes_received).sum();
        payload + wire
    };
    let mut last = (moved(), Instant::now());
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = moved();
        if now != last.0 {
            last = (now, Instant::now());
        } else if last.1.elapsed() >= NO_PROGRESS_LIMIT {
            return format!(
                "no progress for {} s: no byte sent or received on any connection (every path down or silent?)",
                NO_PROGRESS_LIMIT.as_secs()
            );
        }
    }
}

/// One line per stream that did not end by itself: what it had done when it was given up.
fn undelivered(
    streams: &[(u32, Direction)],
    outcomes: &[StreamOutcome],
    counters: &Counters,
    end: Duration,
) -> Vec<String> {
    let at = end.as_secs_f64();
    streams
        .iter()
        .enumerate()
        .filter(|(index, _)| !outcomes.iter().any(|o| o.index == *index))
        .map(|(index, &(number, direction))| {
            let bytes = counters.streams[index].bytes.load(std::sync::atomic::Ordering::Relaxed);
            match direction {
                Direction::Upload => format!(
                    "stream {number} (upload): {bytes} bytes sent, never confirmed by the server (its report did \
                     not come by {at:.2} s)"
                ),
                Direction::Download => format!(
                    "stream {number} (download): {bytes} bytes received and verified, the server's end of the \
                     stream did not come by {at:.2} s"
                ),
            }
        })
        .collect()
}

/// The outcomes, plus one for each stream given up, from its counter: a download counts what
/// it verified, an upload what it sent and nothing received (no report).
fn with_given_up(
    mut outcomes: Vec<StreamOutcome>,
    streams: &[(u32, Direction)],
    counters: &Counters,
) -> Vec<StreamOutcome> {
    use std::sync::atomic::Ordering;
    for (index, &(_, direction)) in streams.iter().enumerate() {
        if outcomes.iter().any(|o| o.index == index) {
            continue;
        }
        let c = &counters.streams[index];
        let bytes = c.bytes.load(Ordering::Relaxed);
        outcomes.push(match direction {
            Direction::Upload => StreamOutcome { index, direction, sent: Some(bytes), received: 0, verified: true },
            Direction::Download => StreamOutcome {
                index,
                direction,
                sent: None,
                received: bytes,
                verified: !c.corrupt.load(Ordering::Relaxed),
            },
        });
    }
    outcomes
}

/// Asks the server for its end's [`PathStats`] on a stream of its own, within `wait`.
async fn ask_server_stats(session: &Session, wait: Duration) -> Result<PathStats, String> {
    let exchange = async {
        let (mut send, recv) = session.open_stream().map_err(|e| format!("cannot open a stream: {e}"))?;
        send.write_all(&encode_stats_request()).await.map_err(|e| format!("cannot send the request: {e}"))?;
        let _ = send.shutdown().await;
        let mut answer = Vec::new();
        recv.take(MAX_STATS_LEN as u64).read_to_end(&mut answer).await.map_err(|e| {
            match e.get_ref().and_then(|i| i.downcast_ref::<tcpls::StreamError>()) {
                Some(tcpls::StreamError::Reset(super::protocol::NOT_A_PERF_REQUEST)) => {
                    "the server does not answer stats requests (an older tcpls serve)".to_string()
                }
                _ => format!("no answer: {e}"),
            }
        })?;
        PathStats::decode(&answer)
    };
    match tokio::time::timeout(wait, exchange).await {
        Ok(r) => r,
        Err(_) => Err(format!("no answer within {} ms", wait.as_millis())),
    }
}

/// `f`'s output, or None if `deadline` came first.
async fn within<T>(deadline: Option<Instant>, f: impl std::future::Future<Output = T>) -> Option<T> {
    match deadline {
        Some(d) => tokio::time::timeout_at(d.into(), f).await.ok(),
        None => Some(f.await),
    }
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

/// Closes gracefully within `wait` (then aborts: the peer may be gone or its paths silent).
async fn close(session: &Session, wait: Duration) -> Result<(), String> {
    let error = match tokio::time::timeout(wait, session.close()).await {
        Ok(e) => e,
        Err(_) => {
            session.abort();
            None
        }
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
