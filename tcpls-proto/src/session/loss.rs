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

/// Most doublings of a connection's deadline after it recovered from a suspicion.
const MAX_BACKOFF: u32 = 1;
/// Granularity of the deadlines handed to the IO layer's timer: the progress clock restarts at
/// every ACK, and a timer moved at every poll costs more than a check a few ms late.
const TIMER_GRANULARITY: Duration = Duration::from_millis(10);
/// A connection's deadline returns one doubling towards normal per this long without a
/// suspicion.
const BACKOFF_DECAY: Duration = Duration::from_secs(10);

/// One connection's view of its records' acknowledgements.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct LossState {
    srtt: Option<Duration>,
    rttvar: Duration,
    /// Highest record number the peer acknowledged on this connection.
    acked: Option<u64>,
    /// When the connection last showed progress, or started waiting for an acknowledgement
    /// (its oldest unacknowledged record was sent): the start of the progress clock. None while
    /// nothing waits.
    waiting_since: Option<Instant>,
    suspect: Option<Suspicion>,
    /// Doublings of the deadline, after recoveries from suspicions.
    backoff: u32,
    last_suspected: Option<Instant>,
}

#[derive(Debug, Clone, Copy)]
struct Suspicion {
    /// The start of the progress clock when it was suspected: what `silence_timeout` counts from.
    waiting_since: Instant,
    /// The number of the first record sealed on it after the suspicion (a Ping sent to probe
    /// it): only an ACK of that record or a later one proves the path carries again. ACKs of
    /// records sent before (which reached the peer before the silence, acknowledged over
    /// another connection) do not.
    probe_from: u64,
}

impl LossState {
    /// A record was logged for acknowledgement at `now`: the progress clock starts if nothing
    /// was waiting.
    pub(super) fn on_record_logged(&mut self, now: Option<Instant>) {
        if self.waiting_since.is_none() {
            self.waiting_since = now;
        }
    }

    /// The peer acknowledged records up to `highest`; `sample` is how long the newest of them
    /// took, if it was ours to time. `still_waiting` says whether records remain
    /// unacknowledged. Returns true when that was progress that ends a suspicion.
    pub(super) fn on_ack(
        &mut self,
        highest: u64,
        sample: Option<Duration>,
        still_waiting: bool,
        now: Option<Instant>,
    ) -> bool {
        if self.acked.is_some_and(|acked| highest <= acked) {
            return false;
        }
        self.acked = Some(highest);
        if let Some(sample) = sample {
            self.on_rtt_sample(sample);
        }
        if self.suspect.is_some_and(|s| highest < s.probe_from) {
            // Late news of records sent before the silence: still suspect.
            return false;
        }
        self.waiting_since = if still_waiting { now } else { None };
        let recovered = self.suspect.take().is_some();
        if recovered {
            self.backoff = (self.backoff + 1).min(MAX_BACKOFF);
        }
        recovered
    }

    /// RFC 6298 §2: the first sample sets srtt and rttvar = srtt/2; later ones are smoothed
    /// with gains 1/8 and 1/4.
    fn on_rtt_sample(&mut self, sample: Duration) {
        match self.srtt {
            None => {
                self.srtt = Some(sample);
                self.rttvar = sample / 2;
            }
            Some(srtt) => {
                let delta = srtt.abs_diff(sample);
                self.rttvar = self.rttvar.saturating_mul(3).saturating_add(delta) / 4;
                self.srtt = Some(srtt.saturating_mul(7).saturating_add(sample) / 8);
            }
        }
    }

    /// How long the progress clock may run before the connection is suspect.
    pub(super) fn deadline(&self, ack_delay: Duration, floor: Duration) -> Duration {
        let estimate = match self.srtt {
            Some(srtt) => srtt.saturating_add(self.rttvar.saturating_mul(4)).saturating_add(ack_delay),
            None => floor,
        };
        estimate.max(floor).saturating_mul(1 << self.backoff)
    }

    pub(super) fn is_suspect(&self) -> bool {
        self.suspect.is_some()
    }

    /// When the progress clock passes the retransmission deadline (None: nothing waits, or
    /// already suspect).
    fn suspect_at(&self, ack_delay: Duration, floor: Duration) -> Option<Instant> {
        if self.suspect.is_some() {
            return None;
        }
        self.waiting_since?.checked_add(self.deadline(ack_delay, floor))
    }

    /// When the connection is given up for silence.
    fn silent_at(&self, timeout: Duration) -> Option<Instant> {
        let since = self.suspect.map(|s| s.waiting_since).or(self.waiting_since)?;
        // A timeout too long to add is no timeout (a configured Duration::MAX).
        since.checked_add(timeout)
    }

    fn suspect(&mut self, now: Instant, probe_from: u64) {
        if let Some(waiting_since) = self.waiting_since {
            self.suspect = Some(Suspicion { waiting_since, probe_from });
        }
        self.waiting_since = None;
        self.decay(now);
        self.last_suspected = Some(now);
    }

    /// One doubling less per `BACKOFF_DECAY` since the last suspicion.
    fn decay(&mut self, now: Instant) {
        if let Some(last) = self.last_suspected {
            let steps = now.saturating_duration_since(last).as_secs() / BACKOFF_DECAY.as_secs();
            self.backoff = self.backoff.saturating_sub(steps.min(u64::from(MAX_BACKOFF)) as u32);
        }
    }
}

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

impl Connection {
    /// Carries no new data: its records went unacknowledged past the deadline.
    pub(super) fn is_suspect(&self) -> bool {
        self.loss.is_suspect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn deadline_follows_rfc6298_with_a_floor_and_backoff() {
        let mut s = LossState::default();
        assert_eq!(s.deadline(25 * MS, 200 * MS), 200 * MS, "no sample: the floor");
        let t0 = Instant::now();
        s.on_record_logged(Some(t0));
        assert!(!s.on_ack(1, Some(100 * MS), true, Some(t0 + 100 * MS)));
        // srtt 100, rttvar 50: 100 + 200 + 25.
        assert_eq!(s.deadline(25 * MS, 200 * MS), 325 * MS);
        // An ACK that acknowledges nothing new is no progress and no sample.
        assert!(!s.on_ack(1, Some(900 * MS), true, Some(t0 + 1000 * MS)));
        assert_eq!(s.deadline(25 * MS, 200 * MS), 325 * MS);
        // Small RTTs: the floor.
        let mut fast = LossState::default();
        for i in 0..20 {
            fast.on_ack(i, Some(MS), false, None);
        }
        assert_eq!(fast.deadline(25 * MS, 200 * MS), 200 * MS);
    }

    #[test]
    fn huge_configured_durations_do_not_overflow() {
        let mut s = LossState::default();
        let t0 = Instant::now();
        s.on_record_logged(Some(t0));
        s.on_ack(0, Some(MS), true, Some(t0));
        s.suspect(t0, 1);
        s.on_ack(1, None, true, Some(t0));
        s.on_record_logged(Some(t0));
        assert_eq!(s.deadline(Duration::MAX, Duration::MAX), Duration::MAX);
        assert_eq!(s.suspect_at(Duration::MAX, Duration::MAX), None, "no deadline, no panic");
        assert_eq!(s.silent_at(Duration::MAX), None);
    }

    #[test]
    fn progress_clock_suspicion_recovery_and_silence() {
        let mut s = LossState::default();
        let t0 = Instant::now();
        s.on_ack(0, Some(10 * MS), false, Some(t0));
        assert_eq!(s.suspect_at(25 * MS, 200 * MS), None, "nothing waits");
        s.on_record_logged(Some(t0));
        s.on_record_logged(Some(t0 + 50 * MS));
        assert_eq!(s.suspect_at(25 * MS, 200 * MS), Some(t0 + 200 * MS), "the clock runs from the oldest");
        // Progress restarts the clock.
        s.on_ack(1, Some(10 * MS), true, Some(t0 + 150 * MS));
        assert_eq!(s.suspect_at(25 * MS, 200 * MS), Some(t0 + 350 * MS));
        s.suspect(t0 + 350 * MS, 10);
        assert!(s.is_suspect());
        assert_eq!(s.suspect_at(25 * MS, 200 * MS), None);
        assert_eq!(s.silent_at(Duration::from_secs(5)), Some(t0 + 150 * MS + Duration::from_secs(5)));
        // ACKs of records sent before the suspicion (delivered before the silence) do not end
        // it; the ACK of the probe (record 10) does, and doubles the next deadline.
        assert!(!s.on_ack(2, None, false, Some(t0 + 380 * MS)));
        assert!(s.is_suspect());
        assert!(s.on_ack(10, None, false, Some(t0 + 400 * MS)));
        assert!(!s.is_suspect());
        assert_eq!(s.deadline(25 * MS, 200 * MS), 400 * MS);
        assert_eq!(s.silent_at(Duration::from_secs(5)), None);
        // The doubling decays after BACKOFF_DECAY without suspicion.
        s.on_record_logged(Some(t0 + BACKOFF_DECAY * 2));
        s.suspect(t0 + BACKOFF_DECAY * 2, 20);
        assert_eq!(s.deadline(25 * MS, 200 * MS), 200 * MS);
    }
}
