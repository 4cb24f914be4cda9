//! `experiments failover-outage` (TCPLS paper, Fig. 8): a download over the first of two paths
//! (25 Mbit/s, 10 ms one way) meets an outage on that path, either a RST (`ss -K` of the
//! sender's socket, the kernel sends the RST to the receiver) or a blackhole (every packet
//! dropped, silently). TCPLS: two connections (one per path), the stream steered to the first,
//! TCP user timeout 250 ms on both. MPTCP: the kernel's implementation with the second path as a
//! `backup` subflow. Measured: how long after the outage data flows again at the receiver.

use std::net::{IpAddr, SocketAddr};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::json;
use tcpls::{server_name_for, SessionConfig, TcplsConnector};
use tcpls_netem::{Side, Topology};

use crate::output::{round, write_all};
use crate::pki::Pki;
use crate::plot::{Marker, Panel, Series, XAxis};
use crate::sswatch::{self, SocketWatch};
use crate::tcpls_run::{self, TcplsServer};
use crate::trace::{goodput_series, last_read, recovery_after, secs_between, Meter};
use crate::{mptcp_run, note, path, sleep_until, topology, wait_started, Opts, Summary, BIN};

pub const NAME: &str = "failover-outage";
const RATE_MBPS: f64 = 25.0;
const DELAY_MS: f64 = 10.0;
const USER_TIMEOUT: Duration = Duration::from_millis(250);
/// TCPLS's own failure detection, as an alternative to the kernel's user timeout on a
/// blackhole: a Ping after this long without a record from the peer (a bulk transfer's
/// receiver acknowledges every 25 ms at most)...
const KEEPALIVE: Duration = Duration::from_millis(100);
/// ...and the connection fails over when the Ping is not answered within this: detection
/// after about 250 ms of silence, like the user timeout, but not bound to the RTO timer.
const PING_TIMEOUT: Duration = Duration::from_millis(150);
const SEED: u64 = 8;
const PORT: u16 = 4443;

/// The two kinds of outage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outage {
    Rst,
    Blackhole,
}

impl Outage {
    fn key(self) -> &'static str {
        match self {
            Outage::Rst => "rst",
            Outage::Blackhole => "blackhole",
        }
    }
}

struct Params {
    bytes: u64,
    /// Outage this long after the request.
    outage_at: f64,
}

impl Params {
    fn new(quick: bool) -> Params {
        if quick {
            // ≈ 3 s at 25 Mbit/s plus the recovery.
            Params { bytes: 9_000_000, outage_at: 1.5 }
        } else {
            // The paper's figure spans ≈ 20 s.
            Params { bytes: 40_000_000, outage_at: 5.0 }
        }
    }
}

/// One measured transfer.
struct Run {
    reads: Vec<(f64, u64)>,
    outage_t: f64,
    bytes: u64,
    verified: bool,
    /// TCPLS: failovers counted by the sender; MPTCP: additional subflows seen.
    detail: serde_json::Value,
}

impl Run {
    fn recovery_ms(&self) -> Option<f64> {
        recovery_after(&self.reads, self.outage_t).map(|s| round(s * 1e3, 1))
    }
}

fn two_paths() -> Result<Topology, String> {
    topology(vec![path(DELAY_MS, RATE_MBPS), path(DELAY_MS, RATE_MBPS)])
}

fn server_addr(topo: &Topology, i: usize) -> Result<IpAddr, String> {
    topo.path(i).info().server_addr().ok_or_else(|| format!("path {i} has no server address"))
}

fn client_addr(topo: &Topology, i: usize) -> Result<IpAddr, String> {
    topo.path(i).info().client_addr().ok_or_else(|| format!("path {i} has no client address"))
}

/// Applies the outage to path 0 and returns its instant. The RST: the sender's (server's)
/// socket on that path is destroyed with `ss -K`, which sends a RST to the receiver; running
/// `ip netns exec ... ss` takes tens of milliseconds and the kill happens at its end, so the
/// outage is dated when the command returns (at most a few ms late, which can only shorten the
/// measured recovery by that much). The blackhole is a flag of the emulator: instantaneous.
fn inject(topo: &Topology, outage: Outage) -> Result<Instant, String> {
    match outage {
        Outage::Rst => {
            let dst = client_addr(topo, 0)?.to_string();
            let killed =
                topo.kill_tcp_sockets(Side::Server, &["dst", &dst]).map_err(|e| format!("RST injection: {e}"))?;
            if killed.lines().count() < 2 {
                return Err(format!("RST injection: no socket towards {dst} to kill"));
            }
            Ok(Instant::now())
        }
        Outage::Blackhole => {
            let at = Instant::now();
            topo.path(0).set_blackhole(true);
            Ok(at)
        }
    }
}

/// `keepalive`: detect the failure with TCPLS keepalive Pings (both ends) instead of only the
/// kernel's user timeout.
fn run_tcpls(p: &Params, outage: Outage, keepalive: bool, pki: &Pki) -> Result<Run, String> {
    let topo = two_paths()?;
    let first = SocketAddr::new(server_addr(&topo, 0)?, PORT);
    let second = SocketAddr::new(server_addr(&topo, 1)?, PORT);
    // The paper's mechanisms, as the paper measured them: the kernel's user timeout, or TCPLS
    // keepalive. Loss detection from record ACKs (on by default) would see the blackhole first;
    // `experiments silent-path` measures that one against MPTCP.
    let base = SessionConfig { loss_detection: false, ..SessionConfig::default() };
    let settings =
        if keepalive { SessionConfig { keepalive: Some(KEEPALIVE), ping_timeout: PING_TIMEOUT, ..base } } else { base };
    let client_settings = settings.clone();
    let server = TcplsServer::start(&topo, vec![first, second], pki.server.clone(), settings)?;
    let (started_tx, started_rx) = mpsc::channel();
    let meter = Meter::new();
    let (m, tls, bytes) = (meter.clone(), pki.client.clone(), p.bytes);
    let client = tcpls_run::spawn_client(&topo, Duration::from_secs(120), move || async move {
        let name = server_name_for("localhost").map_err(|e| e.to_string())?;
        let session = TcplsConnector::new(tls)
            .with_settings(client_settings)
            .connect(first, name)
            .await
            .map_err(|e| format!("connect {first}: {e}"))?;
        let extra = session.join(second).await.map_err(|e| format!("join {second}: {e}"))?;
        for conn in [0, extra] {
            session.set_user_timeout(conn, USER_TIMEOUT).map_err(|e| format!("user timeout: {e}"))?;
        }
        let (_send, mut recv) = tcpls_run::request(&session, bytes, SEED, Some(0)).await?;
        let _ = started_tx.send(Instant::now());
        let result = tcpls_run::receive(&mut recv, SEED, bytes, &m).await;
        tcpls_run::close(&session).await;
        result
    })?;
    let t0 = wait_started(&started_rx)?;
    // Blackhole: the sender's socket on the failing path, seen from outside (when does the
    // kernel give up?). Not for the RST, which destroys that socket itself.
    let watch = (outage == Outage::Blackhole).then(|| {
        sleep_until(t0, p.outage_at - 0.3);
        client_addr(&topo, 0).map(|dst| SocketWatch::start(&topo, Side::Server, dst, Duration::from_millis(20)))
    });
    let watch = watch.transpose()?;
    sleep_until(t0, p.outage_at);
    let at = inject(&topo, outage)?;
    let (got, verified) = tcpls_run::join(client)?;
    let v = watch.map(|w| sswatch::summarize(&w.finish(), at));
    let ms = |t: Instant| round(crate::trace::secs_between(at, t) * 1e3, 1);
    let cc = crate::congestion_control(&topo, Side::Server);
    drop(topo); // also ends what is left of the server's session
    let failovers = server.failovers();
    drop(server);
    Ok(Run {
        reads: meter.reads_since(t0),
        outage_t: secs_between(t0, at),
        bytes: got,
        verified,
        detail: json!({
            "sender_failovers": failovers,
            "sender_rto_ms_before_outage": v.and_then(|v| v.rto_before_ms),
            "sender_socket_failed_ms_between": v.and_then(|v| v.gone_between).map(|(lo, hi)| [ms(lo), ms(hi)]),
            "sender_max_backoff": v.map(|v| v.max_backoff),
            "tcp_congestion_control": cc,
        }),
    })
}

fn run_mptcp(p: &Params, outage: Outage) -> Result<Run, String> {
    let topo = two_paths()?;
    topo.mptcp_setup(true).map_err(|e| format!("MPTCP setup: {e}"))?;
    let addr = SocketAddr::new(server_addr(&topo, 0)?, PORT);
    let server = mptcp_run::start_server(&topo, addr)?;
    let (started_tx, started_rx) = mpsc::channel();
    let meter = Meter::new();
    let client =
        mptcp_run::start_client(&topo, addr, p.bytes, SEED, meter.clone(), started_tx, Duration::from_secs(120))?;
    let t0 = wait_started(&started_rx)?;
    sleep_until(t0, p.outage_at);
    let at = inject(&topo, outage)?;
    let d = client.join().map_err(|_| "MPTCP client panicked".to_string())??;
    let _ = server.join();
    Ok(Run {
        reads: meter.reads_since(t0),
        outage_t: secs_between(t0, at),
        bytes: d.bytes,
        verified: d.verified,
        detail: json!({ "max_additional_subflows": d.max_subflows }),
    })
}

/// Runs the experiment and writes `failover-outage.{csv,png,json}`.
pub fn run(opts: &Opts) -> Result<Summary, String> {
    if !mptcp_run::supported() {
        return Err("this kernel has no MPTCP (net.mptcp.enabled): the comparison cannot run".into());
    }
    let p = Params::new(opts.quick);
    let pki = Pki::new()?;
    let mut summary = json!({
        "experiment": NAME,
        "quick": opts.quick,
        "paths": [{"rate_mbps": RATE_MBPS, "one_way_delay_ms": DELAY_MS}, {"rate_mbps": RATE_MBPS, "one_way_delay_ms": DELAY_MS}],
        "queue_packets": crate::QUEUE_PACKETS,
        "tcp_congestion_control": crate::host_congestion_control(),
        "tcpls_user_timeout_ms": USER_TIMEOUT.as_millis() as u64,
        "bytes": p.bytes,
    });
    let mut panels = Vec::new();
    let mut all_verified = true;
    for outage in [Outage::Rst, Outage::Blackhole] {
        note(&format!("{NAME}: TCPLS, {}", outage.key()));
        let t = run_tcpls(&p, outage, false, &pki)?;
        let keepalive = if outage == Outage::Blackhole {
            note(&format!("{NAME}: TCPLS with keepalive, {}", outage.key()));
            Some(run_tcpls(&p, outage, true, &pki)?)
        } else {
            None
        };
        note(&format!("{NAME}: MPTCP, {}", outage.key()));
        let m = run_mptcp(&p, outage)?;
        let k = outage.key();
        summary[format!("tcpls_recovery_ms_{k}")] = json!(t.recovery_ms());
        summary[format!("mptcp_recovery_ms_{k}")] = json!(m.recovery_ms());
        summary[format!("tcpls_{k}")] = json!({
            "verified": t.verified, "bytes": t.bytes, "outage_at_s": round(t.outage_t, 3),
            "completed_s": round(last_read(&t.reads), 3), "detail": t.detail,
        });
        summary[format!("mptcp_{k}")] = json!({
            "verified": m.verified, "bytes": m.bytes, "outage_at_s": round(m.outage_t, 3),
            "completed_s": round(last_read(&m.reads), 3), "detail": m.detail,
        });
        all_verified &= t.verified && m.verified;
        let mut series = vec![
            Series {
                label: "TCPLS (user timeout 250 ms)".into(),
                points: goodput_series(&t.reads, BIN, last_read(&t.reads) + BIN),
            },
            Series {
                label: "MPTCP (backup subflow)".into(),
                points: goodput_series(&m.reads, BIN, last_read(&m.reads) + BIN),
            },
        ];
        let mut keepalive_title = String::new();
        if let Some(ka) = &keepalive {
            summary[format!("tcpls_recovery_ms_{k}_keepalive")] = json!(ka.recovery_ms());
            summary[format!("tcpls_{k}_keepalive")] = json!({
                "verified": ka.verified, "bytes": ka.bytes, "outage_at_s": round(ka.outage_t, 3),
                "completed_s": round(last_read(&ka.reads), 3), "detail": ka.detail,
                "keepalive_ms": KEEPALIVE.as_millis() as u64, "ping_timeout_ms": PING_TIMEOUT.as_millis() as u64,
            });
            all_verified &= ka.verified;
            keepalive_title = format!(", TCPLS keepalive {} ms", fmt_ms(ka.recovery_ms()));
            series.push(Series {
                label: "TCPLS (keepalive 100 ms + Ping timeout 150 ms)".into(),
                points: goodput_series(&ka.reads, BIN, last_read(&ka.reads) + BIN),
            });
        }
        let what = match outage {
            Outage::Rst => "RST",
            Outage::Blackhole => "blackhole",
        };
        panels.push(Panel {
            title: format!(
                "{what} on the active path at t = {:.1} s — recovery: TCPLS {} ms, MPTCP {} ms{keepalive_title}",
                t.outage_t,
                fmt_ms(t.recovery_ms()),
                fmt_ms(m.recovery_ms())
            ),
            y_label: "goodput (Mbit/s)".into(),
            series,
            markers: vec![Marker { label: what.to_string(), t: t.outage_t }],
            legend_top: false,
            x_axis: XAxis::Time,
            dashed: Vec::new(),
        });
    }
    summary["verified"] = json!(all_verified);
    write_all(opts, NAME, "Failover: recovery after a single outage (2 x 25 Mbit/s, 10 ms)", &panels, &summary)?;
    if !all_verified {
        return Err(format!("{NAME}: a transfer was incomplete or corrupted: {summary}"));
    }
    Ok(summary)
}

fn fmt_ms(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".into(), |v| format!("{v:.0}"))
}
