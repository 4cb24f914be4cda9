//! A small bulk client/server on `IPPROTO_MPTCP` sockets (used by the `mptcp-peer` binary and
//! by tests). Protocol: the client sends N bytes and shuts down its write side; the server
//! counts them until EOF, replies with the count as 8 bytes big-endian and closes.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};

/// `IPPROTO_MPTCP`.
pub const IPPROTO_MPTCP: i32 = 262;

/// A new MPTCP stream socket for the family of `addr`.
pub fn mptcp_socket(addr: &SocketAddr) -> io::Result<Socket> {
    Socket::new(Domain::for_address(*addr), Type::STREAM, Some(Protocol::from(IPPROTO_MPTCP)))
}

/// Listen on `addr` with an MPTCP socket.
pub fn listen(addr: SocketAddr) -> io::Result<TcpListener> {
    let s = mptcp_socket(&addr)?;
    s.set_reuse_address(true)?;
    s.bind(&addr.into())?;
    s.listen(128)?;
    Ok(s.into())
}

/// Number of additional MPTCP subflows of a socket, if the kernel reports it.
pub fn subflows(s: &TcpStream) -> Option<u8> {
    crate::sys::mptcp_subflows(s.as_raw_fd())
}

/// What the server saw on one connection.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerReport {
    pub peer: SocketAddr,
    pub bytes: u64,
    pub secs: f64,
}

impl ServerReport {
    pub fn to_json(&self) -> String {
        serde_json::json!({"peer": self.peer.to_string(), "bytes": self.bytes, "secs": self.secs}).to_string()
    }
}

/// Serve one accepted connection: count bytes until EOF, reply with the count.
pub fn serve_conn(mut conn: TcpStream, peer: SocketAddr) -> io::Result<ServerReport> {
    let start = Instant::now();
    let mut buf = vec![0u8; 256 * 1024];
    let mut total = 0u64;
    loop {
        match conn.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => total += n as u64,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    conn.write_all(&total.to_be_bytes())?;
    let _ = conn.shutdown(Shutdown::Write);
    Ok(ServerReport { peer, bytes: total, secs: start.elapsed().as_secs_f64() })
}

/// Accept connections forever (or once), one thread each; `report` is called per connection.
pub fn serve(
    listener: TcpListener,
    once: bool,
    report: impl Fn(io::Result<ServerReport>) + Send + Sync + 'static,
) -> io::Result<()> {
    let report = std::sync::Arc::new(report);
    loop {
        let (conn, peer) = listener.accept()?;
        if once {
            report(serve_conn(conn, peer));
            return Ok(());
        }
        let r = report.clone();
        std::thread::spawn(move || r(serve_conn(conn, peer)));
    }
}

/// Result of a client transfer.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientReport {
    pub bytes: u64,
    /// Bytes the server confirmed.
    pub confirmed: u64,
    pub secs: f64,
    pub mbps: f64,
    /// Largest number of additional subflows seen during the transfer (`mptcp_info`), if known.
    pub max_subflows: Option<u8>,
    /// Whether the socket really was MPTCP (false if the kernel fell back to TCP is not
    /// detectable here; this is whether `mptcp_info` was available).
    pub mptcp_info: bool,
}

impl ClientReport {
    pub fn to_json(&self) -> String {
        serde_json::json!({
            "bytes": self.bytes, "confirmed": self.confirmed, "secs": self.secs, "mbps": self.mbps,
            "max_subflows": self.max_subflows, "mptcp_info": self.mptcp_info,
        })
        .to_string()
    }
}

/// Connect to `addr` over MPTCP (optionally from `bind`), send `bytes` bytes, wait for the
/// server's confirmation.
pub fn client(addr: SocketAddr, bind: Option<SocketAddr>, bytes: u64, timeout: Duration) -> io::Result<ClientReport> {
    let s = mptcp_socket(&addr)?;
    if let Some(b) = bind {
        s.bind(&b.into())?;
    }
    s.connect_timeout(&addr.into(), timeout)?;
    let mut conn: TcpStream = s.into();
    conn.set_read_timeout(Some(timeout))?;
    conn.set_write_timeout(Some(timeout))?;
    let start = Instant::now();
    let chunk = vec![0x5au8; 64 * 1024];
    let mut sent = 0u64;
    let mut max_subflows = subflows(&conn);
    let mut last_sample = Instant::now();
    while sent < bytes {
        let n = (bytes - sent).min(chunk.len() as u64) as usize;
        conn.write_all(&chunk[..n])?;
        sent += n as u64;
        if last_sample.elapsed() > Duration::from_millis(20) {
            last_sample = Instant::now();
            max_subflows = max_subflows.max(subflows(&conn));
        }
    }
    conn.shutdown(Shutdown::Write)?;
    let mut ack = [0u8; 8];
    conn.read_exact(&mut ack)?;
    let secs = start.elapsed().as_secs_f64();
    let confirmed = u64::from_be_bytes(ack);
    Ok(ClientReport {
        bytes: sent,
        confirmed,
        secs,
        mbps: confirmed as f64 * 8.0 / secs / 1e6,
        mptcp_info: max_subflows.is_some(),
        max_subflows,
    })
}
