//! `experiments NAME [--quick] --out DIR`: see docs/EXPERIMENTS.md.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use experiments::Opts;

#[derive(Parser)]
#[command(
    about = "Reproduce the TCPLS papers' and the thesis's experiments (the namespace ones need root)",
    after_help = "Each experiment writes DIR/NAME.csv (goodput time series), DIR/NAME.png (plot) and \
DIR/NAME.json (summary, also printed). Examples:\n  \
sudo target/release/experiments aggregation --quick --out /tmp/exp\n  \
sudo target/release/experiments failover-outage --out docs/experiments\n  \
target/release/experiments streams --quick --out /tmp/exp\n\
See docs/EXPERIMENTS.md."
)]
struct Cli {
    #[command(subcommand)]
    experiment: Experiment,
    /// Shortened run for CI and quick checks.
    #[arg(long, global = true)]
    quick: bool,
    /// Output directory for NAME.csv, NAME.png and NAME.json.
    #[arg(long, global = true, default_value = "experiments-out")]
    out: std::path::PathBuf,
    /// Trace every TCPLS session of the experiment (client and server sides) into FILE, as
    /// `tcpls --trace` does (docs/OBSERVABILITY.md §4); plot it with `trace-plot`.
    #[arg(long, global = true, value_name = "FILE")]
    trace: Option<std::path::PathBuf>,
}

#[derive(Subcommand)]
enum Experiment {
    /// Paper Fig. 8: RST and blackhole on the active path, TCPLS (user timeout 250 ms) vs MPTCP (backup).
    FailoverOutage,
    /// Paper Fig. 9: 4 paths, 3 blackholed, the working one rotating every 5 s.
    FailoverPeriodic,
    /// Paper Fig. 10: application-level migration of a download, there and back (30 Mbit/s, 40/80 ms RTT).
    Migration,
    /// Paper Fig. 11 and 13: bandwidth aggregation, second path after 5 s, TCPLS (16 KiB, 1500 B records) vs MPTCP.
    Aggregation,
    /// One HTTP download over two uplinks (unequal and equal): tunnel --bond vs one path vs MPTCP vs TCP; 4 KB latency; schedulers.
    Bonding,
    /// TM3 Table 6: 4 KB object load time next to a bulk download, TCPLS streams vs one TLS/TCP connection.
    HolBlocking,
    /// TCPLS through real middleboxes (firewall, NAT, TCP proxy, TLS-terminating proxy).
    Middleboxes,
    /// Thesis Figs 3.2-3.3: goodput, CPU per GiB and decryptions per record vs number of streams (loopback: CPU, not a network).
    Streams,
    /// Thesis Fig. 4.3: 10 RTT probes on a delayed and on a lossy path, next to TCP_INFO and the configured delay.
    RttProbe,
    /// Thesis Fig. 4.9: goodput of 4 flows, rate limits on three of them after 0.3 s (loopback: CPU, not a network).
    FlowLimit,
    /// Thesis Figs 5.6-5.8: goodput, time to first byte and requests/s of TCP, TCPLS and the TCPLS tunnel (one host: CPU, not a network).
    Tunnel,
    /// Wi-Fi -> LTE (backup) handover and back, server with one address, TCPLS path manager vs MPTCP endpoints.
    Mobility,
    /// A path goes silent (dropped both ways) at 2 s of a 60 MB upload over two 50 Mbit/s paths: TCPLS loss detection vs MPTCP.
    SilentPath,
    /// Plot one session of a `tcpls --trace FILE` event trace: bytes per connection with joins,
    /// losses and failovers marked, stream progress, RTT and cwnd (docs/OBSERVABILITY.md §4).
    #[command(after_help = "Example:\n  experiments trace-plot client.jsonl -o failover-trace.png")]
    TracePlot {
        /// The trace (JSON lines written by `tcpls --trace FILE` or `tcpls::JsonLinesTrace`).
        file: std::path::PathBuf,
        /// The PNG to write.
        #[arg(short = 'o', long = "output", value_name = "PNG")]
        output: std::path::PathBuf,
        /// The session to draw (its `group_id`); default: the one that moved the most bytes.
        #[arg(long)]
        session: Option<u64>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let trace = match &cli.trace {
        Some(file) => match tcpls::JsonLinesTrace::create(file) {
            Ok(sink) => {
                let sink = std::sync::Arc::new(sink);
                tcpls::set_default_trace(sink.clone());
                Some(sink)
            }
            Err(e) => {
                eprintln!("experiments: cannot create the trace file {}: {e}", file.display());
                return ExitCode::FAILURE;
            }
        },
        None => None,
    };
    let opts = Opts { quick: cli.quick, out: cli.out };
    let result = match cli.experiment {
        Experiment::FailoverOutage => experiments::failover_outage::run(&opts),
        Experiment::FailoverPeriodic => experiments::failover_periodic::run(&opts),
        Experiment::Migration => experiments::migration::run(&opts),
        Experiment::Aggregation => experiments::aggregation::run(&opts),
        Experiment::Bonding => experiments::bonding::run(&opts),
        Experiment::HolBlocking => experiments::hol_blocking::run(&opts),
        Experiment::Middleboxes => experiments::middleboxes::run(&opts),
        Experiment::Streams => experiments::streams::run(&opts),
        Experiment::RttProbe => experiments::rtt_probe::run(&opts),
        Experiment::FlowLimit => experiments::flow_limit::run(&opts),
        Experiment::Tunnel => experiments::tunnel::run(&opts),
        Experiment::Mobility => experiments::mobility::run(&opts),
        Experiment::SilentPath => experiments::silent_path::run(&opts),
        Experiment::TracePlot { file, output, session } => experiments::trace_plot::run(&file, &output, session),
    };
    if let Some(sink) = trace {
        if let Err(e) = sink.flush() {
            eprintln!("experiments: writing the trace file: {e}");
        }
    }
    match result {
        Ok(summary) => {
            println!("{summary}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("experiments: {e}");
            ExitCode::FAILURE
        }
    }
}
