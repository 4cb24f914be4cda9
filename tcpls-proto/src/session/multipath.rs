//! Several TCP connections in one session: join tokens, attaching joined connections, stream
//! steering, migration and closing single connections (PROTOCOL.md §3-4).

use std::time::Instant;

use crate::error::{AlertCode, Error, TransportError};
use crate::event::{ConnId, Event, StreamId};
use crate::frame::{Frame, REJOIN_PROOF_LEN, SESSION_REF_LEN};
use crate::tls::Handshake;

use super::conn::{rejoin_proof, session_secrets, RejoinCredentials, LABEL_SESSION_REF};
use super::joining::{Accepted, JoinKey, JoiningConnection, REJOIN_ID_BASE};
use super::sched::Scheduler;
use super::side::Side;
use super::{Connection, Core, Session};

/// The Connection ID of a Stream Steer that asks the peer to stop steering the stream and let
/// its scheduler spread it over every usable connection (PROTOCOL.md §3, "Steering"). Reserved:
/// no connection has it; a peer that does not know it ignores the request (no such connection).
pub const STEER_ANY: ConnId = u32::MAX;

impl Core {
    /// Issues one fresh join token, sent on `conn` or any connection.
    pub(super) fn issue_token(&mut self, conn: Option<ConnId>) {
        let (sequence, token) = self.paths.issue_token(self.config.random.as_ref());
        self.control.push(&Frame::NewToken { sequence, token }, conn);
        self.events.push(Event::TokenIssued { sequence, token });
    }
}

impl Session {
    /// Server: what the connection accepted by this session turned out to be.
    pub fn accepted(&self) -> Accepted {
        if self.core.paths.has_join_request() {
            return Accepted::Join;
        }
        if self.core.life.is_over() {
            return Accepted::Failed;
        }
        // Accepted early data (0-RTT) makes the session known before the client Finished.
        let early = self.core.early.received > 0;
        if (self.core.life.is_established() || early)
            && (self.core.life.is_fallback() || self.core.paths.initial_seen())
        {
            return Accepted::NewSession;
        }
        Accepted::Pending
    }

    /// Server: detaches the connection that asked to join, with its keys and buffered bytes.
    /// This session is left empty and can be dropped.
    pub fn take_joining_connection(&mut self) -> Option<JoiningConnection> {
        let request = self.core.paths.take_join_request()?;
        let mut conn = Box::new(self.conns.take(0)?);
        conn.reading.paused = false;
        // What is left of this session is dropped: no Closed event.
        self.core.life.end();
        Some(JoiningConnection { conn, request })
    }

    /// Server: refuses a join whose token names no live session: access_denied, then close.
    pub fn refuse_join(joining: JoiningConnection) -> Vec<u8> {
        let mut conn = joining.conn;
        let what = match joining.request.key {
            JoinKey::Token(_) => "unknown, used or expired join token",
            JoinKey::Rejoin { .. } => "rejoin refused: unknown session, bad proof, ID in use or over the budget",
        };
        conn.fail(TransportError::new(AlertCode::AccessDenied, what).into());
        conn.tx.data().to_vec()
    }

    /// Server: binds a joining connection to this session if its token is one we issued and has
    /// not been used, and the session has fewer than `1 + tokens` connections. The connection
    /// gets the token's sequence number as its ID, the token is forgotten (even when the join is
    /// refused for the budget), and a fresh one replaces it while there is room.
    /// On failure the connection is handed back with a fatal alert queued (write
    /// [`JoiningConnection`]'s bytes with [`Session::refuse_join`]).
    pub fn attach_joining_connection(
        &mut self,
        joining: JoiningConnection,
        now: Instant,
    ) -> Result<ConnId, JoiningConnection> {
        let usable =
            self.core.side == Side::Server && self.core.life.is_established() && self.core.life.accepts_connections();
        if !usable {
            return Err(joining);
        }
        let id = match &joining.request.key {
            JoinKey::Token(token) => {
                let Some(sequence) = self.core.paths.redeem_token(token) else {
                    return Err(joining);
                };
                self.core.events.push(Event::TokenUsed { sequence });
                sequence
            }
            JoinKey::Rejoin { connection_id, session_ref, proof } => {
                if !self.rejoin_proof_valid(&joining.conn, *connection_id, session_ref, proof) {
                    return Err(joining);
                }
                *connection_id
            }
        };
        if self.conns.get(id).is_some() {
            // One ID must never name two connections (for tokens, only after 2^31 of them could
            // a sequence number come back while its connection lives).
            return Err(joining);
        }
        if self.live_connections() >= self.max_connections() {
            // Over the budget: a token is spent all the same, so a flood of joins stops when
            // the tokens run out; a rejoin is refused.
            return Err(joining);
        }
        let JoiningConnection { mut conn, request } = joining;
        let sequence = id;
        conn.id = sequence;
        self.conns.add(*conn);
        self.core.life.rejoined();
        self.core.clock.advance(now);
        self.core.events.push(Event::ConnectionEstablished { conn: sequence });
        // Answer on the new connection at once: the client sends stream data on it only after
        // hearing from us there (a refused join would lose it).
        self.core.control.push(&Frame::Padding, Some(sequence));
        // (The frames behind the Join were decoded in the session that accepted the connection, and
        // kept as bytes to cross over; this is their one reading for delivery.)
        let result = self.core.on_frames(sequence, request.seq, &request.rest, &mut Default::default());
        if let Err(e) = result {
            self.fail_conn(sequence, e.into());
        } else {
            self.replenish_tokens(Some(sequence));
            self.process(sequence, now);
        }
        Ok(sequence)
    }

    /// Server: a Rejoin's proof is the one the client of this session would compute for that
    /// connection and ID (constant-time comparison), for an ID of the rejoin space.
    fn rejoin_proof_valid(
        &self,
        joining: &super::Connection,
        id: ConnId,
        session_ref: &[u8; SESSION_REF_LEN],
        proof: &[u8; REJOIN_PROOF_LEN],
    ) -> bool {
        let Some(creds) = self.rejoin_credentials() else { return false };
        let Some(new_secret) = joining.join.secret.as_ref() else { return false };
        let want = rejoin_proof(&creds.key, new_secret, id);
        let ref_ok = aws_lc_rs::constant_time::verify_slices_are_equal(&creds.session_ref, session_ref).is_ok();
        let proof_ok = aws_lc_rs::constant_time::verify_slices_are_equal(&want, proof).is_ok();
        id >= REJOIN_ID_BASE && ref_ok && proof_ok
    }

    /// The rejoin key and session reference, from the initial connection's secret (TCPLS only).
    pub(super) fn rejoin_credentials(&self) -> Option<RejoinCredentials> {
        if self.core.life.is_fallback() {
            return None;
        }
        self.conns.initial()?.join.secret.as_ref().map(session_secrets)
    }

    /// The reference a Rejoin frame names this session by (PROTOCOL.md §3): derived from the
    /// initial connection's TLS secret, known only to both ends. `None` before the initial
    /// connection's handshake completes, and for plain-TLS fallback sessions.
    pub fn session_ref(&self) -> Option<[u8; SESSION_REF_LEN]> {
        if !self.core.life.is_established() {
            return None;
        }
        if self.core.life.is_fallback() {
            return None;
        }
        // The reference alone (one HKDF-Expand): a server publishes it for every new session
        // and needs no rejoin key.
        let secret = self.conns.initial()?.join.secret.as_ref()?;
        let mut session_ref = [0u8; SESSION_REF_LEN];
        secret.derive(LABEL_SESSION_REF, &mut session_ref);
        Some(session_ref)
    }

    /// Connections this session may have at once: the initial one plus one per token.
    fn max_connections(&self) -> usize {
        1 + self.core.config.tokens as usize
    }

    fn live_connections(&self) -> usize {
        self.conns.live()
    }

    /// Keeps `tokens` unused tokens in the client's hands while the session has room for more
    /// connections (PROTOCOL.md §3): after a join, and after a connection is lost (so the client
    /// can rejoin).
    pub(super) fn replenish_tokens(&mut self, on: Option<ConnId>) {
        if self.core.side != Side::Server || !self.core.paths.initial_seen() || !self.core.life.accepts_connections() {
            return;
        }
        let live = self.live_connections();
        while self.core.paths.tokens().len() < self.core.config.tokens as usize && live < self.max_connections() {
            self.core.issue_token(on);
        }
    }

    /// Client: starts a new TCP connection's handshake, to be joined with the next unused token.
    /// Connect a socket to one of the server's addresses and feed it as connection `id`.
    /// Without a token while every connection of the session has ended, the connection rejoins
    /// with a Rejoin frame instead (PROTOCOL.md §3), under an ID of `REJOIN_ID_BASE | n`; with
    /// a live connection and no token, [`Error::NoToken`] (the server sends more).
    pub fn add_connection(&mut self) -> Result<ConnId, Error> {
        let life = &self.core.life;
        if self.core.side != Side::Client || life.is_fallback() || !life.is_established() || life.is_closed() {
            return Err(TransportError::internal("only an established TCPLS client session can add connections").into());
        }
        if life.is_closing() {
            // The server would refuse it, and its failure could outlast the clean close of the
            // others (a path manager's attempt in flight when `close` was called).
            return Err(TransportError::internal("the session is closing: no new connection").into());
        }
        let Some((config, name)) = self.core.paths.client_tls() else {
            return Err(TransportError::internal("no client configuration").into());
        };
        let Some((sequence, token)) = self.core.paths.spend_token() else {
            // No token left while disconnected (every connection ended): rejoin with the
            // initial connection's secret (PROTOCOL.md §3). While a connection lives, the
            // server keeps sending tokens; wait for one.
            let creds = self.rejoin_credentials().filter(|_| self.live_connections() == 0);
            let Some(creds) = creds else {
                return Err(Error::NoToken);
            };
            let id = self.next_rejoin_id();
            let mut conn = Connection::new(id, Handshake::client(config, name)?);
            conn.join.rejoin = Some(creds);
            self.conns.add(conn);
            self.drive_handshakes();
            return Ok(id);
        };
        let mut conn = Connection::new(sequence, Handshake::client(config, name)?);
        conn.join.token = Some(token);
        self.conns.add(conn);
        self.drive_handshakes();
        Ok(sequence)
    }

    /// Client: the next unused Connection ID of the rejoin space.
    pub(super) fn next_rejoin_id(&mut self) -> ConnId {
        let conns = &self.conns;
        self.core.paths.next_rejoin_id(|id| conns.get(id).is_some())
    }

    /// Sends a stream's data on `conn` from now on (stream steering); `None` lets the scheduler
    /// spread it over all connections.
    pub fn steer_stream(&mut self, stream: StreamId, conn: Option<ConnId>) -> Result<(), crate::StreamError> {
        let s = self.core.streams.get_mut(stream).ok_or(crate::StreamError::UnknownStream(stream))?;
        s.steer = conn;
        self.core.events.push(Event::StreamSteered { stream, conn });
        Ok(())
    }

    /// The connection a stream is steered to.
    pub fn stream_steering(&self, stream: StreamId) -> Option<ConnId> {
        self.core.streams.get(stream).and_then(|s| s.steer)
    }

    /// Asks the peer to send `stream` on `conn` (Stream Steer frame, receiver-driven steering).
    /// The request travels on the connection our own data of that stream uses, so the peer
    /// sees it no later than that data (e.g. the request a download answers).
    pub fn request_steer(&mut self, stream: StreamId, conn: ConnId) {
        let on = self.core.streams.get(stream).and_then(|s| s.steer);
        let on = on.filter(|c| self.conns.get(*c).is_some_and(Connection::is_usable));
        self.core.control.push(&Frame::StreamSteer { stream_id: stream, connection_id: conn }, on);
    }

    /// Application-level migration: every stream steered to `from` is steered to `to` (unsteered
    /// streams simply stop using `from`), and `from` is closed gracefully: the records already sealed on it still
    /// go out, then close_notify. Nothing is lost; the receiver reorders by offset.
    pub fn migrate(&mut self, from: ConnId, to: ConnId) -> Result<(), Error> {
        if !self.conns.get(to).is_some_and(Connection::carries_streams) {
            return Err(TransportError::internal(format!("connection {to} cannot carry data")).into());
        }
        let moved: Vec<StreamId> =
            self.core.streams.iter().filter(|(_, s)| s.steer == Some(from)).map(|(id, _)| id).collect();
        for id in moved {
            let _ = self.steer_stream(id, Some(to));
        }
        self.close_connection(from)
    }

    /// Replaces the policy for unsteered streams (default: [`super::sched::LowestRtt`]).
    pub fn set_scheduler(&mut self, scheduler: Box<dyn Scheduler>) {
        self.core.paths.set_scheduler(scheduler);
    }

    /// Answers a TCP Info Request: our kernel's view of connection `about`.
    pub fn send_tcp_info(&mut self, about: ConnId, info: crate::frame::PeerTcpInfo) {
        self.core.control.push_answer(&Frame::TcpInfo { connection_id: about, info }, about, None);
    }

    /// Asks the peer for its view of connection `about` (answered with a TCP Info frame, reported
    /// as [`Event::PeerTcpInfo`]).
    pub fn request_tcp_info(&mut self, about: ConnId) {
        self.core.control.push(&Frame::TcpInfoRequest { connection_id: about }, None);
    }
}
