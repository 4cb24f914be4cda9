//! Server side: accept TCP connections, run handshakes concurrently, yield sessions.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rustls::ServerConfig;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use std::time::Instant;

use tcpls_proto::sync::LockExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::admission::Admission;
use crate::driver::Driver;
use crate::handshake::{handshake_error, HANDSHAKE_TIMEOUT};
use crate::listener_stats::{ListenerStats, Outcome};
use crate::registry::{JoinRegistry, Refused};
use crate::session::Session;
use crate::shared::Shared;
use crate::socket::configure;
use tcpls_proto::Accepted;
use tcpls_proto::SessionConfig;

/// Accepts TCPLS sessions (and plain TLS clients, as fallback sessions).
///
/// ```no_run
/// # async fn demo(tls: rustls::ServerConfig) -> std::io::Result<()> {
/// use std::sync::Arc;
/// let listener = tcpls::TcplsListener::bind("127.0.0.1:4443".parse().unwrap(), Arc::new(tls)).await?;
/// while let Some((session, peer)) = listener.accept().await {
///     tokio::spawn(async move {
///         while let Some((mut send, mut recv)) = session.accept_stream().await {
///             tokio::spawn(async move { tokio::io::copy(&mut recv, &mut send).await });
///         }
///         let _ = peer;
///     });
/// }
/// # Ok(()) }
/// ```
pub struct TcplsListener {
    local: SocketAddr,
    registry: JoinRegistry,
    sessions: tokio::sync::Mutex<mpsc::Receiver<(Session, SocketAddr)>>,
    errors: Arc<std::sync::atomic::AtomicU64>,
    admission: Admission,
    task: tokio::task::JoinHandle<()>,
    trace: TraceSlot,
    /// The handshakes' timeouts (`HandshakeDeadlines`), told when the listener goes.
    deadlines: HandshakeDeadlines,
}

/// The sink a listener's new sessions are traced into (set after the accept task started).
type TraceSlot = Arc<std::sync::Mutex<Option<Arc<dyn crate::trace::TraceSink>>>>;

impl TcplsListener {
    pub async fn bind(addr: SocketAddr, config: Arc<ServerConfig>) -> io::Result<Self> {
        Self::bind_with(addr, config, SessionConfig::default()).await
    }

    pub async fn bind_with(addr: SocketAddr, config: Arc<ServerConfig>, settings: SessionConfig) -> io::Result<Self> {
        Self::bind_with_registry(addr, config, settings, JoinRegistry::new()).await
    }

    /// Listeners that share a registry route joins to each other's sessions: bind one per
    /// address a server advertises, all with the same registry.
    pub async fn bind_with_registry(
        addr: SocketAddr,
        config: Arc<ServerConfig>,
        settings: SessionConfig,
        registry: JoinRegistry,
    ) -> io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        Ok(Self::from_listener(listener, config, settings, registry))
    }

    /// Like [`bind_with`](Self::bind_with) on a socket that accepts TCP Fast Open (see
    /// [`fast_open_listener`](crate::fast_open_listener); `queue` pending Fast Open connections).
    pub async fn bind_fast_open(
        addr: SocketAddr,
        config: Arc<ServerConfig>,
        settings: SessionConfig,
        queue: u32,
    ) -> io::Result<Self> {
        let listener = crate::socket::fast_open_listener(addr, queue)?;
        Ok(Self::from_listener(listener, config, settings, JoinRegistry::new()))
    }

    /// Serves TCPLS on an existing tokio listener.
    pub fn from_listener(
        listener: TcpListener,
        config: Arc<ServerConfig>,
        settings: SessionConfig,
        registry: JoinRegistry,
    ) -> Self {
        let local = listener.local_addr().unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
        // Clients speak first (ClientHello): with TCP_DEFER_ACCEPT the kernel hands a connection
        // over once that arrived, so admission finds its first byte at once instead of waiting
        // for it (a read that finds nothing, an epoll round and a timer per connection). A
        // silent connection is still accepted after about FIRST_BYTE_TIMEOUT and goes through
        // admission as before. Best effort: without it (not Linux) only that saving is lost.
        let _ = crate::sockopt::set_defer_accept(
            std::os::fd::AsRawFd::as_raw_fd(&listener),
            crate::admission::FIRST_BYTE_TIMEOUT.as_secs() as u32,
        );
        let config = Arc::new(tcpls_proto::tcpls_server_config(&config));
        let (tx, rx) = mpsc::channel(128);
        let errors = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let admission = Admission::default();
        let trace = TraceSlot::default();
        let deadlines = HandshakeDeadlines::default();
        // Its own task, not the accept loop's: handshakes in progress when the listener is
        // dropped still time out; it ends once the listener is gone and none is left.
        tokio::spawn(deadlines.clone().expire());
        let ctx = AcceptCtx {
            deadlines: deadlines.clone(),
            // A listener bound to one address accepts connections on that address: their local
            // address is known without a getsockname per connection.
            local: (!local.ip().is_unspecified() && local.port() != 0).then_some(local),
            trace: trace.clone(),
            config,
            settings,
            registry: registry.clone(),
            errors: errors.clone(),
            admission: admission.clone(),
        };
        let task = tokio::spawn(accept_loop(listener, ctx, tx));
        Self { local, registry, sessions: tokio::sync::Mutex::new(rx), errors, admission, task, trace, deadlines }
    }

    /// Traces every session this listener accepts from now on into `sink`, from the end of
    /// its first handshake (docs/OBSERVABILITY.md §4); overrides [`crate::set_default_trace`].
    pub fn with_trace(self, sink: Arc<dyn crate::trace::TraceSink>) -> Self {
        self.set_trace(Some(sink));
        self
    }

    /// Like [`with_trace`](Self::with_trace) on a shared listener; `None` stops tracing new
    /// sessions (the default trace, if any, applies again).
    pub fn set_trace(&self, sink: Option<Arc<dyn crate::trace::TraceSink>>) {
        *self.trace.lock_unpoisoned() = sink;
    }

    /// The registry this listener routes joins with.
    pub fn registry(&self) -> &JoinRegistry {
        &self.registry
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The next established session and the client's address; `None` if the listener failed.
    pub async fn accept(&self) -> Option<(Session, SocketAddr)> {
        self.sessions.lock().await.recv().await
    }

    /// Accepted connections that have not sent their first byte yet (at most
    /// [`MAX_AWAITING_HELLO`](crate::MAX_AWAITING_HELLO)).
    pub fn connections_awaiting_hello(&self) -> usize {
        self.admission.awaiting()
    }

    /// Handshakes that failed or timed out so far (including silent connections dropped).
    pub fn failed_handshakes(&self) -> u64 {
        self.errors.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// New sessions, joins, refusals and failed handshakes of every listener sharing this one's
    /// registry.
    pub fn stats(&self) -> ListenerStats {
        self.registry.listener_stats()
    }
}

/// What a per-core server reads of each core's listener for its totals.
#[derive(Clone)]
pub(crate) struct ListenerProbe {
    errors: Arc<std::sync::atomic::AtomicU64>,
    admission: Admission,
}

impl ListenerProbe {
    pub(crate) fn failed_handshakes(&self) -> u64 {
        self.errors.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(crate) fn awaiting_hello(&self) -> usize {
        self.admission.awaiting()
    }
}

impl TcplsListener {
    /// Its counters, readable from another thread once the listener runs on its core.
    pub(crate) fn probe(&self) -> ListenerProbe {
        ListenerProbe { errors: self.errors.clone(), admission: self.admission.clone() }
    }
}

impl Drop for TcplsListener {
    fn drop(&mut self) {
        self.task.abort();
        self.deadlines.close();
    }
}

#[derive(Clone)]
struct AcceptCtx {
    /// The listener's address when it is bound to one (not a wildcard).
    local: Option<SocketAddr>,
    /// Every handshake's HANDSHAKE_TIMEOUT, one timer for all.
    deadlines: HandshakeDeadlines,
    config: Arc<ServerConfig>,
    settings: SessionConfig,
    registry: JoinRegistry,
    errors: Arc<std::sync::atomic::AtomicU64>,
    admission: Admission,
    trace: TraceSlot,
}

/// Handshakes in progress at once per listener, counted from the first byte a connection
/// sends (`admission.rs`: silent connections wait in a pool of their own, where the oldest
/// make room for new ones, so they cannot hold these slots). Each pending handshake holds a
/// 16 KiB buffer at most for HANDSHAKE_TIMEOUT.
pub const MAX_PENDING_HANDSHAKES: usize = 1024;

async fn accept_loop(listener: TcpListener, ctx: AcceptCtx, tx: mpsc::Sender<(Session, SocketAddr)>) {
    let pending = Arc::new(tokio::sync::Semaphore::new(MAX_PENDING_HANDSHAKES));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                eprintln!("tcpls: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let (ctx, tx, pending) = (ctx.clone(), tx.clone(), pending.clone());
        tokio::spawn(AcceptThenDrive::Handshake(Box::pin(handshake(stream, peer, ctx, tx, pending))));
    }
}

/// The HANDSHAKE_TIMEOUT of every handshake of a listener, with one timer for all: handshakes
/// start in order and all get the same timeout, so their deadlines are in order too (a FIFO).
/// A tokio timer per handshake would be the process's earliest timer at each registration,
/// which costs an eventfd write and an extra `epoll_wait` per connection.
#[derive(Clone, Default)]
struct HandshakeDeadlines {
    state: Arc<std::sync::Mutex<DeadlineQueue>>,
    /// Wakes `expire` when the first deadline is queued after it found none.
    wake: Arc<tokio::sync::Notify>,
}

#[derive(Default)]
struct DeadlineQueue {
    /// Deadlines in order, each with what tells its handshake; a finished handshake drops its
    /// `Notify`, and its entry is popped when it reaches the front.
    queue: std::collections::VecDeque<(tokio::time::Instant, std::sync::Weak<tokio::sync::Notify>)>,
    /// `expire` waits for `wake` (the queue was empty).
    idle: bool,
    /// The listener is gone: `expire` ends once no handshake is left.
    closed: bool,
    /// Length at which finished entries behind a slow front one are swept out (doubles with
    /// the handshakes really in progress, so sweeping stays amortised O(1)).
    sweep_at: usize,
}

/// See [`DeadlineQueue::sweep_at`].
const DEADLINE_SWEEP_MIN: usize = 4096;

impl DeadlineQueue {
    /// Entries of finished handshakes at the front go: the queue holds about the handshakes in
    /// progress (they finish roughly in the order they started), not all of the last 10 s.
    fn pop_finished(&mut self) {
        while self.queue.front().is_some_and(|(_, h)| h.strong_count() == 0) {
            self.queue.pop_front();
        }
    }
}

impl HandshakeDeadlines {
    /// A handshake starts now: what it gets is notified when its HANDSHAKE_TIMEOUT has passed.
    /// Dropping it (the handshake is over) withdraws the deadline.
    fn start(&self) -> Arc<tokio::sync::Notify> {
        let expired = Arc::new(tokio::sync::Notify::new());
        let mut st = self.state.lock_unpoisoned();
        st.pop_finished();
        if st.queue.len() >= st.sweep_at.max(DEADLINE_SWEEP_MIN) {
            // One slow handshake at the front keeps finished ones behind it: bounded by the
            // handshakes in progress, not by the rate times the timeout.
            st.queue.retain(|(_, h)| h.strong_count() > 0);
            st.sweep_at = 2 * st.queue.len();
        }
        st.queue.push_back((tokio::time::Instant::now() + HANDSHAKE_TIMEOUT, Arc::downgrade(&expired)));
        if st.idle {
            st.idle = false;
            self.wake.notify_one();
        }
        expired
    }

    /// The listener is gone (no new handshakes): `expire` ends after the last one.
    fn close(&self) {
        self.state.lock_unpoisoned().closed = true;
        self.wake.notify_one();
    }

    /// Tells each handshake whose deadline has passed, sleeping until the first one due.
    async fn expire(self) {
        loop {
            let next = {
                let mut st = self.state.lock_unpoisoned();
                st.pop_finished();
                let next = st.queue.front().map(|(at, _)| *at);
                if next.is_none() && st.closed {
                    return;
                }
                st.idle = next.is_none();
                next
            };
            match next {
                // `notify_one` keeps a permit: a deadline queued since is not missed.
                None => self.wake.notified().await,
                Some(at) => {
                    tokio::time::sleep_until(at).await;
                    let now = tokio::time::Instant::now();
                    let mut st = self.state.lock_unpoisoned();
                    while st.queue.front().is_some_and(|(at, _)| *at <= now) {
                        if let Some((_, handshake)) = st.queue.pop_front() {
                            if let Some(expired) = handshake.upgrade() {
                                // A permit: the handshake learns it even if not waiting yet.
                                expired.notify_one();
                            }
                        }
                    }
                }
            }
        }
    }
}

/// A connection's one task, as a TLS server has one per connection: its handshake, boxed so
/// that its state (the core session inline, the admission, the listener's context) is freed
/// once done, then for a new session its driver. No second task to spawn and wake per
/// session, and what stays for the session's life is only the driver.
enum AcceptThenDrive {
    Handshake(Pin<Box<dyn Future<Output = Option<Driver>> + Send>>),
    Drive(Driver),
    Done,
}

impl Future for AcceptThenDrive {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            match &mut *self {
                Self::Handshake(h) => match h.as_mut().poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Some(driver)) => *self = Self::Drive(driver),
                    Poll::Ready(None) => *self = Self::Done,
                },
                Self::Drive(driver) => return Pin::new(driver).poll(cx),
                Self::Done => return Poll::Ready(()),
            }
        }
    }
}

/// Admission, then the handshake of one accepted connection; a new session is handed to the
/// application and its driver returned.
async fn handshake(
    stream: TcpStream,
    peer: SocketAddr,
    ctx: AcceptCtx,
    tx: mpsc::Sender<(Session, SocketAddr)>,
    pending: Arc<tokio::sync::Semaphore>,
) -> Option<Driver> {
    let Ok(slot) = ctx.admission.admit(&stream, peer.ip()).await else {
        // Silent (no ClientHello in time) or pushed out by newer connections.
        ctx.errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        ctx.registry.counters().count(Outcome::TimedOut);
        return None;
    };
    let expired = ctx.deadlines.start();
    let outcome = tokio::select! {
        biased;
        done = async {
            let _permit = pending.acquire_owned().await.map_err(io::Error::other)?;
            accept_one(stream, peer, &ctx).await
        } => Ok(done),
        () = expired.notified() => Err(()),
    };
    drop(expired);
    drop(slot);
    let counters = ctx.registry.counters();
    let mut run = None;
    match outcome {
        Ok(Ok(Some((session, driver)))) => {
            // Like a full listen backlog: an application that does not accept does not
            // make established sessions pile up.
            if let Err(mpsc::error::TrySendError::Full((session, _))) = tx.try_send((session, peer)) {
                session.abort();
                ctx.errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                counters.count(Outcome::QueueFull);
            } else {
                counters.count(Outcome::Session);
            }
            run = Some(driver);
        }
        Ok(Ok(None)) => {} // a join, counted by `join`
        Ok(Err(e)) => {
            ctx.errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            // Refused joins were counted by `join` with their reason.
            if e.kind() != io::ErrorKind::PermissionDenied {
                counters.count(Outcome::Failed);
            }
        }
        Err(_) => {
            ctx.errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            counters.count(Outcome::TimedOut);
        }
    }
    run
}

/// Runs a new connection's handshake until its first record says what it is: a new session
/// (returned with the driver that must run it), or a join, which is handed to the session its
/// token names (None).
async fn accept_one(mut stream: TcpStream, peer: SocketAddr, ctx: &AcceptCtx) -> io::Result<Option<(Session, Driver)>> {
    configure(&stream)?;
    let mut proto = tcpls_proto::Session::server(ctx.config.clone(), ctx.settings.clone()).map_err(handshake_error)?;
    // The peer's address came with `accept`, and a listener bound to one address knows the
    // local one: no getsockname / getpeername per connection unless the listener is a wildcard.
    let local = match ctx.local {
        Some(local) => Some(local),
        None => stream.local_addr().ok(),
    };
    let remote = Some(peer);
    proto.set_addresses(0, local, remote);
    loop {
        // Decide before writing: a new session's tokens must be registered before they leave.
        match proto.accepted() {
            Accepted::NewSession => {
                let shared = Shared::registered(proto, ctx.registry.clone());
                {
                    let mut inner = shared.lock();
                    if let Some(sink) = ctx.trace.lock_unpoisoned().clone() {
                        inner.set_trace(sink);
                    }
                    // Before the events: the client's first records may ask to change socket
                    // options (congestion control, user timeout) of this connection.
                    inner.add_fd(0, std::os::fd::AsRawFd::as_raw_fd(&stream));
                    inner.dispatch_events();
                    inner.publish_tokens();
                }
                let driver = Driver::new(shared.clone(), 0, stream);
                let session = Session::new(shared);
                if !session.is_established() {
                    // Handed out on its early data, before the client's Finished: the handshake
                    // timeout still applies, or a client that stalls there would hold the
                    // session (and its early data) forever.
                    let s = session.clone();
                    tokio::spawn(async move {
                        if tokio::time::timeout(HANDSHAKE_TIMEOUT, s.established()).await.is_err() {
                            s.abort();
                        }
                    });
                }
                return Ok(Some((session, driver)));
            }
            Accepted::Join => return join(proto, stream, ctx, local, remote).await.map(|()| None),
            Accepted::Failed => {
                let out = proto.transmit_data(0).to_vec();
                let _ = stream.write_all(&out).await;
                let e = proto.error().cloned().unwrap_or(tcpls_proto::Error::SessionClosed);
                return Err(handshake_error(e));
            }
            Accepted::Pending => {}
        }
        proto.prepare_transmit(Instant::now());
        let out = proto.transmit_data(0).to_vec();
        if !out.is_empty() {
            stream.write_all(&out).await?;
            proto.transmit_advance(0, out.len());
        }
        // Wait for bytes before taking a read buffer: the core frees it after a short read, so
        // a connection waiting for its peer holds none.
        stream.readable().await?;
        let buf = proto.read_buffer(0);
        if buf.is_empty() {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "connection closed during the handshake"));
        }
        // `read`, not `try_read`: a short read clears tokio's readiness, so the next
        // `readable` waits instead of costing a read that finds nothing.
        match stream.read(buf).await? {
            0 => proto.handle_eof(0, Instant::now()),
            n => proto.handle_read(0, n, Instant::now()),
        }
    }
}

/// Hands a joining connection to the session that issued its token, or refuses it.
async fn join(
    mut proto: tcpls_proto::Session,
    stream: TcpStream,
    ctx: &AcceptCtx,
    local: Option<SocketAddr>,
    remote: Option<SocketAddr>,
) -> io::Result<()> {
    let Some(joining) = proto.take_joining_connection() else { return Ok(()) };
    // A Join names its session by a single-use token, a Rejoin by the session's reference (the
    // session then checks its proof).
    let (target, rejoin) = match (joining.token(), joining.session_ref()) {
        (Some(token), _) => (ctx.registry.take(token), false),
        (None, Some(session_ref)) => (ctx.registry.session_by_ref(session_ref), true),
        (None, None) => (None, false),
    };
    // A refused rejoin is counted with bad tokens: unknown session or bad proof, mostly.
    let reason = if target.is_some() && !rejoin { Outcome::JoinRefusedBudget } else { Outcome::JoinRefusedToken };
    let refused = match target {
        Some(target) => match target.attach(joining, stream, local, remote) {
            Ok(handed_over) => {
                ctx.registry.counters().count(Outcome::Join);
                if handed_over {
                    ctx.registry.counters().count(Outcome::JoinHandedOver);
                }
                return Ok(());
            }
            Err(refused) => refused,
        },
        None => Box::new(Refused { joining, stream }),
    };
    ctx.registry.counters().count(reason);
    let Refused { joining, mut stream } = *refused;
    let alert = tcpls_proto::Session::refuse_join(joining);
    let _ = stream.write_all(&alert).await;
    let _ = stream.shutdown().await;
    let why = if rejoin {
        "rejoin refused: unknown session, bad proof, ID in use or over the budget"
    } else {
        "join refused: unknown, used or expired token"
    };
    Err(io::Error::new(io::ErrorKind::PermissionDenied, why))
}
