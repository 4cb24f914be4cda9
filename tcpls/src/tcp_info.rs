//! The kernel's view of a TCP connection (Linux `TCP_INFO`): RTT, congestion window,
//! retransmissions, delivery rate. Used for [`crate::ConnectionInfo`], to answer the peer's
//! TCP Info Request frame, and to give the scheduler each path's RTT.
//!
//! This is the crate's only unsafe code: one `getsockopt` call on a descriptor the driver owns.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::RawFd;

pub use tcpls_proto::frame::PeerTcpInfo as TcpInfo;

/// Reads `TCP_INFO` of a connected TCP socket.
#[cfg(target_os = "linux")]
pub(crate) fn read(fd: RawFd) -> io::Result<TcpInfo> {
    // SAFETY: `tcp_info` is plain old data (integers only), so all-zero bytes are a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `info` is a live, writable `tcp_info` of `len` bytes; the kernel writes at most
    // `len` bytes and stores the length it wrote in `len`. `fd` is an open socket owned by the
    // session's driver, which removes it from the table under the same lock before closing it.
    let rc = unsafe {
        libc::getsockopt(fd, libc::IPPROTO_TCP, libc::TCP_INFO, (&mut info as *mut libc::tcp_info).cast(), &mut len)
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(TcpInfo {
        rtt_us: info.tcpi_rtt,
        rttvar_us: info.tcpi_rttvar,
        cwnd: info.tcpi_snd_cwnd,
        total_retrans: info.tcpi_total_retrans,
        delivery_rate: info.tcpi_delivery_rate,
        bytes_acked: info.tcpi_bytes_acked,
    })
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn read(_fd: RawFd) -> io::Result<TcpInfo> {
    Err(io::Error::new(io::ErrorKind::Unsupported, "TCP_INFO is read on Linux only"))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn loopback_connection_reports_plausible_values() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (_server, _) = listener.accept().unwrap();
        let info = read(client.as_raw_fd()).unwrap();
        assert!(info.cwnd >= 1, "{info:?}");
        assert!(info.rtt_us < 1_000_000, "loopback RTT well under a second: {info:?}");
        assert!(read(-1).is_err());
    }
}
