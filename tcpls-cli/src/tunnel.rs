//! `tcpls tunnel server` (the concentrator) and `tcpls tunnel client` (the local proxy): the
//! TCPLS tunnel of the `tcpls-tunnel` crate (PROTOCOL.md §8.1, docs/CLI.md).

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};
use tcpls_tunnel::frontend::{split_forward, Target};
use tcpls_tunnel::tunnel::{
    Backoff, Concentrator, DestPolicy, Frontend, SessionSummary, TunnelClient, TunnelConfig, MAX_LOOKUPS, MAX_SESSIONS,
    MAX_STREAMS_PER_SESSION,
};

use crate::args::{host_of, resolve};

#[derive(Args)]
pub struct TunnelArgs {
    /// Log every tunneled connection (debug level).
    #[arg(short, long, global = true)]
    verbose: bool,
    #[command(subcommand)]
    cmd: TunnelCommand,
}

#[derive(Subcommand)]
enum TunnelCommand {
    /// The concentrator: opens the TCP connections that clients ask for over TCPLS streams.
    #[command(after_help = "Examples:\n  \
        tcpls tunnel server --listen 0.0.0.0:4443 --cert tcpls-cert/cert.pem --key tcpls-cert/key.pem\n  \
        tcpls tunnel server --listen 203.0.113.5:4443 --listen 198.51.100.5:4443 --json\n  \
        tcpls tunnel server --cert cert.pem --key key.pem --client-ca clients.pem   (mutual TLS)\n  \
        tcpls tunnel server --listen 127.0.0.1:4443 --allow-dest 127.0.0.0/8 --deny-dest 10.0.0.0/8\n\
        With several specific --listen addresses, clients learn all of them and may add paths to any.\n\
        Destinations: loopback (127.0.0.0/8, ::1), link-local (169.254.0.0/16, fe80::/10), unspecified\n\
        (0.0.0.0/8, ::), multicast, broadcast and this host's own addresses are refused unless\n\
        --allow-dest names them; every address a name resolves to is checked, IPv4-mapped IPv6\n\
        addresses as IPv4. --deny-dest wins.\n\
        Without --client-ca anyone who reaches the listening address can use the concentrator.\n\
        --json prints one JSON object per ended session on stdout.")]
    Server(ServerArgs),
    /// The local proxy: one TCPLS session to the concentrator, one stream per connection.
    #[command(after_help = "Examples:\n  \
        tcpls tunnel client --concentrator 203.0.113.5 --ca cert.pem --socks 127.0.0.1:1080\n  \
        curl --socks5-hostname 127.0.0.1:1080 http://example.org/\n  \
        tcpls tunnel client --concentrator 203.0.113.5:4443 --path 198.51.100.5:4443 --insecure \\\n      \
        --forward 127.0.0.1:8080=example.org:80\n  \
        tcpls tunnel client --concentrator 203.0.113.5 --ca cert.pem --transparent 7000\n  \
        tcpls tunnel client --concentrator 203.0.113.5 --ca cert.pem --http 127.0.0.1:3128 --socks 127.0.0.1:1080\n  \
        https_proxy=http://127.0.0.1:3128 curl https://example.org/\n\
        Transparent mode takes connections redirected by iptables, e.g.:\n  \
        iptables -t nat -A OUTPUT -p tcp -d 198.51.100.7 --dport 80 -j REDIRECT --to-ports 7000\n\
        (keep the session's own traffic to the concentrator out of the rule)")]
    Client(ClientArgs),
}

#[derive(Args)]
struct ServerArgs {
    /// Address to listen on; repeat for several (each can carry a path of a session).
    #[arg(long, default_value = "0.0.0.0:4443")]
    listen: Vec<String>,
    /// Certificate chain (PEM). Without --cert/--key an ephemeral self-signed one is used.
    #[arg(long, requires = "key")]
    cert: Option<PathBuf>,
    /// Private key (PEM).
    #[arg(long, requires = "cert")]
    key: Option<PathBuf>,
    /// Accept only clients with a certificate that chains to (or is) one in FILE (PEM):
    /// mutual TLS, checked on every connection of a session. Without it the concentrator
    /// connects for anyone who completes the handshake (an open proxy).
    #[arg(long, value_name = "FILE")]
    client_ca: Option<PathBuf>,
    /// Allow destinations in CIDR (e.g. 127.0.0.0/8, or one address), lifting the default
    /// refusal of loopback, link-local, unspecified, multicast, broadcast and this host's own
    /// addresses; repeatable.
    #[arg(long, value_name = "CIDR")]
    allow_dest: Vec<String>,
    /// Refuse destinations in CIDR (wins over --allow-dest); repeatable.
    #[arg(long, value_name = "CIDR")]
    deny_dest: Vec<String>,
    /// Sessions served at once; more are closed right after their handshake.
    #[arg(long, value_name = "N", default_value_t = MAX_SESSIONS, value_parser = positive)]
    max_sessions: usize,
    /// Tunneled connections (streams) per session at once; more are refused.
    #[arg(long, value_name = "N", default_value_t = MAX_STREAMS_PER_SESSION, value_parser = positive)]
    max_streams: usize,
    /// Name lookups in progress at once over all sessions; more wait (within the 10 s connect
    /// timeout).
    #[arg(long, value_name = "N", default_value_t = MAX_LOOKUPS, value_parser = positive)]
    max_lookups: usize,
    /// One JSON object per ended session on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct ClientArgs {
    /// Concentrator address: HOST:PORT, [V6]:PORT or HOST (port 4443).
    #[arg(long)]
    concentrator: String,
    /// Add a TCP connection to the session towards another concentrator address; repeatable.
    #[arg(long, value_name = "ADDR")]
    path: Vec<String>,
    /// CA certificate (PEM) to verify the concentrator with (default: the system's roots).
    #[arg(long, conflicts_with = "insecure")]
    ca: Option<PathBuf>,
    /// Do not verify the concentrator's certificate (testing only).
    #[arg(long)]
    insecure: bool,
    /// TLS server name to verify (default: the host of --concentrator).
    #[arg(long)]
    server_name: Option<String>,
    /// Client certificate (PEM) for a concentrator that requires one (`--client-ca`).
    #[arg(long, requires = "key")]
    cert: Option<PathBuf>,
    /// Private key (PEM) of --cert.
    #[arg(long, requires = "cert")]
    key: Option<PathBuf>,
    /// Exit when the session to the concentrator ends, rather than re-establishing it.
    #[arg(long)]
    no_reconnect: bool,
    /// While the session is being re-established, new connections wait up to SECS for it, then
    /// are refused.
    #[arg(long, value_name = "SECS", default_value_t = 10.0, value_parser = seconds)]
    reconnect_wait: f64,
    /// Longest delay between reconnection attempts (exponential backoff from 0.2 s, with jitter).
    #[arg(long, value_name = "SECS", default_value_t = 30.0, value_parser = seconds)]
    reconnect_max: f64,
    #[command(flatten)]
    mode: Mode,
}

#[derive(Args)]
#[group(required = true, multiple = true)]
struct Mode {
    /// SOCKS5 server on ADDR (CONNECT to IPv4, IPv6 and domain names; no authentication).
    #[arg(long, value_name = "ADDR")]
    socks: Option<String>,
    /// HTTP proxy on ADDR: CONNECT (https_proxy=, curl --proxy) and absolute-form http://
    /// requests; no proxy authentication.
    #[arg(long, value_name = "ADDR")]
    http: Option<String>,
    /// Fixed forward: listen on LISTEN (HOST:PORT or PORT), tunnel to TARGET (HOST:PORT; a name
    /// is resolved by the concentrator); repeatable.
    #[arg(long, value_name = "LISTEN=TARGET")]
    forward: Vec<String>,
    /// UDP forward: datagrams received on LISTEN (HOST:PORT or PORT) go to TARGET (HOST:PORT),
    /// one flow per source address, answers come back to it; repeatable.
    #[arg(long, value_name = "LISTEN=TARGET")]
    forward_udp: Vec<String>,
    /// Transparent mode: listen on 0.0.0.0:PORT for connections redirected with iptables REDIRECT.
    #[arg(long, value_name = "PORT")]
    transparent: Option<u16>,
}

/// Runs `tcpls tunnel ...` until an error (both ends otherwise run forever).
pub async fn run(args: TunnelArgs) -> Result<(), String> {
    crate::logging::init(args.verbose);
    match args.cmd {
        TunnelCommand::Server(a) => server(a).await.map_err(|e| format!("tunnel server: {e}")),
        TunnelCommand::Client(a) => client(a).await.map_err(|e| format!("tunnel client: {e}")),
    }
}

async fn server(a: ServerArgs) -> Result<(), String> {
    let dest_policy = DestPolicy::with_rules(DestPolicy::safe(), &a.allow_dest, &a.deny_dest)?;
    let tls = crate::server_tls(a.cert.as_deref(), a.key.as_deref(), &[], a.client_ca.as_deref())?;
    let mut addrs = Vec::new();
    for l in &a.listen {
        addrs.extend(resolve(l)?.into_iter().take(1));
    }
    let cfg = TunnelConfig {
        dest_policy: dest_policy.clone(),
        max_sessions: a.max_sessions,
        max_streams_per_session: a.max_streams,
        max_lookups: a.max_lookups,
        ..TunnelConfig::default()
    };
    let conc = Concentrator::bind(&addrs, Arc::new(tls), cfg).await.map_err(|e| e.to_string())?;
    let bound = conc.local_addrs();
    if a.client_ca.is_none() {
        if let Some(open) = bound.iter().find(|b| !b.ip().is_loopback()) {
            eprintln!(
                "tcpls tunnel server: WARNING: listening on {open} without --client-ca: anyone who can reach \
                 it can make this host open TCP connections (an open proxy); use --client-ca, or --listen on \
                 loopback"
            );
        }
    }
    eprintln!(
        "tcpls tunnel server: destinations: {dest_policy}; at most {} session(s), {} stream(s) per session, {} name lookup(s) at once",
        a.max_sessions, a.max_streams, a.max_lookups
    );
    for b in bound {
        eprintln!("tcpls tunnel server: listening on {b}");
    }
    let json = a.json;
    conc.run(move |s| {
        if json {
            println!("{}", summary_json(&s));
        }
    })
    .await
    .map_err(|e| e.to_string())
}

/// A positive number of seconds (fractions allowed), at most a day.
fn seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x > 0.0 && x <= 86_400.0 => Ok(x),
        _ => Err(format!("'{s}' is not a number of seconds in (0, 86400]")),
    }
}

/// A count of at least 1.
fn positive(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("'{s}' is not a whole number of at least 1")),
    }
}

/// The `--json` line of one ended session.
fn summary_json(s: &SessionSummary) -> serde_json::Value {
    let st = &s.stats;
    serde_json::json!({
        "peer": s.peer.to_string(),
        "duration_s": s.duration.as_secs_f64(),
        "connections": s.connections,
        "streams": st.streams,
        "connected": st.connected,
        "connect_failed": st.connect_failed,
        "rejected": st.rejected,
        "refused_dest": st.refused_dest,
        "closed": st.closed,
        "local_resets": st.local_resets,
        "peer_resets": st.peer_resets,
        "bytes_up": st.bytes_up,
        "bytes_down": st.bytes_down,
        "error": s.error,
    })
}

async fn client(a: ClientArgs) -> Result<(), String> {
    let concentrator = *resolve(&a.concentrator)?.first().ok_or("no address")?;
    let mut paths = Vec::new();
    for p in &a.path {
        paths.push(*resolve(p)?.first().ok_or_else(|| format!("{p} resolved to no address"))?);
    }
    let mut frontends = Vec::new();
    if let Some(s) = &a.mode.socks {
        frontends.push((tcpls_tunnel::cli::resolve(s, None).await?, Frontend::Socks));
    }
    if let Some(h) = &a.mode.http {
        frontends.push((tcpls_tunnel::cli::resolve(h, None).await?, Frontend::Http));
    }
    for f in &a.mode.forward {
        let (l, t) = split_forward(f)?;
        frontends.push((tcpls_tunnel::cli::resolve(l, None).await?, Frontend::Forward(Target::parse(t)?)));
    }
    if let Some(p) = a.mode.transparent {
        frontends.push((SocketAddr::from((Ipv4Addr::UNSPECIFIED, p)), Frontend::Transparent));
    }
    let name = a.server_name.clone().unwrap_or_else(|| host_of(&a.concentrator));
    let name = tcpls::server_name_for(&name).map_err(|e| e.to_string())?;
    let identity = a.cert.as_deref().zip(a.key.as_deref());
    let tls = crate::tlsconf::client_config_with_identity(a.ca.as_deref(), a.insecure, &[], None, identity)?;
    let mut udp = Vec::new();
    for f in &a.mode.forward_udp {
        let (l, t) = split_forward(f)?;
        let listen = tcpls_tunnel::cli::resolve(l, None).await?;
        let socket =
            tokio::net::UdpSocket::bind(listen).await.map_err(|e| format!("cannot listen on {listen}/udp: {e}"))?;
        udp.push((socket, listen, Target::parse(t)?));
    }
    let mut listeners = Vec::new();
    for (listen, frontend) in frontends {
        let l = tcpls_tunnel::frontend::listen(listen).map_err(|e| format!("cannot listen on {listen}: {e}"))?;
        listeners.push((l, listen, frontend));
    }
    let cfg = TunnelConfig { reconnect_wait: Duration::from_secs_f64(a.reconnect_wait), ..TunnelConfig::default() };
    let client =
        TunnelClient::connect(concentrator, name, Arc::new(tls), &paths, cfg).await.map_err(|e| e.to_string())?;
    let _reconnect = (!a.no_reconnect).then(|| {
        client.keep_connected(Backoff { max: Duration::from_secs_f64(a.reconnect_max), ..Backoff::default() })
    });
    let conns = client.session().usable_connections().len();
    let mut what: Vec<String> = listeners.iter().map(|(_, l, f)| format!("{l} ({})", describe(f))).collect();
    what.extend(udp.iter().map(|(_, l, t)| format!("{l}/udp (forward to {t})")));
    eprintln!(
        "tcpls tunnel client: session to {concentrator} ({conns} connection(s)), accepting on {}",
        what.join(", ")
    );
    let mut serving = tokio::task::JoinSet::new();
    for (l, _, frontend) in listeners {
        let client = client.clone();
        serving.spawn(async move { client.serve(l, frontend).await });
    }
    for (socket, _, target) in udp {
        let client = client.clone();
        serving.spawn(async move { client.serve_udp(socket, target).await });
    }
    match serving.join_next().await {
        Some(Ok(Err(e))) => Err(e.to_string()),
        Some(Err(e)) => Err(e.to_string()),
        _ => Err("stopped".into()),
    }
}

fn describe(f: &Frontend) -> String {
    match f {
        Frontend::Socks => "SOCKS5".into(),
        Frontend::Http => "HTTP proxy".into(),
        Frontend::Forward(t) => format!("forward to {t}"),
        Frontend::Transparent => "transparent".into(),
    }
}
