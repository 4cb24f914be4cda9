//! A connection that asks to join a session (Join or Rejoin, PROTOCOL.md §3) on its way from
//! the session that accepted it to the session it names, and what an accepting session
//! turned out to be.

use crate::event::ConnId;
use crate::frame::{REJOIN_PROOF_LEN, SESSION_REF_LEN, TOKEN_LEN};

use super::conn::Connection;

/// Wire length of a Join frame: the token and the type byte.
pub(super) const JOIN_FRAME_LEN: usize = TOKEN_LEN + 1;

/// First Connection ID of the rejoin space (PROTOCOL.md §3): token sequence numbers stay below it.
pub const REJOIN_ID_BASE: ConnId = 0x8000_0000;

/// How a joining connection names its session: a token (Join) or a session reference with a
/// proof (Rejoin).
#[derive(Debug)]
pub(super) enum JoinKey {
    Token([u8; TOKEN_LEN]),
    Rejoin { connection_id: ConnId, session_ref: [u8; SESSION_REF_LEN], proof: [u8; REJOIN_PROOF_LEN] },
}

/// A connection whose first record asked to join a session (Join or Rejoin).
#[derive(Debug)]
pub(super) struct JoinRequest {
    pub(super) key: JoinKey,
    /// Sequence number of that first record (for ACKs on the joined connection).
    pub(super) seq: u64,
    /// The frames that followed the Join in that record: the target session processes them.
    pub(super) rest: Vec<u8>,
}

/// A connection detached from the session that accepted it, on its way to the session its
/// join token names (see [`Session::take_joining_connection`](crate::Session::take_joining_connection)).
pub struct JoiningConnection {
    pub(super) conn: Box<Connection>,
    pub(super) request: JoinRequest,
}

impl std::fmt::Debug for JoiningConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JoiningConnection").finish_non_exhaustive()
    }
}

impl JoiningConnection {
    /// The token the client presented (Join): look up the session it belongs to with this.
    pub fn token(&self) -> Option<&[u8; 32]> {
        match &self.request.key {
            JoinKey::Token(t) => Some(t),
            JoinKey::Rejoin { .. } => None,
        }
    }

    /// The session reference the client presented (Rejoin, no token): look up the session it
    /// belongs to with this (see [`Session::session_ref`](crate::Session::session_ref)).
    pub fn session_ref(&self) -> Option<&[u8; SESSION_REF_LEN]> {
        match &self.request.key {
            JoinKey::Token(_) => None,
            JoinKey::Rejoin { session_ref, .. } => Some(session_ref),
        }
    }
}

/// What a server-side session that just accepted a TCP connection turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accepted {
    /// Still handshaking, or waiting for the client's first record.
    Pending,
    /// A new session (TCPLS or plain TLS fallback).
    NewSession,
    /// A connection that wants to join another session: take it out with
    /// [`Session::take_joining_connection`](crate::Session::take_joining_connection).
    Join,
    /// The handshake failed.
    Failed,
}
