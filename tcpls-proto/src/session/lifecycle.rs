//! What moves the session's life (`life.rs`): connections that end (reported once each, and
//! the session ended, orphaned or failed when none is left), the application's `close` and
//! `abort`, the first handshake's completion, and the end of the session.

use std::time::Instant;

use crate::error::{Error, TransportError};
use crate::event::{ConnId, Event};
use crate::tls::HandshakeInfo;

use super::side::Side;
use super::{Core, Session};

impl Session {
    /// Reports finished connections and ends the session when none is left.
    pub(super) fn after_connection_change(&mut self) {
        let mut last_errors = Vec::new();
        let mut finished = Vec::new();
        for id in self.conns.take_unreported_finished() {
            let error = self.conns.get(id).and_then(|c| c.error().cloned());
            if error.is_some() {
                self.core.stats.connections_lost += 1;
            }
            last_errors.push(error.clone());
            finished.push(id);
            self.core.control.forget_conn(id);
            self.core.events.push(Event::ConnectionClosed { conn: id, error });
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
    pub(super) fn on_established(&mut self, conn: ConnId, _info: &HandshakeInfo, tcpls: bool) {
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

    pub(super) fn on_closed(&mut self) {
        self.life.end();
        self.events.push(Event::Closed { error: self.life.error().cloned() });
        let ids = self.streams.ids();
        for id in ids {
            self.notify_readable(id);
            if let Some(s) = self.streams.get_mut(id) {
                s.wake_writer();
            }
            self.events.push(Event::StreamWritable(id));
        }
    }
}
