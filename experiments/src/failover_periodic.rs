//! `experiments failover-periodic` (TCPLS paper, Fig. 9): four paths (25 Mbit/s, 10 ms one way),
//! only one of which works at a time: every period (5 s) the working path moves to the next one
//! and the other three are blackholed. A 60 MB download has to find the working path each time.
//!
//! TCPLS: the client application runs a small path manager: it keeps trying to join a connection
//! on every path that has none usable (attempts time out after 1 s over a blackholed path), and
//! sets a 250 ms TCP user timeout on each connection, so the sender fails a blackholed connection
//! over to the working one. MPTCP: the kernel's in-kernel path manager with a `subflow` endpoint
//! per extra path (its default behaviour, no tuning).

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use serde_json::json;
use tcpls::{server_name_for, ConnId, Session, SessionConfig, TcplsConnector};
use tcpls_netem::{Side, Topology};

use crate::output::{round, write_all};
use crate::pki::Pki;
use crate::plot::{Marker, Panel, Series, XAxis};
use crate::tcpls_run::{self, TcplsServer};
use crate::trace::{goodput_series, last_read, recovery_between, secs_between, Meter};
use crate::{mptcp_run, note, path, topology, wait_started, Opts, Summary, BIN};

pub const NAME: &str = "failover-periodic";
const PATHS: usize = 4;
const RATE_MBPS: f64 = 25.0;
const DELAY_MS: f64 = 10.0;
const USER_TIMEOUT: Duration = Duration::from_millis(250);
/// A probe of a blackholed path is abandoned after this and retried.
const PROBE_ATTEMPT: Duration = Duration::from_millis(500);
const PROBE_PORT: u16 = 4444;
const SEED: u64 = 9;
const PORT: u16 = 4443;

struct Params {
    bytes: u64,
    period: f64,
    /// Give up (and report an incomplete transfer) after this long.
    limit: Duration,
}

impl Params {
    fn new(quick: bool) -> Params {
        if quick {
            Params { bytes: 20_000_000, period: 2.0, limit: Duration::from_secs(20) }
        } else {
            Params { bytes: 60_000_000, period: 5.0, limit: Duration::from_secs(90) }
        }
    }
}

fn topo4() -> Result<Topology, String> {
    topology((0..PATHS).map(|_| path(DELAY_MS, RATE_MBPS)).collect())
}

fn server_addr(topo: &Topology, i: usize) -> Result<IpAddr, String> {
    topo.path(i).info().server_addr().ok_or_else(|| format!("path {i} has no server address"))
}

/// Only path `working` passes traffic.
fn rotate_to(topo: &Topology, working: usize) {
    // Open the new path first so that there is never a moment with none.
    topo.path(working).set_blackhole(false);
    for i in (0..PATHS).filter(|i| *i != working) {
        topo.path(i).set_blackhole(true);
    }
}

/// Rotates the working path every period until `done` says the transfer ended; returns the
/// rotation instants.
fn rotate_until(topo: &Topology, t0: Instant, period: f64, limit: Duration, done: impl Fn() -> bool) -> Vec<Instant> {
    let mut rotations = Vec::new();
    let mut k = 1;
    while !done() && t0.elapsed() < limit {
        let at = t0 + Duration::from_secs_f64(k as f64 * period);
        while Instant::now() < at && !done() {
            std::thread::sleep(Duration::from_millis(10));
        }
        if done() {
            break;
        }
        rotate_to(topo, k % PATHS);
        rotations.push(Instant::now());
        k += 1;
    }
    rotations
}

struct Run {
    reads: Vec<(f64, u64)>,
    rotations: Vec<f64>,
    bytes: u64,
    verified: bool,
    detail: serde_json::Value,
}

impl Run {
    fn recoveries_ms(&self) -> Vec<Option<f64>> {
        // Each rotation's recovery is looked for before the next one.
        let ends = self.rotations.iter().skip(1).copied().chain(std::iter::once(f64::INFINITY));
        self.rotations
            .iter()
            .zip(ends)
            .map(|(t, end)| recovery_between(&self.reads, *t, end).map(|s| round(s * 1e3, 0)))
            .collect()
    }
}

/// A TCP port on every server address that accepts and closes connections: the path manager's
/// probe. (Probing with `Session::join` itself would spend one of the session's join tokens per
/// attempt lost in a blackhole, and a client without tokens cannot rejoin.)
struct Prober {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Prober {
    fn start(topo: &Topology, addrs: &[SocketAddr]) -> Result<Prober, String> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for a in addrs {
            let addr = SocketAddr::new(a.ip(), PROBE_PORT);
            let l = topo
                .run_in(Side::Server, move || std::net::TcpListener::bind(addr))
                .map_err(|e| e.to_string())?
                .map_err(|e| format!("probe listener {addr}: {e}"))?;
            l.set_nonblocking(true).map_err(|e| e.to_string())?;
            let stop = stop.clone();
            threads.push(std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if l.accept().is_err() {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
            }));
        }
        Ok(Prober { stop, threads })
    }
}

impl Drop for Prober {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// The client's path manager: one task per path that, whenever the path has no usable
/// connection, probes it (a TCP connect to [`PROBE_PORT`], abandoned after [`PROBE_ATTEMPT`])
/// and joins a connection over it once the probe succeeds.
async fn manage_paths(session: Session, addrs: Vec<SocketAddr>, joins: Arc<AtomicU64>) {
    let mut tasks = tokio::task::JoinSet::new();
    for (i, addr) in addrs.into_iter().enumerate() {
        let (session, joins) = (session.clone(), joins.clone());
        tasks.spawn(async move {
            // The session's first connection (ID 0) is on path 0.
            let mut conn: Option<ConnId> = (i == 0).then_some(0);
            let probe = SocketAddr::new(addr.ip(), PROBE_PORT);
            loop {
                if conn.is_some_and(|c| session.usable_connections().contains(&c)) {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
                match tokio::time::timeout(PROBE_ATTEMPT, tokio::net::TcpStream::connect(probe)).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(_)) => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                    Err(_) => continue,
                }
                match tokio::time::timeout(Duration::from_secs(3), session.join(addr)).await {
                    Ok(Ok(id)) => {
                        let _ = session.set_user_timeout(id, USER_TIMEOUT);
                        debug(&format!("joined path {i}: connection {id}"));
                        conn = Some(id);
                        joins.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(Err(e)) => {
                        debug(&format!("join path {i}: {e}"));
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    Err(_) => debug(&format!("join path {i}: timed out")),
                }
            }
        });
    }
    while tasks.join_next().await.is_some() {}
}

fn run_tcpls(p: &Params, pki: &Pki) -> Result<Run, String> {
    let topo = topo4()?;
    let addrs: Vec<SocketAddr> =
        (0..PATHS).map(|i| server_addr(&topo, i).map(|a| SocketAddr::new(a, PORT))).collect::<Result<_, _>>()?;
    let server = TcplsServer::start(&topo, addrs.clone(), pki.server.clone(), SessionConfig::default())?;
    let prober = Prober::start(&topo, &addrs)?;
    rotate_to(&topo, 0);
    let (started_tx, started_rx) = mpsc::channel();
    let meter = Meter::new();
    let joins = Arc::new(AtomicU64::new(0));
    let (m, tls, bytes, j) = (meter.clone(), pki.client.clone(), p.bytes, joins.clone());
    let client = tcpls_run::spawn_client(&topo, p.limit, move || async move {
        let name = server_name_for("localhost").map_err(|e| e.to_string())?;
        let session =
            TcplsConnector::new(tls).connect(addrs[0], name).await.map_err(|e| format!("connect {}: {e}", addrs[0]))?;
        session.set_user_timeout(0, USER_TIMEOUT).map_err(|e| format!("user timeout: {e}"))?;
        let (_send, mut recv) = tcpls_run::request(&session, bytes, SEED, None).await?;
        let _ = started_tx.send(Instant::now());
        let manager = tokio::spawn(manage_paths(session.clone(), addrs, j));
        let result = tcpls_run::receive(&mut recv, SEED, bytes, &m).await;
        if result.is_err() {
            debug(&format!("session ended: {:?}", session.closed().await));
        }
        manager.abort();
        tcpls_run::close(&session).await;
        result
    })?;
    let t0 = wait_started(&started_rx)?;
    let rotations = rotate_until(&topo, t0, p.period, p.limit, || client.is_finished());
    let (got, verified) = tcpls_run::join(client)?;
    drop(prober);
    drop(topo);
    let failovers = server.failovers();
    drop(server);
    Ok(Run {
        reads: meter.reads_since(t0),
        rotations: rotations.iter().map(|t| secs_between(t0, *t)).collect(),
        bytes: got,
        verified,
        detail: json!({ "sender_failovers": failovers, "joins": joins.load(Ordering::Relaxed) }),
    })
}

fn run_mptcp(p: &Params) -> Result<Run, String> {
    let topo = topo4()?;
    topo.mptcp_setup(false).map_err(|e| format!("MPTCP setup: {e}"))?;
    let addr = SocketAddr::new(server_addr(&topo, 0)?, PORT);
    rotate_to(&topo, 0);
    let server = mptcp_run::start_server(&topo, addr)?;
    let (started_tx, started_rx) = mpsc::channel();
    let meter = Meter::new();
    let client = mptcp_run::start_client(&topo, addr, p.bytes, SEED, meter.clone(), started_tx, p.limit)?;
    let t0 = wait_started(&started_rx)?;
    let rotations = rotate_until(&topo, t0, p.period, p.limit, || client.is_finished());
    let reads = meter.reads_since(t0);
    let rotations: Vec<f64> = rotations.iter().map(|t| secs_between(t0, *t)).collect();
    if !client.is_finished() {
        // Stalled past the limit: report what arrived. Dropping the topology removes the
        // namespaces, which ends the client's and server's sockets and threads.
        let got = meter.total();
        drop(topo);
        let _ = client.join(); // its read deadline has passed; the server thread is left to time out
        drop(server);
        return Ok(Run { reads, rotations, bytes: got, verified: false, detail: json!({ "stalled": true }) });
    }
    let d = client.join().map_err(|_| "MPTCP client panicked".to_string())??;
    let _ = server.join();
    Ok(Run {
        reads,
        rotations,
        bytes: d.bytes,
        verified: d.verified,
        detail: json!({ "max_additional_subflows": d.max_subflows, "stalled": false }),
    })
}

fn report(r: &Run) -> serde_json::Value {
    json!({
        "verified": r.verified,
        "bytes": r.bytes,
        "completed_s": round(last_read(&r.reads), 3),
        "rotations_at_s": r.rotations.iter().map(|t| round(*t, 3)).collect::<Vec<_>>(),
        "recovery_ms_after_each_rotation": r.recoveries_ms(),
        "detail": r.detail,
    })
}

/// Runs the experiment and writes `failover-periodic.{csv,png,json}`.
pub fn run(opts: &Opts) -> Result<Summary, String> {
    if !mptcp_run::supported() {
        return Err("this kernel has no MPTCP (net.mptcp.enabled): the comparison cannot run".into());
    }
    let p = Params::new(opts.quick);
    let pki = Pki::new()?;
    note(&format!("{NAME}: TCPLS"));
    let t = run_tcpls(&p, &pki)?;
    note(&format!("{NAME}: MPTCP"));
    let m = run_mptcp(&p)?;
    let summary = json!({
        "experiment": NAME,
        "quick": opts.quick,
        "paths": PATHS,
        "link_mbps": RATE_MBPS,
        "one_way_delay_ms": DELAY_MS,
        "queue_packets": crate::QUEUE_PACKETS,
        "tcp_congestion_control": crate::host_congestion_control(),
        "rotation_period_s": p.period,
        "bytes": p.bytes,
        "tcpls_user_timeout_ms": USER_TIMEOUT.as_millis() as u64,
        "tcpls_completed_s": t.verified.then(|| round(last_read(&t.reads), 3)),
        "mptcp_completed_s": m.verified.then(|| round(last_read(&m.reads), 3)),
        "tcpls": report(&t),
        "mptcp": report(&m),
        "tcpls_verified": t.verified,
        "mptcp_verified": m.verified,
    });
    let until = last_read(&t.reads).max(last_read(&m.reads)) + BIN;
    let marks = |r: &Run| {
        r.rotations
            .iter()
            .enumerate()
            .map(|(i, t)| Marker { label: format!("path {}", (i + 1) % PATHS), t: *t })
            .collect()
    };
    let panels = [
        Panel {
            title: format!("TCPLS (user timeout 250 ms, app path manager) — done in {:.1} s", last_read(&t.reads)),
            y_label: "goodput (Mbit/s)".into(),
            series: vec![Series { label: "TCPLS".into(), points: goodput_series(&t.reads, BIN, until) }],
            markers: marks(&t),
            legend_top: false,
            x_axis: XAxis::Time,
            dashed: Vec::new(),
        },
        Panel {
            title: if m.verified {
                format!("MPTCP (in-kernel path manager) — done in {:.1} s", last_read(&m.reads))
            } else {
                format!("MPTCP (in-kernel path manager) — stalled, {} of {} bytes", m.bytes, p.bytes)
            },
            y_label: "goodput (Mbit/s)".into(),
            series: vec![Series { label: "MPTCP".into(), points: goodput_series(&m.reads, BIN, until) }],
            markers: marks(&m),
            legend_top: false,
            x_axis: XAxis::Time,
            dashed: Vec::new(),
        },
    ];
    let title = format!("Periodic outages: 4 x 25 Mbit/s, one working path rotating every {} s", p.period);
    write_all(opts, NAME, &title, &panels, &summary)?;
    if !t.verified {
        return Err(format!("{NAME}: the TCPLS transfer was incomplete or corrupted: {summary}"));
    }
    Ok(summary)
}

/// Path manager events on stderr with `EXPERIMENTS_DEBUG=1`.
fn debug(msg: &str) {
    if std::env::var_os("EXPERIMENTS_DEBUG").is_some() {
        eprintln!("experiments: {NAME}: {msg}");
    }
}
