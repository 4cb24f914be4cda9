//! The session's one clock: the latest `now` an entry point was given (the core never reads
//! the wall clock), and when the session started.

use std::time::Instant;

#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Clock {
    start: Option<Instant>,
    now: Option<Instant>,
}

impl Clock {
    /// The IO layer says it is `now`: the only way the session learns the time.
    pub(super) fn advance(&mut self, now: Instant) {
        self.now = Some(now);
        self.start.get_or_insert(now);
    }

    /// The time of the latest entry point that passed one; `None` before any did (a session
    /// that has received nothing yet).
    pub(super) fn now(&self) -> Option<Instant> {
        self.now
    }

    /// When the session first heard of time.
    pub(super) fn start(&self) -> Option<Instant> {
        self.start
    }

    /// Microseconds since [`Clock::start`]: the clock of RTT Probe timestamps.
    pub(super) fn micros_since_start(&self) -> u64 {
        match (self.start, self.now) {
            (Some(start), Some(now)) => now.saturating_duration_since(start).as_micros() as u64,
            _ => 0,
        }
    }
}
