//! Keepalive (PROTOCOL.md §5): when a record last arrived, and when an unanswered Ping went out.

use std::time::Instant;

#[derive(Debug, Default, Clone, Copy)]
pub(in crate::session) struct Keepalive {
    pub(in crate::session) last_rx: Option<Instant>,
    pub(in crate::session) ping_sent: Option<Instant>,
}

impl Keepalive {
    /// A record arrived: the connection is alive, any Ping is answered.
    pub(in crate::session) fn on_record(&mut self, now: Option<Instant>) {
        self.last_rx = now;
        self.ping_sent = None;
    }
}
