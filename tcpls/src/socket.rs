//! Socket options of TCPLS connections.

use std::io;

use tokio::net::TcpStream;

/// TCP_NODELAY: records are written whole and late, Nagle would only add delay.
pub(crate) fn configure(stream: &TcpStream) -> io::Result<()> {
    stream.set_nodelay(true)
}
