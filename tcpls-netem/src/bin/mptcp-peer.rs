//! `mptcp-peer`: bulk transfer over IPPROTO_MPTCP sockets.
//!
//! ```text
//! mptcp-peer server --listen 0.0.0.0:5201 [--once]
//! mptcp-peer client 10.1.2.2:5201 --bytes 10000000 [--bind ADDR:0] [--json]
//! ```

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "Bulk transfer over MPTCP sockets (IPPROTO_MPTCP)")]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Accept connections, count received bytes, reply with the count.
    Server {
        #[arg(long, default_value = "0.0.0.0:5201")]
        listen: SocketAddr,
        /// Exit after one connection.
        #[arg(long)]
        once: bool,
    },
    /// Send N bytes and wait for the server's confirmation.
    Client {
        addr: SocketAddr,
        #[arg(long, default_value_t = 10_000_000)]
        bytes: u64,
        /// Local address to bind before connecting.
        #[arg(long)]
        bind: Option<SocketAddr>,
        /// Timeout in seconds for connect and each read/write.
        #[arg(long, default_value_t = 30)]
        timeout: u64,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    let args = Args::parse();
    match args.cmd {
        Cmd::Server { listen, once } => {
            let l = match tcpls_netem::mptcp::listen(listen) {
                Ok(l) => l,
                Err(e) => {
                    eprintln!("mptcp-peer: listen {listen}: {e}");
                    return ExitCode::FAILURE;
                }
            };
            eprintln!("mptcp-peer: listening on {listen}");
            let r = tcpls_netem::mptcp::serve(l, once, |r| match r {
                Ok(rep) => println!("{}", rep.to_json()),
                Err(e) => eprintln!("mptcp-peer: connection failed: {e}"),
            });
            if let Err(e) = r {
                eprintln!("mptcp-peer: {e}");
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Cmd::Client { addr, bytes, bind, timeout, json } => {
            match tcpls_netem::mptcp::client(addr, bind, bytes, Duration::from_secs(timeout)) {
                Ok(rep) => {
                    if json {
                        println!("{}", rep.to_json());
                    } else {
                        println!(
                            "sent {} bytes, server confirmed {}, {:.3} s, {:.2} Mbit/s, extra subflows (max) {}",
                            rep.bytes,
                            rep.confirmed,
                            rep.secs,
                            rep.mbps,
                            rep.max_subflows.map(|n| n.to_string()).unwrap_or_else(|| "unknown".into())
                        );
                    }
                    if rep.confirmed == rep.bytes {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::FAILURE
                    }
                }
                Err(e) => {
                    eprintln!("mptcp-peer: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
