//! The ends of `experiments tunnel`: a plain TCP server (the destination), a TCPLS server and a
//! tunnel concentrator, each on its own thread and tokio runtime, and the request protocol
//! they all speak (over a TCP connection, a TCPLS stream or a tunnelled TCP connection).
//!
//! Protocol: the client sends 800-byte requests (a typical HTTP request header). Bytes 0..8 of
//! a request: the response size (u64 BE); bytes 8..16: 0, or an upload follows (then the
//! client sends pattern bytes until it finishes its side and the server answers with the
//! number of bytes it received, u64 BE, or u64::MAX if they were not the pattern). A response
//! is that many pattern bytes; then the next request may follow on the same connection.

use std::net::SocketAddr;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use rustls::ServerConfig;
use tcpls::{SessionConfig, TcplsListener};
use tcpls_netem::{Side, Topology};
use tcpls_tunnel::tunnel::{Concentrator, TunnelConfig};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::pattern::{self, Verifier};

/// Request size (the thesis's 800-byte requests).
pub const REQUEST_LEN: usize = 800;
/// Seeds of the uploaded and of the response bytes.
pub const UPLOAD_SEED: u64 = 51;
pub const RESPONSE_SEED: u64 = 52;
/// Answer to an upload whose bytes were not the pattern.
pub const CORRUPTED: u64 = u64::MAX;
/// Largest response a request may ask for.
const MAX_RESPONSE: u64 = 1 << 30;

pub fn encode_request(response: u64, upload: bool) -> [u8; REQUEST_LEN] {
    let mut r = [0u8; REQUEST_LEN];
    r[..8].copy_from_slice(&response.to_be_bytes());
    r[15] = u8::from(upload);
    r
}

fn decode_request(r: &[u8; REQUEST_LEN]) -> (u64, bool) {
    let mut b = [0u8; 8];
    b.copy_from_slice(&r[..8]);
    (u64::from_be_bytes(b), r[15] != 0)
}

/// Writes `bytes` pattern bytes of `seed` from offset 0.
pub async fn write_pattern<W: AsyncWrite + Unpin>(w: &mut W, seed: u64, bytes: u64) -> std::io::Result<()> {
    let mut off = 0;
    while off < bytes {
        let c = pattern::chunk(seed, off, (bytes - off).min(256 << 10) as usize);
        w.write_all(c).await?;
        off += c.len() as u64;
    }
    Ok(())
}

/// Serves requests on one connection or stream until the peer finishes its side.
pub async fn serve<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(mut r: R, mut w: W) -> std::io::Result<()> {
    let mut req = [0u8; REQUEST_LEN];
    let mut buf = vec![0u8; 256 << 10];
    loop {
        if r.read_exact(&mut req).await.is_err() {
            return w.shutdown().await; // the peer is done
        }
        let (response, upload) = decode_request(&req);
        if upload {
            let mut v = Verifier::new(UPLOAD_SEED);
            loop {
                let n = r.read(&mut buf).await?;
                if n == 0 {
                    break;
                }
                v.feed(&buf[..n]);
            }
            let answer = if v.verified(v.len()) { v.len() } else { CORRUPTED };
            w.write_all(&answer.to_be_bytes()).await?;
            return w.shutdown().await;
        }
        write_pattern(&mut w, RESPONSE_SEED, response.min(MAX_RESPONSE)).await?;
        w.flush().await?;
    }
}

/// A server thread; stops when dropped.
pub struct ServerThread {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for ServerThread {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Runs `serve` (given a ready signal) on a new runtime on a thread in the server namespace,
/// until dropped.
fn start<F, Fut>(topo: &Topology, what: &'static str, serve: F) -> Result<ServerThread, String>
where
    F: FnOnce(mpsc::Sender<Result<(), String>>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let thread = topo
        .spawn_in(Side::Server, move || {
            let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = ready_tx.send(Err(format!("tokio runtime: {e}")));
                    return;
                }
            };
            rt.block_on(async move {
                tokio::select! {
                    () = serve(ready_tx) => {}
                    _ = stop_rx => {}
                }
            });
        })
        .map_err(|e| format!("cannot start the {what} thread: {e}"))?;
    ready_rx.recv_timeout(Duration::from_secs(10)).map_err(|_| format!("the {what} did not start"))??;
    Ok(ServerThread { stop: Some(stop_tx), thread: Some(thread) })
}

/// The destination: plain TCP.
pub fn tcp_server(topo: &Topology, addr: SocketAddr) -> Result<ServerThread, String> {
    start(topo, "TCP server", move |ready| async move {
        let l = match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => l,
            Err(e) => {
                let _ = ready.send(Err(format!("cannot listen on {addr}: {e}")));
                return;
            }
        };
        let _ = ready.send(Ok(()));
        while let Ok((s, _)) = l.accept().await {
            let _ = s.set_nodelay(true);
            tokio::spawn(async move {
                let (r, w) = s.into_split();
                let _ = serve(r, w).await;
            });
        }
    })
}

/// The same service over TCPLS, one request sequence per stream.
pub fn tcpls_server(topo: &Topology, addr: SocketAddr, tls: Arc<ServerConfig>) -> Result<ServerThread, String> {
    start(topo, "TCPLS server", move |ready| async move {
        let l = match TcplsListener::bind_with(addr, tls, SessionConfig::default()).await {
            Ok(l) => l,
            Err(e) => {
                let _ = ready.send(Err(format!("cannot listen on {addr}: {e}")));
                return;
            }
        };
        let _ = ready.send(Ok(()));
        while let Some((session, _)) = l.accept().await {
            tokio::spawn(async move {
                while let Some((send, recv)) = session.accept_stream().await {
                    tokio::spawn(async move {
                        let _ = serve(recv, send).await;
                    });
                }
            });
        }
    })
}

/// The tunnel concentrator with its default configuration, except the destination policy: the
/// destination server shares the concentrator's namespace and address (the thesis's setup), which
/// the default policy refuses as "this host".
pub fn concentrator(topo: &Topology, addr: SocketAddr, tls: Arc<ServerConfig>) -> Result<ServerThread, String> {
    let cfg = TunnelConfig { dest_policy: tcpls_tunnel::DestPolicy::allow_all(), ..TunnelConfig::default() };
    start(topo, "concentrator", move |ready| async move {
        match Concentrator::bind(&[addr], tls, cfg).await {
            Ok(c) => {
                let _ = ready.send(Ok(()));
                let _ = c.run(|_| {}).await;
            }
            Err(e) => {
                let _ = ready.send(Err(format!("cannot listen on {addr}: {e}")));
            }
        }
    })
}
