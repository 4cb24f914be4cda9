//! Socket setup of TCPLS connections: TCP_NODELAY always, TCP Fast Open on request.

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;

use tokio::net::{TcpListener, TcpSocket, TcpStream};

use crate::path::PathOptions;
use crate::sockopt;

/// TCP_NODELAY: records are written whole and late, Nagle would only add delay.
pub(crate) fn configure(stream: &TcpStream) -> io::Result<()> {
    stream.set_nodelay(true)
}

fn new_socket(addr: SocketAddr) -> io::Result<TcpSocket> {
    if addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
}

/// Connects with TCP Fast Open: `connect` returns at once and the first write (the ClientHello
/// and any early data) goes in the SYN when the kernel has a Fast Open cookie for `addr`.
pub(crate) async fn connect_fast_open(addr: SocketAddr, path: &PathOptions) -> io::Result<TcpStream> {
    let socket = path.bound_socket(addr)?;
    sockopt::set_fast_open_connect(socket.as_raw_fd())
        .map_err(|e| io::Error::new(e.kind(), format!("TCP_FASTOPEN_CONNECT: {e}")))?;
    socket.connect(addr).await
}

/// Listen backlog of [`fast_open_listener`] (the kernel caps it at `net.core.somaxconn`).
const BACKLOG: u32 = 1024;

/// A listening socket that accepts TCP Fast Open: data in a SYN with a valid cookie is
/// accepted at once, so the ClientHello (and 0-RTT data) need no round trip of their own.
/// `queue` bounds the connections accepted that way whose handshake is not complete yet
/// (`TCP_FASTOPEN`); `net.ipv4.tcp_fastopen` must enable servers (bit 2, e.g. value 3).
pub fn fast_open_listener(addr: SocketAddr, queue: u32) -> io::Result<TcpListener> {
    let socket = new_socket(addr)?;
    socket.set_reuseaddr(true)?;
    sockopt::set_fast_open(socket.as_raw_fd(), queue)
        .map_err(|e| io::Error::new(e.kind(), format!("TCP_FASTOPEN: {e}")))?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}
