//! `tcpls-bench compare`: bulk-transfer goodput and CPU cost of TCP, TLS 1.3 (tokio-rustls) and
//! TCPLS side by side on loopback, in one invocation. `tcpls-bench join`: latency and CPU cost
//! of `Session::join` with and without TLS session resumption. See README.md.

mod child;
mod compare;
mod farm;
mod heap;
mod join;
mod longfat;
mod pki;
mod proto;
mod quic;
mod recv_cpu;
mod scale;
mod side;
mod sys;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::proto::Proto;

/// Counts live heap bytes for `scale` (off, one relaxed load per allocation, elsewhere).
#[global_allocator]
static GLOBAL: heap::Counting = heap::Counting;

pub type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

#[derive(Parser)]
#[command(name = "tcpls-bench", about = "Throughput comparison on loopback: TCP, TLS 1.3 (rustls), TCPLS")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Alternating repetitions of a client-to-server bulk transfer for every protocol.
    #[command(after_help = "Example:\n  cargo run --release -p tcpls-bench -- compare --bytes 2G --reps 3")]
    Compare(compare::Options),
    /// Latency and server CPU of `Session::join`, with TLS resumption and with full handshakes.
    #[command(after_help = "Example:\n  cargo run --release -p tcpls-bench -- join --joins 200")]
    Join(join::Options),
    /// Instructions (under callgrind) and time per byte of TCPLS' receive path, zero-copy or not.
    #[command(
        after_help = "Examples:\n  tcpls-bench recv-cpu --zero-copy on\n  tcpls-bench/scripts/recv-cpu.sh   # both paths under callgrind: instructions/byte and the ratio"
    )]
    RecvCpu(recv_cpu::Options),
    /// Handshakes per second per core, time to first byte, memory per idle session and many
    /// concurrent sessions on one server, TCPLS next to TLS over TCP.
    #[command(after_help = "Example:\n  cargo run --release -p tcpls-bench -- scale --sessions 10000 --json")]
    Scale(scale::Options),
    /// Sessions per second and tunnel goodput of 1 and of 3 `tcpls tunnel server` nodes behind
    /// haproxy (tools/haproxy/), one JSON line per node count.
    #[command(
        after_help = "Example:\n  cargo build --release -p tcpls-cli -p tcpls-bench\n  target/release/tcpls-bench farm --nodes 1,3"
    )]
    Farm(farm::Options),
    /// Goodput of TCP and TCPLS (1 and 64 streams) on an emulated long fat path (tcpls-netem,
    /// 1 Gbit/s, 50 ms one way) and across an RTT jump from 10 to 200 ms; needs root.
    #[command(
        after_help = "Examples:\n  sudo target/release/tcpls-bench longfat\n  sudo target/release/tcpls-bench longfat --quick --json"
    )]
    Longfat(longfat::Options),
    /// Server of a scale run (spawned by `scale`).
    #[command(hide = true)]
    ScaleServer {
        #[arg(long, default_value_t = 2)]
        worker_threads: usize,
    },
    /// Client of a scale run (spawned by `scale`).
    #[command(hide = true)]
    ScaleClient {
        #[arg(long)]
        proto: scale::ScaleProto,
        #[arg(long)]
        port: u16,
        #[arg(long)]
        sessions: u32,
        #[arg(long)]
        handshakes: u32,
        #[arg(long, default_value_t = 2)]
        worker_threads: usize,
    },
    /// Server of one join run (spawned by `join`).
    #[command(hide = true)]
    JoinServer {
        #[arg(long)]
        joins: u32,
        #[arg(long, default_value_t = 2)]
        worker_threads: usize,
    },
    /// Client of one join run (spawned by `join`).
    #[command(hide = true)]
    JoinClient {
        #[arg(long)]
        mode: join::Mode,
        #[arg(long)]
        joins: u32,
        /// Port on 127.0.0.1 (the session's first connection).
        #[arg(long)]
        first: u16,
        /// Port on 127.0.0.2 (the joins).
        #[arg(long)]
        second: u16,
        #[arg(long, default_value_t = 2)]
        worker_threads: usize,
    },
    /// Receiving end of one transfer (spawned by `compare`).
    #[command(hide = true)]
    Server {
        #[arg(long)]
        proto: Proto,
        #[arg(long, value_parser = compare::parse_size)]
        bytes: u64,
        #[arg(long, default_value_t = 2)]
        worker_threads: usize,
        /// Run on this CPU only.
        #[arg(long)]
        pin: Option<usize>,
        /// Address to listen on (port 0: any, announced on stdout).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: std::net::SocketAddr,
        /// Check every received byte against the payload.
        #[arg(long)]
        verify: bool,
        /// Sample the bytes received so far every this many milliseconds (report's `timeline`).
        #[arg(long)]
        timeline_ms: Option<u64>,
    },
    /// Sending end of one transfer (spawned by `compare`).
    #[command(hide = true)]
    Client {
        #[arg(long)]
        proto: Proto,
        #[arg(long)]
        port: u16,
        /// The server's address.
        #[arg(long, default_value = "127.0.0.1")]
        host: std::net::IpAddr,
        /// TCP congestion control of the sender's sockets (`TCP_CONGESTION`).
        #[arg(long)]
        cc: Option<String>,
        /// TCPLS: close the session right after writing, without waiting for the server's reply.
        #[arg(long)]
        close_early: bool,
        #[arg(long, value_parser = compare::parse_size)]
        bytes: u64,
        #[arg(long, default_value_t = 2)]
        worker_threads: usize,
        /// Run on this CPU only.
        #[arg(long)]
        pin: Option<usize>,
    },
}

/// Runs `fut` as a task on a runtime with `workers` worker threads (0: current-thread runtime),
/// so that the application code runs on a worker like in a server, not on the blocked main thread.
fn run_on_runtime<F, T>(workers: usize, fut: F) -> Res<T>
where
    F: std::future::Future<Output = Res<T>> + Send + 'static,
    T: Send + 'static,
{
    let rt = if workers == 0 {
        tokio::runtime::Builder::new_current_thread().enable_all().build()?
    } else {
        tokio::runtime::Builder::new_multi_thread().worker_threads(workers).enable_all().build()?
    };
    let report = rt.block_on(async move { tokio::spawn(fut).await })??;
    // Sockets are closed; do not wait for stray tasks.
    rt.shutdown_background();
    Ok(report)
}

fn pin_to(cpu: Option<usize>) -> Res<()> {
    if let Some(cpu) = cpu {
        sys::pin_to_cpu(cpu).map_err(|e| format!("cannot pin to CPU {cpu}: {e}"))?;
    }
    Ok(())
}

fn print_report<T: serde::Serialize>(report: &T) -> Res<()> {
    println!("{}", serde_json::to_string(report)?);
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Compare(opts) => compare::run(opts),
        Command::Join(opts) => join::run(opts),
        Command::RecvCpu(opts) => recv_cpu::run(opts),
        Command::Scale(opts) => scale::run(opts),
        Command::Farm(opts) => farm::run(opts),
        Command::Longfat(opts) => longfat::run(opts),
        Command::ScaleServer { worker_threads } => {
            heap::enable();
            run_on_runtime(worker_threads, scale::server(worker_threads))
        }
        Command::ScaleClient { proto, port, sessions, handshakes, worker_threads } => {
            heap::enable();
            run_on_runtime(worker_threads, scale::client(proto, port, sessions, handshakes))
        }
        Command::JoinServer { joins, worker_threads } => {
            run_on_runtime(worker_threads, join::server(joins)).and_then(|r| print_report(&r))
        }
        Command::JoinClient { mode, joins, first, second, worker_threads } => {
            run_on_runtime(worker_threads, join::client(mode, joins, first, second)).and_then(|r| print_report(&r))
        }
        Command::Server { proto, bytes, worker_threads, pin, listen, verify, timeline_ms } => {
            let checks = side::ReceiverChecks { verify, timeline: timeline_ms.map(std::time::Duration::from_millis) };
            pin_to(pin)
                .and_then(|()| run_on_runtime(worker_threads, child::server(proto, bytes, listen, checks)))
                .and_then(|r| print_report(&r))
        }
        Command::Client { proto, port, host, cc, bytes, worker_threads, close_early, pin } => {
            let addr = std::net::SocketAddr::new(host, port);
            let sender = async move { child::client(proto, addr, bytes, close_early, cc.as_deref()).await };
            pin_to(pin).and_then(|()| run_on_runtime(worker_threads, sender)).and_then(|r| print_report(&r))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tcpls-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
