//! Loopback helpers for socket tests: destinations the code under test connects to.

use std::net::SocketAddr;

use tokio::io::AsyncWriteExt;

/// Accept queue of [`tcp_echo_server`]: large (tokio's `bind` uses 1024), so that tests
/// opening bursts of connections lose no SYN (a second of delay each).
pub const LISTEN_BACKLOG: u32 = 4096;

/// A TCP echo server on `addr` (port 0: any free one): each connection gets back what it
/// sends, then a FIN after the client's FIN. Runs on the current tokio runtime until it ends;
/// returns the bound address.
pub async fn tcp_echo_server(addr: SocketAddr) -> std::io::Result<SocketAddr> {
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    let listener = socket.listen(LISTEN_BACKLOG)?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
                let _ = w.shutdown().await;
            });
        }
    });
    Ok(bound)
}

/// An address on 127.0.0.1 where nothing listens (a port bound, then released): connecting
/// to it is refused.
pub fn closed_port() -> std::io::Result<SocketAddr> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    l.local_addr()
}
