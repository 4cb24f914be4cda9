//! `experiments tunnel` (thesis §5.4, Figs 5.6-5.8): direct TCP, direct TCPLS and a TCP
//! connection through the TCPLS tunnel (client → concentrator → TCP server), compared on
//! * goodput: a time-bounded upload, client to server, repeated (Fig. 5.6);
//! * latency: time from "open a connection" to the first byte of application data, 100
//!   openings each (Fig. 5.7); for the tunnel both with a new tunnel session per opening (the
//!   thesis's case: TCPLS handshake + tunnel request + TCP connect) and over an established one;
//! * requests per second: 1000 sequential 800-byte requests on one connection, each waiting for
//!   its response of 800 B, 32 KB or 4 MB (Fig. 5.8).
//!
//! Every end runs on its own thread (client, TCP server, TCPLS server, concentrator), all in
//! the server namespace of a one-path test bed, talking to that namespace's own (non-loopback)
//! address: the traffic stays on the namespace's loopback device, so like the thesis's 100G
//! back-to-back link this measures CPU, not a network. The non-loopback address is on purpose:
//! a concentrator may refuse loopback destinations by policy (the destination policy of
//! `tcpls tunnel server`), a private address is an ordinary destination.
//!
//! The tunnel client is the library's `TunnelClient` used by the application directly
//! (`open`, then the stream carries the connection's bytes), as the thesis's client was; both
//! tunnel ends use `TunnelConfig::default()` (late multiplexing: 64 KiB transmit high water and
//! TCP_NOTSENT_LOWAT).

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use serde_json::json;
use tcpls::{server_name_for, TcplsConnector};
use tcpls_netem::Side;
use tcpls_tunnel::tunnel::{Target, TunnelClient, TunnelConfig};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::output::{round, write_all};
use crate::pattern::Verifier;
use crate::pki::Pki;
use crate::plot::{Panel, Series, XAxis};
use crate::tunnel_bed::{self, encode_request, CORRUPTED, RESPONSE_SEED, UPLOAD_SEED};
use crate::{note, path, topology, Opts, Summary};

pub const NAME: &str = "tunnel";
const TCP_PORT: u16 = 5001;
const TCPLS_PORT: u16 = 5002;
const CONCENTRATOR_PORT: u16 = 5003;
/// Response of the latency measurement (a response header).
const LATENCY_RESPONSE: u64 = 800;
pub const PROTOCOLS: [&str; 3] = ["tcp", "tcpls", "tunnel"];

struct Params {
    goodput_secs: f64,
    goodput_reps: usize,
    openings: usize,
    /// (response size, requests).
    requests: Vec<(u64, usize)>,
}

impl Params {
    fn new(quick: bool) -> Params {
        if quick {
            Params {
                goodput_secs: 0.5,
                goodput_reps: 1,
                openings: 20,
                requests: vec![(800, 200), (32_000, 200), (4_000_000, 10)],
            }
        } else {
            // The thesis: 10 GB 100 times, 100 openings, 1000 requests (sizes 800 B, 32 KB, 4 MB).
            Params {
                goodput_secs: 3.0,
                goodput_reps: 3,
                openings: 100,
                requests: vec![(800, 1000), (32_000, 1000), (4_000_000, 1000)],
            }
        }
    }
}

/// Where the three services listen.
#[derive(Clone, Copy)]
struct Addrs {
    tcp: SocketAddr,
    tcpls: SocketAddr,
    concentrator: SocketAddr,
}

type Io = (Box<dyn AsyncRead + Unpin + Send>, Box<dyn AsyncWrite + Unpin + Send>);

/// Client TLS config and the addresses.
#[derive(Clone)]
struct Client {
    tls: std::sync::Arc<rustls::ClientConfig>,
    addrs: Addrs,
}

/// What keeps a connection's session alive while its streams are used.
enum Keep {
    None,
    Session(tcpls::Session),
    Tunnel(TunnelClient),
}

impl Keep {
    async fn close(self) {
        match self {
            Keep::None => {}
            Keep::Session(s) => crate::tcpls_run::close(&s).await,
            Keep::Tunnel(t) => crate::tcpls_run::close(&t.session()).await,
        }
    }
}

impl Client {
    /// Opens one connection of `protocol`: a TCP connection, a TCPLS session and a stream, or a
    /// tunnel session and a tunnelled connection to the TCP server.
    async fn open(&self, protocol: &str) -> Result<(Io, Keep), String> {
        let name = || server_name_for("localhost").map_err(|e| e.to_string());
        match protocol {
            "tcp" => {
                let s =
                    tokio::net::TcpStream::connect(self.addrs.tcp).await.map_err(|e| format!("TCP connect: {e}"))?;
                let _ = s.set_nodelay(true);
                let (r, w) = s.into_split();
                Ok(((Box::new(r), Box::new(w)), Keep::None))
            }
            "tcpls" => {
                let session = TcplsConnector::new(self.tls.clone())
                    .connect(self.addrs.tcpls, name()?)
                    .await
                    .map_err(|e| format!("TCPLS connect: {e}"))?;
                let (send, recv) = session.open_stream().map_err(|e| format!("open stream: {e}"))?;
                Ok(((Box::new(recv), Box::new(send)), Keep::Session(session)))
            }
            _ => {
                let tunnel = self.tunnel_session().await?;
                let io = self.tunnelled(&tunnel).await?;
                Ok((io, Keep::Tunnel(tunnel)))
            }
        }
    }

    async fn tunnel_session(&self) -> Result<TunnelClient, String> {
        let name = server_name_for("localhost").map_err(|e| e.to_string())?;
        TunnelClient::connect(self.addrs.concentrator, name, self.tls.clone(), &[], TunnelConfig::default())
            .await
            .map_err(|e| format!("tunnel session: {e}"))
    }

    async fn tunnelled(&self, tunnel: &TunnelClient) -> Result<Io, String> {
        let (send, recv) = tunnel.open(&Target::Addr(self.addrs.tcp)).await.map_err(|e| format!("tunnel open: {e}"))?;
        Ok((Box::new(recv), Box::new(send)))
    }
}

/// Reads a `size`-byte response, checking it; returns the time to its first byte after `t0`.
async fn read_response(r: &mut (dyn AsyncRead + Unpin + Send), size: u64, t0: Instant) -> Result<Duration, String> {
    let mut v = Verifier::new(RESPONSE_SEED);
    let mut buf = vec![0u8; (256 << 10).min(size.max(1) as usize)];
    let mut first = None;
    while v.len() < size {
        let want = (size - v.len()).min(buf.len() as u64) as usize;
        let n = r.read(&mut buf[..want]).await.map_err(|e| format!("response: {e}"))?;
        if n == 0 {
            return Err(format!("response ended after {} of {size} bytes", v.len()));
        }
        first.get_or_insert_with(|| t0.elapsed());
        v.feed(&buf[..n]);
    }
    if !v.verified(size) {
        return Err("the response bytes were not the pattern".into());
    }
    Ok(first.unwrap_or_default())
}

/// Uploads for `secs`, then waits for the server's count: (bytes, seconds until the count came).
async fn upload(client: &Client, protocol: &str, secs: f64) -> Result<(u64, f64), String> {
    let ((mut r, mut w), keep) = client.open(protocol).await?;
    let e = |x: std::io::Error| format!("upload: {x}");
    w.write_all(&encode_request(0, true)).await.map_err(e)?;
    let t0 = Instant::now();
    let stop = t0 + Duration::from_secs_f64(secs);
    let mut off = 0u64;
    while Instant::now() < stop {
        let c = crate::pattern::chunk(UPLOAD_SEED, off, 256 << 10);
        w.write_all(c).await.map_err(e)?;
        off += c.len() as u64;
    }
    w.shutdown().await.map_err(e)?;
    let mut answer = [0u8; 8];
    r.read_exact(&mut answer).await.map_err(|x| format!("upload count: {x}"))?;
    let elapsed = t0.elapsed().as_secs_f64();
    keep.close().await;
    match u64::from_be_bytes(answer) {
        CORRUPTED => Err(format!("{protocol}: the server received other bytes than were sent")),
        n if n != off => Err(format!("{protocol}: the server counted {n} bytes of {off}")),
        n => Ok((n, elapsed)),
    }
}

/// Opens a connection and measures the time to the first byte of a response (ms).
async fn first_byte(client: &Client, protocol: &str, tunnel: Option<&TunnelClient>) -> Result<f64, String> {
    let t0 = Instant::now();
    let ((mut r, mut w), keep) = match tunnel {
        Some(t) => (client.tunnelled(t).await?, Keep::None),
        None => client.open(protocol).await?,
    };
    w.write_all(&encode_request(LATENCY_RESPONSE, false)).await.map_err(|e| format!("request: {e}"))?;
    w.flush().await.map_err(|e| format!("request: {e}"))?;
    let ttfb = read_response(r.as_mut(), LATENCY_RESPONSE, t0).await?;
    drop(w);
    keep.close().await;
    Ok(ttfb.as_secs_f64() * 1000.0)
}

/// `count` sequential requests for `size`-byte responses on one connection: requests/s.
async fn requests(client: &Client, protocol: &str, size: u64, count: usize) -> Result<f64, String> {
    let ((mut r, mut w), keep) = client.open(protocol).await?;
    let request = encode_request(size, false);
    let t0 = Instant::now();
    for _ in 0..count {
        w.write_all(&request).await.map_err(|e| format!("request: {e}"))?;
        w.flush().await.map_err(|e| format!("request: {e}"))?;
        read_response(r.as_mut(), size, Instant::now()).await?;
    }
    let rps = count as f64 / t0.elapsed().as_secs_f64();
    drop(w);
    keep.close().await;
    Ok(rps)
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn percentile(mut v: Vec<f64>, p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// Everything the client measured.
struct Measured {
    /// Per protocol: Gbit/s of each repetition.
    goodput: Vec<Vec<f64>>,
    /// Per latency variant: ms of each opening.
    latency: Vec<(String, Vec<f64>)>,
    /// Per protocol, per response size: requests per second.
    rps: Vec<Vec<f64>>,
}

async fn measure(client: Client, p: Params) -> Result<Measured, String> {
    let mut goodput = vec![Vec::new(); PROTOCOLS.len()];
    for rep in 0..p.goodput_reps {
        for (i, proto) in PROTOCOLS.iter().enumerate() {
            crate::note(&format!("{NAME}: goodput, {proto}, repetition {}", rep + 1));
            let (bytes, secs) = upload(&client, proto, p.goodput_secs).await?;
            goodput[i].push(bytes as f64 * 8.0 / secs / 1e9);
        }
    }
    crate::note(&format!("{NAME}: latency, {} openings each", p.openings));
    let established = client.tunnel_session().await?;
    let mut latency: Vec<(String, Vec<f64>)> = ["tcp", "tcpls", "tunnel", "tunnel_established"]
        .iter()
        .map(|k| (k.to_string(), Vec::with_capacity(p.openings)))
        .collect();
    // Interleaved, so the machine's load hits all alike.
    for _ in 0..p.openings {
        for (k, v) in latency.iter_mut() {
            let ms = match k.as_str() {
                "tunnel_established" => first_byte(&client, "tunnel", Some(&established)).await?,
                proto => first_byte(&client, proto, None).await?,
            };
            v.push(ms);
        }
    }
    crate::tcpls_run::close(&established.session()).await;
    let mut rps = vec![Vec::new(); PROTOCOLS.len()];
    for (size, count) in &p.requests {
        for (i, proto) in PROTOCOLS.iter().enumerate() {
            crate::note(&format!("{NAME}: {count} requests for {size} B, {proto}"));
            rps[i].push(requests(&client, proto, *size, *count).await?);
        }
    }
    Ok(Measured { goodput, latency, rps })
}

/// Runs the experiment and writes `tunnel.{csv,png,json}`.
pub fn run(opts: &Opts) -> Result<Summary, String> {
    let p = Params::new(opts.quick);
    let pki = Pki::new()?;
    let topo = topology(vec![path(1.0, 100.0)])?;
    let ip: IpAddr = topo.path(0).info().server_addr().ok_or("the path has no server address")?;
    let addrs = Addrs {
        tcp: SocketAddr::new(ip, TCP_PORT),
        tcpls: SocketAddr::new(ip, TCPLS_PORT),
        concentrator: SocketAddr::new(ip, CONCENTRATOR_PORT),
    };
    let servers = [
        tunnel_bed::tcp_server(&topo, addrs.tcp)?,
        tunnel_bed::tcpls_server(&topo, addrs.tcpls, pki.server.clone())?,
        tunnel_bed::concentrator(&topo, addrs.concentrator, pki.server.clone())?,
    ];
    let client = Client { tls: pki.client.clone(), addrs };
    let (secs, reps, openings) = (p.goodput_secs, p.goodput_reps, p.openings);
    let sizes: Vec<(u64, usize)> = p.requests.clone();
    let handle = topo
        .spawn_in(Side::Server, move || -> Result<Measured, String> {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
            rt.block_on(async move {
                tokio::time::timeout(Duration::from_secs(600), measure(client, p))
                    .await
                    .map_err(|_| "the client gave up after 600 s".to_string())?
            })
        })
        .map_err(|e| format!("cannot start the client thread: {e}"))?;
    let m = handle.join().map_err(|_| "the client panicked".to_string())??;
    drop(servers);
    drop(topo);
    note(&format!("{NAME}: done"));

    let goodput: serde_json::Map<String, serde_json::Value> = PROTOCOLS
        .iter()
        .zip(&m.goodput)
        .map(|(k, v)| {
            let r: Vec<f64> = v.iter().map(|x| round(*x, 3)).collect();
            (k.to_string(), json!({ "median_gbps": round(median(v.clone()), 3), "runs_gbps": r }))
        })
        .collect();
    let latency: serde_json::Map<String, serde_json::Value> = m
        .latency
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                json!({
                    "median_ms": round(median(v.clone()), 3),
                    "p10_ms": round(percentile(v.clone(), 0.1), 3),
                    "p90_ms": round(percentile(v.clone(), 0.9), 3),
                    "mean_ms": round(v.iter().sum::<f64>() / v.len().max(1) as f64, 3),
                }),
            )
        })
        .collect();
    let rps: serde_json::Map<String, serde_json::Value> = PROTOCOLS
        .iter()
        .zip(&m.rps)
        .map(|(k, v)| {
            let per: serde_json::Map<String, serde_json::Value> =
                sizes.iter().zip(v).map(|((size, _), r)| (size.to_string(), json!(round(*r, 1)))).collect();
            (k.to_string(), json!(per))
        })
        .collect();
    let summary = json!({
        "experiment": NAME,
        "quick": opts.quick,
        "measures": "CPU, not a network: client, concentrator and servers on one host (one namespace), each on its own thread",
        "goodput_seconds_per_run": secs,
        "goodput_runs": reps,
        "openings": openings,
        "requests": sizes.iter().map(|(s, c)| json!({ "response_bytes": s, "requests": c })).collect::<Vec<_>>(),
        "request_bytes": tunnel_bed::REQUEST_LEN,
        "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "goodput": goodput,
        "latency": latency,
        "requests_per_second": rps,
        "verified": true,
    });
    write_all(
        opts,
        NAME,
        "TCP, TCPLS and the TCPLS tunnel (one host: CPU, not a network)",
        &panels(&m, &sizes),
        &summary,
    )?;
    Ok(summary)
}

fn panels(m: &Measured, sizes: &[(u64, usize)]) -> Vec<Panel> {
    let label = |k: &str| match k {
        "tcp" => "TCP".to_string(),
        "tcpls" => "TCPLS".to_string(),
        "tunnel" => "tunnel (new session each)".to_string(),
        "tunnel_established" => "tunnel (established session)".to_string(),
        other => other.to_string(),
    };
    let goodput = Panel {
        title: "Goodput of each upload (Gbit/s)".into(),
        y_label: "Gbit/s".into(),
        series: PROTOCOLS
            .iter()
            .zip(&m.goodput)
            .map(|(k, v)| Series {
                label: if *k == "tunnel" { "tunnel".into() } else { label(k) },
                points: v.iter().enumerate().map(|(i, g)| ((i + 1) as f64, *g)).collect(),
            })
            .collect(),
        markers: Vec::new(),
        legend_top: true,
        x_axis: XAxis::Linear("run".into()),
        dashed: Vec::new(),
    };
    // Latency as a distribution: sorted openings, so the curve reads as percentiles; the slowest
    // 5 % (scheduling hiccups of the busy machine, up to tens of ms) would flatten the rest.
    let latency = Panel {
        title: "Time to first byte of a new connection, sorted, fastest 95 % (ms)".into(),
        y_label: "ms".into(),
        series: m
            .latency
            .iter()
            .map(|(k, v)| {
                let mut s = v.clone();
                s.sort_by(f64::total_cmp);
                let n = s.len().max(1) as f64;
                Series {
                    label: label(k),
                    points: s.iter().enumerate().map(|(i, x)| (100.0 * (i as f64 + 0.5) / n, *x)).collect(),
                }
            })
            .collect(),
        markers: Vec::new(),
        legend_top: true,
        x_axis: XAxis::Linear("percentile of the openings".into()),
        dashed: Vec::new(),
    };
    // Relative to TCP: the absolute rates differ by two orders of magnitude between sizes.
    let tcp: Vec<f64> = m.rps.first().cloned().unwrap_or_default();
    let tcp_text: Vec<String> = sizes.iter().zip(&tcp).map(|((size, _), r)| format!("{r:.0}/s for {size} B")).collect();
    let rps = Panel {
        title: format!("Requests per second relative to TCP — TCP: {}", tcp_text.join(", ")),
        y_label: "requests/s / TCP's".into(),
        series: PROTOCOLS
            .iter()
            .zip(&m.rps)
            .map(|(k, v)| Series {
                label: if *k == "tunnel" { "tunnel".into() } else { label(k) },
                points: sizes
                    .iter()
                    .zip(v)
                    .zip(&tcp)
                    .map(|(((size, _), r), t)| (*size as f64, r / t.max(1e-9)))
                    .collect(),
            })
            .collect(),
        markers: Vec::new(),
        legend_top: true,
        x_axis: XAxis::Log2("response size (bytes)".into()),
        dashed: Vec::new(),
    };
    vec![goodput, latency, rps]
}
