//! A server ticket store for resumption and 0-RTT (RESUMPTION.md): stateful, single-use tickets
//! with a lifetime of our choosing, a bounded size, and rotation.
//!
//! rustls offers early data only with stateful tickets (the `ServerConfig::session_storage`,
//! no `ticketer`): a ticket is then just an ID of state kept here, and rustls resumes TLS 1.3
//! sessions with [`StoresServerSessions::take`], so each ticket works once. That is what bounds
//! 0-RTT replay to nothing within one server process (RFC 8446 §8.1): a replayed ClientHello
//! finds its ticket gone and gets a full handshake, its early data skipped. Servers behind a
//! load balancer need one shared store for this guarantee.
//!
//! rustls advertises a 24-hour lifetime for stateful tickets and keeps them until evicted; this
//! store refuses older tickets than `lifetime` (a refused ticket costs a full handshake, never
//! an error) and [`TicketStore::rotate`] forgets every ticket issued so far.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rustls::server::StoresServerSessions;

use crate::sync::LockExt;

/// Counters of a [`TicketStore`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TicketStats {
    /// Tickets stored (rustls issues `send_tls13_tickets` per full or resumed handshake).
    pub issued: u64,
    /// Tickets taken for a resumption (each works once).
    pub resumed: u64,
    /// Lookups of unknown, used, expired or rotated-out tickets (a full handshake followed).
    pub refused: u64,
}

#[derive(Debug, Default)]
struct Inner {
    entries: HashMap<Vec<u8>, (Instant, Vec<u8>)>,
    /// Insertion order, for eviction; may name entries already taken.
    order: VecDeque<Vec<u8>>,
    stats: TicketStats,
}

/// Stateful, single-use session tickets with a lifetime and a size bound.
#[derive(Debug)]
pub struct TicketStore {
    inner: Mutex<Inner>,
    capacity: usize,
    lifetime: Duration,
}

impl TicketStore {
    /// At most `capacity` tickets (the oldest go first), each valid for `lifetime`.
    pub fn new(capacity: usize, lifetime: Duration) -> Self {
        Self { inner: Mutex::new(Inner::default()), capacity: capacity.max(1), lifetime }
    }

    /// Forgets every ticket issued so far: clients holding them get full handshakes (e.g.
    /// periodically, or when the server's state may have leaked).
    pub fn rotate(&self) {
        let mut inner = self.lock();
        inner.entries.clear();
        inner.order.clear();
    }

    pub fn stats(&self) -> TicketStats {
        self.lock().stats
    }

    /// Tickets currently held.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // The state stays consistent across a panic elsewhere (each method is one short update).
        self.inner.lock_unpoisoned()
    }

    fn fresh(&self, at: Instant) -> bool {
        at.elapsed() < self.lifetime
    }
}

impl StoresServerSessions for TicketStore {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        let mut inner = self.lock();
        while inner.entries.len() >= self.capacity {
            let Some(oldest) = inner.order.pop_front() else { break };
            inner.entries.remove(&oldest);
        }
        // Drop order entries of tickets already taken, so the queue stays bounded too.
        if inner.order.len() >= 2 * self.capacity {
            let Inner { entries, order, .. } = &mut *inner;
            order.retain(|k| entries.contains_key(k));
        }
        inner.order.push_back(key.clone());
        // rustls asks this store without a time, so it reads the clock itself: a server-wide
        // cache beside the sessions, not part of the sans-IO session core.
        inner.entries.insert(key, (Instant::now(), value));
        inner.stats.issued += 1;
        true
    }

    /// TLS 1.2 session IDs (reusable by design); TLS 1.3 uses `take`.
    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        let mut inner = self.lock();
        match inner.entries.get(key) {
            Some((at, value)) if self.fresh(*at) => Some(value.clone()),
            _ => {
                inner.stats.refused += 1;
                None
            }
        }
    }

    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        let mut inner = self.lock();
        match inner.entries.remove(key) {
            Some((at, value)) if self.fresh(at) => {
                inner.stats.resumed += 1;
                Some(value)
            }
            _ => {
                inner.stats.refused += 1;
                None
            }
        }
    }

    fn can_cache(&self) -> bool {
        true
    }
}
