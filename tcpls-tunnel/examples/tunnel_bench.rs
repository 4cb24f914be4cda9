//! Benchmarks of the TCPLS tunnel on loopback (thesis §5.4), everything in this process:
//!
//! * goodput of one download: plain TCP, direct TCPLS (one stream), through the tunnel;
//! * time to first byte of a new connection (request sent → first response byte);
//! * requests per second with 800 B, 32 KiB and 4 MiB responses (a new connection each);
//! * load time of a 4 KB object while a bulk download runs through the same tunnel, with the
//!   tunnel's late multiplexing (small transmit high water + TCP_NOTSENT_LOWAT) and without.
//!
//! Every response byte is verified. Run:
//! `cargo run --release -p tcpls-tunnel --example tunnel_bench -- [--json] [--bytes 512M] [--secs 3]`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tcpls_tunnel::tunnel::{Concentrator, Frontend, Target, TunnelClient, TunnelConfig};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

// The tests' certificate and bottleneck link (`slow_link`), shared rather than copied.
#[path = "../tests/tunnel_support/mod.rs"]
mod tunnel_support;
use tunnel_support::{slow_link, Pki};

/// Response bytes: the pattern stream of this seed (`tcpls-pattern`, the payload of `tcpls perf`).
const SEED: u64 = 0;

/// Sends `size` pattern bytes (u64::MAX: until the peer goes away), 256 KiB per write.
async fn send_pattern<W: AsyncWrite + Unpin>(w: &mut W, size: u64) -> std::io::Result<()> {
    let mut sent = 0u64;
    while sent < size {
        let n = (size - sent).min(256 << 10) as usize;
        let chunk = tcpls_pattern::chunk(SEED, sent, n);
        w.write_all(chunk).await?;
        sent += chunk.len() as u64;
    }
    Ok(())
}

/// Reads to the end, checking every byte against the pattern; returns (bytes, time to first byte).
async fn recv_pattern<R: AsyncRead + Unpin>(r: &mut R, started: Instant) -> (u64, Duration) {
    let mut buf = vec![0u8; 256 << 10];
    let mut off = 0u64;
    let mut ttfb = None;
    loop {
        let n = r.read(&mut buf).await.expect("read");
        if n == 0 {
            return (off, ttfb.unwrap_or_default());
        }
        ttfb.get_or_insert_with(|| started.elapsed());
        assert!(tcpls_pattern::verify(SEED, off, &buf[..n]), "response corrupted in bytes {off}..{}", off + n as u64);
        off += n as u64;
    }
}

/// The destination: a request is the response size (u64, big endian); the answer is that many
/// pattern bytes, then FIN.
async fn source_server() -> SocketAddr {
    let l = tcpls_tunnel::frontend::listen("127.0.0.1:0".parse().unwrap()).unwrap();
    let a = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let _ = s.set_nodelay(true);
            tokio::spawn(async move {
                let mut req = [0u8; 8];
                s.read_exact(&mut req).await?;
                send_pattern(&mut s, u64::from_be_bytes(req)).await?;
                s.shutdown().await
            });
        }
    });
    a
}

/// Direct TCPLS: a server answering requests on streams like `source_server`, and a session
/// (through a bottleneck of `link` bit/s if given).
async fn direct_tcpls(pki: &Pki, link: Option<u64>) -> tcpls::Session {
    let l = tcpls::TcplsListener::bind("127.0.0.1:0".parse().unwrap(), pki.server()).await.unwrap();
    let mut addr = l.local_addr();
    tokio::spawn(async move {
        while let Some((session, _)) = l.accept().await {
            tokio::spawn(async move {
                while let Some((mut send, mut recv)) = session.accept_stream().await {
                    tokio::spawn(async move {
                        let mut req = [0u8; 8];
                        recv.read_exact(&mut req).await?;
                        send_pattern(&mut send, u64::from_be_bytes(req)).await?;
                        send.shutdown().await
                    });
                }
            });
        }
    });
    if let Some(bps) = link {
        addr = slow_link(addr, bps).await;
    }
    let name = tcpls::server_name_for("localhost").unwrap();
    tcpls::TcplsConnector::new(pki.client()).connect(addr, name).await.unwrap()
}

/// A tunnel (concentrator + client) with `cfg`, optionally through a bottleneck of `link` bit/s;
/// returns a forward listener's address to `dest`.
async fn tunnel(pki: &Pki, mut cfg: TunnelConfig, dest: SocketAddr, link: Option<u64>) -> SocketAddr {
    // The destinations are on loopback, which the default destination policy refuses.
    cfg.dest_policy = tcpls_tunnel::tunnel::DestPolicy::allow_all();
    let conc = Concentrator::bind(&["127.0.0.1:0".parse().unwrap()], pki.server(), cfg.clone()).await.unwrap();
    let mut addr = conc.local_addrs()[0];
    if let Some(bps) = link {
        addr = slow_link(addr, bps).await;
    }
    tokio::spawn(conc.run(|_| {}));
    let name = tcpls::server_name_for("localhost").unwrap();
    let client = TunnelClient::connect(addr, name, pki.client(), &[], cfg).await.unwrap();
    let l = tcpls_tunnel::frontend::listen("127.0.0.1:0".parse().unwrap()).unwrap();
    let fwd = l.local_addr().unwrap();
    tokio::spawn(async move { client.serve(l, Frontend::Forward(Target::Addr(dest))).await });
    fwd
}

/// One request over a new TCP connection to `to`: (bytes, time to first byte, total time).
async fn tcp_request(to: SocketAddr, size: u64) -> (u64, Duration, Duration) {
    let started = Instant::now();
    let mut s = TcpStream::connect(to).await.expect("connect");
    s.set_nodelay(true).unwrap();
    s.write_all(&size.to_be_bytes()).await.unwrap();
    let (n, ttfb) = recv_pattern(&mut s, started).await;
    assert_eq!(n, size, "short response");
    (n, ttfb, started.elapsed())
}

/// One request over a new stream of `session`.
async fn stream_request(session: &tcpls::Session, size: u64) -> (u64, Duration, Duration) {
    let started = Instant::now();
    let (mut send, mut recv) = session.open_stream().unwrap();
    send.write_all(&size.to_be_bytes()).await.unwrap();
    let (n, ttfb) = recv_pattern(&mut recv, started).await;
    assert_eq!(n, size, "short response");
    (n, ttfb, started.elapsed())
}

#[derive(Clone, Copy)]
enum Via<'a> {
    Tcp(SocketAddr),
    Tcpls(&'a tcpls::Session),
}

impl Via<'_> {
    async fn request(&self, size: u64) -> (u64, Duration, Duration) {
        match self {
            Via::Tcp(a) => tcp_request(*a, size).await,
            Via::Tcpls(s) => stream_request(s, size).await,
        }
    }
}

fn gbps(bytes: u64, d: Duration) -> f64 {
    bytes as f64 * 8.0 / d.as_secs_f64() / 1e9
}

/// CPU time of this whole process so far (user, system), from /proc/self/stat (clock ticks of
/// 10 ms); None where that file is missing. Everything of a measurement (source, proxies,
/// concentrator, sink) runs in this process, so the difference over a transfer is its CPU cost.
fn cpu_now() -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which is in parentheses and may hold spaces).
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
    let tick = 100.0; // USER_HZ, 100 on Linux
    Some((f.get(11)?.parse::<f64>().ok()? / tick, f.get(12)?.parse::<f64>().ok()? / tick))
}

/// A plain TCP relay on loopback to `to` (no encryption, 256 KiB copy buffers like the
/// tunnel's relay): two in a row carry the bytes over as many TCP connections as the tunnel.
async fn tcp_relay(to: SocketAddr) -> SocketAddr {
    let l = tcpls_tunnel::frontend::listen("127.0.0.1:0".parse().unwrap()).unwrap();
    let a = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut d = TcpStream::connect(to).await?;
                let _ = (s.set_nodelay(true), d.set_nodelay(true));
                tokio::io::copy_bidirectional_with_sizes(&mut s, &mut d, 256 << 10, 256 << 10).await
            });
        }
    });
    a
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn p(v: &[Duration], q: f64) -> Duration {
    let mut v = v.to_vec();
    v.sort();
    v[((v.len() - 1) as f64 * q) as usize]
}

/// Requests/s with `clients` concurrent request loops for `secs`.
async fn rps(via: Via<'_>, size: u64, clients: usize, secs: f64) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut loops = Vec::new();
    for _ in 0..clients {
        let (stop, done) = (stop.clone(), done.clone());
        loops.push(async move {
            while !stop.load(Ordering::Relaxed) {
                via.request(size).await;
                done.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    let timer = async {
        tokio::time::sleep(Duration::from_secs_f64(secs)).await;
        stop.store(true, Ordering::Relaxed);
    };
    let all = async {
        let mut set = Vec::new();
        for l in loops {
            set.push(l);
        }
        futures_join_all(set).await;
    };
    tokio::join!(timer, all);
    done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}

/// Polls every future to completion on this task (no extra dependency for join_all).
async fn futures_join_all<F: std::future::Future<Output = ()>>(futs: Vec<F>) {
    let mut futs: Vec<_> = futs.into_iter().map(Box::pin).map(Some).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for slot in futs.iter_mut() {
            if let Some(f) = slot {
                if f.as_mut().poll(cx).is_ready() {
                    *slot = None;
                } else {
                    pending = true;
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await
}

/// 4 KB object load times (new tunneled connection each), optionally under a bulk download
/// through the same tunnel.
async fn object_under_bulk(fwd: SocketAddr, bulk: bool, n: usize) -> Vec<Duration> {
    let stop = Arc::new(AtomicBool::new(false));
    let bulk_task = bulk.then(|| {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut s = TcpStream::connect(fwd).await.unwrap();
            s.write_all(&u64::MAX.to_be_bytes()).await.unwrap();
            let mut buf = vec![0u8; 256 << 10];
            let mut total = 0u64;
            while !stop.load(Ordering::Relaxed) {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(k) => total += k as u64,
                }
            }
            total
        })
    });
    if bulk {
        // Let the bulk transfer fill every queue on its way.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        times.push(tcp_request(fwd, 4000).await.2);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.store(true, Ordering::Relaxed);
    if let Some(t) = bulk_task {
        t.abort();
    }
    times
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn parse_size(s: &str) -> u64 {
    let (n, m) = match s.chars().last() {
        Some('K') => (&s[..s.len() - 1], 1 << 10),
        Some('M') => (&s[..s.len() - 1], 1 << 20),
        Some('G') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    n.parse::<u64>().expect("size") * m
}

/// What every part of the benchmark shares: the options, and the servers set up once.
struct Bench {
    args: Vec<String>,
    json: bool,
    bytes: u64,
    secs: f64,
    runs: usize,
    link_mbps: u64,
    pki: Pki,
    /// The source server every way fetches from.
    src: SocketAddr,
    /// A direct TCPLS session to the source's TCPLS twin.
    session: tcpls::Session,
    /// The tunnel's forward to the source, with the tuned configuration.
    fwd: SocketAddr,
    /// The tunnel's late multiplexing knobs (defaults: TunnelConfig::default()).
    tuned: TunnelConfig,
}

impl Bench {
    fn arg(&self, name: &str) -> Option<String> {
        self.args.iter().position(|a| a == name).and_then(|i| self.args.get(i + 1)).cloned()
    }

    fn log(&self, m: String) {
        if !self.json {
            println!("{m}");
        }
    }

    /// The tunnel without late multiplexing: TCPLS defaults, no TCP_NOTSENT_LOWAT.
    fn legacy() -> TunnelConfig {
        TunnelConfig { session: tcpls::SessionConfig::default(), ..Default::default() }
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let bytes = arg("--bytes").map(|s| parse_size(&s)).unwrap_or(512 << 20);
    let secs: f64 = arg("--secs").map(|s| s.parse().expect("--secs")).unwrap_or(3.0);
    let runs: usize = arg("--runs").map(|s| s.parse().expect("--runs")).unwrap_or(3);
    let link_mbps: u64 = arg("--link-mbps").map(|s| s.parse().expect("--link-mbps")).unwrap_or(200);
    let mut tuned = TunnelConfig::default();
    if let Some(v) = arg("--lowat") {
        tuned.session.notsent_lowat = Some(parse_size(&v) as u32);
    }
    if let Some(v) = arg("--high-water") {
        tuned.session.transmit_high_water = parse_size(&v) as usize;
    }
    let parts: Vec<String> = args.windows(2).filter(|w| w[0] == "--part").map(|w| w[1].clone()).collect();
    let part = |name: &str| parts.is_empty() || parts.iter().any(|p| p == name);

    let pki = Pki::new();
    let src = source_server().await;
    let session = direct_tcpls(&pki, None).await;
    let fwd = tunnel(&pki, tuned.clone(), src, None).await;
    let json = args.iter().any(|a| a == "--json");
    let bench = Bench { args: args.clone(), json, bytes, secs, runs, link_mbps, pki, src, session, fwd, tuned };
    let mut out = serde_json::Map::new();
    out.insert("bytes".into(), bytes.into());
    if part("goodput") {
        goodput(&bench, &mut out).await;
    }
    if part("goodput_link") {
        goodput_link(&bench, &mut out).await;
    }
    if part("ttfb") {
        ttfb(&bench, &mut out).await;
    }
    if part("rps") {
        requests_per_second(&bench, &mut out).await;
    }
    if part("objects") {
        objects(&bench, &mut out).await;
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&serde_json::Value::Object(out)).unwrap());
    }
}

/// Per way: its name, the goodput of each repetition, and (user, system) CPU seconds per GiB.
type Row<'a> = (&'a str, Vec<f64>, (f64, f64));

/// Bulk goodput and CPU per GiB of every way, then the ratios between them.
async fn goodput(b: &Bench, out: &mut serde_json::Map<String, serde_json::Value>) {
    let fwd_legacy = tunnel(&b.pki, Bench::legacy(), b.src, None).await;
    let relayed = tcp_relay(tcp_relay(b.src).await).await;
    let mut goodput = serde_json::Map::new();
    let mut reps = serde_json::Map::new();
    let mut cpu = serde_json::Map::new();
    // `tcp_2relays`: the tunnel's three TCP connections without TLS (source -> relay ->
    // relay -> sink), what the tunnel's extra connections cost by themselves.
    let vias = [
        ("tcp", Via::Tcp(b.src)),
        ("tcp_2relays", Via::Tcp(relayed)),
        ("tcpls", Via::Tcpls(&b.session)),
        ("tunnel", Via::Tcp(b.fwd)),
        ("tunnel_no_lowat", Via::Tcp(fwd_legacy)),
    ];
    // `--vias tcpls,tunnel` measures only these (e.g. to profile one of them).
    let only = b.arg("--vias");
    let wanted = |name: &str| only.as_deref().is_none_or(|o| o.split(',').any(|v| v == name));
    let vias: Vec<_> = vias.into_iter().filter(|(n, _)| wanted(n)).collect();
    let all = goodput_repetitions(b, &vias).await;
    let runs = b.runs;
    for (name, v, (user, sys)) in &all {
        let best = v.iter().cloned().fold(0.0f64, f64::max);
        let list: Vec<String> = v.iter().map(|g| format!("{g:.2}")).collect();
        b.log(format!(
            "goodput {name:>16}: {best:6.2} Gbit/s ({} MiB, best of {runs}; each: {}); \
             CPU {:.3} s/GiB (user {user:.3}, sys {sys:.3}; mean)",
            b.bytes >> 20,
            list.join(" "),
            user + sys,
        ));
        goodput.insert((*name).into(), best.into());
        reps.insert((*name).into(), v.clone().into());
        cpu.insert((*name).into(), serde_json::json!({ "user_s_per_gib": user, "sys_s_per_gib": sys }));
    }
    out.insert("cpu".into(), cpu.into());
    goodput_ratios(b, &all, &goodput, out);
    out.insert("goodput_gbps".into(), goodput.into());
    out.insert("goodput_reps_gbps".into(), reps.into());
}

/// Repetitions interleave the ways (rep 1 of each, then rep 2...), so that a change of the
/// machine's load hits all of them alike and the ratios of one repetition compare. Per way:
/// goodput of each repetition, and (user, system) CPU seconds per GiB summed.
async fn goodput_repetitions<'a>(b: &Bench, vias: &[(&'a str, Via<'_>)]) -> Vec<Row<'a>> {
    let mut all: Vec<Row> = vias.iter().map(|(n, _)| (*n, vec![], (0.0, 0.0))).collect();
    for _ in 0..b.runs {
        for (name, via) in vias {
            let before = cpu_now();
            let (n, _, t) = via.request(b.bytes).await;
            let row = all.iter_mut().find(|(k, _, _)| k == name).unwrap();
            row.1.push(gbps(n, t));
            if let (Some(before), Some(after)) = (before, cpu_now()) {
                let gib = n as f64 / (1u64 << 30) as f64;
                row.2 .0 += (after.0 - before.0) / gib / b.runs as f64;
                row.2 .1 += (after.1 - before.1) / gib / b.runs as f64;
            }
        }
    }
    all
}

/// The tunnel against direct TCPLS, and each with TLS against without, in goodput and CPU.
fn goodput_ratios(
    b: &Bench,
    all: &[Row<'_>],
    goodput: &serde_json::Map<String, serde_json::Value>,
    out: &mut serde_json::Map<String, serde_json::Value>,
) {
    if let (Some(t), Some(d)) = (goodput.get("tunnel"), goodput.get("tcpls")) {
        let ratio = t.as_f64().unwrap() / d.as_f64().unwrap();
        let get = |k: &str| all.iter().find(|(n, _, _)| *n == k).map(|(_, v, _)| v.clone()).unwrap();
        let per: Vec<String> = get("tunnel").iter().zip(get("tcpls")).map(|(t, d)| format!("{:.2}", t / d)).collect();
        b.log(format!(
            "tunnel / direct TCPLS goodput: {:.0}% (best/best; per repetition: {})",
            ratio * 100.0,
            per.join(" ")
        ));
        out.insert("tunnel_vs_tcpls".into(), ratio.into());
    }
    // The same connections with and without TLS: the tunnel against the plain relay chain,
    // next to direct TCPLS against plain TCP.
    let best = |k: &str| goodput.get(k).and_then(|v| v.as_f64());
    if let (Some(t), Some(r), Some(d), Some(p)) = (best("tunnel"), best("tcp_2relays"), best("tcpls"), best("tcp")) {
        b.log(format!("with TLS / without (best/best): tunnel / tcp_2relays {:.2}, tcpls / tcp {:.2}", t / r, d / p));
        out.insert("tunnel_vs_tcp_2relays".into(), (t / r).into());
        out.insert("tcpls_vs_tcp".into(), (d / p).into());
    }
    // On a CPU-bound loopback run goodput follows 1 / CPU per GiB: the CPU ratio is what the
    // goodput ratio tends to, and the two TCP connections the tunnel adds (what
    // `tcp_2relays` costs beyond `tcp`) bound it even with a free relay.
    let cpu_of = |k: &str| all.iter().find(|(n, _, _)| *n == k).map(|(_, _, (u, s))| u + s);
    if let (Some(t), Some(d)) = (cpu_of("tunnel"), cpu_of("tcpls")) {
        b.log(format!(
            "tunnel / direct TCPLS CPU per GiB: {:.2}x (goodput ratio on a CPU-bound run: {:.2})",
            t / d,
            d / t
        ));
        out.insert("tunnel_vs_tcpls_cpu".into(), (t / d).into());
        if let (Some(r), Some(p)) = (cpu_of("tcp_2relays"), cpu_of("tcp")) {
            let bound = d / (d + (r - p));
            b.log(format!(
                "bound from the two extra TCP connections alone (tcpls / (tcpls + tcp_2relays - tcp) CPU): {bound:.2}"
            ));
            out.insert("bound_extra_connections".into(), bound.into());
        }
    }
}

/// The same through a bottleneck link (network-bound rather than CPU-bound).
async fn goodput_link(b: &Bench, out: &mut serde_json::Map<String, serde_json::Value>) {
    let gbit = b.arg("--goodput-link-mbps").map(|s| s.parse::<u64>().expect("mbps")).unwrap_or(1000);
    let linked_session = direct_tcpls(&b.pki, Some(gbit * 1_000_000)).await;
    let linked_tunnel = tunnel(&b.pki, b.tuned.clone(), b.src, Some(gbit * 1_000_000)).await;
    let size = (b.bytes / 4).max(16 << 20);
    let mut row = serde_json::Map::new();
    for (name, via) in [("tcpls", Via::Tcpls(&linked_session)), ("tunnel", Via::Tcp(linked_tunnel))] {
        let mut best = 0.0f64;
        for _ in 0..b.runs {
            let (n, _, t) = via.request(size).await;
            best = best.max(gbps(n, t));
        }
        b.log(format!("goodput over a {gbit} Mbit/s link {name:>8}: {:7.1} Mbit/s ({} MiB)", best * 1e3, size >> 20));
        row.insert(name.into(), (best * 1e3).into());
    }
    let ratio = row["tunnel"].as_f64().unwrap() / row["tcpls"].as_f64().unwrap();
    b.log(format!("tunnel / direct TCPLS goodput over the link: {:.0}%", ratio * 100.0));
    row.insert("link_mbps".into(), gbit.into());
    row.insert("tunnel_vs_tcpls".into(), ratio.into());
    out.insert("goodput_link_mbps".into(), row.into());
}

/// Time to the first byte of a small response.
async fn ttfb(b: &Bench, out: &mut serde_json::Map<String, serde_json::Value>) {
    let mut ttfb = serde_json::Map::new();
    for (name, via) in [("tcp", Via::Tcp(b.src)), ("tcpls_stream", Via::Tcpls(&b.session)), ("tunnel", Via::Tcp(b.fwd))]
    {
        let mut v = Vec::new();
        for _ in 0..200 {
            v.push(via.request(800).await.1);
        }
        let m = median(v);
        b.log(format!("time to first byte {name:>12}: {:7.3} ms (median of 200, 800 B responses)", ms(m)));
        ttfb.insert(name.into(), ms(m).into());
    }
    out.insert("ttfb_ms".into(), ttfb.into());
}

/// 16 concurrent clients, a new connection (or stream) per request.
async fn requests_per_second(b: &Bench, out: &mut serde_json::Map<String, serde_json::Value>) {
    let mut rates = serde_json::Map::new();
    for (label, size) in [("800B", 800u64), ("32KiB", 32 << 10), ("4MiB", 4 << 20)] {
        let mut row = serde_json::Map::new();
        for (name, via) in
            [("tcp", Via::Tcp(b.src)), ("tcpls_stream", Via::Tcpls(&b.session)), ("tunnel", Via::Tcp(b.fwd))]
        {
            let r = rps(via, size, 16, b.secs).await;
            b.log(format!("requests/s {label:>6} {name:>12}: {r:9.0}"));
            row.insert(name.into(), r.into());
        }
        rates.insert(label.into(), row.into());
    }
    out.insert("requests_per_s".into(), rates.into());
}

/// 4 KB objects, idle and under a bulk download through the same tunnel, on loopback and
/// behind a bottleneck link between the client and the concentrator.
async fn objects(b: &Bench, out: &mut serde_json::Map<String, serde_json::Value>) {
    let link_mbps = b.link_mbps;
    let link = link_mbps * 1_000_000;
    let slow = tunnel(&b.pki, b.tuned.clone(), b.src, Some(link)).await;
    let slow_legacy = tunnel(&b.pki, Bench::legacy(), b.src, Some(link)).await;
    let mut objects = serde_json::Map::new();
    let cases = [
        ("loopback_idle".to_string(), b.fwd, false),
        ("loopback_under_bulk".to_string(), b.fwd, true),
        (format!("link{link_mbps}M_idle"), slow, false),
        (format!("link{link_mbps}M_under_bulk"), slow, true),
        (format!("link{link_mbps}M_under_bulk_no_lowat"), slow_legacy, true),
    ];
    for (name, to, bulk) in cases {
        let v = object_under_bulk(to, bulk, 100).await;
        let (p50, p95) = (ms(p(&v, 0.5)), ms(p(&v, 0.95)));
        b.log(format!("4 KB object {name:>30}: median {p50:8.3} ms, p95 {p95:8.3} ms (100 fetches)"));
        objects.insert(name, serde_json::json!({ "median_ms": p50, "p95_ms": p95 }));
    }
    out.insert("object_4kb".into(), objects.into());
}
