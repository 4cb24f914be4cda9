//! `tcpls-netem`: build an emulated multipath topology in network namespaces (needs root).
//!
//! ```text
//! tcpls-netem up --paths 2 --delay 20 --rate 50        # runs until Ctrl-C / SIGTERM
//! tcpls-netem set 0 --blackhole on                      # talks to the running `up`
//! tcpls-netem set 1 --down ; tcpls-netem set 1 --up
//! tcpls-netem cleanup [--all]
//! ```

use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use tcpls_netem::{control, PathSpec, Topology};

#[derive(Parser)]
#[command(about = "Network-namespace test bed with a TUN-based link emulator")]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Build a topology and run the emulator until interrupted.
    Up {
        /// Number of disjoint paths.
        #[arg(long, default_value_t = 2)]
        paths: usize,
        /// One-way delay in ms (each direction). Comma-separated for per-path values.
        #[arg(long, default_value = "0", value_delimiter = ',')]
        delay: Vec<f64>,
        /// Rate in Mbit/s of IP bytes, 0 = unlimited. Comma-separated for per-path values.
        #[arg(long, default_value = "0", value_delimiter = ',')]
        rate: Vec<f64>,
        /// Queue size in packets. Comma-separated for per-path values.
        #[arg(long, default_value = "1000", value_delimiter = ',')]
        queue: Vec<usize>,
        /// Random loss probability in [0,1]. Comma-separated for per-path values.
        #[arg(long, default_value = "0", value_delimiter = ',')]
        loss: Vec<f64>,
        /// Also give every path IPv6 addresses.
        #[arg(long)]
        ipv6: bool,
        /// No IPv4 addresses (requires --ipv6).
        #[arg(long)]
        no_ipv4: bool,
        /// Configure MPTCP endpoints (subflow) on the client for paths 1.. and limits on both sides.
        #[arg(long)]
        mptcp: bool,
    },
    /// Change a running topology (started by `up`).
    Set {
        /// Path index.
        path: usize,
        /// Topology prefix (default: the only running one).
        #[arg(long)]
        prefix: Option<String>,
        /// Direction: both, c2s, s2c.
        #[arg(long, default_value = "both")]
        dir: String,
        #[arg(long, value_parser = ["on", "off"])]
        blackhole: Option<String>,
        /// Take the path down.
        #[arg(long, conflicts_with = "up")]
        down: bool,
        /// Bring the path up again.
        #[arg(long)]
        up: bool,
        /// Rate in Mbit/s (0 = unlimited).
        #[arg(long)]
        rate: Option<f64>,
        /// One-way delay in ms.
        #[arg(long)]
        delay: Option<f64>,
        #[arg(long)]
        loss: Option<f64>,
        #[arg(long)]
        queue: Option<usize>,
    },
    /// Print the counters of a running topology.
    Stats {
        #[arg(long)]
        prefix: Option<String>,
    },
    /// List namespaces created by tcpls-netem and running topologies.
    List,
    /// Remove leftovers of dead runs (or everything with --all, or one --prefix).
    Cleanup {
        #[arg(long)]
        all: bool,
        #[arg(long)]
        prefix: Option<String>,
    },
}

fn pick<T: Copy>(v: &[T], i: usize, default: T) -> T {
    v.get(i).or(v.last()).copied().unwrap_or(default)
}

fn running_prefix(prefix: Option<String>) -> Result<String, String> {
    if let Some(p) = prefix {
        return Ok(p);
    }
    let all = control::list_sockets();
    match all.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err("no running topology (start one with `tcpls-netem up`)".into()),
        _ => Err(format!("several running topologies, pick one with --prefix: {}", all.join(" "))),
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tcpls-netem: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<(), String> {
    match args.cmd {
        Cmd::Up { paths, delay, rate, queue, loss, ipv6, no_ipv4, mptcp } => {
            tcpls_netem::check_support()?;
            // Block termination signals before any thread exists, then wait for them below.
            tcpls_netem::block_termination_signals();
            let specs = (0..paths)
                .map(|i| PathSpec {
                    delay_ms: pick(&delay, i, 0.0),
                    jitter_ms: 0.0,
                    rate_mbps: pick(&rate, i, 0.0),
                    queue_packets: pick(&queue, i, 1000),
                    loss: pick(&loss, i, 0.0),
                    ipv4: !no_ipv4,
                    ipv6,
                })
                .collect();
            let topo = Arc::new(Topology::builder().paths(specs).build().map_err(|e| e.to_string())?);
            if mptcp {
                topo.mptcp_setup(false).map_err(|e| e.to_string())?;
            }
            let ctl = control::ControlServer::start(topo.clone()).map_err(|e| e.to_string())?;
            print!("{}", topo.describe());
            println!("  control socket: {}", control::socket_path(topo.prefix()).display());
            println!(
                "  run programs with: ip netns exec {} <prog>   (server: ip netns exec {} <prog>)",
                topo.ns_name(tcpls_netem::Side::Client),
                topo.ns_name(tcpls_netem::Side::Server)
            );
            println!("running; Ctrl-C to tear down");
            let sig = tcpls_netem::wait_termination_signal();
            eprintln!("signal {sig}, cleaning up");
            drop(ctl);
            match Arc::try_unwrap(topo) {
                Ok(t) => drop(t),
                Err(_) => return Err("topology still referenced; namespaces removed by watchdog".into()),
            }
            Ok(())
        }
        Cmd::Set { path, prefix, dir, blackhole, down, up, rate, delay, loss, queue } => {
            let prefix = running_prefix(prefix)?;
            let mut cmds = Vec::new();
            if let Some(b) = blackhole {
                cmds.push(format!("set {path} {dir} blackhole {b}"));
            }
            if down {
                cmds.push(format!("set {path} both up off"));
            }
            if up {
                cmds.push(format!("set {path} both up on"));
            }
            if let Some(v) = rate {
                cmds.push(format!("set {path} {dir} rate {v}"));
            }
            if let Some(v) = delay {
                cmds.push(format!("set {path} {dir} delay {v}"));
            }
            if let Some(v) = loss {
                cmds.push(format!("set {path} {dir} loss {v}"));
            }
            if let Some(v) = queue {
                cmds.push(format!("set {path} {dir} queue {v}"));
            }
            if cmds.is_empty() {
                return Err("nothing to set".into());
            }
            for c in cmds {
                let reply = control::send(&prefix, &c).map_err(|e| format!("{prefix}: {e}"))?;
                print!("{reply}");
                if !reply.starts_with("ok") {
                    return Err("command failed".into());
                }
            }
            Ok(())
        }
        Cmd::Stats { prefix } => {
            let prefix = running_prefix(prefix)?;
            print!("{}", control::send(&prefix, "stats").map_err(|e| e.to_string())?);
            Ok(())
        }
        Cmd::List => {
            for n in tcpls_netem::list_namespaces() {
                println!("netns {n}");
            }
            for p in control::list_sockets() {
                println!("running {p} ({})", control::socket_path(&p).display());
            }
            Ok(())
        }
        Cmd::Cleanup { all, prefix } => {
            let removed = match (all, prefix) {
                (true, _) => tcpls_netem::cleanup_all(),
                (false, Some(p)) => tcpls_netem::cleanup(&p),
                (false, None) => tcpls_netem::cleanup_stale(),
            };
            for n in &removed {
                println!("removed netns {n}");
            }
            // Control sockets of dead runs.
            for p in control::list_sockets() {
                if control::send(&p, "describe").is_err() {
                    let _ = std::fs::remove_file(control::socket_path(&p));
                    println!("removed stale socket of {p}");
                }
            }
            println!("{} namespace(s) removed", removed.len());
            Ok(())
        }
    }
}
