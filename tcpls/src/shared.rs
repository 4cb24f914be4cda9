//! The state a session's handles and its driver task share, behind one mutex: the sans-IO core,
//! who waits for what, the events kept for the application, the sockets' descriptors, and the
//! IO layer's own per-session state (probe answers, join registration, trace).
//!
//! This is the bottom of the session's modules: it depends on no handle (`session.rs`,
//! `stream.rs`, `ext.rs`) and no task (`driver.rs`); they all go through [`Shared::lock`] and the
//! small API of [`SessionState`] below. The join registry (`registry.rs`) reaches a session only
//! through the [`JoinTarget`] handle implemented here.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Waker};
use std::time::Instant;

use tcpls_proto::sync::LockExt;
use tcpls_proto::{ConnId, Event, JoiningConnection, StreamId};
use tokio::net::TcpStream;

use crate::events::{EventQueue, SocketOptionApplied};
use crate::probe_answers::ProbeAnswers;
use crate::registry::{JoinRegistry, JoinTarget, Refused, Registration};
use crate::trace::{TraceSink, Tracer};
use crate::{peer_requests, sockopt, tcp_info};

/// The socket of a connection added after the first, on its way to the driver.
pub(crate) struct NewSocket {
    pub(crate) id: ConnId,
    pub(crate) stream: TcpStream,
    /// Registered with another runtime's reactor (a join accepted by another core's listener):
    /// the driver moves it to its own, or its readiness would be reported on the other core.
    pub(crate) foreign: bool,
}

/// Tasks waiting on the session, woken when what they wait for may have changed.
#[derive(Default)]
struct Wakers {
    /// The driver task: the application changed something it must act on.
    driver: Option<Waker>,
    /// Readers of a stream waiting for data, its end or a reset.
    readers: HashMap<StreamId, Waker>,
    /// Writers of a stream waiting for room in its send buffer.
    writers: HashMap<StreamId, Waker>,
    /// Tasks waiting for a state change: a peer stream, the handshake, tokens, a probe's
    /// answer, a connection, the end of the session.
    state: Vec<Waker>,
}

impl Wakers {
    fn wake_state(&mut self) {
        for w in self.state.drain(..) {
            w.wake();
        }
    }

    /// The session ended: every waiter learns it.
    fn wake_all(&mut self) {
        self.wake_state();
        for (_, w) in self.readers.drain() {
            w.wake();
        }
        for (_, w) in self.writers.drain() {
            w.wake();
        }
    }
}

/// Everything a session's handles and its driver share, behind the one mutex of [`Shared`].
pub(crate) struct SessionState {
    /// The sans-IO core: every protocol decision is made there.
    pub(crate) proto: tcpls_proto::Session,
    wakers: Wakers,
    /// Core events the application may want (tokens, addresses, connections, extension
    /// frames), for `Session::poll_events`.
    events: EventQueue<Event>,
    /// Outcomes of the peer's socket-option requests, for `Session::poll_socket_options`.
    socket_options: EventQueue<SocketOptionApplied>,
    /// The driver ended (sockets closed).
    pub(crate) driver_done: bool,
    /// Sockets of connections added after the first (joins), waiting for the driver.
    new_sockets: Vec<NewSocket>,
    /// The runtime the session's driver runs on (a server session: where it was accepted). A
    /// join accepted on another runtime (another core's listener) moves its socket here.
    home: Option<tokio::runtime::Id>,
    /// Socket descriptors of live connections (the driver adds and removes them, under this
    /// lock), for TCP_INFO and socket options.
    fds: HashMap<ConnId, RawFd>,
    /// TCP_NOTSENT_LOWAT set per connection by `tune_notsent_lowat`.
    notsent_lowat: HashMap<ConnId, u32>,
    /// Server: this session's entries in its listeners' join registry.
    registration: Option<Registration>,
    /// Client: the server address the session was opened to (a rejoin's last resort).
    pub(crate) origin: Option<SocketAddr>,
    /// Client: rejoin at the origin only while the server has advertised no address (a farm
    /// behind a load balancer: the origin may reach another server, which refuses the join).
    pub(crate) rejoin_advertised_only: bool,
    /// Client: a path manager rejoins this session over its paths after an outage, so the
    /// driver does not start its own rejoin over the default route.
    pub(crate) managed: bool,
    /// Answers to our probes (`probe_answers.rs`), collected by the calls of `ext.rs`.
    pub(crate) ext: ProbeAnswers,
    /// Where the events go when the session is traced (`trace.rs`).
    trace: Option<Tracer>,
}

/// `TCPLS_TRACE=1` prints every event of every session on stderr (a debugging aid).
fn trace_events() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("TCPLS_TRACE").is_some())
}

impl SessionState {
    fn new(proto: tcpls_proto::Session, registration: Option<Registration>) -> Self {
        Self {
            proto,
            wakers: Wakers::default(),
            events: EventQueue::default(),
            socket_options: EventQueue::default(),
            driver_done: false,
            new_sockets: Vec::new(),
            home: tokio::runtime::Handle::try_current().ok().map(|h| h.id()),
            fds: HashMap::new(),
            notsent_lowat: HashMap::new(),
            registration,
            origin: None,
            rejoin_advertised_only: false,
            managed: false,
            ext: ProbeAnswers::default(),
            trace: crate::trace::default_trace().map(Tracer::new),
        }
    }

    /// Registers a connection's socket and applies the session's socket options to it
    /// (`SessionConfig::notsent_lowat`), for the initial connection and joined ones alike.
    ///
    ///
    /// Without a configured value, each connection gets a TCP_NOTSENT_LOWAT that follows its
    /// path ([`SessionState::tune_notsent_lowat`]).
    pub(crate) fn add_fd(&mut self, id: ConnId, fd: RawFd) {
        self.fds.insert(id, fd);
        if let Some(bytes) = self.proto.settings().notsent_lowat {
            // Best effort: a socket without the option (not Linux) still works, only earlier.
            let _ = sockopt::set_notsent_lowat(fd, bytes);
        }
    }

    /// Without a configured `notsent_lowat`: each socket's kernel holds unsent about
    /// [`tcpls_proto::MULTIPATH_QUEUE_TIME`] of what its path delivers, at least
    /// [`MULTIPATH_NOTSENT_LOWAT`] (re-set when that moves by a quarter). Stream data then waits
    /// in the session's queues, where the scheduler still chooses what goes next (a new stream's
    /// first bytes, another path), not in a kernel queue in front of everything. With several
    /// connections it also bounds what a path that goes silent takes with it (bytes handed to a
    /// kernel are committed to that path, re-sent only after its deadline) and what an ACK
    /// waits behind. A fast path's 20 ms are more than the send budget lets anyone queue, so
    /// only slower paths are held to it.
    pub(crate) fn tune_notsent_lowat(&mut self, conn: ConnId, delivery_rate: Option<u64>) {
        if self.proto.settings().notsent_lowat.is_some() {
            return;
        }
        let Some(fd) = self.fds.get(&conn).copied() else { return };
        let time_worth = delivery_rate
            .map_or(0, |rate| rate.saturating_mul(tcpls_proto::MULTIPATH_QUEUE_TIME.as_millis() as u64) / 1000);
        let want = time_worth.clamp(u64::from(MULTIPATH_NOTSENT_LOWAT), u64::from(MULTIPATH_NOTSENT_LOWAT_MAX)) as u32;
        let current = self.notsent_lowat.get(&conn).copied();
        if current.is_some_and(|c| c.abs_diff(want) <= c / 4) {
            return;
        }
        if sockopt::set_notsent_lowat(fd, want).is_ok() {
            self.notsent_lowat.insert(conn, want);
        }
    }

    /// Hands the socket of a connection added after the first (a join) to the driver; whether it
    /// moves to the driver's runtime from another one.
    pub(crate) fn add_socket(&mut self, id: ConnId, stream: TcpStream) -> bool {
        // Registered with the runtime this runs on: the driver's, unless a listener of another
        // runtime (another core) accepted the join.
        let here = tokio::runtime::Handle::try_current().ok().map(|h| h.id());
        let foreign = self.home.is_some() && here != self.home;
        self.new_sockets.push(NewSocket { id, stream, foreign });
        self.wake_driver();
        foreign
    }

    /// The driver takes the sockets handed to it since its last poll.
    pub(crate) fn take_new_sockets(&mut self) -> Vec<NewSocket> {
        std::mem::take(&mut self.new_sockets)
    }

    /// The driver is about to close connection `id`'s socket: under this lock, so nobody
    /// reads TCP_INFO from a descriptor being closed.
    pub(crate) fn remove_fd(&mut self, id: ConnId) {
        self.fds.remove(&id);
        self.notsent_lowat.remove(&id);
    }

    /// The descriptor of connection `conn`'s socket, while it is open.
    pub(crate) fn fd(&self, conn: ConnId) -> Option<RawFd> {
        self.fds.get(&conn).copied()
    }

    /// The connections whose socket is open, with their descriptors.
    pub(crate) fn fds(&self) -> impl Iterator<Item = (ConnId, RawFd)> + '_ {
        self.fds.iter().map(|(id, fd)| (*id, *fd))
    }

    /// The kernel's view of a connection's TCP socket, if it is open.
    pub(crate) fn tcp_info(&self, conn: ConnId) -> Option<tcp_info::TcpInfo> {
        read_tcp_info(&self.fds, conn)
    }

    /// TCP_INFO of a connection with the bytes its kernel holds unsent, for the scheduler.
    pub(crate) fn path_info(&self, conn: ConnId) -> Option<tcpls_proto::PathInfo> {
        let fd = self.fds.get(&conn)?;
        let view = tcp_info::read_for_sender(*fd).ok()?;
        Some(tcpls_proto::PathInfo {
            rtt_us: Some(view.info.rtt_us),
            cwnd: Some(view.info.cwnd),
            delivery_rate: Some(view.info.delivery_rate).filter(|r| *r > 0),
            kernel_unsent: Some(view.unsent),
            mss: Some(view.mss).filter(|m| *m > 0),
            unacked: Some(view.unacked),
            min_rtt_us: Some(view.min_rtt_us).filter(|r| *r > 0),
        })
    }

    /// The application changed something the driver must act on (new data, credit, close).
    pub(crate) fn wake_driver(&mut self) {
        if let Some(w) = &self.wakers.driver {
            w.wake_by_ref();
        }
    }

    /// The application queued a small write or a FIN on a stream: seal it and write it from
    /// the caller's task, instead of waking the driver to do it. A request's answer then leaves
    /// from the task that wrote it, as with TLS over TCP, without a second task to schedule
    /// (the driver) on the way. The driver is still woken whenever anything is left for it:
    /// bytes the socket did not take, a socket to shut down or close, a connection it has not
    /// picked up yet, or a timer earlier than before. Only when nothing was waiting to be
    /// written already: a busy session's writes stay with the driver, which batches them.
    pub(crate) fn transmit_now(&mut self) {
        if self.driver_done || self.proto.has_transmit() || !self.new_sockets.is_empty() {
            self.wake_driver();
            return;
        }
        let timer_before = self.proto.poll_timeout();
        let now = Instant::now();
        self.proto.prepare_transmit(now);
        // Tokens about to go out must be in the join registry first (as in the driver).
        self.dispatch_events();
        self.publish_new_tokens();
        let mut need_driver = false;
        for (&conn, &fd) in &self.fds {
            loop {
                let data = self.proto.transmit_data(conn);
                if data.is_empty() {
                    break;
                }
                match sockopt::send_nonblocking(fd, data) {
                    Ok(n) if n > 0 => self.proto.transmit_advance(conn, n),
                    // The socket is full, or failed: the driver finds out with its own write.
                    _ => break,
                }
            }
            if self.proto.should_shutdown_write(conn) || self.proto.should_close_socket(conn) {
                need_driver = true;
            }
        }
        need_driver |= self.proto.has_transmit() || self.proto.wants_transmit();
        let timer_after = self.proto.poll_timeout();
        if timer_after.is_some_and(|after| timer_before.is_none_or(|before| after < before)) {
            need_driver = true;
        }
        // Events the sealing caused (e.g. the session closing) reach their tasks here.
        self.dispatch_events();
        if need_driver {
            self.wake_driver();
        }
    }

    /// The driver task polls again when the application wakes it.
    pub(crate) fn set_driver_waker(&mut self, waker: &Waker) {
        self.wakers.driver = Some(waker.clone());
    }

    /// The task of `cx` waits for a state change (see [`Wakers`]).
    pub(crate) fn wait_state(&mut self, cx: &Context<'_>) {
        self.wakers.state.push(cx.waker().clone());
    }

    /// The task of `cx` waits until stream `id` can be read.
    pub(crate) fn wait_readable(&mut self, id: StreamId, cx: &Context<'_>) {
        self.wakers.readers.insert(id, cx.waker().clone());
    }

    /// The task of `cx` waits until stream `id` can be written.
    pub(crate) fn wait_writable(&mut self, id: StreamId, cx: &Context<'_>) {
        self.wakers.writers.insert(id, cx.waker().clone());
    }

    /// A stream half was dropped: nobody reads (`reader`) or writes it any more.
    pub(crate) fn forget_waiter(&mut self, id: StreamId, reader: bool) {
        if reader {
            self.wakers.readers.remove(&id);
        } else {
            self.wakers.writers.remove(&id);
        }
    }

    /// The core events kept for the application, oldest first.
    pub(crate) fn take_events(&mut self) -> Vec<Event> {
        self.events.drain()
    }

    /// The outcomes of the peer's socket-option requests, oldest first.
    pub(crate) fn take_socket_options(&mut self) -> Vec<SocketOptionApplied> {
        self.socket_options.drain()
    }

    /// Routes the core's events to the tasks waiting for them, and to the application.
    pub(crate) fn dispatch_events(&mut self) {
        while let Some(event) = self.proto.poll_event() {
            if let Some(tracer) = &mut self.trace {
                if matches!(event, Event::ConnectionClosed { .. } | Event::FailedOver { .. }) {
                    // The counters of the connection that ended (and what failover re-sent),
                    // next to its end in the trace.
                    let fds = &self.fds;
                    tracer.sample(&self.proto, &|c| read_tcp_info(fds, c), Instant::now());
                }
                tracer.record(&self.proto, &event);
            }
            if trace_events() {
                match &event {
                    // Tokens are credentials: never print them.
                    Event::TokenIssued { sequence, .. } => {
                        eprintln!("tcpls trace ({:?}): TokenIssued {{ sequence: {sequence}, .. }}", self.proto.side())
                    }
                    other => eprintln!("tcpls trace ({:?}): {other:?}", self.proto.side()),
                }
            }
            self.act_on_extension(&event);
            match event {
                Event::StreamReadable(id) => {
                    if let Some(w) = self.wakers.readers.remove(&id) {
                        w.wake();
                    }
                }
                Event::StreamWritable(id) => {
                    if let Some(w) = self.wakers.writers.remove(&id) {
                        w.wake();
                    }
                }
                Event::StreamOpened(_) | Event::PeerClosed => self.wakers.wake_state(),
                // The application learns from `poll_events` whether the session is TCPLS or a
                // plain TLS fallback (a middlebox or a server that does not speak TCPLS).
                Event::Established { .. } => {
                    self.wakers.wake_state();
                    self.events.push(event);
                }
                Event::TokenIssued { token, .. } => {
                    // Published in the registry by the driver before the token leaves.
                    if let Some(registration) = &mut self.registration {
                        registration.token_issued(token);
                    }
                }
                Event::TokenUsed { .. } => {}
                // The peer asks how we see one of our connections: answer from TCP_INFO.
                Event::TcpInfoRequested { conn } => {
                    if let Some(info) = self.tcp_info(conn) {
                        self.proto.send_tcp_info(conn, info.into());
                    }
                }
                Event::ConnectionEstablished { .. } | Event::ConnectionClosed { .. } | Event::TokensReceived { .. } => {
                    self.wakers.wake_state();
                    self.events.push(event);
                }
                Event::Closed { .. } => {
                    self.wakers.wake_all();
                    self.events.push(event);
                }
                other => self.events.push(other),
            }
        }
    }

    /// The IO layer's part of the extension frames (PROTOCOL.md §7), before the event is
    /// routed: keeps the answers to our probes and applies the peer's socket-option requests.
    fn act_on_extension(&mut self, event: &Event) {
        let fds = &self.fds;
        let mut wake = self.ext.record(event, |c| fds.contains_key(&c));
        if let Some(outcome) = peer_requests::apply(event, &self.proto, |c| fds.get(&c).copied()) {
            if let Some(tracer) = &self.trace {
                tracer.socket_option(self.proto.side(), &outcome);
            }
            self.socket_options.push(outcome);
            wake = true;
        }
        if wake {
            self.wakers.wake_state();
        }
    }

    /// Samples the session for its trace when one is due (`trace.rs`); one `Option` test when
    /// the session is not traced.
    pub(crate) fn trace_sample(&mut self, force: bool) {
        if let Some(tracer) = &mut self.trace {
            let now = Instant::now();
            if force || tracer.sample_due(now) {
                let fds = &self.fds;
                tracer.sample(&self.proto, &|c| read_tcp_info(fds, c), now);
            }
        }
    }

    /// Traces this session's events from now on into `sink`.
    pub(crate) fn set_trace(&mut self, sink: Arc<dyn TraceSink>) {
        self.trace = Some(Tracer::new(sink));
    }

    /// Traces the application's stream calls (open, finish, reset), if the session is traced.
    pub(crate) fn trace_stream(&self, stream: StreamId, what: &'static str, error_code: Option<u32>) {
        if let Some(tracer) = &self.trace {
            tracer.stream(self.proto.side(), stream, what, error_code);
        }
    }

    /// Hands a path manager decision to the session's trace, if it is traced.
    pub(crate) fn trace_path(&self, event: impl FnOnce() -> crate::trace::PathEvent) {
        if let Some(tracer) = &self.trace {
            tracer.path(self.proto.side(), &event());
        }
    }

    /// Server: publishes the tokens issued since the last call (and, once the initial
    /// connection is established, the session reference) so that any listener can route joins
    /// to this session. Called before the tokens leave in a record.
    pub(crate) fn publish_tokens(&mut self) {
        if let Some(registration) = &mut self.registration {
            registration.publish(&self.proto);
        }
    }

    /// [`publish_tokens`](Self::publish_tokens) if the core issued tokens since the last call
    /// (the driver calls it after every dispatch).
    pub(crate) fn publish_new_tokens(&mut self) {
        if self.registration.as_ref().is_some_and(Registration::has_unpublished) {
            self.publish_tokens();
        }
    }

    pub(crate) fn driver_finished(&mut self) {
        if !self.driver_done {
            // The last counters of the session, before the descriptors go.
            self.trace_sample(true);
        }
        self.driver_done = true;
        // The sockets close right after: no TCP_INFO may be read from their descriptors.
        self.fds.clear();
        // The session's unused tokens expire with it.
        if let Some(registration) = &mut self.registration {
            registration.withdraw(&self.proto);
        }
        self.wakers.wake_all();
    }
}

/// TCP_INFO of connection `conn`'s socket, if it is open (a free function: the tracer borrows
/// `SessionState` mutably beside the descriptors).
/// Least TCP_NOTSENT_LOWAT of a connection whose session has none configured
/// (`SessionState::tune_notsent_lowat`).
pub const MULTIPATH_NOTSENT_LOWAT: u32 = 128 << 10;
/// Most, for fast paths (a loopback or LAN path's 20 ms worth is far more than any queue needs).
pub const MULTIPATH_NOTSENT_LOWAT_MAX: u32 = 4 << 20;

fn read_tcp_info(fds: &HashMap<ConnId, RawFd>, conn: ConnId) -> Option<tcp_info::TcpInfo> {
    fds.get(&conn).and_then(|fd| tcp_info::read(*fd).ok())
}

/// A panic while holding the lock leaves the core in an unknown state; we keep going with it
/// rather than poisoning every handle (the core itself never panics on input).
fn lock(inner: &Mutex<SessionState>) -> MutexGuard<'_, SessionState> {
    inner.lock_unpoisoned()
}

/// What the join registry holds of a server session (weakly): a joining connection that names
/// the session is attached to it here, under the session's lock.
impl JoinTarget for Mutex<SessionState> {
    fn attach(
        &self,
        joining: JoiningConnection,
        stream: TcpStream,
        local: Option<SocketAddr>,
        remote: Option<SocketAddr>,
    ) -> Result<bool, Box<Refused>> {
        let mut inner = lock(self);
        match inner.proto.attach_joining_connection(joining, Instant::now()) {
            Ok(id) => {
                inner.proto.set_addresses(id, local, remote);
                Ok(inner.add_socket(id, stream))
            }
            Err(refused) => Err(Box::new(Refused { joining: refused, stream })),
        }
    }
}

/// A handle on a session's [`SessionState`]: the application's handles and the driver each hold one.
#[derive(Clone)]
pub(crate) struct Shared(Arc<Mutex<SessionState>>);

impl Shared {
    /// A client session's state.
    pub(crate) fn new(proto: tcpls_proto::Session) -> Self {
        Self(Arc::new(Mutex::new(SessionState::new(proto, None))))
    }

    /// A server session's state, whose join tokens are published in `registry`. The
    /// registration holds the session weakly: a registry never keeps a session alive.
    pub(crate) fn registered(proto: tcpls_proto::Session, registry: JoinRegistry) -> Self {
        Self(Arc::new_cyclic(|me: &Weak<Mutex<SessionState>>| {
            let target: Weak<dyn JoinTarget> = me.clone();
            Mutex::new(SessionState::new(proto, Some(Registration::new(registry, target))))
        }))
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, SessionState> {
        lock(&self.0)
    }

    /// Whether both handles refer to the same session.
    pub(crate) fn same(&self, other: &Shared) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}
