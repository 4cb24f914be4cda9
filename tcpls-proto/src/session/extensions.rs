//! The thesis extensions (PROTOCOL.md §7, frames 0x13..=0x1B) as session calls: RTT probes,
//! address probes (NAT detection), per-connection rate limits, user timeout and congestion
//! control requests.
//!
//! A Rate Limit received for a connection installs a token bucket: the packetizer seals stream
//! records on that connection only while the bucket is not in debt, so a capped sender simply
//! goes slower (the application's writes block on the stream's send buffer as usual). The IO
//! layer learns when tokens come back from [`Session::poll_timeout`].

use std::time::Instant;

use crate::error::Error;
use crate::event::ConnId;
use crate::frame::Frame;

use super::Session;

/// One record with its header, tag and content type: the bucket always holds at least this.
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
