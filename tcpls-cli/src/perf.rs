//! `tcpls perf`: iperf-style bulk transfer with byte-for-byte verification.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use serde::Serialize;
use tcpls::{SessionConfig, TcplsConnector};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::perf_proto::{decode_report, Direction, Request, REPORT_LEN};
use crate::transfer::{deadline, receive_pattern, send_pattern};

pub struct PerfOptions {
    /// The server's addresses (several: happy eyeballs picks the first that answers).
    pub addrs: Vec<SocketAddr>,
    /// Extra connections (joined with the server's tokens) towards these addresses.
    pub paths: Vec<SocketAddr>,
    /// Spread every stream over all connections instead of one connection per stream.
    pub aggregate: bool,
    /// Move every stream to the next connection after this long.
    pub migrate_at: Option<Duration>,
    pub server_name: ServerName<'static>,
    pub tls: rustls::ClientConfig,
    pub settings: SessionConfig,
    pub direction: Direction,
    /// Total over all streams; None with a time limit.
    pub bytes: Option<u64>,
    pub millis: u64,
    pub streams: u32,
    pub json: bool,
    pub quiet: bool,
    /// Extension frames to send before the transfer (rate limit, congestion control, timeout).
    pub ext: crate::probe::PerfExt,
    /// 0-RTT: a warm-up session fetches a ticket, then the measured session resumes and sends
    /// its first request as TLS early data (`tls.enable_early_data` must be set).
    pub zero_rtt: bool,
}

#[derive(Debug, Serialize)]
pub struct ConnectionReport {
    pub id: u32,
    pub local: Option<String>,
    pub remote: Option<String>,
    pub bytes_sent: u64,
    pub bytes_received: u64,
}

#[derive(Debug, Serialize)]
pub struct PerfReport {
    pub direction: &'static str,
    pub streams: u32,
    pub bytes: u64,
    pub seconds: f64,
    pub goodput_bps: f64,
    pub verified: bool,
    pub fallback: bool,
    pub cipher: String,
    pub failovers: u64,
    pub resumed: bool,
    pub early_data_accepted: bool,
    pub zero_copy_bytes: u64,
    pub copied_bytes: u64,
    pub handshake_ms: f64,
    pub connections: Vec<ConnectionReport>,
}

/// Bytes of stream `i` (the first carries the remainder so the total is exact).
fn stream_bytes(opts: &PerfOptions, i: u32) -> u64 {
    let per_stream = opts.bytes.map(|b| b / u64::from(opts.streams.max(1)));
    match per_stream {
        Some(b) if i == 0 => b + opts.bytes.unwrap_or(0) % u64::from(opts.streams.max(1)),
        Some(b) => b,
        None => u64::MAX,
    }
}

pub async fn run(opts: PerfOptions) -> Result<PerfReport, String> {
    let connector = TcplsConnector::new(Arc::new(opts.tls.clone())).with_settings(opts.settings.clone());
    let shown = opts.addrs.first().map(|a| a.to_string()).unwrap_or_default();
    let first_request =
        Request { direction: opts.direction, seed: 0, bytes: stream_bytes(&opts, 0), millis: opts.millis };
    let mut early_stream = None;
    let mut t0 = Instant::now();
    let session = if opts.zero_rtt {
        let addr = *opts.addrs.first().ok_or("no address to connect to")?;
        let warm = connector.connect(addr, opts.server_name.clone()).await;
        warm.map_err(|e| format!("cannot connect to {shown}: {e}"))?.close().await;
        // The warm-up (closed gracefully) left the server's tickets in the client config: the
        // measured session resumes, and its first request goes as early data.
        t0 = Instant::now();
        connector.connect_with_early_data(addr, opts.server_name.clone(), &first_request.encode()).await.map(
            |(session, send, recv)| {
                early_stream = Some((send, recv));
                session
            },
        )
    } else if opts.addrs.len() == 1 {
        connector.connect(opts.addrs[0], opts.server_name.clone()).await
    } else {
        let options = tcpls::HappyEyeballs { stagger: Duration::from_millis(50), keep_others: false };
        connector.connect_any(&opts.addrs, opts.server_name.clone(), options).await
    }
    .map_err(|e| format!("cannot connect to {shown}: {e}"))?;
    let handshake_ms = t0.elapsed().as_secs_f64() * 1e3;
    if session.is_fallback() {
        return Err(format!(
            "{shown} does not speak TCPLS (plain TLS only): tcpls perf needs `tcpls serve --mode perf`"
        ));
    }
    let mut conns = vec![0u32];
    for path in &opts.paths {
        let id = session.join(*path).await.map_err(|e| format!("cannot add a connection to {path}: {e}"))?;
        conns.push(id);
    }
    if let Some(at) = opts.migrate_at {
        if conns.len() < 2 {
            return Err("--migrate-at needs a second connection (--path)".into());
        }
        let (s, from, to) = (session.clone(), conns[0], conns[1]);
        tokio::spawn(async move {
            tokio::time::sleep(at).await;
            if let Err(e) = s.migrate(from, to) {
                eprintln!("tcpls perf: migration failed: {e}");
            }
        });
    }
    opts.ext.apply(&session, &conns, opts.direction == Direction::Upload)?;
    let progress = Arc::new(AtomicU64::new(0));
    let ticker =
        (!opts.json && !opts.quiet && std::io::stderr().is_terminal()).then(|| spawn_progress(progress.clone()));
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..opts.streams {
        // With --zero-rtt, stream 0 exists already and its request went as early data.
        let (early, (mut send, mut recv)) = match early_stream.take() {
            Some(pair) => (true, pair),
            None => (false, session.open_stream().map_err(|e| format!("cannot open stream: {e}"))?),
        };
        // Without --aggregate each stream stays on one connection, assigned round-robin.
        if !opts.aggregate || opts.migrate_at.is_some() {
            let conn = conns[i as usize % conns.len()];
            send.steer(Some(conn)).map_err(|e| format!("cannot steer stream: {e}"))?;
            // The server sends a download: ask it to use the same connection.
            recv.request_steer(conn);
        }
        let bytes = stream_bytes(&opts, i);
        let request = Request { direction: opts.direction, seed: i, bytes, millis: opts.millis };
        let progress = progress.clone();
        tasks.spawn(async move {
            if !early {
                send.write_all(&request.encode()).await?;
            }
            match request.direction {
                Direction::Upload => {
                    let sent = send_pattern(&mut send, i.into(), bytes, deadline(request.millis), &progress).await?;
                    let mut report = [0u8; REPORT_LEN];
                    recv.read_exact(&mut report).await?;
                    let (received, verified) = decode_report(&report);
                    Ok::<(u64, bool), std::io::Error>((sent, verified && received == sent))
                }
                Direction::Download => {
                    send.shutdown().await?;
                    let (received, verified) = receive_pattern(&mut recv, i.into(), &progress).await?;
                    let complete = request.millis > 0 || received == bytes;
                    Ok((received, verified && complete))
                }
            }
        });
    }
    let mut total = 0u64;
    let mut verified = true;
    while let Some(joined) = tasks.join_next().await {
        let (bytes, ok) =
            joined.map_err(|e| format!("stream task failed: {e}"))?.map_err(|e| format!("stream failed: {e}"))?;
        total += bytes;
        verified &= ok;
    }
    let seconds = start.elapsed().as_secs_f64();
    if let Some(t) = ticker {
        t.abort();
        eprint!("\r\x1b[K");
    }
    let info = session.handshake_info().unwrap_or(tcpls::proto::HandshakeInfo {
        alpn: None,
        cipher_suite: String::new(),
        resumed: false,
        early_data_accepted: false,
    });
    let connections = session
        .connections()
        .into_iter()
        .map(|c| ConnectionReport {
            id: c.id,
            local: c.local.map(|a| a.to_string()),
            remote: c.remote.map(|a| a.to_string()),
            bytes_sent: c.bytes_sent,
            bytes_received: c.bytes_received,
        })
        .collect();
    let stats = session.stats();
    if let Some(e) = session.close().await {
        return Err(format!("session ended with an error: {e}"));
    }
    Ok(PerfReport {
        direction: match opts.direction {
            Direction::Upload => "upload",
            Direction::Download => "download",
        },
        streams: opts.streams,
        bytes: total,
        seconds,
        goodput_bps: if seconds > 0.0 { total as f64 * 8.0 / seconds } else { 0.0 },
        verified,
        fallback: false,
        cipher: info.cipher_suite,
        failovers: stats.failovers,
        resumed: info.resumed,
        early_data_accepted: info.early_data_accepted,
        zero_copy_bytes: stats.zero_copy_bytes,
        copied_bytes: stats.copied_bytes,
        handshake_ms,
        connections,
    })
}

fn spawn_progress(progress: Arc<AtomicU64>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let start = Instant::now();
        let mut last = 0u64;
        let mut interval = tokio::time::interval(Duration::from_secs(1));
        interval.tick().await;
        loop {
            interval.tick().await;
            let now = progress.load(Ordering::Relaxed);
            eprint!(
                "\r\x1b[K  {:>8.1} s  {:>10}  {:>7.2} Gbit/s",
                start.elapsed().as_secs_f64(),
                human_bytes(now),
                (now - last) as f64 * 8.0 / 1e9
            );
            last = now;
        }
    })
}

pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

pub fn print_human(r: &PerfReport) {
    println!(
        "{} {} over {} stream{} in {:.3} s: {:.2} Gbit/s, {} ({})",
        r.direction,
        human_bytes(r.bytes),
        r.streams,
        if r.streams == 1 { "" } else { "s" },
        r.seconds,
        r.goodput_bps / 1e9,
        if r.verified { "verified byte for byte" } else { "VERIFICATION FAILED" },
        r.cipher
    );
    for c in &r.connections {
        println!(
            "  connection {}: {} -> {}: {} sent, {} received",
            c.id,
            c.local.as_deref().unwrap_or("?"),
            c.remote.as_deref().unwrap_or("?"),
            human_bytes(c.bytes_sent),
            human_bytes(c.bytes_received)
        );
    }
}
