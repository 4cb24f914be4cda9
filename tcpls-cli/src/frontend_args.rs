//! The front-end flags that `tcpls tunnel client` and `tcpls tm3 lp` share: where the local
//! connections to tunnel come from. Defined once and flattened into both commands; the help
//! texts are the tunnel client's, and `tcpls tm3 lp` rewords them (`mut_arg`) for what the TM3
//! pipe protocol carries (IPv4 destinations, one front-end at a time).

use clap::Args;

#[derive(Args)]
#[group(skip)]
pub struct FrontendArgs {
    /// SOCKS5 server on ADDR (CONNECT to IPv4, IPv6 and domain names; no authentication).
    #[arg(long, value_name = "ADDR")]
    pub socks: Option<String>,
    /// Fixed forward: listen on LISTEN (HOST:PORT or PORT), tunnel to TARGET (HOST:PORT; a name
    /// is resolved by the concentrator); repeatable.
    #[arg(long, value_name = "LISTEN=TARGET")]
    pub forward: Vec<String>,
    /// Transparent mode: listen on 0.0.0.0:PORT for connections redirected with iptables REDIRECT.
    #[arg(long, value_name = "PORT")]
    pub transparent: Option<u16>,
}
