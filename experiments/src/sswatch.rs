//! Watching one TCP socket from outside with `ss -tin` (iproute2) in a namespace: whether it
//! still exists and its retransmission state (`rto`, `backoff`). Used to show *when* the kernel
//! gave up on a blackholed connection (TCP_USER_TIMEOUT), separately from when data resumed.

use std::net::IpAddr;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tcpls_netem::{Side, Topology};

/// One look at the socket.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// `ss` ran between these instants (it takes milliseconds to tens of milliseconds through
    /// `ip netns exec`), so it saw the socket's state at some point in between.
    pub started: Instant,
    pub at: Instant,
    /// An established socket towards the destination exists.
    pub present: bool,
    pub rto_ms: Option<f64>,
    pub backoff: Option<u32>,
}

/// A background sampler; [`SocketWatch::finish`] returns the samples.
pub struct SocketWatch {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Vec<Sample>>,
}

impl SocketWatch {
    /// Samples the established TCP sockets towards `dst` in namespace `side` every `every`.
    pub fn start(topo: &Topology, side: Side, dst: IpAddr, every: Duration) -> SocketWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let mut cmd = topo.command(side, "ss");
        cmd.args(["-tin", "state", "established", "dst"]).arg(dst.to_string()).stdin(Stdio::null());
        let thread = std::thread::spawn(move || {
            let mut samples = Vec::new();
            while !s.load(Ordering::Relaxed) {
                let started = Instant::now();
                if let Ok(out) = cmd.output() {
                    samples.push(parse(started, Instant::now(), &String::from_utf8_lossy(&out.stdout)));
                }
                std::thread::sleep(every);
            }
            samples
        });
        SocketWatch { stop, thread }
    }

    pub fn finish(self) -> Vec<Sample> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// Parses `ss -tin` output (header, then a line with addresses and a line of details per socket).
fn parse(started: Instant, at: Instant, out: &str) -> Sample {
    let present = out.lines().skip(1).any(|l| !l.starts_with(char::is_whitespace) && !l.trim().is_empty());
    let field = |name: &str| {
        out.split_whitespace().find_map(|w| w.strip_prefix(name)).map(|v| v.split('/').next().unwrap_or(v).to_string())
    };
    Sample {
        started,
        at,
        present,
        rto_ms: field("rto:").and_then(|v| v.parse().ok()),
        backoff: field("backoff:").and_then(|v| v.parse().ok()),
    }
}

/// What the samples say about an outage at `event`.
#[derive(Debug, Clone, Copy)]
pub struct Verdict {
    /// The RTO in force just before the outage.
    pub rto_before_ms: Option<f64>,
    /// The socket disappeared between these instants (last sample that began while it was
    /// there, end of the first sample without it).
    pub gone_between: Option<(Instant, Instant)>,
    /// Largest retransmission backoff seen after the outage.
    pub max_backoff: u32,
}

/// Summarizes samples around an outage at `event`.
pub fn summarize(samples: &[Sample], event: Instant) -> Verdict {
    let rto_before_ms = samples.iter().filter(|s| s.at <= event && s.present).filter_map(|s| s.rto_ms).next_back();
    let first_gone = samples.iter().position(|s| s.started > event && !s.present);
    let gone_between = first_gone.map(|i| {
        let lo = samples[..i].iter().rev().find(|s| s.present).map_or(event, |s| s.started.max(event));
        (lo, samples[i].at)
    });
    let max_backoff = samples
        .iter()
        .filter(|s| s.started > event && gone_between.is_none_or(|(_, hi)| s.at < hi))
        .filter_map(|s| s.backoff)
        .max()
        .unwrap_or(0);
    Verdict { rto_before_ms, gone_between, max_backoff }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ss_output() {
        let out = "Recv-Q Send-Q Local Address:Port Peer Address:Port Process\n\
                   0 1000 10.1.2.2:4443 10.1.1.2:50000\n\
                   \t cubic wscale:7,7 rto:476 backoff:1 rtt:66.2/10 retrans:1/3 lastack:300\n";
        let s = parse(Instant::now(), Instant::now(), out);
        assert!(s.present);
        assert_eq!(s.rto_ms, Some(476.0));
        assert_eq!(s.backoff, Some(1));
        let empty =
            parse(Instant::now(), Instant::now(), "Recv-Q Send-Q Local Address:Port Peer Address:Port Process\n");
        assert!(!empty.present && empty.rto_ms.is_none());
    }
}
