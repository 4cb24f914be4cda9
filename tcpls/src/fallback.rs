//! Explicit fallback to plain TLS (paper §5.2): a middlebox that resets or swallows a
//! ClientHello offering `tcpls/1` but passes a plain TLS one.
//!
//! With [`TcplsConnector::with_fallback_retry`], the TCPLS handshake gets a short deadline. When
//! the TCP connection was made but the TCPLS ClientHello got a reset, an EOF or no answer within
//! that deadline, the connector opens a new TCP connection and offers a plain ClientHello (the
//! application's own ALPN list, without `tcpls/1`). If that one passes, the server address is
//! remembered for a while ([`FallbackMemory`]): later connections to it go plain at once.
//! [`ConnectOutcome`] tells the application which of these happened.
//!
//! [`TcplsConnector::with_fallback_retry`]: crate::TcplsConnector::with_fallback_retry

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustls::ClientConfig;
use tcpls_proto::sync::LockExt;

/// How long a server that needed a plain-TLS retry is remembered by default.
pub const DEFAULT_REMEMBER_FOR: Duration = Duration::from_secs(600);

/// Most servers remembered; the oldest entry is forgotten first (bounded memory).
const MAX_REMEMBERED: usize = 1024;

/// How a [`TcplsConnector::connect_detailed`](crate::TcplsConnector::connect_detailed) went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectOutcome {
    /// TCPLS was negotiated.
    Tcpls,
    /// The server (or a TLS-terminating proxy on the way) answered the TCPLS ClientHello with
    /// plain TLS: the session is a fallback session (one byte stream).
    ServerPlainTls,
    /// The TCPLS ClientHello was reset or not answered (`reason`); a plain TLS ClientHello on a
    /// new TCP connection went through. The server is now remembered.
    RetriedPlain { reason: String },
    /// The server was remembered from an earlier retry: plain TLS was offered directly.
    RememberedPlain { reason: String },
}

impl ConnectOutcome {
    /// The session is plain TLS (one byte stream), whatever the cause.
    pub fn is_fallback(&self) -> bool {
        !matches!(self, ConnectOutcome::Tcpls)
    }
}

impl std::fmt::Display for ConnectOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectOutcome::Tcpls => write!(f, "TCPLS"),
            ConnectOutcome::ServerPlainTls => write!(f, "plain TLS (the server did not select tcpls/1)"),
            ConnectOutcome::RetriedPlain { reason } => {
                write!(f, "plain TLS after a retry (the TCPLS ClientHello {reason})")
            }
            ConnectOutcome::RememberedPlain { reason } => {
                write!(f, "plain TLS, remembered for this server (earlier TCPLS ClientHello {reason})")
            }
        }
    }
}

/// A server that needed a plain-TLS retry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remembered {
    /// What happened to the TCPLS ClientHello, e.g. "was reset".
    pub reason: String,
    /// When the entry expires (then TCPLS is tried again).
    pub until: Instant,
}

/// Servers (by address) whose path blocks TCPLS ClientHellos. Shared by the clones of a
/// connector; entries expire.
#[derive(Debug, Clone, Default)]
pub struct FallbackMemory(Arc<Mutex<HashMap<SocketAddr, Remembered>>>);

impl FallbackMemory {
    /// The live entry for `addr`, if any (expired entries are dropped here).
    pub fn get(&self, addr: SocketAddr) -> Option<Remembered> {
        let mut map = self.0.lock_unpoisoned();
        let now = Instant::now();
        map.retain(|_, r| r.until > now);
        map.get(&addr).cloned()
    }

    /// Remembers `addr` for `ttl`.
    pub fn remember(&self, addr: SocketAddr, reason: String, ttl: Duration) {
        let mut map = self.0.lock_unpoisoned();
        if map.len() >= MAX_REMEMBERED && !map.contains_key(&addr) {
            let oldest = map.iter().min_by_key(|(_, r)| r.until).map(|(a, _)| *a);
            if let Some(a) = oldest {
                map.remove(&a);
            }
        }
        map.insert(addr, Remembered { reason, until: Instant::now() + ttl });
    }

    /// Forgets `addr` (the next connection tries TCPLS again).
    pub fn forget(&self, addr: SocketAddr) {
        self.0.lock_unpoisoned().remove(&addr);
    }

    /// Number of live entries.
    pub fn len(&self) -> usize {
        let mut map = self.0.lock_unpoisoned();
        let now = Instant::now();
        map.retain(|_, r| r.until > now);
        map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The retry settings of a connector.
#[derive(Clone)]
pub(crate) struct FallbackRetry {
    /// Deadline of the TCPLS handshake before retrying plain.
    pub(crate) timeout: Duration,
    pub(crate) remember_for: Duration,
    /// The application's config without `tcpls/1` in its ALPN list.
    pub(crate) plain: Arc<ClientConfig>,
    pub(crate) memory: FallbackMemory,
}

impl FallbackRetry {
    pub(crate) fn new(tcpls_config: &ClientConfig, timeout: Duration) -> Self {
        let mut plain = tcpls_config.clone();
        plain.alpn_protocols.retain(|p| p != tcpls_proto::ALPN_TCPLS);
        Self { timeout, remember_for: DEFAULT_REMEMBER_FOR, plain: Arc::new(plain), memory: FallbackMemory::default() }
    }
}

/// Whether a failed TCPLS handshake looks like a middlebox that blocks it (reset, EOF, no
/// answer), as opposed to an error a plain ClientHello would meet too (certificate, alert).
pub(crate) fn blocked_reason(e: &io::Error, timeout: Duration) -> Option<String> {
    match e.kind() {
        io::ErrorKind::TimedOut => Some(format!("got no answer within {timeout:?}")),
        io::ErrorKind::ConnectionReset => Some(format!("was reset ({e})")),
        // The core reports a lost connection as "connection lost: <the socket's error>".
        io::ErrorKind::ConnectionAborted if e.to_string().contains("reset") => Some(format!("was reset ({e})")),
        io::ErrorKind::ConnectionAborted | io::ErrorKind::UnexpectedEof | io::ErrorKind::BrokenPipe => {
            Some(format!("was cut off ({e})"))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_expire_and_can_be_forgotten() {
        let m = FallbackMemory::default();
        let a: SocketAddr = "10.0.0.1:443".parse().unwrap_or_else(|_| unreachable!());
        let b: SocketAddr = "10.0.0.2:443".parse().unwrap_or_else(|_| unreachable!());
        m.remember(a, "was reset".into(), Duration::from_secs(60));
        m.remember(b, "got no answer".into(), Duration::ZERO);
        assert_eq!(m.get(a).map(|r| r.reason), Some("was reset".to_string()));
        assert_eq!(m.get(b), None, "a zero TTL expires at once");
        assert_eq!(m.len(), 1);
        m.forget(a);
        assert!(m.is_empty());
    }

    #[test]
    fn only_blocking_errors_trigger_a_retry() {
        let t = Duration::from_secs(1);
        assert!(blocked_reason(&io::Error::from(io::ErrorKind::ConnectionReset), t).is_some());
        assert!(blocked_reason(&io::Error::from(io::ErrorKind::TimedOut), t).is_some());
        assert!(blocked_reason(&io::Error::from(io::ErrorKind::ConnectionAborted), t).is_some());
        assert!(blocked_reason(&io::Error::new(io::ErrorKind::InvalidData, "bad certificate"), t).is_none());
    }
}
