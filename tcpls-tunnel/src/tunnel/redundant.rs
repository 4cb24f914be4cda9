//! Redundant mode of UDP flows (docs/TUNNEL.md §6, PROTOCOL.md §8.1): every datagram travels
//! on every usable path, so that the loss or the outage of a path is invisible to real-time
//! traffic (VoIP, games), at the cost of sending each datagram once per path.
//!
//! A redundant flow is one stream per path ("copy"), each steered to its connection both ways
//! and opened with UDP Associate + Redundant Flow(flow ID) + End; the concentrator joins the
//! copies of one flow ID (within the session) to one UDP socket. On these streams each datagram
//! is `Sequence(64) Length(16) payload`; the sequence numbers count the datagrams of one
//! direction of the flow, and the receiving end delivers the first copy of each and drops the
//! others with a [`ReplayWindow`]: a fixed-size bitmap over the last [`WINDOW`] sequence
//! numbers, as IPsec's anti-replay window (RFC 4303 §3.4.3). Whatever sequence numbers a
//! hostile peer sends, a flow's duplicate state stays these 136 bytes; a datagram older than the
//! window is dropped (it would be late for real-time traffic anyway).
//!
//! A concentrator that predates this mode answers the unknown TLV with Error (Malformed TLV):
//! the client then says so once (a warning) and carries the flow on one stream, as without
//! redundant mode.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tcpls::{RecvStream, SendStream};
use tcpls_proto::sync::LockExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::UdpSocket;
use tokio::sync::{broadcast, mpsc, OnceCell};
use tracing::debug;

use super::datagram::{idle_for, millis, MAX_DATAGRAM};
use super::Target;

/// Sequence numbers remembered behind the highest one seen (the duplicate window).
pub const WINDOW: u64 = 1024;
const WORDS: usize = (WINDOW / 64) as usize;
/// Copies (streams, one per path) of one flow at most; more are refused.
pub const MAX_COPIES: usize = 4;
/// Datagrams queued per copy (client) or per flow for all copies (concentrator): a copy on a
/// dead path falls behind and loses its oldest datagrams rather than buffer them.
pub const COPY_QUEUE: usize = 16;

/// The duplicate filter of one direction of a flow: accepts each sequence number once, within
/// the last [`WINDOW`] numbers; fixed size (RFC 4303 §3.4.3's sliding window).
#[derive(Debug, Clone)]
pub struct ReplayWindow {
    /// One more than the highest sequence number accepted (0: none yet).
    next: u64,
    /// Bit `i`: sequence number `next - 1 - i` was accepted.
    seen: [u64; WORDS],
}

impl Default for ReplayWindow {
    fn default() -> Self {
        ReplayWindow { next: 0, seen: [0; WORDS] }
    }
}

impl ReplayWindow {
    /// True (and remembered) the first time `seq` is seen; false for a duplicate, for a number
    /// older than the window, and for `u64::MAX` (never sent: a sender starts at 0).
    pub fn accept(&mut self, seq: u64) -> bool {
        if seq == u64::MAX {
            return false;
        }
        if seq >= self.next {
            self.shift(seq + 1 - self.next);
            self.next = seq + 1;
            self.seen[0] |= 1;
            return true;
        }
        let offset = self.next - 1 - seq;
        if offset >= WINDOW {
            return false;
        }
        let (word, bit) = ((offset / 64) as usize, offset % 64);
        let fresh = self.seen[word] & (1 << bit) == 0;
        self.seen[word] |= 1 << bit;
        fresh
    }

    /// Ages every remembered number by `by` positions (a left shift of the bitmap).
    fn shift(&mut self, by: u64) {
        if by >= WINDOW {
            self.seen = [0; WORDS];
            return;
        }
        let (words, bits) = ((by / 64) as usize, (by % 64) as u32);
        for i in (0..WORDS).rev() {
            let lo = i.checked_sub(words).map_or(0, |j| self.seen[j]);
            let below = i.checked_sub(words + 1).map_or(0, |j| self.seen[j]);
            self.seen[i] = if bits == 0 { lo } else { (lo << bits) | (below >> (64 - bits)) };
        }
    }
}

/// One datagram in its redundant stream form.
pub fn frame(seq: u64, payload: &[u8]) -> Vec<u8> {
    let len = payload.len().min(MAX_DATAGRAM);
    let mut out = Vec::with_capacity(10 + len);
    out.extend_from_slice(&seq.to_be_bytes());
    out.extend_from_slice(&(len as u16).to_be_bytes());
    out.extend_from_slice(&payload[..len]);
    out
}

/// Reads the next datagram into `buf`; its sequence number, or None when the stream ended
/// cleanly between datagrams (an end inside one is an error).
pub async fn read_datagram<R: AsyncRead + Unpin>(r: &mut R, buf: &mut Vec<u8>) -> io::Result<Option<u64>> {
    let mut head = [0u8; 10];
    if r.read(&mut head[..1]).await? == 0 {
        return Ok(None);
    }
    r.read_exact(&mut head[1..]).await?;
    let seq = u64::from_be_bytes([head[0], head[1], head[2], head[3], head[4], head[5], head[6], head[7]]);
    buf.resize(usize::from(u16::from_be_bytes([head[8], head[9]])), 0);
    r.read_exact(buf).await?;
    Ok(Some(seq))
}

/// Client: the copies of one flow, opened, and whether the concentrator agreed to the
/// redundant framing (false: one plain stream, the fallback for an older concentrator).
pub struct FlowStreams {
    pub copies: Vec<(SendStream, RecvStream)>,
    pub sequenced: bool,
}

/// Client: relays between the application's datagrams (`up`) and the flow's copies until `up`
/// closes, every copy ended, or nothing moved for `idle`. `deliver` gets each reply once.
pub async fn run_client_copies(
    copies: Vec<(SendStream, RecvStream)>,
    mut up: mpsc::Receiver<Vec<u8>>,
    deliver: Arc<dyn Fn(Vec<u8>) + Send + Sync>,
    idle: Duration,
) {
    let start = Instant::now();
    let last = Arc::new(AtomicU64::new(0));
    let window = Arc::new(Mutex::new(ReplayWindow::default()));
    let mut tasks = tokio::task::JoinSet::new();
    let mut writers = Vec::new();
    let readers = Arc::new(AtomicUsize::new(copies.len()));
    let (all_ended_tx, mut all_ended) = mpsc::channel::<()>(1);
    for (mut send, mut recv) in copies {
        let (tx, mut rx) = mpsc::channel::<Arc<Vec<u8>>>(COPY_QUEUE);
        writers.push(tx);
        tasks.spawn(async move {
            while let Some(f) = rx.recv().await {
                if send.write_all(&f).await.is_err() {
                    return;
                }
            }
            let _ = send.finish();
        });
        let (window, deliver, last, readers, all_ended_tx) =
            (window.clone(), deliver.clone(), last.clone(), readers.clone(), all_ended_tx.clone());
        tasks.spawn(async move {
            let mut buf = Vec::new();
            while let Ok(Some(seq)) = read_datagram(&mut recv, &mut buf).await {
                last.store(millis(start), Ordering::Relaxed);
                if window.lock_unpoisoned().accept(seq) {
                    deliver(std::mem::take(&mut buf));
                }
            }
            if readers.fetch_sub(1, Ordering::SeqCst) == 1 {
                let _ = all_ended_tx.try_send(());
            }
        });
    }
    drop(all_ended_tx);
    let sending = async {
        let mut seq = 0u64;
        while let Some(d) = up.recv().await {
            last.store(millis(start), Ordering::Relaxed);
            let f = Arc::new(frame(seq, &d));
            seq += 1;
            // A copy whose queue is full (its path stalled) misses this one; the others carry it.
            for w in &writers {
                let _ = w.try_send(f.clone());
            }
        }
    };
    tokio::select! {
        _ = sending => {}
        _ = all_ended.recv() => {}
        _ = idle_for(start, &last, idle) => debug!("tunnel: redundant UDP flow idle, closed"),
    }
    // Dropping a stream finishes it (FIN): the concentrator's copies end too.
    tasks.abort_all();
}

/// Concentrator: one redundant flow, shared by its copies (streams).
pub struct SharedFlow {
    target: Target,
    /// The connected socket to the destination (or why it could not be had), set by the first
    /// copy; the others wait for it.
    socket: OnceCell<Result<Arc<UdpSocket>, (u16, String)>>,
    /// Client → destination duplicates.
    up_window: Mutex<ReplayWindow>,
    /// Destination → client datagrams, framed, for every copy.
    down: broadcast::Sender<Arc<Vec<u8>>>,
    copies: AtomicUsize,
}

/// Concentrator: the redundant flows of one session by flow ID. Its entries are only those of
/// flows that have a live copy (a stream), so it is bounded by the session's streams.
#[derive(Default)]
pub struct Registry {
    flows: Mutex<HashMap<u64, Weak<SharedFlow>>>,
}

/// A copy's membership of its flow; leaving when dropped.
pub struct Copy(Arc<SharedFlow>);

impl Drop for Copy {
    fn drop(&mut self) {
        self.0.copies.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Registry {
    /// Joins the copy of flow `id` to `target` (creating the flow for its first copy).
    pub fn join(&self, id: u64, target: &Target) -> Result<Copy, String> {
        let mut flows = self.flows.lock_unpoisoned();
        flows.retain(|_, f| f.strong_count() > 0);
        let flow = match flows.get(&id).and_then(Weak::upgrade) {
            Some(f) if &f.target != target => {
                return Err(format!("redundant flow {id:#x} is to {}, not {target}", f.target))
            }
            Some(f) => f,
            None => {
                let (down, _) = broadcast::channel(COPY_QUEUE);
                let f = Arc::new(SharedFlow {
                    target: target.clone(),
                    socket: OnceCell::new(),
                    up_window: Mutex::new(ReplayWindow::default()),
                    down,
                    copies: AtomicUsize::new(0),
                });
                flows.insert(id, Arc::downgrade(&f));
                f
            }
        };
        if flow.copies.fetch_add(1, Ordering::SeqCst) >= MAX_COPIES {
            flow.copies.fetch_sub(1, Ordering::SeqCst);
            return Err(format!("redundant flow {id:#x} has {MAX_COPIES} copies already"));
        }
        Ok(Copy(flow))
    }
}

impl Copy {
    /// The flow's socket: opened by `dial` for the first copy (which also starts relaying the
    /// destination's datagrams to every copy), the same for the others.
    pub async fn socket<F, Fut>(&self, dial: F) -> Result<Arc<UdpSocket>, (u16, String)>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<UdpSocket, (u16, String)>>,
    {
        let flow = &self.0;
        flow.socket
            .get_or_init(|| async {
                let sock = Arc::new(dial().await?);
                tokio::spawn(read_destination(sock.clone(), flow.down.clone(), Arc::downgrade(flow)));
                Ok(sock)
            })
            .await
            .clone()
    }

    /// Relays between this copy's stream and the flow's socket until the stream ends, the flow
    /// is idle for `idle`, or the stream fails. `fits`: the client's rate allows this datagram.
    pub async fn relay(
        &self,
        sock: &UdpSocket,
        mut send: SendStream,
        mut recv: RecvStream,
        idle: Duration,
        fits: &(dyn Fn(usize) -> bool + Sync),
    ) -> (u64, u64) {
        let flow = &self.0;
        let mut down_rx = flow.down.subscribe();
        let start = Instant::now();
        let last = AtomicU64::new(0);
        let (up_n, down_n) = (AtomicU64::new(0), AtomicU64::new(0));
        let up = async {
            let mut buf = Vec::new();
            while let Ok(Some(seq)) = read_datagram(&mut recv, &mut buf).await {
                last.store(millis(start), Ordering::Relaxed);
                if flow.up_window.lock_unpoisoned().accept(seq) && fits(buf.len()) {
                    up_n.fetch_add(1, Ordering::Relaxed);
                    let _ = sock.send(&buf).await;
                }
            }
        };
        let down = async {
            loop {
                match down_rx.recv().await {
                    Ok(f) => {
                        last.store(millis(start), Ordering::Relaxed);
                        down_n.fetch_add(1, Ordering::Relaxed);
                        if send.write_all(&f).await.is_err() {
                            return;
                        }
                    }
                    // This copy fell behind (its path stalled): the other copies carried those.
                    Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        };
        tokio::select! {
            _ = up => {}
            _ = down => {}
            _ = idle_for(start, &last, idle) => {}
        }
        let _ = send.finish();
        (up_n.load(Ordering::Relaxed), down_n.load(Ordering::Relaxed))
    }
}

/// Reads the destination's datagrams and hands each, numbered, to every copy; ends when the
/// flow has no copy left (checked at each datagram and every second).
async fn read_destination(sock: Arc<UdpSocket>, down: broadcast::Sender<Arc<Vec<u8>>>, flow: Weak<SharedFlow>) {
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let mut seq = 0u64;
    loop {
        tokio::select! {
            r = sock.recv(&mut buf) => {
                if let Ok(n) = r {
                    // No copy subscribed right now: the datagram is dropped, as UDP may.
                    let _ = down.send(Arc::new(frame(seq, &buf[..n])));
                    seq += 1;
                }
            }
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
        if flow.strong_count() == 0 {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn window_accepts_each_number_once() {
        let mut w = ReplayWindow::default();
        for seq in [0, 1, 2, 5, 4, 3, 100, 99, 7] {
            assert!(w.accept(seq), "{seq}");
        }
        for seq in [0, 1, 2, 3, 4, 5, 7, 99, 100] {
            assert!(!w.accept(seq), "{seq} twice");
        }
        assert!(w.accept(6));
        // Older than the window behind 100 + WINDOW: dropped; just inside: accepted once.
        assert!(w.accept(100 + WINDOW));
        assert!(!w.accept(100));
        assert!(w.accept(101));
        assert!(!w.accept(101));
        assert!(!w.accept(u64::MAX));
    }

    #[test]
    fn window_shifts_across_words() {
        // Against a plain set: every order of a permuted range within the window.
        let mut w = ReplayWindow::default();
        let mut seen = std::collections::HashSet::new();
        let mut x = 7u64;
        for _ in 0..20_000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let seq = (x >> 33) % 3000;
            let top = seen.iter().max().copied();
            let expect = match top {
                Some(t) if seq + WINDOW <= t => false,
                _ => !seen.contains(&seq),
            };
            assert_eq!(w.accept(seq), expect, "seq {seq}");
            if expect {
                seen.insert(seq);
            }
        }
    }

    #[test]
    fn hostile_sequence_numbers_keep_the_window_fixed() {
        // The state is a fixed array: its size does not depend on what arrives.
        assert_eq!(std::mem::size_of::<ReplayWindow>(), 8 + (WINDOW as usize) / 8);
        let mut w = ReplayWindow::default();
        let mut x = 1u64;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let _ = w.accept(x);
        }
        // After a jump to near the top, the flow still filters and never overflows.
        let _ = w.accept(u64::MAX - 1);
        assert!(!w.accept(u64::MAX - 1));
        assert!(!w.accept(0));
    }

    #[tokio::test]
    async fn framing_vectors_and_truncation() {
        assert_eq!(frame(1, b"hi"), [0, 0, 0, 0, 0, 0, 0, 1, 0x00, 0x02, b'h', b'i']);
        let stream = [frame(7, b"one"), frame(8, b"")].concat();
        let mut r = &stream[..];
        let mut buf = Vec::new();
        assert_eq!(read_datagram(&mut r, &mut buf).await.unwrap(), Some(7));
        assert_eq!(buf, b"one");
        assert_eq!(read_datagram(&mut r, &mut buf).await.unwrap(), Some(8));
        assert!(buf.is_empty());
        assert_eq!(read_datagram(&mut r, &mut buf).await.unwrap(), None);
        assert!(read_datagram(&mut &stream[..5], &mut buf).await.is_err());
        assert!(read_datagram(&mut &stream[..12], &mut buf).await.is_err());
    }

    #[test]
    fn registry_joins_copies_and_bounds_them() {
        let reg = Registry::default();
        let t = Target::Addr("127.0.0.1:53".parse().unwrap());
        let copies: Vec<Copy> = (0..MAX_COPIES).map(|_| reg.join(9, &t).unwrap()).collect();
        assert!(copies.windows(2).all(|c| Arc::ptr_eq(&c[0].0, &c[1].0)));
        assert!(reg.join(9, &t).is_err(), "one copy too many");
        let other = Target::Addr("127.0.0.1:54".parse().unwrap());
        assert!(reg.join(9, &other).is_err(), "same flow ID, another destination");
        drop(copies);
        // The flow is gone with its copies: a new one starts afresh.
        let again = reg.join(9, &other).unwrap();
        assert_eq!(again.0.copies.load(Ordering::SeqCst), 1);
        assert_eq!(reg.flows.lock_unpoisoned().len(), 1);
    }
}
