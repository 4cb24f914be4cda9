//! The `tcpls` command: TCPLS servers, clients and measurements (see docs/CLI.md).

mod args;
mod connect;
mod logging;
mod perf;
mod perf_proto;
mod probe;
mod serve;
mod tlsconf;
mod tm3;
mod transfer;
mod tunnel;

/// The perf payload, shared with the benchmarks and the experiments.
use tcpls_pattern as pattern;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use tcpls::SessionConfig;

use crate::args::{host_of, parse_rate, parse_size, resolve};
use crate::perf_proto::Direction;

#[derive(Parser)]
#[command(name = "tcpls", version, about = "TCPLS: many streams over TCP and TLS 1.3 (servers, clients, measurements)")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Write a self-signed certificate and key (for localhost, 127.0.0.1, ::1 and --name).
    #[command(after_help = "Example:\n  tcpls cert --out ./tcpls-cert --name myhost.example")]
    Cert {
        /// Directory for cert.pem and key.pem.
        #[arg(long, default_value = "tcpls-cert")]
        out: PathBuf,
        /// Extra DNS names or IP addresses for the certificate.
        #[arg(long)]
        name: Vec<String>,
    },
    /// Run a TCPLS server (plain TLS clients are served too, through fallback).
    #[command(
        after_help = "Examples:\n  tcpls serve --listen 127.0.0.1:4443 --cert tcpls-cert/cert.pem --key tcpls-cert/key.pem\n  tcpls serve --mode echo --listen [::1]:4443 --listen 127.0.0.1:4443"
    )]
    Serve(ServeArgs),
    /// Connect and relay stdin to stream 0 and stream 0 to stdout (plain TLS servers work too).
    #[command(after_help = "Example:\n  echo hello | tcpls connect 127.0.0.1:4443 --ca tcpls-cert/cert.pem")]
    Connect {
        /// Server address: HOST:PORT, [V6]:PORT or HOST (port 4443).
        addr: String,
        #[command(flatten)]
        trust: TrustArgs,
        /// ALPN ids to offer after tcpls/1 (used when the server speaks plain TLS).
        #[arg(long)]
        alpn: Vec<String>,
    },
    /// Measure goodput against `tcpls serve --mode perf`; every byte is verified.
    #[command(
        after_help = "Examples:\n  tcpls perf 127.0.0.1:4443 --insecure --bytes 2G\n  tcpls perf 127.0.0.1:4443 --insecure --streams 64 --bytes 256M --download --json"
    )]
    Perf(PerfArgs),
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
    /// TCP congestion control a client may ask for with --peer-cc; repeatable (default: cubic,
    /// reno, bbr).
    #[arg(long)]
    allow_cc: Vec<String>,
    /// End a session after this many seconds without receiving anything from its client
    /// (0: never). Clients that idle longer on purpose use keepalive.
    #[arg(long, default_value_t = 300)]
    idle_timeout: u64,
}

#[derive(Args)]
struct PerfArgs {
    /// Server address: HOST:PORT, [V6]:PORT or HOST (port 4443).
    addr: String,
    /// Add a connection to the session towards another server address (joined with a token).
    #[arg(long)]
    path: Vec<String>,
    /// The server sends (default: the client sends).
    #[arg(long, conflicts_with = "upload")]
    download: bool,
    /// The client sends (default).
    #[arg(long)]
    upload: bool,
    /// Total bytes over all streams (e.g. 256M, 2G). Default 1G.
    #[arg(long, value_parser = parse_size, conflicts_with = "time")]
    bytes: Option<u64>,
    /// Run for this many seconds instead of a byte count.
    #[arg(long)]
    time: Option<f64>,
    /// Parallel streams.
    #[arg(long, default_value_t = 1)]
    streams: u32,
    /// Spread each stream over all connections (default: one connection per stream, round-robin).
    #[arg(long)]
    aggregate: bool,
    /// At this time (seconds), move every stream from the first connection to the second and
    /// close the first.
    #[arg(long)]
    migrate_at: Option<f64>,
    /// Largest record plaintext (default 16384; ~1400 smooths multipath reordering).
    #[arg(long, value_parser = parse_size)]
    record_size: Option<u64>,
    /// Disable record acknowledgements and failover (no retention of sent data; for
    /// constrained devices and to measure what ACKs cost).
    #[arg(long)]
    no_failover: bool,
    /// Force the copying receive path, for comparison: records are decrypted in the
    /// connection's buffer and copied into the stream's, instead of being decrypted straight
    /// into place. The JSON's zero_copy_bytes / copied_bytes count the client's received bytes.
    #[arg(long)]
    no_zero_copy: bool,
    /// Keep TLS session tickets in FILE: not supported (rustls 0.23 cannot serialize client
    /// tickets); use --zero-rtt, which fetches a ticket with a warm-up session in the same run.
    #[arg(long)]
    session_cache: Option<PathBuf>,
    /// 0-RTT: a warm-up session fetches a session ticket, then the measured session resumes
    /// and sends its first request as TLS early data (JSON: resumed, early_data_accepted).
    #[arg(long)]
    zero_rtt: bool,
    /// Cap the sender's rate on each connection, in bits per second, e.g. 100M (Rate Limit
    /// frame to the server for --download; our own pacing for --upload).
    #[arg(long, value_parser = parse_rate)]
    rate_limit: Option<u64>,
    /// Ask the server to switch its TCP congestion control, e.g. reno, bbr (applied if its
    /// policy allows; the server logs the outcome).
    #[arg(long)]
    peer_cc: Option<String>,
    /// TCP user timeout (failure detection) in ms on both sides (User Timeout frame).
    #[arg(long)]
    user_timeout: Option<u64>,
    #[command(flatten)]
    trust: TrustArgs,
    /// Print the summary as JSON on stdout.
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tcpls: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli.command)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tcpls: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(command: Command) -> Result<(), String> {
    match command {
        Command::Cert { out, name } => cert(&out, &name),
        Command::Serve(a) => serve_cmd(a).await,
        Command::Connect { addr, trust, alpn } => {
            let (target, name, tls) = client_setup(&addr, &trust, &alpn)?;
            connect::run(target, name, tls).await
        }
        Command::Perf(a) => perf_cmd(a).await,
        Command::Demo { bytes, json } => demo(bytes, json).await,
        Command::Tm3(a) => tm3::run(a).await,
        Command::Tunnel(a) => tunnel::run(a).await,
        Command::Probe { probe, trust } => {
            let (target, name, tls) = client_setup(&probe.addr, &trust, &[])?;
            probe::run(probe, target, name, tls).await
        }
    }
}

fn cert(out: &Path, names: &[String]) -> Result<(), String> {
    let (cert, key) = tlsconf::self_signed(names)?;
    std::fs::create_dir_all(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let (cert_path, key_path) = (out.join("cert.pem"), out.join("key.pem"));
    std::fs::write(&cert_path, cert).map_err(|e| format!("cannot write {}: {e}", cert_path.display()))?;
    write_private(&key_path, key.as_bytes())?;
    println!("wrote {} and {}", cert_path.display(), key_path.display());
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
    let target = *resolve(addr)?.first().ok_or("no address")?;
    let name = trust.server_name.clone().unwrap_or_else(|| host_of(addr));
    let name = tcpls::server_name_for(&name).map_err(|e| e.to_string())?;
    let tls = tlsconf::client_config(trust.ca.as_deref(), trust.insecure, alpn, trust.cipher.as_deref())?;
    Ok((target, name, tls))
}

fn server_tls(
    cert: Option<&Path>,
    key: Option<&Path>,
    alpn: &[String],
    client_ca: Option<&Path>,
) -> Result<rustls::ServerConfig, String> {
    let (certs, key) = match (cert, key) {
        (Some(c), Some(k)) => (tlsconf::load_certs(c)?, tlsconf::load_key(k)?),
        _ => {
            eprintln!("tcpls: no --cert/--key: using an ephemeral self-signed certificate (clients need --insecure)");
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

async fn serve_cmd(a: ServeArgs) -> Result<(), String> {
    let mut tls = server_tls(a.cert.as_deref(), a.key.as_deref(), &a.alpn, None)?;
    // 0-RTT only where a replayed request does no harm: a perf request only asks for test
    // data (RESUMPTION.md); echo and the other modes refuse early data.
    if a.mode == serve::Mode::Perf {
        tls.max_early_data_size = tcpls::proto::tls::MAX_EARLY_DATA as u32;
    }
    let mut listen = Vec::new();
    for l in &a.listen {
        listen.extend(resolve(l)?.into_iter().take(1));
    }
    // Clients learn every address they may join: the specific --listen addresses (not wildcard
    // ones, which name no reachable address) and the --advertise ones.
    let mut advertise: Vec<SocketAddr> = listen.iter().copied().filter(|a| !a.ip().is_unspecified()).collect();
    if advertise.len() < 2 {
        advertise.clear();
    }
    for l in &a.advertise {
        advertise.extend(resolve(l)?.into_iter().take(1));
    }
    advertise.dedup();
    let idle_timeout = (a.idle_timeout > 0).then(|| std::time::Duration::from_secs(a.idle_timeout));
    let settings = SessionConfig { tokens: a.tokens, advertise, idle_timeout, ..SessionConfig::default() };
    let settings = probe::serve_settings(settings, &a.allow_cc);
    let listeners = serve::bind(&listen, tls, settings).await?;
    for l in &listeners {
        eprintln!("tcpls serve: listening on {} (mode {:?})", l.local_addr(), a.mode);
    }
    serve::run(
        listeners,
        serve::ServeOptions {
            mode: a.mode,
            max_sessions: a.max_sessions,
            json: a.json,
            quiet: false,
            sessions_limit: a.sessions,
        },
    )
    .await
}

async fn perf_cmd(a: PerfArgs) -> Result<(), String> {
    if let Some(file) = &a.session_cache {
        return Err(format!(
            "--session-cache {}: keeping tickets in a file is not supported: rustls 0.23 has no public way to \
             serialize a client's TLS 1.3 tickets; --zero-rtt resumes within one run instead (a warm-up session \
             fetches the ticket)",
            file.display()
        ));
    }
    if a.rate_limit == Some(0) {
        return Err("--rate-limit must be above 0 (e.g. 200M)".into());
    }
    if a.streams == 0 {
        return Err("--streams must be at least 1".into());
    }
    let (_, server_name, mut tls) = client_setup(&a.addr, &a.trust, &[])?;
    tls.enable_early_data = a.zero_rtt;
    let addrs = resolve(&a.addr)?;
    let mut paths = Vec::new();
    for p in &a.path {
        paths.push(*resolve(p)?.first().ok_or_else(|| format!("{p} resolved to no address"))?);
    }
    if (a.aggregate || a.migrate_at.is_some()) && paths.is_empty() {
        return Err("--aggregate and --migrate-at need at least one --path".into());
    }
    let mut settings =
        SessionConfig { failover: !a.no_failover, zero_copy: !a.no_zero_copy, ..SessionConfig::default() };
    if let Some(r) = a.record_size {
        if !(256..=16384).contains(&r) {
            return Err(format!("--record-size {r} is out of range (256..=16384)"));
        }
        settings.record_size = r as usize;
    }
    let millis = a.time.map(|t| (t * 1000.0) as u64).unwrap_or(0);
    let bytes = if millis > 0 { None } else { Some(a.bytes.unwrap_or(1 << 30)) };
    let opts = perf::PerfOptions {
        addrs,
        paths,
        aggregate: a.aggregate,
        migrate_at: a.migrate_at.map(std::time::Duration::from_secs_f64),
        server_name,
        tls,
        settings,
        direction: if a.download { Direction::Download } else { Direction::Upload },
        bytes,
        millis,
        streams: a.streams,
        json: a.json,
        quiet: false,
        ext: probe::PerfExt {
            rate_limit_bps: a.rate_limit,
            peer_cc: a.peer_cc,
            user_timeout: a.user_timeout.map(std::time::Duration::from_millis),
        },
        zero_rtt: a.zero_rtt,
    };
    let report = perf::run(opts).await?;
    output(&report, a.json)?;
    if !report.verified {
        return Err("payload verification failed: bytes were lost, duplicated or corrupted".into());
    }
    Ok(())
}

fn output(report: &perf::PerfReport, json: bool) -> Result<(), String> {
    if json {
        println!("{}", serde_json::to_string_pretty(report).map_err(|e| e.to_string())?);
    } else {
        perf::print_human(report);
    }
    Ok(())
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
        let report = perf::run(perf::PerfOptions {
            addrs: vec![addr],
            paths: Vec::new(),
            aggregate: false,
            migrate_at: None,
            server_name: name,
            tls,
            settings: SessionConfig::default(),
            direction,
            bytes: Some(bytes),
            millis: 0,
            streams,
            json,
            quiet: json,
            ext: probe::PerfExt::default(),
            zero_rtt: false,
        })
        .await?;
        if !report.verified {
            return Err("demo transfer failed verification".into());
        }
        if !json {
            perf::print_human(&report);
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
