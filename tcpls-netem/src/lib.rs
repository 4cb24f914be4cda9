//! `tcpls-netem`: Linux network-namespace test bed for TCPLS (and MPTCP) experiments.
//!
//! * [`Topology`] builds a client namespace, a server namespace and N disjoint paths between
//!   them; each path goes through its own router namespace where a userspace, TUN-based link
//!   emulator ([`emu`]) applies one-way delay, rate (serialiser / token bucket of depth one
//!   packet), a drop-tail queue, random loss, blackhole and up/down — per direction, changeable
//!   at runtime.
//! * Everything is removed on drop; a watchdog process and [`cleanup_stale`] remove leftovers
//!   of killed runs.
//! * [`mptcp`] holds a small bulk client/server on `IPPROTO_MPTCP` sockets (binary
//!   `mptcp-peer`) and [`Topology`] has helpers for `ip mptcp` configuration.
//!
//! Needs root, `/dev/net/tun` and iproute2. Use [`check_support`] (or the
//! [`skip_unless_supported!`] macro in tests) to detect environments where it cannot run.

pub mod control;
pub mod emu;
pub mod mptcp;
mod sys;
mod topo;

pub use emu::{LinkParams, LinkStats};
pub use topo::{
    check_support, cleanup, cleanup_all, cleanup_stale, list_namespaces, run_in_netns, spawn_in_netns, Dir, Path,
    PathInfo, PathSpec, Side, Topology, TopologyBuilder, NS_PREFIX,
};

/// In a test: if the environment cannot run network-namespace tests, print
/// `SKIPPED: <reason>` to stderr and `return` from the enclosing function.
///
/// The line is written to the real stderr (not through `eprintln!`, which the test harness
/// captures and hides for passing tests), so it is visible in every `cargo test` run.
#[macro_export]
macro_rules! skip_unless_supported {
    () => {
        $crate::skip_unless_supported!(module_path!())
    };
    ($name:expr) => {
        if let Err(why) = $crate::check_support() {
            $crate::print_skipped($name, &why);
            return;
        }
    };
}

/// Print `SKIPPED: <test>: <reason>` to the process's stderr, bypassing test output capture.
pub fn print_skipped(test: &str, reason: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIPPED: {test}: {reason}");
}

/// Block SIGINT/SIGTERM/SIGHUP in the calling thread and threads spawned later (call at the
/// start of `main`), so that [`wait_termination_signal`] can receive them and the program can
/// tear down its topology cleanly.
pub fn block_termination_signals() {
    sys::block_termination_signals();
}

/// Wait for SIGINT/SIGTERM/SIGHUP (after [`block_termination_signals`]); returns the signal.
pub fn wait_termination_signal() -> i32 {
    sys::wait_termination_signal()
}

/// The kernel's smoothed RTT estimate of a TCP socket (`TCP_INFO`). Right after `connect()`
/// this is the handshake RTT (SYN → SYN/ACK), measured in the kernel and therefore free of
/// the caller's scheduling delays.
pub fn tcp_rtt(stream: &std::net::TcpStream) -> Option<std::time::Duration> {
    use std::os::fd::AsRawFd;
    sys::tcp_rtt_us(stream.as_raw_fd()).map(|(rtt, _)| std::time::Duration::from_micros(u64::from(rtt)))
}
