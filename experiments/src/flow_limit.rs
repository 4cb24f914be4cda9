//! `experiments flow-limit` (thesis §4.3, Fig. 4.9, flow limit): four downloads ("flows") of one
//! TCPLS session, each on its own stream steered to its own TCP connection, on 127.0.0.1. After
//! 0.3 s the receiver (client) caps three connections with Rate Limit frames
//! (`Session::set_peer_rate_limit`, PROTOCOL.md §7: the sender paces that connection with a
//! token bucket), the fourth stays unlimited. Loopback, so this measures CPU, not a network:
//! the flows share the two ends' processing.
//!
//! The thesis used fixed limits (750, 1000 and 1500 MB/s against ≈ 1200 MB/s per flow). What a
//! flow reaches here depends on the build and on how busy the machine is, so the limits are set
//! relative to the flows' mean goodput before 0.3 s: flow 0 to a quarter of it, flow 1 to half,
//! flow 2 to three times (above what it can reach: "not really impacted"), rounded to two
//! significant digits.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::json;
use tcpls::{server_name_for, ConnId, RecvStream, SessionConfig, TcplsConnector};
use tokio::io::AsyncReadExt;

use crate::loopback::LoopbackServer;
use crate::output::{round, write_all};
use crate::pattern::Verifier;
use crate::pki::Pki;
use crate::plot::{Marker, Panel, Series, XAxis};
use crate::tcpls_run;
use crate::trace::{goodput_series, mean_mbps, Meter};
use crate::{note, Opts, Summary};

pub const NAME: &str = "flow-limit";
const FLOWS: usize = 4;
/// When the limits are set (the thesis's 0.3 s).
const LIMIT_AT_S: f64 = 0.3;
/// Goodput before the limits is measured from here (after the connections' start) to LIMIT_AT_S.
const BEFORE_FROM_S: f64 = 0.1;
/// After the limits, goodput is measured from this long after LIMIT_AT_S (the senders' buffers
/// hold records sealed before the limit) to the end.
const SETTLE_S: f64 = 0.3;
/// Limit of each flow as a multiple of the flows' mean goodput before the limit; None = no limit.
const LIMIT_FACTORS: [Option<f64>; FLOWS] = [Some(0.25), Some(0.5), Some(3.0), None];
/// More than any flow can move in the run: the client stops reading at the end of the run.
const REQUEST_BYTES: u64 = 1 << 34;
/// Goodput bins of the plot (s).
const BIN: f64 = 0.05;
/// Buffers between the sender's pacing and the reading application, kept small so that a
/// limit shows in the goodput at once instead of after megabytes buffered before it drain:
/// the receiver's stream window, and the sender's sealed and unsent-in-kernel bytes (late
/// multiplexing, as the tunnel uses).
const WINDOW: u64 = 256 << 10;
const SENDER_QUEUE: usize = 64 << 10;

fn sender_settings() -> SessionConfig {
    SessionConfig {
        transmit_high_water: SENDER_QUEUE,
        notsent_lowat: Some(SENDER_QUEUE as u32),
        ..SessionConfig::default()
    }
}

fn receiver_settings() -> SessionConfig {
    SessionConfig { stream_receive_window: WINDOW, ..SessionConfig::default() }
}

fn duration(quick: bool) -> Duration {
    if quick {
        Duration::from_millis(1500)
    } else {
        Duration::from_secs(4)
    }
}

/// Bytes per second rounded to two significant digits.
fn two_digits(x: f64) -> u64 {
    if x < 1.0 {
        return 1;
    }
    let scale = 10f64.powi(x.log10().floor() as i32 - 1);
    ((x / scale).round() * scale) as u64
}

/// Reads `recv` until `deadline`, logging reads; returns whether every byte was the pattern.
async fn read_until(mut recv: RecvStream, seed: u64, meter: Meter, deadline: tokio::time::Instant) -> bool {
    let mut v = Verifier::new(seed);
    let mut buf = vec![0u8; 256 << 10];
    loop {
        match tokio::time::timeout_at(deadline, recv.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => {
                meter.add(n);
                v.feed(&buf[..n]);
                // A stream with data never makes `read` wait: yield, so that the four readers
                // and the session's driver share the client's thread fairly.
                tokio::task::yield_now().await;
            }
            Ok(_) => return false, // ended or failed before the end of the run
            Err(_) => return v.verified(v.len()),
        }
    }
}

/// What the client measured.
struct Run {
    t0: Instant,
    limits: [Option<u64>; FLOWS],
    limit_set_at: f64,
    verified: [bool; FLOWS],
}

async fn client(
    addr: SocketAddr,
    tls: std::sync::Arc<rustls::ClientConfig>,
    meters: Vec<Meter>,
    run_for: Duration,
) -> Result<Run, String> {
    let name = server_name_for("localhost").map_err(|e| e.to_string())?;
    let session = TcplsConnector::new(tls)
        .with_settings(receiver_settings())
        .connect(addr, name)
        .await
        .map_err(|e| format!("connect {addr}: {e}"))?;
    let mut conns: Vec<ConnId> = session.usable_connections();
    conns.truncate(1);
    while conns.len() < FLOWS {
        conns.push(session.join(addr).await.map_err(|e| format!("join {addr}: {e}"))?);
    }
    let mut streams = Vec::new();
    for (i, c) in conns.iter().enumerate() {
        streams.push(tcpls_run::request(&session, REQUEST_BYTES, i as u64, Some(*c)).await?);
    }
    let t0 = Instant::now();
    let deadline = tokio::time::Instant::from_std(t0 + run_for);
    let mut readers = Vec::new();
    let mut sends = Vec::new();
    for (i, (send, recv)) in streams.into_iter().enumerate() {
        sends.push(send);
        readers.push(tokio::spawn(read_until(recv, i as u64, meters[i].clone(), deadline)));
    }
    tokio::time::sleep_until((t0 + Duration::from_secs_f64(LIMIT_AT_S)).into()).await;
    let limit_set_at = t0.elapsed().as_secs_f64();
    let mut limits = [None; FLOWS];
    let mean_before = meters.iter().map(|m| mean_mbps(&m.reads_since(t0), BEFORE_FROM_S, limit_set_at)).sum::<f64>()
        / FLOWS as f64
        * 1e6
        / 8.0;
    for (i, factor) in LIMIT_FACTORS.iter().enumerate() {
        let Some(factor) = factor else { continue };
        let limit = two_digits(mean_before * factor);
        session.set_peer_rate_limit(conns[i], limit).map_err(|e| format!("rate limit on {}: {e}", conns[i]))?;
        limits[i] = Some(limit);
    }
    let mut verified = [false; FLOWS];
    for (i, r) in readers.into_iter().enumerate() {
        verified[i] = r.await.map_err(|e| format!("reader {i}: {e}"))?;
    }
    // The downloads are cut short on purpose: end the session without waiting for them.
    drop(sends);
    session.abort();
    Ok(Run { t0, limits, limit_set_at, verified })
}

/// Runs the experiment and writes `flow-limit.{csv,png,json}`.
pub fn run(opts: &Opts) -> Result<Summary, String> {
    let pki = Pki::new()?;
    let server = LoopbackServer::start(pki.server.clone(), sender_settings())?;
    let meters: Vec<Meter> = (0..FLOWS).map(|_| Meter::new()).collect();
    let run_for = duration(opts.quick);
    note(&format!("{NAME}: {FLOWS} flows for {run_for:?}, limits after {LIMIT_AT_S} s"));
    let (addr, tls, m) = (server.addr, pki.client.clone(), meters.clone());
    let handle = std::thread::spawn(move || -> Result<Run, String> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
        rt.block_on(async move {
            tokio::time::timeout(run_for + Duration::from_secs(60), client(addr, tls, m, run_for))
                .await
                .map_err(|_| "the client gave up".to_string())?
        })
    });
    let r = handle.join().map_err(|_| "the client panicked".to_string())??;
    drop(server);

    let end = run_for.as_secs_f64();
    let from = r.limit_set_at + SETTLE_S;
    let mb = |mbps: f64| mbps / 8.0; // Mbit/s -> MB/s
    let reads: Vec<Vec<(f64, u64)>> = meters.iter().map(|m| m.reads_since(r.t0)).collect();
    let flows: Vec<serde_json::Value> = (0..FLOWS)
        .map(|i| {
            let before = mb(mean_mbps(&reads[i], BEFORE_FROM_S, r.limit_set_at));
            let after = mb(mean_mbps(&reads[i], from, end));
            let limit = r.limits[i].map(|l| l as f64 / 1e6);
            json!({
                "flow": i,
                "limit_mb_s": limit.map(|l| round(l, 3)),
                "limit_factor_of_mean_goodput_before": LIMIT_FACTORS[i],
                "goodput_before_mb_s": round(before, 2),
                "goodput_after_mb_s": round(after, 2),
                "goodput_after_over_limit": limit.map(|l| round(after / l, 3)),
                "bytes": meters[i].total(),
                "verified": r.verified[i],
            })
        })
        .collect();
    let verified = r.verified.iter().all(|v| *v);
    let summary = json!({
        "experiment": NAME,
        "quick": opts.quick,
        "measures": "CPU, not a network: one TCPLS session, 4 TCP connections on 127.0.0.1",
        "seconds": end,
        "limits_set_at_s": round(r.limit_set_at, 3),
        "after_limit_measured_from_s": round(from, 3),
        "unit": "MB/s (10^6 bytes per second of stream data; the limit counts record bytes)",
        "receiver_stream_window": WINDOW,
        "sender_transmit_high_water_and_notsent_lowat": SENDER_QUEUE,
        "flows": flows,
        "verified": verified,
    });
    let labels: Vec<String> = (0..FLOWS)
        .map(|i| if r.limits[i].is_some() { format!("flow {i} (limited)") } else { format!("flow {i} (no limit)") })
        .collect();
    let limits: Vec<String> =
        (0..FLOWS).filter_map(|i| Some(format!("flow {i}: {:.0} MB/s", r.limits[i]? as f64 / 1e6))).collect();
    let panel = Panel {
        title: format!("4 flows, limits set at {LIMIT_AT_S} s (dashed) — {}", limits.join(", ")),
        y_label: "goodput (MB/s)".into(),
        series: (0..FLOWS)
            .map(|i| Series {
                label: labels[i].clone(),
                points: goodput_series(&reads[i], BIN, end).into_iter().map(|(t, v)| (t, mb(v))).collect(),
            })
            .collect(),
        markers: vec![Marker { label: "limits".into(), t: r.limit_set_at }],
        legend_top: true,
        x_axis: XAxis::Time,
        dashed: (0..FLOWS).filter_map(|i| Some((i, r.limits[i]? as f64 / 1e6))).collect(),
    };
    write_all(opts, NAME, "Flow limit: goodput of 4 flows (loopback, CPU-bound)", &[panel], &summary)?;
    if !verified {
        return Err(format!("{NAME}: a flow was cut short or corrupted: {summary}"));
    }
    Ok(summary)
}
