//! `experiments migration` (TCPLS paper, Fig. 10): application-level connection migration of a
//! download. Two paths of 30 Mbit/s, 40 ms and 80 ms RTT; a 60 MiB download starts on the first,
//! migrates to the second, then back to the first (on a new connection). Each migration: join a
//! connection on the target path, ask the server to send the stream there (Stream Steer), and
//! `Session::migrate` (our side of the stream moves, the old connection is closed gracefully
//! behind what is already queued on it). The receiver reorders by offset; every byte is checked.

use std::net::{IpAddr, SocketAddr};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use rustls::ClientConfig;
use serde_json::json;
use tcpls::{server_name_for, ConnId, SessionConfig, TcplsConnector};
use tcpls_netem::Topology;
use tokio::io::AsyncReadExt;

use crate::output::{round, write_all};
use crate::pattern::Verifier;
use crate::pki::Pki;
use crate::plot::{Marker, Panel, Series, XAxis};
use crate::tcpls_run::{self, TcplsServer};
use crate::trace::{goodput_series, last_read, mean_mbps, secs_between, Meter};
use crate::{note, path, topology, wait_started, Opts, Summary, BIN};

pub const NAME: &str = "migration";
const RATE_MBPS: f64 = 30.0;
/// One-way delays: 40 ms and 80 ms RTT.
const DELAYS_MS: [f64; 2] = [20.0, 40.0];
const SEED: u64 = 10;
const PORT: u16 = 4443;

struct Params {
    bytes: u64,
    /// Migration to path 1, then back to path 0 (seconds after the request).
    at: [f64; 2],
}

impl Params {
    fn new(quick: bool) -> Params {
        if quick {
            // Each migration first drains what the old connection already holds (its kernel
            // send buffer can hold more than a second at 30 Mbit/s), hence 2 s phases.
            Params { bytes: 32_000_000, at: [2.0, 4.0] }
        } else {
            // 60 MiB at ≈ 29 Mbit/s take ≈ 17 s.
            Params { bytes: 60 << 20, at: [5.0, 11.0] }
        }
    }
}

struct Outcome {
    bytes: u64,
    verified: bool,
    migrations: Vec<Instant>,
    bytes_received_per_connection: Vec<(ConnId, u64)>,
}

fn server_addr(topo: &Topology, i: usize) -> Result<IpAddr, String> {
    topo.path(i).info().server_addr().ok_or_else(|| format!("path {i} has no server address"))
}

/// The client: downloads `bytes` from `addrs[0]`, and at each of `at` (seconds after the
/// request) joins a connection on the other path and migrates the stream to it. Sends the
/// request's time on `started`.
async fn download_migrating(
    tls: Arc<ClientConfig>,
    addrs: [SocketAddr; 2],
    bytes: u64,
    at: [f64; 2],
    m: Meter,
    started_tx: mpsc::Sender<Instant>,
) -> Result<Outcome, String> {
    let name = server_name_for("localhost").map_err(|e| e.to_string())?;
    let session =
        TcplsConnector::new(tls).connect(addrs[0], name).await.map_err(|e| format!("connect {}: {e}", addrs[0]))?;
    let (_send, mut recv) = tcpls_run::request(&session, bytes, SEED, Some(0)).await?;
    let t0 = Instant::now();
    let _ = started_tx.send(t0);
    // Joins run in their own task so that reading never pauses; the read loop then steers
    // the stream to the new connection and migrates.
    let (joined_tx, mut joined_rx) = tokio::sync::mpsc::unbounded_channel::<Result<(Instant, ConnId), String>>();
    let s = session.clone();
    let joiner = tokio::spawn(async move {
        for (i, when) in at.iter().enumerate() {
            tokio::time::sleep_until((t0 + Duration::from_secs_f64(*when)).into()).await;
            // There (path 1) and back (path 0), each time on a new connection.
            let target = addrs[(i + 1) % 2];
            let started = Instant::now();
            let r = s.join(target).await.map(|id| (started, id)).map_err(|e| format!("join {target}: {e}"));
            if joined_tx.send(r).is_err() {
                break;
            }
        }
    });
    let mut v = Verifier::new(SEED);
    let mut buf = vec![0u8; 256 << 10];
    let mut current: ConnId = 0;
    let mut migrations = Vec::new();
    loop {
        tokio::select! {
            r = recv.read(&mut buf) => {
                let n = r.map_err(|e| format!("receive after {} bytes: {e}", v.len()))?;
                if n == 0 {
                    break;
                }
                m.add(n);
                v.feed(&buf[..n]);
            }
            Some(joined) = joined_rx.recv() => {
                let (started, new) = joined?;
                recv.request_steer(new);
                session.migrate(current, new).map_err(|e| format!("migrate {current} -> {new}: {e}"))?;
                migrations.push(started);
                current = new;
            }
        }
    }
    joiner.abort();
    let per_conn = session.connections().iter().map(|c| (c.id, c.bytes_received)).collect();
    tcpls_run::close(&session).await;
    Ok(Outcome { bytes: v.len(), verified: v.verified(bytes), migrations, bytes_received_per_connection: per_conn })
}

/// The goodput over time, with the migrations marked.
fn goodput_panel(mig: &[f64], phases: &[Option<f64>], bytes: u64, series: Vec<(f64, f64)>) -> [Panel; 1] {
    let markers = mig
        .iter()
        .enumerate()
        .map(|(i, t)| Marker {
            label: if i == 0 { "to 80 ms path".into() } else { "back to 40 ms path".into() },
            t: *t,
        })
        .collect();
    [Panel {
        title: format!(
            "{:.1} MiB download, migrated twice; mean goodput per phase: {} Mbit/s",
            bytes as f64 / f64::from(1u32 << 20),
            phases
                .iter()
                .map(|v| v.map_or_else(|| "n/a".into(), |v| format!("{v:.1}")))
                .collect::<Vec<_>>()
                .join(" / ")
        ),
        y_label: "goodput (Mbit/s)".into(),
        series: vec![Series { label: "TCPLS".into(), points: series }],
        markers,
        legend_top: false,
        x_axis: XAxis::Time,
        dashed: Vec::new(),
    }]
}

/// Runs the experiment and writes `migration.{csv,png,json}`.
pub fn run(opts: &Opts) -> Result<Summary, String> {
    let p = Params::new(opts.quick);
    let pki = Pki::new()?;
    let topo = topology(vec![path(DELAYS_MS[0], RATE_MBPS), path(DELAYS_MS[1], RATE_MBPS)])?;
    let addrs = [SocketAddr::new(server_addr(&topo, 0)?, PORT), SocketAddr::new(server_addr(&topo, 1)?, PORT)];
    let server = TcplsServer::start(&topo, addrs.to_vec(), pki.server.clone(), SessionConfig::default())?;
    let (started_tx, started_rx) = mpsc::channel();
    let meter = Meter::new();
    let (m, tls, bytes, at) = (meter.clone(), pki.client.clone(), p.bytes, p.at);
    note(&format!("{NAME}: TCPLS, {} bytes, migrations at {:?} s", p.bytes, p.at));
    let client = tcpls_run::spawn_client(&topo, Duration::from_secs(180), move || {
        download_migrating(tls, addrs, bytes, at, m, started_tx)
    })?;
    let t0 = wait_started(&started_rx)?;
    let out = tcpls_run::join(client)?;
    drop(server);
    drop(topo);
    let reads = meter.reads_since(t0);
    let mig: Vec<f64> = out.migrations.iter().map(|t| secs_between(t0, *t)).collect();
    let end = last_read(&reads);
    let series = goodput_series(&reads, BIN, end + BIN);
    // Goodput in each phase (skipping a second after each change) and the peak during each
    // migration window (the paper's "peaks": both connections deliver for a while).
    let bounds: Vec<f64> = std::iter::once(0.0).chain(mig.iter().copied()).chain(std::iter::once(end)).collect();
    // Steady state of each phase: from 1.5 s after its start (after a migration the old
    // connection drains for about a second, then the reordered data is released at once).
    // (`None` for a phase too short to have one.)
    let phases: Vec<Option<f64>> =
        bounds.windows(2).map(|w| (w[1] - w[0] > 1.9).then(|| round(mean_mbps(&reads, w[0] + 1.5, w[1]), 2))).collect();
    let peaks: Vec<f64> = mig
        .iter()
        .map(|t| {
            let peak = series.iter().filter(|(x, _)| *x > *t && *x <= t + 1.5).map(|(_, v)| *v).fold(0.0, f64::max);
            round(peak, 2)
        })
        .collect();
    let summary = json!({
        "experiment": NAME,
        "quick": opts.quick,
        "link_mbps": [RATE_MBPS, RATE_MBPS],
        "rtt_ms": [2.0 * DELAYS_MS[0], 2.0 * DELAYS_MS[1]],
        "queue_packets": crate::QUEUE_PACKETS,
        "tcp_congestion_control": crate::host_congestion_control(),
        "bytes": out.bytes,
        "verified": out.verified,
        "completed_s": round(end, 3),
        // Above one path's payload rate (30 Mbit/s x 1448/1500 = 28.96) only if both paths
        // carried data at once around the migrations.
        "mean_mbps": round(mean_mbps(&reads, 0.0, end + 1e-9), 2),
        "migrations_at_s": mig.iter().map(|t| round(*t, 3)).collect::<Vec<_>>(),
        "phase_mbps": phases.clone(),
        "peak_mbps_after_migration": peaks,
        "bytes_received_per_connection": out.bytes_received_per_connection.iter()
            .map(|(id, b)| json!({"connection": id, "bytes": b})).collect::<Vec<_>>(),
    });
    let panels = goodput_panel(&mig, &phases, out.bytes, series);
    write_all(
        opts,
        NAME,
        "Application-level connection migration (30 Mbit/s paths, 40 ms and 80 ms RTT)",
        &panels,
        &summary,
    )?;
    if !out.verified {
        return Err(format!("{NAME}: the transfer was incomplete or corrupted: {summary}"));
    }
    Ok(summary)
}
