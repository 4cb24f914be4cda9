//! The redundant-mode part of `experiments bonding`: a 50 datagrams/s UDP stream through the
//! tunnel's UDP forward (`tcpls tunnel client --forward-udp`, both paths) to a UDP echo server,
//! across a 3 s outage of one path (every packet dropped both ways, tcpls-netem's black hole),
//! without and with `--redundant`; once for each path, as which one carries a single-copy flow
//! (each way) is the ends' round robin. Counted at the sender: datagrams whose echo never came
//! back (lost, either way), echoes received twice (must be 0), echoes later than 150 ms (past a
//! VoIP jitter buffer), and the slowest echo after the first second (the flow's opening).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tcpls_netem::{Side, Topology};

use super::{spawn, Proc, TUNNEL_PORT};
use crate::note;
use crate::output::round;

const ECHO_PORT: u16 = 5300;
const FORWARD: &str = "127.0.0.1:5300";
/// Datagrams per second, and the phases of the stream: before, during and after the outage.
const RATE: u32 = 50;
const BEFORE: Duration = Duration::from_secs(2);
const OUTAGE: Duration = Duration::from_secs(3);
const AFTER: Duration = Duration::from_secs(3);
/// Time left for late echoes once the last datagram is sent.
const DRAIN: Duration = Duration::from_secs(5);

/// A UDP echo server in the server namespace until `stop`.
fn echo_server(topo: &Topology, addr: SocketAddr, stop: Arc<AtomicBool>) -> Result<(), String> {
    let sock = topo
        .run_in(Side::Server, move || UdpSocket::bind(addr))
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("UDP echo server on {addr}: {e}"))?;
    sock.set_read_timeout(Some(Duration::from_millis(200))).map_err(|e| e.to_string())?;
    std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        while !stop.load(Ordering::Relaxed) {
            if let Ok((n, from)) = sock.recv_from(&mut buf) {
                let _ = sock.send_to(&buf[..n], from);
            }
        }
    });
    Ok(())
}

/// The tunnel client with a UDP forward to the echo server over both paths, once its session is up.
fn tunnel_client(
    topo: &Topology,
    tcpls: &Path,
    cert: &Path,
    servers: &[IpAddr],
    redundant: bool,
) -> Result<Proc, String> {
    let mut cmd = topo.command(Side::Client, tcpls);
    cmd.args(["tunnel", "client", "--no-reconnect", "--server-name", "localhost"]);
    cmd.arg("--ca").arg(cert);
    cmd.arg("--concentrator").arg(SocketAddr::new(servers[0], TUNNEL_PORT).to_string());
    cmd.arg("--path").arg(SocketAddr::new(servers[1], TUNNEL_PORT).to_string());
    let option = if redundant { ",redundant" } else { "" };
    cmd.arg("--forward-udp").arg(format!("{FORWARD}={}{option}", SocketAddr::new(servers[0], ECHO_PORT)));
    cmd.stderr(Stdio::piped());
    super::wait_for_session(spawn(cmd, "the tunnel client")?, 2)
}

/// What the sender saw.
struct Stream {
    sent: u32,
    answered: u32,
    duplicates: u32,
    late: u32,
    slowest_ms: f64,
}

/// An echo later than this is as good as lost for a call.
const LATE: Duration = Duration::from_millis(150);

/// Sends the stream from the client namespace while path `dark` goes dark for [`OUTAGE`].
fn one_stream(topo: &Topology, dark: usize) -> Result<Stream, String> {
    let total = RATE * (BEFORE + OUTAGE + AFTER).as_secs() as u32;
    std::thread::scope(|s| {
        let sender = s.spawn(|| topo.run_in(Side::Client, move || send_and_count(total)));
        std::thread::sleep(BEFORE);
        topo.path(dark).set_blackhole(true);
        std::thread::sleep(OUTAGE);
        topo.path(dark).set_blackhole(false);
        sender.join().map_err(|_| "the sender panicked".to_string())?.map_err(|e| e.to_string())?
    })
}

fn send_and_count(total: u32) -> Result<Stream, String> {
    let sock = UdpSocket::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    sock.connect(FORWARD).map_err(|e| e.to_string())?;
    let start = Instant::now();
    let mut sent_at = Vec::new();
    let mut echoes: HashMap<u32, u32> = HashMap::new();
    let mut rtts = Vec::new();
    let mut buf = [0u8; 2048];
    let end = start + Duration::from_secs_f64(f64::from(total) / f64::from(RATE)) + DRAIN;
    while Instant::now() < end {
        let i = sent_at.len() as u32;
        let due = start + Duration::from_secs_f64(f64::from(i) / f64::from(RATE));
        if i < total && Instant::now() >= due {
            // The number, then padding to a voice-like 160 bytes.
            let mut d = i.to_be_bytes().to_vec();
            d.resize(160, 0x5a);
            sock.send(&d).map_err(|e| e.to_string())?;
            sent_at.push(Instant::now());
            continue;
        }
        let wait = if i < total { due.saturating_duration_since(Instant::now()) } else { Duration::from_millis(50) };
        sock.set_read_timeout(Some(wait.max(Duration::from_millis(1)))).map_err(|e| e.to_string())?;
        if let Ok(n) = sock.recv(&mut buf) {
            if n >= 4 {
                let seq = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
                if let Some(t) = sent_at.get(seq as usize) {
                    let n = echoes.entry(seq).or_insert(0);
                    *n += 1;
                    if *n == 1 {
                        rtts.push((seq, t.elapsed()));
                    }
                }
            }
        }
    }
    Ok(Stream {
        sent: sent_at.len() as u32,
        answered: echoes.len() as u32,
        duplicates: echoes.values().map(|n| n - 1).sum(),
        late: rtts.iter().filter(|(_, rtt)| *rtt > LATE).count() as u32,
        slowest_ms: rtts
            .iter()
            .filter(|(seq, _)| *seq >= RATE)
            .map(|(_, rtt)| rtt.as_secs_f64() * 1e3)
            .fold(0.0, f64::max),
    })
}

/// Both runs, on the topology's two paths (the concentrator already listens on both).
pub fn runs(topo: &Topology, tcpls: &Path, cert: &Path, servers: &[IpAddr]) -> Result<serde_json::Value, String> {
    let stop = Arc::new(AtomicBool::new(false));
    echo_server(topo, SocketAddr::new(servers[0], ECHO_PORT), stop.clone())?;
    let mut out = serde_json::Map::new();
    for redundant in [false, true] {
        let key = if redundant { "redundant" } else { "single_copy" };
        let mut runs = serde_json::Map::new();
        for dark in 0..2 {
            note(&format!("{} redundant mode: 50 datagrams/s, 3 s outage of path {dark}, {key}", super::NAME));
            let _client = tunnel_client(topo, tcpls, cert, servers, redundant)?;
            let r = one_stream(topo, dark)?;
            runs.insert(
                format!("outage_of_path_{dark}"),
                json!({
                    "sent": r.sent,
                    "lost": r.sent - r.answered,
                    "duplicates_delivered": r.duplicates,
                    "late_over_150ms": r.late,
                    "slowest_echo_after_first_second_ms": round(r.slowest_ms, 1),
                }),
            );
        }
        out.insert(key.into(), serde_json::Value::Object(runs));
    }
    stop.store(true, Ordering::Relaxed);
    out.insert("rate_per_s".into(), json!(RATE));
    out.insert("outage_s".into(), json!(OUTAGE.as_secs()));
    Ok(serde_json::Value::Object(out))
}
