//! Server side: accept TCP connections, run handshakes concurrently, yield sessions.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::ServerConfig;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use crate::connector::handshake_error;
use crate::driver::Driver;
use crate::session::Session;
use crate::shared::Shared;
use crate::socket::configure;
use tcpls_proto::SessionConfig;

/// Handshakes that take longer are abandoned (slowloris protection).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

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
    sessions: tokio::sync::Mutex<mpsc::Receiver<(Session, SocketAddr)>>,
    errors: Arc<std::sync::atomic::AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl TcplsListener {
    pub async fn bind(addr: SocketAddr, config: Arc<ServerConfig>) -> io::Result<Self> {
        Self::bind_with(addr, config, SessionConfig::default()).await
    }

    pub async fn bind_with(addr: SocketAddr, config: Arc<ServerConfig>, settings: SessionConfig) -> io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        Ok(Self::from_listener(listener, config, settings))
    }

    /// Serves TCPLS on an existing tokio listener.
    pub fn from_listener(listener: TcpListener, config: Arc<ServerConfig>, settings: SessionConfig) -> Self {
        let local = listener.local_addr().unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
        let config = Arc::new(tcpls_proto::tcpls_server_config(&config));
        let (tx, rx) = mpsc::channel(128);
        let errors = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let task = tokio::spawn(accept_loop(listener, config, settings, tx, errors.clone()));
        Self { local, sessions: tokio::sync::Mutex::new(rx), errors, task }
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The next established session and the client's address; `None` if the listener failed.
    pub async fn accept(&self) -> Option<(Session, SocketAddr)> {
        self.sessions.lock().await.recv().await
    }

    /// Handshakes that failed or timed out so far.
    pub fn failed_handshakes(&self) -> u64 {
        self.errors.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Drop for TcplsListener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    config: Arc<ServerConfig>,
    settings: SessionConfig,
    tx: mpsc::Sender<(Session, SocketAddr)>,
    errors: Arc<std::sync::atomic::AtomicU64>,
) {
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
        let (config, settings, tx, errors) = (config.clone(), settings.clone(), tx.clone(), errors.clone());
        tokio::spawn(async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake(stream, config, settings)).await {
                Ok(Ok(session)) => {
                    let _ = tx.send((session, peer)).await;
                }
                Ok(Err(_)) | Err(_) => {
                    errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        });
    }
}

async fn handshake(stream: TcpStream, config: Arc<ServerConfig>, settings: SessionConfig) -> io::Result<Session> {
    configure(&stream)?;
    let mut proto = tcpls_proto::Session::server(config, settings).map_err(handshake_error)?;
    proto.set_addresses(0, stream.local_addr().ok(), stream.peer_addr().ok());
    let shared = Shared::new(proto);
    let driver = tokio::spawn(Driver::new(shared.clone(), 0, stream));
    let session = Session::new(shared);
    match session.established().await {
        Ok(()) => Ok(session),
        Err(e) => {
            // The driver flushes the alert and ends by itself; a timeout ends it here.
            drop(driver);
            Err(handshake_error(e))
        }
    }
}
