//! A path manager for client sessions: keeps a configured set of paths connected, in the spirit
//! of Linux MPTCP's path managers (`ip mptcp endpoint ... subflow|backup|fullmesh`).
//!
//! The application describes its local **endpoints** (an interface or local address each, with
//! a `backup` flag) and the policy:
//! * [`PathPolicy::Manual`]: only the paths listed explicitly ([`PathManagerConfig::paths`]) are
//!   kept up;
//! * [`PathPolicy::Fullmesh`]: one path per endpoint and server address: the address the session
//!   was opened to plus those the server advertises (New Address), minus those it withdraws.
//!
//! The manager joins every wanted path that has no live connection, re-joins one whose connection
//! was lost (exponential backoff with jitter, so a path that stays down costs little), marks
//! backup paths with Path Priority, and can drop a path at once when its interface goes away
//! ([`PathManager::interface_down`]), so its unacknowledged records fail over without waiting for
//! a timeout. It stops when the session ends.
//!
//! **Outages.** When every path is lost at once (a Wi-Fi handover, a tunnel, a flapping
//! uplink), the session waits for a rejoin for [`PathManagerConfig::outage_tolerance`] (default
//! 60 s) instead of the session's own 10 s, and the manager keeps trying every path (at least
//! once a second, and at once when an interface comes back). A failed TCP connect costs no join
//! token, so however long the outage, the session resumes as soon as one path connects, and the
//! unacknowledged data is sent again: nothing is lost. Past the tolerance the session ends with
//! `ConnectionLost("every connection was lost and none rejoined within 60.0 s (first loss: ...;
//! last attempts: ...)")`. The server keeps an orphaned session only for its own
//! [`SessionConfig::rejoin_timeout`](tcpls_proto::SessionConfig::rejoin_timeout): a server for
//! mobile clients sets it at least as long (docs/ARCHITECTURE.md, "Break-before-make").
//!
//! ```no_run
//! # async fn demo(session: tcpls::Session) -> std::io::Result<()> {
//! use tcpls::{Endpoint, PathManager, PathManagerConfig, PathOptions, PathPolicy};
//! // A laptop with Wi-Fi and LTE; the server has one address. LTE is a backup path: it
//! // carries data only while Wi-Fi is down.
//! let server = "203.0.113.5:4443".parse().unwrap();
//! let config = PathManagerConfig {
//!     policy: PathPolicy::Fullmesh,
//!     endpoints: vec![
//!         Endpoint::new(PathOptions::new().device("wlan0")),
//!         Endpoint::backup(PathOptions::new().device("wwan0")),
//!     ],
//!     initial: PathOptions::new().device("wlan0"), // what the connector used
//!     outage_tolerance: std::time::Duration::from_secs(120),
//!     ..Default::default()
//! };
//! let manager = PathManager::start(&session, server, config);
//! manager.follow_interfaces()?; // Linux: react to interfaces going down and up at once
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tcpls_proto::sync::LockExt;
use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::{debug, info};

use crate::path::PathOptions;
use crate::session::Session;
use tcpls_proto::ConnId;

/// Which paths the manager keeps up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PathPolicy {
    /// Only the explicitly configured paths.
    #[default]
    Manual,
    /// Every endpoint × every server address (including advertised ones), plus explicit paths.
    Fullmesh,
}

/// A local side the manager may use, like an `ip mptcp endpoint`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Endpoint {
    pub path: PathOptions,
    /// Carry stream data only when no regular path is usable (Path Priority).
    pub backup: bool,
}

impl Endpoint {
    pub fn new(path: PathOptions) -> Self {
        Self { path, backup: false }
    }

    pub fn backup(path: PathOptions) -> Self {
        Self { path, backup: true }
    }
}

/// What the manager keeps up, and how hard it tries.
#[derive(Debug, Clone)]
pub struct PathManagerConfig {
    pub policy: PathPolicy,
    /// Local sides for [`PathPolicy::Fullmesh`]; empty: the default route only.
    pub endpoints: Vec<Endpoint>,
    /// Paths kept up with any policy.
    pub paths: Vec<(SocketAddr, Endpoint)>,
    /// The local side of the session's first connection (what the connector used), so the
    /// manager does not open a second connection over the same path.
    pub initial: PathOptions,
    /// Pause after a path's first failed attempt; doubles up to `max_backoff` (1 s at most
    /// while every path is down).
    pub first_backoff: Duration,
    pub max_backoff: Duration,
    /// How long the session survives with no connection at all (every path down), waiting for
    /// one to come back; then it ends with an error saying so. Default 60 s.
    pub outage_tolerance: Duration,
}

impl Default for PathManagerConfig {
    fn default() -> Self {
        Self {
            policy: PathPolicy::Manual,
            endpoints: Vec::new(),
            paths: Vec::new(),
            initial: PathOptions::new(),
            first_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
            outage_tolerance: DEFAULT_OUTAGE_TOLERANCE,
        }
    }
}

impl PathManagerConfig {
    /// The configuration the CLI builds from `--bind LOCAL` (`initial`, the first connection's
    /// local side) and `--path [LOCAL@]REMOTE` (`paths`): with [`PathPolicy::Manual`] exactly
    /// those paths; with [`PathPolicy::Fullmesh`] also every local side among them × every
    /// server address (the first and the advertised ones).
    pub fn from_paths(policy: PathPolicy, initial: PathOptions, paths: &[(SocketAddr, PathOptions)]) -> Self {
        let mut endpoints = vec![Endpoint::new(initial.clone())];
        for (_, local) in paths {
            if !endpoints.iter().any(|e| e.path == *local) {
                endpoints.push(Endpoint::new(local.clone()));
            }
        }
        PathManagerConfig {
            policy,
            endpoints,
            paths: paths.iter().map(|(r, l)| (*r, Endpoint::new(l.clone()))).collect(),
            initial,
            ..Default::default()
        }
    }
}

/// One wanted path: a server address and a local side.
type PathKey = (SocketAddr, Endpoint);

/// What the manager knows of one wanted path.
#[derive(Debug)]
struct PathState {
    conn: Option<ConnId>,
    backoff: Duration,
    next_attempt: Instant,
    attempting: bool,
    /// The attempt is still in its TCP connect (no token taken yet): it may be restarted.
    connecting: Option<(Instant, tokio::task::AbortHandle)>,
    failures: u32,
    last_error: Option<String>,
    /// Since when its connection has been suspect of silence (PROTOCOL.md §5): after
    /// [`REPLACE_SILENT_AFTER`] a new connection is attempted beside it, and replaces it once
    /// up (TCP's own retransmissions back off to seconds; a fresh connect finds a path that came
    /// back sooner).
    suspect_since: Option<Instant>,
}

/// How long a path's connection stays suspect of silence before the manager tries a new one
/// over the same path.
const REPLACE_SILENT_AFTER: Duration = Duration::from_secs(1);

/// State shared by the manager's task and its handle.
struct Shared {
    paths: Mutex<BTreeMap<String, (PathKey, PathState)>>,
    first_backoff: Duration,
    /// When an interface, address or route last appeared.
    network_changed: Mutex<Option<Instant>>,
    /// Wakes the task early (an interface came back, the handle was dropped...).
    wake: Notify,
    stopped: std::sync::atomic::AtomicBool,
}

/// A running path manager; see the module documentation. Dropping the handle leaves it
/// running (it ends with the session); [`stop`](Self::stop) ends it.
#[derive(Clone)]
pub struct PathManager {
    session: Session,
    shared: Arc<Shared>,
}

/// A path as the manager reports it ([`PathManager::paths`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathReport {
    pub remote: SocketAddr,
    pub endpoint: Endpoint,
    /// Its live connection, if any.
    pub conn: Option<ConnId>,
    /// Failed attempts since it was last up.
    pub failures: u32,
    /// Why the last attempt failed.
    pub last_error: Option<String>,
}

/// How often the manager looks at the session when nothing wakes it.
const TICK: Duration = Duration::from_millis(100);

/// [`PathManagerConfig::outage_tolerance`] by default.
pub const DEFAULT_OUTAGE_TOLERANCE: Duration = Duration::from_secs(60);

/// Longest pause between attempts on a path while the session has no connection at all: an
/// outage ends when the network comes back, and failed connects are cheap (no token).
const OUTAGE_MAX_BACKOFF: Duration = Duration::from_secs(1);

/// How long the network must stay unchanged after an interface, address or route appeared
/// before waiting paths are tried, and connect attempts started before the change restarted.
const SETTLE: Duration = Duration::from_millis(50);

impl PathManager {
    /// Starts managing `session`'s paths (a client session; `origin` is the server address it
    /// was opened to).
    pub fn start(session: &Session, origin: SocketAddr, config: PathManagerConfig) -> PathManager {
        let shared = Arc::new(Shared {
            paths: Mutex::new(BTreeMap::new()),
            first_backoff: config.first_backoff,
            network_changed: Mutex::new(None),
            wake: Notify::new(),
            stopped: std::sync::atomic::AtomicBool::new(false),
        });
        let manager = PathManager { session: session.clone(), shared };
        // The manager rejoins over its paths after an outage, for as long as it tolerates one.
        session.set_rejoin_timeout(config.outage_tolerance);
        session.set_managed(true);
        let task = manager.clone();
        tokio::spawn(async move {
            let session = task.session.clone();
            task.run(origin, config).await;
            // Stopped: a later outage is the session's own business again.
            session.set_managed(false);
        });
        manager
    }

    /// The wanted paths and their state.
    pub fn paths(&self) -> Vec<PathReport> {
        let paths = self.shared.paths.lock_unpoisoned();
        paths
            .values()
            .map(|((remote, endpoint), st)| PathReport {
                remote: *remote,
                endpoint: endpoint.clone(),
                conn: st.conn,
                failures: st.failures,
                last_error: st.last_error.clone(),
            })
            .collect()
    }

    /// An interface went down or lost its address: every connection of a path over it is
    /// dropped at once (its records fail over to the others), and the path waits to be retried.
    /// `device` and/or `address` name what went away.
    pub fn interface_down(&self, device: Option<&str>, address: Option<std::net::IpAddr>) {
        let mut dropped = Vec::new();
        {
            let mut paths = self.shared.paths.lock_unpoisoned();
            let conns = self.session.connections();
            for ((_, endpoint), st) in paths.values_mut() {
                let Some(conn) = st.conn else { continue };
                let by_device = device.is_some() && endpoint.path.device_name() == device;
                let local = conns.iter().find(|c| c.id == conn).and_then(|c| c.local).map(|a| a.ip());
                let by_address = address.is_some() && local == address;
                if by_device || by_address {
                    dropped.push(conn);
                    st.conn = None;
                    st.next_attempt = Instant::now() + st.backoff;
                }
            }
        }
        for conn in dropped {
            let what = device.map(str::to_string).or(address.map(|a| a.to_string())).unwrap_or_default();
            info!("path manager: {what} went away: dropping connection {conn}");
            self.session.trace_path(|| crate::trace::PathEvent {
                state: "dropped",
                remote: SocketAddr::from(([0, 0, 0, 0], 0)),
                local: what.clone(),
                conn: Some(conn),
                error: Some(format!("interface {what} went away")),
                retry_ms: None,
            });
            self.session.abandon_connection(conn, &format!("interface {what} went away"));
        }
        self.shared.wake.notify_one();
    }

    /// An interface came up, gained an address or a route: paths waiting for a retry are tried
    /// now, from the first backoff again. An attempt still in its TCP connect is started
    /// afresh: it may be stuck on the network as it was (e.g. an unanswered neighbour
    /// resolution takes 3 s to fail), and it holds no token yet.
    pub fn interface_up(&self) {
        let mut paths = self.shared.paths.lock_unpoisoned();
        let now = Instant::now();
        // Changes come in bursts (link, addresses, routes, neighbours): attempts start once
        // it has settled, and those started before are restarted then (start_due_attempts).
        *self.shared.network_changed.lock_unpoisoned() = Some(now);
        for (_, st) in paths.values_mut() {
            if st.conn.is_none() {
                st.next_attempt = st.next_attempt.min(now + SETTLE);
                st.backoff = self.shared.first_backoff;
            }
        }
        drop(paths);
        self.shared.wake.notify_one();
    }

    /// Follows the kernel's interface and address events (rtnetlink, Linux): a path whose
    /// interface goes down or whose local address disappears is dropped at once
    /// ([`interface_down`](Self::interface_down)), and waiting paths are retried when an
    /// interface comes up or gains an address. Runs until the session ends.
    #[cfg(target_os = "linux")]
    pub fn follow_interfaces(&self) -> std::io::Result<()> {
        // Fail here, not in the task, if netlink is not available.
        let probe = rtnetlink::new_multicast_connection(&[rtnetlink::MulticastGroup::Link])?;
        drop(probe);
        let me = self.clone();
        tokio::spawn(async move {
            if let Err(e) = crate::interfaces::follow(me).await {
                tracing::warn!("path manager: interface events stopped: {e}");
            }
        });
        Ok(())
    }

    /// Waits until every wanted path has a connection, or `within` has passed; returns the
    /// paths as they are then (those still down keep being retried).
    pub async fn wait_for_paths(&self, within: Duration) -> Vec<PathReport> {
        let deadline = Instant::now() + within;
        loop {
            let paths = self.paths();
            if (!paths.is_empty() && paths.iter().all(|p| p.conn.is_some())) || Instant::now() >= deadline {
                return paths;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Resolves when the manager is stopped or its session ends.
    pub(crate) async fn ended(&self) {
        loop {
            // A closing session takes no new connection: a join now would only be refused,
            // and its failure could outlast the clean close of the others.
            if self.shared.stopped.load(std::sync::atomic::Ordering::Relaxed) || self.session.is_closing() {
                return;
            }
            tokio::time::sleep(TICK).await;
        }
    }

    /// Ends the manager (the session's connections stay as they are).
    pub fn stop(&self) {
        self.shared.stopped.store(true, std::sync::atomic::Ordering::Relaxed);
        self.shared.wake.notify_one();
    }

    async fn run(self, origin: SocketAddr, config: PathManagerConfig) {
        let mut first = true;
        loop {
            if self.shared.stopped.load(std::sync::atomic::Ordering::Relaxed) || self.session.is_closed() {
                return;
            }
            self.update_wanted(origin, &config, first);
            first = false;
            self.start_due_attempts(&config);
            tokio::select! {
                _ = tokio::time::sleep(TICK) => {}
                _ = self.shared.wake.notified() => {}
            }
        }
    }

    /// Brings the set of wanted paths up to date with the policy and the server's addresses,
    /// and forgets connections that are no longer live.
    fn update_wanted(&self, origin: SocketAddr, config: &PathManagerConfig, first: bool) {
        let mut wanted: Vec<PathKey> = config.paths.clone();
        if config.policy == PathPolicy::Manual {
            // The path the session was opened over is kept up too (re-established after an
            // outage), unless it is listed already.
            let initial = (origin, Endpoint::new(config.initial.clone()));
            if !wanted.iter().any(|(r, e)| *r == origin && e.path == config.initial) {
                wanted.insert(0, initial);
            }
        }
        if config.policy == PathPolicy::Fullmesh {
            let mut remotes = vec![origin];
            remotes.extend(self.session.peer_addresses().into_iter().map(|(_, a)| a).filter(|a| *a != origin));
            let endpoints = if config.endpoints.is_empty() {
                vec![Endpoint::new(PathOptions::new())]
            } else {
                config.endpoints.clone()
            };
            for remote in remotes {
                for e in &endpoints {
                    wanted.push((remote, e.clone()));
                }
            }
        }
        let live = self.session.usable_connections();
        let mut paths = self.shared.paths.lock_unpoisoned();
        paths.retain(|k, _| wanted.iter().any(|w| path_name(w) == *k));
        for w in wanted {
            paths.entry(path_name(&w)).or_insert_with(|| {
                let state = PathState {
                    conn: None,
                    backoff: config.first_backoff,
                    next_attempt: Instant::now(),
                    attempting: false,
                    connecting: None,
                    failures: 0,
                    last_error: None,
                    suspect_since: None,
                };
                (w, state)
            });
        }
        if first {
            // The session's first connection serves the path it was opened over.
            if let Some((_, st)) =
                paths.values_mut().find(|((remote, e), _)| *remote == origin && e.path == config.initial)
            {
                st.conn = Some(0);
            }
        }
        for ((remote, endpoint), st) in paths.values_mut() {
            if let Some(conn) = st.conn {
                if !live.contains(&conn) {
                    debug!("path manager: {}{remote}: connection {conn} lost", endpoint.path);
                    self.session.trace_path(|| path_event("lost", *remote, endpoint, Some(conn), None, None));
                    st.conn = None;
                    st.suspect_since = None;
                    st.next_attempt = Instant::now();
                } else if self.session.is_connection_suspect(conn) {
                    st.suspect_since.get_or_insert_with(Instant::now);
                } else {
                    st.suspect_since = None;
                }
            }
        }
    }

    fn start_due_attempts(&self, config: &PathManagerConfig) {
        let now = Instant::now();
        let changed = *self.shared.network_changed.lock_unpoisoned();
        let settled = changed.filter(|at| now.saturating_duration_since(*at) >= SETTLE);
        let mut paths = self.shared.paths.lock_unpoisoned();
        for (name, ((remote, endpoint), st)) in paths.iter_mut() {
            if let (Some(at), Some((since, task))) = (settled, &st.connecting) {
                if *since < at {
                    // Started on the network as it was (e.g. waiting 3 s for a neighbour that
                    // never answers): start afresh. It holds no token yet.
                    debug!("path manager: {}{remote}: network changed, restarting the connect", endpoint.path);
                    task.abort();
                    st.connecting = None;
                    st.attempting = false;
                    st.next_attempt = now;
                }
            }
            let replace =
                st.suspect_since.is_some_and(|since| now.saturating_duration_since(since) >= REPLACE_SILENT_AFTER);
            if (st.conn.is_some() && !replace) || st.attempting || st.next_attempt > now {
                continue;
            }
            st.attempting = true;
            let (me, name, remote, endpoint) = (self.clone(), name.clone(), *remote, endpoint.clone());
            let (first_backoff, max_backoff) = (config.first_backoff, config.max_backoff);
            let task = tokio::spawn(me.attempt(name, remote, endpoint, first_backoff, max_backoff));
            st.connecting = Some((now, task.abort_handle()));
        }
    }

    /// One connect and join on a path, then its state updated: up (replacing a silent
    /// connection), or failed with the next attempt after a backoff.
    async fn attempt(
        self,
        name: String,
        remote: SocketAddr,
        endpoint: Endpoint,
        first_backoff: Duration,
        max_backoff: Duration,
    ) {
        let result = match endpoint.path.connect(remote).await {
            Ok(stream) => {
                // From here on a token is at stake: no restart.
                if let Some((_, st)) = self.shared.paths.lock_unpoisoned().get_mut(&name) {
                    st.connecting = None;
                }
                self.session.join_connected(remote, stream, endpoint.path.timeout_or_default()).await
            }
            Err(e) => Err(e),
        };
        if let Ok(conn) = result {
            if endpoint.backup {
                let _ = self.session.set_backup(conn, true);
            }
        }
        // Every path is down and the server refuses the rejoin (access_denied: the token
        // names no session it knows): it restarted, or ended the session after its own
        // rejoin timeout. Waiting longer cannot help.
        let orphaned = self.session.orphaned_since();
        let refused = matches!(&result, Err(e) if e.to_string().contains("AccessDenied"));
        if let (true, Some(since)) = (refused, orphaned) {
            let why = format!(
                "every connection was lost, and {}s later the server refused the rejoin (path {}{remote}): \
                 it no longer knows this session (it restarted, or ended the session after its own rejoin \
                 timeout, e.g. `tcpls serve --rejoin-timeout`)",
                format_args!("{:.1} ", since.elapsed().as_secs_f64()),
                endpoint.path
            );
            tracing::warn!("path manager: {why}");
            self.session.end_orphaned(why);
        }
        let mut paths = self.shared.paths.lock_unpoisoned();
        let Some((_, st)) = paths.get_mut(&name) else { return };
        st.attempting = false;
        st.connecting = None;
        match result {
            Ok(conn) => {
                info!("path manager: {}{remote} up as connection {conn}", endpoint.path);
                self.session.trace_path(|| path_event("up", remote, &endpoint, Some(conn), None, None));
                if let Some(silent) = st.conn.filter(|old| *old != conn) {
                    // It replaces a connection that went silent on this path.
                    if self.session.give_up_silent_connection(silent) {
                        info!("path manager: {}{remote}: connection {conn} replaces silent {silent}", endpoint.path);
                    }
                }
                st.suspect_since = None;
                st.conn = Some(conn);
                st.failures = 0;
                st.last_error = None;
                st.backoff = first_backoff;
            }
            Err(e) => {
                st.failures += 1;
                st.last_error = Some(e.to_string());
                if st.failures == 1 {
                    info!("path manager: {}{remote}: {e} (retrying with backoff)", endpoint.path);
                }
                let outage = self.session.orphaned_since().is_some();
                let cap = if outage { max_backoff.min(OUTAGE_MAX_BACKOFF) } else { max_backoff };
                let wait = crate::session::jittered(st.backoff.min(cap));
                st.next_attempt = Instant::now() + wait;
                let retry = Some(wait.as_millis() as u64);
                self.session.trace_path(|| path_event("failed", remote, &endpoint, None, Some(e.to_string()), retry));
                st.backoff = (st.backoff * 2).min(cap);
            }
        }
        if self.session.orphaned_since().is_some() {
            // For the session's error, should the outage outlast the tolerance.
            if let Some(note) = rejoin_note(&paths) {
                self.session.set_rejoin_note(note);
            }
        }
        drop(paths);
        self.shared.wake.notify_one();
    }
}

/// What each path's last attempt met, for the session's error should an outage outlast the
/// tolerance. None when no attempt failed.
fn rejoin_note(paths: &BTreeMap<String, (PathKey, PathState)>) -> Option<String> {
    let note: Vec<String> = paths
        .iter()
        .filter_map(|(name, ((remote, _), st))| {
            // Connect errors name their path already; join errors do not.
            st.last_error.as_ref().map(|e| {
                if e.contains(&remote.to_string()) {
                    e.clone()
                } else {
                    format!("{}: {e}", name.trim())
                }
            })
        })
        .collect();
    (!note.is_empty()).then(|| format!("{} path(s) tried, {}", paths.len(), note.join("; ")))
}

fn path_name((remote, e): &PathKey) -> String {
    format!("{}{remote}{}", e.path, if e.backup { " backup" } else { "" })
}

/// A path manager decision for the session's trace.
fn path_event(
    state: &'static str,
    remote: SocketAddr,
    endpoint: &Endpoint,
    conn: Option<ConnId>,
    error: Option<String>,
    retry_ms: Option<u64>,
) -> crate::trace::PathEvent {
    crate::trace::PathEvent { state, remote, local: endpoint.path.to_string(), conn, error, retry_ms }
}

/// The kernel's interface events (`interfaces.rs`, Linux) drive the manager's paths.
#[cfg(target_os = "linux")]
impl crate::interfaces::InterfaceEvents for PathManager {
    fn interface_down(&self, name: Option<&str>, addr: Option<std::net::IpAddr>) {
        PathManager::interface_down(self, name, addr);
    }

    fn interface_up(&self) {
        PathManager::interface_up(self);
    }

    fn ended(&self) -> impl std::future::Future<Output = ()> + Send {
        PathManager::ended(self)
    }
}
