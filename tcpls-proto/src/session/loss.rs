//! Loss detection from record acknowledgements (PROTOCOL.md §5, "Silent paths").
//!
//! TCP tells us that a connection failed only by an RST, a FIN or its user timeout: a path that
//! just goes silent (Wi-Fi out of range, a firewall dropping packets, a link down) looks alive
//! for minutes, and whatever records it holds stall their streams, and through flow control the
//! whole session. The record ACKs tell us sooner. Each connection measures how long its records
//! take to be acknowledged (a smoothed RTT and its variation, as TCP does, RFC 6298) and runs a
//! *progress clock*: the time since the connection last showed progress (an ACK that
//! acknowledged something new) while it had records waiting. A deep queue makes each record
//! wait long but does not stop the ACKs from coming, so a slow path is not a silent one.
//!
//! * When the progress clock passes the retransmission deadline,
//!   max(srtt + 4·rttvar + ack delay, `min_retransmit_timeout`), and another connection can
//!   carry data, the connection becomes **suspect**: nothing new is scheduled on it and its
//!   unacknowledged records are re-sent on the others (the receiver drops what it already has).
//! * A suspect connection whose peer acknowledges something new recovers: it carries data
//!   again, with no reconnect. Its next deadline is doubled (up to 4×) for a while, so that a
//!   path whose delay jumps is not suspected over and over.
//! * A connection without progress for `silence_timeout` is given up: closed, Connection Reset
//!   to the peer over the others; the path manager joins a new one. With no other connection,
//!   that orphans the session and the client rejoins (break-before-make).
//!
//! Detection starts only once the peer has acknowledged a record of the session: ACKs are a
//! default, not a duty (PROTOCOL.md §5), and a peer that sends none is never declared silent.

use std::time::{Duration, Instant};

use crate::event::{ConnId, Event};
use crate::frame::Frame;

use super::conn::{Connection, Loss};
use super::Session;

/// Granularity of the deadlines handed to the IO layer's timer: the progress clock restarts at
/// every ACK, and a timer moved at every poll costs more than a check a few ms late.
const TIMER_GRANULARITY: Duration = Duration::from_millis(10);
impl Session {
    /// Whether loss detection runs: with failover (which keeps what records carried), when
    /// configured, and once the peer has shown that it acknowledges.
    fn detects_loss(&self) -> bool {
        let config = &self.core.config;
        config.failover && config.loss_detection && self.core.peer_acknowledges
    }

    /// Suspects connections whose progress clock passed their deadline (re-sending their
    /// records on the others) and gives up those silent for `silence_timeout`.
    pub(super) fn check_silent_paths(&mut self, now: Instant) {
        if !self.detects_loss() {
            return;
        }
        let (ack_delay, floor) = (self.core.config.ack_delay, self.core.config.min_retransmit_timeout);
        let silence = self.core.config.silence_timeout;
        let due = |c: &Connection| {
            c.is_established()
                && c.is_tcpls()
                && (c.loss.suspect_at(ack_delay, floor).is_some_and(|at| at <= now)
                    || silence.and_then(|t| c.loss.silent_at(t)).is_some_and(|at| at <= now))
        };
        // Checked at every `prepare_transmit`: nothing is allocated unless there is work.
        if !self.conns.iter().any(due) {
            return;
        }
        let mut given_up = false;
        let ids: Vec<ConnId> = self.conns.iter().filter(|c| due(c)).map(|c| c.id).collect();
        for id in ids {
            let Some(c) = self.conns.get(id) else { continue };
            if silence.and_then(|t| c.loss.silent_at(t)).is_some_and(|at| at <= now) {
                if let Some(c) = self.conns.get_mut(id) {
                    c.lose(Loss::Silent(silence.unwrap_or_default()));
                    given_up = true;
                }
                continue;
            }
            if c.loss.suspect_at(ack_delay, floor).is_none_or(|at| at > now) {
                continue;
            }
            // Someone else must be able to carry what it holds.
            let others = self.conns.iter().any(|o| o.id != id && o.carries_streams() && !o.loss.is_suspect());
            if !others {
                continue;
            }
            if let Some(c) = self.conns.get_mut(id) {
                // A Ping probes it: the ACK of that Ping (or of anything after it) is what
                // brings it back, and it comes back on this connection.
                c.loss.suspect(now, c.next_tx_number());
                self.core.control.push(&Frame::Ping, Some(id));
                self.core.stats.paths_suspected += 1;
                self.core.events.push(Event::PathSuspected { conn: id });
                self.core.resend_unacked(c);
            }
        }
        if given_up {
            self.after_connection_change();
        }
    }

    /// The session is closing: a suspect connection could only hold the close up (its
    /// close_notify would not arrive) until `silence_timeout`. It is given up now, before the
    /// others send close_notify, so that the peer learns it by Connection Reset; what it
    /// carried goes out again on the others. Returns whether any was (the Connection Reset
    /// then goes out first).
    pub(super) fn give_up_suspects_at_close(&mut self) -> bool {
        let others = |id: ConnId, conns: &super::connections::Connections| {
            conns.iter().any(|o| o.id != id && o.is_usable() && !o.is_suspect())
        };
        let suspects: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|c| c.is_suspect() && c.is_usable())
            .map(|c| c.id)
            .filter(|id| others(*id, &self.conns))
            .collect();
        for id in &suspects {
            if let Some(c) = self.conns.get_mut(*id) {
                self.core.resend_unacked(c);
                c.lose(Loss::SilentAtClose);
            }
        }
        if suspects.is_empty() {
            return false;
        }
        self.after_connection_change();
        true
    }

    /// Gives up a connection that went silent (the application or its path manager has a new
    /// one on the same path): what it carried goes out again on the others, and the peer is
    /// told with Connection Reset. Only a suspect connection is given up; returns whether it was.
    pub fn give_up_silent_connection(&mut self, conn: ConnId) -> bool {
        let Some(c) = self.conns.get_mut(conn).filter(|c| c.is_suspect()) else {
            return false;
        };
        self.core.resend_unacked(c);
        c.lose(Loss::Replaced);
        self.after_connection_change();
        true
    }

    /// The next time [`Session::check_silent_paths`] has something to do.
    pub(super) fn loss_deadline(&self) -> Option<Instant> {
        if !self.detects_loss() {
            return None;
        }
        let (ack_delay, floor) = (self.core.config.ack_delay, self.core.config.min_retransmit_timeout);
        let silence = self.core.config.silence_timeout;
        let at = self
            .conns
            .iter()
            .filter(|c| c.is_established() && c.is_tcpls())
            .flat_map(|c| [c.loss.suspect_at(ack_delay, floor), silence.and_then(|t| c.loss.silent_at(t))])
            .flatten()
            .min()?;
        // Rounded up to the timer's granularity from the session's first time.
        let start = self.core.clock.start().unwrap_or(at);
        let ticks = at.saturating_duration_since(start).as_nanos().div_ceil(TIMER_GRANULARITY.as_nanos());
        start.checked_add(TIMER_GRANULARITY.saturating_mul(ticks.min(u128::from(u32::MAX)) as u32)).or(Some(at))
    }
}
