//! Sessions per second and tunnel goodput of a farm of `tcpls tunnel server` nodes behind
//! haproxy (tools/haproxy/tcpls-farm.cfg), 1 node next to 3, on one host (docs/EXPERIMENTS.md,
//! "farm"). The nodes and haproxy are real processes; the clients run in this process.
//!
//! - sessions/s: `--concurrency` tasks open a TCPLS session through haproxy, wait for it to be
//!   established and close it, for `--seconds`; one rustls client config, so after the first
//!   handshake each resumes a ticket, which every node decrypts (`--ticket-keys`).
//! - goodput: `--clients` tunnel clients (one session each, through haproxy) each download
//!   `--bytes` from a local TCP source through a tunneled connection, at once.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::Res;

#[derive(clap::Args, Debug, Clone)]
pub struct Options {
    /// The `tcpls` binary the nodes run (a release build for meaningful numbers).
    #[arg(long, default_value = "target/release/tcpls")]
    pub tcpls: PathBuf,
    /// Node counts to measure, one after the other.
    #[arg(long, value_delimiter = ',', default_value = "1,3")]
    pub nodes: Vec<usize>,
    /// Length of the sessions/s phase.
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Sessions being opened at once in the sessions/s phase.
    #[arg(long, default_value_t = 32)]
    pub concurrency: usize,
    /// Tunnel clients downloading at once in the goodput phase.
    #[arg(long, default_value_t = 6)]
    pub clients: usize,
    /// Bytes each tunnel client downloads.
    #[arg(long, value_parser = crate::compare::parse_size, default_value = "256M")]
    pub bytes: u64,
    /// Client runtime worker threads.
    #[arg(long, default_value_t = 2)]
    pub worker_threads: usize,
}

#[derive(Serialize, Debug)]
struct Report {
    nodes: usize,
    sessions: u64,
    sessions_per_s: f64,
    resumed_share: f64,
    goodput_mbps: f64,
    goodput_bytes: u64,
    goodput_seconds: f64,
}

/// Kills its processes when dropped.
struct Procs(Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub fn run(opts: Options) -> Res<()> {
    if !opts.tcpls.exists() {
        return Err(format!("{}: no such binary (cargo build --release -p tcpls-cli)", opts.tcpls.display()).into());
    }
    if Command::new("haproxy").arg("-v").output().is_err() {
        return Err("haproxy is not installed (apt-get install haproxy)".into());
    }
    for &n in &opts.nodes {
        if !(1..=3).contains(&n) {
            return Err(format!("--nodes {n}: the shipped haproxy configuration has 1 to 3 nodes").into());
        }
        let report = crate::run_on_runtime(opts.worker_threads, one_farm(opts.clone(), n))?;
        crate::print_report(&report)?;
    }
    Ok(())
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn random_hex() -> String {
    let mut key = [0u8; 32];
    (tcpls_proto::system_random())(&mut key);
    key.iter().map(|b| format!("{b:02x}")).collect()
}

/// A free port on 127.0.0.1 (the bind races with other programs are retried by the caller).
fn free_port() -> Res<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn wait_listening(addr: SocketAddr, child: &mut Child) -> Res<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait()? {
            return Err(format!("a farm process exited at start ({status}) before listening on {addr}").into());
        }
        if std::net::TcpStream::connect(addr).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(format!("nothing listens on {addr} after 10 s").into())
}

/// A TCP source on 127.0.0.1: each connection gets `bytes` bytes, then FIN.
async fn source(bytes: u64) -> Res<SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let chunk = vec![0x5au8; 256 << 10];
                let mut left = bytes;
                while left > 0 {
                    let n = left.min(chunk.len() as u64) as usize;
                    if s.write_all(&chunk[..n]).await.is_err() {
                        return;
                    }
                    left -= n as u64;
                }
                let _ = s.shutdown().await;
            });
        }
    });
    Ok(addr)
}

/// A running farm: its nodes and haproxy (killed when dropped), the balancer's address and the
/// files the nodes share.
struct Farm {
    _procs: Procs,
    vip: SocketAddr,
    dir: std::path::PathBuf,
    pki: tcpls_test::Pki,
}

impl Drop for Farm {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `n` tunnel server nodes sharing ticket keys, behind haproxy with the shipped configuration.
fn start_farm(opts: &Options, n: usize) -> Res<Farm> {
    let dir = std::env::temp_dir().join(format!("tcpls-bench-farm-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let pki = tcpls_test::Pki::try_new()?;
    std::fs::write(dir.join("cert.pem"), &pki.cert_pem)?;
    std::fs::write(dir.join("key.pem"), &pki.key_pem)?;
    std::fs::write(dir.join("ticket.keys"), random_hex() + "\n")?;
    std::fs::write(dir.join("route.key"), random_hex() + "\n")?;
    let mut procs = Procs(Vec::new());
    let mut nodes = Vec::new();
    for i in 0..n {
        let addr: SocketAddr = format!("127.0.0.{}:{}", 11 + i, free_port()?).parse()?;
        let mut node = Command::new(&opts.tcpls)
            .args(["tunnel", "server", "--listen", &addr.to_string(), "--allow-dest", "127.0.0.0/8"])
            .args(["--max-sessions", "100000", "--ticket-keys"])
            .arg(dir.join("ticket.keys"))
            .arg("--cert")
            .arg(dir.join("cert.pem"))
            .arg("--key")
            .arg(dir.join("key.pem"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        wait_listening(addr, &mut node)?;
        procs.0.push(node);
        nodes.push(addr);
    }
    let vip: SocketAddr = format!("127.0.0.10:{}", free_port()?).parse()?;
    let tools = repo_root().join("tools/haproxy");
    let mut haproxy = Command::new("haproxy");
    haproxy
        .arg("-f")
        .arg(tools.join("tcpls-farm.cfg"))
        .arg("-db")
        .env("TCPLS_FARM_BIND", vip.to_string())
        .env("TCPLS_FARM_LUA", tools.join("tcpls-farm.lua"))
        .env("TCPLS_FARM_ROUTE_KEY_FILE", dir.join("route.key"))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for k in 0..3 {
        // One node: the three server lines name it.
        haproxy.env(format!("TCPLS_NODE{}", k + 1), nodes[k % n].to_string());
    }
    let mut haproxy = haproxy.spawn()?;
    wait_listening(vip, &mut haproxy)?;
    procs.0.push(haproxy);
    Ok(Farm { _procs: procs, vip, dir, pki })
}

/// Sessions opened through the balancer for `opts.seconds` by `opts.concurrency` tasks: how
/// many, how many resumed a ticket, and the seconds it took.
async fn open_sessions(
    opts: &Options,
    vip: SocketAddr,
    tls: Arc<rustls::ClientConfig>,
    name: rustls::pki_types::ServerName<'static>,
) -> Res<(u64, u64, f64)> {
    let connector = tcpls::TcplsConnector::new(tls);
    let (opened, resumed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let deadline = Instant::now() + Duration::from_secs_f64(opts.seconds);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..opts.concurrency {
        let (connector, name, opened, resumed) = (connector.clone(), name.clone(), opened.clone(), resumed.clone());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                let session = connector.connect(vip, name.clone()).await?;
                if session.handshake_info().is_some_and(|h| h.resumed) {
                    resumed.fetch_add(1, Ordering::Relaxed);
                }
                opened.fetch_add(1, Ordering::Relaxed);
                session.close().await;
            }
            Ok::<_, std::io::Error>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok((opened.load(Ordering::Relaxed), resumed.load(Ordering::Relaxed), started.elapsed().as_secs_f64()))
}

/// `opts.clients` tunnel clients through the balancer each download `opts.bytes` at once:
/// the bytes (checked) and the seconds it took.
async fn download_through_tunnels(
    opts: &Options,
    vip: SocketAddr,
    tls: Arc<rustls::ClientConfig>,
    name: rustls::pki_types::ServerName<'static>,
) -> Res<(u64, f64)> {
    let src = source(opts.bytes).await?;
    let target = tcpls_tunnel::tunnel::Target::parse(&src.to_string())?;
    let mut clients = Vec::new();
    for _ in 0..opts.clients {
        let c = tcpls_tunnel::tunnel::TunnelClient::connect(vip, name.clone(), tls.clone(), &[], Default::default())
            .await?;
        clients.push(c);
    }
    let started = Instant::now();
    let mut downloads = Vec::new();
    for c in clients.clone() {
        let target = target.clone();
        downloads.push(tokio::spawn(async move {
            let (_send, mut recv) = c.open(&target).await.map_err(|e| std::io::Error::other(e.to_string()))?;
            let mut buf = vec![0u8; 256 << 10];
            let mut got = 0u64;
            loop {
                let k = recv.read(&mut buf).await?;
                if k == 0 {
                    break;
                }
                got += k as u64;
            }
            Ok::<_, std::io::Error>(got)
        }));
    }
    let mut goodput_bytes = 0;
    for d in downloads {
        goodput_bytes += d.await??;
    }
    let goodput_seconds = started.elapsed().as_secs_f64();
    let expected = opts.bytes * opts.clients as u64;
    if goodput_bytes != expected {
        return Err(format!("downloaded {goodput_bytes} bytes through the tunnel, expected {expected}").into());
    }
    Ok((goodput_bytes, goodput_seconds))
}

async fn one_farm(opts: Options, n: usize) -> Res<Report> {
    let farm = start_farm(&opts, n)?;
    let tls = Arc::new(tcpls_proto::tcpls_client_config(&farm.pki.client_config(&[])));
    let name = rustls::pki_types::ServerName::try_from(crate::pki::SERVER_NAME)?;
    let (sessions, resumed, elapsed) = open_sessions(&opts, farm.vip, tls.clone(), name.clone()).await?;
    let (goodput_bytes, goodput_seconds) = download_through_tunnels(&opts, farm.vip, tls, name).await?;
    drop(farm);
    Ok(Report {
        nodes: n,
        sessions,
        sessions_per_s: sessions as f64 / elapsed,
        resumed_share: resumed as f64 / sessions.max(1) as f64,
        goodput_mbps: goodput_bytes as f64 * 8.0 / goodput_seconds / 1e6,
        goodput_bytes,
        goodput_seconds,
    })
}
