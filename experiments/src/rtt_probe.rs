//! `experiments rtt-probe` (thesis §4.1, Fig. 4.3, RTT estimation with Ping RTT): two paths in
//! the namespace test bed, one with added delay, one with random loss; one TCPLS session with a
//! connection on each. Every `INTERVAL` the client sends an RTT Probe on both connections at
//! once (`Session::probe_rtt`, echoed by the peer: PROTOCOL.md §7), 10 per path, and reads the
//! kernel's smoothed RTT of the same socket (TCP_INFO `tcpi_rtt`) right after the echo. Both sit
//! next to the RTT the emulator is configured for (twice the one-way delay).
//!
//! The paths are idle apart from the probes, so there is no queueing: a probe should take the
//! configured RTT plus the two TCPLS stacks' processing. On the lossy path, a probe (or its echo)
//! that is lost waits for TCP's retransmission: one RTO (≥ 200 ms on Linux) more; the kernel's
//! smoothed estimate usually absorbs that, though not always.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::json;
use tcpls::{server_name_for, ConnId, Session, SessionConfig, TcplsConnector};
use tcpls_netem::{Dir, Topology};

use crate::output::{round, write_all};
use crate::pki::Pki;
use crate::plot::{Panel, Series, XAxis};
use crate::tcpls_run::{self, TcplsServer};
use crate::{note, path, topology, Opts, Summary};

pub const NAME: &str = "rtt-probe";
const PORT: u16 = 4443;
const PROBES: usize = 10;
const RATE_MBPS: f64 = 25.0;

struct Params {
    /// One-way delay of path 0 (the delayed one).
    delayed_ms: f64,
    /// One-way delay and loss rate (per packet and direction) of path 1 (the lossy one).
    lossy_ms: f64,
    loss: f64,
    interval: Duration,
}

impl Params {
    fn new(quick: bool) -> Params {
        if quick {
            Params { delayed_ms: 50.0, lossy_ms: 10.0, loss: 0.05, interval: Duration::from_millis(250) }
        } else {
            // The thesis: an RTT "over 0.4 s, two times the delay" on the delayed path, a much
            // lower one on the lossy path (its delay and loss rate are not given).
            Params { delayed_ms: 200.0, lossy_ms: 10.0, loss: 0.05, interval: Duration::from_millis(600) }
        }
    }
}

/// One probe: ours, the kernel's.
#[derive(Debug, Clone, Copy)]
struct Probe {
    probe_ms: f64,
    kernel_ms: Option<f64>,
}

/// What the client measured on both connections.
struct Measured {
    probes: [Vec<Probe>; 2],
    retransmits: [Option<u32>; 2],
}

async fn probe_path(session: &Session, conn: ConnId) -> Result<Probe, String> {
    let rtt = session.probe_rtt(conn).await.map_err(|e| format!("RTT probe on connection {conn}: {e}"))?;
    let kernel = session.local_tcp_info(conn).map(|i| f64::from(i.rtt_us) / 1000.0);
    Ok(Probe { probe_ms: rtt.as_secs_f64() * 1000.0, kernel_ms: kernel })
}

async fn measure(
    tls: std::sync::Arc<rustls::ClientConfig>,
    delayed: SocketAddr,
    lossy: SocketAddr,
    interval: Duration,
) -> Result<Measured, String> {
    let name = server_name_for("localhost").map_err(|e| e.to_string())?;
    let session =
        TcplsConnector::new(tls).connect(delayed, name).await.map_err(|e| format!("connect {delayed}: {e}"))?;
    let first = session.usable_connections().first().copied().ok_or("no usable connection after connect")?;
    let second = session.join(lossy).await.map_err(|e| format!("join {lossy}: {e}"))?;
    let t0 = Instant::now();
    let mut probes: [Vec<Probe>; 2] = [Vec::new(), Vec::new()];
    for k in 0..PROBES {
        tokio::time::sleep_until((t0 + interval * k as u32).into()).await;
        let (a, b) = tokio::join!(probe_path(&session, first), probe_path(&session, second));
        probes[0].push(a?);
        probes[1].push(b?);
    }
    let retrans = |c: ConnId| session.local_tcp_info(c).map(|i| i.total_retrans);
    let retransmits = [retrans(first), retrans(second)];
    tcpls_run::close(&session).await;
    Ok(Measured { probes, retransmits })
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The emulator's mean timing error on path `i`, both directions added (ms): its delay thread
/// wakes up late on a loaded machine, which lengthens the real RTT beyond the configured one.
fn emulator_late_ms(topo: &Topology, i: usize) -> f64 {
    [Dir::ClientToServer, Dir::ServerToClient]
        .iter()
        .map(|d| {
            let s = topo.path(i).stats(*d);
            s.late_ns as f64 / s.tx_packets.max(1) as f64 / 1e6
        })
        .sum()
}

fn path_json(
    name: &str,
    configured_ms: f64,
    late_ms: f64,
    loss: f64,
    probes: &[Probe],
    retransmits: Option<u32>,
) -> serde_json::Value {
    let ours: Vec<f64> = probes.iter().map(|p| p.probe_ms).collect();
    let kernel: Vec<f64> = probes.iter().filter_map(|p| p.kernel_ms).collect();
    let med = median(ours.clone());
    let min = ours.iter().copied().fold(f64::INFINITY, f64::min);
    json!({
        "path": name,
        "configured_rtt_ms": configured_ms,
        "emulator_late_ms": round(late_ms, 3),
        "loss_per_direction": loss,
        "probe_ms": ours.iter().map(|x| round(*x, 2)).collect::<Vec<_>>(),
        "kernel_srtt_ms": probes.iter().map(|p| p.kernel_ms.map(|x| round(x, 2))).collect::<Vec<_>>(),
        "probe_median_ms": round(med, 2),
        "probe_min_ms": round(min, 2),
        "probe_max_ms": round(ours.iter().copied().fold(0.0, f64::max), 2),
        "kernel_median_ms": round(median(kernel), 2),
        "probe_median_over_configured": round(med / configured_ms, 3),
        "probe_median_over_configured_plus_late": round(med / (configured_ms + late_ms), 3),
        "probe_min_over_configured_plus_late": round(min / (configured_ms + late_ms), 3),
        // Probes that took 100 ms more than the configured RTT: with an idle path and Linux's
        // 200 ms minimum RTO, most likely a loss and a retransmission (or, rarely, a thread kept
        // off the CPU that long on a loaded machine; `tcp_retransmits` tells).
        "probes_delayed_by_retransmission": ours.iter().filter(|x| **x > configured_ms + 100.0).count(),
        "tcp_retransmits": retransmits,
    })
}

/// Runs the experiment and writes `rtt-probe.{csv,png,json}`.
pub fn run(opts: &Opts) -> Result<Summary, String> {
    let p = Params::new(opts.quick);
    let pki = Pki::new()?;
    let mut lossy_path = path(p.lossy_ms, RATE_MBPS);
    lossy_path.loss = p.loss;
    let topo = topology(vec![path(p.delayed_ms, RATE_MBPS), lossy_path])?;
    let addr = |i: usize| {
        topo.path(i)
            .info()
            .server_addr()
            .map(|a| SocketAddr::new(a, PORT))
            .ok_or_else(|| format!("path {i} has no server address"))
    };
    let (delayed, lossy) = (addr(0)?, addr(1)?);
    let server = TcplsServer::start(&topo, vec![delayed, lossy], pki.server.clone(), SessionConfig::default())?;
    note(&format!("{NAME}: {PROBES} probes per path"));
    let (tls, interval) = (pki.client.clone(), p.interval);
    let client =
        tcpls_run::spawn_client(&topo, Duration::from_secs(120), move || measure(tls, delayed, lossy, interval))?;
    let m = tcpls_run::join(client)?;
    let late = [emulator_late_ms(&topo, 0), emulator_late_ms(&topo, 1)];
    drop(server);
    drop(topo);

    let configured = [2.0 * p.delayed_ms, 2.0 * p.lossy_ms];
    let names = [format!("delayed ({} ms one way)", p.delayed_ms), format!("lossy ({} % loss)", p.loss * 100.0)];
    let summary = json!({
        "experiment": NAME,
        "quick": opts.quick,
        "probes_per_path": PROBES,
        "interval_ms": p.interval.as_millis() as u64,
        "link_mbps": RATE_MBPS,
        "queue_packets": crate::QUEUE_PACKETS,
        "delayed": path_json(&names[0], configured[0], late[0], 0.0, &m.probes[0], m.retransmits[0]),
        "lossy": path_json(&names[1], configured[1], late[1], p.loss, &m.probes[1], m.retransmits[1]),
    });
    let panels: Vec<Panel> = (0..2)
        .map(|i| {
            let probes = &m.probes[i];
            let at = |k: usize| (k + 1) as f64;
            Panel {
                title: format!("Path {i}: {} — configured RTT {} ms", names[i], configured[i]),
                y_label: "RTT (ms)".into(),
                series: vec![
                    Series {
                        label: "TCPLS RTT probe".into(),
                        points: probes.iter().enumerate().map(|(k, x)| (at(k), x.probe_ms)).collect(),
                    },
                    Series {
                        label: "kernel TCP_INFO srtt".into(),
                        points: probes.iter().enumerate().filter_map(|(k, x)| Some((at(k), x.kernel_ms?))).collect(),
                    },
                    Series {
                        label: "emulator: 2 x one-way delay".into(),
                        points: (0..probes.len()).map(|k| (at(k), configured[i])).collect(),
                    },
                ],
                markers: Vec::new(),
                legend_top: true,
                x_axis: XAxis::Linear("probe".into()),
                dashed: Vec::new(),
            }
        })
        .collect();
    write_all(opts, NAME, "RTT probes on a delayed and a lossy path", &panels, &summary)?;
    Ok(summary)
}
