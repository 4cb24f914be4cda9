//! Which live session issued which join token, for every listener of a server.
//!
//! A joining TCP connection can arrive on any listener (any advertised address); its first
//! record names the session by token. Listeners that serve the same sessions share one
//! registry. Lookups go through a hash map keyed by the token (SipHash with a random key, so
//! timing reveals nothing useful about stored tokens); the session then compares the token in
//! constant time before accepting it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use crate::listener_stats::{ListenerCounters, ListenerStats};
use crate::shared::Inner;

/// Token → the session that issued it (weak: a registry never keeps a session alive).
type TokenMap = HashMap<[u8; 32], Weak<Mutex<Inner>>>;

/// Session reference → its session, for rejoins without a token (PROTOCOL.md §3): one entry per
/// live TCPLS session, inserted when its initial connection is established, removed when it ends.
type RefMap = HashMap<[u8; tcpls_proto::SESSION_REF_LEN], Weak<Mutex<Inner>>>;

#[derive(Clone, Default)]
pub struct JoinRegistry {
    tokens: Arc<Mutex<TokenMap>>,
    session_refs: Arc<Mutex<RefMap>>,
    counters: Arc<ListenerCounters>,
}

impl std::fmt::Debug for JoinRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JoinRegistry").field("tokens", &self.len()).finish()
    }
}

impl JoinRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    fn map(&self) -> std::sync::MutexGuard<'_, TokenMap> {
        self.tokens.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn insert(&self, token: [u8; 32], session: Weak<Mutex<Inner>>) {
        self.map().insert(token, session);
    }

    pub(crate) fn remove(&self, token: &[u8; 32]) {
        self.map().remove(token);
    }

    /// The live session that issued `token`; the entry is removed either way (single use).
    pub(crate) fn take(&self, token: &[u8; 32]) -> Option<Arc<Mutex<Inner>>> {
        self.map().remove(token).and_then(|w| w.upgrade())
    }

    fn refs(&self) -> std::sync::MutexGuard<'_, RefMap> {
        self.session_refs.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn insert_session_ref(&self, session_ref: [u8; 16], session: Weak<Mutex<Inner>>) {
        self.refs().insert(session_ref, session);
    }

    pub(crate) fn remove_session_ref(&self, session_ref: &[u8; 16]) {
        self.refs().remove(session_ref);
    }

    /// The live session a Rejoin names (the entry stays: a session reference is not single use;
    /// the session checks the proof).
    pub(crate) fn session_by_ref(&self, session_ref: &[u8; 16]) -> Option<Arc<Mutex<Inner>>> {
        self.refs().get(session_ref).and_then(Weak::upgrade)
    }

    /// Registered session references: one per live session (for tests and statistics).
    pub fn session_refs(&self) -> usize {
        self.refs().len()
    }

    /// Registered tokens (for tests and statistics).
    pub fn len(&self) -> usize {
        self.map().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What the listeners sharing this registry did with the connections they accepted.
    pub fn listener_stats(&self) -> ListenerStats {
        self.counters.snapshot()
    }

    pub(crate) fn counters(&self) -> &ListenerCounters {
        &self.counters
    }
}
