//! A server as a binding holds it: listeners on one or more addresses sharing a join registry
//! (a client joins its session through any of them), their sessions queued for `accept`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tcpls::{JoinRegistry, SessionConfig, TcplsListener};
use tokio::sync::mpsc;

use crate::config::ConfigSpec;
use crate::error::{Error, ErrorKind, Result};
use crate::runtime::{block_on, runtime, Wait};
use crate::session::SessionCore;

/// Established sessions not accepted yet, at most (the accept tasks wait beyond).
const MAX_PENDING_SESSIONS: usize = 128;

/// Listeners and their accepted sessions.
pub struct ListenerCore {
    config: Arc<rustls::ServerConfig>,
    registry: JoinRegistry,
    addresses: Mutex<Vec<SocketAddr>>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// None once closed: with the accept tasks gone too, a waiting `accept` returns.
    sender: Mutex<Option<mpsc::Sender<tcpls::Session>>>,
    sessions: tokio::sync::Mutex<mpsc::Receiver<tcpls::Session>>,
}

impl Drop for ListenerCore {
    fn drop(&mut self) {
        if let Ok(tasks) = self.tasks.lock() {
            for task in tasks.iter() {
                task.abort();
            }
        }
    }
}

impl ListenerCore {
    /// Listens on `addr` (`IP:PORT`, port 0: any free port).
    pub fn bind(config: &ConfigSpec, addr: &str) -> Result<Arc<ListenerCore>> {
        let (sender, receiver) = mpsc::channel(MAX_PENDING_SESSIONS);
        let core = Arc::new(ListenerCore {
            config: config.server_config()?,
            registry: JoinRegistry::new(),
            addresses: Mutex::new(Vec::new()),
            tasks: Mutex::new(Vec::new()),
            sender: Mutex::new(Some(sender)),
            sessions: tokio::sync::Mutex::new(receiver),
        });
        core.add_address(addr)?;
        Ok(core)
    }

    /// Listens on one more address, for the same sessions (joins through it reach them).
    pub fn add_address(&self, addr: &str) -> Result<SocketAddr> {
        let addr: SocketAddr = addr
            .parse()
            .map_err(|_| Error::invalid(format!("'{addr}' is not IP:PORT (e.g. 127.0.0.1:4443, port 0 for any)")))?;
        let sender = self
            .sender
            .lock()
            .map_err(|_| poisoned())?
            .clone()
            .ok_or_else(|| Error::new(ErrorKind::Closed, "the listener was closed"))?;
        let (config, registry) = (self.config.clone(), self.registry.clone());
        let listener = block_on(Wait::Forever, "listening", async move {
            TcplsListener::bind_with_registry(addr, config, SessionConfig::default(), registry).await
        })?
        .map_err(|e| Error::new(ErrorKind::Io, format!("cannot listen on {addr}: {e}")))?;
        let local = listener.local_addr();
        let task = runtime()?.spawn(async move {
            while let Some((session, _peer)) = listener.accept().await {
                if sender.send(session).await.is_err() {
                    return;
                }
            }
        });
        self.tasks.lock().map_err(|_| poisoned())?.push(task);
        self.addresses.lock().map_err(|_| poisoned())?.push(local);
        Ok(local)
    }

    /// The addresses listened on, in the order they were added (ports resolved).
    pub fn addresses(&self) -> Vec<SocketAddr> {
        self.addresses.lock().map(|a| a.clone()).unwrap_or_default()
    }

    /// The next established session, waiting at most `wait` (zero: `WouldBlock` if none).
    pub fn accept(&self, wait: Wait) -> Result<Arc<SessionCore>> {
        let mut sessions = self
            .sessions
            .try_lock()
            .map_err(|_| Error::new(ErrorKind::Busy, "another thread is accepting on this listener"))?;
        let session = if wait == Wait::For(std::time::Duration::ZERO) {
            sessions.try_recv().map_err(|_| Error::new(ErrorKind::WouldBlock, "no session is waiting"))?
        } else {
            block_on(wait, "no session arrived", sessions.recv())?
                .ok_or_else(|| Error::new(ErrorKind::Closed, "the listener stopped"))?
        };
        SessionCore::new(session)
    }

    /// Stops listening; sessions already accepted go on. A thread waiting in `accept` gets
    /// `Closed` once the sessions already queued are taken.
    pub fn close(&self) {
        if let Ok(tasks) = self.tasks.lock() {
            for task in tasks.iter() {
                task.abort();
            }
        }
        if let Ok(mut sender) = self.sender.lock() {
            sender.take();
        }
    }
}

fn poisoned() -> Error {
    Error::new(ErrorKind::Internal, "a listener lock was poisoned by an earlier panic")
}
