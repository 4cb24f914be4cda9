//! `experiments silent-path`: one of two paths goes silent during an upload. Two paths of
//! 50 Mbit/s, 10 ms one way; a 60 MB upload spread over both; at 2 s every packet of path 0 is
//! dropped, both ways (the emulator's blackhole: no RST, no FIN, nothing). TCPLS: one stream,
//! not steered (the scheduler spreads its records over both connections), its loss detection
//! from record ACKs on (the default). MPTCP: the kernel's, two subflows, default scheduler.
//! Measured at the receiver: delivered bytes over time, the longest stall (the longest time
//! without a byte delivered, from the first byte to the last), how long after the silence the
//! goodput is back at half a path's rate (a trickle of data shortens the first measure, not
//! this one), and the total time.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::json;
use tcpls::{server_name_for, JoinRegistry, SessionConfig, TcplsConnector, TcplsListener};
use tcpls_netem::{mptcp, Side, Topology};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::output::{round, write_all};
use crate::pattern::{self, Verifier};
use crate::pki::Pki;
use crate::plot::{Marker, Panel, Series, XAxis};
use crate::trace::{goodput_series, last_read, recovery_after, secs_between, Meter};
use crate::{mptcp_run, note, path, sleep_until, topology, wait_started, Opts, Summary, BIN};

pub const NAME: &str = "silent-path";
const RATE_MBPS: f64 = 50.0;
const DELAY_MS: f64 = 10.0;
const SEED: u64 = 31;
const PORT: u16 = 4443;
/// Any run gives up after this.
const LIMIT: Duration = Duration::from_secs(120);

struct Params {
    bytes: u64,
    silence_at: f64,
}

impl Params {
    fn new(quick: bool) -> Params {
        if quick {
            Params { bytes: 20_000_000, silence_at: 1.0 }
        } else {
            Params { bytes: 60_000_000, silence_at: 2.0 }
        }
    }
}

/// One measured upload.
struct Run {
    /// The receiver's reads (seconds since the upload started, bytes).
    reads: Vec<(f64, u64)>,
    silence_t: f64,
    bytes: u64,
    verified: bool,
    detail: serde_json::Value,
}

impl Run {
    /// The longest time without a byte delivered, from the first byte to the last (ms).
    fn longest_stall_ms(&self) -> f64 {
        let gaps = self.reads.windows(2).map(|w| w[1].0 - w[0].0);
        round(gaps.fold(0.0, f64::max) * 1e3, 1)
    }

    /// From the silence to the first 100 ms bin with goodput back at half a path's rate, after
    /// the dip it caused (ms; 0 without a dip): a trickle of data does not end a stall in this
    /// measure, and what was in flight at the silence does not hide it.
    fn back_to_half_rate_ms(&self) -> Option<f64> {
        let half = RATE_MBPS / 2.0;
        let bins: Vec<(f64, f64)> = goodput_series(&self.reads, BIN, last_read(&self.reads) + BIN)
            .into_iter()
            .map(|(end, mbps)| (end - BIN, mbps))
            .filter(|&(start, _)| start >= self.silence_t - BIN)
            .collect();
        let Some(dip) = bins.iter().position(|&(_, mbps)| mbps < half) else {
            return Some(0.0);
        };
        bins[dip..]
            .iter()
            .find(|&&(_, mbps)| mbps >= half)
            .map(|(start, _)| round((start - self.silence_t).max(0.0) * 1e3, 0))
    }

    fn summary(&self) -> serde_json::Value {
        json!({
            "back_to_half_rate_ms": self.back_to_half_rate_ms(),
            "verified": self.verified,
            "bytes": self.bytes,
            "silence_at_s": round(self.silence_t, 3),
            "completed_s": round(last_read(&self.reads), 3),
            "longest_stall_ms": self.longest_stall_ms(),
            "resumed_after_silence_ms": recovery_after(&self.reads, self.silence_t).map(|s| round(s * 1e3, 1)),
            "detail": self.detail,
        })
    }

    /// Delivered megabytes over time, one point per read (thinned to one per [`BIN`] / 10).
    fn delivered(&self) -> Vec<(f64, f64)> {
        let mut total = 0u64;
        let mut points = vec![(0.0, 0.0)];
        for (t, n) in &self.reads {
            total += n;
            if points.last().is_some_and(|(last, _)| t - last >= BIN / 10.0) {
                points.push((*t, total as f64 / 1e6));
            }
        }
        points.push((last_read(&self.reads), total as f64 / 1e6));
        points
    }
}

/// A receiver's thread: what it received, or why it failed.
type Receiver<T> = std::thread::JoinHandle<Result<T, String>>;

fn two_paths() -> Result<Topology, String> {
    topology(vec![path(DELAY_MS, RATE_MBPS), path(DELAY_MS, RATE_MBPS)])
}

fn server_addr(topo: &Topology, i: usize) -> Result<SocketAddr, String> {
    let ip = topo.path(i).info().server_addr().ok_or_else(|| format!("path {i} has no server address"))?;
    Ok(SocketAddr::new(ip, PORT))
}

/// Path 0 goes silent at `t0 + at`; returns when.
fn silence(topo: &Topology, t0: Instant, at: f64) -> Instant {
    sleep_until(t0, at);
    let when = Instant::now();
    topo.path(0).set_blackhole(true);
    when
}

/// The TCPLS receiver: accepts one session on either address, reads its one stream to the end
/// (logging reads), answers one byte, and returns (bytes, verified, its session's stats).
fn tcpls_receiver(
    topo: &Topology,
    addrs: [SocketAddr; 2],
    pki: &Pki,
    meter: Meter,
) -> Result<Receiver<(u64, bool, tcpls::proto::SessionStats)>, String> {
    let tls = pki.server.clone();
    let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
    let h = topo
        .spawn_in(Side::Server, move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
            rt.block_on(async move {
                let registry = JoinRegistry::new();
                let mut listeners = Vec::new();
                for a in addrs {
                    match TcplsListener::bind_with_registry(a, tls.clone(), SessionConfig::default(), registry.clone())
                        .await
                    {
                        Ok(l) => listeners.push(l),
                        Err(e) => {
                            let msg = format!("cannot listen on {a}: {e}");
                            let _ = ready_tx.send(Err(msg.clone()));
                            return Err(msg);
                        }
                    }
                }
                let _ = ready_tx.send(Ok(()));
                let work = async {
                    let (session, _) = listeners[0].accept().await.ok_or("no session")?;
                    let (mut send, mut recv) = session.accept_stream().await.ok_or("no stream")?;
                    let mut v = Verifier::new(SEED);
                    let mut buf = vec![0u8; 256 << 10];
                    loop {
                        let n =
                            recv.read(&mut buf).await.map_err(|e| format!("receive after {} bytes: {e}", v.len()))?;
                        if n == 0 {
                            break;
                        }
                        meter.add(n);
                        v.feed(&buf[..n]);
                    }
                    send.write_all(&[1]).await.map_err(|e| format!("answer: {e}"))?;
                    let _ = send.shutdown().await;
                    let _ = tokio::time::timeout(Duration::from_secs(5), session.closed()).await;
                    Ok::<_, String>((v.len(), v, session.stats()))
                };
                let (len, v, stats) = tokio::time::timeout(LIMIT, work).await.map_err(|_| "receiver gave up")??;
                Ok((len, v.verified(len), stats))
            })
        })
        .map_err(|e| format!("cannot start the receiver: {e}"))?;
    ready_rx.recv_timeout(Duration::from_secs(10)).map_err(|_| "the receiver did not start".to_string())??;
    Ok(h)
}

fn run_tcpls(p: &Params, pki: &Pki) -> Result<Run, String> {
    let topo = two_paths()?;
    let (first, second) = (server_addr(&topo, 0)?, server_addr(&topo, 1)?);
    let meter = Meter::new();
    let receiver = tcpls_receiver(&topo, [first, second], pki, meter.clone())?;
    let (started_tx, started_rx) = mpsc::channel();
    let (tls, bytes) = (pki.client.clone(), p.bytes);
    let sender = crate::tcpls_run::spawn_client(&topo, LIMIT, move || async move {
        let name = server_name_for("localhost").map_err(|e| e.to_string())?;
        let session =
            TcplsConnector::new(tls).connect(first, name).await.map_err(|e| format!("connect {first}: {e}"))?;
        session.join(second).await.map_err(|e| format!("join {second}: {e}"))?;
        let (mut send, mut recv) = session.open_stream().map_err(|e| format!("open stream: {e}"))?;
        let _ = started_tx.send(Instant::now());
        let mut off = 0u64;
        while off < bytes {
            let c = pattern::chunk(SEED, off, (bytes - off).min(256 << 10) as usize);
            send.write_all(c).await.map_err(|e| format!("send after {off} bytes: {e}"))?;
            off += c.len() as u64;
        }
        send.shutdown().await.map_err(|e| format!("finish: {e}"))?;
        let mut done = [0u8; 1];
        recv.read_exact(&mut done).await.map_err(|e| format!("no answer from the receiver: {e}"))?;
        let stats = session.stats();
        crate::tcpls_run::close(&session).await;
        Ok(stats)
    })?;
    let t0 = wait_started(&started_rx)?;
    let at = silence(&topo, t0, p.silence_at);
    let sent = crate::tcpls_run::join(sender)?;
    let (got, verified, received) =
        receiver.join().map_err(|_| "the receiver panicked".to_string())?.map_err(|e| format!("receiver: {e}"))?;
    Ok(Run {
        reads: meter.reads_since(t0),
        silence_t: secs_between(t0, at),
        bytes: got,
        verified: verified && got == p.bytes,
        detail: json!({
            "sender_paths_suspected": sent.paths_suspected,
            "sender_paths_recovered": sent.paths_recovered,
            "sender_connections_lost": sent.connections_lost,
            "sender_failovers": sent.failovers,
            "sender_records_resent": sent.records_resent,
            "sender_stream_bytes_resent": sent.stream_bytes_resent,
            "receiver_duplicate_bytes": received.duplicate_bytes_received,
        }),
    })
}

/// The MPTCP receiver: one connection, read to the end (logging reads), one byte answered.
fn mptcp_receiver(topo: &Topology, addr: SocketAddr, meter: Meter) -> Result<Receiver<(u64, bool)>, String> {
    mptcp_run::listen_in_server(topo, addr, "MPTCP receiver", move |l| {
        let (mut conn, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
        conn.set_read_timeout(Some(LIMIT)).map_err(|e| e.to_string())?;
        let mut v = Verifier::new(SEED);
        let mut buf = vec![0u8; 256 << 10];
        loop {
            let n = conn.read(&mut buf).map_err(|e| format!("receive after {} bytes: {e}", v.len()))?;
            if n == 0 {
                break;
            }
            meter.add(n);
            v.feed(&buf[..n]);
        }
        conn.write_all(&[1]).map_err(|e| format!("answer: {e}"))?;
        Ok((v.len(), v.verified(v.len())))
    })
}

fn run_mptcp(p: &Params) -> Result<Run, String> {
    let topo = two_paths()?;
    topo.mptcp_setup(false).map_err(|e| format!("MPTCP setup: {e}"))?;
    let addr = server_addr(&topo, 0)?;
    let meter = Meter::new();
    let receiver = mptcp_receiver(&topo, addr, meter.clone())?;
    let (started_tx, started_rx) = mpsc::channel();
    let bytes = p.bytes;
    let sender = topo
        .spawn_in(Side::Client, move || -> Result<Option<u8>, String> {
            let s = mptcp::mptcp_socket(&addr).map_err(|e| format!("MPTCP socket: {e}"))?;
            s.connect_timeout(&addr.into(), Duration::from_secs(10)).map_err(|e| format!("connect {addr}: {e}"))?;
            let mut conn: TcpStream = s.into();
            conn.set_write_timeout(Some(LIMIT)).map_err(|e| e.to_string())?;
            conn.set_read_timeout(Some(LIMIT)).map_err(|e| e.to_string())?;
            let _ = started_tx.send(Instant::now());
            let mut subflows = mptcp::subflows(&conn);
            let mut off = 0u64;
            while off < bytes {
                let c = pattern::chunk(SEED, off, (bytes - off).min(256 << 10) as usize);
                conn.write_all(c).map_err(|e| format!("send after {off} bytes: {e}"))?;
                off += c.len() as u64;
                subflows = subflows.max(mptcp::subflows(&conn));
            }
            conn.shutdown(Shutdown::Write).map_err(|e| e.to_string())?;
            let mut done = [0u8; 1];
            conn.read_exact(&mut done).map_err(|e| format!("no answer from the receiver: {e}"))?;
            Ok(subflows)
        })
        .map_err(|e| format!("cannot start the MPTCP sender: {e}"))?;
    let t0 = wait_started(&started_rx)?;
    let at = silence(&topo, t0, p.silence_at);
    let subflows = sender.join().map_err(|_| "the MPTCP sender panicked".to_string())??;
    let (got, verified) =
        receiver.join().map_err(|_| "the MPTCP receiver panicked".to_string())?.map_err(|e| format!("MPTCP {e}"))?;
    Ok(Run {
        reads: meter.reads_since(t0),
        silence_t: secs_between(t0, at),
        bytes: got,
        verified: verified && got == p.bytes,
        detail: json!({ "max_additional_subflows": subflows }),
    })
}

/// Runs the experiment and writes `silent-path.{csv,png,json}`.
pub fn run(opts: &Opts) -> Result<Summary, String> {
    if !mptcp_run::supported() {
        return Err("this kernel has no MPTCP (net.mptcp.enabled): the comparison cannot run".into());
    }
    let p = Params::new(opts.quick);
    let pki = Pki::new()?;
    note(&format!("{NAME}: TCPLS (two connections, loss detection from record ACKs)"));
    let t = run_tcpls(&p, &pki)?;
    note(&format!("{NAME}: MPTCP (two subflows, default scheduler)"));
    let m = run_mptcp(&p)?;
    let summary = json!({
        "experiment": NAME,
        "quick": opts.quick,
        "paths": [{"rate_mbps": RATE_MBPS, "one_way_delay_ms": DELAY_MS}, {"rate_mbps": RATE_MBPS, "one_way_delay_ms": DELAY_MS}],
        "queue_packets": crate::QUEUE_PACKETS,
        "tcp_congestion_control": crate::host_congestion_control(),
        "bytes": p.bytes,
        "tcpls_longest_stall_ms": t.longest_stall_ms(),
        "mptcp_longest_stall_ms": m.longest_stall_ms(),
        "tcpls_back_to_half_rate_ms": t.back_to_half_rate_ms(),
        "mptcp_back_to_half_rate_ms": m.back_to_half_rate_ms(),
        "tcpls_completed_s": round(last_read(&t.reads), 3),
        "mptcp_completed_s": round(last_read(&m.reads), 3),
        "tcpls": t.summary(),
        "mptcp": m.summary(),
        "verified": t.verified && m.verified,
    });
    let end = last_read(&t.reads).max(last_read(&m.reads)) + BIN;
    let series = |f: &dyn Fn(&Run) -> Vec<(f64, f64)>| {
        vec![
            Series { label: "TCPLS (loss detection from record ACKs)".into(), points: f(&t) },
            Series { label: "MPTCP (two subflows; default scheduler)".into(), points: f(&m) },
        ]
    };
    let markers = vec![Marker { label: "path 0 silent".into(), t: t.silence_t }];
    let panels = [
        Panel {
            title: format!(
                "Delivered bytes — longest stall: TCPLS {:.0} ms, MPTCP {:.0} ms; done at {:.2} s and {:.2} s",
                t.longest_stall_ms(),
                m.longest_stall_ms(),
                last_read(&t.reads),
                last_read(&m.reads)
            ),
            y_label: "delivered (MB)".into(),
            series: series(&|r| r.delivered()),
            markers: markers.clone(),
            legend_top: false,
            x_axis: XAxis::Time,
            dashed: Vec::new(),
        },
        Panel {
            title: format!(
                "Goodput at the receiver — back at half a path's rate {} ms (TCPLS) and {} ms (MPTCP) after the silence",
                t.back_to_half_rate_ms().map_or("never".into(), |v| v.to_string()),
                m.back_to_half_rate_ms().map_or("never".into(), |v| v.to_string()),
            ),
            y_label: "goodput (Mbit/s)".into(),
            series: series(&|r| goodput_series(&r.reads, BIN, end)),
            markers,
            legend_top: true,
            x_axis: XAxis::Time,
            dashed: Vec::new(),
        },
    ];
    write_all(opts, NAME, "A path goes silent during an upload (2 x 50 Mbit/s, 10 ms)", &panels, &summary)?;
    if !(t.verified && m.verified) {
        return Err(format!("{NAME}: a transfer was incomplete or corrupted: {summary}"));
    }
    Ok(summary)
}
