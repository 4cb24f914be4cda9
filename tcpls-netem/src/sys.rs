//! The only module of this crate that uses `unsafe`: thin, audited wrappers over a handful of
//! libc calls that have no safe equivalent in `std` (TUN ioctl, `setns`, `poll`, `prctl`,
//! signal masks, `geteuid`, an MPTCP `getsockopt`).
//!
//! Every `unsafe` block only passes pointers to properly initialised, correctly sized local
//! values that outlive the call, and every file descriptor passed is owned by a live Rust object.
#![allow(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::time::Duration;

/// Create (or attach to) the TUN interface `name` in the network namespace of the calling
/// thread, in `IFF_TUN | IFF_NO_PI` mode (reads/writes are bare IP packets).
pub fn open_tun(name: &str) -> io::Result<File> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("bad interface name {name:?}")));
    }
    let file = OpenOptions::new().read(true).write(true).custom_flags(libc::O_CLOEXEC).open("/dev/net/tun")?;
    // SAFETY: `ifreq` is a plain C struct/union for which all-zero bytes is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *dst = src as libc::c_char;
    }
    req.ifr_ifru.ifru_flags = (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short;
    // SAFETY: the fd is open (owned by `file`), TUNSETIFF takes a `struct ifreq *`, and `req`
    // is a valid, NUL-terminated (zeroed tail, name shorter than IFNAMSIZ) ifreq living on the stack.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), libc::TUNSETIFF, &mut req as *mut libc::ifreq) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(file)
}

/// Move the calling thread into the network namespace referred to by `ns` (an open
/// `/run/netns/NAME` or `/proc/PID/ns/net` file). Only this thread is affected.
pub fn setns_net(ns: &File) -> io::Result<()> {
    // SAFETY: plain syscall on an fd owned by `ns`; no memory is passed.
    let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Wait until `fd` is readable or `timeout` elapses. Returns true if readable.
pub fn poll_readable(fd: RawFd, timeout: Duration) -> io::Result<bool> {
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: `pfd` is a valid pollfd on the stack and we pass nfds = 1.
    let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(e);
    }
    Ok(rc > 0 && pfd.revents & (libc::POLLIN | libc::POLLERR | libc::POLLHUP) != 0)
}

/// Reduce the timer slack of the calling thread (default 50 µs) so that sleeps wake up on time.
pub fn set_timer_slack_ns(ns: u64) {
    // SAFETY: PR_SET_TIMERSLACK takes one unsigned long argument; no memory is passed.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong);
    }
}

/// Effective user id of this process.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

fn term_sigset() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset/sigaddset initialise it fully before use.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGHUP);
        set
    }
}

/// Block SIGINT/SIGTERM/SIGHUP in the calling thread (and in threads it spawns afterwards), so
/// that [`wait_termination_signal`] can receive them synchronously. Call early in `main`.
/// (Child processes spawned with `std::process::Command` get an empty mask again.)
pub fn block_termination_signals() {
    let set = term_sigset();
    // SAFETY: `set` is an initialised sigset; the old mask is not requested (null).
    unsafe {
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// Wait for SIGINT/SIGTERM/SIGHUP (which must have been blocked first). Returns the signal number.
pub fn wait_termination_signal() -> i32 {
    let set = term_sigset();
    let mut sig: libc::c_int = 0;
    // SAFETY: both pointers refer to valid stack values.
    unsafe {
        libc::sigwait(&set, &mut sig);
    }
    sig
}

const SOL_MPTCP: libc::c_int = 284;
const MPTCP_INFO: libc::c_int = 1;

/// Number of additional subflows of an MPTCP socket (`mptcp_info.mptcpi_subflows`), if the
/// kernel reports it.
pub fn mptcp_subflows(fd: RawFd) -> Option<u8> {
    let mut buf = [0u8; 256];
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: `buf` is a writable buffer of `len` bytes and `len` points to its size.
    let rc = unsafe { libc::getsockopt(fd, SOL_MPTCP, MPTCP_INFO, buf.as_mut_ptr().cast(), &mut len) };
    if rc < 0 || len == 0 {
        return None;
    }
    Some(buf[0])
}

/// Try to give the calling thread the `SCHED_FIFO` real-time policy at `priority` (root only).
/// Returns false if the kernel refused (then the thread keeps its normal policy).
pub fn set_realtime(priority: i32) -> bool {
    let param = libc::sched_param { sched_priority: priority };
    // SAFETY: pid 0 = the calling thread; `param` is a valid sched_param on the stack.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) == 0 }
}

/// Kernel-measured smoothed RTT and RTT variance of a TCP socket in µs (`tcp_info.tcpi_rtt`,
/// `tcpi_rttvar`, at byte offsets 68 and 72 of `struct tcp_info`).
pub fn tcp_rtt_us(fd: RawFd) -> Option<(u32, u32)> {
    let mut buf = [0u8; 256];
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: `buf` is a writable buffer of `len` bytes and `len` points to its size.
    let rc = unsafe { libc::getsockopt(fd, libc::IPPROTO_TCP, libc::TCP_INFO, buf.as_mut_ptr().cast(), &mut len) };
    if rc < 0 || (len as usize) < 76 {
        return None;
    }
    let word = |o: usize| u32::from_ne_bytes([buf[o], buf[o + 1], buf[o + 2], buf[o + 3]]);
    Some((word(68), word(72)))
}
