//! The `tcpls` command: TCPLS servers, clients and measurements (see docs/CLI.md).

mod args;
mod connect;
mod farm_keys;
mod frontend_args;
mod interrupt;
mod iperf3;
mod logging;
mod metrics;
mod perf;
mod probe;
mod serve;
mod session_info;
mod stop_signal;
mod tlsconf;
mod tm3;
mod transfer;
mod tunnel;
mod tunnel_config;
mod tunnel_config_values;
mod tunnel_forward;
mod units;

/// The perf payload, shared with the benchmarks and the experiments.
use tcpls_pattern as pattern;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use tcpls::SessionConfig;

use crate::args::{host_of, parse_send_budget, parse_size, resolve};
use crate::perf::protocol::Direction;

#[derive(Parser)]
#[command(name = "tcpls", version, about = "TCPLS: many streams over TCP and TLS 1.3 (servers, clients, measurements)")]
struct Cli {
    /// Append the TLS secrets of every handshake to FILE in the NSS key log format (for
    /// Wireshark), like SSLKEYLOGFILE=FILE, which is honoured too.
    #[arg(long, global = true, value_name = "FILE")]
    keylog: Option<PathBuf>,
    /// Write the event trace of every session this command makes or accepts to FILE: JSON
    /// lines, qlog-style (connections joined and lost, failovers, streams, per-connection
    /// counters every 100 ms; docs/OBSERVABILITY.md §4). Plot it with `experiments trace-plot`.
    #[arg(long, global = true, value_name = "FILE")]
    trace: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Write a self-signed certificate and key (for localhost, 127.0.0.1, ::1 and --name).
    #[command(
        after_help = "Examples:\n  tcpls cert --out ./tcpls-cert --name myhost.example\n  tcpls cert --out ./short-lived --days 30"
    )]
    Cert {
        /// Directory for cert.pem and key.pem.
        #[arg(long, default_value = "tcpls-cert")]
        out: PathBuf,
        /// Extra DNS names or IP addresses for the certificate.
        #[arg(long)]
        name: Vec<String>,
        /// Replace cert.pem and key.pem if they exist (default: refuse).
        #[arg(long)]
        force: bool,
        /// Days the certificate is valid from now (1 to 3650).
        #[arg(long, value_name = "N", default_value_t = tlsconf::CERT_DAYS,
              value_parser = clap::value_parser!(u32).range(1..=3650))]
        days: u32,
    },
    /// Run a TCPLS server (plain TLS clients are served too, through fallback).
    #[command(
        after_help = "Examples:\n  tcpls serve --listen 127.0.0.1:4443 --cert tcpls-cert/cert.pem --key tcpls-cert/key.pem\n  tcpls serve --mode echo --listen [::1]:4443 --listen 127.0.0.1:4443\n  tcpls serve --listen 127.0.0.1:4443 --runtime per-core --threads 2       (per core: 2 listeners and runtimes)\n  tcpls serve --listen 127.0.0.1:4443 --runtime work-stealing --threads 2   (one runtime, 2 worker threads)"
    )]
    Serve(ServeArgs),
    /// Connect and relay stdin to stream 0 and stream 0 to stdout (plain TLS servers work too).
    #[command(
        after_help = "Examples:\n  echo hello | tcpls connect 127.0.0.1:4443 --ca tcpls-cert/cert.pem\n  tcpls connect 127.0.0.1:4443 --insecure --show-session --keylog keys.txt < /dev/null\n  echo hello | tcpls connect 127.0.0.1:4443 --insecure --bind 127.0.0.2 --path 127.0.0.3@127.0.0.1:4443 --path-manager fullmesh -v\n  (two local sides, as a laptop's Wi-Fi and LTE: --bind dev:wlan0 --path dev:wwan0@HOST:4443)"
    )]
    Connect {
        /// Server address: HOST:PORT, [V6]:PORT or HOST (port 4443).
        addr: String,
        #[command(flatten)]
        trust: TrustArgs,
        /// ALPN ids to offer after tcpls/1 (used when the server speaks plain TLS).
        #[arg(long)]
        alpn: Vec<String>,
        /// Print the negotiated session on stderr, like `openssl s_client`: TCPLS or fallback
        /// (and why), cipher, ALPN, resumption, the server's certificate, the connections.
        #[arg(short = 'v', long, visible_alias = "verbose")]
        show_session: bool,
        #[command(flatten)]
        paths: PathArgs,
    },
    /// Measure goodput against `tcpls serve --mode perf`; every byte is verified.
    #[command(
        after_help = "Examples:\n  tcpls perf 127.0.0.1:4443 --insecure --bytes 2G\n  tcpls perf 127.0.0.1:4443 --insecure --streams 64 --bytes 256M --download --json\n  tcpls perf -c 127.0.0.1 -p 4443 --insecure -t 2 -P 4 -R -O 1   (iperf3 style)\nServer: `tcpls serve --mode perf`. iperf3's options and their tcpls names: docs/CLI.md.\nExit status: 0 done, 1 failed, 2 usage error, 130 interrupted (Ctrl-C; the summary is printed)."
    )]
    Perf(perf::command::PerfArgs),
    /// Start a server and a client on loopback and measure (no setup needed).
    #[command(after_help = "Example:\n  tcpls demo --bytes 256M")]
    Demo {
        /// Bytes for the single-stream runs.
        #[arg(long, value_parser = parse_size, default_value = "1G")]
        bytes: u64,
        #[arg(long)]
        json: bool,
    },
    /// TM3 multiplexing proxies speaking the original pipe protocol on plain TCP pipes.
    #[command(
        after_help = "Examples:\n  tcpls tm3 rp 4 --port 6000\n  tcpls tm3 lp 203.0.113.5:6000 4 --forward 127.0.0.1:8080=198.51.100.7:80"
    )]
    Tm3(tm3::Tm3Args),
    /// The TCPLS tunnel: many TCP connections over one TCPLS session (SOCKS5, forwards, transparent).
    #[command(
        after_help = "Examples:\n  tcpls tunnel server --listen 0.0.0.0:4443 --cert cert.pem --key key.pem\n  tcpls tunnel client --concentrator 203.0.113.5 --ca cert.pem --socks 127.0.0.1:1080"
    )]
    Tunnel(tunnel::TunnelArgs),
    /// Probe a TCPLS server with the extension frames: RTT, its tcp_info view, NAT detection.
    #[command(
        after_help = "Examples:\n  tcpls probe 127.0.0.1:4443 --insecure\n  tcpls probe 203.0.113.5:4443 --ca cert.pem --rtt --nat --json"
    )]
    Probe {
        #[command(flatten)]
        probe: probe::ProbeArgs,
        #[command(flatten)]
        trust: TrustArgs,
    },
}

/// Where a client's connections leave from (`connect`; `perf` and `tunnel client` have the same).
#[derive(Args)]
struct PathArgs {
    /// Local side of the first connection: a local address (10.0.0.2) or an interface
    /// (dev:wlan0; SO_BINDTODEVICE). Default: the kernel's choice by its routes.
    #[arg(long, value_name = "LOCAL")]
    bind: Option<String>,
    /// Add a TCP connection: [LOCAL@]REMOTE, towards another server address or the same one
    /// from another local address or interface (`dev:wwan0@203.0.113.5:4443`); repeatable.
    #[arg(long, value_name = "[LOCAL@]REMOTE")]
    path: Vec<String>,
    /// Keep the paths up with a path manager: `manual` (--bind and the --path list) or
    /// `fullmesh` (every local side × every server address, advertised ones included). Lost
    /// paths are re-joined with backoff, interface events (Linux) drop or bring back paths at
    /// once, and the session survives an outage of every path for up to 60 s.
    #[arg(long, value_name = "POLICY", value_parser = ["manual", "fullmesh"])]
    path_manager: Option<String>,
}

/// [`PathArgs`] parsed.
pub struct Paths {
    pub bind: tcpls::PathOptions,
    pub paths: Vec<(std::net::SocketAddr, tcpls::PathOptions)>,
    pub manager: Option<tcpls::PathPolicy>,
}

impl PathArgs {
    fn parse(&self) -> Result<Paths, String> {
        let bind = match &self.bind {
            Some(b) => args::parse_local(b).map_err(|e| format!("--bind {b}: {e}"))?,
            None => tcpls::PathOptions::new(),
        };
        let paths = self.path.iter().map(|p| args::parse_path(p)).collect::<Result<Vec<_>, _>>()?;
        let manager = self.path_manager.as_deref().map(args::parse_policy).transpose()?;
        Ok(Paths { bind, paths, manager })
    }
}

#[derive(Args)]
struct TrustArgs {
    /// CA certificate (PEM) to verify the server with (default: the system's roots).
    #[arg(long, conflicts_with = "insecure")]
    ca: Option<PathBuf>,
    /// Do not verify the server's certificate (testing only).
    #[arg(long)]
    insecure: bool,
    /// TLS server name to verify (default: the host of ADDR).
    #[arg(long)]
    server_name: Option<String>,
    /// Restrict TLS 1.3 to one cipher suite: aes128 (default first), aes256, chacha20.
    #[arg(long)]
    cipher: Option<String>,
}

#[derive(Args)]
struct ServeArgs {
    /// Address to listen on; repeat for several (e.g. IPv4 and IPv6).
    #[arg(long, default_value = "0.0.0.0:4443")]
    listen: Vec<String>,
    /// Certificate chain (PEM). Without --cert/--key an ephemeral self-signed one is used.
    #[arg(long, requires = "key")]
    cert: Option<PathBuf>,
    /// Private key (PEM).
    #[arg(long, requires = "cert")]
    key: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "perf")]
    mode: serve::Mode,
    /// Extra address to announce to clients (New Address); repeatable. With several specific
    /// --listen addresses, those are announced too.
    #[arg(long)]
    advertise: Vec<String>,
    /// Join tokens given to each client (the limit on its extra connections).
    #[arg(long, default_value_t = 4)]
    tokens: u32,
    /// Session ticket keys shared by the servers of a farm (one key per line, 64 hex digits,
    /// current first; `openssl rand -hex 32`), re-read on SIGHUP: any server resumes any
    /// server's tickets. Turns 0-RTT off (docs/RESUMPTION.md, "Farm tickets").
    #[arg(long, value_name = "FILE")]
    ticket_keys: Option<PathBuf>,
    /// Sessions served at once; more are refused.
    #[arg(long, default_value_t = 10_000)]
    max_sessions: usize,
    /// Exit after this many sessions have ended.
    #[arg(long)]
    sessions: Option<u64>,
    /// ALPN ids accepted from plain TLS clients (besides none).
    #[arg(long)]
    alpn: Vec<String>,
    /// One JSON object per ended session on stdout.
    #[arg(long)]
    json: bool,
    /// Serve Prometheus metrics on http://ADDR/metrics (docs/OBSERVABILITY.md).
    #[arg(long, value_name = "ADDR")]
    metrics: Option<String>,
    /// TCP congestion control a client may ask for with --peer-cc; repeatable (default: cubic,
    /// reno, bbr).
    #[arg(long)]
    allow_cc: Vec<String>,
    /// End a session after this many seconds without receiving anything from its client
    /// (0: never). Clients that idle longer on purpose use keepalive.
    #[arg(long, default_value_t = 300)]
    idle_timeout: u64,
    /// Keep a session whose every connection was lost this many seconds for its client to
    /// rejoin (0: end it with its last connection). Mobile clients with a path manager survive
    /// outages of up to 60 s: set it at least as long for them.
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    rejoin_timeout: u64,
    /// Memory one session may hold in received stream data, over all its streams. Each open
    /// stream is charged at least its 64 KiB initial window, so this also caps the streams a
    /// client may have open at once: the default admits about 990 (e.g. 256M for 1000+).
    #[arg(long, value_parser = parse_size, default_value = "64M", value_name = "SIZE")]
    receive_budget: u64,
    /// Most memory one session may hold in stream data queued for sending (written by the
    /// server, not yet acknowledged), shared fairly by its streams; each stream may always queue
    /// 32 KiB. The budget in use follows each session's path (twice its bandwidth-delay product,
    /// at least 1 MiB) up to this.
    #[arg(long, value_parser = parse_send_budget, default_value = "32M", value_name = "SIZE")]
    send_budget: usize,
    /// How sessions are spread over threads: work-stealing (one runtime whose threads share
    /// every session) or per-core (one listener and one single-threaded runtime per core, each
    /// session and its joined connections kept on one core; joins that reach another core are
    /// handed over). Per core costs fewer syscalls and context switches per handshake; one
    /// session then uses one core. docs/PERFORMANCE.md, "Handshakes", compares them.
    #[arg(long, value_enum, default_value_t = serve::ServerRuntime::WorkStealing, value_name = "MODEL")]
    runtime: serve::ServerRuntime,
    /// Threads serving sessions: cores with --runtime per-core, worker threads with
    /// work-stealing (0: one per CPU the process may use).
    #[arg(long, default_value_t = 0, value_name = "N")]
    threads: usize,
    /// Keep every session's send budget at --send-budget and its receive windows at their
    /// maximum (32 MiB) instead of following the path and the reader: the behaviour before
    /// autotuning, for comparisons.
    #[arg(long)]
    no_autotune: bool,
}

/// Exit status after Ctrl-C (128 + SIGINT, as shells report it), for every subcommand.
const EXIT_INTERRUPTED: u8 = 130;

/// How a command ended, when it did not fail.
enum Ended {
    Done,
    /// Ctrl-C: what was done is reported; the exit status is 130.
    Interrupted,
    /// SIGTERM (`perf`): what was done is reported; the exit status is 143.
    Terminated,
}

/// The runtime's worker threads when not tokio's default (one per CPU, or
/// `TOKIO_WORKER_THREADS`, which always wins).
/// Worker threads of the process's runtime, when the command chooses: `--runtime work-stealing
/// --threads N` (serve, tunnel server: the sessions run on this runtime), or one for `tunnel
/// client` unless TOKIO_WORKER_THREADS says otherwise.
fn worker_threads(command: &Command) -> Option<usize> {
    match command {
        Command::Serve(a) => (a.runtime == serve::ServerRuntime::WorkStealing && a.threads > 0).then_some(a.threads),
        Command::Tunnel(t) => tunnel::work_stealing_threads(t).or_else(|| {
            std::env::var_os("TOKIO_WORKER_THREADS").is_none().then(|| tunnel::worker_threads(t)).flatten()
        }),
        _ => None,
    }
}

fn main() -> ExitCode {
    tlsconf::warm_up_crypto();
    if let Some(hint) = iperf3::hint(std::env::args()) {
        eprintln!("tcpls perf: {hint}");
        return ExitCode::from(2);
    }
    let mut cli = Cli::parse();
    if let Command::Tunnel(t) = &cli.command {
        // The configuration file's keys for the global flags; the command line wins.
        let (keylog, trace) = tunnel::file_globals(t);
        cli.keylog = cli.keylog.or(keylog);
        cli.trace = cli.trace.or(trace);
    }
    if let Some(file) = &cli.keylog {
        // rustls' KeyLogFile (tlsconf.rs) writes where SSLKEYLOGFILE says. Set before any
        // thread starts, so nothing reads the environment concurrently.
        std::env::set_var("SSLKEYLOGFILE", file);
    }
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = worker_threads(&cli.command) {
        builder.worker_threads(n);
    }
    let runtime = match builder.enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tcpls: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let trace = match &cli.trace {
        Some(file) => match tcpls::JsonLinesTrace::create(file) {
            Ok(sink) => {
                let sink = std::sync::Arc::new(sink);
                tcpls::set_default_trace(sink.clone());
                // Written out every second too, so a server's trace can be read while it runs
                // (and little is lost if it is killed).
                let flusher = sink.clone();
                runtime.spawn(async move {
                    loop {
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        let _ = flusher.flush();
                    }
                });
                Some(sink)
            }
            Err(e) => {
                eprintln!(
                    "tcpls: cannot create the trace file {}: {e} (check the directory exists and is writable)",
                    file.display()
                );
                return ExitCode::FAILURE;
            }
        },
        None => None,
    };
    let result = runtime.block_on(run(cli.command));
    if let Some(sink) = trace {
        if let Err(e) = sink.flush() {
            eprintln!("tcpls: writing the trace file: {e}");
        }
    }
    // The command is over: what is left (a session's driver, a blocked socket call on a
    // silent path) must not delay the exit.
    runtime.shutdown_timeout(Duration::from_millis(100));
    match result {
        Ok(Ended::Done) => ExitCode::SUCCESS,
        Ok(Ended::Interrupted) => ExitCode::from(EXIT_INTERRUPTED),
        Ok(Ended::Terminated) => ExitCode::from(interrupt::Stop::Terminate.exit_status()),
        Err(e) => {
            eprintln!("tcpls: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(command: Command) -> Result<Ended, String> {
    let done = |r: Result<(), String>| r.map(|()| Ended::Done);
    match command {
        Command::Cert { out, name, force, days } => done(cert(&out, &name, force, days)),
        Command::Serve(a) => serve::command(a).await,
        Command::Connect { addr, trust, alpn, show_session, paths } => {
            let (target, name, tls) = client_setup(&addr, &trust, &alpn)?;
            let show = show_session.then(|| match (&trust.ca, trust.insecure) {
                (_, true) => session_info::Trust::Insecure,
                (Some(ca), false) => session_info::Trust::Ca(ca),
                (None, false) => session_info::Trust::SystemRoots,
            });
            let paths = paths.parse()?;
            done(connect::run(target, name, tls, show, paths).await)
        }
        Command::Perf(a) => perf::command::run(a).await,
        Command::Demo { bytes, json } => done(demo(bytes, json).await),
        Command::Tm3(a) => done(tm3::run(a).await),
        Command::Tunnel(a) => done(tunnel::run(a).await),
        Command::Probe { probe, trust } => {
            let (target, name, tls) = client_setup(&probe.addr, &trust, &[])?;
            done(probe::run(probe, target, name, tls).await)
        }
    }
}

fn cert(out: &Path, names: &[String], force: bool, days: u32) -> Result<(), String> {
    let (cert_path, key_path) = (out.join("cert.pem"), out.join("key.pem"));
    if !force {
        if let Some(existing) = [&cert_path, &key_path].into_iter().find(|p| p.exists()) {
            return Err(format!(
                "{} exists: not overwriting it (pass --force to replace the certificate and key)",
                existing.display()
            ));
        }
    }
    let (cert, key) = tlsconf::self_signed_for_days(names, days)?;
    std::fs::create_dir_all(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    std::fs::write(&cert_path, cert).map_err(|e| format!("cannot write {}: {e}", cert_path.display()))?;
    write_private(&key_path, key.as_bytes())?;
    println!("wrote {} and {} (valid for {days} days)", cert_path.display(), key_path.display());
    Ok(())
}

fn write_private(path: &Path, data: &[u8]) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    f.write_all(data).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn client_setup(
    addr: &str,
    trust: &TrustArgs,
    alpn: &[String],
) -> Result<(SocketAddr, rustls::pki_types::ServerName<'static>, rustls::ClientConfig), String> {
    let target = *resolve(addr)?.first().ok_or_else(|| format!("{addr} resolved to no address"))?;
    let name = trust.server_name.clone().unwrap_or_else(|| host_of(addr));
    let name = tcpls::server_name_for(&name).map_err(|e| e.to_string())?;
    let tls = tlsconf::client_config(trust.ca.as_deref(), trust.insecure, alpn, trust.cipher.as_deref())?;
    Ok((target, name, tls))
}

/// `command` names the subcommand in the warning about an ephemeral certificate.
fn server_tls(
    command: &str,
    cert: Option<&Path>,
    key: Option<&Path>,
    alpn: &[String],
    client_ca: Option<&Path>,
) -> Result<rustls::ServerConfig, String> {
    let (certs, key) = match (cert, key) {
        (Some(c), Some(k)) => (tlsconf::load_certs(c)?, tlsconf::load_key(k)?),
        _ => {
            logging::warn(
                command,
                "no --cert/--key: using an ephemeral self-signed certificate (clients need --insecure)",
            );
            let (c, k) = tlsconf::self_signed(&[])?;
            let certs =
                rustls_pemfile::certs(&mut c.as_bytes()).collect::<Result<Vec<_>, _>>().map_err(|e| e.to_string())?;
            let key =
                rustls_pemfile::private_key(&mut k.as_bytes()).map_err(|e| e.to_string())?.ok_or("no key generated")?;
            (certs, key)
        }
    };
    tlsconf::server_config(certs, key, alpn, client_ca)
}

/// Turns true at the first Ctrl-C (the command then winds down and reports); a second Ctrl-C
/// ends the process at once, with the same exit status.
/// Exits at once with status 130, the `--trace` file written out first.
pub(crate) fn exit_interrupted() -> ! {
    exit_on_signal(interrupt::Stop::Interrupt)
}

/// Exits at once with the status of `signal` (130 or 143), the `--trace` file written out first.
pub(crate) fn exit_on_signal(signal: interrupt::Stop) -> ! {
    let _ = tcpls::flush_default_trace();
    std::process::exit(i32::from(signal.exit_status()))
}

/// A loopback server and client in one process: the quickest way to see TCPLS work.
async fn demo(bytes: u64, json: bool) -> Result<(), String> {
    let tls = server_tls_quiet()?;
    let listeners =
        serve::bind(&["127.0.0.1:0".parse().map_err(|_| "bad address")?], tls, SessionConfig::default()).await?;
    let addr = listeners[0].local_addr();
    tokio::spawn(serve::run(
        listeners,
        serve::ServeOptions {
            mode: serve::Mode::Perf,
            max_sessions: 16,
            json: false,
            quiet: true,
            sessions_limit: None,
            metrics: None,
            interrupt: None,
        },
    ));
    if !json {
        println!("TCPLS demo: server on {addr}, client in the same process, payload verified byte for byte\n");
    }
    let runs =
        [(Direction::Upload, 1u32, bytes), (Direction::Download, 1, bytes), (Direction::Download, 64, bytes / 4)];
    let mut reports = Vec::new();
    for (direction, streams, bytes) in runs {
        let name = tcpls::server_name_for("localhost").map_err(|e| e.to_string())?;
        let tls = tlsconf::client_config(None, true, &[], None)?;
        let report = perf::client::run(
            perf::client::PerfOptions {
                addrs: vec![addr],
                paths: Vec::new(),
                path_manager: None,
                aggregate: false,
                scheduler: None,
                migrate_at: None,
                server_name: name,
                tls,
                settings: SessionConfig::default(),
                mode: match direction {
                    Direction::Upload => perf::client::Mode::Upload,
                    Direction::Download => perf::client::Mode::Download,
                },
                bytes: Some(bytes),
                time: None,
                omit: Duration::ZERO,
                interval: None,
                streams,
                bind: None,
                bind_device: None,
                ext: probe::PerfExt::default(),
                zero_rtt: false,
                output: None,
            },
            tokio::sync::watch::channel(None).1,
        )
        .await?;
        if let Some(e) = &report.error {
            return Err(format!("demo transfer failed: {e}"));
        }
        if !report.verified {
            return Err("demo transfer failed verification".into());
        }
        if !json {
            println!("{}", perf::report::one_line(&report));
        }
        reports.push(report);
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&reports).map_err(|e| e.to_string())?);
    }
    Ok(())
}

fn server_tls_quiet() -> Result<rustls::ServerConfig, String> {
    let (c, k) = tlsconf::self_signed(&[])?;
    let certs = rustls_pemfile::certs(&mut c.as_bytes()).collect::<Result<Vec<_>, _>>().map_err(|e| e.to_string())?;
    let key = rustls_pemfile::private_key(&mut k.as_bytes()).map_err(|e| e.to_string())?.ok_or("no key generated")?;
    tlsconf::server_config(certs, key, &[], None)
}
