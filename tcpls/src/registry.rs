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

#[derive(Clone, Default)]
pub struct JoinRegistry {
    tokens: Arc<Mutex<TokenMap>>,
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
