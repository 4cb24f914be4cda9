//! `experiments hol-blocking` (TM3 paper, Table 6; "Type-S" sender-side head-of-line blocking):
//! a client downloads a bulk stream over a 10 Mbit/s path with 50 ms RTT and, meanwhile, fetches
//! a 4 KB object every second; measured: each object's load time (request sent → last byte
//! received). Three ways to carry the object:
//!
//! * `tls`: plain TLS over the bulk's TCP connection, multiplexed at the application level as
//!   HTTP/2 does (the object is written before the next bulk frame: no application buffer), see
//!   [`crate::tls_run`];
//! * `tcpls_stream`: TCPLS, the object on its own stream on the bulk's TCP connection;
//! * `tcpls_connection`: TCPLS, the object's stream steered to a second TCP connection of the
//!   same session over the same path;
//! * `tcpls_late`: TCPLS, the object on its own stream on the bulk's connection, with late
//!   multiplexing on the server (`SessionConfig::notsent_lowat` and a small
//!   `transmit_high_water`, both `LATE_BYTES`, 16 KiB): the kernel and the session hold little sealed
//!   bulk data, so the object's records go out next instead of behind it (TM3 paper §4.2).

use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::json;
use tcpls::{server_name_for, SessionConfig, TcplsConnector};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::output::{round, write_all};
use crate::pattern::{self, Verifier};
use crate::pki::Pki;
use crate::plot::{Panel, Series, XAxis};
use crate::tcpls_run::{self, encode_request, TcplsServer};
use crate::trace::{goodput_series, mean_mbps, secs_between, Meter};
use crate::{note, path, tls_run, topology, wait_started, Opts, Summary};

pub const NAME: &str = "hol-blocking";
const RATE_MBPS: f64 = 10.0;
/// 50 ms RTT.
const DELAY_MS: f64 = 25.0;
const OBJECT: u64 = 4096;
/// More than the experiment can download: the bulk runs until the client stops it.
const BULK: u64 = 1 << 33;
const BULK_SEED: u64 = 1;
const PORT: u16 = 4443;
/// Late multiplexing: unsent bytes the kernel may hold (TCP_NOTSENT_LOWAT) and sealed bytes the
/// session keeps ready, per connection. 16 KiB is 13 ms at 10 Mbit/s.
const LATE_BYTES: u32 = 16 << 10;

struct Params {
    warmup: f64,
    objects: usize,
    interval: f64,
}

impl Params {
    fn new(quick: bool) -> Params {
        if quick {
            Params { warmup: 2.0, objects: 6, interval: 0.7 }
        } else {
            // TM3 averages 30 measurements.
            Params { warmup: 3.0, objects: 30, interval: 1.0 }
        }
    }

    fn request_at(&self, i: usize) -> f64 {
        self.warmup + i as f64 * self.interval
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Variant {
    Tls,
    TcplsStream,
    TcplsConnection,
    TcplsLate,
}

impl Variant {
    fn key(self) -> &'static str {
        match self {
            Variant::Tls => "tls",
            Variant::TcplsStream => "tcpls_stream",
            Variant::TcplsConnection => "tcpls_connection",
            Variant::TcplsLate => "tcpls_late",
        }
    }
    fn label(self) -> &'static str {
        match self {
            Variant::Tls => "TLS/TCP: one connection (HTTP/2-like)",
            Variant::TcplsStream => "TCPLS: object on its own stream",
            Variant::TcplsConnection => "TCPLS: object stream on a 2nd connection",
            Variant::TcplsLate => "TCPLS: own stream, late multiplexing",
        }
    }
}

/// One object fetch: when it was requested (s since the bulk request), its load time, whether
/// its bytes were right.
#[derive(Clone, Copy, Debug)]
struct Fetch {
    at: f64,
    load_ms: f64,
    ok: bool,
}

struct Run {
    fetches: Vec<Fetch>,
    bulk: Vec<(f64, u64)>,
    /// Every bulk byte received (a prefix of the stream, which is stopped mid-way) was right.
    bulk_ok: bool,
}

fn object_seed(i: usize) -> u64 {
    100 + i as u64
}

fn run_tcpls(p: &Params, second_connection: bool, server_settings: SessionConfig, pki: &Pki) -> Result<Run, String> {
    let topo = topology(vec![path(DELAY_MS, RATE_MBPS)])?;
    let addr = SocketAddr::new(topo.path(0).info().server_addr().ok_or("no server address")?, PORT);
    let server = TcplsServer::start(&topo, vec![addr], pki.server.clone(), server_settings)?;
    let (started_tx, started_rx) = mpsc::channel();
    let meter = Meter::new();
    let (m, tls) = (meter.clone(), pki.client.clone());
    let schedule: Vec<f64> = (0..p.objects).map(|i| p.request_at(i)).collect();
    let client = tcpls_run::spawn_client(&topo, Duration::from_secs(120), move || async move {
        let name = server_name_for("localhost").map_err(|e| e.to_string())?;
        let session = TcplsConnector::new(tls).connect(addr, name).await.map_err(|e| format!("connect: {e}"))?;
        let object_conn =
            if second_connection { Some(session.join(addr).await.map_err(|e| format!("join: {e}"))?) } else { Some(0) };
        let (_bulk_send, mut bulk_recv) = tcpls_run::request(&session, BULK, BULK_SEED, Some(0)).await?;
        let t0 = Instant::now();
        let _ = started_tx.send(t0);
        let bulk = tokio::spawn(async move {
            let mut v = Verifier::new(BULK_SEED);
            let mut buf = vec![0u8; 256 << 10];
            while let Ok(n) = bulk_recv.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                m.add(n);
                v.feed(&buf[..n]);
            }
            v.verified(v.len())
        });
        let mut fetches = Vec::new();
        for (i, at) in schedule.iter().enumerate() {
            tokio::time::sleep_until((t0 + Duration::from_secs_f64(*at)).into()).await;
            let asked = Instant::now();
            let seed = object_seed(i);
            let (_send, mut recv) = tcpls_run::request(&session, OBJECT, seed, object_conn).await?;
            let (got, ok) = tcpls_run::receive(&mut recv, seed, OBJECT, &Meter::new()).await?;
            fetches.push(Fetch {
                at: secs_between(t0, asked),
                load_ms: asked.elapsed().as_secs_f64() * 1e3,
                ok: ok && got == OBJECT,
            });
        }
        session.abort();
        let bulk_ok = bulk.await.unwrap_or(false);
        Ok((fetches, bulk_ok))
    })?;
    let t0 = wait_started(&started_rx)?;
    let (fetches, bulk_ok) = tcpls_run::join(client)?;
    drop(server);
    drop(topo);
    Ok(Run { fetches, bulk: meter.reads_since(t0), bulk_ok })
}

fn run_tls(p: &Params, pki: &Pki) -> Result<Run, String> {
    let topo = topology(vec![path(DELAY_MS, RATE_MBPS)])?;
    let addr = SocketAddr::new(topo.path(0).info().server_addr().ok_or("no server address")?, PORT);
    let server = tls_run::start_server(&topo, addr, pki.server.clone())?;
    let (started_tx, started_rx) = mpsc::channel();
    let meter = Meter::new();
    let (m, tls) = (meter.clone(), pki.client.clone());
    let schedule: Vec<f64> = (0..p.objects).map(|i| p.request_at(i)).collect();
    let client = tcpls_run::spawn_client(&topo, Duration::from_secs(120), move || async move {
        let tcp = tokio::net::TcpStream::connect(addr).await.map_err(|e| format!("connect: {e}"))?;
        tcp.set_nodelay(true).map_err(|e| e.to_string())?;
        let name = server_name_for("localhost").map_err(|e| e.to_string())?;
        let conn = tokio_rustls::TlsConnector::from(tls).connect(name, tcp).await.map_err(|e| format!("TLS: {e}"))?;
        let (mut rd, mut wr) = tokio::io::split(conn);
        wr.write_all(&encode_request(BULK, BULK_SEED)).await.map_err(|e| e.to_string())?;
        let t0 = Instant::now();
        let _ = started_tx.send(t0);
        // The reader demultiplexes: bulk frames are checked and counted, objects reported.
        let (obj_tx, mut obj_rx) = tokio::sync::mpsc::unbounded_channel::<(u64, Instant, bool)>();
        let reader = tokio::spawn(async move {
            let mut v = Verifier::new(BULK_SEED);
            let mut buf = vec![0u8; 64 << 10];
            while let Ok((seed, len)) = tls_run::read_frame_header(&mut rd).await {
                if len > buf.len() || rd.read_exact(&mut buf[..len]).await.is_err() {
                    break;
                }
                if seed == BULK_SEED {
                    m.add(len);
                    v.feed(&buf[..len]);
                } else {
                    let ok = buf[..len] == *pattern::chunk(seed, 0, len) && len as u64 == OBJECT;
                    let _ = obj_tx.send((seed, Instant::now(), ok));
                }
            }
            v.verified(v.len())
        });
        let mut fetches = Vec::new();
        for (i, at) in schedule.iter().enumerate() {
            tokio::time::sleep_until((t0 + Duration::from_secs_f64(*at)).into()).await;
            let asked = Instant::now();
            let seed = object_seed(i);
            wr.write_all(&encode_request(OBJECT, seed)).await.map_err(|e| e.to_string())?;
            let (got, done, ok) = tokio::time::timeout(Duration::from_secs(30), obj_rx.recv())
                .await
                .map_err(|_| format!("object {i} did not arrive within 30 s"))?
                .ok_or("the connection ended")?;
            fetches.push(Fetch {
                at: secs_between(t0, asked),
                load_ms: (done - asked).as_secs_f64() * 1e3,
                ok: ok && got == seed,
            });
        }
        reader.abort();
        let bulk_ok = true; // checked frame by frame by the reader, which we stopped
        drop(wr);
        Ok((fetches, bulk_ok))
    })?;
    let t0 = wait_started(&started_rx)?;
    let (fetches, bulk_ok) = tcpls_run::join(client)?;
    drop(topo);
    drop(server); // ends on its own once the connection is gone (namespace removed)
    Ok(Run { fetches, bulk: meter.reads_since(t0), bulk_ok })
}

/// The bulk is measured while objects are fetched (the session is stopped after the last one).
fn measured_until(r: &Run, p: &Params) -> f64 {
    r.fetches.last().map_or(p.warmup, |f| f.at + f.load_ms / 1e3)
}

/// `t` rounded down to whole bins (a last, partial bin would look like a drop).
fn whole_bins(t: f64, bin: f64) -> f64 {
    (t / bin).floor() * bin
}

/// Bin of the bulk goodput series.
const BULK_BIN: f64 = 0.5;

fn stats(r: &Run, p: &Params) -> serde_json::Value {
    let mut loads: Vec<f64> = r.fetches.iter().map(|f| f.load_ms).collect();
    loads.sort_by(f64::total_cmp);
    let mean = loads.iter().sum::<f64>() / loads.len().max(1) as f64;
    let median = loads.get(loads.len() / 2).copied().unwrap_or(0.0);
    let end = measured_until(r, p);
    json!({
        "objects": r.fetches.len(),
        "objects_verified": r.fetches.iter().all(|f| f.ok),
        "load_ms_mean": round(mean, 1),
        "load_ms_median": round(median, 1),
        "load_ms_min": round(loads.first().copied().unwrap_or(0.0), 1),
        "load_ms_max": round(loads.last().copied().unwrap_or(0.0), 1),
        "bulk_mbps": round(mean_mbps(&r.bulk, p.warmup, end), 2),
        "bulk_bytes_verified": r.bulk_ok,
    })
}

/// Runs the experiment and writes `hol-blocking.{csv,png,json}`.
pub fn run(opts: &Opts) -> Result<Summary, String> {
    let p = Params::new(opts.quick);
    let pki = Pki::new()?;
    let mut summary = json!({
        "experiment": NAME,
        "quick": opts.quick,
        "link_mbps": RATE_MBPS,
        "rtt_ms": 2.0 * DELAY_MS,
        "queue_packets": crate::QUEUE_PACKETS,
        "tcp_congestion_control": crate::host_congestion_control(),
        "object_bytes": OBJECT,
    });
    let mut load_series = Vec::new();
    let mut bulk_series = Vec::new();
    let mut verified = true;
    let late = SessionConfig {
        notsent_lowat: Some(LATE_BYTES),
        transmit_high_water: LATE_BYTES as usize,
        ..SessionConfig::default()
    };
    for v in [Variant::Tls, Variant::TcplsStream, Variant::TcplsConnection, Variant::TcplsLate] {
        note(&format!("{NAME}: {}", v.label()));
        let r = match v {
            Variant::Tls => run_tls(&p, &pki)?,
            Variant::TcplsStream => run_tcpls(&p, false, SessionConfig::default(), &pki)?,
            Variant::TcplsConnection => run_tcpls(&p, true, SessionConfig::default(), &pki)?,
            Variant::TcplsLate => run_tcpls(&p, false, late.clone(), &pki)?,
        };
        let s = stats(&r, &p);
        verified &= s["objects_verified"] == json!(true) && s["bulk_bytes_verified"] == json!(true);
        summary[format!("{}_load_ms_mean", v.key())] = s["load_ms_mean"].clone();
        summary[v.key()] = s;
        load_series
            .push(Series { label: v.label().into(), points: r.fetches.iter().map(|f| (f.at, f.load_ms)).collect() });
        bulk_series.push(Series {
            label: v.label().into(),
            points: goodput_series(&r.bulk, BULK_BIN, whole_bins(measured_until(&r, &p), BULK_BIN)),
        });
    }
    summary["verified"] = json!(verified);
    let panels = [
        Panel {
            title: "4 KB object load time (request → last byte) while the bulk download runs".into(),
            y_label: "load time (ms)".into(),
            series: load_series,
            markers: vec![],
            legend_top: true,
            x_axis: XAxis::Time,
            dashed: Vec::new(),
        },
        Panel {
            title: "bulk download goodput (0.5 s bins)".into(),
            y_label: "goodput (Mbit/s)".into(),
            series: bulk_series,
            markers: vec![],
            legend_top: false,
            x_axis: XAxis::Time,
            dashed: Vec::new(),
        },
    ];
    write_all(opts, NAME, "Head-of-line blocking (Type-S): 10 Mbit/s, 50 ms RTT", &panels, &summary)?;
    if !verified {
        return Err(format!("{NAME}: an object or the bulk was corrupted: {summary}"));
    }
    Ok(summary)
}
