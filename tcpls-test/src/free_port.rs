//! Ports for test processes that must be told a port before they start (a server of the CLI
//! whose address other commands name): free now, and unlikely to be taken before the process
//! binds it. Callers still retry the start when the bind fails ("Address already in use").
//!
//! A port from `bind(port 0)` is an ephemeral one: the kernel hands the same range out to every
//! outgoing connection's local side and to every other `bind(0)`, so on a busy machine one of
//! them can take it between the probe and the server's bind. These ports are drawn at random
//! below that range instead, where the kernel never picks on its own, and are checked free on
//! the wildcard address too (a server that binds 0.0.0.0 needs the port free on every address).

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener};
use std::sync::Mutex;

use tcpls_proto::sync::LockExt;

use crate::Rng;

/// A free TCP port on `ip` and on the wildcard address of its family, never the same twice in
/// one process.
pub fn free_port(ip: IpAddr) -> u16 {
    static GIVEN: Mutex<Option<(Rng, HashSet<u16>)>> = Mutex::new(None);
    let (low, high) = non_ephemeral_range();
    let mut state = GIVEN.lock_unpoisoned();
    let (rng, given) = state.get_or_insert_with(|| (Rng::new(seed()), HashSet::new()));
    for _ in 0..1000 {
        let port = low + rng.below(usize::from(high - low)) as u16;
        if given.contains(&port) {
            continue;
        }
        let wildcard: IpAddr = if ip.is_ipv4() { Ipv4Addr::UNSPECIFIED.into() } else { Ipv6Addr::UNSPECIFIED.into() };
        // Both binds at once: free on `ip` and on the wildcard address.
        let free = TcpListener::bind(SocketAddr::new(wildcard, port)).is_ok()
            && TcpListener::bind(SocketAddr::new(ip, port)).is_ok();
        if free {
            given.insert(port);
            return port;
        }
    }
    // Everything tried was busy: fall back to an ephemeral port from the kernel.
    TcpListener::bind(SocketAddr::new(ip, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("cannot bind {ip}:0: {e}"))
}

/// Ports below the kernel's ephemeral range (`ip_local_port_range`, 32768-60999 by default) and
/// above the well-known and commonly configured ones.
fn non_ephemeral_range() -> (u16, u16) {
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|n| n.parse::<u16>().ok()))
        .unwrap_or(32768);
    if ephemeral_low > 20_000 {
        (12_000, ephemeral_low)
    } else {
        // An unusual configuration: any unprivileged port, the retries do the rest.
        (1024, 65_000)
    }
}

/// Different in every process (several test binaries run at once).
fn seed() -> u64 {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    (nanos as u64) ^ (u64::from(std::process::id()) << 32)
}
