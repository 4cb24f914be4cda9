//! What the session knows about paths beyond its connections: join tokens (given or spent),
//! the peer's other addresses, how a client opens new connections, a server's pending join
//! request, and the scheduler that spreads unsteered stream records over connections.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;

use rustls::pki_types::ServerName;
use rustls::ClientConfig;

use crate::event::ConnId;
use crate::frame::TOKEN_LEN;

use super::joining::{JoinRequest, REJOIN_ID_BASE};
use super::sched::{LowestRtt, Scheduler};

/// Most join tokens or peer addresses we keep; more are ignored (a peer cannot grow our memory).
const MAX_TOKENS: usize = 64;
const MAX_PEER_ADDRESSES: usize = 32;

type Token = [u8; TOKEN_LEN];

pub(super) struct Paths {
    /// Join tokens the server gave us (client), or issued and not yet spent (server), with their
    /// sequence numbers, in sequence order.
    tokens: Vec<(u32, Token)>,
    /// Client: sequence numbers of tokens already spent (IDs of connections, live or not).
    used_token_seqs: BTreeSet<u32>,
    /// Server: sequence number (future connection ID) of the next token.
    next_token_seq: u32,
    /// Client: counter of the Connection IDs of rejoins (`REJOIN_ID_BASE | n`).
    next_rejoin: u32,
    /// Addresses the peer advertised with New Address.
    peer_addresses: Vec<(u8, SocketAddr)>,
    /// Client: what new connections handshake with.
    client_tls: Option<(Arc<ClientConfig>, ServerName<'static>)>,
    /// Server: the accepted connection's first record was a Join.
    join_request: Option<JoinRequest>,
    /// Server: the client's first record on the initial connection arrived (no Join).
    initial_seen: bool,
    /// Policy for records of unsteered streams.
    scheduler: Box<dyn Scheduler>,
}

impl Default for Paths {
    fn default() -> Self {
        Self {
            tokens: Vec::new(),
            used_token_seqs: BTreeSet::new(),
            next_token_seq: 1,
            next_rejoin: 0,
            peer_addresses: Vec::new(),
            client_tls: None,
            join_request: None,
            initial_seen: false,
            scheduler: Box::new(LowestRtt),
        }
    }
}

impl std::fmt::Debug for Paths {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Paths")
            .field("tokens", &self.tokens.len())
            .field("peer_addresses", &self.peer_addresses)
            .finish_non_exhaustive()
    }
}

impl Paths {
    pub(super) fn tokens(&self) -> &[(u32, Token)] {
        &self.tokens
    }

    /// Client: a New Token frame. Sequence numbers become connection IDs: 0 is the initial
    /// connection's and a repeated or spent one would give two connections one ID, so such
    /// tokens are ignored, as are tokens beyond [`MAX_TOKENS`]. Returns how many we hold.
    pub(super) fn receive_token(&mut self, sequence: u32, token: Token) -> usize {
        let fresh = sequence != 0
            && sequence < REJOIN_ID_BASE
            && !self.tokens.iter().any(|(s, _)| *s == sequence)
            && !self.used_token_seqs.contains(&sequence);
        if self.tokens.len() < MAX_TOKENS && fresh {
            // Frames of a record are read back to front: keep the list ordered.
            let at = self.tokens.partition_point(|(s, _)| *s < sequence);
            self.tokens.insert(at, (sequence, token));
        }
        self.tokens.len()
    }

    /// Client: the oldest token, spent now (its sequence number is the new connection's ID).
    pub(super) fn spend_token(&mut self) -> Option<(u32, Token)> {
        if self.tokens.is_empty() {
            return None;
        }
        let (sequence, token) = self.tokens.remove(0);
        self.used_token_seqs.insert(sequence);
        Some((sequence, token))
    }

    /// Server: a fresh token, `random` bytes, under the next sequence number.
    pub(super) fn issue_token(&mut self, random: &dyn Fn(&mut [u8])) -> (u32, Token) {
        let sequence = self.next_token_seq;
        // Sequence numbers become Connection IDs: they stay in 1..REJOIN_ID_BASE, the rest is
        // the rejoin space (PROTOCOL.md §3).
        self.next_token_seq = (self.next_token_seq.wrapping_add(1) % REJOIN_ID_BASE).max(1);
        let mut token = [0u8; TOKEN_LEN];
        random(&mut token);
        self.tokens.push((sequence, token));
        (sequence, token)
    }

    /// Server: spends the issued token equal to `token` (compared in constant time); its
    /// sequence number, or `None` if we did not issue it or it was spent.
    pub(super) fn redeem_token(&mut self, token: &Token) -> Option<u32> {
        let idx = self.tokens.iter().position(|(_, t)| tokens_equal(t, token))?;
        Some(self.tokens.remove(idx).0)
    }

    /// Client: the next Connection ID of the rejoin space for which `in_use` is false.
    pub(super) fn next_rejoin_id(&mut self, in_use: impl Fn(ConnId) -> bool) -> ConnId {
        loop {
            let id = REJOIN_ID_BASE | (self.next_rejoin & !REJOIN_ID_BASE);
            self.next_rejoin = self.next_rejoin.wrapping_add(1);
            // A session has few connections (the finished ones are pruned), so this ends fast.
            if !in_use(id) {
                return id;
            }
        }
    }

    pub(super) fn peer_addresses(&self) -> &[(u8, SocketAddr)] {
        &self.peer_addresses
    }

    /// New Address: replaces an address of the same ID; returns whether it was kept (at most
    /// [`MAX_PEER_ADDRESSES`]).
    pub(super) fn add_peer_address(&mut self, address_id: u8, addr: SocketAddr) -> bool {
        self.remove_peer_address(address_id);
        if self.peer_addresses.len() < MAX_PEER_ADDRESSES {
            self.peer_addresses.push((address_id, addr));
            return true;
        }
        false
    }

    pub(super) fn remove_peer_address(&mut self, address_id: u8) {
        self.peer_addresses.retain(|(id, _)| *id != address_id);
    }

    pub(super) fn client_tls(&self) -> Option<(Arc<ClientConfig>, ServerName<'static>)> {
        self.client_tls.clone()
    }

    pub(super) fn set_client_tls(&mut self, config: Arc<ClientConfig>, server_name: ServerName<'static>) {
        self.client_tls = Some((config, server_name));
    }

    pub(super) fn has_join_request(&self) -> bool {
        self.join_request.is_some()
    }

    pub(super) fn set_join_request(&mut self, request: JoinRequest) {
        self.join_request = Some(request);
    }

    pub(super) fn take_join_request(&mut self) -> Option<JoinRequest> {
        self.join_request.take()
    }

    /// Server: the client's first record on the initial connection arrived (not a Join).
    pub(super) fn initial_seen(&self) -> bool {
        self.initial_seen
    }

    pub(super) fn see_initial(&mut self) {
        self.initial_seen = true;
    }

    pub(super) fn scheduler(&mut self) -> &mut dyn Scheduler {
        self.scheduler.as_mut()
    }

    pub(super) fn set_scheduler(&mut self, scheduler: Box<dyn Scheduler>) {
        self.scheduler = scheduler;
    }
}

/// Constant-time equality, so the time a token check takes does not depend on how many of its
/// bytes a guess got right.
fn tokens_equal(a: &Token, b: &Token) -> bool {
    aws_lc_rs::constant_time::verify_slices_are_equal(a, b).is_ok()
}
