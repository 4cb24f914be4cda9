//! Helpers for the TCPLS tunnel tests: a certificate, a concentrator and a client on
//! loopback, TCP echo / sink / pattern servers as destinations, SOCKS5 client side.

#![allow(dead_code, clippy::unwrap_used)]

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tcpls_tunnel::tunnel::{Concentrator, DestPolicy, Frontend, Stats, Target, TunnelClient, TunnelConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Deadline of any single wait.
pub const T: Duration = Duration::from_secs(30);

/// The workspace's test certificate, payload and loopback helpers (the `tcpls-test` kit).
pub use tcpls_test::net::closed_port as try_closed_port;
pub use tcpls_test::{payload, Pki};

/// The default configuration, except that the concentrator may connect to loopback (the
/// tests' destinations), which its default destination policy refuses.
pub fn loopback_allowed() -> TunnelConfig {
    TunnelConfig { dest_policy: DestPolicy::allow_all(), ..TunnelConfig::default() }
}

/// A running concentrator (on `listen`, usually 127.0.0.1:0 once or twice) and a client
/// session to its first address, with the other addresses joined as paths.
pub struct Tunnel {
    pub pki: Pki,
    pub addrs: Vec<SocketAddr>,
    pub server_stats: Arc<Stats>,
    pub client: TunnelClient,
}

impl Tunnel {
    pub async fn start(listen: &[&str]) -> Tunnel {
        Self::start_with(listen, loopback_allowed()).await
    }

    pub async fn start_with(listen: &[&str], cfg: TunnelConfig) -> Tunnel {
        Self::start_full(listen, cfg, None).await
    }

    /// `link`: the client reaches the concentrator through [`slow_link`] at that many bit/s.
    pub async fn start_full(listen: &[&str], cfg: TunnelConfig, link: Option<u64>) -> Tunnel {
        if std::env::var_os("TUNNEL_TEST_LOG").is_some() {
            let _ = tracing_subscriber::fmt().with_max_level(tracing::Level::DEBUG).with_test_writer().try_init();
        }
        let pki = Pki::new();
        let addrs: Vec<SocketAddr> = listen.iter().map(|a| a.parse().unwrap()).collect();
        let conc = Concentrator::bind(&addrs, pki.server(), cfg.clone()).await.unwrap();
        let addrs = conc.local_addrs();
        let server_stats = conc.stats();
        tokio::spawn(conc.run(|_| {}));
        let name = tcpls::server_name_for("localhost").unwrap();
        let first = match link {
            Some(bps) => slow_link(addrs[0], bps).await,
            None => addrs[0],
        };
        let client = TunnelClient::connect(first, name, pki.client(), &addrs[1..], cfg).await.unwrap();
        Tunnel { pki, addrs, server_stats, client }
    }

    /// One path per rate (bit/s), each through its own [`slow_link`] to its own concentrator
    /// address (127.0.0.1:0); `links` holds the links' addresses, in path order.
    pub async fn start_over_links(cfg: TunnelConfig, rates: &[u64]) -> (Tunnel, Vec<SocketAddr>) {
        let pki = Pki::new();
        let listen: Vec<SocketAddr> = rates.iter().map(|_| "127.0.0.1:0".parse().unwrap()).collect();
        let conc = Concentrator::bind(&listen, pki.server(), cfg.clone()).await.unwrap();
        let addrs = conc.local_addrs();
        let server_stats = conc.stats();
        tokio::spawn(conc.run(|_| {}));
        let mut links = Vec::new();
        for (addr, bps) in addrs.iter().zip(rates) {
            links.push(slow_link(*addr, *bps).await);
        }
        let name = tcpls::server_name_for("localhost").unwrap();
        let client = TunnelClient::connect(links[0], name, pki.client(), &links[1..], cfg).await.unwrap();
        (Tunnel { pki, addrs, server_stats, client }, links)
    }

    /// Serves `frontend` on a fresh 127.0.0.1 port; returns that address.
    pub async fn listen(&self, frontend: Frontend) -> SocketAddr {
        let l = tcpls_tunnel::frontend::listen("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = l.local_addr().unwrap();
        let client = self.client.clone();
        tokio::spawn(async move { client.serve(l, frontend).await });
        addr
    }

    pub async fn forward(&self, target: SocketAddr) -> SocketAddr {
        self.listen(Frontend::Forward(Target::Addr(target))).await
    }
}

/// A TCP echo server on `addr` (port 0: any); returns its address.
pub async fn echo_server(addr: &str) -> SocketAddr {
    tcpls_test::net::tcp_echo_server(addr.parse().unwrap()).await.unwrap()
}

/// A port with nothing listening (bound, then released).
pub fn closed_port() -> SocketAddr {
    try_closed_port().unwrap()
}

/// Sends `data`, half-closes, reads everything back; the echo must equal `data`.
pub async fn echo_roundtrip(s: TcpStream, data: Vec<u8>) -> Result<(), String> {
    tcpls_test::net::echo_roundtrip(s, data, T).await
}

/// SOCKS5 greeting and CONNECT; returns the reply code.
pub async fn socks5_connect(s: &mut TcpStream, target: &Target) -> io::Result<u8> {
    s.write_all(&[5, 1, 0]).await?;
    let mut choice = [0u8; 2];
    s.read_exact(&mut choice).await?;
    assert_eq!(choice, [5, 0]);
    let mut req = vec![5, 1, 0];
    match target {
        Target::Addr(SocketAddr::V4(a)) => {
            req.push(1);
            req.extend_from_slice(&a.ip().octets());
        }
        Target::Addr(SocketAddr::V6(a)) => {
            req.push(4);
            req.extend_from_slice(&a.ip().octets());
        }
        Target::Name(h, _) => {
            req.push(3);
            req.push(h.len() as u8);
            req.extend_from_slice(h.as_bytes());
        }
    }
    req.extend_from_slice(&target.port().to_be_bytes());
    s.write_all(&req).await?;
    let mut rep = [0u8; 10];
    s.read_exact(&mut rep).await?;
    Ok(rep[1])
}

#[allow(unused_imports)] // not every test file kills sockets
pub use tcpls_test::sockets::can_kill_sockets;

/// Kills (RST) the sockets to 127.0.0.1:`port` with `ss -K`; returns how many it listed.
pub fn kill_sockets_to_port(port: u16) -> usize {
    tcpls_test::sockets::kill_sockets_to_port(port).unwrap_or_else(|e| panic!("{e}"))
}

/// Polls `cond` until it holds (fails the test after [`T`]).
pub async fn wait_for(mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + T;
    while !cond() {
        assert!(std::time::Instant::now() < deadline, "condition not reached in {T:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A bottleneck link in front of `to`: a TCP relay moving at most `bps` each way, whose small
/// receive buffers (64 KiB) leave the queue in the sender's socket, as behind a real bottleneck.
pub async fn slow_link(to: SocketAddr, bps: u64) -> SocketAddr {
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(64 << 10).unwrap();
    sock.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let l = sock.listen(1024).unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((a, _)) = l.accept().await {
            let b = tokio::net::TcpSocket::new_v4().unwrap();
            b.set_recv_buffer_size(64 << 10).unwrap();
            let Ok(b) = b.connect(to).await else { continue };
            let _ = (a.set_nodelay(true), b.set_nodelay(true));
            let (ar, aw) = a.into_split();
            let (br, bw) = b.into_split();
            tokio::spawn(paced_copy(ar, bw, bps));
            tokio::spawn(paced_copy(br, aw, bps));
        }
    });
    addr
}

async fn paced_copy<R, W>(mut r: R, mut w: W, bps: u64)
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    // Each chunk may leave at `next`; an idle link banks at most 2 ms of credit (its burst).
    let mut next = std::time::Instant::now();
    let mut buf = vec![0u8; 16 << 10];
    loop {
        let n = match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if w.write_all(&buf[..n]).await.is_err() {
            break;
        }
        let now = std::time::Instant::now();
        next = next.max(now - Duration::from_millis(2)) + Duration::from_secs_f64(n as f64 * 8.0 / bps as f64);
        if next > now {
            tokio::time::sleep_until(next.into()).await;
        }
    }
    let _ = w.shutdown().await;
}

/// A destination that answers a request `size(u64) seed(u64)` with `payload(size, seed)`
/// (`size` u64::MAX: zeros until the client goes away).
pub async fn pattern_server() -> SocketAddr {
    let l = tcpls_tunnel::frontend::listen("127.0.0.1:0".parse().unwrap()).unwrap();
    let a = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut req = [0u8; 16];
                s.read_exact(&mut req).await?;
                let size = u64::from_be_bytes(req[..8].try_into().unwrap());
                let seed = u64::from_be_bytes(req[8..].try_into().unwrap());
                if size == u64::MAX {
                    let zeros = vec![0u8; 256 << 10];
                    loop {
                        s.write_all(&zeros).await?;
                    }
                }
                s.write_all(&payload(size as usize, seed)).await?;
                s.shutdown().await
            });
        }
    });
    a
}

/// Sends the request `size seed` to `via` and reads the answer, verified; returns its bytes.
pub async fn fetch(via: SocketAddr, size: usize, seed: u64) -> Result<usize, String> {
    let mut s = TcpStream::connect(via).await.map_err(|e| e.to_string())?;
    s.set_nodelay(true).map_err(|e| e.to_string())?;
    let mut req = (size as u64).to_be_bytes().to_vec();
    req.extend_from_slice(&seed.to_be_bytes());
    s.write_all(&req).await.map_err(|e| e.to_string())?;
    let mut got = Vec::with_capacity(size);
    tokio::time::timeout(T, s.read_to_end(&mut got))
        .await
        .map_err(|_| format!("fetch {seed} stalled at {} bytes", got.len()))?
        .map_err(|e| format!("fetch {seed}: {e}"))?;
    if got != payload(size, seed) {
        return Err(format!("fetch {seed}: {} bytes of {size}, content differs", got.len()));
    }
    Ok(got.len())
}

/// Downloads `size` bytes of pattern `seed` through `via` (a forward to a pattern server that
/// reads the size and seed first), counting progress in `progress`; verifies the content.
pub async fn download(
    via: SocketAddr,
    size: usize,
    seed: u64,
    progress: Arc<std::sync::atomic::AtomicU64>,
) -> Result<(), String> {
    let mut s = TcpStream::connect(via).await.map_err(|e| e.to_string())?;
    let mut req = (size as u64).to_be_bytes().to_vec();
    req.extend_from_slice(&seed.to_be_bytes());
    s.write_all(&req).await.map_err(|e| e.to_string())?;
    let mut got = Vec::with_capacity(size);
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = tokio::time::timeout(T, s.read(&mut buf))
            .await
            .map_err(|_| format!("download {seed} stalled at {} bytes", got.len()))?
            .map_err(|e| format!("download {seed} failed at {} bytes: {e}", got.len()))?;
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
        progress.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
    }
    if got != payload(size, seed) {
        return Err(format!("download {seed}: {} bytes of {size}, content differs", got.len()));
    }
    Ok(())
}
