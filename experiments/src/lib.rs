//! The seed papers' experiments, reproduced in the `tcpls-netem` namespace test bed, the master
//! thesis's (`streams`, `rtt_probe`, `flow_limit`, `tunnel`; the CPU-bound ones on loopback or
//! on one host), and the middlebox traversal report. Each experiment writes `DIR/NAME.csv` (time series),
//! `DIR/NAME.png` (plot) and `DIR/NAME.json` (summary); see docs/EXPERIMENTS.md.
//!
//! Building blocks: [`tcpls_run`] and [`mptcp_run`] (download servers and clients inside the
//! namespaces), [`tls_run`] (plain TLS over TCP), [`pattern`] (checked payload), [`trace`]
//! (receive logs → goodput series, recovery times), [`plot`] and [`output`].

pub mod aggregation;
pub mod bonding;
pub mod failover_outage;
pub mod failover_periodic;
pub mod flow_limit;
pub mod hol_blocking;
pub mod loopback;
pub mod middleboxes;
pub mod migration;
pub mod mobility;
pub mod mptcp_run;
pub mod output;
/// The transfers' payload, the same as `tcpls perf`'s.
pub use tcpls_pattern as pattern;
pub mod pki;
pub mod plot;
pub mod rtt_probe;
pub mod silent_path;
pub mod sswatch;
pub mod streams;
pub mod streams_records;
pub mod tcpls_run;
pub mod tls_run;
pub mod trace;
pub mod trace_plot;
pub mod tunnel;
pub mod tunnel_bed;

use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Options shared by every experiment.
#[derive(Debug, Clone)]
pub struct Opts {
    /// Shortened run (well under a minute) for CI and quick checks.
    pub quick: bool,
    /// Output directory (created if missing).
    pub out: PathBuf,
}

/// What an experiment returns: its JSON summary (also written to `DIR/NAME.json`).
pub type Summary = serde_json::Value;

/// Goodput series resolution (seconds), as the papers' figures.
pub const BIN: f64 = 0.1;

/// Every emulated path's drop-tail queue, in packets: about twice the bandwidth-delay product of
/// the papers' paths (25 Mbit/s x 20 ms = 42 packets), so that queues do not inflate RTTs (and
/// RTOs) to seconds as the emulator's default 1000 packets would at these rates.
pub const QUEUE_PACKETS: usize = 100;

/// A path of the experiments: `delay_ms` one way, `rate_mbps`, [`QUEUE_PACKETS`].
pub fn path(delay_ms: f64, rate_mbps: f64) -> tcpls_netem::PathSpec {
    tcpls_netem::PathSpec { queue_packets: QUEUE_PACKETS, ..tcpls_netem::PathSpec::new(delay_ms, rate_mbps) }
}

/// Waits for a client's "transfer started" signal.
pub fn wait_started(rx: &mpsc::Receiver<Instant>) -> Result<Instant, String> {
    rx.recv_timeout(Duration::from_secs(30)).map_err(|_| "the transfer did not start within 30 s".to_string())
}

/// Sleeps until `t0 + secs`.
pub fn sleep_until(t0: Instant, secs: f64) {
    let at = t0 + Duration::from_secs_f64(secs.max(0.0));
    let now = Instant::now();
    if at > now {
        std::thread::sleep(at - now);
    }
}

/// Builds a topology or explains why not.
pub fn topology(paths: Vec<tcpls_netem::PathSpec>) -> Result<tcpls_netem::Topology, String> {
    tcpls_netem::check_support().map_err(|e| format!("the namespace test bed cannot run here: {e}"))?;
    tcpls_netem::Topology::builder().paths(paths).build().map_err(|e| format!("cannot build the topology: {e}"))
}

/// Progress line on stderr (experiments take a while).
pub fn note(msg: &str) {
    eprintln!("experiments: {msg}");
}

/// The TCP congestion control a namespace uses by default (`net.ipv4.tcp_congestion_control`),
/// for the summaries: it shapes queues and recovery.
pub fn congestion_control(topo: &tcpls_netem::Topology, side: tcpls_netem::Side) -> String {
    topo.run_in(side, || std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control"))
        .ok()
        .and_then(Result::ok)
        .map_or_else(|| "unknown".into(), |s| s.trim().to_string())
}

/// The host's default TCP congestion control; new namespaces start with it (checked from inside
/// the server namespace by failover-outage).
pub fn host_congestion_control() -> String {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
        .map_or_else(|_| "unknown".into(), |s| s.trim().to_string())
}
