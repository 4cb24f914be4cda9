//! The remote proxy.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use std::time::Instant;
use tokio::net::{TcpListener, TcpStream};
use tracing::{info, warn};

use super::mux::{Mux, Role};
use crate::{Config, Stats};

/// The TM3 remote proxy: accepts groups of N pipes and serves the connections they carry.
///
/// Pipes are grouped per source IP address: the first N connections accepted from one address
/// form one session (one local proxy), the next N the next session, and so on (the TM3 protocol
/// has no session identifier; two local proxies on one host that connect at the very same time
/// could get their pipes mixed). A partial group is closed once it has waited
/// `Config::group_timeout` (10 s) for the rest: a timer checks, so the sockets of a local proxy
/// that went away are not kept. A session lives until all its pipes are closed.
pub struct RemoteProxy {
    listener: TcpListener,
    pipes: usize,
    cfg: Config,
}

/// A running session of the remote proxy (one local proxy's pipes).
#[derive(Clone)]
pub struct Session {
    mux: Arc<Mux>,
}

impl Session {
    /// Counters of the session.
    pub fn stats(&self) -> &Stats {
        &self.mux.stats
    }

    /// In-order bytes queued for the session's TCP connections, and the bytes held (in order or
    /// not) for connections whose connection to the destination is being established.
    pub fn queued_bytes(&self) -> (usize, usize) {
        self.mux.queued_bytes()
    }

    /// Waits until every pipe of the session is closed.
    pub async fn closed(&self) {
        self.mux.closed().await
    }
}

impl RemoteProxy {
    /// Listens on `addr` for pipes; `pipes` is N (at least 1).
    pub async fn bind(addr: SocketAddr, pipes: usize, cfg: Config) -> io::Result<RemoteProxy> {
        if pipes == 0 || pipes > 1024 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "the number of pipes must be in 1..=1024"));
        }
        let listener = TcpListener::bind(addr).await?;
        Ok(RemoteProxy { listener, pipes, cfg })
    }

    /// The listening address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Accepts pipes forever.
    pub async fn run(self) -> io::Result<()> {
        self.run_with(|_| {}).await
    }

    /// Accepts pipes forever, calling `on_session` for every session started.
    pub async fn run_with(self, mut on_session: impl FnMut(Session)) -> io::Result<()> {
        let mut pending: HashMap<IpAddr, (Instant, Vec<TcpStream>)> = HashMap::new();
        let timeout = self.cfg.group_timeout;
        let mut reap = tokio::time::interval((timeout / 4).max(std::time::Duration::from_millis(10)));
        reap.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let accepted = tokio::select! {
                a = self.listener.accept() => a,
                _ = reap.tick() => {
                    reap_partial_groups(&mut pending, timeout);
                    continue;
                }
            };
            let (s, peer) = match accepted {
                Ok(x) => x,
                Err(e) => {
                    // Transient errors (e.g. EMFILE) must not end the proxy.
                    warn!("remote proxy: accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            };
            // A local proxy opens its pipes back to back: a stale partial group from this
            // address (a local proxy that died while connecting, a port scan) is not joined.
            reap_partial_groups(&mut pending, timeout);
            let group = &mut pending.entry(peer.ip()).or_insert_with(|| (Instant::now(), Vec::new())).1;
            group.push(s);
            info!("remote proxy: pipe {}/{} from {peer}", group.len(), self.pipes);
            if group.len() == self.pipes {
                let streams = pending.remove(&peer.ip()).map(|g| g.1).unwrap_or_default();
                let label = format!("rp[{}]", peer.ip());
                let mux = Mux::start(Role::Remote, self.cfg.clone(), label.clone(), streams);
                info!("{label}: all {} pipes established, session started", self.pipes);
                on_session(Session { mux: mux.clone() });
                tokio::spawn(async move {
                    mux.closed().await;
                    info!("{label}: session ended");
                });
            }
        }
    }
}

/// Closes the partial groups that waited longer than `timeout` for the rest of their pipes.
fn reap_partial_groups(pending: &mut HashMap<IpAddr, (Instant, Vec<TcpStream>)>, timeout: std::time::Duration) {
    pending.retain(|ip, (since, pipes)| {
        let keep = since.elapsed() <= timeout;
        if !keep {
            warn!(
                "remote proxy: closing {} pipe(s) from {ip} that waited more than {timeout:?} for the rest of their group",
                pipes.len()
            );
        }
        keep
    });
}
