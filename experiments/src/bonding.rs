//! `experiments bonding`: one HTTP download over two uplinks, bonded by the TCPLS tunnel
//! (`tcpls tunnel client --bond`) and by Linux MPTCP, on unequal paths (40 Mbit/s 10 ms one way
//! and 10 Mbit/s 40 ms, Wi-Fi and LTE) and on equal ones (25 + 25 Mbit/s, 10 ms).
//!
//! Everything is the real programs, each in its namespace of a two-path tcpls-netem test bed:
//! `python3 -m http.server` serves a file of pseudo-random bytes in the server namespace; the
//! `tcpls` binary next to this one runs the concentrator there (both addresses) and the tunnel
//! client (SOCKS5) in the client namespace; `curl` downloads the file and its bytes are piped
//! through `sha256sum`. Four ways, in one run per topology:
//!
//! * `tunnel_one_path`: the tunnel client with the faster path only;
//! * `tunnel_bond`: the tunnel client with both paths and `--bond`;
//! * `mptcp`: `mptcpize run curl` against `mptcpize run python3 -m http.server` (both ends
//!   MPTCP, the kernel's default scheduler, a `subflow` endpoint for the second path);
//! * `tcp_fast_path`: plain TCP over the faster path.
//!
//! While each tunnel download runs, 4 KB requests go through the same tunnel every 250 ms (curl
//! through the SOCKS5 proxy), against the same requests on the idle tunnel before it: bonding
//! must not add head-of-line delay. Finally the scheduler itself: an aggregated upload with
//! `tcpls perf --aggregate --scheduler NAME` over the same two paths for earliest arrival,
//! lowest RTT and round robin. On the unequal paths, the redundant mode too
//! (`bonding/redundant.rs`): a 50 datagrams/s UDP stream across a 3 s outage of one path, datagrams lost
//! with and without `--redundant`.

mod redundant;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use tcpls_netem::{Side, Topology};

use crate::output::{round, write_all};
use crate::plot::{Panel, Series, XAxis};
use crate::trace::{goodput_series, last_read, mean_mbps};
use crate::{note, path, topology, Opts, Summary, BIN};

pub const NAME: &str = "bonding";
const HTTP_PORT: u16 = 8000;
const MPTCP_HTTP_PORT: u16 = 8001;
const TUNNEL_PORT: u16 = 4443;
const PERF_PORT: u16 = 5201;
const SOCKS: &str = "127.0.0.1:1080";
const SMALL: usize = 4096;
const SCHEDULERS: [&str; 3] = ["earliest-arrival", "lowest-rtt", "round-robin"];

/// A topology: (one-way delay ms, rate Mbit/s) of each path, the faster first.
struct Topo {
    key: &'static str,
    title: &'static str,
    paths: [(f64, f64); 2],
}

const TOPOLOGIES: [Topo; 2] = [
    Topo { key: "unequal", title: "40 Mbit/s 10 ms + 10 Mbit/s 40 ms", paths: [(10.0, 40.0), (40.0, 10.0)] },
    Topo { key: "equal", title: "25 + 25 Mbit/s, 10 ms", paths: [(10.0, 25.0), (10.0, 25.0)] },
];

struct Params {
    bytes: u64,
    /// 4 KB requests measured idle and during each tunnel download.
    requests: usize,
    perf_bytes: &'static str,
}

impl Params {
    fn new(quick: bool) -> Params {
        if quick {
            Params { bytes: 16 << 20, requests: 6, perf_bytes: "16M" }
        } else {
            Params { bytes: 64 << 20, requests: 20, perf_bytes: "64M" }
        }
    }
}

/// A child process, killed (by its id) and reaped when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(mut cmd: Command, what: &str) -> Result<Proc, String> {
    cmd.spawn().map(Proc).map_err(|e| format!("cannot start {what}: {e}"))
}

/// The `tcpls` binary built with this one.
fn tcpls_bin() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let bin = exe.with_file_name("tcpls");
    if bin.exists() {
        Ok(bin)
    } else {
        Err(format!("{} is missing: build it with the experiments (cargo build --release -p tcpls-cli)", bin.display()))
    }
}

fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Waits until `addr` accepts a TCP connection from the namespace `side`.
fn wait_listening(topo: &Topology, side: Side, addr: SocketAddr, what: &str) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let up = topo
            .run_in(side, move || TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok())
            .map_err(|e| e.to_string())?;
        if up {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("{what} does not listen on {addr} after 20 s"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The files the servers share and the certificate, in a temporary directory.
struct Files {
    dir: PathBuf,
    sha256: String,
}

impl Files {
    fn new(bytes: u64) -> Result<Files, String> {
        let dir = std::env::temp_dir().join(format!("tcpls-bonding-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("www")).map_err(|e| e.to_string())?;
        let mut big = std::fs::File::create(dir.join("www/big")).map_err(|e| e.to_string())?;
        let mut written = 0u64;
        while written < bytes {
            let n = (bytes - written).min(1 << 20) as usize;
            let chunk = crate::pattern::to_vec(5, written, n);
            big.write_all(&chunk).map_err(|e| e.to_string())?;
            written += n as u64;
        }
        drop(big);
        std::fs::write(dir.join("www/small"), vec![b'x'; SMALL]).map_err(|e| e.to_string())?;
        let pki = tcpls_test::Pki::try_new()?;
        std::fs::write(dir.join("cert.pem"), &pki.cert_pem).map_err(|e| e.to_string())?;
        std::fs::write(dir.join("key.pem"), &pki.key_pem).map_err(|e| e.to_string())?;
        let out = Command::new("sha256sum").arg(dir.join("www/big")).output().map_err(|e| format!("sha256sum: {e}"))?;
        let sha256 = String::from_utf8_lossy(&out.stdout).split_whitespace().next().unwrap_or_default().to_string();
        Ok(Files { dir, sha256 })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One download: its reads (seconds since curl started, bytes) and whether the SHA-256 matched.
struct Download {
    reads: Vec<(f64, u64)>,
    bytes: u64,
    verified: bool,
}

impl Download {
    /// Goodput from the first byte to the last, Mbit/s.
    fn mbps(&self) -> f64 {
        let first = self.reads.first().map_or(0.0, |r| r.0);
        mean_mbps(&self.reads, first, last_read(&self.reads) + 1e-9)
    }
}

/// Runs `curl ARGS URL -o -` in the client namespace (optionally under mptcpize) and pipes what
/// it writes through `sha256sum`.
fn download(topo: &Topology, curl_args: &[&str], url: &str, mptcp: bool, want: &str) -> Result<Download, String> {
    let mut cmd = if mptcp {
        let mut c = topo.command(Side::Client, "mptcpize");
        c.args(["run", "curl"]);
        c
    } else {
        topo.command(Side::Client, "curl")
    };
    cmd.args(["-sS", "--fail", "--max-time", "300"]).args(curl_args).args([url, "-o", "-"]);
    cmd.stdout(Stdio::piped());
    let t0 = Instant::now();
    let mut curl = spawn(cmd, "curl")?;
    let mut sha = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("sha256sum: {e}"))?;
    let mut out = curl.0.stdout.take().ok_or("curl has no stdout")?;
    let mut sha_in = sha.stdin.take().ok_or("sha256sum has no stdin")?;
    let mut reads = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    let mut bytes = 0u64;
    loop {
        let n = out.read(&mut buf).map_err(|e| format!("reading curl: {e}"))?;
        if n == 0 {
            break;
        }
        reads.push((t0.elapsed().as_secs_f64(), n as u64));
        bytes += n as u64;
        sha_in.write_all(&buf[..n]).map_err(|e| format!("sha256sum: {e}"))?;
    }
    drop(sha_in);
    let status = curl.0.wait().map_err(|e| e.to_string())?;
    let sum = sha.wait_with_output().map_err(|e| e.to_string())?;
    let got = String::from_utf8_lossy(&sum.stdout).split_whitespace().next().unwrap_or_default().to_string();
    if !status.success() {
        return Err(format!("curl {url} failed ({status}) after {bytes} bytes"));
    }
    Ok(Download { reads, bytes, verified: got == want })
}

/// Times `n` 4 KB requests through the SOCKS5 proxy, one every 250 ms, in milliseconds.
fn small_requests(topo: &Topology, server: IpAddr, n: usize) -> Result<Vec<f64>, String> {
    let url = format!("http://{server}:{HTTP_PORT}/small");
    let mut times = Vec::new();
    for _ in 0..n {
        let out = topo
            .command(Side::Client, "curl")
            .args(["-sS", "--fail", "--max-time", "30", "--socks5", SOCKS, &url, "-o", "/dev/null"])
            .args(["-w", "%{time_total} %{size_download}"])
            .output()
            .map_err(|e| format!("curl: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut fields = text.split_whitespace();
        let secs: f64 = fields.next().and_then(|t| t.parse().ok()).ok_or(format!("curl -w: '{text}'"))?;
        let size: usize = fields.next().and_then(|t| t.parse().ok()).unwrap_or(0);
        if !out.status.success() || size != SMALL {
            return Err(format!("4 KB request failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
        }
        times.push(secs * 1000.0);
        std::thread::sleep(Duration::from_millis(250));
    }
    Ok(times)
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The tunnel client in the client namespace, SOCKS5 on [`SOCKS`], once its session is up.
fn tunnel_client(topo: &Topology, tcpls: &Path, files: &Files, servers: &[IpAddr], bond: bool) -> Result<Proc, String> {
    let mut cmd = topo.command(Side::Client, tcpls);
    cmd.args(["tunnel", "client", "--no-reconnect", "--server-name", "localhost", "--socks", SOCKS]);
    cmd.arg("--ca").arg(files.path("cert.pem"));
    cmd.arg("--concentrator").arg(SocketAddr::new(servers[0], TUNNEL_PORT).to_string());
    for s in &servers[1..] {
        cmd.arg("--path").arg(SocketAddr::new(*s, TUNNEL_PORT).to_string());
    }
    if bond {
        cmd.arg("--bond");
    }
    cmd.stderr(Stdio::piped());
    wait_for_session(spawn(cmd, "the tunnel client")?, servers.len())
}

/// Returns the tunnel client `p` (stderr piped) once it says that its session has `paths`
/// connections and it accepts.
fn wait_for_session(mut p: Proc, paths: usize) -> Result<Proc, String> {
    let stderr = p.0.stderr.take().ok_or("no stderr")?;
    let mut lines = BufReader::new(stderr).lines();
    let want = format!("({paths} connection(s))");
    loop {
        match lines.next() {
            Some(Ok(l)) if l.contains("accepting on") && l.contains(&want) => break,
            Some(Ok(_)) => continue,
            _ => return Err("the tunnel client exited before its session was up".into()),
        }
    }
    // Keep draining its log so that it never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Ok(p)
}

/// The tunnel download with 4 KB requests timed alongside it.
struct TunnelRun {
    download: Download,
    idle_ms: Vec<f64>,
    busy_ms: Vec<f64>,
}

fn tunnel_run(
    topo: &Topology,
    tcpls: &Path,
    files: &Files,
    servers: &[IpAddr],
    bond: bool,
    p: &Params,
) -> Result<TunnelRun, String> {
    let _client = tunnel_client(topo, tcpls, files, servers, bond)?;
    let idle_ms = small_requests(topo, servers[0], p.requests)?;
    let url = format!("http://{}:{HTTP_PORT}/big", servers[0]);
    let (busy_ms, download) = std::thread::scope(|s| {
        let d = s.spawn(|| download(topo, &["--socks5", SOCKS], &url, false, &files.sha256));
        // Let the download reach its rate before the requests start.
        std::thread::sleep(Duration::from_secs(2));
        let busy = small_requests(topo, servers[0], p.requests);
        let d = d.join().map_err(|_| "download thread panicked".to_string());
        (busy, d)
    });
    let download = download??;
    let busy_ms = busy_ms?;
    if last_read(&download.reads) < 2.0 + p.requests as f64 * 0.25 {
        note("the download ended before the 4 KB requests did: the busy latencies include idle ones");
    }
    Ok(TunnelRun { download, idle_ms, busy_ms })
}

/// `tcpls perf --aggregate --scheduler NAME` uploads over both paths: goodput, Mbit/s.
fn scheduler_runs(
    topo: &Topology,
    tcpls: &Path,
    files: &Files,
    servers: &[IpAddr],
    bytes: &str,
) -> Result<serde_json::Value, String> {
    let mut serve = topo.command(Side::Server, tcpls);
    serve.args(["serve", "--mode", "perf"]);
    for s in servers {
        serve.arg("--listen").arg(SocketAddr::new(*s, PERF_PORT).to_string());
    }
    serve.arg("--cert").arg(files.path("cert.pem")).arg("--key").arg(files.path("key.pem"));
    serve.stdout(Stdio::null()).stderr(Stdio::null());
    let _server = spawn(serve, "tcpls serve")?;
    wait_listening(topo, Side::Client, SocketAddr::new(servers[0], PERF_PORT), "tcpls serve")?;
    let mut out = serde_json::Map::new();
    for name in SCHEDULERS {
        let mut perf = topo.command(Side::Client, tcpls);
        perf.arg("perf").arg(SocketAddr::new(servers[0], PERF_PORT).to_string());
        perf.arg("--ca").arg(files.path("cert.pem")).args(["--server-name", "localhost"]);
        perf.arg("--path").arg(SocketAddr::new(servers[1], PERF_PORT).to_string());
        perf.args(["--aggregate", "--scheduler", name, "--bytes", bytes, "--json"]);
        let done = perf.output().map_err(|e| format!("tcpls perf: {e}"))?;
        let v: serde_json::Value = serde_json::from_slice(&done.stdout)
            .map_err(|e| format!("tcpls perf --scheduler {name}: {e}: {}", String::from_utf8_lossy(&done.stderr)))?;
        let mbps = v["goodput_bps"].as_f64().unwrap_or(0.0) / 1e6;
        out.insert(
            name.to_string(),
            json!({ "mbps": round(mbps, 2), "verified": v["verified"], "connections": v["connections"] }),
        );
    }
    Ok(serde_json::Value::Object(out))
}

struct TopoResult {
    summary: serde_json::Value,
    panel: Panel,
    verified: bool,
}

fn run_topology(t: &Topo, p: &Params, tcpls: &Path, files: &Files, mptcp: bool) -> Result<TopoResult, String> {
    let topo = topology(t.paths.iter().map(|(d, r)| path(*d, *r)).collect())?;
    let servers: Vec<IpAddr> = (0..2)
        .map(|i| topo.path(i).info().server_addr().ok_or_else(|| format!("path {i} has no server address")))
        .collect::<Result<_, _>>()?;
    let www = files.path("www");
    let mut http = topo.command(Side::Server, "python3");
    http.args(["-m", "http.server", &HTTP_PORT.to_string(), "--bind", &servers[0].to_string(), "--directory"]);
    http.arg(&www).stdout(Stdio::null()).stderr(Stdio::null());
    let _http = spawn(http, "python3 -m http.server")?;
    let mut conc = topo.command(Side::Server, tcpls);
    conc.args(["tunnel", "server"]);
    for s in &servers {
        conc.arg("--listen").arg(SocketAddr::new(*s, TUNNEL_PORT).to_string());
    }
    conc.arg("--cert").arg(files.path("cert.pem")).arg("--key").arg(files.path("key.pem"));
    conc.arg("--allow-dest").arg(servers[0].to_string());
    conc.stdout(Stdio::null()).stderr(Stdio::null());
    let _conc = spawn(conc, "the concentrator")?;
    wait_listening(&topo, Side::Client, SocketAddr::new(servers[0], HTTP_PORT), "the HTTP server")?;
    wait_listening(&topo, Side::Client, SocketAddr::new(servers[0], TUNNEL_PORT), "the concentrator")?;
    let link_sum: f64 = t.paths.iter().map(|(_, r)| r).sum();
    let fast = t.paths[0].1;

    note(&format!("{NAME} {}: tunnel, one path", t.key));
    let one = tunnel_run(&topo, tcpls, files, &servers[..1], false, p)?;
    note(&format!("{NAME} {}: tunnel, bond", t.key));
    let bond = tunnel_run(&topo, tcpls, files, &servers, true, p)?;
    note(&format!("{NAME} {}: plain TCP on the faster path", t.key));
    let url = format!("http://{}:{HTTP_PORT}/big", servers[0]);
    let tcp = download(&topo, &[], &url, false, &files.sha256)?;
    let mptcp_run = if mptcp {
        note(&format!("{NAME} {}: MPTCP", t.key));
        topo.mptcp_setup(false).map_err(|e| format!("MPTCP setup: {e}"))?;
        let mut m = topo.command(Side::Server, "mptcpize");
        m.args(["run", "python3", "-m", "http.server", &MPTCP_HTTP_PORT.to_string(), "--bind"]);
        m.arg(servers[0].to_string()).arg("--directory").arg(&www).stdout(Stdio::null()).stderr(Stdio::null());
        let _m = spawn(m, "mptcpize run python3 -m http.server")?;
        wait_listening(&topo, Side::Client, SocketAddr::new(servers[0], MPTCP_HTTP_PORT), "the MPTCP HTTP server")?;
        let url = format!("http://{}:{MPTCP_HTTP_PORT}/big", servers[0]);
        Some(download(&topo, &[], &url, true, &files.sha256)?)
    } else {
        None
    };
    note(&format!("{NAME} {}: schedulers (tcpls perf --aggregate upload)", t.key));
    let schedulers = scheduler_runs(&topo, tcpls, files, &servers, p.perf_bytes)?;
    let redundant_udp =
        if t.key == "unequal" { Some(redundant::runs(&topo, tcpls, &files.path("cert.pem"), &servers)?) } else { None };

    let mut verified = one.download.verified && bond.download.verified && tcp.verified;
    verified &= mptcp_run.as_ref().is_none_or(|m| m.verified);
    let dl = |d: &Download| {
        json!({
            "mbps": round(d.mbps(), 2),
            "fraction_of_links": round(d.mbps() / link_sum, 3),
            "seconds": round(last_read(&d.reads), 2),
            "bytes": d.bytes,
            "sha256_verified": d.verified,
        })
    };
    let lat = |r: &TunnelRun| {
        json!({
            "idle_median_ms": round(median(r.idle_ms.clone()), 1),
            "during_download_median_ms": round(median(r.busy_ms.clone()), 1),
            "idle_ms": r.idle_ms.iter().map(|x| round(*x, 1)).collect::<Vec<_>>(),
            "during_download_ms": r.busy_ms.iter().map(|x| round(*x, 1)).collect::<Vec<_>>(),
        })
    };
    let summary = json!({
        "paths": t.paths.iter().map(|(d, r)| json!({ "one_way_delay_ms": d, "mbps": r })).collect::<Vec<_>>(),
        "link_sum_mbps": link_sum,
        "faster_link_mbps": fast,
        "tunnel_one_path": dl(&one.download),
        "tunnel_bond": dl(&bond.download),
        "mptcp": mptcp_run.as_ref().map(dl),
        "tcp_fast_path": dl(&tcp),
        "latency_4kb_tunnel_one_path": lat(&one),
        "latency_4kb_tunnel_bond": lat(&bond),
        "scheduler_upload": schedulers,
        "redundant_udp_across_outage": redundant_udp,
    });
    let mut series = vec![
        Series {
            label: "tunnel, one path".into(),
            points: goodput_series(&one.download.reads, BIN, last_read(&one.download.reads)),
        },
        Series {
            label: "tunnel, bond".into(),
            points: goodput_series(&bond.download.reads, BIN, last_read(&bond.download.reads)),
        },
        Series { label: "TCP, faster path".into(), points: goodput_series(&tcp.reads, BIN, last_read(&tcp.reads)) },
    ];
    if let Some(m) = &mptcp_run {
        series.push(Series { label: "MPTCP".into(), points: goodput_series(&m.reads, BIN, last_read(&m.reads)) });
    }
    let panel = Panel {
        title: format!(
            "{} — bond {:.1}, MPTCP {}, one path {:.1} Mbit/s",
            t.title,
            bond.download.mbps(),
            mptcp_run.as_ref().map_or("n/a".into(), |m| format!("{:.1}", m.mbps())),
            one.download.mbps()
        ),
        y_label: "goodput (Mbit/s)".into(),
        series,
        markers: Vec::new(),
        legend_top: false,
        x_axis: XAxis::Time,
        dashed: Vec::new(),
    };
    Ok(TopoResult { summary, panel, verified })
}

/// Runs the experiment and writes `bonding.{csv,png,json}`.
pub fn run(opts: &Opts) -> Result<Summary, String> {
    let tcpls = tcpls_bin()?;
    for program in ["curl", "python3", "sha256sum"] {
        if !have(program) {
            return Err(format!("{program} is missing (apt-get install curl python3 coreutils)"));
        }
    }
    let mptcp = crate::mptcp_run::supported() && have("mptcpize");
    if !mptcp {
        note("no MPTCP comparison: net.mptcp.enabled is off or mptcpize is missing (apt-get install mptcpd)");
    }
    let p = Params::new(opts.quick);
    let files = Files::new(p.bytes)?;
    let mut summary = serde_json::Map::new();
    summary.insert("experiment".into(), json!(NAME));
    summary.insert("quick".into(), json!(opts.quick));
    summary.insert("bytes".into(), json!(p.bytes));
    summary.insert("queue_packets".into(), json!(crate::QUEUE_PACKETS));
    summary.insert("tcp_congestion_control".into(), json!(crate::host_congestion_control()));
    let mut panels = Vec::new();
    let mut verified = true;
    for t in &TOPOLOGIES {
        let r = run_topology(t, &p, &tcpls, &files, mptcp)?;
        summary.insert(t.key.into(), r.summary);
        panels.push(r.panel);
        verified &= r.verified;
    }
    summary.insert("verified".into(), json!(verified));
    let summary = serde_json::Value::Object(summary);
    write_all(opts, NAME, "One download over two uplinks: tunnel bond vs MPTCP", &panels, &summary)?;
    if !verified {
        return Err(format!("{NAME}: a download's SHA-256 did not match: {summary}"));
    }
    Ok(summary)
}
