//! `experiments aggregation` (TCPLS paper, Fig. 11 and appendix A, Fig. 13): a download over one
//! path of 25 Mbit/s; after 5 s a second one (25 Mbit/s) becomes available. TCPLS: the client
//! joins a connection over it and the server spreads the (unsteered) stream over both (its
//! default scheduler); record sizes 16 KiB and 1500 B. MPTCP: the client's second address
//! becomes an `ip mptcp endpoint ... subflow` at that moment, and the kernel's path manager opens
//! the subflow on the existing connection. Measured: goodput once both paths are in use.

use std::net::{IpAddr, SocketAddr};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::json;
use tcpls::{server_name_for, SessionConfig, TcplsConnector};
use tcpls_netem::{Side, Topology};

use crate::output::{round, write_all};
use crate::pki::Pki;
use crate::plot::{Marker, Panel, Series, XAxis};
use crate::tcpls_run::{self, TcplsServer};
use crate::trace::{goodput_series, last_read, mean_mbps, secs_between, Meter};
use crate::{mptcp_run, note, path, sleep_until, topology, wait_started, Opts, Summary, BIN};

pub const NAME: &str = "aggregation";
const RATE_MBPS: f64 = 25.0;
const DELAY_MS: f64 = 10.0;
const SEED: u64 = 11;
const PORT: u16 = 4443;
/// After the second path comes up, goodput is averaged from this much later (slow start of the
/// new connection / subflow) to the end of the transfer.
const SETTLE_S: f64 = 1.0;

struct Params {
    bytes: u64,
    second_path_at: f64,
}

impl Params {
    fn new(quick: bool) -> Params {
        if quick {
            // 2 s on one path (≈ 6 MB), then ≈ 4 s on both.
            Params { bytes: 30_000_000, second_path_at: 2.0 }
        } else {
            // The paper: a 60 MiB file, second path after 5 s.
            Params { bytes: 60 << 20, second_path_at: 5.0 }
        }
    }
}

struct Run {
    label: String,
    reads: Vec<(f64, u64)>,
    second_t: f64,
    bytes: u64,
    verified: bool,
    /// Mean goodput from `second_t + SETTLE_S` to the end.
    aggregated_mbps: f64,
    single_mbps: f64,
    detail: serde_json::Value,
}

fn finish(
    label: &str,
    reads: Vec<(f64, u64)>,
    second_t: f64,
    bytes: u64,
    verified: bool,
    detail: serde_json::Value,
) -> Run {
    let end = last_read(&reads);
    Run {
        label: label.into(),
        aggregated_mbps: mean_mbps(&reads, second_t + SETTLE_S, end),
        single_mbps: mean_mbps(&reads, (second_t - 1.0).max(0.5), second_t),
        reads,
        second_t,
        bytes,
        verified,
        detail,
    }
}

fn two_paths() -> Result<Topology, String> {
    topology(vec![path(DELAY_MS, RATE_MBPS), path(DELAY_MS, RATE_MBPS)])
}

fn server_addr(topo: &Topology, i: usize) -> Result<IpAddr, String> {
    topo.path(i).info().server_addr().ok_or_else(|| format!("path {i} has no server address"))
}

fn run_tcpls(p: &Params, record_size: usize, pki: &Pki) -> Result<Run, String> {
    let topo = two_paths()?;
    let first = SocketAddr::new(server_addr(&topo, 0)?, PORT);
    let second = SocketAddr::new(server_addr(&topo, 1)?, PORT);
    let settings = SessionConfig { record_size, ..SessionConfig::default() };
    let server = TcplsServer::start(&topo, vec![first, second], pki.server.clone(), settings)?;
    let (started_tx, started_rx) = mpsc::channel();
    let (joined_tx, joined_rx) = mpsc::channel::<Instant>();
    let meter = Meter::new();
    let (m, tls, bytes, at) = (meter.clone(), pki.client.clone(), p.bytes, p.second_path_at);
    let client = tcpls_run::spawn_client(&topo, Duration::from_secs(120), move || async move {
        let name = server_name_for("localhost").map_err(|e| e.to_string())?;
        let session =
            TcplsConnector::new(tls).connect(first, name).await.map_err(|e| format!("connect {first}: {e}"))?;
        // Unsteered: the server's scheduler places each record.
        let (_send, mut recv) = tcpls_run::request(&session, bytes, SEED, None).await?;
        let t0 = Instant::now();
        let _ = started_tx.send(t0);
        let s = session.clone();
        let joiner = async move {
            tokio::time::sleep_until((t0 + Duration::from_secs_f64(at)).into()).await;
            let when = Instant::now();
            s.join(second).await.map_err(|e| format!("join {second}: {e}"))?;
            let _ = joined_tx.send(when);
            Ok::<(), String>(())
        };
        let (result, joined) = tokio::join!(tcpls_run::receive(&mut recv, SEED, bytes, &m), joiner);
        let per_conn: Vec<u64> = session.connections().iter().map(|c| c.bytes_received).collect();
        tcpls_run::close(&session).await;
        joined?;
        result.map(|(got, ok)| (got, ok, per_conn))
    })?;
    let t0 = wait_started(&started_rx)?;
    let (got, verified, per_conn) = tcpls_run::join(client)?;
    let second_t = joined_rx.try_recv().map(|t| secs_between(t0, t)).unwrap_or(p.second_path_at);
    drop(server);
    drop(topo);
    let label = if record_size >= 16 << 10 { "TCPLS 16 KiB records" } else { "TCPLS 1500 B records" };
    let detail = json!({ "record_size": record_size, "bytes_received_per_connection": per_conn });
    Ok(finish(label, meter.reads_since(t0), second_t, got, verified, detail))
}

fn run_mptcp(p: &Params) -> Result<Run, String> {
    let topo = two_paths()?;
    // Limits only: the second path's endpoint is added when it "comes up".
    topo.mptcp_limits(Side::Client, 8, 8).map_err(|e| format!("MPTCP limits: {e}"))?;
    topo.mptcp_limits(Side::Server, 8, 8).map_err(|e| format!("MPTCP limits: {e}"))?;
    let addr = SocketAddr::new(server_addr(&topo, 0)?, PORT);
    let server = mptcp_run::start_server(&topo, addr)?;
    let (started_tx, started_rx) = mpsc::channel();
    let meter = Meter::new();
    let client =
        mptcp_run::start_client(&topo, addr, p.bytes, SEED, meter.clone(), started_tx, Duration::from_secs(120))?;
    let t0 = wait_started(&started_rx)?;
    sleep_until(t0, p.second_path_at);
    let when = Instant::now();
    let info = topo.path(1).info().clone();
    let local = info.client_addr().ok_or("path 1 has no client address")?;
    topo.mptcp_endpoint_add(Side::Client, local, &info.client_iface, &["subflow"])
        .map_err(|e| format!("MPTCP endpoint: {e}"))?;
    let d = client.join().map_err(|_| "MPTCP client panicked".to_string())??;
    let _ = server.join();
    let detail = json!({ "max_additional_subflows": d.max_subflows });
    Ok(finish("MPTCP", meter.reads_since(t0), secs_between(t0, when), d.bytes, d.verified, detail))
}

fn report(r: &Run) -> serde_json::Value {
    json!({
        "verified": r.verified,
        "bytes": r.bytes,
        "second_path_at_s": round(r.second_t, 3),
        "single_path_mbps": round(r.single_mbps, 2),
        "aggregated_mbps": round(r.aggregated_mbps, 2),
        "completed_s": round(last_read(&r.reads), 3),
        "detail": r.detail,
    })
}

/// Runs the experiment and writes `aggregation.{csv,png,json}`.
pub fn run(opts: &Opts) -> Result<Summary, String> {
    if !mptcp_run::supported() {
        return Err("this kernel has no MPTCP (net.mptcp.enabled): the comparison cannot run".into());
    }
    let p = Params::new(opts.quick);
    let pki = Pki::new()?;
    note(&format!("{NAME}: MPTCP"));
    let mptcp = run_mptcp(&p)?;
    note(&format!("{NAME}: TCPLS, 16 KiB records"));
    let big = run_tcpls(&p, 16 << 10, &pki)?;
    note(&format!("{NAME}: TCPLS, 1500 B records"));
    let small = run_tcpls(&p, 1500, &pki)?;
    let runs = [&mptcp, &big, &small];
    let verified = runs.iter().all(|r| r.verified);
    let link_sum = 2.0 * RATE_MBPS;
    let summary = json!({
        "experiment": NAME,
        "quick": opts.quick,
        "link_mbps": [RATE_MBPS, RATE_MBPS],
        "one_way_delay_ms": DELAY_MS,
        "queue_packets": crate::QUEUE_PACKETS,
        "tcp_congestion_control": crate::host_congestion_control(),
        "bytes": p.bytes,
        "tcpls_mbps": round(big.aggregated_mbps, 2),
        "tcpls_1500_mbps": round(small.aggregated_mbps, 2),
        "mptcp_mbps": round(mptcp.aggregated_mbps, 2),
        "tcpls_fraction_of_links": round(big.aggregated_mbps / link_sum, 3),
        "tcpls_1500_fraction_of_links": round(small.aggregated_mbps / link_sum, 3),
        "mptcp_fraction_of_links": round(mptcp.aggregated_mbps / link_sum, 3),
        "measured_from_s_after_second_path": SETTLE_S,
        "mptcp": report(&mptcp),
        "tcpls": report(&big),
        "tcpls_1500": report(&small),
        "verified": verified,
    });
    let panels: Vec<Panel> = runs
        .iter()
        .map(|r| Panel {
            title: format!("{} — {:.1} Mbit/s once both paths are used", r.label, r.aggregated_mbps),
            y_label: "goodput (Mbit/s)".into(),
            series: vec![Series {
                label: r.label.clone(),
                points: goodput_series(&r.reads, BIN, last_read(&r.reads) + BIN),
            }],
            markers: vec![Marker { label: "second path".into(), t: r.second_t }],
            legend_top: false,
            x_axis: XAxis::Time,
            dashed: Vec::new(),
        })
        .collect();
    write_all(opts, NAME, "Bandwidth aggregation: 2 x 25 Mbit/s, second path after a few seconds", &panels, &summary)?;
    if !verified {
        return Err(format!("{NAME}: a transfer was incomplete or corrupted: {summary}"));
    }
    Ok(summary)
}
