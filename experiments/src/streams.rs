//! `experiments streams` (thesis Figs 3.2-3.3, multi-stream cost and scheduling order): one
//! TCPLS session over one TCP connection on 127.0.0.1 moves a fixed volume split evenly over
//! 1..1000 streams, in three orders. This measures CPU, not a network: loopback has no
//! bandwidth limit, so the goodput is what the two ends' processing allows.
//!
//! The thesis's prototype (TCPLS v1) gave each stream its own AEAD nonce, so the receiver had
//! to try the streams' contexts in turn until one decrypted the record: up to one decryption
//! per stream and record when the sender served the streams round-robin from the last one, 2
//! from the first one, about 1 when it sent them one after the other. v2 framing (ours,
//! PROTOCOL.md §2) encrypts every record of a connection under one key and names the stream
//! inside the record: one decryption per record, whatever the order. `streams_records` counts
//! that; here are the goodput and the CPU per GiB it buys.
//!
//! Orders (the sender's application decides; the session's packetizer serves the streams with
//! data round-robin, in the order they became ready):
//! * `sequential`: stream 0 is written and finished, then stream 1, ...;
//! * `rr_first`: every stream gets its first record's worth, stream 0 first, then all are
//!   written concurrently, so records go out 0, 1, ..., N-1, 0, 1, ...;
//! * `rr_last`: the same starting from the last opened stream: N-1, ..., 1, 0, N-1, ...
//!
//! The client sends, the server receives (the thesis had it the other way; the protocol is
//! symmetric). CPU is the time each end's thread spent on a CPU (`/proc/thread-self/schedstat`,
//! user and kernel, the loopback TCP processing included), from the end of the handshake to
//! the last byte.

use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::json;
use tcpls::{server_name_for, Session, SessionConfig, TcplsConnector, TcplsListener};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::output::{round, write_all};
use crate::pattern::{self, Verifier};
use crate::pki::Pki;
use crate::plot::{Panel, Series, XAxis};
use crate::streams_records::{self, Order, RecordCount, RECEIVER_BUDGET};
use crate::tcpls_run::{decode_request, encode_request, REQUEST_LEN};
use crate::{note, Opts, Summary};

pub const NAME: &str = "streams";

struct Params {
    /// Stream bytes per transfer, split evenly over the streams.
    bytes: u64,
    counts: Vec<usize>,
    reps: usize,
    /// Stream bytes per transfer of the record count (in memory, see `streams_records`).
    count_bytes: u64,
}

impl Params {
    fn new(quick: bool) -> Params {
        let counts = vec![1, 2, 4, 8, 16, 64, 256, 1000];
        if quick {
            Params { bytes: 24 << 20, counts: vec![1, 8, 64, 1000], reps: 1, count_bytes: 4 << 20 }
        } else {
            // The thesis moved 1 GB per transfer, five times each; half of that twice keeps the
            // run within about two minutes on the shared 2-core machine.
            Params { bytes: 512 << 20, counts, reps: 2, count_bytes: 32 << 20 }
        }
    }
}

/// One transfer's measurements.
#[derive(Debug, Clone)]
struct Sample {
    secs: f64,
    sender_cpu_s: Option<f64>,
    receiver_cpu_s: Option<f64>,
    verified: bool,
    zero_copy_bytes: u64,
    copied_bytes: u64,
}

/// CPU time this thread spent running (user + kernel), from the scheduler's statistics.
pub fn thread_cpu() -> Option<Duration> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = s.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

fn cpu_since(start: Option<Duration>) -> Option<f64> {
    Some(thread_cpu()?.checked_sub(start?)?.as_secs_f64())
}

/// What the receiving thread reports.
struct Received {
    done: Instant,
    cpu_s: Option<f64>,
    verified: bool,
    zero_copy_bytes: u64,
    copied_bytes: u64,
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| format!("tokio runtime: {e}"))
}

/// Receives `n` streams of `per_stream` bytes each on the first session accepted.
async fn receive_all(listener: TcplsListener, n: usize, per_stream: u64) -> Result<Received, String> {
    let (session, _) = listener.accept().await.ok_or("the listener stopped")?;
    let cpu0 = thread_cpu();
    let mut readers = tokio::task::JoinSet::new();
    for _ in 0..n {
        let (_send, mut recv) = session.accept_stream().await.ok_or("the session ended before all streams came")?;
        readers.spawn(async move {
            let mut req = [0u8; REQUEST_LEN];
            recv.read_exact(&mut req).await.map_err(|e| format!("stream header: {e}"))?;
            let (bytes, seed) = decode_request(&req);
            let mut v = Verifier::new(seed);
            loop {
                let got = recv
                    .read_chunk_with(|c| {
                        v.feed(c);
                        c.len()
                    })
                    .await
                    .map_err(|e| format!("receive after {} bytes: {e}", v.len()))?;
                if got == 0 {
                    break;
                }
            }
            Ok::<bool, String>(bytes == per_stream && v.verified(bytes))
        });
    }
    let mut verified = true;
    while let Some(r) = readers.join_next().await {
        verified &= r.map_err(|e| format!("reader task: {e}"))??;
    }
    let done = Instant::now();
    let cpu_s = cpu_since(cpu0);
    let stats = session.stats();
    let _ = tokio::time::timeout(Duration::from_secs(5), session.closed()).await;
    Ok(Received { done, cpu_s, verified, zero_copy_bytes: stats.zero_copy_bytes, copied_bytes: stats.copied_bytes })
}

/// Writes `per_stream` pattern bytes of stream `seed` from `from` to `to`.
async fn write_range(send: &mut tcpls::SendStream, seed: usize, from: u64, to: u64) -> Result<(), String> {
    let mut off = from;
    while off < to {
        let c = pattern::chunk(seed as u64, off, (to - off).min(256 << 10) as usize);
        send.write_all(c).await.map_err(|e| format!("write: {e}"))?;
        off += c.len() as u64;
    }
    Ok(())
}

/// Writes `per_stream` pattern bytes (after the header) on each of `n` streams in `order`;
/// returns when the first byte was written.
async fn send_all(session: &Session, n: usize, per_stream: u64, order: Order) -> Result<Instant, String> {
    let mut sends = Vec::with_capacity(n);
    // The receive halves stay open until the end (dropping one would stop the peer's side).
    let mut recvs = Vec::with_capacity(n);
    for _ in 0..n {
        let (send, recv) = session.open_stream().map_err(|e| format!("open stream: {e}"))?;
        sends.push(Some(send));
        recvs.push(recv);
    }
    let started = Instant::now();
    let first = (16 << 10).min(per_stream);
    match order {
        Order::Sequential => {
            for (i, send) in sends.iter_mut().enumerate() {
                let Some(send) = send else { continue };
                send.write_all(&encode_request(per_stream, i as u64)).await.map_err(|e| format!("write: {e}"))?;
                write_range(send, i, 0, per_stream).await?;
                send.shutdown().await.map_err(|e| format!("finish: {e}"))?;
            }
        }
        Order::RoundRobinFirst | Order::RoundRobinLast => {
            // Each stream becomes ready in `order`: these writes fit the streams' send buffers,
            // so none of them yields to the session's driver before the last one.
            let sequence = order.first_writes(n);
            for &i in &sequence {
                let Some(send) = sends[i].as_mut() else { continue };
                send.write_all(&encode_request(per_stream, i as u64)).await.map_err(|e| format!("write: {e}"))?;
                write_range(send, i, 0, first).await?;
            }
            // One task per stream, spawned (and so first run) in the same order; each is woken
            // only when its own stream has room.
            let mut writers = tokio::task::JoinSet::new();
            for &i in &sequence {
                let Some(mut send) = sends[i].take() else { continue };
                writers.spawn(async move {
                    write_range(&mut send, i, first, per_stream).await?;
                    send.shutdown().await.map_err(|e| format!("finish: {e}"))
                });
            }
            while let Some(r) = writers.join_next().await {
                r.map_err(|e| format!("writer task: {e}"))??;
            }
        }
    }
    drop(recvs);
    Ok(started)
}

/// One transfer of `bytes` over `n` streams in `order`.
fn transfer(pki: &Pki, n: usize, bytes: u64, order: Order) -> Result<Sample, String> {
    let per_stream = bytes / n as u64;
    let (addr_tx, addr_rx) = mpsc::channel::<Result<SocketAddr, String>>();
    let tls = pki.server.clone();
    let server = std::thread::spawn(move || -> Result<Received, String> {
        let rt = runtime()?;
        rt.block_on(async move {
            // 1000 streams open at once need more than the default 64 MiB receive budget,
            // which charges each stream its 64 KiB initial window and admits ~990.
            let settings = SessionConfig { receive_budget: RECEIVER_BUDGET, ..SessionConfig::default() };
            let bound = TcplsListener::bind_with("127.0.0.1:0".parse().map_err(|_| "address")?, tls, settings).await;
            let listener = match bound {
                Ok(l) => l,
                Err(e) => {
                    let _ = addr_tx.send(Err(format!("bind: {e}")));
                    return Err(format!("bind: {e}"));
                }
            };
            let _ = addr_tx.send(Ok(listener.local_addr()));
            tokio::time::timeout(Duration::from_secs(300), receive_all(listener, n, per_stream))
                .await
                .map_err(|_| "the receiver gave up after 300 s".to_string())?
        })
    });
    let addr = addr_rx.recv_timeout(Duration::from_secs(10)).map_err(|_| "the receiver did not start")??;
    let client_tls = pki.client.clone();
    let client = std::thread::spawn(move || -> Result<(Instant, Option<f64>), String> {
        let rt = runtime()?;
        rt.block_on(async move {
            let name = server_name_for("localhost").map_err(|e| e.to_string())?;
            let session = TcplsConnector::new(client_tls)
                .connect(addr, name)
                .await
                .map_err(|e| format!("connect {addr}: {e}"))?;
            // The sender's CPU: from the end of the handshake until the session is closed
            // (everything sealed, sent and the close exchanged).
            let cpu0 = thread_cpu();
            let sent = send_all(&session, n, per_stream, order).await;
            crate::tcpls_run::close(&session).await;
            Ok((sent?, cpu_since(cpu0)))
        })
    });
    let sent = client.join().map_err(|_| "the sender panicked".to_string())?;
    let received = server.join().map_err(|_| "the receiver panicked".to_string())??;
    let (started, sender_cpu_s) = sent?;
    Ok(Sample {
        secs: received.done.saturating_duration_since(started).as_secs_f64(),
        sender_cpu_s,
        receiver_cpu_s: received.cpu_s,
        verified: received.verified,
        zero_copy_bytes: received.zero_copy_bytes,
        copied_bytes: received.copied_bytes,
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Medians over the repetitions of one (order, stream count).
struct Point {
    n: usize,
    goodput_gbps: f64,
    secs: f64,
    cpu_s_per_gib: Option<f64>,
    sender_cpu_s_per_gib: Option<f64>,
    receiver_cpu_s_per_gib: Option<f64>,
    verified: bool,
    zero_copy_fraction: f64,
    records: RecordCount,
}

fn summarize(n: usize, bytes: u64, samples: &[Sample], records: RecordCount) -> Point {
    let gib = bytes as f64 / f64::from(1u32 << 30);
    let per_gib = |f: &dyn Fn(&Sample) -> Option<f64>| -> Option<f64> {
        let v: Option<Vec<f64>> = samples.iter().map(f).collect();
        v.map(|v| median(v) / gib)
    };
    let secs = median(samples.iter().map(|s| s.secs).collect());
    let zc: u64 = samples.iter().map(|s| s.zero_copy_bytes).sum();
    let cp: u64 = samples.iter().map(|s| s.copied_bytes).sum();
    Point {
        n,
        goodput_gbps: bytes as f64 * 8.0 / secs.max(1e-9) / 1e9,
        secs,
        cpu_s_per_gib: per_gib(&|s| Some(s.sender_cpu_s? + s.receiver_cpu_s?)),
        sender_cpu_s_per_gib: per_gib(&|s| s.sender_cpu_s),
        receiver_cpu_s_per_gib: per_gib(&|s| s.receiver_cpu_s),
        verified: samples.iter().all(|s| s.verified),
        zero_copy_fraction: zc as f64 / (zc + cp).max(1) as f64,
        records,
    }
}

fn point_json(p: &Point, base_secs: f64) -> serde_json::Value {
    let r = |x: Option<f64>| x.map(|x| round(x, 3));
    json!({
        "streams": p.n,
        "goodput_gbps": round(p.goodput_gbps, 3),
        "seconds": round(p.secs, 4),
        "time_relative_to_1_stream": round(p.secs / base_secs.max(1e-9), 3),
        "cpu_s_per_gib": r(p.cpu_s_per_gib),
        "sender_cpu_s_per_gib": r(p.sender_cpu_s_per_gib),
        "receiver_cpu_s_per_gib": r(p.receiver_cpu_s_per_gib),
        "received_zero_copy_fraction": round(p.zero_copy_fraction, 4),
        "verified": p.verified,
        "records_sent": p.records.records_sent,
        "records_decrypted": p.records.records_decrypted,
        "failed_decryptions": p.records.failed_decryptions,
        "decryptions_per_record": round(p.records.decryptions_per_record(), 4),
    })
}

/// Runs the experiment and writes `streams.{csv,png,json}`.
pub fn run(opts: &Opts) -> Result<Summary, String> {
    let p = Params::new(opts.quick);
    let pki = Pki::new()?;
    let mut results: Vec<(Order, Vec<Point>)> = Vec::new();
    for order in Order::ALL {
        results.push((order, Vec::new()));
    }
    // Repetitions alternate over every configuration, so slow drifts of the shared machine hit
    // all of them alike.
    let mut samples: Vec<Vec<Vec<Sample>>> = vec![vec![Vec::new(); p.counts.len()]; Order::ALL.len()];
    for rep in 0..p.reps {
        for (oi, order) in Order::ALL.iter().enumerate() {
            for (ci, &n) in p.counts.iter().enumerate() {
                note(&format!("{NAME}: {} streams, {}, repetition {}", n, order.key(), rep + 1));
                samples[oi][ci].push(transfer(&pki, n, p.bytes, *order)?);
            }
        }
    }
    for (oi, (order, points)) in results.iter_mut().enumerate() {
        for (ci, &n) in p.counts.iter().enumerate() {
            let records = streams_records::count(&pki, n, p.count_bytes, *order)?;
            points.push(summarize(n, p.bytes, &samples[oi][ci], records));
        }
    }
    let verified = results.iter().all(|(_, pts)| pts.iter().all(|x| x.verified));
    let max_dpr = results
        .iter()
        .flat_map(|(_, pts)| pts.iter().map(|x| x.records.decryptions_per_record()))
        .fold(0.0f64, f64::max);
    let per_order: serde_json::Map<String, serde_json::Value> = results
        .iter()
        .map(|(order, pts)| {
            let base = pts.first().map_or(1.0, |x| x.secs);
            (order.key().to_string(), json!(pts.iter().map(|x| point_json(x, base)).collect::<Vec<_>>()))
        })
        .collect();
    let summary = json!({
        "experiment": NAME,
        "quick": opts.quick,
        "measures": "CPU, not a network: one TCPLS session, one TCP connection on 127.0.0.1",
        "bytes_per_transfer": p.bytes,
        "repetitions": p.reps,
        "stream_counts": p.counts,
        "record_size": SessionConfig::default().record_size,
        "receiver_receive_budget": RECEIVER_BUDGET,
        "cipher_suite": "TLS13_AES_128_GCM_SHA256 (aws-lc-rs)",
        "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "orders": Order::ALL.iter().map(|o| json!({ "key": o.key(), "label": o.label() })).collect::<Vec<_>>(),
        "max_decryptions_per_record": round(max_dpr, 4),
        "results": per_order,
        "verified": verified,
    });
    write_all(
        opts,
        NAME,
        "TCPLS streams on loopback (CPU-bound): goodput and CPU vs number of streams",
        &panels(&results),
        &summary,
    )?;
    if !verified {
        return Err(format!("{NAME}: a transfer was incomplete or corrupted: {summary}"));
    }
    Ok(summary)
}

fn panels(results: &[(Order, Vec<Point>)]) -> Vec<Panel> {
    let axis = XAxis::Log2("number of streams".into());
    let series = |f: &dyn Fn(&Point, f64) -> Option<f64>| -> Vec<Series> {
        results
            .iter()
            .map(|(order, pts)| {
                let base = pts.first().map_or(1.0, |x| x.secs);
                Series {
                    label: order.label().into(),
                    points: pts.iter().filter_map(|x| Some((x.n as f64, f(x, base)?))).collect(),
                }
            })
            .collect()
    };
    let panel = |title: &str, y: &str, s: Vec<Series>| Panel {
        title: title.into(),
        y_label: y.into(),
        series: s,
        markers: Vec::new(),
        legend_top: false,
        x_axis: axis.clone(),
        dashed: Vec::new(),
    };
    vec![
        panel("Goodput", "goodput (Gbit/s)", series(&|x, _| Some(x.goodput_gbps))),
        panel(
            "Time relative to one stream (thesis Fig. 3.3; v1 grew ~25 % per extra decryption)",
            "time / time with 1 stream",
            series(&|x, base| Some(x.secs / base.max(1e-9))),
        ),
        panel("CPU of sender + receiver per GiB", "CPU s per GiB", series(&|x, _| x.cpu_s_per_gib)),
        panel(
            "Decryptions per record (counted, in-memory transfers)",
            "AEAD opens per record",
            series(&|x, _| Some(x.records.decryptions_per_record())),
        ),
    ]
}
