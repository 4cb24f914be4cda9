//! Everything that happens by time rather than by input, read from the session's one clock
//! (`clock.rs`): delayed
//! ACKs, keepalive Pings and their deadline, the server idle timeout, the wait for a rejoin,
//! and paced (rate-limited) sending. [`Session::poll_timeout`] is the earliest of them.
//!
//! The core never reads the wall clock. Every entry point that may act on time takes `now` and
//! hands it to `Clock::advance` first; code below reads `Clock::now`, which is the time of the
//! latest such call.

use std::time::Instant;

use crate::error::Error;
use crate::frame::Frame;

use super::conn::Loss;
use super::Session;

/// The time as the IO layer last told it, and when the session first heard of time (the epoch
/// of RTT Probe timestamps).
impl Session {
    /// Keepalive (when configured): Ping a connection that has been silent for `keepalive`, and
    /// fail it when nothing came back within `ping_timeout` (it then fails over).
    pub(super) fn check_keepalive(&mut self, now: Instant) {
        let Some(idle) = self.core.config.keepalive else { return };
        let timeout = self.core.config.ping_timeout;
        let mut failed = false;
        for c in &mut self.conns {
            if !c.is_tcpls() || !c.is_established() {
                continue;
            }
            let last = *c.keepalive.last_rx.get_or_insert(now);
            match c.keepalive.ping_sent {
                Some(sent) if now.saturating_duration_since(sent) >= timeout => {
                    c.lose(Loss::KeepaliveTimeout);
                    failed = true;
                }
                None if now.saturating_duration_since(last) >= idle => {
                    self.core.control.push(&Frame::Ping, Some(c.id));
                    c.keepalive.ping_sent = Some(now);
                }
                _ => {}
            }
        }
        if failed {
            self.after_connection_change();
        }
    }

    /// Server idle timeout (`SessionConfig::idle_timeout`): a session that received nothing on
    /// any connection for that long ends (close_notify, then `Error::ConnectionLost`), so
    /// silent clients (or a peer that opens sessions and goes quiet) do not hold server
    /// sessions for ever.
    pub(super) fn check_idle(&mut self, now: Instant) {
        let Some(deadline) = self.idle_deadline() else { return };
        if now < deadline {
            return;
        }
        let limit = self.core.config.idle_timeout.unwrap_or_default();
        let reason = format!("nothing received from the peer for {limit:?} (idle timeout)");
        // Closing: an idle session does not wait for a rejoin.
        self.core.life.begin_closing();
        for c in &mut self.conns {
            let _ = c.send_close_notify();
            c.fail(crate::Error::ConnectionLost(reason.clone()));
        }
        self.after_connection_change();
    }

    /// When the server idle timeout would end the session, if it applies.
    pub(super) fn idle_deadline(&self) -> Option<Instant> {
        let limit = self.core.config.idle_timeout?;
        let core = &self.core;
        let life = &core.life;
        if core.side != super::side::Side::Server
            || life.is_closed()
            || !life.is_established()
            || life.orphaned_since().is_some()
        {
            return None;
        }
        let last = self.conns.iter().filter_map(|c| c.keepalive.last_rx).max().or(core.clock.start())?;
        Some(last + limit)
    }

    /// The next keepalive event (a Ping to send or a Ping's deadline).
    pub(super) fn keepalive_deadline(&self) -> Option<Instant> {
        let idle = self.core.config.keepalive?;
        let timeout = self.core.config.ping_timeout;
        self.conns
            .iter()
            .filter(|c| c.is_tcpls() && c.is_established())
            .filter_map(|c| match c.keepalive.ping_sent {
                Some(sent) => Some(sent + timeout),
                None => c.keepalive.last_rx.map(|last| last + idle),
            })
            .min()
    }

    /// When the IO layer should call [`Session::prepare_transmit`] for a delayed ACK.
    pub(super) fn ack_timeout(&self) -> Option<Instant> {
        self.core.next_ack_deadline()
    }

    /// Ends an orphaned session whose rejoin did not come in time.
    pub(super) fn check_orphan_timeout(&mut self, now: Instant) {
        let Some(since) = self.core.life.orphaned_since() else { return };
        let waited = now.saturating_duration_since(since);
        if waited < self.core.config.rejoin_timeout {
            return;
        }
        let first_loss = self.core.life.take_orphan().flatten();
        // Say what happened and for how long we waited, not only the first loss.
        let first = first_loss.map_or_else(|| "unknown".to_string(), |e| e.to_string());
        let tried = self.core.life.take_rejoin_note().map_or_else(String::new, |n| format!("; last attempts: {n}"));
        self.core.life.set_error(Some(Error::ConnectionLost(format!(
            "every connection was lost and none rejoined within {:.1} s (first loss: {first}{tried})",
            waited.as_secs_f64()
        ))));
        self.core.on_closed();
    }

    pub(super) fn orphan_deadline(&self) -> Option<Instant> {
        self.core.life.orphaned_since().map(|since| since + self.core.config.rejoin_timeout)
    }

    /// When the IO layer should call [`Session::prepare_transmit`] again although nothing else
    /// happened: data waits for a rate-limited connection's tokens.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if !self.core.life.is_established() {
            return None;
        }
        let paced = if !self.core.streams.has_ready() { None } else { self.core.ext.next_ready() };
        [
            paced,
            self.ack_timeout(),
            self.orphan_deadline(),
            self.keepalive_deadline(),
            self.idle_deadline(),
            self.loss_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }
}
