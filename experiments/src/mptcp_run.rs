//! MPTCP in the test bed (the kernel's implementation, `IPPROTO_MPTCP` sockets): the same
//! download as [`crate::tcpls_run`] (16-byte request, pattern reply, every byte checked), with
//! the server in the server namespace and the client in the client namespace.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tcpls_netem::{mptcp, Side, Topology};

use crate::pattern::{self, Verifier};
use crate::tcpls_run::{decode_request, encode_request, REQUEST_LEN};
use crate::trace::Meter;

/// Whether this kernel has MPTCP.
pub fn supported() -> bool {
    std::fs::read_to_string("/proc/sys/net/mptcp/enabled").is_ok_and(|s| s.trim() == "1")
}

/// Serves one download on an MPTCP socket listening on `addr` (server namespace), then exits.
pub fn start_server(topo: &Topology, addr: SocketAddr) -> Result<JoinHandle<Result<(), String>>, String> {
    listen_in_server(topo, addr, "MPTCP server", |l| serve_one(l).map_err(|e| format!("MPTCP server: {e}")))
}

/// Runs `serve` on an MPTCP listener bound to `addr` in the server namespace, in a thread of
/// its own; returns once the listener is bound (or with why it could not be), so that a client
/// started next finds it. `what` names it in errors.
pub fn listen_in_server<T: Send + 'static>(
    topo: &Topology,
    addr: SocketAddr,
    what: &'static str,
    serve: impl FnOnce(TcpListener) -> Result<T, String> + Send + 'static,
) -> Result<JoinHandle<Result<T, String>>, String> {
    let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
    let h = topo
        .spawn_in(Side::Server, move || {
            let l = match mptcp::listen(addr) {
                Ok(l) => l,
                Err(e) => {
                    let msg = format!("MPTCP listen on {addr}: {e}");
                    let _ = ready_tx.send(Err(msg.clone()));
                    return Err(msg);
                }
            };
            let _ = ready_tx.send(Ok(()));
            serve(l)
        })
        .map_err(|e| format!("cannot start the {what} thread: {e}"))?;
    ready_rx.recv_timeout(Duration::from_secs(10)).map_err(|_| format!("the {what} did not start"))??;
    Ok(h)
}

/// Accepts one connection (within 30 s), sends the requested bytes, waits for the client's EOF.
fn serve_one(l: TcpListener) -> io::Result<()> {
    l.set_nonblocking(true)?;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut conn = loop {
        match l.accept() {
            Ok((c, _)) => break c,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(e),
        }
    };
    conn.set_nonblocking(false)?;
    conn.set_read_timeout(Some(Duration::from_secs(120)))?;
    conn.set_write_timeout(Some(Duration::from_secs(120)))?;
    let mut req = [0u8; REQUEST_LEN];
    conn.read_exact(&mut req)?;
    let (bytes, seed) = decode_request(&req);
    let mut off = 0u64;
    while off < bytes {
        let c = pattern::chunk(seed, off, (bytes - off).min(256 << 10) as usize);
        conn.write_all(c)?;
        off += c.len() as u64;
    }
    conn.shutdown(Shutdown::Write)?;
    let mut sink = [0u8; 64];
    while conn.read(&mut sink)? > 0 {}
    Ok(())
}

/// Result of an MPTCP download.
#[derive(Debug, Clone)]
pub struct Download {
    pub bytes: u64,
    pub verified: bool,
    /// Largest number of additional subflows `MPTCP_INFO` reported during the transfer.
    pub max_subflows: Option<u8>,
}

/// Downloads `bytes` bytes from `addr` over MPTCP in the client namespace, logging reads in
/// `meter`; `started` receives the instant the request is sent.
pub fn start_client(
    topo: &Topology,
    addr: SocketAddr,
    bytes: u64,
    seed: u64,
    meter: Meter,
    started: mpsc::Sender<Instant>,
    limit: Duration,
) -> Result<JoinHandle<Result<Download, String>>, String> {
    topo.spawn_in(Side::Client, move || {
        download(addr, bytes, seed, &meter, started, limit).map_err(|e| format!("MPTCP client: {e}"))
    })
    .map_err(|e| format!("cannot start the MPTCP client thread: {e}"))
}

/// Downloads until EOF, or until `limit` after the request (a stalled transfer then returns what
/// arrived, unverified).
fn download(
    addr: SocketAddr,
    bytes: u64,
    seed: u64,
    meter: &Meter,
    started: mpsc::Sender<Instant>,
    limit: Duration,
) -> io::Result<Download> {
    let s = mptcp::mptcp_socket(&addr)?;
    s.connect_timeout(&addr.into(), Duration::from_secs(10))?;
    let mut conn: TcpStream = s.into();
    // Short read timeouts so that a stalled transfer notices its deadline.
    conn.set_read_timeout(Some(Duration::from_millis(200)))?;
    conn.write_all(&encode_request(bytes, seed))?;
    let t0 = Instant::now();
    let _ = started.send(t0);
    let mut v = Verifier::new(seed);
    let mut buf = vec![0u8; 256 << 10];
    let mut max_subflows = mptcp::subflows(&conn);
    let mut sampled = Instant::now();
    loop {
        let n = match conn.read(&mut buf) {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
                ) =>
            {
                if t0.elapsed() > limit {
                    break;
                }
                continue;
            }
            Err(e) => return Err(e),
        };
        if n == 0 {
            break;
        }
        meter.add(n);
        v.feed(&buf[..n]);
        if sampled.elapsed() > Duration::from_millis(50) {
            sampled = Instant::now();
            max_subflows = max_subflows.max(mptcp::subflows(&conn));
        }
    }
    let _ = conn.shutdown(Shutdown::Write);
    Ok(Download { bytes: v.len(), verified: v.verified(bytes), max_subflows })
}
