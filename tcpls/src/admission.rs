//! Which accepted TCP connections get to run a handshake, so that idle or slow clients cannot
//! hold every handshake slot (docs/SECURITY.md).
//!
//! A connection first waits for its first byte (the ClientHello) for at most
//! [`FIRST_BYTE_TIMEOUT`], among at most [`MAX_AWAITING_HELLO`] such connections, of which at
//! most [`MAX_AWAITING_PER_SOURCE`] per source address. When either pool is full, the
//! connection that has waited longest is dropped to make room: a real client sends its
//! ClientHello within a round trip, so idle sockets are the ones that go, and they can never
//! keep a new client (or a failover rejoin) out. Only a connection that sent something takes
//! one of the listener's [`MAX_PENDING_HANDSHAKES`](crate::MAX_PENDING_HANDSHAKES) handshake
//! slots, and a source address holds at most [`MAX_HANDSHAKES_PER_SOURCE`] of them.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tcpls_proto::sync::LockExt;
use tokio::net::TcpStream;
use tokio::sync::Notify;

/// How long a new connection may stay silent before its ClientHello starts.
pub const FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(3);

/// Connections waiting for their first byte, over all sources.
pub const MAX_AWAITING_HELLO: usize = 1024;

/// Connections waiting for their first byte from one source address.
pub const MAX_AWAITING_PER_SOURCE: usize = 64;

/// Handshakes in progress from one source address; more are refused until some finish.
pub const MAX_HANDSHAKES_PER_SOURCE: usize = 128;

#[derive(Default)]
struct State {
    next_id: u64,
    /// Connections waiting for their first byte, oldest first, with what cancels their wait.
    waiting: VecDeque<(u64, IpAddr, Arc<Notify>)>,
    waiting_per_source: HashMap<IpAddr, usize>,
    handshakes_per_source: HashMap<IpAddr, usize>,
}

/// Shared by the tasks of one listener.
#[derive(Clone, Default)]
pub(crate) struct Admission {
    state: Arc<Mutex<State>>,
}

/// Why a connection was not admitted to a handshake.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Nothing arrived within the deadline, or a newer connection took its place.
    Silent,
    /// Its source has too many handshakes in progress.
    SourceBusy,
}

/// A handshake slot of one source, released on drop.
pub(crate) struct HandshakeSlot {
    admission: Admission,
    source: IpAddr,
}

impl Drop for HandshakeSlot {
    fn drop(&mut self) {
        let mut st = self.admission.lock();
        decrement(&mut st.handshakes_per_source, self.source);
    }
}

impl Admission {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock_unpoisoned()
    }

    /// Waits until `stream` has a first byte to read (not consuming it) and reserves a
    /// handshake slot for its source.
    pub(crate) async fn admit(&self, stream: &TcpStream, source: IpAddr) -> Result<HandshakeSlot, Refused> {
        let (id, cancel) = self.enqueue(source);
        let mut first = [0u8; 1];
        let outcome = tokio::select! {
            // In this order: when the first byte is there already (the listener defers accept
            // until it is), the timer is never registered.
            biased;
            // `peek`, not `readable`: readiness may be reported before any byte arrived.
            got = stream.peek(&mut first) => matches!(got, Ok(n) if n > 0),
            () = tokio::time::sleep(FIRST_BYTE_TIMEOUT) => false,
            () = cancel.notified() => false,
        };
        let mut st = self.lock();
        if let Some(pos) = st.waiting.iter().position(|(i, _, _)| *i == id) {
            st.waiting.remove(pos);
            decrement(&mut st.waiting_per_source, source);
        }
        if !outcome {
            return Err(Refused::Silent);
        }
        let busy = st.handshakes_per_source.entry(source).or_default();
        if *busy >= MAX_HANDSHAKES_PER_SOURCE {
            return Err(Refused::SourceBusy);
        }
        *busy += 1;
        Ok(HandshakeSlot { admission: self.clone(), source })
    }

    /// Registers a waiting connection, evicting the longest-waiting one of its source or of
    /// all when a pool is full.
    fn enqueue(&self, source: IpAddr) -> (u64, Arc<Notify>) {
        let mut st = self.lock();
        if st.waiting_per_source.get(&source).copied().unwrap_or(0) >= MAX_AWAITING_PER_SOURCE {
            if let Some(pos) = st.waiting.iter().position(|(_, s, _)| *s == source) {
                evict(&mut st, pos);
            }
        }
        if st.waiting.len() >= MAX_AWAITING_HELLO {
            evict(&mut st, 0);
        }
        st.next_id += 1;
        let id = st.next_id;
        let cancel = Arc::new(Notify::new());
        st.waiting.push_back((id, source, cancel.clone()));
        *st.waiting_per_source.entry(source).or_default() += 1;
        (id, cancel)
    }

    /// Connections waiting for their first byte (for tests and reports).
    pub(crate) fn awaiting(&self) -> usize {
        self.lock().waiting.len()
    }
}

fn evict(st: &mut State, pos: usize) {
    if let Some((_, source, cancel)) = st.waiting.remove(pos) {
        decrement(&mut st.waiting_per_source, source);
        // `notify_one` stores a permit: the wait ends even if it has not started polling yet.
        cancel.notify_one();
    }
}

fn decrement(map: &mut HashMap<IpAddr, usize>, source: IpAddr) {
    if let Some(n) = map.get_mut(&source) {
        *n -= 1;
        if *n == 0 {
            map.remove(&source);
        }
    }
}
