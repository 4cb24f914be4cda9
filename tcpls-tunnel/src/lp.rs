//! The local proxy and its front-ends.

use std::io;
use std::net::{SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tracing::{debug, info, warn};

use crate::mux::{Mux, Role};
use crate::{Config, Stats};

/// How the local proxy learns the destination of an accepted connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frontend {
    /// SOCKS5, CONNECT to an IPv4 address only (the TM3 SYN carries an IPv4 address): IPv6 and
    /// domain names are refused with reply 0x08 (address type not supported), other commands
    /// with 0x07. No authentication.
    Socks,
    /// Every connection goes to this destination.
    Forward(SocketAddrV4),
    /// Connections redirected by iptables (`-j REDIRECT`): the destination is read with
    /// `getsockopt(SO_ORIGINAL_DST)` (Linux only).
    Transparent,
}

/// The TM3 local proxy: N pipes to a remote proxy.
#[derive(Clone)]
pub struct LocalProxy {
    mux: Arc<Mux>,
}

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

impl LocalProxy {
    /// Opens `pipes` TCP pipes to the remote proxy at `rp`.
    pub async fn connect(rp: SocketAddr, pipes: usize, cfg: Config) -> io::Result<LocalProxy> {
        if pipes == 0 || pipes > 1024 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "the number of pipes must be in 1..=1024"));
        }
        let mut streams = Vec::with_capacity(pipes);
        for i in 0..pipes {
            let s = TcpStream::connect(rp)
                .await
                .map_err(|e| io::Error::new(e.kind(), format!("pipe {i} to remote proxy {rp}: {e}")))?;
            streams.push(s);
        }
        info!("local proxy: {pipes} pipes to {rp} established");
        Ok(LocalProxy { mux: Mux::start(Role::Local, cfg, format!("lp[{rp}]"), streams) })
    }

    /// Counters.
    pub fn stats(&self) -> &Stats {
        &self.mux.stats
    }

    /// Waits until every pipe is closed.
    pub async fn closed(&self) {
        self.mux.closed().await
    }

    /// Tunnels an already accepted connection to `dst`; returns its connection ID.
    pub async fn open(&self, stream: TcpStream, dst: SocketAddrV4) -> io::Result<u16> {
        match self.mux.open(stream, dst).await {
            Ok(id) => Ok(id),
            Err(e) => Err(e),
        }
    }

    /// Accepts connections on `listener` and tunnels them until every pipe is gone (then
    /// returns an error).
    pub async fn serve(&self, listener: TcpListener, frontend: Frontend) -> io::Result<()> {
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                _ = self.mux.closed() => return Err(io::Error::other("every pipe to the remote proxy is closed")),
            };
            let (s, peer) = match accepted {
                Ok(x) => x,
                Err(e) => {
                    warn!("local proxy: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let lp = self.clone();
            tokio::spawn(async move {
                if let Err(e) = lp.handle(s, frontend).await {
                    info!("local proxy: connection from {peer}: {e}");
                }
            });
        }
    }

    async fn handle(&self, mut s: TcpStream, frontend: Frontend) -> io::Result<()> {
        let dst = match frontend {
            Frontend::Forward(d) => d,
            Frontend::Transparent => {
                let dst = original_dst(&s)?;
                if s.local_addr().ok() == Some(SocketAddr::V4(dst)) {
                    // Not redirected: tunneling it would come back here in a loop.
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!(
                            "connection to {dst} was not redirected by iptables (it targets the proxy itself): refused"
                        ),
                    ));
                }
                dst
            }
            Frontend::Socks => match tokio::time::timeout(HANDSHAKE_TIMEOUT, socks5_handshake(&mut s)).await {
                Ok(r) => r?,
                Err(_) => return Err(io::Error::new(io::ErrorKind::TimedOut, "SOCKS5 handshake timed out")),
            },
        };
        let id = self.open(s, dst).await?;
        debug!("local proxy: connection {id} -> {dst}");
        Ok(())
    }
}

/// The destination of a connection redirected by iptables REDIRECT/DNAT.
pub fn original_dst(s: &TcpStream) -> io::Result<SocketAddrV4> {
    #[cfg(target_os = "linux")]
    {
        let a = socket2::SockRef::from(s).original_dst().map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("SO_ORIGINAL_DST failed ({e}): was the connection redirected by iptables?"),
            )
        })?;
        match a.as_socket() {
            Some(SocketAddr::V4(v4)) => Ok(v4),
            _ => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "original destination is not IPv4 (TM3 SYN is IPv4 only)",
            )),
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = s;
        Err(io::Error::new(io::ErrorKind::Unsupported, "transparent mode (SO_ORIGINAL_DST) is only supported on Linux"))
    }
}

/// SOCKS5 reply codes.
const REP_OK: u8 = 0x00;
const REP_CMD_UNSUPPORTED: u8 = 0x07;
const REP_ATYP_UNSUPPORTED: u8 = 0x08;

async fn socks_reply(s: &mut TcpStream, rep: u8) -> io::Result<()> {
    s.write_all(&[5, rep, 0, 1, 0, 0, 0, 0, 0, 0]).await
}

/// Server side of a SOCKS5 CONNECT (RFC 1928, no authentication, IPv4 only). The success reply
/// is sent at once: as in TM3, the local connection is established before the remote one.
async fn socks5_handshake(s: &mut TcpStream) -> io::Result<SocketAddrV4> {
    let mut h = [0u8; 2];
    s.read_exact(&mut h).await?;
    if h[0] != 5 {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("not SOCKS5 (version byte {})", h[0])));
    }
    let mut methods = vec![0u8; usize::from(h[1])];
    s.read_exact(&mut methods).await?;
    if !methods.contains(&0) {
        s.write_all(&[5, 0xFF]).await?;
        return Err(io::Error::new(io::ErrorKind::InvalidData, "SOCKS5 client does not offer 'no authentication'"));
    }
    s.write_all(&[5, 0]).await?;
    let mut req = [0u8; 4];
    s.read_exact(&mut req).await?;
    if req[0] != 5 {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "bad SOCKS5 request version"));
    }
    if req[1] != 1 {
        socks_reply(s, REP_CMD_UNSUPPORTED).await?;
        return Err(io::Error::new(io::ErrorKind::Unsupported, format!("SOCKS5 command {} not supported", req[1])));
    }
    match req[3] {
        1 => {
            let mut a = [0u8; 6];
            s.read_exact(&mut a).await?;
            let dst = SocketAddrV4::new([a[0], a[1], a[2], a[3]].into(), u16::from_be_bytes([a[4], a[5]]));
            socks_reply(s, REP_OK).await?;
            Ok(dst)
        }
        3 | 4 => {
            socks_reply(s, REP_ATYP_UNSUPPORTED).await?;
            Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "SOCKS5 domain names and IPv6 cannot be carried by the TM3 SYN (IPv4 only): refused with reply 0x08",
            ))
        }
        t => {
            socks_reply(s, REP_ATYP_UNSUPPORTED).await?;
            Err(io::Error::new(io::ErrorKind::InvalidData, format!("SOCKS5 address type {t} unknown")))
        }
    }
}
