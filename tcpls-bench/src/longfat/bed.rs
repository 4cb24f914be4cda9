//! The long fat path: a one-path `tcpls-netem` topology (client and server namespaces joined
//! by a router namespace that emulates rate, delay and a drop-tail queue each way), whose end
//! namespaces get TCP buffers large enough for the path's bandwidth-delay product and the
//! chosen congestion control. The benchmark's two processes run in those namespaces.

use std::net::IpAddr;

use tcpls_netem::{Dir, LinkStats, PathSpec, Side, Topology};

/// What the path and the ends' TCP look like.
#[derive(Debug, Clone)]
pub struct PathConfig {
    pub rate_mbps: f64,
    pub delay_ms: f64,
    pub queue_packets: usize,
    /// Maximum of `net.ipv4.tcp_rmem` and `net.ipv4.tcp_wmem` in both end namespaces.
    pub buffer_max: u64,
    /// TCP congestion control of the sender's sockets (`TCP_CONGESTION`): a namespace cannot
    /// make an algorithm its default unless `net.ipv4.tcp_allowed_congestion_control` of the
    /// host lists it, a root process can set it on its sockets.
    pub congestion_control: String,
}

/// The per-namespace sysctls set on both ends, as (key, value): buffers the kernel's
/// autotuning may grow to `buffer_max`; and no saved TCP metrics, so that a transfer does not
/// start with the ssthresh or RTT the previous one left in the route cache (each protocol
/// would otherwise inherit what ran before it). The host's own settings are not touched.
pub fn end_sysctls(cfg: &PathConfig) -> Vec<(&'static str, String)> {
    vec![
        ("net.ipv4.tcp_rmem", format!("4096 131072 {}", cfg.buffer_max)),
        ("net.ipv4.tcp_wmem", format!("4096 16384 {}", cfg.buffer_max)),
        ("net.ipv4.tcp_no_metrics_save", "1".to_string()),
    ]
}

pub struct Bed {
    topo: Topology,
    server: IpAddr,
}

fn sysctl_path(key: &str) -> String {
    format!("/proc/sys/{}", key.replace('.', "/"))
}

/// Writes the sysctls in the calling thread's network namespace and reads them back.
fn apply_sysctls(sysctls: &[(&'static str, String)]) -> Result<(), String> {
    for (key, value) in sysctls {
        let path = sysctl_path(key);
        std::fs::write(&path, value).map_err(|e| format!("cannot set {key} = {value}: {e}"))?;
        let read = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {key}: {e}"))?;
        let normalized: Vec<&str> = read.split_whitespace().collect();
        if normalized != value.split_whitespace().collect::<Vec<_>>() {
            return Err(format!("{key} is {:?} after setting it to {value:?}", read.trim()));
        }
    }
    Ok(())
}

impl Bed {
    /// Why the test bed cannot run here (not root, no namespaces or TUN), if it cannot.
    pub fn unsupported() -> Option<String> {
        tcpls_netem::check_support().err()
    }

    pub fn build(cfg: &PathConfig) -> Result<Bed, String> {
        let available = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
            .map_err(|e| format!("cannot read the available congestion controls: {e}"))?;
        if !available.split_whitespace().any(|cc| cc == cfg.congestion_control) {
            return Err(format!(
                "congestion control {:?} is not available (available: {}; `modprobe tcp_{}` may load it)",
                cfg.congestion_control,
                available.trim(),
                cfg.congestion_control
            ));
        }
        let spec = PathSpec {
            delay_ms: cfg.delay_ms,
            rate_mbps: cfg.rate_mbps,
            queue_packets: cfg.queue_packets,
            ..PathSpec::default()
        };
        let topo = Topology::builder().path(spec).build().map_err(|e| format!("cannot build the topology: {e}"))?;
        let sysctls = end_sysctls(cfg);
        for side in [Side::Client, Side::Server] {
            let s = sysctls.clone();
            topo.run_in(side, move || apply_sysctls(&s)).map_err(|e| format!("cannot enter a namespace: {e}"))??;
        }
        let server = topo.path(0).info().server_addr().ok_or("the path has no server address")?;
        Ok(Bed { topo, server })
    }

    /// The server's address on the path.
    pub fn server(&self) -> IpAddr {
        self.server
    }

    /// The command prefix that runs a program in a namespace (for `compare::spawn_side`).
    pub fn wrap(&self, side: Side) -> String {
        format!("ip netns exec {}", self.topo.ns_name(side))
    }

    /// One-way delay of both directions, from now on (packets already queued keep theirs).
    pub fn set_delay_ms(&self, ms: f64) {
        self.topo.path(0).set_delay_ms(ms);
    }

    /// The emulator's counters of the data direction (client to server).
    pub fn data_direction(&self) -> LinkStats {
        self.topo.path(0).stats(Dir::ClientToServer)
    }
}
