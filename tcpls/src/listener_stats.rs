//! What a server's listeners did with the TCP connections they accepted: new sessions, joins,
//! refusals and failed handshakes. One set of counters per [`JoinRegistry`](crate::JoinRegistry),
//! so every listener of a server (they share the registry) adds to the same numbers; servers
//! export them as metrics (docs/OBSERVABILITY.md).

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Default)]
pub(crate) struct ListenerCounters {
    sessions: AtomicU64,
    joins: AtomicU64,
    joins_handed_over: AtomicU64,
    joins_refused_token: AtomicU64,
    joins_refused_budget: AtomicU64,
    handshakes_failed: AtomicU64,
    handshakes_timed_out: AtomicU64,
    accept_queue_full: AtomicU64,
}

/// A snapshot of the counters; every field only grows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListenerStats {
    /// Handshakes that opened a new session (plain TLS fallback sessions included).
    pub sessions: u64,
    /// Connections that joined a live session.
    pub joins: u64,
    /// Of those, joins accepted by one core's listener for a session of another core, whose
    /// connection was handed over to that core (per-core serving, [`ServerBuilder`](crate::ServerBuilder)).
    pub joins_handed_over: u64,
    /// Joins refused because their token was unknown, already used or expired (access_denied).
    pub joins_refused_token: u64,
    /// Joins refused by their session: over its connection budget, or the session was ending.
    pub joins_refused_budget: u64,
    /// Handshakes that failed: TLS or protocol error, or the client went away.
    pub handshakes_failed: u64,
    /// Handshakes not done within [`HANDSHAKE_TIMEOUT`](crate::HANDSHAKE_TIMEOUT).
    pub handshakes_timed_out: u64,
    /// New sessions aborted because the application did not accept the earlier ones (the
    /// listener's queue of established sessions was full).
    pub accept_queue_full: u64,
}

pub(crate) enum Outcome {
    Session,
    Join,
    JoinHandedOver,
    JoinRefusedToken,
    JoinRefusedBudget,
    Failed,
    TimedOut,
    QueueFull,
}

impl ListenerCounters {
    pub(crate) fn count(&self, outcome: Outcome) {
        let counter = match outcome {
            Outcome::Session => &self.sessions,
            Outcome::Join => &self.joins,
            Outcome::JoinHandedOver => &self.joins_handed_over,
            Outcome::JoinRefusedToken => &self.joins_refused_token,
            Outcome::JoinRefusedBudget => &self.joins_refused_budget,
            Outcome::Failed => &self.handshakes_failed,
            Outcome::TimedOut => &self.handshakes_timed_out,
            Outcome::QueueFull => &self.accept_queue_full,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> ListenerStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ListenerStats {
            sessions: get(&self.sessions),
            joins: get(&self.joins),
            joins_handed_over: get(&self.joins_handed_over),
            joins_refused_token: get(&self.joins_refused_token),
            joins_refused_budget: get(&self.joins_refused_budget),
            handshakes_failed: get(&self.handshakes_failed),
            handshakes_timed_out: get(&self.handshakes_timed_out),
            accept_queue_full: get(&self.accept_queue_full),
        }
    }
}
