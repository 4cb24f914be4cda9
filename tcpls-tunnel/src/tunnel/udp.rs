//! UDP over the tunnel (PROTOCOL.md §8.1): one TCPLS stream per UDP flow, opened with UDP
//! Associate (by Name) and answered like a TCP Connect; after End, each datagram travels as
//! `Length(16)` (big endian) + payload, in both directions.
//!
//! UDP semantics are kept where the stream would add memory: the concentrator reads its socket
//! only as fast as the stream takes datagrams (the kernel's socket buffer drops the rest); the
//! client queues at most [`FLOW_QUEUE`] datagrams per flow and drops beyond (counted). A flow
//! with no datagram either way for `TunnelConfig::udp_idle_timeout` ends (stream FIN).

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tcpls::{RecvStream, SendStream};
use tcpls_proto::sync::LockExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, watch};
use tracing::debug;

use super::redundant::FlowStreams;
use super::Target;

pub use super::datagram::MAX_DATAGRAM;
use super::datagram::{idle_for, millis};
/// Datagrams queued per flow on the client before the stream takes them; more are dropped.
pub const FLOW_QUEUE: usize = 64;

/// One datagram in its stream form.
pub fn frame(payload: &[u8]) -> Vec<u8> {
    let len = payload.len().min(MAX_DATAGRAM);
    let mut out = Vec::with_capacity(2 + len);
    out.extend_from_slice(&(len as u16).to_be_bytes());
    out.extend_from_slice(&payload[..len]);
    out
}

/// Reads the next datagram into `buf` (resized to it). `Ok(false)`: the stream ended cleanly
/// between datagrams; an end inside one is an error.
pub async fn read_datagram<R: AsyncRead + Unpin>(r: &mut R, buf: &mut Vec<u8>) -> io::Result<bool> {
    let mut len = [0u8; 2];
    if r.read(&mut len[..1]).await? == 0 {
        return Ok(false);
    }
    r.read_exact(&mut len[1..]).await?;
    buf.resize(usize::from(u16::from_be_bytes(len)), 0);
    r.read_exact(buf).await?;
    Ok(true)
}

/// Datagrams moved by a flow.
#[derive(Debug, Default, Clone, Copy)]
pub struct FlowReport {
    /// Client → destination.
    pub up: u64,
    /// Destination → client.
    pub down: u64,
}

/// Concentrator: relays between a stream and a UDP socket connected to the destination until
/// the client ends the stream, the stream fails, or the flow is idle for `idle`.
/// With a `limiter` (the client's rate), a datagram beyond it is dropped, either way.
pub async fn relay_socket(
    sock: UdpSocket,
    mut send: SendStream,
    mut recv: RecvStream,
    idle: Duration,
    limiter: Option<&super::rate::RateLimiter>,
) -> FlowReport {
    let fits = |n: usize| limiter.is_none_or(|l| l.try_acquire(n));
    let start = Instant::now();
    let last = AtomicU64::new(0);
    let (up_n, down_n) = (AtomicU64::new(0), AtomicU64::new(0));
    let up = async {
        let mut buf = Vec::new();
        while let Ok(true) = read_datagram(&mut recv, &mut buf).await {
            last.store(millis(start), Ordering::Relaxed);
            up_n.fetch_add(1, Ordering::Relaxed);
            // ECONNREFUSED (an ICMP error for an earlier datagram) and the like: UDP goes on.
            if fits(buf.len()) {
                let _ = sock.send(&buf).await;
            }
        }
    };
    let down = async {
        let mut buf = vec![0u8; MAX_DATAGRAM];
        loop {
            let n = match sock.recv(&mut buf).await {
                Ok(n) => n,
                Err(_) => continue,
            };
            last.store(millis(start), Ordering::Relaxed);
            down_n.fetch_add(1, Ordering::Relaxed);
            if !fits(n) {
                continue;
            }
            if send.write_all(&frame(&buf[..n])).await.is_err() {
                return;
            }
        }
    };
    tokio::select! {
        _ = up => {}
        _ = down => {}
        _ = idle_for(start, &last, idle) => {}
    }
    let _ = send.finish();
    FlowReport { up: up_n.load(Ordering::Relaxed), down: down_n.load(Ordering::Relaxed) }
}

/// Turns a payload from `target` into the datagram sent back to the application (the SOCKS5
/// UDP header in front, or nothing for a fixed forward).
pub type Wrap = Arc<dyn Fn(&Target, &[u8]) -> Vec<u8> + Send + Sync>;

/// Opens a flow's stream, or its copies in redundant mode (the tunnel client's `open_udp`).
pub type Opener = Arc<
    dyn Fn(Target) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<FlowStreams, String>> + Send>>
        + Send
        + Sync,
>;

type FlowKey = (SocketAddr, Target);

/// The client's UDP flows of one listening socket (a `--forward-udp` or a SOCKS5 UDP
/// association): one stream per (source, destination), at most `max_flows` at once.
pub struct Flows {
    socket: Arc<UdpSocket>,
    open: Opener,
    wrap: Wrap,
    idle: Duration,
    max_flows: usize,
    table: Mutex<HashMap<FlowKey, mpsc::Sender<Vec<u8>>>>,
    /// Datagrams dropped (queue full, too many flows, or the flow failed to open).
    pub dropped: AtomicU64,
    /// Set when the owner goes away: every flow ends.
    stop: watch::Sender<bool>,
}

impl Flows {
    pub fn new(socket: Arc<UdpSocket>, open: Opener, wrap: Wrap, idle: Duration, max_flows: usize) -> Arc<Flows> {
        let (stop, _) = watch::channel(false);
        Arc::new(Flows {
            socket,
            open,
            wrap,
            idle,
            max_flows: max_flows.max(1),
            table: Mutex::new(HashMap::new()),
            dropped: AtomicU64::new(0),
            stop,
        })
    }

    /// Ends every flow (their streams get a FIN).
    pub fn stop(&self) {
        self.stop.send_replace(true);
    }

    fn drop_one(&self, why: &str) {
        let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
        debug!("tunnel: UDP datagram dropped ({why}); {n} so far");
    }

    /// Sends `payload` from `src` towards `target` on its flow, opening the flow if needed.
    pub fn dispatch(self: &Arc<Self>, src: SocketAddr, target: Target, payload: &[u8]) {
        let key = (src, target);
        let mut table = self.table.lock_unpoisoned();
        if let Some(tx) = table.get(&key) {
            match tx.try_send(payload.to_vec()) {
                Ok(()) => return,
                Err(mpsc::error::TrySendError::Full(_)) => return self.drop_one("flow queue full"),
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    table.remove(&key);
                }
            }
        }
        if table.len() >= self.max_flows {
            return self.drop_one("too many UDP flows");
        }
        let (tx, rx) = mpsc::channel(FLOW_QUEUE);
        let _ = tx.try_send(payload.to_vec());
        table.insert(key.clone(), tx.clone());
        drop(table);
        let me = self.clone();
        tokio::spawn(async move {
            me.run_flow(&key, rx).await;
            let mut table = me.table.lock_unpoisoned();
            if table.get(&key).is_some_and(|t| t.same_channel(&tx)) {
                table.remove(&key);
            }
        });
    }

    async fn run_flow(&self, key: &FlowKey, mut rx: mpsc::Receiver<Vec<u8>>) {
        let (src, target) = key;
        let mut stop = self.stop.subscribe();
        let opened = tokio::select! {
            o = (self.open)(target.clone()) => o,
            _ = stop.wait_for(|s| *s) => return,
        };
        let opened = match opened {
            Ok(x) => x,
            Err(e) => {
                debug!("tunnel: UDP flow {src} -> {target}: {e}");
                rx.close();
                while rx.try_recv().is_ok() {
                    self.drop_one("the flow could not be opened");
                }
                return;
            }
        };
        debug!("tunnel: UDP flow {src} -> {target}: open ({} copies)", opened.copies.len());
        if opened.sequenced {
            let (socket, wrap, to, src) = (self.socket.clone(), self.wrap.clone(), target.clone(), *src);
            let deliver = Arc::new(move |d: Vec<u8>| {
                // Best effort, as UDP: a full socket buffer drops the datagram.
                let _ = socket.try_send_to(&wrap(&to, &d), src);
            });
            tokio::select! {
                _ = super::redundant::run_client_copies(opened.copies, rx, deliver, self.idle) => {}
                _ = stop.wait_for(|s| *s) => {}
            }
            return;
        }
        let Some((mut send, mut recv)) = opened.copies.into_iter().next() else {
            return;
        };
        let start = Instant::now();
        let last = AtomicU64::new(0);
        let up = async {
            while let Some(d) = rx.recv().await {
                last.store(millis(start), Ordering::Relaxed);
                if send.write_all(&frame(&d)).await.is_err() {
                    return;
                }
            }
        };
        let down = async {
            let mut buf = Vec::new();
            while let Ok(true) = read_datagram(&mut recv, &mut buf).await {
                last.store(millis(start), Ordering::Relaxed);
                let _ = self.socket.send_to(&(self.wrap)(target, &buf), src).await;
            }
        };
        tokio::select! {
            _ = up => {}
            _ = down => {}
            _ = idle_for(start, &last, self.idle) => debug!("tunnel: UDP flow {src} -> {target}: idle, closed"),
            _ = stop.wait_for(|s| *s) => {}
        }
        let _ = send.finish();
    }
}

impl Drop for Flows {
    fn drop(&mut self) {
        self.stop.send_replace(true);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn framing_vectors_and_truncation() {
        assert_eq!(frame(b"hi"), [0x00, 0x02, b'h', b'i']);
        assert_eq!(frame(b""), [0x00, 0x00]);
        let mut stream = [frame(b"one"), frame(b""), frame(&[7u8; 300])].concat();
        let mut r = &stream[..];
        let mut buf = Vec::new();
        assert!(read_datagram(&mut r, &mut buf).await.unwrap());
        assert_eq!(buf, b"one");
        assert!(read_datagram(&mut r, &mut buf).await.unwrap());
        assert!(buf.is_empty());
        assert!(read_datagram(&mut r, &mut buf).await.unwrap());
        assert_eq!(buf, [7u8; 300]);
        assert!(!read_datagram(&mut r, &mut buf).await.unwrap());
        // Ends inside a datagram: errors, never a panic or a partial datagram.
        stream.truncate(stream.len() - 1);
        let mut r = &stream[7..];
        assert!(read_datagram(&mut r, &mut buf).await.is_err());
        assert!(read_datagram(&mut &[0x01u8][..], &mut buf).await.is_err());
    }
}
