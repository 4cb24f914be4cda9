//! The local proxy and its front-ends.

use std::io;
use std::net::{SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tracing::{debug, info, warn};

use super::mux::{Mux, Role};
use crate::frontend::{reply, socks5_reply, socks5_request, Frontend, Target};
use crate::{Config, Stats};

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
    /// `Frontend::Http` and forwards to anything but an IPv4 address are refused at once
    /// (`InvalidInput`): the TM3 SYN carries an IPv4 address only.
    pub async fn serve(&self, listener: TcpListener, frontend: Frontend) -> io::Result<()> {
        match &frontend {
            Frontend::Forward(Target::Addr(SocketAddr::V4(_))) | Frontend::Socks | Frontend::Transparent => {}
            Frontend::Forward(t) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("TM3 forwards to IPv4 addresses only, not {t}"),
                ));
            }
            Frontend::Http => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "the TM3 local proxy has no HTTP proxy front-end",
                ));
            }
        }
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
            let frontend = frontend.clone();
            tokio::spawn(async move {
                if let Err(e) = lp.handle(s, &frontend).await {
                    info!("local proxy: connection from {peer}: {e}");
                }
            });
        }
    }

    async fn handle(&self, mut s: TcpStream, frontend: &Frontend) -> io::Result<()> {
        let dst = match frontend {
            Frontend::Forward(Target::Addr(SocketAddr::V4(d))) => *d,
            Frontend::Forward(_) | Frontend::Http => {
                return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a TM3 front-end (IPv4 only, no HTTP)"));
            }
            Frontend::Transparent => original_dst(&s)?,
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

/// The IPv4 destination of a connection redirected by iptables REDIRECT/DNAT (the TM3 SYN
/// carries IPv4 only; see [`crate::frontend::original_dst`]).
pub fn original_dst(s: &TcpStream) -> io::Result<SocketAddrV4> {
    match crate::frontend::original_dst(s)? {
        SocketAddr::V4(v4) => Ok(v4),
        SocketAddr::V6(_) => {
            Err(io::Error::new(io::ErrorKind::Unsupported, "original destination is not IPv4 (TM3 SYN is IPv4 only)"))
        }
    }
}

/// Server side of a SOCKS5 CONNECT, IPv4 only (the TM3 SYN carries IPv4). The success reply is
/// sent at once: as in TM3, the local connection is established before the remote one.
async fn socks5_handshake(s: &mut TcpStream) -> io::Result<SocketAddrV4> {
    match socks5_request(s).await? {
        Target::Addr(SocketAddr::V4(dst)) => {
            socks5_reply(s, reply::SUCCEEDED).await?;
            Ok(dst)
        }
        _ => {
            socks5_reply(s, reply::ADDRESS_TYPE_NOT_SUPPORTED).await?;
            Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "SOCKS5 domain names and IPv6 cannot be carried by the TM3 SYN (IPv4 only): refused with reply 0x08",
            ))
        }
    }
}
