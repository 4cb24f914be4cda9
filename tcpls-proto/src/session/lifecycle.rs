//! The session's own life, apart from its connections': handshaking, established (TCPLS or
//! plain TLS fallback), closing, orphaned (every connection lost, waiting for a rejoin) and
//! closed, with the error that ended it.
//!
//! ```text
//! Open ──> Closing ──> Closed          (the application closes, or the peer did and we are done)
//!  │ ^                  ^
//!  v │ rejoined         │ timeout, close, abort, refused rejoin
//! Orphaned ─────────────┘
//! ```
//!
//! Whether the first handshake completed (and how) is a fact beside the state: a session is
//! established from then on, whatever happens next.

use std::time::Instant;

use crate::error::{Error, TransportError};
use crate::event::{ConnId, Event};
use crate::tls::HandshakeInfo;

use super::{Core, Session, Side};

/// What the first handshake negotiated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Tcpls,
    /// The peer does not speak TCPLS: one plain TLS byte stream (PROTOCOL.md §1.3).
    Fallback,
}

#[derive(Debug)]
enum State {
    /// Handshaking or carrying streams.
    Open,
    /// The application asked to close (or the idle timeout did): close_notify goes out once
    /// everything queued is sent.
    Closing,
    /// Every connection was lost at `since`; the session waits for a rejoin. `first_loss` is
    /// its error if none comes.
    Orphaned {
        since: Instant,
        first_loss: Option<Error>,
    },
    Closed,
}

#[derive(Debug)]
pub(crate) struct Lifecycle {
    mode: Option<Mode>,
    state: State,
    /// Why the session failed, if it did (kept once closed).
    error: Option<Error>,
    /// Client: what the IO layer's last rejoin attempts said (per path), for the final error.
    rejoin_note: Option<String>,
    /// `Event::PeerClosed` went out.
    peer_close_reported: bool,
}

impl Default for Lifecycle {
    fn default() -> Self {
        Self { mode: None, state: State::Open, error: None, rejoin_note: None, peer_close_reported: false }
    }
}

impl Lifecycle {
    /// The first handshake completed (true from then on).
    pub(crate) fn is_established(&self) -> bool {
        self.mode.is_some()
    }

    pub(crate) fn is_fallback(&self) -> bool {
        self.mode == Some(Mode::Fallback)
    }

    /// The first handshake completed: TCPLS or plain TLS.
    pub(crate) fn establish(&mut self, tcpls: bool) {
        self.mode = Some(if tcpls { Mode::Tcpls } else { Mode::Fallback });
    }

    pub(crate) fn is_closing(&self) -> bool {
        matches!(self.state, State::Closing)
    }

    pub(crate) fn is_closed(&self) -> bool {
        matches!(self.state, State::Closed)
    }

    /// Neither closing nor closed: new connections (joins, rejoins) and tokens are welcome.
    pub(crate) fn accepts_connections(&self) -> bool {
        matches!(self.state, State::Open | State::Orphaned { .. })
    }

    /// Closed, or failed (an error is set before the close is complete).
    pub(crate) fn is_over(&self) -> bool {
        self.is_closed() || self.error.is_some()
    }

    pub(crate) fn error(&self) -> Option<&Error> {
        self.error.as_ref()
    }

    /// Records why the session failed, unless an earlier reason is known.
    pub(crate) fn fail_with(&mut self, error: Error) {
        self.error.get_or_insert(error);
    }

    /// Records why the session failed, replacing an earlier reason.
    pub(crate) fn set_error(&mut self, error: Option<Error>) {
        self.error = error;
    }

    /// Open -> Closing (a session orphaned or already closing or closed stays as it is).
    pub(crate) fn begin_closing(&mut self) {
        if matches!(self.state, State::Open) {
            self.state = State::Closing;
        }
    }

    /// The session is over (its `Closed` event is the core's to send).
    pub(crate) fn end(&mut self) {
        self.state = State::Closed;
    }

    pub(crate) fn orphaned_since(&self) -> Option<Instant> {
        match self.state {
            State::Orphaned { since, .. } => Some(since),
            _ => None,
        }
    }

    /// Every connection was lost at `since` (an orphaned session keeps its first loss).
    pub(crate) fn orphan(&mut self, since: Instant, first_loss: Option<Error>) {
        if matches!(self.state, State::Open) {
            self.state = State::Orphaned { since, first_loss };
        }
    }

    /// A connection joined again: no longer orphaned, and earlier attempts are forgotten.
    pub(crate) fn rejoined(&mut self) {
        if matches!(self.state, State::Orphaned { .. }) {
            self.state = State::Open;
        }
        self.rejoin_note = None;
    }

    /// Leaves the orphaned state (to end the session): its first loss, or `None` when the
    /// session was not orphaned.
    pub(crate) fn take_orphan(&mut self) -> Option<Option<Error>> {
        match std::mem::replace(&mut self.state, State::Open) {
            State::Orphaned { first_loss, .. } => Some(first_loss),
            other => {
                self.state = other;
                None
            }
        }
    }

    pub(crate) fn set_rejoin_note(&mut self, note: String) {
        self.rejoin_note = Some(note);
    }

    pub(crate) fn take_rejoin_note(&mut self) -> Option<String> {
        self.rejoin_note.take()
    }

    /// True the first time: `Event::PeerClosed` is reported once.
    pub(crate) fn report_peer_close(&mut self) -> bool {
        !std::mem::replace(&mut self.peer_close_reported, true)
    }
}

impl Session {
    /// Reports finished connections and ends the session when none is left.
    pub(crate) fn after_connection_change(&mut self) {
        let mut last_errors = Vec::new();
        let mut finished = Vec::new();
        for c in &mut self.conns {
            if c.is_finished() && !c.reported {
                c.reported = true;
                let error = c.error.clone();
                if error.is_some() {
                    self.core.stats.connections_lost += 1;
                }
                last_errors.push(error.clone());
                finished.push(c.id);
                self.core.control.forget_conn(c.id);
                self.core.events.push(Event::ConnectionClosed { conn: c.id, error });
            }
        }
        let mut must_end = None;
        for id in finished {
            must_end = must_end.or(self.on_connection_finished(id));
        }
        if let Some(why) = must_end {
            // Every other connection ends with an alert (the peer learns it there), and the
            // session with them: reported as the others are, by going round once more.
            self.core.life.fail_with(Error::ConnectionLost(why.clone()));
            for c in &mut self.conns {
                if !c.is_finished() {
                    c.fail(Error::Local(TransportError::internal(why.clone())));
                }
            }
            self.after_connection_change();
            return;
        }
        let all_finished = self.conns.all_finished();
        if !self.core.life.is_closed() && self.core.life.orphaned_since().is_some() && all_finished {
            // Still waiting for a rejoin: only a join, the deadline or `close` ends this.
            return;
        }
        if !self.core.life.is_closed() && all_finished {
            // The last connection was lost (not closed, not a protocol error): with failover
            // the session waits for the client to rejoin with a spare token (break-before-make).
            let lost =
                !last_errors.is_empty() && last_errors.iter().all(|e| matches!(e, Some(Error::ConnectionLost(_))));
            // (The session has a time: it is established, so input with a time came in.)
            let now = self.core.clock.now();
            if let (true, Some(now)) = (lost && self.can_wait_for_rejoin(), now) {
                if self.core.life.orphaned_since().is_none() {
                    self.core.life.orphan(now, last_errors.into_iter().flatten().next());
                    self.core.events.push(Event::AllConnectionsLost);
                }
                self.replenish_tokens(None);
                return;
            }
            // The session fails only when its last connections fail; earlier losses were
            // events, and the others carried on. A clean close among the last ones is clean.
            if self.core.life.error().is_none() && last_errors.iter().all(Option::is_some) {
                self.core.life.set_error(last_errors.into_iter().flatten().next());
            }
            self.core.on_closed();
        } else {
            // A lost connection frees room in the budget: a fresh token lets the client rejoin.
            self.replenish_tokens(None);
            self.conns.prune_finished();
        }
    }

    /// Graceful close: queued stream data is sent, every stream's sending half ends with a FIN
    /// after it, then close_notify on every connection.
    pub fn close(&mut self) {
        if let Some(first_loss) = self.core.life.take_orphan() {
            // No connection to send anything on: the session ends here.
            self.core.life.set_error(first_loss);
            self.core.on_closed();
        } else {
            // close_notify says we have nothing more to send (PROTOCOL.md §6.1): the peer must
            // read the end of each of our streams, not wait for more. Without the FIN, a peer
            // whose application waits for the end of a stream before finishing its own half (an
            // echo) never answers with its close_notify, and both sides wait.
            for id in self.core.streams.ids() {
                let _ = self.finish(id);
            }
            self.core.life.begin_closing();
        }
    }

    /// Waiting for a rejoin after losing every connection makes sense only for an established
    /// TCPLS session that keeps what it sent, is not closing, and whose client can still join.
    fn can_wait_for_rejoin(&self) -> bool {
        let core = &self.core;
        // A client without a token can still rejoin with the initial connection's secret.
        let client_can_join =
            core.side == Side::Server || !core.paths.tokens().is_empty() || self.rejoin_credentials().is_some();
        core.life.is_established()
            && !core.life.is_fallback()
            && core.config.failover
            && !core.config.rejoin_timeout.is_zero()
            && !core.life.is_closing()
            && client_can_join
    }

    /// Every connection was lost and the session waits for a rejoin (see
    /// [`SessionConfig::rejoin_timeout`](crate::SessionConfig::rejoin_timeout)); the client's IO
    /// layer should add a connection.
    pub fn is_orphaned(&self) -> bool {
        self.core.life.orphaned_since().is_some()
    }

    /// Changes how long this session waits for a rejoin once every connection is lost
    /// ([`SessionConfig::rejoin_timeout`](crate::SessionConfig::rejoin_timeout)), e.g. a client's
    /// path manager applying its outage tolerance. Zero: the session ends with its last connection.
    pub fn set_rejoin_timeout(&mut self, timeout: std::time::Duration) {
        self.core.config.rejoin_timeout = timeout;
    }

    /// Since when every connection has been lost (the session waits for a rejoin), if it has.
    pub fn orphaned_since(&self) -> Option<Instant> {
        self.core.life.orphaned_since()
    }

    /// Client: what the last rejoin attempts said (e.g. per path: "wifi: network unreachable"),
    /// quoted in the session's error if no rejoin comes in time.
    pub fn set_rejoin_note(&mut self, note: String) {
        self.core.life.set_rejoin_note(note);
    }

    /// Client: ends a session that waits for a rejoin at once, with `error` (e.g. the server
    /// refused the rejoin: it no longer knows the session). Nothing happens otherwise.
    pub fn end_orphaned(&mut self, error: Error) {
        if self.core.life.take_orphan().is_some() {
            self.core.life.take_rejoin_note();
            self.core.life.set_error(Some(error));
            self.core.on_closed();
        }
    }

    /// Abort: close_notify at once on every connection, queued data is dropped, and the
    /// session ends with [`Error::SessionClosed`].
    pub fn abort(&mut self, now: Instant) {
        self.core.clock.advance(now);
        if self.core.life.take_orphan().is_some() {
            // No connection left to abort and no rejoin wanted any more: it ends here (it used
            // to wait for the rejoin deadline).
            self.core.life.fail_with(Error::SessionClosed);
            self.core.on_closed();
            return;
        }
        for c in &mut self.conns {
            let _ = c.send_close_notify();
            c.fail(Error::SessionClosed);
        }
        self.after_connection_change();
    }
}

impl Core {
    pub(crate) fn on_established(&mut self, conn: ConnId, _info: &HandshakeInfo, tcpls: bool) {
        self.life.establish(tcpls);
        self.events.push(Event::Established { fallback: !tcpls });
        if !tcpls {
            // The byte stream is stream 0: the client's first stream, which the server accepts.
            if self.side == Side::Server {
                self.streams.set_next_peer(2);
                self.create_stream(0, true);
            }
            return;
        }
        let _ = conn;
    }

    pub(crate) fn on_closed(&mut self) {
        self.life.end();
        self.events.push(Event::Closed { error: self.life.error().cloned() });
        let ids = self.streams.ids();
        for id in ids {
            self.notify_readable(id);
            if let Some(s) = self.streams.get_mut(id) {
                s.write_blocked = false;
            }
            self.events.push(Event::StreamWritable(id));
        }
    }
}
