//! The concentrator: accepts TCPLS sessions, and on each stream the TLV request; opens the
//! TCP connection asked for and relays.

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use rustls::ServerConfig;
use tcpls::{JoinRegistry, RecvStream, SendStream, Session, TcplsListener};
use tcpls_proto::sync::{LockExt, RwLockExt};
use tokio::io::AsyncWriteExt;
use tracing::{debug, info, warn};

use super::dial::{DialError, Dialer};
use super::order::{ConnectOrder, Turn};
use super::rate::RateLimiter;
use super::relay::{self, Outcome};
use super::tlv::{
    self, ReadError, Tlv, Transport, ERR_CLIENT_SESSIONS, ERR_CLIENT_UNKNOWN, ERR_CONNECTION_FAILURE,
    ERR_DESTINATION_REFUSED,
};
use super::Target;
use super::{DestPolicy, Stats, StatsSnapshot, TunnelConfig};
use crate::clients::{ClientId, ClientPolicy, OTHER};

/// Listens on one or more addresses (one TCPLS listener each, sharing a join registry, so a
/// client can add paths to any of them).
pub struct Concentrator {
    listening: Listening,
    ctx: Arc<Ctx>,
    on_session_start: Option<Arc<SessionHook>>,
}

/// Where the sessions come from.
enum Listening {
    /// Listeners on the runtime that runs the concentrator (work stealing).
    Shared(Vec<TcplsListener>),
    /// Bound on every core, served by each core's runtime ([`TunnelConfig::server_cores`]).
    PerCore(Box<tcpls::PerCoreBound>),
}

/// Sees each new session before it is served; what it returns is dropped when the session is
/// over (metrics keep a session counted as live this way).
pub type SessionHook = dyn Fn(&Session) -> Box<dyn Send> + Send + Sync;

/// What every session of a concentrator shares.
struct Ctx {
    cfg: TunnelConfig,
    stats: Arc<Stats>,
    dialer: Dialer,
    /// Sessions being served (bounded by `cfg.max_sessions`).
    sessions: AtomicUsize,
    clients: Clients,
}

/// The per-client policy in force and each client's shared state, by label: a configured name
/// or [`OTHER`] (so the map is bounded by the names ever configured).
struct Clients {
    policy: RwLock<Arc<ClientPolicy>>,
    entries: Mutex<BTreeMap<String, Arc<ClientEntry>>>,
}

/// What all sessions of one client (label) share.
struct ClientEntry {
    stats: Arc<Stats>,
    /// The client's `rate` (0: unlimited), shared by all its relays.
    limiter: Arc<RateLimiter>,
    active: AtomicUsize,
    sessions: AtomicU64,
    refused: AtomicU64,
}

/// One client's counters at one instant (metrics: label `client`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientStats {
    /// A configured client name, or "other" for every client without an entry.
    pub label: String,
    pub sessions_active: u64,
    pub sessions: u64,
    /// Sessions refused by the per-client policy (unknown client, its max-sessions).
    pub sessions_refused: u64,
    pub stats: StatsSnapshot,
}

impl Clients {
    fn new(policy: ClientPolicy) -> Clients {
        let c =
            Clients { policy: RwLock::new(Arc::new(ClientPolicy::default())), entries: Mutex::new(BTreeMap::new()) };
        c.set_policy(policy);
        c
    }

    fn policy(&self) -> Arc<ClientPolicy> {
        self.policy.read_unpoisoned().clone()
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<ClientEntry>>> {
        self.entries.lock_unpoisoned()
    }

    /// The entry of `label`, created on first use with the rate in force.
    fn entry(&self, label: &str) -> Arc<ClientEntry> {
        let rate = self.policy().clients.get(label).and_then(|r| r.rate).unwrap_or(0);
        self.entries()
            .entry(label.to_string())
            .or_insert_with(|| {
                Arc::new(ClientEntry {
                    stats: Arc::new(Stats::default()),
                    limiter: Arc::new(RateLimiter::new(rate)),
                    active: AtomicUsize::new(0),
                    sessions: AtomicU64::new(0),
                    refused: AtomicU64::new(0),
                })
            })
            .clone()
    }

    /// Replaces the policy; every configured name gets an entry (seen in metrics from the
    /// start) and the rates of existing ones change at once (live relays included).
    fn set_policy(&self, policy: ClientPolicy) {
        let names: Vec<String> = policy.clients.keys().cloned().collect();
        let rates: Vec<(String, u64)> = policy.clients.iter().map(|(n, r)| (n.clone(), r.rate.unwrap_or(0))).collect();
        let off = policy.is_off();
        *self.policy.write_unpoisoned() = Arc::new(policy);
        if !off {
            self.entry(OTHER);
        }
        for n in &names {
            self.entry(n);
        }
        let entries = self.entries();
        for (label, e) in entries.iter() {
            let rate = rates.iter().find(|(n, _)| n == label).map_or(0, |(_, r)| *r);
            e.limiter.set_rate(rate);
        }
    }

    fn stats(&self) -> Vec<ClientStats> {
        self.entries()
            .iter()
            .map(|(label, e)| ClientStats {
                label: label.clone(),
                sessions_active: e.active.load(Ordering::SeqCst) as u64,
                sessions: e.sessions.load(Ordering::Relaxed),
                sessions_refused: e.refused.load(Ordering::Relaxed),
                stats: e.stats.snapshot(),
            })
            .collect()
    }
}

/// The client of one session: who it is and its shared state.
struct Who {
    id: ClientId,
    /// The session has a client certificate (mutual TLS).
    named: bool,
    /// The label of its entry ([`OTHER`] without one).
    label: String,
    entry: Arc<ClientEntry>,
    /// "PEER" or "PEER (client NAME)": the log lines' prefix.
    tag: String,
}

/// Counts a session as one of its client's live sessions until dropped.
struct ClientSlot(Arc<ClientEntry>);

impl Drop for ClientSlot {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What a stream task needs of its session's client.
struct WhoView {
    id: ClientId,
    named: bool,
    limiter: Arc<RateLimiter>,
    tag: String,
}

impl WhoView {
    fn allowed(&self, policy: &ClientPolicy) -> Result<(), (u16, String)> {
        Who::check_unknown(&self.id, self.named, policy)
    }
}

impl Who {
    fn clone_view(&self) -> WhoView {
        WhoView { id: self.id.clone(), named: self.named, limiter: self.entry.limiter.clone(), tag: self.tag.clone() }
    }

    fn check_unknown(id: &ClientId, named: bool, policy: &ClientPolicy) -> Result<(), (u16, String)> {
        if policy.lookup(id).is_none() && !policy.admits_unknown() {
            let why = if named { "no per-client entry for its name" } else { "no client certificate" };
            return Err((ERR_CLIENT_UNKNOWN, format!("{why}, and unknown clients are refused")));
        }
        Ok(())
    }

    /// Identifies the client of `session` from its certificate.
    fn of(session: &Session, peer: SocketAddr, clients: &Clients) -> Who {
        let leaf = session.handshake_info().and_then(|i| i.peer_certificates.first().cloned());
        let id = leaf.as_ref().map(|c| ClientId::from_der(c.as_ref())).unwrap_or_default();
        let policy = clients.policy();
        let label = policy.lookup(&id).map_or(OTHER, |(n, _)| n).to_string();
        let tag = match &leaf {
            Some(_) => format!("{peer} (client {})", id.display_name()),
            None => peer.to_string(),
        };
        Who { id, named: leaf.is_some(), entry: clients.entry(&label), label, tag }
    }

    /// Whether the policy in force serves this client now; the Error code and why if not.
    /// Checked at the session's start and again on every stream (a reload may have changed it).
    fn allowed(&self, policy: &ClientPolicy) -> Result<(), (u16, String)> {
        Self::check_unknown(&self.id, self.named, policy)
    }

    /// A place among the client's max-sessions (None: the entry's limit is reached).
    fn take_slot(&self, policy: &ClientPolicy) -> Result<ClientSlot, (u16, String)> {
        self.allowed(policy)?;
        let max = policy.lookup(&self.id).and_then(|(_, r)| r.max_sessions).unwrap_or(usize::MAX);
        let e = &self.entry;
        if e.active.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < max).then_some(n + 1)).is_err() {
            return Err((
                ERR_CLIENT_SESSIONS,
                format!("client \"{}\" already has {max} session(s) (its max-sessions)", self.label),
            ));
        }
        e.sessions.fetch_add(1, Ordering::Relaxed);
        Ok(ClientSlot(e.clone()))
    }
}

/// Releases a session's place when its task ends, however it ends.
struct SessionSlot(Arc<Ctx>);

impl Drop for SessionSlot {
    fn drop(&mut self) {
        self.0.sessions.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One ended session (the concentrator's `--json` line).
#[derive(Debug, Clone)]
pub struct SessionSummary {
    pub peer: SocketAddr,
    pub duration: Duration,
    /// TCP connections the session had at its end (failed ones included).
    pub connections: usize,
    /// The client's certificate name (CN or DNS name), with mutual TLS.
    pub client: Option<String>,
    pub stats: StatsSnapshot,
    /// The session's error, if it failed.
    pub error: Option<String>,
}

impl Concentrator {
    /// Binds every address. With two or more specific addresses, clients learn all of them
    /// (New Address) to add paths.
    pub async fn bind(addrs: &[SocketAddr], tls: Arc<ServerConfig>, cfg: TunnelConfig) -> io::Result<Concentrator> {
        if addrs.is_empty() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "no address to listen on"));
        }
        let mut settings = cfg.session.clone();
        settings.max_concurrent_streams = cfg.max_streams_per_session.max(1);
        let registry = JoinRegistry::new();
        let listening = match cfg.server_cores {
            Some(cores) => {
                let bound = tcpls::ServerBuilder::new(tls).cores(cores).registry(registry).bind(addrs)?;
                advertise_bound(&mut settings, bound.local_addrs());
                Listening::PerCore(Box::new(bound.settings(settings)))
            }
            None => {
                let mut sockets = Vec::new();
                for a in addrs {
                    let l = crate::frontend::listen(*a)
                        .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {a}: {e}")))?;
                    sockets.push(l);
                }
                let bound: Vec<SocketAddr> = sockets.iter().filter_map(|l| l.local_addr().ok()).collect();
                advertise_bound(&mut settings, &bound);
                let listeners = sockets
                    .into_iter()
                    .map(|l| TcplsListener::from_listener(l, tls.clone(), settings.clone(), registry.clone()))
                    .collect();
                Listening::Shared(listeners)
            }
        };
        let dialer = Dialer::new(cfg.dest_policy.clone(), cfg.max_lookups, cfg.connect_timeout);
        let clients = Clients::new(cfg.client_policy.clone());
        let ctx = Ctx { cfg, stats: Arc::new(Stats::default()), dialer, sessions: AtomicUsize::new(0), clients };
        Ok(Concentrator { listening, ctx: Arc::new(ctx), on_session_start: None })
    }

    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        match &self.listening {
            Listening::Shared(listeners) => listeners.iter().map(|l| l.local_addr()).collect(),
            Listening::PerCore(bound) => bound.local_addrs().to_vec(),
        }
    }

    /// Counters over all sessions.
    pub fn stats(&self) -> Arc<Stats> {
        self.ctx.stats.clone()
    }

    /// The join registry all listeners share (its `listener_stats()`: sessions, joins, refusals).
    pub fn registry(&self) -> Option<JoinRegistry> {
        match &self.listening {
            Listening::Shared(listeners) => listeners.first().map(|l| l.registry().clone()),
            Listening::PerCore(bound) => Some(bound.registry().clone()),
        }
    }

    /// Calls `hook` with every new session (see [`SessionHook`]).
    pub fn on_session_start(&mut self, hook: Arc<SessionHook>) {
        self.on_session_start = Some(hook);
    }

    /// A handle to change the running concentrator's settings (e.g. on SIGHUP).
    pub fn control(&self) -> ConcentratorControl {
        ConcentratorControl { ctx: self.ctx.clone() }
    }
}

/// Changes a running [`Concentrator`]: sessions and connections in progress are kept.
#[derive(Clone)]
pub struct ConcentratorControl {
    ctx: Arc<Ctx>,
}

impl ConcentratorControl {
    /// The destination policy for every request from now on (connections already made stay).
    pub fn set_dest_policy(&self, policy: DestPolicy) {
        self.ctx.dialer.set_policy(policy);
    }

    pub fn dest_policy(&self) -> Arc<DestPolicy> {
        self.ctx.dialer.policy()
    }

    /// The per-client policy for every session and request from now on: sessions in progress
    /// are kept, their next requests follow it, and rate changes apply to live relays at once.
    pub fn set_client_policy(&self, policy: ClientPolicy) {
        self.ctx.clients.set_policy(policy);
    }

    pub fn client_policy(&self) -> Arc<ClientPolicy> {
        self.ctx.clients.policy()
    }

    /// Per-client counters: one per configured name, and "other" for the rest.
    pub fn client_stats(&self) -> Vec<ClientStats> {
        self.ctx.clients.stats()
    }
}

impl Concentrator {
    /// Serves sessions until every listener failed; `on_session_end` sees each ended session.
    pub async fn run<F>(self, on_session_end: F) -> io::Result<()>
    where
        F: Fn(SessionSummary) + Send + Sync + 'static,
    {
        let sessions =
            SessionStarter { ctx: self.ctx, on_start: self.on_session_start, on_end: Arc::new(on_session_end) };
        let listeners = match self.listening {
            Listening::Shared(listeners) => listeners,
            Listening::PerCore(bound) => {
                let _server = bound.serve(move |session, peer| {
                    let task = sessions.start(session, peer);
                    async move {
                        if let Some(task) = task {
                            task.await;
                        }
                    }
                })?;
                // The cores serve until this future is dropped (which stops them).
                return std::future::pending().await;
            }
        };
        let mut loops = tokio::task::JoinSet::new();
        for l in listeners {
            let sessions = sessions.clone();
            loops.spawn(async move {
                while let Some((session, peer)) = l.accept().await {
                    if let Some(task) = sessions.start(session, peer) {
                        tokio::spawn(task);
                    }
                }
                l.local_addr()
            });
        }
        while let Some(ended) = loops.join_next().await {
            if let Ok(addr) = ended {
                warn!("tunnel concentrator: listener on {addr} failed");
            }
        }
        Err(io::Error::other("every listener failed"))
    }
}

/// With two or more specific addresses bound, clients learn all of them (New Address).
fn advertise_bound(settings: &mut tcpls::SessionConfig, bound: &[SocketAddr]) {
    let specific: Vec<SocketAddr> = bound.iter().copied().filter(|a| !a.ip().is_unspecified()).collect();
    if specific.len() >= 2 {
        settings.advertise.extend(specific);
    }
}

/// Starts the task of each new session: its place among `max_sessions`, the hooks.
struct SessionStarter<F> {
    ctx: Arc<Ctx>,
    on_start: Option<Arc<SessionHook>>,
    on_end: Arc<F>,
}

impl<F> Clone for SessionStarter<F> {
    fn clone(&self) -> Self {
        Self { ctx: self.ctx.clone(), on_start: self.on_start.clone(), on_end: self.on_end.clone() }
    }
}

impl<F: Fn(SessionSummary) + Send + Sync + 'static> SessionStarter<F> {
    /// The task serving `session`, or None when `max_sessions` are served (it is refused).
    fn start(
        &self,
        session: Session,
        peer: SocketAddr,
    ) -> Option<impl std::future::Future<Output = ()> + Send + 'static> {
        let ctx = &self.ctx;
        let Some(slot) = take_session_slot(ctx) else {
            warn!(
                "tunnel: session from {peer} refused: {} sessions are being served (--max-sessions)",
                ctx.cfg.max_sessions
            );
            ctx.stats.session_refused();
            session.abort();
            return None;
        };
        let on_end = self.on_end.clone();
        let started = self.on_start.as_ref().map(|hook| hook(&session));
        Some(async move {
            let summary = serve_session(session, peer, &slot.0).await;
            drop(started);
            drop(slot);
            on_end(summary);
        })
    }
}

/// A place among the `max_sessions`, or None when all are taken.
fn take_session_slot(ctx: &Arc<Ctx>) -> Option<SessionSlot> {
    let max = ctx.cfg.max_sessions.max(1);
    ctx.sessions.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < max).then_some(n + 1)).ok()?;
    Some(SessionSlot(ctx.clone()))
}

/// Serves one session's streams until the session is over.
async fn serve_session(session: Session, peer: SocketAddr, ctx: &Arc<Ctx>) -> SessionSummary {
    let started = Instant::now();
    let who = Who::of(&session, peer, &ctx.clients);
    let tag = &who.tag;
    let _client_slot = match who.take_slot(&ctx.clients.policy()) {
        Ok(slot) => slot,
        Err((code, why)) => return refuse_session(session, peer, &who, code, &why, ctx).await,
    };
    info!("tunnel: session from {tag}");
    // Streams a client bonds are unsteered (Stream Steer "any"): this scheduler spreads them.
    session.set_scheduler(super::bond::scheduler());
    let mine = Arc::new(Stats::default());
    let next_path = Arc::new(AtomicUsize::new(0));
    let order = ConnectOrder::new();
    let redundant_flows = Arc::new(super::redundant::Registry::default());
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = session.accept_stream() => {
                let Some((send, recv)) = accepted else { break };
                steer_round_robin(&session, &send, &next_path);
                let (ctx, mine, session, turn) = (ctx.clone(), mine.clone(), session.clone(), order.ticket());
                let (who, client_stats) = (who.clone_view(), who.entry.stats.clone());
                let flows = redundant_flows.clone();
                tasks.spawn(async move {
                    let stats = [&ctx.stats, &mine, &client_stats];
                    serve_stream(session, (send, recv), turn, &ctx, &stats, &who, &flows).await
                });
            }
            // Reap finished stream tasks so a long session does not accumulate them.
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
    while tasks.join_next().await.is_some() {}
    let error = session.closed().await.map(|e| e.to_string());
    let summary = SessionSummary {
        peer,
        duration: started.elapsed(),
        connections: session.connections().len(),
        client: who.named.then(|| who.id.display_name()),
        stats: mine.snapshot(),
        error,
    };
    info!(
        "tunnel: session from {tag} ended after {:.1} s: {}{}",
        summary.duration.as_secs_f64(),
        summary.stats,
        summary.error.as_ref().map(|e| format!(", error: {e}")).unwrap_or_default()
    );
    summary
}

/// A session the per-client policy refuses: every stream it opens within the handshake timeout
/// is answered Error `code` (the client says why), then the session is closed.
async fn refuse_session(
    session: Session,
    peer: SocketAddr,
    who: &Who,
    code: u16,
    why: &str,
    ctx: &Ctx,
) -> SessionSummary {
    warn!("tunnel: session from {} refused: {why}", who.tag);
    who.entry.refused.fetch_add(1, Ordering::Relaxed);
    ctx.stats.session_refused();
    let started = Instant::now();
    let answering = async {
        while let Some((mut send, _recv)) = session.accept_stream().await {
            answer_and_finish(&mut send, code).await;
        }
    };
    let _ = tokio::time::timeout(ctx.cfg.handshake_timeout, answering).await;
    if tokio::time::timeout(Duration::from_secs(2), session.close()).await.is_err() {
        session.abort();
    }
    SessionSummary {
        peer,
        duration: started.elapsed(),
        connections: session.connections().len(),
        client: who.named.then(|| who.id.display_name()),
        stats: StatsSnapshot { sessions_refused: 1, ..StatsSnapshot::default() },
        error: Some(why.to_string()),
    }
}

/// Spreads the streams' data over the session's connections, one connection per stream (a
/// stream whose connection dies is re-scheduled on the others by the session). A stream the
/// client already asked to be sent on a connection (Stream Steer, a bonded connection's
/// answer on its fastest path: `bond.rs`) keeps it.
pub(crate) fn steer_round_robin(session: &Session, send: &SendStream, next: &AtomicUsize) {
    if send.steering().is_some() {
        return;
    }
    let conns = session.usable_connections();
    if conns.len() > 1 {
        let i = next.fetch_add(1, Ordering::Relaxed) % conns.len();
        let _ = send.steer(Some(conns[i]));
    }
}

fn each(stats: &[&Arc<Stats>], f: impl Fn(&Stats)) {
    for s in stats {
        f(s);
    }
}

async fn serve_stream(
    session: Session,
    (mut send, mut recv): (SendStream, RecvStream),
    turn: Turn,
    ctx: &Ctx,
    stats: &[&Arc<Stats>],
    who: &WhoView,
    redundant_flows: &super::redundant::Registry,
) {
    let cfg = &ctx.cfg;
    let peer = &who.tag;
    each(stats, Stats::stream);
    let id = send.id();
    let request = tokio::time::timeout(cfg.handshake_timeout, tlv::read_request_with_flow(&mut recv)).await;
    let (target, transport, flow) = match request {
        Ok(Ok(t)) => t,
        Ok(Err(ReadError::Bad(e))) => {
            // Hostile or broken request: answer why, end this stream only.
            debug!("tunnel: {peer} stream {id}: {e}: refused");
            each(stats, Stats::rejected);
            answer_and_finish(&mut send, e.code()).await;
            return;
        }
        Ok(Err(ReadError::Io(e))) => {
            debug!("tunnel: {peer} stream {id}: request not read: {e}");
            each(stats, Stats::rejected);
            let _ = send.reset(tlv::RESET_CODE);
            return;
        }
        Err(_) => {
            debug!("tunnel: {peer} stream {id}: no request within {:?}", cfg.handshake_timeout);
            each(stats, Stats::rejected);
            answer_and_finish(&mut send, tlv::ERR_PROTOCOL_VIOLATION).await;
            return;
        }
    };
    // The per-client policy in force now (a reload applies to sessions in progress).
    let clients = ctx.clients.policy();
    if let Err((code, why)) = who.allowed(&clients) {
        info!("tunnel: {peer} stream {id} -> {target}: refused: {why}");
        each(stats, Stats::refused_dest);
        answer_and_finish(&mut send, code).await;
        return;
    }
    let rules = clients.lookup(&who.id);
    // Always the client's bucket (rate 0: no wait, one atomic load): a rate set by a reload
    // applies to this relay at once, as does one lifted.
    let limiter = Some(&*who.limiter);
    match (transport, &target) {
        (Transport::Tcp, _) => {}
        (Transport::Udp, _) => {
            if let Some(flow) = flow {
                let copy = (redundant_flows, flow);
                return serve_redundant_copy(send, recv, ctx, stats, target, copy, (peer, rules, limiter)).await;
            }
            return serve_udp_stream(send, recv, ctx, stats, target, (peer, rules, limiter)).await;
        }
        (Transport::ReverseBind, Target::Addr(addr)) => {
            let limiter = who.limiter.clone();
            return super::reverse::serve_bind(session, send, recv, *addr, cfg, peer, limiter).await;
        }
        _ => {
            debug!("tunnel: {peer} stream {id}: a {transport:?} request from a client: refused");
            each(stats, Stats::rejected);
            answer_and_finish(&mut send, tlv::ERR_PROTOCOL_VIOLATION).await;
            return;
        }
    }
    let tcp = match ctx.dialer.dial(&target, turn, rules).await {
        Ok(s) => s,
        Err(DialError::Refused(r)) => {
            // Worth a line without -v: someone tried to reach what this host protects.
            info!("tunnel: {peer} stream {id} -> {target}: {r}");
            each(stats, Stats::refused_dest);
            answer_and_finish(&mut send, ERR_DESTINATION_REFUSED).await;
            return;
        }
        Err(DialError::Failed(e)) => {
            debug!("tunnel: {peer} stream {id} -> {target}: {e}");
            each(stats, Stats::connect_failed);
            answer_and_finish(&mut send, ERR_CONNECTION_FAILURE).await;
            return;
        }
    };
    let _ = tcp.set_nodelay(true);
    if send.write_all(&tlv::encode_all(&[Tlv::ConnectOk, Tlv::End])).await.is_err() {
        each(stats, Stats::rejected);
        relay::reset_tcp(tcp);
        return;
    }
    debug!("tunnel: {peer} stream {id} -> {target}: connected");
    each(stats, |s| {
        s.connected();
        s.relay_started();
    });
    let report = relay::relay_limited(tcp, send, recv, limiter).await;
    each(stats, |s| s.relay_ended(&report, false));
    match report.outcome {
        Outcome::Closed => debug!(
            "tunnel: {peer} stream {id} -> {target}: closed ({} bytes up, {} down)",
            report.received, report.sent
        ),
        o => {
            debug!("tunnel: {peer} stream {id} -> {target}: {o:?} ({} bytes up, {} down)", report.received, report.sent)
        }
    }
}

/// A UDP flow: the destination policy, a connected UDP socket, then datagrams both ways.
async fn serve_udp_stream(
    mut send: SendStream,
    recv: RecvStream,
    ctx: &Ctx,
    stats: &[&Arc<Stats>],
    target: Target,
    (peer, rules, limiter): (&str, super::dial::ClientRules<'_>, Option<&RateLimiter>),
) {
    let id = send.id();
    let sock = match ctx.dialer.dial_udp(&target, rules).await {
        Ok(s) => s,
        Err(DialError::Refused(r)) => {
            info!("tunnel: {peer} stream {id} -> udp {target}: {r}");
            each(stats, Stats::refused_dest);
            answer_and_finish(&mut send, ERR_DESTINATION_REFUSED).await;
            return;
        }
        Err(DialError::Failed(e)) => {
            debug!("tunnel: {peer} stream {id} -> udp {target}: {e}");
            each(stats, Stats::connect_failed);
            answer_and_finish(&mut send, ERR_CONNECTION_FAILURE).await;
            return;
        }
    };
    if send.write_all(&tlv::encode_all(&[Tlv::ConnectOk, Tlv::End])).await.is_err() {
        each(stats, Stats::rejected);
        return;
    }
    each(stats, Stats::connected);
    let r = super::udp::relay_socket(sock, send, recv, ctx.cfg.udp_idle_timeout, limiter).await;
    debug!("tunnel: {peer} stream {id} -> udp {target}: ended ({} datagrams up, {} down)", r.up, r.down);
}

/// One copy (stream) of a redundant UDP flow ([`super::redundant`]): joins the flow's other
/// copies in this session, the first one opening the socket (destination policy included).
async fn serve_redundant_copy(
    mut send: SendStream,
    recv: RecvStream,
    ctx: &Ctx,
    stats: &[&Arc<Stats>],
    target: Target,
    (flows, flow): (&super::redundant::Registry, u64),
    (peer, rules, limiter): (&str, super::dial::ClientRules<'_>, Option<&RateLimiter>),
) {
    let id = send.id();
    let copy = match flows.join(flow, &target) {
        Ok(c) => c,
        Err(e) => {
            debug!("tunnel: {peer} stream {id} -> udp {target}: {e}");
            each(stats, Stats::rejected);
            answer_and_finish(&mut send, tlv::ERR_PROTOCOL_VIOLATION).await;
            return;
        }
    };
    let dial = || async {
        match ctx.dialer.dial_udp(&target, rules).await {
            Ok(s) => Ok(s),
            Err(DialError::Refused(r)) => {
                info!("tunnel: {peer} stream {id} -> udp {target}: {r}");
                Err((ERR_DESTINATION_REFUSED, r.to_string()))
            }
            Err(DialError::Failed(e)) => Err((ERR_CONNECTION_FAILURE, e.to_string())),
        }
    };
    let sock = match copy.socket(dial).await {
        Ok(s) => s,
        Err((code, e)) => {
            debug!("tunnel: {peer} stream {id} -> udp {target}: {e}");
            each(stats, if code == ERR_DESTINATION_REFUSED { Stats::refused_dest } else { Stats::connect_failed });
            answer_and_finish(&mut send, code).await;
            return;
        }
    };
    if send.write_all(&tlv::encode_all(&[Tlv::ConnectOk, Tlv::End])).await.is_err() {
        each(stats, Stats::rejected);
        return;
    }
    each(stats, Stats::connected);
    let fits = |n: usize| limiter.is_none_or(|l| l.try_acquire(n));
    let (up, down) = copy.relay(&sock, send, recv, ctx.cfg.udp_idle_timeout, &fits).await;
    debug!("tunnel: {peer} stream {id} -> udp {target}: redundant copy ended ({up} datagrams up, {down} down)");
}

/// Error and End, then FIN: the stream's reading half was already dropped or is dropped by the
/// caller (what else the client sends is discarded).
async fn answer_and_finish(send: &mut SendStream, code: u16) {
    let _ = send.write_all(&tlv::encode_all(&[Tlv::Error(code), Tlv::End])).await;
    let _ = send.finish();
}
