//! The state a session's handles and its driver task share: the sans-IO core plus wakers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;
use std::time::Instant;

use tcpls_proto::{Event, StreamId};

pub(crate) struct Inner {
    pub(crate) proto: tcpls_proto::Session,
    pub(crate) driver: Option<Waker>,
    pub(crate) readers: HashMap<StreamId, Waker>,
    pub(crate) writers: HashMap<StreamId, Waker>,
    /// Tasks waiting for a peer stream, the handshake or the end of the session.
    pub(crate) state_waiters: Vec<Waker>,
    /// Events applications may want (tokens, addresses, extension frames), bounded.
    pub(crate) app_events: std::collections::VecDeque<Event>,
    /// The driver ended (sockets closed).
    pub(crate) driver_done: bool,
    /// Sockets for connections added after the first (joins), picked up by the driver.
    pub(crate) new_sockets: Vec<(tcpls_proto::ConnId, tokio::net::TcpStream)>,
    /// Server: where this session's join tokens are registered.
    pub(crate) registry: Option<crate::registry::JoinRegistry>,
    /// Tokens issued since the driver last published them in the registry (it holds the
    /// session's Arc). Used tokens need no change: the listener removed them when routing.
    pub(crate) issued_tokens: Vec<[u8; 32]>,
    /// Server: the session reference registered for rejoins, removed when the session ends.
    pub(crate) session_ref: Option<[u8; 16]>,
    /// Client: the server address the session was opened to (a rejoin's last resort).
    pub(crate) origin: Option<std::net::SocketAddr>,
    /// Client: a path manager rejoins this session over its paths after an outage, so the
    /// driver does not start its own rejoin over the default route.
    pub(crate) managed: bool,
    /// Socket descriptors of live connections (the driver adds and removes them), for TCP_INFO.
    pub(crate) fds: HashMap<tcpls_proto::ConnId, std::os::fd::RawFd>,
    /// Answers to the extension probes (see `ext.rs`).
    pub(crate) ext: crate::ext::ExtResults,
    /// Where the events go when the session is traced (`trace.rs`).
    pub(crate) trace: Option<crate::trace::Tracer>,
}

const MAX_APP_EVENTS: usize = 1024;

/// `TCPLS_TRACE=1` prints every event of every session on stderr (a debugging aid).
fn trace_events() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("TCPLS_TRACE").is_some())
}

impl Inner {
    /// Registers a connection's socket and applies the session's socket options to it
    /// (`SessionConfig::notsent_lowat`), for the initial connection and joined ones alike.
    pub(crate) fn add_fd(&mut self, id: tcpls_proto::ConnId, fd: std::os::fd::RawFd) {
        if let Some(bytes) = self.proto.settings().notsent_lowat {
            // Best effort: a socket without the option (not Linux) still works, only earlier.
            let _ = crate::sockopt::set_notsent_lowat(fd, bytes);
        }
        self.fds.insert(id, fd);
    }

    pub(crate) fn new(proto: tcpls_proto::Session) -> Self {
        Self {
            proto,
            driver: None,
            readers: HashMap::new(),
            writers: HashMap::new(),
            state_waiters: Vec::new(),
            app_events: Default::default(),
            driver_done: false,
            new_sockets: Vec::new(),
            registry: None,
            issued_tokens: Vec::new(),
            session_ref: None,
            origin: None,
            managed: false,
            fds: HashMap::new(),
            ext: Default::default(),
            trace: crate::trace::default_trace().map(crate::trace::Tracer::new),
        }
    }

    /// The kernel's view of a connection's TCP socket, if it is open.
    pub(crate) fn tcp_info(&self, conn: tcpls_proto::ConnId) -> Option<crate::tcp_info::TcpInfo> {
        self.fds.get(&conn).and_then(|fd| crate::tcp_info::read(*fd).ok())
    }

    /// The application changed something the driver must act on (new data, credit, close).
    pub(crate) fn wake_driver(&mut self) {
        if let Some(w) = &self.driver {
            w.wake_by_ref();
        }
    }

    fn wake_state(&mut self) {
        for w in self.state_waiters.drain(..) {
            w.wake();
        }
    }

    /// Routes the core's events to the tasks waiting for them.
    pub(crate) fn dispatch_events(&mut self) {
        while let Some(event) = self.proto.poll_event() {
            if let Some(tracer) = &mut self.trace {
                if matches!(event, Event::ConnectionClosed { .. } | Event::FailedOver { .. }) {
                    // The counters of the connection that ended (and what failover re-sent),
                    // next to its end in the trace.
                    let fds = &self.fds;
                    tracer.sample(
                        &self.proto,
                        &|c| fds.get(&c).and_then(|fd| crate::tcp_info::read(*fd).ok()),
                        Instant::now(),
                    );
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
            crate::ext::observe(self, &event);
            match event {
                Event::StreamReadable(id) => {
                    if let Some(w) = self.readers.remove(&id) {
                        w.wake();
                    }
                }
                Event::StreamWritable(id) => {
                    if let Some(w) = self.writers.remove(&id) {
                        w.wake();
                    }
                }
                Event::StreamOpened(_) | Event::PeerClosed => self.wake_state(),
                // The application learns from `poll_events` whether the session is TCPLS or a
                // plain TLS fallback (a middlebox or a server that does not speak TCPLS).
                Event::Established { .. } => {
                    self.wake_state();
                    self.push_app_event(event);
                }
                Event::TokenIssued { token, .. } => self.issued_tokens.push(token),
                Event::TokenUsed { .. } => {}
                // The peer asks how we see one of our connections: answer from TCP_INFO.
                Event::TcpInfoRequested { conn } => {
                    if let Some(info) = self.fds.get(&conn).and_then(|fd| crate::tcp_info::read(*fd).ok()) {
                        self.proto.send_tcp_info(conn, info.into());
                    }
                }
                Event::ConnectionEstablished { .. } | Event::ConnectionClosed { .. } | Event::TokensReceived { .. } => {
                    self.wake_state();
                    self.push_app_event(event);
                }
                Event::Closed { .. } => {
                    self.wake_state();
                    for (_, w) in self.readers.drain() {
                        w.wake();
                    }
                    for (_, w) in self.writers.drain() {
                        w.wake();
                    }
                    self.push_app_event(event);
                }
                other => self.push_app_event(other),
            }
        }
    }

    /// Samples the session for its trace when one is due (`trace.rs`); one `Option` test when
    /// the session is not traced.
    pub(crate) fn trace_sample(&mut self, force: bool) {
        if let Some(tracer) = &mut self.trace {
            let now = Instant::now();
            if force || tracer.sample_due(now) {
                let fds = &self.fds;
                tracer.sample(&self.proto, &|c| fds.get(&c).and_then(|fd| crate::tcp_info::read(*fd).ok()), now);
            }
        }
    }

    /// Traces the application's stream calls (open, finish, reset), if the session is traced.
    pub(crate) fn trace_stream(&self, stream: StreamId, what: &'static str, error_code: Option<u32>) {
        if let Some(tracer) = &self.trace {
            tracer.stream(self.proto.side(), stream, what, error_code);
        }
    }

    fn push_app_event(&mut self, event: Event) {
        if self.app_events.len() == MAX_APP_EVENTS {
            self.app_events.pop_front();
        }
        self.app_events.push_back(event);
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
        if let Some(registry) = &self.registry {
            for (_, token) in self.proto.tokens() {
                registry.remove(token);
            }
            if let Some(session_ref) = self.session_ref.take() {
                registry.remove_session_ref(&session_ref);
            }
        }
        self.wake_state();
        for (_, w) in self.readers.drain() {
            w.wake();
        }
        for (_, w) in self.writers.drain() {
            w.wake();
        }
    }
}

#[derive(Clone)]
pub(crate) struct Shared(pub(crate) Arc<Mutex<Inner>>);

impl Shared {
    pub(crate) fn new(proto: tcpls_proto::Session) -> Self {
        Self(Arc::new(Mutex::new(Inner::new(proto))))
    }

    /// A panic while holding the lock leaves the core in an unknown state; we keep going with
    /// it rather than poisoning every handle (the core itself never panics on input).
    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}
