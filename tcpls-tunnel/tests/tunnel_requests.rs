//! Request/response traffic through the tunnel, as a web server's: responses just below, at and
//! above the relay's buffer sizes (it reads past a full buffer when the socket holds more), one
//! response per connection and many on one connection (keep-alive), requests that leave with
//! the stream's opening, a destination that speaks first. Every byte verified.

#![allow(clippy::unwrap_used)]

mod tunnel_support;

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;
use tunnel_support::*;

/// Around the relay's first buffer (16 KiB), its doublings and the first read that goes with
/// the request (4 KiB); 0: an empty response.
const SIZES: &[usize] = &[0, 1, 4095, 4096, 4097, 16383, 16384, 16385, 20480, 32775, 65536, 65537, 300_000];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_response_per_connection_around_the_buffer_sizes() {
    let t = Tunnel::start(&["127.0.0.1:0"]).await;
    let fwd = t.forward(pattern_server().await).await;
    for (i, &size) in SIZES.iter().enumerate() {
        fetch(fwd, size, i as u64).await.unwrap_or_else(|e| panic!("{size} bytes: {e}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_two_clients_fetch_at_once_like_ab() {
    let t = Tunnel::start(&["127.0.0.1:0"]).await;
    let fwd = t.forward(pattern_server().await).await;
    let mut tasks = Vec::new();
    for client in 0..32u64 {
        tasks.push(tokio::spawn(async move {
            for i in 0..20 {
                fetch(fwd, 20480, client * 100 + i).await?;
            }
            Ok::<_, String>(())
        }));
    }
    for task in tasks {
        task.await.unwrap().unwrap();
    }
}

/// A destination that answers each request `size(u64) seed(u64)` on the same connection with
/// `payload(size, seed)` in one write, until the client closes.
async fn keepalive_server() -> SocketAddr {
    let l = tcpls_tunnel::frontend::listen("127.0.0.1:0".parse().unwrap()).unwrap();
    let a = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let _ = s.set_nodelay(true);
            tokio::spawn(async move {
                let mut req = [0u8; 16];
                while s.read_exact(&mut req).await.is_ok() {
                    let size = u64::from_be_bytes(req[..8].try_into().unwrap()) as usize;
                    let seed = u64::from_be_bytes(req[8..].try_into().unwrap());
                    s.write_all(&payload(size, seed)).await?;
                }
                s.shutdown().await
            });
        }
    });
    a
}

/// Requests every size of `SIZES`, in turn, on one connection; each answer verified.
async fn keepalive_client(via: SocketAddr, seed: u64) -> Result<(), String> {
    let mut s = TcpStream::connect(via).await.map_err(|e| e.to_string())?;
    s.set_nodelay(true).map_err(|e| e.to_string())?;
    for (i, &size) in SIZES.iter().enumerate() {
        let seed = seed * 1000 + i as u64;
        let mut req = (size as u64).to_be_bytes().to_vec();
        req.extend_from_slice(&seed.to_be_bytes());
        s.write_all(&req).await.map_err(|e| e.to_string())?;
        let mut got = vec![0u8; size];
        timeout(T, s.read_exact(&mut got))
            .await
            .map_err(|_| format!("response {i} ({size} bytes) stalled"))?
            .map_err(|e| format!("response {i} ({size} bytes): {e}"))?;
        if got != payload(size, seed) {
            return Err(format!("response {i} ({size} bytes): content differs"));
        }
    }
    s.shutdown().await.map_err(|e| e.to_string())?;
    // Nothing more than the answers asked for: the destination's FIN comes next.
    let mut rest = Vec::new();
    timeout(T, s.read_to_end(&mut rest)).await.map_err(|_| "no FIN".to_string())?.map_err(|e| e.to_string())?;
    if !rest.is_empty() {
        return Err(format!("{} bytes after the last answer", rest.len()));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_responses_on_one_connection_keep_alive() {
    let t = Tunnel::start(&["127.0.0.1:0"]).await;
    let fwd = t.forward(keepalive_server().await).await;
    let mut tasks = Vec::new();
    for client in 0..8u64 {
        tasks.push(tokio::spawn(keepalive_client(fwd, client)));
    }
    for task in tasks {
        task.await.unwrap().unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destination_that_speaks_first() {
    // The application sends nothing before the greeting: the request leaves alone, at once.
    let l = tcpls_tunnel::frontend::listen("127.0.0.1:0".parse().unwrap()).unwrap();
    let dest = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                s.write_all(&payload(5000, 7)).await?;
                // Then an echo of what the application answers, until its FIN.
                let mut answer = Vec::new();
                s.read_to_end(&mut answer).await?;
                s.write_all(&answer).await?;
                s.shutdown().await
            });
        }
    });
    let t = Tunnel::start(&["127.0.0.1:0"]).await;
    let fwd = t.forward(dest).await;
    let mut s = TcpStream::connect(fwd).await.unwrap();
    let mut greeting = vec![0u8; 5000];
    timeout(T, s.read_exact(&mut greeting)).await.unwrap().unwrap();
    assert!(greeting == payload(5000, 7), "the greeting differs");
    echo_roundtrip(s, payload(70_000, 8)).await.unwrap();
}
