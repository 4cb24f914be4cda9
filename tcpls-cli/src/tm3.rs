//! `tcpls tm3 rp N [--port PORT]` and `tcpls tm3 lp RP_ADDR N (--socks ADDR | --forward
//! LISTEN=TARGET | --transparent PORT)`: the TM3 proxies of the `tcpls-tunnel` crate, speaking
//! the original TM3 pipe protocol on plain TCP pipes (docs/CLI.md).

use clap::{ArgAction, ArgGroup, Args, Subcommand};
use tcpls_tunnel::cli::{lp_main, rp_main, LpMode};
use tcpls_tunnel::{DestPolicy, DEFAULT_PORT};

use crate::frontend_args::FrontendArgs;

#[derive(Args)]
pub struct Tm3Args {
    /// Log every connection (debug level).
    #[arg(short, long, global = true)]
    verbose: bool,
    #[command(subcommand)]
    cmd: Tm3Command,
}

#[derive(Subcommand)]
enum Tm3Command {
    /// Remote proxy: accept N pipes per local proxy and open the tunneled connections.
    #[command(after_help = "Examples:\n  \
        tcpls tm3 rp 4\n  \
        tcpls tm3 rp 4 --port 7000\n  \
        tcpls tm3 rp 4 --safe-dest --deny-dest 10.0.0.0/8\n\
        Like the TM3 specification, the remote proxy connects anywhere by default, this host's\n\
        loopback and 169.254.169.254 included, for anyone who reaches its port: use --safe-dest\n\
        (and a firewall) on a host with anything to protect.")]
    Rp {
        /// Number of pipes per local proxy.
        n: usize,
        /// Listening port (all addresses).
        #[arg(long, default_value_t = DEFAULT_PORT)]
        port: u16,
        /// Refuse loopback, link-local, unspecified, multicast, broadcast destinations and this
        /// host's own addresses, as `tcpls tunnel server` does by default (the connection is
        /// reset).
        #[arg(long)]
        safe_dest: bool,
        /// With --safe-dest: allow destinations in CIDR all the same; repeatable.
        #[arg(long, value_name = "CIDR", requires = "safe_dest")]
        allow_dest: Vec<String>,
        /// Refuse destinations in CIDR (wins over --allow-dest); repeatable.
        #[arg(long, value_name = "CIDR")]
        deny_dest: Vec<String>,
    },
    /// Local proxy: open N pipes to RP_ADDR and tunnel local connections over them.
    #[command(after_help = "Examples:\n  \
        tcpls tm3 lp 203.0.113.5 4 --socks 127.0.0.1:1080\n  \
        tcpls tm3 lp 203.0.113.5:6000 4 --forward 127.0.0.1:8080=198.51.100.7:80\n  \
        tcpls tm3 lp 203.0.113.5 4 --transparent 7000\n\
        Transparent mode takes connections redirected by iptables, e.g.:\n  \
        iptables -t nat -A OUTPUT -p tcp -d 198.51.100.7 --dport 80 -j REDIRECT --to-ports 7000\n\
        (keep the pipes' own traffic to the remote proxy out of the rule)")]
    // The shared front-end flags, as TM3 has them: exactly one, IPv4 destinations only.
    #[command(
        group(ArgGroup::new("mode").args(["socks", "forward", "transparent"]).required(true)),
        mut_arg("socks", |a| a.help("SOCKS5 server listening on ADDR (CONNECT to IPv4 addresses only)")),
        mut_arg("forward", |a| a
            .help("Fixed forward: listen on LISTEN (HOST:PORT or PORT), tunnel to TARGET (IPv4 HOST:PORT)")
            .action(ArgAction::Set)),
    )]
    Lp {
        /// Remote proxy address: HOST or HOST:PORT (default port 6000).
        rp_addr: String,
        /// Number of pipes.
        n: usize,
        #[command(flatten)]
        mode: FrontendArgs,
    },
}

/// Runs `tcpls tm3 ...` until an error (the proxies otherwise run forever).
pub async fn run(args: Tm3Args) -> Result<(), String> {
    crate::logging::init("tm3", args.verbose);
    match args.cmd {
        Tm3Command::Rp { n, port, safe_dest, allow_dest, deny_dest } => {
            check_pipes(n)?;
            let base = if safe_dest { DestPolicy::safe() } else { DestPolicy::open() };
            let policy = DestPolicy::with_rules(base, &allow_dest, &deny_dest).map_err(|e| format!("tm3 rp: {e}"))?;
            rp_main(n, port, policy).await.map_err(|e| format!("tm3 rp: {e}"))
        }
        Tm3Command::Lp { rp_addr, n, mode } => {
            check_pipes(n)?;
            let mode = match (mode.socks, mode.forward.into_iter().next(), mode.transparent) {
                (Some(a), None, None) => LpMode::Socks(a),
                (None, Some(f), None) => LpMode::Forward(f),
                (None, None, Some(p)) => LpMode::Transparent(p),
                _ => return Err("tm3 lp: exactly one of --socks, --forward, --transparent is required".into()),
            };
            lp_main(&rp_addr, n, mode).await.map_err(|e| format!("tm3 lp: {e}"))
        }
    }
}

/// The proxies accept 1..=1024 pipes; checked before anything is bound or connected.
fn check_pipes(n: usize) -> Result<(), String> {
    if (1..=1024).contains(&n) {
        Ok(())
    } else {
        Err(format!("tm3: the number of pipes N must be in 1..=1024, not {n}"))
    }
}
