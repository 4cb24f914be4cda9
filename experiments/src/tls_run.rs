//! Plain TLS over one TCP connection (tokio-rustls), multiplexing responses at the application
//! level as HTTP/2 does: the baseline of the head-of-line blocking experiment.
//!
//! The client sends 16-byte requests (`bytes`, `seed`); the first one is the bulk download, the
//! others are small objects. The server's single writer sends response frames
//! `[seed u64 BE][len u32 BE][data]`: a pending object goes out whole before the next 16 KiB bulk
//! frame, so the object never waits behind application buffers (TM3's "app buffer 0"), only
//! behind what the TLS connection's kernel socket buffer and the network queue already hold.

use std::net::SocketAddr;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use rustls::ServerConfig;
use tcpls_netem::{Side, Topology};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc as tmpsc;

use crate::pattern;
use crate::tcpls_run::{decode_request, REQUEST_LEN};

/// Response frame header length.
pub const FRAME_HEADER: usize = 12;
/// Bulk data per frame.
const BULK_FRAME: u64 = 16 << 10;
/// Largest object a request may ask for.
const MAX_OBJECT: u64 = 1 << 20;

/// Serves one TLS connection on `addr` in the server namespace; ends with the connection.
pub fn start_server(
    topo: &Topology,
    addr: SocketAddr,
    tls: Arc<ServerConfig>,
) -> Result<JoinHandle<Result<(), String>>, String> {
    let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
    let h = topo
        .spawn_in(Side::Server, move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
            rt.block_on(async move {
                let l = match tokio::net::TcpListener::bind(addr).await {
                    Ok(l) => l,
                    Err(e) => {
                        let msg = format!("TLS listen on {addr}: {e}");
                        let _ = ready_tx.send(Err(msg.clone()));
                        return Err(msg);
                    }
                };
                let _ = ready_tx.send(Ok(()));
                let (tcp, _) = tokio::time::timeout(Duration::from_secs(30), l.accept())
                    .await
                    .map_err(|_| "no TLS client within 30 s".to_string())?
                    .map_err(|e| e.to_string())?;
                tcp.set_nodelay(true).map_err(|e| e.to_string())?;
                let tls = tokio_rustls::TlsAcceptor::from(tls).accept(tcp).await.map_err(|e| format!("TLS: {e}"))?;
                serve(tls).await;
                Ok(())
            })
        })
        .map_err(|e| format!("cannot start the TLS server thread: {e}"))?;
    ready_rx.recv_timeout(Duration::from_secs(10)).map_err(|_| "the TLS server did not start".to_string())??;
    Ok(h)
}

async fn serve(tls: tokio_rustls::server::TlsStream<tokio::net::TcpStream>) {
    let (mut rd, mut wr) = tokio::io::split(tls);
    let (req_tx, mut req_rx) = tmpsc::unbounded_channel::<(u64, u64)>();
    let reader = tokio::spawn(async move {
        let mut req = [0u8; REQUEST_LEN];
        while rd.read_exact(&mut req).await.is_ok() {
            if req_tx.send(decode_request(&req)).is_err() {
                break;
            }
        }
    });
    // The first request is the bulk download.
    let Some((bulk_len, bulk_seed)) = req_rx.recv().await else { return };
    let mut off = 0u64;
    let mut open = true;
    while off < bulk_len {
        // Objects requested meanwhile go first, whole.
        while let Ok((len, seed)) = req_rx.try_recv() {
            let data = pattern::chunk(seed, 0, len.min(MAX_OBJECT) as usize);
            if write_frame(&mut wr, seed, data).await.is_err() {
                open = false;
                break;
            }
        }
        if !open {
            break;
        }
        let data = pattern::chunk(bulk_seed, off, (bulk_len - off).min(BULK_FRAME) as usize);
        if write_frame(&mut wr, bulk_seed, data).await.is_err() {
            break;
        }
        off += data.len() as u64;
    }
    let _ = wr.shutdown().await;
    reader.abort();
}

async fn write_frame<W: AsyncWriteExt + Unpin>(w: &mut W, seed: u64, data: &[u8]) -> std::io::Result<()> {
    let mut h = [0u8; FRAME_HEADER];
    h[..8].copy_from_slice(&seed.to_be_bytes());
    h[8..].copy_from_slice(&(data.len() as u32).to_be_bytes());
    w.write_all(&h).await?;
    w.write_all(data).await
}

/// Reads the next response frame header: (seed, len).
pub async fn read_frame_header<R: AsyncReadExt + Unpin>(r: &mut R) -> std::io::Result<(u64, usize)> {
    let mut h = [0u8; FRAME_HEADER];
    r.read_exact(&mut h).await?;
    let mut s = [0u8; 8];
    s.copy_from_slice(&h[..8]);
    let mut l = [0u8; 4];
    l.copy_from_slice(&h[8..]);
    Ok((u64::from_be_bytes(s), u32::from_be_bytes(l) as usize))
}
