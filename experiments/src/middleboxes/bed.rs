//! What every middlebox scenario needs: certificates, a TCPLS echo server in the server
//! namespace, a client runtime in the client namespace, content-checked round trips, daemons
//! (haproxy, nginx, socat) killed on drop, iptables/sysctl in a router namespace, versions.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use rustls::ServerConfig;
use tcpls::proto::sync::LockExt;
use tcpls::{JoinRegistry, Session, SessionConfig, TcplsListener};
use tcpls_netem::{Side, Topology};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The TCPLS server's port on every path.
pub const SERVER_PORT: u16 = 4443;
/// A proxy's port on the router's client-side address.
pub const PROXY_PORT: u16 = 8443;
/// Generous: the machine is shared with builds.
pub const IO_TIMEOUT: Duration = Duration::from_secs(30);

/// The workspace's throw-away certificate for localhost (rustls configs, and PEM files for the
/// proxies) and test payload, from the test kit.
pub use tcpls_test::{payload, Pki};

/// What the server saw of one accepted session.
#[derive(Debug, Clone)]
pub struct Accepted {
    pub peer: SocketAddr,
    pub fallback: bool,
}

/// A TCPLS echo server (listeners sharing one join registry) on a thread in the server
/// namespace; stopped on drop. Each stream: an 8-byte length, then that many bytes, echoed.
pub struct EchoServer {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    accepted: Arc<Mutex<Vec<Accepted>>>,
}

impl EchoServer {
    pub fn start(topo: &Topology, addrs: &[SocketAddr], tls: Arc<ServerConfig>) -> Result<Self, String> {
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
        let accepted = Arc::new(Mutex::new(Vec::new()));
        let (addrs, log) = (addrs.to_vec(), accepted.clone());
        let thread = topo
            .spawn_in(Side::Server, move || {
                let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(rt) => rt,
                    Err(e) => return drop(ready_tx.send(Err(e.to_string()))),
                };
                rt.block_on(async move {
                    let registry = JoinRegistry::new();
                    for addr in addrs {
                        let settings = SessionConfig::default();
                        let bound =
                            TcplsListener::bind_with_registry(addr, tls.clone(), settings, registry.clone()).await;
                        let listener = match bound {
                            Ok(l) => l,
                            Err(e) => return drop(ready_tx.send(Err(format!("bind {addr}: {e}")))),
                        };
                        let log = log.clone();
                        tokio::spawn(async move {
                            while let Some((session, peer)) = listener.accept().await {
                                let fallback = session.is_fallback();
                                log.lock_unpoisoned().push(Accepted { peer, fallback });
                                tokio::spawn(echo(session));
                            }
                        });
                    }
                    let _ = ready_tx.send(Ok(()));
                    let _ = stop_rx.await;
                })
            })
            .map_err(|e| format!("cannot enter the server namespace: {e}"))?;
        ready_rx.recv_timeout(Duration::from_secs(10)).map_err(|_| "the server did not start".to_string())??;
        Ok(Self { stop: Some(stop), thread: Some(thread), accepted })
    }

    /// Sessions accepted so far (joins are not sessions).
    pub fn accepted(&self) -> Vec<Accepted> {
        self.accepted.lock_unpoisoned().clone()
    }
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn echo(session: Session) {
    while let Some((mut send, mut recv)) = session.accept_stream().await {
        tokio::spawn(async move {
            let mut len = [0u8; 8];
            if recv.read_exact(&mut len).await.is_err() {
                return;
            }
            // Bounded: the scenarios send a few MB at most.
            let len = u64::from_be_bytes(len).min(64 << 20) as usize;
            let mut data = vec![0u8; len];
            if recv.read_exact(&mut data).await.is_ok() {
                let _ = send.write_all(&data).await;
                let _ = send.shutdown().await;
            }
        });
    }
}

/// Sends `len` pattern bytes on a new stream (steered to `conn` if given) and checks the echo
/// byte for byte; returns the bytes verified.
pub async fn round_trip(session: &Session, len: usize, seed: u64, conn: Option<tcpls::ConnId>) -> Result<u64, String> {
    let (mut send, mut recv) = session.open_stream().map_err(|e| format!("open stream: {e}"))?;
    if conn.is_some() {
        send.steer(conn).map_err(|e| format!("steer to connection {conn:?}: {e}"))?;
    }
    let data = payload(len, seed);
    let exchange = async {
        send.write_all(&(len as u64).to_be_bytes()).await?;
        send.write_all(&data).await?;
        let mut back = vec![0u8; len];
        recv.read_exact(&mut back).await?;
        Ok::<_, std::io::Error>(back)
    };
    let back = tokio::time::timeout(IO_TIMEOUT, exchange)
        .await
        .map_err(|_| format!("echo of {len} bytes timed out"))?
        .map_err(|e| format!("echo of {len} bytes: {e}"))?;
    if back != data {
        let at = back.iter().zip(&data).position(|(a, b)| a != b).unwrap_or(0);
        return Err(format!("echo differs from what was sent at byte {at} of {len}"));
    }
    Ok(len as u64)
}

/// Runs a future on a fresh runtime on a thread in the client namespace.
pub fn in_client<T: Send + 'static>(
    topo: &Topology,
    f: impl Future<Output = Result<T, String>> + Send + 'static,
) -> Result<T, String> {
    topo.run_in(Side::Client, move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("tokio runtime: {e}"))?;
        rt.block_on(f)
    })
    .map_err(|e| format!("cannot enter the client namespace: {e}"))?
}

/// Runs a command to completion; its stderr on failure.
pub fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("cannot run {:?}: {e}", cmd.get_program()))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        let args: Vec<_> = cmd.get_args().collect();
        Err(format!("{:?} {args:?}: {}", cmd.get_program(), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// `iptables ARGS` in a namespace.
pub fn iptables(topo: &Topology, side: Side, args: &[&str]) -> Result<String, String> {
    run(topo.command(side, "iptables").args(args))
}

/// Applies each rule in turn.
pub fn iptables_all(topo: &Topology, side: Side, rules: &[&[&str]]) -> Result<(), String> {
    rules.iter().try_for_each(|r| iptables(topo, side, r).map(drop))
}

/// `sysctl -w KEY=VALUE` in a namespace.
pub fn sysctl(topo: &Topology, side: Side, key: &str, value: &str) -> Result<(), String> {
    run(topo.command(side, "sysctl").args(["-q", "-w", &format!("{key}={value}")])).map(drop)
}

/// Packet count of the first rule of `chain` whose line contains `needle` (`iptables -L -v -x`).
pub fn rule_packets(topo: &Topology, side: Side, table: &str, chain: &str, needle: &str) -> Option<u64> {
    let out = iptables(topo, side, &["-t", table, "-L", chain, "-v", "-x", "-n"]).ok()?;
    out.lines().skip(2).find(|l| l.contains(needle))?.split_whitespace().next()?.parse().ok()
}

/// Packets cross a router twice (veth in, then back in from the emulator's TUN device):
/// conntrack tracks only the pass between the emulator and the server side, so that one
/// flow has one state (the same trick as tcpls-cli's netns_ext NAT test).
pub const TRACK_ONE_PASS: [&[&str]; 2] = [
    &["-t", "raw", "-A", "PREROUTING", "-i", "toc", "-j", "NOTRACK"],
    &["-t", "raw", "-A", "PREROUTING", "-i", "tundn", "-j", "NOTRACK"],
];

/// The path to `program` if it is installed (PATH plus the sbin directories).
pub fn find_program(program: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    let found = path
        .split(':')
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"])
        .map(|d| Path::new(d).join(program))
        .find(|p| p.is_file());
    found
}

/// Why a scenario could not run here.
#[derive(Debug)]
pub struct Skip(pub String);

/// The program's path, or a "not installed" reason (the scenario is then SKIPPED, not passed).
pub fn require(program: &str, package: &str) -> Result<PathBuf, Skip> {
    find_program(program).ok_or_else(|| Skip(format!("{program} is not installed (Debian package {package})")))
}

/// The version line a program prints (`haproxy -v`, `nginx -v`, `iptables -V`...).
pub fn version(program: &str, args: &[&str]) -> String {
    let Some(path) = find_program(program) else {
        return format!("{program}: not installed");
    };
    let Ok(out) = Command::new(path).args(args).output() else {
        return format!("{program}: cannot run");
    };
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let line = text.lines().find(|l| l.to_lowercase().contains("version")).or(text.lines().next());
    line.unwrap_or("").trim().to_string()
}

/// A daemon started in a namespace, killed (by its pid) and reaped on drop.
pub struct Daemon {
    name: String,
    child: Child,
    log: PathBuf,
}

impl Daemon {
    /// Starts `cmd` with stdout/stderr to `log`, then waits until something listens on `port`
    /// in `side` (or the daemon exits, or 10 s pass).
    pub fn start(topo: &Topology, side: Side, mut cmd: Command, log: PathBuf, port: u16) -> Result<Self, String> {
        // `ip netns exec NS PROGRAM ...`: the program is the fourth argument.
        let name = cmd.get_args().nth(3).map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
        let out = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("cannot start {name}: {e}"))?;
        let mut daemon = Daemon { name, child, log };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = daemon.child.try_wait() {
                return Err(format!("{} exited ({status}): {}", daemon.name, daemon.log_tail()));
            }
            let listening = run(topo.command(side, "ss").args(["-Hltn", &format!("sport = :{port}")]))
                .map(|out| !out.trim().is_empty())
                .unwrap_or(false);
            if listening {
                return Ok(daemon);
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "{} is not listening on port {port} after 10 s: {}",
                    daemon.name,
                    daemon.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The last lines of the daemon's output (for error details).
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(5)..].join(" | ")
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // `ip netns exec` execs the daemon, so this pid is the daemon itself.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A private temporary directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Result<Self, String> {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("tcpls-mb-{tag}-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(TempDir(dir))
    }

    /// Writes a file in the directory and returns its path.
    pub fn write(&self, name: &str, content: &str) -> Result<PathBuf, String> {
        let p = self.0.join(name);
        std::fs::write(&p, content).map_err(|e| format!("{}: {e}", p.display()))?;
        Ok(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_program_is_a_skip_that_names_the_package() {
        let Err(Skip(why)) = require("no-such-middlebox-program", "some-package") else {
            panic!("found a program that does not exist");
        };
        assert!(why.contains("not installed") && why.contains("some-package"), "{why}");
        assert!(require("sh", "dash").is_ok());
        assert!(version("no-such-middlebox-program", &["-v"]).contains("not installed"));
    }
}
