//! TCP socket options the extension frames act on: `TCP_CONGESTION` (read and set) and
//! `TCP_USER_TIMEOUT` (set), on descriptors the session's driver owns; and `TCP_NOTSENT_LOWAT`
//! (set, [`crate::Session::set_notsent_lowat`]) for late multiplexing.
//!
//! Unsafe like `tcp_info.rs`: plain `getsockopt` / `setsockopt` calls on live descriptors.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::RawFd;

/// The socket's TCP congestion control (e.g. `cubic`).
#[cfg(target_os = "linux")]
pub(crate) fn congestion(fd: RawFd) -> io::Result<String> {
    let mut buf = [0u8; 32];
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: `buf` is writable for `len` bytes; the kernel writes at most that many and
    // stores the count in `len`. `fd` is open (the driver removes it from its table, under the
    // session lock, before closing it).
    let rc =
        unsafe { libc::getsockopt(fd, libc::IPPROTO_TCP, libc::TCP_CONGESTION, buf.as_mut_ptr().cast(), &mut len) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let bytes = &buf[..(len as usize).min(buf.len())];
    let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
    Ok(String::from_utf8_lossy(&bytes[..end]).into_owned())
}

/// Switches the socket to congestion control `name` (the kernel must have it loaded and, for
/// unprivileged processes, list it in `net.ipv4.tcp_allowed_congestion_control`).
#[cfg(target_os = "linux")]
pub(crate) fn set_congestion(fd: RawFd, name: &str) -> io::Result<()> {
    // SAFETY: `name` is readable for `name.len()` bytes; see `congestion` for `fd`.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_ptr().cast(),
            name.len() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// TCP_USER_TIMEOUT in milliseconds (0: the kernel's default).
#[cfg(target_os = "linux")]
pub(crate) fn set_user_timeout(fd: RawFd, ms: u32) -> io::Result<()> {
    let value: libc::c_uint = ms;
    // SAFETY: `value` is a live `c_uint`, passed with its size; see `congestion` for `fd`.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_USER_TIMEOUT,
            (&value as *const libc::c_uint).cast(),
            std::mem::size_of::<libc::c_uint>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// TCP_USER_TIMEOUT in milliseconds.
#[cfg(target_os = "linux")]
pub(crate) fn user_timeout(fd: RawFd) -> io::Result<u32> {
    let mut value: libc::c_uint = 0;
    let mut len = std::mem::size_of::<libc::c_uint>() as libc::socklen_t;
    // SAFETY: `value` is a writable `c_uint` of `len` bytes; see `congestion` for `fd`.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_USER_TIMEOUT,
            (&mut value as *mut libc::c_uint).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(value)
}

/// TCP_NOTSENT_LOWAT: the socket counts as writable, and accepts more bytes, only while fewer
/// than `bytes` of its queue are unsent. The rest waits in the session, where the scheduler
/// still decides what goes next (a small request is not stuck behind megabytes already
/// committed to the kernel).
#[cfg(target_os = "linux")]
pub(crate) fn set_notsent_lowat(fd: RawFd, bytes: u32) -> io::Result<()> {
    let value: libc::c_int = bytes.min(i32::MAX as u32) as libc::c_int;
    // SAFETY: `value` is a live `c_int`, passed with its size; see `congestion` for `fd`.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_NOTSENT_LOWAT,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn set_notsent_lowat(_fd: RawFd, _bytes: u32) -> io::Result<()> {
    Err(io::Error::new(io::ErrorKind::Unsupported, "TCP_NOTSENT_LOWAT is Linux only here"))
}

/// TCP Fast Open, client side (`TCP_FASTOPEN_CONNECT`, Linux ≥ 4.11): set before `connect`,
/// which then returns at once; the first write goes in the SYN when a Fast Open cookie for the
/// server is cached (otherwise the SYN asks for one and the data follows the handshake).
#[cfg(target_os = "linux")]
pub(crate) fn set_fast_open_connect(fd: RawFd) -> io::Result<()> {
    set_int(fd, libc::TCP_FASTOPEN_CONNECT, 1)
}

/// TCP Fast Open, server side (`TCP_FASTOPEN` on the listening socket): at most `queue`
/// connections whose SYN data was accepted wait for their handshake to complete.
#[cfg(target_os = "linux")]
pub(crate) fn set_fast_open(fd: RawFd, queue: u32) -> io::Result<()> {
    set_int(fd, libc::TCP_FASTOPEN, queue.min(i32::MAX as u32) as libc::c_int)
}

/// `TCP_DEFER_ACCEPT` on a listening socket: a connection is handed to `accept` once its
/// first data (the ClientHello) arrived, or after about `secs` seconds of silence.
#[cfg(target_os = "linux")]
pub(crate) fn set_defer_accept(fd: RawFd, secs: u32) -> io::Result<()> {
    set_int(fd, libc::TCP_DEFER_ACCEPT, secs.min(i32::MAX as u32) as libc::c_int)
}

/// Writes what the socket `fd` takes now, without blocking and without SIGPIPE: the bytes
/// written, or `WouldBlock` when its buffer is full.
pub(crate) fn send_nonblocking(fd: RawFd, data: &[u8]) -> io::Result<usize> {
    #[cfg(target_os = "linux")]
    let flags = libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL;
    #[cfg(not(target_os = "linux"))]
    let flags = libc::MSG_DONTWAIT;
    // SAFETY: `data` is a live slice and its length is passed with it; `fd` is a socket that
    // the caller keeps open for the call (its owner closes it only under the same lock).
    let n = unsafe { libc::send(fd, data.as_ptr().cast(), data.len(), flags) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

#[cfg(target_os = "linux")]
fn set_int(fd: RawFd, option: libc::c_int, value: libc::c_int) -> io::Result<()> {
    // SAFETY: `value` is a live `c_int`, passed with its size; `fd` is a socket the caller
    // owns and keeps open for the call.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            option,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn set_fast_open_connect(_fd: RawFd) -> io::Result<()> {
    Err(io::Error::new(io::ErrorKind::Unsupported, "TCP Fast Open is supported on Linux only here"))
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn set_defer_accept(_fd: RawFd, _secs: u32) -> io::Result<()> {
    Err(io::Error::new(io::ErrorKind::Unsupported, "TCP_DEFER_ACCEPT is supported on Linux only here"))
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn set_fast_open(_fd: RawFd, _queue: u32) -> io::Result<()> {
    Err(io::Error::new(io::ErrorKind::Unsupported, "TCP Fast Open is supported on Linux only here"))
}

#[cfg(not(target_os = "linux"))]
fn unsupported<T>() -> io::Result<T> {
    Err(io::Error::new(io::ErrorKind::Unsupported, "TCP_CONGESTION and TCP_USER_TIMEOUT are Linux only"))
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn congestion(_fd: RawFd) -> io::Result<String> {
    unsupported()
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn set_congestion(_fd: RawFd, _name: &str) -> io::Result<()> {
    unsupported()
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn set_user_timeout(_fd: RawFd, _ms: u32) -> io::Result<()> {
    unsupported()
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn user_timeout(_fd: RawFd) -> io::Result<u32> {
    unsupported()
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn congestion_control_and_user_timeout_round_trip() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let fd = client.as_raw_fd();
        assert!(!congestion(fd).unwrap().is_empty());
        set_congestion(fd, "reno").unwrap();
        assert_eq!(congestion(fd).unwrap(), "reno");
        assert!(set_congestion(fd, "no-such-cc").is_err());
        set_user_timeout(fd, 1234).unwrap();
        assert_eq!(user_timeout(fd).unwrap(), 1234);
        set_notsent_lowat(fd, 16384).unwrap();
    }
}
