//! TCPLS in the test bed: a download server in the server namespace and client sessions in the
//! client namespace, each on its own tokio runtime on a thread inside its namespace.
//!
//! Protocol on every stream: the client sends a 16-byte request (`bytes`, `seed`, both u64 BE)
//! and finishes its side; the server answers with `bytes` bytes of the seed's pattern
//! ([`crate::pattern`]) and finishes. The client checks every byte.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rustls::ServerConfig;
use tcpls::proto::sync::LockExt;
use tcpls::{ConnId, JoinRegistry, RecvStream, SendStream, Session, SessionConfig, TcplsListener};
use tcpls_netem::{Side, Topology};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::pattern::{self, Verifier};
use crate::trace::Meter;

/// Request header length.
pub const REQUEST_LEN: usize = 16;

pub fn encode_request(bytes: u64, seed: u64) -> [u8; REQUEST_LEN] {
    let mut r = [0u8; REQUEST_LEN];
    r[..8].copy_from_slice(&bytes.to_be_bytes());
    r[8..].copy_from_slice(&seed.to_be_bytes());
    r
}

pub fn decode_request(r: &[u8; REQUEST_LEN]) -> (u64, u64) {
    let mut b = [0u8; 8];
    b.copy_from_slice(&r[..8]);
    let mut s = [0u8; 8];
    s.copy_from_slice(&r[8..]);
    (u64::from_be_bytes(b), u64::from_be_bytes(s))
}

/// Largest download a request may ask for (a bound on what a request can make us send).
const MAX_DOWNLOAD: u64 = 1 << 34;

/// A running TCPLS download server; stops when dropped.
pub struct TcplsServer {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    sessions: Sessions,
}

/// Every session the server accepted (handles stay valid after the session ended).
type Sessions = Arc<Mutex<Vec<Session>>>;

impl TcplsServer {
    /// Listens on every address of `addrs` (one listener each, sharing a join registry) in the
    /// server namespace; returns once they are bound.
    pub fn start(
        topo: &Topology,
        addrs: Vec<SocketAddr>,
        tls: Arc<ServerConfig>,
        settings: SessionConfig,
    ) -> Result<TcplsServer, String> {
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let sessions: Sessions = Arc::default();
        let f = sessions.clone();
        let thread = topo
            .spawn_in(Side::Server, move || {
                let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(format!("tokio runtime: {e}")));
                        return;
                    }
                };
                rt.block_on(serve(addrs, tls, settings, ready_tx, stop_rx, f));
                // Dropping the runtime ends the sessions' drivers; the handles in `sessions`
                // keep their statistics.
            })
            .map_err(|e| format!("cannot start the server thread: {e}"))?;
        ready_rx.recv_timeout(Duration::from_secs(10)).map_err(|_| "the TCPLS server did not start".to_string())??;
        Ok(TcplsServer { stop: Some(stop_tx), thread: Some(thread), sessions })
    }

    /// Failovers (connections failed with unacknowledged records re-sent elsewhere) of all the
    /// server's sessions, ended or not.
    pub fn failovers(&self) -> u64 {
        self.sessions.lock_unpoisoned().iter().map(|s| s.stats().failovers).sum()
    }
}

impl Drop for TcplsServer {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn serve(
    addrs: Vec<SocketAddr>,
    tls: Arc<ServerConfig>,
    settings: SessionConfig,
    ready: mpsc::Sender<Result<(), String>>,
    stop: tokio::sync::oneshot::Receiver<()>,
    sessions: Sessions,
) {
    let registry = JoinRegistry::new();
    let mut listeners = Vec::new();
    for a in addrs {
        match TcplsListener::bind_with_registry(a, tls.clone(), settings.clone(), registry.clone()).await {
            Ok(l) => listeners.push(l),
            Err(e) => {
                let _ = ready.send(Err(format!("cannot listen on {a}: {e}")));
                return;
            }
        }
    }
    let _ = ready.send(Ok(()));
    let mut tasks = tokio::task::JoinSet::new();
    for l in listeners {
        let sessions = sessions.clone();
        tasks.spawn(async move {
            while let Some((session, _)) = l.accept().await {
                sessions.lock_unpoisoned().push(session.clone());
                tokio::spawn(serve_session(session));
            }
        });
    }
    let _ = stop.await;
}

/// Serves download requests on every stream the peer opens, until the session ends.
pub async fn serve_session(session: Session) {
    let s = session.clone();
    let streams = tokio::spawn(async move {
        while let Some((send, recv)) = s.accept_stream().await {
            tokio::spawn(serve_stream(send, recv));
        }
    });
    let _ = session.closed().await;
    streams.abort();
}

async fn serve_stream(mut send: SendStream, mut recv: RecvStream) {
    let mut req = [0u8; REQUEST_LEN];
    if recv.read_exact(&mut req).await.is_err() {
        return;
    }
    let (bytes, seed) = decode_request(&req);
    let bytes = bytes.min(MAX_DOWNLOAD);
    let mut off = 0u64;
    while off < bytes {
        let c = pattern::chunk(seed, off, (bytes - off).min(256 << 10) as usize);
        if send.write_all(c).await.is_err() {
            return;
        }
        off += c.len() as u64;
    }
    let _ = send.shutdown().await;
}

/// Runs `f` on a tokio runtime on a new thread in the client namespace, giving up after `limit`.
pub fn spawn_client<T, Fut>(
    topo: &Topology,
    limit: Duration,
    f: impl FnOnce() -> Fut + Send + 'static,
) -> Result<JoinHandle<Result<T, String>>, String>
where
    T: Send + 'static,
    Fut: Future<Output = Result<T, String>>,
{
    topo.spawn_in(Side::Client, move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
        rt.block_on(async move {
            tokio::time::timeout(limit, f()).await.map_err(|_| format!("client gave up after {limit:?}"))?
        })
    })
    .map_err(|e| format!("cannot start the client thread: {e}"))
}

/// Waits for a client thread.
pub fn join<T>(h: JoinHandle<Result<T, String>>) -> Result<T, String> {
    h.join().map_err(|_| "client thread panicked".to_string())?
}

/// Opens a stream and asks for a download of `bytes` bytes with `seed`; with `steer`, both
/// directions of the stream are steered to that connection.
pub async fn request(
    session: &Session,
    bytes: u64,
    seed: u64,
    steer: Option<ConnId>,
) -> Result<(SendStream, RecvStream), String> {
    let (mut send, recv) = session.open_stream().map_err(|e| format!("open stream: {e}"))?;
    if let Some(c) = steer {
        send.steer(Some(c)).map_err(|e| format!("steer: {e}"))?;
        recv.request_steer(c);
    }
    send.write_all(&encode_request(bytes, seed)).await.map_err(|e| format!("request: {e}"))?;
    send.flush().await.map_err(|e| format!("request: {e}"))?;
    Ok((send, recv))
}

/// Reads a download to its end, logging reads in `meter`; returns (bytes, verified).
pub async fn receive(recv: &mut RecvStream, seed: u64, expected: u64, meter: &Meter) -> Result<(u64, bool), String> {
    let mut v = Verifier::new(seed);
    let mut buf = vec![0u8; 256 << 10];
    loop {
        let n = recv.read(&mut buf).await.map_err(|e| format!("receive after {} bytes: {e}", v.len()))?;
        if n == 0 {
            break;
        }
        meter.add(n);
        v.feed(&buf[..n]);
    }
    Ok((v.len(), v.verified(expected)))
}

/// Closes a finished session without waiting forever for dead connections.
pub async fn close(session: &Session) {
    let _ = tokio::time::timeout(Duration::from_secs(5), session.close()).await;
}
