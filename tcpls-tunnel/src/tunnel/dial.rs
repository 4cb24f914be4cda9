//! The concentrator's outbound connections: a bounded name lookup, the destination policy on
//! every address, then TCP connect — all within the connect timeout.

use std::fmt;
use std::future::Future;
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tcpls_proto::sync::RwLockExt;
use tokio::net::{TcpStream, UdpSocket};
use tokio::sync::Semaphore;

use super::order::{Turn, MAX_ORDER_WAIT};
use super::Target;
use crate::clients::ClientRule;
use crate::policy::{DestPolicy, Refusal};

/// The per-client rules of the requesting client, if it has an entry: its name and rules.
pub type ClientRules<'a> = Option<(&'a str, &'a ClientRule)>;

/// Why no connection was made.
#[derive(Debug)]
pub enum DialError {
    /// The policy refuses the destination (every address of a name): nothing was connected.
    Refused(Refusal),
    /// Lookup or connect failed, or the timeout passed.
    Failed(io::Error),
}

impl fmt::Display for DialError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DialError::Refused(r) => write!(f, "refused: {r}"),
            DialError::Failed(e) => write!(f, "{e}"),
        }
    }
}

/// Shared by all sessions of a concentrator.
pub struct Dialer {
    /// Replaced as a whole on reload ([`Dialer::set_policy`]); each dial uses one version.
    policy: std::sync::RwLock<Arc<DestPolicy>>,
    lookups: Arc<Semaphore>,
    timeout: Duration,
}

impl Dialer {
    pub fn new(policy: DestPolicy, max_lookups: usize, timeout: Duration) -> Dialer {
        Dialer {
            policy: std::sync::RwLock::new(Arc::new(policy)),
            lookups: Arc::new(Semaphore::new(max_lookups.max(1))),
            timeout,
        }
    }

    /// The policy in force.
    pub fn policy(&self) -> Arc<DestPolicy> {
        self.policy.read_unpoisoned().clone()
    }

    /// Replaces the policy for the dials that start from now on.
    pub fn set_policy(&self, policy: DestPolicy) {
        *self.policy.write_unpoisoned() = Arc::new(policy);
    }

    /// Name lookups in progress (permits taken).
    #[cfg(test)]
    fn lookups_in_progress(&self, max: usize) -> usize {
        max - self.lookups.available_permits()
    }

    /// Connects to `target`: an address, or a name's addresses in turn, skipping those the
    /// policy refuses (the check is on the address connected to, so a name cannot rebind
    /// between check and use).
    /// The first connection attempt starts in stream order (`turn`, see [`super::order`]): after
    /// the lookup, once earlier streams have started theirs (100 ms at most).
    pub async fn dial(&self, target: &Target, turn: Turn, client: ClientRules<'_>) -> Result<TcpStream, DialError> {
        let attempt = async {
            let addrs = match target {
                Target::Addr(a) => vec![*a],
                Target::Name(host, port) => self.lookup(host, *port).await.map_err(DialError::Failed)?,
            };
            let policy = self.policy();
            let (mut refused, mut failed) = (None, None);
            turn.wait(MAX_ORDER_WAIT).await;
            let mut turn = Some(turn);
            for a in addrs {
                if let Err(r) = check(&policy, client, a.ip()) {
                    refused.get_or_insert(r);
                    continue;
                }
                let mut connecting = std::pin::pin!(TcpStream::connect(a));
                // The first poll sends the SYN; the next stream may start its own after that.
                let first = std::future::poll_fn(|cx| Poll::Ready(connecting.as_mut().poll(cx))).await;
                drop(turn.take());
                let connected = match first {
                    Poll::Ready(r) => r,
                    Poll::Pending => connecting.await,
                };
                match connected {
                    Ok(s) => return Ok(s),
                    Err(e) => failed = Some(e),
                }
            }
            Err(match (failed, refused) {
                (Some(e), _) => DialError::Failed(e),
                (None, Some(r)) => DialError::Refused(r),
                (None, None) => DialError::Failed(io::Error::new(io::ErrorKind::NotFound, "no address")),
            })
        };
        tokio::time::timeout(self.timeout, attempt)
            .await
            .unwrap_or_else(|_| Err(DialError::Failed(io::Error::new(io::ErrorKind::TimedOut, "connection timed out"))))
    }

    /// A UDP socket connected to `target` (the first address the policy allows), so only that
    /// address's datagrams come back. Same policy and timeout as [`Dialer::dial`].
    pub async fn dial_udp(&self, target: &Target, client: ClientRules<'_>) -> Result<UdpSocket, DialError> {
        let attempt = async {
            let addrs = match target {
                Target::Addr(a) => vec![*a],
                Target::Name(host, port) => self.lookup(host, *port).await.map_err(DialError::Failed)?,
            };
            let policy = self.policy();
            let (mut refused, mut failed) = (None, None);
            for a in addrs {
                if let Err(r) = check(&policy, client, a.ip()) {
                    refused.get_or_insert(r);
                    continue;
                }
                let local: SocketAddr = if a.is_ipv4() { ([0, 0, 0, 0], 0).into() } else { ([0u16; 8], 0).into() };
                let connected = async {
                    let s = UdpSocket::bind(local).await?;
                    s.connect(a).await?;
                    Ok::<_, io::Error>(s)
                };
                match connected.await {
                    Ok(s) => return Ok(s),
                    Err(e) => failed = Some(e),
                }
            }
            Err(match (failed, refused) {
                (Some(e), _) => DialError::Failed(e),
                (None, Some(r)) => DialError::Refused(r),
                (None, None) => DialError::Failed(io::Error::new(io::ErrorKind::NotFound, "no address")),
            })
        };
        tokio::time::timeout(self.timeout, attempt)
            .await
            .unwrap_or_else(|_| Err(DialError::Failed(io::Error::new(io::ErrorKind::TimedOut, "timed out"))))
    }

    /// getaddrinfo on the blocking pool, at most `max_lookups` at once. The permit moves into
    /// the blocking task and is released when the resolver returns, not when our caller gives
    /// up: a lookup abandoned at the timeout still holds its thread, and must still count.
    async fn lookup(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
        let permit = self.lookups.clone().acquire_owned().await.map_err(io::Error::other)?;
        let name = host.to_string();
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            (name, port).to_socket_addrs().map(Iterator::collect)
        })
        .await
        .map_err(io::Error::other)?
        .map_err(|e| io::Error::new(e.kind(), format!("cannot resolve {host}: {e}")))
    }
}

/// The server-wide policy, under the client's rules if it has an entry.
fn check(policy: &DestPolicy, client: ClientRules<'_>, ip: std::net::IpAddr) -> Result<(), Refusal> {
    match client {
        Some((name, rule)) => rule.check(name, policy, ip),
        None => policy.check_on_this_host(ip),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A stream with no one before it: dials at once.
    fn first_turn() -> Turn {
        super::super::order::ConnectOrder::new().ticket()
    }

    #[tokio::test]
    async fn refuses_without_connecting_and_names_are_checked_after_lookup() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let port = l.local_addr().unwrap().port();
        let safe = Dialer::new(DestPolicy::safe(), 2, Duration::from_secs(5));
        let mapped = SocketAddr::from((std::net::Ipv4Addr::LOCALHOST.to_ipv6_mapped(), port));
        let targets = [
            Target::Addr(SocketAddr::from(([127, 0, 0, 1], port))),
            Target::Addr(mapped),
            Target::Name("localhost".into(), port),
            Target::Name("127.0.0.1".into(), port),
            Target::Name(format!("{mapped}").split(']').next().unwrap_or_default()[1..].to_string(), port),
        ];
        for t in targets {
            match safe.dial(&t, first_turn(), None).await {
                Err(DialError::Refused(r)) => assert!(r.to_string().contains("loopback"), "{r}"),
                other => panic!("{t}: {other:?}"),
            }
        }
        // Nothing reached the listener.
        assert_eq!(l.accept().unwrap_err().kind(), io::ErrorKind::WouldBlock);
        assert_eq!(safe.lookups_in_progress(2), 0);
        let open = Dialer::new(DestPolicy::allow_all(), 2, Duration::from_secs(5));
        assert!(open.dial(&Target::Name("localhost".into(), port), first_turn(), None).await.is_ok());
    }

    #[tokio::test]
    async fn lookups_are_bounded() {
        // One permit: a second lookup waits for the first; with the permit held elsewhere the
        // lookup cannot start and the dial times out.
        let d = Dialer::new(DestPolicy::allow_all(), 1, Duration::from_millis(300));
        let held = d.lookups.clone().acquire_owned().await.unwrap();
        match d.dial(&Target::Name("localhost".into(), 9), first_turn(), None).await {
            Err(DialError::Failed(e)) => assert_eq!(e.kind(), io::ErrorKind::TimedOut),
            other => panic!("{other:?}"),
        }
        drop(held);
        assert_eq!(d.lookups_in_progress(1), 0);
    }
}
