//! `tcpls tunnel server` (the concentrator) and `tcpls tunnel client` (the local proxy): the
//! TCPLS tunnel of the `tcpls-tunnel` crate (PROTOCOL.md §8.1, docs/CLI.md).

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use clap::{Args, Subcommand};
use tcpls_proto::sync::RwLockExt;
use tcpls_tunnel::frontend::{split_forward, Target};
use tcpls_tunnel::tunnel::{
    Backoff, ClientPolicy, Concentrator, DestPolicy, Frontend, SessionSummary, TunnelClient, TunnelConfig, MAX_LOOKUPS,
    MAX_SESSIONS, MAX_STREAMS_PER_SESSION,
};

use crate::args::{host_of, resolve};
use crate::frontend_args::FrontendArgs;
use crate::tunnel_config::{self, pick, pick_list, ClientFile, ServerFile};

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
        tcpls tunnel server --listen 127.0.0.1:4443 --allow-dest 127.0.0.0/8 --deny-dest 10.0.0.0/8\n  \
        tcpls tunnel server --config /etc/tcpls/tunnel.toml   (the [server] table; SIGHUP reloads it)\n\
        Per-client policy (with --client-ca): [clients.\"NAME\"] tables in --config, keyed by the client\n\
        certificate's CN (or DNS name): allow-dest, deny-dest, only-dest, rate (bytes/s), max-sessions;\n\
        clients without a table are refused unless unknown-clients = \"allow\" (docs/TUNNEL.md).\n\
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
        https_proxy=http://127.0.0.1:3128 curl https://example.org/\n  \
        tcpls tunnel client --concentrator 203.0.113.5 --ca cert.pem --forward-udp 127.0.0.1:5353=9.9.9.9:53\n  \
        tcpls tunnel client --concentrator 203.0.113.5 --ca cert.pem --reverse 127.0.0.1:8022=127.0.0.1:22\n  \
        tcpls tunnel client --config /etc/tcpls/tunnel.toml   (the [client] table; docs/TUNNEL.md)\n\
        The client re-establishes a lost session by itself (exponential backoff; a restarting concentrator\n\
        is retried at least once a second); --no-reconnect exits. Ctrl-C or SIGTERM closes the session\n\
        (close_notify) without reconnecting, exit status 130 or 143.\n\
        Transparent mode takes connections redirected by iptables, e.g.:\n  \
        iptables -t nat -A OUTPUT -p tcp -d 198.51.100.7 --dport 80 -j REDIRECT --to-ports 7000\n\
        (keep the session's own traffic to the concentrator out of the rule)")]
    Client(ClientArgs),
    /// Checks a configuration file: syntax, keys, CIDRs, forwards, certificates and keys; prints
    /// a summary, exit status 1 on the first error.
    CheckConfig {
        /// The TOML file ([server] and/or [client] tables).
        file: PathBuf,
    },
}

#[derive(Args, Clone)]
struct ServerArgs {
    /// TOML file with a [server] table, one key per flag (docs/TUNNEL.md); flags win over it.
    /// SIGHUP re-reads it (certificate and destination policy) without dropping sessions.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Address to listen on; repeat for several (each can carry a path of a session)
    /// [default: 0.0.0.0:4443].
    #[arg(long)]
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
    /// Let clients ask for a reverse forward listening on ADDR (IP:PORT) of this host;
    /// repeatable. Without it no reverse forward is accepted.
    #[arg(long, value_name = "ADDR")]
    allow_reverse: Vec<String>,
    /// Sessions served at once; more are closed right after their handshake [default: 256].
    #[arg(long, value_name = "N", value_parser = positive)]
    max_sessions: Option<usize>,
    /// Tunneled connections (streams) per session at once; more are refused [default: 1024].
    #[arg(long, value_name = "N", value_parser = positive)]
    max_streams: Option<usize>,
    /// Name lookups in progress at once over all sessions; more wait (within the 10 s connect
    /// timeout) [default: 32].
    #[arg(long, value_name = "N", value_parser = positive)]
    max_lookups: Option<usize>,
    /// One JSON object per ended session on stdout.
    #[arg(long)]
    json: bool,
    /// Serve Prometheus metrics on http://ADDR/metrics (docs/OBSERVABILITY.md).
    #[arg(long, value_name = "ADDR")]
    metrics: Option<String>,
    /// Keep a session whose every connection was lost this many seconds for its client to
    /// rejoin (its tunneled connections survive if it does) [default: 10]. Clients with
    /// `--path-manager` survive outages of up to 60 s: set it at least as long for them.
    #[arg(long, value_name = "SECS")]
    rejoin_timeout: Option<u64>,
    /// Session ticket keys shared by the nodes of a farm (one key per line, 64 hex digits,
    /// current first; `openssl rand -hex 32`), re-read on SIGHUP: any node resumes any node's
    /// tickets. Turns 0-RTT off (docs/TUNNEL.md, "Farm").
    #[arg(long, value_name = "FILE")]
    ticket_keys: Option<PathBuf>,
    /// Announce ADDR (IP:PORT, this node's own address) to clients, which join their further
    /// connections there rather than through a load balancer; repeatable.
    #[arg(long, value_name = "ADDR")]
    advertise: Vec<String>,
    /// Farm route key (64 hex digits, shared with the load balancer, not the ticket keys): join
    /// tokens then carry an encrypted label naming this node (--farm-node), which the balancer
    /// reads from the join's server name (tools/haproxy/tcpls-farm.lua).
    #[arg(long, value_name = "FILE", requires = "farm_node")]
    farm_route_key: Option<PathBuf>,
    /// This node's number in the farm (1 to 255), as the balancer's configuration numbers it.
    #[arg(long, value_name = "N", requires = "farm_route_key", value_parser = clap::value_parser!(u8).range(1..))]
    farm_node: Option<u8>,
    /// How sessions are spread over threads, as for `tcpls serve`: per-core (a listener and a
    /// single-threaded runtime per core, each session kept on its core) or work-stealing (one
    /// runtime whose threads share every session) [default: work-stealing].
    #[arg(long, value_enum, value_name = "MODEL")]
    runtime: Option<crate::serve::ServerRuntime>,
    /// Threads serving sessions: cores with per-core, worker threads with work-stealing (0: one
    /// per CPU) [default: 0].
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
}

#[derive(Args)]
struct ClientArgs {
    /// TOML file with a [client] table, one key per flag (docs/TUNNEL.md); flags win over it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Concentrator address: HOST:PORT, [V6]:PORT or HOST (port 4443). Several, comma-separated
    /// (or a name with several addresses): tried in this order when the session is opened or
    /// re-opened, the first that completes a handshake serves.
    #[arg(long, value_name = "ADDR[,ADDR...]")]
    concentrator: Option<String>,
    /// Join the session's further connections (--path, rejoins) at the address the
    /// concentrator advertises (`tunnel server --advertise`), not through the address dialed:
    /// for a farm behind a load balancer (docs/TUNNEL.md, "Farm").
    #[arg(long)]
    join_advertised: bool,
    /// Send each join with the server name `<label>.DOMAIN`, the label taken from its token: a
    /// farm's balancer routes it to the node of the session (`tunnel server --farm-route-key`).
    /// The concentrator's certificate must then be valid for `*.DOMAIN`.
    #[arg(long, value_name = "DOMAIN")]
    join_sni_domain: Option<String>,
    /// Add a TCP connection to the session: [LOCAL@]ADDR, towards another concentrator address
    /// or the same one from another local address or interface (`dev:wwan0@ADDR`, a second
    /// uplink); repeatable.
    #[arg(long, value_name = "[LOCAL@]ADDR")]
    path: Vec<String>,
    /// Local side of the first connection: a local address (10.0.0.2) or an interface
    /// (dev:wlan0). Default: the kernel's choice by its routes.
    #[arg(long, value_name = "LOCAL")]
    bind: Option<String>,
    /// Keep the connections up with a path manager: `manual` (--bind and the --path list) or
    /// `fullmesh` (every local side × every concentrator address). Lost paths are re-joined
    /// with backoff, interface events (Linux) drop or bring back paths at once, and the
    /// session survives an outage of every path for up to 60 s.
    #[arg(long, value_name = "POLICY", value_parser = ["manual", "fullmesh"])]
    path_manager: Option<String>,
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
    /// are refused [default: 10].
    #[arg(long, value_name = "SECS", value_parser = seconds)]
    reconnect_wait: Option<f64>,
    /// Longest delay between reconnection attempts (exponential backoff from 0.2 s, with
    /// jitter) [default: 30]. While the concentrator refuses connections (restarting), attempts
    /// are at most 1 s apart.
    #[arg(long, value_name = "SECS", value_parser = seconds)]
    reconnect_max: Option<f64>,
    /// Ping the concentrator after SECS without traffic on a connection; no answer within 1 s
    /// fails the connection (then the session rejoins or reconnects) [default: 10].
    #[arg(long, value_name = "SECS", value_parser = seconds)]
    keepalive: Option<f64>,
    /// Serve Prometheus metrics of the client's session on http://ADDR/metrics (bytes, streams,
    /// connections, failovers, memory; docs/OBSERVABILITY.md §3).
    #[arg(long, value_name = "ADDR")]
    metrics: Option<String>,
    /// Bond every tunneled TCP connection: spread its bytes over all usable paths, both ways,
    /// by a scheduler that sends each record on the path where it arrives first (one download
    /// gets the sum of the uplinks). Per forward: `--forward LISTEN=TARGET,bond`.
    #[arg(long)]
    bond: bool,
    /// Redundant UDP: every datagram of the UDP forwards and of SOCKS5 UDP ASSOCIATE goes on
    /// every usable path (up to 4), and the first copy to arrive is delivered, both ways: the
    /// loss or outage of a path is invisible, at the cost of one copy per path. Per forward:
    /// `--forward-udp LISTEN=TARGET,redundant`.
    #[arg(long)]
    redundant: bool,
    #[command(flatten)]
    mode: Mode,
}

/// At least one is needed, from the command line or the configuration file.
#[derive(Args)]
#[group(multiple = true)]
struct Mode {
    /// --socks, --forward, --transparent (shared with `tcpls tm3 lp`).
    #[command(flatten)]
    frontend: FrontendArgs,
    /// HTTP proxy on ADDR: CONNECT (https_proxy=, curl --proxy) and absolute-form http://
    /// requests; no proxy authentication.
    #[arg(long, value_name = "ADDR")]
    http: Option<String>,
    /// UDP forward: datagrams received on LISTEN (HOST:PORT or PORT) go to TARGET (HOST:PORT),
    /// one flow per source address, answers come back to it; repeatable.
    #[arg(long, value_name = "LISTEN=TARGET")]
    forward_udp: Vec<String>,
    /// Reverse forward: the concentrator listens on REMOTE (IP:PORT, which its --allow-reverse
    /// must list) and sends each connection to LOCAL (HOST:PORT, connected from this side);
    /// repeatable.
    #[arg(long, value_name = "REMOTE=LOCAL")]
    reverse: Vec<String>,
}

/// Runs `tcpls tunnel ...` until an error (both ends otherwise run forever).
pub async fn run(args: TunnelArgs) -> Result<(), String> {
    match args.cmd {
        TunnelCommand::Server(a) => {
            let s = ServerSettings::from(&a).map_err(|e| format!("tunnel server: {e}"))?;
            crate::logging::init("tunnel", args.verbose || s.verbose);
            server(a, s).await.map_err(|e| format!("tunnel server: {e}"))
        }
        TunnelCommand::Client(a) => {
            let file = match &a.config {
                Some(p) => tunnel_config::load(p)?.client.unwrap_or_default(),
                None => ClientFile::default(),
            };
            crate::logging::init("tunnel", args.verbose || file.verbose.unwrap_or(false));
            client(a, file).await.map_err(|e| format!("tunnel client: {e}"))
        }
        TunnelCommand::CheckConfig { file } => check_config(&file),
    }
}

/// `tunnel client` runs on one worker thread: every connection it carries goes through its one
/// session, whose lock serializes their work, so a second worker brings no parallelism, only
/// the two threads contending for that lock and waking each other for every request
/// (docs/PERFORMANCE.md, "Requests through the tunnel"). The concentrator keeps one worker per
/// CPU for its many sessions.
pub fn worker_threads(args: &TunnelArgs) -> Option<usize> {
    matches!(args.cmd, TunnelCommand::Client(_)).then_some(1)
}

/// The configuration file's `keylog` and `trace` keys (the global `--keylog` and `--trace`
/// flags), for `main` to apply before the runtime starts, as it does the flags. Nothing when
/// there is no file or it does not load: the command then says why.
pub fn file_globals(args: &TunnelArgs) -> (Option<PathBuf>, Option<PathBuf>) {
    let config = match &args.cmd {
        TunnelCommand::Server(a) => a.config.as_deref(),
        TunnelCommand::Client(a) => a.config.as_deref(),
        TunnelCommand::CheckConfig { .. } => None,
    };
    let Some(Ok(file)) = config.map(tunnel_config::load) else { return (None, None) };
    match &args.cmd {
        TunnelCommand::Server(_) => file.server.map(|s| (s.keylog, s.trace)).unwrap_or_default(),
        _ => file.client.map(|c| (c.keylog, c.trace)).unwrap_or_default(),
    }
}

/// `tunnel server --runtime work-stealing --threads N` (flags or file): the worker threads of
/// the process's runtime, which then runs the sessions. None otherwise.
pub fn work_stealing_threads(args: &TunnelArgs) -> Option<usize> {
    let TunnelCommand::Server(a) = &args.cmd else { return None };
    let file = a.config.as_deref().map(tunnel_config::load).and_then(Result::ok).and_then(|f| f.server);
    let (runtime, threads) = match file {
        Some(f) => (pick(a.runtime, f.runtime), pick(a.threads, f.threads)),
        None => (a.runtime, a.threads),
    };
    (runtime == Some(crate::serve::ServerRuntime::WorkStealing)).then_some(threads?).filter(|n| *n > 0)
}

/// The server's settings: the command line over the configuration file over the defaults.
/// Rebuilt from the same command line on SIGHUP, with the file read again.
#[derive(Clone)]
struct ServerSettings {
    listen: Vec<String>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    client_ca: Option<PathBuf>,
    allow_dest: Vec<String>,
    deny_dest: Vec<String>,
    allow_reverse: Vec<SocketAddr>,
    max_sessions: usize,
    max_streams: usize,
    max_lookups: usize,
    client_policy: ClientPolicy,
    json: bool,
    metrics: Option<String>,
    rejoin_timeout: Option<u64>,
    ticket_keys: Option<PathBuf>,
    advertise: Vec<SocketAddr>,
    farm_route: Option<(PathBuf, u8)>,
    verbose: bool,
    runtime: crate::serve::ServerRuntime,
    threads: usize,
}

impl ServerSettings {
    fn from(a: &ServerArgs) -> Result<ServerSettings, String> {
        let (f, clients) = match &a.config {
            Some(p) => {
                let file = tunnel_config::load(p)?;
                (file.server.unwrap_or_default(), file.clients)
            }
            None => (ServerFile::default(), Default::default()),
        };
        let client_ca = pick(a.client_ca.clone(), f.client_ca.clone());
        let mut client_policy = ClientPolicy::default();
        for (name, entry) in &clients {
            if name.is_empty() {
                return Err("[clients]: an empty client name".into());
            }
            client_policy.clients.insert(name.clone(), entry.rule(name).map_err(|e| format!("[clients]: {e}"))?);
        }
        client_policy.allow_unknown = match f.unknown_clients.as_deref() {
            None | Some("refuse") => false,
            Some("allow") => true,
            Some(other) => return Err(format!("unknown-clients: '{other}' is neither \"refuse\" nor \"allow\"")),
        };
        if !client_policy.is_off() && client_ca.is_none() {
            return Err(
                "[clients] tables need client-ca (--client-ca): without mutual TLS clients have no certificate name"
                    .into(),
            );
        }
        let mut listen = pick_list(a.listen.clone(), f.listen);
        if listen.is_empty() {
            listen.push("0.0.0.0:4443".into());
        }
        let (cert, key) = match (&a.cert, &a.key) {
            (Some(c), Some(k)) => (Some(c.clone()), Some(k.clone())),
            _ => (f.cert, f.key),
        };
        if cert.is_some() != key.is_some() {
            return Err("cert and key go together (configuration file)".into());
        }
        let positive_or = |v: Option<usize>, what: &str, d: usize| match v {
            Some(0) => Err(format!("{what} must be at least 1")),
            Some(n) => Ok(n),
            None => Ok(d),
        };
        Ok(ServerSettings {
            listen,
            cert,
            key,
            client_ca,
            allow_dest: pick_list(a.allow_dest.clone(), f.allow_dest),
            deny_dest: pick_list(a.deny_dest.clone(), f.deny_dest),
            allow_reverse: pick_list(a.allow_reverse.clone(), f.allow_reverse)
                .iter()
                .map(|r| r.parse().map_err(|_| format!("allow-reverse: '{r}' is not IP:PORT")))
                .collect::<Result<_, _>>()?,
            max_sessions: positive_or(pick(a.max_sessions, f.max_sessions), "max-sessions", MAX_SESSIONS)?,
            max_streams: positive_or(pick(a.max_streams, f.max_streams), "max-streams", MAX_STREAMS_PER_SESSION)?,
            max_lookups: positive_or(pick(a.max_lookups, f.max_lookups), "max-lookups", MAX_LOOKUPS)?,
            client_policy,
            json: a.json || f.json.unwrap_or(false),
            metrics: pick(a.metrics.clone(), f.metrics),
            rejoin_timeout: pick(a.rejoin_timeout, f.rejoin_timeout),
            ticket_keys: pick(a.ticket_keys.clone(), f.ticket_keys),
            advertise: pick_list(a.advertise.clone(), f.advertise)
                .iter()
                .map(|r| r.parse().map_err(|_| format!("advertise: '{r}' is not IP:PORT")))
                .collect::<Result<_, _>>()?,
            farm_route: match (pick(a.farm_route_key.clone(), f.farm_route_key), pick(a.farm_node, f.farm_node)) {
                (Some(k), Some(n)) if n >= 1 => Some((k, n)),
                (None, None) => None,
                _ => return Err("farm-route-key and farm-node (1 to 255) go together".into()),
            },
            verbose: f.verbose.unwrap_or(false),
            runtime: pick(a.runtime, f.runtime).unwrap_or(crate::serve::ServerRuntime::WorkStealing),
            threads: pick(a.threads, f.threads).unwrap_or(0),
        })
    }

    fn dest_policy(&self) -> Result<DestPolicy, String> {
        DestPolicy::with_rules(DestPolicy::safe(), &self.allow_dest, &self.deny_dest)
    }
}

/// The per-client policy in one line (banner, reload, check-config).
fn describe_clients(p: &ClientPolicy) -> String {
    if p.is_off() {
        return "per-client policy: none (every client gets the server-wide policy)".into();
    }
    let entries: Vec<String> = p.clients.iter().map(|(n, r)| format!("{n}: {r}")).collect();
    format!(
        "per-client policy: {} client(s) ({}); unknown clients {}",
        p.clients.len(),
        entries.join("; "),
        if p.allow_unknown { "allowed (server-wide policy)" } else { "refused" }
    )
}

/// `tcpls tunnel check-config FILE`.
fn check_config(path: &std::path::Path) -> Result<(), String> {
    let cfg = tunnel_config::load(path)?;
    if !cfg.clients.is_empty() && cfg.server.is_none() {
        return Err(format!("{}: [clients] tables belong with a [server] table", path.display()));
    }
    if cfg.server.is_none() && cfg.client.is_none() {
        return Err(format!("{}: neither a [server] nor a [client] table", path.display()));
    }
    if let Some(f) = &cfg.server {
        let args = ServerArgs {
            config: Some(path.to_path_buf()),
            listen: Vec::new(),
            cert: None,
            key: None,
            client_ca: None,
            allow_dest: Vec::new(),
            deny_dest: Vec::new(),
            allow_reverse: Vec::new(),
            max_sessions: None,
            max_streams: None,
            max_lookups: None,
            json: false,
            metrics: None,
            rejoin_timeout: None,
            ticket_keys: None,
            advertise: Vec::new(),
            farm_route_key: None,
            farm_node: None,
            runtime: None,
            threads: None,
        };
        let s = ServerSettings::from(&args)?;
        if let Some(path) = &s.ticket_keys {
            crate::farm_keys::load(path).map_err(|e| format!("[server]: {e}"))?;
        }
        if let Some((path, _)) = &s.farm_route {
            crate::farm_keys::load_route_key(path).map_err(|e| format!("[server]: {e}"))?;
        }
        let policy = s.dest_policy().map_err(|e| format!("[server]: {e}"))?;
        for l in &s.listen {
            resolve(l).map_err(|e| format!("[server] listen: {e}"))?;
        }
        if let (Some(c), Some(k)) = (&s.cert, &s.key) {
            crate::server_tls("tunnel check-config", Some(c), Some(k), &[], s.client_ca.as_deref())
                .map_err(|e| format!("[server]: {e}"))?;
        } else if let Some(ca) = &s.client_ca {
            crate::tlsconf::load_certs(ca).map_err(|e| format!("[server] client-ca: {e}"))?;
        }
        println!(
            "[server]: OK: listen {}; destinations: {policy}; mutual TLS: {}; {} key(s) set",
            s.listen.join(", "),
            if f.client_ca.is_some() { "yes" } else { "no" },
            count_server_keys(f)
        );
        println!("[clients]: OK: {}", describe_clients(&s.client_policy));
    }
    if let Some(f) = &cfg.client {
        let c = f.concentrator.as_deref().ok_or("[client]: concentrator is missing")?;
        for l in f.socks.iter().chain(&f.http) {
            if l.is_empty() {
                return Err("[client]: an empty listening address".into());
            }
        }
        let forwards = f.forward.iter().map(|fw| (fw, "--forward"));
        let udp = f.forward_udp.iter().map(|fw| (fw, "--forward-udp"));
        for (fw, what) in forwards.chain(udp).chain(f.reverse.iter().map(|fw| (fw, "--reverse"))) {
            let fw = match what {
                "--reverse" => fw.as_str(),
                _ => crate::tunnel_forward::split_options(fw, what).map_err(|e| format!("[client]: {e}"))?.0,
            };
            let (_, t) = split_forward(fw).map_err(|e| format!("[client]: {e}"))?;
            Target::parse(t).map_err(|e| format!("[client]: {e}"))?;
        }
        let modes = usize::from(f.socks.is_some())
            + usize::from(f.http.is_some())
            + f.forward.len()
            + f.forward_udp.len()
            + f.reverse.len()
            + usize::from(f.transparent.is_some());
        if modes == 0 {
            return Err("[client]: no front end (socks, http, forward, forward-udp, reverse or transparent)".into());
        }
        if let Some(ca) = &f.ca {
            crate::tlsconf::load_certs(ca).map_err(|e| format!("[client] ca: {e}"))?;
        }
        if let (Some(c), Some(k)) = (&f.cert, &f.key) {
            crate::tlsconf::load_certs(c).map_err(|e| format!("[client] cert: {e}"))?;
            crate::tlsconf::load_key(k).map_err(|e| format!("[client] key: {e}"))?;
        }
        println!("[client]: OK: concentrator {c}; {modes} front end(s)");
    }
    Ok(())
}

fn count_server_keys(f: &ServerFile) -> usize {
    [
        !f.listen.is_empty(),
        f.cert.is_some(),
        f.key.is_some(),
        f.client_ca.is_some(),
        !f.allow_dest.is_empty(),
        !f.deny_dest.is_empty(),
        !f.allow_reverse.is_empty(),
        f.max_sessions.is_some(),
        f.max_streams.is_some(),
        f.max_lookups.is_some(),
        f.unknown_clients.is_some(),
        f.json.is_some(),
        f.metrics.is_some(),
        f.rejoin_timeout.is_some(),
        f.ticket_keys.is_some(),
        !f.advertise.is_empty(),
        f.farm_route_key.is_some(),
        f.farm_node.is_some(),
        f.keylog.is_some(),
        f.trace.is_some(),
        f.verbose.is_some(),
        f.runtime.is_some(),
        f.threads.is_some(),
    ]
    .iter()
    .filter(|x| **x)
    .count()
}

async fn server(args: ServerArgs, a: ServerSettings) -> Result<(), String> {
    let dest_policy = a.dest_policy()?;
    let mut tls = crate::server_tls("tunnel server", a.cert.as_deref(), a.key.as_deref(), &[], a.client_ca.as_deref())?;
    // The certificate is looked up through a resolver that SIGHUP can replace.
    let certs = Arc::new(ReloadableCert(RwLock::new(tls.cert_resolver.clone())));
    tls.cert_resolver = certs.clone();
    let tickets = match &a.ticket_keys {
        Some(path) => Some(crate::farm_keys::install(&mut tls, path)?),
        None => None,
    };
    let mut addrs = Vec::new();
    for l in &a.listen {
        addrs.extend(resolve(l)?.into_iter().take(1));
    }
    let cfg = TunnelConfig {
        dest_policy: dest_policy.clone(),
        max_sessions: a.max_sessions,
        max_streams_per_session: a.max_streams,
        max_lookups: a.max_lookups,
        reverse_allowed: a.allow_reverse.clone(),
        client_policy: a.client_policy.clone(),
        server_cores: (a.runtime == crate::serve::ServerRuntime::PerCore).then_some(a.threads),
        ..TunnelConfig::default()
    };
    let mut cfg = cfg;
    if let Some(secs) = a.rejoin_timeout {
        cfg.session.rejoin_timeout = Duration::from_secs(secs);
    }
    cfg.session.advertise.extend(&a.advertise);
    if let Some((path, node)) = &a.farm_route {
        let key = crate::farm_keys::load_route_key(path)?;
        cfg.session.random = tcpls::proto::farm_route::token_source(key, *node);
        eprintln!("tcpls tunnel server: farm node {node}: join tokens carry its route label");
    }
    let rejoin_timeout = cfg.session.rejoin_timeout;
    let mut conc = Concentrator::bind(&addrs, Arc::new(tls), cfg).await.map_err(|e| e.to_string())?;
    if let (Some(addr), Some(registry)) = (a.metrics.as_deref(), conc.registry()) {
        let metrics = crate::metrics::attach_to_concentrator(&mut conc, addr, registry).await?;
        if let Some(t) = &tickets {
            metrics.with_ticketer(t.clone());
        }
    }
    let mut ctrl_c = crate::interrupt::listen();
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
        "tcpls tunnel server: destinations: {dest_policy}; at most {} session(s), {} stream(s) per session, {} name lookup(s) at once; rejoin timeout {} s",
        a.max_sessions,
        a.max_streams,
        a.max_lookups,
        rejoin_timeout.as_secs()
    );
    if !a.client_policy.is_off() {
        eprintln!("tcpls tunnel server: {}", describe_clients(&a.client_policy));
    }
    for b in bound {
        eprintln!("tcpls tunnel server: listening on {b}");
    }
    if let Some(t) = &tickets {
        let keys = t.keys();
        eprintln!(
            "tcpls tunnel server: farm ticket keys: {} key(s), current key id {}; 0-RTT off",
            keys.len(),
            keys.current_id()
        );
    }
    if !a.advertise.is_empty() {
        let list: Vec<String> = a.advertise.iter().map(|x| x.to_string()).collect();
        eprintln!("tcpls tunnel server: clients join at {}", list.join(", "));
    }
    spawn_reload_on_sighup(args, a.clone(), conc.control(), certs, tickets)?;
    let json = a.json;
    let served = conc.run(move |s| {
        if json {
            println!("{}", summary_json(&s));
        }
    });
    tokio::select! {
        r = served => r.map_err(|e| e.to_string()),
        () = ctrl_c.recv() => {
            crate::logging::info("tunnel server", "interrupted (Ctrl-C): stopping");
            crate::exit_interrupted();
        }
    }
}

/// The server certificate, replaceable while running: new handshakes use the new one, sessions
/// already established keep theirs.
#[derive(Debug)]
struct ReloadableCert(RwLock<Arc<dyn rustls::server::ResolvesServerCert>>);

impl rustls::server::ResolvesServerCert for ReloadableCert {
    fn resolve(&self, hello: rustls::server::ClientHello<'_>) -> Option<Arc<rustls::sign::CertifiedKey>> {
        self.0.read_unpoisoned().resolve(hello)
    }
}

/// On SIGHUP: the configuration file (if any) is read again under the same command line; the
/// destination policy and the certificate are replaced. Listening addresses, limits and
/// --client-ca need a restart (said in the log when they changed). A bad file changes nothing.
fn spawn_reload_on_sighup(
    args: ServerArgs,
    start: ServerSettings,
    control: tcpls_tunnel::tunnel::ConcentratorControl,
    certs: Arc<ReloadableCert>,
    tickets: Option<Arc<tcpls::proto::FarmTicketer>>,
) -> Result<(), String> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut hup = signal(SignalKind::hangup()).map_err(|e| format!("cannot watch SIGHUP: {e}"))?;
        tokio::spawn(async move {
            while hup.recv().await.is_some() {
                match reload(&args, &start, &control, &certs, tickets.as_deref()) {
                    Ok(msg) => eprintln!("tcpls tunnel server: reloaded: {msg}"),
                    Err(e) => eprintln!("tcpls tunnel server: reload failed, configuration unchanged: {e}"),
                }
            }
        });
    }
    #[cfg(not(unix))]
    let _ = (args, start, control, certs, tickets);
    Ok(())
}

fn reload(
    args: &ServerArgs,
    start: &ServerSettings,
    control: &tcpls_tunnel::tunnel::ConcentratorControl,
    certs: &ReloadableCert,
    tickets: Option<&tcpls::proto::FarmTicketer>,
) -> Result<String, String> {
    let new = ServerSettings::from(args)?;
    let policy = new.dest_policy()?;
    let tls =
        crate::server_tls("tunnel server", new.cert.as_deref(), new.key.as_deref(), &[], start.client_ca.as_deref())?;
    // Read before anything is replaced, so that a bad key file changes nothing.
    let keys_msg = match (tickets, &start.ticket_keys) {
        (Some(t), Some(path)) => Some(crate::farm_keys::reload(t, path)?),
        _ => None,
    };
    *certs.0.write_unpoisoned() = tls.cert_resolver.clone();
    control.set_dest_policy(policy.clone());
    control.set_client_policy(new.client_policy.clone());
    let mut msg = format!("destinations: {policy}; {}; certificate re-read", describe_clients(&new.client_policy));
    if let Some(k) = keys_msg {
        msg.push_str("; ");
        msg.push_str(&k);
    }
    if new.listen != start.listen
        || new.client_ca != start.client_ca
        || new.ticket_keys != start.ticket_keys
        || new.advertise != start.advertise
        || (new.runtime, new.threads) != (start.runtime, start.threads)
        || (new.max_sessions, new.max_streams, new.max_lookups)
            != (start.max_sessions, start.max_streams, start.max_lookups)
    {
        msg.push_str("; listen, client-ca, ticket-keys (the file's path), advertise, runtime, threads and the limits changed in the file take effect at the next restart");
    }
    Ok(msg)
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
        "client": s.client,
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

/// The client's flags merged over its configuration file's `[client]` table.
struct ClientSettings {
    concentrator: String,
    path: Vec<String>,
    bind: Option<String>,
    path_manager: Option<String>,
    ca: Option<PathBuf>,
    insecure: bool,
    server_name: Option<String>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    socks: Option<String>,
    http: Option<String>,
    forward: Vec<String>,
    forward_udp: Vec<String>,
    reverse: Vec<String>,
    transparent: Option<u16>,
    no_reconnect: bool,
    join_advertised: bool,
    join_sni_domain: Option<String>,
    reconnect_wait: f64,
    reconnect_max: f64,
    keepalive: f64,
    metrics: Option<String>,
    bond: bool,
    redundant: bool,
}

impl ClientSettings {
    fn from(a: ClientArgs, f: ClientFile) -> Result<ClientSettings, String> {
        let (cert, key) = match (a.cert, a.key) {
            (Some(c), Some(k)) => (Some(c), Some(k)),
            _ => (f.cert, f.key),
        };
        if cert.is_some() != key.is_some() {
            return Err("cert and key go together (configuration file)".into());
        }
        let secs = |v: Option<f64>, what: &str, d: f64| match v {
            Some(x) => seconds(&x.to_string()).map_err(|e| format!("{what}: {e}")),
            None => Ok(d),
        };
        let s = ClientSettings {
            concentrator: pick(a.concentrator, f.concentrator)
                .ok_or("--concentrator is required (or `concentrator` in the [client] table of --config)")?,
            path: pick_list(a.path, f.path),
            bind: pick(a.bind, f.bind),
            path_manager: pick(a.path_manager, f.path_manager),
            ca: pick(a.ca, f.ca),
            insecure: a.insecure || f.insecure.unwrap_or(false),
            server_name: pick(a.server_name, f.server_name),
            cert,
            key,
            socks: pick(a.mode.frontend.socks, f.socks),
            http: pick(a.mode.http, f.http),
            forward: pick_list(a.mode.frontend.forward, f.forward),
            forward_udp: pick_list(a.mode.forward_udp, f.forward_udp),
            reverse: pick_list(a.mode.reverse, f.reverse),
            transparent: pick(a.mode.frontend.transparent, f.transparent),
            no_reconnect: a.no_reconnect || f.no_reconnect.unwrap_or(false),
            join_advertised: a.join_advertised || f.join_advertised.unwrap_or(false),
            join_sni_domain: pick(a.join_sni_domain, f.join_sni_domain),
            reconnect_wait: secs(pick(a.reconnect_wait, f.reconnect_wait), "reconnect-wait", 10.0)?,
            reconnect_max: secs(pick(a.reconnect_max, f.reconnect_max), "reconnect-max", 30.0)?,
            keepalive: secs(pick(a.keepalive, f.keepalive), "keepalive", 10.0)?,
            metrics: pick(a.metrics, f.metrics),
            bond: a.bond || f.bond.unwrap_or(false),
            redundant: a.redundant || f.redundant.unwrap_or(false),
        };
        if s.socks.is_none()
            && s.http.is_none()
            && s.forward.is_empty()
            && s.forward_udp.is_empty()
            && s.reverse.is_empty()
            && s.transparent.is_none()
        {
            return Err(
                "at least one of --socks, --http, --forward, --forward-udp, --reverse, --transparent is required"
                    .into(),
            );
        }
        Ok(s)
    }
}

/// Every address `--concentrator` names (comma-separated, each possibly a name with several
/// addresses), in order, without repeats.
fn concentrator_addrs(list: &str) -> Result<Vec<SocketAddr>, String> {
    let mut concentrators: Vec<SocketAddr> = Vec::new();
    for one in list.split(',').map(str::trim) {
        for addr in resolve(one).map_err(|e| format!("--concentrator {one}: {e}"))? {
            if !concentrators.contains(&addr) {
                concentrators.push(addr);
            }
        }
    }
    if concentrators.is_empty() {
        return Err("--concentrator: no address".into());
    }
    Ok(concentrators)
}

/// The TCP front ends, listening: (listener, address, front end, bonded).
type Listener = (tokio::net::TcpListener, SocketAddr, Frontend, bool);

async fn listen_frontends(a: &ClientSettings) -> Result<Vec<Listener>, String> {
    // (listening address, front end, bonded)
    let mut frontends = Vec::new();
    if let Some(s) = &a.socks {
        frontends.push((tcpls_tunnel::cli::resolve(s, None).await?, Frontend::Socks, a.bond));
    }
    if let Some(h) = &a.http {
        frontends.push((tcpls_tunnel::cli::resolve(h, None).await?, Frontend::Http, a.bond));
    }
    for f in &a.forward {
        let (f, options) = crate::tunnel_forward::split_options(f, "--forward")?;
        let (l, t) = split_forward(f)?;
        let listen = tcpls_tunnel::cli::resolve(l, None).await?;
        frontends.push((listen, Frontend::Forward(Target::parse(t)?), a.bond || options.bond));
    }
    if let Some(p) = a.transparent {
        frontends.push((SocketAddr::from((Ipv4Addr::UNSPECIFIED, p)), Frontend::Transparent, a.bond));
    }
    let mut listeners = Vec::new();
    for (listen, frontend, bond) in frontends {
        let l = tcpls_tunnel::frontend::listen(listen).map_err(|e| format!("cannot listen on {listen}: {e}"))?;
        listeners.push((l, listen, frontend, bond));
    }
    Ok(listeners)
}

/// A UDP forward, bound: (socket, address, target, redundant).
type UdpForward = (tokio::net::UdpSocket, SocketAddr, Target, bool);

async fn bind_udp_forwards(a: &ClientSettings) -> Result<Vec<UdpForward>, String> {
    let mut udp = Vec::new();
    for f in &a.forward_udp {
        let (f, options) = crate::tunnel_forward::split_options(f, "--forward-udp")?;
        let (l, t) = split_forward(f)?;
        let listen = tcpls_tunnel::cli::resolve(l, None).await?;
        let socket =
            tokio::net::UdpSocket::bind(listen).await.map_err(|e| format!("cannot listen on {listen}/udp: {e}"))?;
        udp.push((socket, listen, Target::parse(t)?, a.redundant || options.redundant));
    }
    Ok(udp)
}

/// The tunnel's settings from the command line and the config file.
fn tunnel_config(
    a: &ClientSettings,
    other_concentrators: &[SocketAddr],
    any_bonded: bool,
) -> Result<TunnelConfig, String> {
    let mut cfg = TunnelConfig { reconnect_wait: Duration::from_secs_f64(a.reconnect_wait), ..TunnelConfig::default() };
    // A bonded forward needs the bonded receive window too (TunnelConfig::bond raises it).
    cfg.bond = a.bond || any_bonded;
    // SOCKS5 UDP ASSOCIATE follows --redundant; each UDP forward has its own setting.
    cfg.redundant = a.redundant;
    // A concentrator that vanished without a FIN or RST (a dead uplink, a blackhole) is noticed
    // by the keepalive rather than by TCP's retransmission timeout (minutes).
    cfg.session.keepalive = Some(Duration::from_secs_f64(a.keepalive));
    if let Some(b) = &a.bind {
        cfg.bind = crate::args::parse_local(b).map_err(|e| format!("--bind {b}: {e}"))?;
    }
    cfg.path_manager = a.path_manager.as_deref().map(crate::args::parse_policy).transpose()?;
    cfg.other_concentrators = other_concentrators.to_vec();
    cfg.join_advertised = a.join_advertised;
    if let Some(domain) = &a.join_sni_domain {
        let names =
            tcpls::proto::farm_route::join_server_name(domain).map_err(|e| format!("--join-sni-domain: {e}"))?;
        cfg.session.join_server_name = Some(names);
    }
    Ok(cfg)
}

async fn client(a: ClientArgs, file: ClientFile) -> Result<(), String> {
    let a = ClientSettings::from(a, file)?;
    let concentrators = concentrator_addrs(&a.concentrator)?;
    let concentrator = concentrators[0];
    // [LOCAL@]REMOTE: a second uplink towards the concentrator's one address, or another address.
    let paths = a.path.iter().map(|p| crate::args::parse_path(p)).collect::<Result<Vec<_>, _>>()?;
    let listeners = listen_frontends(&a).await?;
    let first = a.concentrator.split(',').next().unwrap_or_default().trim();
    let name = a.server_name.clone().unwrap_or_else(|| host_of(first));
    let name = tcpls::server_name_for(&name).map_err(|e| e.to_string())?;
    let identity = a.cert.as_deref().zip(a.key.as_deref());
    let tls = crate::tlsconf::client_config_with_identity(a.ca.as_deref(), a.insecure, &[], None, identity)?;
    let udp = bind_udp_forwards(&a).await?;
    let mut reverse = Vec::new();
    for r in &a.reverse {
        let (remote, local) = split_forward(r)?;
        let remote: SocketAddr = remote.parse().map_err(|_| format!("--reverse: '{remote}' is not IP:PORT"))?;
        reverse.push((remote, Target::parse(local)?));
    }
    let cfg = tunnel_config(&a, &concentrators[1..], listeners.iter().any(|(_, _, _, bond)| *bond))?;
    let client = TunnelClient::connect_paths(concentrator, name, Arc::new(tls), &paths, cfg).await.map_err(|e| {
        match crate::tlsconf::advice(&e) {
            // An untrusted certificate asks for --ca or --insecure, as for connect and perf.
            Some(advice) => format!("cannot open a TCPLS session to {concentrator}: {advice}"),
            None => e.to_string(),
        }
    })?;
    let _reconnect = (!a.no_reconnect).then(|| {
        client.keep_connected(Backoff { max: Duration::from_secs_f64(a.reconnect_max), ..Backoff::default() })
    });
    if let Some(addr) = &a.metrics {
        crate::metrics::attach_to_tunnel_client(client.clone(), addr).await?;
    }
    let conns = client.session().usable_connections().len();
    // Listening for signals before saying we accept: a stop right after that line is clean.
    let stop = crate::stop_signal::listen();
    let mut what: Vec<String> = listeners
        .iter()
        .map(|(_, l, f, bond)| format!("{l} ({}{})", describe(f), if *bond { ", bonded" } else { "" }))
        .collect();
    what.extend(
        udp.iter().map(|(_, l, t, r)| format!("{l}/udp (forward to {t}{})", if *r { ", redundant" } else { "" })),
    );
    what.extend(reverse.iter().map(|(r, l)| format!("{r} on the concentrator (reverse to {l})")));
    eprintln!(
        "tcpls tunnel client: session to {concentrator} ({conns} connection(s)), accepting on {}",
        what.join(", ")
    );
    serve_until_stopped(client, concentrator, (listeners, udp, reverse), stop).await
}

/// Serves every front end until one fails or a signal stops the client.
async fn serve_until_stopped(
    client: TunnelClient,
    concentrator: SocketAddr,
    (listeners, udp, reverse): (Vec<Listener>, Vec<UdpForward>, Vec<(SocketAddr, Target)>),
    mut stop: crate::stop_signal::StopSignals,
) -> Result<(), String> {
    let mut serving = tokio::task::JoinSet::new();
    for (l, _, frontend, bond) in listeners {
        let client = client.bonded(bond);
        serving.spawn(async move { client.serve(l, frontend).await });
    }
    for (socket, _, target, redundant) in udp {
        let client = client.with_redundant(redundant);
        serving.spawn(async move { client.serve_udp(socket, target).await });
    }
    if !reverse.is_empty() {
        let client = client.clone();
        serving.spawn(async move { client.serve_reverse(reverse).await });
    }
    tokio::select! {
        ended = serving.join_next() => match ended {
            Some(Ok(Err(e))) => Err(e.to_string()),
            Some(Err(e)) => Err(e.to_string()),
            _ => Err("stopped".into()),
        },
        signal = stop.recv() => {
            // Close the session properly (close_notify), so the concentrator ends it at once,
            // and never reconnect: the one line below is all a stop logs.
            crate::logging::info(
                "tunnel client",
                &format!(
                    "{}: closing the session to {concentrator} (close_notify), not reconnecting",
                    signal.name()
                ),
            );
            client.shutdown(Duration::from_secs(2)).await;
            let _ = tcpls::flush_default_trace();
            std::process::exit(i32::from(signal.exit_status()));
        }
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
