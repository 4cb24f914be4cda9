//! How one connection's records are acknowledged: its RTT (RFC 6298), its progress clock and
//! whether it is suspect of silence. The session's rules over all connections (when to suspect,
//! probe, give up) are in `session/loss.rs`.

use std::time::{Duration, Instant};

/// Most doublings of a connection's deadline after it recovered from a suspicion.
const MAX_BACKOFF: u32 = 1;
/// A connection's deadline returns one doubling towards normal per this long without a
/// suspicion.
const BACKOFF_DECAY: Duration = Duration::from_secs(10);

/// One connection's view of its records' acknowledgements.
#[derive(Debug, Default, Clone, Copy)]
pub(in crate::session) struct LossState {
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
    pub(in crate::session) fn on_record_logged(&mut self, now: Option<Instant>) {
        if self.waiting_since.is_none() {
            self.waiting_since = now;
        }
    }

    /// The peer acknowledged records up to `highest`; `sample` is how long the newest of them
    /// took, if it was ours to time. `still_waiting` says whether records remain
    /// unacknowledged. Returns true when that was progress that ends a suspicion.
    pub(in crate::session) fn on_ack(
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
    pub(in crate::session) fn deadline(&self, ack_delay: Duration, floor: Duration) -> Duration {
        let estimate = match self.srtt {
            Some(srtt) => srtt.saturating_add(self.rttvar.saturating_mul(4)).saturating_add(ack_delay),
            None => floor,
        };
        estimate.max(floor).saturating_mul(1 << self.backoff)
    }

    pub(in crate::session) fn is_suspect(&self) -> bool {
        self.suspect.is_some()
    }

    /// When the progress clock passes the retransmission deadline (None: nothing waits, or
    /// already suspect).
    pub(in crate::session) fn suspect_at(&self, ack_delay: Duration, floor: Duration) -> Option<Instant> {
        if self.suspect.is_some() {
            return None;
        }
        self.waiting_since?.checked_add(self.deadline(ack_delay, floor))
    }

    /// When the connection is given up for silence.
    pub(in crate::session) fn silent_at(&self, timeout: Duration) -> Option<Instant> {
        let since = self.suspect.map(|s| s.waiting_since).or(self.waiting_since)?;
        // A timeout too long to add is no timeout (a configured Duration::MAX).
        since.checked_add(timeout)
    }

    pub(in crate::session) fn suspect(&mut self, now: Instant, probe_from: u64) {
        if let Some(waiting_since) = self.waiting_since {
            self.suspect = Some(Suspicion { waiting_since, probe_from });
        }
        self.waiting_since = None;
        self.decay(now);
        self.last_suspected = Some(now);
    }

    /// One doubling less per `BACKOFF_DECAY` since the last suspicion.
    pub(in crate::session) fn decay(&mut self, now: Instant) {
        if let Some(last) = self.last_suspected {
            let steps = now.saturating_duration_since(last).as_secs() / BACKOFF_DECAY.as_secs();
            self.backoff = self.backoff.saturating_sub(steps.min(u64::from(MAX_BACKOFF)) as u32);
        }
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
