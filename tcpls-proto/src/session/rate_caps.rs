//! Send-rate caps per connection (the thesis's rate-limiting extension, PROTOCOL.md §7): a
//! token bucket each, refilled by the clock.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::event::ConnId;
use crate::record::MAX_PLAINTEXT;

const RECORD_BYTES: f64 = (MAX_PLAINTEXT + 5 + 16 + 1) as f64;

/// Most rate-limited connections we track: Rate Limit frames name connections by ID, and a peer
/// naming millions of IDs must not grow our memory. Beyond this, new caps are ignored (which
/// only spares the peer's own receive rate).
const MAX_BUCKETS: usize = 64;

/// Per-connection send-rate cap (bytes of sealed records per second).
#[derive(Debug, Clone)]
pub(super) struct Bucket {
    pub(super) rate: u64,
    /// May go negative by one record: a record is sealed whenever the bucket is not in debt.
    tokens: f64,
    depth: f64,
    last: Instant,
}

impl Bucket {
    fn new(rate: u64, now: Instant) -> Self {
        // 20 ms worth of sending, and at least one record. A shallower bucket (it was 4 ms at
        // high rates) loses the tokens of every pause longer than itself: a sender descheduled
        // for a few milliseconds on a busy host then stays 10-15% below its limit (the thesis's
        // flow-limit experiment measured 0.84-0.88 of the limit). The price is a burst of at
        // most 20 ms of the rate after a pause, as any token bucket of that depth.
        let depth = (rate as f64 / 50.0).max(RECORD_BYTES);
        Self { rate, tokens: depth, depth, last: now }
    }

    fn refill(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + dt * self.rate as f64).min(self.depth);
        self.last = now;
    }

    fn allows(&self) -> bool {
        self.tokens >= 0.0
    }

    /// When the bucket is out of debt again.
    fn ready_at(&self) -> Option<Instant> {
        if self.allows() {
            return None;
        }
        let secs = -self.tokens / self.rate as f64;
        // Round up to a whole microsecond so a wakeup at that instant finds the tokens there.
        Some(self.last + Duration::from_micros((secs * 1e6).ceil() as u64 + 1))
    }
}

/// Extension state of a session.
#[derive(Debug, Default)]
pub(super) struct ExtState {
    /// Send-rate caps per connection (set by the peer's Rate Limit, or locally).
    pub(super) buckets: HashMap<ConnId, Bucket>,
}

impl ExtState {
    pub(super) fn set_rate(&mut self, conn: ConnId, bytes_per_second: u64, now: Instant) {
        if bytes_per_second == 0 {
            self.buckets.remove(&conn);
        } else if self.buckets.len() < MAX_BUCKETS || self.buckets.contains_key(&conn) {
            self.buckets.insert(conn, Bucket::new(bytes_per_second, now));
        }
    }

    pub(super) fn refill(&mut self, now: Instant) {
        for b in self.buckets.values_mut() {
            b.refill(now);
        }
    }

    /// Connection `conn` may carry another stream record now.
    pub(super) fn may_send(&self, conn: ConnId) -> bool {
        self.buckets.get(&conn).is_none_or(Bucket::allows)
    }

    /// `bytes` were sealed on `conn`.
    pub(super) fn charge(&mut self, conn: ConnId, bytes: usize) {
        if let Some(b) = self.buckets.get_mut(&conn) {
            b.tokens -= bytes as f64;
        }
    }

    pub(super) fn next_ready(&self) -> Option<Instant> {
        self.buckets.values().filter_map(Bucket::ready_at).min()
    }
}
