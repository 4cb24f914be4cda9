//! Killing live TCP connections from outside the process under test (`ss -K`: the kernel
//! aborts them with an RST, as a middlebox or a crashed peer would), for failover tests.

use std::process::Command;

/// Whether `ss -K` can kill sockets here: it needs root (CAP_NET_ADMIN; without it `ss -K`
/// silently kills nothing) and a kernel with INET_DIAG_DESTROY. The error says which is
/// missing, for the test's `SKIPPED:` line.
pub fn can_kill_sockets() -> Result<(), String> {
    let out = Command::new("id").arg("-u").output().map_err(|e| format!("cannot run id: {e}"))?;
    if String::from_utf8_lossy(&out.stdout).trim() != "0" {
        return Err("not root: ss -K needs CAP_NET_ADMIN".into());
    }
    // A harmless probe: destroy sockets to an address nothing uses (TEST-NET-1).
    let out = Command::new("ss")
        .args(["-K", "dst", "192.0.2.1"])
        .output()
        .map_err(|e| format!("cannot run ss (install iproute2): {e}"))?;
    if !out.status.success() {
        return Err(format!("ss -K failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(())
}

/// Kills (RST) the TCP sockets of this host to 127.0.0.1:`port`; returns how many `ss` listed.
pub fn kill_sockets_to_port(port: u16) -> Result<usize, String> {
    let filter = format!("dport = :{port}");
    let out = Command::new("ss")
        .args(["-K", "-t", "dst", "127.0.0.1", &filter])
        .output()
        .map_err(|e| format!("cannot run ss (install iproute2): {e}"))?;
    if !out.status.success() {
        return Err(format!("ss -K: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).lines().filter(|l| l.contains(&format!(":{port}"))).count())
}
