//! `tm3 rp N [--port PORT]` and `tm3 lp RP_ADDR N (--socks ADDR | --forward LISTEN=TARGET |
//! --transparent PORT)`: the TM3 proxies (same syntax as `tcpls tm3 ...`).

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use tcpls_tunnel::cli::{lp_main, rp_main, LpMode};
use tcpls_tunnel::DEFAULT_PORT;
#[derive(Parser)]
#[command(name = "tm3", about = "TM3 multiplexing proxy speaking the original TM3 pipe protocol")]
struct Cli {
    /// Log every connection (debug level).
    #[arg(short, long, global = true)]
    verbose: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Remote proxy: accept N pipes per local proxy and open the tunneled connections.
    ///
    /// Example: tm3 rp 4 --port 6000
    Rp {
        /// Number of pipes per local proxy.
        n: usize,
        /// Listening port (all addresses).
        #[arg(long, default_value_t = DEFAULT_PORT)]
        port: u16,
    },
    /// Local proxy: open N pipes to RP_ADDR and tunnel local connections over them.
    ///
    /// Example: tm3 lp 203.0.113.5:6000 4 --forward 127.0.0.1:8080=198.51.100.7:80
    Lp {
        /// Remote proxy address: HOST or HOST:PORT (default port 6000).
        rp_addr: String,
        /// Number of pipes.
        n: usize,
        #[command(flatten)]
        mode: Mode,
    },
}

#[derive(Args)]
#[group(required = true, multiple = false)]
struct Mode {
    /// SOCKS5 server listening on ADDR (CONNECT to IPv4 addresses only).
    #[arg(long, value_name = "ADDR")]
    socks: Option<String>,
    /// Fixed forward: listen on LISTEN (HOST:PORT or PORT), tunnel to TARGET (IPv4 HOST:PORT).
    #[arg(long, value_name = "LISTEN=TARGET")]
    forward: Option<String>,
    /// Transparent mode: listen on 0.0.0.0:PORT for connections redirected with iptables REDIRECT.
    #[arg(long, value_name = "PORT")]
    transparent: Option<u16>,
}

async fn run(cli: Cli) -> Result<(), String> {
    match cli.cmd {
        Cmd::Rp { n, port } => rp_main(n, port).await,
        Cmd::Lp { rp_addr, n, mode } => {
            let mode = match (mode.socks, mode.forward, mode.transparent) {
                (Some(a), None, None) => LpMode::Socks(a),
                (None, Some(f), None) => LpMode::Forward(f),
                (None, None, Some(p)) => LpMode::Transparent(p),
                _ => return Err("exactly one of --socks, --forward, --transparent is required".into()),
            };
            lp_main(&rp_addr, n, mode).await
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let level = if cli.verbose { tracing::Level::DEBUG } else { tracing::Level::INFO };
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt().with_max_level(level).with_ansi(ansi).with_writer(std::io::stderr).init();
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tm3: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tm3: {e}");
            ExitCode::FAILURE
        }
    }
}
