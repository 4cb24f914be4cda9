//! The local side of a path: where a session's TCP connection leaves from.
//!
//! A host with several interfaces (Wi-Fi and LTE, DSL and 4G) reaches a server that has one
//! address over several paths only if each connection leaves from a different local address or
//! interface: the destination alone does not tell the kernel which. [`PathOptions`] says so for
//! [`Session::join_with`](crate::Session::join_with) and for the first connection
//! ([`TcplsConnector::with_path`](crate::TcplsConnector::with_path)).

use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::net::{TcpSocket, TcpStream};

/// Where a TCP connection of a session leaves from, and how long it may take to connect. A
/// joined path can then be made a backup path with [`Session::set_backup`](crate::Session::set_backup).
///
/// ```no_run
/// # async fn demo(session: tcpls::Session) -> std::io::Result<()> {
/// use tcpls::PathOptions;
/// // Two paths to a server with one address: one from the Wi-Fi interface, one from the
/// // LTE interface's address.
/// let server = "203.0.113.5:4443".parse().unwrap();
/// session.join_with(server, &PathOptions::new().device("wlan0")).await?;
/// session.join_with(server, &PathOptions::new().local("10.64.0.7".parse().unwrap())).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PathOptions {
    local: Option<SocketAddr>,
    device: Option<String>,
    timeout: Option<Duration>,
}

impl PathOptions {
    /// The default: the kernel picks the source address and interface by its routes.
    pub fn new() -> Self {
        Self::default()
    }

    /// Leave from this local address (any port).
    pub fn local(self, ip: IpAddr) -> Self {
        self.local_addr(SocketAddr::new(ip, 0))
    }

    /// Leave from this local address and port (port 0: any).
    pub fn local_addr(mut self, addr: SocketAddr) -> Self {
        self.local = Some(addr);
        self
    }

    /// Leave through this interface (`SO_BINDTODEVICE`: needs `CAP_NET_RAW` on Linux before
    /// 5.7, none after). The connection then uses only that interface's routes.
    pub fn device(mut self, name: impl Into<String>) -> Self {
        self.device = Some(name.into());
        self
    }

    /// Deadline for the TCP connection and, for a join, for the join handshake (each).
    /// Default: [`HANDSHAKE_TIMEOUT`](crate::HANDSHAKE_TIMEOUT).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    pub fn local_address(&self) -> Option<SocketAddr> {
        self.local
    }

    pub fn device_name(&self) -> Option<&str> {
        self.device.as_deref()
    }

    pub(crate) fn timeout_or_default(&self) -> Duration {
        self.timeout.unwrap_or(crate::handshake::HANDSHAKE_TIMEOUT)
    }

    /// Nothing to bind: the plain `connect` will do.
    fn is_default_route(&self) -> bool {
        self.local.is_none() && self.device.is_none()
    }

    /// A TCP connection to `remote` from this side of the path, within the timeout. Errors say
    /// which path failed and why.
    pub(crate) async fn connect(&self, remote: SocketAddr) -> io::Result<TcpStream> {
        let timeout = self.timeout_or_default();
        let attempt = async {
            if self.is_default_route() {
                return TcpStream::connect(remote).await;
            }
            self.bound_socket(remote)?.connect(remote).await
        };
        match tokio::time::timeout(timeout, attempt).await {
            Ok(Ok(stream)) => Ok(stream),
            Ok(Err(e)) => Err(io::Error::new(e.kind(), format!("connecting {self}to {remote}: {e}"))),
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("connecting {self}to {remote} got no answer within {timeout:?}"),
            )),
        }
    }

    /// A socket for `remote`, bound as these options say (not connected yet).
    pub(crate) fn bound_socket(&self, remote: SocketAddr) -> io::Result<TcpSocket> {
        let socket = if remote.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
        if let Some(dev) = &self.device {
            socket.bind_device(Some(dev.as_bytes())).map_err(|e| {
                let hint = match e.raw_os_error() {
                    Some(libc::ENODEV) => " (no such interface)",
                    Some(libc::EPERM) => " (needs CAP_NET_RAW)",
                    _ => "",
                };
                io::Error::new(e.kind(), format!("cannot bind to interface {dev}{hint}: {e}"))
            })?;
        }
        if let Some(local) = self.local {
            if local.is_ipv4() != remote.is_ipv4() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("local address {} and server address {remote} are not of the same family", local.ip()),
                ));
            }
            socket.bind(local).map_err(|e| {
                let hint =
                    if e.raw_os_error() == Some(libc::EADDRNOTAVAIL) { " (not an address of this host)" } else { "" };
                io::Error::new(e.kind(), format!("cannot bind to {local}{hint}: {e}"))
            })?;
        }
        Ok(socket)
    }
}

/// `from ADDR via DEV ` (with a trailing space), or nothing for the default route.
impl fmt::Display for PathOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(local) = self.local {
            if local.port() == 0 {
                write!(f, "from {} ", local.ip())?;
            } else {
                write!(f, "from {local} ")?;
            }
        }
        if let Some(dev) = &self.device {
            write!(f, "via {dev} ")?;
        }
        Ok(())
    }
}
