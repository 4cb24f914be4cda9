//! Client side: connect a TCP socket, run the handshake, hand out a [`Session`].

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use rustls::pki_types::ServerName;
use rustls::ClientConfig;
use tokio::net::TcpStream;

use crate::driver::Driver;
use crate::session::Session;
use crate::shared::Shared;
use crate::socket::configure;
use tcpls_proto::SessionConfig;

/// Opens TCPLS sessions, like `tokio_rustls::TlsConnector`.
///
/// ```no_run
/// # async fn demo(tls: rustls::ClientConfig) -> std::io::Result<()> {
/// use std::sync::Arc;
/// let connector = tcpls::TcplsConnector::new(Arc::new(tls));
/// let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
/// let session = connector.connect("127.0.0.1:4443".parse().unwrap(), name).await?;
/// if session.is_fallback() {
///     eprintln!("server speaks plain TLS only: one byte stream");
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct TcplsConnector {
    config: Arc<ClientConfig>,
    settings: SessionConfig,
}

impl TcplsConnector {
    /// `tcpls/1` is put first in the ALPN list (the config's own protocols follow, for servers
    /// that only speak plain TLS) and secret extraction is enabled.
    pub fn new(config: Arc<ClientConfig>) -> Self {
        Self { config: Arc::new(tcpls_proto::tcpls_client_config(&config)), settings: SessionConfig::default() }
    }

    pub fn with_settings(mut self, settings: SessionConfig) -> Self {
        self.settings = settings;
        self
    }

    pub fn settings(&self) -> &SessionConfig {
        &self.settings
    }

    /// Connects and completes the handshake. An error says what failed (TCP, TLS, protocol).
    pub async fn connect(&self, addr: SocketAddr, server_name: ServerName<'static>) -> io::Result<Session> {
        let stream = TcpStream::connect(addr).await?;
        self.connect_with(stream, server_name).await
    }

    /// Runs the handshake over an already connected TCP stream.
    pub async fn connect_with(&self, stream: TcpStream, server_name: ServerName<'static>) -> io::Result<Session> {
        configure(&stream)?;
        let mut proto = tcpls_proto::Session::client(self.config.clone(), server_name, self.settings.clone())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        proto.set_addresses(0, stream.local_addr().ok(), stream.peer_addr().ok());
        let shared = Shared::new(proto);
        tokio::spawn(Driver::new(shared.clone(), 0, stream));
        let session = Session::new(shared);
        match tokio::time::timeout(crate::HANDSHAKE_TIMEOUT, session.established()).await {
            Ok(result) => result.map_err(handshake_error)?,
            Err(_) => {
                session.abort();
                return Err(io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out"));
            }
        }
        Ok(session)
    }
}

pub(crate) fn handshake_error(e: tcpls_proto::Error) -> io::Error {
    let kind = match &e {
        tcpls_proto::Error::ConnectionLost(_) => io::ErrorKind::ConnectionAborted,
        _ => io::ErrorKind::InvalidData,
    };
    io::Error::new(kind, e)
}

/// Address and name helpers for command-line style targets.
pub fn server_name_for(host: &str) -> io::Result<ServerName<'static>> {
    ServerName::try_from(host.trim_start_matches('[').trim_end_matches(']').to_string())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("invalid server name {host:?}: {e}")))
}
