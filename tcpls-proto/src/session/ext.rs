//! The thesis extensions (PROTOCOL.md §7, frames 0x13..=0x1B) as session calls: RTT probes,
//! address probes (NAT detection), per-connection rate limits, user timeout and congestion
//! control requests.
//!
//! A Rate Limit received for a connection installs a token bucket: the packetizer seals stream
//! records on that connection only while the bucket is not in debt, so a capped sender simply
//! goes slower (the application's writes block on the stream's send buffer as usual). The IO
//! layer learns when tokens come back from [`Session::poll_timeout`].

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::error::Error;
use crate::event::ConnId;
use crate::frame::Frame;
use crate::record::MAX_PLAINTEXT;

use super::Session;

/// One record with its header, tag and content type: the bucket always holds at least this.
const RECORD_BYTES: f64 = (MAX_PLAINTEXT + 5 + 16 + 1) as f64;

/// Most rate-limited connections we track: Rate Limit frames name connections by ID, and a peer
/// naming millions of IDs must not grow our memory. Beyond this, new caps are ignored (which
/// only spares the peer's own receive rate).
const MAX_BUCKETS: usize = 64;

/// Per-connection send-rate cap (bytes of sealed records per second).
#[derive(Debug, Clone)]
pub(super) struct Bucket {
    rate: u64,
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

impl Session {
    /// Sends an RTT Probe on `conn`, stamped with the session clock; the peer echoes it on the
    /// same connection and the answer is reported as [`crate::Event::RttMeasured`].
    pub fn probe_rtt(&mut self, conn: ConnId, now: Instant) -> Result<(), Error> {
        self.usable(conn)?;
        self.core.clock.advance(now);
        let timestamp_us = self.core.clock.micros_since_start();
        self.core.control.push(&Frame::RttProbe { connection_id: conn, timestamp_us }, Some(conn));
        Ok(())
    }

    /// Asks the peer which address and port it sees for our end of `conn` (Address Probe); the
    /// answer is [`crate::Event::AddressEchoed`]. Compare it with the socket's local address
    /// to detect a NAT.
    pub fn probe_address(&mut self, conn: ConnId) -> Result<(), Error> {
        self.usable(conn)?;
        self.core.control.push(&Frame::AddressProbe { connection_id: conn }, Some(conn));
        Ok(())
    }

    /// Caps the rate at which the **peer** sends to us on `conn` (Rate Limit frame), in bytes
    /// per second of records; 0 removes the cap.
    pub fn set_rate_limit(&mut self, conn: ConnId, bytes_per_second: u64) -> Result<(), Error> {
        self.usable(conn)?;
        self.core.control.push(&Frame::RateLimit { connection_id: conn, bytes_per_second }, None);
        Ok(())
    }

    /// Caps our own sending rate on `conn` as if the peer had sent Rate Limit; 0 removes it.
    pub fn limit_send_rate(&mut self, conn: ConnId, bytes_per_second: u64, now: Instant) {
        self.core.ext.set_rate(conn, bytes_per_second, now);
    }

    /// The cap on our sending rate on `conn`, if any (bytes per second).
    pub fn send_rate_limit(&self, conn: ConnId) -> Option<u64> {
        self.core.ext.buckets.get(&conn).map(|b| b.rate)
    }

    /// Asks the peer to use this TCP user timeout on its socket of `conn` (User Timeout frame,
    /// sent on that connection). Set our own socket's option too (the IO layer does).
    pub fn request_user_timeout(&mut self, conn: ConnId, timeout_ms: u32) -> Result<(), Error> {
        self.usable(conn)?;
        self.core.control.push(&Frame::UserTimeout { timeout_ms }, Some(conn));
        Ok(())
    }

    /// Asks the peer to switch the TCP congestion control of its socket of `conn`. `name` must
    /// be 1..=255 ASCII graphic bytes (e.g. `cubic`, `reno`, `bbr`).
    pub fn request_congestion_control(&mut self, conn: ConnId, name: &str) -> Result<(), Error> {
        if name.is_empty() || name.len() > 255 || !name.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(Error::Local(crate::TransportError::illegal(format!(
                "congestion control name {name:?} is not 1 to 255 ASCII graphic characters"
            ))));
        }
        self.usable(conn)?;
        self.core.control.push(&Frame::CongestionControl { connection_id: conn, name: name.as_bytes() }, None);
        Ok(())
    }

    /// Whether our policy lets the peer switch a connection to congestion control `name`
    /// ([`crate::SessionConfig::congestion_control_allowed`]).
    pub fn congestion_control_allowed(&self, name: &str) -> bool {
        self.core.config.congestion_control_allowed.iter().any(|n| n == name)
    }

    fn usable(&self, conn: ConnId) -> Result<(), Error> {
        if self.is_connection_usable(conn) {
            Ok(())
        } else {
            Err(Error::ConnectionLost(format!("connection {conn} cannot carry frames")))
        }
    }
}
