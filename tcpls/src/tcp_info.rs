//! The kernel's view of a TCP connection (Linux `TCP_INFO`): RTT, congestion window,
//! retransmissions, delivery rate. Used for [`crate::ConnectionInfo`], to answer the peer's
//! TCP Info Request frame, and to give the scheduler each path's RTT.
//!
//! This is the crate's only unsafe code: one `getsockopt` call on a descriptor the driver owns.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::RawFd;

use tcpls_proto::PeerTcpInfo;

/// The kernel's `TCP_INFO` of one TCP connection, the fields TCPLS uses: ours from
/// [`crate::Session::local_tcp_info`], or the peer's as its TCP Info frame reported them
/// ([`crate::Session::peer_tcp_info`]).
///
/// The wire form is a different type ([`tcpls_proto::PeerTcpInfo`], the TCP Info frame's
/// content); the two convert into each other explicitly, field by field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TcpInfo {
    /// Smoothed round-trip time, in microseconds (`tcpi_rtt`).
    pub rtt_us: u32,
    /// Round-trip time variation, in microseconds (`tcpi_rttvar`).
    pub rttvar_us: u32,
    /// Congestion window, in segments (`tcpi_snd_cwnd`).
    pub cwnd: u32,
    /// Retransmitted segments since the connection started (`tcpi_total_retrans`).
    pub total_retrans: u32,
    /// Delivery rate estimate, in bytes per second (`tcpi_delivery_rate`).
    pub delivery_rate: u64,
    /// Bytes acknowledged by TCP (`tcpi_bytes_acked`).
    pub bytes_acked: u64,
}

/// What we tell the peer in a TCP Info frame about our view of a connection.
impl From<TcpInfo> for PeerTcpInfo {
    fn from(i: TcpInfo) -> Self {
        PeerTcpInfo {
            rtt_us: i.rtt_us,
            rttvar_us: i.rttvar_us,
            cwnd: i.cwnd,
            total_retrans: i.total_retrans,
            delivery_rate: i.delivery_rate,
            bytes_acked: i.bytes_acked,
        }
    }
}

/// The peer's view of a connection, as its TCP Info frame reported it.
impl From<PeerTcpInfo> for TcpInfo {
    fn from(i: PeerTcpInfo) -> Self {
        TcpInfo {
            rtt_us: i.rtt_us,
            rttvar_us: i.rttvar_us,
            cwnd: i.cwnd,
            total_retrans: i.total_retrans,
            delivery_rate: i.delivery_rate,
            bytes_acked: i.bytes_acked,
        }
    }
}

/// Reads `TCP_INFO` of a connected TCP socket.
pub(crate) fn read(fd: RawFd) -> io::Result<TcpInfo> {
    read_for_sender(fd).map(|view| view.info)
}

/// `TCP_INFO` with what only the sending side uses: the bytes the kernel holds unsent
/// (`tcpi_notsent_bytes`: what the scheduler counts as queue ahead of a new record) and the
/// segment size (`tcpi_snd_mss`: with the congestion window, what TCP may have in flight).
pub(crate) struct SenderView {
    pub(crate) info: TcpInfo,
    pub(crate) unsent: u32,
    pub(crate) mss: u32,
}

/// Reads `TCP_INFO` of a connected TCP socket for the session's sender ([`SenderView`]).
#[cfg(target_os = "linux")]
pub(crate) fn read_for_sender(fd: RawFd) -> io::Result<SenderView> {
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
    let tcp = TcpInfo {
        rtt_us: info.tcpi_rtt,
        rttvar_us: info.tcpi_rttvar,
        cwnd: info.tcpi_snd_cwnd,
        total_retrans: info.tcpi_total_retrans,
        delivery_rate: info.tcpi_delivery_rate,
        bytes_acked: info.tcpi_bytes_acked,
    };
    Ok(SenderView { info: tcp, unsent: info.tcpi_notsent_bytes, mss: info.tcpi_snd_mss })
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn read_for_sender(_fd: RawFd) -> io::Result<SenderView> {
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
        assert_eq!(TcpInfo::from(PeerTcpInfo::from(info)), info, "the wire form carries every field");
    }
}
