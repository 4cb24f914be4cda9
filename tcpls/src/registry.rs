//! Which live session issued which join token, for every listener of a server.
//!
//! A joining TCP connection can arrive on any listener (any advertised address); its first
//! record names the session by token. Listeners that serve the same sessions share one
//! registry. Lookups go through a hash map keyed by the token (SipHash with a random key, so
//! timing reveals nothing useful about stored tokens); the session then compares the token in
//! constant time before accepting it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, Weak};

use tcpls_proto::sync::LockExt;
use tcpls_proto::JoiningConnection;
use tokio::net::TcpStream;

use crate::listener_stats::{ListenerCounters, ListenerStats};

/// A session reference (PROTOCOL.md §3): names a session in a Rejoin.
type SessionRef = [u8; tcpls_proto::SESSION_REF_LEN];

/// All the registry needs of a session: a handle that takes a joining connection to it. The
/// registry stores it weakly and never sees the session's state; the session's side
/// (`shared.rs`) implements it under the session's lock.
pub(crate) trait JoinTarget: Send + Sync {
    /// Attaches `joining`, whose socket is `stream`, to the session: whether the socket was
    /// handed over to another runtime (the session's core is not this one). Gives both back if the
    /// session refuses it (a used token, over its budget, closing), for the refusal's alert
    /// (boxed: the socket and the connection's state are large, and refusals are rare).
    fn attach(
        &self,
        joining: JoiningConnection,
        stream: TcpStream,
        local: Option<SocketAddr>,
        remote: Option<SocketAddr>,
    ) -> Result<bool, Box<Refused>>;
}

/// A joining connection a session refused, with its socket.
pub(crate) struct Refused {
    pub(crate) joining: JoiningConnection,
    pub(crate) stream: TcpStream,
}

/// Token → the session that issued it (weak: a registry never keeps a session alive).
type TokenMap = HashMap<[u8; 32], Weak<dyn JoinTarget>>;

/// Session reference → its session, for rejoins without a token (PROTOCOL.md §3): one entry per
/// live TCPLS session, inserted when its initial connection is established, removed when it ends.
type RefMap = HashMap<SessionRef, Weak<dyn JoinTarget>>;

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
        self.tokens.lock_unpoisoned()
    }

    fn insert(&self, token: [u8; 32], session: Weak<dyn JoinTarget>) {
        self.map().insert(token, session);
    }

    fn remove(&self, token: &[u8; 32]) {
        self.map().remove(token);
    }

    /// The live session that issued `token`; the entry is removed either way (single use).
    pub(crate) fn take(&self, token: &[u8; 32]) -> Option<Arc<dyn JoinTarget>> {
        self.map().remove(token).and_then(|w| w.upgrade())
    }

    fn refs(&self) -> std::sync::MutexGuard<'_, RefMap> {
        self.session_refs.lock_unpoisoned()
    }

    fn insert_session_ref(&self, session_ref: SessionRef, session: Weak<dyn JoinTarget>) {
        self.refs().insert(session_ref, session);
    }

    fn remove_session_ref(&self, session_ref: &SessionRef) {
        self.refs().remove(session_ref);
    }

    /// The live session a Rejoin names (the entry stays: a session reference is not single use;
    /// the session checks the proof).
    pub(crate) fn session_by_ref(&self, session_ref: &SessionRef) -> Option<Arc<dyn JoinTarget>> {
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

/// A server session's entries in its listeners' registry: what it has published there and
/// must withdraw when it ends. Owned by the session's state (`shared.rs`), which feeds it the
/// tokens the core issues; the driver publishes them before they leave in a record.
pub(crate) struct Registration {
    registry: JoinRegistry,
    /// The session, as the registry holds it.
    session: Weak<dyn JoinTarget>,
    /// Tokens issued since they were last published. Used tokens need no change: the listener
    /// removed them when routing.
    unpublished: Vec<[u8; 32]>,
    /// The session reference, once published (when the initial connection is established).
    session_ref: Option<SessionRef>,
    /// The session ended: nothing is published any more.
    withdrawn: bool,
}

impl Registration {
    pub(crate) fn new(registry: JoinRegistry, session: Weak<dyn JoinTarget>) -> Self {
        Self { registry, session, unpublished: Vec::new(), session_ref: None, withdrawn: false }
    }

    /// The core issued `token` (it goes out with the next records).
    pub(crate) fn token_issued(&mut self, token: [u8; 32]) {
        self.unpublished.push(token);
    }

    /// Tokens were issued since the last [`publish`](Self::publish).
    pub(crate) fn has_unpublished(&self) -> bool {
        !self.unpublished.is_empty()
    }

    /// Publishes the tokens issued since the last call and, once `proto` has one, the session
    /// reference.
    pub(crate) fn publish(&mut self, proto: &tcpls_proto::Session) {
        if self.withdrawn {
            return;
        }
        for token in self.unpublished.drain(..) {
            self.registry.insert(token, self.session.clone());
        }
        if self.session_ref.is_none() {
            if let Some(session_ref) = proto.session_ref() {
                self.registry.insert_session_ref(session_ref, self.session.clone());
                self.session_ref = Some(session_ref);
            }
        }
    }

    /// The session ended: its unused tokens and its reference go from the registry.
    pub(crate) fn withdraw(&mut self, proto: &tcpls_proto::Session) {
        self.withdrawn = true;
        self.unpublished.clear();
        for (_, token) in proto.tokens() {
            self.registry.remove(token);
        }
        if let Some(session_ref) = self.session_ref.take() {
            self.registry.remove_session_ref(&session_ref);
        }
    }
}
