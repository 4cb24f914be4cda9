//! Serving on several cores: one listener and one current-thread runtime per core.
//!
//! Each core's thread runs its own tokio runtime (current-thread) with its own listening
//! socket on the same address (`SO_REUSEPORT`: the kernel spreads new connections over them
//! by a hash of the addresses and ports). A connection's handshake, its session's driver and
//! the application's handler all run on the core that accepted it, so a handshake involves no
//! other thread: no wake-up of another worker, no contention on the session's lock.
//!
//! A join (another TCP connection of a session) is hashed like any connection and may reach
//! another core's listener. Its TLS handshake runs there (it belongs to no session until its
//! first record names one); then the join registry, shared by every core, finds the session,
//! and the connection (keys, the bytes already read) is attached to it and its socket handed
//! to the session's driver, which moves it from the accepting core's reactor to its own. A
//! reuseport BPF program could not route joins by itself: what names the session (the token)
//! arrives encrypted after the handshake, long after the kernel chose the listener.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;

use rustls::ServerConfig;
use tcpls_proto::SessionConfig;

use crate::listener::{ListenerProbe, TcplsListener};
use crate::listener_stats::ListenerStats;
use crate::registry::JoinRegistry;
use crate::session::Session;
use crate::trace::TraceSink;

/// Listen backlog of each core's socket (the kernel caps it at `net.core.somaxconn`).
const BACKLOG: i32 = 1024;

/// Builds a server that runs one listener and one current-thread runtime per core (see
/// [`PerCoreServer`]); the other way to serve is a [`TcplsListener`] on the application's own
/// (multi-thread) runtime.
///
/// ```no_run
/// # fn demo(tls: rustls::ServerConfig) -> std::io::Result<()> {
/// use std::sync::Arc;
/// let server = tcpls::ServerBuilder::new(Arc::new(tls))
///     .cores(4)
///     .serve(&["0.0.0.0:4443".parse().unwrap()], |session, _peer| async move {
///         // Runs on the core that accepted the session, as do its streams' tasks.
///         while let Some((mut send, mut recv)) = session.accept_stream().await {
///             tokio::spawn(async move { tokio::io::copy(&mut recv, &mut send).await });
///         }
///     })?;
/// println!("serving on {:?} with {} cores", server.local_addrs(), server.cores());
/// # Ok(()) }
/// ```
pub struct ServerBuilder {
    config: Arc<ServerConfig>,
    settings: SessionConfig,
    cores: usize,
    registry: JoinRegistry,
    trace: Option<Arc<dyn TraceSink>>,
}

impl ServerBuilder {
    /// A server with the default session settings, one core per CPU the process may use.
    pub fn new(config: Arc<ServerConfig>) -> Self {
        Self {
            config,
            settings: SessionConfig::default(),
            cores: default_cores(),
            registry: JoinRegistry::new(),
            trace: None,
        }
    }

    /// The sessions' settings.
    pub fn settings(mut self, settings: SessionConfig) -> Self {
        self.settings = settings;
        self
    }

    /// Cores (threads, each with its listeners and runtime); 0 means one per CPU the process
    /// may use.
    pub fn cores(mut self, cores: usize) -> Self {
        self.cores = if cores == 0 { default_cores() } else { cores };
        self
    }

    /// The join registry, when listeners elsewhere must route joins to these sessions (by
    /// default a new one, shared by every core).
    pub fn registry(mut self, registry: JoinRegistry) -> Self {
        self.registry = registry;
        self
    }

    /// Traces every session into `sink` ([`TcplsListener::with_trace`]).
    pub fn trace(mut self, sink: Arc<dyn TraceSink>) -> Self {
        self.trace = Some(sink);
        self
    }

    /// Binds every address on every core and starts serving: `handler` is called with each
    /// new session and the client's address, and its future runs on the core that accepted
    /// the session. An address with port 0 gets one port, shared by all cores.
    ///
    /// Returns once every core listens; fails if an address cannot be bound or a thread or
    /// runtime cannot start (nothing keeps running then).
    pub fn serve<H, F>(self, addrs: &[SocketAddr], handler: H) -> io::Result<PerCoreServer>
    where
        H: Fn(Session, SocketAddr) -> F + Send + Sync + 'static,
        F: Future<Output = ()> + Send + 'static,
    {
        self.bind(addrs)?.serve(handler)
    }

    /// Binds every address on every core without accepting yet (the kernel queues connections
    /// in the listen backlog): the addresses are known ([`PerCoreBound::local_addrs`]) before
    /// the handler is. [`PerCoreBound::serve`] starts the cores.
    pub fn bind(self, addrs: &[SocketAddr]) -> io::Result<PerCoreBound> {
        if addrs.is_empty() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "no address to listen on"));
        }
        let sockets = bind_all(addrs, self.cores)?;
        let local_addrs =
            sockets.first().map(|c| c.iter().filter_map(|l| l.local_addr().ok()).collect()).unwrap_or_default();
        Ok(PerCoreBound { builder: self, sockets, local_addrs })
    }
}

/// A per-core server bound to its addresses, not serving yet ([`ServerBuilder::bind`]).
pub struct PerCoreBound {
    builder: ServerBuilder,
    /// Per core, one listening socket per address.
    sockets: Vec<Vec<std::net::TcpListener>>,
    local_addrs: Vec<SocketAddr>,
}

impl PerCoreBound {
    /// The addresses bound, in the order given (a port 0 replaced by the one chosen).
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.local_addrs
    }

    /// The registry the cores will route joins with.
    pub fn registry(&self) -> &JoinRegistry {
        &self.builder.registry
    }

    /// Replaces the sessions' settings (e.g. to advertise the ports just bound).
    pub fn settings(mut self, settings: SessionConfig) -> Self {
        self.builder.settings = settings;
        self
    }

    /// Starts every core (see [`ServerBuilder::serve`]).
    pub fn serve<H, F>(self, handler: H) -> io::Result<PerCoreServer>
    where
        H: Fn(Session, SocketAddr) -> F + Send + Sync + 'static,
        F: Future<Output = ()> + Send + 'static,
    {
        let PerCoreBound { builder, sockets, local_addrs } = self;
        let handler = Arc::new(handler);
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let mut server =
            PerCoreServer { local_addrs, registry: builder.registry.clone(), cores: Vec::new(), stop: stop_tx };
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        for (index, core_sockets) in sockets.into_iter().enumerate() {
            let core = Core {
                index,
                sockets: core_sockets,
                config: builder.config.clone(),
                settings: builder.settings.clone(),
                registry: builder.registry.clone(),
                trace: builder.trace.clone(),
                stop: stop_rx.clone(),
            };
            let (handler, ready) = (handler.clone(), ready_tx.clone());
            let thread = std::thread::Builder::new()
                .name(format!("tcpls-core-{index}"))
                .spawn(move || core.run(handler, ready))?;
            server.cores.push(CoreHandle { thread: Some(thread), probes: Vec::new() });
        }
        drop(ready_tx);
        for _ in 0..server.cores.len() {
            // A thread that ended without a word failed to start: `recv` then errs.
            let (index, probes) = ready_rx.recv().map_err(|_| io::Error::other("a core's thread ended at start"))??;
            if let Some(core) = server.cores.get_mut(index) {
                core.probes = probes;
            }
        }
        Ok(server)
    }
}

/// The CPUs this process may run on (its affinity mask), at least one.
fn default_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// For each core, one listening socket per address (`SO_REUSEPORT`), non-blocking. The first
/// core's sockets fix the ports (port 0 picks one) that the others bind too.
fn bind_all(addrs: &[SocketAddr], cores: usize) -> io::Result<Vec<Vec<std::net::TcpListener>>> {
    let mut per_core: Vec<Vec<std::net::TcpListener>> = Vec::new();
    let mut bound = addrs.to_vec();
    for core in 0..cores.max(1) {
        let mut sockets = Vec::new();
        for addr in bound.iter_mut() {
            if core == 0 && addr.port() != 0 {
                ensure_unused(*addr)?;
            }
            let socket = reuseport_listener(*addr)
                .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {addr} (SO_REUSEPORT): {e}")))?;
            if core == 0 {
                *addr = socket.local_addr()?;
            }
            sockets.push(socket);
        }
        per_core.push(sockets);
    }
    Ok(per_core)
}

/// Fails if something listens on `addr` already. Binding with `SO_REUSEPORT` alone would
/// succeed next to another process's reuseport sockets (another server of the same user) and
/// silently share its connections with it; an ordinary bind first tells.
fn ensure_unused(addr: SocketAddr) -> io::Result<()> {
    let probe = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::STREAM, None)?;
    probe.set_reuse_address(true)?;
    probe.bind(&addr.into()).map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))
}

/// A listening socket that other sockets of this user may bind to the same address, the kernel
/// spreading connections over them.
fn reuseport_listener(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    let socket = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    Ok(socket.into())
}

/// What one core's thread starts with.
struct Core {
    index: usize,
    sockets: Vec<std::net::TcpListener>,
    config: Arc<ServerConfig>,
    settings: SessionConfig,
    registry: JoinRegistry,
    trace: Option<Arc<dyn TraceSink>>,
    stop: tokio::sync::watch::Receiver<bool>,
}

/// What a core reports once it listens: its index and its listeners' counters.
type Ready = io::Result<(usize, Vec<ListenerProbe>)>;

impl Core {
    /// The core's thread: its runtime, its listeners, until the server stops. Leaving drops the
    /// runtime, and with it every session of this core.
    fn run<H, F>(self, handler: Arc<H>, ready: std::sync::mpsc::Sender<Ready>)
    where
        H: Fn(Session, SocketAddr) -> F + Send + Sync + 'static,
        F: Future<Output = ()> + Send + 'static,
    {
        let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(r) => r,
            Err(e) => {
                let _ = ready.send(Err(io::Error::new(e.kind(), format!("cannot start a core's runtime: {e}"))));
                return;
            }
        };
        let Core { index, sockets, config, settings, registry, trace, mut stop } = self;
        runtime.block_on(async move {
            let mut probes = Vec::new();
            for socket in sockets {
                let listener = match tokio::net::TcpListener::from_std(socket) {
                    Ok(l) => TcplsListener::from_listener(l, config.clone(), settings.clone(), registry.clone()),
                    Err(e) => {
                        let _ = ready.send(Err(e));
                        return;
                    }
                };
                listener.set_trace(trace.clone());
                probes.push(listener.probe());
                tokio::spawn(accept_on_core(listener, handler.clone()));
            }
            let _ = ready.send(Ok((index, probes)));
            drop(ready);
            // Until the server says stop, or is dropped.
            while !*stop.borrow_and_update() {
                if stop.changed().await.is_err() {
                    break;
                }
            }
        });
        // Tasks still blocked in a blocking call are not waited for.
        runtime.shutdown_background();
    }
}

/// Hands each session a core's listener accepts to the handler, on this core.
async fn accept_on_core<H, F>(listener: TcplsListener, handler: Arc<H>)
where
    H: Fn(Session, SocketAddr) -> F + Send + Sync + 'static,
    F: Future<Output = ()> + Send + 'static,
{
    while let Some((session, peer)) = listener.accept().await {
        tokio::spawn(handler(session, peer));
    }
}

struct CoreHandle {
    thread: Option<JoinHandle<()>>,
    probes: Vec<ListenerProbe>,
}

/// A server running one listener per address and one current-thread runtime on each of its
/// cores (built by [`ServerBuilder`]); every session, its joined connections and its handler
/// stay on the core that accepted it. Dropping it (or [`shutdown`](Self::shutdown)) stops
/// every core: their listeners close and their sessions end.
pub struct PerCoreServer {
    local_addrs: Vec<SocketAddr>,
    registry: JoinRegistry,
    cores: Vec<CoreHandle>,
    stop: tokio::sync::watch::Sender<bool>,
}

impl PerCoreServer {
    /// The addresses served, in the order given (a port 0 replaced by the one chosen).
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.local_addrs
    }

    /// Cores serving.
    pub fn cores(&self) -> usize {
        self.cores.len()
    }

    /// The registry every core routes joins with.
    pub fn registry(&self) -> &JoinRegistry {
        &self.registry
    }

    /// New sessions, joins, refusals and failed handshakes over every core (and every other
    /// listener sharing the registry).
    pub fn stats(&self) -> ListenerStats {
        self.registry.listener_stats()
    }

    /// Handshakes that failed or timed out on every core.
    pub fn failed_handshakes(&self) -> u64 {
        self.probes().map(ListenerProbe::failed_handshakes).sum()
    }

    /// Accepted connections that have not sent their first byte yet, over every core (each
    /// core admits at most [`MAX_AWAITING_HELLO`](crate::MAX_AWAITING_HELLO)).
    pub fn connections_awaiting_hello(&self) -> usize {
        self.probes().map(ListenerProbe::awaiting_hello).sum()
    }

    fn probes(&self) -> impl Iterator<Item = &ListenerProbe> {
        self.cores.iter().flat_map(|c| c.probes.iter())
    }

    /// Stops every core and waits for their threads: the listeners close and the sessions end
    /// (their sockets are closed without a close_notify). Blocks the calling thread briefly.
    pub fn shutdown(mut self) {
        self.stop_and_join();
    }

    fn stop_and_join(&mut self) {
        let _ = self.stop.send(true);
        for core in &mut self.cores {
            if let Some(thread) = core.thread.take() {
                let _ = thread.join();
            }
        }
    }
}

impl Drop for PerCoreServer {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}
