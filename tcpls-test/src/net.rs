//! Loopback helpers for socket tests: destinations the code under test connects to.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

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

/// Sends `data` on `s`, half-closes it, and reads everything that comes back (within
/// `deadline`): the echo must be `data`, byte for byte. The error says how far it got.
pub async fn echo_roundtrip(s: TcpStream, data: Vec<u8>, deadline: std::time::Duration) -> Result<(), String> {
    let (mut r, mut w) = s.into_split();
    let len = data.len();
    let writer = tokio::spawn(async move {
        w.write_all(&data).await?;
        w.shutdown().await?;
        Ok::<_, std::io::Error>(data)
    });
    let mut got = Vec::with_capacity(len);
    let read = tokio::time::timeout(deadline, r.read_to_end(&mut got)).await;
    read.map_err(|_| format!("echo of {len} bytes timed out after {} bytes", got.len()))?
        .map_err(|e| format!("reading the echo: {e}"))?;
    let data =
        writer.await.map_err(|e| format!("the sending task failed: {e}"))?.map_err(|e| format!("sending: {e}"))?;
    match got.iter().zip(&data).position(|(a, b)| a != b) {
        _ if got.len() != len => Err(format!("echo differs: sent {len} bytes, got {}", got.len())),
        Some(i) => Err(format!("echo differs at byte {i} of {len}")),
        None => Ok(()),
    }
}

/// An address on 127.0.0.1 where nothing listens (a port bound, then released): connecting
/// to it is refused.
pub fn closed_port() -> std::io::Result<SocketAddr> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    l.local_addr()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_echo_round_trip_checks_the_bytes() {
        let echo = tcp_echo_server("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let s = TcpStream::connect(echo).await.unwrap();
        let data = crate::payload(300_000, 3);
        echo_roundtrip(s, data, std::time::Duration::from_secs(30)).await.unwrap();
        // A server that answers with other bytes is caught.
        let liar = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = liar.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = liar.accept().await.unwrap();
            let mut buf = vec![0u8; 1000];
            s.read_exact(&mut buf).await.unwrap();
            buf[500] ^= 1;
            s.write_all(&buf).await.unwrap();
        });
        let s = TcpStream::connect(addr).await.unwrap();
        let err = echo_roundtrip(s, crate::payload(1000, 4), std::time::Duration::from_secs(30)).await.unwrap_err();
        assert!(err.contains("at byte 500"), "{err}");
    }
}
